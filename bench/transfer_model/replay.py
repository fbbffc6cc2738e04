"""``evolve`` replayed on issue #28's oracle tables, its cost model starting from the
analytical estimate or from the shipped cross-shape model: how near each gets to the table's
best in its first 8, 16 and 32 measurements. (issue #28 item 5: does the prior help the
search, not only the ranking?)

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/transfer_model/replay.py \\
        --oracle bench/oracle --seeds 5 --out bench/transfer_model/replay.json

after ``python3 -m scripts.evidence unpack oracle`` (the plans hold each candidate's params).

Each table's correct candidates are the universe (``Evolution(universe=...)``, the pure
sampler with no Optuna and no study): the survey is the model's best member of each family,
a move goes to the nearest unseen member, and each proposal is told its measured relative
time (1 / ratio, no noise). No seed library and no re-fit: this is the search alone, from
nothing. The model judged is the shipped one (``tsopt/data/cost_model.json``, fitted on the
corpus, which holds none of these problems). Regret after b measurements = 1 - (best ratio
among them / the table's best). A replay within a table is not a tune: a real survey draws
from the whole space, and a table of 110 or 330 holds few neighbours of any member.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.core.problem import parse_problem_spec  # noqa: E402
from tsopt.search.cost_model import CostModel  # noqa: E402
from tsopt.search.evolve import Evolution, Observation, params_key  # noqa: E402
from tsopt.search.transfer import load_model  # noqa: E402

BUDGETS = (8, 16, 32)
PRIORS = ("analytical", "transfer")


def table_of(path: Path, plans: Path) -> tuple[str, Any, list[tuple[dict[str, Any], float]]]:
    """(name, problem, [(params, ratio)]) of one oracle table's correct candidates."""
    doc = json.loads(path.read_text())
    params = {c["genome_hash"]: c["params"]
              for c in json.loads((plans / f"{doc['name']}.json").read_text())["candidates"]}
    rows = [(params[r["genome_hash"]], float(r["ratio"])) for r in doc["rows"]
            if r.get("status") == "ok" and r.get("ratio") and r["genome_hash"] in params]
    return doc["name"], parse_problem_spec(doc["problem"]), rows


def replay(rows: list[tuple[dict[str, Any], float]], sizes: dict[str, int], prior: Any,
           seed: int) -> list[float]:
    """The best ratio after each measurement, for ``max(BUDGETS)`` measurements."""
    choices: dict[str, list[Any]] = {}
    for params, _ in rows:
        for name, value in params.items():
            if value not in choices.setdefault(name, []):
                choices[name].append(value)
    ratio = {params_key(p): r for p, r in rows}
    evolution = Evolution(choices, seed, sizes=sizes, universe=[p for p, _ in rows],
                          model=CostModel(sizes, prior=prior))
    history: list[Observation] = []
    best, curve = 0.0, []
    while len(history) < min(max(BUDGETS), len(rows)):
        params = evolution.propose(history)
        r = ratio[params_key(params)]
        history.append(Observation(params, 1.0 / r))
        best = max(best, r)
        curve.append(best)
    return curve


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--oracle", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    model = load_model()
    assert model is not None, "no shipped model: run `tsopt corpus products`"
    out_rows = []
    for path in sorted(args.oracle.glob("*.table.json")):
        name, problem, rows = table_of(path, args.oracle / "plans")
        if problem.key in model.shapes:
            raise SystemExit(f"error: the shipped model was fitted on {problem.key}")
        sizes, top = dict(problem.sizes), max(r for _, r in rows)
        row: dict[str, Any] = {"name": name, "problem": problem.key, "candidates": len(rows),
                               "best_ratio": round(top, 4)}
        for prior_name in PRIORS:
            prior = (None if prior_name == "analytical" else
                     (lambda genes, s=sizes: model.predict(genes, s)))
            curves = [replay(rows, sizes, prior, seed) for seed in range(args.seeds)]
            row[prior_name] = {str(b): {
                "regret_median": round(statistics.median(1 - c[b - 1] / top for c in curves), 4),
                "regret_worst": round(max(1 - c[b - 1] / top for c in curves), 4)}
                for b in BUDGETS}
        print(json.dumps(row), flush=True)
        out_rows.append(row)
    mean = {p: {str(b): round(statistics.mean(r[p][str(b)]["regret_median"] for r in out_rows), 4)
                for b in BUDGETS} for p in PRIORS}
    doc = {"question": "evolve replayed on each oracle table, analytical vs transfer prior",
           "command": "python bench/transfer_model/replay.py " + " ".join(sys.argv[1:]),
           "seeds": args.seeds, "budgets": list(BUDGETS), "rows": out_rows,
           "mean_of_median_regret": mean}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(mean, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
