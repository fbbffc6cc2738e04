"""Load a tsopt kernel and call it on torch tensors: ``tsopt.load_kernel(DIR)``.

Imports only torch and the standard library, so it runs where neither the
CUTLASS DSL nor the rest of tsopt is installed: ``tsopt export`` copies this
file into every export as ``loader.py``. The GPU runner loads candidates
through the same code.

A kernel directory holds ``libkernel.so`` (the ABI of tsopt.core.artifact:
``int tsopt_load(void)``, ``int tsopt_launch(void **data, int n, void *stream)``, and for a
kernel whose M is a launch argument ``int tsopt_launch_m(void **data, int n, int m, void
*stream)``) and ``artifact.json`` (its tensors in call order, with roles and shapes; a
runtime-M kernel's ``m_range`` and each tensor's ``runtime_dims``, the dimensions that are M).
Usage::

    from loader import load_kernel        # or: from tsopt import load_kernel
    kernel = load_kernel("best-gemm/")
    d = kernel(a, b)                        # inputs in the order of artifact.json
    kernel(a, b, out=d)                     # or into an existing output

It launches on torch's current CUDA stream and checks every tensor first (shape, dtype,
device, layout, alignment: :class:`KernelInputError`). The checks run once per signature (each
tensor's sizes, strides, dtype, device and whether its data pointer is aligned:
:func:`signature`); a call whose signature passed before launches at once, so the host cost of
a call stays near a vendor library's. ``torch_ops.py`` beside it registers the kernel as a
PyTorch op, for ``torch.compile`` and CUDA graphs.

The library's CUDA runtime is linked dynamically (libcudart.so.12 or .13):
this module loads ``libcuda.so.1`` and a matching libcudart with
RTLD_GLOBAL first, from the loader path, torch's bundled ``nvidia/*/lib`` or
``/usr/local/cuda*/lib64``.
"""

from __future__ import annotations

import ctypes
import glob
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12")
TORCH_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16,
                                      "int16": torch.int16}


TMA_ALIGNMENT = 16
"""Bytes a tensor's data pointer must be a multiple of: the TMA unit needs 16-byte aligned
global addresses (a tensor sliced at an odd offset is contiguous but not aligned)."""

LAUNCH_M_SYMBOL = "tsopt_launch_m"
"""A runtime-M kernel's launch at the call's M (tsopt.core.artifact)."""
M_OUTSIDE_RANGE = -2
"""What ``tsopt_launch_m`` returns for an M outside the kernel's range."""

MAX_SIGNATURES = 1024
"""Signatures a cache of passed checks holds; past it the cache starts again (a caller whose
shapes never repeat pays the full checks on every call, nothing worse)."""


class KernelLoadError(RuntimeError):
    """The artifact's library or the CUDA libraries could not be loaded (a launch_error)."""


# -- the GPU a kernel was built for --------------------------------------------------------
def gpu_sm_count(device: int) -> int:
    """Multiprocessors of CUDA device ``device`` as this process sees it (a MIG slice's own)."""
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def decomposition_sms(doc: dict[str, Any]) -> int | None:
    """SMs a kernel's grid was sized for (``launch.decomposition_sms`` of its artifact.json:
    a persistent grid of one wave, stream-K's CTAs and flags), or None when any GPU fits."""
    value = (doc.get("launch") or {}).get("decomposition_sms")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_decomposition(directory: Path, built_sms: int | None, built_for: str = "",
                        devices: Any = None) -> None:
    """KernelLoadError, in one line naming both SM counts, when a kernel whose decomposition
    was made for ``built_sms`` SMs is loaded where a visible GPU has another count (the grid
    would be another GPU's; stream-K's CTAs could wait on one never scheduled). ``devices``:
    the CUDA devices to check (default: every visible one, as the module loads on each)."""
    if built_sms is None:
        return
    for device in range(torch.cuda.device_count()) if devices is None else devices:
        sms = gpu_sm_count(device)
        if sms != built_sms:
            target = f" ({built_for})" if built_for else ""
            raise KernelLoadError(
                f"{Path(directory).name}: built for {built_sms} SMs{target} but GPU {device} "
                f"({torch.cuda.get_device_name(device)}) has {sms} SMs; rebuild it for this "
                f"GPU (tsopt tune/export --device)")


