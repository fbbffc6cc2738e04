"""Driver scale on CPUs: verdicts/s, builds/s with 1 and 2 Ray workers, per-candidate cost.

    .venv/bin/python bench/driver_scale/driver_scale.py   # writes driver_scale.{json,md} beside it

What it measures (all on this machine's CPUs; nothing here touches a GPU):

1. **Verdicts/s on one core** (copy space, fp16 4096x4096; and the GEMM space, bf16
   8192^3): a seeded random sample of the space's knob product, each genome judged
   by the real verifier (dataflow, TS skeleton + BFS checker, tsopt's checks) with a
   cold verdict cache, then the same set again with the cache a study builds up.
2. **Builds/s with 1 and 2 Ray workers**: the same valid candidates built by a
   local Ray cluster of 1, then 2 CPUs, each with a cold artifact cache and a cold
   DSL file cache; each worker first builds one warm-up candidate (not timed: it
   pays the process's imports and the DSL's one-time set-up). Parallel efficiency
   = builds/s(2) / (2 x builds/s(1)).
3. **Cost of one candidate**, in parts: process start + imports (a fresh Python
   importing the space and the DSL), host verification, trace (``cute.compile``
   with ``CUTE_DSL_DRYRUN=1``: IR generation only, in a separate process),
   code generation (the rest of the compile), export (``export_to_c``), link.
   The GPU-side parts (load, check, time) come from the runner's logs; pass
   ``--gpu-seconds SPACE=S`` (per measured candidate) to get the number of CPU
   workers that keep one GPU busy.

The load average at the start and end is recorded: other processes share these cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

ARCH = "sm_90a"
PROBLEMS = {"copy": "copy:fp16:4096x4096", "gemm": "gemm:bf16:8192x8192x8192"}


def q(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "mean": statistics.fmean(values) if values else float("nan"),
            "median": q(values, 0.5), "p90": q(values, 0.9),
            "min": min(values) if values else float("nan"),
            "max": max(values) if values else float("nan")}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- sampling and verdicts -----------------------------------------------------------------


PROPOSE_CPU: dict[str, float] = {}
"""CPU seconds spent proposing (repairs and their factor verdicts included), per space."""


def sample(space: Any, problem: Any, n: int, seed: int, raw: bool = False,
           full_judge: bool = False) -> list[Any]:
    """``n`` distinct genomes from a seeded random sampler over the space's knobs, proposed as
    the driver proposes them (``tsopt.search.proposals.Proposer``: repaired into the space's
    declared legal set, judged by ``predicting_judge`` as the driver does, or by the full
    judge with ``full_judge``, as it did before 2026-12-01), or as the sampler drew them with
    ``raw``. The proposing CPU goes to :data:`PROPOSE_CPU` (its own verdict cache: the first
    study's cold start)."""
    import optuna

    from tsopt.search.proposals import Proposer
    from tsopt.search.samplers import KnobView
    from tsopt.verify.verifier import VerdictCache, judge_for, predicting_judge

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    view = KnobView.of(space, problem, "random")
    judge = (judge_for if full_judge else predicting_judge)(space, VerdictCache())
    proposer = Proposer(space, problem, view, judge)
    if raw:
        proposer.factors = ()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    genomes: dict[str, Any] = {}
    cpu = time.process_time()
    for _ in range(n * 3):
        trial = study.ask()
        genome = proposer.propose(trial).genome
        study.tell(trial, 0.0)
        genomes.setdefault(genome.hash, genome)
        if len(genomes) == n:
            break
    PROPOSE_CPU[space.name] = PROPOSE_CPU.get(space.name, 0.0) + time.process_time() - cpu
    return list(genomes.values())


def verdicts(space: Any, problem: Any, genomes: list[Any]) -> dict[str, Any]:
    """Judge every genome with the verdict cache a study starts with (empty, shared over the
    run), then again with the cache full. Wall and CPU seconds per verdict."""
    from tsopt.verify.verifier import VerdictCache, verify_genome

    space.knobs(problem)  # the space's one-time screening, not a verdict's cost
    wall: list[float] = []
    cpu: list[float] = []
    stages: dict[str, int] = {}
    valid = []
    valid_s = []
    shared = VerdictCache()
    start = time.perf_counter()
    for genome in genomes:
        t, c = time.perf_counter(), time.process_time()
        verdict = verify_genome(genome, problem, space=space, cache=shared)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        key = "valid" if verdict.valid else f"{verdict.stage}:{verdict.rule}"
        stages[key] = stages.get(key, 0) + 1
        if verdict.valid:
            valid.append(genome)
            valid_s.append(cpu[-1])
    cold_wall = time.perf_counter() - start
    start = time.perf_counter()
    for genome in genomes:
        verify_genome(genome, problem, space=space, cache=shared)
    cached_wall = time.perf_counter() - start
    return {
        "genomes": len(genomes), "valid": len(valid), "outcomes": stages,
        "cold_verdicts_per_s": len(genomes) / cold_wall,
        "cold_verdicts_per_cpu_s": len(genomes) / sum(cpu),
        "cached_verdicts_per_s": len(genomes) / cached_wall,
        "cold_seconds": summary(wall), "cold_cpu_seconds": summary(cpu),
        "valid_cpu_seconds": summary(valid_s),
        "_valid": valid,
    }


# -- builds with Ray -----------------------------------------------------------------------


def ray_builds(space_name: str, problem: Any, genomes: list[Any], warmups: list[Any],
               workers: int, scratch: Path) -> dict[str, Any]:
    from tsopt.search.pipeline import EvaluateRequest, Evaluation, space_target
    from tsopt.search.pools.ray_pool import RayBuildPool, start_ray, stop_ray

    cache = scratch / f"artifacts-{space_name}-{workers}"
    dsl_cache = scratch / f"dsl-cache-{space_name}-{workers}"
    target = space_target(space_name)
    started = time.perf_counter()
    cluster = start_ray(None, workers, ARCH, temp_dir=f"/tmp/tsopt-bench-ray-{os.getuid()}",
                        env={"CUTE_DSL_CACHE_DIR": str(dsl_cache)})
    ray_start = time.perf_counter() - started
    try:
        pool = RayBuildPool(workers)

        def run(batch: list[Any]) -> tuple[float, list[Evaluation | str]]:
            queue = list(batch)
            done: list[Evaluation | str] = []
            t = time.perf_counter()
            while queue or pool.busy():
                while queue and pool.free() > 0:
                    genome = queue.pop(0)
                    pool.submit(genome.hash, EvaluateRequest(
                        target, genome.to_json(), problem.to_dict(), ARCH, str(cache)))
                # The pool hands back BuildDone records (tag, evaluation or failure).
                done += [d.evaluation if d.evaluation is not None else (d.failure or "no "
                         "evaluation") for d in pool.poll(0.05)]
            return time.perf_counter() - t, done

        warm_s, warm = run(warmups[:workers])
        wall, results = run(genomes)
    finally:
        stop_ray(cluster)
    builds = [r.build for r in results if isinstance(r, Evaluation) and r.build is not None]
    ok = [b for b in builds if b.ok and not b.cache_hit]
    failures = [r if isinstance(r, str) else (r.build.error if r.build else "no build")
                for r in results if isinstance(r, str) or r.build is None or not r.build.ok]
    return {
        "workers": workers, "ray_start_s": ray_start, "warmup_s": warm_s,
        "warmup_compile_s": [w.build.compile_seconds for w in warm
                             if isinstance(w, Evaluation) and w.build is not None],
        "candidates": len(genomes), "built": len(ok), "failures": failures[:3],
        "wall_s": wall, "builds_per_s": len(ok) / wall if wall else float("nan"),
        "task_cpu_s": summary([r.seconds.get("cpu", 0.0) for r in results
                               if isinstance(r, Evaluation)]),
        "task_wall_s": summary([r.seconds.get("total", 0.0) for r in results
                                if isinstance(r, Evaluation)]),
        "pids": sorted({r.pid for r in results if isinstance(r, Evaluation)}),
        "verify_s": summary([r.seconds.get("verify", 0.0) for r in results
                             if isinstance(r, Evaluation)]),
        "compile_s": summary([b.compile_seconds for b in ok]),
        "export_s": summary([b.export_seconds for b in ok]),
        "link_s": summary([b.link_seconds for b in ok]),
    }


# -- process start, trace ------------------------------------------------------------------


def process_start(space_name: str, repeats: int = 3) -> dict[str, Any]:
    module = {"copy": "tsopt.search_spaces.copy.space", "gemm": "tsopt.search_spaces.gemm.space"}[space_name]
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUTE_DSL_ARCH=ARCH)
    code = ("from tsopt.core.dsl_env import ensure_arch; ensure_arch('sm_90a'); "
            f"import {module}, cutlass.cute, tsopt.build.builder, tsopt.search.pipeline")
    bare, full = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
        bare.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        full.append(time.perf_counter() - t)
    return {"python_s": statistics.median(bare), "python_and_imports_s": statistics.median(full)}


