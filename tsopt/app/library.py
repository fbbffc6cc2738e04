"""``tsopt library show`` and ``tsopt library update``: the seed library (tsopt.search.library).

``update`` reads finished studies from a database (``--db``, their standings: paired ratios
with intervals) and/or committed measured evidence (``--evidence FILE``, each entry's source
is the file): study dumps (``bench/*/studies*.json[.xz]``, a list of studies with their
candidates), the GEMM experiment's result files (``results`` with genome and measurement),
paired headline rounds (``results`` with ``genome_hash`` and ``median_ratio``) and bundle
results (``format: tsopt-bundle-results``, a ``genome_hash`` per measurement). A file that
names genomes by hash only takes them from the other files given, from a ``manifest.json``
beside it, or from the space's own seed and ``diverse_genomes`` (the gridstride bundles were
built from those).

The shipped library is made from all the committed H200 evidence, the globs of
:data:`SHIPPED_EVIDENCE` (``tests/test_library.py`` remakes it from them and compares): remove
``tsopt/data/seed_library.json``, then run ``tsopt library update --library
tsopt/data/seed_library.json`` with one quoted ``--evidence GLOB`` per entry, or from the
repository root::

    python -c "from pathlib import Path; from rich.console import Console; \
    from tsopt.app.library import SHIPPED_EVIDENCE, evidence_files, library_update; \
    library_update(None, (), evidence_files(SHIPPED_EVIDENCE), \
                   Path('tsopt/data/seed_library.json'), Console())"

(the copy's unfenced ``copy-*-r1`` rounds are left out: that template had a race). The
studies' archives give each study's best three by its standing; the cross-checks re-measured
studies' winners beside hand-made schedules (``bench/stream_k``), so the library holds the
best known schedule of a problem whoever found it, and its ``source`` says which: a study
(``...studies.db.tar.xz: study NAME``) or a file of measurements. A genome measured more than
once keeps its newest paired figure.

The shipped TS search memo (``tsopt/data/ts_searches.json``, :mod:`tsopt.search.ts_memo`) is
remade from the same evidence, keeping the searches of each space's current verifier version
(``tests/test_ts_memo.py`` remakes it and compares)::

    python -c "from tsopt.app.library import SHIPPED_EVIDENCE, evidence_files, ts_memo_update; \
    print(ts_memo_update(evidence_files(SHIPPED_EVIDENCE)))"
"""

from __future__ import annotations

import glob
import json
import lzma
import shutil
import statistics
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError, parse_problem_spec
from tsopt.core.records import TsSearch
from tsopt.core.strict_json import JsonInputError, strict_loads
from tsopt.search.library import (
    LibraryEntry,
    entries_from_store,
    library_path,
    load_library,
    merge,
    save_library,
    shape_class,
)
from tsopt.search.ts_memo import SHIPPED as SHIPPED_MEMO
from tsopt.search.ts_memo import write_memo


def _read(path: Path) -> Any:
    try:
        raw = lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()
        return strict_loads(raw)
    except (OSError, lzma.LZMAError, UnicodeDecodeError, JsonInputError) as exc:
        raise UserInputError(f"--evidence {path}: not readable JSON ({exc})") from None


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _ok(m: Any) -> bool:
    return isinstance(m, dict) and m.get("status") == "ok" and bool(m.get("ratio"))


def _genomes_in(doc: Any, found: dict[str, Genome]) -> None:
    """Every genome a document holds, by hash (results, candidates, manifests)."""
    items: list[Any] = []
    if isinstance(doc, list):
        for study in doc:
            if isinstance(study, dict):
                items += study.get("candidates", [])
    elif isinstance(doc, dict):
        items += doc.get("results", []) + doc.get("candidates", [])
        # The cross-checks' lists of known genomes: problem spec -> [{label, genome}, ...].
        items += [item for value in doc.values() if isinstance(value, list) for item in value]
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("genome"), dict):
            try:
                genome = Genome.from_dict(item["genome"])
            except (ValueError, KeyError, TypeError):
                continue
            found[genome.hash] = genome


