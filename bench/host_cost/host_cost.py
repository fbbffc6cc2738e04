"""Host time per call of a tsopt export's GEMM against torch.matmul, with the GPU kept busy.

Torch, the standard library and the export only (no tsopt, no DSL)::

    python3 bench/host_cost/host_cost.py PACKAGE --variant after=PACKAGE \
        --variant before=carry/host_cost/before [--native] --json OUT.json
    python3 bench/host_cost/host_cost.py --summarise OUT.json

``PACKAGE`` is a ``tsopt export`` of GEMM studies. A variant is a directory holding a
``torch_ops.py`` and its ``loader.py`` (the package's own, or an earlier version of them); each
runs in a process of its own (both register ``torch.ops.tsopt.*``) on the same package. For
every kernel of the package, and each variant:

1. **correct**: the loader call, the per-kernel op and the dispatching op each once, against
   ``A.float() @ B.float().T``;
2. **host µs per call**: the GPU is first given a sleep kernel (``torch.cuda._sleep``) longer
   than the batch, then ``--calls`` calls are timed on the host (``perf_counter``) while the
   GPU is still asleep, so no call waits for the GPU and the time is the host's alone (a batch
   whose sleep ended before its last call is flagged ``gpu_busy: false``). The calls: the
   output allocation alone (``torch.empty``), ``torch.matmul(a, b.t())``, the raw launch (the
   export's ``tsopt_launch`` through one ctypes call, pointers and stream prepared once: the
   floor of any launch path), the loader call ``kernel(a, b)``, the per-kernel op
   ``torch.ops.tsopt.gemm_bf16_MxNxK`` and the dispatching op ``torch.ops.tsopt.gemm``; in
   alternation (the order rotated each pass), ``--passes`` passes, median, p10-p90, min, max;
3. **eager paired**: each of the loader call, the per-kernel op and the dispatching op against
   ``torch.matmul``, alternating batches of ``--batch`` back-to-back calls between CUDA events
   (which goes first alternates), ``--rounds`` rounds: per round torch.matmul's time / the
   other's (above 1: faster than torch.matmul); the same pairs captured in CUDA graphs of
   ``--batch`` calls each and replayed, for the GPU time alone;
4. **refused**: after the good signature is known (cached), the per-kernel op must still
   refuse a misaligned, a non-contiguous, a wrong-dtype and a CPU input with its
   KernelInputError, and the dispatching op must fall back (a FallbackWarning) on the
   misaligned one.

``--native`` adds a row: ``native_probe.cpp`` compiled first, once (``torch.utils.cpp_extension``
and ninja, into ``--native-build``, which the variants' processes then load): the same kernel
launched from a C++ op with the same checks in C++ on every call, what a native launch path
would cost. A failed build is recorded and the rest still runs.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REL_TOL = {"bf16": 1e-2, "fp16": 5e-3}
HOST_ROWS = ("torch.empty", "torch.matmul", "raw launch", "loader call", "per-kernel op",
             "dispatching op", "native op")
PAIRED_ROWS = ("loader call", "per-kernel op", "dispatching op", "native op")
GOAL_US = 5.0  # issue 30: an op's host time within this of torch.matmul's
SLEEP_FACTOR = 3.0  # the sleep outlasts the batch's host time this many times over


def load_torch_ops(directory: Path) -> Any:
    spec = importlib.util.spec_from_file_location("torch_ops", directory / "torch_ops.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"{directory}: no torch_ops.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_ops"] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def spread(values: list[float]) -> dict[str, Any]:
    deciles = statistics.quantiles(values, n=10) if len(values) >= 2 else [values[0]] * 9
    return {"median": statistics.median(values), "p10": deciles[0], "p90": deciles[8],
            "min": min(values), "max": max(values), "n": len(values)}


class Sleeper:
    """Keeps the GPU busy for a given time: ``torch.cuda._sleep`` calibrated in cycles/µs."""

    def __init__(self) -> None:
        cycles = 20_000_000
        torch.cuda._sleep(cycles // 10)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        self.cycles_per_us = cycles / (start.elapsed_time(end) * 1000.0)

    def sleep(self, us: float) -> None:
        torch.cuda._sleep(int(us * self.cycles_per_us))


def host_batch(fn: Callable[[], Any], calls: int, sleeper: Sleeper, expect_us: float) -> tuple[float, bool]:
    """µs per call on the host while the GPU sleeps; and whether it slept through the batch."""
    torch.cuda.synchronize()
    sleeper.sleep(max(2000.0, SLEEP_FACTOR * expect_us * calls))
    asleep = torch.cuda.Event()
    asleep.record()  # completes when the sleep does
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - started
    busy = not asleep.query()
    torch.cuda.synchronize()
    return elapsed * 1e6 / calls, busy


def batch_us(fn: Callable[[], Any], calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def paired(fn: Callable[[], Any], ref: Callable[[], Any], rounds: int, batch: int,
           calls_per_fn: int = 1) -> dict[str, Any]:
    """Alternating batches of ``batch`` calls of each (a call of ``fn`` being ``calls_per_fn``
    GEMMs: a graph's replay); per round ratio = torch.matmul's time / fn's; µs per GEMM."""
    for _ in range(10):
        fn()
        ref()
    torch.cuda.synchronize()
    mine, theirs, ratios = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            a, b = batch_us(fn, batch), batch_us(ref, batch)
        else:
            b, a = batch_us(ref, batch), batch_us(fn, batch)
        mine.append(a / calls_per_fn)
        theirs.append(b / calls_per_fn)
        ratios.append(b / a)
    return {"ratio": spread(ratios), "us": spread(mine), "matmul_us": spread(theirs),
            "rounds": rounds, "batch": batch}


def graphed(fn: Callable[[], Any], batch: int) -> Callable[[], Any]:
    """``batch`` calls of ``fn`` captured in one CUDA graph; returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(batch):
            fn()
    torch.cuda.synchronize()
    return graph.replay


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref))


def refusals(ops: Any, op: Any, x: torch.Tensor, w: torch.Tensor) -> dict[str, Any]:
    """Bad inputs after the good signature is cached: each must still be refused."""
    m, k = x.shape
    flat = torch.empty(m * k + 8, dtype=x.dtype, device=x.device)
    misaligned = flat[1:1 + m * k].view(m, k)
    misaligned.copy_(x)
    cases = {
        "misaligned": (misaligned, "not 16-byte aligned"),
        "non_contiguous": (x.t().contiguous().t(), "not contiguous"),
        "dtype": (x.half() if x.dtype != torch.float16 else x.bfloat16(), "dtype torch."),
        "cpu": (x.cpu(), "not on a CUDA device"),
    }
    found: dict[str, Any] = {}
    for name, (bad, expected) in cases.items():
        try:
            op(bad, w)
            torch.cuda.synchronize()
            found[name] = {"raised": None, "ok": False}
        except ops.KernelInputError as exc:
            found[name] = {"raised": str(exc)[-200:], "ok": expected in str(exc)}
        except Exception as exc:  # the wrong kind of failure: recorded as not ok
            found[name] = {"raised": f"{type(exc).__name__}: {str(exc)[-200:]}", "ok": False}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fell_back = torch.ops.tsopt.gemm(misaligned, w)
    found["dispatch_misaligned_falls_back"] = {
        "ok": any(issubclass(c.category, ops.FallbackWarning) for c in caught)
        and rel_err(fell_back, x.float() @ w.float().t()) < 1e-2,
        "warnings": [str(c.message)[:200] for c in caught]}
    found["ok"] = all(v["ok"] for v in found.values())
    return found


def build_native(build_dir: Path) -> Any:
    """``torch.ops.tsopt_native`` from native_probe.cpp (compiled once into ``build_dir``)."""
    from torch.utils.cpp_extension import load

    build_dir.mkdir(parents=True, exist_ok=True)
    load("tsopt_native_probe", sources=[str(Path(__file__).with_name("native_probe.cpp"))],
         extra_ldflags=["-ldl"], with_cuda=True, is_python_module=False,
         build_directory=str(build_dir), verbose=False)
    return torch.ops.tsopt_native


def measure_kernel(ops: Any, packaged: Any, args: argparse.Namespace, sleeper: Sleeper,
                   native: Any) -> dict[str, Any]:
    sizes = dict(packaged.sizes)
    m, n, k = sizes["m"], sizes["n"], sizes["k"]
    dtype = DTYPES[packaged.dtype]
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = torch.randn(n, k, device="cuda").to(dtype)
    loaded = ops._library(packaged)
    per_kernel = getattr(torch.ops.tsopt, packaged.name)
    result: dict[str, Any] = {"name": packaged.name, "genome_hash": packaged.genome_hash,
                              "m": m, "n": n, "k": k, "dtype": packaged.dtype}
    ref = x.float() @ w.float().t()
    result["rel_err"] = {"loader call": rel_err(loaded(x, w), ref),
                         "per-kernel op": rel_err(per_kernel(x, w), ref),
                         "dispatching op": rel_err(torch.ops.tsopt.gemm(x, w), ref),
                         "torch.matmul": rel_err(torch.matmul(x, w.t()), ref)}
    native_call = None
    if native is not None and [t.name for t in loaded.manifest.tensors] == ["a", "b", "d"]:
        native_id = native.open_kernel(str(loaded.library.path), m, n, k, packaged.dtype)
        native_call = lambda: native.gemm(native_id, x, w)  # noqa: E731
        result["rel_err"]["native op"] = rel_err(native_call(), ref)
    result["correct"] = all(v < REL_TOL[packaged.dtype] for v in result["rel_err"].values())

    # The raw launch: the export's C entry through one ctypes call, nothing else per call.
    raw_out = torch.empty(m, n, dtype=dtype, device="cuda")
    by_name = {"a": x, "b": w, "d": raw_out}
    pointers = (ctypes.c_void_p * 3)(*(by_name[t.name].data_ptr() for t in loaded.manifest.tensors))
    raw_symbol = loaded.library._launch
    stream = torch.cuda.current_stream().cuda_stream
    calls: dict[str, Callable[[], Any]] = {
        "torch.empty": lambda: torch.empty((m, n), dtype=dtype, device=x.device),
        "torch.matmul": lambda: torch.matmul(x, w.t()),
        "raw launch": lambda: raw_symbol(pointers, 3, stream),
        "loader call": lambda: loaded(x, w),
        "per-kernel op": lambda: per_kernel(x, w),
        "dispatching op": lambda: torch.ops.tsopt.gemm(x, w),
    }
    if native_call is not None:
        calls["native op"] = native_call
    expect = {}
    for name, fn in calls.items():  # warm-up, and a first guess of each call's host time
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(20):
            fn()
        expect[name] = (time.perf_counter() - started) * 1e6 / 20
        torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    idle: dict[str, int] = {name: 0 for name in calls}
    names = list(calls)
    for p in range(args.passes):
        for name in names[p % len(names):] + names[:p % len(names)]:
            us, busy = host_batch(calls[name], args.calls, sleeper, expect[name])
            samples[name].append(us)
            idle[name] += 0 if busy else 1
    result["host_us"] = {name: {**spread(samples[name]), "batches_gpu_idle": idle[name],
                                "samples": samples[name]} for name in names}

    matmul = calls["torch.matmul"]
    result["eager_paired"] = {name: paired(calls[name], matmul, args.rounds, args.batch)
                              for name in PAIRED_ROWS if name in calls}
    graph_matmul = graphed(matmul, args.batch)
    result["graph_paired"] = {}
    for name in ("per-kernel op", "dispatching op"):
        replay = graphed(calls[name], args.batch)
        result["graph_paired"][name] = paired(replay, graph_matmul, args.rounds, 1, args.batch)
    result["refused"] = refusals(ops, per_kernel, x, w)
    return result


def worker(args: argparse.Namespace) -> int:
    """One variant in this process: every GEMM kernel of the package, as JSON on stdout."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    ops = load_torch_ops(args.worker)
    package = ops.load(args.package)
    sleeper = Sleeper()
    doc: dict[str, Any] = {"variant_dir": str(args.worker), "kernels": [],
                           "sleep_cycles_per_us": sleeper.cycles_per_us}
    native = None
    if args.native:
        started = time.perf_counter()
        try:
            native = build_native(args.native_build)
            doc["native_build"] = {"ok": True}
        except Exception as exc:  # recorded; the Python paths are still measured
            doc["native_build"] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[-3000:]}"}
        doc["native_build"]["seconds"] = round(time.perf_counter() - started, 1)
    for packaged in package.kernels:
        if packaged.op != "gemm":
            continue
        try:
            doc["kernels"].append(measure_kernel(ops, packaged, args, sleeper, native))
        except Exception as exc:  # recorded: the JSON says what raised, the others still run
            doc["kernels"].append({"name": packaged.name, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()})
    doc["tsopt_imported"] = any(n == "tsopt" or n.startswith("tsopt.") for n in sys.modules)
    print(json.dumps(doc))
    return 0


