"""Build and measure oracle plans on the GPU machine (the DSL carried there; no optuna,
SQLAlchemy or Ray needed: the builder, the verifier and the torch-only runner only).

For each plan (``bench/oracle/plans/<name>.json``, made by ``choose.py``):

1. **build**: every candidate judged in full (``verify_genome``: dataflow, TS with its
   exhaustive search, memoised by the shipped TS search memo, and tsopt's checks), and the
   valid ones compiled for sm_90a (``tsopt.build.builder.build_candidate``) in ``--workers``
   spawned processes; one row per candidate in ``<state>/<name>/index.jsonl`` (verdict,
   build, CPU seconds), so a second call resumes.
2. **screen**: the built candidates in one bundle (``<state>/<name>/screen``), measured paired
   against cuBLAS by the runner (``python -m tsopt.workers.runner --bundle``) with a short cap
   (``--screen-cap-s``, default 0.15 s; warm-up ``--screen-warmup-s`` 0.05 s), as the 8192^3
   search table was.
3. **confirm**: the ``--confirm`` fastest correct candidates of the screen (default 16) in a
   second bundle, measured again with the runner's default settings (cap 3 s, a ±0.5 % target):
   the oracle's best is named from these.

Plans are taken in the order given; the GPU measures one plan while the CPUs build the next.
Everything a call made is written to ONE file, ``<out>/oracle-results.json`` (a call returns at
most 8 files): per plan its index rows, the screen's and the confirmation's ``results.json``.
``--deadline`` (seconds from the start) stops building in time to measure what was built; a
bundle not measured to its end is measured on by the next call (the runner resumes a
results.json). ``--runner-arg`` passes options to the runner (e.g. a launch mode).
``--measure-only`` measures a state built before (here or on another machine: a plan's folder
of ``index.jsonl`` and ``screen/`` is enough, its confirmation bundle is made from the screen
bundle's artifacts when the build cache is not on the machine).

On the GPU machine, the DSL on PYTHONPATH (bench/device_dsl/README.md)::

    python3 bench/oracle/build_and_measure.py --plan bench/oracle/plans/decode-wide.json \
        --state /tmp/oracle --workers 15 --deadline 520 --out $OUT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (ROOT, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

RESULTS_FORMAT = "tsopt-oracle-results"
PLAN_FORMAT = "tsopt-oracle-plan"
MEASURE_SECONDS_PER_CANDIDATE = 0.5
"""What a screened candidate costs the GPU at most with the short cap (baseline included):
building stops early enough to measure what it built."""


class PlanError(ValueError):
    pass


def read_plan(path: Path) -> dict[str, Any]:
    """A plan, checked: its format, its problem (a bad op, dtype or sizes is named), its
    candidates' genomes. Raises PlanError with one line."""
    from tsopt.core.genome import Genome, GenomeError
    from tsopt.core.problem import ProblemError, parse_problem_spec

    try:
        plan = json.loads(path.read_text())
    except OSError as exc:
        raise PlanError(f"plan {path}: cannot be read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"plan {path}: not JSON ({exc})") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise PlanError(f"plan {path}: not a {PLAN_FORMAT} file")
    try:
        plan["_problem"] = parse_problem_spec(str(plan.get("problem")))
    except ProblemError as exc:
        raise PlanError(f"plan {path}: {exc}") from None
    candidates = plan.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise PlanError(f"plan {path}: no candidates")
    for i, row in enumerate(candidates):
        try:
            genome = Genome.from_dict(row["genome"])
        except (GenomeError, KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"plan {path}: candidate {i}: {exc}") from None
        if genome.hash != row.get("genome_hash"):
            raise PlanError(f"plan {path}: candidate {i}: genome hash {genome.hash[:12]} is "
                            f"not the plan's {str(row.get('genome_hash'))[:12]}")
    plan["_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return plan


# -- building (in spawned workers) --------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_init(space_name: str) -> None:
    from choose import MemoSearches  # the chooser's: the shipped TS search memo in memory

    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import VerdictCache, judge_for

    space = get_space(space_name)
    cache = VerdictCache(searches=MemoSearches())
    space.judge = judge_for(space, cache)
    _WORKER.update(space=space, cache=cache)


def _build_one(item: tuple[dict[str, Any], str, int, str]) -> dict[str, Any]:
    """Judge in full, then build one candidate; a row of the index."""
    row_in, spec, order, cache_dir = item
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.verify.verifier import verify_genome

    space, cache = _WORKER["space"], _WORKER["cache"]
    problem = parse_problem_spec(spec)
    genome = Genome.from_dict(row_in["genome"])
    start, wall = time.process_time(), time.time()
    verdict = verify_genome(genome, problem, space=space, cache=cache)
    row: dict[str, Any] = {"genome_hash": genome.hash, "order": order,
                           "origin": row_in.get("origin"), "family": row_in.get("family"),
                           "valid": verdict.valid, "verdict": verdict.summary()}
    if verdict.valid:
        built = build_candidate(space, genome, problem, "sm_90a", cache_dir=cache_dir)
        row.update(build_ok=built.ok, build_error=(built.error or "")[:300] or None,
                   artifact_dir=built.artifact_dir if built.ok else None,
                   cache_hit=built.cache_hit)
    row["cpu_s"] = round(time.process_time() - start, 3)
    row["wall_s"] = round(time.time() - wall, 3)
    return row


def build_plan(plan: dict[str, Any], state: Path, workers: int, stop_at: float,
               say: Any = print) -> list[dict[str, Any]]:
    """Every candidate of ``plan`` judged and (if valid) built, resuming ``index.jsonl``;
    stops taking new ones near ``stop_at``. Returns the index rows."""
    index_path = state / "index.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if index_path.exists():
        for line in index_path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["genome_hash"]] = row
    cache_dir = str(state.parent / "artifacts")
    spec = plan["problem"]
    todo = [(row, spec, order, cache_dir) for order, row in enumerate(plan["candidates"])
            if row["genome_hash"] not in done]
    if not todo:
        return sorted(done.values(), key=lambda r: r["order"])
    start = time.time()
    say(f"{plan['name']}: building {len(todo)} of {len(plan['candidates'])} "
        f"in {workers} processes", flush=True)
    ctx = mp.get_context("spawn")
    with open(index_path, "a") as index, ctx.Pool(workers, initializer=_worker_init,
                                                   initargs=(plan["space"],)) as pool:
        for row in pool.imap_unordered(_build_one, todo, chunksize=1):
            index.write(json.dumps(row, sort_keys=True) + "\n")
            index.flush()
            done[row["genome_hash"]] = row
            built = sum(1 for r in done.values() if r.get("artifact_dir"))
            if len(done) % 25 == 0:
                say(f"  {time.time() - start:5.0f} s: {len(done)} judged, {built} built",
                    flush=True)
            if time.time() + MEASURE_SECONDS_PER_CANDIDATE * built > stop_at:
                say("  deadline: building stops here (the next call resumes)", flush=True)
                pool.terminate()
                break
    return sorted(done.values(), key=lambda r: r["order"])


# -- bundles and measuring -----------------------------------------------------------------

def bundle_of(directory: Path, plan: dict[str, Any], rows: Sequence[dict[str, Any]],
              part: str) -> Path | None:
    """A bundle of ``rows``' artifacts at ``directory`` (grown by the rows it lacks)."""
    from tsopt.core.bundle import BundleEntry, read_manifest, write_bundle
    from tsopt.core.genome import Genome

    genomes = {c["genome_hash"]: c["genome"] for c in plan["candidates"]}
    have: set[str] = set()
    if (directory / "manifest.json").exists():
        have = {c.genome_hash for c in read_manifest(directory).candidates}
    new = [r for r in rows if r.get("artifact_dir") and r["genome_hash"] not in have]
    if not new and not have:
        return None
    if new:
        write_bundle(directory, study=f"oracle-{plan['name']}-{part}", space=plan["space"],
                     problem=plan["_problem"], arch=plan.get("arch", "sm_90a"),
                     candidates=[BundleEntry(Genome.from_dict(genomes[r["genome_hash"]]),
                                             Path(r["artifact_dir"]), origin=r.get("origin"))
                                 for r in new], append=bool(have))
    return directory


def measure(bundle: Path, env: dict[str, str], runner_args: Sequence[str], timeout: float,
            say: Any = print) -> dict[str, Any]:
    """The torch-only runner on ``bundle``; what it did (rc, time, its last lines)."""
    start = time.time()
    argv = [sys.executable, "-m", "tsopt.workers.runner", "--bundle", str(bundle),
            *runner_args]
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(10.0, timeout))
        rc, tail = proc.returncode, (proc.stdout[-1500:] + proc.stderr[-1500:])
    except subprocess.TimeoutExpired as exc:
        rc = -9
        tail = "timed out (the next call resumes its results.json): " + str(exc.stdout or "")[-800:]
    seconds = round(time.time() - start, 1)
    say(f"  measured {bundle.name}: rc {rc} in {seconds} s", flush=True)
    return {"bundle": bundle.name, "rc": rc, "seconds": seconds, "tail": tail}


