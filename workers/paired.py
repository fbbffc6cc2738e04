"""Paired timing: the candidate and the vendor baseline alternate in one process, in the GPU's
steady state, and the result is their ratio with a confidence interval.

Why: under sustained load an H200 sits at its power cap and absolute times move by ±10 %
within seconds, while the ratio of two kernels timed back to back moves far less. So:

1. **Steady state.** Candidate and baseline alternate, untimed, until the SM clock settles
   (three NVML readings in a row within ±2 % of their mean, after at least ``warmup_min_s``)
   or ``warmup_max_s`` passes; without NVML, for ``warmup_min_s``.
2. **Rounds.** Each round times a batch of candidate samples, then a batch of baseline
   samples; the order flips every round (AB, then BA), so that a drift which favours the
   side timed first cancels over the rounds. A round's ratio is baseline median / candidate
   median. A sample is per launch, timed in the launch mode
   (tsopt.core.records.LAUNCH_MODES), the same for both sides:

   - ``graph``: each side's launches over the rotated buffer sets, back to back, captured in
     one CUDA graph (:data:`GRAPH_MIN_LAUNCHES` at least, every set at least once); a sample
     is one replay's time over its launches. A launch that cannot be captured is the
     candidate's ``launch_error`` (:class:`~tsopt.workers.session.CaptureError`).
   - ``eager``: :data:`EAGER_CALLS` back-to-back calls through the user's call path (the
     export's loader; the torch call for the baseline) on rotated buffers between two
     events, no spin kernel; a sample is their time over the calls.
   - ``isolated``: one launch between events after a spin kernel (the runner before the
     modes; kept for the studies measured so).
3. **Adaptive repetitions.** After ``min_rounds``, stop when the 95 % confidence interval of
   the median ratio (order statistics, distribution-free) is within ±``target`` of it, or at
   ``time_cap_s``, as nvbench stops on a relative noise bound or a time limit.

NVML readings taken between rounds go with the result (:class:`~tsopt.workers.nvml.Conditions`).
Torch and the standard library only.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tsopt.core.records import DEFAULT_LAUNCH, LAUNCH_MODES
from tsopt.workers.buffers import BufferSet
from tsopt.workers.nvml import Conditions, Nvml, Reading
from tsopt.workers.session import CapturedLaunches, Session, Timing

Launch = Callable[[BufferSet], None]

# A replay of fewer launches would be dominated by the graph's own start-up on the GPU; at
# 32 back to back a 10 us decode kernel replays for ~0.3 ms and an 8192^3 GEMM for ~50 ms.
GRAPH_MIN_LAUNCHES = 32
EAGER_CALLS = 20  # calls per eager sample, as a decode step issues a few dozen GEMMs


class Side:
    """One side of a pairing (the candidate or the baseline) as its launch mode times it:
    ``samples(count)`` microseconds per launch, ``per_sample`` launches in each."""

    per_sample = 1

    def __init__(self, timer: PairedTimer, launch: Launch, what: str) -> None:
        self.timer, self.launch, self.what = timer, launch, what

    def prepare(self) -> None:
        return None

    def samples(self, count: int, what: str) -> list[float]:
        return self.timer.session.time_launches(self.launch, self.timer.take(count), what)

    def release(self) -> None:
        return None


class GraphSide(Side):
    """Back-to-back launches over the rotated sets, captured once; each sample a replay."""

    def __init__(self, timer: PairedTimer, launch: Launch, what: str) -> None:
        super().__init__(timer, launch, what)
        sets = timer.sets
        self.per_sample = max(len(sets), GRAPH_MIN_LAUNCHES)
        self.graph_sets = [sets[i % len(sets)] for i in range(self.per_sample)]
        self.captured: CapturedLaunches | None = None

    def prepare(self) -> None:
        if self.captured is None:
            # Run once outside the capture: lazy set-up (cuBLAS's handle, a module's first
            # launch) must not happen inside it.
            for bset in self.graph_sets[:2]:
                self.launch(bset)
            self.captured = self.timer.session.capture(self.launch, self.graph_sets, self.what)

    def samples(self, count: int, what: str) -> list[float]:
        self.prepare()
        assert self.captured is not None
        return self.timer.session.time_replays(self.captured, count, what)

    def release(self) -> None:
        if self.captured is not None:
            self.captured.release()
            self.captured = None


class EagerSide(Side):
    """Batches of back-to-back calls through the caller's path, host cost included."""

    per_sample = EAGER_CALLS

    def samples(self, count: int, what: str) -> list[float]:
        session = self.timer.session
        return [session.time_calls(self.launch, self.timer.take(self.per_sample), what)
                for _ in range(count)]


