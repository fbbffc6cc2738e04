"""The same package's layer timed on two cards (two ``layer.py`` JSON files): per bucket, each
card's median and worst ratio to cuBLAS over the bucket's Ms, whether it meets the bar there,
and at how many Ms the kernel is faster than cuBLAS on one card and slower on the other.

    python3 bench/llama_layer/cross_card.py results/gen2/layer.json results/h200/layer.json \
        --out results/cross_card.json

Each card's ratio at an M is the median of its passes (``layer.py``); a "flip" is an M whose
ratio is above 1 on one card and below 1 on the other, each beyond that card's own pass spread
at that M (so a flip is not one pass's noise). Refuses two files whose packages' kernels are
not the same genomes (not the same package). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BAR_MEDIAN = 1.00
BAR_WORST = 0.97


def load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    for key in ("device", "kernels", "per_m"):
        if key not in doc:
            raise SystemExit(f"error: {path} is no layer.py document (no {key!r})")
    return doc


def genomes(doc: dict) -> dict[str, str]:
    return {k["name"]: k["genome_hash"] for k in doc["kernels"]}


def side(rows: list[dict]) -> dict:
    ratios = [r["ratio"] for r in rows]
    worst = min(rows, key=lambda r: r["ratio"])
    median = statistics.median(ratios)
    return {"median": median, "worst": worst["ratio"], "worst_m": worst["m"],
            "meets_bar": median >= BAR_MEDIAN and worst["ratio"] >= BAR_WORST}


def clear_side(row: dict) -> int:
    """+1 / -1: faster / slower than cuBLAS beyond the passes' spread at this M; 0: within."""
    spread = row.get("pass_spread") or 0.0
    if row["ratio"] - spread / 2 > 1.0:
        return 1
    if row["ratio"] + spread / 2 < 1.0:
        return -1
    return 0


def compare(a: dict, b: dict) -> dict:
    if genomes(a) != genomes(b):
        raise SystemExit("error: the two files timed different packages (kernel genomes differ)")
    key = lambda r: (r["projection"], r["kernel"])  # noqa: E731
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for name, doc in (("a", a), ("b", b)):
        for row in doc["per_m"]:
            if row.get("kernel") and row.get("ok"):
                groups.setdefault(key(row), {"a": [], "b": []})[name].append(row)
    buckets = []
    for (projection, kernel), rows in groups.items():
        by_m = {r["m"]: r for r in rows["b"]}
        paired = [(r, by_m[r["m"]]) for r in rows["a"] if r["m"] in by_m]
        flips = [ra["m"] for ra, rb in paired if clear_side(ra) * clear_side(rb) == -1]
        shift = statistics.median(rb["ratio"] / ra["ratio"] for ra, rb in paired)
        buckets.append({"projection": projection, "kernel": kernel, "ms": len(paired),
                        "a": side(rows["a"]), "b": side(rows["b"]), "flips": flips,
                        "median_shift": shift})
    return {"a": {"device": a["device"], "command": a.get("command")},
            "b": {"device": b["device"], "command": b.get("command")},
            "bar": {"median": BAR_MEDIAN, "worst": BAR_WORST}, "buckets": buckets,
            "meets": {"a": sum(x["a"]["meets_bar"] for x in buckets),
                      "b": sum(x["b"]["meets_bar"] for x in buckets)},
            "ms_flipped": sum(len(x["flips"]) for x in buckets),
            "ms": sum(x["ms"] for x in buckets)}


def markdown(doc: dict) -> str:
    def cell(s: dict) -> str:
        verdict = "**meets**" if s["meets_bar"] else "misses"
        return f"{s['median']:.3f} / {s['worst']:.3f} (M {s['worst_m']}) {verdict}"

    lines = [f"| projection | kernel | {doc['a']['device']} median / worst | "
             f"{doc['b']['device']} median / worst | b ÷ a (median over Ms) | Ms flipped |",
             "|---|---|---|---|---:|---|"]
    for x in doc["buckets"]:
        flips = ", ".join(map(str, x["flips"])) if x["flips"] else "none"
        lines.append(f"| {x['projection']} | `{x['kernel']}` | {cell(x['a'])} | {cell(x['b'])} | "
                     f"{x['median_shift']:.3f} | {len(x['flips'])} of {x['ms']}: {flips} |")
    lines.append(f"\nBuckets meeting the bar: {doc['meets']['a']} of {len(doc['buckets'])} on "
                 f"{doc['a']['device']}, {doc['meets']['b']} on {doc['b']['device']}. Ms on "
                 f"opposite sides of cuBLAS beyond each card's pass spread: {doc['ms_flipped']} "
                 f"of {doc['ms']}.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--out", type=Path, help="the comparison as JSON")
    args = parser.parse_args()
    doc = compare(load(args.a), load(args.b))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
