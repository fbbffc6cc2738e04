"""The GPU's clocks, power and throttle reasons, read through NVML with ctypes.

``libnvidia-ml.so.1`` ships with the driver, so this needs nothing but the standard library
(no pynvml). An H200 under sustained load sits at its software power cap: the SM clock drops
from ~1980 MHz to ~1350-1440 MHz and absolute times move by ±10 %. So every measurement
records these readings, and a reading that shows throttling beyond the power cap (thermal or
hardware slowdown) marks the measurement as taken under abnormal conditions.

Where NVML cannot be loaded (no driver, a simulated device), :func:`open_nvml` returns None
and measurements say so (``conditions = {"nvml": "unavailable: ..."}``).
"""

from __future__ import annotations

import ctypes
import statistics
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
# nvmlClocksEventReasons (formerly ClocksThrottleReasons) bits.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# The power cap is how this GPU runs under load (paired ratios absorb it); these are not.
ABNORMAL_REASONS = frozenset({"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})
# Below this fraction of the maximum SM clock a reading is abnormal even without a reason bit
# (nvbench discards samples under 75 % of the default clock; the H200's power cap alone
# takes it to ~68-73 % of its maximum, so the bound sits below that).
MIN_CLOCK_FRACTION = 0.5


class NvmlError(RuntimeError):
    """An NVML call failed."""


@dataclass(frozen=True)
class Reading:
    sm_mhz: int
    power_w: float
    temperature_c: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Conditions:
    """What the GPU did while one measurement ran (summarised readings)."""

    samples: int
    sm_mhz_min: int
    sm_mhz_median: float
    sm_mhz_max: int
    sm_mhz_limit: int
    power_w_median: float
    power_limit_w: float
    temperature_c_max: int
    reasons: tuple[str, ...]
    abnormal: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["reasons"], doc["abnormal"] = list(self.reasons), list(self.abnormal)
        return doc


class Nvml:
    """One device's NVML handle (found by PCI bus id, so CUDA_VISIBLE_DEVICES cannot mislead)."""

    def __init__(self, lib: ctypes.CDLL, pci_bus_id: str) -> None:
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByPciBusId_v2", pci_bus_id.encode(),
                   ctypes.byref(self.handle))
        limit = ctypes.c_uint()
        self._call("nvmlDeviceGetMaxClockInfo", self.handle, NVML_CLOCK_SM, ctypes.byref(limit))
        self.sm_mhz_limit = int(limit.value)
        power = ctypes.c_uint()
        self._call("nvmlDeviceGetEnforcedPowerLimit", self.handle, ctypes.byref(power))
        self.power_limit_w = power.value / 1000.0

    def _call(self, name: str, *args: Any) -> None:
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise NvmlError(f"{name} returned NVML error {code}")

    def read(self) -> Reading:
        clock, power, temp = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        reasons = ctypes.c_ulonglong()
        self._call("nvmlDeviceGetClockInfo", self.handle, NVML_CLOCK_SM, ctypes.byref(clock))
        self._call("nvmlDeviceGetPowerUsage", self.handle, ctypes.byref(power))
        self._call("nvmlDeviceGetTemperature", self.handle, NVML_TEMPERATURE_GPU,
                   ctypes.byref(temp))
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons", self.handle, ctypes.byref(reasons))
        names = tuple(name for bit, name in THROTTLE_REASONS.items() if reasons.value & bit)
        return Reading(int(clock.value), power.value / 1000.0, int(temp.value), names)

    def summarise(self, readings: list[Reading]) -> Conditions:
        if not readings:
            readings = [self.read()]
        clocks = [r.sm_mhz for r in readings]
        reasons = tuple(sorted({name for r in readings for name in r.reasons}))
        abnormal = [name for name in reasons if name in ABNORMAL_REASONS]
        if min(clocks) < MIN_CLOCK_FRACTION * self.sm_mhz_limit:
            abnormal.append(f"sm_clock_below_{int(MIN_CLOCK_FRACTION * 100)}pct")
        return Conditions(
            samples=len(readings), sm_mhz_min=min(clocks),
            sm_mhz_median=float(statistics.median(clocks)), sm_mhz_max=max(clocks),
            sm_mhz_limit=self.sm_mhz_limit,
            power_w_median=round(float(statistics.median(r.power_w for r in readings)), 1),
            power_limit_w=self.power_limit_w,
            temperature_c_max=max(r.temperature_c for r in readings),
            reasons=reasons, abnormal=tuple(abnormal))


def open_nvml(pci_bus_id: str) -> Nvml | str:
    """NVML for the device at ``pci_bus_id`` (e.g. ``0000:19:00.0``), or why it cannot be had."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return f"unavailable: {exc}"
    code = lib.nvmlInit_v2()
    if code != 0:
        return f"unavailable: nvmlInit_v2 returned {code}"
    try:
        return Nvml(lib, pci_bus_id)
    except (NvmlError, AttributeError) as exc:
        return f"unavailable: {exc}"


@lru_cache(maxsize=1)
def device_nvml(index: int = 0) -> Nvml | str:
    """NVML for torch's CUDA device ``index`` (matched by PCI bus id), or why not; opened once
    per process."""
    import torch

    if not torch.cuda.is_available():
        return "unavailable: no CUDA device"
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return "unavailable: torch does not report the device's PCI bus id"
    pci = (f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:"
           f"{getattr(props, 'pci_device_id', 0):02x}.0")
    return open_nvml(pci)
