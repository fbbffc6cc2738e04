"""The persistent measuring child (``--child worker``): one CUDA context, many candidates.

The watchdog's side of it is tsopt.workers.worker_measurer; the commands and reports are
tsopt.workers.protocol's. Torch and the standard library only.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tsopt.core.artifact import ArtifactError, ArtifactManifest
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import DEFAULT_LAUNCH, Measurement
from tsopt.workers import device
from tsopt.workers.buffers import Buffers, fill
from tsopt.workers.candidate import (
    baseline_launcher,
    baseline_record,
    check_and_time,
    check_and_time_at_ms,
    exported_call,
    failure_report,
    load_module,
)
from tsopt.workers.faults import STICKY_STATUSES, KernelFault, fault_from_torch
from tsopt.workers.loader import KernelLibrary, KernelLoadError
from tsopt.workers.protocol import CommandReader, Reporter
from tsopt.workers.range_measure import artifact_m_range, samples_for
from tsopt.workers.reference import OpReference, reference_for
from tsopt.workers.session import Session, Timing


@dataclass
class ProblemState:
    """A worker's buffers and vendor timing for one problem, reused by all its candidates."""

    problem: Problem
    reference: OpReference
    buffers: Buffers
    runs: int
    warmup: int
    vendor: Timing | None = None


