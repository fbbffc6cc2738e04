"""Issue #28 item 8: where a held-out problem's oracle is below cuBLAS, what cuBLAS runs and
what the oracle's best runs instead (torch.profiler on the H200, from bench/wrong_answer's
device call), beside the roofline of each problem.

    python3 bench/where_space_loses/summarise.py [--out bench/where_space_loses/profiles.md]

Reads evidence/wrong_answer.tar.xz (unpacked through scripts.evidence) and the oracle tables
(bench/oracle/<name>.table.json). The profiler's times are eager launches on one buffer set
(L2 warm), not the oracle's graph mode over rotated buffers: they say which kernel cuBLAS picks
and its grid, and the two sides' times under the same conditions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from scripts.evidence import raw_files  # noqa: E402

HBM_TBPS = 4.21  # bench/hbm_copy: the committed H200 copy ceiling
PEAK_TFLOPS = {"bf16": 989.0, "fp16": 989.0}  # H200 SXM dense (tsopt/core/devices.py)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "bench/where_space_loses/profiles.md")
    args = parser.parse_args()
    doc = json.loads((raw_files("wrong_answer") / "results/wrong_answer.json").read_text())
    lines = ["| problem | oracle (graph) | cuBLAS kernel | grid x block | cuBLAS us | oracle best "
             "(tsopt) grid | tsopt us | roofline us (flops, bytes) |", "|---|---|---|---|---|---|---|---|"]
    for prof in doc["profiles"]:
        p = prof["problem"]
        m, n, k = p["m"], p["n"], p["k"]
        name = prof["label"].split(":", 1)[1]
        table = json.loads((ROOT / "bench/oracle" / f"{name}.table.json").read_text())
        best = max((r for r in table["rows"] if r.get("confirmed") and r.get("ratio")),
                   key=lambda r: r["ratio"])
        flops_us = 2 * m * n * k / (PEAK_TFLOPS[p["dtype"]] * 1e6)
        bytes_us = 2 * (m * k + n * k + m * n) / (HBM_TBPS * 1e6)
        cub = max(prof["cublas"], key=lambda r: r["median_us"] * r["calls"])
        ours = max(prof["tsopt"], key=lambda r: r["median_us"] * r["calls"])
        lines.append(
            f"| {name} {p['dtype']} {m}x{n}x{k} | {best['ratio']:.3f}x | `{cub['name'][:60]}` | "
            f"{cub['grid']} x {cub['block']} | {cub['median_us']:.1f} | {ours['grid']} x "
            f"{ours['block']} | {ours['median_us']:.1f} | {max(flops_us, bytes_us):.1f} "
            f"({flops_us:.1f}, {bytes_us:.1f}) |")
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
