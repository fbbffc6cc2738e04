"""The held-out problems' round-1 picks as oracle plans, to be built and measured on the H200
beside each problem's oracle best (``bench/oracle/build_and_measure.py``).

    .venv/bin/python bench/library_refit/plans.py --picks PICKS.json \\
        --out bench/library_refit/plans   # and bench/library_refit/picks-heldout.json

Per held-out problem with an oracle table: every distinct pick of every condition of
``evaluate.py`` (copies, re-fits, evolve's proposals), and the table's :data:`REFERENCE`
best measured genomes (the oracle best among them), so that a condition's regret is
1 - its best pick / the oracle best, both measured in one call. The table is read only for
which genomes are its best (the reference), never to choose a pick.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REFERENCE = 3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--picks", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the plans' folder")
    parser.add_argument("--lean", type=Path, default=HERE / "picks-heldout.json",
                        help="where the held-out picks go without their genomes")
    args = parser.parse_args()
    picks: dict[str, list[dict[str, Any]]] = json.loads(args.picks.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    for path in sorted((ROOT / "bench" / "oracle").glob("*.table.json")):
        table = json.loads(path.read_text())
        name = table["name"]
        plan = json.loads((ROOT / "bench" / "oracle" / "plans" / f"{name}.json").read_text())
        genomes = {c["genome_hash"]: c for c in plan["candidates"]}
        best = sorted((r for r in table["rows"] if r.get("status") == "ok" and r.get("ratio")),
                      key=lambda r: -float(r["ratio"]))[:REFERENCE]
        candidates: dict[str, dict[str, Any]] = {}
        for r in best:
            c = genomes[r["genome_hash"]]
            candidates[c["genome_hash"]] = {"genome_hash": c["genome_hash"],
                                            "origin": "oracle-reference", "family": c["family"],
                                            "conditions": [], "genome": c["genome"]}
        for key, rows in picks.items():
            target, condition = key.split("/", 1)
            if target != name:
                continue
            for p in rows:
                held = candidates.setdefault(p["genome_hash"], {
                    "genome_hash": p["genome_hash"], "origin": p["origin"],
                    "family": p["origin"], "conditions": [], "genome": p["genome"]})
                held["conditions"].append(condition)
        doc = {"format": "tsopt-oracle-plan", "version": 1, "name": f"refit-{name}",
               "space": "gemm", "problem": table["problem"], "arch": "sm_90a",
               "picks_sha256": hashlib.sha256(args.picks.read_bytes()).hexdigest(),
               "reference": [r["genome_hash"] for r in best],
               "candidates": list(candidates.values())}
        out = args.out / f"refit-{name}.json"
        out.write_text(json.dumps(doc, indent=0) + "\n")
        print(f"{out}: {len(candidates)} candidates")
    # The picks of the held-out problems without their genomes (the plans hold those): what
    # summarise.py scores each condition by.
    names = {path.name.removesuffix(".table.json")
             for path in (ROOT / "bench" / "oracle").glob("*.table.json")}
    lean = {key: [{k: p.get(k) for k in ("origin", "genome_hash", "from", "changed")}
                  for p in rows]
            for key, rows in picks.items() if key.split("/", 1)[0] in names}
    args.lean.write_text(json.dumps(lean, indent=0) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