def _space_genomes(problem: Problem, found: dict[str, Genome]) -> None:
    """The seed and ``diverse_genomes`` of every space of the problem's op (bundles built
    from them name their genomes by hash only)."""
    from tsopt.core.registry import SPACES, get_space

    for entry in SPACES.values():
        if entry.op != problem.op:
            continue
        space = get_space(entry.name)
        try:
            space.check(problem)
        except ProblemError:
            continue
        found.setdefault(space.seed_genome(problem).hash, space.seed_genome(problem))
        diverse = getattr(space, "diverse_genomes", None)
        if diverse is not None:
            for genome in diverse(problem, 64):
                found.setdefault(genome.hash, genome)


def _problem_of_key(key: str) -> Problem:
    op, dtype, sizes = key.split("-", 2)
    return parse_problem_spec(f"{op}:{dtype}:{sizes}")


SHIPPED_EVIDENCE = (
    "bench/gemm_h200/gemm-*.json", "bench/paired_h200/*.results.json",
    "bench/tune_h200/studies.json", "bench/copy_h200/copy-*-fenced/results.json",
    "bench/gridstride_h200/results-*.json", "bench/tune_gpu/results*/studies*.db.tar.xz",
    "bench/tune_gpu/results*/crosscheck*/cc-*.results.json", "bench/tune_gpu/known*.json",
    "bench/stream_k/round*/sk-*.results.json", "bench/gemm_small_h200/gemm-small-*.results.json",
    "bench/targets_h200/results*/*.results.json", "bench/targets_h200/results*/*.db.tar.xz")
"""The committed evidence the shipped library is made from (globs, from the repository root)."""

STUDY_ARCHIVES = (".db", ".tar.xz")
"""Committed study databases: a SQLite file, or a tar.xz of them (``bench/tune_gpu``)."""


def _is_study_archive(path: Path) -> bool:
    return any(path.name.endswith(suffix) for suffix in STUDY_ARCHIVES)


@contextmanager
def _study_databases(path: Path) -> Iterator[list[Path]]:
    """The SQLite files of a committed study database or ``tar.xz`` of them, copied or
    unpacked into a scratch folder (the committed file is never opened for writing)."""
    with tempfile.TemporaryDirectory(prefix="tsopt-evidence-") as scratch:
        if path.name.endswith(".db"):
            files = [Path(shutil.copy(path, scratch))]
        else:
            try:
                with tarfile.open(path, "r:xz") as archive:
                    archive.extractall(scratch, filter="data")
            except (OSError, tarfile.TarError, lzma.LZMAError) as exc:
                raise UserInputError(f"--evidence {path}: not a tar.xz of study databases "
                                     f"({exc})") from None
            files = sorted(Path(scratch).rglob("*.db"))
        if not files:
            raise UserInputError(f"--evidence {path}: holds no study database (*.db)")
        yield files


def entries_from_archive(path: Path, name: str) -> list[LibraryEntry]:
    """The best of every study in a committed SQLite database or a ``tar.xz`` of them, each
    entry's source naming the archive and the study (``name: study S (S.db)``)."""
    from tsopt.db.store import Store

    found: list[LibraryEntry] = []
    with _study_databases(path) as files:
        for db in files:
            with Store(f"sqlite:///{db}") as store:
                for entry in entries_from_store(store, [s.name for s in store.list_studies()]):
                    study = entry.source.removeprefix("study ")
                    found.append(replace(entry, source=f"{name}: study {study} ({db.name})"))
    return found


