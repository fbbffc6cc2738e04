"""The measurement corpus: every committed measurement, one record each, in one versioned file.

The product's data (the seed library, the TS search memo, the cross-shape cost model) is made
from the corpus, never from an experiment folder's files (``tsopt corpus products``); the
corpus itself is made from the committed evidence by ``tsopt corpus build``
(``tsopt.app.corpus``). ``corpus/SCHEMA.md`` documents every field; this module is the
record and its file format.

Two tables, two files, one version (:data:`VERSION`) in both names:

- ``measurements.v1.jsonl.xz``: one :class:`CorpusRecord` per line, every measurement the
  evidence holds (failed ones too: a status and its error), in the evidence's order.
- ``ts_searches.v1.jsonl.xz``: one :class:`CorpusSearch` per line (a
  :class:`~tsopt.core.records.TsSearch` and the archives that hold it), the TS exhaustive
  searches the committed study databases ran, of every verifier version. They
  are not measurements (a search is a pure function of the schedule and the verifier's
  version, not a timing of a GPU), so they are a table of their own; they live beside the
  measurements because the same study databases are their only source.

``manifest.json`` beside them says the version, how many records each file holds, their
sha256 and the evidence files read.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tsopt.core.problem import Problem
from tsopt.core.records import TsSearch

VERSION = 1
MEASUREMENTS_FILE = f"measurements.v{VERSION}.jsonl.xz"
SEARCHES_FILE = f"ts_searches.v{VERSION}.jsonl.xz"
MANIFEST_FILE = "manifest.json"
FORMAT = "tsopt-corpus"

LAUNCH_ISOLATED = "isolated"
"""The runner's mode: each launch timed between CUDA events after a spin kernel, the vendor
baseline alternating with the candidate in rounds (``tsopt.workers.paired``)."""
LAUNCH_BACK_TO_BACK = "back-to-back-rounds"
"""bench/gemm_h200's headline rounds: one process, each round times ``per_round`` launches
back to back (CUDA events around the whole round), then as many of the baseline."""
LAUNCH_GRAPH = "graph"
"""The runner's default since the launch modes (``tsopt.core.records.LaunchMode``): back-to-back
launches captured in one CUDA graph a side, the candidate's and the baseline's alternating."""
LAUNCH_EAGER = "eager"
"""The runner's eager mode: calls through the export's loader, GPU plus launch cost."""
LAUNCHES = (LAUNCH_ISOLATED, LAUNCH_BACK_TO_BACK, LAUNCH_GRAPH, LAUNCH_EAGER)

KINDS = ("study-database", "study-dump", "bundle-results", "results-file", "paired-rounds")
"""What an evidence file is: a study's SQLite database (or a ``tar.xz`` of them), a JSON dump
of studies, a bundle's ``results.json``, an experiment's results file (a genome and a
measurement per row), or headline rounds (a median ratio per row, no interval)."""


@dataclass(frozen=True)
class CorpusRecord:
    """One measurement of one genome on one problem, and where it came from.

    ``ratio`` is the vendor baseline's time over the candidate's (above 1: faster than the
    vendor); ``ratio_lo``/``ratio_hi`` its 95 % interval over ``rounds`` paired rounds, None
    where the evidence gives none. ``paired``: the candidate and the baseline alternated in
    one process (an interval, or headline rounds); unpaired figures are two separate timings.
    """

    space: str
    problem: Problem
    arch: str
    genome_hash: str
    genome: dict[str, Any] | None
    """The genome as :class:`~tsopt.core.genome.Genome` writes it; None where the evidence
    names a hash that none of its files resolves."""
    status: str
    ratio: float | None
    ratio_lo: float | None
    ratio_hi: float | None
    rounds: int
    paired: bool
    median_us: float | None
    baseline_median_us: float | None
    baseline_name: str
    device: str
    driver: str
    launch: str
    measured_at: str | None
    pass_id: str
    """The device call that measured it: a bundle results' or a study run's ``run_id``, else
    the file and its time."""
    machine: str
    """What the evidence says of the machine: the device, its SM count where known, driver,
    CUDA and torch (the GPU machines are lent fresh per call and the evidence names no host)."""
    experiment: str
    """The bench folder, e.g. ``bench/tune_gpu``."""
    source: str
    """The evidence file, relative to the repository root."""
    kind: str
    order: int
    """Its position in its source (a database's measurement id): ties in a ranking follow it."""
    study: str | None = None
    study_status: str | None = None
    database: str | None = None
    """The SQLite file inside a study archive (``tar.xz``)."""
    label: str | None = None
    document_at: str | None = None
    """The source file's own time (``measured_at``, ``updated_at``, ...), where it has one."""
    error: str | None = None
    abnormal: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """A correct, timed measurement with a ratio."""
        return self.status == "ok" and bool(self.ratio)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["problem"] = self.problem.to_dict()
        doc["abnormal"] = list(self.abnormal)
        return doc

    @classmethod
    def from_dict(cls, doc: Any) -> CorpusRecord:
        if not isinstance(doc, dict):
            raise ValueError(f"a corpus record must be an object, got {type(doc).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = set(doc) - names
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}")
        values = dict(doc)
        values["problem"] = Problem.from_dict(doc["problem"])
        values["abnormal"] = tuple(doc.get("abnormal", ()))
        if values.get("launch") not in LAUNCHES:
            raise ValueError(f"unknown launch mode {values.get('launch')!r}")
        if values.get("kind") not in KINDS:
            raise ValueError(f"unknown evidence kind {values.get('kind')!r}")
        return cls(**values)


@dataclass(frozen=True)
class CorpusSearch:
    """One TS exhaustive search and the study archives that hold it (as the first of them
    recorded it)."""

    search: TsSearch
    sources: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.search.to_dict(), "sources": list(self.sources)}

    @classmethod
    def from_dict(cls, doc: Any) -> CorpusSearch:
        if not isinstance(doc, dict) or not isinstance(doc.get("sources"), list):
            raise ValueError("a corpus search must be an object with its sources")
        rest = {k: v for k, v in doc.items() if k != "sources"}
        return cls(TsSearch.from_dict(rest), tuple(str(s) for s in doc["sources"]))


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    with lzma.open(path, "rt", encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if line.strip():
                yield number, json.loads(line)


def read_records(path: Path) -> list[CorpusRecord]:
    """The records of a ``measurements.v1.jsonl.xz``. Raises ValueError naming the line."""
    records = []
    try:
        for number, doc in _lines(path):
            try:
                records.append(CorpusRecord.from_dict(doc))
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(f"{path}: line {number}: {exc}") from None
    except (OSError, lzma.LZMAError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not an xz-compressed JSON-lines file ({exc})") from None
    return records


def read_searches(path: Path) -> list[CorpusSearch]:
    """The TS searches of a ``ts_searches.v1.jsonl.xz``. Raises ValueError naming the line."""
    searches = []
    try:
        for number, doc in _lines(path):
            try:
                searches.append(CorpusSearch.from_dict(doc))
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(f"{path}: line {number}: {exc}") from None
    except (OSError, lzma.LZMAError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not an xz-compressed JSON-lines file ({exc})") from None
    return searches


def _write_lines(docs: Iterable[dict[str, Any]], path: Path) -> tuple[int, str]:
    """Write one JSON document per line, xz-compressed, atomically; (lines, sha256 of the
    uncompressed text: the same records give the same digest whatever xz's build)."""
    digest = hashlib.sha256()
    count = 0
    tmp = path.with_name(path.name + ".tmp")
    with lzma.open(tmp, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as stream:
        for doc in docs:
            line = json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
            digest.update(line.encode())
            stream.write(line)
            count += 1
    tmp.replace(path)
    return count, digest.hexdigest()


def write_corpus(records: Iterable[CorpusRecord], searches: Iterable[CorpusSearch], folder: Path,
                 sources: Iterable[str]) -> dict[str, Any]:
    """Write both tables and the manifest into ``folder``; returns the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    measured, measured_sha = _write_lines((r.to_dict() for r in records),
                                          folder / MEASUREMENTS_FILE)
    unique: dict[tuple[str, str, str, str], CorpusSearch] = {}
    for found in searches:
        held = unique.get(found.search.key)
        unique[found.search.key] = found if held is None else CorpusSearch(
            held.search, tuple(dict.fromkeys(held.sources + found.sources)))
    searched, searched_sha = _write_lines((unique[k].to_dict() for k in sorted(unique)),
                                          folder / SEARCHES_FILE)
    manifest = {"format": FORMAT, "version": VERSION,
                "doc": "tsopt's measurement corpus; corpus/SCHEMA.md says what each field is",
                "tables": {MEASUREMENTS_FILE: {"records": measured, "sha256": measured_sha},
                           SEARCHES_FILE: {"records": searched, "sha256": searched_sha}},
                "sources": sorted(set(sources))}
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """The corpus manifest of ``folder``; ValueError when it is not a corpus of this version."""
    path = folder / MANIFEST_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} manifest")
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: corpus version {doc.get('version')!r}, this tsopt reads "
                         f"version {VERSION}")
    return doc
