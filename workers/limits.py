"""The watchdog's deadlines: how long each phase of a measuring child may take.

Each phase has its own deadline, so that a slow Python start-up is not taken for a hang:

- start-up (spawn -> ready): :data:`STARTUP_LIMIT_S`; exceeding it is ``timeout``.
- check (ready, or the measure command -> checked): module load, the checked launches;
  exceeding it is ``hang``.
- timing (checked -> result): the timed runs (and, per process, the baseline); exceeding it is
  ``timeout``.
- a worker's set-up (problem/baseline command -> baseline): :data:`SETUP_LIMIT_S`; its
  health check (result -> ready): :data:`HEALTH_LIMIT_S`. Neither is charged to a candidate.

Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STARTUP_LIMIT_S = 180.0
"""Spawn -> ready: Python start, ``import torch``, CUDA context creation. Independent of the
candidate (seconds on a warm machine, tens of seconds on a cold file cache), so generous."""

LOAD_FLOOR_S = 10.0
"""Floor of the check phase: cubin module load, buffer allocation, random fills and the torch
reference, none of which scales with the candidate's speed."""

TIMING_FLOOR_S = 10.0
"""Floor of the timing phase: buffer refills, event bookkeeping, the post-timing re-checks."""

MAX_SLOWDOWN = 1000.0
"""A candidate this many times slower than the vendor baseline is not worth waiting for: the
TS tutorial TMA copy as written was 80x slower than torch's copy (bench/copy_h200), so 1000x
leaves room for bad-but-real kernels while a deadlock on a 21 us copy is still caught in ~10 s."""

PROBE_LIMIT_S = 120.0
"""Ready -> baseline for a baseline probe: torch's own kernels, one allocation, 2 x runs."""

SETUP_LIMIT_S = PROBE_LIMIT_S
"""A worker's problem or baseline command -> baseline: free, allocate, fill, time torch."""

HEALTH_LIMIT_S = 30.0
"""A worker's result -> ready: the tiny torch op that shows its context survived the candidate
(milliseconds when it did)."""


@dataclass(frozen=True)
class Limits:
    """Deadlines of the three phases of one child, in seconds."""

    startup_s: float
    check_s: float
    timing_s: float

    @classmethod
    def for_candidate(cls, baseline_us: float, runs: int, warmup: int, checks: int) -> Limits:
        """The watchdog's formula, from the vendor baseline's median time on this device.

        check  = LOAD_FLOOR_S   + MAX_SLOWDOWN x baseline x checks
        timing = TIMING_FLOOR_S + (MAX_SLOWDOWN + 2) x baseline x (warmup + runs)
        (the +2: the baseline is timed again in a per-candidate child, and the runs are padded
        by a short sleep kernel that hides the host launch gap).
        """
        if not math.isfinite(baseline_us) or baseline_us <= 0:
            raise ValueError(f"baseline time must be a positive number of us, got {baseline_us!r}")
        base_s = baseline_us * 1e-6
        return cls(
            startup_s=STARTUP_LIMIT_S,
            check_s=LOAD_FLOOR_S + MAX_SLOWDOWN * base_s * max(checks, 1),
            timing_s=TIMING_FLOOR_S + (MAX_SLOWDOWN + 2) * base_s * (warmup + runs),
        )

    def at_ms(self, count: int) -> Limits:
        """The deadlines of a runtime-M kernel measured at ``count`` Ms
        (tsopt.workers.range_measure): the first M's check opens the timing phase, which then
        holds every M's timing and the later Ms' checks."""
        if count <= 1:
            return self
        return Limits(self.startup_s, self.check_s, (self.check_s + self.timing_s) * count)

    @classmethod
    def for_probe(cls) -> Limits:
        return cls(startup_s=STARTUP_LIMIT_S, check_s=PROBE_LIMIT_S, timing_s=PROBE_LIMIT_S)
