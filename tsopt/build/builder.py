"""The builder: compile a verified genome on a machine with no GPU.

``cute.compile`` for the target arch (``--gpu-arch``; no GPU needed), then
``export_to_c`` (a header and an object embedding the cubin and the host
launch code, TMA descriptor set-up included), then a generated C shim that
gives every kernel the ABI of :mod:`tsopt.core.artifact`, linked with the DSL's
CUDA-dialect runtime into ``libkernel.so``. Artifacts are cached by genome
hash + problem + arch + tool versions: a second build of the same candidate
is a directory lookup.

Registers and spills are read from the cubin (``--keep-cubin``): the
register count sits in the kernel's ``.text`` section header, local memory
(spills and stack) in its ``.nv.info`` attributes.

The SASS (``--keep-sass``; nvdisasm from the nvidia-cuda-nvdisasm wheel) is scanned before the
kernel is linked: a kernel that touches a wgmma accumulator while the wgmma writing it is in
flight (:mod:`tsopt.build.sass`; ptxas moved an epilogue above its wait,
bench/wrong_answer) is a failed build whose error starts with ``sass:``.

Builds are bounded in memory (:func:`build_isolated`): a build runs in a child process forked
for it, under an address-space limit (``RLIMIT_AS``, :func:`build_memory_limit`: 16 GiB or
three quarters of the machine's memory, whichever is less; ``TSOPT_BUILD_MEMORY`` sets it).
A build that runs out of it, whether the DSL raises or LLVM aborts the process, is recorded
as a failed build whose error starts with ``memory:``; the process that asked for it lives
on.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tsopt
from tsopt.build.sass import accumulator_hazards
from tsopt.core.artifact import (
    LAUNCH_M_SYMBOL,
    LIBRARY_NAME,
    M_OUTSIDE_RANGE,
    ArtifactManifest,
    TensorDesc,
)
from tsopt.core.devices import DeviceProfile, default_profile, resolve_profile
from tsopt.core.dsl_env import ArchMismatchError, ensure_arch
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult

if TYPE_CHECKING:
    from tsopt.core.space import KernelSpec, SearchSpace

BUILDER_VERSION = "2"  # 2: the SASS accumulator scan (builds of 1 were not scanned)
DEFAULT_CACHE_DIR = Path(".tsopt") / "artifacts"


class ToolchainError(RuntimeError):
    """The C compiler, CUDA headers, the DSL runtime library or nvdisasm cannot be found."""


class SassHazardError(RuntimeError):
    """The compiled kernel touches a wgmma accumulator before the wait that retires it."""


# --------------------------------------------------------------------------------------
# Toolchain
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    cc: str
    cuda_include: Path
    cuda_lib: Path
    dsl_runtime: Path

    def describe(self) -> dict[str, str]:
        return {
            "cc": self.cc,
            "cuda_include": str(self.cuda_include),
            "dsl_runtime": str(self.dsl_runtime),
        }


def _dsl_root() -> Path:
    import nvidia_cutlass_dsl

    return Path(next(iter(nvidia_cutlass_dsl.__path__)))


@lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    """Locate gcc, the CUDA runtime headers/library and ``libcuda_dialect_runtime_static.a``."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise ToolchainError("no C compiler found (set CC or install gcc)")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    roots += sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True)
    cuda_include = cuda_lib = None
    for root in filter(None, roots):
        inc = Path(root) / "include" / "cuda_runtime.h"
        libs = [Path(root) / d for d in ("lib64", "lib")]
        lib = next((d for d in libs if any(d.glob("libcudart.so*"))), None)
        if inc.exists() and lib is not None:
            cuda_include, cuda_lib = inc.parent, lib
            break
    if cuda_include is None or cuda_lib is None:
        raise ToolchainError(
            "CUDA runtime headers/library not found (looked in $CUDA_HOME, /usr/local/cuda*); "
            "install the CUDA toolkit headers or set CUDA_HOME"
        )
    runtime = next(_dsl_root().glob("cu*/lib/libcuda_dialect_runtime_static.a"), None)
    if runtime is None:
        raise ToolchainError(
            "libcuda_dialect_runtime_static.a not found in the nvidia-cutlass-dsl wheel"
        )
    _require_nvdisasm()
    return Toolchain(cc, cuda_include, cuda_lib, runtime)


