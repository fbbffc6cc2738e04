"""The genome: the complete, serialisable description of one candidate kernel.

A genome is what every other stage keys on (database rows, artifact cache,
dedup, export), so it is frozen, JSON round-trips exactly, and has a content
hash computed from a canonical JSON form.

It has three parts:

- ``schedule``: for every task of the template, its movable ops in program
  order, each placed in a section (``head`` before the domain loop, ``loop``
  inside it, ``tail`` after it). The order inside a bracket is the order of
  the tuple.
- ``structure``: the structural moves TS allows beyond placement (producer
  prefetch depth, consumer release delay, early release, split or merged
  resources, persistent tile loop, ...).
- ``numeric``: the numeric knobs (stages, tile/box shape, warps, register
  budgets, grid size, ...).

Padding tasks and cooperative-group sizes are *derived* by the template from
these genes, never stored, so a genome cannot contradict itself there.

This module uses the standard library only: the GPU runner reads genomes too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

Section = Literal["head", "loop", "tail"]
SECTIONS: tuple[Section, ...] = ("head", "loop", "tail")

GeneValue = int | str | bool | tuple[int, ...]

GENOME_FORMAT = 1

# Bounds on a genome's size, checked before anything parses further: a real genome has a few
# dozen ops and genes (the GEMM's is under 2 kB); a 44 MB genome of 2 million ops once kept
# the verifier busy for minutes.
MAX_GENOME_BYTES = 1_000_000
MAX_GENOME_TASKS = 64
MAX_GENOME_OPS = 4096
MAX_GENOME_GENES = 512
MAX_GENE_TEXT = 256
MAX_GENE_TUPLE = 64


class GenomeError(ValueError):
    """A genome document is malformed; the message names the bad field/value."""


@dataclass(frozen=True)
class OpPlacement:
    """One op of a task's schedule and the section it sits in."""

    op: str
    section: Section = "loop"

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or not self.op:
            raise GenomeError(f"op name must be a non-empty string, got {self.op!r}")
        if self.section not in SECTIONS:
            raise GenomeError(
                f"op {self.op!r}: section must be one of {SECTIONS}, got {self.section!r}"
            )


@dataclass(frozen=True)
class TaskSchedule:
    """The placed ops of one task, in program order."""

    task: str
    ops: tuple[OpPlacement, ...]

    def in_section(self, section: Section) -> tuple[str, ...]:
        return tuple(p.op for p in self.ops if p.section == section)

    def section_of(self, op: str) -> Section:
        for p in self.ops:
            if p.op == op:
                return p.section
        raise KeyError(f"task {self.task!r} has no op {op!r}")

    def __post_init__(self) -> None:
        # Sections must appear in head -> loop -> tail order: the tuple is program order.
        rank = [SECTIONS.index(p.section) for p in self.ops]
        if rank != sorted(rank):
            raise GenomeError(
                f"task {self.task!r}: ops must be listed head, then loop, then tail; got "
                + ", ".join(f"{p.op}@{p.section}" for p in self.ops)
            )


