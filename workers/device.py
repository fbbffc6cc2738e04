"""This process's CUDA device, as a measuring child sees it through torch.

The facts a child reports (:func:`why_no_gpu`, :func:`environment`), the context it creates
and checks between candidates, and the two handles it measures through: a
:class:`~tsopt.workers.session.Session` and an artifact's library. The measuring code calls
these through the module (``device.why_no_gpu()``), never imported by name, so that this module
is the one seam a simulated device replaces (the tests run the real runner on CPU tensors by
replacing these functions). Torch and the standard library only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from tsopt.workers.faults import KernelFault
from tsopt.workers.loader import CudaRuntime, KernelLibrary, check_decomposition
from tsopt.workers.machine import nvidia_smi_driver_version
from tsopt.workers.session import Session


def why_no_gpu() -> str | None:
    """None when torch sees a CUDA device; otherwise a sentence saying why not."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (f"no GPU: torch {torch.__version__} is a CPU-only build "
                "(torch.cuda.is_available() is False)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"no GPU: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))


_DRIVER: list[str] = []


def driver_version(cuda: CudaRuntime | None = None) -> str:
    """The NVIDIA driver version (nvidia-smi), else the driver's CUDA API version."""
    if not _DRIVER:
        _DRIVER.append(_query_driver_version(cuda))
    return _DRIVER[0]


def _query_driver_version(cuda: CudaRuntime | None) -> str:
    version = nvidia_smi_driver_version()
    if version:
        return version
    if cuda is not None:
        code, api = cuda.driver_version()
        if code == 0 and api:
            return f"CUDA driver API {api // 1000}.{api % 1000 // 10}"
    return ""


def environment(cuda: CudaRuntime | None = None) -> dict[str, Any]:
    """Device name, driver, CUDA and torch versions, L2 size (needs a GPU)."""
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name, "driver": driver_version(cuda), "cuda": torch.version.cuda or "",
        "torch": torch.__version__, "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count, "l2_bytes": int(props.L2_cache_size),
        "memory_bytes": int(props.total_memory), "python": sys.version.split()[0],
    }


def create_context() -> None:
    """Create this process's CUDA context now (a worker's start-up), not in the first candidate."""
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.empty(1, device="cuda").fill_(1.0)
    torch.cuda.synchronize()


def context_healthy(session: Session) -> str | None:
    """None when a tiny torch op still runs and checks out on the session's context; else why.

    After a non-sticky error (a refused launch, a wrong result) the context should be fine; a
    worker proves it before taking the next candidate, and exits if not.
    """
    try:
        with torch.cuda.stream(session.stream):
            probe = torch.arange(1, 65, dtype=torch.float32, device=session.device)
            total = probe.sum()
            session.synchronize("the health check")
            value = float(total)
    except KernelFault as fault:
        return f"the health check after the candidate failed: {fault.message}"
    except RuntimeError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return f"the health check after the candidate failed: {first}"
    if value != 2080.0:
        return f"the health check after the candidate computed 1 + ... + 64 = {value}, not 2080"
    return None


def new_session(cuda: CudaRuntime | None) -> Session:
    """A session on device 0; ``cuda``: the runtime whose error codes it reads (None: torch's)."""
    return Session(cuda)


def open_library(artifact_dir: Path, manifest: Any) -> KernelLibrary:
    """An artifact's library, loaded with the CUDA runtime it was linked against; a kernel
    whose grid was sized for another SM count than this GPU's is refused (KernelLoadError:
    its time would be another GPU's decomposition's, its stream-K waits might never end)."""
    built = manifest.decomposition_sms()
    if built is not None and torch.cuda.is_available():  # no GPU: the load itself says so
        check_decomposition(artifact_dir, built, manifest.device.get("id", ""),
                            [torch.cuda.current_device()])
    return KernelLibrary.open(artifact_dir, manifest)