def _require_nvdisasm() -> None:
    """The DSL's ``--keep-sass`` needs nvdisasm; without it no build is checked, so none runs."""
    from cutlass.base_dsl.env_manager import _find_nvdisasm_binary

    try:
        _find_nvdisasm_binary()
    except Exception as exc:  # noqa: BLE001 - the DSL's own diagnostic says what it found
        raise ToolchainError(
            "nvdisasm not found: the builder scans every kernel's SASS (tsopt.build.sass); "
            "install the nvidia-cuda-nvdisasm wheel (pyproject.toml) or a CUDA "
            f"toolkit with nvdisasm ({_ANSI.sub('', str(exc)).strip().splitlines()[0][:200]})"
        ) from None


@lru_cache(maxsize=1)
def tool_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {
        "tsopt": tsopt.__version__,
        "builder": BUILDER_VERSION,
        "python": sys.version.split()[0],
    }
    for package in ("nvidia-cutlass-dsl",):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "absent"
    return versions


def cache_key(genome: Genome, problem: Problem, arch: str, template: str = "",
              device: str | DeviceProfile | None = None) -> str:
    """Artifact identity: genome, problem, arch, the device profile (:func:`target_of`), tool
    versions and the template's source. A build for the arch's default profile keeps the key
    it had before profiles existed: every artifact built then was built for it."""
    versions = json.dumps(tool_versions(), sort_keys=True)
    profile = target_of(device, arch)
    parts = [genome.hash, problem.key, arch, versions, template]
    if profile != default_profile(arch):
        parts.append(f"device={profile.id}:{profile.sm_count}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def target_of(device: str | DeviceProfile | None, arch: str) -> DeviceProfile:
    """The profile a build for ``arch`` targets (``device``'s, else the arch's default); a
    bad name raises UserInputError listing the known ones."""
    return resolve_profile(device, arch)


# --------------------------------------------------------------------------------------
# The shim: one ABI for every kernel
# --------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WRAPPER = re.compile(r"static inline int32_t (cute_dsl_(\w+)_wrapper)\(([^)]*)\)")


MAX_DEVICES = 64
"""Devices a kernel with a workspace keeps one for (the shim's static table)."""

_STRUCT = re.compile(r"typedef struct \{([^}]*)\} (\w+);")
_DYNAMIC_SHAPES = re.compile(r"int32_t dynamic_shapes\[(\d+)\];")


def dynamic_extents(header_text: str, struct_type: str) -> int:
    """How many dynamic extents the exported tensor struct ``struct_type`` carries after its
    data pointer (``int32_t dynamic_shapes[n]``: a runtime M); ToolchainError for a struct
    the shim cannot fill (dynamic strides, an unknown field)."""
    body = next((m.group(1) for m in _STRUCT.finditer(header_text) if m.group(2) == struct_type),
                None)
    if body is None:
        raise ToolchainError(f"the exported header does not define {struct_type}")
    fields = [f.strip() for f in body.split(";") if f.strip()]
    if not fields or fields[0] != "void *data":
        raise ToolchainError(f"{struct_type} does not start with its data pointer: {body.strip()}")
    extents = 0
    for text in fields[1:]:
        match = _DYNAMIC_SHAPES.fullmatch(text + ";")
        if match is None:
            raise ToolchainError(f"{struct_type} has a field the shim cannot fill: {text!r}")
        extents += int(match.group(1))
    return extents


def write_shim(header: Path, prefix: str, tensors: tuple[TensorDesc, ...],
               workspace_bytes: int = 0, m_range: tuple[int, int] | None = None) -> str:
    """C source exposing ``tsopt_load``/``tsopt_launch`` over the exported wrapper.

    The wrapper's parameter list is read from the header (a tensor struct per
    tensor argument, then the workspace if any, then the stream) and checked against the
    spec's tensors. A kernel with a workspace gets one per device, allocated and zeroed by
    ``tsopt_load`` (before any CUDA graph is captured) and passed by ``tsopt_launch`` for
    the current device, so callers pass only ``tensors``. A runtime-M kernel (``m_range``)
    gets ``tsopt_launch_m``, which fills each tensor struct's dynamic extents (its
    ``runtime_dims``) with the call's M after refusing one outside the range, and
    ``tsopt_launch`` runs it at the range's upper end (the shapes of ``tensors``).
    """
    wrapper, struct_types, extents = _wrapper_signature(header, prefix, tensors,
                                                        workspace_bytes, m_range)
    lines = [*_shim_load(prefix, workspace_bytes),
             *_shim_launch(wrapper, struct_types, extents, len(tensors), workspace_bytes,
                           m_range)]
    return "\n".join(lines)


def _wrapper_signature(header: Path, prefix: str, tensors: tuple[TensorDesc, ...],
                       workspace_bytes: int, m_range: tuple[int, int] | None,
                       ) -> tuple[str, list[str], list[int]]:
    """The exported wrapper's name, its tensor struct types (the workspace's last) and each
    struct's dynamic extents, read from the header; ToolchainError unless it takes the spec's
    tensors, the workspace if any, and a stream, with dynamic extents where the spec's
    tensors have runtime dimensions."""
    text = header.read_text()
    match = next((m for m in _WRAPPER.finditer(text) if m.group(2) == prefix), None)
    if match is None:
        raise ToolchainError(f"{header}: no cute_dsl_{prefix}_wrapper in the exported header")
    params = [p.strip() for p in match.group(3).split(",")]
    struct_types = [p.split()[0] for p in params if p.startswith(f"{prefix}_Tensor_")]
    expected = len(tensors) + (1 if workspace_bytes else 0)
    if len(struct_types) != expected or params[-1].split()[0] != "cudaStream_t":
        raise ToolchainError(
            f"{header}: wrapper takes ({match.group(3)}), expected {len(tensors)} tensors"
            + (" and a workspace" if workspace_bytes else "") + " and a stream"
        )
    extents = [dynamic_extents(text, t) for t in struct_types]
    for tensor, count in zip(tensors, extents, strict=False):
        if count != len(tensor.runtime_dims) or (count and m_range is None):
            raise ToolchainError(
                f"{header}: tensor {tensor.name} has {count} dynamic extent(s) in the compiled "
                f"kernel, its spec {len(tensor.runtime_dims)} runtime dimension(s)"
                + ("" if m_range is not None else " and the problem no M range"))
    if m_range is not None and not any(extents):
        raise ToolchainError(f"{header}: the problem's M is a range but the compiled kernel takes "
                             "no dynamic extent: it would run at one M whatever the call's")
    if workspace_bytes and extents[-1]:
        raise ToolchainError(f"{header}: the workspace {struct_types[-1]} has dynamic extents")
    return match.group(1), struct_types, extents


def _shim_load(prefix: str, workspace_bytes: int) -> list[str]:
    """The shim's module state and ``tsopt_load``: the exported module loaded once, and a
    kernel's workspace allocated and zeroed on every device."""
    workspace_load = [
        f"    if (devices > {MAX_DEVICES}) return (int)cudaErrorInvalidDevice;",
        "    int current = 0;",
        "    cudaGetDevice(&current);",
        "    for (int d = 0; d < devices; ++d) {",
        "      if (cudaSetDevice(d) != cudaSuccess) continue;",
        f"      err = cudaMalloc(&tsopt_workspace[d], {workspace_bytes}ull);",
        f"      if (err == cudaSuccess) err = cudaMemset(tsopt_workspace[d], 0, {workspace_bytes}ull);",
        "      if (err == cudaSuccess) err = cudaDeviceSynchronize();",
        "      if (err != cudaSuccess) { cudaSetDevice(current); return (int)err; }",
        "    }",
        "    cudaSetDevice(current);",
    ] if workspace_bytes else []
    return [
        '#include "kernel.h"',
        f"static {prefix}_Kernel_Module_t tsopt_module;",
        "static int tsopt_loaded = 0;",
        *([f"static void *tsopt_workspace[{MAX_DEVICES}];"] if workspace_bytes else []),
        "",
        "int tsopt_load(void) {",
        "  if (!tsopt_loaded) {",
        # The exported loader loops over cudaGetDeviceCount's result without checking
        # the call: with no usable device it would read an uninitialised count.
        "    int devices = 0;",
        "    cudaError_t probe = cudaGetDeviceCount(&devices);",
        "    if (probe != cudaSuccess) return (int)probe;",
        "    if (devices == 0) return (int)cudaErrorNoDevice;",
        f"    {prefix}_Kernel_Module_Load(&tsopt_module);",
        "    cudaError_t err = cudaGetLastError();",
        "    if (err != cudaSuccess) return (int)err;",
        *workspace_load,
        "    tsopt_loaded = 1;",
        "  }",
        "  return 0;",
        "}",
        "",
    ]


def _shim_launch(wrapper: str, struct_types: list[str], extents: list[int], n_tensors: int,
                 workspace_bytes: int, m_range: tuple[int, int] | None) -> list[str]:
    """The shim's ``tsopt_launch`` (and a runtime-M kernel's ``tsopt_launch_m``): the tensors'
    data pointers (and the call's M as their dynamic extents) wrapped in the exported structs,
    the current device's workspace after them, then the wrapper called."""
    lines = [
        ("int tsopt_launch(void **data, int n, void *stream) {" if m_range is None else
         f"int {LAUNCH_M_SYMBOL}(void **data, int n, int m, void *stream) {{"),
        f"  if (n != {n_tensors} || !tsopt_loaded) return -1;",
    ]
    if m_range is not None:
        lines.append(f"  if (m < {m_range[0]} || m > {m_range[1]}) return {M_OUTSIDE_RANGE};")
    args = []
    for i, struct_type in enumerate(struct_types[:n_tensors]):
        sizes = f", {{{', '.join(['m'] * extents[i])}}}" if extents[i] else ""
        lines.append(f"  {struct_type} t{i} = {{data[{i}]{sizes}}};")
        args.append(f"&t{i}")
    if workspace_bytes:
        lines += [
            "  int device = 0;",
            "  cudaGetDevice(&device);",
            f"  if (device < 0 || device >= {MAX_DEVICES} || !tsopt_workspace[device]) "
            "return (int)cudaErrorInvalidDevice;",
            f"  {struct_types[-1]} workspace = {{tsopt_workspace[device]}};",
        ]
        args.append("&workspace")
    lines += [
        f"  int rc = {wrapper}(&tsopt_module, {', '.join(args)}, (cudaStream_t)stream);",
        "  if (rc != 0) return rc;",
        "  return (int)cudaGetLastError();",
        "}",
        "",
    ]
    if m_range is not None:
        lines += [
            "int tsopt_launch(void **data, int n, void *stream) {",
            f"  return {LAUNCH_M_SYMBOL}(data, n, {m_range[1]}, stream);",
            "}",
            "",
        ]
    return lines


def runtime_dims(compile_arg: Any) -> tuple[int, ...]:
    """The dimensions of a fake tensor of ``cute.compile`` left dynamic (a runtime M): what
    was compiled, so the artifact cannot claim another."""
    return tuple(i for i, dynamic in enumerate(getattr(compile_arg, "dynamic_shapes_mask", ()))
                 if dynamic)


def link(directory: Path, toolchain: Toolchain) -> float:
    start = time.perf_counter()
    cmd = [
        toolchain.cc,
        "-shared",
        "-fPIC",
        "-O2",
        "-o",
        str(directory / LIBRARY_NAME),
        str(directory / "shim.c"),
        str(directory / "kernel.o"),
        str(toolchain.dsl_runtime),
        f"-I{toolchain.cuda_include}",
        f"-L{toolchain.cuda_lib}",
        "-lcudart",
        "-ldl",
        "-lpthread",
        "-lrt",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolchainError(f"link failed ({' '.join(cmd)}):\n{done.stderr.strip()[-2000:]}")
    return time.perf_counter() - start


# --------------------------------------------------------------------------------------
# Resource usage from the cubin (ELF)
# --------------------------------------------------------------------------------------

_EIATTR_FRAME_SIZE = 0x11  # local-memory frame per thread: spills and stack arrays
_EIATTR_REGCOUNT = 0x2F


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """Registers (max over kernels) and local-memory frame bytes of a cubin.

    Both sit in the ``.nv.info`` sections as EIATTR records
    (REGCOUNT, FRAME_SIZE) of format SVAL: a 4-byte header (format, attribute,
    payload length) then (symbol index, value).
    """
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return {}
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = []
    for i in range(shnum):
        name, _type, _flags, _addr, offset, size, _link, info, _align, _entsize = (
            struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        )
        sections.append((name, offset, size, info))
    strtab_off = sections[shstrndx][1]

    def section_name(idx: int) -> str:
        start = strtab_off + idx
        return cubin[start : cubin.index(b"\0", start)].decode(errors="replace")

    found: dict[str, int] = {}
    for name_idx, offset, size, _info in sections:
        if not section_name(name_idx).startswith(".nv.info"):
            continue
        pos = offset
        while pos + 4 <= offset + size:
            fmt, attr, length = struct.unpack_from("<BBH", cubin, pos)
            if fmt != 0x04:  # not SVAL: a 4-byte record with no payload
                pos += 4
                continue
            if length >= 8 and attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE):
                _symbol, value = struct.unpack_from("<II", cubin, pos + 4)
                name = "registers" if attr == _EIATTR_REGCOUNT else "frame_bytes"
                found[name] = max(found.get(name, 0), value)
            pos += 4 + length
    return found


# --------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------


def compile_spec(spec: KernelSpec, arch: str, dump_dir: Path) -> Any:
    """``cute.compile`` of a kernel spec for ``arch``, keeping the cubin in ``dump_dir``; the
    DSL's chatter is silenced. Returns the compiled kernel (under ``CUTE_DSL_DRYRUN=1``: IR
    generation only)."""
    import cutlass.cute as cute

    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cute.compile(
            spec.host_fn,
            *spec.compile_args,
            options=f"--gpu-arch {arch} --keep-cubin --keep-sass --dump-dir {dump_dir}",
        )


def check_sass(dump_dir: Path) -> None:
    """Raise :class:`SassHazardError` when the SASS ``cute.compile`` kept in ``dump_dir`` touches
    an in-flight wgmma accumulator (:func:`tsopt.build.sass.accumulator_hazards`)."""
    listings = sorted(dump_dir.glob("*.sass"))
    if not listings:
        raise SassHazardError(f"no SASS listing in {dump_dir} (--keep-sass): the kernel is unchecked")
    hazards = [h for listing in listings for h in accumulator_hazards(listing.read_text())]
    if hazards:
        raise SassHazardError(
            f"{len(hazards)} instruction(s) touch a wgmma accumulator before the "
            f"WARPGROUP.DEPBAR that retires it (ptxas scheduling; bench/wrong_answer), first "
            f"{hazards[0].describe()}")


@dataclass
class _StepSeconds:
    """How long each step of a build took so far (a failed build records the steps it ran)."""

    compile: float = 0.0
    export: float = 0.0
    link: float = 0.0


def build_candidate(
    space: SearchSpace,
    genome: Genome,
    problem: Problem,
    arch: str = "sm_90a",
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
    *,
    force: bool = False,
    device: str | DeviceProfile | None = None,
) -> BuildResult:
    """Compile, export and link ``genome`` for ``problem`` on ``arch``, for the GPU ``device``
    (a profile or its id; None: the arch's default profile); never raises for a kernel that
    fails to build (the result says ``error`` with the message). An unknown ``device``, or
    one of another arch, raises UserInputError before anything is built."""
    profile = target_of(device, arch)
    key = cache_key(genome, problem, arch, space.source_digest(), profile)
    directory = Path(cache_dir) / key
    record = directory / "build.json"
    if not force and record.exists() and (directory / LIBRARY_NAME).exists():
        cached = BuildResult.from_dict(json.loads(record.read_text()))
        return BuildResult(**{**cached.to_dict(), "cache_hit": True})

    versions = tool_versions()
    base: dict[str, Any] = dict(
        genome_hash=genome.hash,
        problem_key=problem.key,
        arch=arch,
        cache_key=key,
        versions={**versions, "template": space.source_digest()},
    )
    parent = Path(cache_dir).parent
    staging = Path(tempfile.mkdtemp(prefix=f"build-{key}-",
                                    dir=parent if parent.exists() else None))
    seconds = _StepSeconds()
    try:
        ensure_arch(arch)
        toolchain = find_toolchain()
        spec = space.kernel_spec(genome, problem, arch, profile)
        tensors, resources = _compile_export_link(staging, spec, genome, arch, toolchain, seconds,
                                                  problem.m_range)
        (staging / "genome.json").write_text(genome.to_json())
        ArtifactManifest(
            genome_hash=genome.hash,
            space=genome.space,
            problem=problem.to_dict(),
            arch=arch,
            tensors=tensors,
            launch=dict(spec.launch),
            versions=versions,
            device={"id": profile.id, "sm_count": profile.sm_count, "name": profile.name,
                    **({"derived_from": profile.derived_from} if profile.derived else {})},
            m_range=problem.m_range,
        ).write(staging)
        result = BuildResult(
            **base,
            status="ok",
            artifact_dir=str(directory.resolve()),
            library=str((directory / LIBRARY_NAME).resolve()),
            compile_seconds=seconds.compile,
            export_seconds=seconds.export,
            link_seconds=seconds.link,
            registers=resources.get("registers"),
            smem_bytes=spec.launch.get("smem_bytes"),
            spill_bytes=resources.get("frame_bytes"),
        )
        _install(staging, directory, result)
        return result
    except (ToolchainError, ArchMismatchError) as exc:
        kind = "arch" if isinstance(exc, ArchMismatchError) else "toolchain"
        return _failed_build(base, f"{kind}: {exc}", seconds)
    except SassHazardError as exc:
        return _failed_build(base, f"sass: {exc}", seconds)
    except Exception as exc:  # noqa: BLE001 - a DSL compile failure becomes a recorded status
        # The DSL colours its diagnostics for a terminal; a record keeps the text.
        text = _ANSI.sub("", str(exc)).strip()
        message = f"{type(exc).__name__}: {text[:2000]}"
        return _failed_build(base, message, seconds)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _failed_build(base: dict[str, Any], error: str, seconds: _StepSeconds) -> BuildResult:
    return BuildResult(**base, status="error", error=error, compile_seconds=seconds.compile,
                       export_seconds=seconds.export, link_seconds=seconds.link)


def _install(staging: Path, directory: Path, result: BuildResult) -> None:
    """The built artifact, its record written, moved from ``staging`` to its cache directory
    (an older build there replaced)."""
    (staging / "build.json").write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, directory)


