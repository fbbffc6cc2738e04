"""Measuring on this machine's GPUs from the driver's process (``--workers 0`` and
``--pool processes``); and :class:`GpuMeasurer`, the one persistent measurer that this pool
holds per GPU and each Ray measuring actor holds.

One GPU is measured between the driver's other work, in its own thread of control. Several
GPUs get one thread each, each holding a :class:`GpuMeasurer` pinned to its GPU (its measuring
child sees that GPU alone, ``CUDA_VISIBLE_DEVICES``); the threads wait on their children's
pipes, so the driver goes on building while the GPUs measure.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tsopt.core.problem import Problem
from tsopt.search.pools.protocol import MeasureDone, MeasureQueue, MeasureRequest, MeasureResult


class GpuMeasurer:
    """A persistent watchdog measurer (the torch-only runner in an isolated child, replaced
    after hangs and faults), opened on first use.

    ``gpu``: the device its child measures on (an index among the devices this process sees;
    None: the first, which is Ray's choice in a Ray actor). ``label``: the GPU its
    measurements name (``conditions["gpu"]``), ``gpu`` unless given.
    """

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 isolation: str = "worker", gpu: int | None = None,
                 label: int | None = None) -> None:
        self.runs, self.warmup, self.checks, self.isolation = runs, warmup, checks, isolation
        self.gpu = gpu
        self.label = gpu if label is None else label
        self.measurer: Any = None

    def measure(self, request: MeasureRequest) -> MeasureResult:
        from tsopt.workers.measure import open_measurer
        from tsopt.workers.measurer import MeasureError

        start = time.monotonic()
        problem = Problem.from_dict(request.problem)
        try:
            if self.measurer is not None and self.measurer.launch != request.launch:
                self.close()  # another study's mode: its measurer's workers time another way
            if self.measurer is None:
                self.measurer = open_measurer(self.isolation, self.runs, self.warmup,
                                              self.checks, self.gpu, launch=request.launch)
                self.measurer.gpu_label = self.label
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


class _GpuThread:
    """One GPU's measurer in a thread: requests in through its inbox, results out through
    the pool's queue."""

    def __init__(self, index: int, gpu: GpuMeasurer, out: queue.Queue[Any]) -> None:
        self.index, self.gpu, self.out = index, gpu, out
        self.inbox: queue.Queue[tuple[Any, MeasureRequest] | None] = queue.Queue()
        self.summary = ""
        self.thread = threading.Thread(target=self._run, name=f"tsopt-measure-gpu{index}",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.inbox.get()) is not None:
            tag, request = item
            try:
                self.out.put((self.index, tag, request, self.gpu.measure(request)))
            except BaseException as exc:  # noqa: BLE001 - the driver's thread raises it
                self.out.put((self.index, tag, request, exc))
        self.summary = self.gpu.close()


class InlineMeasurePool(MeasureQueue):
    """A :class:`~tsopt.search.pools.protocol.MeasurePool` of this machine's GPUs, one
    worker each (``gpus``: their device indices; ``(None,)``: the default device alone)."""

    name = "inline"

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 gpus: Sequence[int | None] = (None,)) -> None:
        super().__init__()
        self.devices = tuple(gpus) or (None,)
        self._workers = len(self.devices)
        self.gpus = [GpuMeasurer(runs, warmup, checks, gpu=g) for g in self.devices]
        self._done: queue.Queue[Any] = queue.Queue()
        self._threads = ([_GpuThread(i, g, self._done) for i, g in enumerate(self.gpus)]
                         if len(self.gpus) > 1 else [])
        self._busy: set[int] = set()
        self.notes: list[str] = []  # GPUs lost while others went on

    @property
    def slots(self) -> int:
        return len(self.gpus)

    def pending(self) -> int:
        return len(self._queue) + len(self._busy)

    def poll(self, timeout: float) -> list[MeasureDone]:
        if not self._threads:  # one GPU: measured here, now
            item = self._next_for(0)
            return [] if item is None else [MeasureDone(item[0], 0, self.gpus[0].measure(item[1]))]
        # Handed out here only, never after results: a caller that stops measuring on an
        # unusable result drops what is still queued, and nothing must be in flight then.
        self._dispatch()
        if not self._busy:
            return []
        try:
            items = [self._done.get(timeout=timeout) if timeout > 0 else self._done.get_nowait()]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self._done.get_nowait())
            except queue.Empty:
                break
        done: list[MeasureDone] = []
        for index, tag, request, result in items:
            self._busy.discard(index)
            if isinstance(result, BaseException):
                raise result
            if result.unusable is not None and self._lose(index):
                # This GPU cannot measure; the others can: its request waits for them.
                self.notes.append(f"GPU {self.devices[index]} stopped measuring: "
                                  f"{result.unusable}")
                self._queue.appendleft((tag, request))
                continue
            done.append(MeasureDone(tag, index, result))
        return done

    def _dispatch(self) -> None:
        for worker in self._threads:
            index = worker.index
            if index in self._busy or index in self._lost:
                continue
            item = self._next_for(index)
            if item is None:
                continue
            self._busy.add(index)
            worker.inbox.put(item)

    def close(self) -> list[str]:
        if not self._threads:
            summary = self.gpus[0].close()
            return [summary] if summary else []
        for worker in self._threads:
            worker.inbox.put(None)
        for worker in self._threads:
            worker.thread.join()
        self._busy.clear()
        return self.notes + [f"GPU {self.devices[w.index]}: {w.summary}"
                             for w in self._threads if w.summary]
