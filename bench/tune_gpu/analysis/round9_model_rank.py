"""How well the analytical cost model orders what every committed study measured, per problem
(CPU only).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/tune_gpu/analysis/round9_model_rank.py \\
        --out bench/tune_gpu/analysis/round9_model_rank.json [--model OTHER/cost_model.py]

Every study archive of bench/tune_gpu (rounds 1-9, ``*.db.tar.xz``): each measured trial's
analytical estimate (``gemm_estimate``; lower is faster) against its paired ratio to cuBLAS,
as Spearman's rank correlation per problem (trials of a problem pooled over studies). ``--model``
loads another ``cost_model.py`` (e.g. the one before round 9's cluster rounding:
``git show 3685ca4:tsopt/search/cost_model.py > /tmp/cost_model_before.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def load_model(path: Path | None):  # type: ignore[no-untyped-def]
    if path is None:
        from tsopt.search import cost_model
        return cost_model
    spec = importlib.util.spec_from_file_location("cost_model_other", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def measured(scratch: Path) -> dict[str, list[tuple[dict, float]]]:
    """problem -> [(optuna params, paired ratio)] of every completed trial in every archive."""
    out: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    for archive in sorted((ROOT / "bench" / "tune_gpu").glob("results*/*.db.tar.xz")):
        target = scratch / archive.parent.name / archive.name
        target.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        for db in sorted(target.rglob("*.db")):
            con = sqlite3.connect(db)
            studies = dict(con.execute(
                "select s.study_name, t.problem_json from studies s join tsopt_study t "
                "on t.name = s.study_name"))
            for name, problem_json in studies.items():
                p = json.loads(problem_json)
                key = f"{p['m']}x{p['n']}x{p['k']}"
                rows = con.execute(
                    "select t.trial_id, v.value from trials t join studies s on s.study_id = "
                    "t.study_id join trial_values v on v.trial_id = t.trial_id where "
                    "s.study_name = ? and t.state = 'COMPLETE'", (name,)).fetchall()
                for trial_id, value in rows:
                    params = {}
                    for pname, pvalue, dist in con.execute(
                            "select param_name, param_value, distribution_json from trial_params "
                            "where trial_id = ?", (trial_id,)):
                        choices = json.loads(dist)["attributes"]["choices"]
                        params[pname] = choices[int(pvalue)]
                    if value and value > 0:
                        out[key].append((params, 1.0 / value))
            con.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", type=Path, default=None)
    args = parser.parse_args()
    model = load_model(args.model)
    with tempfile.TemporaryDirectory() as scratch:
        data = measured(Path(scratch))
    rows = []
    for key in sorted(data, key=lambda k: [int(x) for x in k.split("x")]):
        m, n, k = (int(x) for x in key.split("x"))
        pairs = data[key]
        est = [-model.gemm_estimate(p, {"m": m, "n": n, "k": k}).relative for p, _ in pairs]
        rho = spearman(est, [r for _, r in pairs]) if len(pairs) > 2 else None
        rows.append({"problem": key, "measured": len(pairs),
                     "spearman": None if rho is None else round(rho, 3)})
        print(f"{key}: {len(pairs)} measured, Spearman {rho if rho is None else round(rho, 3)}")
    args.out.write_text(json.dumps({"model": str(args.model or "tsopt/search/cost_model.py"),
                                    "problems": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
