"""Bundles for issue 13 (the GEMM where cuBLAS is weak, and the small-M fix), measured paired
on the H200 (tsopt.workers.paired), one bundle per problem under ``.tsopt/bundles/gemm-small-*``:

- the two schedules that computed wrong results at M = 16, 32, 64 (N = K = 4096) before the
  fix of the TMA-store epilogue (``OutD._store_tma``): (a) 256x128 tiles, (b) one tile per
  CTA with a 2x1 cluster and the TMA-store epilogue; each with both epilogues;
- the new variants (small tiles with deep pipelines, tile_n off the 64 grid, swap-AB,
  split-K through DSMEM, swap-AB with split-K) at 128x8192x8192, 64x4096x4096,
  16x8192x8192, 1024^3 and 3000x2008x1000;
- old suite winners (``bench/gemm_h200/gemm-epilogue.json``) at 8192^3 and 128x8192x8192 as
  the control.

Each genome is verified and built here for sm_90a; on the GPU machine::

    CUTE_DSL_ARCH=sm_90a python bench/gemm_small_h200/build_bundles.py
    python3 -m tsopt measure .tsopt/bundles/gemm-small-<problem>   # per bundle
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from tsopt.build.builder import build_candidate
from tsopt.core.bundle import BundleEntry, write_bundle
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.verify.verifier import judge_for, verify_genome

ROOT = Path(__file__).resolve().parents[2]
SMALL_M_FAILURES: list[dict[str, Any]] = [
    {"tile_m": 256, "tile_n": 128, "epilogue": "tma_store"},                 # (a)
    {"tile_m": 256, "tile_n": 128, "epilogue": "direct"},                    # (a), direct
    {"tile_n": 128, "epilogue": "tma_store", "cluster": "2x1"},              # (b)
    {"epilogue": "tma_store", "cluster": "2x1"},                             # (b), 128x256
    {"tile_n": 128, "epilogue": "direct", "cluster": "2x1"},                 # (b), direct
]
ONE_WG = {"tile_m": 64, "consumers": 1, "consumer_regs": 160}
SMALL_TILES: list[dict[str, Any]] = [
    {**ONE_WG, "tile_n": 64, "stages": 12, "epilogue": "tma_store"},
    {**ONE_WG, "tile_n": 128, "stages": 8, "epilogue": "tma_store"},
    {**ONE_WG, "tile_n": 128, "stages": 8, "persistent": True},
    {**ONE_WG, "tile_n": 96, "stages": 10, "epilogue": "tma_store"},
    {"tile_n": 96, "stages": 6, "epilogue": "tma_store"},
    {"tile_n": 160, "stages": 5, "epilogue": "tma_store"},
    {"tile_n": 80, "stages": 6},
    {"tile_n": 128, "stages": 5, "epilogue": "tma_store", "persistent": True},
]
SWAP_AB: list[dict[str, Any]] = [
    {"swap_ab": True, **ONE_WG, "tile_n": 16, "stages": 12, "epilogue": "tma_store"},
    {"swap_ab": True, **ONE_WG, "tile_n": 16, "stages": 12},
    {"swap_ab": True, **ONE_WG, "tile_n": 32, "stages": 12, "epilogue": "tma_store"},
    {"swap_ab": True, **ONE_WG, "tile_n": 64, "stages": 10, "epilogue": "tma_store"},
    {"swap_ab": True, "tile_n": 64, "stages": 8, "epilogue": "tma_store"},
    {"swap_ab": True, "tile_n": 128, "stages": 5, "epilogue": "tma_store"},
]
SPLIT_K: list[dict[str, Any]] = [
    {"split_k": 2, **ONE_WG, "tile_n": 128, "stages": 6, "epilogue": "tma_store"},
    {"split_k": 4, **ONE_WG, "tile_n": 128, "stages": 6, "epilogue": "tma_store"},
    {"split_k": 2, "tile_n": 128, "stages": 3, "epilogue": "tma_store"},
    {"split_k": 4, **ONE_WG, "tile_n": 64, "stages": 12},
]
SWAP_SPLIT: list[dict[str, Any]] = [
    {"swap_ab": True, "split_k": 2, **ONE_WG, "tile_n": 16, "stages": 12, "epilogue": "tma_store"},
    {"swap_ab": True, "split_k": 4, **ONE_WG, "tile_n": 16, "stages": 12, "epilogue": "tma_store"},
    {"swap_ab": True, "split_k": 2, **ONE_WG, "tile_n": 64, "stages": 10, "epilogue": "tma_store"},
]


def suite_winners(problem: Problem, top: int) -> list[Genome]:
    doc = json.loads((ROOT / "bench" / "gemm_h200" / "gemm-epilogue.json").read_text())
    rows = [r for r in doc["results"] if r["problem"] == problem.to_dict()
            and (r.get("measurement") or {}).get("status") == "ok"]
    rows.sort(key=lambda r: r["measurement"]["median_us"])
    return [Genome.from_dict(r["genome"]) for r in rows[:top]]


def bundle(space: Any, problem: Problem, genomes: list[Genome]) -> None:
    entries, seen = [], set()
    for genome in genomes:
        if genome.hash in seen:
            continue
        seen.add(genome.hash)
        verdict = verify_genome(genome, problem, space=space)
        if not verdict.valid:
            print(f"skip {genome.short_hash} {dict(genome.genes)}: {verdict.summary()}", flush=True)
            continue
        built = build_candidate(space, genome, problem, "sm_90a", cache_dir=".tsopt/artifacts")
        if not built.ok:
            print(f"build failed {genome.short_hash}: {built.error}", flush=True)
            continue
        entries.append(BundleEntry(genome, Path(built.artifact_dir or ""), origin="enumerate"))
    out = Path(".tsopt/bundles") / f"gemm-small-{problem.key}"
    shutil.rmtree(out, ignore_errors=True)
    write_bundle(out, study=f"gemm-small-{problem.key}", space="gemm", problem=problem,
                 arch="sm_90a", candidates=entries)
    print(f"{out}: {len(entries)} candidates", flush=True)


def main() -> None:
    space = get_space("gemm")
    space.judge = judge_for(space)
    g = space.genome

    def of(m: int, n: int, k: int) -> Problem:
        return Problem.of("gemm", "bf16", m=m, n=n, k=k)

    def pick(table: list[dict[str, Any]], *rows: int) -> list[Genome]:
        return [g(**table[i]) for i in rows]

    failures = [g(**kw) for kw in SMALL_M_FAILURES]
    plan: list[tuple[Problem, list[Genome]]] = [
        (of(16, 4096, 4096), failures),
        (of(32, 4096, 4096), failures),
        (of(64, 4096, 4096), failures + pick(SMALL_TILES, 0, 1) + pick(SWAP_AB, 0, 3)
         + pick(SPLIT_K, 0, 1, 3) + pick(SWAP_SPLIT, 0, 2)),
        (of(128, 8192, 8192), pick(SMALL_TILES, 0, 1, 2, 3, 5, 7) + pick(SWAP_AB, 0, 3, 4, 5)
         + pick(SPLIT_K, 0, 1, 2, 3) + pick(SWAP_SPLIT, 0, 2)
         + suite_winners(of(128, 8192, 8192), 2)),
        (of(16, 8192, 8192), pick(SWAP_AB, 0, 1, 2, 3) + pick(SWAP_SPLIT, 0, 1, 2)
         + pick(SMALL_TILES, 0) + pick(SPLIT_K, 1)),
        (of(1024, 1024, 1024), pick(SMALL_TILES, 0, 1, 2, 3, 4, 5) + pick(SWAP_AB, 4)
         + pick(SPLIT_K, 2)),
        (of(3000, 2008, 1000), pick(SMALL_TILES, 0, 4, 5, 6, 7) + pick(SWAP_AB, 5)
         + pick(SPLIT_K, 2)),
        (of(8192, 8192, 8192), suite_winners(of(8192, 8192, 8192), 3) + pick(SMALL_TILES, 5)),
    ]
    only = set(sys.argv[1:])
    for problem, genomes in plan:
        if not only or problem.key in only:
            bundle(space, problem, genomes)


if __name__ == "__main__":
    main()