def searches_from_evidence(paths: Sequence[Path]) -> list[TsSearch]:
    """The TS exhaustive searches kept by the committed study archives among ``paths`` whose
    verifier version is the current one of their space (older ones can never be used)."""
    from tsopt.core.registry import SPACES, get_space
    from tsopt.db.store import Store
    from tsopt.verify.verifier import verifier_version

    current = {name: verifier_version(get_space(name)) for name in SPACES}
    found: dict[tuple[str, str, str, str], TsSearch] = {}
    for path in paths:
        if not _is_study_archive(path):
            continue
        with _study_databases(path) as files:
            for db in files:
                with Store(f"sqlite:///{db}") as store:
                    for search in store.searches():
                        if current.get(search.space) == search.tool_version:
                            found.setdefault(search.key, search)
    return list(found.values())


def ts_memo_update(paths: Sequence[Path], out: Path = SHIPPED_MEMO) -> int:
    """Remake the shipped TS search memo (``tsopt.search.ts_memo``) from the committed
    evidence; how many searches it holds."""
    searches = searches_from_evidence(paths)
    write_memo(searches, out)
    return len(searches)


def entries_from_evidence(paths: Sequence[Path], arch: str = "sm_90a",
                          root: Path | None = None) -> list[LibraryEntry]:
    """Library entries from committed measured evidence (see the module doc); each names its
    file (relative to ``root``) and the row it came from."""
    archives = [p for p in paths if _is_study_archive(p)]
    docs = [(p, _read(p)) for p in paths if not _is_study_archive(p)]
    genomes: dict[str, Genome] = {}
    for path, doc in docs:
        _genomes_in(doc, genomes)
        manifest = path.parent / "manifest.json"
        if manifest.exists():
            _genomes_in(_read(manifest), genomes)
    entries: list[LibraryEntry] = []

    def name(path: Path) -> str:
        try:
            return str(path.resolve().relative_to((root or Path.cwd()).resolve()))
        except ValueError:
            return str(path)

    for path in archives:
        entries += entries_from_archive(path, name(path))

    def add(genome: Genome | None, problem: Problem, ratios: list[float], paired: bool,
            source: str, lo: float | None = None, hi: float | None = None,
            when: str | None = None) -> None:
        if genome is None or not ratios:
            return
        entries.append(LibraryEntry(genome.space, problem, arch, genome, _median(ratios), paired,
                                    source, lo, hi, when))

    for path, doc in docs:
        where = name(path)
        if isinstance(doc, list):  # study dumps
            for study in doc:
                problem = Problem.from_dict(study["problem"])
                for c in study.get("candidates", []):
                    ok = [m for m in c.get("measurements", []) if _ok(m)]
                    paired = any(m.get("ratio_lo") is not None for m in ok)
                    if paired:
                        ok = [m for m in ok if m.get("ratio_lo") is not None]
                    add(genomes.get(c.get("genome_hash", "")), problem,
                        [float(m["ratio"]) for m in ok], paired,
                        f"{where}: study {study.get('name')}",
                        when=max((str(m.get("measured_at", "")) for m in ok), default=None))
            continue
        if not isinstance(doc, dict):
            continue
        if doc.get("format") == "tsopt-bundle-results":
            measured = [m for m in doc.get("measurements", []) if _ok(m)]
            for m in measured:
                if m["genome_hash"] not in genomes:
                    _space_genomes(_problem_of_key(m["problem_key"]), genomes)
                    break
            for m in measured:
                paired = m.get("ratio_lo") is not None
                add(genomes.get(m["genome_hash"]), _problem_of_key(m["problem_key"]),
                    [float(m["ratio"])], paired, f"{where}: {m['genome_hash'][:12]}",
                    m.get("ratio_lo"), m.get("ratio_hi"),
                    doc.get("updated_at") or doc.get("started_at"))
            continue
        for row in doc.get("results", []):
            problem = Problem.from_dict(row["problem"])
            genome_hash = row.get("genome_hash") or (row.get("genome") or {}).get("hash")
            genome = (Genome.from_dict(row["genome"]) if isinstance(row.get("genome"), dict)
                      else genomes.get(str(genome_hash)))
            label = f"{where}: {row.get('label', genome.short_hash if genome else '?')}"
            if "median_ratio" in row and row.get("correct", True):
                # Rounds alternating the candidate with the vendor baseline: paired.
                # Its rounds' spread is no 95 % interval: none is claimed.
                add(genome, problem, [float(row["median_ratio"])], True, label,
                    when=doc.get("measured_at"))
            elif _ok(row.get("measurement")):
                m = row["measurement"]
                add(genome, problem, [float(m["ratio"])], m.get("ratio_lo") is not None, label,
                    m.get("ratio_lo"), m.get("ratio_hi"), doc.get("measured_at"))
    return entries


