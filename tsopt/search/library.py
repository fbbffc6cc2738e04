"""The seed library: the best-known schedules per shape class, which every new study starts from.

Shipped as package data (``tsopt/data/seed_library.json``; ``TSOPT_LIBRARY`` names another
file), refreshed from finished studies by ``tsopt library update`` and shown by ``tsopt
library show``. Each :class:`LibraryEntry` is one measured genome on one problem, with where
its figure came from (``source``: a study in a database, or a committed results file) and
whether that figure is a paired ratio to the vendor baseline (``paired``) or a ratio of two
separate timings.

**Shape classes.** A problem's class is its op, its dtype and a bucket per size (``xs`` up
to 256, ``s`` up to 2048, ``l`` up to 8192, ``xl`` beyond): the sizes where a GEMM goes from
skinny (one wave of thin tiles) to square-large (many waves), and K from short to long. A new
problem takes the entries of the nearest class first (buckets apart, a dtype apart counts
:data:`DTYPE_STEP`), then of the nearest shape (log2 distance), best ratio first, and only
entries within :data:`MAX_CLASS_DISTANCE`; of those, only genomes the verifier accepts for
the new problem (the caller's ``judge``), at most :data:`LIMIT`.

A new study enqueues them before anything else (origin ``warm_start``, user attribute
``seed_library`` naming the entry's source), as :mod:`tsopt.search.warm_start` does for
nearby studies in the same database; ``tsopt tune --no-library`` switches it off, and
``--library-exclude-self`` leaves out the entries of the study's own problem (same op, dtype
and sizes: leave-one-shape-out, the mode a held-out figure is made in; other shapes' entries
stay). Then up to :data:`REFIT_LIMIT` entries of *other* problems re-fitted to the study's
(:func:`refit_library`, :mod:`tsopt.search.refit`: the schedule kept, tile, cluster, split-K
and swap-AB re-chosen by the cost model; origin ``library_refit``, user attribute
``library_refit_from`` naming the entry's source; ``--no-library-refit`` switches it off).
A problem's own entries are never a re-fit's source: re-fitted to their own shape they could
only move away from what was measured there. ``bench/library_refit`` judges the re-fit.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsopt.core.corpus import CorpusRecord
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import Measurement
from tsopt.core.standing import standing
from tsopt.core.strict_json import JsonInputError, strict_loads
from tsopt.search.refit import Refit, Refitter
from tsopt.search.warm_start import enqueue_genomes, shape_distance

if TYPE_CHECKING:
    from tsopt.core.space import Judge, SearchSpace
    from tsopt.db.store import Store
    from tsopt.search.samplers import KnobView

LIBRARY_ENV = "TSOPT_LIBRARY"
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "seed_library.json"
FORMAT = "tsopt-seed-library"
BUCKETS = ((256, "xs"), (2048, "s"), (8192, "l"))
BUCKET_NAMES = ("xs", "s", "l", "xl")
DTYPE_STEP = 2
MAX_CLASS_DISTANCE = 2
LIMIT = 4
PER_PROBLEM = 3
"""Entries kept per (space, problem, arch): the best by paired ratio first."""
REFIT_ORIGIN = "library_refit"
REFIT_LIMIT = 4
"""Re-fitted entries a new study starts from at most (after the copies)."""
REFIT_SOURCES = 12
"""Entries (distinct genomes) tried as re-fit sources at most."""
REFIT_DEFAULT = True
"""Whether a new study starts from re-fits too (``tsopt tune --library-refit``)."""


def bucket(size: int) -> str:
    for limit, name in BUCKETS:
        if size <= limit:
            return name
    return BUCKET_NAMES[-1]


def shape_class(problem: Problem) -> str:
    """``gemm:bf16:m=l,n=l,k=l`` (see the module doc)."""
    return f"{problem.op}:{problem.dtype}:" + ",".join(
        f"{name}={bucket(size)}" for name, size in problem.dims)


def class_distance(a: Problem, b: Problem) -> float:
    """Buckets apart over every size, plus :data:`DTYPE_STEP` across dtypes; inf across ops."""
    if a.op != b.op or list(a.sizes) != list(b.sizes):
        return math.inf
    steps = sum(abs(BUCKET_NAMES.index(bucket(a.sizes[n])) - BUCKET_NAMES.index(bucket(b.sizes[n])))
                for n in a.sizes)
    return steps + (DTYPE_STEP if a.dtype != b.dtype else 0)


@dataclass(frozen=True)
class LibraryEntry:
    """One measured genome on one problem, and where its figure came from."""

    space: str
    problem: Problem
    arch: str
    genome: Genome
    ratio: float
    """Vendor baseline time over the genome's (above 1: faster than the vendor)."""
    paired: bool
    source: str
    ratio_lo: float | None = None
    ratio_hi: float | None = None
    measured_at: str | None = None

    @property
    def shape_class(self) -> str:
        return shape_class(self.problem)

    def rank_key(self) -> tuple[int, float, str]:
        return (0 if self.paired else 1, -self.ratio, self.genome.hash)

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "problem": self.problem.to_dict(), "arch": self.arch,
                "shape_class": self.shape_class, "genome_hash": self.genome.hash,
                "ratio": round(self.ratio, 4), "paired": self.paired,
                "ratio_95": (None if self.ratio_lo is None or self.ratio_hi is None
                             else [round(self.ratio_lo, 4), round(self.ratio_hi, 4)]),
                "source": self.source, "measured_at": self.measured_at,
                "genome": self.genome.to_dict()}

    @classmethod
    def from_dict(cls, doc: Any) -> LibraryEntry:
        if not isinstance(doc, dict):
            raise ValueError(f"a library entry must be an object, got {type(doc).__name__}")
        interval = doc.get("ratio_95") or [None, None]
        return cls(space=str(doc["space"]), problem=Problem.from_dict(doc["problem"]),
                   arch=str(doc["arch"]), genome=Genome.from_dict(doc["genome"]),
                   ratio=float(doc["ratio"]), paired=bool(doc["paired"]),
                   source=str(doc["source"]), ratio_lo=interval[0], ratio_hi=interval[1],
                   measured_at=doc.get("measured_at"))


