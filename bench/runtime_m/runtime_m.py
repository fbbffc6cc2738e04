"""Property test of runtime-M GEMM kernels (issue #30, item 1): one kernel, every M of its range.

A range problem (``gemm:bf16:1-256x4096x4096``) is one kernel whose M is a launch argument.
This takes a sample of genomes the verifier accepts for range problems, builds each once, and
runs it on the H200 at every M of its range up to 256 and, above that, at one M of every
remainder modulo its tile along M (plus 257 and the range's top), each output checked against
torch. Three sub-commands::

    # build machine (DSL): draw, verify, build; one folder of artifacts and an index
    CUTE_DSL_ARCH=sm_90a nice -n 10 .venv/bin/python bench/runtime_m/runtime_m.py \
        build --count 120 --seed 1 --jobs 2 --out carry/runtime-m
    # GPU machine (torch + stdlib): every case at every planned M; one JSON under $OUT
    python3 bench/runtime_m/runtime_m.py run --index carry/runtime-m/index.json
    # here: the results as README.md's summary
    .venv/bin/python bench/runtime_m/runtime_m.py report bench/runtime_m/runtime-m.json

``build``: genomes come from the space's own sampler (``space.suggest`` with a trial choosing
uniformly among each knob's choices), taken in turn for each problem of ``--problem``;
tsopt's checks (microseconds) screen them first, then the verifier judges the survivors in
full for the range problem (TS, then tsopt's checks at each M ``checks.range_sizes`` names).
Accepted genomes are compiled (``tsopt.build.builder.build_candidate``, the build cache in
``<out>/artifacts``) and listed in ``<out>/index.json`` with the M values the run checks.

``run``: one child process checks the cases in order through the export's own loader
(``tsopt.workers.loader.load_kernel``: its per-call M check and ``tsopt_launch_m``). Per case:
random A (hi x K) and B (N x K), the fp32 reference of all hi rows once (rows are independent,
so M rows of D are the reference's first M rows); then at each M, D poisoned with NaN, the
kernel on ``a[:M]`` into ``d[:M]``, and the same rule as the runner's (relative error <= 1e-2
bf16 / 5e-3 fp16, every element within 2^-6 / 2^-9 x (|ref| + rms)), and no store into the
rows past M. Then the loader must refuse M = hi + 1 and M = 0 with one line. A hang or a dead
CUDA context costs a new child, not the run. One file: ``$OUT/runtime-m.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent
INDEX_FORMAT = "tsopt-runtime-m-index"
RESULTS_FORMAT = "tsopt-runtime-m-results"
RESULTS_NAME = "runtime-m.json"
ARCH = "sm_90a"
EVERY_M_UP_TO = 256
"""Every M of a range is checked up to here; above, one M per remainder modulo the tile."""
PROBLEMS = ("gemm:bf16:1-256x4096x4096", "gemm:fp16:1-256x2048x1024", "gemm:bf16:1-256x1024x6144",
            "gemm:bf16:1-1024x4096x2048", "gemm:fp16:1-1024x1536x4096",
            "gemm:bf16:1-1024x8192x1024")
"""Range problems of the sample (a few N and K; decode-sized and prefill-sized ranges)."""
CASE_DEADLINE_S = 120.0
START_DEADLINE_S = 120.0


# ------------------------------------------------------------------------------------------
# build (the build machine: DSL, verifier, builder)
# ------------------------------------------------------------------------------------------
class RandomTrial:
    """What ``space.suggest`` asks of an Optuna trial, answered uniformly at random."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self.rng.choice(list(choices))


def planned_ms(m_range: tuple[int, int], tile: int, rng: random.Random) -> list[int]:
    """Every M of the range up to :data:`EVERY_M_UP_TO`; above it one M of each remainder
    modulo ``tile`` (the rows of the problem's M one work tile covers), 257 and the top."""
    lo, hi = m_range
    ms = set(range(lo, min(hi, EVERY_M_UP_TO) + 1))
    above = list(range(max(lo, EVERY_M_UP_TO + 1), hi + 1))
    if above:
        by_rest: dict[int, list[int]] = {}
        for m in above:
            by_rest.setdefault(m % tile, []).append(m)
        ms.update(rng.choice(values) for values in by_rest.values())
        ms.update({above[0], hi})
    return sorted(ms)


