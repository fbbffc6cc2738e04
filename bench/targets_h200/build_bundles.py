"""Issue #13's targets re-measured on the code as it is: one bundle per target problem.

For every problem issue #13 names (decode and skinny shapes, the ragged and small ones, the
four large suite shapes; the copies at 4096^2 and 16384^2), the seed library's best entries
(``--top`` per problem, by their recorded paired ratio). Each genome is verified by today's
verifier and checks and built here for sm_90a from today's kernel template, so the bundle
measures what a user exporting that schedule would get now, not what an older template did.
Bundles go to ``carry/targets/<problem>`` (git-ignored; carried to the H200 whole), where
``tsopt measure`` pairs each candidate with cuBLAS / torch copy::

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/targets_h200/build_bundles.py --top 2
    # on the H200, per bundle:
    python3 -m tsopt measure carry/targets/<problem>
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.core.problem import Problem, parse_problem_spec  # noqa: E402

TARGETS = (
    "gemm:bf16:128x8192x8192", "gemm:bf16:16x8192x8192", "gemm:bf16:16x4096x4096",
    "gemm:bf16:64x8192x8192", "gemm:bf16:64x4096x4096", "gemm:bf16:3000x2008x1000",
    "gemm:bf16:1024x1024x1024", "gemm:bf16:8192x8192x8192", "gemm:bf16:8192x1024x8192",
    "gemm:bf16:2048x2048x16384", "gemm:bf16:4096x4096x4096",
    "copy:fp16:4096x4096", "copy:fp16:16384x16384",
)
OUT = ROOT / "carry" / "targets"


def _build(item: tuple[str, dict]) -> tuple[str, dict, str | None, str | None]:
    """Verify and build one genome for one problem (a worker process)."""
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for, verify_genome

    spec, genome_dict = item
    problem = parse_problem_spec(spec)
    space = get_space(problem.op)
    space.judge = judge_for(space)
    genome = Genome.from_dict(genome_dict)
    verdict = verify_genome(genome, problem, space=space)
    if not verdict.valid:
        return spec, genome_dict, None, verdict.summary()
    built = build_candidate(space, genome, problem, "sm_90a", cache_dir=ROOT / ".tsopt/artifacts")
    return spec, genome_dict, built.artifact_dir if built.ok else None, built.error


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.search.library import load_library

    library = load_library()
    work, chosen = [], {}
    for spec in TARGETS:
        problem = parse_problem_spec(spec)
        entries = sorted((e for e in library if e.space == problem.op
                          and e.problem == problem and e.arch == "sm_90a"),
                         key=lambda e: -e.ratio)[:args.top]
        chosen[spec] = [{"genome": e.genome.short_hash, "ratio": e.ratio, "source": e.source}
                        for e in entries]
        work += [(spec, e.genome.to_dict()) for e in entries]
    with ProcessPoolExecutor(args.jobs) as pool:
        built = list(pool.map(_build, work))
    shutil.rmtree(OUT, ignore_errors=True)
    for spec in TARGETS:
        problem: Problem = parse_problem_spec(spec)
        entries = []
        for s, genome, artifact, error in built:
            if s != spec:
                continue
            if artifact is None:
                print(f"{spec} {Genome.from_dict(genome).short_hash}: not built: {error}")
                continue
            entries.append(BundleEntry(Genome.from_dict(genome), Path(artifact), origin="library"))
        name = "targets-" + spec.replace(":", "-")
        write_bundle(OUT / name, study=name, space=problem.op, problem=problem, arch="sm_90a",
                     candidates=entries)
        print(f"{OUT / name}: {len(entries)} candidates", flush=True)
    (OUT / "chosen.json").write_text(json.dumps(chosen, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
