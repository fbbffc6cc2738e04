"""The verifier: judge a genome before anything is compiled.

First the genome schema: every gene of the space present, of its kind, within its range or
among its choices (:meth:`~tsopt.core.space.SearchSpace.gene_domains`, from the space's knobs);
a genome that fails it is rejected at the ``dataflow`` gate (rule ``dataflow``), the bad
gene named, before any check of the space reads it. A genome carrying a fault-injection gene
(``planted.*``, for tests) is rejected there too (rule ``tsopt.fault_gene``) unless the
process plants faults on purpose (``TSOPT_ALLOW_FAULT_GENES=1``). Then three gates, in order:

1. ``dataflow`` — the space's own cheap check that every value is produced
   before it is used (and that the genome belongs to the space at all).
2. ``ts`` — the TS skeleton is built on the host with a concrete domain of
   at least stages + 2 iterations; constructing the ``TaskManager`` runs the TS
   schedule checks and the exhaustive BFS deadlock/race checker. A concrete
   domain matters: compile-time verification of a runtime-sized loop
   simulates one iteration and misses cadence deadlocks (MEASURED.md).
3. ``tsopt`` — the hazards TS does not model (warp overlap, launch shape,
   stage identity under delayed commit/release, asynchronous consumers, SMEM
   and register feasibility), from the space.

:func:`verify_genome` never raises for an invalid schedule: every outcome is
a :class:`~tsopt.core.records.Verdict`. Three memos, each keyed by what can change it:

- the whole verdict, by genome hash + problem key + arch + :func:`verifier_version` (this
  module, the space's package and the installed DSL), read before anything is judged and
  written after; a database backs it across studies (:class:`JudgedBacking`, the driver
  passes the Store's);
- the TS gate's outcome, by the space's ``verdict_key`` (only the genes that can change it);
- the TS exhaustive deadlock/race checker (the BFS that costs seconds on deep pipelines), by
  the model it explores (:mod:`tsopt.verify.ts_model`: a digest of the checker's own input,
  taken as TS derives it from the skeleton) under the DSL's checker (:func:`search_version`):
  numeric variants of one schedule (register budgets, tile sizes), every problem, and every
  edit of a space that leaves the model alone (a refactor) share one search, while any change
  the checker would see is another search. Not this module's version nor a space's: a search
  depends on nothing else, so the shipped proofs survive edits of the spaces and the
  verifier. TS's other checks run each time. Each search is a
  :class:`~tsopt.core.records.TsSearch`; a database keeps them (:class:`SearchBacking`, the
  Store), so a search run by one build worker or one study is not run again by another: the
  driver sends the known ones along with each candidate (:func:`search_keys`), and records
  what a worker searched.

That checker stops at a bound of explored states (TS's ``max_states``, 1,000,000 in DSL
4.8.1; ``TSOPT_TS_MAX_STATES`` sets another) and, having found no counterexample by then,
passes the schedule with a warning that TS prints and nobody reads. A persistent GEMM with two
consumer warpgroups always reaches it (its interleavings number more than the bound). Such a
verdict is valid but not a complete proof, and it says so: its ``message`` is the
:data:`BOUNDED_NOTE` with the bound, read back by :func:`search_bound`.

The tsopt gate is cheap and runs every time a verdict is not memoised whole.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import os
import re
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, default_problem
from tsopt.core.records import TsSearch, Verdict
from tsopt.core.space import JudgedKey
from tsopt.verify import ts_model

if TYPE_CHECKING:
    from tsopt.core.space import GeneDomain, Judge, SearchSpace

# A genome that does not fit its space's schema does not belong to the space: the dataflow
# gate's own rule (the message names the gene).
SCHEMA_RULE = "dataflow"
FAULT_GENE_RULE = "tsopt.fault_gene"
"""A genome carrying a fault-injection gene (``planted.*``) outside a process that plants
faults on purpose (``TSOPT_ALLOW_FAULT_GENES=1``): rejected at the dataflow gate."""
MAX_VERIFY_DOMAIN = 4096  # iterations of the host check; 256 take a third of a second
TS_MAX_STATES_ENV = "TSOPT_TS_MAX_STATES"
"""Environment variable: the exhaustive checker's bound on explored states (unset: TS's)."""
BOUNDED_NOTE = ("TS's exhaustive interleaving search stopped at its bound of {bound:,} explored "
                "states with no deadlock or race found: not a complete proof (`tsopt prove` "
                "runs it to the end)")
"""The message of a valid verdict whose exhaustive search was cut by its bound."""
_BOUND_PATTERN = re.compile(r"stopped at its bound of ([\d,]+) explored states")


def search_bound(verdict: Verdict) -> int | None:
    """The state bound that cut ``verdict``'s exhaustive search, or None (the search was
    complete, or the verdict is a rejection)."""
    if not verdict.valid or not verdict.message:
        return None
    found = _BOUND_PATTERN.search(verdict.message)
    return int(found.group(1).replace(",", "")) if found else None


_BOUND_OVERRIDE: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "tsopt_ts_max_states", default=None)
"""Set by :func:`searching_up_to` (``tsopt prove``): the bound, whatever the environment says."""


@contextlib.contextmanager
def searching_up_to(max_states: int) -> Iterator[None]:
    """Verify, in this context, with the exhaustive checker bounded at ``max_states`` states
    (``tsopt prove``'s complete searches), whatever ``TSOPT_TS_MAX_STATES`` says."""
    if max_states < 1:
        raise UserInputError(f"--max-states {max_states}: the exhaustive checker's bound must be "
                             "a positive number of states")
    token = _BOUND_OVERRIDE.set(max_states)
    try:
        yield
    finally:
        _BOUND_OVERRIDE.reset(token)


def ts_max_states() -> int | None:
    """The exhaustive checker's state bound this process asks for (None: TS's own default).
    A value that is not a positive integer is refused, naming it."""
    override = _BOUND_OVERRIDE.get()
    if override is not None:
        return override
    raw = os.environ.get(TS_MAX_STATES_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UserInputError(f"{TS_MAX_STATES_ENV}={raw!r}: the exhaustive checker's bound must "
                             "be a positive number of states")
    return value


def _bound_suffix(name_default: bool = True) -> str:
    """The state bound in every key a TS outcome is memoised under: an outcome found under one
    bound says nothing of another. TS's own bound is named too (``ts``), so that a TS gate
    outcome recorded before verdicts said whether their search was cut is not read back
    (``name_default=False`` for a key already versioned by :func:`verifier_version`)."""
    bound = ts_max_states()
    if bound is None:
        return "|states=ts" if name_default else ""
    return f"|states={bound}"

# TS raises ValueError with a precise sentence; these map it to a stable rule name.
TS_RULES: tuple[tuple[str, str], ...] = (
    (r"missing ConsumerRelease after ConsumerWork", "ts.missing_release"),
    (r"missing ProducerCommit after ProducerWork", "ts.missing_commit"),
    (
        r"ConsumerWork group before ConsumerWait|ConsumerWork before ConsumerWait",
        "ts.work_before_wait",
    ),
    (
        r"ProducerWork group before ProducerAcquire|ProducerWork before ProducerAcquire",
        "ts.work_before_acquire",
    ),
    (r"ProducerCommit from \S+ not consumed|not consumed", "ts.unconsumed_commit"),
    (
        r"ProducerAcquire.*without.*ProducerCommit|acquire.*without.*commit",
        "ts.acquire_without_commit",
    ),
    (r"Schedule is blocked|deadlock", "ts.deadlock"),
    (r"race", "ts.race"),
    (r"Too many registers", "ts.register_file"),
    (r"num_registers|registers", "ts.register_rule"),
    (
        r"consumer_group\.size|producer_group\.size|[Cc]ooperative|group size|arrive count",
        "ts.group_size",
    ),
    (r"overlap", "ts.warp_overlap"),
    (r"SMEM|shared memory", "ts.smem"),
)


def classify_ts_error(exc: BaseException) -> str:
    """A stable rule name for a TS rejection (``ts.other`` when no pattern matches)."""
    text = str(exc)
    if isinstance(exc, AssertionError) and not text:
        return "ts.assertion"
    for pattern, rule in TS_RULES:
        if re.search(pattern, text):
            return rule
    return "ts.assertion" if isinstance(exc, AssertionError) else "ts.other"


def _first_lines(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " ..."


@dataclass(frozen=True)
class _TsOutcome:
    valid: bool
    rule: str | None
    message: str | None
    seconds: float
    bounded: int | None = None
    """The state bound that cut the exhaustive search (None: complete, or not run)."""
    rests_on: tuple[TsSearch, ...] = ()
    """The exhaustive searches this outcome rests on (read back or run)."""
    unsearched: int = 0
    """Exhaustive searches a prediction skipped (none memoised settled them)."""


class SearchBacking(Protocol):
    """Where TS's exhaustive searches persist across processes and studies
    (``tsopt.db.store.Store`` implements it; a backing may also offer ``find_searches(space,
    schedule, tool_version)``, every search of a model, which :meth:`VerdictCache.proof_known`
    reads). ``record_search`` keeps a search, replacing one of its key it supersedes."""

    def find_search(self, space: str, schedule: str, aliasing: str,
                    tool_version: str) -> TsSearch | None: ...

    def record_search(self, search: TsSearch) -> None: ...


class ReadOnlySearches:
    """A :class:`SearchBacking`'s searches, read only: a reader that must change nothing it
    reads from (an export) still finds the searches recorded there (``tsopt prove``'s)."""

    def __init__(self, backing: SearchBacking) -> None:
        self._backing = backing

    def find_search(self, space: str, schedule: str, aliasing: str,
                    tool_version: str) -> TsSearch | None:
        return self._backing.find_search(space, schedule, aliasing, tool_version)

    def find_searches(self, space: str, schedule: str, tool_version: str) -> list[TsSearch]:
        find_all = getattr(self._backing, "find_searches", None)
        return list(find_all(space, schedule, tool_version)) if find_all is not None else []

    def record_search(self, search: TsSearch) -> None:
        del search  # memoised by the cache alone


class JudgedBacking(Protocol):
    """Where whole verdicts persist across processes and studies (``tsopt.db.store.Store``
    implements it: ``find_judged`` before verifying, ``record_judged`` after)."""

    def find_judged(self, key: JudgedKey) -> Verdict | None: ...

    def record_judged(self, key: JudgedKey, verdict: Verdict) -> None: ...


class VerdictCache:
    """Verifier memos; thread-safe, with optional persistent backing.

    - TS outcomes by (space, verdict key); ``lookup`` lets a database back them (the driver
      passes the Store's ``find_verdict``).
    - Whole verdicts by :class:`JudgedKey`; ``judged`` (a :class:`JudgedBacking`, the Store)
      shares them across studies: read before verifying, written after.
    - TS exhaustive-checker outcomes by the model they explore (:func:`search_keys`).
    """

    def __init__(
        self,
        lookup: Callable[[str, str], Verdict | None] | None = None,
        judged: JudgedBacking | None = None,
        searches: SearchBacking | None = None,
    ) -> None:
        self._memory: dict[tuple[str, str], _TsOutcome] = {}
        self._judged: dict[JudgedKey, Verdict] = {}
        self._bfs: dict[tuple[str, str, str, str], TsSearch] = {}
        self._ran: list[TsSearch] = []
        self._lock = threading.Lock()
        self._lookup = lookup
        self._backing = judged
        self._searches = searches
        self.hits = 0
        self.misses = 0
        self.judged_hits = 0
        self.verified = 0
        """Verdicts this cache saw judged for real (not found whole in memory or the backing)."""
        self.bfs_hits = 0
        self.bfs_runs = 0
        self.unsaved_searches = 0
        """Searches the backing failed to keep (memoised here all the same)."""

    def find_judged(self, key: JudgedKey) -> Verdict | None:
        with self._lock:
            found = self._judged.get(key)
        if found is None and self._backing is not None:
            found = self._backing.find_judged(key)
            if found is not None:
                with self._lock:
                    self._judged[key] = found
        if found is not None:
            with self._lock:
                self.judged_hits += 1
        return found

    def seed_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        """Hold a verdict judged elsewhere (the database's, sent along to a worker)."""
        with self._lock:
            self._judged[key] = verdict

    def record_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        with self._lock:
            self._judged[key] = verdict
            self.verified += 1
        if self._backing is not None:
            self._backing.record_judged(key, verdict)

    def supersede_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        """Keep ``verdict`` in place of the one held under ``key`` (a cut verdict judged
        again); the backing replaces its row when it can (``Store.supersede_judged``)."""
        with self._lock:
            self._judged[key] = verdict
            self.verified += 1
        replace_row = getattr(self._backing, "supersede_judged", None)
        if replace_row is not None:
            replace_row(key, verdict)
        elif self._backing is not None:
            self._backing.record_judged(key, verdict)

    def bfs_get(self, key: tuple[str, str, str, str], bound: int) -> TsSearch | None:
        """The search memoised under ``key`` (space, schedule, aliasing, tool version), here
        or in the backing, that settles a check under ``bound`` states
        (:meth:`TsSearch.settles`); None: to be searched (counted as a search to run)."""
        found = self.bfs_peek(key, bound)
        with self._lock:
            if found is not None:
                self.bfs_hits += 1
            else:
                self.bfs_runs += 1
        return found

    def bfs_peek(self, key: tuple[str, str, str, str], bound: int) -> TsSearch | None:
        """:meth:`bfs_get` without counting: a reader that will not search on a miss."""
        with self._lock:
            found = self._bfs.get(key)
        if (found is None or not found.settles(bound)) and self._searches is not None:
            kept = self._searches.find_search(*key)
            if kept is not None and (found is None or kept.supersedes(found)):
                found = kept
                with self._lock:
                    self._bfs[key] = found
        return found if found is not None and found.settles(bound) else None

    def proof_known(self, space: str, schedule: str, tool_version: str, bound: int) -> bool:
        """Whether a search of ``schedule`` (a model, :func:`search_keys`) is held, here or in the
        backing, that says more than one cut at ``bound``: a verdict cut at ``bound`` may then
        be judged again to a complete one (the skeleton's TS checks, the search read back)."""
        def better(search: TsSearch) -> bool:
            return search.error is not None or search.bounded is None or search.bounded > bound

        with self._lock:
            held = [s for k, s in self._bfs.items()
                    if (k[0], k[1], k[3]) == (space, schedule, tool_version)]
        if any(map(better, held)):
            return True
        find_all = getattr(self._searches, "find_searches", None)
        return find_all is not None and any(map(better, find_all(space, schedule, tool_version)))

    def _hold(self, search: TsSearch) -> None:
        with self._lock:
            held = self._bfs.get(search.key)
            if held is None or search.supersedes(held) or not held.supersedes(search):
                self._bfs[search.key] = search

    def bfs_put(self, search: TsSearch) -> None:
        """A search this process ran: memoised, kept by the backing, and listed for
        :meth:`take_searches` (a worker sends them to the driver, which records them)."""
        self._hold(search)
        with self._lock:
            self._ran.append(search)
        self._record(search)

    def keep_search(self, search: TsSearch) -> None:
        """A search run elsewhere (a worker's, the database's): memoised (unless one saying
        more is held), and kept by the backing when there is one."""
        self._hold(search)
        self._record(search)

    def _record(self, search: TsSearch) -> None:
        # Called from inside TS's checker: a backing that cannot write (a read-only or busy
        # database) must cost a later search, never turn into this genome's TS verdict.
        if self._searches is None:
            return
        try:
            self._searches.record_search(search)
        except Exception:  # noqa: BLE001 - any failure of the backing: the memo still holds it
            with self._lock:
                self.unsaved_searches += 1

    def take_searches(self) -> list[TsSearch]:
        """The searches run through this cache since the last call (and forget the list)."""
        with self._lock:
            ran, self._ran = self._ran, []
        return ran

    def get(self, space: str, key: str) -> _TsOutcome | None:
        with self._lock:
            found = self._memory.get((space, key))
        if found is None and self._lookup is not None:
            verdict = self._lookup(space, key)
            if verdict is not None and verdict.stage in ("ts", "ok"):
                # Only the TS gate is cached. A stored tsopt rejection passed TS too, but
                # whether its search was cut by the bound is not kept with a rejection, and a
                # valid genome of the key must say so: that gate is run again (its exhaustive
                # search is memoised apart, so that costs TS's cheap checks only).
                ts_ok = verdict.stage == "ok"
                found = _TsOutcome(
                    ts_ok, None if ts_ok else verdict.rule, None if ts_ok else verdict.message, 0.0,
                    search_bound(verdict),
                )
                with self._lock:
                    self._memory[(space, key)] = found
        with self._lock:
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
        return found

    def put(self, space: str, key: str, outcome: _TsOutcome) -> None:
        with self._lock:
            self._memory[(space, key)] = outcome

    def __len__(self) -> int:
        return len(self._memory)


_DEFAULT_CACHE = VerdictCache()

# The schema of each space instance per problem key: listing knobs costs about a millisecond,
# a cached verdict less.
_DOMAINS: weakref.WeakKeyDictionary[SearchSpace, dict[str, dict[str, GeneDomain]]] = (
    weakref.WeakKeyDictionary())
_DOMAINS_LOCK = threading.Lock()
_LISTING = threading.local()


def gene_domains(space: SearchSpace, problem: Problem) -> dict[str, GeneDomain] | None:
    """The space's genome schema for ``problem`` (cached per space instance), or None while
    this thread is listing it: a space may judge genomes of its own making while it lists its
    knobs (recomputing a stale screen), and those are not checked against a schema that does
    not exist yet."""
    with _DOMAINS_LOCK:
        known = _DOMAINS.get(space, {}).get(problem.key)
    if known is not None:
        return known
    listing: set[tuple[int, str]] = _LISTING.__dict__.setdefault("busy", set())
    mark = (id(space), problem.key)
    if mark in listing:
        return None
    listing.add(mark)
    try:
        domains = space.gene_domains(problem)
    finally:
        listing.discard(mark)
    with _DOMAINS_LOCK:
        _DOMAINS.setdefault(space, {})[problem.key] = domains
    return domains


def schema_error(genome: Genome, problem: Problem, space: SearchSpace) -> str | None:
    """Why ``genome`` does not fit ``space``'s genome schema for ``problem`` (naming the bad
    gene), else None."""
    from tsopt.core.space import genome_schema_error

    domains = gene_domains(space, problem)
    if domains is None:
        return None if genome.space == space.name else (
            f"genome is of space {genome.space!r}, not {space.name!r}")
    return genome_schema_error(space.name, domains, genome)


def fault_gene_error(genome: Genome) -> str | None:
    """Why ``genome`` may not carry its fault-injection genes here (naming them), else None:
    they are for tests and demos that set ``TSOPT_ALLOW_FAULT_GENES=1``."""
    from tsopt.core.space import FAULT_GENES_ENV, fault_genes, fault_genes_allowed

    planted = fault_genes(genome)
    if not planted or fault_genes_allowed():
        return None
    shown = ", ".join(f"{name}={genome.genes[name]!r}" for name in planted)
    return (f"fault-injection gene(s) {shown}: they plant a deliberate fault and are accepted "
            f"only where tests plant faults on purpose ({FAULT_GENES_ENV}=1)")


def check_genome_schema(genome: Genome, problem: Problem | None = None,
                        space: SearchSpace | None = None) -> None:
    """Raise UserInputError naming the bad gene when ``genome`` does not fit its space's
    schema (``tsopt verify`` on a hand-written genome: bad input, not a rejected schedule)."""
    from tsopt.core.registry import get_space

    space = space or get_space(genome.space)
    problem = problem or default_problem(space.op)
    space.check(problem)
    error = schema_error(genome, problem, space)
    if error is not None:
        raise UserInputError(f"genome {genome.short_hash}: {error}")


# -- the exhaustive checker, memoised by the schedule it searches --------------------------

_BFS_CONTEXT: contextvars.ContextVar[tuple[VerdictCache, str] | None] = (
    contextvars.ContextVar("tsopt_bfs_memo", default=None))
"""Set while a verification memoises its searches: the memo and the space's name."""
_BFS_PREDICT: contextvars.ContextVar[bool] = contextvars.ContextVar("tsopt_bfs_predict",
                                                                  default=False)
"""Set while a :func:`predicting_judge` judges: an exhaustive search not memoised is skipped."""
_BFS_RUN: contextvars.ContextVar[_SearchLog | None] = contextvars.ContextVar(
    "tsopt_bfs_run", default=None)
"""Set by :func:`run_ts_checks`: the bound to search under, and what each search did."""
_BFS_LISTING: contextvars.ContextVar[list[str | None] | None] = contextvars.ContextVar(
    "tsopt_bfs_listing", default=None)
"""Set by :func:`search_keys`: each search a skeleton would run is keyed here, none run."""
_BFS_PATCH_LOCK = threading.Lock()
_BFS_PATCHED: list[bool] = []


@dataclass
class _SearchLog:
    """The searches of one skeleton build: the bound asked for, the domain, the states TS
    explored, the bound that cut a search, and the searches the verdict rests on."""

    max_states: int | None
    domain: int = 0
    bounded: int | None = None
    states: int = 0
    rests_on: list[TsSearch] = field(default_factory=list)
    unsearched: int = 0
    """Searches a prediction skipped (none memoised that settles them)."""


def _install_bfs_memo() -> None:
    """Route TS's exhaustive checker through the memo of the calling thread's verification
    (a context variable; outside :func:`run_ts_checks` the checker runs as TS wrote it). A
    search is keyed by the model it explores (:mod:`tsopt.verify.ts_model`)."""
    with _BFS_PATCH_LOCK:
        if _BFS_PATCHED:
            return
        from cutlass.experimental.task_scheduling import exhaustive_checker
        from cutlass.experimental.task_scheduling.task_manager import TaskManager

        original = TaskManager._exhaustive_aliasing_races
        search = exhaustive_checker.check_all_interleavings

        def bounded(*args: Any, **kwargs: Any) -> Any:
            # TS imports the checker from its module at each call, so this sees every search.
            return _bounded_search(search, *args, **kwargs)

        def memoised(self: Any) -> None:
            _memoised_races(original, self)

        exhaustive_checker._tsopt_original_search = search  # type: ignore[attr-defined]
        exhaustive_checker.check_all_interleavings = bounded
        TaskManager._exhaustive_aliasing_races = memoised  # type: ignore[method-assign]
        _BFS_PATCHED.append(True)


def _bounded_search(search: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """TS's interleaving search under the calling verification's bound, its states counted
    (or the model captured, when :mod:`~tsopt.verify.ts_model` is keying one)."""
    if ts_model.capturing():
        return ts_model.capture_call(search, *args, **kwargs)
    log = _BFS_RUN.get()
    if log is None:
        return search(*args, **kwargs)
    if log.max_states is not None:
        kwargs["max_states"] = log.max_states
    result = search(*args, **kwargs)
    log.states += int(result.states_explored)
    if result.hit_state_limit:
        bound = kwargs.get("max_states", _ts_default_bound())
        log.bounded = max(log.bounded or 0, int(bound))
    return result


def _memoised_races(original: Callable[[Any], None], manager: Any) -> None:
    """TS's exhaustive aliasing-race search of ``manager``, read from the memo when a search
    of its model is known, else run and recorded (a prediction never runs one)."""
    listing = _BFS_LISTING.get()
    if listing is not None:
        listing.append(ts_model.model_digest(manager, original))
        return
    context = _BFS_CONTEXT.get()
    predicting = _BFS_PREDICT.get()
    log = _BFS_RUN.get()
    model = ts_model.model_digest(manager, original) if context is not None else None
    if context is None or model is None:  # no memo, or a model it cannot key
        if not predicting:
            original(manager)  # searched, not memoised
        elif log is not None and context is not None:
            log.unsearched += 1
        return
    cache, space_name = context
    full = (space_name, model, ts_model.MODEL_ALIASING, ts_model.search_version())
    bound = (log.max_states if log is not None and log.max_states is not None
             else _ts_default_bound())
    known = cache.bfs_get(full, bound)
    if known is not None:
        if log is not None:
            log.rests_on.append(known)
            if known.bounded is not None:
                log.bounded = max(log.bounded or 0, known.bounded)
        if known.error is not None:
            raise ValueError(known.error)
        return
    if predicting:
        if log is not None:
            log.unsearched += 1
        return  # a prediction: the candidate's own verification runs the search
    before = log.bounded if log is not None else None
    states_before = log.states if log is not None else 0
    start = time.perf_counter()

    def ran(**outcome: Any) -> TsSearch:
        record = TsSearch(*full, seconds=round(time.perf_counter() - start, 4),
                          domain=log.domain if log is not None else 0,
                          states=log.states - states_before if log is not None else None,
                          max_states=bound, **outcome)
        if log is not None:
            log.rests_on.append(record)
        cache.bfs_put(record)
        return record

    try:
        original(manager)
    except ValueError as exc:
        ran(error=str(exc))
        raise
    ran(bounded=log.bounded if log is not None and log.bounded != before else None)


def _ts_default_bound() -> int:
    """TS's own ``max_states`` default (1,000,000 in DSL 4.8.1), read from its signature
    (through the verifier's wrapper, to TS's function)."""
    import inspect

    from cutlass.experimental.task_scheduling import exhaustive_checker

    original = getattr(exhaustive_checker, "_tsopt_original_search", None)
    target = original if original is not None else exhaustive_checker.check_all_interleavings
    default = inspect.signature(target).parameters["max_states"].default
    return int(default)


def search_version() -> str:
    """The ``tool_version`` of the searches the verifier keeps and reads: the DSL checker's
    (:func:`tsopt.verify.ts_model.search_version`), not this module's or a space's."""
    return ts_model.search_version()


_KEYS: weakref.WeakKeyDictionary[SearchSpace, dict[tuple[Any, ...], tuple[str, ...]]] = (
    weakref.WeakKeyDictionary())
_KEYS_LOCK = threading.Lock()


def search_keys(space: SearchSpace, genome: Genome, problem: Problem,
                domain: int | None = None) -> list[tuple[int, str]]:
    """The ``schedule`` of every :class:`~tsopt.core.records.TsSearch` verifying ``genome``
    would read, with its domain, at each domain the verifier searches (its own, or
    ``domain``, then the extra ones): the skeleton is built and each exhaustive search it
    would run is keyed by its model (:mod:`tsopt.verify.ts_model`), none run. A skeleton TS
    rejects before searching, or a model that cannot be keyed, gives none. Memoised per
    space instance."""
    try:
        domains = _search_domains(space, genome, problem, domain)
    except (ValueError, KeyError, TypeError, AssertionError):
        return []
    found: list[tuple[int, str]] = []
    for n in domains:
        found += [(n, model) for model in _models_at(space, genome, problem, n)]
    return found


def _models_at(space: SearchSpace, genome: Genome, problem: Problem, n: int) -> tuple[str, ...]:
    mark = (genome.hash, problem.key, n, space.target_device().sm_count)
    with _KEYS_LOCK:
        known = _KEYS.get(space, {}).get(mark)
    if known is not None:
        return known
    _install_bfs_memo()
    listing: list[str | None] = []
    token = _BFS_LISTING.set(listing)
    try:
        with (contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()),
              warnings.catch_warnings()):
            warnings.simplefilter("ignore")
            space.build_skeleton(genome, problem, n)
    except (ValueError, AssertionError, TypeError, KeyError, IndexError):
        pass  # TS's verdict is the verifier's to give; what was keyed before it stands
    finally:
        _BFS_LISTING.reset(token)
    models = tuple(m for m in listing if m is not None)
    with _KEYS_LOCK:
        held = _KEYS.setdefault(space, {})
        if len(held) > 4096:
            held.clear()
        held[mark] = models
    return models


@contextlib.contextmanager
def _bfs_memo(cache: VerdictCache | None, space: SearchSpace) -> Iterator[None]:
    if cache is None:
        yield
        return
    _install_bfs_memo()
    token = _BFS_CONTEXT.set((cache, space.name))
    try:
        yield
    finally:
        _BFS_CONTEXT.reset(token)


def run_ts_checks(space: SearchSpace, genome: Genome, problem: Problem, domain: int,
                  memo: VerdictCache | None = None) -> _TsOutcome:
    """Build the TS skeleton on the host; TS's own verdict, never an exception. With ``memo``,
    the exhaustive checker's outcome is memoised by the model it explores."""
    start = time.perf_counter()
    sink = io.StringIO()
    log = _SearchLog(ts_max_states(), domain)
    _install_bfs_memo()  # the bound and the record of a cut search live in the patch
    token = _BFS_RUN.set(log)
    try:
        # TS prints tables and warnings while it checks (its warning of a search cut by the
        # bound among them); the log keeps that fact, the verdict says it.
        with (
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
            warnings.catch_warnings(),
            _bfs_memo(memo, space),
        ):
            warnings.simplefilter("ignore")
            space.build_skeleton(genome, problem, domain)
    except (ValueError, AssertionError, TypeError, KeyError, IndexError) as exc:
        return _TsOutcome(
            False,
            classify_ts_error(exc),
            _first_lines(f"{type(exc).__name__}: {exc}"),
            time.perf_counter() - start,
        )
    finally:
        _BFS_RUN.reset(token)
    return _TsOutcome(True, None, None, time.perf_counter() - start, log.bounded,
                      tuple(log.rests_on), log.unsearched)


def verify_genome(
    genome: Genome,
    problem: Problem | None = None,
    *,
    domain: int | None = None,
    space: SearchSpace | None = None,
    cache: VerdictCache | None = None,
) -> Verdict:
    """Judge ``genome`` for ``problem``: dataflow, then TS, then tsopt's checks.

    Returns a :class:`Verdict`; raises only for input that is not a genome of a
    known space (``UserInputError``) or a problem the space cannot take
    (``ProblemError``), never for an invalid schedule.
    """
    from tsopt.core.registry import get_space
    from tsopt.core.space import fault_genes

    space = space or get_space(genome.space)
    problem = problem or default_problem(space.op)
    space.check(problem)
    cache = cache if cache is not None else _DEFAULT_CACHE
    start = time.perf_counter()
    # A genome that plants a fault is judged by this process's setting: never memoised whole.
    key = None if fault_genes(genome) else judged_key(space, genome, problem, domain)
    known = cache.find_judged(key) if key is not None else None
    if known is not None and not _proof_may_be_known(space, genome, problem, domain, cache,
                                                      search_bound(known)):
        return replace(known, genome_hash=genome.hash, cached=True,
                       seconds=time.perf_counter() - start)
    verdict = _judge(genome, problem, domain, space, cache, start)
    if key is not None:
        if known is None:
            cache.record_judged(key, verdict)
        else:  # a verdict cut by the bound, judged again now that a complete search is known
            cache.supersede_judged(key, verdict)
    return verdict


def _search_domains(space: SearchSpace, genome: Genome, problem: Problem,
                    domain: int | None) -> list[int]:
    """The domains the verifier runs TS at for ``genome``: its own, then the extra ones."""
    n = domain if domain is not None else space.verify_domain(genome)
    return [n] + sorted(set(space.extra_verify_domains(genome, problem)) - {n})


def _proof_may_be_known(space: SearchSpace, genome: Genome, problem: Problem,
                        domain: int | None, cache: VerdictCache, bound: int | None) -> bool:
    """Whether a verdict of ``genome`` cut at ``bound`` states may now be judged complete: a
    search of one of its schedules (at its domains) that says more is held. A memoised cut
    verdict is then judged again (TS's checks on the skeleton, the searches read back), so a
    complete search recorded later (``tsopt prove``) supersedes it everywhere it is read."""
    if bound is None:
        return False
    version = search_version()
    return any(cache.proof_known(space.name, model, version, bound)
               for _, model in search_keys(space, genome, problem, domain))


def _judge(genome: Genome, problem: Problem, domain: int | None, space: SearchSpace,
           cache: VerdictCache, start: float) -> Verdict:
    error = schema_error(genome, problem, space)
    if error is not None:
        return Verdict.reject(
            genome.hash, "dataflow", SCHEMA_RULE, error, time.perf_counter() - start
        )
    error = fault_gene_error(genome)
    if error is not None:
        return Verdict.reject(
            genome.hash, "dataflow", FAULT_GENE_RULE, error, time.perf_counter() - start
        )
    error = space.dataflow_error(genome)
    if error is not None:
        return Verdict.reject(
            genome.hash, "dataflow", "dataflow", error, time.perf_counter() - start
        )

    n = domain if domain is not None else space.verify_domain(genome)
    if n < 1:
        raise UserInputError(f"--domain {n} must be at least 1")
    if n > MAX_VERIFY_DOMAIN:
        raise UserInputError(f"--domain {n}: at most {MAX_VERIFY_DOMAIN} iterations (the check "
                             "grows with the domain; stages + 2 suffice)")
    outcome, cached = _ts_gate(space, genome, problem, n, cache)
    if outcome.valid:
        # A per-work-tile domain: its shortest run must pass TS too (no domain twice).
        for extra in sorted(set(space.extra_verify_domains(genome, problem)) - {n}):
            more, _ = _ts_gate(space, genome, problem, extra, cache)
            if not more.valid:
                outcome = replace(more, message=f"{more.message} (at a K domain of {extra}, "
                                                f"the kernel's shortest work-tile run)")
                break
            if more.bounded is not None and outcome.bounded is None:
                outcome = replace(outcome, bounded=more.bounded)
    if not outcome.valid:
        assert outcome.rule is not None and outcome.message is not None
        return Verdict(
            genome.hash,
            False,
            "ts",
            outcome.rule,
            outcome.message,
            time.perf_counter() - start,
            n,
            cached,
        )

    findings = space.tsopt_checks(genome, problem)
    seconds = time.perf_counter() - start
    if findings:
        first = findings[0]
        message = first.message
        if len(findings) > 1:
            message += (
                f" (and {len(findings) - 1} more: " + ", ".join(f.rule for f in findings[1:]) + ")"
            )
        return Verdict(genome.hash, False, "tsopt", first.rule, message, seconds, n, cached)
    note = None if outcome.bounded is None else BOUNDED_NOTE.format(bound=outcome.bounded)
    return Verdict(genome.hash, True, "ok", None, note, seconds, n, cached)


def _ts_gate(space: SearchSpace, genome: Genome, problem: Problem, n: int,
             cache: VerdictCache) -> tuple[_TsOutcome, bool]:
    """TS's outcome for ``genome`` at a domain of ``n`` (memoised), and whether it was known."""
    key = f"{space.verdict_key(genome, problem)}|domain={n}{_bound_suffix()}"
    outcome = cache.get(space.name, key)
    if outcome is not None and not _proof_may_be_known(space, genome, problem, n, cache,
                                                        outcome.bounded):
        return outcome, True
    outcome = run_ts_checks(space, genome, problem, n, memo=cache)
    cache.put(space.name, key, outcome)
    return outcome, False


_VERSIONS: dict[type, str] = {}


def _sources(folder: Path) -> Iterator[bytes]:
    for path in sorted(folder.glob("*.py")):
        yield path.name.encode()
        yield path.read_bytes()


def verifier_version(space: SearchSpace) -> str:
    """What a verdict's rules depend on besides the genome and problem: this module, the
    ground's space interface, the space's package and the shared space code (its kernel,
    configuration, checks), the installed DSL. A whole verdict is memoised under it, so an
    edited check or a new DSL never reuses an old verdict. Once per space class a process."""
    kind = type(space)
    if kind not in _VERSIONS:
        import importlib.metadata
        import sys

        from tsopt.core import space as space_module

        digest = hashlib.sha256(Path(__file__).read_bytes())
        digest.update(Path(space_module.__file__ or "").read_bytes())
        package = Path(sys.modules[kind.__module__].__file__ or "").parent
        for folder in (package, package.parent / "common"):
            for chunk in _sources(folder):
                digest.update(chunk)
        try:
            digest.update(importlib.metadata.version("nvidia-cutlass-dsl").encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(b"dsl:unknown")
        _VERSIONS[kind] = digest.hexdigest()[:16]
    return _VERSIONS[kind]


def judged_key(space: SearchSpace, genome: Genome, problem: Problem,
               domain: int | None = None) -> JudgedKey:
    """The key a whole verdict of ``genome`` is memoised under (a domain other than the
    space's own is part of the problem key)."""
    from tsopt.core.devices import default_profile
    from tsopt.core.dsl_env import DEFAULT_ARCH

    problem_key = problem.key if domain is None else f"{problem.key}|domain={domain}"
    problem_key += _bound_suffix(name_default=False)
    arch = os.environ.get("CUTE_DSL_ARCH") or DEFAULT_ARCH
    # tsopt's checks read the SM count (stream-K's waves); the default's verdicts keep the
    # key they had before device profiles existed.
    sms = space.target_device().sm_count
    target = arch if sms == default_profile(arch).sm_count else f"{arch}/{sms}SM"
    return JudgedKey(space.name, genome.hash, problem_key, target, verifier_version(space))


def verdict_cache_key(
    space: SearchSpace, genome: Genome, problem: Problem, domain: int | None = None
) -> str:
    """The key under which the TS outcome of ``genome`` is cached (and stored in the DB)."""
    n = domain if domain is not None else space.verify_domain(genome)
    return f"{space.verdict_key(genome, problem)}|domain={n}{_bound_suffix()}"


class _PredictionCache(VerdictCache):
    """The memo of a :func:`predicting_judge`: reads what ``real`` knows (whole verdicts, TS
    outcomes, exhaustive searches), keeps what it predicts to itself, so that a prediction
    never stands in for a verdict."""

    def __init__(self, real: VerdictCache) -> None:
        super().__init__(lookup=real._lookup)
        self._real = real

    def find_judged(self, key: JudgedKey) -> Verdict | None:
        found = super().find_judged(key)
        return found if found is not None else self._real.find_judged(key)

    def bfs_get(self, key: tuple[str, str, str, str], bound: int) -> TsSearch | None:
        known = super().bfs_get(key, bound)
        return known if known is not None else self._real.bfs_peek(key, bound)

    def proof_known(self, space: str, schedule: str, tool_version: str, bound: int) -> bool:
        return (super().proof_known(space, schedule, tool_version, bound)
                or self._real.proof_known(space, schedule, tool_version, bound))

    def bfs_put(self, search: TsSearch) -> None:
        self.keep_search(search)  # a prediction never searches; were it to, kept here only


@dataclass(frozen=True)
class SearchProof:
    """One exhaustive TS search a verdict rests on, as an export's manifest states it: the
    domain searched and the search memoised (None: none recorded settles it)."""

    domain: int
    search: TsSearch | None

    @property
    def complete(self) -> bool:
        return self.search is not None and self.search.complete

    def to_dict(self) -> dict[str, Any]:
        found = self.search
        return {"domain": self.domain, "recorded": found is not None,
                "complete": self.complete,
                "states": found.states if found is not None else None,
                "bounded": found.bounded if found is not None else None,
                "max_states": found.max_states if found is not None else None,
                "error": found.error if found is not None else None,
                "schedule": found.schedule if found is not None else None,
                "aliasing": found.aliasing if found is not None else None,
                "tool_version": found.tool_version if found is not None else None,
                "seconds": found.seconds if found is not None else None}


def proof_of(genome: Genome, problem: Problem, space: SearchSpace,
             cache: VerdictCache) -> list[SearchProof]:
    """The exhaustive searches ``genome``'s TS verdict for ``problem`` rests on, at each domain
    the verifier searches, read from ``cache`` (and its backing) without searching: TS's
    cheap checks run on the skeleton, a search not memoised is named (``search=None``) and
    never run. A space that keys no search, or a schedule TS rejects before searching, has
    none."""
    proofs: list[SearchProof] = []
    token = _BFS_PREDICT.set(True)
    try:
        for n in _search_domains(space, genome, problem, None):
            outcome = run_ts_checks(space, genome, problem, n, memo=cache)
            if not outcome.valid:
                break
            proofs += [SearchProof(n, found) for found in outcome.rests_on]
            proofs += [SearchProof(n, None)] * outcome.unsearched
    finally:
        _BFS_PREDICT.reset(token)
    return proofs


def predicting_judge(space: SearchSpace, cache: VerdictCache | None = None) -> Judge:
    """A fast :data:`~tsopt.core.space.Judge` for proposals (the legal-set factors, the seed
    library's genomes): the verifier's gates as :func:`judge_for` runs them, except TS's
    exhaustive interleaving search where ``cache`` has not memoised it (seconds to minutes on
    a deep persistent pipeline, in the searching process, with the GPU waiting). Its verdicts
    are predictions: kept in a memo of their own, never recorded; every candidate built is
    judged again in full (:func:`verify_genome`) by its worker."""
    local = _PredictionCache(cache if cache is not None else VerdictCache())

    def judge(genome: Genome, problem: Problem) -> Verdict:
        _install_bfs_memo()  # the skip lives in the patched checker
        token = _BFS_PREDICT.set(True)
        try:
            return verify_genome(genome, problem, space=space, cache=local)
        finally:
            _BFS_PREDICT.reset(token)

    return judge


def judge_for(space: SearchSpace, cache: VerdictCache | None = None) -> Judge:
    """:func:`verify_genome` as the :data:`~tsopt.core.space.Judge` a space is injected with
    (``space.judge = judge_for(space)``): the space may not import the verifier itself."""
    verdicts = cache if cache is not None else VerdictCache()

    def judge(genome: Genome, problem: Problem) -> Verdict:
        return verify_genome(genome, problem, space=space, cache=verdicts)

    return judge