class MeasuringWorker:
    """The watchdog's persistent child: one CUDA context, many candidates.

    Commands arrive on the command pipe (see tsopt.workers.protocol): ``problem`` frees the last
    problem's buffers, allocates this one's and times the vendor baseline on them;
    ``measure`` loads a candidate's library and checks and times it on those buffers (and,
    paired, the vendor after it); ``baseline`` times the vendor again. After each command it
    checks its context with a tiny torch op and says ``ready``, or exits: after a sticky fault
    (which it reports in the result), a failed health check, or ``max_candidates``
    candidates. The candidates' libraries stay loaded until it exits.
    """

    def __init__(self, reporter: Reporter, max_candidates: int) -> None:
        self.reporter = reporter
        self.max_candidates = max_candidates
        self.pid = os.getpid()
        self.no_gpu = device.why_no_gpu()
        self.environment: dict[str, Any] = {
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "python": sys.version.split()[0],
        }
        self.session: Session | None = None
        if self.no_gpu is None:
            device.create_context()
            self.environment = device.environment()
            self.session = device.new_session(None)
        self.state: ProblemState | None = None
        self.measured = 0
        self.libraries: list[KernelLibrary] = []  # loaded for good: ctypes cannot unload
        self.current: tuple[str, str] | None = None  # (genome hash, problem key) in hand

    def serve(self, commands: CommandReader) -> None:
        """Answer commands until the command pipe closes or a reason to exit comes up."""
        self.reporter.send("ready", environment=self.environment, pid=self.pid, measured=0)
        for command in commands:
            exiting = self.handle(command)
            self.current = None
            if exiting is None and self.measured >= self.max_candidates:
                exiting = f"measured {self.measured} candidates, the cap; recycled"
            if exiting is None and self.session is not None:
                exiting = device.context_healthy(self.session)
            if exiting is not None:
                print(f"tsopt worker {self.pid} exiting: {exiting}", file=sys.stderr, flush=True)
                return
            self.reporter.send("ready", pid=self.pid, measured=self.measured)

    def handle(self, command: dict[str, Any]) -> str | None:
        """Carry out one command and report it; returns why this worker must exit, if it must."""
        if command["cmd"] == "problem":
            problem = Problem.from_dict(command["problem"])
            return self._baseline(problem, int(command["runs"]), int(command["warmup"]))
        if command["cmd"] == "baseline":
            if self.state is None:
                return self._baseline_failed("", "launch_error", "no problem is set up")
            return self._baseline(self.state.problem, self.state.runs, self.state.warmup)
        return self._candidate(Path(command["artifact"]), str(command["genome_hash"]),
                               int(command["runs"]), int(command["warmup"]),
                               int(command["checks"]), bool(command.get("paired", False)),
                               str(command.get("launch", DEFAULT_LAUNCH)),
                               command.get("m_samples"))

    # -- the vendor baseline ---------------------------------------------------------------
    def _baseline_failed(self, problem_key: str, status: str, message: str) -> str | None:
        self.reporter.send("result", measurement=failure_report("baseline", problem_key, status,
                                                                message))
        if status in STICKY_STATUSES:
            return f"a sticky CUDA fault ({status}) while timing the baseline: {message}"
        return None

    def _baseline(self, problem: Problem, runs: int, warmup: int) -> str | None:
        """Set up ``problem`` (unless it is the one held) and time the vendor on its buffers."""
        self.current = ("baseline", problem.key)
        if self.no_gpu is not None or self.session is None:
            return self._baseline_failed(problem.key, "launch_error", self.no_gpu or "no GPU")
        session = self.session
        try:
            if self.state is None or self.state.problem.key != problem.key:
                self._drop_problem()
                reference = reference_for(problem)
                with torch.cuda.stream(session.stream):
                    buffers = session.allocate(reference, reference.default_tensors())
                self.state = ProblemState(problem, reference, buffers, runs, warmup)
            state = self.state
            with torch.cuda.stream(session.stream):
                fill(state.buffers, state.reference, session.generator)
                state.vendor = session.time_runs(baseline_launcher(state.reference),
                                                 state.buffers.sets, runs, warmup,
                                                 state.reference.baseline_name)
        except ProblemError as exc:
            return self._baseline_failed(problem.key, "launch_error", str(exc))
        except KernelFault as fault:
            return self._baseline_failed(problem.key, fault.status, fault.message)
        except RuntimeError as exc:
            seen = fault_from_torch(exc, session.cuda, f"the {problem} baseline")
            return self._baseline_failed(problem.key, seen.status, seen.message)
        env = {**self.environment, "pid": self.pid,
               "buffer_sets": len(state.buffers.sets),
               "rotation_bytes": state.buffers.set_bytes * len(state.buffers.sets)}
        baseline = baseline_record(state.reference, state.vendor, str(env.get("device", "")))
        self.reporter.send("baseline", baseline=baseline.to_dict(), environment=env)
        return None

    def _drop_problem(self) -> None:
        """Free the last problem's buffers before allocating the next one's."""
        if self.state is None:
            return
        self.state = None
        gc.collect()
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    # -- a candidate -----------------------------------------------------------------------
    def _candidate(self, artifact_dir: Path, genome_hash: str, runs: int, warmup: int,
                   checks: int, paired: bool, launch: str = DEFAULT_LAUNCH,
                   m_samples: Any = None) -> str | None:
        state = self.state
        self.current = (genome_hash, state.problem.key if state is not None else "")
        measured = self.measure(artifact_dir, genome_hash, runs, warmup, checks, paired, launch,
                                m_samples)
        self.measured += 1
        exiting = None
        if measured.status in STICKY_STATUSES:
            exiting = f"a sticky CUDA fault ({measured.status}) leaves the context unusable"
        self.reporter.send("result", measurement=measured.to_dict(),
                           worker={"pid": self.pid, "measured": self.measured,
                                   "exiting": exiting})
        return exiting

    def measure(self, artifact_dir: Path, genome_hash: str, runs: int, warmup: int,
                checks: int, paired: bool = True, launch: str = DEFAULT_LAUNCH,
                m_samples: Any = None) -> Measurement:
        """Check and time one artifact on the held problem's buffers; never raises for it.

        ``paired``: time the vendor right after it on the same buffers (else use the worker's
        timing of the problem); ``launch``: the launch mode both are timed in. A runtime-M
        kernel is measured at several M (``m_samples``, else its range's sample; see
        tsopt.workers.range_measure), always paired.
        """
        started = time.perf_counter()
        state = self.state
        base: dict[str, Any] = {
            "genome_hash": genome_hash, "problem_key": state.problem.key if state else "",
            "cuda": torch.version.cuda or "", "torch": torch.__version__,
            "device": str(self.environment.get("device", "")),
            "driver": str(self.environment.get("driver", "")), "launch": launch,
        }

        def failed(status: str, message: str) -> Measurement:
            return Measurement(status=status, error=message,  # type: ignore[arg-type]
                               seconds=round(time.perf_counter() - started, 3), **base)

        if self.no_gpu is not None or self.session is None:
            return failed("launch_error", self.no_gpu or "no GPU")
        if state is None or state.vendor is None:
            return failed("launch_error", "the measuring worker has no problem set up")
        try:
            manifest = ArtifactManifest.read(artifact_dir)
            if manifest.genome_hash != genome_hash:
                raise KernelLoadError(f"{artifact_dir} holds genome {manifest.genome_hash[:12]}, "
                                      f"not {genome_hash[:12]}")
            problem = Problem.from_dict(manifest.problem)
            if problem.key != state.problem.key:
                raise KernelLoadError(f"it was built for {problem.key}; this worker holds "
                                      f"{state.problem.key}")
            state.reference.check_tensors(manifest.tensors)
            if m_samples is not None and (not isinstance(m_samples, list) or not all(
                    isinstance(m, int) and not isinstance(m, bool) for m in m_samples)):
                raise KernelLoadError(f"m_samples {m_samples!r} is not a list of integers")
            samples = samples_for(problem, artifact_m_range(artifact_dir), m_samples)
            lib = device.open_library(artifact_dir, manifest)
        except (ArtifactError, ProblemError, KernelLoadError) as exc:
            return failed("launch_error", f"cannot load the artifact: {exc}")
        self.libraries.append(lib)
        session = self.session
        session.cuda = lib.cuda.runtime  # error codes through the runtime the artifact uses
        try:
            with torch.cuda.stream(session.stream):
                load_module(lib)
                if samples:
                    return check_and_time_at_ms(
                        samples, artifact_dir, lib, state.reference, manifest.tensors,
                        state.buffers, session, runs, warmup, checks,
                        lambda info: self.reporter.send("checked", **info), base, started,
                        launch=launch)
                return check_and_time(
                    lib, state.reference, manifest.tensors, state.buffers, session, runs,
                    warmup, checks, lambda info: self.reporter.send("checked", **info), base,
                    started, launch=launch,
                    user_call=exported_call(artifact_dir) if launch == "eager" else None,
                )
        except KernelFault as fault:
            return failed(fault.status, fault.message)
        except RuntimeError as exc:
            seen = fault_from_torch(exc, session.cuda, "the measurement")
            return failed(seen.status, seen.message)