class KernelInputError(ValueError):
    """A tensor handed to a kernel does not match its signature; checked before any launch."""


# -- CUDA libraries ------------------------------------------------------------------------
class CudaRuntime:
    """The few libcudart calls the runner makes itself, each returning its cudaError_t."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.lib = lib
        self.path = path
        for name in ("cudaGetErrorName", "cudaGetErrorString"):
            getattr(lib, name).restype = ctypes.c_char_p
            getattr(lib, name).argtypes = [ctypes.c_int]
        for name in ("cudaGetDeviceCount", "cudaDriverGetVersion", "cudaRuntimeGetVersion"):
            getattr(lib, name).argtypes = [ctypes.POINTER(ctypes.c_int)]
            getattr(lib, name).restype = ctypes.c_int
        lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cudaStreamSynchronize.restype = ctypes.c_int
        lib.cudaGetLastError.argtypes = []
        lib.cudaGetLastError.restype = ctypes.c_int

    def describe(self, code: int) -> str:
        if code == -1:
            return "-1 (the shim refused the tensor count)"
        if code == M_OUTSIDE_RANGE:
            return f"{M_OUTSIDE_RANGE} (the shim refused an M outside the kernel's range)"
        name = self.lib.cudaGetErrorName(code) or b"?"
        text = self.lib.cudaGetErrorString(code) or b"?"
        return f"{code} {name.decode()}: {text.decode()}"

    def _int_query(self, fn: str) -> tuple[int, int]:
        value = ctypes.c_int(0)
        code = getattr(self.lib, fn)(ctypes.byref(value))
        return code, value.value

    def device_count(self) -> tuple[int, int]:
        return self._int_query("cudaGetDeviceCount")

    def driver_version(self) -> tuple[int, int]:
        return self._int_query("cudaDriverGetVersion")

    def runtime_version(self) -> tuple[int, int]:
        return self._int_query("cudaRuntimeGetVersion")

    def synchronize(self, stream: int) -> int:
        return int(self.lib.cudaStreamSynchronize(stream))

    def last_error(self) -> int:
        return int(self.lib.cudaGetLastError())


@dataclass
class CudaLibraries:
    runtime: CudaRuntime
    driver_error: str | None  # why libcuda.so.1 did not load (no NVIDIA driver), else None


_CUDA: dict[str, CudaLibraries] = {}


def _stream_handle(device_index: int) -> int:
    return int(torch.cuda.current_stream(device_index).cuda_stream)


def _device_index() -> int:
    return torch.cuda.current_device()


# The raw queries behind torch.cuda.current_stream() and current_device(), bound directly: the
# public ones build Python objects on every call, microseconds in a launch's hot path. A
# CPU-only torch lacks them (and never launches).
current_stream_handle: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", _stream_handle)
"""The ``cudaStream_t`` of torch's current stream on a device (a capture's stream inside
``torch.cuda.graph``), as an integer."""
current_device_index: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", _device_index)


def needed_cudart(library: Path) -> str | None:
    """The libcudart soname a shared library was linked against (read from its dynamic strings)."""
    try:
        found = re.search(rb"libcudart\.so\.\d+", Path(library).read_bytes())
    except OSError:
        return None
    return found.group().decode() if found else None


def torch_library_dirs() -> list[Path]:
    """Where pip's torch keeps the CUDA libraries it was built with."""
    torch_dir = Path(torch.__file__).resolve().parent
    dirs = [torch_dir / "lib"]
    dirs += [Path(p) for p in sorted(glob.glob(str(torch_dir.parent / "nvidia" / "*" / "lib")))]
    return dirs


def cudart_candidates(needed: str | None = None) -> list[str]:
    """libcudart names and paths to try, best first.

    The soname the artifact needs first, then 13 before 12; for each, the bare soname (which
    finds the copy torch already loaded, or one on the loader path), then torch's bundled
    ``nvidia/*/lib`` directories, then ``/usr/local/cuda*/lib64``.
    """
    sonames = [needed] if needed else []
    sonames += [s for s in CUDART_SONAMES if s not in sonames]
    dirs = torch_library_dirs() + [
        Path(p) for p in sorted(glob.glob("/usr/local/cuda*/lib64"), reverse=True)
    ]
    found: list[str] = []
    for soname in sonames:
        found.append(soname)
        found += [str(d / soname) for d in dirs if (d / soname).is_file()]
    return found


