"""Child-process isolation for measuring candidates: one candidate per process, under a watchdog.

A candidate kernel can deadlock (the GPU never returns), fault (an illegal address poisons the
CUDA context for the rest of the process) or take the process down (a signal). So every
candidate runs in its own ``python -m workers.runner --child ...`` process, and this module,
which never touches the GPU itself, turns whatever happened into a :class:`Measurement` and
goes on with the next candidate.

The child reports on a private pipe (its file descriptor number in ``TSOPT_REPORT_FD``), one
JSON object per line, never on stdout: the kernel's host code prints to stdout (the exported
header's error macro does), and a C ``printf`` buffer may be flushed in the middle of a line.
Events, in order::

    {"event": "ready", "environment": {...}}        torch imported, CUDA context up
    {"event": "checked", ...}                       the candidate produced correct output
    {"event": "result", "measurement": {...}}       the final Measurement (any status)
    {"event": "baseline", "baseline": {...}, ...}   instead of "result" for a baseline probe

Each phase has its own deadline, so that a slow Python start-up is not taken for a hang:

- start-up (spawn -> ready): :data:`STARTUP_LIMIT_S`; exceeding it is ``timeout``.
- check (ready -> checked): module load, the checked launches; exceeding it is ``hang``.
- timing (checked -> result): the timed runs and the baseline; exceeding it is ``timeout``.

Standard library only (plus tsopt.records / tsopt.problem / tsopt.bundle, themselves standard
library only).
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tsopt.artifact import ArtifactError, ArtifactManifest
from tsopt.bundle import Baseline
from tsopt.problem import Problem, ProblemError
from tsopt.records import Measurement

REPORT_FD_ENV = "TSOPT_REPORT_FD"
EVENTS = ("ready", "checked", "result", "baseline")
MAX_REPORT_LINE = 1 << 20  # a report line is a few hundred bytes; a megabyte is a runaway child

# -- the timeout formula -------------------------------------------------------------------
STARTUP_LIMIT_S = 180.0
"""Spawn -> ready: Python start, ``import torch``, CUDA context creation. Independent of the
candidate (seconds on a warm machine, tens of seconds on a cold file cache), so generous."""

LOAD_FLOOR_S = 10.0
"""Floor of the check phase: cubin module load, buffer allocation, random fills and the torch
reference, none of which scales with the candidate's speed."""

TIMING_FLOOR_S = 10.0
"""Floor of the timing phase: buffer refills, event bookkeeping, the post-timing re-checks."""

MAX_SLOWDOWN = 1000.0
"""A candidate this many times slower than the vendor baseline is not worth waiting for: the
TS tutorial copy as written was 80x slower than torch's copy (MEASURED.md), so 1000x leaves
room for bad-but-real kernels while a deadlock on a 21 us copy is still caught in ~10 s."""

EXIT_GRACE_S = 10.0
"""After its last report a child should exit at once (it calls os._exit); past this it is
killed and its report kept."""

PROBE_LIMIT_S = 120.0
"""Ready -> baseline for a baseline probe: torch's own kernels, one allocation, 2 x runs."""


@dataclass(frozen=True)
class Limits:
    """Deadlines of the three phases of one child, in seconds."""

    startup_s: float
    check_s: float
    timing_s: float

    @classmethod
    def for_candidate(cls, baseline_us: float, runs: int, warmup: int, checks: int) -> Limits:
        """The watchdog's formula, from the vendor baseline's median time on this device.

        check  = LOAD_FLOOR_S   + MAX_SLOWDOWN x baseline x checks
        timing = TIMING_FLOOR_S + (MAX_SLOWDOWN + 2) x baseline x (warmup + runs)
        (the +2: the baseline is timed again in the child, and the runs are padded by a
        short sleep kernel that hides the host launch gap).
        """
        if not math.isfinite(baseline_us) or baseline_us <= 0:
            raise ValueError(f"baseline time must be a positive number of us, got {baseline_us!r}")
        base_s = baseline_us * 1e-6
        return cls(
            startup_s=STARTUP_LIMIT_S,
            check_s=LOAD_FLOOR_S + MAX_SLOWDOWN * base_s * max(checks, 1),
            timing_s=TIMING_FLOOR_S + (MAX_SLOWDOWN + 2) * base_s * (warmup + runs),
        )

    @classmethod
    def for_probe(cls) -> Limits:
        return cls(startup_s=STARTUP_LIMIT_S, check_s=PROBE_LIMIT_S, timing_s=PROBE_LIMIT_S)


