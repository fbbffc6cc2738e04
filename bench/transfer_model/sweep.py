"""The transfer model at more settings, leave-one-shape-out, without the heuristic: three
(rounds, rate) pairs, and the default with its target clipped (a candidate more than
``clip`` log-slower than its shape's best counts as only that slow): whether regularising it,
or spending it on the fast end, changes the verdict (bench/transfer_model/README.md).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/transfer_model/sweep.py   # -> sweep.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from loso import score  # noqa: E402

from tsopt.app.corpus import load_corpus  # noqa: E402
from tsopt.search.transfer import fit_tables, shape_tables  # noqa: E402

SETTINGS = ((40, 0.1, None), (150, 0.05, None), (400, 0.05, None),
            (150, 0.2, 0.1), (150, 0.2, 0.2), (150, 0.2, 0.4))


def main() -> int:
    records, _ = load_corpus(HERE.parents[1] / "corpus")
    tables = shape_tables(records)
    scores: dict[tuple[int, float, float | None], list[dict[str, float]]] = {
        s: [] for s in SETTINGS}
    for held in tables:
        others = [t for t in tables if t.problem_key != held.problem_key]
        ratios = np.array(held.ratios)
        for rounds, rate, clip in SETTINGS:
            model = fit_tables(others, rounds=rounds, rate=rate, clip=clip)
            scores[(rounds, rate, clip)].append(score(model.predict(held.genes, held.sizes),
                                                      ratios))
    out: dict[str, dict[str, object]] = {}
    for (rounds, rate, clip), per_shape in scores.items():
        mean: dict[str, object] = {m: round(float(np.mean([s[m] for s in per_shape])), 4)
                                   for m in ("spearman", "regret_top1", "regret_top8")}
        mean["regret_top8_per_shape"] = [round(s["regret_top8"], 4) for s in per_shape]
        out[f"rounds={rounds},rate={rate},clip={clip}"] = mean
    out["shapes"] = {"order": [t.problem_key for t in tables]}
    print(json.dumps(out, indent=1))
    (HERE / "sweep.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