_WORKER: dict[str, Any] = {}


def _space_and_cache() -> tuple[Any, Any]:
    if not _WORKER:
        from tsopt.core.registry import get_space
        from tsopt.verify.verifier import VerdictCache, judge_for

        space, cache = get_space("gemm"), VerdictCache()
        space.judge = judge_for(space, cache)
        _WORKER.update(space=space, cache=cache)
    return _WORKER["space"], _WORKER["cache"]


def judge_and_build(job: tuple[dict[str, Any], str, str]) -> dict[str, Any]:
    """The verifier on one genome for one range problem, then its build when accepted (in a
    pool worker)."""
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.verify.verifier import verify_genome

    genome_doc, spec, cache_dir = job
    space, cache = _space_and_cache()
    genome, problem = Genome.from_dict(genome_doc), parse_problem_spec(spec)
    started = time.perf_counter()
    verdict = verify_genome(genome, problem, space=space, cache=cache)
    row: dict[str, Any] = {"valid": verdict.valid, "rule": verdict.rule,
                           "message": verdict.message, "verify_s": round(time.perf_counter()
                                                                         - started, 2)}
    if verdict.valid:
        result = build_candidate(space, genome, problem, ARCH, cache_dir=cache_dir)
        row["build"] = {k: getattr(result, k) for k in ("status", "error", "cache_key",
                                                        "compile_seconds", "registers",
                                                        "spill_bytes")}
    return row


def draw(space: Any, rng: random.Random, spec: str, seen: set[str]) -> Any:
    """A genome the sampler proposes for ``spec`` that tsopt's checks do not reject (they are
    the verifier's last gate and cost microseconds: TS runs only for the rest)."""
    from tsopt.core.problem import parse_problem_spec

    problem = parse_problem_spec(spec)
    while True:
        genome = space.suggest(RandomTrial(rng), problem)
        if genome.hash not in seen and not space.tsopt_checks(genome, problem):
            seen.add(genome.hash)
            return genome


