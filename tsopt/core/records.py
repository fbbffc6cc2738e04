"""Records that cross a stage, process or machine boundary.

Each is a frozen dataclass with ``to_dict``/``from_dict`` (JSON-safe). They are
what the roles hand each other: the verifier returns a :class:`Verdict`, the
builder a :class:`BuildResult`, the runner a :class:`Measurement`.

Standard library only: the GPU runner imports this module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, TypeVar

T = TypeVar("T")

VerdictStage = Literal["dataflow", "ts", "tsopt", "ok"]


def _from_dict(cls: type[T], doc: Any) -> T:
    if not isinstance(doc, dict):
        raise ValueError(f"{cls.__name__} must be an object, got {type(doc).__name__}")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = set(doc) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
    return cls(**doc)


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one genome.

    ``valid`` is True only when the TS checks and tsopt's own checks all pass.
    Otherwise ``stage`` says which gate rejected it (``dataflow``: a value used
    before it is produced; ``ts``: the TS TaskManager or its BFS checker;
    ``tsopt``: a hazard TS does not model), ``rule`` is a short stable name
    (``ts.missing_release``, ``tsopt.async_release`` ...) and ``message`` the
    full explanation.
    """

    genome_hash: str
    valid: bool
    stage: VerdictStage
    rule: str | None = None
    message: str | None = None
    seconds: float = 0.0
    domain: int = 0
    cached: bool = False

    @classmethod
    def ok(cls, genome_hash: str, seconds: float = 0.0, domain: int = 0) -> Verdict:
        return cls(genome_hash, True, "ok", None, None, seconds, domain)

    @classmethod
    def reject(
        cls,
        genome_hash: str,
        stage: VerdictStage,
        rule: str,
        message: str,
        seconds: float = 0.0,
        domain: int = 0,
    ) -> Verdict:
        return cls(genome_hash, False, stage, rule, message, seconds, domain)

    def summary(self) -> str:
        return "valid" if self.valid else f"rejected [{self.rule}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Any) -> Verdict:
        return _from_dict(cls, doc)


@dataclass(frozen=True)
class TsSearch:
    """One run of TS's exhaustive interleaving search, as the verifier memoises it and the
    database shares it across workers and studies.

    ``schedule`` is a digest of the model TS's checker explores (``tsopt.verify.ts_model``:
    its input as TS derives it from the skeleton, SMEM overlaps included; not the state bound:
    a search under a higher bound supersedes one under a lower, see :meth:`settles`),
    ``aliasing`` ``"model"`` (the overlaps are in the model), ``tool_version`` the DSL
    checker's (``ts-model1/dsl-4.8.1/<digest of its source>``). A search kept before
    2026-12-04 has the old key (a digest of the space's ``ts_schedule_key`` and domain, of the
    SMEM overlaps by name, and the verifier's version): readable, never matched. ``error`` is
    TS's rejection (None: the search found nothing) and ``bounded`` the state bound that cut
    it short (None: it was complete). ``domain`` is the number of iterations searched,
    ``states`` the states TS explored (every BFS of the search together; None in a record
    made before they were counted), ``max_states`` the bound it ran under.
    """

    space: str
    schedule: str
    aliasing: str
    tool_version: str
    error: str | None = None
    bounded: int | None = None
    seconds: float = 0.0
    domain: int = 0
    states: int | None = None
    max_states: int | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.space, self.schedule, self.aliasing, self.tool_version)

    @property
    def complete(self) -> bool:
        """Every interleaving was explored (no bound cut it): a proof, or a counterexample."""
        return self.bounded is None

    def settles(self, bound: int) -> bool:
        """Whether this search answers a check asked under a bound of ``bound`` states: a
        counterexample stands under any bound, a complete search proves under any, and a cut
        one answers every bound up to its own (BFS explores the same first states)."""
        return self.error is not None or self.bounded is None or self.bounded >= bound

    def supersedes(self, other: TsSearch) -> bool:
        """Whether this search says more than ``other`` of the same key: complete (or a
        counterexample) against cut, or cut at a higher bound."""
        if other.error is not None or other.bounded is None:
            return False
        return self.error is not None or self.bounded is None or self.bounded > other.bounded

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "complete": self.complete}

    @classmethod
    def from_dict(cls, doc: Any) -> TsSearch:
        if isinstance(doc, dict) and "complete" in doc:
            doc = dict(doc)
            complete = doc.pop("complete")
            if complete is not (doc.get("bounded") is None):
                raise ValueError(f"TsSearch: complete={complete!r} contradicts "
                                 f"bounded={doc.get('bounded')!r}")
        return _from_dict(cls, doc)


BuildStatus = Literal["ok", "error"]


