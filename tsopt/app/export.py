"""``tsopt export``: a tuned kernel as a directory a person can read, link and load.

What an export holds::

    kernel.py       standalone CuTe-DSL/TS source of the candidate, schedule written out;
                    `python kernel.py` checks it against torch on a GPU machine with the DSL,
                    `python kernel.py --cubin F` recompiles it here (no GPU) to compare cubins
    kernel.h        the C header export_to_c wrote
    kernel.o        the object (cubin + host launch code)
    kernel.cubin    the cubin, for inspection (cuobjdump) and the equivalence check
    libkernel.so    the shared library with tsopt's ABI (tsopt_load / tsopt_launch)
    artifact.json   the library's tensor signature (what loader.py reads)
    loader.py       load_kernel(DIR) -> callable on torch tensors; torch + stdlib only
    example.c       a C program calling the kernel through kernel.h, and build.sh to build it
    manifest.json   genome, problem, arch, measured figures with device and versions,
                    tool versions, the verifier's verdict, and a sha256 of every file
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

import tsopt
from tsopt.core.errors import UserInputError

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.db.views import CandidateInfo, RankedCandidate, StudyInfo

COPIED = ("kernel.h", "kernel.o", "kernel.cubin", "libkernel.so", "artifact.json", "shim.c")


@dataclass(frozen=True)
class ExportResult:
    directory: Path
    genome_hash: str
    rank: int
    files: tuple[str, ...]


def _choose(store: Store, study: str, rank: int) -> tuple[StudyInfo, RankedCandidate, CandidateInfo]:
    info = store.get_study(study)
    if info is None:
        known = ", ".join(s.name for s in store.list_studies()) or "none"
        raise UserInputError(f"no study named {study!r} in this database (studies: {known})")
    if rank < 1:
        raise UserInputError(f"--rank {rank} must be 1 (the best) or more")
    ranked = store.ranked(study)
    if not ranked:
        candidates = store.candidates(study)
        statuses: dict[str, int] = {}
        for c in candidates:
            for m in c.measurements:
                statuses[m.measurement.status] = statuses.get(m.measurement.status, 0) + 1
        detail = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) or "nothing measured yet"
        raise UserInputError(
            f"study {study!r} has no correct timed candidate to export "
            f"({len(candidates)} candidates; measurements: {detail})"
        )
    if rank > len(ranked):
        raise UserInputError(
            f"--rank {rank} does not exist: study {study!r} has {len(ranked)} correct timed "
            f"candidate{'s' if len(ranked) != 1 else ''}"
        )
    chosen = ranked[rank - 1]
    candidate = next(c for c in store.candidates(study) if c.genome_hash == chosen.genome_hash)
    return info, chosen, candidate


def _prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {str(out)!r} exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UserInputError(
                f"--out {str(out)!r} is not empty; choose another directory or pass --force"
            )
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _artifact_dir(space: Any, candidate: CandidateInfo, info: StudyInfo) -> Path:
    """The candidate's built artifact: from the cache, or rebuilt here if the cache lost it."""
    build = candidate.build
    if build is not None and build.artifact_dir and Path(build.artifact_dir, "libkernel.so").exists():
        return Path(build.artifact_dir)
    from tsopt.build.builder import build_candidate
    from tsopt.core.dsl_env import ensure_arch

    ensure_arch(info.arch)
    rebuilt = build_candidate(space, candidate.genome, info.problem, info.arch)
    if not rebuilt.ok or not rebuilt.artifact_dir:
        raise RuntimeError(f"rebuilding {candidate.genome_hash[:12]} for export failed: {rebuilt.error}")
    return Path(rebuilt.artifact_dir)


def _header_text(info: StudyInfo, ranked: RankedCandidate, rank: int) -> str:
    m = ranked.measurement
    return (
        f"tsopt export of study {info.name!r}, rank {rank}: genome {ranked.genome_hash[:12]}.\n\n"
        f"Problem: {info.problem}; target {info.arch}.\n"
        f"Measured on {m.device}: {m.median_us:.2f} us (p10 {m.p10_us:.2f}, p90 {m.p90_us:.2f}), "
        f"{m.rate:.1f} {m.rate_unit}, {m.ratio:.3f}x {m.baseline_name} timed in the same run.\n\n"
        "Run `python kernel.py` on a GPU machine with nvidia-cutlass-dsl to check it against torch;\n"
        "`python kernel.py --cubin out.cubin` recompiles it (no GPU needed) for comparison with\n"
        "the exported kernel.cubin. Generated by tsopt " + tsopt.__version__ + "."
    )