def summarise(doc: dict[str, Any]) -> str:
    lines = [f"{doc['environment']['device']}, torch {doc['environment']['torch']}; "
             f"{doc['settings']['passes']} passes of {doc['settings']['calls']} calls, GPU kept busy"]
    if "native_build" in doc:
        built = doc["native_build"]
        lines.append(f"native probe built in {built['seconds']} s" if built["ok"]
                     else f"native probe FAILED to build: {built['error'][-600:]}")
    for variant, found in doc["variants"].items():
        if "error" in found:
            lines.append(f"[{variant}] FAILED: {found['error'][:500]}")
            continue
        if not found.get("native_build", {"ok": True})["ok"]:
            lines.append(f"[{variant}] native probe FAILED to load: {found['native_build']['error'][-600:]}")
        for kernel in found["kernels"]:
            if "error" in kernel:
                lines.append(f"[{variant}] {kernel['name']}: FAILED {kernel['error'][:300]}")
                continue
            lines.append(f"[{variant}] {kernel['name']} ({kernel['genome_hash'][:12]}): correct "
                         f"{kernel['correct']}, refusals ok {kernel['refused']['ok']}")
            matmul = kernel["host_us"]["torch.matmul"]["median"]
            lines.append("  host us/call      median   p10-p90        min-max      vs matmul")
            for name in [r for r in HOST_ROWS if r in kernel["host_us"]]:
                h = kernel["host_us"][name]
                flag = f"  ({h['batches_gpu_idle']} batches GPU idle)" if h["batches_gpu_idle"] else ""
                lines.append(f"  {name:16s} {h['median']:7.2f}  {h['p10']:6.2f}-{h['p90']:<6.2f}  "
                             f"{h['min']:6.2f}-{h['max']:<7.2f} {h['median'] - matmul:+7.2f}{flag}")
            verdicts = []
            for name in ("per-kernel op", "dispatching op"):
                over = kernel["host_us"][name]["median"] - matmul
                verdicts.append(f"{name} {over:+.2f} us ({'met' if over <= GOAL_US else 'NOT met'})")
            lines.append(f"  goal, within {GOAL_US:.0f} us of torch.matmul's median: " + ", ".join(verdicts))
            for mode in ("eager_paired", "graph_paired"):
                for name, p in kernel[mode].items():
                    r = p["ratio"]
                    lines.append(f"  {mode:12s} {name:15s} matmul/it {r['median']:.3f} "
                                 f"(p10 {r['p10']:.3f}, p90 {r['p90']:.3f}); it {p['us']['median']:.2f} us, "
                                 f"matmul {p['matmul_us']['median']:.2f} us")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", type=Path, nargs="?", help="a tsopt export of GEMM kernels")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=DIR: a torch_ops.py + loader.py to time (repeatable; default: "
                             "the package's own, as 'export')")
    parser.add_argument("--json", type=Path, help="where to write the results")
    parser.add_argument("--summarise", type=Path, help="print the summary of an earlier --json")
    parser.add_argument("--passes", type=int, default=25)
    parser.add_argument("--calls", type=int, default=100, help="calls per host-timed batch")
    parser.add_argument("--rounds", type=int, default=21, help="paired rounds")
    parser.add_argument("--batch", type=int, default=20, help="calls per paired batch")
    parser.add_argument("--native", action="store_true", help="also time native_probe.cpp's C++ op")
    parser.add_argument("--native-build", type=Path, default=Path("/tmp/tsopt_host_cost_native"),
                        help="where the native probe is compiled (reused by later variants)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.summarise:
        print(summarise(json.loads(args.summarise.read_text())))
        return 0
    if args.package is None:
        parser.error("name the package (or --summarise FILE)")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this measures on a GPU machine")
    if args.worker:
        return worker(args)
    variants = dict(v.split("=", 1) for v in args.variant) or {"export": str(args.package)}
    doc: dict[str, Any] = {
        "package": str(args.package),
        "settings": {k: getattr(args, k) for k in ("passes", "calls", "rounds", "batch", "native")},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)},
        "variants": {}}
    native_ok = False
    if args.native:  # built once here; the workers load the build
        started = time.perf_counter()
        try:
            build_native(args.native_build)
            doc["native_build"] = {"ok": True}
            native_ok = True
        except Exception as exc:  # recorded; the Python paths are still measured
            doc["native_build"] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[-3000:]}"}
        doc["native_build"]["seconds"] = round(time.perf_counter() - started, 1)
        print(f"native probe: {doc['native_build']}", flush=True)
    for name, directory in variants.items():
        started = time.perf_counter()
        command = [sys.executable, __file__, str(args.package), "--worker", directory,
                   *(f"--{k}={getattr(args, k)}" for k in ("passes", "calls", "rounds", "batch")),
                   *(["--native", f"--native-build={args.native_build}"] if native_ok else [])]
        done = subprocess.run(command, capture_output=True, text=True)
        sys.stderr.write(done.stderr[-4000:])
        if done.returncode != 0:
            doc["variants"][name] = {"error": f"exit {done.returncode}: {done.stderr[-3000:]}"}
        else:
            doc["variants"][name] = json.loads(done.stdout.strip().splitlines()[-1])
        doc["variants"][name]["seconds"] = round(time.perf_counter() - started, 1)
        print(f"{name}: {doc['variants'][name]['seconds']} s", flush=True)
        if args.json:  # after every variant: a run cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(doc, indent=1))
    print(summarise(doc))
    failed = [n for n, v in doc["variants"].items()
              if "error" in v or any("error" in k or not k["correct"] for k in v["kernels"])]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
