"""Where the analytical cost model ranks each shape's best-known schedules in the GEMM space
(CPU only; the evidence behind the survey of ``tsopt.search.evolve``).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/tune_gpu/analysis/round9_space_rank.py \\
        --out bench/tune_gpu/analysis/round9_space_rank.json

For every GEMM problem of the shipped seed library: 20,000 random draws of the genes the
model reads (the space's choices, through ``SearchSpace.coupled``), ranked by
``gemm_estimate``; for each of the problem's library entries (measured paired ratios on the
H200), the share of draws the model ranks behind it. Draws are not checked for legality
(the survey does that for the few it keeps), so the share is over the model's view of the
space. Also, from round 6's committed study databases, what the first proposals made by
random draws (before the learned model) measured at 64x4096x4096 and 128x8192x8192.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search.cost_model import ANALYTICAL_GENES, gemm_estimate  # noqa: E402
from tsopt.search_spaces.gemm.config import NUMERIC_CHOICES, STRUCTURE_CHOICES  # noqa: E402

DRAWS = 20_000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    space = get_space("gemm")
    choices = {**NUMERIC_CHOICES, **STRUCTURE_CHOICES}
    genes = {name: choices[name] for name in ANALYTICAL_GENES if name in choices}
    rng = random.Random(1)
    draws = [space.coupled({n: rng.choice(v) for n, v in genes.items()}) for _ in range(DRAWS)]
    library = json.loads((ROOT / "tsopt" / "data" / "seed_library.json").read_text())["entries"]
    problems = sorted({(e["problem"]["m"], e["problem"]["n"], e["problem"]["k"])
                       for e in library if e["space"] == "gemm"})
    shapes = []
    for m, n, k in problems:
        sizes = {"m": m, "n": n, "k": k}
        estimates = sorted(gemm_estimate(d, sizes).relative for d in draws)  # type: ignore[union-attr]
        entries = []
        for e in library:
            p = e["problem"]
            if e["space"] != "gemm" or (p["m"], p["n"], p["k"]) != (m, n, k):
                continue
            g = {**e["genome"]["structure"], **e["genome"]["numeric"]}
            est = gemm_estimate(g, sizes).relative  # type: ignore[union-attr]
            behind = sum(x > est for x in estimates) / len(estimates)
            entries.append({"genome": e["genome_hash"][:12], "ratio": e["ratio"],
                            "estimate": round(est, 4), "share_ranked_behind": round(behind, 4)})
        shapes.append({"problem": f"{m}x{n}x{k}", "model_best_of_draws": round(estimates[0], 4),
                       "entries": entries})
        best = max(entries, key=lambda x: x["ratio"])
        print(f"{m}x{n}x{k}: best known {best['genome']} ({best['ratio']:.3f}x) ranked ahead of "
              f"{100 * best['share_ranked_behind']:.1f} % of {DRAWS} draws", flush=True)

    first: dict[str, list[dict[str, object]]] = {}
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(ROOT / "bench/tune_gpu/results-round6/studies.db.tar.xz") as tar:
            tar.extractall(scratch, filter="data")
        for name in ("r6-64x4096x4096", "r6b-64x4096x4096", "r6-128x8192x8192",
                     "r6b-128x8192x8192"):
            db = next(Path(scratch).rglob(f"{name}.db"))
            study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
            rows = []
            for t in study.trials:
                how = (t.user_attrs.get("evolve") or {}).get("how")
                if how in ("random", "explore") and t.value:
                    rows.append({"trial": t.number, "how": how, "ratio": round(1 / t.value, 3),
                                 "stream_k": t.params.get("stream_k")})
            first[name] = rows[:12]
            sk = [r["ratio"] for r in rows[:12] if r["stream_k"]]
            print(f"{name}: first random draws {len(rows[:12])}, stream-K {len(sk)} at "
                  f"{min(sk, default=0):.2f}-{max(sk, default=0):.2f}x", flush=True)
    args.out.write_text(json.dumps({"draws": DRAWS, "shapes": shapes,
                                    "round6_first_random_draws": first}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
