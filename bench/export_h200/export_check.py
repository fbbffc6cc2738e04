"""Check an export in a fresh process on a GPU machine: correctness and time vs the study.

Uses only torch, the standard library and the export's own ``loader.py`` (not tsopt), the way
a user of the export would::

    python3 bench/export_h200/export_check.py EXPORT_DIR [EXPORT_DIR ...] --json out.json

For each export: fresh random inputs, output poisoned with NaN, one call through
``load_kernel``; compared with torch (copy: bit for bit; GEMM: relative error against
A.float() @ B.float().T); then timed with CUDA events (warm-up, median of --runs, inputs rotated
over more than 2x the L2), the vendor baseline timed the same way in the same process, and the
time compared with the one recorded in the study (manifest.json). "Within noise" means the ratio
to the baseline is within 7 % of the recorded ratio (ratios cancel the clock and power drift
between sessions; the committed runs show the baseline itself moving by several percent).
"""

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
RATIO_NOISE = 0.07


def load_loader(directory: Path):  # type: ignore[no-untyped-def]
    name = f"loader_{directory.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, directory / "loader.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    # dataclasses look their module up in sys.modules while the module executes.
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def make_inputs(problem: dict, n_sets: int) -> list[tuple[torch.Tensor, ...]]:
    dtype = DTYPES[problem["dtype"]]
    sets = []
    for _ in range(n_sets):
        if problem["op"] == "copy":
            sets.append((torch.randn(problem["rows"], problem["cols"], device="cuda").to(dtype),))
        else:
            a = torch.randn(problem["m"], problem["k"], device="cuda").to(dtype)
            b = torch.randn(problem["n"], problem["k"], device="cuda").to(dtype)
            sets.append((a, b))
    return sets


def reference(problem: dict, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    if problem["op"] == "copy":
        return inputs[0]
    a, b = inputs
    return a.float() @ b.float().t()


def baseline(problem: dict, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
    if problem["op"] == "copy":
        out.copy_(inputs[0])
    else:
        torch.matmul(inputs[0], inputs[1].t(), out=out)


def time_it(fn, sets, outs, warmup: int, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    for i in range(warmup):
        fn(sets[i % len(sets)], outs[i % len(outs)])
    torch.cuda.synchronize()
    times = []
    for i in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(100_000)  # keep the GPU busy while the host queues the launch
        start.record()
        fn(sets[i % len(sets)], outs[i % len(outs)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return times


def check(directory: Path, runs: int, warmup: int) -> dict:
    manifest = json.loads((directory / "manifest.json").read_text())
    problem = manifest["problem"]
    kernel = load_loader(directory).load_kernel(directory)
    bytes_per_set = sum(t.numel() * t.element_size() for t in make_inputs(problem, 1)[0])
    out_spec = kernel.outputs[0]
    out_bytes = 2
    for s in out_spec.shape:
        out_bytes *= s
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n_sets = max(2, min(64, -(-2 * l2 // (bytes_per_set + out_bytes)) + 1))
    sets = make_inputs(problem, n_sets)
    outs = [torch.full(out_spec.shape, float("nan"), dtype=DTYPES[out_spec.dtype], device="cuda")
            for _ in range(n_sets)]
    result = kernel(*sets[0])  # fresh output, poisoned below and written by the kernel
    result.fill_(float("nan"))
    kernel(*sets[0], out=result)
    torch.cuda.synchronize()
    ref = reference(problem, sets[0])
    unwritten = int(torch.isnan(result).sum().item())
    if problem["op"] == "copy":
        correct = bool(torch.equal(result, ref))
        rel_err = 0.0 if correct else float("inf")
    else:
        rel_err = float((result.float() - ref).norm() / ref.norm())
        correct = unwritten == 0 and rel_err < (1e-2 if problem["dtype"] == "bf16" else 5e-3)
    kernel_times = time_it(lambda s, o: kernel(*s, out=o), sets, outs, warmup, runs)
    vendor_times = time_it(lambda s, o: baseline(problem, s, o), sets, outs, warmup, runs)
    median = statistics.median(kernel_times)
    vendor = statistics.median(vendor_times)
    recorded = manifest["measured"]
    ratio = vendor / median
    return {
        "export": str(directory), "genome_hash": manifest["genome_hash"], "problem": problem,
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "correct": correct, "unwritten": unwritten, "rel_err": rel_err,
        "median_us": median, "p10_us": sorted(kernel_times)[len(kernel_times) // 10],
        "p90_us": sorted(kernel_times)[(9 * len(kernel_times)) // 10],
        "baseline_us": vendor, "ratio": ratio,
        "recorded_median_us": recorded["median_us"], "recorded_ratio": recorded["ratio"],
        "time_vs_recorded": median / recorded["median_us"],
        "within_noise": abs(ratio / recorded["ratio"] - 1.0) <= RATIO_NOISE,
        "buffer_sets": n_sets, "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = [check(d, args.runs, args.warmup) for d in args.exports]
    for r in results:
        print(f"{r['export']}: correct={r['correct']} rel_err={r['rel_err']:.2e} "
              f"{r['median_us']:.2f} us (recorded {r['recorded_median_us']:.2f}), ratio {r['ratio']:.3f} "
              f"(recorded {r['recorded_ratio']:.3f}) within_noise={r['within_noise']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(r["correct"] and r["within_noise"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