def load_cuda(needed: str | None = None) -> CudaLibraries:
    """Load libcuda.so.1 and a libcudart with RTLD_GLOBAL (once per process)."""
    key = needed or ""
    if key in _CUDA:
        return _CUDA[key]
    # The artifact's runtime resolves driver entry points through the global namespace.
    driver_error = None
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        driver_error = f"libcuda.so.1 did not load ({exc}): no NVIDIA driver on this machine"
    tried = []
    for candidate in cudart_candidates(needed):
        try:
            lib = ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            tried.append(f"{candidate} ({exc})")
            continue
        _CUDA[key] = CudaLibraries(CudaRuntime(lib, candidate), driver_error)
        return _CUDA[key]
    raise KernelLoadError("no CUDA runtime library found; tried: " + "; ".join(tried))


class KernelLibrary:
    """An artifact's shared library: ``int load(void)``, ``int launch(void **, int, void *)``."""

    def __init__(self, path: Path, load_symbol: str, launch_symbol: str, cuda: CudaLibraries,
                 launch_m_symbol: str | None = None):
        self.path = path
        self.cuda = cuda
        try:
            # RTLD_LOCAL: every artifact exports the same names; lookups go through this handle.
            self.handle = ctypes.CDLL(str(path))
        except OSError as exc:
            raise KernelLoadError(f"cannot load {path.name}: {exc}") from None
        try:
            self._load = getattr(self.handle, load_symbol)
            self._launch = getattr(self.handle, launch_symbol)
        except AttributeError as exc:
            raise KernelLoadError(f"{path.name} lacks an artifact ABI symbol: {exc}") from None
        self._load.argtypes = []
        self._load.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_void_p]
        self._launch.restype = ctypes.c_int
        self.launch_symbol = self._launch  # the ctypes function itself, argtypes set once
        self.launch_m_symbol: Any = None
        """``tsopt_launch_m`` of a runtime-M kernel (``(data, n, m, stream)``), else None."""
        if launch_m_symbol is not None:
            try:
                self.launch_m_symbol = getattr(self.handle, launch_m_symbol)
            except AttributeError as exc:
                raise KernelLoadError(f"{path.name} has an M range but no {launch_m_symbol}: "
                                      f"{exc}") from None
            self.launch_m_symbol.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                             ctypes.c_int, ctypes.c_void_p]
            self.launch_m_symbol.restype = ctypes.c_int

    @classmethod
    def open(cls, artifact_dir: Path, manifest: Any) -> KernelLibrary:
        """``manifest``: anything with ``library``, ``load_symbol``, ``launch_symbol``
        (an artifact.json read by tsopt.core.artifact or by :class:`KernelManifest`)."""
        # Absolute: dlopen searches the system's library path for a name without a slash, so
        # "libkernel.so" (an artifact opened as ".") would not be the file beside artifact.json.
        path = Path(artifact_dir).resolve() / manifest.library
        if not path.is_file():
            raise KernelLoadError(f"no library {manifest.library!r} in {artifact_dir}")
        cuda = load_cuda(needed_cudart(path))
        ranged = getattr(manifest, "m_range", None) is not None
        return cls(path, manifest.load_symbol, manifest.launch_symbol, cuda,
                   LAUNCH_M_SYMBOL if ranged else None)

    def load_module(self) -> int:
        return int(self._load())

    def launch(self, ptrs: ctypes.Array[ctypes.c_void_p], stream: int) -> int:
        return int(self._launch(ptrs, len(ptrs), stream))


# -- a loaded kernel, callable on torch tensors --------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    name: str
    role: str
    shape: tuple[int, ...]
    dtype: str
    runtime_dims: tuple[int, ...] = ()
    """Dimensions that are the call's M (a runtime-M kernel); ``shape`` holds its upper end."""


