"""``tsopt prove``: complete TS proofs for the schedules that win, off the critical path.

TS's exhaustive interleaving search stops at a bound of explored states (1,000,000 in DSL
4.8.1) and, having found nothing by then, passes the schedule: a verdict that is "nothing
found", not "safe" (:data:`tsopt.verify.verifier.BOUNDED_NOTE`). Every persistent GEMM with
two consumer warpgroups reaches that bound. This command runs TS's own search again for the
genomes that matter, under a bound high enough to finish (``--max-states``), and records each
search like any other (``TsSearch``, the ``tsopt_ts_search`` table), where a complete search
replaces the cut one of its key. A verdict whose every search is then complete is no longer
cut: ``tsopt verify``, the verifier's message, the report and an export's manifest say so.

What it proves (one source a call):

- ``--library`` (the default): every genome of the seed library, on its problem;
- ``--study NAME`` (with ``--db``): a study's best ``--top`` candidates; their recorded
  verdicts are settled in the database, so the report no longer counts them cut;
- ``--export DIR``: the kernels of an export (the genomes and problems of its manifest);
- ``--genome FILE`` (``--problem SPEC``): one genome, as ``tsopt verify`` takes it.

``--db`` records the searches in that database (the one ``tsopt export`` then reads);
``--out FILE`` also writes the searches run as a TS search memo file. ``--ship FILE...``
merges complete searches keyed for this DSL's checker from such files (``bench/proofs``
writes one on a machine with many cores) into the shipped proofs, ``tsopt/data/ts_proofs.json``
(:data:`tsopt.search.ts_memo.PROOFS`), which every new study's database starts with. A search
is keyed by the model TS explores (``tsopt.verify.ts_model``), so the proofs stand through
any edit of a space or of the verifier that leaves a schedule's model alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import TsSearch

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.verify.verifier import SearchProof, VerdictCache

DEFAULT_MAX_STATES = 200_000_000
"""``tsopt prove``'s bound: far above what a two-consumer persistent schedule of up to 8
stages needs (6.8M states at 6 stages, growing ~1.5x a stage); a search that still reaches it
is recorded cut at it, and says so."""


@dataclass(frozen=True)
class ProveTarget:
    """A genome to prove on a problem, and where it came from (shown, and in the summary)."""

    genome: Genome
    problem: Problem
    label: str


@dataclass(frozen=True)
class ProveOutcome:
    """What proving one target found: the verdict under the high bound, the searches it ran,
    and the searches a verdict under the ordinary bound now rests on."""

    target: ProveTarget
    valid: bool
    rule: str | None
    proofs: tuple[SearchProof, ...]
    ran: tuple[TsSearch, ...] = ()
    cpu_seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every search the verdict rests on is complete (a schedule with none is not)."""
        return bool(self.proofs) and all(p.complete for p in self.proofs)

    @property
    def states(self) -> int:
        return sum((p.search.states or 0) for p in self.proofs if p.search is not None)


@dataclass
class ProveReport:
    outcomes: list[ProveOutcome] = field(default_factory=list)
    settled: int = 0
    """Recorded verdict rows of a study that are no longer cut."""

    @property
    def incomplete(self) -> list[ProveOutcome]:
        return [o for o in self.outcomes if o.valid and not o.complete]


def library_targets(path: Path | None = None) -> list[ProveTarget]:
    """Every genome of the seed library, on its entry's problem, one per (genome, problem)."""
    from tsopt.search.library import load_library

    seen: dict[tuple[str, str], ProveTarget] = {}
    for entry in load_library(path):
        key = (entry.genome.hash, entry.problem.key)
        seen.setdefault(key, ProveTarget(entry.genome, entry.problem,
                                         f"library {entry.genome.short_hash} {entry.problem}"))
    return list(seen.values())


def study_targets(store: Store, study: str, top: int) -> list[ProveTarget]:
    """A study's best ``top`` candidates by its ranking (what export would choose)."""
    if top < 1:
        raise UserInputError(f"--top {top} must be 1 or more")
    info = store.get_study(study)
    if info is None:
        known = ", ".join(s.name for s in store.list_studies()) or "none"
        raise UserInputError(f"no study named {study!r} in this database (studies: {known})")
    ranked = store.ranked_on_card(study, limit=top)
    if not ranked:
        raise UserInputError(f"study {study!r} has no correct timed candidate to prove")
    return [ProveTarget(r.genome, info.problem, f"{study} rank {r.rank} {r.genome.short_hash}")
            for r in ranked]


