"""A lead the cost model does not take (yet): a per-K-step cost of a cluster's barrier
round-trip. CPU only; the figures in bench/tune_gpu's round 9 notes.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/tune_gpu/analysis/round9_cluster_sync.py \\
        --out bench/tune_gpu/analysis/round9_cluster_sync.json

The analytical estimate's K-step time with ``BASE + PER_CTA x (CTAs in the cluster - 1)``
nanoseconds added, for a few values, against (1) every committed study's measurements (rounds
1-9, per problem with at least 30 measured trials: the data the values were read from, so
in-sample) and (2) the measured 8192^3 table of bench/search_table (1,908 schedules; its
clusters are 1x1, 2x1 and 1x2): Spearman's rank correlation with the paired ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import lzma
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench" / "tune_gpu" / "analysis"))

from round9_model_rank import measured, spearman  # noqa: E402

STEP = "    step = max(step_compute, step_memory, step_latency, step_hbm)"
VALUES = [(0, 0), (0, 25), (0, 50), (0, 100), (50, 50)]


def patched_model(name: str, step_line: str):  # type: ignore[no-untyped-def]
    """The cost model module with its K-step line replaced by ``step_line``."""
    source = (ROOT / "tsopt" / "search" / "cost_model.py").read_text()
    assert STEP in source, "cost_model.py's step line changed: update STEP"
    source = source.replace(STEP, step_line)
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def variant(base_ns: int, per_cta_ns: int):  # type: ignore[no-untyped-def]
    return patched_model(f"cost_model_sync_{base_ns}_{per_cta_ns}",
                         STEP + f" + {base_ns}e-9 + {per_cta_ns}e-9 * (cm * cn - 1)")


def rank_correlations(model) -> tuple[dict[str, float], float, float]:  # type: ignore[no-untyped-def]
    """``model``'s estimate against (1) every committed study with at least 30 measured trials
    (Spearman per problem, and their mean) and (2) the measured 8192^3 table."""
    with tempfile.TemporaryDirectory() as scratch:
        data = {k: v for k, v in measured(Path(scratch)).items() if len(v) >= 30}
    table = json.loads(lzma.open(ROOT / "bench/search_table/table-8192.json.xz").read())
    rows = [r for r in table["rows"] if r.get("ratio")]
    studies = {}
    for key, pairs in sorted(data.items()):
        m, n, k = (int(x) for x in key.split("x"))
        est = [-model.gemm_estimate(p, {"m": m, "n": n, "k": k}).relative for p, _ in pairs]
        studies[key] = round(spearman(est, [r for _, r in pairs]), 3)
    est = [-model.gemm_estimate(json.loads(r["key"]), {"m": 8192, "n": 8192, "k": 8192}).relative
           for r in rows]
    on_table = round(spearman(est, [r["ratio"] for r in rows]), 3)
    return studies, round(sum(studies.values()) / len(studies), 3), on_table


def sweep(values: list[tuple[int, int]], first: str, make, out: Path) -> None:  # type: ignore[no-untyped-def]
    """For each ``(value, per CTA)`` of ``values``, the rank correlations of ``make``'s model,
    printed and written to ``out`` (``first`` names the first value: base, floor)."""
    results = []
    for value, per in values:
        studies, mean, on_table = rank_correlations(make(value, per))
        results.append({f"{first}_ns": value, "per_cta_ns": per, "studies_mean": mean,
                        "studies": studies, "table_8192": on_table})
        print(f"{first} {value} ns, per CTA {per} ns: studies mean {mean}, 8192^3 table "
              f"{on_table}; " + " ".join(f"{k}:{v}" for k, v in studies.items()), flush=True)
    out.write_text(json.dumps({"values": results}, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sweep(VALUES, "base", variant, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
