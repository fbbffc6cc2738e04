"""What the target GPUs are: device profiles (SM count, memory, bandwidth, peak rates).

A kernel's decomposition depends on the GPU it runs on: the GEMM's persistent grid is one
wave of clusters over the SMs, stream-K shares its last waves out over one CTA per SM and
lays out its fix-up flags per CTA, the cost model counts waves over the SMs. So a build is
made for a :class:`DeviceProfile`, not for an arch alone: an H100 PCIe (114 SMs) or an H20
(78) gets its own decomposition, and an artifact records the profile it was built for.

A profile is chosen by its stable id (``tsopt tune --device H100_PCIE``), or from the GPU
that measures (:func:`profile_for_gpu`: its name and its multiprocessor count, as torch
reports them); without either, the arch's default (:data:`DEFAULT_PROFILE`, the largest part
of the arch). A GPU whose SM count no profile of its name has (a MIG slice, an unknown part)
gets a *derived* profile, ``<BASE>-<N>SM``: the base profile's figures with the real SM
count, its peak rates scaled by the SMs it keeps. The same spelling names one on the command
line (``--device H200_SXM-66SM``: a build for a 66-SM slice made without that GPU).

A problem whose tensors cannot fit the target GPU is refused before anything is built or
measured (a 10^9 x 10^9 copy once ran for minutes until the OOM killer stopped it).

Standard library only: the measuring side reads it too.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem, ProblemError


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU part as tsopt builds for it: what a decomposition or an estimate reads."""

    id: str
    """Stable name (``H200_SXM``): what ``--device`` takes and artifacts record."""
    name: str
    """The part as NVIDIA names it."""
    arch: str
    """The DSL target it runs (``sm_90a``)."""
    sm_count: int
    memory_bytes: int
    hbm_bytes_per_s: float
    bf16_tflops: float
    """Dense (no sparsity) tensor-core peak at the boost clock."""
    fp16_tflops: float
    torch_names: tuple[str, ...] = ()
    """Substrings of ``torch.cuda.get_device_name()`` that name this part."""
    derived_from: str = ""
    """The profile this one was derived from (its SM count changed), "" for a datasheet one."""

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["torch_names"] = list(self.torch_names)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> DeviceProfile:
        fields = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        fields["torch_names"] = tuple(fields.get("torch_names", ()))
        return cls(**fields)

    @property
    def derived(self) -> bool:
        return bool(self.derived_from)

    def describe(self) -> str:
        """One phrase: ``H100_PCIE (NVIDIA H100 PCIe, 114 SMs)``."""
        how = f", derived from {self.derived_from}" if self.derived else ""
        return f"{self.id} ({self.name}, {self.sm_count} SMs{how})"

    def tensor_tflops(self, dtype: str) -> float:
        """Dense peak for the problem's dtype (bf16 when tsopt knows no other rate)."""
        return self.fp16_tflops if dtype == "fp16" else self.bf16_tflops


def _gb(n: float) -> int:
    return int(n * 1_000_000_000)


