"""Does a kernel with cross-CTA waits finish while another kernel holds SMs? (issue #29, item 2)

On the H200 (torch, CuPy, the standard library): for each kernel ``build.py`` made, and for a
hog holding 0, 1, 33, 66 and 131 of the 132 SMs, this

1. launches the hog on a stream of its own: N CTAs, each asking for more than half of an
   SM's shared memory (so no two share an SM) and spinning on a flag in mapped host memory;
   each raises an arrival count there, and the host waits until all N have arrived (the
   SMs are held before the kernel under test starts);
2. launches the kernel under test on another stream, on fresh random inputs, its output
   poisoned (NaN), and polls its completion event for ``--stall-s`` seconds;
3. releases the hog, synchronises, and checks the output against an fp32 torch product.

A kernel that waits for a CTA which can never become resident would still be running when
the poll ends: recorded as ``stalled`` (it completes once the hog lets go: the hog also
gives up by itself after ``--hog-max-s``, so the GPU is never left hung). A kernel that
completes while the hog holds its SMs makes forward progress at that residency.

    python3 bench/forward_progress/hog.py carry/forward_progress --json $OUT/forward_progress.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from pathlib import Path

import cupy
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.workers.loader import load_kernel  # noqa: E402

HOG_SOURCE = r"""
extern "C" __global__ void hog(volatile int *release, int *arrived, long long max_ns) {
    extern __shared__ int smem[];
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    if (threadIdx.x == 0) {
        smem[0] = blockIdx.x;          // touch the allocation
        atomicAdd_system(arrived, 1);
        __threadfence_system();
        while (*release == 0) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            if ((long long)(now - start) > max_ns) break;
            __nanosleep(1000);
        }
    }
    __syncthreads();
}
"""
HOG_SMEM = 200 * 1024  # over half of the 227 KB an SM offers a block: one hog CTA per SM


def sizes(problem: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in problem.split(":")[-1].split("x"))
    return m, n, k


def run_one(kernel_dir: Path, problem: str, hogged: int, stall_s: float, hog_max_s: float,
            hog_fn: cupy.RawKernel) -> dict:
    m, n, k = sizes(problem)
    kernel = load_kernel(kernel_dir)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel.load_module()
    kernel(a, b, out=d)  # warm: module loaded, workspace zeroed, the path exercised
    d.fill_(float("nan"))
    torch.cuda.synchronize()

    flags = cupy.cuda.runtime.hostAlloc(8, cupy.cuda.runtime.hostAllocMapped)
    view = (ctypes.c_int * 2).from_address(flags)
    view[0] = 0  # release
    view[1] = 0  # arrived
    hog_stream = cupy.cuda.Stream(non_blocking=True)
    test_stream = torch.cuda.Stream()
    result: dict = {"hogged_sms": hogged}
    if hogged:
        with hog_stream:
            hog_fn((hogged,), (32,), (cupy.uint64(flags), cupy.uint64(flags + 4),
                                      cupy.int64(int(hog_max_s * 1e9))), shared_mem=HOG_SMEM)
        start = time.monotonic()
        while view[1] < hogged and time.monotonic() - start < 5:
            time.sleep(1e-4)
        result["hog_arrived"] = int(view[1])
    start = time.monotonic()
    with torch.cuda.stream(test_stream):
        kernel(a, b, out=d)
        done = torch.cuda.Event()
        done.record(test_stream)
    while not done.query() and time.monotonic() - start < stall_s:
        time.sleep(1e-4)
    finished = done.query()
    result["completed_while_hogged"] = bool(finished)
    result["wall_ms_to_complete"] = round((time.monotonic() - start) * 1e3, 3) if finished else None
    view[0] = 1  # let the hog go
    hog_stream.synchronize()
    torch.cuda.synchronize()
    result["wall_ms_incl_release"] = round((time.monotonic() - start) * 1e3, 3)
    ref = a.float() @ b.float().t()
    out = d.float()
    result["nan_outputs"] = int(torch.isnan(out).sum())
    result["rel_err"] = float((out - ref).norm() / ref.norm())
    result["correct"] = result["nan_outputs"] == 0 and result["rel_err"] < 2e-2
    cupy.cuda.runtime.freeHost(flags)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kernels", type=Path)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--hogs", default="0,1,33,66,131")
    parser.add_argument("--stall-s", type=float, default=3.0)
    parser.add_argument("--hog-max-s", type=float, default=8.0)
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    hog_fn = cupy.RawKernel(HOG_SOURCE, "hog")
    hog_fn.max_dynamic_shared_size_bytes = HOG_SMEM
    plan = json.loads((args.kernels / "plan.json").read_text())
    rows = []
    for item in plan:
        for hogged in (int(x) for x in args.hogs.split(",")):
            if hogged >= sms:
                continue
            row = {"kernel": item["kernel"], "cross_cta": item["cross_cta"],
                   **run_one(args.kernels / item["kernel"], item["problem"], hogged,
                             args.stall_s, args.hog_max_s, hog_fn)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(0), "sms": sms,
                                     "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"{'kernel':58} {'wait':28} {'hog':>4} {'done':>5} {'ms':>9} correct")
    for r in rows:
        print(f"{r['kernel']:58} {r['cross_cta']:28} {r['hogged_sms']:>4} "
              f"{str(r['completed_while_hogged']):>5} {str(r['wall_ms_to_complete']):>9} {r['correct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