def _freeze_value(name: str, value: Any) -> GeneValue:
    if isinstance(value, str) and len(value) > MAX_GENE_TEXT:
        raise GenomeError(f"gene {name!r}: a text of {len(value)} characters (at most "
                          f"{MAX_GENE_TEXT})")
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, list | tuple) and len(value) > MAX_GENE_TUPLE:
        raise GenomeError(f"gene {name!r}: a tuple of {len(value)} values (at most "
                          f"{MAX_GENE_TUPLE})")
    if isinstance(value, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(int(v) for v in value)
    raise GenomeError(f"gene {name!r}: unsupported value {value!r} (int, str, bool or int tuple)")


def _freeze_genes(
    genes: Mapping[str, Any] | Iterable[tuple[str, Any]],
) -> tuple[tuple[str, GeneValue], ...]:
    items = list(genes.items() if isinstance(genes, Mapping) else genes)
    if len(items) > MAX_GENOME_GENES:
        raise GenomeError(f"genome has {len(items)} genes in one part (at most {MAX_GENOME_GENES})")
    frozen = {}
    for name, value in items:
        if not isinstance(name, str) or not name:
            raise GenomeError(f"gene name must be a non-empty string, got {name!r}")
        frozen[name] = _freeze_value(name, value)
    return tuple(sorted(frozen.items()))


@dataclass(frozen=True)
class Genome:
    """A candidate: schedule placement + structural genes + numeric genes."""

    space: str
    schedule: tuple[TaskSchedule, ...] = ()
    structure: tuple[tuple[str, GeneValue], ...] = ()
    numeric: tuple[tuple[str, GeneValue], ...] = ()
    _hash: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.space, str) or not self.space:
            raise GenomeError(f"genome space must be a non-empty string, got {self.space!r}")
        object.__setattr__(self, "structure", _freeze_genes(self.structure))
        object.__setattr__(self, "numeric", _freeze_genes(self.numeric))
        object.__setattr__(self, "schedule", tuple(self.schedule))
        names = [t.task for t in self.schedule]
        if len(names) > MAX_GENOME_TASKS or sum(len(t.ops) for t in self.schedule) > MAX_GENOME_OPS:
            raise GenomeError(f"genome of {len(names)} tasks and "
                              f"{sum(len(t.ops) for t in self.schedule):,} ops is beyond the "
                              f"bounds ({MAX_GENOME_TASKS} tasks, {MAX_GENOME_OPS:,} ops)")
        if len(names) != len(set(names)):
            raise GenomeError(f"duplicate task names in schedule: {names}")
        clash = set(dict(self.structure)) & set(dict(self.numeric))
        if clash:
            raise GenomeError(f"genes both structural and numeric: {sorted(clash)}")
        object.__setattr__(
            self, "_hash", hashlib.sha256(self.canonical_json().encode()).hexdigest()
        )

    # -- construction -------------------------------------------------------------------
    @classmethod
    def make(
        cls,
        space: str,
        schedule: Mapping[str, Iterable[tuple[str, Section]]] | None = None,
        structure: Mapping[str, Any] | None = None,
        numeric: Mapping[str, Any] | None = None,
    ) -> Genome:
        """Build a genome from plain mappings: ``schedule={"load": [("acquire", "loop"), ...]}``."""
        sched = tuple(
            TaskSchedule(task, tuple(OpPlacement(op, sec) for op, sec in ops))
            for task, ops in (schedule or {}).items()
        )
        return cls(space, sched, _freeze_genes(structure or {}), _freeze_genes(numeric or {}))

    def replace(self, **genes: Any) -> Genome:
        """A copy with some structural or numeric genes changed (by name)."""
        structure, numeric = dict(self.structure), dict(self.numeric)
        for name, value in genes.items():
            if name in structure:
                structure[name] = value
            elif name in numeric:
                numeric[name] = value
            else:
                raise GenomeError(f"genome of space {self.space!r} has no gene {name!r}")
        return Genome(self.space, self.schedule, _freeze_genes(structure), _freeze_genes(numeric))

    def with_schedule(self, task: str, ops: Iterable[tuple[str, Section]]) -> Genome:
        placed = TaskSchedule(task, tuple(OpPlacement(op, sec) for op, sec in ops))
        sched = tuple(placed if t.task == task else t for t in self.schedule)
        if task not in {t.task for t in self.schedule}:
            sched = sched + (placed,)
        return Genome(self.space, sched, self.structure, self.numeric)

    # -- access -------------------------------------------------------------------------
    def __getitem__(self, name: str) -> GeneValue:
        for genes in (self.numeric, self.structure):
            for key, value in genes:
                if key == name:
                    return value
        raise KeyError(f"genome of space {self.space!r} has no gene {name!r}")

    def get(self, name: str, default: GeneValue | None = None) -> GeneValue | None:
        try:
            return self[name]
        except KeyError:
            return default

    def task(self, name: str) -> TaskSchedule:
        for t in self.schedule:
            if t.task == name:
                return t
        raise KeyError(f"genome has no task {name!r}")

    @property
    def genes(self) -> dict[str, GeneValue]:
        """Structural and numeric genes in one flat mapping."""
        return {**dict(self.structure), **dict(self.numeric)}

    # -- identity and serialisation -----------------------------------------------------
    @property
    def hash(self) -> str:
        """Content hash (sha256 of the canonical JSON), the identity used everywhere."""
        return self._hash

    @property
    def short_hash(self) -> str:
        return self._hash[:12]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": GENOME_FORMAT,
            "space": self.space,
            "schedule": {t.task: [[p.op, p.section] for p in t.ops] for t in self.schedule},
            "structure": {k: list(v) if isinstance(v, tuple) else v for k, v in self.structure},
            "numeric": {k: list(v) if isinstance(v, tuple) else v for k, v in self.numeric},
        }

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    @classmethod
    def from_dict(cls, doc: Any) -> Genome:
        if not isinstance(doc, dict):
            raise GenomeError(f"genome must be a JSON object, got {type(doc).__name__}")
        fmt = doc.get("format", GENOME_FORMAT)
        if fmt != GENOME_FORMAT:
            raise GenomeError(f"unsupported genome format {fmt!r} (expected {GENOME_FORMAT})")
        unknown = set(doc) - {"format", "space", "schedule", "structure", "numeric", "hash"}
        if unknown:
            raise GenomeError(f"unknown genome field(s): {sorted(unknown)}")
        if "space" not in doc:
            raise GenomeError("genome has no 'space' field")
        schedule = doc.get("schedule", {})
        if not isinstance(schedule, dict):
            raise GenomeError(f"'schedule' must be an object of task -> ops, got {schedule!r}")
        _check_schedule_size(schedule)
        tasks = []
        for task, ops in schedule.items():
            if not isinstance(ops, list):
                raise GenomeError(f"schedule of task {task!r} must be a list, got {ops!r}")
            placed = []
            for entry in ops:
                if not (isinstance(entry, list | tuple) and len(entry) == 2):
                    raise GenomeError(
                        f"task {task!r}: each op must be [op, section], got {entry!r}"
                    )
                placed.append(OpPlacement(str(entry[0]), cast(Section, entry[1])))
            tasks.append(TaskSchedule(task, tuple(placed)))
        for part in ("structure", "numeric"):
            if not isinstance(doc.get(part, {}), dict):
                raise GenomeError(f"'{part}' must be an object of gene -> value")
        genome = cls(
            str(doc["space"]),
            tuple(tasks),
            _freeze_genes(doc.get("structure", {})),
            _freeze_genes(doc.get("numeric", {})),
        )
        if "hash" in doc and doc["hash"] != genome.hash:
            raise GenomeError(
                f"genome hash mismatch: document says {doc['hash']!r}, content hashes to {genome.hash!r}"
            )
        return genome

    @classmethod
    def from_json(cls, text: str) -> Genome:
        if len(text) > MAX_GENOME_BYTES:
            raise GenomeError(f"genome is {len(text):,} bytes of JSON; a genome has at most "
                              f"{MAX_GENOME_BYTES:,}")
        from tsopt.core.strict_json import JsonInputError, strict_loads

        try:
            doc = strict_loads(text)
        except JsonInputError as exc:
            raise GenomeError(f"genome JSON: {exc}") from None
        return cls.from_dict(doc)

    def describe(self) -> str:
        """One line for logs and tables."""
        genes = ", ".join(f"{k}={v}" for k, v in sorted(self.genes.items()))
        return f"{self.space}[{self.short_hash}] {genes}"


def _check_schedule_size(schedule: dict[Any, Any]) -> None:
    """Refuse a schedule beyond the size bounds before any op of it is parsed."""
    if len(schedule) > MAX_GENOME_TASKS:
        raise GenomeError(f"genome schedules {len(schedule)} tasks (at most {MAX_GENOME_TASKS})")
    ops = sum(len(v) for v in schedule.values() if isinstance(v, list))
    if ops > MAX_GENOME_OPS:
        raise GenomeError(f"genome places {ops:,} ops (at most {MAX_GENOME_OPS:,})")