def library_path(path: Path | str | None = None) -> Path:
    """``path``, else ``$TSOPT_LIBRARY``, else the packaged library."""
    if path is not None:
        return Path(path)
    env = os.environ.get(LIBRARY_ENV)
    return Path(env) if env else PACKAGED


def load_library(path: Path | str | None = None) -> list[LibraryEntry]:
    """The entries of the library at ``path`` (:func:`library_path`); none when the file does
    not exist. Raises UserInputError naming the file and the first bad entry."""
    where = library_path(path)
    if not where.exists() and not where.is_symlink():
        return []
    if not where.is_file():  # a directory, a pipe (its read would never end), a broken link
        raise UserInputError(f"seed library {where}: not a plain file")
    try:
        doc = strict_loads(where.read_text())
    except (OSError, UnicodeDecodeError, JsonInputError) as exc:
        raise UserInputError(f"seed library {where}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UserInputError(f"seed library {where}: not a {FORMAT} file")
    entries = []
    for i, item in enumerate(doc.get("entries", [])):
        try:
            entries.append(LibraryEntry.from_dict(item))
        except (KeyError, ValueError, TypeError, ProblemError) as exc:
            raise UserInputError(f"seed library {where}: entry {i}: {exc}") from None
    return entries


def save_library(entries: Iterable[LibraryEntry], path: Path | str | None = None) -> Path:
    where = library_path(path)
    ordered = sorted(entries, key=lambda e: (e.space, e.problem.key, e.arch, e.rank_key()))
    doc = {"format": FORMAT, "version": 1,
           "doc": "Best-known schedules per problem (tsopt.search.library); `tsopt library "
                  "show` lists them, `tsopt library update` refreshes them.",
           "entries": [e.to_dict() for e in ordered]}
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_suffix(where.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(where)
    return where


def merge(entries: Iterable[LibraryEntry], new: Iterable[LibraryEntry],
          per_problem: int = PER_PROBLEM) -> list[LibraryEntry]:
    """One entry per (space, problem, arch, genome) — the better evidence (paired first, then
    the newer) — and the best ``per_problem`` of each (space, problem, arch)."""
    best: dict[tuple[str, str, str, str], LibraryEntry] = {}
    for entry in [*entries, *new]:
        key = (entry.space, entry.problem.key, entry.arch, entry.genome.hash)
        held = best.get(key)
        if held is None or (entry.paired, entry.measured_at or "") >= (held.paired,
                                                                       held.measured_at or ""):
            best[key] = entry
    groups: dict[tuple[str, str, str], list[LibraryEntry]] = {}
    for entry in best.values():
        groups.setdefault((entry.space, entry.problem.key, entry.arch), []).append(entry)
    kept = []
    for group in groups.values():
        kept += sorted(group, key=LibraryEntry.rank_key)[:per_problem]
    return kept


def lookup(entries: Sequence[LibraryEntry], space: str, problem: Problem, arch: str,
           judge: Judge | None = None, limit: int = LIMIT,
           max_class_distance: float = MAX_CLASS_DISTANCE,
           exclude_self: bool = False) -> list[LibraryEntry]:
    """The entries a new study of ``space`` on ``problem`` starts from (see the module doc):
    nearest class, nearest shape, best evidence first; only genomes ``judge`` accepts for
    ``problem``; one per genome. ``exclude_self``: none of ``problem``'s own entries (same op,
    dtype and sizes), whatever their space or arch: leave-one-shape-out; a genome measured
    on another shape too still comes through that shape's entry."""
    near = []
    for entry in entries:
        if entry.space != space or entry.arch != arch:
            continue
        if exclude_self and entry.problem == problem:
            continue
        distance = class_distance(entry.problem, problem)
        if distance > max_class_distance:
            continue
        near.append(((distance, shape_distance(entry.problem, problem), *entry.rank_key()),
                     entry))
    picked: list[LibraryEntry] = []
    seen: set[str] = set()
    for _, entry in sorted(near, key=lambda pair: pair[0]):
        if entry.genome.hash in seen:
            continue
        seen.add(entry.genome.hash)
        if judge is not None and not judge(entry.genome, problem).valid:
            continue
        picked.append(entry)
        if len(picked) >= limit:
            break
    return picked


def entries_from_store(store: Store, studies: Sequence[str] | None = None,
                       per_problem: int = PER_PROBLEM, source: str = "") -> list[LibraryEntry]:
    """The best measured genomes of the finished studies in ``store`` (or of ``studies``),
    each with its standing (paired ratio and interval where measured paired)."""
    found = []
    for info in store.list_studies():
        if studies is not None and info.name not in studies:
            continue
        if studies is None and info.status != "finished":
            continue
        for ranked in store.ranked_on_card(info.name, limit=per_problem):
            standing, measured = ranked.standing, ranked.measurement
            ratio = standing.ratio if standing is not None and standing.ratio else measured.ratio
            if ratio is None or not math.isfinite(ratio) or ratio <= 0:
                continue
            paired = measured.ratio_lo is not None
            lo = standing.ratio_lo if standing is not None else measured.ratio_lo
            hi = standing.ratio_hi if standing is not None else measured.ratio_hi
            found.append(LibraryEntry(
                space=info.space, problem=info.problem, arch=info.arch, genome=ranked.genome,
                ratio=float(ratio), paired=paired,
                source=f"study {info.name}" + (f" in {source}" if source else ""),
                ratio_lo=lo, ratio_hi=hi, measured_at=ranked.measured_at.isoformat()))
    return found


def enqueue(study: Any, space: SearchSpace, view: KnobView,
            entries: Sequence[LibraryEntry]) -> int:
    """Enqueue each entry's genome as a trial of ``study`` (origin ``warm_start``, attribute
    ``seed_library``); returns how many were. A genome the sampler cannot express is
    skipped."""
    return enqueue_genomes(study, space, view, (
        (entry.genome, {"seed_library": entry.source, "seed_library_genome": entry.genome.hash,
                        "seed_library_problem": entry.problem.key,
                        "seed_library_ratio": entry.ratio})
        for entry in entries))


def refit_sources(entries: Sequence[LibraryEntry], space: str, problem: Problem, arch: str,
                  limit: int = REFIT_SOURCES) -> list[LibraryEntry]:
    """The entries a re-fit to ``problem`` starts from: those of ``space`` and ``arch`` on
    *other* problems (never ``problem``'s own, in any mode: re-fitted to its own shape, an
    entry measured there could only move away from what was measured; with
    ``--library-exclude-self`` they are not copied either), nearest class first, then nearest
    shape, then best evidence, one per genome, at most ``limit``. No class distance bounds
    them: the shape genes are re-chosen, the schedule is what is taken."""
    near = []
    for entry in entries:
        if entry.space != space or entry.arch != arch or entry.problem == problem:
            continue
        distance = class_distance(entry.problem, problem)
        if not math.isfinite(distance):
            continue
        near.append(((distance, shape_distance(entry.problem, problem), *entry.rank_key()),
                     entry))
    picked: list[LibraryEntry] = []
    seen: set[str] = set()
    for _, entry in sorted(near, key=lambda pair: pair[0]):
        if entry.genome.hash not in seen:
            seen.add(entry.genome.hash)
            picked.append(entry)
        if len(picked) >= limit:
            break
    return picked


def refit_library(entries: Sequence[LibraryEntry], space: SearchSpace, problem: Problem,
                  arch: str, view: KnobView, judge: Judge | None,
                  limit: int = REFIT_LIMIT, skip: Iterable[str] = (),
                  sources: int = REFIT_SOURCES,
                  refitter: Refitter | None = None) -> list[tuple[LibraryEntry, Refit]]:
    """Other shapes' entries re-fitted to ``problem`` (:mod:`tsopt.search.refit`): the
    :func:`refit_sources`, each re-fitted, in their order, one per distinct result, at most
    ``limit``; none whose genome is in ``skip`` (the copies a study is started from)."""
    refitter = refitter or Refitter(space, problem, view, judge)
    if not refitter.possible:
        return []
    unwanted = set(skip)
    out: list[tuple[LibraryEntry, Refit]] = []
    for entry in refit_sources(entries, space.name, problem, arch, sources):
        if len(out) >= limit:
            break
        found = refitter.refit(entry.genome)
        if found is None or found.genome.hash in unwanted:
            continue
        unwanted.add(found.genome.hash)
        out.append((entry, found))
    return out


def enqueue_refits(study: Any, space: SearchSpace, view: KnobView,
                   refits: Sequence[tuple[LibraryEntry, Refit]]) -> int:
    """Enqueue each re-fit as a trial of ``study`` (origin ``library_refit``; attributes
    naming the entry it came from and what moved); returns how many were."""
    return enqueue_genomes(study, space, view, (
        (refit.genome, {"library_refit_from": entry.source,
                        "library_refit_genome": entry.genome.hash,
                        "library_refit_problem": entry.problem.key,
                        "library_refit_ratio": entry.ratio,
                        "library_refit": refit.to_dict()})
        for entry, refit in refits), origin=REFIT_ORIGIN)


def seed_study(study: Any, space: SearchSpace, view: KnobView, problem: Problem, arch: str,
               judge: Judge | None, say: Callable[[str], None],
               path: Path | str | None = None, exclude_self: bool = False,
               refit: bool = REFIT_DEFAULT) -> int:
    """A new study's first trials: the library's entries for ``problem`` (the driver's hook);
    ``exclude_self``: without ``problem``'s own entries (leave-one-shape-out, said);
    ``refit``: then other shapes' entries re-fitted to ``problem`` (origin
    ``library_refit``). Returns how many trials were enqueued."""
    held = load_library(path)
    if exclude_self:
        own = sum(1 for e in held if e.space == space.name and e.arch == arch
                  and e.problem == problem)
        say(f"seed library: exclude-self, {own} entr{'y' if own == 1 else 'ies'} of "
            f"{problem.key} left out")
    entries = lookup(held, space.name, problem, arch, judge, exclude_self=exclude_self)
    count = enqueue(study, space, view, entries) if entries else 0
    if count:
        say(f"seed library: {count} genome{'s' if count != 1 else ''} from "
            + ", ".join(sorted({f'{e.problem.key} ({e.ratio:.3f}x)' for e in entries})))
    if refit:
        refits = refit_library(held, space, problem, arch, view, judge,
                               skip=[e.genome.hash for e in entries])
        done = enqueue_refits(study, space, view, refits) if refits else 0
        if done:
            say(f"seed library: {done} re-fitted to {problem.key} (tile, cluster, split-K, "
                "swap-AB re-chosen by the cost model) from "
                + ", ".join(sorted({e.problem.key for e, _ in refits})))
        count += done
    return count


def _standing_entries(group: Sequence[CorpusRecord], source: str,
                      per_problem: int) -> list[LibraryEntry]:
    """A study's best ``per_problem`` by standing, as :func:`entries_from_store` reads them
    from its database: each candidate's timed measurements combined (tsopt.core.standing),
    the figure shown the measurement nearest its standing."""
    by_genome: dict[str, list[CorpusRecord]] = {}
    for record in group:
        if record.status == "ok" and record.median_us is not None:
            by_genome.setdefault(record.genome_hash, []).append(record)
    ranked = []
    for genome_hash, measured in by_genome.items():
        found = standing(genome_hash, [_measurement(r) for r in measured])
        if found is not None:
            ranked.append((found, measured))
    ranked.sort(key=lambda pair: pair[0].sort_key())
    entries = []
    for stand, measured in ranked[:per_problem]:
        shown = min(measured, key=lambda r: (abs((r.ratio or 0.0) - (stand.ratio or 0.0))
                                             if stand.ratio is not None
                                             else abs((r.median_us or 0.0) - stand.median_us),
                                             r.order))
        ratio = stand.ratio if stand.ratio else shown.ratio
        if ratio is None or not math.isfinite(ratio) or ratio <= 0 or shown.genome is None:
            continue
        entries.append(LibraryEntry(
            space=shown.space, problem=shown.problem, arch=shown.arch,
            genome=Genome.from_dict(shown.genome), ratio=float(ratio),
            paired=shown.ratio_lo is not None, source=source, ratio_lo=stand.ratio_lo,
            ratio_hi=stand.ratio_hi, measured_at=shown.measured_at))
    return entries


def _measurement(record: CorpusRecord) -> Measurement:
    return Measurement(genome_hash=record.genome_hash, problem_key=record.problem.key,
                       status=record.status,  # type: ignore[arg-type]
                       median_us=record.median_us, ratio=record.ratio,
                       ratio_lo=record.ratio_lo, ratio_hi=record.ratio_hi,
                       rounds=record.rounds, conditions={"abnormal": list(record.abnormal)})


def entries_from_records(records: Sequence[CorpusRecord],
                         per_problem: int = PER_PROBLEM) -> list[LibraryEntry]:
    """Library entries from measurement corpus records (tsopt.core.corpus), each naming its
    evidence: a study database's best ``per_problem`` of each study by standing; a study
    dump's candidates by the median of their correct ratios (the paired ones, where any is);
    every other correct measurement as it stands. Study databases first, then the rest, each
    in the corpus's order (the library keeps the later of two equal figures)."""
    groups: dict[tuple[str, ...], list[CorpusRecord]] = {}
    for record in records:
        if record.kind == "study-database":
            key: tuple[str, ...] = (record.kind, record.source, record.database or "",
                                    record.study or "")
        elif record.kind == "study-dump":
            key = (record.kind, record.source, record.study or "", record.genome_hash)
        else:
            key = (record.kind, record.source, str(record.order))
        groups.setdefault(key, []).append(record)
    entries: list[LibraryEntry] = []
    for key, group in groups.items():
        if key[0] == "study-database":
            first = group[0]
            entries += _standing_entries(
                group, f"{first.source}: study {first.study} ({first.database})", per_problem)
    for key, group in groups.items():
        first = group[0]
        if key[0] == "study-database" or first.genome is None:
            continue
        ok = [r for r in group if r.ok]
        if not ok:
            continue
        if key[0] == "study-dump":
            paired = any(r.ratio_lo is not None for r in ok)
            if paired:
                ok = [r for r in ok if r.ratio_lo is not None]
            entries.append(LibraryEntry(
                first.space, first.problem, first.arch, Genome.from_dict(first.genome),
                float(statistics.median(float(r.ratio or 0.0) for r in ok)), paired,
                f"{first.source}: study {first.study}",
                measured_at=max(str(r.measured_at or "") for r in ok)))
            continue
        entries.append(LibraryEntry(
            first.space, first.problem, first.arch, Genome.from_dict(first.genome),
            float(first.ratio or 0.0), first.paired, f"{first.source}: {first.label}",
            first.ratio_lo, first.ratio_hi, first.document_at))
    return entries
