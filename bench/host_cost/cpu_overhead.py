"""CPU-only: the Python cost of an op call around a launch that does nothing.

Where the host time of ``torch.ops.tsopt.*`` goes, measured without a GPU: a package written
here (the export format, a GEMM kernel 16x4096x4096 bf16) whose ``libkernel.so`` is a C
function that returns at once (compiled with ``cc``), called on CPU tensors, with the CUDA
queries of a launch (device, current stream) and the device check replaced by constants. What
remains is the wrapper's own Python and the dispatcher: the part of a call that a GPU adds
nothing to. Each variant of ``torch_ops.py`` + ``loader.py`` runs in its own process, timed in
the thread's CPU time (``time.thread_time``: a shared, loaded machine inflates wall time)::

    python bench/host_cost/cpu_overhead.py            # this tree's against 1c8044c's (before the fast path)
    python bench/host_cost/cpu_overhead.py --before REV --json OUT.json

These are CPU-only figures of this machine, not GPU results: ``host_cost.py`` measures the
real calls on the H200.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOOP_C = """
int tsopt_load(void) { return 0; }
int tsopt_launch(void **data, int n, void *stream) { return n == 3 && data[0] ? 0 : 1; }
"""
M, N, K = 16, 4096, 4096

PROBE = r'''
import contextlib, importlib.util, json, statistics, sys, time, timeit, types
import torch
spec = importlib.util.spec_from_file_location("torch_ops", sys.argv[1] + "/torch_ops.py")
ops = importlib.util.module_from_spec(spec); sys.modules["torch_ops"] = ops
spec.loader.exec_module(ops)
loader = ops._loader
# No GPU: the device check, the current device and the current stream become constants.
real_problems = loader.tensor_problems
loader.tensor_problems = lambda spec, t, tracing=False: [
    p for p in real_problems(spec, t, tracing) if not p.startswith("not on a CUDA device")]
torch.cuda.device = lambda index: contextlib.nullcontext()
torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
if hasattr(loader, "current_stream_handle"):
    loader.current_device_index = lambda: None
    loader.current_stream_handle = lambda index: 0
ops.load(sys.argv[2], preload=False)
a = torch.randn(%(m)d, %(k)d).bfloat16(); b = torch.randn(%(n)d, %(k)d).bfloat16()
out = torch.empty(%(m)d, %(n)d, dtype=torch.bfloat16)
kernel = ops._library(ops.registered()[0])
per_kernel = getattr(torch.ops.tsopt, ops.registered()[0].name)
calls = {
    "torch.empty (the output alone)":
        lambda: torch.empty((%(m)d, %(n)d), dtype=torch.bfloat16, device=a.device),
    "loader call kernel(a, b)": lambda: kernel(a, b),
    "loader call kernel(a, b, out=d)": lambda: kernel(a, b, out=out),
    "per-kernel op": lambda: per_kernel(a, b),
    "dispatching op torch.ops.tsopt.gemm": lambda: torch.ops.tsopt.gemm(a, b),
}
if len(sys.argv) > 3:  # the native probe's CPU build: the same launch and checks from C++
    torch.ops.load_library(sys.argv[3])
    native_id = torch.ops.tsopt_native.open_kernel(str(kernel.library.path), %(m)d, %(n)d, %(k)d, "bf16")
    calls["native op (C++ probe, CPU build)"] = lambda: torch.ops.tsopt_native.gemm(native_id, a, b)
found = {}
for name, fn in calls.items():
    for _ in range(2000):
        fn()
    timer = timeit.Timer(fn, timer=time.thread_time)
    runs = [t / 5000 * 1e6 for t in timer.repeat(number=5000, repeat=%(passes)d)]
    found[name] = {"median_us": statistics.median(runs), "min_us": min(runs), "max_us": max(runs)}
print(json.dumps(found))
'''


def write_package(top: Path) -> Path:
    kernel = top / "gemm_bf16_16x4096x4096"
    kernel.mkdir(parents=True)
    (kernel / "noop.c").write_text(NOOP_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(kernel / "libkernel.so"),
                    str(kernel / "noop.c")], check=True)
    tensors = [("a", "input", [M, K]), ("b", "input", [N, K]), ("d", "output", [M, N])]
    (kernel / "artifact.json").write_text(json.dumps({
        "library": "libkernel.so", "genome_hash": "0" * 64,
        "tensors": [{"name": n, "role": r, "shape": s, "dtype": "bf16"} for n, r, s in tensors]}))
    (top / "manifest.json").write_text(json.dumps({
        "format": "tsopt-export", "version": 2, "package": True, "files": {}, "kernels": [{
            "name": kernel.name, "op": "gemm", "dtype": "bf16", "dir": kernel.name,
            "sizes": [["m", M], ["n", N], ["k", K]], "genome_hash": "0" * 64}]}))
    return top


def build_cpu_probe(build_dir: Path) -> Path:
    """native_probe.cpp built for the CPU (what needs CUDA taken out: the device guard, the
    device check, the stream, passed as null; the kernel registered for CPU tensors)."""
    from torch.utils.cpp_extension import load

    source = (Path(__file__).with_name("native_probe.cpp")).read_text()
    cuda_parts = (
        ("#include <c10/cuda/CUDAGuard.h>\n", ""),
        ("#include <c10/cuda/CUDAStream.h>\n", ""),
        ("  c10::cuda::CUDAGuard guard(a.device());\n", ""),
        ("c10::cuda::getCurrentCUDAStream(a.device().index()).stream()", "nullptr"),
        ('  TORCH_CHECK(t.is_cuda(), name, ": not on a CUDA device");\n', ""),
        ("TORCH_LIBRARY_IMPL(tsopt_native, CUDA, m)", "TORCH_LIBRARY_IMPL(tsopt_native, CPU, m)"),
    )
    for cuda_only, cpu in cuda_parts:
        if cuda_only not in source:
            raise SystemExit(f"native_probe.cpp changed: no {cuda_only.strip()!r} to take out")
        source = source.replace(cuda_only, cpu)
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "cpu_probe.cpp").write_text(source)
    load("tsopt_native_cpu_probe", sources=[str(build_dir / "cpu_probe.cpp")], extra_ldflags=["-ldl"],
         is_python_module=False, build_directory=str(build_dir))
    return build_dir / "tsopt_native_cpu_probe.so"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="1c8044c",
                        help="git revision of the other variant (default: the last before the fast path)")
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--native", type=Path, metavar="BUILD_DIR",
                        help="also time native_probe.cpp built for the CPU here (about a minute)")
    args = parser.parse_args()
    probe = [str(build_cpu_probe(args.native))] if args.native else []
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        package = write_package(Path(scratch) / "package")
        variants = {f"git {args.before}": Path(scratch) / "before", "this tree": ROOT / "workers"}
        variants[f"git {args.before}"].mkdir()
        for name in ("torch_ops.py", "loader.py"):
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.before}:workers/{name}"],
                                  capture_output=True, text=True, check=True).stdout
            (variants[f"git {args.before}"] / name).write_text(text)
        code = PROBE % {"m": M, "n": N, "k": K, "passes": args.passes}
        for variant, directory in variants.items():
            extra = probe if directory == ROOT / "workers" else []
            done = subprocess.run([sys.executable, "-I", "-c", code, str(directory), str(package), *extra],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{variant}: {done.stderr[-2000:]}")
            results[variant] = json.loads(done.stdout)
    print(f"CPU-only (no GPU; a no-op launch), thread CPU us per call, median of {args.passes} "
          "passes of 5000:")
    names = list(results["this tree"])
    print(f"{'call':40s} " + " ".join(f"{v:>20s}" for v in results))
    for name in names:
        row = [f"{results[v][name]['median_us']:7.2f} (min {results[v][name]['min_us']:5.2f})"
               if name in results[v] else f"{'-':>20s}" for v in results]
        print(f"{name:40s} " + " ".join(row))
    if args.json:
        args.json.write_text(json.dumps({"cpu_only": True, "timer": "time.thread_time",
                                         "shape": [M, N, K], "passes": args.passes,
                                         "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