# Figures are NVIDIA's public datasheets (decimal GB, TB/s; tensor rates dense, i.e. half the
# "with sparsity" figure the datasheets print): H100 and H100 NVL datasheet (SXM5 / PCIe / NVL),
# H200 datasheet (SXM / NVL), DGX B200 datasheet (8 GPUs, 1,440 GB, 72 PFLOPS sparse FP8 ->
# 180 GB and 2.25 PFLOPS dense BF16 per GPU). The H800 and H20 are export parts without an
# English datasheet on nvidia.com: the H800 keeps the H100's compute and memory (its NVLink is
# cut), the H20's figures (96 GB HBM3, 4.0 TB/s, 148 TFLOPS dense BF16) are those NVIDIA's
# partners publish. SM counts are the full parts' (the H100 whitepaper: 132 SXM5, 114 PCIe;
# H20: 78 as its deviceQuery reports).
PROFILES: dict[str, DeviceProfile] = {p.id: p for p in (
    DeviceProfile("H200_SXM", "NVIDIA H200 SXM", "sm_90a", 132, _gb(141), 4.8e12, 989.4,
                  989.4, ("H200",)),
    DeviceProfile("H200_NVL", "NVIDIA H200 NVL", "sm_90a", 132, _gb(141), 4.8e12, 835.5,
                  835.5, ("H200 NVL",)),
    DeviceProfile("H100_SXM", "NVIDIA H100 SXM5", "sm_90a", 132, _gb(80), 3.35e12, 989.4,
                  989.4, ("H100 80GB HBM3", "H100 SXM")),
    DeviceProfile("H100_PCIE", "NVIDIA H100 PCIe", "sm_90a", 114, _gb(80), 2.0e12, 756.5,
                  756.5, ("H100 PCIe",)),
    DeviceProfile("H100_NVL", "NVIDIA H100 NVL", "sm_90a", 132, _gb(94), 3.9e12, 835.5,
                  835.5, ("H100 NVL",)),
    DeviceProfile("H800_SXM", "NVIDIA H800 SXM5", "sm_90a", 132, _gb(80), 3.35e12, 989.4,
                  989.4, ("H800",)),
    DeviceProfile("H800_PCIE", "NVIDIA H800 PCIe", "sm_90a", 114, _gb(80), 2.0e12, 756.5,
                  756.5, ("H800 PCIe",)),
    DeviceProfile("H20", "NVIDIA H20", "sm_90a", 78, _gb(96), 4.0e12, 148.0, 148.0, ("H20",)),
    DeviceProfile("B200", "NVIDIA B200", "sm_100a", 148, _gb(180), 8.0e12, 2250.0, 2250.0,
                  ("B200",)),
)}
"""Every profile tsopt knows, by id."""

DEFAULT_PROFILE: dict[str, str] = {"sm_90a": "H200_SXM", "sm_100a": "B200"}
"""The profile a build for an arch gets when none is chosen and no GPU measures: the largest
part of the arch (what tsopt was tuned on)."""

_DERIVED = re.compile(r"([A-Z0-9_]+)-([0-9]{1,4})SM")


def known_profiles(arch: str | None = None) -> str:
    """The ids of the known profiles (of ``arch``), for a message."""
    ids = [p.id for p in PROFILES.values() if arch is None or p.arch == arch]
    return ", ".join(ids)


def derive_profile(base: DeviceProfile, sm_count: int, *, always: bool = False) -> DeviceProfile:
    """``base`` with ``sm_count`` SMs (a MIG slice, an MPS share, an unknown part of the
    arch): its peak rates scaled by the SMs it keeps; memory and bandwidth stay the base's
    (an upper bound: the measuring side checks the free memory it really has). ``always``:
    a derived profile even at the base's SM count (a GPU tsopt does not know by name)."""
    if sm_count == base.sm_count and not base.derived and not always:
        return base
    root = PROFILES[base.derived_from] if base.derived else base
    scale = sm_count / root.sm_count
    return replace(root, id=f"{root.id}-{sm_count}SM", name=f"{root.name} ({sm_count} SMs)",
                   sm_count=sm_count, bf16_tflops=round(root.bf16_tflops * scale, 1),
                   fp16_tflops=round(root.fp16_tflops * scale, 1), torch_names=(),
                   derived_from=root.id)


def get_profile(name: str, arch: str | None = None, where: str = "--device") -> DeviceProfile:
    """The profile ``name`` (an id of :data:`PROFILES`, or ``<ID>-<N>SM`` derived from one);
    UserInputError naming it and listing the known ids when there is none, or when it is of
    another arch than ``arch``."""
    profile = PROFILES.get(name)
    if profile is None:
        match = _DERIVED.fullmatch(name)
        base = PROFILES.get(match.group(1)) if match else None
        if match is None or base is None:
            raise UserInputError(f"{where} {name!r} is not a known GPU; known: "
                                 f"{known_profiles()} (or <ID>-<N>SM for a part with N SMs)")
        sms = int(match.group(2))
        if not 1 <= sms <= base.sm_count:
            raise UserInputError(f"{where} {name!r}: {base.id} has {base.sm_count} SMs; a part "
                                 f"of it has 1..{base.sm_count}")
        profile = derive_profile(base, sms, always=True)
    if arch is not None and profile.arch != arch:
        raise UserInputError(f"{where} {name!r} is an {profile.arch} GPU; this build targets "
                             f"{arch} (its GPUs: {known_profiles(arch) or 'none known'})")
    return profile


def default_profile(arch: str) -> DeviceProfile:
    """The arch's default profile (:data:`DEFAULT_PROFILE`); the sm_90a one for an arch with
    none (its spaces refuse it before anything is built)."""
    return PROFILES[DEFAULT_PROFILE.get(arch, DEFAULT_PROFILE["sm_90a"])]


