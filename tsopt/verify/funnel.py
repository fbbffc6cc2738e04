"""The enumerator funnel: raw -> dataflow-legal -> TS-valid -> tsopt-checked -> built.

A space's raw product is far too large to verify one genome at a time (the
copy space has ~10^11 dataflow-legal genomes), so spaces may count their
funnel by *factorised verification* (:meth:`SearchSpace.funnel
<tsopt.core.space.SearchSpace.funnel>`): the real TS verifier judges each
independent factor (each task's placement, the warp/register layout, the
joint schedule) and counts are multiplied out. The factorisation is an
assumption about TS; :func:`check_factorisation` tests it against full
verification of randomly drawn genomes, and the funnel records the agreement.

This module only talks to the space interface: it hands the space a
:class:`CountingJudge` (the verifier, counted), and counts every enumerated
genome itself when the space has no factorisation (:func:`exhaustive_funnel`).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Verdict
from tsopt.core.space import Progress
from tsopt.verify.verifier import VerdictCache, verify_genome

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace

__all__ = ["CountingJudge", "Funnel", "Progress", "check_factorisation", "compute_funnel",
           "exhaustive_funnel"]


@dataclass(frozen=True)
class Funnel:
    """Counts at each gate for one space and problem."""

    space: str
    problem_key: str
    raw: int
    dataflow_legal: int
    ts_valid: int
    tsopt_checked: int
    built: int | None = None
    build_attempted: int = 0
    verifications: int = 0
    verify_seconds: float = 0.0
    seconds: float = 0.0
    method: str = "exhaustive"
    rejections: dict[str, int] = field(default_factory=dict)
    """Rules of the verdicts the verifier actually returned while counting (not weighted)."""
    sample_size: int = 0
    sample_agreement: int = 0

    def rows(self) -> list[tuple[str, int | None]]:
        return [
            ("raw", self.raw),
            ("dataflow-legal", self.dataflow_legal),
            ("TS-valid", self.ts_valid),
            ("tsopt-checked", self.tsopt_checked),
            ("built", self.built),
        ]

    @property
    def verdicts_per_second(self) -> float:
        """Verifier calls per second of verifier time (one process, one core)."""
        return self.verifications / self.verify_seconds if self.verify_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["verdicts_per_second"] = self.verdicts_per_second
        return doc


class CountingJudge:
    """The verifier as a space's :data:`~tsopt.core.space.Judge` (``judge(genome, problem)``),
    with one cache and counters shared by a funnel computation."""

    def __init__(self, space: SearchSpace, cache: VerdictCache | None = None) -> None:
        self.space = space
        self.cache = cache or VerdictCache()
        self.calls = 0
        self.seconds = 0.0
        self.rejections: Counter[str] = Counter()

    def __call__(self, genome: Genome, problem: Problem) -> Verdict:
        self.calls += 1
        start = time.perf_counter()
        verdict = verify_genome(genome, problem, space=self.space, cache=self.cache)
        self.seconds += time.perf_counter() - start
        if not verdict.valid:
            self.rejections[verdict.rule or "?"] += 1
        return verdict


def exhaustive_funnel(
    space: SearchSpace,
    problem: Problem,
    judge: CountingJudge,
    progress: Progress | None,
    limit: int | None = None,
) -> Funnel:
    """Verify every enumerated genome (for small spaces, or with ``limit``)."""
    start = time.perf_counter()
    enumeration = space.enumerate(problem)
    ts_valid = checked = 0
    rejections: Counter[str] = Counter()
    for n, genome in enumerate(enumeration.genomes, 1):
        verdict = judge(genome, problem)
        if verdict.valid or verdict.stage == "tsopt":
            ts_valid += 1
        if verdict.valid:
            checked += 1
        else:
            rejections[verdict.rule or "?"] += 1
        if progress and n % 100 == 0:
            progress("verifying", n, 0)
        if limit is not None and n >= limit:
            break
    return Funnel(
        space.name,
        problem.key,
        enumeration.raw,
        enumeration.dataflow_legal,
        ts_valid,
        checked,
        verifications=judge.calls,
        verify_seconds=judge.seconds,
        seconds=time.perf_counter() - start,
        method="exhaustive" if limit is None else f"first {limit} enumerated",
        rejections=dict(rejections),
    )


def check_factorisation(
    space: SearchSpace,
    problem: Problem,
    sample: Callable[[random.Random], Genome],
    predicted: Callable[[Genome], bool],
    n: int,
    seed: int = 0,
    progress: Progress | None = None,
) -> int:
    """How many of ``n`` random genomes the factorised prediction classifies as full
    verification does (TS-valid or not)."""
    rng = random.Random(seed)
    judge = CountingJudge(space, VerdictCache())
    agree = 0
    for i in range(n):
        genome = sample(rng)
        verdict = judge(genome, problem)
        truth = verdict.valid or verdict.stage == "tsopt"
        agree += truth == predicted(genome)
        if progress:
            progress("checking the factorisation", i + 1, n)
    return agree


def compute_funnel(
    space: SearchSpace,
    problem: Problem,
    *,
    progress: Progress | None = None,
    sample: int = 200,
    cache: VerdictCache | None = None,
) -> Funnel:
    """The space's own (factorised) funnel when it has one, its factorisation checked on
    ``sample`` random genomes verified in full; else the exhaustive one."""
    start = time.perf_counter()
    judge = CountingJudge(space, cache)
    count = space.funnel(problem, judge, progress)
    if count is None:
        return exhaustive_funnel(space, problem, judge, progress)
    checked = agreement = 0
    if sample and count.draw is not None and count.predicted is not None:
        checked = sample
        agreement = check_factorisation(space, problem, count.draw, count.predicted, sample,
                                        progress=progress)
    return Funnel(
        space.name,
        problem.key,
        count.raw,
        count.dataflow_legal,
        count.ts_valid,
        count.tsopt_checked,
        verifications=judge.calls,
        verify_seconds=judge.seconds,
        seconds=time.perf_counter() - start,
        method=count.method,
        rejections=dict(judge.rejections),
        sample_size=checked,
        sample_agreement=agreement,
    )
