"""One process's GPU session: its stream, its buffers, and timing with CUDA events.

Timing: rotate among the buffer sets, warm-up runs, then ``runs`` runs each bracketed by CUDA
events on the session's stream; median, p10, p90 (:class:`Timing`). Candidate and vendor are
timed the same way, so results are ratios. Torch and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
