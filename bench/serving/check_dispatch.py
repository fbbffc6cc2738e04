"""On the GPU: the dispatching op ``torch.ops.tsopt.gemm`` of a package routes by M, correctly,
under torch.compile with a dynamic M and inside CUDA graphs captured at several M, at a host
cost near torch.matmul's (issue 30, items 2 and 6).

Torch, the standard library and the package only (no tsopt, no DSL)::

    python3 bench/serving/check_dispatch.py --package EXPORT_DIR --json OUT.json
    python3 bench/serving/check_dispatch.py --artifacts A_DIR,B_DIR,... --json OUT.json

``--package``: a ``tsopt export`` of several GEMM studies (``tsopt export --workload FILE``).
``--artifacts``: built artifact directories (a bundle's ``artifacts/*``), made into a package
here first (each kernel's ``m_range`` from its artifact.json, else [M, M]; the package's
``torch_ops.py`` and ``loader.py`` from this tree's ``workers/``): for kernels never measured,
whose export ``tsopt export`` would refuse. For each (dtype, N, K) of the package:

1. **routing** (eager): at every kernel's range ends and middle, and at Ms no kernel serves,
   two calls of ``torch.ops.tsopt.gemm(a, b)``: where ``torch_ops.kernel_for`` names no
   kernel, exactly one FallbackWarning (once per shape), where it names one, none; and the
   output within the dtype's tolerance of ``a.float() @ b.float().T`` (a wrong kernel for the
   M, a fixed-M kernel at another M, is not);
2. **bad input**: a runtime-M kernel's own op given another N, K, or an M outside its range
   raises one KernelInputError naming the expected size; a fixed-M one's names the shape;
3. **torch.compile(fullgraph=True, dynamic=True)** of a layer calling the dispatcher: no graph
   break, and no more frames than the same layer on ``torch.matmul`` compiles for the same Ms
   (dynamo specializes M = 1, so both make two when M = 1 is among them), outputs correct;
4. **CUDA graphs**: at each M, the dispatcher's call captured in a ``torch.cuda.CUDAGraph``
   (warmed up outside it), replayed after new inputs are copied in, output correct; and
   ``torch.compile(mode="reduce-overhead")`` (cudagraph trees) at every M;
5. **host cost**: µs per call of the dispatcher and of ``torch.matmul`` at each tuned M, the GPU
   kept busy by a sleep kernel so only the host counts (as bench/host_cost), 15 passes of 100
   calls in alternation: the difference of the medians, against issue 30's 5 µs.

Prints one line per check and ``failed: ...`` at the end; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch._dynamo

ROOT = Path(__file__).resolve().parents[2]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REL_TOL = {"bf16": 1e-2, "fp16": 5e-3}
GOAL_US = 5.0


def make_package(artifacts: list[Path], top: Path) -> Path:
    """A package of ``artifacts`` (torch_ops.py's manifest format), with this tree's runtime."""
    entries = []
    for artifact in artifacts:
        doc = json.loads((artifact / "artifact.json").read_text())
        problem = doc["problem"]
        sizes = [["m", int(problem["m"])], ["n", int(problem["n"])], ["k", int(problem["k"])]]
        m_range = doc.get("m_range") or [sizes[0][1], sizes[0][1]]
        runtime_m = doc.get("m_range") is not None
        name = (f"gemm_{problem['dtype']}_" + (f"{m_range[0]}_{m_range[1]}" if runtime_m
                                                else str(sizes[0][1]))
                + f"x{sizes[1][1]}x{sizes[2][1]}")
        shutil.copytree(artifact, top / name)
        entries.append({"name": name, "op": "gemm", "dtype": problem["dtype"], "sizes": sizes,
                        "dir": name, "genome_hash": doc.get("genome_hash", ""),
                        "m_range": m_range, "runtime_m": runtime_m})
    for module in ("loader.py", "torch_ops.py"):
        shutil.copy2(ROOT / "workers" / module, top / module)
    (top / "manifest.json").write_text(json.dumps({"format": "tsopt-export", "version": 2,
                                                   "package": True, "kernels": entries,
                                                   "files": {}}, indent=1))
    return top


def load_torch_ops(directory: Path) -> Any:
    spec = importlib.util.spec_from_file_location("torch_ops", directory / "torch_ops.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_ops"] = module
    spec.loader.exec_module(module)
    return module


def rel_err(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    ref = a.float() @ b.float().t()
    return float(torch.linalg.vector_norm((out.float() - ref).double())
                 / torch.linalg.vector_norm(ref.double()))


class Sleeper:
    """Keeps the GPU busy: ``torch.cuda._sleep`` calibrated in cycles per µs."""

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

    def host_us(self, fn: Callable[[], Any], calls: int) -> tuple[float, bool]:
        torch.cuda.synchronize()
        torch.cuda._sleep(int(max(3000.0, 300.0 * calls) * self.cycles_per_us))
        asleep = torch.cuda.Event()
        asleep.record()
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - started
        busy = not asleep.query()
        torch.cuda.synchronize()
        return elapsed * 1e6 / calls, busy


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []
        self.doc: dict[str, Any] = {"checks": []}

    def check(self, name: str, ok: bool, detail: str = "", **figures: Any) -> bool:
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        self.doc["checks"].append({"name": name, "ok": ok, "detail": detail, **figures})
        if not ok:
            self.failed.append(name)
        return ok


def group_ms(kernels: list[Any]) -> tuple[list[int], list[int]]:
    """Ms some kernel of one (dtype, N, K) serves (its range ends and middle), and Ms none does."""
    served: set[int] = set()
    for k in kernels:
        lo, hi = k.m_range
        served |= {lo, (lo + hi) // 2, hi}
    covered = lambda m: any(k.m_range[0] <= m <= k.m_range[1] for k in kernels)  # noqa: E731
    top = max(k.m_range[1] for k in kernels)
    outside = [m for m in (top + 1, top + 7, 2 * top + 3) if not covered(m)]
    outside += [m for m in range(1, top) if not covered(m)][:3]
    return sorted(served), sorted(set(outside))


@dataclass
class Group:
    """One (dtype, N, K) of the package: its kernels, the weight, and inputs at every M tried."""

    ops: Any
    group: list[Any]
    first: Any
    dtype: Any
    n: int
    k: int
    label: str
    gen: Any
    b: Any
    served: list[int]
    outside: list[int]
    xs: dict[int, Any]


def check_group(ops: Any, group: list[Any], checks: Checks, sleeper: Sleeper,
                passes: int, calls: int) -> None:
    first = group[0]
    dtype = DTYPES[first.dtype]
    sizes = dict(first.sizes)
    n, k = sizes["n"], sizes["k"]
    label = f"{first.dtype} N={n} K={k}"
    gen = torch.Generator(device="cuda").manual_seed(0)
    b = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25).to(dtype)
    served, outside = group_ms(group)
    xs = {m: (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(dtype)
          for m in served + outside}
    g = Group(ops, group, first, dtype, n, k, label, gen, b, served, outside, xs)
    check_routing(g, checks)
    check_refusals(g, checks)
    check_compile_and_graphs(g, checks)
    check_host_cost(g, checks, sleeper, passes, calls)


def check_routing(g: Group, checks: Checks) -> None:
    """Each M routed, eagerly: the kernel the dispatch table names, or torch with one warning."""
    ops, first, n, k, label, b, served, outside, xs = (
        g.ops, g.first, g.n, g.k, g.label, g.b, g.served, g.outside, g.xs)
    for m in served + outside:
        a = xs[m]
        want = ops.kernel_for("gemm", first.dtype, (("m", m), ("n", n), ("k", k)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.ops.tsopt.gemm(a, b)
            again = torch.ops.tsopt.gemm(a, b)
        torch.cuda.synchronize()
        fallback = [w for w in caught if issubclass(w.category, ops.FallbackWarning)]
        err = max(rel_err(out, a, b), rel_err(again, a, b))
        routed = want.name if want is not None else "torch.matmul"
        ok = (err <= REL_TOL[first.dtype] and tuple(out.shape) == (m, n)
              and len(fallback) == (0 if want is not None else 1))
        checks.check(f"route {label} M={m}", ok, f"-> {routed}, rel err {err:.2e}, "
                     f"{len(fallback)} fallback warning(s) for 2 calls", m=m, routed=routed,
                     rel_err=err, warnings=len(fallback))


def check_refusals(g: Group, checks: Checks) -> None:
    """Bad input on each kernel's own op: one line naming the expected size."""
    ops, group, dtype, n, k, b, served, xs = (
        g.ops, g.group, g.dtype, g.n, g.k, g.b, g.served, g.xs)
    for kernel in group:
        op = getattr(torch.ops.tsopt, kernel.name)
        lo, hi = kernel.m_range
        bad = [("N", xs[served[0]][:1].expand(hi, k).contiguous(), b[:-1].contiguous(),
                f"N={n - 1}, expected N={n}" if kernel.runtime_m else "shape")]
        if kernel.runtime_m:
            bad.append(("M", torch.zeros(hi + 1, k, device="cuda", dtype=dtype), b,
                        f"M={hi + 1}, outside the kernel's range {lo}-{hi}"))
        for what, a, w, expect in bad:
            try:
                op(a, w)
                checks.check(f"refuse {kernel.name} {what}", False, "no error")
            except ops.KernelInputError as exc:
                text = str(exc)
                checks.check(f"refuse {kernel.name} {what}", expect in text and "\n" not in text,
                             text[:160])


def check_compile_and_graphs(g: Group, checks: Checks) -> None:
    """torch.compile with dynamic M (no frame beyond torch.matmul's), CUDA graphs at several M,
    cudagraph trees."""
    first, dtype, k, label, gen, b, served, outside, xs = (
        g.first, g.dtype, g.k, g.label, g.gen, g.b, g.served, g.outside, g.xs)

    def layer(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(torch.ops.tsopt.gemm(x, b))

    def frames_for(gemm: Any) -> tuple[int, dict[int, float]]:
        """Frames torch.compile(fullgraph, dynamic) makes over every M, and each M's error."""
        torch._dynamo.reset()
        frames = {"n": 0}

        def counting(gm: Any, example_inputs: Any) -> Any:
            frames["n"] += 1
            from torch._inductor.compile_fx import compile_fx

            return compile_fx(gm, example_inputs)

        compiled = torch.compile(lambda x: torch.nn.functional.silu(gemm(x)), fullgraph=True,
                                 dynamic=True, backend=counting)
        errs = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for m in served + outside:
                out = compiled(xs[m])
                ref = torch.nn.functional.silu(xs[m].float() @ b.float().t()).to(dtype)
                errs[m] = float(torch.linalg.vector_norm((out.float() - ref.float()).double())
                                / torch.linalg.vector_norm(ref.double()))
        return frames["n"], errs

    # Dynamo specializes a size of 1 even with dynamic=True, so a sequence holding M = 1
    # compiles two frames on torch.matmul alone: the op must add none to what matmul makes.
    try:
        vendor_frames, _ = frames_for(lambda x: x @ b.t())
        ours, errs = frames_for(lambda x: torch.ops.tsopt.gemm(x, b))
        ok = ours == vendor_frames and max(errs.values()) <= 2 * REL_TOL[first.dtype]
        checks.check(f"torch.compile fullgraph dynamic M {label}", ok,
                     f"{ours} frame(s) compiled for {len(errs)} Ms (torch.matmul: "
                     f"{vendor_frames}), worst rel err {max(errs.values()):.2e}", frames=ours,
                     matmul_frames=vendor_frames, rel_err=errs)
    except Exception as exc:  # noqa: BLE001 - recorded as a failed check
        checks.check(f"torch.compile fullgraph dynamic M {label}", False,
                     "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300])
    for m in served + outside[:1]:
        static_a = xs[m].clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ops.tsopt.gemm(static_a, b)  # warm: routed outside the capture
            torch.cuda.synchronize()
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = torch.ops.tsopt.gemm(static_a, b)
                fresh = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(dtype)
                static_a.copy_(fresh)
                graph.replay()
                torch.cuda.synchronize()
                err = rel_err(static_out, fresh, b)
                checks.check(f"cuda graph {label} M={m}", err <= REL_TOL[first.dtype],
                             f"replayed on new inputs, rel err {err:.2e}", m=m, rel_err=err)
            except Exception as exc:  # noqa: BLE001
                checks.check(f"cuda graph {label} M={m}", False,
                             "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300])
    try:
        torch._dynamo.reset()
        overhead = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
        errs = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for m in served:
                for _ in range(3):  # recorded, then replayed
                    out = overhead(xs[m]).clone()
                ref = torch.nn.functional.silu(xs[m].float() @ b.float().t())
                errs[m] = float(torch.linalg.vector_norm((out.float() - ref).double())
                                / torch.linalg.vector_norm(ref.double()))
        checks.check(f"torch.compile reduce-overhead (cudagraph trees) {label}",
                     max(errs.values()) <= 2 * REL_TOL[first.dtype],
                     f"{len(errs)} Ms, worst rel err {max(errs.values()):.2e}", rel_err=errs)
    except Exception as exc:  # noqa: BLE001
        checks.check(f"torch.compile reduce-overhead (cudagraph trees) {label}", False,
                     "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300])


def check_host_cost(g: Group, checks: Checks, sleeper: Sleeper, passes: int, calls: int) -> None:
    """Host time per call of the op against torch.matmul, the GPU kept busy."""
    label, b, served, xs = g.label, g.b, g.served, g.xs
    for m in served:
        a = xs[m]
        rows: dict[str, list[float]] = {"torch.matmul": [], "torch.ops.tsopt.gemm": []}
        fns = {"torch.matmul": lambda a=a: torch.matmul(a, b.t()),
               "torch.ops.tsopt.gemm": lambda a=a: torch.ops.tsopt.gemm(a, b)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for fn in fns.values():
                fn()
            not_busy = 0
            for index in range(passes):
                order = list(fns) if index % 2 == 0 else list(reversed(fns))
                for name in order:
                    us, busy = sleeper.host_us(fns[name], calls)
                    rows[name].append(us)
                    not_busy += 0 if busy else 1
        op_us = statistics.median(rows["torch.ops.tsopt.gemm"])
        mm_us = statistics.median(rows["torch.matmul"])
        checks.check(f"host cost {label} M={m}", op_us - mm_us <= GOAL_US,
                     f"op {op_us:.2f} us vs torch.matmul {mm_us:.2f} us per call "
                     f"({op_us - mm_us:+.2f}; {not_busy} batches the GPU did not cover)",
                     m=m, op_us=op_us, matmul_us=mm_us, op_all=rows["torch.ops.tsopt.gemm"],
                     matmul_all=rows["torch.matmul"], uncovered=not_busy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path)
    parser.add_argument("--artifacts", help="comma-separated artifact directories")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    if (args.package is None) == (args.artifacts is None):
        parser.error("give --package or --artifacts")
    scratch = Path(tempfile.mkdtemp(prefix="check-dispatch-"))
    package = args.package or make_package([Path(p) for p in args.artifacts.split(",")],
                                           scratch / "package")
    checks = Checks()
    checks.doc.update(torch=torch.__version__, cuda=torch.version.cuda,
                      device=torch.cuda.get_device_name(0), package=str(package))
    ops = load_torch_ops(Path(package))
    loaded = ops.load(package)
    checks.doc["kernels"] = [{"name": k.name, "m_range": k.m_range, "runtime_m": k.runtime_m,
                              "genome_hash": k.genome_hash} for k in loaded.kernels]
    print(f"{len(loaded.kernels)} kernels: " + ", ".join(
        f"{k.name} ({'runtime M ' if k.runtime_m else 'fixed M '}{k.m_range[0]}-{k.m_range[1]})"
        if k.m_range else k.name for k in loaded.kernels), flush=True)
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for kernel in loaded.kernels:
        if kernel.op == "gemm":
            groups.setdefault((kernel.dtype, kernel.fixed_sizes), []).append(kernel)
    sleeper = Sleeper()
    for group in groups.values():
        try:
            check_group(ops, group, checks, sleeper, args.passes, args.calls)
        except Exception:  # noqa: BLE001
            checks.check("group", False, traceback.format_exc()[-600:])
    checks.doc["failed"] = checks.failed
    print(f"failed: {', '.join(checks.failed) or 'none'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(checks.doc, indent=1, default=str))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
