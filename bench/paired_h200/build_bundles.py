"""Bundles of recorded best schedules, re-measured paired on the H200 (tsopt.workers.paired).

- copy (the TS TMA copy space) fp16 4096² and 16384²: the top ``--top`` candidates of the
  earlier unpaired copy runs (``bench/copy_h200/copy-*-fenced``), by their recorded ratio;
- gemm bf16 8192³ and 128x8192x8192: the fastest ``--top`` suite candidates of the epilogue
  sweep (``bench/gemm_h200/gemm-epilogue.json``) that today's verifier accepts.

Each genome is verified and built here for sm_90a, then written into a bundle under
``.tsopt/bundles/paired-<problem>``; ``tsopt measure`` times them on the GPU machine::

    CUTE_DSL_ARCH=sm_90a python bench/paired_h200/build_bundles.py --top 6
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from tsopt.build.builder import build_candidate
from tsopt.core.bundle import BundleEntry, write_bundle
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.verify.verifier import judge_for, verify_genome

ROOT = Path(__file__).resolve().parents[2]


def copy_genomes(size: int, top: int) -> list[Genome]:
    folder = ROOT / "bench" / "copy_h200" / f"copy-{size}-fenced"
    manifest = json.loads((folder / "manifest.json").read_text())
    results = json.loads((folder / "results.json").read_text())
    genomes = {c["genome_hash"]: c["genome"] for c in manifest["candidates"]}
    ok = [m for m in results["measurements"] if m["status"] == "ok" and m.get("ratio")]
    ok.sort(key=lambda m: -m["ratio"])
    return [Genome.from_dict(genomes[m["genome_hash"]]) for m in ok[:top]]


def gemm_genomes(problem: Problem, top: int) -> list[Genome]:
    doc = json.loads((ROOT / "bench" / "gemm_h200" / "gemm-epilogue.json").read_text())
    rows = [r for r in doc["results"] if r["problem"] == problem.to_dict()
            and (r.get("measurement") or {}).get("status") == "ok"]
    rows.sort(key=lambda r: r["measurement"]["median_us"])
    return [Genome.from_dict(r["genome"]) for r in rows[:top]]


def bundle(space_name: str, problem: Problem, genomes: list[Genome]) -> None:
    space = get_space(space_name)
    space.judge = judge_for(space)
    entries = []
    for genome in genomes:
        verdict = verify_genome(genome, problem, space=space)
        if not verdict.valid:
            print(f"skip {genome.short_hash}: {verdict.summary()}")
            continue
        built = build_candidate(space, genome, problem, "sm_90a", cache_dir=".tsopt/artifacts")
        assert built.ok, built.error
        entries.append(BundleEntry(genome, Path(built.artifact_dir or ""), origin="enumerate"))
    out = Path(".tsopt/bundles") / f"paired-{problem.key}"
    shutil.rmtree(out, ignore_errors=True)
    write_bundle(out, study=f"paired-{problem.key}", space=space_name, problem=problem,
                 arch="sm_90a", candidates=entries)
    print(f"{out}: {len(entries)} candidates")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    for size in (4096, 16384):
        bundle("copy", Problem.of("copy", "fp16", rows=size, cols=size),
               copy_genomes(size, args.top))
    for m in (8192, 128):
        problem = Problem.of("gemm", "bf16", m=m, n=8192, k=8192)
        bundle("gemm", problem, gemm_genomes(problem, args.top))


if __name__ == "__main__":
    main()
