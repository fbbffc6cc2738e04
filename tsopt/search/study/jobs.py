"""The candidates of one run, and the one place their trials are told.

A :class:`Job` is a candidate this run evaluates (its trial, or none for the seed, and what
is known of it so far); a :class:`ForeignWait` is a trial whose genome a live run of another
process holds. :class:`Teller` tells Optuna an outcome (:func:`tsopt.search.outcomes.tell`)
and counts it, for the summary and for ``--patience``; every stage tells through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.genome import Genome
from tsopt.core.records import BuildResult, Measurement, Verdict
from tsopt.search.outcomes import Outcome, tell

if TYPE_CHECKING:
    from tsopt.db.views import CandidateInfo
    from tsopt.search.progress import TuneStats
    from tsopt.search.study.budgets import Budgets

POLL_S = 0.2  # how long a turn of the loop waits on a pool with nothing else to do


@dataclass
class Job:
    """One candidate of this run: its trial (None for the seed) and what is known so far."""

    genome: Genome
    candidate_id: int
    origin: str
    trial: Any = None
    verdict: Verdict | None = None
    build: BuildResult | None = None
    measurement: Measurement | None = None
    outcome: Outcome | None = None
    awaiting: bool = False
    waiters: list[Any] = field(default_factory=list)  # duplicate trials asked meanwhile
    queued_at: float = 0.0  # monotonic: when it last joined the queue for a build slot

    @property
    def number(self) -> int | None:
        return None if self.trial is None else int(self.trial.number)

    @property
    def label(self) -> str:
        return "seed" if self.trial is None else f"trial {self.trial.number}"


@dataclass
class ForeignWait:
    """A trial whose genome a live run of another process is evaluating: told its outcome
    when that run records it (or taken up when that run is gone)."""

    trial: Any
    genome: Genome
    origin: str
    candidate_id: int
    label: str


def recorded_measurement(info: CandidateInfo) -> Measurement | None:
    """A recorded candidate's best correct timing, else its latest measurement of any status."""
    best = info.best
    if best is not None:
        return best.measurement
    return info.measurements[-1].measurement if info.measurements else None


def duplicate_outcome(known: Outcome | None, label: str) -> Outcome:
    """What a trial with the genome of ``label`` is told: that candidate's outcome, or a
    failure naming it while it awaits measurement in a bundle."""
    if known is None:
        return Outcome(state="fail", attrs={"duplicate_of": label,
                                            "fail_reason": f"duplicate of {label}, which "
                                            "awaits measurement"})
    return known.duplicate(label)


class Teller:
    """Tells a study's trials their outcomes; each told outcome counts for ``--patience``."""

    def __init__(self, study: Any, stats: TuneStats, budgets: Budgets) -> None:
        self.study, self.stats, self.budgets = study, stats, budgets

    def finish(self, job: Job, outcome: Outcome) -> None:
        """The job's outcome, told to its trial and to the duplicate trials waiting on it."""
        job.outcome = outcome
        if job.trial is not None:
            self.tell(job.trial, outcome)
        for waiter in job.waiters:
            self.tell(waiter, outcome.duplicate(job.label))
        job.waiters.clear()

    def tell(self, trial: Any, outcome: Outcome) -> None:
        if not tell(self.study, trial, outcome):
            return  # another process told it first
        self.stats.told += 1
        self.budgets.count_for_patience(outcome.value_for(self.study))
