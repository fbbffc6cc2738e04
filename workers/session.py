"""One process's GPU session: its stream, its buffers, and timing with CUDA events.

Three ways to time launches on the session's stream, one per launch mode
(tsopt.core.records.LAUNCH_MODES; tsopt.workers.paired chooses):

- :meth:`Session.time_launches` (``isolated``): each launch bracketed by CUDA events after a
  spin kernel, so the events time the kernel and never the host;
- :meth:`Session.capture` and :meth:`Session.time_replays` (``graph``): launches captured
  back to back in one CUDA graph, each replay bracketed by events;
- :meth:`Session.time_calls` (``eager``): a batch of calls between two events on an idle
  stream, no spin kernel, so a launch-bound call shows its host cost.

Candidate and vendor are timed the same way, so results are ratios. Torch and the standard
library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tsopt.core.artifact import TensorDesc
from tsopt.workers.buffers import Buffers, BufferSet, make_buffers, plan_buffer_sets, set_bytes
from tsopt.workers.faults import KernelFault, status_of_cuda_error
from tsopt.workers.loader import CudaRuntime
from tsopt.workers.reference import OpReference

# Each timed run is preceded by a ~50 us spin kernel so the GPU is still busy while the host
# submits start event, launch and end event: the events then time the kernel, not the host's
# launch latency (the same trick as nvbench's blocking kernel), for candidate and baseline alike.
SLEEP_CYCLES = 100_000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    runs: int

    @classmethod
    def of(cls, samples_us: Sequence[float]) -> Timing:
        ordered = sorted(samples_us)
        return cls(percentile(ordered, 0.5), percentile(ordered, 0.1), percentile(ordered, 0.9),
                   len(ordered))


class CaptureError(KernelFault):
    """Launches that a CUDA graph cannot capture (a launch that synchronises, allocates or
    fails under capture): recorded as the candidate's ``launch_error``, never a crash."""

    def __init__(self, message: str) -> None:
        super().__init__("launch_error", message)


class CapturedLaunches:
    """Launches captured in one CUDA graph: ``launches`` of them per :meth:`replay`."""

    def __init__(self, graph: Any, launches: int) -> None:
        self.graph: Any = graph  # a torch.cuda.CUDAGraph (a simulated device: its stand-in)
        self.launches = launches

    def replay(self) -> None:
        assert self.graph is not None, "replayed after release"
        self.graph.replay()

    def release(self) -> None:
        if self.graph is not None:
            self.graph.reset()
            self.graph = None


def rotation(n_sets: int, warmup: int, runs: int) -> tuple[list[int], list[int]]:
    """The buffer set of each warm-up run and of each timed run: round robin over the sets."""
    order = [i % n_sets for i in range(warmup + runs)]
    return order[:warmup], order[warmup:]