def _example_c(prefix: str, tensors: list[dict[str, Any]]) -> str:
    lines = [
        "/* Calling the exported kernel from C through kernel.h (built by build.sh).",
        "   Inputs are left as cudaMalloc returned them: fill them with your data. */",
        "#include <stdio.h>",
        '#include "kernel.h"',
        "",
        "int main(void) {",
        f"    {prefix}_Kernel_Module_t module;",
        f"    {prefix}_Kernel_Module_Load(&module);",
    ]
    args = []
    for t in tensors:
        count = 1
        for s in t["shape"]:
            count *= int(s)
        lines += [
            f"    void *{t['name']}_data = NULL;  /* {t['role']}: {t['dtype']} {t['shape']} */",
            f"    CUTE_DSL_CUDA_ERROR_CHECK(cudaMalloc(&{t['name']}_data, {count}ull * 2));",
            f"    {prefix}_Tensor_{t['name']}_t {t['name']} = {{{t['name']}_data}};",
        ]
        args.append(f"&{t['name']}")
    lines += [
        "    cudaStream_t stream;",
        "    CUTE_DSL_CUDA_ERROR_CHECK(cudaStreamCreate(&stream));",
        f"    int rc = cute_dsl_{prefix}_wrapper(&module, {', '.join(args)}, stream);",
        "    CUTE_DSL_CUDA_ERROR_CHECK(cudaStreamSynchronize(stream));",
        '    printf("launch returned %d, last error %s\\n", rc, cudaGetErrorString(cudaGetLastError()));',
    ]
    lines += [f"    cudaFree({t['name']}_data);" for t in tensors]
    lines += [f"    {prefix}_Kernel_Module_Unload(&module);", "    return rc;", "}", ""]
    return "\n".join(lines)


BUILD_SH = """#!/usr/bin/env bash
# Build example.c against the exported object. Needs the CUDA runtime headers and library and
# libcuda_dialect_runtime_static.a from the nvidia-cutlass-dsl wheel (set CUTE_DSL_RUNTIME).
set -euo pipefail
cd "$(dirname "$0")"
CUDA_HOME="${{CUDA_HOME:-/usr/local/cuda}}"
: "${{CUTE_DSL_RUNTIME:?set CUTE_DSL_RUNTIME to libcuda_dialect_runtime_static.a}}"
{cc} -O2 -o example example.c kernel.o "$CUTE_DSL_RUNTIME" -I"$CUDA_HOME/include" \\
  -L"$CUDA_HOME/lib64" -lcudart -ldl -lpthread -lrt -lstdc++
echo "built ./example"
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export_candidate(store: Store, study: str, out: Path, rank: int = 1, force: bool = False) -> ExportResult:
    """Write the export directory for ``study``'s candidate of rank ``rank`` (1 = fastest)."""
    from tsopt.build.builder import tool_versions
    from tsopt.core.dsl_env import ensure_arch
    from tsopt.core.registry import get_space

    info, ranked, candidate = _choose(store, study, rank)
    ensure_arch(info.arch)
    space = get_space(info.space)
    from tsopt.build.builder import cache_key

    current = cache_key(candidate.genome, info.problem, info.arch, space.source_digest())
    if candidate.build is not None and candidate.build.cache_key != current:
        built_from = candidate.build.versions.get("template", "an older template")
        raise UserInputError(
            f"{candidate.genome_hash[:12]} was built and measured with {built_from} and "
            f"{candidate.build.versions.get('nvidia-cutlass-dsl', '?')}; the {info.space} template "
            f"or toolchain has changed since (template now {space.source_digest()}), so the export "
            "would not be the kernel that was timed: measure it again with the current code first"
        )
    _prepare_out(out, force)
    artifact = _artifact_dir(space, candidate, info)
    for name in COPIED:
        if (artifact / name).exists():
            shutil.copy2(artifact / name, out / name)
    header = _header_text(info, ranked, rank)
    (out / "kernel.py").write_text(space.export_source(candidate.genome, info.problem, info.arch, header))
    shutil.copy2(_loader_source(), out / "loader.py")
    artifact_doc = json.loads((artifact / "artifact.json").read_text())
    prefix = f"tsopt_{candidate.genome_hash[:16]}"
    (out / "example.c").write_text(_example_c(prefix, artifact_doc["tensors"]))
    build_sh = out / "build.sh"
    build_sh.write_text(BUILD_SH.format(cc="${CC:-gcc}"))
    build_sh.chmod(build_sh.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (out / "genome.json").write_text(candidate.genome.to_json())
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    verdict = candidate.verdict
    manifest = {
        "format": "tsopt-export",
        "version": 1,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "study": info.name,
        "rank": rank,
        "space": info.space,
        "problem": info.problem.to_dict(),
        "arch": info.arch,
        "genome_hash": candidate.genome_hash,
        "genome": candidate.genome.to_dict(),
        "measured": ranked.measurement.to_dict(),
        "verdict": verdict.to_dict() if verdict else None,
        "build": candidate.build.to_dict() if candidate.build else None,
        "versions": {**tool_versions(), "tsopt": tsopt.__version__},
        "abi": {"library": "libkernel.so", "load": "tsopt_load", "launch": "tsopt_launch",
                "c_prefix": prefix},
        "files": {name: _sha256(out / name) for name in files},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return ExportResult(out, candidate.genome_hash, rank, tuple(files + ["manifest.json"]))


def export_command(study: str, out: Path, rank: int, force: bool, db_url: str, console: Console) -> int:
    from tsopt.db.store import Store

    store = Store(db_url)
    try:
        result = export_candidate(store, study, out, rank, force)
    finally:
        store.close()
    console.print(f"exported {result.genome_hash[:12]} (rank {result.rank} of study {study}) to {out}:")
    console.print("  " + " ".join(result.files))
    console.print(f"check on a GPU machine: python -c \"import sys; sys.path.insert(0, '{out}'); "
                  f"from loader import load_kernel; print(load_kernel('{out}'))\"")
    return 0


def _loader_source() -> Path:
    """The measuring side's loader file (copied verbatim; found without importing torch)."""
    import importlib.util

    spec = importlib.util.find_spec("tsopt.workers.loader")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)
