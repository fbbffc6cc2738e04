"""Isolation ``process``: every candidate in a fresh child, and the baseline in a probe child.

3-5 s of Python start, torch import and CUDA context per candidate, nothing shared; each
candidate's ratio uses the vendor timed right after it in its own process. Standard library
only (plus tsopt.core).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tsopt.core.buckets import samples_of
from tsopt.core.bundle import Baseline
from tsopt.core.problem import Problem
from tsopt.core.records import DEFAULT_LAUNCH, Measurement
from tsopt.workers import watchdog
from tsopt.workers.limits import Limits
from tsopt.workers.measurer import MeasureError, Measurer, Probe
from tsopt.workers.outcomes import ChildOutcome, outcome_to_measurement

# watchdog.runner_argv is looked up at each spawn (not imported by name): the tests replace it
# to start their simulated runner.


def probe_baseline(
    problem: Problem, runs: int = 50, warmup: int = 10, gpu: int | None = None,
) -> Probe:
    """Time the vendor baseline for ``problem`` in a child; raises :class:`MeasureError`."""
    argv = watchdog.runner_argv("baseline", "--problem", problem.to_json(), "--runs", str(runs),
                                "--warmup", str(warmup))
    outcome = watchdog.run_child(argv, Limits.for_probe(), env=watchdog.child_env(gpu))
    final = outcome.final
    if final is not None and final["event"] == "baseline":
        try:
            return Probe(Baseline.from_dict(final["baseline"]), dict(final.get("environment", {})))
        except (TypeError, ValueError) as exc:
            raise MeasureError(f"malformed baseline from the child: {exc}") from None
    if final is not None and final["event"] == "result":
        error = final["measurement"].get("error") or final["measurement"].get("status")
        raise MeasureError(f"cannot time the {problem} baseline here: {error}")
    why = outcome_to_measurement(outcome, "baseline", problem.key).error
    raise MeasureError(f"cannot time the {problem} baseline here: {why}")


def _candidate_outcome(
    artifact_dir: Path, baseline_us: float, runs: int, warmup: int, checks: int,
    gpu: int | None, launch: str = DEFAULT_LAUNCH, ms: int = 1,
) -> ChildOutcome:
    argv = watchdog.runner_argv("measure", "--artifact", str(Path(artifact_dir).resolve()),
                                "--runs", str(runs), "--warmup", str(warmup),
                                "--checks", str(checks), "--launch", launch)
    limits = Limits.for_candidate(baseline_us, runs, warmup, checks).at_ms(ms)
    return watchdog.run_child(argv, limits, env=watchdog.child_env(gpu))


def measure_candidate(
    artifact_dir: Path, genome_hash: str, problem_key: str, baseline_us: float, runs: int = 50,
    warmup: int = 10, checks: int = 2, gpu: int | None = None, launch: str = DEFAULT_LAUNCH,
) -> Measurement:
    """Check and time one artifact in its own process; always returns a Measurement."""
    outcome = _candidate_outcome(artifact_dir, baseline_us, runs, warmup, checks, gpu, launch)
    measured: Measurement = outcome_to_measurement(outcome, genome_hash, problem_key)
    return replace(measured, launch=launch)


class ProcessMeasurer(Measurer):
    """Every candidate in a child process of its own; the baseline in a probe child."""

    isolation = "process"

    def probe(self, problem: Problem) -> Probe:
        probe = self.probes.get(problem.key)
        if probe is None:
            self.stats.processes += 1
            probe = probe_baseline(problem, self.runs, self.warmup, self.gpu)
            self._record_baseline(problem.key, probe)
        return probe

    def _measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        probe = self.probe(problem)
        self.stats.processes += 1
        outcome = _candidate_outcome(artifact_dir, probe.baseline.median_us, self.runs,
                                     self.warmup, self.checks, self.gpu, self.launch,
                                     samples_of(problem))
        self.last_pid = outcome.pid
        return outcome_to_measurement(outcome, genome_hash, problem.key)
