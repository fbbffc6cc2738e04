"""``tsopt export``: tuned kernels as a directory a person can read, link, load and call from
PyTorch.

What an export of one study holds::

    kernel.py       standalone CuTe-DSL/TS source of the candidate, schedule written out;
                    `python kernel.py` checks it against torch on a GPU machine with the DSL,
                    `python kernel.py --cubin F` recompiles it here (no GPU) to compare cubins
    kernel.h        the C header export_to_c wrote
    kernel.o        the object (cubin + host launch code)
    kernel.cubin    the cubin, for inspection (cuobjdump) and the equivalence check
    libkernel.so    the shared library with tsopt's ABI (tsopt_load / tsopt_launch)
    artifact.json   the library's tensor signature (what loader.py reads)
    loader.py       load_kernel(DIR) -> callable on torch tensors; torch + stdlib only
    torch_ops.py    load(DIR) registers torch.ops.tsopt.<op>_<dtype>_<sizes> (the kernel) and
                    torch.ops.tsopt.<op> (dispatch, falling back to torch); torch + stdlib only
    example.c       a C program calling the kernel through kernel.h, and build.sh to build it
    manifest.json   genome, problem, arch, measured figures with device, versions and launch mode,
                    tool versions, the verifier's verdict (judged again at export), the
                    kernels for torch_ops.py, and a sha256 of every file

Several studies (one kernel per problem) make a package: one such directory per kernel, named
after its op, with ``loader.py``, ``torch_ops.py`` and a ``manifest.json`` listing them all at
the top. Where an export may be written, and what it replaces, is :mod:`tsopt.app.export_target`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

import tsopt
from tsopt.app.export_target import (
    FORMAT,
    MANIFEST,
    check_not_protected,
    check_replaceable,
    move_in,
    protected_paths,
    staging_dir,
)
from tsopt.core.buckets import problem_m_range, summary_of
from tsopt.core.devices import DeviceProfile, recorded_profile
from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem

if TYPE_CHECKING:
    from tsopt.core.records import Verdict
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store
    from tsopt.db.views import CandidateInfo, RankedCandidate, StudyInfo

COPIED = ("kernel.h", "kernel.o", "kernel.cubin", "libkernel.so", "artifact.json", "shim.c")
VERSION = 2  # 2: torch_ops.py, the "kernels" list, packages of several studies
LAUNCH_WORDS = {"graph": "back-to-back launches in one CUDA graph per side: GPU time",
                "eager": "calls through loader.py: GPU plus launch cost",
                "isolated": "each launch after a spin kernel, as tsopt timed before its "
                            "launch modes"}


@dataclass(frozen=True)
class ExportedKernel:
    """One kernel of an export, as its manifest's ``kernels`` list holds it."""

    name: str  # its op under torch.ops.tsopt, e.g. gemm_bf16_8192x8192x8192
    op: str
    dtype: str
    sizes: tuple[tuple[str, int], ...]
    dir: str  # relative to the export's top
    study: str
    rank: int
    genome_hash: str
    median_us: float | None
    ratio: float | None
    baseline_name: str
    device: str
    launch: str  # the launch mode median_us and ratio were timed in (tsopt.core.records)
    built_for: dict[str, Any] = field(default_factory=dict)
    """The device profile its kernel was built for (``id``, ``sm_count``): loaded on a GPU
    with another SM count, a kernel whose grid was sized for these is refused."""
    proof_complete: bool = False
    """Every exhaustive TS search its verdict rests on is complete (its manifest's
    ``ts_proof`` says which; ``tsopt export`` names a kernel without)."""
    m_range: tuple[int, int] | None = None
    """A GEMM kernel's Ms: [M, M] for a fixed-M kernel, [lo, hi] for a runtime-M one (the
    torch op routes a call to the kernel whose range holds its M)."""
    runtime_m: bool = False
    """M is the launch's: one kernel for every M of ``m_range`` (else the kernel of one M,
    which the op prefers at exactly that M: faster where it exists)."""
    per_m: dict[str, Any] = field(default_factory=dict)
    """A runtime-M kernel's paired figures across the Ms it was measured at: ``median`` and
    ``worst`` ratio, ``worst_m``, ``ms`` (tsopt.core.buckets.summary_of; the manifest's
    ``measured.per_m`` has each M's)."""
    serving: dict[str, Any] = field(default_factory=dict)
    """What the study was tuned for by a run of several (its config's ``serving``: the
    workload, the projections' names, the bucket, the kernel kind: ``fixed-m-standin`` for a
    bucket tuned at its top M alone)."""

    def to_dict(self) -> dict[str, Any]:
        doc = {"name": self.name, "op": self.op, "dtype": self.dtype,
               "sizes": [[n, v] for n, v in self.sizes], "dir": self.dir, "study": self.study,
               "rank": self.rank, "genome_hash": self.genome_hash, "median_us": self.median_us,
               "ratio": self.ratio, "baseline_name": self.baseline_name, "device": self.device,
               "launch": self.launch, "built_for": dict(self.built_for)}
        if self.m_range is not None:
            doc.update(m_range=list(self.m_range), runtime_m=self.runtime_m)
        if self.per_m:
            doc["per_m"] = dict(self.per_m)
        if self.serving:
            doc["serving"] = dict(self.serving)
        return doc


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: its directory, kernels and files (relative paths)."""

    directory: Path
    genome_hash: str  # the first kernel's
    rank: int
    files: tuple[str, ...]
    kernels: tuple[ExportedKernel, ...] = ()

    @property
    def manifest_path(self) -> Path:
        return self.directory / MANIFEST

    def manifest(self) -> dict[str, Any]:
        """The export's manifest.json, as written."""
        doc: dict[str, Any] = json.loads(self.manifest_path.read_text())
        return doc