def trace_only(space_name: str, problem_spec: str, genomes_file: str) -> None:
    """(In a child with CUTE_DSL_DRYRUN=1.) Time IR generation of each genome; print JSON."""
    from tsopt.build.builder import compile_spec
    from tsopt.core.genome import Genome
    from tsopt.core.registry import get_space, problem_for

    space = get_space(space_name)
    problem = problem_for(problem_spec, space_name)
    docs = json.loads(Path(genomes_file).read_text())
    times = []
    with tempfile.TemporaryDirectory() as dump:
        for i, doc in enumerate(docs):
            genome = Genome.from_dict(doc)
            spec = space.kernel_spec(genome, problem, ARCH)
            t = time.perf_counter()
            compile_spec(spec, ARCH, Path(dump))
            if i:  # the first pays the DSL's one-time set-up
                times.append(time.perf_counter() - t)
    print(json.dumps(times))


def trace_times(space_name: str, genomes: list[Any], scratch: Path) -> list[float]:
    path = scratch / f"trace-{space_name}.json"
    path.write_text(json.dumps([g.to_dict() for g in genomes]))
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUTE_DSL_ARCH=ARCH, CUTE_DSL_DRYRUN="1",
               CUTE_DSL_CACHE_DIR=str(scratch / f"dsl-dry-{space_name}"))
    done = subprocess.run([sys.executable, __file__, "--trace-only", space_name,
                           PROBLEMS[space_name], str(path)], capture_output=True, text=True,
                          env=env, check=True)
    times: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return times


