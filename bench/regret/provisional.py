"""Round 1 of goal (a) as measured, beside the oracle tables: a provisional reading, not the
regret the protocol defines (README: "Round 1, measured 2026-12-04").

Each study's best round-1 candidate (``results/r1.json``: ``measure_bundles.py`` over the
ship bundles, one pass, graph launch mode) against the best of its problem's oracle table
(``bench/oracle/<name>.table.json``: another call, another day). The protocol's regret is
both measured side by side in one call; this is not that, so its figures carry the
pass-to-pass and machine-to-machine spread of two calls (up to 7.6 % between H200s,
``bench/launch_modes``). Standard library only:

    python3 bench/regret/provisional.py bench/regret/results/r1.json > bench/regret/round1-provisional.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def oracle_best(name: str) -> float:
    doc = json.loads((ROOT / "bench" / "oracle" / f"{name}.table.json").read_text())
    return max(r["ratio"] for r in doc["rows"] if r.get("status") == "ok" and r.get("ratio"))


def main(path: Path) -> int:
    doc = json.loads(path.read_text())
    best: dict[str, dict[int, tuple[float, str, int]]] = {}
    for item in doc["bundles"]:
        seed, name = item["path"].split("-", 1)
        rows = [m for m in (item["results"] or {}).get("measurements", [])
                if m.get("status") == "ok" and m.get("ratio")]
        if rows:
            top = max(rows, key=lambda m: m["ratio"])
            best.setdefault(name, {})[int(seed[1:])] = (top["ratio"], top["genome_hash"][:12],
                                                        len(rows))
    print("| problem | oracle table best | seed 1: best of 16 (genome) | provisional regret "
          "| seed 2: best of 16 (genome) | provisional regret | same winner |")
    print("|---|---|---|---|---|---|---|")
    for name in sorted(best):
        oracle = oracle_best(name)
        cells = []
        for seed in (1, 2):
            if seed in best[name]:
                ratio, genome, _ = best[name][seed]
                cells += [f"{ratio:.3f}x ({genome})", f"{(1 - ratio / oracle) * 100:+.1f} %"]
            else:
                cells += ["not measured (the call's deadline)", ""]
        same = ("yes" if len(best[name]) == 2 and best[name][1][1] == best[name][2][1]
                else "no" if len(best[name]) == 2 else "")
        print(f"| {name} | {oracle:.3f}x | " + " | ".join(cells) + f" | {same} |")
    print(f"\nFrom {path.name}: {doc.get('host')}, started {doc.get('started')}, "
          f"{len(doc['bundles'])} bundles measured, left for want of time: "
          f"{', '.join(Path(p).name for p in doc.get('left', [])) or 'none'}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
