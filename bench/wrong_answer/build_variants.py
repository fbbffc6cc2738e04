"""A genome the checks accepted that computed a wrong answer (bench/oracle, skinny-n), and its
one-gene neighbours, built here; plus the oracle's best of each held-out problem whose oracle is
below cuBLAS (for bench/wrong_answer/device.py's profile of where the space loses).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/wrong_answer/build_variants.py [--jobs 2]

Writes bundles under ``carry/wrong_answer/`` (git-ignored) and ``variants.json`` beside them.
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
sys.path.insert(0, str(ROOT / "bench" / "targets_h200"))

from build_bundles import _build  # noqa: E402

OUT = ROOT / "carry" / "wrong_answer"
WRONG = "2457b04463eb"  # bench/oracle/skinny-n.table.json: status "wrong" (rel err 0.053)
SKINNY = "gemm:bf16:12288x64x3072"
# one gene changed at a time; (section, gene, value)
NEIGHBOURS = [("structure", "cluster", "1x1"), ("structure", "cluster", "2x1"),
              ("structure", "epilogue", "tma_store"), ("numeric", "tile_n", 128),
              ("numeric", "tile_n", 64), ("numeric", "stages", 8), ("numeric", "tile_m", 64),
              ("structure", "persistent", False), ("structure", "raster", "n")]
LOSING = ["fp16-wide", "mid", "ragged-large", "decode-mid"]


def plan_genome(plan: str, short: str) -> dict:
    doc = json.loads((ROOT / "bench/oracle/plans" / f"{plan}.json").read_text())
    for c in doc["candidates"]:
        if c["genome_hash"].startswith(short):
            return c["genome"]
    raise SystemExit(f"{short} not in plan {plan}")


def oracle_best(name: str) -> tuple[str, dict]:
    table = json.loads((ROOT / "bench/oracle" / f"{name}.table.json").read_text())
    rows = [r for r in table["rows"] if r.get("confirmed") and r.get("ratio")]
    best = max(rows, key=lambda r: r["ratio"])
    return table["problem"], plan_genome(name, best["genome_hash"][:12])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    wrong = plan_genome("skinny-n", WRONG)
    work = [("wrong", SKINNY, wrong)]
    for section, gene, value in NEIGHBOURS:
        g = copy.deepcopy(wrong)
        g[section][gene] = value
        work.append((f"{gene}={value}", SKINNY, g))
    for name in LOSING:
        spec, genome = oracle_best(name)
        work.append((f"oracle-best:{name}", spec, genome))
    with ProcessPoolExecutor(args.jobs) as pool:
        built = list(pool.map(_build, [(spec, g) for _label, spec, g in work]))
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    listing = []
    by_spec: dict[str, list] = {}
    for (label, spec, _g), (_s, genome, artifact, error) in zip(work, built, strict=True):
        g = Genome.from_dict(genome)
        listing.append({"label": label, "problem": spec, "genome_hash": g.hash,
                        "built": artifact is not None, "error": error})
        print(f"{label:24s} {spec:28s} {g.hash[:12]} {'built' if artifact else error}", flush=True)
        if artifact is not None:
            by_spec.setdefault(spec, []).append(BundleEntry(g, Path(artifact), origin=label[:40]))
    for spec, entries in by_spec.items():
        name = "wrong-" + spec.replace(":", "-")
        write_bundle(OUT / name, study=name, space="gemm", problem=parse_problem_spec(spec),
                     arch="sm_90a", candidates=entries, launch="graph")
    (OUT / "variants.json").write_text(json.dumps(listing, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
