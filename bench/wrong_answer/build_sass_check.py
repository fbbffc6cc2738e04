"""The GPU check of the SASS diagnosis (bench/wrong_answer/README.md): kernels of the skinny-n
problem whose SASS the scan calls hazardous (an accumulator read before the wgmma wait that
retires it) and kernels it calls clean, built here WITHOUT the builder's refusal so the H200
can run both; ``bench/wrong_answer/device.py`` then runs each 30 times. The diagnosis predicts
wrong and not-twice-the-same answers exactly for the hazardous ones.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/wrong_answer/build_sass_check.py [--jobs 2]
    # on the H200 (torch only):
    python3 bench/wrong_answer/device.py --bundles carry/wrong_answer_sass \
        --out $OUT/sass_check.json
    # back here:
    .venv/bin/python bench/wrong_answer/build_sass_check.py --summarise RESULT.json

Writes the bundle ``carry/wrong_answer_sass/wrong-gemm-bf16-12288x64x3072`` (git-ignored) and
``variants.json`` beside it (label, genome hash, the scan's hazard count, its prediction).
The builds go to a cache of their own (``carry/wrong_answer_sass/artifacts``): an unchecked
build must never be served from the shared cache to an ordinary build of the same key.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "carry" / "wrong_answer_sass"
CACHE = OUT / "artifacts"
SKINNY = "gemm:bf16:12288x64x3072"
WRONG = "2457b04463eb"
# (label, plan genome, gene edits): the measured ones first (bench/wrong_answer/results), then
# one-gene neighbours not measured yet, each scanned before it was put here (README).
VARIANTS: list[tuple[str, str, list[tuple[str, str, object]]]] = [
    ("wrong", WRONG, []),
    ("cluster=1x1", WRONG, [("structure", "cluster", "1x1")]),
    ("cluster=2x1", WRONG, [("structure", "cluster", "2x1")]),
    ("stages=8", WRONG, [("numeric", "stages", 8)]),
    ("tile_n=64", WRONG, [("numeric", "tile_n", 64)]),
    ("tile_m=64", WRONG, [("numeric", "tile_m", 64)]),
    ("tile_n=128,stages=8", WRONG, [("numeric", "tile_n", 128), ("numeric", "stages", 8)]),
    ("raster=n,swizzle=1", WRONG, [("structure", "raster", "n"), ("numeric", "swizzle", 1)]),
    ("swizzle=1", WRONG, [("numeric", "swizzle", 1)]),
    ("persistent=False,swizzle=1", WRONG, [("structure", "persistent", False),
                                           ("numeric", "swizzle", 1)]),
    ("tma_store,stages=8", WRONG, [("structure", "epilogue", "tma_store"),
                                   ("numeric", "stages", 8)]),
    ("b37d80b6", "b37d80b6", []),
    ("01d8c0f1", "01d8c0f1", []),
    ("383206d4", "383206d4", []),
]


def plan_genome(short: str) -> dict:
    doc = json.loads((ROOT / "bench/oracle/plans/skinny-n.json").read_text())
    for c in doc["candidates"]:
        if c["genome_hash"].startswith(short):
            return c["genome"]
    raise SystemExit(f"{short} not in the skinny-n plan (python3 -m scripts.evidence unpack oracle)")


def _build(genome_dict: dict) -> tuple[str | None, str | None, int | None]:
    """Verify, then build with the SASS scan recording instead of refusing: (artifact, error,
    hazards)."""
    import tsopt.build.builder as builder
    from tsopt.build.sass import accumulator_hazards
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for, verify_genome

    seen: list[int] = []

    def record(dump_dir: Path) -> None:
        seen.append(sum(len(accumulator_hazards(p.read_text())) for p in dump_dir.glob("*.sass")))

    builder.check_sass = record  # this process only: the bench builds what the builder refuses
    problem = parse_problem_spec(SKINNY)
    space = get_space("gemm")
    space.judge = judge_for(space)
    genome = Genome.from_dict(genome_dict)
    verdict = verify_genome(genome, problem, space=space)
    if not verdict.valid:
        return None, verdict.summary(), None
    built = builder.build_candidate(space, genome, problem, "sm_90a", cache_dir=CACHE, force=True)
    return (built.artifact_dir if built.ok else None), built.error, (seen[-1] if seen else None)


def build(jobs: int) -> int:
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec

    work = []
    for label, short, edits in VARIANTS:
        g = copy.deepcopy(plan_genome(short))
        for section, gene, value in edits:
            g[section][gene] = value
        work.append((label, g))
    shutil.rmtree(OUT, ignore_errors=True)
    CACHE.mkdir(parents=True)
    with ProcessPoolExecutor(jobs) as pool:
        built = list(pool.map(_build, [g for _label, g in work]))
    listing, entries = [], []
    for (label, g), (artifact, error, hazards) in zip(work, built, strict=True):
        genome = Genome.from_dict(g)
        predicted = None if hazards is None else ("wrong" if hazards else "right")
        listing.append({"label": label, "problem": SKINNY, "genome_hash": genome.hash,
                        "built": artifact is not None, "error": error, "hazards": hazards,
                        "predicted": predicted})
        print(f"{label:28s} {genome.hash[:12]} hazards={hazards} "
              f"{'built' if artifact else error}", flush=True)
        if artifact is not None:
            entries.append(BundleEntry(genome, Path(artifact), origin=label[:40]))
    name = "wrong-" + SKINNY.replace(":", "-")
    write_bundle(OUT / name, study=name, space="gemm", problem=parse_problem_spec(SKINNY),
                 arch="sm_90a", candidates=entries, launch="graph")
    (OUT / "variants.json").write_text(json.dumps(listing, indent=1))
    return 0


def summarise(result: Path) -> int:
    """Prediction against measurement, one line a kernel; exit 1 when any disagrees."""
    predicted = {v["genome_hash"]: v for v in json.loads((OUT / "variants.json").read_text())}
    disagree = 0
    for row in json.loads(result.read_text())["kernels"]:
        v = predicted.get(row["genome_hash"], {})
        if "error" in row:
            print(f"{v.get('label', '?'):28s} error: {row['error']}")
            disagree += 1
            continue
        observed = "wrong" if row["wrong"] or row["nondeterministic"] else "right"
        agree = observed == v.get("predicted")
        disagree += not agree
        print(f"{v.get('label', '?'):28s} hazards={v.get('hazards')} predicted={v.get('predicted')} "
              f"observed={observed} (wrong {row['wrong']}/{row['trials']}, not twice the same "
              f"{row['nondeterministic']}, max rel err {row['max_rel_err']:.4f}) "
              f"{'agrees' if agree else 'DISAGREES'}")
    return 1 if disagree else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--summarise", type=Path, help="a device.py result to compare")
    args = parser.parse_args()
    return summarise(args.summarise) if args.summarise else build(args.jobs)


if __name__ == "__main__":
    sys.exit(main())
