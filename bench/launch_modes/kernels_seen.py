"""Which GPU kernels a script runs: the script run under ``torch.profiler``, every device kernel
listed by name with its count, launch grid and mean time.

Round 6 of bench/launch_modes asks why cuBLAS reads 4.8 % slower in the independent graph
script than in the runner's graph mode at decode-heavy-k (4x2048x16384), while the candidate
reads only 2.7 % slower: if the two captures of the same ``torch.matmul(a, b.t(), out=d)``
run different cuBLAS kernels (another algorithm, a split-K with a reduction), the names and
grids say so.

    python3 bench/launch_modes/kernels_seen.py --out seen.json -- \\
        bench/launch_modes/graph_check.py --bundles B --out /tmp/x.json

The profiler slows the host, not the kernels' choice: cuBLAS picks its algorithm from the
problem, the handle's workspace and whether the stream is capturing. Torch and the standard
library only.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def kernels_of(trace: dict) -> list[dict]:
    """The trace's device kernels grouped by (name, grid, block), most time first."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for event in trace.get("traceEvents", []):
        if event.get("cat") != "kernel":
            continue
        args = event.get("args", {})
        key = (event["name"], str(args.get("grid")), str(args.get("block")))
        groups[key].append(float(event.get("dur", 0.0)))
    rows = [{"name": name, "grid": grid, "block": block, "count": len(durs),
             "mean_us": round(sum(durs) / len(durs), 3), "total_us": round(sum(durs), 1)}
            for (name, grid, block), durs in groups.items()]
    return sorted(rows, key=lambda r: -r["total_us"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("script", type=Path, help="the script to run, then its arguments")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    script_args = [a for a in ns.args if a != "--"]
    sys.argv = [str(ns.script), *script_args]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        try:
            runpy.run_path(str(ns.script), run_name="__main__")
        except SystemExit as done:
            code = done.code
        else:
            code = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    rows = kernels_of(trace)
    ns.out.write_text(json.dumps({
        "script": str(ns.script), "args": script_args, "exit": code,
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "kernels": rows}, indent=1))
    for row in rows[:12]:
        print(f"{row['count']:6d} x {row['mean_us']:9.2f} us  grid {row['grid']:>14} "
              f"block {row['block']:>12}  {row['name'][:90]}")
    return 0 if code in (0, None) else int(code)


if __name__ == "__main__":
    sys.exit(main())
