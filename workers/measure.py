"""Measuring built candidates under the watchdog: a measurer by isolation, or a list at once.

Two isolations: ``worker`` (the default; persistent measuring children, see
tsopt.workers.worker_measurer) and ``process`` (a child per candidate, see
tsopt.workers.process_measurer). The searching side holds a measurer from
:func:`open_measurer`; a command line measures a list with :func:`measure_artifacts`.
Standard library only (plus tsopt.core); the GPU work happens in the children.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tsopt.core.artifact import ArtifactError, ArtifactManifest
from tsopt.core.bundle import Baseline
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import DEFAULT_LAUNCH, Measurement
from tsopt.workers.measurer import Measurer, MeasureStats, Probe
from tsopt.workers.process_measurer import ProcessMeasurer
from tsopt.workers.worker_measurer import REBASELINE_EVERY, WORKER_MAX_CANDIDATES, WorkerMeasurer

ISOLATIONS = ("worker", "process")


def open_measurer(
    isolation: str = "worker", runs: int = 50, warmup: int = 10, checks: int = 2,
    gpu: int | None = None, *, max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
    log: Callable[[str], None] | None = None, launch: str = DEFAULT_LAUNCH,
) -> Measurer:
    """A :class:`WorkerMeasurer` (``isolation="worker"``) or :class:`ProcessMeasurer` (whose
    baseline is always paired), timing in the ``launch`` mode (tsopt.core.records)."""
    if isolation == "worker":
        return WorkerMeasurer(runs, warmup, checks, gpu, max_candidates=max_candidates,
                              baseline=baseline, rebaseline_every=rebaseline_every, log=log,
                              launch=launch)
    if isolation == "process":
        return ProcessMeasurer(runs, warmup, checks, gpu, log=log, launch=launch)
    raise ValueError(f"isolation {isolation!r}: expected one of {', '.join(ISOLATIONS)}")


@dataclass
class MeasureRun:
    """Every measurement of one :func:`measure_artifacts` call, with its baselines."""

    measurements: list[Measurement] = field(default_factory=list)  # in the order given
    probes: dict[str, Probe] = field(default_factory=dict)  # by problem key: the first timing
    baselines: dict[str, list[Baseline]] = field(default_factory=dict)  # every timing
    pids: list[int | None] = field(default_factory=list)  # the process that measured each
    stats: MeasureStats | None = None


def _identify(artifact_dir: Path) -> tuple[str, Problem | None, str | None]:
    try:
        manifest = ArtifactManifest.read(artifact_dir)
        return manifest.genome_hash, Problem.from_dict(manifest.problem), None
    except (ArtifactError, ProblemError) as exc:
        return Path(artifact_dir).name, None, str(exc)


def measure_artifacts(
    artifact_dirs: Sequence[Path], runs: int = 50, warmup: int = 10, checks: int = 2,
    gpu: int | None = None, on_result: Callable[[int, Measurement], None] | None = None, *,
    isolation: str = "worker", max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
    log: Callable[[str], None] | None = None, launch: str = DEFAULT_LAUNCH,
) -> MeasureRun:
    """Measure artifacts, each isolated (see the module doc); the baseline timed per problem.

    Candidates are taken problem by problem (in order of each problem's first artifact), so a
    worker reuses its buffers; ``on_result(index, measurement)`` is called as each is measured,
    ``index`` being its position in ``artifact_dirs``, and the returned measurements are in
    that order. ``baseline``: ``"once"`` or ``"paired"`` (see tsopt.workers.worker_measurer).
    ``log`` receives the operator's notes (workers started, replaced, recycled; baselines; the
    closing summary); by default they go to tsopt.workers.measurer's logger.

    Raises :class:`~tsopt.workers.measurer.MeasureError` only when the machine cannot measure
    at all (the baseline failed); every candidate-level failure is a Measurement with its status.
    """
    slots: dict[int, tuple[Measurement, int | None]] = {}

    def record(index: int, measured: Measurement, pid: int | None) -> None:
        slots[index] = (measured, pid)
        if on_result is not None:
            on_result(index, measured)

    groups: dict[str, list[tuple[int, Path, str, Problem]]] = {}
    with open_measurer(isolation, runs, warmup, checks, gpu, max_candidates=max_candidates,
                       baseline=baseline, rebaseline_every=rebaseline_every,
                       log=log, launch=launch) as measurer:
        for index, artifact_dir in enumerate(artifact_dirs):
            genome_hash, problem, error = _identify(Path(artifact_dir))
            if problem is None:
                record(index, Measurement(genome_hash, "", "launch_error",
                                          error=f"bad artifact: {error}",
                                          launch=launch), None)
            else:
                groups.setdefault(problem.key, []).append(
                    (index, Path(artifact_dir), genome_hash, problem))
        for group in groups.values():
            for index, artifact_dir, genome_hash, problem in group:
                record(index, measurer.measure(artifact_dir, genome_hash, problem),
                       measurer.last_pid)
            measurer.finish_problem(group[0][3])
    measurer.log(measurer.stats.summary())
    order = sorted(slots)
    return MeasureRun(
        measurements=[slots[i][0] for i in order], probes=dict(measurer.probes),
        baselines={k: list(v) for k, v in measurer.stats.baselines.items()},
        pids=[slots[i][1] for i in order], stats=measurer.stats,
    )
