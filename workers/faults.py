"""CUDA failures as Measurement statuses: which error leaves the context unusable, which not.

A CUDA fault becomes a status with its message: an illegal address or other sticky fault is
``crash``, a refused launch or module load is ``launch_error`` (a wrong output, found by the
check, is ``wrong``). What a process cannot report about itself (a deadlock, a signal death) is
the watchdog's to classify (tsopt.workers.outcomes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tsopt.workers.loader import CudaRuntime

# cudaError_t values after which the context is unusable: the kernel faulted while running.
CRASH_CODES = {700, 710, 714, 715, 716, 717, 718, 719}
HANG_CODES = {702}  # cudaErrorLaunchTimeout: a display watchdog killed a kernel that ran too long
STICKY_STATUSES = ("crash", "hang")  # the child's own classification: the context is unusable

# What torch's error text says when a kernel faulted (torch, not the runtime, heard it first).
_STICKY_TORCH_TEXT = ("illegal memory access", "misaligned address", "illegal instruction",
                      "unspecified launch failure", "device-side assert", "invalid program counter")


class KernelFault(Exception):
    """A CUDA call failed; ``status`` is the Measurement status it maps to."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def status_of_cuda_error(code: int) -> str:
    if code in CRASH_CODES:
        return "crash"
    if code in HANG_CODES:
        return "hang"
    return "launch_error"


def fault_from_torch(exc: RuntimeError, cuda: CudaRuntime | None, when: str) -> KernelFault:
    """A torch call failed: after a candidate's fault, torch is often the first to hear of it."""
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    code = cuda.last_error() if cuda is not None else 0
    if cuda is not None and code:
        return KernelFault(status_of_cuda_error(code),
                           f"CUDA error {cuda.describe(code)} during {when} (torch: {first_line})")
    status = "crash" if any(s in str(exc) for s in _STICKY_TORCH_TEXT) else "launch_error"
    return KernelFault(status, f"{type(exc).__name__} during {when}: {first_line}")
