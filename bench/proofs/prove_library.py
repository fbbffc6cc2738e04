"""Complete TS proofs of the seed library's genomes, in parallel processes, each under a hard
time and memory budget; one JSON of TsSearch records back (``tsopt prove --ship`` reads it).

TS's exhaustive interleaving search stops at 1,000,000 states; a persistent GEMM with two
consumer warpgroups needs more (2.9M states at 4 stages, 38 CPU-s; growing ~1.5x a stage).
This runs TS's own search (through tsopt's verifier, as ``tsopt prove`` does) with the bound
raised to ``--max-states``, one process per schedule (library genomes that share a schedule
and domains are searched once), longest first, at most ``--jobs`` at once. A process past
``--budget`` seconds (the call's wall-clock, for all of them) or ``--rss-gib`` of memory is
killed and reported; it records nothing. Needs only the DSL (no database, no Optuna):

    PYTHONPATH=<dsl>:<dsl>/nvidia_cutlass_dsl/dsl_packages CUTE_DSL_ARCH=sm_90a \\
        python3 bench/proofs/prove_library.py --jobs 15 --budget 450 --out $OUT/proofs.json

Here (2 cores, niced) ``--only PREFIX,...`` picks a few genomes. Then, on the build machine,
in a tree whose verifier version is the one that ran (the same commit):

    .venv/bin/python -m tsopt prove --ship bench/proofs/results/proofs.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _jobs(only: list[str]) -> list[dict[str, Any]]:
    """The library's genomes, one job per (space, the models of every search it runs)."""
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for, search_keys

    doc = json.loads((ROOT / "tsopt/data/seed_library.json").read_text())
    spaces: dict[str, Any] = {}
    jobs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in doc["entries"]:
        genome, problem = Genome.from_dict(entry["genome"]), Problem.from_dict(entry["problem"])
        if only and not any(genome.hash.startswith(p) for p in only):
            continue
        name = genome.space
        if name not in spaces:
            spaces[name] = get_space(name)
            spaces[name].judge = judge_for(spaces[name])
        space = spaces[name]
        n = space.verify_domain(genome)
        domains = [n] + sorted(set(space.extra_verify_domains(genome, problem)) - {n})
        digests = tuple(model for _, model in search_keys(space, genome, problem))
        if not digests:
            continue  # TS rejects it before searching, or its model cannot be keyed
        genes = genome.genes
        job = jobs.setdefault((name, digests), {
            "space": name, "genome": genome.to_dict(), "problem": problem.to_dict(),
            "hash": genome.hash[:12], "problem_key": problem.key, "domains": domains,
            "stages": genes.get("stages"), "consumers": genes.get("consumers"),
            "persistent": genes.get("persistent"), "stream_k": genes.get("stream_k"),
            "arrangement": genes.get("arrangement"), "also": []})
        if job["hash"] != genome.hash[:12]:
            job["also"].append(f"{genome.hash[:12]} {problem.key}")
    return list(jobs.values())


def _cost(job: dict[str, Any]) -> float:
    """A guess of the search's size, for the order: two consumers and persistence dominate,
    and two consumers on separate tiles far more (bde1a800c3c8 passed ~13M states at 3
    stages where a cooperative 4-stage schedule finishes at 3-5M)."""
    stages = int(job.get("stages") or 2)
    separate = job.get("arrangement") == "separate" and job.get("consumers") == 2
    return ((4 if job.get("consumers") == 2 else 1) * (8 if job.get("persistent") else 1)
            * (16 if separate else 1) * 1.5 ** stages * len(job["domains"]))


def _child(job: dict[str, Any], max_states: int, conn: Any) -> None:
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import (
        VerdictCache,
        judge_for,
        search_bound,
        searching_up_to,
        verify_genome,
    )

    space = get_space(job["space"])
    space.judge = judge_for(space)
    cache = VerdictCache()
    start = time.process_time()
    with searching_up_to(max_states):
        verdict = verify_genome(Genome.from_dict(job["genome"]), Problem.from_dict(job["problem"]),
                                space=space, cache=cache)
    searches = [s.to_dict() for s in cache.take_searches()]
    conn.send({"valid": verdict.valid, "rule": verdict.rule, "cut": search_bound(verdict),
               "cpu_s": round(time.process_time() - start, 1), "searches": searches})
    conn.close()