SIDES: dict[str, type[Side]] = {"graph": GraphSide, "eager": EagerSide, "isolated": Side}


@dataclass(frozen=True)
class PairedSettings:
    """How long to warm up and when to stop; ``from_env`` reads the two budgets a user (or a
    test on a simulated device) may change: ``TSOPT_PAIRED_TIME_CAP_S`` and
    ``TSOPT_PAIRED_WARMUP_MAX_S``."""

    launches: int = 10  # launches per side per round, fewer for slow kernels (round_s)
    round_s: float = 0.05  # aim for rounds of about this long
    min_rounds: int = 8
    max_rounds: int = 400
    target: float = 0.005  # stop at a 95 % interval of ±0.5 % around the median ratio
    time_cap_s: float = 3.0
    warmup_min_s: float = 0.2
    warmup_max_s: float = 2.0
    settle: float = 0.02
    reading_every_s: float = 0.05

    @classmethod
    def from_env(cls) -> PairedSettings:
        def seconds(name: str, default: float) -> float:
            text = os.environ.get(name)
            if text is None:
                return default
            value = float(text)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}={text!r} must be a finite number of seconds >= 0")
            return value

        cap = seconds("TSOPT_PAIRED_TIME_CAP_S", cls.time_cap_s)
        warm = seconds("TSOPT_PAIRED_WARMUP_MAX_S", cls.warmup_max_s)
        return cls(time_cap_s=cap, warmup_max_s=warm, warmup_min_s=min(cls.warmup_min_s, warm))


@dataclass(frozen=True)
class PairedTiming:
    candidate: Timing
    baseline: Timing
    ratio: float  # median over rounds of baseline / candidate: above 1 is faster than vendor
    ratio_lo: float
    ratio_hi: float
    rounds: int
    stopped: str  # "converged" | "time cap" | "max rounds"
    warmup_s: float
    settled: bool
    conditions: dict[str, Any]

    @property
    def halfwidth(self) -> float:
        """Half the interval's width relative to the ratio."""
        return (self.ratio_hi - self.ratio_lo) / (2 * self.ratio)


