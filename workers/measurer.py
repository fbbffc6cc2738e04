"""The measurer interface: candidates measured one at a time on one GPU, and what it cost.

A :class:`Measurer` is the searching side's handle on one GPU; its two kinds are
tsopt.workers.process_measurer (a child per candidate) and tsopt.workers.worker_measurer
(persistent children), chosen by tsopt.workers.measure.open_measurer. Standard library only
(plus tsopt.core).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tsopt.core.bundle import Baseline
from tsopt.core.problem import Problem
from tsopt.core.records import DEFAULT_LAUNCH, LAUNCH_MODES, Measurement

_LOG = logging.getLogger(__name__)


class MeasureError(RuntimeError):
    """This machine cannot measure at all (no GPU, no CUDA, the baseline itself failed)."""


@dataclass(frozen=True)
class Probe:
    """The vendor baseline timed in a child, and the environment it ran in."""

    baseline: Baseline
    environment: dict[str, Any]


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class MeasureStats:
    """What measuring cost: processes started, wall time per candidate, every baseline timing."""

    isolation: str
    processes: int = 0  # child processes started: workers, or a probe + one per candidate
    replaced: int = 0  # workers lost to a candidate (hang, crash, sticky fault, failed health)
    recycled: int = 0  # workers retired at the candidate cap
    startup_seconds: list[float] = field(default_factory=list)  # spawn -> ready, per worker
    candidate_seconds: list[float] = field(default_factory=list)  # the watchdog's wall time
    baselines: dict[str, list[Baseline]] = field(default_factory=dict)  # by problem key
    paired_us: dict[str, list[float]] = field(default_factory=dict)  # vendor medians timed
    # with candidates, by problem key
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    @classmethod
    def merged(cls, parts: Sequence[MeasureStats]) -> MeasureStats:
        """The stats of several GPUs' measurers taken together, over the span of all of them
        (so that candidates per second is the machine's rate)."""
        total = cls(parts[0].isolation if parts else "")
        for part in parts:
            total.processes += part.processes
            total.replaced += part.replaced
            total.recycled += part.recycled
            total.startup_seconds += part.startup_seconds
            total.candidate_seconds += part.candidate_seconds
            for key, timings in part.baselines.items():
                total.baselines.setdefault(key, []).extend(timings)
            for key, medians in part.paired_us.items():
                total.paired_us.setdefault(key, []).extend(medians)
        if parts:
            total.started = min(p.started for p in parts)
            ends = [p.ended for p in parts]
            total.ended = None if None in ends else max(e for e in ends if e is not None)
        return total

    @property
    def seconds(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def baseline_spread(self, problem_key: str) -> tuple[float, float, float] | None:
        """(min, max, (max - min) / min) of every vendor median timed for a problem."""
        medians = ([b.median_us for b in self.baselines.get(problem_key, [])]
                   + self.paired_us.get(problem_key, []))
        if not medians:
            return None
        return min(medians), max(medians), (max(medians) - min(medians)) / min(medians)

    def summary(self) -> str:
        """A few lines for the operator: candidates per second, processes, times, baselines."""
        n = len(self.candidate_seconds)
        total = self.seconds
        rate = f"{n / total:.2f} candidates/s" if total > 0 else "-"
        if self.isolation == "worker":
            procs = (f"{self.processes} worker process{'es' if self.processes != 1 else ''} "
                     f"started ({self.replaced} replaced after a failure, {self.recycled} "
                     "recycled at the cap)")
        else:
            procs = (f"{self.processes} child processes started (one per candidate, one "
                     "baseline probe per problem)")
        lines = [f"measured {n} candidate{'s' if n != 1 else ''} in {total:.1f} s ({rate}); "
                 f"{procs}"]
        if n:
            secs = self.candidate_seconds
            lines.append(
                f"wall time per candidate: median {_quantile(secs, 0.5):.3f} s, p90 "
                f"{_quantile(secs, 0.9):.3f} s, max {max(secs):.3f} s, sum {sum(secs):.1f} s "
                "(command to result; start-ups, baselines and health checks are the rest)"
            )
        starts = self.startup_seconds
        if starts:
            lines.append(f"worker start-up (Python, torch, CUDA context): median "
                         f"{_quantile(starts, 0.5):.2f} s over {len(starts)} "
                         f"start{'s' if len(starts) != 1 else ''}")
        for key, timings in self.baselines.items():
            spread = self.baseline_spread(key)
            if spread is None:
                continue
            lo, hi, rel = spread
            paired = len(self.paired_us.get(key, []))
            lines.append(f"baseline {key} ({timings[0].name}): {len(timings)} timing"
                         f"{'s' if len(timings) != 1 else ''} alone"
                         + (f", {paired} paired with candidates" if paired else "")
                         + f"; medians {lo:.2f}-{hi:.2f} us (spread {100 * rel:.1f} %)")
        return "\n".join(lines)


class Measurer:
    """Measures candidates one at a time on one GPU; a context manager (closing ends children).

    :meth:`probe` times a problem's baseline (raises :class:`MeasureError` when this machine
    cannot measure); :meth:`measure` returns a Measurement of any status and never raises for
    the candidate (it may raise MeasureError when the machine stops being able to measure);
    :meth:`finish_problem` is called after a problem's last candidate.
    """

    isolation = ""
    paired = True  # each candidate's ratio uses the vendor timed right after it

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 gpu: int | None = None, log: Callable[[str], None] | None = None,
                 launch: str = DEFAULT_LAUNCH) -> None:
        if launch not in LAUNCH_MODES:
            raise ValueError(f"launch mode {launch!r}: expected one of {', '.join(LAUNCH_MODES)}")
        self.runs, self.warmup, self.checks, self.gpu = runs, warmup, checks, gpu
        self.launch = launch  # the mode every candidate and its baseline are timed in
        self.log: Callable[[str], None] = log or _LOG.info
        self.stats = MeasureStats(self.isolation)
        self.probes: dict[str, Probe] = {}  # the first baseline timing of each problem
        self.last_pid: int | None = None  # the process that measured the last candidate
        # The GPU a measurement names (conditions["gpu"]): ``gpu`` unless the caller numbers
        # its GPUs otherwise (a Ray actor, whose device Ray chose); None: not named.
        self.gpu_label: int | None = gpu

    def probe(self, problem: Problem) -> Probe:
        raise NotImplementedError

    def _measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        raise NotImplementedError

    def measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        measured = self._measure(Path(artifact_dir), genome_hash, problem)
        # Also what the watchdog made of a child that never reported (a hang, a timeout).
        measured = replace(measured, launch=self.launch)
        if self.gpu_label is not None:
            measured = replace(measured, conditions={**measured.conditions,
                                                     "gpu": self.gpu_label})
        self.stats.candidate_seconds.append(measured.seconds)
        if self.paired and measured.baseline_median_us is not None:
            self.stats.paired_us.setdefault(problem.key, []).append(measured.baseline_median_us)
        return measured

    def finish_problem(self, problem: Problem) -> None:
        return None

    def close(self) -> None:
        if self.stats.ended is None:
            self.stats.ended = time.monotonic()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record_baseline(self, problem_key: str, probe: Probe) -> None:
        self.stats.baselines.setdefault(problem_key, []).append(probe.baseline)
        self.probes.setdefault(problem_key, probe)
