"""This machine's GPUs as a run sees them: which measure, and which device profile it builds for.

Asked before the database is touched (a refusal changes nothing): ``--gpus`` beyond the
GPUs here is refused (:func:`check_gpu_count`), and so is ``--device`` with a GPU of another
SM count measuring here (:func:`choose_device`). ``injected`` is a measure pool handed to the
driver in place of the GPUs (tests, scripts): with one, this machine's GPUs measure nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tsopt.core.devices import DeviceProfile, default_profile
from tsopt.core.errors import UserInputError

if TYPE_CHECKING:
    from rich.console import Console

    from tsopt.search.request import TuneRequest


def gpu_here(mode: str) -> bool:
    """Whether this machine measures, for ``--measure`` ``mode`` (``always`` without a GPU
    is refused)."""
    if mode == "never":
        return False
    from tsopt.workers.machine import gpu_present

    present = gpu_present()
    if mode == "always" and not present:
        raise UserInputError("measurement was requested but no GPU is present on this machine")
    return bool(present)


def gpus_measured_here(request: TuneRequest, injected: Any) -> int:
    """GPUs this process will measure on (each takes a core of the driver's machine)."""
    if injected is not None:
        return int(injected.slots)
    if request.measure == "never":
        return 0
    from tsopt.workers.machine import gpu_present

    if not gpu_present():
        return 0
    from tsopt.workers.gpus import measuring_gpus

    return len(measuring_gpus(request.gpus))


def check_gpu_count(request: TuneRequest, injected: Any) -> None:
    """``--gpus N`` beyond this machine's GPUs is refused before anything is recorded
    (a Ray cluster's GPUs are counted when it is joined)."""
    if (request.gpus is None or request.measure == "never" or request.ray_address
            or injected is not None):
        return
    from tsopt.workers.machine import gpu_present

    if not gpu_present():
        raise UserInputError(f"--gpus {request.gpus}: this machine has no GPU (without "
                             "--gpus, built candidates go to a bundle for `tsopt measure`)")
    from tsopt.workers.gpus import measuring_gpus

    measuring_gpus(request.gpus)  # raises naming the count it sees


def choose_device(request: TuneRequest, console: Console,
                  injected: Any) -> tuple[DeviceProfile, str]:
    """The device profile this run builds for, and why: ``--device``; else the GPU that
    measures here (torch's name and SM count: a MIG slice or an unknown part gets a
    profile derived from its SMs); else the arch's default. ``--device`` with a GPU of
    another SM count measuring here is refused (the loader would refuse every kernel)."""
    from tsopt.core.devices import known_profiles, profile_for_gpu

    chosen = request.profile()
    gpu = measuring_gpu(request, console, injected)
    if chosen is not None:
        if gpu is not None and int(gpu["sm_count"]) != chosen.sm_count:
            raise UserInputError(
                f"--device {chosen.id} has {chosen.sm_count} SMs but the GPU measuring "
                f"here ({gpu['name']}) has {gpu['sm_count']}: drop --device, or build "
                "for it where no GPU measures (a bundle for that GPU)")
        return chosen, "chosen with --device"
    if gpu is not None:
        found = profile_for_gpu(str(gpu["name"]), int(gpu["sm_count"]), request.arch)
        how = (f"derived from its {found.sm_count} SMs (no known profile of that name "
               "and SM count: a MIG or MPS slice, or an unknown part)"
               if found.derived else "its known profile")
        return found, f"the GPU that measures ({gpu['name']}, {gpu['sm_count']} SMs), {how}"
    default = default_profile(request.arch)
    return default, (f"the {request.arch} default, as no GPU measures here (--device NAME "
                     f"builds for another: {known_profiles(request.arch)})")


def measuring_gpu(request: TuneRequest, console: Console, injected: Any) -> dict[str, Any] | None:
    """The first GPU that will measure on this machine, as torch sees it, or None (no GPU,
    ``--measure never``, a Ray cluster's or an injected measurer). GPUs of two SM counts
    measuring one study are refused."""
    if injected is not None or request.ray_address or request.measure == "never":
        return None
    from tsopt.workers.gpus import measuring_gpus
    from tsopt.workers.machine import gpu_identities, gpu_present

    if not gpu_present():
        return None
    found, why = gpu_identities()
    if not found:
        console.print(f"device: {why}; builds take the {request.arch} default", highlight=False)
        return None
    indices = [d if d is not None else 0 for d in measuring_gpus(request.gpus, len(found))]
    chosen = [g for g in found if g.get("index") in indices] or found[:1]
    counts = sorted({int(g["sm_count"]) for g in chosen})
    if len(counts) > 1:
        raise UserInputError(f"the GPUs measuring here have {counts} SMs: one study builds "
                             "for one SM count; pick GPUs of one kind (CUDA_VISIBLE_DEVICES"
                             " or --gpus)")
    first: dict[str, Any] = dict(chosen[0])
    return first
