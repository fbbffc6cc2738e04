"""What the cost model says about rounds 5-7's studies (CPU only, from the committed databases).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/tune_gpu/analysis/round6_model.py \
        --out bench/tune_gpu/analysis/round6_model.json

1. How the analytical estimate ranks every measured candidate of the 128x8192x8192 and
   64x4096x4096 studies (Spearman's rank correlation with the measured paired ratio).
2. At 128x8192x8192: the analytical estimate of round 6's winner (61f1c6d01914) against the
   best the r6b study measured, and the learned model fitted to r6b's measurements.
3. At 64x4096x4096, rounds 4 and 5: how many measured candidates had which split-K and
   cluster (the split-K basin).
4. At 8192³, r7: what the build side spent (TS's exhaustive searches, compiles), and r6b's
   stream-K proposal (trial 42): when it was asked, and whether it was built.
5. At 8192³: the analytical estimate of the incumbent 8bb0108a3dbb against its one-gene
   stream-K neighbour as the couplings complete it (what the old stream-K test ranked).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search.cost_model import CostModel, gemm_estimate  # noqa: E402
from tsopt.search.evolve import space_completer  # noqa: E402

HERE = ROOT / "bench" / "tune_gpu"
ARCHIVES = {"r4": HERE / "results-round4" / "studies.db.tar.xz",
            "r5": HERE / "results-round5" / "studies.db.tar.xz",
            "r6": HERE / "results-round6" / "studies.db.tar.xz",
            "r7": HERE / "results-round7" / "studies.db.tar.xz"}


def spearman(a: list[float], b: list[float]) -> float:
    ranks = [np.argsort(np.argsort(x)) for x in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


def measured(db: Path, name: str) -> list[tuple[dict, float]]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    return [(dict(t.params), float(t.value)) for t in study.trials if t.value is not None]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    work = Path(tempfile.mkdtemp())
    for archive in ARCHIVES.values():
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
    out: dict = {"rank_correlation": {}}
    shapes = {"128x8192x8192": ("r5-128x8192x8192", "r6-128x8192x8192", "r6b-128x8192x8192",
                                "r7-128x8192x8192"),
              "64x4096x4096": ("r5-64x4096x4096", "r6-64x4096x4096", "r6b-64x4096x4096")}
    for shape, names in shapes.items():
        m, n, k = (int(x) for x in shape.split("x"))
        sizes = {"m": m, "n": n, "k": k}
        rows = [(1 / value, gemm_estimate(params, sizes).relative)  # type: ignore[union-attr]
                for name in names for params, value in measured(work / f"{name}.db", name)]
        out["rank_correlation"][shape] = {
            "studies": list(names), "candidates": len(rows),
            "spearman_ratio_vs_minus_estimate": round(spearman([r for r, _ in rows],
                                                               [-e for _, e in rows]), 3)}

    sizes = {"m": 128, "n": 8192, "k": 8192}
    winner = min(measured(work / "r6-128x8192x8192.db", "r6-128x8192x8192"), key=lambda r: r[1])
    other = measured(work / "r6b-128x8192x8192.db", "r6b-128x8192x8192")
    model = CostModel(sizes).fit([p for p, _ in other], [v for _, v in other])
    out["128x8192x8192"] = {
        "r6_winner": {"measured_ratio": round(1 / winner[1], 3),
                      "analytical": round(gemm_estimate(winner[0], sizes).relative, 2),  # type: ignore[union-attr]
                      "learned_on_r6b": round(math.exp(model.predict([winner[0]])[0]), 3)},
        "r6b_best_measured": {
            "measured_ratio": round(1 / min(v for _, v in other), 3),
            "analytical": round(gemm_estimate(min(other, key=lambda r: r[1])[0], sizes).relative, 2),  # type: ignore[union-attr]
            "analytical_best": round(min(gemm_estimate(p, sizes).relative for p, _ in other), 2),  # type: ignore[union-attr]
            "learned_best": round(math.exp(min(model.predict([p for p, _ in other]))), 3)},
        "r6b_measurements": len(other)}

    basin: dict[str, dict[str, int]] = {}
    for name in ("r4-64x4096x4096", "r5-64x4096x4096"):
        counts: dict[str, int] = {}
        for params, _ in measured(work / f"{name}.db", name):
            family = (f"split_k={params.get('split_k')} cluster={params.get('cluster')} "
                      f"stream_k={params.get('stream_k')} persistent={params.get('persistent')}")
            counts[family] = counts.get(family, 0) + 1
        basin[name] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    out["64x4096x4096_families"] = basin

    import sqlite3

    with sqlite3.connect(work / "r7-8192x8192x8192.db") as db:
        searches = db.execute("select count(*), sum(seconds), sum(bounded is not null) "
                              "from tsopt_ts_search").fetchone()
        builds = db.execute("select count(*), sum(compile_seconds) from tsopt_build").fetchone()
    study = optuna.load_study(study_name="r6b-8192x8192x8192",
                              storage=f"sqlite:///{work / 'r6b-8192x8192x8192.db'}")
    start = min(t.datetime_start for t in study.trials)
    t42 = study.trials[42]
    with sqlite3.connect(work / "r6b-8192x8192x8192.db") as db:
        built42 = db.execute(
            "select count(*) from tsopt_candidate c join tsopt_build b on b.genome_hash = "
            "c.genome_hash where c.trial_number = 42").fetchone()[0]
    out["8192^3_build_side"] = {
        "r7_exhaustive_searches": searches[0], "r7_search_seconds": round(searches[1], 1),
        "r7_searches_cut_at_bound": searches[2], "r7_builds": builds[0],
        "r7_compile_seconds": round(builds[1], 1),
        "r6b_trial_42": {"asked_after_s": round((t42.datetime_start - start).total_seconds(), 1),
                         "state": t42.state.name, "built": bool(built42),
                         **{k: t42.params.get(k) for k in ("tile_m", "tile_n", "stages",
                                                            "cluster", "stream_k")}}}

    space = get_space("gemm")
    problem = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
    known = json.loads((HERE / "known-round4.json").read_text())
    incumbent = next(Genome.from_dict(e["genome"]) for e in known["gemm:bf16:8192x8192x8192"]
                     if e["genome_hash"].startswith("8bb0108a3dbb"))
    params = space.params_of(incumbent)
    completed = space_completer(space, problem, None)(space.coupled({**params, "stream_k": True}),
                                                      random.Random(0))
    big = {"m": 8192, "n": 8192, "k": 8192}
    out["8192^3"] = {"incumbent_8bb0108a3dbb": round(gemm_estimate(params, big).relative, 3),  # type: ignore[union-attr]
                     "its_stream_k_neighbour_completed": round(
                         gemm_estimate(completed, big).relative, 3)}  # type: ignore[union-attr]
    out["command"] = ("CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/tune_gpu/analysis/round6_model.py"
                      " --out bench/tune_gpu/analysis/round6_model.json")
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
