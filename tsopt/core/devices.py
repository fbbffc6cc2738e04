"""What the target GPUs hold: the one table of device memory per architecture.

A problem whose tensors cannot fit the target GPU is refused before anything is built or
measured (a 10^9 x 10^9 copy once ran for minutes until the OOM killer stopped it).
"""

from __future__ import annotations

from dataclasses import dataclass

from tsopt.core.problem import Problem, ProblemError


@dataclass(frozen=True)
class DeviceMemory:
    """The largest GPU tsopt targets for an arch, and its memory in bytes."""

    arch: str
    device: str
    bytes: int


GPU_MEMORY: dict[str, DeviceMemory] = {
    "sm_90a": DeviceMemory("sm_90a", "H200", 141_000_000_000),
    "sm_100a": DeviceMemory("sm_100a", "B200", 192_000_000_000),
}
"""Device memory per target arch: the largest part of the arch (an H100 has less; the
measuring side checks the free memory of the GPU it actually runs on)."""


def problem_tensor_bytes(problem: Problem) -> int:
    """Bytes of the problem's tensors on the device: every input and output once."""
    return problem.bytes_moved


def check_fits(problem: Problem, arch: str) -> None:
    """ProblemError with the byte counts when the problem's tensors exceed the memory of
    ``arch``'s GPU; an arch with no entry is not checked here (its space refuses it)."""
    memory = GPU_MEMORY.get(arch)
    if memory is None:
        return
    need = problem_tensor_bytes(problem)
    if need > memory.bytes:
        raise ProblemError(
            f"problem {problem} needs {need:,} bytes of tensors on the GPU; an {arch} GPU "
            f"({memory.device}) has {memory.bytes:,} bytes: it cannot fit")