@dataclass(frozen=True)
class _Chosen:
    info: StudyInfo
    ranked: RankedCandidate
    candidate: CandidateInfo
    space: SearchSpace
    verdict: Verdict
    rank: int
    proof: dict[str, Any]
    """TS's exhaustive searches the verdict rests on (domain, states, complete or not)."""

    @property
    def name(self) -> str:
        return self.info.problem.key.replace("-", "_")


def devices_text(devices: dict[str, int]) -> str:
    return ", ".join(f"{d or 'unnamed'}: {n}" for d, n in devices.items()) or "none"


def ranking_device(store: Store, study: str, measured_on: str | None) -> str | None:
    """The GPU whose measurements rank ``study``: ``measured_on``, which must have measured it;
    else the one GPU that did. A study measured on several is refused: a kernel fastest on one
    card can lose on another (an H100's picks of the Llama layer met the bar in 11 of 16
    buckets there and in 5 on an H200, bench/llama_layer), so pooling them picks for neither."""
    from tsopt.db.views import named_gpus

    devices = store.measured_devices(study)
    named = named_gpus(devices)
    if measured_on is not None:
        if measured_on not in devices:
            raise UserInputError(
                f"--measured-on {measured_on!r}: study {study!r} has no correct timed "
                f"measurement on that GPU (measured on: {devices_text(devices)})")
        return measured_on
    if len(named) > 1:
        raise UserInputError(
            f"study {study!r} was measured on {len(named)} GPUs ({devices_text(named)}): "
            "a kernel fastest on one can lose on another, so the export does not rank across "
            "them; pass --measured-on with the GPU it will run on, e.g. "
            f"--measured-on {next(iter(named))!r}")
    return None


def _choose(store: Store, study: str, rank: int,
            measured_on: str | None = None) -> tuple[StudyInfo, RankedCandidate, CandidateInfo]:
    info = store.get_study(study)
    if info is None:
        known = ", ".join(s.name for s in store.list_studies()) or "none"
        raise UserInputError(f"no study named {study!r} in this database (studies: {known})")
    if rank < 1:
        raise UserInputError(f"--rank {rank} must be 1 (the best) or more")
    ranked = store.ranked(study, device=ranking_device(store, study, measured_on))
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


