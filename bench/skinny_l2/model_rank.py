"""How well the analytical cost model orders measured GEMM schedules (issue #13, round 3).

Per measured set (each round-1 study database of `bench/tune_gpu/results`, the hand bundles of
`bench/gemm_small_h200`, the 8192³ random study of `bench/search_efficiency_h200`): the
Spearman rank correlation between the estimate (`gemm_estimate`, lower is faster) and the
measured paired ratio to cuBLAS, and their mean. `--model FILE` loads another
`cost_model.py` (e.g. the one before this change: `git show 40bfac9:tsopt/search/cost_model.py`).

    python bench/skinny_l2/model_rank.py [--model /tmp/old_cost_model.py]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import lzma
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def genes_of(genome: dict) -> dict:
    return {**genome.get("structure", {}), **genome.get("numeric", {})}


def measured_sets(tmp: Path) -> dict[tuple, list[tuple[dict, float]]]:
    data: dict[tuple, list[tuple[dict, float]]] = {}
    with tarfile.open(BENCH / "tune_gpu" / "results" / "studies-machine2.db.tar.xz") as tar:
        tar.extractall(tmp)
    for db in sorted(glob.glob(str(tmp / "**" / "*.db"), recursive=True)):
        con = sqlite3.connect(db)
        for ratio, gj, pj in con.execute(
                "select max(m.ratio), c.genome_json, s.problem_json from tsopt_measurement m "
                "join tsopt_candidate c on c.id=m.candidate_id join tsopt_study s "
                "on s.id=c.study_id where m.status='ok' group by c.genome_hash"):
            p = json.loads(pj)
            data.setdefault(("tune", p["m"], p["n"], p["k"]), []).append(
                (genes_of(json.loads(gj)), ratio))
    small = BENCH / "gemm_small_h200"
    summary = json.loads((small / "gemm-small-summary.json").read_text())["genomes"]
    for f in sorted(small.glob("gemm-small-gemm-bf16-*.results.json")):
        m, n, k = map(int, f.name.split("bf16-")[1].split(".")[0].split("x"))
        for meas in json.loads(f.read_text())["measurements"]:
            h, r = meas.get("genome_hash"), meas.get("ratio")
            if r is None or h not in summary:
                continue
            g = dict(summary[h])
            tm, tn, tk = map(int, g.pop("tile").split("x"))
            data.setdefault(("hand", m, n, k), []).append(({**g, "tile_m": tm, "tile_n": tn,
                                                            "tile_k": tk}, r))
    (study,) = json.loads(lzma.open(BENCH / "search_efficiency_h200" / "studies-random.json.xz").read())
    for c in study["candidates"]:
        ok = [m for m in c.get("measurements", []) if m["status"] == "ok" and m.get("ratio")]
        if ok:
            data.setdefault(("random", 8192, 8192, 8192), []).append(
                (genes_of(c["genome"]), float(ok[0]["ratio"])))
    return data


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, help="a cost_model.py to load instead")
    args = parser.parse_args()
    if args.model:
        spec = importlib.util.spec_from_file_location("cost_model_under_test", args.model)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[spec.name] = module  # type: ignore[union-attr]  (dataclasses look it up)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        sys.path.insert(0, str(ROOT))
        from tsopt.search import cost_model as module
    with tempfile.TemporaryDirectory() as tmp:
        data = measured_sets(Path(tmp))
    scores = []
    for key, rows in sorted(data.items()):
        if len(rows) < 5:
            continue
        sizes = {"m": key[1], "n": key[2], "k": key[3]}
        est = [module.gemm_estimate(g, sizes).relative for g, _ in rows]
        ratio = [r for _, r in rows]
        s = spearman([-e for e in est], ratio)
        scores.append(s)
        print(f"{key!s:30} n={len(rows):3d} spearman {s:.2f}")
    print(f"mean {np.mean(scores):.3f} over {len(scores)} sets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