class Session:
    """One process's GPU state for measuring: the stream and the CUDA runtime for error codes."""

    def __init__(self, cuda: CudaRuntime | None) -> None:
        self.cuda = cuda
        self.device = torch.device("cuda", 0)
        self.stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        self.generator = torch.Generator(device=self.device)

    @property
    def handle(self) -> int:
        return int(self.stream.cuda_stream)

    def synchronize(self, when: str) -> None:
        """Wait for the stream; a CUDA error becomes a KernelFault naming ``when``."""
        if self.cuda is None:
            self.stream.synchronize()
            return
        for code in (self.cuda.synchronize(self.handle), self.cuda.last_error()):
            if code:
                raise KernelFault(status_of_cuda_error(code),
                                  f"CUDA error {self.cuda.describe(code)} during {when}")

    def clear_error(self) -> None:
        """Forget the last (non-sticky) CUDA error, such as a capture that was invalidated."""
        if self.cuda is not None:
            self.cuda.last_error()

    def allocate(self, reference: OpReference, tensors: Sequence[TensorDesc]) -> Buffers:
        """As many buffer sets of ``tensors`` as the rotation wants and free memory allows."""
        size = set_bytes(tensors, reference.dtype)
        free, _total = torch.cuda.mem_get_info(self.device)
        l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
        try:
            n_sets = plan_buffer_sets(size, l2, free)
        except ValueError as exc:
            raise KernelFault("launch_error", f"cannot measure {reference.problem}: {exc}") from None
        return make_buffers(tensors, reference.dtype, n_sets, self.device)

    def time_runs(self, launch: Callable[[BufferSet], None], sets: Sequence[BufferSet],
                  runs: int, warmup: int, what: str) -> Timing:
        warm, timed = rotation(len(sets), warmup, runs)
        for index in warm:
            launch(sets[index])
        self.synchronize(f"the warm-up runs of {what}")
        return Timing.of(self.time_launches(launch, [sets[i] for i in timed], what))

    def time_launches(self, launch: Callable[[BufferSet], None], sets: Sequence[BufferSet],
                      what: str) -> list[float]:
        """One launch on each of ``sets`` in turn, each bracketed by CUDA events; microseconds."""
        event = torch.cuda.Event
        starts = [event(enable_timing=True) for _ in sets]  # type: ignore[no-untyped-call]
        ends = [event(enable_timing=True) for _ in sets]  # type: ignore[no-untyped-call]
        sleep = getattr(torch.cuda, "_sleep", None)
        for start, end, bset in zip(starts, ends, sets, strict=True):
            if sleep is not None:
                sleep(SLEEP_CYCLES)
            start.record(self.stream)
            launch(bset)
            end.record(self.stream)
        self.synchronize(f"the timed runs of {what}")
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]

    def capture(self, launch: Callable[[BufferSet], None], sets: Sequence[BufferSet],
                what: str) -> CapturedLaunches:
        """One launch on each of ``sets`` in turn, back to back, captured in one CUDA graph on
        the session's stream; :class:`CaptureError` when the launches cannot be captured."""
        self.synchronize(f"the launches before capturing {what}")
        try:
            return self.record_graph(launch, sets)
        except (KernelFault, RuntimeError) as exc:
            # The fault inside the capture is the cause; torch's own error on ending an
            # invalidated capture (raised from the context's exit) names only its symptom.
            cause = exc.__context__ if isinstance(exc.__context__, KernelFault) else exc
            text = cause.message if isinstance(cause, KernelFault) else (
                str(cause).splitlines() or [type(cause).__name__])[0]
            self.clear_error()
            raise CaptureError(f"{what} cannot be captured in a CUDA graph: {text}") from None

    def record_graph(self, launch: Callable[[BufferSet], None],
                     sets: Sequence[BufferSet]) -> CapturedLaunches:
        """The capture itself (the one step a simulated device replaces)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            for bset in sets:
                launch(bset)
        return CapturedLaunches(graph, len(sets))

    def time_replays(self, captured: CapturedLaunches, count: int, what: str) -> list[float]:
        """``count`` replays of ``captured``, each bracketed by CUDA events; microseconds per
        launch (a replay's time over the launches it holds)."""
        event = torch.cuda.Event
        starts = [event(enable_timing=True) for _ in range(count)]  # type: ignore[no-untyped-call]
        ends = [event(enable_timing=True) for _ in range(count)]  # type: ignore[no-untyped-call]
        for start, end in zip(starts, ends, strict=True):
            start.record(self.stream)
            captured.replay()
            end.record(self.stream)
        self.synchronize(f"the graph replays of {what}")
        return [s.elapsed_time(e) * 1e3 / captured.launches
                for s, e in zip(starts, ends, strict=True)]

    def time_calls(self, call: Callable[[BufferSet], None], sets: Sequence[BufferSet],
                   what: str) -> float:
        """One call on each of ``sets`` in turn, back to back between two CUDA events on an
        idle stream, no spin kernel: microseconds per call, host launch cost included where
        the host is slower than the GPU."""
        self.synchronize(f"the calls before timing {what}")
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record(self.stream)
        for bset in sets:
            call(bset)
        end.record(self.stream)
        self.synchronize(f"the eager calls of {what}")
        return float(start.elapsed_time(end)) * 1e3 / len(sets)
