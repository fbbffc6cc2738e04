"""tsopt kernels as PyTorch operators, ``torch.ops.tsopt.*``: for torch.compile and CUDA graphs.

Imports only torch, the standard library and ``loader.py`` beside it: ``tsopt export`` copies
this file into every export as ``torch_ops.py``. Usage::

    import sys; sys.path.insert(0, "best-gemm")
    import torch_ops
    torch_ops.load("best-gemm")                            # registers the export's ops
    d = torch.ops.tsopt.gemm_bf16_8192x8192x8192(a, b)     # D = A @ B^T, this problem only
    d = torch.ops.tsopt.gemm(a, b)                         # any shape: dispatched

Two kinds of op:

- **one per kernel**, named after its problem (``gemm_bf16_8192x8192x8192``,
  ``copy_fp16_4096x4096``): the tuned kernel, for exactly its shape and dtype (a runtime-M
  kernel, whose artifact.json has an ``m_range``: any M of that range, N and K its own). It
  checks its inputs before it launches and raises :class:`KernelInputError` naming what is
  wrong with each (device, dtype, shape or an M outside the range, layout, alignment).
- **one per op** (``torch.ops.tsopt.gemm``: ``a @ b.T``; ``torch.ops.tsopt.copy``): a dispatch
  table over the kernels of every package loaded. An input it has a kernel for (that shape
  and dtype; CUDA, contiguous, aligned) runs the tuned kernel; any other runs torch
  (``torch.matmul(a, b.t())``, ``src.clone()``) and warns once per shape, saying why
  (:class:`FallbackWarning`; :func:`fallbacks` lists them).

A GEMM kernel serves an M range (``m_range`` in the manifest: ``[M, M]`` for a fixed-M kernel,
``[lo, hi]`` for a runtime-M one, ``runtime_m`` true). The dispatcher routes a call by its M,
for its (dtype, N, K): the fixed-M kernel of exactly that M first, else the narrowest range
holding M (the lower start on a tie), else torch with the warning. An M range the export left
to the vendor on purpose (the manifest's ``vendor_routes``: ``tsopt export --workload
--vendor-floor``, a study measured below cuBLAS) runs torch without a warning; :func:`fallbacks`
still counts it, with the export's reason. A runtime-M kernel's own op
takes any M of its range and names the expected size of whatever differs (``b: N=4097,
expected N=4096``). Neither fake implementation reads M as a number, so a model compiled
with a dynamic M traces once for every M.

Both are registered through ``torch.library.Library`` (a schema and a plain Python kernel: the
dispatcher calls it directly, without ``torch.library.custom_op``'s per-call wrapper) and have
a fake (meta) implementation, so ``torch.compile(fullgraph=True)`` traces a model that calls
them without a graph break. Each op checks its inputs once per signature (sizes, strides,
dtype, device, data alignment: ``loader.signature``) and remembers the outcome (the
dispatcher: which kernel, or why it falls back); a call of a known signature goes straight to
the launch, so an op's host cost stays near torch.matmul's. The kernel launches on the current
CUDA stream, so a CUDA graph captures it. Its module is loaded by :func:`load` where CUDA is
available (else at the first call): loading is not stream work, so it must not first happen
inside a capture. The ops have no autograd formula (forward only).
The registry is this module's: load every package of a process through one import of it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

NAMESPACE = "tsopt"


def _sibling_loader() -> ModuleType:
    """``loader.py`` beside this file: ``tsopt.workers.loader`` inside tsopt, the export's own
    copy in an export (imported by path, so the export need not be on ``sys.path``)."""
    if __package__:
        from . import loader

        return loader
    path = Path(__file__).resolve().with_name("loader.py")
    name = "_tsopt_loader_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"torch_ops.py needs loader.py beside it: {path} is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


_loader = _sibling_loader()
KernelInputError = _loader.KernelInputError
KernelLoadError = _loader.KernelLoadError
TensorSpec = _loader.TensorSpec
TORCH_DTYPES: dict[str, torch.dtype] = _loader.TORCH_DTYPES
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}

Sizes = tuple[tuple[str, int], ...]


class FallbackWarning(UserWarning):
    """A dispatched call ran torch instead of a tuned kernel (once per shape and reason)."""


# -- what each op means, torch only ------------------------------------------------------------
def _gemm_sizes(tensors: Sequence[torch.Tensor]) -> Sizes:
    a, b = tensors
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or a.dtype != b.dtype:
        raise KernelInputError(
            f"torch.ops.{NAMESPACE}.gemm computes a @ b.T of a (m, k) and b (n, k) of one dtype; "
            f"got a {a.dtype}{list(a.shape)} and b {b.dtype}{list(b.shape)}")
    return (("m", int(a.shape[0])), ("n", int(b.shape[0])), ("k", int(a.shape[1])))


def _gemm_fake_shape(tensors: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    """The dispatcher's output shape while tracing: (M, N) as the tensors hold them (M may be
    symbolic: a dynamic batch, never specialised to a number here)."""
    a, b = tensors
    if a.dim() != 2 or b.dim() != 2 or a.dtype != b.dtype:
        _gemm_sizes(tensors)  # raises, naming what is wrong
    torch._check(a.shape[1] == b.shape[1], lambda: (  # type: ignore[no-untyped-call]
        f"torch.ops.{NAMESPACE}.gemm computes a @ b.T of a (m, k) and b (n, k); got a "
        f"{list(a.shape)} and b {list(b.shape)}"))
    return (a.shape[0], b.shape[0])


def _copy_fake_shape(tensors: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    (src,) = tensors
    if src.dim() != 2:
        _copy_sizes(tensors)
    return tuple(src.shape)


def _copy_sizes(tensors: Sequence[torch.Tensor]) -> Sizes:
    (src,) = tensors
    if src.dim() != 2:
        raise KernelInputError(f"torch.ops.{NAMESPACE}.copy copies a 2-D tensor; got src "
                               f"{src.dtype}{list(src.shape)}")
    return (("rows", int(src.shape[0])), ("cols", int(src.shape[1])))


@dataclass(frozen=True)
class OpKind:
    """One op tsopt tunes, as torch sees it: its arguments, its problem sizes read from them
    (rejecting what the op cannot mean), its output's shape, and torch's own version."""

    name: str
    arguments: tuple[str, ...]
    sizes: Callable[[Sequence[torch.Tensor]], Sizes]
    out_shape: Callable[[Sizes], tuple[int, ...]]
    fallback: Callable[[Sequence[torch.Tensor]], torch.Tensor]
    fallback_name: str
    fake_shape: Callable[[Sequence[torch.Tensor]], tuple[Any, ...]]


OP_KINDS: dict[str, OpKind] = {
    "gemm": OpKind("gemm", ("a", "b"), _gemm_sizes, lambda s: (s[0][1], s[1][1]),
                   lambda t: torch.matmul(t[0], t[1].t()), "torch.matmul(a, b.t())",
                   _gemm_fake_shape),
    "copy": OpKind("copy", ("src",), _copy_sizes, lambda s: (s[0][1], s[1][1]),
                   lambda t: t[0].clone(memory_format=torch.contiguous_format), "src.clone()",
                   _copy_fake_shape),
}


# -- the kernels of a package ------------------------------------------------------------------
@dataclass(frozen=True)
class PackagedKernel:
    """One tuned kernel of an export: its op name, problem, directory and signature."""

    name: str  # the op's name under torch.ops.tsopt, e.g. gemm_bf16_8192x8192x8192
    op: str
    dtype: str
    sizes: Sizes
    directory: Path
    genome_hash: str
    inputs: tuple[Any, ...]  # loader.TensorSpec, in call order
    output: Any  # loader.TensorSpec
    m_range: tuple[int, int] | None = None
    """The Ms a GEMM kernel serves: (M, M) for a fixed-M kernel, (lo, hi) for a runtime-M one;
    None for an op without M."""
    runtime_m: bool = False
    """M is the launch's (A's first dimension): one kernel for every M of ``m_range``."""

    @property
    def qualified(self) -> str:
        return f"torch.ops.{NAMESPACE}.{self.name}"

    @property
    def problem_text(self) -> str:
        if self.runtime_m and self.m_range is not None:
            rest = "x".join(str(v) for n, v in self.sizes if n != "m")
            return f"{self.op} {self.dtype} {self.m_range[0]}-{self.m_range[1]}x{rest}"
        return f"{self.op} {self.dtype} " + "x".join(str(v) for _, v in self.sizes)

    @property
    def fixed_sizes(self) -> Sizes:
        """Its sizes but M: the (N, K) a call must match to be routed to it."""
        return without_m(self.sizes)


def without_m(sizes: Sizes) -> Sizes:
    """A GEMM's sizes but M: the (N, K) a call must match to be routed by its M."""
    return tuple((n, v) for n, v in sizes if n != "m")


