"""Re-measure the near-best candidates of measured studies back to back, paired with cuBLAS.

The studies of a search-efficiency comparison ran one after another on a GPU whose speed
drifts (README.md beside this script: the same genome read 1567-1730 us across six studies),
so "within 2 % of the best" cannot be decided from their own timings. This collects every
correct candidate of the given studies whose recorded median is within ``--cut`` of the
reference study's best, builds them here (CPU, DSL) into ``carry/gemm/PLAN/`` in the format
of ``bench/gemm_h200/gemm_h200.py``, and prints the command that times them all in one process
on the GPU in paired A/B rounds against cuBLAS (``headline``; ratios cancel the drift)::

    D=bench/search_efficiency_h200
    python $D/search_remeasure.py build --plan search-top --cut 0.15 \\
        $D/studies-random.json.xz:gemm-8192-random $D/studies-tpe-s0.json.xz:gemm-8192-tpe-s0 ...
    python3 bench/gemm_h200/gemm_h200.py headline search-top --all --rounds 8 --per-round 10 \\
        --out $OUT/search-top.json                                    # on the GPU
    python $D/search_efficiency.py studies ... --remeasured $D/search-top-remeasured.json

A study is ``URL:STUDY`` or a JSON dump of one (``DUMP.json[.xz]:STUDY``). The first study named
is the reference. A candidate not re-measured counts as off target in ``studies --remeasured``
(its recorded time was more than ``--cut`` above the best).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "gemm_h200"))  # the plan format and carry/ of the GEMM runs
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from gemm_h200 import CARRY, prune  # noqa: E402

from tsopt.search.efficiency import StudyReader, parse_source  # noqa: E402


def near_best(sources: list[str], cut: float) -> tuple[list[dict[str, Any]], float]:
    """Distinct correct candidates of the studies within ``cut`` of the first study's best."""
    parsed = [parse_source(s, "study", labelled=False) for s in sources]
    with StudyReader() as reader:
        loaded = [reader.load(p) for p in parsed]
    reference_best = min(r.median_us for r in loaded[0].measured if r.median_us is not None)
    rows: dict[str, dict[str, Any]] = {}
    for study in loaded:
        for r in study.measured:
            if r.median_us is None or r.median_us > reference_best * (1 + cut):
                continue
            row = rows.setdefault(r.genome_hash, {
                "genome_hash": r.genome_hash, "genome": r.genome.to_dict(),
                "problem": study.problem.to_dict(), "recorded": []})
            row["recorded"].append({"study": study.name, "median_us": r.median_us})
    return sorted(rows.values(), key=lambda r: min(x["median_us"] for x in r["recorded"])), \
        reference_best


def _build_one(job: tuple[dict[str, Any], str]) -> dict[str, Any]:
    row, cache_dir = job
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space

    space = get_space("gemm")
    problem = Problem.from_dict(row["problem"])
    genome = Genome.from_dict(row["genome"])
    result = build_candidate(space, genome, problem, "sm_90a", cache_dir)
    out = {"label": row["genome_hash"][:12], "knobs": {}, **row, "build": result.to_dict()}
    if result.ok and result.artifact_dir:
        out["artifact"] = os.path.relpath(result.artifact_dir, ROOT)
    return out


def build(plan: str, sources: list[str], cut: float, jobs: int) -> int:
    rows, reference_best = near_best(sources, cut)
    out = CARRY / plan
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        built = list(pool.map(_build_one, [(r, str(out / "artifacts")) for r in rows]))
    doc = {"plan": plan, "command": "python bench/search_efficiency_h200/search_remeasure.py build --plan "
           f"{plan} --cut {cut} " + " ".join(sources),
           "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "reference_best_us": reference_best, "cut": cut,
           "seconds": round(time.perf_counter() - start, 1), "rows": built}
    (out / "plan.json").write_text(json.dumps(doc, indent=1))
    prune(out)
    ok = sum("artifact" in r for r in built)
    print(f"{ok}/{len(built)} candidates within {cut:.0%} of {reference_best:.1f} us built "
          f"-> {out / 'plan.json'}")
    return 0 if ok == len(built) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the near-best candidates (CPU)")
    b.add_argument("studies", nargs="+", metavar="URL:STUDY",
                   help="measured studies; the first is the reference")
    b.add_argument("--plan", default="search-top")
    b.add_argument("--cut", type=float, default=0.15)
    b.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.cut <= 0:
        parser.error(f"--cut {args.cut}: must be > 0")
    try:
        return build(args.plan, args.studies, args.cut, args.jobs)
    except ValueError as exc:
        parser.error(str(exc))
    return 2


if __name__ == "__main__":
    sys.exit(main())
