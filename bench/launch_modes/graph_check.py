"""The same kernels against torch.matmul in CUDA graphs, timed by a script of its own.

Independent of tsopt's runner: nothing of tsopt.workers' timing, buffers or pairing is used.
Each kernel is loaded through the export's loader (``workers/loader.py``, the file every
export ships as ``loader.py``, imported by path as a user of an export would), called on torch
tensors as its user calls it. Per kernel:

- buffer sets (A, B, D) rotated so that they total more than 2 x L2 (at least 2);
- one CUDA graph of :data:`CALLS` back-to-back calls over the sets for the kernel, and one of
  the same calls of ``torch.matmul(a, b.t(), out=d)`` (cuBLAS, captured too: it may choose
  another algorithm under capture);
- a correctness check of the kernel's output against torch;
- :data:`WARMUP_S` of alternating replays, then :data:`ROUNDS` rounds of four replays in ABBA
  order, each replay between two CUDA events; a round's ratio is (B1 + B2) / (A1 + A2);
- ``--calls N`` calls per graph (default :data:`CALLS`); ``--queued``: a round's four replays
  are queued back to back and synchronised once (the GPU never idles between them, as in a
  serving loop replaying one graph after another), instead of each replay waiting for the
  last to finish (the 2026-12-03 protocol: the GPU idles for the host's round trip before
  every replay); ``--batch N`` (with ``--queued``): each side's replays come N at a time, a round
  being A x N, B x N, B x N, A x N, and its ratio median(B) / median(A) (the runner's rounds are
  ten replays of a side, then ten of the other);
- the median ratio, its 95 % interval (order statistics) and the rounds' p10-p90 spread.

    python3 bench/launch_modes/graph_check.py --bundles carry/launch_modes --out script.pass1.json

Torch and the standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CALLS = 20  # calls per graph, as the 2026-12-03 launch-mode study captured them
ROUNDS = 60
WARMUP_S = 0.5
MAX_SETS = 256
ALIGN_BYTES = 256  # the runner's alignment of each tensor in its regions (--regions)


def export_loader():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("loader", ROOT / "workers" / "loader.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["loader"] = module
    spec.loader.exec_module(module)
    return module


def order_interval(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return statistics.median(ordered), ordered[lo], ordered[hi]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def capture(calls) -> torch.cuda.CUDAGraph:  # type: ignore[no-untyped-def]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm outside the capture (cuBLAS handle, workspace)
        for call in calls[:3]:
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    torch.cuda.synchronize()
    return graph


def replay_us(graph: torch.cuda.CUDAGraph) -> float:
    return replays_us([graph])[0]


def replays_us(graphs: list[torch.cuda.CUDAGraph]) -> list[float]:
    """Each graph replayed in turn, each between two events, then one synchronisation."""
    events = []
    for graph in graphs:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        events.append((start, end))
    events[-1][1].synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in events]


def make_sets(m: int, n: int, k: int, dtype: torch.dtype, n_sets: int, std: float,
              gen: torch.Generator, regions: bool) -> list[tuple[torch.Tensor, ...]]:
    """``n_sets`` of (A, B, D): each tensor its own allocation from torch's allocator, or with
    ``regions`` the runner's layout (``workers/buffers.py``, rewritten here so that this script
    stays independent of it): every set's A and B in one allocation, every D in another, each
    tensor at a 256-byte aligned offset."""
    if not regions:
        return [(torch.randn(m, k, device="cuda", dtype=dtype, generator=gen) * std,
                 torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) * std,
                 torch.empty(m, n, device="cuda", dtype=dtype)) for _ in range(n_sets)]
    per = ALIGN_BYTES // torch.empty((), dtype=dtype).element_size()

    def aligned(numel: int) -> int:
        return (numel + per - 1) // per * per

    a_len, b_len, d_len = aligned(m * k), aligned(n * k), aligned(m * n)
    inputs = torch.empty((a_len + b_len) * n_sets, device="cuda", dtype=dtype)
    inputs.normal_(0.0, std, generator=gen)
    outputs = torch.empty(d_len * n_sets, device="cuda", dtype=dtype)
    sets = []
    for i in range(n_sets):
        base = i * (a_len + b_len)
        sets.append((inputs[base:base + m * k].view(m, k),
                     inputs[base + a_len:base + a_len + n * k].view(n, k),
                     outputs[i * d_len:i * d_len + m * n].view(m, n)))
    return sets


def time_kernel(loader, artifact: Path, calls: int = CALLS,  # type: ignore[no-untyped-def]
                queued: bool = False, batch: int = 1, regions: bool = False) -> dict:
    kernel = loader.load_kernel(artifact)
    kernel.load_module()
    problem = kernel.manifest.problem
    m, n, k = problem["m"], problem["n"], problem["k"]
    dtype = loader.TORCH_DTYPES[problem["dtype"]]
    set_bytes = (m * k + n * k + m * n) * torch.empty((), dtype=dtype).element_size()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = min(MAX_SETS, max(2, 2 * l2 // set_bytes + 1))
    gen = torch.Generator(device="cuda").manual_seed(1234)
    std = k ** -0.25
    sets = make_sets(m, n, k, dtype, n_sets, std, gen, regions)
    a, b, d = sets[0]
    kernel(a, b, out=d)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().t()
    rel_err = float((d.float() - ref).norm() / ref.norm())
    picks = [sets[i % n_sets] for i in range(max(calls, n_sets))]
    cand = capture([lambda s=s: kernel(s[0], s[1], out=s[2]) for s in picks])
    base = capture([lambda s=s: torch.matmul(s[0], s[1].t(), out=s[2]) for s in picks])
    end = time.monotonic() + WARMUP_S
    while time.monotonic() < end:
        replay_us(cand)
        replay_us(base)
    ratios, cand_us, base_us = [], [], []
    for _ in range(ROUNDS):
        if queued and batch > 1:
            t = replays_us([cand] * batch + [base] * (2 * batch) + [cand] * batch)
            a_s, b_s = t[:batch] + t[3 * batch:], t[batch:3 * batch]
            ratios.append(statistics.median(b_s) / statistics.median(a_s))
            cand_us += [x / len(picks) for x in a_s]
            base_us += [x / len(picks) for x in b_s]
            continue
        if queued:
            a1, b1, b2, a2 = replays_us([cand, base, base, cand])
        else:
            a1, b1, b2, a2 = replay_us(cand), replay_us(base), replay_us(base), replay_us(cand)
        ratios.append((b1 + b2) / (a1 + a2))
        cand_us += [a1 / len(picks), a2 / len(picks)]
        base_us += [b1 / len(picks), b2 / len(picks)]
    med, lo, hi = order_interval(ratios)
    return {
        "genome_hash": kernel.manifest.genome_hash, "problem": problem, "rel_err": rel_err,
        "buffer_sets": n_sets, "calls_per_graph": len(picks), "rounds": ROUNDS,
        "queued": queued, "batch": batch, "regions": regions,
        "ratio": med, "ratio_lo": lo, "ratio_hi": hi,
        "ratio_p10": quantile(ratios, 0.1), "ratio_p90": quantile(ratios, 0.9),
        "median_us": statistics.median(cand_us), "baseline_median_us": statistics.median(base_us),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=CALLS, help="calls captured per graph")
    parser.add_argument("--queued", action="store_true",
                        help="queue a round's replays back to back (no idle GPU between them)")
    parser.add_argument("--batch", type=int, default=1,
                        help="with --queued: replays of one side in a row (the runner: 10)")
    parser.add_argument("--regions", action="store_true",
                        help="the runner's buffer layout: one allocation for every set's inputs, "
                             "one for the outputs, 256-byte aligned (default: torch tensors)")
    args = parser.parse_args()
    loader = export_loader()
    rows: list[dict] = []
    started = time.time()
    device = torch.cuda.get_device_properties(0).name if torch.cuda.is_available() else "none"
    for bundle in sorted(args.bundles.glob("launch-*")):
        manifest = json.loads((bundle / "manifest.json").read_text())
        for c in manifest["candidates"]:
            try:
                row = time_kernel(loader, bundle / c["artifact"], args.calls, args.queued,
                                  args.batch, args.regions)
            except Exception as exc:  # noqa: BLE001 - one kernel's failure is its row
                row = {"genome_hash": c["genome_hash"], "error": f"{type(exc).__name__}: {exc}"}
            row["bundle"] = bundle.name
            print(json.dumps(row), flush=True)
            rows.append(row)
            # Written after every kernel: a pass cut short keeps what it timed.
            args.out.write_text(json.dumps({
                "started": started, "seconds": round(time.time() - started, 1),
                "device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                "kernels": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