# -- the report protocol -------------------------------------------------------------------
class ReportError(ValueError):
    """A line on the report pipe is not a well-formed event."""


def encode_event(event: str, **payload: Any) -> bytes:
    if event not in EVENTS:
        raise ValueError(f"unknown report event {event!r}; known: {EVENTS}")
    return (json.dumps({"event": event, **payload}, allow_nan=False) + "\n").encode()


def parse_event(line: bytes | str) -> dict[str, Any]:
    """One report line -> its event dict; raises :class:`ReportError` naming what is wrong."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"not JSON ({exc.msg} at column {exc.colno}): {text[:200]!r}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"not a JSON object: {text[:200]!r}")
    event = doc.get("event")
    if event not in EVENTS:
        raise ReportError(f"unknown event {event!r}; known: {', '.join(EVENTS)}")
    if event == "result" and not isinstance(doc.get("measurement"), dict):
        raise ReportError("a result event needs a 'measurement' object")
    if event == "baseline" and not isinstance(doc.get("baseline"), dict):
        raise ReportError("a baseline event needs a 'baseline' object")
    return doc


class Reporter:
    """The child's end of the report pipe (``TSOPT_REPORT_FD``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def from_env(cls) -> Reporter:
        value = os.environ.get(REPORT_FD_ENV)
        if value is None or not value.isdigit():
            raise RuntimeError(
                f"{REPORT_FD_ENV}={value!r}: the child runner reports on a pipe that the "
                "watchdog opens; run it through workers.watchdog, not by hand"
            )
        return cls(int(value))

    def send(self, event: str, **payload: Any) -> None:
        data = encode_event(event, **payload)
        while data:
            data = data[os.write(self.fd, data):]


# -- one child -----------------------------------------------------------------------------
@dataclass
class ChildOutcome:
    """What one child process did, as the watchdog saw it."""

    events: list[dict[str, Any]] = field(default_factory=list)
    phase: str = "startup"  # the phase the child was in when it stopped: startup, check, timing
    final: dict[str, Any] | None = None  # the result or baseline event
    returncode: int | None = None
    killed_for: str | None = None  # the phase whose deadline passed
    limit_s: float | None = None  # that phase's deadline
    protocol_error: str | None = None
    log_tail: str = ""
    seconds: float = 0.0

    def event(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == name), None)


def repo_root() -> Path:
    """The directory holding the ``workers`` and ``tsopt`` packages (the child's import root)."""
    return Path(__file__).resolve().parents[1]


