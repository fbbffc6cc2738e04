"""The H200's achievable HBM bandwidth: a large device-to-device copy through torch.

The ceiling that copy and memory-bound GEMM results are compared with. Counts bytes read plus
bytes written; CUDA events around each copy; median and p10-p90 over ``--runs`` copies after a
warm-up; random data. Torch and the standard library only::

    python3 bench/hbm_copy/copy_bandwidth.py --gib 8 --runs 30 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=8.0, help="size of the source tensor")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    n = int(args.gib * 2**30) // 2
    src = torch.randn(n, device="cuda", dtype=torch.float32).to(torch.float16)
    dst = torch.empty_like(src)
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(args.runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    assert torch.equal(dst, src)
    moved = 2 * src.numel() * src.element_size()
    rates = sorted(moved / t / 1e12 for t in times)
    result = {"device": torch.cuda.get_device_name(), "bytes_moved": moved, "runs": args.runs,
              "tb_per_s_median": statistics.median(rates), "tb_per_s_p10": rates[len(rates) // 10],
              "tb_per_s_p90": rates[(9 * len(rates)) // 10], "torch": torch.__version__}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
