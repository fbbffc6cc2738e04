"""Plain, frozen read results of the store.

The store hands these out instead of ORM objects, so no session ever leaks
into the caller and a result can cross a process boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from tsopt.core.devices import DeviceProfile, is_part
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, Measurement, Verdict
from tsopt.core.standing import Standing


def named_gpus(devices: dict[str, int]) -> dict[str, int]:
    """:meth:`tsopt.db.store.Store.measured_devices` less the measurements that named no GPU
    (device ""): the cards a study was measured on, for telling whether it spans several."""
    return {device: n for device, n in devices.items() if device}


def ranking_gpu(devices: dict[str, int], target: DeviceProfile | None,
                prefer: str | None = None) -> str | None:
    """The one GPU whose measurements rank a study measured on ``devices`` (GPU name -> count)
    and built for ``target``; None where it was measured on one card or none (nothing to keep
    apart). A kernel fastest on one card can lose on another, so several are never pooled:
    ``prefer`` (the GPU a live run measures on) where it measured the study, else the study's
    target card where it did, else the card with the most measurements (ties: the name that sorts last)."""
    named = named_gpus(devices)
    if len(named) < 2:
        return None
    if prefer in named:
        return prefer
    on_target = {d: n for d, n in named.items() if target is not None and is_part(target, d)}
    pool = on_target or named
    return max(pool, key=lambda d: (pool[d], d))


FUNNEL_STAGES: tuple[str, ...] = (
    "proposed", "dataflow_legal", "ts_valid", "tsopt_checked", "built", "correct", "timed",
)
"""The keys of :meth:`tsopt.db.store.Store.funnel`, in order."""


@dataclass(frozen=True)
class StudyInfo:
    id: int
    name: str
    space: str
    problem: Problem
    arch: str
    sampler: str
    status: str
    config: dict[str, Any]
    optuna_study_name: str
    created_at: datetime
    updated_at: datetime
    killed_at: datetime | None = None  # status "killed": when its last run was last heard of
    launch: str = "isolated"  # the launch mode its measurements are timed in

    @property
    def problem_key(self) -> str:
        return self.problem.key


@dataclass(frozen=True)
class RecordedMeasurement:
    """A measurement with the run that took it and when it was recorded."""

    run_id: str
    measured_at: datetime
    measurement: Measurement


@dataclass(frozen=True)
class CandidateInfo:
    """One candidate of a study with everything recorded about it."""

    id: int
    genome: Genome
    origin: str
    trial_number: int | None
    created_at: datetime
    verdict: Verdict | None
    build: BuildResult | None
    measurements: tuple[RecordedMeasurement, ...]

    @property
    def genome_hash(self) -> str:
        return self.genome.hash

    @property
    def best(self) -> RecordedMeasurement | None:
        """The fastest correct timing, or None when none was taken."""
        timed = [
            r for r in self.measurements
            if r.measurement.status == "ok" and r.measurement.median_us is not None
        ]
        return min(timed, key=lambda r: r.measurement.median_us or 0.0, default=None)


@dataclass(frozen=True)
class RankedCandidate:
    """A correct, timed candidate: rank 1 has the highest paired ratio to the vendor baseline
    (tsopt.core.standing); ``measurement`` is its measurement nearest that standing."""

    rank: int
    candidate_id: int
    genome: Genome
    origin: str
    trial_number: int | None
    measurement: Measurement
    run_id: str
    measured_at: datetime
    build: BuildResult | None
    standing: Standing | None = None  # every measurement of the candidate, combined

    @property
    def genome_hash(self) -> str:
        return self.genome.hash

    @property
    def median_us(self) -> float:
        assert self.measurement.median_us is not None, "ranked rows are timed"
        return self.measurement.median_us


class Rejection(NamedTuple):
    """Candidates stopped for one reason: where, the rule, how many, one example message."""

    stage: str
    rule: str
    count: int  # type: ignore[assignment]  # shadows tuple.count: the name the API promises
    example: str
