"""Round 1's regret per condition, measured: the plans' candidates (``plans.py``) built and
timed on the H200 by ``bench/oracle/build_and_measure.py``, one bundle per held-out problem,
beside the oracle's best genomes.

    .venv/bin/python bench/library_refit/summarise.py \\
        --results bench/library_refit/results/call*.json --out bench/library_refit/measured.json

Per problem and condition (``evaluate.py``'s): the best measured pick's paired ratio in the
screen (every candidate of the bundle timed alike, one runner call), the reference (the best
of the oracle's top genomes, in the same screen), and regret = 1 - best pick / reference, for
the first pick, the first 8 and all 16, and which origin (copy, refit, evolve) the best pick
came from; the confirmation's figures (runner defaults) where it timed both. One pass on one
machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def regret(part: list[tuple[float | None, str]], best: float) -> float | None:
    """1 - the best measured of ``part`` / ``best``; None where none of it was measured."""
    got = [v for v, _ in part if v is not None]
    return None if not got else round(1.0 - max(got) / best, 4)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--picks", type=Path, required=True)
    parser.add_argument("--plans", type=Path, default=Path(__file__).parent / "plans")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    picks: dict[str, list[dict[str, Any]]] = json.loads(args.picks.read_text())
    measured: dict[str, dict[str, float]] = {}
    confirmed: dict[str, dict[str, float]] = {}
    runs: dict[str, dict[str, Any]] = {}
    for path in args.results:
        doc = json.loads(path.read_text())
        for plan in doc.get("plans", []):
            for part, into in (("screen", measured), ("confirm", confirmed)):
                for m in (plan.get(part) or {}).get("measurements", []):
                    if m.get("status") == "ok" and m.get("ratio"):
                        into.setdefault(m["problem_key"], {})[m["genome_hash"]] = float(
                            m["ratio"])
            runs[f"{path}:{plan['name']}"] = {
                "host": doc.get("host"), "started": doc.get("started"),
                "device": (plan.get("screen") or {}).get("device"),
                "screen_settings": plan.get("screen_settings")}
    rows = []
    for plan_path in sorted(args.plans.glob("refit-*.json")):
        plan = json.loads(plan_path.read_text())
        name = plan["name"].removeprefix("refit-")
        key = "gemm-" + plan["problem"].split(":", 1)[1].replace(":", "-")
        ratios = measured.get(key, {})
        reference = [ratios[h] for h in plan["reference"] if h in ratios]
        if not reference:
            continue
        best = max(reference)
        row: dict[str, Any] = {"target": name, "problem": plan["problem"],
                               "candidates": len(plan["candidates"]),
                               "measured": sum(1 for c in plan["candidates"]
                                               if c["genome_hash"] in ratios),
                               "reference_ratio": round(best, 4),
                               "best_measured_ratio": round(max(ratios.values()), 4)}
        for condition_key, chosen in picks.items():
            target, condition = condition_key.split("/", 1)
            if target != name:
                continue
            values = [(ratios.get(p["genome_hash"]), p["origin"].split(":")[0]) for p in chosen]

            timed = [(v, o) for v, o in values if v is not None]
            sure = confirmed.get(key, {})
            sure_ref = [sure[h] for h in plan["reference"] if h in sure]
            sure_picks = [sure[p["genome_hash"]] for p in chosen if p["genome_hash"] in sure]
            top = max(timed, key=lambda vo: vo[0]) if timed else (None, None)
            row[condition] = {"picks": len(values), "timed": len(timed),
                              "regret_top1": regret(values[:1], best),
                              "regret_top8": regret(values[:8], best),
                              "regret_top16": regret(values[:16], best),
                              "best_ratio": None if top[0] is None else round(top[0], 4),
                              "best_from": top[1],
                              "confirmed_regret_top16": (
                                  round(1.0 - max(sure_picks) / max(sure_ref), 4)
                                  if sure_picks and sure_ref else None)}
        rows.append(row)
        print(json.dumps(row))
    args.out.write_text(json.dumps({"question": "round 1's regret per condition, measured",
                                    "runs": runs, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