def child_env(gpu: int | None = None) -> dict[str, str]:
    """The child's environment: the repo importable, and exactly one GPU visible.

    The runner measures on its process's device 0, and the exported module loader loads the
    cubin onto every visible device, so a child sees only ``gpu`` (default: the first device
    this process may use) and leaves the machine's other GPUs alone.
    """
    env = dict(os.environ)
    root = str(repo_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    else:
        visible = env.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = visible.split(",")[0].strip() if visible is not None else "0"
    return env


def gpu_present() -> bool:
    """Whether this machine shows an NVIDIA GPU (nvidia-smi, else the device node); no torch.

    A cheap first answer for callers deciding between measuring inline and writing a bundle;
    :func:`probe_baseline` is the real test (it raises :class:`MeasureError` naming the reason).
    """
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                     timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        if any(line.startswith("GPU ") for line in listing.splitlines()):
            return True
    return Path("/dev/nvidia0").exists()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The child leads its own session, so anything it spawned dies with it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(log: Any, limit: int = 4000) -> str:
    log.seek(0, os.SEEK_END)
    size = log.tell()
    log.seek(max(0, size - limit))
    text: str = log.read().decode(errors="replace")
    return text.strip()


def run_child(
    argv: Sequence[str], limits: Limits, env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ChildOutcome:
    """Run one child under the phase deadlines; never raises for anything the child does."""
    outcome = ChildOutcome()
    read_fd, write_fd = os.pipe()
    child_environ = dict(env if env is not None else child_env())
    child_environ[REPORT_FD_ENV] = str(write_fd)
    started = time.monotonic()
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(write_fd,), env=child_environ, cwd=str(cwd or repo_root()),
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            outcome.protocol_error = f"could not start {argv[0]!r}: {exc.strerror}"
            return outcome
        os.close(write_fd)
        try:
            _supervise(proc, read_fd, limits, outcome, started)
        finally:
            os.close(read_fd)
            if proc.poll() is None:
                _kill_group(proc)
            outcome.returncode = proc.wait()
        outcome.seconds = time.monotonic() - started
        outcome.log_tail = _tail(log)
    return outcome


def _supervise(
    proc: subprocess.Popen[bytes], read_fd: int, limits: Limits, outcome: ChildOutcome,
    started: float,
) -> None:
    deadlines = {"startup": limits.startup_s, "check": limits.check_s, "timing": limits.timing_s}
    next_phase = {"ready": "check", "checked": "timing"}
    phase_start = started
    buffer = b""
    while outcome.final is None:
        remaining = phase_start + deadlines[outcome.phase] - time.monotonic()
        if remaining <= 0:
            outcome.killed_for = outcome.phase
            outcome.limit_s = deadlines[outcome.phase]
            _kill_group(proc)
            return
        ready, _, _ = select.select([read_fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:  # the child closed the pipe: it exited (or is exiting) without a result
            if buffer.strip():
                outcome.protocol_error = f"unterminated report line: {buffer[:200]!r}"
            _wait_exit(proc)
            return
        buffer += chunk
        if len(buffer) > MAX_REPORT_LINE and b"\n" not in buffer:
            outcome.protocol_error = f"report line longer than {MAX_REPORT_LINE} bytes"
            _kill_group(proc)
            return
        while b"\n" in buffer and outcome.final is None:
            line, buffer = buffer.split(b"\n", 1)
            try:
                event = parse_event(line)
            except ReportError as exc:
                outcome.protocol_error = f"malformed report: {exc}"
                _kill_group(proc)
                return
            outcome.events.append(event)
            if event["event"] in ("result", "baseline"):
                outcome.final = event
            elif event["event"] in next_phase:
                outcome.phase = next_phase[event["event"]]
                phase_start = time.monotonic()
    _wait_exit(proc)


def _wait_exit(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)


# -- outcome -> Measurement ----------------------------------------------------------------
def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _with_log(message: str, outcome: ChildOutcome) -> str:
    if not outcome.log_tail:
        return message
    tail = outcome.log_tail[-1500:]
    return f"{message}\n--- last output of the measuring process ---\n{tail}"


def outcome_to_measurement(
    outcome: ChildOutcome, genome_hash: str, problem_key: str,
) -> Measurement:
    """Classify what the child did: its own report when it made one, else the watchdog's view.

    - a result reported by the child: taken as is (the child classifies CUDA faults itself:
      an illegal address is ``crash``, a refused launch ``launch_error``, wrong output ``wrong``);
    - killed in the check phase (no correct output before the deadline): ``hang``;
    - killed in start-up or in the timing phase: ``timeout``;
    - died from a signal, exited without a result, or sent a malformed report: ``crash``.
    """
    env = (outcome.event("ready") or {}).get("environment") or {}
    common = dict(
        genome_hash=genome_hash, problem_key=problem_key, seconds=round(outcome.seconds, 3),
        device=str(env.get("device", "")), driver=str(env.get("driver", "")),
        cuda=str(env.get("cuda", "")), torch=str(env.get("torch", "")),
    )
    final = outcome.final
    if final is not None and final["event"] == "result":
        try:
            measured = Measurement.from_dict(final["measurement"])
        except (TypeError, ValueError) as exc:
            return Measurement(status="crash", error=f"malformed result from the child: {exc}",
                               **common)  # type: ignore[arg-type]
        if measured.genome_hash != genome_hash:
            return Measurement(
                status="crash",
                error=f"the child measured {measured.genome_hash[:12]}, not {genome_hash[:12]}",
                **common,  # type: ignore[arg-type]
            )
        # The watchdog's wall time: what measuring this candidate cost, process start included.
        return replace(measured, seconds=round(outcome.seconds, 3))
    if outcome.killed_for is not None:
        limit = f"{outcome.limit_s:.1f} s"
        if outcome.killed_for == "check":
            status, why = "hang", (
                f"no correct result within {limit} of the module being ready "
                f"(limit = {LOAD_FLOOR_S:.0f} s + {MAX_SLOWDOWN:.0f} x baseline x checks); killed"
            )
        elif outcome.killed_for == "timing":
            status, why = "timeout", (
                f"passed its check but the timed runs did not finish within {limit} "
                f"(limit = {TIMING_FLOOR_S:.0f} s + {MAX_SLOWDOWN + 2:.0f} x baseline x runs); "
                "killed"
            )
        else:
            status, why = "timeout", (
                f"the measuring process was not ready within {limit} (Python start, torch "
                "import, CUDA context); killed"
            )
        return Measurement(status=status, error=_with_log(why, outcome), **common)  # type: ignore[arg-type]
    if outcome.protocol_error is not None:
        return Measurement(status="crash", error=_with_log(outcome.protocol_error, outcome),
                           **common)  # type: ignore[arg-type]
    code = outcome.returncode
    if code is not None and code < 0:
        why = f"the measuring process died from {_signal_name(code)} in the {outcome.phase} phase"
    elif code:
        why = f"the measuring process exited with code {code} in the {outcome.phase} phase"
    else:
        why = f"the measuring process exited in the {outcome.phase} phase without a result"
    return Measurement(status="crash", error=_with_log(why, outcome), **common)  # type: ignore[arg-type]


# -- measuring -----------------------------------------------------------------------------
class MeasureError(RuntimeError):
    """This machine cannot measure at all (no GPU, no CUDA, the baseline itself failed)."""


@dataclass(frozen=True)
class Probe:
    """The vendor baseline timed in a child, and the environment it ran in."""

    baseline: Baseline
    environment: dict[str, Any]


def runner_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "workers.runner", "--child", *args]


def probe_baseline(
    problem: Problem, runs: int = 50, warmup: int = 10, gpu: int | None = None,
) -> Probe:
    """Time the vendor baseline for ``problem`` in a child; raises :class:`MeasureError`."""
    argv = runner_argv("baseline", "--problem", problem.to_json(), "--runs", str(runs),
                       "--warmup", str(warmup))
    outcome = run_child(argv, Limits.for_probe(), env=child_env(gpu))
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


def measure_candidate(
    artifact_dir: Path, genome_hash: str, problem_key: str, baseline_us: float, runs: int = 50,
    warmup: int = 10, checks: int = 2, gpu: int | None = None,
) -> Measurement:
    """Check and time one artifact in its own process; always returns a Measurement."""
    argv = runner_argv("measure", "--artifact", str(Path(artifact_dir).resolve()),
                       "--runs", str(runs), "--warmup", str(warmup), "--checks", str(checks))
    limits = Limits.for_candidate(baseline_us, runs, warmup, checks)
    outcome = run_child(argv, limits, env=child_env(gpu))
    return outcome_to_measurement(outcome, genome_hash, problem_key)


@dataclass
class MeasureRun:
    """Every measurement of one :func:`measure_artifacts` call, with its baselines."""

    measurements: list[Measurement] = field(default_factory=list)
    probes: dict[str, Probe] = field(default_factory=dict)  # by problem key


def _identify(artifact_dir: Path) -> tuple[str, Problem | None, str | None]:
    try:
        manifest = ArtifactManifest.read(artifact_dir)
        return manifest.genome_hash, Problem.from_dict(manifest.problem), None
    except (ArtifactError, ProblemError) as exc:
        return Path(artifact_dir).name, None, str(exc)


def measure_artifacts(
    artifact_dirs: Sequence[Path], runs: int = 50, warmup: int = 10, checks: int = 2,
    gpu: int | None = None, on_result: Callable[[int, Measurement], None] | None = None,
) -> MeasureRun:
    """Measure artifacts one after the other, each isolated; the baseline probed once per problem.

    Raises :class:`MeasureError` only when the machine cannot measure at all (the baseline
    probe failed); every candidate-level failure is a Measurement with its status.
    """
    result = MeasureRun()
    for index, artifact_dir in enumerate(artifact_dirs):
        genome_hash, problem, error = _identify(Path(artifact_dir))
        if problem is None:
            measured = Measurement(genome_hash, "", "launch_error", error=f"bad artifact: {error}")
        else:
            probe = result.probes.get(problem.key)
            if probe is None:
                probe = result.probes[problem.key] = probe_baseline(problem, runs, warmup, gpu)
            measured = measure_candidate(
                Path(artifact_dir), genome_hash, problem.key, probe.baseline.median_us,
                runs, warmup, checks, gpu,
            )
        result.measurements.append(measured)
        if on_result is not None:
            on_result(index, measured)
    return result
