"""Verify and build one candidate: the unit of CPU work, in process, in a build process or
in a Ray task.

:func:`evaluate` takes an :class:`EvaluateRequest` (plain data: the space's
import target, the genome as JSON, the problem, the arch, the artifact cache)
and returns an :class:`Evaluation` (the :class:`~tsopt.core.records.Verdict`, the
key it is cached under, the :class:`~tsopt.core.records.BuildResult` when the
genome was valid, and what each step cost). It never touches the database:
the driver alone records (SQLite has one writer), and a worker on another
machine may not reach the database at all. So the driver looks up a cached TS
verdict first and sends it along (``known_ts``), with the exhaustive TS searches the
database keeps for the genome's schedule (``known_searches``); the evaluation returns the
searches it ran (``searches``) for the driver to record. The artifact cache is a
directory that the builder consults itself.

The first thing :func:`evaluate` does is :func:`tsopt.core.dsl_env.ensure_arch`,
before anything imports the CUTLASS DSL: a Ray worker is a fresh process.

:class:`CandidatePipeline` is the older in-process API (verify, then build,
recording each) that tests and the funnel use.
"""

from __future__ import annotations

import importlib
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, TsSearch, Verdict

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store
    from tsopt.verify.verifier import VerdictCache


@dataclass(frozen=True)
class EvaluateRequest:
    """One candidate to verify and (when valid) build; plain data, picklable and JSON-able."""

    space_target: str  # "module:Class" of the search space (search_spaces.SPACES)
    genome_json: str
    problem: dict[str, Any]
    arch: str
    cache_dir: str
    known_ts: dict[str, Any] | None = None  # a cached Verdict (to_dict) for the TS gate
    # The whole verdict of this genome the database keeps (Store.find_judged), when it has one.
    known_verdict: dict[str, Any] | None = None
    # TsSearch.to_dict()s the database keeps for this genome's schedule (any study's).
    known_searches: tuple[dict[str, Any], ...] = ()
    build: bool = True
    # Build in a child process of its own (under the memory limit, an abort contained); a Ray
    # task builds in its worker instead, which Ray replaces when it dies.
    isolate_build: bool = True
    # The device profile's id (tsopt.core.devices) the verdict and the build are for; "":
    # the arch's default.
    device: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` found: the verdict (and its cache key), the build if valid."""

    verdict: Verdict
    verdict_key: str
    build: BuildResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # verify, compile, export, link,
    # total (wall) and cpu (CPU seconds of the process and the linker)
    pid: int = 0
    searches: tuple[TsSearch, ...] = ()  # the exhaustive TS searches this evaluation ran
    node: str = ""  # where it ran: the Ray node id in a Ray task, else the host name

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.to_dict(), "verdict_key": self.verdict_key,
                "build": self.build.to_dict() if self.build else None,
                "seconds": dict(self.seconds), "pid": self.pid,
                "searches": [x.to_dict() for x in self.searches], "node": self.node}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Evaluation:
        return cls(Verdict.from_dict(doc["verdict"]), doc["verdict_key"],
                   BuildResult.from_dict(doc["build"]) if doc.get("build") else None,
                   dict(doc.get("seconds") or {}), int(doc.get("pid") or 0),
                   tuple(TsSearch.from_dict(x) for x in doc.get("searches") or ()),
                   str(doc.get("node") or ""))


_SPACES: dict[str, SearchSpace] = {}
_VERDICTS: dict[str, VerdictCache] = {}


def load_space(target: str) -> SearchSpace:
    """The search space ``module:Class`` (one instance per process)."""
    space = _SPACES.get(target)
    if space is None:
        module_name, _, cls_name = target.partition(":")
        space = getattr(importlib.import_module(module_name), cls_name)()
        from tsopt.verify.verifier import judge_for

        space.judge = judge_for(space)  # its screens verify with it (a space imports no verifier)
        _SPACES[target] = space
    return space


def space_target(name: str) -> str:
    """The ``module:Class`` import target of a registered space (UserInputError if unknown)."""
    from tsopt.core.registry import space_entry

    return space_entry(name).target


def verdict_key_of(space: SearchSpace, genome: Genome, problem: Problem) -> str | None:
    """The TS verdict cache key of ``genome``, or None when it fails the dataflow gate (or
    its genes cannot even be read: the verifier will say why)."""
    from tsopt.verify.verifier import verdict_cache_key

    if space.dataflow_error(genome) is not None:
        return None
    try:
        return verdict_cache_key(space, genome, problem)
    except (ValueError, KeyError, TypeError, AssertionError):
        return None


def judged_verdict_key(space: SearchSpace, genome: Genome, problem: Problem,
                       verdict: Verdict) -> str:
    """The verdict-table key :func:`evaluate` records ``verdict`` of ``genome`` under."""
    from tsopt.verify.verifier import verdict_cache_key

    return (verdict_cache_key(space, genome, problem, verdict.domain)
            if verdict.stage != "dataflow" else f"dataflow:{genome.hash}")


def evaluate(request: EvaluateRequest) -> Evaluation:
    """Verify the genome; build it when valid (and ``request.build``). Never raises for a bad
    candidate: a rejection is the verdict, a failed build a BuildResult with ``error``."""
    from tsopt.core.dsl_env import ensure_arch

    ensure_arch(request.arch)  # before the space's module imports the DSL
    from tsopt.build.builder import build_isolated, build_limited, build_memory_limit
    from tsopt.core.space import fault_genes
    from tsopt.verify.verifier import VerdictCache, judged_key, verdict_cache_key, verify_genome

    start = time.perf_counter()
    cpu_start = _cpu_seconds()
    from tsopt.core.devices import resolve_profile

    space = load_space(request.space_target)
    space.device = resolve_profile(request.device or None, request.arch)
    genome = Genome.from_json(request.genome_json)
    problem = Problem.from_dict(request.problem)
    cache = _VERDICTS.setdefault(request.space_target, VerdictCache())
    if request.known_verdict is not None and not fault_genes(genome):
        # The whole verdict of this very genome (this verifier version), kept by the
        # database: nothing to verify.
        known = Verdict.from_dict(request.known_verdict)
        if known.genome_hash == genome.hash:
            cache.seed_judged(judged_key(space, genome, problem), known)
    if request.known_ts is not None:
        known = Verdict.from_dict(request.known_ts)
        key = verdict_key_of(space, genome, problem)
        if key is not None:
            # The TS gate's outcome only: tsopt's own checks run again (they are cheap).
            outcome = VerdictCache(lookup=lambda _s, k: known if k == key else None).get(
                space.name, key)
            if outcome is not None:
                cache.put(space.name, key, outcome)
    for doc in request.known_searches:
        cache.keep_search(TsSearch.from_dict(doc))
    cache.take_searches()  # a list left by an evaluation that failed half-way is not ours
    verdict = verify_genome(genome, problem, space=space, cache=cache)
    searches = tuple(cache.take_searches())
    verify_s = time.perf_counter() - start
    key = (verdict_cache_key(space, genome, problem, verdict.domain)
           if verdict.stage != "dataflow" else f"dataflow:{genome.hash}")
    seconds = {"verify": verify_s}
    build = None
    if verdict.valid and request.build:
        builder = build_isolated if request.isolate_build else build_limited
        build = builder(space, genome, problem, request.arch, Path(request.cache_dir),
                        build_memory_limit(), space.device)
        if not build.cache_hit:
            seconds.update(compile=build.compile_seconds, export=build.export_seconds,
                           link=build.link_seconds)
    seconds["total"] = time.perf_counter() - start
    seconds["cpu"] = _cpu_seconds() - cpu_start
    return Evaluation(verdict, key, build, seconds, os.getpid(), searches, socket.gethostname())


def failure_text(exc: BaseException) -> str:
    """One line for an evaluation whose worker failed for good (a Ray task, a build process)."""
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{kind}: {first}"[:500]


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the linker)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CandidatePipeline:
    """Verify and build one candidate in this process, recording each outcome."""

    def __init__(self, store: Store, space: SearchSpace, problem: Problem, arch: str,
                 study: str, cache_dir: Path) -> None:
        from tsopt.verify.verifier import VerdictCache

        self.store = store
        self.space = space
        self.problem = problem
        self.arch = arch
        self.study = study
        self.cache_dir = cache_dir
        self.cache = VerdictCache(lookup=store.find_verdict, searches=store)

    def verify(self, candidate_id: int, genome: Genome) -> Verdict:
        from tsopt.verify.verifier import verdict_cache_key, verify_genome

        verdict = verify_genome(genome, self.problem, space=self.space, cache=self.cache)
        key = (verdict_cache_key(self.space, genome, self.problem, verdict.domain)
               if verdict.stage != "dataflow" else f"dataflow:{genome.hash}")
        self.store.record_verdict(candidate_id, self.space.name, key, verdict)
        return verdict

    def build(self, candidate_id: int, genome: Genome) -> BuildResult:
        from tsopt.build.builder import build_candidate, cache_key

        key = cache_key(genome, self.problem, self.arch, self.space.source_digest(),
                        self.space.device)
        known = self.store.find_build(key)
        if (known is not None and known.ok and known.artifact_dir
                and Path(known.artifact_dir).exists()):
            result = BuildResult(**{**known.to_dict(), "cache_hit": True})
        else:
            result = build_candidate(self.space, genome, self.problem, self.arch, self.cache_dir,
                                     device=self.space.device)
        self.store.record_build(candidate_id, result)
        return result
