"""Does a tsopt export work as a PyTorch op on a GPU, and what does it cost against torch.matmul?

Torch, the standard library and the export only (no tsopt, no DSL), the way a user of the export
runs it::

    python3 bench/torch_op_h200/check_op.py EXPORT_DIR --json OUT.json [--rounds 21] [--batch 20]

``EXPORT_DIR`` is a ``tsopt export`` of one GEMM study or a package of several. For each kernel:

1. the op alone, eagerly: fresh random inputs, its output allocated where a NaN-filled tensor
   of the same size was just freed (poisoned, when the allocator hands that block back), checked
   against ``A.float() @ B.float().T``; ``torch.ops.tsopt.gemm`` on the same inputs must pick
   the tuned kernel (no fallback warning, the same output);
2. a small test model, ``gelu(x @ W^T) * 0.5`` with the GEMM through the op, compiled with
   ``torch.compile(fullgraph=True)`` (a graph break is an error), checked against fp32;
3. the compiled model and the op alone captured in CUDA graphs and replayed on fresh inputs with
   the graphs' outputs poisoned (NaN) first, checked against fp32;
4. timing, paired: the compiled model with the op against the same model with ``torch.matmul``,
   alternating batches of ``--batch`` calls in one process after a warm-up, ``--rounds`` rounds
   (at least 15); the same for the two CUDA graphs' replays. Per round the ratio is
   torch.matmul's time / the op's (above 1: the op is faster); the median and p10-p90 of the
   ratios are reported.

Then the dispatch op's fallback on a shape the export lacks (a warning once, the output of
``torch.matmul`` exactly, also under torch.compile), and the op's errors on bad inputs on the GPU
(CPU tensor, dtype, shape, non-contiguous, misaligned). Everything goes to ``--json``; a section
that raises is recorded with its error and the others still run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

MIN_ROUNDS = 15
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# As the measuring side judges a GEMM (workers/reference.py): the output is rounded to 16 bits,
# so a correct kernel's relative error is that rounding (bf16 ~1.6e-3); these sit well above it
# and far below a real bug (a dropped K stage: 1e-1 and up).
REL_TOL = {"bf16": 1e-2, "fp16": 5e-3}
ELEM_TOL = {"bf16": 2.0**-6, "fp16": 2.0**-9}
FALLBACK_SHAPES = ((2048, 2048, 2048), (1024, 3072, 512))


def load_torch_ops(directory: Path) -> Any:
    """The export's own torch_ops.py (it loads the loader.py beside it by path)."""
    spec = importlib.util.spec_from_file_location("torch_ops", directory / "torch_ops.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"{directory}: no torch_ops.py (an export written before tsopt's torch ops?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_ops"] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> dict[str, Any]:
    """Relative error (norm) and the elementwise bound against an fp32 reference."""
    got = out.float()
    nan = int(torch.isnan(got).sum())
    diff = (got - ref).abs()
    rms = float(ref.pow(2).mean().sqrt())
    rel = float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref))
    over = int((diff > ELEM_TOL[dtype] * (ref.abs() + rms)).sum())
    ok = nan == 0 and math.isfinite(rel) and rel <= REL_TOL[dtype] and over == 0
    return {"ok": ok, "rel_err": rel, "nan": nan, "elements_over_bound": over,
            "max_abs_diff": float(diff.max())}


def torch_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.matmul(x, w.t())


class Projection(torch.nn.Module):
    """The test model: ``gelu(x @ W^T) * 0.5``, the GEMM through ``mm`` (the tuned op or
    torch.matmul), an epilogue torch.compile fuses into one pointwise kernel."""

    def __init__(self, mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], weight: torch.Tensor):
        super().__init__()
        self.mm = mm
        self.weight = weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.mm(x, self.weight)) * 0.5


def model_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.float() @ w.float().t()) * 0.5


def poisoned_call(fn: Callable[[], torch.Tensor], shape: tuple[int, ...],
                  dtype: torch.dtype) -> tuple[torch.Tensor, bool]:
    """``fn()`` right after a NaN-filled tensor of its output's size was freed: the caching
    allocator hands the same block back, so an element the kernel skips stays NaN. Returns the
    output and whether it did land in the poisoned block."""
    poison = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    pointer = poison.data_ptr()
    del poison
    out = fn()
    torch.cuda.synchronize()
    return out, out.data_ptr() == pointer


