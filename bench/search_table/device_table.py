"""Build and measure the search table on the GPU machine itself (the DSL shipped there).

The 2-core build machine compiles a GEMM in ~20 s of wall time when it is shared; the GPU
machine has 16 cores. This script verifies and builds the table's candidates
(``build_table.candidates``: the recorded best schedules, then every point of
``table_space.RESTRICT``) in a process pool, writes a bundle part every ``--part`` built
candidates, and measures each part with ``tsopt measure`` (paired against cuBLAS) while the
pool builds the next. It is resumable: state lives in ``--state`` (``index.jsonl`` and the
parts); a second call within the machine's warm window continues where the first stopped.

On the GPU machine, from a snapshot of the source tree (with the DSL on ``PYTHONPATH``)::

    python3 bench/search_table/device_table.py --state /tmp/table --deadline 500 --out $OUT
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

PROBLEM_SPEC = "gemm:bf16:8192x8192x8192"


def _build_one(item: tuple[dict, str, int, str]) -> dict:
    """Verify, then build one genome (in a pool worker)."""
    genome_dict, origin, order, cache = item
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for, verify_genome

    space = get_space("gemm")
    space.judge = judge_for(space)
    problem = parse_problem_spec(PROBLEM_SPEC)
    genome = Genome.from_dict(genome_dict)
    start = time.process_time()
    # tsopt's own checks first: cheap, and most of the product fails them (the verifier runs
    # them too, after TS's checks, so the verdict is the same)
    findings = space.tsopt_checks(genome, problem)
    if findings:
        valid, summary = False, f"rejected by tsopt checks: {findings[0].rule}"
    else:
        verdict = verify_genome(genome, problem, space=space)
        valid, summary = verdict.valid, verdict.summary()
    row = {"genome_hash": genome.hash, "order": order, "origin": origin,
           "genome": genome_dict, "valid": valid, "verdict": summary}
    if valid:
        built = build_candidate(space, genome, problem, "sm_90a", cache_dir=cache)
        row.update(build_ok=built.ok, build_error=(built.error or "")[:300],
                   artifact_dir=built.artifact_dir if built.ok else None)
    row["cpu_s"] = round(time.process_time() - start, 3)
    return row


def _measure(part: Path, out: Path | None, log: list[str]) -> None:
    env = dict(os.environ, TSOPT_PAIRED_TIME_CAP_S=os.environ.get("TABLE_CAP_S", "0.15"),
               TSOPT_PAIRED_WARMUP_MAX_S=os.environ.get("TABLE_WARMUP_S", "0.05"))
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "tsopt", "measure", str(part)], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    log.append(f"{part.name}: rc {proc.returncode} in {time.time() - start:.0f} s "
               f"{proc.stdout[-400:]} {proc.stderr[-800:]}")
    if out is not None and (part / "results.json").exists():
        shutil.copy(part / "results.json", out / f"{part.name}.results.json")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, default=Path("/tmp/table"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--deadline", type=float, default=500.0, help="seconds from start")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--part", type=int, default=400)
    parser.add_argument("--count", type=int, default=2100, help="built candidates wanted")
    args = parser.parse_args()
    start = time.time()
    stop_at = start + args.deadline
    state = args.state
    state.mkdir(parents=True, exist_ok=True)
    cache = str(state / "artifacts")
    index_path = state / "index.jsonl"
    done: dict[str, dict] = {}
    if index_path.exists():
        for line in index_path.read_text().splitlines():
            row = json.loads(line)
            done[row["genome_hash"]] = row

    from build_table import candidates  # the table's order: known-good first, then the product

    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space

    problem = parse_problem_spec(PROBLEM_SPEC)
    todo = [(g.to_dict(), origin, order, cache)
            for order, (g, origin) in enumerate(candidates(get_space("gemm")))
            if g.hash not in done]
    built = [r for r in done.values() if r.get("artifact_dir")]
    bundled = {h for p in state.glob("part*") if (p / "manifest.json").exists()
               for h in (c["genome_hash"] for c in
                         json.loads((p / "manifest.json").read_text())["candidates"])}
    log: list[str] = []
    measuring: list[threading.Thread] = []

    def queue_measure(part: Path) -> None:
        previous = measuring[-1] if measuring else None

        def run() -> None:
            if previous is not None:
                previous.join()
            size = len(json.loads((part / "manifest.json").read_text())["candidates"])
            if time.time() + 0.3 * size < stop_at:  # a part measured to its end, or not begun
                _measure(part, args.out, log)
            else:
                log.append(f"{part.name}: left for the next call")
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        measuring.append(thread)

    def flush(final: bool) -> None:
        pending = sorted((r for r in built if r["genome_hash"] not in bundled),
                         key=lambda r: r["order"])
        while len(pending) >= args.part or (final and pending):
            rows, pending = pending[:args.part], pending[args.part:]
            number = 1 + max((int(p.name[4:]) for p in state.glob("part*")), default=0)
            part = state / f"part{number}"
            write_bundle(part, study=f"table-8192-part{number}", space="gemm",
                         problem=problem, arch="sm_90a",
                         candidates=[BundleEntry(Genome.from_dict(r["genome"]),
                                                 Path(r["artifact_dir"]), origin=r["origin"])
                                     for r in rows])
            bundled.update(r["genome_hash"] for r in rows)
            print(f"{time.time() - start:5.0f} s {part.name}: {len(rows)} candidates",
                  flush=True)
            queue_measure(part)

    # parts left unmeasured by an earlier call come first
    for part in sorted(state.glob("part*"), key=lambda p: int(p.name[4:])):
        if not (part / "results.json").exists():
            queue_measure(part)
    if len(built) < args.count and todo:
        ctx = mp.get_context("spawn")
        with open(index_path, "a") as index, ctx.Pool(args.workers) as pool:
            for row in pool.imap_unordered(_build_one, todo, chunksize=2):
                index.write(json.dumps(row, sort_keys=True) + "\n")
                index.flush()
                done[row["genome_hash"]] = row
                if row.get("artifact_dir"):
                    built.append(row)
                    if len(built) % 100 == 0:
                        print(f"{time.time() - start:5.0f} s {len(done)} judged, "
                              f"{len(built)} built", flush=True)
                flush(final=False)
                if len(built) >= args.count or time.time() > stop_at - 45:
                    pool.terminate()
                    break
    flush(final=True)
    for thread in measuring:
        thread.join(timeout=max(1.0, stop_at - time.time()))
    print("\n".join(log), flush=True)
    summary = {"judged": len(done), "valid": sum(1 for r in done.values() if r["valid"]),
               "built": len(built), "parts": sorted(p.name for p in state.glob("part*")),
               "measured_parts": sorted(p.name for p in state.glob("part*")
                                        if (p / "results.json").exists()),
               "median_cpu_s_built": sorted(r["cpu_s"] for r in built if "cpu_s" in r)[
                   len(built) // 2] if built else None,
               "wall_s": round(time.time() - start, 1)}
    print(json.dumps(summary), flush=True)
    if args.out is not None:
        shutil.copy(index_path, args.out / "index.jsonl")
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
