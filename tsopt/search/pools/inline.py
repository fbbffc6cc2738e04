"""Measuring on this machine's GPU, in the driver's process (``--workers 0`` and
``--pool processes``); and :class:`GpuMeasurer`, the one persistent measurer that both this
pool and each Ray measuring actor hold."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tsopt.core.problem import Problem
from tsopt.search.pools.protocol import MeasureDone, MeasureQueue, MeasureRequest, MeasureResult


class GpuMeasurer:
    """A persistent watchdog measurer (the torch-only runner in an isolated child, replaced
    after hangs and faults) on this process's GPU, opened on first use."""

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 isolation: str = "worker") -> None:
        self.runs, self.warmup, self.checks, self.isolation = runs, warmup, checks, isolation
        self.measurer: Any = None

    def measure(self, request: MeasureRequest) -> MeasureResult:
        from tsopt.workers.measure import open_measurer
        from tsopt.workers.measurer import MeasureError

        start = time.monotonic()
        problem = Problem.from_dict(request.problem)
        try:
            if self.measurer is None:
                self.measurer = open_measurer(self.isolation, self.runs, self.warmup,
                                              self.checks)
            measured = self.measurer.measure(Path(request.artifact_dir), request.genome_hash,
                                             problem)
        except MeasureError as exc:
            return MeasureResult(unusable=str(exc), seconds=time.monotonic() - start)
        probe = self.measurer.probes.get(problem.key)
        return MeasureResult(measured, probe.baseline if probe is not None else None,
                             int(self.measurer.last_pid or 0), time.monotonic() - start)

    def close(self) -> str:
        if self.measurer is None:
            return ""
        self.measurer.close()
        summary: str = self.measurer.stats.summary()
        self.measurer = None
        return summary


class InlineMeasurePool(MeasureQueue):
    """A :class:`~tsopt.search.pools.protocol.MeasurePool` of one worker: this machine's GPU,
    measured from the driver's process between its other work."""

    name = "inline"
    slots = 1

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2) -> None:
        super().__init__()
        self.gpu = GpuMeasurer(runs, warmup, checks)

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout: float) -> list[MeasureDone]:
        if not self._queue:
            return []
        tag, request = self._queue.popleft()
        return [MeasureDone(tag, 0, self.gpu.measure(request))]

    def close(self) -> list[str]:
        summary = self.gpu.close()
        return [summary] if summary else []
