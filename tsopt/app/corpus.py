"""``tsopt corpus build`` and ``tsopt corpus products``: the measurement corpus (tsopt.core.corpus).

``build`` reads the committed evidence and writes ``corpus/``: every measurement one record,
the TS searches a table of their own, and a manifest. The evidence is the experiments' raw
outputs, packed one archive per experiment in ``evidence/`` (:mod:`tsopt.core.evidence`):
:func:`unpacked_evidence` unpacks them all into a scratch folder, checked against their
manifest, and :data:`EVIDENCE`'s globs pick the files there (or the files given). Evidence files are read as
:mod:`tsopt.app.library`'s docstring describes them (study databases and ``tar.xz`` of them,
study dumps, bundle results, experiment results files, headline rounds); a file that names
genomes by hash only takes them from the other files, from a ``manifest.json`` or an
``index.jsonl.xz`` beside it, or from the space's own seed and ``diverse_genomes``.

``products`` makes the shipped data from the corpus alone, nothing in ``evidence/``: the seed
library (``tsopt/data/seed_library.json``, from the records of :data:`SHIPPED_SOURCES`), the
TS search memo (``tsopt/data/ts_searches.json``: the searches of each space's current
verifier version) and the cross-shape cost model (``tsopt/data/cost_model.json``:
:mod:`tsopt.search.transfer` fitted on every GEMM shape the corpus measured, the prior of
``evolve``'s cost model; judged leave-one-shape-out in ``bench/transfer_model``).
``tests/test_corpus.py`` remakes them and compares.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import lzma
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsopt.core.corpus import (
    LAUNCH_BACK_TO_BACK,
    LAUNCH_ISOLATED,
    MEASUREMENTS_FILE,
    SEARCHES_FILE,
    CorpusRecord,
    CorpusSearch,
    read_manifest,
    read_records,
    read_searches,
    write_corpus,
)
from tsopt.core.errors import UserInputError
from tsopt.core.evidence import FOLDER as ARCHIVES
from tsopt.core.evidence import EvidenceError, unpack_all
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError, parse_problem_spec
from tsopt.core.records import TsSearch
from tsopt.core.strict_json import JsonInputError, strict_loads

ROOT_FOLDER = Path("corpus")
"""Where the corpus lives, from the repository root: beside the package, not in it (a few MB
the installed product never reads), and outside ``bench/`` (experiments keep their README,
script and summary; the corpus is the one data set the product is made from)."""

EVIDENCE = (
    # What the seed library was made from (SHIPPED_SOURCES) ...
    "bench/gemm_h200/gemm-*.json", "bench/paired_h200/*.results.json",
    "bench/tune_h200/studies.json", "bench/copy_h200/copy-*/results.json",
    "bench/gridstride_h200/results-*.json", "bench/tune_gpu/results*/studies*.db.tar.xz",
    "bench/tune_gpu/results*/crosscheck*/cc-*.results.json", "bench/tune_gpu/known*.json",
    "bench/stream_k/round*/sk-*.results.json", "bench/gemm_small_h200/gemm-small-*.results.json",
    "bench/targets_h200/results*/*.results.json", "bench/targets_h200/results*/*.db.tar.xz",
    # ... and every other committed measurement.
    "bench/search_table/measured/*.results.json", "bench/search_efficiency_h200/studies-*.json.xz",
    "bench/skinny_l2/results/*.results.json", "bench/build_memory/*.results.json",
    "bench/driver_scale/ts_memo_study/*.db.tar.xz",
    "bench/search_efficiency_h200/search-top-remeasured.json",
    # The Llama layer's runtime-M studies (graph mode; an H100's and an H200's runs). One state
    # only, the latest: each state's database holds every measurement of the ones before it.
    "bench/llama_layer/state-gen3-built.tar.xz")
"""The committed evidence the corpus is made from: globs of member names in the evidence
archives (each named from the repository root as its experiment wrote it, ``bench/EXP/...``;
matched in the unpacked archives, never in the checkout). Left out:
``bench/llama_layer``'s earlier states (``state-gen1-transfer``, ``state-gen2-transfer``,
``state-gen2-h200``: their measurements are in the latest state's database too) and
``workload-gen1.json`` (a summary of the first generation's H200 run, whose raw results were
not committed);
``bench/runner_isolation/planted`` (kernels planted to crash and hang, not candidates of a
space); ``bench/export_h200`` and ``bench/torch_op_h200`` (three exported kernels timed
through the exported loader against their recorded figure, unpaired: checks of an export,
the kernels' own measurements are in the corpus); and the summaries and tables made from
files that are in it (``tune-gpu.json``, ``RESULTS*.json``, ``table-8192.json.xz``, ...)."""

SHIPPED_SOURCES = (
    "bench/gemm_h200/gemm-*.json", "bench/paired_h200/*.results.json",
    "bench/tune_h200/studies.json", "bench/copy_h200/copy-*-fenced/results.json",
    "bench/gridstride_h200/results-*.json", "bench/tune_gpu/results*/studies*.db.tar.xz",
    "bench/tune_gpu/results*/crosscheck*/cc-*.results.json",
    "bench/stream_k/round*/sk-*.results.json", "bench/gemm_small_h200/gemm-small-*.results.json",
    "bench/targets_h200/results*/*.results.json", "bench/targets_h200/results*/*.db.tar.xz")
"""The evidence files whose corpus records the shipped seed library and TS search memo are
made from (the copy's unfenced ``copy-*-r1`` rounds are left out: that template had a race).
Widening it changes the shipped files: remake them with ``tsopt corpus products`` and say
why."""

STUDY_ARCHIVES = (".db", ".tar.xz")


def is_study_archive(path: Path) -> bool:
    return any(path.name.endswith(suffix) for suffix in STUDY_ARCHIVES)


def read_json(path: Path) -> Any:
    try:
        raw = lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()
        return strict_loads(raw)
    except (OSError, lzma.LZMAError, UnicodeDecodeError, JsonInputError) as exc:
        raise UserInputError(f"--evidence {path}: not readable JSON ({exc})") from None


@contextmanager
def study_databases(path: Path) -> Iterator[list[Path]]:
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


def _genomes_in(doc: Any, found: dict[str, Genome]) -> None:
    """Every genome a document holds, by hash (results, candidates, manifests, indexes)."""
    items: list[Any] = []
    if isinstance(doc, list):
        for item in doc:
            if isinstance(item, dict):
                items += item.get("candidates", [])
                if "genome" in item and "candidates" not in item:
                    items.append(item)  # an index line
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


def _machine(doc: dict[str, Any], m: dict[str, Any]) -> str:
    env = doc.get("environment") or {}
    parts = [str(m.get("device") or doc.get("device") or env.get("device") or "?")]
    if env.get("sm_count"):
        parts.append(f"{env['sm_count']} SMs")
    for name in ("driver", "cuda", "torch"):
        value = m.get(name) or doc.get(name) or env.get(name)
        if value:
            parts.append(f"{name} {value}")
    return ", ".join(parts)


@dataclass
class _Reader:
    """The state of one corpus build: the genomes known by hash, the records so far."""

    root: Path
    genomes: dict[str, Genome]
    records: list[CorpusRecord]

    def name(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def add(self, *, m: dict[str, Any], problem: Problem, genome: Genome | None,
            genome_hash: str, source: str, kind: str, pass_id: str, machine: str,
            order: int, space: str | None = None, arch: str = "sm_90a",
            launch: str = LAUNCH_ISOLATED, **where: Any) -> None:
        ratio = m.get("ratio")
        lo, hi = m.get("ratio_lo"), m.get("ratio_hi")
        # a measurement that says how it was launched is taken at its word (a study in graph
        # mode records "graph"); ``launch`` is for files that predate the field
        launch = str(m.get("launch") or launch)
        parts = source.split("/")
        self.records.append(CorpusRecord(
            space=genome.space if genome is not None else (space or problem.op),
            problem=problem, arch=arch, genome_hash=genome_hash,
            genome=genome.to_dict() if genome is not None else None,
            status=str(m.get("status", "ok")),
            ratio=float(ratio) if ratio is not None else None,
            ratio_lo=float(lo) if lo is not None else None,
            ratio_hi=float(hi) if hi is not None else None,
            rounds=int(m.get("rounds") or 0),
            paired=lo is not None or kind == "paired-rounds",
            median_us=m.get("median_us"), baseline_median_us=m.get("baseline_median_us"),
            baseline_name=str(m.get("baseline_name") or ""),
            device=str(m.get("device") or ""), driver=str(m.get("driver") or ""),
            launch=launch, measured_at=m.get("measured_at"), pass_id=pass_id,
            machine=machine,
            experiment="/".join(parts[:2]) if parts[0] == "bench" else parts[0],
            source=source, kind=kind, order=order, error=m.get("error"),
            abnormal=tuple((m.get("conditions") or {}).get("abnormal", ())), **where))

    def archive(self, path: Path) -> None:
        from tsopt.db.store import Store

        source = self.name(path)
        order = 0
        with study_databases(path) as files:
            for db in files:
                with Store(f"sqlite:///{db}") as store:
                    for info in store.list_studies():
                        for cand in store.candidates(info.name):
                            for recorded in cand.measurements:
                                m = recorded.measurement
                                doc = m.to_dict()
                                doc["measured_at"] = recorded.measured_at.isoformat()
                                self.add(m=doc, problem=info.problem, genome=cand.genome,
                                         genome_hash=m.genome_hash, source=source,
                                         kind="study-database", pass_id=recorded.run_id,
                                         machine=_machine({}, doc), order=order,
                                         arch=info.arch, study=info.name,
                                         study_status=info.status, database=db.name)
                                order += 1

    def document(self, path: Path, doc: Any) -> None:
        source = self.name(path)
        if isinstance(doc, list):  # study dumps
            order = 0
            for study in doc:
                problem = Problem.from_dict(study["problem"])
                for c in study.get("candidates", []):
                    for m in c.get("measurements", []):
                        self.add(m=m, problem=problem,
                                 genome=self.genomes.get(c.get("genome_hash", "")),
                                 genome_hash=str(c.get("genome_hash", "")), source=source,
                                 kind="study-dump", pass_id=str(m.get("run_id") or source),
                                 machine=_machine({}, m), order=order,
                                 space=study.get("space"), arch=study.get("arch", "sm_90a"),
                                 study=study.get("name"), study_status=study.get("status"))
                        order += 1
            return
        if not isinstance(doc, dict):
            return
        if doc.get("format") == "tsopt-bundle-results":
            self._bundle(source, doc)
            return
        at = doc.get("measured_at")
        for order, row in enumerate(doc.get("results", [])):
            problem = Problem.from_dict(row["problem"])
            genome_hash = row.get("genome_hash") or (row.get("genome") or {}).get("hash")
            genome = (Genome.from_dict(row["genome"]) if isinstance(row.get("genome"), dict)
                      else self.genomes.get(str(genome_hash)))
            label = str(row.get("label", genome.short_hash if genome else "?"))
            common = dict(problem=problem, genome=genome,
                          genome_hash=genome.hash if genome else str(genome_hash),
                          source=source, pass_id=f"{source} @ {at}", order=order,
                          label=label, document_at=at)
            if "median_ratio" in row:
                # Rounds alternating the candidate with the vendor baseline: paired, but the
                # rounds' spread is no 95 % interval, so none is claimed.
                m = {"status": "ok" if row.get("correct", True) else "wrong",
                     "ratio": row["median_ratio"], "rounds": len(row.get("rounds", [])),
                     "device": doc.get("device"), "measured_at": at}
                self.add(m=m, kind="paired-rounds", machine=_machine(doc, m),
                         launch=LAUNCH_BACK_TO_BACK, **common)  # type: ignore[arg-type]
            elif isinstance(row.get("measurement"), dict):
                m = row["measurement"]
                env = ((doc.get("baselines") or {}).get(problem.key) or {}).get("environment")
                self.add(m=m, kind="results-file", machine=_machine({"environment": env}, m),
                         **common)  # type: ignore[arg-type]

    def _bundle(self, source: str, doc: dict[str, Any]) -> None:
        measured = doc.get("measurements", [])
        for m in measured:
            ok = m.get("status") == "ok" and bool(m.get("ratio"))
            if ok and m["genome_hash"] not in self.genomes:
                _space_genomes(_problem_of_key(m["problem_key"]), self.genomes)
                break
        at = doc.get("updated_at") or doc.get("started_at")
        for order, m in enumerate(measured):
            self.add(m={**m, "measured_at": m.get("measured_at") or at},
                     problem=_problem_of_key(m["problem_key"]),
                     genome=self.genomes.get(m["genome_hash"]), genome_hash=m["genome_hash"],
                     source=source, kind="bundle-results",
                     pass_id=str(doc.get("run_id") or source), machine=_machine(doc, m),
                     order=order, label=m["genome_hash"][:12], document_at=at)


def records_from_evidence(paths: Sequence[Path], root: Path | None = None,
                          ) -> list[CorpusRecord]:
    """Every measurement of the evidence files ``paths``, one record each: study databases
    first (in the order given), then the other files in the order given."""
    reader = _Reader(root or Path.cwd(), {}, [])
    docs = [(p, read_json(p)) for p in paths if not is_study_archive(p)]
    for path, doc in docs:
        _genomes_in(doc, reader.genomes)
        for beside in ("manifest.json", "index.jsonl.xz", "ext-index.jsonl.xz"):
            if (path.parent / beside).exists():
                _genomes_in(_read_beside(path.parent / beside), reader.genomes)
    for path in paths:
        if is_study_archive(path):
            reader.archive(path)
    for path, doc in docs:
        reader.document(path, doc)
    return reader.records


def _read_beside(path: Path) -> Any:
    if path.name.endswith(".jsonl.xz"):
        with lzma.open(path, "rt") as stream:
            return [json.loads(line) for line in stream if line.strip()]
    return read_json(path)


def searches_from_evidence(paths: Sequence[Path], root: Path | None = None,
                           ) -> list[CorpusSearch]:
    """Every TS exhaustive search the study databases among ``paths`` hold, of any verifier
    version (each as the first archive recorded it, with every archive that holds it)."""
    from tsopt.db.store import Store

    reader = _Reader(root or Path.cwd(), {}, [])
    found: dict[tuple[str, str, str, str], CorpusSearch] = {}
    for path in paths:
        if not is_study_archive(path):
            continue
        with study_databases(path) as files:
            for db in files:
                with Store(f"sqlite:///{db}") as store:
                    for search in store.searches():
                        held = found.get(search.key)
                        sources = (held.sources if held else ()) + (reader.name(path),)
                        found[search.key] = CorpusSearch(held.search if held else search,
                                                         tuple(dict.fromkeys(sources)))
    return list(found.values())


def evidence_files(patterns: Sequence[str], root: Path | None = None) -> list[Path]:
    """Paths given on the command line, or :data:`EVIDENCE`'s globs under ``root`` (a glob's
    matches, sorted)."""
    out: list[Path] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            matches = [Path(m) for m in sorted(glob.glob(pattern, root_dir=root))]
        else:
            matches = [Path(pattern)] if root is None or (root / pattern).exists() else []
        if not matches:
            raise UserInputError(f"--evidence {pattern}: matches no file")
        out += [root / m for m in matches] if root is not None else matches
    return out


@contextmanager
def unpacked_evidence(archives: Path = ARCHIVES) -> Iterator[Path]:
    """Every archive in ``archives`` unpacked into a scratch folder (checked against its
    manifest first); yields the folder, which holds ``bench/EXP/...`` as each experiment
    wrote it."""
    with tempfile.TemporaryDirectory(prefix="tsopt-evidence-") as scratch:
        try:
            unpack_all(Path(scratch), archives)
        except EvidenceError as exc:
            raise UserInputError(f"--archives {archives}: {exc}") from None
        yield Path(scratch)


@contextmanager
def evidence_to_read(files: Sequence[str], archives: Path = ARCHIVES,
                     ) -> Iterator[tuple[list[Path], Path]]:
    """The evidence files and the root their names are taken from: ``files`` (globs, from the
    working directory) when given, else :data:`EVIDENCE` in the unpacked ``archives``."""
    if files:
        yield evidence_files(files), Path.cwd()
        return
    with unpacked_evidence(archives) as root:
        yield evidence_files(EVIDENCE, root), root


def corpus_build(evidence: Sequence[Path], out: Path = ROOT_FOLDER,
                 root: Path | None = None) -> dict[str, Any]:
    """Write the corpus of ``evidence`` into ``out``; returns its manifest."""
    for p in evidence:
        if not p.exists():
            raise UserInputError(f"--evidence {p}: no such file")
    base = root or Path.cwd()
    records = records_from_evidence(evidence, base)
    refuse_heldout(records)
    searches = searches_from_evidence(evidence, base)
    reader = _Reader(base, {}, [])
    return write_corpus(records, searches, out, [reader.name(p) for p in evidence])


def refuse_heldout(records: Sequence[CorpusRecord]) -> None:
    """Nothing is derived from a held-out problem (``tsopt/data/heldout.json``): evidence
    measuring one of its shapes (same op and sizes, any dtype) is refused, naming the file."""
    from tsopt.app.heldout import load_heldout

    held = {(item.problem.op, item.problem.dims) for item in load_heldout().problems}
    for record in records:
        if (record.problem.op, record.problem.dims) in held:
            raise UserInputError(f"--evidence {record.source}: measures {record.problem.key}, "
                                 f"a held-out shape (tsopt/data/heldout.json): the corpus "
                                 f"must not hold it")


def corpus_stale(evidence: Sequence[Path], folder: Path = ROOT_FOLDER,
                 root: Path | None = None) -> list[str]:
    """What differs between the corpus in ``folder`` and the one ``evidence`` makes (built in
    a scratch folder, ``folder`` untouched): the tables whose records differ, and the sources
    read or not; empty when it is up to date."""
    try:
        held = read_manifest(folder)
    except ValueError as exc:
        return [str(exc)]
    with tempfile.TemporaryDirectory(prefix="tsopt-corpus-") as scratch:
        made = corpus_build(evidence, Path(scratch), root)
    stale = [f"{table}: {about['records']} records, sha256 {about['sha256'][:12]} (the "
             f"evidence makes {made['tables'][table]['records']}, "
             f"{made['tables'][table]['sha256'][:12]})"
             for table, about in held["tables"].items()
             if about != made["tables"].get(table)]
    if held["sources"] != made["sources"]:
        stale.append("the evidence files differ from the manifest's sources")
    return stale


def load_corpus(folder: Path = ROOT_FOLDER,
                ) -> tuple[list[CorpusRecord], list[CorpusSearch]]:
    """Both tables of the corpus in ``folder``. Raises UserInputError naming what is wrong."""
    try:
        read_manifest(folder)
        return read_records(folder / MEASUREMENTS_FILE), read_searches(folder / SEARCHES_FILE)
    except ValueError as exc:
        raise UserInputError(f"corpus {folder}: {exc}") from None


def from_sources(source: str, sources: Sequence[str] = SHIPPED_SOURCES) -> bool:
    """Whether an evidence file (relative to the repository root) matches ``sources``."""
    return any(fnmatch.fnmatchcase(source, pattern) for pattern in sources)


def current_searches(searches: Sequence[CorpusSearch],
                     sources: Sequence[str] = SHIPPED_SOURCES) -> list[TsSearch]:
    """The searches of ``sources`` keyed as the verifier keys them now (by the model TS
    explores, under this DSL's checker: ``tsopt.verify.verifier.search_version``); others
    can never be read."""
    from tsopt.verify.verifier import search_version

    current = search_version()
    return [found.search for found in searches
            if any(from_sources(source, sources) for source in found.sources)
            and found.search.tool_version == current]


def corpus_products(folder: Path = ROOT_FOLDER, library: Path | None = None,
                    memo: Path | None = None, model: Path | None = None) -> dict[str, int]:
    """Remake the seed library, the TS search memo and the cross-shape cost model from the
    corpus in ``folder`` (the shipped files unless paths are given); what each holds."""
    from tsopt.search.library import PACKAGED, entries_from_records, merge, save_library
    from tsopt.search.transfer import SHIPPED_MODEL, fit_transfer_model
    from tsopt.search.ts_memo import SHIPPED as SHIPPED_MEMO
    from tsopt.search.ts_memo import write_memo

    records, searches = load_corpus(folder)
    entries = merge([], entries_from_records([r for r in records if from_sources(r.source)]))
    save_library(entries, library or PACKAGED)
    kept = current_searches(searches)
    write_memo(kept, memo or SHIPPED_MEMO)
    fitted = fit_transfer_model(records)
    fitted.save(model or SHIPPED_MODEL)
    return {"library entries": len(entries), "TS searches": len(kept),
            "cost model shapes": len(fitted.shapes), "cost model genomes": fitted.rows}