def _compile_export_link(staging: Path, spec: KernelSpec, genome: Genome, arch: str,
                         toolchain: Toolchain, seconds: _StepSeconds,
                         m_range: tuple[int, int] | None = None,
                         ) -> tuple[tuple[TensorDesc, ...], dict[str, int]]:
    """``libkernel.so`` built in ``staging`` (the object, header, shim and cubin beside it),
    each step's time kept in ``seconds`` as it ends; the kernel's tensors and the cubin's
    registers and local-memory frame."""
    start = time.perf_counter()
    (staging / "dump").mkdir()
    compiled = compile_spec(spec, arch, staging / "dump")
    seconds.compile = time.perf_counter() - start
    check_sass(staging / "dump")

    start = time.perf_counter()
    prefix = f"tsopt_{genome.hash[:16]}"
    compiled.export_to_c(str(staging), "kernel", prefix)
    seconds.export = time.perf_counter() - start

    tensors = tuple(TensorDesc(t.name, t.role, t.shape, t.dtype, runtime_dims(arg))
                    for t, arg in zip(spec.tensors, spec.compile_args, strict=False))
    (staging / "shim.c").write_text(write_shim(
        staging / "kernel.h", prefix, tensors, spec.workspace_bytes, m_range))
    seconds.link = link(staging, toolchain)

    resources: dict[str, int] = {}
    cubins = sorted((staging / "dump").glob("*.cubin"))
    if cubins:
        resources = cubin_resources(cubins[-1].read_bytes())
        shutil.copy(cubins[-1], staging / "kernel.cubin")
    shutil.rmtree(staging / "dump", ignore_errors=True)
    return tensors, resources