class _OnPurpose(str):
    """Why a call runs torch when the export chose it (a vendor route): no warning."""


@dataclass(frozen=True)
class VendorRoute:
    """An M range of one GEMM (dtype, N, K) that the export left to torch on purpose, and why."""

    op: str
    dtype: str
    fixed_sizes: Sizes
    m_range: tuple[int, int]
    why: str


@dataclass(frozen=True)
class KernelPackage:
    """What :func:`load` registered: the export's directory and its kernels."""

    directory: Path
    kernels: tuple[PackagedKernel, ...]
    vendor_routes: tuple[VendorRoute, ...] = ()

    def op(self, name: str) -> Any:
        """The registered op of kernel ``name`` (``torch.ops.tsopt.<name>``)."""
        return getattr(getattr(torch.ops, NAMESPACE), name)

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        return f"<tsopt package {self.directory}: {names}>"


@dataclass(frozen=True)
class Fallback:
    """A shape a dispatched op ran torch for, why, and how many calls did (eager calls and
    captures: a CUDA graph's replays run no Python)."""

    op: str
    dtype: str
    sizes: Sizes
    reasons: tuple[str, ...]
    calls: int


def _manifest(directory: Path) -> dict[str, Any]:
    path = directory / "manifest.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise KernelLoadError(f"{directory}: not a tsopt export (no manifest.json)") from None
    except ValueError as exc:
        raise KernelLoadError(f"{path}: malformed ({exc})") from None
    if doc.get("format") != "tsopt-export":
        raise KernelLoadError(f"{path}: not a tsopt export manifest (format {doc.get('format')!r})")
    return dict(doc)


