"""Issue #13's targets table from the measured bundles (``measure.sh``'s results).

    python3 bench/targets_h200/summarise.py bench/targets_h200/results --out bench/targets_h200/targets

Per problem and genome: the paired ratio to the vendor baseline of each pass [95 %], their
mean, the candidate's median time and the bandwidth it implies over the compulsory traffic
(GEMM: A, B and D once; copy: read and write) as a fraction of the median a device copy
moved on this H200 (read from bench/hbm_copy/hbm_copy.json, 4.21 TB/s), a GEMM's TFLOP/s, and
whether the issue's target is met by the best genome's mean ratio.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import statistics
from pathlib import Path

HBM_COPY = Path(__file__).resolve().parents[1] / "hbm_copy" / "hbm_copy.json"
COPY_TB_S = round(json.loads(HBM_COPY.read_text())["tb_per_s_median"], 2)
"""The committed 8 GiB device-to-device copy on an H200 (bench/hbm_copy), its median TB/s."""
TARGETS = {
    "gemm-bf16-128x8192x8192": 1.00, "gemm-bf16-16x8192x8192": 1.00,
    "gemm-bf16-16x4096x4096": 1.00, "gemm-bf16-64x8192x8192": 1.00,
    "gemm-bf16-64x4096x4096": 1.00, "gemm-bf16-3000x2008x1000": 0.95,
    "gemm-bf16-1024x1024x1024": 0.90, "gemm-bf16-8192x8192x8192": 0.99,
    "gemm-bf16-8192x1024x8192": 0.99, "gemm-bf16-2048x2048x16384": 0.99,
    "gemm-bf16-4096x4096x4096": 0.99, "copy-fp16-16384x16384": 1.00,
    "copy-fp16-4096x4096": 0.98,
}
"""Issue #13's goals: ratio to cuBLAS (GEMM) or torch copy (copy)."""


def traffic_bytes(problem: str) -> int:
    sizes = [int(x) for x in re.search(r"(\d+(?:x\d+)+)$", problem).group(1).split("x")]
    if problem.startswith("gemm"):
        m, n, k = sizes
        return 2 * (m * k + n * k + m * n)
    rows, cols = sizes
    return 2 * 2 * rows * cols


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    seen: dict[str, dict[str, list[dict]]] = {}
    paths = sorted(p for folder in args.folders for p in glob.glob(str(folder / "*.results.json")))
    for path in paths:
        for m in json.loads(Path(path).read_text())["measurements"]:
            if m["status"] == "ok" and m.get("ratio"):
                seen.setdefault(m["problem_key"], {}).setdefault(m["genome_hash"], []).append(m)
    rows = []
    for problem, genomes in sorted(seen.items()):
        for genome, ms in genomes.items():
            mean = statistics.fmean(m["ratio"] for m in ms)
            us = statistics.median(m["median_us"] for m in ms)
            tb_s = traffic_bytes(problem) / (us * 1e-6) / 1e12
            flops = (2 * math.prod(int(x) for x in problem.rsplit("-", 1)[1].split("x"))
                     if problem.startswith("gemm") else None)
            rows.append({
                "problem": problem, "genome": genome[:12], "passes": [
                    [round(m["ratio"], 3), round(m["ratio_lo"], 3), round(m["ratio_hi"], 3)]
                    for m in ms],
                "mean_ratio": round(mean, 3), "median_us": round(us, 2),
                "tb_s": round(tb_s, 2), "of_copy": round(tb_s / COPY_TB_S, 3),
                "tflop_s": round(flops / (us * 1e-6) / 1e12, 1) if flops else None,
                "target": TARGETS.get(problem)})
    best = {}
    for row in rows:
        if row["problem"] not in best or row["mean_ratio"] > best[row["problem"]]["mean_ratio"]:
            best[row["problem"]] = row
    for row in rows:
        row["best"] = best[row["problem"]] is row
        row["met"] = (row["target"] is not None and row["best"]
                      and row["mean_ratio"] >= row["target"])
    args.out.with_suffix(".json").write_text(json.dumps(
        {"copy_tb_s": COPY_TB_S, "rows": rows}, indent=1))
    lines = ["| problem | genome | ratio per pass [95 %] | mean | target | met | median µs | TB/s "
             f"| of {COPY_TB_S:.2f} TB/s | TFLOP/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        passes = ", ".join(f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in r["passes"])
        met = ("**yes**" if r["met"] else "no") if r["best"] and r["target"] else ""
        lines.append(f"| {r['problem']} | {r['genome']} | {passes} | {r['mean_ratio']:.3f} | "
                     f"{r['target'] or ''} | {met} | {r['median_us']} | {r['tb_s']} | "
                     f"{r['of_copy']:.0%} | {r['tflop_s'] or ''} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
