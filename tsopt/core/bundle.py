"""Bundles: a directory of built candidates that a GPU machine measures and a build machine ingests.

Layout::

    manifest.json            what to measure (written on the build machine)
    artifacts/<genome hash>/ one artifact directory per candidate (see tsopt.core.artifact)
    results.json             what was measured (written on the GPU machine, atomically)

``manifest.json``::

    {"format": "tsopt-bundle", "version": 2, "bundle_id": "<uuid>", "study": ..., "space": ...,
     "problem": {"op": ..., "dtype": ..., sizes...}, "arch": "sm_90a", "created_at": "<ISO>",
     "launch": "graph" (the study's launch mode; absent: "isolated", a bundle made before the
                        modes, whose study was measured so),
     "candidates": [{"genome_hash": ..., "artifact": "artifacts/<hash>", "genome": {...},
                     "files": {"libkernel.so": "<sha256>", "artifact.json": ..., ...},
                     "origin": "enumerate" (optional: how the candidate was proposed)}],
     "sha256": "<sha256 of the rest of the document>"}

The GPU machine measures a bundle in its launch mode (tsopt.core.records.LAUNCH_MODES), and
every measurement in its results must carry that mode.

``results.json``::

    {"format": "tsopt-bundle-results", "version": 2, "bundle_id": ..., "run_id": "<uuid>",
     "device": ..., "driver": ..., "cuda": ..., "torch": ..., "started_at": ..., "updated_at": ...,
     "settings": {"runs": 50, "warmup": 10, "checks": 2}, "environment": {...},
     "baselines": [Baseline...], "measurements": [Measurement...],
     "baseline_timings": [Baseline...] (optional),
     "measured_files": {"<genome hash>": {"libkernel.so": "<sha256>", ...}},
     "sha256": "<sha256 of the rest of the document>"}

Checksums: every file of every artifact has its sha256 in the manifest (``files``), checked
before a GPU machine measures and again at ingest (for the artifacts that came back); each of
the two JSON documents carries the sha256 of its own canonical content (``sha256``), so a hand
edit that leaves well-formed values is caught too; and the results record, per measured
candidate, the checksums of the files that were measured (``measured_files``), which must be
those the manifest lists. A mismatch names the file.

Results are checked as well as parsed: a correct (``ok``) timing has finite, positive times
(p10 <= median <= p90) on a device the results name; a failed one has no times. Checked against
the manifest's problem and arch, a correct timing must also be physically possible
(:func:`measurement_physics`): every figure a measuring worker writes is there (rate, ratio,
the baseline's time and rate), each time lies between the arch's roofline (:data:`CEILINGS`)
and a minute, the rate is the one its median gives and the ratio agrees with the baseline's
time. The checksums say a file is the one tsopt wrote, not that tsopt wrote it: whoever edits
a bundle can write them again, so ingest also checks each artifact against the checksums its
database recorded at build time (:mod:`tsopt.app.ingest`), and what the manifest does not
list is refused (:func:`check_listing`).

``baselines`` holds the first baseline timing of each measuring session (ingest records it);
``baseline_timings`` every timing of the run (a measuring worker times the baseline when it
starts, every few dozen candidates and at the end), to show their spread.

``run_id`` names one measuring of the bundle (kept when an interrupted measuring resumes), so
ingesting the same results twice records nothing new.

Every malformed, foreign or mismatched file raises :class:`BundleError` (a UserInputError) with
a message naming the file and the bad value. Standard library only: the GPU side reads this.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tsopt.core.artifact import LIBRARY_NAME, ArtifactError, ArtifactManifest
from tsopt.core.artifact import MANIFEST_NAME as ARTIFACT_MANIFEST
from tsopt.core.buckets import range_ratio
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome, GenomeError
from tsopt.core.names import check_study_name
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import DEFAULT_LAUNCH, LAUNCH_MODES, Measurement
from tsopt.core.strict_json import JsonInputError, strict_loads

BUNDLE_FORMAT = "tsopt-bundle"
RESULTS_FORMAT = "tsopt-bundle-results"
BUNDLE_VERSION = 2
MANIFEST_NAME = "manifest.json"
RESULTS_NAME = "results.json"
ARTIFACTS_DIR = "artifacts"

_HASH = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_KEYS = {
    "format", "version", "bundle_id", "study", "space", "problem", "arch", "created_at",
    "candidates", "sha256", "launch",
}
_CANDIDATE_KEYS = {"genome_hash", "artifact", "genome", "origin", "files"}
CHECKSUM_KEY = "sha256"
MAX_JSON_BYTES = 512 * 2**20  # a manifest of thousands of candidates is a few MB
MAX_ARTIFACT_JSON_BYTES = 2**20


class BundleError(UserInputError):
    """A bundle directory, manifest or results file is missing, corrupted, foreign or mismatched."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def document_sha256(doc: dict[str, Any]) -> str:
    """The sha256 of a JSON document's canonical form, its own ``sha256`` field left out."""
    body = {k: v for k, v in doc.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def with_checksum(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``sha256`` field set to the checksum of the rest."""
    return {**doc, CHECKSUM_KEY: document_sha256(doc)}


def _check_checksum(doc: dict[str, Any], where: str) -> None:
    recorded = doc.get(CHECKSUM_KEY)
    if not isinstance(recorded, str) or not _HASH.match(recorded):
        raise BundleError(f"{where}: field 'sha256' is missing or not a sha256 ({recorded!r})")
    try:
        actual = document_sha256(doc)
    except ValueError:  # a NaN or an infinity: never written by tsopt (allow_nan=False)
        raise BundleError(f"{where}: holds a NaN or an infinity, which tsopt never writes: "
                          "the file was edited") from None
    if actual != recorded:
        raise BundleError(
            f"{where} was changed after tsopt wrote it: its content hashes to {actual[:12]}..., "
            f"the sha256 it records is {recorded[:12]}...")


def atomic_write_json(path: Path, doc: Any) -> Path:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as out:
        json.dump(doc, out, indent=2, sort_keys=True, allow_nan=False)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return path


# -- records -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Baseline:
    """The vendor baseline (torch copy / cuBLAS) timed on one device; times in microseconds."""

    problem_key: str
    name: str
    device: str
    median_us: float
    p10_us: float
    p90_us: float
    runs: int
    rate: float | None = None
    rate_unit: str = ""
    measured_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Any) -> Baseline:
        if not isinstance(doc, dict):
            raise ValueError(f"baseline must be an object, got {type(doc).__name__}")
        unknown = set(doc) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"baseline: unknown field(s) {sorted(unknown)}")
        baseline = cls(**doc)
        for key in ("median_us", "p10_us", "p90_us"):
            value = getattr(baseline, key)
            if not _positive(value):
                raise ValueError(f"baseline {key} must be positive, got {value!r}")
        if not isinstance(baseline.device, str) or not baseline.device:
            raise ValueError(f"baseline device must be named, got {baseline.device!r}")
        return baseline


def _positive(value: Any) -> bool:
    """A finite number above 0 (a bool is no number here)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


@dataclass(frozen=True)
class BundleCandidate:
    genome_hash: str
    artifact: str
    genome: Genome
    origin: str | None = None
    files: tuple[tuple[str, str], ...] = ()  # (file name, sha256), sorted by name

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "genome_hash": self.genome_hash, "artifact": self.artifact,
            "genome": self.genome.to_dict(), "files": dict(self.files),
        }
        if self.origin is not None:
            doc["origin"] = self.origin
        return doc


@dataclass(frozen=True)
class BundleManifest:
    bundle_id: str
    study: str
    space: str
    problem: Problem
    arch: str
    created_at: str
    candidates: tuple[BundleCandidate, ...]
    launch: str = DEFAULT_LAUNCH  # the study's (absent from a manifest: "isolated", before modes)

    def to_dict(self) -> dict[str, Any]:
        return with_checksum({
            "format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "bundle_id": self.bundle_id,
            "study": self.study, "space": self.space, "problem": self.problem.to_dict(),
            "arch": self.arch, "created_at": self.created_at, "launch": self.launch,
            "candidates": [c.to_dict() for c in self.candidates],
        })

    def candidate(self, genome_hash: str) -> BundleCandidate | None:
        return next((c for c in self.candidates if c.genome_hash == genome_hash), None)


@dataclass
class BundleResults:
    """``results.json``: one measuring run of a bundle (appended to while it runs)."""

    bundle_id: str
    run_id: str
    device: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    started_at: str = ""
    updated_at: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    baselines: list[Baseline] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    baseline_timings: list[Baseline] = field(default_factory=list)  # every timing, for spread
    measured_files: dict[str, dict[str, str]] = field(default_factory=dict)  # hash -> checksums

    def measured_hashes(self) -> set[str]:
        return {m.genome_hash for m in self.measurements}

    def to_dict(self) -> dict[str, Any]:
        return with_checksum({
            "format": RESULTS_FORMAT, "version": BUNDLE_VERSION, "bundle_id": self.bundle_id,
            "run_id": self.run_id, "device": self.device, "driver": self.driver,
            "cuda": self.cuda, "torch": self.torch, "started_at": self.started_at,
            "updated_at": self.updated_at, "settings": self.settings,
            "environment": self.environment,
            "baselines": [b.to_dict() for b in self.baselines],
            "measurements": [m.to_dict() for m in self.measurements],
            "baseline_timings": [b.to_dict() for b in self.baseline_timings],
            "measured_files": {h: dict(sorted(f.items()))
                               for h, f in sorted(self.measured_files.items())},
        })


# -- reading -------------------------------------------------------------------------------
def regular_file_error(path: Path, limit: int | None = None) -> str | None:
    """Why ``path`` is not a plain file of a bundle (a link, a device, a directory, too big),
    else None: a bundle comes from another machine, and a link to /dev/zero never ends."""
    if path.is_symlink():
        return f"{path} is a symbolic link; a bundle holds plain files"
    if not path.exists():
        return None
    if not path.is_file():
        return f"{path} is not a plain file"
    if limit is not None and path.stat().st_size > limit:
        return f"{path} is {path.stat().st_size:,} bytes, more than {limit:,}"
    return None


def _load_json(path: Path, what: str) -> Any:
    problem = regular_file_error(path, MAX_JSON_BYTES)
    if problem is not None:
        raise BundleError(problem)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BundleError(f"{path.parent} is not a measured bundle: no {path.name}") from None
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path} is corrupted: not text ({exc.reason} at byte {exc.start}); "
                          f"{what}") from None
    try:
        return strict_loads(text)
    except JsonInputError as exc:
        raise BundleError(f"{path} is corrupted: {exc}; {what}") from None


