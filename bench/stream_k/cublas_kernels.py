"""Which cuBLAS kernels ``torch.matmul`` launches for the issue-#13 shapes on this GPU (torch
and the standard library only): the kernel names, which carry the tile, cluster and split
choices of cuBLAS's heuristic, and each one's share of the GPU time.

    python3 bench/stream_k/cublas_kernels.py --out cublas-kernels.json   # on the H200
"""

from __future__ import annotations

import argparse
import json

import torch

SHAPES = [(128, 8192, 8192), (64, 4096, 4096), (16, 4096, 4096), (64, 8192, 8192),
          (16, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 8192), (3000, 2008, 1000),
          (1024, 1024, 1024), (8192, 1024, 8192), (2048, 2048, 16384)]


def kernels(m: int, n: int, k: int) -> list[dict[str, object]]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        torch.matmul(a, b.t())
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            torch.matmul(a, b.t())
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if total > 0 and event.count > 0:
            rows.append({"name": event.key, "calls": event.count,
                         "us_per_call": total / event.count})
    return sorted(rows, key=lambda r: -float(r["us_per_call"]) * int(r["calls"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "shapes": {}}
    for m, n, k in SHAPES:
        doc["shapes"][f"{m}x{n}x{k}"] = kernels(m, n, k)
        top = doc["shapes"][f"{m}x{n}x{k}"][:2]
        print(f"{m}x{n}x{k}: " + "; ".join(f"{r['name'][:90]} {r['us_per_call']:.1f}us x{r['calls']}"
                                           for r in top), flush=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