def study_device(info: StudyInfo) -> DeviceProfile:
    """The device profile a study built for (its config's ``device``); a study recorded before
    profiles existed was built for its arch's default."""
    return recorded_profile(info.config, info.arch)


def _artifact_dir(space: Any, candidate: CandidateInfo, info: StudyInfo) -> Path:
    """The candidate's built artifact: from the cache, or rebuilt here if the cache lost it."""
    build = candidate.build
    if build is not None and build.artifact_dir and Path(build.artifact_dir, "libkernel.so").exists():
        return Path(build.artifact_dir)
    from tsopt.build.builder import build_candidate
    from tsopt.core.dsl_env import ensure_arch

    ensure_arch(info.arch)
    rebuilt = build_candidate(space, candidate.genome, info.problem, info.arch,
                              device=study_device(info))
    if not rebuilt.ok or not rebuilt.artifact_dir:
        raise RuntimeError(f"rebuilding {candidate.genome_hash[:12]} for export failed: {rebuilt.error}")
    return Path(rebuilt.artifact_dir)


def _header_text(info: StudyInfo, ranked: RankedCandidate, rank: int) -> str:
    m = ranked.measurement

    def shown(value: float | None, spec: str) -> str:
        # A row an older tsopt ingested may lack a figure: it is shown missing, never a crash.
        return format(value, spec) if value is not None else "(not recorded)"

    return (
        f"tsopt export of study {info.name!r}, rank {rank}: genome {ranked.genome_hash[:12]}.\n\n"
        f"Problem: {info.problem}; target {info.arch}.\n"
        f"Measured on {m.device}: {shown(m.median_us, '.2f')} us (p10 {shown(m.p10_us, '.2f')}, "
        f"p90 {shown(m.p90_us, '.2f')}), {shown(m.rate, '.1f')} {m.rate_unit}, "
        f"{shown(m.ratio, '.3f')}x {m.baseline_name} timed in the same run,\n"
        f"both in launch mode {m.launch!r} ({LAUNCH_WORDS.get(m.launch, m.launch)}).\n\n"
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


def _worker_source(module: str) -> Path:
    """A measuring-side file copied verbatim into exports (found without importing torch)."""
    import importlib.util

    spec = importlib.util.find_spec(f"tsopt.workers.{module}")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


def _loader_source() -> Path:
    return _worker_source("loader")


def _reverify(space: SearchSpace, candidate: CandidateInfo, info: StudyInfo,
              store: Store) -> tuple[Verdict, dict[str, Any]]:
    """Judge the genome again with today's verifier (no cached verdict): the study's verdict
    may come from an older one, and an export is what a user will run. TS's exhaustive
    searches of this verifier version recorded in the database are read (``tsopt prove``'s
    complete ones among them), never written; the proof is what the verdict rests on."""
    from tsopt.verify.verifier import ReadOnlySearches, VerdictCache, proof_of, verify_genome

    cache = VerdictCache(searches=ReadOnlySearches(store))
    verdict = verify_genome(candidate.genome, info.problem, space=space, cache=cache)
    if not verdict.valid:
        raise UserInputError(
            f"{candidate.genome_hash[:12]} of study {info.name!r} no longer passes the verifier "
            f"({verdict.stage}: {verdict.rule}: {(verdict.message or '').splitlines()[0][:200]}); "
            "it was recorded valid by an earlier verifier: export refuses it (choose another "
            "--rank, or tune again)")
    from tsopt.verify.verifier import search_bound

    searches = [p.to_dict() for p in proof_of(candidate.genome, info.problem, space, cache)]
    proof: dict[str, Any] = {"searches": searches, "complete": (
        all(p["complete"] for p in searches) if searches else search_bound(verdict) is None)}
    if not searches:
        proof["note"] = ("no exhaustive search of this schedule could be keyed by its model: "
                         "TS's checker ran in full at export, and the verdict's message says "
                         "whether its bound cut it")
    return verdict, proof


def _check_current(space: SearchSpace, candidate: CandidateInfo, info: StudyInfo) -> None:
    from tsopt.build.builder import cache_key

    current = cache_key(candidate.genome, info.problem, info.arch, space.source_digest(),
                        study_device(info))
    if candidate.build is not None and candidate.build.cache_key != current:
        built_from = candidate.build.versions.get("template", "an older template")
        raise UserInputError(
            f"{candidate.genome_hash[:12]} was built and measured with {built_from} and "
            f"{candidate.build.versions.get('nvidia-cutlass-dsl', '?')}; the {info.space} template "
            f"or toolchain has changed since (template now {space.source_digest()}), so the export "
            "would not be the kernel that was timed: measure it again with the current code first"
        )


def _choose_all(store: Store, studies: Sequence[str], rank: int,
                measured_on: str | None = None) -> list[_Chosen]:
    """Each study's candidate of rank ``rank``, checked to be exportable, one per problem."""
    from tsopt.core.dsl_env import ensure_arch
    from tsopt.core.registry import get_space

    if not studies:
        raise UserInputError("name a study to export (STUDY, --study NAME or --studies A,B)")
    repeated = sorted({s for s in studies if list(studies).count(s) > 1})
    if repeated:
        raise UserInputError(f"study {repeated[0]!r} is named twice")
    picked = [_choose(store, study, rank, measured_on) for study in studies]
    archs = sorted({info.arch for info, _, _ in picked})
    if len(archs) > 1:
        raise UserInputError(f"the studies target different archs ({', '.join(archs)}): a package "
                             "holds kernels for one arch; export them separately")
    problems: dict[str, str] = {}
    for info, _, _ in picked:
        other = problems.setdefault(info.problem.key, info.name)
        if other != info.name:
            raise UserInputError(
                f"studies {other!r} and {info.name!r} both tune {info.problem}: a package holds one "
                "kernel per problem (its dispatch table could not choose); export one of them")
    chosen = []
    for info, ranked, candidate in picked:
        ensure_arch(info.arch)
        space = get_space(info.space)
        verdict, proof = _reverify(space, candidate, info, store)
        _check_current(space, candidate, info)
        chosen.append(_Chosen(info, ranked, candidate, space, verdict, rank, proof))
    return chosen


def kernel_m_range(problem: Problem) -> tuple[tuple[int, int] | None, bool]:
    """The Ms a kernel of ``problem`` serves, and whether M is its launch's: a runtime-M
    problem's range; a fixed-M GEMM's [M, M]; None for an op without M."""
    found = problem_m_range(problem)
    if found is not None:
        return found, True
    return ((problem["m"], problem["m"]), False) if problem.op == "gemm" else (None, False)


def _exported(chosen: _Chosen, directory: str) -> ExportedKernel:
    m = chosen.ranked.measurement
    problem = chosen.info.problem
    m_range, runtime_m = kernel_m_range(problem)
    return ExportedKernel(
        name=chosen.name, op=problem.op, dtype=problem.dtype, sizes=problem.dims, dir=directory,
        study=chosen.info.name, rank=chosen.rank, genome_hash=chosen.candidate.genome_hash,
        median_us=m.median_us, ratio=m.ratio, baseline_name=m.baseline_name, device=m.device,
        launch=m.launch,
        built_for={"id": study_device(chosen.info).id,
                   "sm_count": study_device(chosen.info).sm_count},
        proof_complete=bool(chosen.proof["complete"]), m_range=m_range, runtime_m=runtime_m,
        per_m=summary_of(m.per_m), serving=dict(chosen.info.config.get("serving") or {}))


def _file_hashes(top: Path) -> dict[str, str]:
    return {str(p.relative_to(top)): _sha256(p) for p in sorted(top.rglob("*"))
            if p.is_file() and p.relative_to(top) != Path(MANIFEST)}


def _write_runtime(directory: Path) -> None:
    """The torch-only files: loader.py and torch_ops.py, verbatim from tsopt.workers."""
    shutil.copy2(_loader_source(), directory / "loader.py")
    shutil.copy2(_worker_source("torch_ops"), directory / "torch_ops.py")


def _write_kernel(chosen: _Chosen, directory: Path,
                  vendor_routes: list[dict[str, Any]] | None = None) -> ExportedKernel:
    """One study's export, complete in ``directory`` (also each kernel of a package)."""
    from tsopt.build.builder import tool_versions

    info, ranked, candidate = chosen.info, chosen.ranked, chosen.candidate
    directory.mkdir(parents=True, exist_ok=True)
    artifact = _artifact_dir(chosen.space, candidate, info)
    for name in COPIED:
        if (artifact / name).exists():
            shutil.copy2(artifact / name, directory / name)
    header = _header_text(info, ranked, chosen.rank)
    (directory / "kernel.py").write_text(
        chosen.space.export_source(candidate.genome, info.problem, info.arch, header,
                                   study_device(info)))
    _write_runtime(directory)
    artifact_doc = json.loads((artifact / "artifact.json").read_text())
    prefix = f"tsopt_{candidate.genome_hash[:16]}"
    (directory / "example.c").write_text(_example_c(prefix, artifact_doc["tensors"]))
    build_sh = directory / "build.sh"
    build_sh.write_text(BUILD_SH.format(cc="${CC:-gcc}"))
    build_sh.chmod(build_sh.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (directory / "genome.json").write_text(candidate.genome.to_json())
    kernel = _exported(chosen, ".")
    recorded = candidate.verdict
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "study": info.name,
        "rank": chosen.rank,
        "space": info.space,
        "problem": info.problem.to_dict(),
        "arch": info.arch,
        "genome_hash": candidate.genome_hash,
        "genome": candidate.genome.to_dict(),
        "measured": ranked.measurement.to_dict(),
        # The mode "measured" was timed in, candidate and baseline alike: a graph ratio is
        # GPU time; an eager one includes the loader's host cost per call.
        "launch": ranked.measurement.launch,
        "verdict": chosen.verdict.to_dict(),
        "ts_proof": chosen.proof,
        "forward_progress": chosen.space.forward_progress(candidate.genome),
        "recorded_verdict": recorded.to_dict() if recorded else None,
        "build": candidate.build.to_dict() if candidate.build else None,
        "versions": {**tool_versions(), "tsopt": tsopt.__version__},
        "abi": {"library": "libkernel.so", "load": "tsopt_load", "launch": "tsopt_launch",
                "c_prefix": prefix},
        "kernels": [kernel.to_dict()],
        "files": _file_hashes(directory),
    }
    if vendor_routes is not None:
        manifest["vendor_routes"] = vendor_routes
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return kernel


def _write_package(chosen: Sequence[_Chosen], top: Path,
                   vendor_routes: list[dict[str, Any]] | None = None) -> list[ExportedKernel]:
    """Several studies: a complete export per kernel in its own directory, and at the top the
    runtime files and a manifest listing every kernel (torch_ops.load reads it)."""
    from tsopt.build.builder import tool_versions

    kernels = []
    for item in chosen:
        _write_kernel(item, top / item.name)
        kernels.append(_exported(item, item.name))
    _write_runtime(top)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "package": True,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "arch": chosen[0].info.arch,
        "versions": {**tool_versions(), "tsopt": tsopt.__version__},
        "kernels": [k.to_dict() for k in kernels],
        "files": _file_hashes(top),
    }
    if vendor_routes is not None:
        manifest["vendor_routes"] = vendor_routes
    (top / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return kernels


def export_studies(store: Store, studies: Sequence[str], out: Path, rank: int = 1,
                   force: bool = False, measured_on: str | None = None,
                   vendor_routes: Sequence[dict[str, Any]] | None = None) -> ExportResult:
    """Export each study's candidate of rank ``rank`` (1 = fastest) into ``out``: one study as
    one export directory, several as a package; ranked on ``measured_on``'s measurements
    (:func:`ranking_device`). ``vendor_routes``: the M ranges a workload's export leaves to
    the vendor on purpose (``serving_tune.LeftOut``), listed in the manifest, where the op
    routes them to torch without a warning. Refuses (UserInputError) before writing
    anything: see :mod:`tsopt.app.export_target` for where it writes."""
    from tsopt.db.engine import parse_url, sqlite_path

    out = Path(out)
    check_not_protected(out, protected_paths(sqlite_path(parse_url(store.url))))
    check_replaceable(out, force)
    chosen = _choose_all(store, studies, rank, measured_on)
    staged = staging_dir(out)
    try:
        routes = list(vendor_routes) if vendor_routes is not None else None
        if len(chosen) == 1:
            kernels = [_write_kernel(chosen[0], staged, routes)]
        else:
            kernels = _write_package(chosen, staged, routes)
        written = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
        remove = check_replaceable(out, force, written)
        move_in(staged, out, remove)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    first = chosen[0]
    return ExportResult(out, first.candidate.genome_hash, rank, tuple(written), tuple(kernels))


def export_candidate(store: Store, study: str, out: Path, rank: int = 1, force: bool = False) -> ExportResult:
    """Write the export directory for ``study``'s candidate of rank ``rank`` (1 = fastest)."""
    return export_studies(store, [study], out, rank, force)


def study_list(study: str | None, repeated: Sequence[str], listed: str | None) -> list[str]:
    """The studies of ``tsopt export STUDY --study A --studies B,C``, in that order."""
    names = [study] if study else []
    names += list(repeated)
    names += [n.strip() for n in (listed or "").split(",") if n.strip()]
    return names


def export_command(studies: Sequence[str], out: Path, rank: int, force: bool, db_url: str,
                   console: Console, measured_on: str | None = None,
                   vendor_routes: Sequence[dict[str, Any]] | None = None) -> int:
    from tsopt.db.store import Store

    store = Store(db_url)
    try:
        result = export_studies(store, studies, out, rank, force, measured_on, vendor_routes)
    finally:
        store.close()
    for kernel in result.kernels:
        where = "" if kernel.dir == "." else f" in {kernel.dir}/"
        serves = ""
        if kernel.m_range is not None:
            lo, hi = kernel.m_range
            serves = (f", runtime M {lo}-{hi}" if kernel.runtime_m else f", fixed M={lo}")
            if kernel.per_m:
                serves += (f" (median {kernel.per_m['median']:.3f}x, worst "
                           f"{kernel.per_m['worst']:.3f}x at M={kernel.per_m['worst_m']})")
            if kernel.serving.get("kernel") == "fixed-m-standin":
                bucket = kernel.serving.get("bucket") or []
                serves += (f": a FIXED-M STAND-IN for bucket {'-'.join(map(str, bucket))}, "
                           "serving its one M")
        console.print(f"exported {kernel.genome_hash[:12]} (rank {kernel.rank} of study {kernel.study})"
                      f" as torch.ops.tsopt.{kernel.name}{where}{serves}", highlight=False)
    console.print(f"to {out}: {len(result.files)} files (manifest.json lists them)", highlight=False)
    for kernel in result.kernels:
        if not kernel.proof_complete:
            console.print(f"no complete TS proof: {kernel.genome_hash[:12]} ({kernel.name}) rests "
                          "on an exhaustive search cut by its state bound (nothing found, not "
                          f"proven safe); make one with: tsopt prove --db {db_url} --study "
                          f"{kernel.study} --top {kernel.rank}, then export again",
                          highlight=False, soft_wrap=True)
    ops = sorted({k.op for k in result.kernels})
    console.print("use from PyTorch (needs torch and this directory only):\n"
                  f"  import sys; sys.path.insert(0, {str(out)!r}); import torch_ops; "
                  f"torch_ops.load({str(out)!r})\n"
                  f"  torch.ops.tsopt.{result.kernels[0].name}(...)   # the tuned kernel, its shape only\n"
                  f"  torch.ops.tsopt.{ops[0]}(...)   # any shape: tuned where exported, else torch",
                  highlight=False, soft_wrap=True)
    return 0