@dataclass(frozen=True)
class KernelManifest:
    """The part of ``artifact.json`` a caller needs (read without tsopt installed)."""

    library: str
    load_symbol: str
    launch_symbol: str
    tensors: tuple[TensorSpec, ...]
    genome_hash: str
    problem: dict[str, Any]
    decomposition_sms: int | None = None
    """SMs its grid was sized for (None: any GPU), checked when its module loads."""
    device: str = ""
    """The device profile it was built for (``H200_SXM``), "" before profiles were recorded."""
    m_range: tuple[int, int] | None = None
    """A runtime-M kernel's range of M (lo, hi); None: it serves exactly its shapes."""

    @classmethod
    def read(cls, directory: Path) -> KernelManifest:
        path = Path(directory) / "artifact.json"
        try:
            doc = json.loads(path.read_text())
            return cls(
                library=str(doc.get("library", "libkernel.so")),
                load_symbol=str(doc.get("load_symbol", "tsopt_load")),
                launch_symbol=str(doc.get("launch_symbol", "tsopt_launch")),
                tensors=tuple(
                    TensorSpec(t["name"], t["role"], tuple(int(x) for x in t["shape"]), t["dtype"],
                               tuple(int(x) for x in t.get("runtime_dims", ())))
                    for t in doc["tensors"]
                ),
                genome_hash=str(doc.get("genome_hash", "")),
                problem=dict(doc.get("problem", {})),
                decomposition_sms=decomposition_sms(doc),
                device=str((doc.get("device") or {}).get("id", "")),
                m_range=_m_range(doc.get("m_range")),
            )
        except FileNotFoundError:
            raise KernelLoadError(
                f"{path}: not a tsopt kernel directory (no artifact.json)"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise KernelLoadError(f"{path}: malformed ({type(exc).__name__}: {exc})") from None


def _m_range(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    lo, hi = (int(v) for v in value)
    if not 1 <= lo <= hi:
        raise ValueError(f"m_range {value!r} is not [lo, hi] with 1 <= lo <= hi")
    return lo, hi


def shape_text(spec: TensorSpec, m_range: tuple[int, int] | None = None) -> str:
    """``spec``'s shape as a caller must give it: ``(256, 4096)``, or ``(1..256, 4096)``
    where a dimension is the call's M."""
    dims = [f"{m_range[0]}..{m_range[1]}" if m_range and i in spec.runtime_dims else str(v)
            for i, v in enumerate(spec.shape)]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def shape_problem(spec: TensorSpec, shape: tuple[Any, ...],
                  m_range: tuple[int, int] | None = None) -> str | None:
    """What is wrong with ``shape`` for ``spec`` in one phrase, else None: a fixed dimension
    that differs (naming the expected shape), or for a runtime-M kernel an M outside its
    range (naming the range)."""
    if len(shape) != len(spec.shape):
        return f"shape {tuple(shape)} != {shape_text(spec, m_range)}"
    for i, (got, want) in enumerate(zip(shape, spec.shape, strict=True)):
        if m_range is not None and i in spec.runtime_dims:
            if not m_range[0] <= got <= m_range[1]:
                return (f"M={got} (dimension {i}) is outside this kernel's M range "
                        f"{m_range[0]}..{m_range[1]}")
        elif got != want:
            return f"shape {tuple(shape)} != {shape_text(spec, m_range)}"
    return None


def tensor_problems(spec: TensorSpec, tensor: Any, tracing: bool = False,
                    m_range: tuple[int, int] | None = None) -> list[str]:
    """What keeps ``tensor`` from being ``spec``'s argument, in words (empty: it fits).

    Shape (with ``m_range``, a runtime-M kernel's: its M dimensions anywhere in the range),
    dtype, device (CUDA), layout (contiguous, row-major) and alignment (the data pointer,
    :data:`TMA_ALIGNMENT`). ``tracing``: a fake or meta tensor of torch.compile, which has no
    data pointer; a meta device passes.
    """
    if not isinstance(tensor, torch.Tensor):
        return [f"expected a torch.Tensor, got {type(tensor).__name__}"]
    want = TORCH_DTYPES[spec.dtype]
    problems = []
    wrong_shape = shape_problem(spec, tuple(tensor.shape), m_range)
    if wrong_shape is not None:
        problems.append(wrong_shape)
    if tensor.dtype != want:
        problems.append(f"dtype {tensor.dtype} != {want}")
    if not tensor.is_cuda and not (tracing and tensor.device.type == "meta"):
        problems.append(f"not on a CUDA device (on {tensor.device})")
    if not tensor.is_contiguous():
        problems.append(f"not contiguous (row-major; strides {tuple(tensor.stride())})")
    elif not tracing and tensor.data_ptr() % TMA_ALIGNMENT:
        problems.append(f"data pointer {tensor.data_ptr():#x} not {TMA_ALIGNMENT}-byte aligned "
                        f"(a slice at an offset: pass a fresh tensor or .clone() it)")
    return problems


def signature(tensors: Any) -> tuple[Any, ...]:
    """What :func:`tensor_problems` reads of each tensor, as a hashable key: sizes, strides,
    dtype, device and whether the data pointer is :data:`TMA_ALIGNMENT`-aligned (contiguity
    follows from sizes and strides). Tensors of one signature pass or fail the checks alike.
    Raises AttributeError or TypeError for what is not a tensor."""
    return tuple([(t.shape, t.stride(), t.dtype, t.device, not t.data_ptr() % TMA_ALIGNMENT)
                  for t in tensors])


def remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """``cache[key] = value``, the cache started again once it holds :data:`MAX_SIGNATURES`."""
    if len(cache) >= MAX_SIGNATURES:
        cache.clear()
    cache[key] = value


class LoadedKernel:
    """A kernel library bound to its tensor signature; call it with torch tensors."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory).resolve()
        self.manifest = KernelManifest.read(self.directory)
        self.inputs = [t for t in self.manifest.tensors if t.role == "input"]
        self.outputs = [t for t in self.manifest.tensors if t.role == "output"]
        self.library = KernelLibrary.open(self.directory, self.manifest)
        self._loaded = False
        # launch()'s tensors come inputs first, then outputs; the library takes them in
        # artifact.json's order.
        given = [t.name for t in self.inputs + self.outputs]
        self._abi_order = [given.index(t.name) for t in self.manifest.tensors]
        self._pointers = ctypes.c_void_p * len(self.manifest.tensors)
        self._launch_symbol = self.library.launch_symbol
        self._launch_m_symbol = self.library.launch_m_symbol
        self._output_specs = [(t.shape, TORCH_DTYPES[t.dtype]) for t in self.outputs]
        self._passed: dict[tuple[Any, ...], None] = {}  # signatures whose checks passed
        self.m_range = self.manifest.m_range
        """A runtime-M kernel's range of M (checked per call signature), else None."""
        # Where a call's M is read: the first runtime dimension of an input (inputs first, as
        # launch() takes them), and which output dimensions it sizes.
        self._m_at = next(((i, t.runtime_dims[0]) for i, t in enumerate(self.inputs)
                           if t.runtime_dims), None) if self.m_range else None
        if self.m_range is not None and self._m_at is None:
            raise KernelLoadError(f"{self.directory}: artifact.json gives an m_range but no "
                                  "input with runtime_dims")

    def __repr__(self) -> str:
        def shape(t: TensorSpec) -> str:
            return "[" + shape_text(t, self.m_range)[1:-1].rstrip(",") + "]"
        sig = ", ".join(f"{t.name}: {t.dtype}{shape(t)}" for t in self.inputs)
        outs = ", ".join(f"{t.name}: {t.dtype}{shape(t)}" for t in self.outputs)
        return f"<tsopt kernel {self.manifest.genome_hash[:12]} ({sig}) -> ({outs})>"

    def _check(self, spec: TensorSpec, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{spec.name}: expected a torch.Tensor, got {type(tensor).__name__}")
        problems = (tensor_problems(spec, tensor) if self.m_range is None
                    else tensor_problems(spec, tensor, m_range=self.m_range))
        if problems:
            raise KernelInputError(f"{spec.name}: " + "; ".join(problems))

    def load_module(self) -> None:
        """Load the kernel's module on every device (once): before a CUDA graph is captured,
        since loading a module is no stream work a graph can record."""
        if self._loaded:
            return
        check_decomposition(self.directory, self.manifest.decomposition_sms,
                            self.manifest.device)
        code = self.library.load_module()
        if code != 0:
            raise RuntimeError(f"module load failed: {self.library.cuda.runtime.describe(code)}")
        self._loaded = True

    def launch(self, tensors: Any, device_index: int) -> None:
        """Launch on ``tensors`` (inputs, then outputs) on the current stream of CUDA device
        ``device_index``, unchecked: for a caller that checked this signature already (the
        call below, torch_ops.py). Raises RuntimeError if the launch fails."""
        pointers = self._pointers(*[tensors[i].data_ptr() for i in self._abi_order])
        if self._m_at is not None:
            index, dim = self._m_at
            code = self._launch_m(pointers, int(tensors[index].shape[dim]), device_index)
        elif current_device_index() == device_index:
            code = self._launch_symbol(pointers, len(pointers), current_stream_handle(device_index))
        else:
            # The library launches on the current device's context.
            with torch.cuda.device(device_index):
                code = self._launch_symbol(pointers, len(pointers), current_stream_handle(device_index))
        if code != 0:
            raise RuntimeError(f"launch failed: {self.library.cuda.runtime.describe(code)}")

    def _launch_m(self, pointers: Any, m: int, device_index: int) -> int:
        """A runtime-M kernel's launch at ``m``, on the current stream of ``device_index``."""
        if current_device_index() == device_index:
            return int(self._launch_m_symbol(pointers, len(pointers), m,
                                             current_stream_handle(device_index)))
        with torch.cuda.device(device_index):
            return int(self._launch_m_symbol(pointers, len(pointers), m,
                                             current_stream_handle(device_index)))

    def call_m(self, tensors: Any) -> int | None:
        """A call's M (inputs, then outputs): what its first runtime dimension holds; None for a
        fixed-M kernel."""
        if self._m_at is None:
            return None
        index, dim = self._m_at
        return int(tensors[index].shape[dim])

    def output_shapes(self, m: int | None) -> list[tuple[int, ...]]:
        """The outputs' shapes for a call at ``m`` (a fixed-M kernel's own)."""
        return [tuple(m if m is not None and i in spec.runtime_dims else v
                      for i, v in enumerate(spec.shape)) for spec in self.outputs]

    def _check_m_agrees(self, tensors: Any) -> None:
        """Every runtime dimension of a call holds the same M (A's rows are D's)."""
        m = self.call_m(tensors)
        for spec, tensor in zip(self.inputs + self.outputs, tensors, strict=False):
            for dim in spec.runtime_dims:
                if int(tensor.shape[dim]) != m:
                    raise KernelInputError(
                        f"{spec.name}: dimension {dim} is {int(tensor.shape[dim])}, but the "
                        f"call's M (from {self.inputs[self._m_at[0]].name}) is {m}")  # type: ignore[index]

    def _admit(self, inputs: Any, outs: Any, key: Any) -> None:
        """The full checks, raising what is wrong; once they pass, ``key`` is remembered."""
        if len(inputs) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise TypeError(f"kernel takes {len(self.inputs)} inputs ({names}), got {len(inputs)}")
        for spec, tensor in zip(self.inputs, inputs, strict=True):
            self._check(spec, tensor)
        if outs is not None:
            if len(outs) != len(self.outputs):
                raise TypeError(
                    f"kernel writes {len(self.outputs)} outputs, got {len(outs)} in out="
                )
            for spec, tensor in zip(self.outputs, outs, strict=True):
                self._check(spec, tensor)
        if self.m_range is not None:
            self._check_m_agrees([*inputs, *(outs or [])])
        self.load_module()
        if key is not None:
            remember(self._passed, key, None)

    def __call__(self, *inputs: torch.Tensor, out: Any = None) -> Any:
        """Run on ``inputs`` (artifact order); returns the output(s), allocated unless ``out``.
        Checked once per signature of ``inputs`` (and ``out``)."""
        outs = None if out is None else (list(out) if isinstance(out, (tuple, list)) else [out])
        try:
            key: Any = (signature(inputs), None if outs is None else signature(outs))
        except (AttributeError, TypeError):
            key = None  # not tensors: the checks say what is wrong
        if key is None or key not in self._passed:
            self._admit(inputs, outs, key)
        device = inputs[0].device if inputs else torch.device("cuda", current_device_index())
        if outs is None:
            if self._m_at is None:
                outs = [torch.empty(shape, dtype=dtype, device=device)
                        for shape, dtype in self._output_specs]
            else:
                shapes = self.output_shapes(self.call_m(inputs))
                outs = [torch.empty(shape, dtype=dtype, device=device)
                        for shape, (_, dtype) in zip(shapes, self._output_specs, strict=True)]
        index = device.index if device.index is not None else current_device_index()
        self.launch((*inputs, *outs), index)
        return outs[0] if len(outs) == 1 else tuple(outs)


def load_kernel(directory: Path | str) -> LoadedKernel:
    """The kernel in ``directory`` (an export, or a built artifact), callable on torch tensors."""
    return LoadedKernel(directory)