@dataclass(frozen=True)
class BuildResult:
    """What the builder made of one valid genome for one problem and arch.

    ``artifact_dir`` holds ``kernel.h``, ``kernel.o``, the linked shared
    library and ``artifact.json`` (the runner's contract). Resource figures are
    ``None`` where the toolchain does not report them.
    """

    genome_hash: str
    problem_key: str
    arch: str
    status: BuildStatus
    artifact_dir: str | None = None
    library: str | None = None
    compile_seconds: float = 0.0
    export_seconds: float = 0.0
    link_seconds: float = 0.0
    registers: int | None = None
    smem_bytes: int | None = None
    spill_bytes: int | None = None
    cache_key: str = ""
    cache_hit: bool = False
    error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Any) -> BuildResult:
        return _from_dict(cls, doc)


LAUNCH_MODES: tuple[str, ...] = ("graph", "eager", "isolated")
CHOOSABLE_LAUNCH_MODES: tuple[str, ...] = ("graph", "eager")
DEFAULT_LAUNCH = "graph"
"""How candidate and baseline are launched while they are timed (tsopt.workers.paired):

- ``graph``: back-to-back launches over the rotated buffers captured in one CUDA graph per
  side, replays timed by CUDA events: GPU time as a serving stack that replays graphs sees it.
  The default: a kernel tuner's choice should not hinge on the host's launch cost, which the
  kernel does not set, and decode serving runs in graphs.
- ``eager``: batches of back-to-back calls through the export's loader (the baseline: the torch
  call) between two events, no spin kernel: GPU plus launch cost, what eager PyTorch sees.
- ``isolated``: each launch between CUDA events after a spin kernel that hides the host. No
  user launches that way; it is what every measurement made before the modes existed was, so
  that old records read as what they are and a study made then resumes as it was measured.
"""

MeasureStatus = Literal["ok", "wrong", "hang", "crash", "launch_error", "timeout"]
MEASURE_STATUSES: tuple[str, ...] = ("ok", "wrong", "hang", "crash", "launch_error", "timeout")


@dataclass(frozen=True)
class Measurement:
    """One candidate timed on one GPU, with its baseline from the same process.

    Times are microseconds. ``rate`` is GB/s for copies and TFLOP/s for GEMMs
    (``rate_unit`` says which). ``ratio`` is baseline time / candidate time, so
    above 1 means faster than the vendor baseline. Only ``status == "ok"``
    rows carry timings that may be ranked.

    A paired measurement (the candidate and the baseline alternating in rounds) also carries
    ``ratio_lo``/``ratio_hi`` (the 95 % interval of the median ratio over ``rounds`` rounds)
    and ``conditions``: the GPU's clocks, power and throttle reasons while it ran.

    ``launch`` is the launch mode both were timed in (:data:`LAUNCH_MODES`); a stored record
    without one (:meth:`from_dict`, a database row before revision 0006) predates the modes
    and reads as ``isolated``, which is how it was timed.
    """

    genome_hash: str
    problem_key: str
    status: MeasureStatus
    median_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    runs: int = 0
    rate: float | None = None
    rate_unit: str = ""
    rel_err: float | None = None
    baseline_name: str = ""
    baseline_median_us: float | None = None
    baseline_rate: float | None = None
    ratio: float | None = None
    device: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    error: str | None = None
    seconds: float = 0.0
    ratio_lo: float | None = None
    ratio_hi: float | None = None
    rounds: int = 0
    conditions: dict[str, Any] = field(default_factory=dict)
    launch: str = DEFAULT_LAUNCH  # one of LAUNCH_MODES (from_dict checks)
    per_m: list[dict[str, Any]] = field(default_factory=list)
    """A runtime-M kernel measured at several M (tsopt.core.buckets.sample_ms): one entry per
    M, ascending (``m``, ``median_us``, ``baseline_median_us``, ``ratio``, ``ratio_lo``,
    ``ratio_hi``, ``rounds``, ``rel_err``). Then ``ratio`` is the range's figure to rank by
    (``buckets.range_ratio`` of theirs, its interval from theirs likewise), and the times and
    rates are those at the range's top M. Empty for a kernel measured at its one M."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def abnormal(self) -> tuple[str, ...]:
        """What the GPU's readings showed beyond its normal power cap (thermal or hardware
        slowdown, a collapsed clock): such a timing is flagged, not ranked as is."""
        return tuple(self.conditions.get("abnormal", ()))

    @classmethod
    def from_dict(cls, doc: Any) -> Measurement:
        if isinstance(doc, dict) and "launch" not in doc:
            doc = {**doc, "launch": "isolated"}  # written before the launch modes
        measurement = _from_dict(cls, doc)
        if measurement.status not in MEASURE_STATUSES:
            raise ValueError(f"unknown measurement status {measurement.status!r}")
        if measurement.launch not in LAUNCH_MODES:
            raise ValueError(f"unknown launch mode {measurement.launch!r}; known: "
                             f"{', '.join(LAUNCH_MODES)}")
        return measurement