# --------------------------------------------------------------------------------------
# Bounded builds
# --------------------------------------------------------------------------------------

BUILD_MEMORY_ENV = "TSOPT_BUILD_MEMORY"
WORKER_FAILED_TWICE = "build worker failed twice"
DEFAULT_BUILD_MEMORY = 16 * 2**30
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
# What a build that ran out of address space says (Python, the dynamic loader, LLVM, libc).
_MEMORY_SIGNS = ("memoryerror", "cannot allocate memory", "bad_alloc",
                 "failed to map segment", "pthread_create failed", "std::bad_alloc", "enomem",
                 "resource temporarily unavailable")


def parse_memory(text: str, where: str = BUILD_MEMORY_ENV) -> int | None:
    """``16G``, ``512M``, ``1073741824`` -> bytes; ``0``/``none``/``off`` -> None (no limit);
    UserInputError naming the text otherwise."""
    value = text.strip().lower().removesuffix("b").removesuffix("i")
    if value in ("0", "none", "off", "unlimited"):
        return None
    number, unit = (value[:-1], value[-1]) if value and value[-1] in _UNITS else (value, "")
    try:
        amount = float(number) * _UNITS[unit]
    except ValueError:
        raise UserInputError(f"{where}={text!r} is not an amount of memory like 16G or 512M "
                             "(0 for no limit)") from None
    if not amount > 0 or amount != amount or amount == float("inf"):
        raise UserInputError(f"{where}={text!r} must be a finite, positive amount of memory")
    return int(amount)


