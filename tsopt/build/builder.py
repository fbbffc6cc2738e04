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
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
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
from tsopt.core.artifact import LIBRARY_NAME, ArtifactManifest, TensorDesc
from tsopt.core.dsl_env import ArchMismatchError, ensure_arch
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult

if TYPE_CHECKING:
    from tsopt.core.space import KernelSpec, SearchSpace

BUILDER_VERSION = "1"
DEFAULT_CACHE_DIR = Path(".tsopt") / "artifacts"


class ToolchainError(RuntimeError):
    """The C compiler, CUDA headers or the DSL runtime library cannot be found."""


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
    return Toolchain(cc, cuda_include, cuda_lib, runtime)


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


def cache_key(genome: Genome, problem: Problem, arch: str, template: str = "") -> str:
    """Artifact identity: genome, problem, arch, tool versions and the template's source."""
    versions = json.dumps(tool_versions(), sort_keys=True)
    text = "|".join((genome.hash, problem.key, arch, versions, template))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --------------------------------------------------------------------------------------
# The shim: one ABI for every kernel
# --------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WRAPPER = re.compile(r"static inline int32_t (cute_dsl_(\w+)_wrapper)\(([^)]*)\)")


def write_shim(header: Path, prefix: str, tensors: tuple[TensorDesc, ...]) -> str:
    """C source exposing ``tsopt_load``/``tsopt_launch`` over the exported wrapper.

    The wrapper's parameter list is read from the header (a tensor struct per
    tensor argument, then the stream) and checked against the spec's tensors.
    """
    text = header.read_text()
    match = next((m for m in _WRAPPER.finditer(text) if m.group(2) == prefix), None)
    if match is None:
        raise ToolchainError(f"{header}: no cute_dsl_{prefix}_wrapper in the exported header")
    params = [p.strip() for p in match.group(3).split(",")]
    struct_types = [p.split()[0] for p in params if p.startswith(f"{prefix}_Tensor_")]
    if len(struct_types) != len(tensors) or params[-1].split()[0] != "cudaStream_t":
        raise ToolchainError(
            f"{header}: wrapper takes ({match.group(3)}), expected {len(tensors)} tensors and a stream"
        )
    lines = [
        '#include "kernel.h"',
        f"static {prefix}_Kernel_Module_t tsopt_module;",
        "static int tsopt_loaded = 0;",
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
        "    tsopt_loaded = 1;",
        "  }",
        "  return 0;",
        "}",
        "",
        "int tsopt_launch(void **data, int n, void *stream) {",
        f"  if (n != {len(tensors)} || !tsopt_loaded) return -1;",
    ]
    args = []
    for i, struct_type in enumerate(struct_types):
        lines.append(f"  {struct_type} t{i} = {{data[{i}]}};")
        args.append(f"&t{i}")
    lines += [
        f"  int rc = {match.group(1)}(&tsopt_module, {', '.join(args)}, (cudaStream_t)stream);",
        "  if (rc != 0) return rc;",
        "  return (int)cudaGetLastError();",
        "}",
        "",
    ]
    return "\n".join(lines)


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


def _compile(spec: KernelSpec, arch: str, dump_dir: Path) -> Any:
    import cutlass.cute as cute

    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cute.compile(
            spec.host_fn,
            *spec.compile_args,
            options=f"--gpu-arch {arch} --keep-cubin --dump-dir {dump_dir}",
        )


def build_candidate(
    space: SearchSpace,
    genome: Genome,
    problem: Problem,
    arch: str = "sm_90a",
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
    *,
    force: bool = False,
) -> BuildResult:
    """Compile, export and link ``genome`` for ``problem`` on ``arch``; never raises for a
    kernel that fails to build (the result says ``error`` with the message)."""
    key = cache_key(genome, problem, arch, space.source_digest())
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
    staging = Path(
        tempfile.mkdtemp(
            prefix=f"build-{key}-",
            dir=Path(cache_dir).parent if Path(cache_dir).parent.exists() else None,
        )
    )
    compile_s = export_s = link_s = 0.0
    try:
        ensure_arch(arch)
        toolchain = find_toolchain()
        spec = space.kernel_spec(genome, problem, arch)
        start = time.perf_counter()
        (staging / "dump").mkdir()
        compiled = _compile(spec, arch, staging / "dump")
        compile_s = time.perf_counter() - start

        start = time.perf_counter()
        prefix = f"tsopt_{genome.hash[:16]}"
        compiled.export_to_c(str(staging), "kernel", prefix)
        export_s = time.perf_counter() - start

        tensors = tuple(TensorDesc(t.name, t.role, t.shape, t.dtype) for t in spec.tensors)
        (staging / "shim.c").write_text(write_shim(staging / "kernel.h", prefix, tensors))
        link_s = link(staging, toolchain)

        resources: dict[str, int] = {}
        cubins = sorted((staging / "dump").glob("*.cubin"))
        if cubins:
            resources = cubin_resources(cubins[-1].read_bytes())
            shutil.copy(cubins[-1], staging / "kernel.cubin")
        shutil.rmtree(staging / "dump", ignore_errors=True)
        (staging / "genome.json").write_text(genome.to_json())
        ArtifactManifest(
            genome_hash=genome.hash,
            space=genome.space,
            problem=problem.to_dict(),
            arch=arch,
            tensors=tensors,
            launch=dict(spec.launch),
            versions=versions,
        ).write(staging)
        result = BuildResult(
            **base,
            status="ok",
            artifact_dir=str(directory.resolve()),
            library=str((directory / LIBRARY_NAME).resolve()),
            compile_seconds=compile_s,
            export_seconds=export_s,
            link_seconds=link_s,
            registers=resources.get("registers"),
            smem_bytes=spec.launch.get("smem_bytes"),
            spill_bytes=resources.get("frame_bytes"),
        )
        (staging / "build.json").write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        if directory.exists():
            shutil.rmtree(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, directory)
        return result
    except (ToolchainError, ArchMismatchError) as exc:
        kind = "arch" if isinstance(exc, ArchMismatchError) else "toolchain"
        return BuildResult(
            **base,
            status="error",
            error=f"{kind}: {exc}",
            compile_seconds=compile_s,
            export_seconds=export_s,
            link_seconds=link_s,
        )
    except Exception as exc:  # noqa: BLE001 - a DSL compile failure becomes a recorded status
        # The DSL colours its diagnostics for a terminal; a record keeps the text.
        text = _ANSI.sub("", str(exc)).strip()
        message = f"{type(exc).__name__}: {text[:2000]}"
        return BuildResult(
            **base,
            status="error",
            error=message,
            compile_seconds=compile_s,
            export_seconds=export_s,
            link_seconds=link_s,
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