def library_update(db: str | None, studies: Sequence[str], evidence: Sequence[Path],
                   path: Path | None, console: Console) -> int:
    """Merge the best of ``db``'s finished studies (or ``studies``) and of ``evidence`` into
    the library at ``path``; prints what changed. Returns 0."""
    if db is None and not evidence:
        raise UserInputError("tsopt library update: give --db URL (finished studies) or "
                             "--evidence FILE (committed results)")
    for p in evidence:
        if not p.exists():
            raise UserInputError(f"--evidence {p}: no such file")
    new: list[LibraryEntry] = []
    if db is not None:
        from tsopt.db.store import Store

        store = Store(db)
        try:
            known = {s.name for s in store.list_studies()}
            missing = [s for s in studies if s not in known]
            if missing:
                raise UserInputError(f"--study {missing[0]!r}: no such study in {db}")
            new += entries_from_store(store, list(studies) or None, source=db)
        finally:
            store.close()
    new += entries_from_evidence(list(evidence))
    where = library_path(path)
    before = load_library(where)
    after = merge(before, new)
    save_library(after, where)
    held = {(e.space, e.problem.key, e.genome.hash) for e in before}
    added = [e for e in after if (e.space, e.problem.key, e.genome.hash) not in held]
    console.print(f"seed library {where}: {len(after)} entries ({len(added)} new, from "
                  f"{len(new)} measured genomes read)", highlight=False)
    for e in added:
        console.print(f"  + {e.space} {e.problem.key} {e.genome.short_hash} {e.ratio:.3f}x "
                      f"({'paired' if e.paired else 'unpaired'}; {e.source})", highlight=False)
    return 0


def library_show(path: Path | None, space: str | None, console: Console,
                 as_json: bool = False) -> int:
    where = library_path(path)
    # `library update` starts from a missing file; `show` has nothing to show from one.
    if not where.is_file():
        raise UserInputError(f"--library {str(where)!r}: no library file there"
                             + ("" if where.exists() else " (it does not exist)"))
    if space is not None:
        from tsopt.core.registry import get_space

        get_space(space)  # UserInputError naming an unknown space and the known ones
    entries = [e for e in load_library(path) if space is None or e.space == space]
    if as_json:
        console.print_json(json.dumps([e.to_dict() for e in entries]))
        return 0
    table = Table(title=f"seed library {library_path(path)}")
    for column in ("space", "shape class", "problem", "genome", "ratio", "evidence", "source"):
        table.add_column(column)
    for e in sorted(entries, key=lambda e: (e.space, shape_class(e.problem), e.problem.key,
                                            e.rank_key())):
        interval = (f" [{e.ratio_lo:.3f}, {e.ratio_hi:.3f}]"
                    if e.ratio_lo is not None and e.ratio_hi is not None else "")
        table.add_row(e.space, e.shape_class, e.problem.key, e.genome.short_hash,
                      f"{e.ratio:.3f}x{interval}", "paired" if e.paired else "unpaired",
                      e.source)
    console.print(table)
    return 0


def evidence_files(patterns: Iterable[str]) -> list[Path]:
    """Paths given on the command line (a glob's matches, sorted)."""
    out: list[Path] = []
    for pattern in patterns:
        matches = ([Path(m) for m in sorted(glob.glob(pattern))]
                   if any(c in pattern for c in "*?[") else [Path(pattern)])
        if not matches:
            raise UserInputError(f"--evidence {pattern}: matches no file")
        out += matches
    return out