def _rss_gib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--budget", type=float, default=450.0,
                        help="wall-clock seconds for the whole call; a search still running "
                             "then is killed")
    parser.add_argument("--rss-gib", type=float, default=6.0,
                        help="memory one search may hold before it is killed")
    parser.add_argument("--max-states", type=int, default=500_000_000)
    parser.add_argument("--only", default="", help="genome hash prefixes, comma-separated")
    parser.add_argument("--cheapest-first", action="store_true",
                        help="one core: the cheap searches first (default: the longest first)")
    args = parser.parse_args()
    only = [p for p in args.only.split(",") if p]
    jobs = sorted(_jobs(only), key=_cost, reverse=not args.cheapest_first)
    print(f"{len(jobs)} schedules to search, {args.jobs} at once, {args.budget:.0f} s budget",
          flush=True)
    ctx = mp.get_context("spawn")
    deadline = time.monotonic() + args.budget
    waiting = list(jobs)
    running: dict[int, tuple[dict[str, Any], Any, Any, float, float]] = {}
    rows: list[dict[str, Any]] = []
    searches: list[dict[str, Any]] = []

    def finish(job: dict[str, Any], status: str, wall: float, peak: float,
               result: dict[str, Any] | None = None) -> None:
        row = {k: job[k] for k in ("space", "hash", "problem_key", "domains", "stages",
                                   "consumers", "persistent", "stream_k", "arrangement", "also")}
        row.update(status=status, wall_s=round(wall, 1), peak_rss_gib=round(peak, 2))
        if result is not None:
            row.update(valid=result["valid"], rule=result["rule"], cut_at=result["cut"],
                       cpu_s=result["cpu_s"],
                       states=[s["states"] for s in result["searches"]],
                       complete=all(s["complete"] for s in result["searches"]))
            searches.extend(result["searches"])
        rows.append(row)
        print(json.dumps(row), flush=True)

    while waiting or running:
        while waiting and len(running) < args.jobs and time.monotonic() < deadline:
            job = waiting.pop(0)
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(job, args.max_states, child), daemon=True)
            proc.start()
            child.close()
            running[proc.pid] = (job, proc, parent, time.monotonic(), 0.0)
        if waiting and time.monotonic() >= deadline and not running:
            break
        time.sleep(0.5)
        for pid, (job, proc, conn, began, peak) in list(running.items()):
            peak = max(peak, _rss_gib(pid))
            running[pid] = (job, proc, conn, began, peak)
            wall = time.monotonic() - began
            if conn.poll():
                try:
                    result = conn.recv()
                except EOFError:
                    result = None
                proc.join(5)
                del running[pid]
                finish(job, "done" if result else f"died (exit {proc.exitcode})", wall, peak,
                       result)
            elif not proc.is_alive():
                del running[pid]
                finish(job, f"died (exit {proc.exitcode})", wall, peak)
            elif peak > args.rss_gib or time.monotonic() >= deadline:
                proc.kill()
                proc.join(5)
                del running[pid]
                finish(job, f"killed: {'memory' if peak > args.rss_gib else 'time'}", wall, peak)
        if time.monotonic() >= deadline and not running:
            break
    for job in waiting:
        finish(job, "not started: time", 0.0, 0.0)
    doc = {"format": "tsopt-ts-searches-1",
           "doc": "TS exhaustive searches of the seed library's schedules (bench/proofs)",
           "max_states": args.max_states, "budget_s": args.budget, "jobs": args.jobs,
           "cpus": os.cpu_count(), "runs": rows, "searches": searches}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    done = [r for r in rows if r.get("complete")]
    print(f"{len(done)} of {len(rows)} schedules searched to the end; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