def results_of(bundle: Path | None) -> dict[str, Any] | None:
    if bundle is None or not (bundle / "results.json").exists():
        return None
    return json.loads((bundle / "results.json").read_text())


def fastest_correct(results: dict[str, Any] | None, count: int) -> list[str]:
    """The ``count`` best paired ratios (correct measurements only), best first."""
    if not results:
        return []
    ok = [m for m in results.get("measurements", [])
          if m.get("status") == "ok" and m.get("ratio")]
    ok.sort(key=lambda m: -float(m["ratio"]))
    return [m["genome_hash"] for m in ok[:count]]


def built_rows(plan: dict[str, Any], args: argparse.Namespace, stop_at: float,
               say: Any = print) -> list[dict[str, Any]]:
    """The plan's index rows: built now (resuming), or as an earlier call left them."""
    state = args.state / plan["name"]
    state.mkdir(parents=True, exist_ok=True)
    if args.measure_only:
        index = state / "index.jsonl"
        rows = ([json.loads(line) for line in index.read_text().splitlines() if line.strip()]
                if index.exists() else [])
        return [in_screen_bundle(row, state / "screen") for row in rows]
    return build_plan(plan, state, args.workers, stop_at, say)


def in_screen_bundle(row: dict[str, Any], screen: Path) -> dict[str, Any]:
    """``row`` with its artifact taken from the screen bundle where the build cache it names
    is not on this machine (a state built elsewhere and shipped without its cache)."""
    from tsopt.core.bundle import ARTIFACTS_DIR

    built = row.get("artifact_dir")
    copy = screen / ARTIFACTS_DIR / str(row.get("genome_hash"))
    if built and not Path(built).is_dir() and copy.is_dir():
        return {**row, "artifact_dir": str(copy)}
    return row