def capture(fn: Callable[[torch.Tensor], torch.Tensor],
            static_x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm ``fn`` up on a side stream (as torch.cuda.graph asks), then capture one call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(static_x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = fn(static_x)
    torch.cuda.synchronize()
    return graph, static_y


def replay_check(graph: torch.cuda.CUDAGraph, static_x: torch.Tensor, static_y: torch.Tensor,
                 reference: Callable[[torch.Tensor], torch.Tensor], dtype: str) -> dict[str, Any]:
    """Fresh inputs into the graph's input, its output poisoned, one replay, checked."""
    static_x.copy_(torch.randn_like(static_x, dtype=torch.float32).to(static_x.dtype))
    static_y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return compare(static_y, reference(static_x), dtype)


def batch_us(fn: Callable[[], Any], calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def paired(op_fn: Callable[[], Any], ref_fn: Callable[[], Any], rounds: int, batch: int,
           warmup: int) -> dict[str, Any]:
    """Alternating batches (op first in even rounds, torch.matmul first in odd ones); per round
    ratio = torch.matmul time / op time."""
    for _ in range(warmup):
        op_fn()
        ref_fn()
    torch.cuda.synchronize()
    op_us, ref_us, ratios = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            a = batch_us(op_fn, batch)
            b = batch_us(ref_fn, batch)
        else:
            b = batch_us(ref_fn, batch)
            a = batch_us(op_fn, batch)
        op_us.append(a)
        ref_us.append(b)
        ratios.append(b / a)
    deciles = statistics.quantiles(ratios, n=10)
    return {"rounds": rounds, "batch": batch, "warmup_calls": warmup,
            "ratio_median": statistics.median(ratios), "ratio_p10": deciles[0], "ratio_p90": deciles[8],
            "op_us_median": statistics.median(op_us), "matmul_us_median": statistics.median(ref_us),
            "ratios": ratios, "op_us": op_us, "matmul_us": ref_us}


class Sections:
    """Runs named checks; one that raises is recorded with its error, the rest still run."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def run(self, where: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            where[name] = fn()
        except Exception as exc:  # recorded, not hidden: the JSON says what raised and where
            where[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            self.failed.append(name)
            print(f"  {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            return None
        if isinstance(where[name], dict):
            where[name]["seconds"] = round(time.perf_counter() - started, 3)
        return where[name]


def check_kernel(ops: Any, kernel: Any, args: argparse.Namespace, sections: Sections) -> dict[str, Any]:
    sizes = dict(kernel.sizes)
    m, n, k = sizes["m"], sizes["n"], sizes["k"]
    dtype = DTYPES[kernel.dtype]
    op = getattr(torch.ops.tsopt, kernel.name)
    result: dict[str, Any] = {"name": kernel.name, "genome_hash": kernel.genome_hash, "m": m, "n": n, "k": k,
                              "dtype": kernel.dtype}
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = torch.randn(n, k, device="cuda").to(dtype)

    def eager() -> dict[str, Any]:
        out, poisoned = poisoned_call(lambda: op(x, w), (m, n), dtype)
        found = compare(out, x.float() @ w.float().t(), kernel.dtype)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dispatched = torch.ops.tsopt.gemm(x, w)
        torch.cuda.synchronize()
        return {**found, "poisoned_output": poisoned,
                "dispatch_warnings": [str(c.message) for c in caught],
                "dispatch_same_output": bool(torch.equal(dispatched, out))}

    sections.run(result, "eager", eager)
    models: dict[str, Any] = {}

    def compiled() -> dict[str, Any]:
        with_op = torch.compile(Projection(op, w), fullgraph=True)
        with_mm = torch.compile(Projection(torch_mm, w), fullgraph=True)
        started = time.perf_counter()
        y = with_op(x)
        torch.cuda.synchronize()
        compile_op_s = time.perf_counter() - started
        started = time.perf_counter()
        with_mm(x)
        torch.cuda.synchronize()
        compile_mm_s = time.perf_counter() - started
        models.update(op=with_op, mm=with_mm)
        fresh = torch.randn(m, k, device="cuda").to(dtype)
        found = compare(with_op(fresh), model_reference(fresh, w), kernel.dtype)
        return {**found, "first_output_finite": bool(torch.isfinite(y.float()).all()),
                "compile_op_s": compile_op_s, "compile_matmul_s": compile_mm_s}

    sections.run(result, "compiled", compiled)
    graphs: dict[str, Any] = {}

    def graphed() -> dict[str, Any]:
        static_x = x.clone()
        g_op, y_op = capture(lambda t: op(t, w), static_x)
        alone = replay_check(g_op, static_x, y_op, lambda t: t.float() @ w.float().t(), kernel.dtype)
        static_m = x.clone()
        g_model, y_model = capture(models["op"], static_m)
        model = replay_check(g_model, static_m, y_model, lambda t: model_reference(t, w), kernel.dtype)
        static_r = x.clone()
        g_ref, _ = capture(models["mm"], static_r)
        graphs.update(op=g_model, mm=g_ref)
        return {"op_alone": alone, "compiled_model": model, "ok": alone["ok"] and model["ok"]}

    if "op" in models:
        sections.run(result, "cuda_graph", graphed)

    if "op" in models:
        sections.run(result, "timing_compiled", lambda: paired(
            lambda: models["op"](x), lambda: models["mm"](x), args.rounds, args.batch, args.warmup))
    if "op" in graphs:
        sections.run(result, "timing_graph_replay", lambda: paired(
            graphs["op"].replay, graphs["mm"].replay, args.rounds, args.batch, args.warmup))
    return result


def check_fallback(ops: Any, tuned: set[tuple[int, int, int]], dtype: str,
                   sections: Sections) -> dict[str, Any]:
    m, n, k = next(s for s in FALLBACK_SHAPES if s not in tuned)
    torch_dtype = DTYPES[dtype]
    a = torch.randn(m, k, device="cuda").to(torch_dtype)
    b = torch.randn(n, k, device="cuda").to(torch_dtype)
    result: dict[str, Any] = {"m": m, "n": n, "k": k, "dtype": dtype}

    def eager() -> dict[str, Any]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = torch.ops.tsopt.gemm(a, b)
            second = torch.ops.tsopt.gemm(a, b)
        expected = torch.matmul(a, b.t())
        fallback = [str(c.message) for c in caught if issubclass(c.category, ops.FallbackWarning)]
        return {"warnings": fallback, "warned_once": len(fallback) == 1,
                "equals_matmul": bool(torch.equal(first, expected) and torch.equal(second, expected))}

    def compiled() -> dict[str, Any]:
        fn = torch.compile(lambda p, q: torch.nn.functional.relu(torch.ops.tsopt.gemm(p, q)), fullgraph=True)
        got = fn(a, b)
        expected = torch.nn.functional.relu(torch.matmul(a, b.t()))
        return {"max_abs_diff": float((got.float() - expected.float()).abs().max()),
                "close": bool(torch.allclose(got.float(), expected.float(), rtol=1e-2, atol=1e-2))}

    sections.run(result, "eager", eager)
    sections.run(result, "compiled", compiled)
    return result


def check_errors(ops: Any, kernel: Any) -> dict[str, Any]:
    """Each bad input must raise the op's KernelInputError naming the problem, on the GPU."""
    sizes = dict(kernel.sizes)
    m, n, k = sizes["m"], sizes["n"], sizes["k"]
    dtype = DTYPES[kernel.dtype]
    op = getattr(torch.ops.tsopt, kernel.name)
    w = torch.randn(n, k, device="cuda").to(dtype)
    flat = torch.randn(m * k + 8, device="cuda").to(dtype)
    cases = {
        "cpu": ((torch.randn(m, k).to(dtype), w.cpu()), "not on a CUDA device (on cpu)"),
        "dtype": ((torch.randn(m, k, device="cuda").half() if dtype != torch.float16
                   else torch.randn(m, k, device="cuda").bfloat16(), w), "dtype torch."),
        "shape": ((torch.randn(m // 2, k, device="cuda").to(dtype), w),
                  f"shape ({m // 2}, {k}) != ({m}, {k})"),
        "non_contiguous": ((torch.randn(k, m, device="cuda").to(dtype).t(), w), "not contiguous"),
        "misaligned": ((flat[1:1 + m * k].view(m, k), w), "not 16-byte aligned"),
    }
    found = {}
    for name, (inputs, expected) in cases.items():
        try:
            op(*inputs)
            torch.cuda.synchronize()
            found[name] = {"raised": None, "ok": False}
        except ops.KernelInputError as exc:
            found[name] = {"raised": str(exc), "ok": expected in str(exc) and "\n" not in str(exc)}
        except Exception as exc:  # the wrong kind of failure: recorded as not ok
            found[name] = {"raised": f"{type(exc).__name__}: {exc}", "ok": False}
    # After the refusals the op still runs (nothing was half-launched).
    x = torch.randn(m, k, device="cuda").to(dtype)
    found["still_runs"] = compare(op(x, w), x.float() @ w.float().t(), kernel.dtype)
    found["ok"] = all(v["ok"] for v in found.values())
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="an export directory (one study or a package)")
    parser.add_argument("--json", type=Path, required=True, help="where to write the results")
    parser.add_argument("--rounds", type=int, default=21, help=f"paired rounds (at least {MIN_ROUNDS})")
    parser.add_argument("--batch", type=int, default=20, help="calls per timed batch")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up calls of each side")
    args = parser.parse_args()
    if args.rounds < MIN_ROUNDS:
        parser.error(f"--rounds {args.rounds}: at least {MIN_ROUNDS}")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check runs on a GPU machine")
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 references stay fp32
    torch.manual_seed(0)
    sections = Sections()
    ops = load_torch_ops(args.export)
    started = time.perf_counter()
    package = ops.load(args.export)
    doc: dict[str, Any] = {
        "export": str(args.export), "load_seconds": round(time.perf_counter() - started, 3),
        "kernels": [{"name": k.name, "genome_hash": k.genome_hash, "directory": str(k.directory)}
                    for k in package.kernels],
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
                        "capability": list(torch.cuda.get_device_capability(0))},
        "manifest": json.loads((args.export / "manifest.json").read_text()).get("kernels"),
        "results": [],
    }
    gemms = [k for k in package.kernels if k.op == "gemm"]
    if not gemms:
        raise SystemExit(f"{args.export}: no GEMM kernel (this check builds a GEMM model)")
    for kernel in gemms:
        print(f"{kernel.name} ({kernel.genome_hash[:12]})", flush=True)
        doc["results"].append(check_kernel(ops, kernel, args, sections))
    tuned = {(dict(k.sizes)["m"], dict(k.sizes)["n"], dict(k.sizes)["k"]) for k in gemms}
    doc["fallback"] = check_fallback(ops, tuned, gemms[0].dtype, sections)
    sections.run(doc, "errors", lambda: check_errors(ops, gemms[0]))
    doc["fallbacks_seen"] = [{"op": f.op, "dtype": f.dtype, "sizes": f.sizes, "reasons": f.reasons,
                              "calls": f.calls} for f in ops.fallbacks()]
    doc["tsopt_imported"] = any(name == "tsopt" or name.startswith("tsopt.") for name in sys.modules)
    doc["failed_sections"] = sections.failed
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2, default=str))
    for r in doc["results"]:
        for key in ("timing_compiled", "timing_graph_replay"):
            t = r.get(key) or {}
            if "ratio_median" in t:
                print(f"{r['name']} {key}: torch.matmul/op median {t['ratio_median']:.3f} "
                      f"(p10 {t['ratio_p10']:.3f}, p90 {t['ratio_p90']:.3f}); "
                      f"op {t['op_us_median']:.1f} us, "
                      f"matmul {t['matmul_us_median']:.1f} us", flush=True)
    print(f"wrote {args.json}; failed sections: {sections.failed or 'none'}", flush=True)
    return 1 if sections.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