def _vendor_routes(directory: Path, doc: dict[str, Any]) -> tuple[VendorRoute, ...]:
    routes = []
    for entry in doc.get("vendor_routes", ()):
        try:
            if entry["op"] not in OP_KINDS:
                raise ValueError(f"op {entry['op']!r} has no PyTorch op here")
            lo, hi = (int(v) for v in entry["m_range"])
            routes.append(VendorRoute(str(entry["op"]), str(entry["dtype"]),
                                      (("n", int(entry["n"])), ("k", int(entry["k"]))),
                                      (lo, hi), str(entry["why"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise KernelLoadError(f"{directory / 'manifest.json'}: vendor route {entry!r} is "
                                  f"malformed ({exc!r})") from None
    return tuple(routes)


def _kernel_entries(directory: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    if "kernels" in doc:
        return list(doc["kernels"])
    # An export written before packages (version 1): one kernel, at the top.
    problem = dict(doc["problem"])
    op, dtype = problem.pop("op"), problem.pop("dtype")
    order = {"gemm": ("m", "n", "k"), "copy": ("rows", "cols")}[op]
    sizes = [[n, int(problem[n])] for n in order]
    name = "_".join([op, dtype, "x".join(str(v) for _, v in sizes)])
    return [{"name": name, "op": op, "dtype": dtype, "sizes": sizes, "dir": ".",
             "genome_hash": doc.get("genome_hash", "")}]


def _m_range(entry: dict[str, Any], kernel_dir: Path, op: str,
             sizes: Sizes) -> tuple[tuple[int, int] | None, bool]:
    """A GEMM kernel's M range and whether M is the launch's, from its manifest entry and its
    artifact.json (which must agree); an entry written before ranges is a fixed-M kernel."""
    if op != "gemm":
        return None, False
    m = dict(sizes)["m"]
    try:
        doc = json.loads((kernel_dir / "artifact.json").read_text())
    except (OSError, ValueError) as exc:
        raise KernelLoadError(f"{kernel_dir}: artifact.json unreadable ({exc})") from None
    built = doc.get("m_range")
    runtime_m = bool(entry.get("runtime_m", built is not None))
    listed = entry.get("m_range")
    found = listed if listed is not None else (built if built is not None else [m, m])
    if (not isinstance(found, list) or len(found) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in found)
            or not 1 <= found[0] <= found[1]):
        raise KernelLoadError(f"{kernel_dir}: m_range {found!r} is not [lo, hi]")
    if runtime_m and (built is None or list(built) != list(found)):
        raise KernelLoadError(f"{kernel_dir}: the manifest says a runtime-M kernel for M "
                              f"{found[0]}-{found[1]}, its artifact.json m_range is {built!r}")
    if not runtime_m and found != [m, m]:
        raise KernelLoadError(f"{kernel_dir}: a fixed-M kernel for M={m} cannot serve M "
                              f"{found[0]}-{found[1]}")
    return (int(found[0]), int(found[1])), runtime_m


def read_package(directory: Path | str) -> KernelPackage:
    """The kernels an export holds (reads its manifests; registers nothing, opens nothing)."""
    root = Path(directory).resolve()
    doc = _manifest(root)
    kernels = []
    for entry in _kernel_entries(root, doc):
        kernel_dir = (root / entry["dir"]).resolve()
        artifact = _loader.KernelManifest.read(kernel_dir)
        inputs = tuple(t for t in artifact.tensors if t.role == "input")
        outputs = [t for t in artifact.tensors if t.role == "output"]
        op = str(entry["op"])
        if op not in OP_KINDS:
            raise KernelLoadError(f"{kernel_dir}: op {op!r} has no PyTorch op here "
                                  f"(known: {', '.join(OP_KINDS)})")
        if len(outputs) != 1 or len(inputs) != len(OP_KINDS[op].arguments):
            raise KernelLoadError(f"{kernel_dir}: a {op} kernel takes {OP_KINDS[op].arguments} "
                                  f"and writes one output; artifact.json lists "
                                  f"{[t.name for t in artifact.tensors]}")
        sizes = tuple((str(n), int(v)) for n, v in entry["sizes"])
        m_range, runtime_m = _m_range(entry, kernel_dir, op, sizes)
        kernels.append(PackagedKernel(
            name=str(entry["name"]), op=op, dtype=str(entry["dtype"]), sizes=sizes,
            directory=kernel_dir, genome_hash=str(entry.get("genome_hash", "")), inputs=inputs,
            output=outputs[0], m_range=m_range, runtime_m=runtime_m))
    return KernelPackage(root, tuple(kernels), _vendor_routes(root, doc))


# -- checks ------------------------------------------------------------------------------------
def input_problems(kernel: PackagedKernel, tensors: Sequence[Any], tracing: bool = False) -> list[str]:
    """What is wrong with each input for ``kernel``, as ``name: problem, problem`` (empty: all
    fit). ``tracing``: fake or meta tensors (a meta device passes; no data pointer exists)."""
    found = []
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda}
    for spec, tensor in zip(kernel.inputs, tensors, strict=True):
        problems = (_loader.tensor_problems(spec, tensor, tracing) if kernel.m_range is None
                    else _loader.tensor_problems(spec, tensor, tracing, m_range=kernel.m_range))
        if len(devices) > 1 and isinstance(tensor, torch.Tensor) and tensor.is_cuda:
            problems.append(f"on {tensor.device}, while the inputs span {sorted(map(str, devices))}")
        if problems:
            found.append(f"{spec.name}: " + ", ".join(problems))
    return found


def range_input_problems(kernel: PackagedKernel, tensors: Sequence[Any],
                         tracing: bool = False) -> list[str]:
    """:func:`input_problems` for a runtime-M GEMM kernel: its inputs at the call's M (A's
    rows; symbolic while tracing, and then not range-checked), every other size named with
    the one expected (``a: K=4000, expected K=4096``; ``a: M=300, outside the kernel's range
    1-256``), then the checks of dtype, device, layout and alignment."""
    assert kernel.m_range is not None
    if len(tensors) != 2 or not all(isinstance(t, torch.Tensor) for t in tensors):
        return input_problems(kernel, tensors, tracing)
    a, b = tensors
    sizes = dict(kernel.sizes)
    lo, hi = kernel.m_range
    found = []
    if a.dim() != 2 or b.dim() != 2:
        return [f"a and b must be 2-D (a (M, K), b (N, K)); got a {list(a.shape)}, b "
                f"{list(b.shape)}"]
    a_sizes, b_sizes = [], []
    # A traced M is symbolic (torch.compile, dynamic): judged at run time; a concrete one now.
    concrete = not tracing or isinstance(a.shape[0], int)
    if concrete and not lo <= int(a.shape[0]) <= hi:
        a_sizes.append(f"M={int(a.shape[0])}, outside the kernel's range {lo}-{hi}")
    if a.shape[1] != sizes["k"]:
        a_sizes.append(f"K={a.shape[1]}, expected K={sizes['k']}")
    if b.shape[0] != sizes["n"]:
        b_sizes.append(f"N={b.shape[0]}, expected N={sizes['n']}")
    if b.shape[1] != sizes["k"]:
        b_sizes.append(f"K={b.shape[1]}, expected K={sizes['k']}")
    devices = {t.device for t in tensors if t.is_cuda}
    for spec, tensor, named in zip(kernel.inputs, tensors, (a_sizes, b_sizes), strict=True):
        # The shape is judged above, size by size; the rest as for any kernel.
        at_call = _loader.TensorSpec(spec.name, spec.role, tuple(tensor.shape), spec.dtype)
        problems = named + _loader.tensor_problems(at_call, tensor, tracing)
        if len(devices) > 1 and tensor.is_cuda:
            problems.append(f"on {tensor.device}, while the inputs span {sorted(map(str, devices))}")
        if problems:
            found.append(f"{spec.name}: " + ", ".join(problems))
    return found


def _problems(kernel: PackagedKernel, tensors: Sequence[Any], tracing: bool = False) -> list[str]:
    if kernel.runtime_m:
        return range_input_problems(kernel, tensors, tracing)
    return input_problems(kernel, tensors, tracing)


def _refuse(kernel: PackagedKernel, problems: list[str]) -> ValueError:
    """The one error naming every problem of every input (a KernelInputError)."""
    if kernel.runtime_m and kernel.m_range is not None:
        sizes = dict(kernel.sizes)
        wants = (f"a {kernel.dtype}[M, {sizes['k']}] for M in {kernel.m_range[0]}-"
                 f"{kernel.m_range[1]}, b {kernel.dtype}[{sizes['n']}, {sizes['k']}]")
    else:
        wants = ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in kernel.inputs)
    return KernelInputError(
        f"{kernel.qualified} (tuned for {kernel.problem_text}, inputs " + wants
        + f" on a CUDA device, contiguous, {_loader.TMA_ALIGNMENT}-byte aligned): " + "; ".join(problems)
        + f". torch.ops.{NAMESPACE}.{kernel.op} takes any shape (falling back to torch).")


# -- registration ------------------------------------------------------------------------------
_KERNELS: dict[str, PackagedKernel] = {}  # op name -> kernel
_TABLE: dict[tuple[str, str, Sizes], PackagedKernel] = {}  # (op, dtype, sizes) -> kernel
# (op, dtype, sizes but M) -> its runtime-M kernels, narrowest range first (then lowest start)
_RANGED: dict[tuple[str, str, Sizes], list[PackagedKernel]] = {}
_LOADED: dict[str, Any] = {}  # op name -> loader.LoadedKernel, opened on first use
_DISPATCHERS: set[str] = set()
_FALLBACKS: dict[tuple[str, str, Sizes], tuple[set[str], list[int]]] = {}  # -> (reasons, [calls])
_ROUTES: dict[str, dict[Any, Any]] = {}  # op -> signature -> its kernel, or why it falls back
# (op, dtype, sizes but M) -> the M ranges an export left to torch on purpose
_VENDOR: dict[tuple[str, str, Sizes], list[VendorRoute]] = {}

# Kept alive: the ops live while it does.
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
# Tells torch.compile and torch.export the ops keep to what they expect of an op (a functional
# schema, a fake implementation).
_TAGS = (torch.Tag.pt2_compliant_tag,)


def _library(kernel: PackagedKernel) -> Any:
    loaded = _LOADED.get(kernel.name)
    if loaded is None:
        loaded = _LOADED[kernel.name] = _loader.LoadedKernel(kernel.directory)
    return loaded


def _launcher(kernel: PackagedKernel, shape: tuple[int, ...] | None = None
              ) -> Callable[[Sequence[torch.Tensor]], torch.Tensor]:
    """The launch of ``kernel`` on inputs whose signature passed its checks: the output
    (``shape``: a runtime-M kernel's at the call's M; else its one) allocated on their device,
    the kernel launched on its current stream."""
    loaded = _library(kernel)
    loaded.load_module()
    launch = loaded.launch
    shape = kernel.output.shape if shape is None else shape
    dtype = TORCH_DTYPES[kernel.output.dtype]

    def run(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        device = tensors[0].device
        out = torch.empty(shape, dtype=dtype, device=device)
        launch((*tensors, out), device.index)
        return out

    return run


def _schema(arguments: Sequence[str]) -> str:
    return "(" + ", ".join(f"Tensor {name}" for name in arguments) + ") -> Tensor"


def _define(name: str, arguments: Sequence[str], run: Callable[..., torch.Tensor],
            fake: Callable[..., torch.Tensor]) -> None:
    _LIBRARY.define(name + _schema(arguments), tags=_TAGS)  # type: ignore[no-untyped-call]
    # Every backend reaches ``run`` (which refuses what is not on a CUDA device by name); meta
    # and fake tensors reach ``fake``.
    _LIBRARY.impl(name, run, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)


def _register_kernel(kernel: PackagedKernel) -> None:
    known = _KERNELS.get(kernel.name)
    if known is not None:
        if known.genome_hash != kernel.genome_hash:
            raise KernelLoadError(
                f"{kernel.qualified} is already registered by {known.directory} (genome "
                f"{known.genome_hash[:12]}); {kernel.directory} holds another kernel "
                f"({kernel.genome_hash[:12]}) for {kernel.problem_text}: load one of them")
        return
    passed: dict[Any, Any] = {}  # signature -> the launcher, for inputs that passed the checks
    signature, remember = _loader.signature, _loader.remember

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        key = signature(tensors)
        launcher = passed.get(key)
        if launcher is None:
            problems = _problems(kernel, tensors)
            if problems:
                raise _refuse(kernel, problems)
            launcher = _launcher(kernel, _output_shape(kernel, tensors))
            remember(passed, key, launcher)
        result: torch.Tensor = launcher(tensors)
        return result

    def fake(*tensors: torch.Tensor) -> torch.Tensor:
        problems = _problems(kernel, tensors, tracing=True)
        if problems:
            raise _refuse(kernel, problems)
        shape = (tensors[0].shape[0], *kernel.output.shape[1:]) if kernel.runtime_m else (
            kernel.output.shape)
        return tensors[0].new_empty(shape, dtype=TORCH_DTYPES[kernel.output.dtype])

    _define(kernel.name, [t.name for t in kernel.inputs], run, fake)
    _KERNELS[kernel.name] = kernel


def _note_fallback(kind: OpKind, dtype: torch.dtype, sizes: Sizes, reason: str,
                   warn: bool = True) -> None:
    dtype_name = DTYPE_NAMES.get(dtype, str(dtype))
    key = (kind.name, dtype_name, sizes)
    first = key not in _FALLBACKS
    reasons, calls = _FALLBACKS.setdefault(key, (set(), [0]))
    reasons.add(str(reason))
    calls[0] += 1
    if first and warn:
        shape = " ".join(f"{n}={v}" for n, v in sizes)
        warnings.warn(f"torch.ops.{NAMESPACE}.{kind.name} {dtype_name} {shape}: {reason}; "
                      f"running {kind.fallback_name} instead (warned once per shape)",
                      FallbackWarning, stacklevel=2)


def _output_shape(kernel: PackagedKernel, tensors: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """The output of one call: a runtime-M kernel's has the call's M rows."""
    if kernel.runtime_m:
        return (int(tensors[0].shape[0]), *kernel.output.shape[1:])
    return tuple(kernel.output.shape)


def kernel_for(op: str, dtype: str, sizes: Sizes) -> PackagedKernel | None:
    """The kernel the dispatcher routes a call of these sizes to: for a GEMM, the fixed-M
    kernel of exactly its M, else the narrowest runtime-M range holding its M; None: torch."""
    exact = _TABLE.get((op, dtype, sizes))
    if exact is not None or op != "gemm":
        return exact
    m = dict(sizes)["m"]
    for kernel in _RANGED.get((op, dtype, without_m(sizes)), ()):
        assert kernel.m_range is not None
        if kernel.m_range[0] <= m <= kernel.m_range[1]:
            return kernel
    return None


def vendor_route_for(op: str, dtype: str, sizes: Sizes) -> VendorRoute | None:
    """The vendor route an export named for a call of these sizes, if any (GEMMs, by M)."""
    if op != "gemm":
        return None
    m = dict(sizes)["m"]
    for route in _VENDOR.get((op, dtype, without_m(sizes)), ()):
        if route.m_range[0] <= m <= route.m_range[1]:
            return route
    return None


def _tuned_text(op: str) -> str:
    tuned = sorted({k.problem_text for k in _TABLE.values() if k.op == op}
                   | {k.problem_text for ks in _RANGED.values() for k in ks if k.op == op})
    return ", ".join(tuned) or "none"


def _route(kind: OpKind, tensors: Sequence[torch.Tensor]) -> Any:
    """Where the dispatcher sends ``tensors``: a tuned kernel's launcher, or (a string) why it
    falls back to torch. Raises KernelInputError for what the op cannot mean."""
    sizes = kind.sizes(tensors)
    dtype_name = DTYPE_NAMES.get(tensors[0].dtype, str(tensors[0].dtype))
    kernel = kernel_for(kind.name, dtype_name, sizes)
    if kernel is None:
        chosen = vendor_route_for(kind.name, dtype_name, sizes)
        if chosen is not None:
            return _OnPurpose(f"left to {kind.fallback_name} by the export: {chosen.why}")
        return (f"no tuned kernel for this shape and dtype (tuned: {_tuned_text(kind.name)})")
    problems = _problems(kernel, tensors)
    if problems:
        return f"{kernel.qualified} cannot take these tensors ({'; '.join(problems)})"
    return _launcher(kernel, _output_shape(kernel, tensors))


def _register_dispatcher(kind: OpKind) -> None:
    if kind.name in _DISPATCHERS:
        return
    routes = _ROUTES.setdefault(kind.name, {})
    signature, remember = _loader.signature, _loader.remember

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        key = signature(tensors)
        route = routes.get(key)
        if route is None:
            route = _route(kind, tensors)
            remember(routes, key, route)
        if type(route) is str:
            _note_fallback(kind, tensors[0].dtype, kind.sizes(tensors), route)
            return kind.fallback(tensors)
        if type(route) is _OnPurpose:
            _note_fallback(kind, tensors[0].dtype, kind.sizes(tensors), route, warn=False)
            return kind.fallback(tensors)
        result: torch.Tensor = route(tensors)
        return result

    def fake(*tensors: torch.Tensor) -> torch.Tensor:
        return tensors[0].new_empty(kind.fake_shape(tensors), dtype=tensors[0].dtype)

    _define(kind.name, kind.arguments, run, fake)
    _DISPATCHERS.add(kind.name)


def load(directory: Path | str | None = None, preload: bool | None = None) -> KernelPackage:
    """Register an export's kernels as ``torch.ops.tsopt.<name>`` and add them to the dispatch
    table of ``torch.ops.tsopt.<op>``; returns what it registered.

    ``directory``: an export (one study, or a package of several); default: the one this file
    sits in. ``preload`` (default: when CUDA is available) opens each kernel's library and loads
    its module now, so that the first call may be inside a CUDA graph capture. Loading the same
    kernel again is a no-op; another kernel for a problem already registered is an error.
    """
    package = read_package(Path(__file__).resolve().parent if directory is None else directory)
    seen: dict[tuple[Any, ...], PackagedKernel] = {}
    for kernel in package.kernels:
        key = _table_key(kernel)
        known = seen.get(key) or _known(kernel)
        if known is not None and known.genome_hash != kernel.genome_hash:
            raise KernelLoadError(
                f"two kernels for {kernel.problem_text}: {known.genome_hash[:12]} from "
                f"{known.directory} and {kernel.genome_hash[:12]} from {kernel.directory}")
        seen[key] = kernel
    for kernel in package.kernels:  # before anything is registered: a refusal changes nothing
        artifact = _loader.KernelManifest.read(kernel.directory)
        _loader.check_decomposition(kernel.directory, artifact.decomposition_sms, artifact.device)
    for kernel in package.kernels:
        _register_kernel(kernel)
        _register_dispatcher(OP_KINDS[kernel.op])
        if kernel.runtime_m:
            ranged = _RANGED.setdefault((kernel.op, kernel.dtype, kernel.fixed_sizes), [])
            if _known(kernel) is None:
                ranged.append(kernel)
                ranged.sort(key=_narrowest_first)
        else:
            _TABLE.setdefault((kernel.op, kernel.dtype, kernel.sizes), kernel)
    for route in package.vendor_routes:
        _register_dispatcher(OP_KINDS[route.op])
        chosen = _VENDOR.setdefault((route.op, route.dtype, route.fixed_sizes), [])
        if route not in chosen:
            chosen.append(route)
    for routes in _ROUTES.values():
        routes.clear()  # a shape that fell back may have a kernel now
    if preload if preload is not None else torch.cuda.is_available():
        for kernel in package.kernels:
            _library(kernel).load_module()
    return package


def _narrowest_first(kernel: PackagedKernel) -> tuple[int, int]:
    lo, hi = kernel.m_range or (0, 0)
    return (hi - lo, lo)


def _table_key(kernel: PackagedKernel) -> tuple[Any, ...]:
    return (kernel.op, kernel.dtype, kernel.sizes, kernel.runtime_m, kernel.m_range)


def _known(kernel: PackagedKernel) -> PackagedKernel | None:
    """The registered kernel for the same problem (and range) as ``kernel``, if any."""
    if not kernel.runtime_m:
        return _TABLE.get((kernel.op, kernel.dtype, kernel.sizes))
    for known in _RANGED.get((kernel.op, kernel.dtype, kernel.fixed_sizes), ()):
        if known.m_range == kernel.m_range:
            return known
    return None


def fallbacks() -> list[Fallback]:
    """Every shape a dispatched op ran torch for in this process, with the reason and count."""
    return [Fallback(op, dtype, sizes, tuple(sorted(reasons)), calls[0])
            for (op, dtype, sizes), (reasons, calls) in sorted(_FALLBACKS.items())]


def registered() -> list[PackagedKernel]:
    """Every kernel registered in this process, by name."""
    return [_KERNELS[name] for name in sorted(_KERNELS)]