def _require(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise BundleError(f"{where}: missing field {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BundleError(f"{where}: field {key!r} has the wrong type ({value!r})")
    return value


def _check_header(doc: Any, where: str, expected_format: str) -> None:
    if not isinstance(doc, dict):
        raise BundleError(f"{where} is not a tsopt bundle file: a JSON {type(doc).__name__}, "
                          "not an object")
    fmt = doc.get("format")
    if fmt != expected_format:
        raise BundleError(
            f"{where} is not a {expected_format} file (its format is {fmt!r}): a foreign file"
        )
    version = doc.get("version")
    if version == 1:
        raise BundleError(
            f"{where}: version 1 was written by an older tsopt, without the checksums this "
            f"tsopt checks (version {BUNDLE_VERSION}); build the bundle again with `tsopt tune`"
        )
    if version != BUNDLE_VERSION:
        raise BundleError(
            f"{where}: version {version!r} is not supported (this tsopt reads version "
            f"{BUNDLE_VERSION})"
        )


def _check_uuid(value: str, key: str, where: str) -> None:
    try:
        uuid.UUID(value)
    except ValueError:
        raise BundleError(f"{where}: {key} {value!r} is not a UUID") from None


def _parse_candidate(doc: Any, index: int, space: str, where: str) -> BundleCandidate:
    at = f"{where}: candidates[{index}]"
    if not isinstance(doc, dict):
        raise BundleError(f"{at} is not an object")
    unknown = set(doc) - _CANDIDATE_KEYS
    if unknown:
        raise BundleError(f"{at}: unknown field(s) {sorted(unknown)}")
    genome_hash = _require(doc, "genome_hash", str, at)
    if not _HASH.match(genome_hash):
        raise BundleError(f"{at}: genome_hash {genome_hash!r} is not a 64-digit hex sha256")
    artifact = _require(doc, "artifact", str, at)
    if artifact != f"{ARTIFACTS_DIR}/{genome_hash}":
        raise BundleError(
            f"{at}: artifact {artifact!r} must be {ARTIFACTS_DIR}/{genome_hash} (inside the bundle)"
        )
    try:
        genome = Genome.from_dict(_require(doc, "genome", dict, at))
    except GenomeError as exc:
        raise BundleError(f"{at}: bad genome: {exc}") from None
    if genome.hash != genome_hash:
        raise BundleError(
            f"{at}: genome_hash {genome_hash[:12]}... does not match its genome, which hashes to "
            f"{genome.hash[:12]}..."
        )
    if genome.space != space:
        raise BundleError(f"{at}: genome of space {genome.space!r} in a bundle of space {space!r}")
    origin = doc.get("origin")
    if origin is not None and not isinstance(origin, str):
        raise BundleError(f"{at}: origin {origin!r} is not a string")
    files = _parse_files(_require(doc, "files", dict, at), at)
    return BundleCandidate(genome_hash, artifact, genome, origin, files)


def _parse_files(doc: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """An artifact's ``files``: every name one of :data:`BUNDLED_FILES`, with a sha256; the
    artifact manifest and the library always among them."""
    for name, digest in doc.items():
        if name not in BUNDLED_FILES:
            raise BundleError(f"{where}: files lists {name!r}, which is not an artifact file "
                              f"({', '.join(BUNDLED_FILES)})")
        if not isinstance(digest, str) or not _HASH.match(digest):
            raise BundleError(f"{where}: files[{name!r}] = {digest!r} is not a sha256")
    missing = [n for n in (ARTIFACT_MANIFEST, LIBRARY_NAME) if n not in doc]
    if missing:
        raise BundleError(f"{where}: files has no checksum of {', '.join(missing)}")
    return tuple(sorted(doc.items()))


def manifest_from_dict(doc: Any, where: str = MANIFEST_NAME) -> BundleManifest:
    """Validate a manifest document; raises :class:`BundleError` naming the bad value."""
    _check_header(doc, where, BUNDLE_FORMAT)
    unknown = set(doc) - _MANIFEST_KEYS
    if unknown:
        raise BundleError(f"{where}: unknown field(s) {sorted(unknown)}")
    bundle_id = _require(doc, "bundle_id", str, where)
    _check_uuid(bundle_id, "bundle_id", where)
    study = _require(doc, "study", str, where)
    space = _require(doc, "space", str, where)
    arch = _require(doc, "arch", str, where)
    if not study or not space or not arch:
        raise BundleError(f"{where}: study, space and arch must be non-empty")
    try:
        check_study_name(study, "study")
    except UserInputError as exc:
        raise BundleError(f"{where}: {exc}") from None
    created_at = _require(doc, "created_at", str, where)
    try:
        datetime.fromisoformat(created_at)
    except ValueError:
        raise BundleError(f"{where}: created_at {created_at!r} is not an ISO date-time") from None
    try:
        problem = Problem.from_dict(_require(doc, "problem", dict, where))
    except ProblemError as exc:
        raise BundleError(f"{where}: bad problem: {exc}") from None
    raw = _require(doc, "candidates", list, where)
    candidates = tuple(_parse_candidate(c, i, space, where) for i, c in enumerate(raw))
    seen: set[str] = set()
    for c in candidates:
        if c.genome_hash in seen:
            raise BundleError(f"{where}: candidate {c.genome_hash[:12]}... is listed twice")
        seen.add(c.genome_hash)
    launch = doc.get("launch", "isolated")
    if launch not in LAUNCH_MODES:
        raise BundleError(f"{where}: launch {launch!r} is not a launch mode "
                          f"({', '.join(LAUNCH_MODES)})")
    _check_checksum(doc, where)
    return BundleManifest(bundle_id, study, space, problem, arch, created_at, candidates,
                          launch)


def check_files(path: Path, files: Iterable[tuple[str, str]]) -> None:
    """Every listed file of the artifact at ``path`` is there with its recorded sha256;
    BundleError naming the first that is not."""
    for name, recorded in files:
        target = Path(path) / name
        problem = regular_file_error(target)
        if problem is not None:
            raise BundleError(problem)
        if not target.is_file():
            raise BundleError(f"{target}: missing (the manifest lists it with its sha256)")
        actual = file_sha256(target)
        if actual != recorded:
            raise BundleError(
                f"{target} was changed after the bundle was written: it hashes to "
                f"{actual[:12]}..., the manifest records {recorded[:12]}...")


def check_artifact(path: Path, genome_hash: str, problem: Problem, arch: str,
                   files: Iterable[tuple[str, str]] = ()) -> None:
    """The artifact at ``path`` exists, was built for this genome, problem and arch, and each
    of ``files`` (name, sha256) is there unchanged."""
    path = Path(path)
    unfit = (f"{path} is a symbolic link; a bundle holds plain directories"
             if path.is_symlink() else
             regular_file_error(path / ARTIFACT_MANIFEST, MAX_ARTIFACT_JSON_BYTES))
    if unfit is not None:
        raise BundleError(unfit)
    try:
        art = ArtifactManifest.read(path)
    except ArtifactError as exc:
        raise BundleError(f"candidate {genome_hash[:12]}...: {exc}") from None
    problems = []
    if art.genome_hash != genome_hash:
        problems.append(f"genome {art.genome_hash[:12]}...")
    try:
        art_problem = Problem.from_dict(art.problem).key
    except ProblemError as exc:
        art_problem = f"<bad: {exc}>"
    if art_problem != problem.key:
        problems.append(f"problem {art_problem}")
    if art.arch != arch:
        problems.append(f"arch {art.arch}")
    if problems:
        raise BundleError(
            f"{path}: artifact was built for " + ", ".join(problems) + ", but is listed for "
            f"{genome_hash[:12]}... / {problem.key} / {arch}: a mismatched artifact"
        )
    if not (path / art.library).is_file():
        raise BundleError(f"{path}: the artifact has no library {art.library!r}")
    check_files(path, files)


def read_manifest(directory: Path, check_artifacts: bool | str = True) -> BundleManifest:
    """Read and validate ``manifest.json`` and the artifacts it lists: every one
    (``check_artifacts=True``: a GPU machine about to measure), those that are there
    (``"present"``: ingest, as results may come back without the artifacts), or none."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise BundleError(f"{str(directory)!r} is not a bundle directory: a bundle is the "
                          "directory `tsopt tune` wrote")
    if not directory.is_dir():
        raise BundleError(f"bundle directory {str(directory)!r} does not exist")
    path = directory / MANIFEST_NAME
    if not path.exists():
        raise BundleError(f"{directory} is not a tsopt bundle: it has no {MANIFEST_NAME}")
    doc = _load_json(path, "the bundle manifest cannot be read")
    manifest = manifest_from_dict(doc, str(path))
    if check_artifacts:
        for c in manifest.candidates:
            artifact = directory / c.artifact
            if check_artifacts == "present" and not artifact.exists():
                continue
            check_artifact(artifact, c.genome_hash, manifest.problem, manifest.arch, c.files)
    return manifest


def check_listing(directory: Path, manifest: BundleManifest) -> None:
    """BundleError naming the first file or folder of the bundle that its manifest does not
    list: a bundle holds its manifest, its results, and under ``artifacts/`` one directory per
    candidate with the files the candidate lists, nothing else (an extra library beside the
    listed one is a payload, not a bundle)."""
    directory = Path(directory)
    listed = {c.genome_hash: {name for name, _ in c.files} for c in manifest.candidates}
    allowed_top = {MANIFEST_NAME, RESULTS_NAME, ARTIFACTS_DIR}

    def refuse(path: Path, why: str) -> BundleError:
        return BundleError(f"{path} is not listed in the bundle's {MANIFEST_NAME} ({why}); "
                           "the bundle is refused, nothing was recorded: remove it")

    for entry in sorted(directory.iterdir()):
        if entry.name not in allowed_top:
            raise refuse(entry, f"a bundle holds {', '.join(sorted(allowed_top))} only")
    artifacts = directory / ARTIFACTS_DIR
    if artifacts.is_symlink() or (artifacts.exists() and not artifacts.is_dir()):
        raise BundleError(f"{artifacts} is not a plain directory")
    if not artifacts.exists():
        return
    for entry in sorted(artifacts.iterdir()):
        files = listed.get(entry.name)
        if files is None:
            raise refuse(entry, "no candidate of that genome hash")
        if entry.is_symlink() or not entry.is_dir():
            raise BundleError(f"{entry} is not a plain directory; a bundle holds one directory "
                              "per candidate")
        for inner in sorted(entry.iterdir()):
            if inner.name not in files:
                raise refuse(inner, f"candidate {entry.name[:12]}... lists "
                             f"{', '.join(sorted(files))}")


def results_from_dict(
    doc: Any, manifest: BundleManifest | None = None, where: str = RESULTS_NAME,
) -> BundleResults:
    """Validate a results document (against its manifest when given)."""
    _check_header(doc, where, RESULTS_FORMAT)
    bundle_id = _require(doc, "bundle_id", str, where)
    run_id = _require(doc, "run_id", str, where)
    _check_uuid(run_id, "run_id", where)
    if manifest is not None and bundle_id != manifest.bundle_id:
        raise BundleError(
            f"{where} belongs to bundle {bundle_id}, but the manifest is bundle "
            f"{manifest.bundle_id}: mismatched results"
        )
    text = {k: doc.get(k, "") for k in ("device", "driver", "cuda", "torch", "started_at",
                                         "updated_at")}
    for key, value in text.items():
        if not isinstance(value, str):
            raise BundleError(f"{where}: field {key!r} has the wrong type ({value!r})")
    settings = doc.get("settings", {})
    environment = doc.get("environment", {})
    if not isinstance(settings, dict) or not isinstance(environment, dict):
        raise BundleError(f"{where}: settings and environment must be objects")
    baselines = _baselines(_require(doc, "baselines", list, where), "baselines", where)
    timings = doc.get("baseline_timings", [])
    if not isinstance(timings, list):
        raise BundleError(f"{where}: field 'baseline_timings' has the wrong type ({timings!r})")
    baseline_timings = _baselines(timings, "baseline_timings", where)
    devices = {text["device"]} | {b.device for b in baselines} | {
        b.device for b in baseline_timings}
    devices.discard("")
    measurements = _measurements(doc, devices, where)
    measured_files = doc.get("measured_files", {})
    if not isinstance(measured_files, dict):
        raise BundleError(f"{where}: field 'measured_files' has the wrong type")
    files = {h: dict(_parse_files(f, f"{where}: measured_files[{h[:12]}...]"))
             if isinstance(f, dict) else None for h, f in measured_files.items()}
    if manifest is not None:
        _check_measured_as_listed(manifest, measurements, files, where)
    _check_checksum(doc, where)
    if manifest is not None:
        # After the checksum: a hand edit is named as one; what is left is a document written
        # whole by someone who knows the format, and its figures must be possible.
        _check_physics(manifest, baselines, baseline_timings, measurements, where)
    return BundleResults(
        bundle_id=bundle_id, run_id=run_id, settings=settings, environment=environment,
        baselines=baselines, measurements=measurements, baseline_timings=baseline_timings,
        measured_files={h: f for h, f in files.items() if f is not None}, **text,
    )


def _measurements(doc: Any, devices: set[str], where: str) -> list[Measurement]:
    """A results document's measurements, each one possible on ``devices`` (the GPUs the
    document names) and each genome measured once."""
    measurements = []
    for i, m in enumerate(_require(doc, "measurements", list, where)):
        try:
            measurements.append(Measurement.from_dict(m))
        except (TypeError, ValueError) as exc:
            raise BundleError(f"{where}: measurements[{i}]: {exc}") from None
    seen: set[str] = set()
    for i, m in enumerate(measurements):
        problem = measurement_problem(m, devices)
        if problem is not None:
            raise BundleError(f"{where}: measurements[{i}] ({m.genome_hash[:12]}...): {problem}")
        if m.genome_hash in seen:
            raise BundleError(f"{where}: measurements[{i}]: genome {m.genome_hash[:12]}... is "
                              "measured twice in one run")
        seen.add(m.genome_hash)
    return measurements


def _check_measured_as_listed(manifest: BundleManifest, measurements: list[Measurement],
                              files: dict[str, dict[str, str] | None], where: str) -> None:
    """BundleError unless every measurement is of a candidate the manifest lists, for its
    problem, in its launch mode, taken on the files (sha256) the manifest lists."""
    for i, m in enumerate(measurements):
        if manifest.candidate(m.genome_hash) is None:
            raise BundleError(
                f"{where}: measurements[{i}] is of genome {m.genome_hash[:12]}..., which the "
                "manifest does not list: mismatched results"
            )
        if m.problem_key != manifest.problem.key:
            raise BundleError(
                f"{where}: measurements[{i}] is for problem {m.problem_key!r}, the manifest "
                f"for {manifest.problem.key!r}: mismatched results"
            )
        if m.launch != manifest.launch:
            raise BundleError(
                f"{where}: measurements[{i}] ({m.genome_hash[:12]}...) was timed in launch "
                f"mode {m.launch!r}; the bundle's study measures in {manifest.launch!r}")
        listed = dict(manifest.candidate(m.genome_hash).files)  # type: ignore[union-attr]
        measured = files.get(m.genome_hash)
        if measured is None:
            raise BundleError(f"{where}: measurements[{i}] ({m.genome_hash[:12]}...) has no "
                              "checksums of the files it measured (measured_files)")
        changed = sorted(n for n in set(listed) | set(measured)
                         if listed.get(n) != measured.get(n))
        if changed:
            raise BundleError(
                f"{where}: measurements[{i}] ({m.genome_hash[:12]}...) was taken on "
                f"{', '.join(changed)} with other checksums than the manifest lists: "
                "the artifact changed after it was measured")


@dataclass(frozen=True)
class Ceiling:
    """The fastest part of an arch tsopt targets: its memory bandwidth and its dense
    tensor-core rate at 16-bit inputs, from the vendor's data sheets."""

    arch: str
    device: str
    bytes_per_s: float
    flops_per_s: float


CEILINGS: dict[str, Ceiling] = {
    "sm_90a": Ceiling("sm_90a", "H200", 4.8e12, 989.4e12),
    "sm_100a": Ceiling("sm_100a", "B200", 8.0e12, 2.25e15),
}
"""Per target arch, the roofline no measurement may beat (a GPU of the arch is at most this
fast; an H100 or an H20 is slower, so a bound for the fastest holds for every part)."""

CEILING_MARGIN = 1.25
"""How far past the data sheet a timing may seem to go before it is refused: boost clocks and
the timer's resolution, never a factor of two."""

MAX_MEDIAN_US = 60e6
"""No launch tsopt times lasts a minute (fifty timed runs would take an hour; the measuring
worker's watchdog ends a launch long before): a longer median is no measurement."""


def expected_rate(problem: Problem, median_us: float) -> tuple[float, str]:
    """The rate a timing of ``problem`` reports, as the measuring side computes it: TFLOP/s
    for an op that computes, GB/s (bytes read and written) for one that moves data."""
    if problem.flops > 0:
        return problem.flops / (median_us * 1e6), "TFLOP/s"
    return problem.bytes_moved / (median_us * 1e3), "GB/s"


def fastest_possible_us(problem: Problem, arch: str) -> float | None:
    """The least time ``problem`` can take on any GPU of ``arch`` (its roofline, with the
    margin), in microseconds; None for an arch without a ceiling."""
    ceiling = CEILINGS.get(arch)
    if ceiling is None:
        return None
    seconds = max(problem.bytes_moved / ceiling.bytes_per_s, problem.flops / ceiling.flops_per_s)
    return seconds * 1e6 / CEILING_MARGIN


def timing_impossible(key: str, value: float, problem: Problem, arch: str) -> str | None:
    """Why a (finite, positive) time of ``problem`` cannot have been measured on ``arch``,
    else None: beyond a minute, or faster than the arch's roofline allows."""
    if value > MAX_MEDIAN_US:
        return (f"{key} {value!r} µs is more than {MAX_MEDIAN_US:.0f} µs (a minute): no launch "
                "tsopt times lasts that long")
    floor = fastest_possible_us(problem, arch)
    if floor is not None and value < floor:
        ceiling = CEILINGS[arch]
        return (f"{key} {value!r} µs is faster than any {arch} GPU can run {problem.key}: "
                f"its {problem.bytes_moved:,} bytes and {problem.flops:,} flops need at least "
                f"{floor:.4g} µs on an {ceiling.device} ({ceiling.bytes_per_s / 1e12:g} TB/s, "
                f"{ceiling.flops_per_s / 1e12:g} TFLOP/s, {CEILING_MARGIN}x margin)")
    return None


_CONSISTENT = 1e-6  # the same formula on both sides: only the last digits may differ
_RATIO_FACTOR = 1.5
"""How far a paired ratio (the median of per-round ratios) may lie from the ratio of the two
medians: within 0.8 % over 1,214 correct H200 timings (bench/tune_gpu/results-round10,
bench/copy_h200); a loaded CPU (the simulated device) strays further. A ratio edited to claim half again the
speed the times show is refused."""


def measurement_physics(m: Measurement, problem: Problem, arch: str) -> str | None:
    """Why a measurement that :func:`measurement_problem` let through cannot be a timing of
    ``problem`` on ``arch``, else None. A correct timing carries every figure the measuring
    side writes (rate, ratio, the baseline's time and rate, rel_err); each time lies between
    the arch's roofline and a minute; the rate is the one its median gives; the ratio agrees
    with the baseline's time (within the paired interval when there is one)."""
    if m.status != "ok":
        return None
    for key in ("rate", "ratio", "rel_err", "baseline_median_us", "baseline_rate"):
        if getattr(m, key) is None:
            return f"status 'ok' without {key}: a correct timing carries it (the file was edited)"
    if not m.baseline_name:
        return "status 'ok' without baseline_name: a correct timing names its baseline"
    for key in ("median_us", "p10_us", "p90_us", "baseline_median_us"):
        problem_text = timing_impossible(key, getattr(m, key), problem, arch)
        if problem_text is not None:
            return problem_text
    if m.baseline_median_us is None or m.median_us is None or m.ratio is None:
        return None  # checked above; for the type checker
    for key, median in (("rate", m.median_us), ("baseline_rate", m.baseline_median_us)):
        value, unit = expected_rate(problem, median)
        given = getattr(m, key)
        if abs(given - value) > _CONSISTENT * value:
            return (f"{key} {given!r} is not what a median of {median!r} µs gives for "
                    f"{problem.key} ({value:.6g} {unit})")
    _, unit = expected_rate(problem, m.median_us)
    if m.rate_unit != unit:
        return f"rate_unit {m.rate_unit!r} is not {unit!r}, the unit of {problem.op}'s rate"
    if m.ratio <= 0:
        return f"ratio {m.ratio!r} must be positive"
    if m.ratio_lo is not None and m.ratio_hi is not None:
        if not m.ratio_lo <= m.ratio <= m.ratio_hi:
            return (f"ratio {m.ratio!r} lies outside its own interval "
                    f"[{m.ratio_lo!r}, {m.ratio_hi!r}]")
    if m.per_m:
        # A bucket's ratio is range_ratio of its per-M ratios, while its times are the top
        # M's alone: the ratio agrees with those per-M figures, and each with its own times.
        return per_m_physics(m)
    return _ratio_against_times("ratio", m.ratio, m.baseline_median_us, m.median_us)


def _ratio_against_times(what: str, ratio: float, baseline_us: float,
                         median_us: float) -> str | None:
    of_medians = baseline_us / median_us
    if not of_medians / _RATIO_FACTOR <= ratio <= of_medians * _RATIO_FACTOR:
        return (f"{what} {ratio!r} disagrees with the times: the baseline's "
                f"{baseline_us!r} µs over the median's {median_us!r} µs is "
                f"{of_medians:.4g}")
    return None


def per_m_physics(m: Measurement) -> str | None:
    """Why a runtime-M measurement's ``per_m`` entries cannot back its ratio, else None:
    every entry names an M, positive times and a ratio that agrees with them, and the
    measurement's ratio is :func:`tsopt.core.buckets.range_ratio` of the entries' ratios."""
    ratios: list[float] = []
    for i, entry in enumerate(m.per_m):
        where = f"per_m[{i}]"
        if not isinstance(entry, dict):
            return f"{where} {entry!r} is not an object"
        at, ratio = entry.get("m"), entry.get("ratio")
        if isinstance(at, bool) or not isinstance(at, int) or at < 1:
            return f"{where} m {at!r} must be a positive integer"
        times = [entry.get("baseline_median_us"), entry.get("median_us")]
        for value in (ratio, *times):
            if not _positive(value):
                return f"{where} (M={at}): {value!r} must be a finite, positive number"
        text = _ratio_against_times(f"{where} (M={at}) ratio", ratio, times[0], times[1])
        if text is not None:
            return text
        ratios.append(float(ratio))
    expected = range_ratio(ratios)
    if abs(m.ratio - expected) > _CONSISTENT * expected:
        return (f"ratio {m.ratio!r} is not the range's figure of its per_m ratios "
                f"({expected:.6g}: tsopt.core.buckets.range_ratio)")
    return None


def baseline_physics(b: Baseline, problem: Problem, arch: str) -> str | None:
    """Why a baseline timing cannot be one of ``problem`` on ``arch``, else None."""
    for key in ("median_us", "p10_us", "p90_us"):
        text = timing_impossible(key, getattr(b, key), problem, arch)
        if text is not None:
            return text
    if not b.p10_us <= b.median_us <= b.p90_us:
        return f"p10 {b.p10_us} <= median {b.median_us} <= p90 {b.p90_us} does not hold"
    if b.rate is not None:
        value, unit = expected_rate(problem, b.median_us)
        if abs(b.rate - value) > _CONSISTENT * value:
            return (f"rate {b.rate!r} is not what a median of {b.median_us!r} µs gives for "
                    f"{problem.key} ({value:.6g} {unit})")
    return None


def _check_physics(manifest: BundleManifest, baselines: list[Baseline],
                   baseline_timings: list[Baseline], measurements: list[Measurement],
                   where: str) -> None:
    for key, listed in (("baselines", baselines), ("baseline_timings", baseline_timings)):
        for i, b in enumerate(listed):
            if b.problem_key != manifest.problem.key:
                raise BundleError(f"{where}: {key}[{i}] is for problem {b.problem_key!r}, "
                                  f"the manifest for {manifest.problem.key!r}")
            impossible = baseline_physics(b, manifest.problem, manifest.arch)
            if impossible is not None:
                raise BundleError(f"{where}: {key}[{i}] ({b.name}): {impossible}")
    for i, m in enumerate(measurements):
        impossible = measurement_physics(m, manifest.problem, manifest.arch)
        if impossible is not None:
            raise BundleError(f"{where}: measurements[{i}] ({m.genome_hash[:12]}...): "
                              f"{impossible}")


def measurement_problem(m: Measurement, devices: set[str]) -> str | None:
    """Why a measurement from a results file cannot be trusted, else None: a correct timing
    needs finite, positive times (p10 <= median <= p90), at least one run and a device the
    results name; a failed one carries no times; every figure it has is finite."""
    for key in ("rate", "rel_err", "ratio", "baseline_median_us", "baseline_rate", "seconds"):
        value = getattr(m, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value) or value < 0):
            return f"{key} {value!r} must be a finite number, not negative"
    times = {key: getattr(m, key) for key in ("median_us", "p10_us", "p90_us")}
    if m.status != "ok":
        given = [key for key, value in times.items() if value is not None]
        if given:
            return (f"status {m.status!r} with {', '.join(given)} set: a failed candidate has "
                    "no times")
        if m.device and m.device not in devices:
            return f"device {m.device!r} is none of the devices these results name"
        return None
    for key, value in times.items():
        if not _positive(value):
            return f"status 'ok' with {key} {value!r}: a timing must be finite and positive"
    if not times["p10_us"] <= times["median_us"] <= times["p90_us"]:
        return (f"p10 {times['p10_us']} <= median {times['median_us']} <= p90 "
                f"{times['p90_us']} does not hold")
    if isinstance(m.runs, bool) or not isinstance(m.runs, int) or m.runs < 1:
        return f"status 'ok' with runs {m.runs!r}: a timing needs at least one run"
    if not m.device:
        return "status 'ok' on no device: the device it was timed on is not named"
    if m.device not in devices:
        known = ", ".join(sorted(devices)) or "none"
        return f"device {m.device!r} is none of the devices these results name ({known})"
    return None


def _baselines(docs: list[Any], key: str, where: str) -> list[Baseline]:
    baselines = []
    for i, b in enumerate(docs):
        try:
            baselines.append(Baseline.from_dict(b))
        except (TypeError, ValueError) as exc:
            raise BundleError(f"{where}: {key}[{i}]: {exc}") from None
    return baselines


def read_results(directory: Path, manifest: BundleManifest | None = None) -> BundleResults | None:
    """``results.json`` validated, or None when the bundle has not been measured yet."""
    path = Path(directory) / RESULTS_NAME
    if not path.exists():
        return None
    return results_from_dict(_load_json(path, "delete it to measure again"), manifest, str(path))


def write_results(directory: Path, results: BundleResults) -> Path:
    results.updated_at = utc_now()
    return atomic_write_json(Path(directory) / RESULTS_NAME, results.to_dict())


# -- writing -------------------------------------------------------------------------------
@dataclass(frozen=True)
class BundleEntry:
    """A built candidate to put in a bundle."""

    genome: Genome
    artifact_dir: Path
    origin: str | None = None


BUNDLED_FILES = (ARTIFACT_MANIFEST, LIBRARY_NAME, "genome.json", "build.json")
"""What a GPU machine needs of an artifact; the object, cubin and header stay in the build
cache (a bundle travels, and hundreds of candidates must fit in one transfer)."""


def artifact_checksums(directory: Path) -> dict[str, str]:
    """{name: sha256} of the :data:`BUNDLED_FILES` an artifact directory holds (what the
    database records of a build, and what a bundle of it must carry unchanged)."""
    directory = Path(directory)
    return {name: file_sha256(directory / name) for name in BUNDLED_FILES
            if (directory / name).is_file() and not (directory / name).is_symlink()}


def _copy_artifact(src: Path, dst: Path) -> tuple[tuple[str, str], ...]:
    """Copy an artifact's bundled files; returns their (name, sha256), as copied."""
    # Copy beside the target and rename: a bundle never holds half an artifact.
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    files = []
    for name in BUNDLED_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, tmp / name)
            files.append((name, file_sha256(tmp / name)))
    if dst.exists():
        shutil.rmtree(dst)
    os.replace(tmp, dst)
    return tuple(sorted(files))