def measure_plan(plan: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace,
                 stop_at: float, say: Any = print) -> dict[str, Any]:
    """The screen and the confirmation of a built plan (unless ``--build-only``); the plan's
    entry of the results file."""
    state = args.state / plan["name"]
    calls: list[dict[str, Any]] = []
    confirm = None
    screen = bundle_of(state / "screen", plan, rows, "screen")
    if not args.build_only:
        screen_env = dict(os.environ, TSOPT_PAIRED_TIME_CAP_S=str(args.screen_cap_s),
                          TSOPT_PAIRED_WARMUP_MAX_S=str(args.screen_warmup_s))
        if screen is not None:
            calls.append(measure(screen, screen_env, args.runner_arg,
                                 stop_at - time.time() + 20, say))
        best = set(fastest_correct(results_of(screen), args.confirm))
        if best and time.time() < stop_at:
            confirm = bundle_of(state / "confirm", plan,
                                [r for r in rows if r["genome_hash"] in best], "confirm")
            if confirm is not None:
                calls.append(measure(confirm, dict(os.environ), args.runner_arg,
                                     stop_at - time.time() + 20, say))
    built = [r for r in rows if r.get("artifact_dir")]
    return {
        "name": plan["name"], "problem": plan["problem"], "space": plan["space"],
        "plan_sha256": plan["_sha256"], "heldout_version": plan.get("heldout_version"),
        "counts": {"planned": len(plan["candidates"]), "judged": len(rows),
                   "valid": sum(1 for r in rows if r.get("valid")), "built": len(built),
                   "build_failed": sum(1 for r in rows if r.get("valid")
                                       and not r.get("build_ok"))},
        "median_cpu_s_built": (sorted(r["cpu_s"] for r in built)[len(built) // 2]
                               if built else None),
        "index": [{k: v for k, v in r.items() if k != "artifact_dir"} for r in rows],
        "runner_calls": calls,
        "screen_settings": {"TSOPT_PAIRED_TIME_CAP_S": args.screen_cap_s,
                            "TSOPT_PAIRED_WARMUP_MAX_S": args.screen_warmup_s},
        "screen": results_of(screen),
        "confirm": results_of(confirm),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, action="append", required=True,
                        help="a plan file (repeatable; taken in order)")
    parser.add_argument("--state", type=Path, default=Path("/tmp/oracle"))
    parser.add_argument("--out", type=Path, default=None,
                        help="where oracle-results.json goes (default: --state)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        help="build processes (default: the cores less two, which the "
                             "measuring runner uses while the next plan builds)")
    parser.add_argument("--deadline", type=float, default=520.0, help="seconds from the start")
    parser.add_argument("--confirm", type=int, default=16)
    parser.add_argument("--screen-cap-s", type=float, default=0.15)
    parser.add_argument("--screen-warmup-s", type=float, default=0.05)
    parser.add_argument("--runner-arg", action="append", default=[],
                        help="an argument passed to the runner (repeatable)")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--measure-only", action="store_true")
    args = parser.parse_args(argv)
    if args.workers < 1:
        print(f"error: --workers {args.workers} must be at least 1", file=sys.stderr)
        return 2
    if args.build_only and args.measure_only:
        print("error: --build-only and --measure-only exclude each other", file=sys.stderr)
        return 2
    try:
        plans = [read_plan(p) for p in args.plan]
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.time()
    stop_at = start + args.deadline
    out = args.out or args.state
    out.mkdir(parents=True, exist_ok=True)
    done: list[dict[str, Any]] = []
    lock = threading.Lock()
    measuring: threading.Thread | None = None

    def measure_in_background(plan: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        entry = measure_plan(plan, rows, args, stop_at)
        with lock:
            done.append(entry)
            write_results(out, done, start)  # after each plan: a call cut short keeps it

    # The GPU measures plan i while the CPUs build plan i + 1.
    for plan in plans:
        if time.time() > stop_at - 30:
            print(f"{plan['name']}: left for the next call (deadline)", flush=True)
            continue
        rows = built_rows(plan, args, stop_at)
        if measuring is not None:
            measuring.join()
        measuring = threading.Thread(target=measure_in_background, args=(plan, rows))
        measuring.start()
    if measuring is not None:
        measuring.join()
    write_results(out, done, start)
    for item in done:
        print(json.dumps({"name": item["name"], **item["counts"],
                          "screened": len((item["screen"] or {}).get("measurements", [])),
                          "confirmed": len((item["confirm"] or {}).get("measurements", []))}),
              flush=True)
    return 0


def write_results(out: Path, done: list[dict[str, Any]], start: float) -> None:
    doc = {"format": RESULTS_FORMAT, "version": 1, "host": socket.gethostname(),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
           "wall_s": round(time.time() - start, 1), "plans": done}
    path = out / "oracle-results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