def median_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, float, float]:
    """Median and a distribution-free ~95 % confidence interval for it (order statistics:
    ranks n/2 ± z·√n/2, the normal approximation to the binomial)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")
    med = statistics.median(ordered)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return med, ordered[lo], ordered[hi]


class PairedTimer:
    """Times a candidate paired with the vendor baseline on one session's rotated buffers, in
    one launch mode (``launch``, tsopt.core.records.LAUNCH_MODES)."""

    def __init__(self, session: Session, sets: Sequence[BufferSet],
                 nvml: Nvml | str | None, settings: PairedSettings | None = None,
                 launch: str = DEFAULT_LAUNCH) -> None:
        if launch not in LAUNCH_MODES:
            raise ValueError(f"launch mode {launch!r}: expected one of {', '.join(LAUNCH_MODES)}")
        self.session = session
        self.sets = list(sets)
        self.nvml = nvml
        self.settings = settings or PairedSettings()
        self.launch = launch
        self._next = 0
        self.readings: list[Reading] = []
        self._last_reading = 0.0

    def take(self, count: int) -> list[BufferSet]:
        """The next ``count`` buffer sets of the rotation."""
        return self._buffers(count)

    def _buffers(self, count: int) -> list[BufferSet]:
        chosen = [self.sets[(self._next + i) % len(self.sets)] for i in range(count)]
        self._next = (self._next + count) % len(self.sets)
        return chosen

    def _read(self, force: bool = False) -> Reading | None:
        if not isinstance(self.nvml, Nvml):
            return None
        now = time.monotonic()
        if not force and now - self._last_reading < self.settings.reading_every_s:
            return None
        self._last_reading = now
        reading = self.nvml.read()
        self.readings.append(reading)
        return reading

    def warm_up(self, candidate: Side, baseline: Side) -> tuple[float, bool, float, float]:
        """Alternate until the clock settles; returns (seconds, settled, candidate us,
        baseline us) with the last batch's medians as the kernels' time estimates."""
        s = self.settings
        start = time.monotonic()
        clocks: list[int] = []
        settled = False
        cand_us = base_us = 0.0
        while True:
            cand_us = statistics.median(candidate.samples(2, "the candidate's warm-up"))
            base_us = statistics.median(baseline.samples(2, "the baseline's warm-up"))
            reading = self._read()
            if reading is not None:
                clocks.append(reading.sm_mhz)
            elapsed = time.monotonic() - start
            if elapsed >= s.warmup_min_s:
                if not isinstance(self.nvml, Nvml):
                    break
                tail = clocks[-3:]
                if len(tail) == 3 and max(abs(c / statistics.mean(tail) - 1) for c in tail) <= s.settle:
                    settled = True
                    break
            if elapsed >= s.warmup_max_s:
                break
        return time.monotonic() - start, settled, cand_us, base_us

    def time(self, candidate: Launch, baseline: Launch,
             candidate_call: Launch | None = None) -> PairedTiming:
        """``candidate`` and ``baseline`` launch on a buffer set (on the session's stream);
        ``candidate_call`` is the candidate as a user calls it (the export's loader), which
        the ``eager`` mode times (the baseline's launch is already its user's call).
        Raises :class:`~tsopt.workers.faults.KernelFault` (a
        :class:`~tsopt.workers.session.CaptureError` in ``graph`` mode) for either side."""
        kind = SIDES[self.launch]
        if self.launch == "eager":
            if candidate_call is None:
                raise ValueError("the eager launch mode times the candidate's user call path: "
                                 "pass candidate_call")
            candidate = candidate_call
        cand_side = kind(self, candidate, "the candidate")
        base_side = kind(self, baseline, "the baseline")
        try:
            cand_side.prepare()
            base_side.prepare()
            return self._time(cand_side, base_side)
        finally:
            cand_side.release()
            base_side.release()

    def _time(self, candidate: Side, baseline: Side) -> PairedTiming:
        s = self.settings
        warm_s, settled, cand_us, base_us = self.warm_up(candidate, baseline)
        per_round_us = max((cand_us + base_us) * candidate.per_sample, 1e-3)
        launches = max(1, min(s.launches, int(s.round_s * 1e6 / per_round_us)))
        cand_all: list[float] = []
        base_all: list[float] = []
        ratios: list[float] = []
        start = time.monotonic()
        stopped = "max rounds"
        self.readings.clear()
        for index in range(s.max_rounds):
            first, second = ((candidate, baseline) if index % 2 == 0 else (baseline, candidate))
            a = first.samples(launches, "a paired round")
            b = second.samples(launches, "a paired round")
            cand, base = (a, b) if first is candidate else (b, a)
            cand_all += cand
            base_all += base
            ratios.append(statistics.median(base) / statistics.median(cand))
            self._read()
            enough = len(ratios) >= s.min_rounds
            if enough:
                med, lo, hi = median_interval(ratios)
                if (hi - lo) / (2 * med) <= s.target:
                    stopped = "converged"
                    break
            # A slow pair stops on time even before min_rounds, keeping at least three rounds.
            if time.monotonic() - start >= s.time_cap_s and (enough or len(ratios) >= 3):
                stopped = "time cap"
                break
        med, lo, hi = median_interval(ratios)
        conditions: dict[str, Any]
        if isinstance(self.nvml, Nvml):
            self._read(force=True)
            summary: Conditions = self.nvml.summarise(self.readings)
            conditions = summary.to_dict()
        else:
            conditions = {"nvml": self.nvml or "unavailable"}
        conditions["launches_per_sample"] = candidate.per_sample
        return PairedTiming(Timing.of(cand_all), Timing.of(base_all), med, lo, hi, len(ratios),
                            stopped, round(warm_s, 3), settled, conditions)