def build_memory_limit() -> int | None:
    """Bytes of address space one build may add: ``$TSOPT_BUILD_MEMORY``, else 16 GiB or three
    quarters of this machine's memory, whichever is less."""
    text = os.environ.get(BUILD_MEMORY_ENV)
    if text is not None:
        return parse_memory(text)
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return DEFAULT_BUILD_MEMORY
    return min(DEFAULT_BUILD_MEMORY, physical * 3 // 4)


def _address_space() -> int:
    """This process's virtual memory size in bytes (0 where /proc says nothing)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


@contextlib.contextmanager
def address_space_limit(budget: int | None) -> Any:
    """Let this process's address space grow by at most ``budget`` bytes inside the block."""
    if budget is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + budget
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _gib(amount: int) -> str:
    return f"{amount / 2**30:.1f} GiB" if amount >= 2**30 else f"{amount / 2**20:.0f} MiB"


def looks_out_of_memory(text: str) -> bool:
    lowered = text.lower()
    return any(sign in lowered for sign in _MEMORY_SIGNS)


def memory_failure(result: BuildResult, budget: int | None, extra: str = "") -> BuildResult:
    """A failed build that ran out of its memory limit, recorded as ``memory: ...``."""
    if result.ok or budget is None or not looks_out_of_memory(f"{result.error or ''} {extra}"):
        return result
    why = (result.error or extra).strip().splitlines()[0][:300] if (result.error or extra) else ""
    return BuildResult(**{**result.to_dict(), "error": (
        f"memory: the build exceeded its memory limit of {_gib(budget)} "
        f"(${BUILD_MEMORY_ENV} raises it): {why}")})


def build_limited(space: SearchSpace, genome: Genome, problem: Problem, arch: str,
                  cache_dir: Path | str, budget: int | None,
                  device: str | DeviceProfile | None = None) -> BuildResult:
    """:func:`build_candidate` in this process under the memory ``budget`` (a process that may
    die: a Ray worker, which Ray replaces)."""
    with address_space_limit(budget):
        result = build_candidate(space, genome, problem, arch, cache_dir, device=device)
    return memory_failure(result, budget)


def build_isolated(space: SearchSpace, genome: Genome, problem: Problem, arch: str,
                   cache_dir: Path | str, budget: int | None,
                   device: str | DeviceProfile | None = None) -> BuildResult:
    """:func:`build_candidate` in a child process forked for it, under the memory ``budget``:
    a build that runs out of memory, even one LLVM aborts, fails alone and is recorded
    (``memory: ...``); a cached artifact is found without a child. A child that dies for
    another reason (a compiler crash, a kill) is retried once in a fresh one, like a worker
    that dies; a second death is recorded as ``build worker failed twice (retried once)``."""
    profile = target_of(device, arch)
    key = cache_key(genome, problem, arch, space.source_digest(), profile)
    directory = Path(cache_dir) / key
    if (directory / "build.json").exists() and (directory / LIBRARY_NAME).exists():
        return build_candidate(space, genome, problem, arch, cache_dir, device=profile)
    if not hasattr(os, "fork"):
        return build_limited(space, genome, problem, arch, cache_dir, budget, profile)
    result, died = _build_in_child(space, genome, problem, arch, cache_dir, budget, key, profile)
    if not died or (result.error or "").startswith("memory:"):
        return result
    retried, died = _build_in_child(space, genome, problem, arch, cache_dir, budget, key,
                                    profile)
    if not died or (retried.error or "").startswith("memory:"):
        return retried
    return BuildResult(**{**retried.to_dict(),
                          "error": f"{WORKER_FAILED_TWICE} (retried once): {retried.error}"})


def _build_in_child(space: SearchSpace, genome: Genome, problem: Problem, arch: str,
                    cache_dir: Path | str, budget: int | None,
                    key: str, device: DeviceProfile | None = None) -> tuple[BuildResult, bool]:
    """One forked build; the result, and whether the child died without sending one."""
    read_end, write_end = os.pipe()
    log = tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: build, send the record, leave without cleaning up the parent's
        code = 70
        try:
            os.close(read_end)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            with address_space_limit(budget):
                result = build_candidate(space, genome, problem, arch, cache_dir, device=device)
            data = json.dumps(result.to_dict()).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
            code = 0
        except BaseException as exc:  # noqa: BLE001 - the child reports on stderr and exits
            with contextlib.suppress(OSError):
                os.write(2, f"{type(exc).__name__}: {exc}\n".encode(errors="replace"))
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while block := pipe.read(1 << 16):
            chunks.append(block)
    _, status = os.waitpid(pid, 0)
    log.seek(0)
    tail = _ANSI.sub("", log.read()[-4000:].decode(errors="replace")).strip()
    log.close()
    if chunks and os.waitstatus_to_exitcode(status) == 0:
        return memory_failure(BuildResult.from_dict(json.loads(b"".join(chunks))), budget,
                              tail), False
    code = os.waitstatus_to_exitcode(status)
    how = (f"died from {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
           else f"exited with code {code}")
    last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
    failed = BuildResult(
        genome_hash=genome.hash, problem_key=problem.key, arch=arch, status="error",
        cache_key=key, error=f"the build process {how}: {last[:500]}" if last else
        f"the build process {how}",
        versions={**tool_versions(), "template": space.source_digest()},
    )
    return memory_failure(failed, budget, tail), True