@contextmanager
def bundle_lock(directory: Path) -> Iterator[None]:
    """Hold the bundle's lock (beside it, not in it): tune processes of one study append to
    one bundle, and each must read the manifest the last one wrote."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    lock_path = directory.parent / f".{directory.name}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def write_bundle(
    directory: Path, *, study: str, space: str, problem: Problem, arch: str,
    candidates: Iterable[BundleEntry | tuple[Genome, Path]], append: bool = False,
    launch: str = DEFAULT_LAUNCH,
) -> BundleManifest:
    """Create a bundle (or, with ``append``, add candidates to one): copy artifacts, write manifest.

    Each artifact must have been built for its genome, ``problem`` and ``arch``; ``launch`` is
    the study's launch mode, in which the GPU machine measures it. Raises
    :class:`BundleError` when the directory already holds a bundle (without ``append``), when
    an appended bundle is for another study/space/problem/arch/launch mode, or an artifact
    mismatches.
    """
    directory = Path(directory)
    check_study_name(study, "study")
    if launch not in LAUNCH_MODES:
        raise BundleError(f"launch {launch!r} is not a launch mode ({', '.join(LAUNCH_MODES)})")
    with bundle_lock(directory):
        return _write_bundle(directory, study, space, problem, arch, candidates, append, launch)


def _write_bundle(
    directory: Path, study: str, space: str, problem: Problem, arch: str,
    candidates: Iterable[BundleEntry | tuple[Genome, Path]], append: bool, launch: str,
) -> BundleManifest:
    existing: BundleManifest | None = None
    if (directory / MANIFEST_NAME).exists():
        if not append:
            raise BundleError(
                f"{directory} already holds a bundle; add to it with append=True or choose "
                "another directory"
            )
        existing = read_manifest(directory, check_artifacts=False)
        mine = (study, space, problem.key, arch, launch)
        theirs = (existing.study, existing.space, existing.problem.key, existing.arch,
                  existing.launch)
        if mine != theirs:
            raise BundleError(
                f"{directory} is a bundle of {'/'.join(theirs)}, cannot append {'/'.join(mine)}"
            )
    manifest = existing or BundleManifest(
        bundle_id=str(uuid.uuid4()), study=study, space=space, problem=problem, arch=arch,
        created_at=utc_now(), candidates=(), launch=launch,
    )
    (directory / ARTIFACTS_DIR).mkdir(parents=True, exist_ok=True)
    listed: dict[str, BundleCandidate] = {c.genome_hash: c for c in manifest.candidates}
    for item in candidates:
        entry = item if isinstance(item, BundleEntry) else BundleEntry(item[0], Path(item[1]))
        genome = entry.genome
        if genome.space != space:
            raise BundleError(f"genome {genome.short_hash} is of space {genome.space!r}, "
                              f"the bundle of space {space!r}")
        artifact = f"{ARTIFACTS_DIR}/{genome.hash}"
        check_artifact(Path(entry.artifact_dir), genome.hash, problem, arch)
        files = _copy_artifact(Path(entry.artifact_dir), directory / artifact)
        listed[genome.hash] = BundleCandidate(genome.hash, artifact, genome, entry.origin, files)
    manifest = BundleManifest(
        manifest.bundle_id, study, space, problem, arch, manifest.created_at,
        tuple(listed.values()), launch,
    )
    atomic_write_json(directory / MANIFEST_NAME, manifest.to_dict())
    return manifest