# -- the report ----------------------------------------------------------------------------


def breakdown(space_name: str, verdict: dict[str, Any], builds: dict[str, Any],
              start: dict[str, Any], trace: list[float], gpu_s: float | None) -> dict[str, Any]:
    compile_s = builds["compile_s"]["median"]
    trace_s = statistics.median(trace) if trace else float("nan")
    parts = {
        "process_start_and_imports_s": start["python_and_imports_s"],
        "host_verification_s": verdict["valid_cpu_seconds"]["median"],
        "trace_s": trace_s,
        "codegen_s": compile_s - trace_s,
        "export_s": builds["export_s"]["median"],
        "link_s": builds["link_s"]["median"],
    }
    per_valid = verdict["genomes"] / max(1, verdict["valid"])
    propose_s = verdict.get("propose_cpu_s", 0.0) / max(1, verdict["genomes"])
    # CPU seconds per built candidate in a long run: proposing and verifying the genomes it
    # takes to find a valid one (random sampling of the space's knobs, repaired into the legal
    # set) + its own build; start-up is paid once per worker process, not per candidate.
    cpu_per_built = ((verdict["cold_cpu_seconds"]["mean"] + propose_s) * per_valid + compile_s
                     + parts["export_s"] + parts["link_s"])
    out: dict[str, Any] = {"parts_median_s": parts, "genomes_verified_per_valid": per_valid,
                           "propose_cpu_s_per_genome": propose_s,
                           "cpu_s_per_built_candidate": cpu_per_built}
    if gpu_s:
        out["gpu_s_per_candidate"] = gpu_s
        out["cpu_workers_per_gpu"] = math.ceil(cpu_per_built / gpu_s)
    return out


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# Driver scale (CPU side)", "",
             f"Command: `{doc['command']}`  ", f"Machine: {doc['machine']}; load average "
             f"{doc['load_start']} at the start, {doc['load_end']} at the end (shared cores).", ""]
    lines += ["## Verdicts per second (one core)", "",
              "Fresh cache: the verdict cache a study starts with (empty, shared over the "
              "run); CPU: verdicts per CPU-second of the process (the cores are shared).", "",
              "| space | problem | genomes | valid | verdicts/s, fresh cache (wall) | per "
              "CPU-s | cached verdicts/s | median verdict (CPU) | p90 |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, s in doc["spaces"].items():
        for label, v in [("whole space", s["verdicts_random"])]:
            lines.append(f"| {name} | {PROBLEMS[name]}, {label} | {v['genomes']} | "
                         f"{v['valid']} | {v['cold_verdicts_per_s']:.2f} | "
                         f"{v['cold_verdicts_per_cpu_s']:.2f} | "
                         f"{v['cached_verdicts_per_s']:.0f} | "
                         f"{1e3 * v['cold_cpu_seconds']['median']:.1f} ms | "
                         f"{1e3 * v['cold_cpu_seconds']['p90']:.1f} ms |")
    lines += ["", "## Builds per second with Ray (cold caches, warm workers)", "",
              "A build here is one Ray task: verify (cold verdict cache) + compile + export + "
              "link of a valid candidate.", "",
              "| space | workers | candidates | wall | builds/s | parallel efficiency | "
              "task wall (median) | task CPU (median) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, s in doc["spaces"].items():
        for b in s["builds"]:
            eff = s.get("parallel_efficiency") if b["workers"] == 2 else None
            lines.append(f"| {name} | {b['workers']} | {b['built']} | {b['wall_s']:.1f} s | "
                         f"{b['builds_per_s']:.2f} | {f'{eff:.0%}' if eff is not None else '-'} "
                         f"| {b['task_wall_s']['median']:.2f} s | "
                         f"{b['task_cpu_s']['median']:.2f} s |")
    lines += ["", "## Cost of one candidate (medians, seconds)", "",
              "| space | process start + imports | host verification (valid) | trace | codegen | "
              "export | link | CPU s per built candidate* |", "|---|---|---|---|---|---|---|---|"]
    for name, s in doc["spaces"].items():
        p = s["breakdown"]["parts_median_s"]
        lines.append(f"| {name} | {p['process_start_and_imports_s']:.2f} | "
                     f"{p['host_verification_s']:.3f} | {p['trace_s']:.2f} | "
                     f"{p['codegen_s']:.2f} | {p['export_s']:.2f} | {p['link_s']:.2f} | "
                     f"{s['breakdown']['cpu_s_per_built_candidate']:.2f} |")
    lines += ["", "\\* (mean cold verdict + proposing CPU per genome) x genomes verified per "
              "valid one (random sampling, repaired into the legal set unless --raw) + compile + "
              "export + link; process start is paid once per worker.", ""]
    gpu = [(n, s["breakdown"]) for n, s in doc["spaces"].items()
           if "cpu_workers_per_gpu" in s["breakdown"]]
    if gpu:
        lines += ["## CPU workers per GPU", ""]
        for name, b in gpu:
            lines.append(f"- {name}: {b['cpu_s_per_built_candidate']:.2f} CPU s per built "
                         f"candidate / {b['gpu_s_per_candidate']:.3f} GPU s per measured "
                         f"candidate = **{b['cpu_workers_per_gpu']} CPU workers** keep one GPU "
                         f"busy ({doc.get('gpu_source', '')}).")
    else:
        lines += ["GPU side (load, check, time per candidate): from the runner's logs; rerun "
                  "with `--gpu-seconds S` to state CPU workers per GPU."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default="copy,gemm")
    parser.add_argument("--verdicts", type=int, default=300,
                        help="genomes judged (GEMM: a random sample of the whole space)")
    parser.add_argument("--copy-verdicts", type=int, default=60,
                        help="copy genomes judged (seconds each), and GEMM genomes with the "
                        "seed's placement")
    parser.add_argument("--builds", type=int, default=6, help="candidates built per config")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--raw", action="store_true",
                        help="genomes as the sampler drew them, not repaired into the legal set")
    parser.add_argument("--full-judge", action="store_true",
                        help="proposals judged in full (with TS's exhaustive search), as the "
                             "driver did before it used predicting_judge")
    parser.add_argument("--gpu-seconds", action="append", default=[], metavar="SPACE=S",
                        help="GPU seconds per measured candidate of a space, from the runner's "
                        "logs, e.g. gemm=0.21 (repeatable)")
    parser.add_argument("--gpu-source", default="", help="where --gpu-seconds comes from")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--trace-only", nargs=3, metavar=("SPACE", "PROBLEM", "GENOMES"))
    args = parser.parse_args()
    if args.trace_only:
        trace_only(*args.trace_only)
        return

    from tsopt.core.registry import get_space, problem_for

    gpu_seconds = {k: float(v) for k, _, v in (g.partition("=") for g in args.gpu_seconds)}
    command = "python bench/driver_scale/driver_scale.py " + " ".join(
        f"'{a}'" if " " in a else a for a in sys.argv[1:])
    doc: dict[str, Any] = {"command": command.strip(), "machine": f"{os.cpu_count()} CPUs",
                           "load_start": load(), "spaces": {}, "gpu_source": args.gpu_source}
    scratch = Path(tempfile.mkdtemp(prefix="tsopt-scale-"))
    try:
        for name in args.spaces.split(","):
            space = get_space(name)
            problem = problem_for(PROBLEMS[name], name)
            count = args.verdicts if name != "copy" else args.copy_verdicts
            print(f"[{name}] verdicts on {count} sampled genomes ...", flush=True)
            drawn = sample(space, problem, count, args.seed, args.raw, args.full_judge)
            full = verdicts(space, problem, drawn)
            full["propose_cpu_s"] = PROPOSE_CPU.get(name, 0.0)
            valid = full.pop("_valid")
            verdict = full
            # Only when too few are valid for the builds; its proposing is not counted.
            extra = [] if len(valid) >= args.builds + 2 else [
                g for g in sample(space, problem, 4 * count, args.seed + 1, args.raw, args.full_judge)
                if g.hash not in {v.hash for v in valid}]
            if len(valid) < args.builds + 2:  # top up with more valid genomes for the builds
                from tsopt.verify.verifier import VerdictCache, verify_genome

                cache = VerdictCache()
                for g in extra:
                    if verify_genome(g, problem, space=space, cache=cache).valid:
                        valid.append(g)
                    if len(valid) >= args.builds + 2:
                        break
            build_set, warmups = valid[:args.builds], valid[args.builds:args.builds + 2]
            # The verdicts are kept before the builds (which need Ray): a failed build phase
            # does not lose them.
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "driver_scale.partial.json").write_text(
                json.dumps({"command": command, "space": name, "verdicts": verdict},
                           indent=2, default=str) + "\n")
            print(f"[{name}] {verdict['cold_verdicts_per_s']:.1f} verdicts/s; building "
                  f"{len(build_set)} with 1 and 2 Ray workers ...", flush=True)
            builds = [ray_builds(name, problem, build_set, warmups, w, scratch) for w in (1, 2)]
            eff = builds[1]["builds_per_s"] / (2 * builds[0]["builds_per_s"])
            print(f"[{name}] builds/s {builds[0]['builds_per_s']:.2f} (1) "
                  f"{builds[1]['builds_per_s']:.2f} (2), efficiency {eff:.0%}; trace and "
                  "process start ...", flush=True)
            trace = trace_times(name, warmups[:1] + build_set, scratch)
            start = process_start(name)
            doc["spaces"][name] = {
                "problem": PROBLEMS[name], "verdicts_random": full, "verdicts": verdict,
                "builds": builds,
                "parallel_efficiency": eff, "trace_s": summary(trace), "process": start,
                "breakdown": breakdown(name, verdict, builds[0], start, trace,
                                       gpu_seconds.get(name)),
            }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    doc["load_end"] = load()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "driver_scale.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (args.out / "driver_scale.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
