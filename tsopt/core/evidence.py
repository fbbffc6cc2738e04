"""The evidence archives (``evidence/``): each experiment's bulk raw outputs, one ``tar.xz``.

An experiment folder ``bench/EXP/`` keeps its README, its scripts and small summaries;
everything else it produced (study databases, bundle results, logs, plans) is packed into
``evidence/EXP.tar.xz``. A member is named from the repository root (``bench/EXP/...``), so
unpacking at the root puts every file back where the experiment's scripts and README expect
it, and unpacking into a scratch folder gives the corpus build (:mod:`tsopt.app.corpus`) the
same names it records as a measurement's source.

``evidence/MANIFEST.json`` says, per experiment: the archive's file, size and sha256, what it
holds (a line), its ``keep`` globs (the folder's files that stay out of it), and every
member's size and sha256. An archive whose bytes or members differ from it is refused,
naming the file. This module reads archives and unpacks them; packing an experiment folder
is a maintainer's command, ``python3 -m scripts.evidence pack EXP`` (``scripts/evidence.py``).

Standard library only: bench scripts unpack on the GPU machine, where only torch is
installed (``python3 -m scripts.evidence unpack EXP``).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

FOLDER = Path("evidence")
"""Where the archives live, from the repository root: outside the package and outside bench/."""
MANIFEST_NAME = "MANIFEST.json"
FORMAT = "tsopt-evidence"
VERSION = 1
MEMBER_PREFIX = "bench"
"""The first part of every member's name (``bench/EXP/...``): a name, never read here."""


class EvidenceError(ValueError):
    """An archive, manifest or folder that is not what the manifest says (the message names it)."""


@dataclass(frozen=True)
class Member:
    """One archived file: its path from the repository root, its size and sha256."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Archive:
    """One experiment's archive, as the manifest records it."""

    experiment: str
    what: str
    keep: tuple[str, ...] = ()
    sha256: str = ""
    bytes: int = 0
    members: tuple[Member, ...] = field(default=())

    @property
    def file(self) -> str:
        return f"{self.experiment}.tar.xz"

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "bytes": self.bytes, "sha256": self.sha256,
                "what": self.what, "keep": list(self.keep),
                "files": {m.path: {"bytes": m.bytes, "sha256": m.sha256}
                          for m in self.members}}

    @classmethod
    def from_dict(cls, experiment: str, doc: dict[str, object]) -> Archive:
        files = doc.get("files")
        if not isinstance(files, dict) or not isinstance(doc.get("what"), str):
            raise EvidenceError(f"{MANIFEST_NAME}: {experiment}: needs 'what' and 'files'")
        return cls(experiment, str(doc["what"]), tuple(doc.get("keep") or ()),  # type: ignore[arg-type]
                   str(doc.get("sha256", "")), int(doc.get("bytes", 0)),  # type: ignore[call-overload]
                   tuple(Member(p, int(f["bytes"]), str(f["sha256"])) for p, f in files.items()))


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(folder: Path = FOLDER) -> dict[str, Archive]:
    """The archives ``folder``'s manifest records, by experiment."""
    path = folder / MANIFEST_NAME
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EvidenceError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise EvidenceError(f"{path}: not a {FORMAT} manifest")
    if doc.get("version") != VERSION:
        raise EvidenceError(f"{path}: version {doc.get('version')!r}, this reads {VERSION}")
    return {exp: Archive.from_dict(exp, about) for exp, about in doc["archives"].items()}


def write_manifest(archives: dict[str, Archive], folder: Path = FOLDER) -> None:
    doc = {"format": FORMAT, "version": VERSION,
           "archives": {exp: archives[exp].to_dict() for exp in sorted(archives)}}
    (folder / MANIFEST_NAME).write_text(json.dumps(doc, indent=1) + "\n")


def archive_of(experiment: str, folder: Path = FOLDER) -> Archive:
    archives = read_manifest(folder)
    if experiment not in archives:
        raise EvidenceError(f"no archive for experiment {experiment!r} in {folder / MANIFEST_NAME} "
                            f"(it has: {', '.join(sorted(archives)) or 'none'})")
    return archives[experiment]


def read_members(archive: Archive, folder: Path = FOLDER) -> dict[str, bytes]:
    """Every member of ``archive``, by path, after checking the file's sha256 and each
    member's against the manifest."""
    path = folder / archive.file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EvidenceError(f"{path}: not readable ({exc})") from None
    if sha256_of(raw) != archive.sha256:
        raise EvidenceError(f"{path}: sha256 {sha256_of(raw)[:12]}, the manifest says "
                            f"{archive.sha256[:12]}")
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:xz") as tar:
            for info in tar:
                if not info.isfile():
                    raise EvidenceError(f"{path}: {info.name}: not a plain file")
                stream = tar.extractfile(info)
                assert stream is not None
                members[info.name] = stream.read()
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise EvidenceError(f"{path}: not a tar.xz ({exc})") from None
    expected = {m.path: m for m in archive.members}
    if set(members) != set(expected):
        odd = sorted(set(members) ^ set(expected))
        raise EvidenceError(f"{path}: members differ from the manifest ({', '.join(odd[:3])})")
    for name, data in members.items():
        if sha256_of(data) != expected[name].sha256:
            raise EvidenceError(f"{path}: {name}: sha256 differs from the manifest")
    return members


def _safe(name: str, experiment: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or rel.parts[:2] != (MEMBER_PREFIX, experiment):
        raise EvidenceError(f"{experiment}.tar.xz: member {name!r} is not under "
                            f"{MEMBER_PREFIX}/{experiment}/")
    return rel


def unpack(experiment: str, into: Path, folder: Path = FOLDER,
           overwrite: bool = False) -> list[Path]:
    """Write ``experiment``'s archived files under ``into`` (the repository root puts them back
    where the experiment wrote them); returns the files written. A file already there with other bytes is
    refused (named) unless ``overwrite``; one with the same bytes is left as it is."""
    archive = archive_of(experiment, folder)
    members = read_members(archive, folder)
    targets = {into / _safe(name, experiment): data for name, data in sorted(members.items())}
    if not overwrite:
        clash = [str(p) for p, data in targets.items() if p.is_file() and p.read_bytes() != data]
        if clash:
            raise EvidenceError(f"{clash[0]}: differs from {archive.file}'s copy (and "
                                f"{len(clash) - 1} more); pack it first or unpack elsewhere")
    written = []
    for path, data in targets.items():
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def unpack_all(into: Path, folder: Path = FOLDER) -> list[str]:
    """Every archive of ``folder`` unpacked under ``into``; returns the experiments."""
    experiments = sorted(read_manifest(folder))
    for experiment in experiments:
        unpack(experiment, into, folder)
    return experiments


def check(folder: Path = FOLDER) -> list[str]:
    """What is wrong with ``folder``'s archives (a line each); empty when every archive reads
    and matches the manifest."""
    problems = []
    try:
        archives = read_manifest(folder)
    except EvidenceError as exc:
        return [str(exc)]
    for archive in archives.values():
        try:
            members = read_members(archive, folder)
            for name in members:
                _safe(name, archive.experiment)
        except EvidenceError as exc:
            problems.append(str(exc))
    listed = {a.file for a in archives.values()} | {MANIFEST_NAME, "README.md"}
    problems += [f"{folder / p.name}: not in the manifest" for p in sorted(folder.iterdir())
                 if p.name not in listed]
    return problems