def export_targets(directory: Path) -> list[ProveTarget]:
    """The kernels of an export directory (one kernel, or a package's), from its manifests."""
    top = Path(directory) / "manifest.json"
    if not top.is_file():
        raise UserInputError(f"--export {directory}: no manifest.json (not a tsopt export)")

    def read(path: Path) -> dict[str, Any]:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserInputError(f"--export {path}: not readable JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise UserInputError(f"--export {path}: not a tsopt export manifest")
        return doc

    doc = read(top)
    manifests = ([read(Path(directory) / str(k.get("dir", "")) / "manifest.json")
                  for k in doc.get("kernels", [])] if doc.get("package") else [doc])
    targets = []
    for m in manifests:
        try:
            genome, problem = Genome.from_dict(m["genome"]), Problem.from_dict(m["problem"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UserInputError(f"--export {directory}: a manifest without a readable genome "
                                 f"and problem ({exc})") from None
        targets.append(ProveTarget(genome, problem, f"export {genome.short_hash} {problem}"))
    return targets


def genome_target(path: Path, problem: str | None) -> ProveTarget:
    """One genome file (as ``tsopt verify`` reads it) on ``problem`` (default: its op's)."""
    from tsopt.core.genome import MAX_GENOME_BYTES
    from tsopt.core.registry import problem_for
    from tsopt.verify.verifier import check_genome_schema

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_GENOME_BYTES + 1)
        text = data.decode()
    except OSError as exc:
        raise UserInputError(f"--genome {str(path)!r}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UserInputError(f"--genome {str(path)!r} is not text ({exc.reason})") from None
    genome = Genome.from_json(text)
    target = problem_for(problem, genome.space)
    check_genome_schema(genome, target)
    return ProveTarget(genome, target, f"{genome.short_hash} {target}")


def prove_targets(targets: Sequence[ProveTarget], max_states: int, cache: VerdictCache,
                  console: Console, store: Store | None = None,
                  show_progress: bool = True) -> ProveReport:
    """Verify each target with the exhaustive search bounded at ``max_states`` (the searches
    are memoised and recorded by ``cache``'s backing), then read back what an ordinary
    verification rests on. With ``store``, a study's recorded verdicts of the targets that
    are now complete are settled (:meth:`Store.settle_verdict`)."""
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import (
        judge_for,
        proof_of,
        searching_up_to,
        verdict_cache_key,
        verify_genome,
    )

    report = ProveReport()
    spaces: dict[str, Any] = {}
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[now]}"), console=console,
                        disable=not show_progress, transient=False)
    with progress:
        task = progress.add_task("proving", total=len(targets), now="")
        for target in targets:
            name = target.genome.space
            if name not in spaces:
                spaces[name] = get_space(name)
                spaces[name].judge = judge_for(spaces[name], cache)
            space = spaces[name]
            progress.update(task, now=f"{target.label}: searching (up to {max_states:,} states)")
            cache.take_searches()
            start = time.process_time()
            with searching_up_to(max_states):
                deep = verify_genome(target.genome, target.problem, space=space, cache=cache)
            ran = tuple(cache.take_searches())
            # What an ordinary verification (TS's bound) now reads: the searches just run.
            ordinary = verify_genome(target.genome, target.problem, space=space, cache=cache)
            proofs = tuple(proof_of(target.genome, target.problem, space, cache))
            outcome = ProveOutcome(target, deep.valid, deep.rule, proofs, ran,
                                   round(time.process_time() - start, 2))
            report.outcomes.append(outcome)
            if store is not None and ordinary.valid and outcome.complete:
                report.settled += store.settle_verdict(
                    space.name, verdict_cache_key(space, target.genome, target.problem),
                    ordinary)
            progress.console.print(_outcome_line(outcome), highlight=False, soft_wrap=True)
            progress.update(task, advance=1, now="")
    return report


def _outcome_line(outcome: ProveOutcome) -> str:
    label = outcome.target.label
    if not outcome.valid:
        return f"  {label}: rejected ({outcome.rule}): nothing to prove"
    ran = (f"; searched {sum(s.states or 0 for s in outcome.ran):,} states in "
           f"{outcome.cpu_seconds:.1f} CPU-s" if outcome.ran else "; read back")
    if outcome.complete:
        return f"  {label}: complete ({len(outcome.proofs)} searches, {outcome.states:,} states){ran}"
    if not outcome.proofs:
        return f"  {label}: no exhaustive search recorded for this schedule{ran}"
    cut = max((p.search.bounded or 0) for p in outcome.proofs if p.search is not None)
    return f"  {label}: still cut at {cut:,} states, no complete proof{ran}"


def ship(files: Sequence[Path], out: Path | None = None) -> tuple[int, int]:
    """Merge the complete searches of ``files`` (TS search memo files) keyed as the verifier
    keys them now (by the model TS explores, under this DSL's checker:
    :func:`~tsopt.verify.verifier.search_version`) into the shipped proofs; (searches taken,
    searches the proofs file holds). The proofs file keeps only searches of that key."""
    from tsopt.search.ts_memo import PROOFS, load_memo, write_memo
    from tsopt.verify.verifier import search_version

    if not files:
        raise UserInputError("--ship needs at least one searches file")
    target = out or PROOFS
    current = search_version()
    kept = [s for s in load_memo(target) if s.tool_version == current]
    read = [s for path in files for s in _read_searches(path)]
    taken = [s for s in read if s.complete and s.error is None and s.tool_version == current]
    if read and not taken and any(s.tool_version != current for s in read):
        found = sorted({s.tool_version for s in read})
        raise UserInputError(
            f"--ship {', '.join(map(str, files))}: no complete search keyed for this DSL's "
            f"checker ({current}); the files hold {', '.join(found)}: run the searches with "
            "this DSL and this tsopt's model key")
    write_memo(kept + taken, target,
               doc="Complete TS exhaustive searches of the seed library's genomes (tsopt prove "
                   "--ship); see tsopt/search/ts_memo.py")
    return len(taken), len(load_memo(target))


def _read_searches(path: Path) -> list[TsSearch]:
    from tsopt.search.ts_memo import load_memo

    if not Path(path).is_file():
        raise UserInputError(f"--ship {path}: no such file")
    return load_memo(path)


def prove_command(source: str, db: str | None, study: str | None, top: int,
                  export_dir: Path | None, library: Path | None, max_states: int,
                  out: Path | None, ship_files: Sequence[Path], console: Console,
                  genome_file: Path | None = None, problem: str | None = None) -> int:
    """The ``tsopt prove`` command; its exit code (0: every valid target complete, 1: some
    still cut)."""
    from tsopt.search.ts_memo import shipped_searches
    from tsopt.verify.verifier import VerdictCache, search_version

    if ship_files:
        taken, held = ship(ship_files)
        console.print(f"shipped {taken} complete searches; tsopt/data/ts_proofs.json holds {held}",
                      highlight=False)
        return 0
    if max_states < 1:
        raise UserInputError(f"--max-states {max_states}: must be a positive number of states")
    if source == "study" and (db is None or study is None):
        raise UserInputError("--study needs --db (the database the study is in)")
    store = None
    if db is not None:
        from tsopt.db.store import Store

        store = Store(db)
    try:
        if source == "study":
            assert store is not None and study is not None
            targets = study_targets(store, study, top)
        elif source == "export":
            assert export_dir is not None
            targets = export_targets(export_dir)
        elif source == "genome":
            assert genome_file is not None
            targets = [genome_target(genome_file, problem)]
        else:
            targets = library_targets(library)
        if store is not None:
            cache = VerdictCache(lookup=store.find_verdict, judged=store, searches=store)
        else:
            cache = VerdictCache()
        version = search_version()
        for search in shipped_searches():
            if search.tool_version == version:
                cache.keep_search(search)
        console.print(f"proving {len(targets)} genome(s), exhaustive search bound "
                      f"{max_states:,} states", highlight=False)
        report = prove_targets(targets, max_states, cache, console, store)
    finally:
        if store is not None:
            store.close()
    ran = [s for o in report.outcomes for s in o.ran]
    if out is not None:
        from tsopt.search.ts_memo import write_memo

        write_memo(ran, out, doc="TS exhaustive searches run by tsopt prove")
        console.print(f"wrote {len(ran)} searches to {out} (ship them: tsopt prove --ship {out})",
                      highlight=False)
    valid = [o for o in report.outcomes if o.valid]
    console.print(f"{len(valid) - len(report.incomplete)} of {len(valid)} valid genome(s) have "
                  f"a complete proof" + (f"; {report.settled} recorded verdict(s) settled"
                                         if report.settled else ""), highlight=False)
    for outcome in report.incomplete:
        console.print(f"no complete proof: {outcome.target.label} (raise --max-states, or run "
                      "bench/proofs on a machine with more cores)", highlight=False)
    return 1 if report.incomplete else 0
