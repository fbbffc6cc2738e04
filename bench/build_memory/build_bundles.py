"""Bundles that check the copy kernel with a DSL-valued domain on the H200.

The copy seed and the top ``--top`` recorded copy candidates of each of fp16 4096x4096 and
16384x16384 (``bench/paired_h200/build_bundles.py``), verified and built here for sm_90a at
each problem below, written to ``.tsopt/bundles/copy-runtime-tiles-<problem>``. A genome the
verifier rejects at a problem (a box that does not divide it) is skipped and named. The seed
is left out of the 1,048,576x128 bundle: one CTA walks all the rows there (about a second a
launch, more than the measurer's 1000x-the-baseline limit)::

    CUTE_DSL_ARCH=sm_90a python bench/build_memory/build_bundles.py --top 6
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "paired_h200"))

from build_bundles import copy_genomes  # noqa: E402

from tsopt.build.builder import build_candidate  # noqa: E402
from tsopt.core.bundle import BundleEntry, write_bundle  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.verify.verifier import judge_for, verify_genome  # noqa: E402

PROBLEMS = ((4096, 4096, True), (16384, 16384, True), (1_048_576, 128, False),
            (12288, 6144, True), (3008, 4160, True))
"""(rows, cols, with the seed): square, tall, tile counts that are not powers of two, and
a shape with only 64-row and 64-column boxes (3008 = 64 x 47, 4160 = 64 x 65)."""


def bundle(problem: Problem, genomes: list[Genome]) -> Path:
    space = get_space("copy")
    space.judge = judge_for(space)
    entries = []
    for genome in genomes:
        verdict = verify_genome(genome, problem, space=space)
        if not verdict.valid:
            print(f"  skip {genome.short_hash}: {verdict.summary()}")
            continue
        built = build_candidate(space, genome, problem, "sm_90a", cache_dir=ROOT / ".tsopt/artifacts")
        assert built.ok, built.error
        entries.append(BundleEntry(genome, Path(built.artifact_dir or ""), origin="enumerate"))
    out = ROOT / ".tsopt/bundles" / f"copy-runtime-tiles-{problem.key}"
    shutil.rmtree(out, ignore_errors=True)
    write_bundle(out, study=f"copy-runtime-tiles-{problem.key}", space="copy", problem=problem,
                 arch="sm_90a", candidates=entries)
    print(f"{out.relative_to(ROOT)}: {len(entries)} candidates")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--only", help="build only this problem (rowsxcols)")
    args = parser.parse_args()
    recorded: dict[str, Genome] = {}
    for size in (4096, 16384):
        recorded.update((g.hash, g) for g in copy_genomes(size, args.top))
    space = get_space("copy")
    for rows, cols, seed in PROBLEMS:
        if args.only and args.only != f"{rows}x{cols}":
            continue
        problem = Problem.of("copy", "fp16", rows=rows, cols=cols)
        print(problem.key)
        genomes = ([space.seed_genome(problem)] if seed else []) + list(recorded.values())
        bundle(problem, genomes)


if __name__ == "__main__":
    main()
