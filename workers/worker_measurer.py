"""Isolation ``worker`` (the default): persistent measuring children, replaced after failures.

One persistent child measures candidates one after another: it imports torch and creates the
CUDA context once, allocates the rotating buffer sets and times the vendor baseline once per
problem (the first timing sets the watchdog's limits), then per candidate loads its library,
checks, times and reports. The vendor baseline that a candidate's ratio uses is, with
``baseline="once"`` (the default), the worker's latest timing of the problem: timed again
every :data:`REBASELINE_EVERY` candidates, at the end of each problem and in every new worker,
and the spread of these timings is reported; with ``baseline="paired"`` it is timed right
after the candidate on the same buffers, as a process of its own does, at 2 x the vendor time
x (warm-up + runs) per candidate (+0.1 s, +45 %, for an 8192^3 GEMM). The ranking objective is
the candidate's own median, which neither choice touches. (On an H200, 8192^3 bf16 cuBLAS
medians spread by ~15 % within one run in every mode, per-process included; smaller GEMMs by
< 1 %.)

The parent keeps the per-candidate deadlines: a candidate that hangs is killed with the whole
process group (``hang``), a signal death is a ``crash``, and a new worker goes on with the next
candidate. A sticky CUDA fault (the child classifies it) makes the worker report and exit;
after every other result the worker proves its context healthy with a tiny torch op before it
takes the next candidate. A worker is recycled after :data:`WORKER_MAX_CANDIDATES` candidates
(their libraries stay loaded: ctypes cannot unload them reliably). The child's side is
tsopt.workers.measuring_worker. Standard library only (plus tsopt.core).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tsopt.core.buckets import samples_of
from tsopt.core.bundle import Baseline
from tsopt.core.problem import Problem
from tsopt.core.records import DEFAULT_LAUNCH, Measurement
from tsopt.workers import watchdog
from tsopt.workers.limits import HEALTH_LIMIT_S, SETUP_LIMIT_S, STARTUP_LIMIT_S, Limits
from tsopt.workers.measurer import MeasureError, Measurer, Probe
from tsopt.workers.outcomes import first_line, outcome_to_measurement
from tsopt.workers.watchdog import WorkerProcess

WORKER_MAX_CANDIDATES = 200
"""Candidates per worker before it is recycled: each leaves its library and module loaded."""

REBASELINE_EVERY = 25
"""With ``baseline="once"``, a worker times the vendor baseline again after this many
candidates of one problem."""

BASELINE_MODES = ("paired", "once")

WORKER_START_ATTEMPTS = 2
"""A worker that cannot start (or set up a problem) this many times running: MeasureError."""


class WorkerMeasurer(Measurer):
    """Persistent measuring workers, one at a time, replaced after failures; see the module doc."""

    isolation = "worker"

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 gpu: int | None = None, *, max_candidates: int = WORKER_MAX_CANDIDATES,
                 baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
                 log: Callable[[str], None] | None = None, launch: str = DEFAULT_LAUNCH) -> None:
        super().__init__(runs, warmup, checks, gpu, log, launch)
        if max_candidates < 1 or rebaseline_every < 1:
            raise ValueError(f"max_candidates={max_candidates} and rebaseline_every="
                             f"{rebaseline_every} must be at least 1")
        if baseline not in BASELINE_MODES:
            raise ValueError(f"baseline {baseline!r}: expected one of {', '.join(BASELINE_MODES)}")
        self.paired = baseline == "paired"
        self.max_candidates = max_candidates
        self.rebaseline_every = rebaseline_every
        self.worker: WorkerProcess | None = None

    # -- workers ---------------------------------------------------------------------------
    def _start(self) -> WorkerProcess:
        errors: list[str] = []
        # Looked up at each start (not imported by name): the tests replace it to start their
        # simulated runner.
        argv = watchdog.runner_argv("worker", "--max-candidates", str(self.max_candidates))
        for _ in range(WORKER_START_ATTEMPTS):
            self.stats.processes += 1
            try:
                worker = WorkerProcess(self.stats.processes, argv, watchdog.child_env(self.gpu))
            except OSError as exc:
                errors.append(f"could not start {argv[0]!r}: {exc.strerror}")
                continue
            outcome = worker.wait_ready("startup", STARTUP_LIMIT_S)
            if worker.alive:
                self.stats.startup_seconds.append(outcome.seconds)
                device = worker.environment.get("device") or "no GPU"
                self.log(f"{worker.name} started: ready in {outcome.seconds:.1f} s on {device}")
                return worker
            errors.append(outcome_to_measurement(outcome, "worker", "").error or "?")
            worker.close()
        raise MeasureError("cannot start a measuring worker: " + " | ".join(errors))

    def _drop(self, worker: WorkerProcess, why: str) -> None:
        worker.close()
        if self.worker is worker:
            self.worker = None
        self.stats.replaced += 1
        self.log(f"{worker.name} {why}; the next candidate gets a new worker")

    def _retire(self, worker: WorkerProcess) -> None:
        worker.close()
        if self.worker is worker:
            self.worker = None
        self.stats.recycled += 1
        self.log(f"{worker.name} recycled after {worker.measured} candidates "
                 f"(the cap is {self.max_candidates})")

    def _await_idle(self, worker: WorkerProcess) -> None:
        """The worker checks its context after each command and says ready, or it exits."""
        outcome = worker.wait_ready("idle", HEALTH_LIMIT_S)
        if worker.alive:
            return
        if outcome.killed_for is not None:
            why = f"its health check did not finish within {HEALTH_LIMIT_S:.0f} s; killed"
        else:
            said = [ln.split("exiting:", 1)[1].strip() for ln in outcome.log_tail.splitlines()
                    if "exiting:" in ln]
            why = said[-1] if said else first_line(
                outcome_to_measurement(outcome, "worker", "").error)
        self._drop(worker, f"exited between candidates: {why}")

    # -- baselines -------------------------------------------------------------------------
    def _time_baseline(self, worker: WorkerProcess, problem: Problem, command: dict[str, Any],
                       fatal: bool) -> str | None:
        """Set up (or re-time) ``problem`` in ``worker``; None when done, else why not.

        With ``fatal``, a failure the worker itself reports (no GPU, out of memory, a CUDA
        fault in torch) raises :class:`MeasureError`; one it cannot report (killed, died) is
        returned so that the caller may try a new worker.
        """
        outcome = worker.request(command, "setup", {"setup": SETUP_LIMIT_S}, {},
                                 ("baseline", "result"))
        final = outcome.final
        if final is None:
            why = first_line(outcome_to_measurement(outcome, "baseline", problem.key).error)
            self._drop(worker, f"was lost timing the {problem.key} baseline: {why}")
            return why
        if final["event"] == "result":
            error = final["measurement"].get("error") or final["measurement"].get("status")
            self._await_idle(worker)
            if fatal:
                raise MeasureError(f"cannot time the {problem} baseline here: {error}")
            self.log(f"{worker.name}: timing the {problem.key} baseline again failed: {error}")
            return str(error)
        try:
            probe = Probe(Baseline.from_dict(final["baseline"]),
                          dict(final.get("environment") or {}))
        except (TypeError, ValueError) as exc:
            self._drop(worker, "sent a malformed baseline")
            raise MeasureError(f"malformed baseline from the worker: {exc}") from None
        self._record_baseline(problem.key, probe)
        worker.problem_key = problem.key
        worker.since_baseline = 0
        b = probe.baseline
        self.log(f"{worker.name}: {problem.key} baseline {b.name} {b.median_us:.2f} us "
                 f"(p10 {b.p10_us:.2f}, p90 {b.p90_us:.2f}; "
                 f"{probe.environment.get('buffer_sets', '?')} buffer sets; "
                 f"{outcome.seconds:.2f} s)")
        self._await_idle(worker)
        return None

    def _ensure(self, problem: Problem) -> WorkerProcess:
        """A live worker holding ``problem``'s buffers and baseline (started and set up here)."""
        failures: list[str] = []
        while True:
            if self.worker is None:
                self.worker = self._start()
            worker = self.worker
            if worker.alive and worker.problem_key == problem.key:
                return worker
            command = {"cmd": "problem", "problem": problem.to_dict(), "runs": self.runs,
                       "warmup": self.warmup}
            why = self._time_baseline(worker, problem, command, fatal=True)
            if why is None and self.worker is worker:
                return worker
            failures.append(why or "the worker failed its health check after the set-up")
            if len(failures) >= WORKER_START_ATTEMPTS:
                raise MeasureError(f"cannot time the {problem} baseline here: {failures[-1]}")

    def probe(self, problem: Problem) -> Probe:
        if problem.key not in self.probes:
            self._ensure(problem)
        return self.probes[problem.key]

    def _rebaseline(self, worker: WorkerProcess, problem: Problem) -> None:
        self._time_baseline(worker, problem, {"cmd": "baseline"}, fatal=False)

    # -- candidates ------------------------------------------------------------------------
    def _measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        worker = self._ensure(problem)
        if not self.paired and worker.since_baseline >= self.rebaseline_every:
            self._rebaseline(worker, problem)
            worker = self._ensure(problem)
        limits = Limits.for_candidate(self.probes[problem.key].baseline.median_us, self.runs,
                                      self.warmup, self.checks).at_ms(samples_of(problem))
        command = {"cmd": "measure", "artifact": str(artifact_dir.resolve()),
                   "genome_hash": genome_hash, "runs": self.runs, "warmup": self.warmup,
                   "checks": self.checks, "paired": self.paired, "launch": self.launch}
        outcome = worker.request(command, "check",
                                 {"check": limits.check_s, "timing": limits.timing_s},
                                 {"checked": "timing"}, ("result",))
        measured = outcome_to_measurement(outcome, genome_hash, problem.key)
        worker.measured += 1
        worker.since_baseline += 1
        final = outcome.final
        info = (final or {}).get("worker") or {}
        pid = info.get("pid") if isinstance(info, dict) else None
        self.last_pid = pid if isinstance(pid, int) else worker.pid
        short = genome_hash[:12]
        if final is None:
            self._drop(worker, f"was lost to candidate {short} ({measured.status}: "
                               f"{first_line(measured.error)})")
        elif final["measurement"].get("genome_hash") != genome_hash:
            self._drop(worker, f"reported another candidate for {short}")
        elif isinstance(info, dict) and info.get("exiting"):
            self._drop(worker, f"exited after candidate {short}: {info['exiting']}")
        elif worker.measured >= self.max_candidates:
            self._retire(worker)
        else:
            self._await_idle(worker)
        return measured

    def finish_problem(self, problem: Problem) -> None:
        """Unpaired: time the baseline once more at the end of a problem (its spread)."""
        worker = self.worker
        if (not self.paired and worker is not None and worker.alive
                and worker.problem_key == problem.key and worker.since_baseline > 0):
            self._rebaseline(worker, problem)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        super().close()
