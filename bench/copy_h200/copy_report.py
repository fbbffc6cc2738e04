"""Summarise measured copy bundles: best genome, GB/s, ratio to torch copy, the seed beside it.

    python bench/copy_h200/copy_report.py bench/copy_h200/copy-4096-r1 bench/copy_h200/copy-16384-r1 \
        --out bench/copy_h200/RESULTS.md

Each argument is a directory holding the bundle's ``manifest.json`` and the
``results.json`` that ``tsopt measure`` wrote on the GPU machine.
"""

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tsopt.core.genome import Genome  # noqa: E402


def describe(genome: Genome) -> str:
    g = genome.genes
    load = genome.task("load")
    store = genome.task("store")
    depth = sum(1 for p in load.ops if p.section == "head" and p.op == "tma_load")
    inflight = sum(1 for p in store.ops if p.section == "head" and p.op == "read")
    delayed = any(p.section == "tail" and p.op == "release" for p in store.ops)
    early = [p.op for p in store.ops if p.section == "loop"]
    order = "release<store" if early.index("release") < early.index("store") else "store<release"
    return (
        f"box {g['box_rows']}x{g['box_cols']}, {g['stages']} stages, {g['store_warps']} store warps "
        f"@{g['store_warp']}, load warp {g['load_warp']}, regs {g['load_regs']}/{g['store_regs']}, "
        f"vector {g['vector']}, chunk {g['chunk']}, raster {g['raster']}, "
        f"{'persistent x' + str(g['ctas_per_sm']) if g['persistent'] else 'one CTA per work tile'}, "
        f"prefetch {depth}, in flight {inflight}{' (delayed release)' if delayed else ''}, {order}"
    )


def summarise(directory: Path) -> dict:
    manifest = json.loads((directory / "manifest.json").read_text())
    results = json.loads((directory / "results.json").read_text())
    genomes = {
        c["genome_hash"]: (Genome.from_dict(c["genome"]), c.get("origin"))
        for c in manifest["candidates"]
    }
    rows = results["measurements"]
    ok = sorted(
        (m for m in rows if m["status"] == "ok"), key=lambda m: (m["median_us"], m["genome_hash"])
    )
    seed = next((m for m in rows if genomes[m["genome_hash"]][1] == "seed"), None)
    best = ok[0]
    timings = [b["median_us"] for b in results.get("baseline_timings", [])] or [
        b["median_us"] for b in results.get("baselines", [])
    ]
    return {
        "problem": manifest["problem"],
        "device": results.get("device"),
        "candidates": len(rows),
        "statuses": dict(Counter(m["status"] for m in rows)),
        "baseline_us": statistics.median(timings) if timings else None,
        "baseline_spread_pct": (100 * (max(timings) - min(timings)) / min(timings))
        if len(timings) > 1
        else 0.0,
        "best": {
            **best,
            "genome": genomes[best["genome_hash"]][0].to_dict(),
            "described": describe(genomes[best["genome_hash"]][0]),
        },
        "top5": [{k: m[k] for k in ("genome_hash", "median_us", "rate", "ratio")} for m in ok[:5]],
        "seed": seed and {**seed, "described": describe(genomes[seed["genome_hash"]][0])},
        "run_id": results.get("run_id"),
    }


def statuses(summary: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    summaries = [summarise(d) for d in args.bundles]
    lines = [
        "| problem | candidates measured | best genome | best GB/s | best / torch copy | "
        "tutorial schedule GB/s | tutorial / torch copy |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        p, b, seed = s["problem"], s["best"], s["seed"]
        lines.append(
            f"| {p['dtype']} {p['rows']}x{p['cols']} | {s['candidates']} ({statuses(s)}) "
            f"| `{b['genome_hash'][:12]}` | {b['rate']:.0f} | {b['ratio']:.3f} | "
            f"{seed['rate']:.0f} | {seed['ratio']:.4f} |"
            if seed and seed["status"] == "ok"
            else f"| {p['dtype']} {p['rows']}x{p['cols']} | {s['candidates']} | `{b['genome_hash'][:12]}` | "
            f"{b['rate']:.0f} | {b['ratio']:.3f} | {seed and seed['status']} | - |"
        )
    lines.append("")
    for s in summaries:
        p = s["problem"]
        lines.append(
            f"- {p['rows']}x{p['cols']} best: {s['best']['described']}; "
            f"{s['best']['median_us']:.2f} us (p10 {s['best']['p10_us']:.2f}, p90 "
            f"{s['best']['p90_us']:.2f}); torch copy {s['baseline_us']:.2f} us "
            f"(baseline spread over the run {s['baseline_spread_pct']:.1f} %), {s['device']}."
        )
        if s["seed"]:
            lines.append(
                f"  tutorial schedule: {s['seed']['described']}; {s['seed']['median_us']:.1f} us."
            )
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(summaries, indent=2, sort_keys=True))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
