"""The oracle's best genomes per held-out problem, out of bench/oracle, into one small file.

    python3 -m scripts.evidence unpack oracle        # the plans (the genomes) come back
    python3 bench/regret/oracle_best.py              # writes bench/regret/oracle-best.json

Per problem (``tsopt/data/heldout.json``, in its order): the ``--top`` (default 3) best
*confirmed* candidates of ``bench/oracle/<name>.table.json`` (re-measured with the runner's
defaults), each with its whole genome from the plan and the oracle's figures. Every regret
bundle carries all of them, and the oracle best of a pass is the fastest of them in that
pass: one pass decided the oracle's order, so its second and third may read first today.

Where the space grew after a plan was measured, ``bench/oracle/grown/<name>.grown.table.json``
(the supplement ``choose.py --grown`` draws, with the first table's best three as anchors
measured in the same call) decides instead: its confirmed best, anchors included, are one
pass's order over both, and an anchor outside that best rides along after it (up to
``2 * top`` picks). The entry says which table (``source``) and which cards measured it.

The plans and the grown tables come back with ``python3 -m scripts.evidence unpack oracle``;
a problem whose supplement plan is there without its table is an error, never the first table
alone. Standard library only (the GPU machine reads the output; it never needs the plans). The file
is test data for the search, as the tables are: never library input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ORACLE = ROOT / "bench" / "oracle"
FORMAT = "tsopt-regret-oracle-best"


def oracle_entry(name: str, spec: str, top: int) -> dict:
    grown = ORACLE / "grown" / f"{name}.grown.table.json"
    if (ORACLE / "plans" / f"{name}.grown.json").exists() and not grown.exists():
        # The supplement was drawn for this problem: the first table alone is not its best.
        raise SystemExit(f"error: {grown} is missing: run `python3 -m scripts.evidence "
                         "unpack oracle` first")
    stem = f"{name}.grown" if grown.exists() else name
    table_path = grown if grown.exists() else ORACLE / f"{stem}.table.json"
    plan_path = ORACLE / "plans" / f"{stem}.json"
    if not plan_path.exists():
        raise SystemExit(f"error: {plan_path} is missing: run `python3 -m scripts.evidence "
                         "unpack oracle` first")
    table = json.loads(table_path.read_text())
    plan = json.loads(plan_path.read_text())
    if table["problem"] != spec or plan["problem"] != spec:
        raise SystemExit(f"error: {name}: the table ({table['problem']}) or plan "
                         f"({plan['problem']}) is not the held-out problem {spec}")
    sha = hashlib.sha256(plan_path.read_bytes()).hexdigest()
    if sha not in table["plan_sha256"]:
        raise SystemExit(f"error: {name}: plan sha256 {sha[:12]} is not the table's")
    genomes = {c["genome_hash"]: c["genome"] for c in plan["candidates"]}
    confirmed = sorted((r for r in table["rows"] if r.get("confirmed") and r.get("ratio")),
                       key=lambda r: -r["ratio"])
    if not confirmed:
        raise SystemExit(f"error: {name}: the table has no confirmed candidate")
    chosen = confirmed[:top]
    # The anchors are the first table's best on the card that measured it; a supplement
    # measured on another card may put them below its own draws, and a pair bundle that
    # dropped them would compare a winner against a weaker oracle on the first card.
    chosen += [r for r in confirmed[top:] if r.get("origin") == "anchor"]
    picks = [{"rank": i + 1, "genome_hash": r["genome_hash"], "family": r["family"],
              "origin": r.get("origin"), "ratio": r["ratio"], "ratio_lo": r["ratio_lo"],
              "ratio_hi": r["ratio_hi"], "median_us": r["median_us"],
              "genome": genomes[r["genome_hash"]]}
             for i, r in enumerate(chosen)]
    return {"name": name, "problem": spec, "table_devices": table["devices"],
            "source": stem, "plan_sha256": sha, "oracle": picks}


def compact_json(doc: dict) -> str:
    """``doc`` as JSON with one line per pick: a diff shows which genome moved, and the
    file stays small enough to live beside the README (bench/ is held under 3 MB)."""
    problems = []
    for entry in doc["problems"]:
        head = {k: v for k, v in entry.items() if k != "oracle"}
        picks = ",\n".join("  " + json.dumps(o, sort_keys=True, separators=(",", ":"))
                            for o in entry["oracle"])
        problems.append(json.dumps(head, sort_keys=True)[:-1] + ', "oracle": [\n'
                        + picks + "\n ]}")
    rest = {k: v for k, v in doc.items() if k != "problems"}
    return (json.dumps(rest, indent=1, sort_keys=True)[:-2] + ',\n "problems": [\n'
            + ",\n".join(problems) + "\n]}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "oracle-best.json")
    args = parser.parse_args()
    heldout = json.loads((ROOT / "tsopt" / "data" / "heldout.json").read_text())
    doc = {"format": FORMAT, "version": 1, "heldout_version": heldout["version"],
           "top": args.top,
           "doc": "The oracle's best confirmed genomes per held-out problem (bench/oracle "
                  "tables, one pass each), carried into every regret bundle; test data, "
                  "never library input.",
           "problems": [oracle_entry(p["name"], p["problem"], args.top)
                        for p in heldout["problems"]]}
    args.out.write_text(compact_json(doc))
    for p in doc["problems"]:
        print(p["name"], p["problem"], " ".join(
            f"{o['genome_hash'][:12]}:{o['ratio']:.3f}" for o in p["oracle"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