def build(args: argparse.Namespace) -> None:
    """Draw, judge and build until ``--count`` genomes are accepted and built, the problems
    taken in turn; ``--jobs`` forked workers keep twice as many genomes in flight, taken back
    in the order drawn (the sample is the same for a seed whatever the pool). The index is
    rewritten after every case (a partial build is usable)."""
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

    from tsopt.core.dsl_env import ensure_arch

    ensure_arch(ARCH)
    out = Path(args.out)
    (out / "artifacts").mkdir(parents=True, exist_ok=True)
    space, _ = _space_and_cache()  # imported once, before the workers fork
    problems = args.problem or list(PROBLEMS)
    rng = random.Random(args.seed)
    index: dict[str, Any] = {"format": INDEX_FORMAT, "seed": args.seed, "arch": ARCH,
                             "problems": problems, "source_digest": space.source_digest(),
                             "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "cases": [], "rejected": {}, "build_failed": [], "drawn": 0}
    seen: set[str] = set()
    started = time.time()
    import multiprocessing as mp

    pool = ProcessPoolExecutor(max(1, args.jobs), mp_context=mp.get_context("fork"))
    flight: deque[tuple[Any, str, Future[dict[str, Any]]]] = deque()
    while len(index["cases"]) < args.count:
        while len(flight) < 2 * max(1, args.jobs):
            spec = problems[index["drawn"] % len(problems)]
            index["drawn"] += 1
            genome = draw(space, rng, spec, seen)
            flight.append((genome, spec, pool.submit(
                judge_and_build, (genome.to_dict(), spec, str(out / "artifacts")))))
        genome, spec, future = flight.popleft()
        take(index, space, genome, spec, future.result(), args)
        index["build_s"] = round(time.time() - started, 1)
        out.joinpath("index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    for _, _, future in flight:
        future.cancel()
    pool.shutdown(wait=True, cancel_futures=True)
    print(f"{len(index['cases'])} cases in {index['build_s']} s from {index['drawn']} genomes "
          f"judged; rejected by rule {index['rejected']}; {len(index['build_failed'])} build "
          "failures", flush=True)


def take(index: dict[str, Any], space: Any, genome: Any, spec: str, row: dict[str, Any],
         args: argparse.Namespace) -> None:
    """One judged genome into the index: a case (accepted and built), a rejection by rule or
    a build failure."""
    from tsopt.core.problem import parse_problem_spec
    from tsopt.search_spaces.gemm.checks import m_tile, range_sizes

    if not row["valid"]:
        index["rejected"][row["rule"]] = index["rejected"].get(row["rule"], 0) + 1
        return
    if row["build"]["status"] != "ok":
        index["build_failed"].append({"genome_hash": genome.hash, "spec": spec,
                                      "error": row["build"]["error"]})
        return
    problem = parse_problem_spec(spec)
    cfg = space.config(genome, problem)
    tile = m_tile(cfg)
    case = {
        "id": len(index["cases"]), "genome_hash": genome.hash, "genome": genome.to_dict(),
        "spec": spec, "problem": problem.to_dict(), "dtype": problem.dtype,
        "artifact": f"artifacts/{row['build']['cache_key']}", "m_tile": tile,
        "genes": {**genome.genes}, "verified_at": list(range_sizes(cfg)),
        "ms": planned_ms(problem.m_range, tile, random.Random(f"{args.seed}:{genome.hash}")),
        "verify_s": row["verify_s"], "build": row["build"]}
    index["cases"].append(case)
    print(f"[{len(index['cases'])}/{args.count}] {genome.short_hash} {spec} tile {tile} "
          f"{len(case['ms'])} Ms; verify {row['verify_s']} s, compile "
          f"{row['build']['compile_seconds']:.1f} s", flush=True)


# ------------------------------------------------------------------------------------------
# run (the GPU machine: torch + stdlib)
# ------------------------------------------------------------------------------------------
def check_case(case: dict[str, Any], root: Path) -> dict[str, Any]:
    """Every planned M of one case; raises for a CUDA fault (the caller sorts it out)."""
    import torch

    from tsopt.workers.loader import KernelInputError, load_kernel
    from tsopt.workers.reference import GEMM_ELEM_TOL, GEMM_REL_TOL, TORCH_DTYPES

    kernel = load_kernel(root / case["artifact"])
    lo, hi = kernel.m_range
    n, k = case["problem"]["n"], case["problem"]["k"]
    dtype, name = TORCH_DTYPES[case["dtype"]], case["dtype"]
    gen = torch.Generator(device="cuda").manual_seed(1000 + case["id"])
    std = k ** -0.25
    a = torch.empty(hi + 1, k, device="cuda").normal_(0.0, std, generator=gen).to(dtype)
    b = torch.empty(n, k, device="cuda").normal_(0.0, std, generator=gen).to(dtype)
    ref = a[:hi].float() @ b.float().t()
    d = torch.empty(hi, n, dtype=dtype, device="cuda")
    tol, elem_tol = GEMM_REL_TOL[name], GEMM_ELEM_TOL[name]
    stats = []
    for m in case["ms"]:
        d.fill_(float("nan"))
        kernel(a[:m], b, out=d[:m])
        out, r = d[:m].float(), ref[:m]
        diff = out - r
        r_norm = torch.linalg.vector_norm(r, dtype=torch.float64)
        rms = r_norm / math.sqrt(r.numel())
        stats.append(torch.stack([
            torch.linalg.vector_norm(diff, dtype=torch.float64) / r_norm,
            (~torch.isfinite(out)).sum().double(),
            (diff.abs() > elem_tol * (r.abs() + rms)).sum().double(),
            (~torch.isnan(d[m:])).sum().double()]))
    torch.cuda.synchronize()
    table = torch.stack(stats).cpu().tolist()
    wrong = []
    worst = 0.0
    for m, (rel, nonfinite, over, stray) in zip(case["ms"], table, strict=True):
        ok = rel <= tol and nonfinite == 0 and over == 0 and stray == 0
        worst = max(worst, rel if math.isfinite(rel) else math.inf)
        if not ok:
            wrong.append({"m": m, "rel_err": rel, "nonfinite": int(nonfinite),
                          "elements_off": int(over), "stored_past_m": int(stray)})
    refusals = {}
    for m, rows in (("hi+1", a), ("0", a[:0])):
        try:
            kernel(rows, b)
            refusals[m] = "accepted (not refused)"
        except KernelInputError as exc:
            refusals[m] = str(exc)
    return {"result": "wrong" if wrong else "correct", "ms_checked": len(case["ms"]),
            "m_range": [lo, hi], "worst_rel_err": worst, "wrong": wrong[:20],
            "wrong_ms": len(wrong), "refusals": refusals}


def child(args: argparse.Namespace) -> None:
    """Check the cases ``--ids`` in order, one JSON line per event on stdout."""
    import torch

    from tsopt.workers.faults import STICKY_STATUSES, KernelFault, fault_from_torch
    from tsopt.workers.loader import KernelLoadError

    index_path = Path(args.index)
    index = json.loads(index_path.read_text())
    cases = {c["id"]: c for c in index["cases"]}
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is fp32

    def say(event: str, **fields: Any) -> None:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()

    say("ready", device=torch.cuda.get_device_name(0), torch=torch.__version__,
        cuda=torch.version.cuda)
    for case_id in (int(x) for x in args.ids.split(",") if x):
        say("start", id=case_id)
        started = time.perf_counter()
        try:
            outcome = check_case(cases[case_id], index_path.parent)
        except KernelFault as fault:
            outcome = {"result": fault.status, "message": fault.message}
        except (KernelLoadError, ValueError, OSError) as exc:
            outcome = {"result": "launch_error", "message": f"{type(exc).__name__}: {exc}"}
        except RuntimeError as exc:
            seen = fault_from_torch(exc, None, "the checks")
            outcome = {"result": seen.status, "message": seen.message}
        outcome["seconds"] = round(time.perf_counter() - started, 3)
        say("done", id=case_id, outcome=outcome)
        if outcome["result"] in STICKY_STATUSES or outcome["result"] == "launch_error" and (
                "CUDA" in outcome.get("message", "")):
            return  # the context may be gone: the parent starts another child
        torch.cuda.empty_cache()


def run(args: argparse.Namespace) -> None:
    """Every case under a per-case deadline; one results file."""
    import queue
    import signal
    import tempfile
    import threading

    index_path = Path(args.index).resolve()
    index = json.loads(index_path.read_text())
    todo = [c["id"] for c in index["cases"]][: args.limit or None]
    outcomes: dict[int, dict[str, Any]] = {}
    env_info: dict[str, Any] = {}
    started, restarts = time.time(), 0
    while todo:
        err_file = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_child", "--index", str(index_path),
             "--ids", ",".join(map(str, todo))],
            stdout=subprocess.PIPE, stderr=err_file, text=True, start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump(stream: Any = proc.stdout, sink: queue.Queue[str | None] = lines) -> None:
            for line in stream:
                sink.put(line)
            sink.put(None)

        threading.Thread(target=pump, daemon=True).start()
        current, ready, limit = None, False, START_DEADLINE_S
        while True:
            try:
                line = lines.get(timeout=limit)
            except queue.Empty:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                victim = current if current is not None else todo[0]
                outcomes[victim] = {"result": "hang" if current is not None else "launch_error",
                                    "message": f"no answer within {limit:.0f} s: killed"}
                todo = [i for i in todo if i != victim]
                break
            if line is None:
                proc.wait()
                err_file.seek(0)
                err = err_file.read()[-1500:].strip()
                if not ready:
                    raise SystemExit(f"runtime_m run: the checking process did not start "
                                     f"(exit {proc.returncode}): {err}")
                if current is not None:
                    outcomes[current] = {"result": "crash", "message": f"the checking process "
                                         f"died (exit {proc.returncode}): {err[-800:]}"}
                    todo = [i for i in todo if i != current]
                break
            event = json.loads(line)
            if event["event"] == "ready":
                ready, env_info = True, {k: v for k, v in event.items() if k != "event"}
            elif event["event"] == "start":
                current = event["id"]
            elif event["event"] == "done":
                outcome = outcomes[event["id"]] = event["outcome"]
                todo = [i for i in todo if i != event["id"]]
                print(f"{event['id']:04d} {outcome['result']:<8} {outcome.get('ms_checked', '')} "
                      f"Ms {outcome.get('seconds')} s {(outcome.get('message') or '')[:140]}",
                      flush=True)
                current = None
            limit = CASE_DEADLINE_S
        err_file.close()
        restarts += bool(todo)
    rows = [{**{k: c[k] for k in ("id", "genome_hash", "spec", "dtype", "m_tile", "genes",
                                  "verified_at")},
             **outcomes.get(c["id"], {"result": "not_run"})} for c in index["cases"]]
    doc = {"format": RESULTS_FORMAT, "index_seed": index["seed"],
           "index_created_at": index["created_at"], "source_digest": index["source_digest"],
           "environment": env_info, "run_s": round(time.time() - started, 1),
           "child_restarts": restarts, "rejected_by_rule": index["rejected"],
           "build_failed": index["build_failed"], "rows": rows}
    out = Path(args.out or Path(os.environ.get("OUT", ".")) / RESULTS_NAME)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {summary_line(doc)}")


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------
def summary_line(doc: dict[str, Any]) -> str:
    rows = doc["rows"]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    checked = sum(row.get("ms_checked", 0) for row in rows)
    refused = sum(1 for row in rows if row.get("refusals") and all(
        "outside this kernel's M range" in text for text in row["refusals"].values()))
    return (f"{len(rows)} kernels, {checked} (kernel, M) launches checked; results "
            f"{dict(sorted(counts.items()))}; M outside the range refused by the loader for "
            f"{refused} of {len(rows)}; {doc['run_s']} s, {doc['child_restarts']} child restarts")


def report(args: argparse.Namespace) -> None:
    doc = json.loads(Path(args.results).read_text())
    print(summary_line(doc))
    by_problem: dict[str, list[int]] = {}
    for row in doc["rows"]:
        entry = by_problem.setdefault(row["spec"], [0, 0, 0])
        entry[0] += 1
        entry[1] += row["result"] == "correct"
        entry[2] += row.get("ms_checked", 0)
    print("| problem | kernels | correct at every M | (kernel, M) checked |")
    print("|---|---:|---:|---:|")
    for spec, (kernels, correct, checked) in sorted(by_problem.items()):
        print(f"| `{spec}` | {kernels} | {correct} | {checked} |")
    for row in doc["rows"]:
        if row["result"] != "correct":
            print(f"- {row['id']:04d} {row['genome_hash'][:12]} {row['spec']}: {row['result']} "
                  f"{json.dumps(row.get('wrong') or row.get('message'))[:300]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="draw, verify and build the sample (DSL)")
    p.add_argument("--count", type=int, default=120)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "carry" / "runtime-m"))
    p.add_argument("--problem", action="append", help="a range problem (repeatable); default: "
                   + ", ".join(PROBLEMS))
    p = sub.add_parser("run", help="check every case on the GPU (torch)")
    p.add_argument("--index", required=True)
    p.add_argument("--out")
    p.add_argument("--limit", type=int, default=0)
    p = sub.add_parser("_child")
    p.add_argument("--index", required=True)
    p.add_argument("--ids", required=True)
    p = sub.add_parser("report", help="the results as a summary")
    p.add_argument("results")
    args = parser.parse_args(argv)
    {"build": build, "run": run, "_child": child, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