def resolve_profile(device: str | DeviceProfile | None, arch: str) -> DeviceProfile:
    """What a build for ``arch`` targets: the profile named, else the arch's default."""
    if isinstance(device, DeviceProfile):
        return device
    return get_profile(device, arch) if device else default_profile(arch)


def recorded_profile(config: dict[str, Any], arch: str) -> DeviceProfile:
    """The profile a study's config records (``{"device": {"id": ...}}``); a study recorded
    before profiles existed was built for its arch's default."""
    recorded = config.get("device") if isinstance(config, dict) else None
    name = recorded.get("id") if isinstance(recorded, dict) else None
    return resolve_profile(str(name) if name else None, arch)


def _name_match(profile: DeviceProfile, device_name: str) -> int:
    """Length of the longest of the profile's names that ``device_name`` holds as whole words."""
    return max((len(t) for t in profile.torch_names
                if re.search(rf"(?<![A-Za-z0-9]){re.escape(t)}(?![A-Za-z0-9])",
                             device_name, re.IGNORECASE)), default=0)


def _named_parts(device_name: str, arch: str) -> list[DeviceProfile]:
    """The known profiles of ``arch`` that name the GPU ``device_name`` best (the longest name
    that matches wins: ``H100 PCIe`` before ``H100``); none for an unknown GPU."""
    scored = [(_name_match(p, device_name), p) for p in PROFILES.values() if p.arch == arch]
    best = max((score for score, _ in scored), default=0)
    return [p for score, p in scored if score and score == best]


def is_part(profile: DeviceProfile, device_name: str) -> bool:
    """Whether the GPU torch names ``device_name`` is ``profile``'s part, or the part a derived
    profile (a MIG slice) was made from: ``NVIDIA H200`` is ``H200_SXM``'s, an ``NVIDIA H100
    80GB HBM3`` is not. An unknown GPU is no profile's."""
    base = profile.derived_from or profile.id
    return any(p.id == base for p in _named_parts(device_name, profile.arch))


def profile_for_gpu(device_name: str, sm_count: int, arch: str) -> DeviceProfile:
    """The profile of the GPU torch names ``device_name`` with ``sm_count`` multiprocessors:
    the known part of that name and SM count (:func:`_named_parts`); a part of that name with
    fewer SMs (a MIG slice) or an unknown GPU of the arch gets a profile derived from its real
    SM count (:func:`derive_profile`)."""
    named = _named_parts(device_name, arch)
    for profile in named:
        if profile.sm_count == sm_count:
            return profile
    if named:
        return derive_profile(named[0], min(sm_count, named[0].sm_count))
    return derive_profile(default_profile(arch), sm_count, always=True)


def decomposition_mismatch(built_sms: int, gpu_sms: int, what: str = "kernel") -> str | None:
    """Why a kernel whose decomposition was built for ``built_sms`` SMs must not run on a GPU
    with ``gpu_sms``, or None when they agree."""
    if built_sms == gpu_sms:
        return None
    return (f"{what} was built for {built_sms} SMs (its persistent grid / stream-K layout) "
            f"but this GPU has {gpu_sms}; rebuild it with --device for this GPU")


# --------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------


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
measuring side checks the free memory of the GPU it actually runs on). A build for a chosen
profile checks that profile's memory instead (:func:`check_fits`)."""


def problem_tensor_bytes(problem: Problem) -> int:
    """Bytes of the problem's tensors on the device: every input and output once."""
    return problem.bytes_moved


def check_fits(problem: Problem, arch: str, device: DeviceProfile | None = None) -> None:
    """ProblemError with the byte counts when the problem's tensors exceed the memory of
    ``device`` (else of ``arch``'s largest GPU); an arch with no entry is not checked here
    (its space refuses it)."""
    if device is not None:
        label, capacity = device.id, device.memory_bytes
    else:
        memory = GPU_MEMORY.get(arch)
        if memory is None:
            return
        label, capacity = memory.device, memory.bytes
    need = problem_tensor_bytes(problem)
    if need > capacity:
        raise ProblemError(
            f"problem {problem} needs {need:,} bytes of tensors on the GPU; an {arch} GPU "
            f"({label}) has {capacity:,} bytes: it cannot fit")
