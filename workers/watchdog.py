"""Child-process isolation for measuring candidates, under a watchdog.

A candidate kernel can deadlock (the GPU never returns), fault (an illegal address poisons the
CUDA context for the rest of the process) or take the process down (a signal). So candidates
never run in this process: this module, which never touches the GPU itself, runs them in
children of ``python -m tsopt.workers.runner --child ...``, turns whatever happened into a
:class:`Measurement` and goes on with the next candidate. Two isolations:

``worker`` (the default; :class:`WorkerMeasurer`)
    One persistent child measures candidates one after another: it imports torch and creates
    the CUDA context once, allocates the rotating buffer sets and times the vendor baseline
    once per problem (the first timing sets the watchdog's limits), then per candidate loads
    its library, checks, times and reports. The vendor baseline that a candidate's ratio uses
    is, with ``baseline="once"`` (the default), the worker's latest timing of the problem:
    timed again every :data:`REBASELINE_EVERY` candidates, at the end of each problem and in
    every new worker, and the spread of these timings is reported; with
    ``baseline="paired"`` it is timed right after the candidate on the same buffers, as a
    process of its own does, at 2 x the vendor time x (warm-up + runs) per candidate (+0.1 s,
    +45 %, for an 8192^3 GEMM). The ranking objective is the candidate's own median, which
    neither choice touches. (On an H200, 8192^3 bf16 cuBLAS medians spread by ~15 % within
    one run in every mode, per-process included; smaller GEMMs by < 1 %.) The
    parent keeps the per-candidate deadlines: a candidate that hangs is killed
    with the whole process group (``hang``), a signal death is a ``crash``, and a new worker
    goes on with the next candidate. A sticky CUDA fault (the child classifies it) makes the
    worker report and exit; after every other result the worker proves its context healthy
    with a tiny torch op before it takes the next candidate. A worker is recycled after
    :data:`WORKER_MAX_CANDIDATES` candidates (their libraries stay loaded: ctypes cannot
    unload them reliably).
``process`` (:class:`ProcessMeasurer`)
    Every candidate in a fresh child (and the baseline in a probe child): 3-5 s of Python
    start, torch import and CUDA context per candidate, nothing shared.

Every child reports on a private pipe (its file descriptor number in ``TSOPT_REPORT_FD``),
one JSON object per line, never on stdout: the kernel's host code prints to stdout (the
exported header's error macro does), and a C ``printf`` buffer may be flushed in the middle of
a line. A worker reads its commands from a second pipe (``TSOPT_COMMAND_FD``), one JSON
object per line. Events::

    {"event": "ready", "environment": {...}, "pid": N}  torch imported, CUDA context up; a
                                                     worker says it again, without the
                                                     environment, when it is idle and healthy
    {"event": "checked", ...}                       the candidate produced correct output
    {"event": "result", "measurement": {...}}       the final Measurement (any status); a
                                                     worker adds "worker": {"pid", ...}
    {"event": "baseline", "baseline": {...}, ...}   the vendor baseline (a probe, or a
                                                     worker's "problem"/"baseline" command)

Worker commands::

    {"cmd": "problem", "problem": {...}, "runs": R, "warmup": W}   free the last problem's
                                              buffers, allocate this one's, time the baseline
    {"cmd": "measure", "artifact": DIR, "genome_hash": H, "runs": R, "warmup": W, "checks": C,
     "paired": true}                          (paired: time the vendor after the candidate)
    {"cmd": "baseline"}                       time the baseline again on the same buffers
    (end of file)                             exit

Each phase has its own deadline, so that a slow Python start-up is not taken for a hang:

- start-up (spawn -> ready): :data:`STARTUP_LIMIT_S`; exceeding it is ``timeout``.
- check (ready, or the measure command -> checked): module load, the checked launches;
  exceeding it is ``hang``.
- timing (checked -> result): the timed runs (and, per process, the baseline); exceeding it is
  ``timeout``.
- a worker's set-up (problem/baseline command -> baseline): :data:`SETUP_LIMIT_S`; its
  health check (result -> ready): :data:`HEALTH_LIMIT_S`. Neither is charged to a candidate.

Standard library only (plus tsopt.core.records / tsopt.core.problem / tsopt.core.bundle, themselves standard
library only).
"""

from __future__ import annotations

import json
import logging
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from tsopt.core.artifact import ArtifactError, ArtifactManifest
from tsopt.core.bundle import Baseline
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import Measurement

REPORT_FD_ENV = "TSOPT_REPORT_FD"
COMMAND_FD_ENV = "TSOPT_COMMAND_FD"
EVENTS = ("ready", "checked", "result", "baseline")
COMMANDS = ("problem", "measure", "baseline")
MAX_REPORT_LINE = 1 << 20  # a report line is a few hundred bytes; a megabyte is a runaway child
ISOLATIONS = ("worker", "process")

_LOG = logging.getLogger(__name__)

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

SETUP_LIMIT_S = PROBE_LIMIT_S
"""A worker's problem or baseline command -> baseline: free, allocate, fill, time torch."""

HEALTH_LIMIT_S = 30.0
"""A worker's result -> ready: the tiny torch op that shows its context survived the candidate
(milliseconds when it did)."""

WORKER_MAX_CANDIDATES = 200
"""Candidates per worker before it is recycled: each leaves its library and module loaded."""

REBASELINE_EVERY = 25
"""With ``baseline="once"``, a worker times the vendor baseline again after this many
candidates of one problem."""

BASELINE_MODES = ("paired", "once")

WORKER_START_ATTEMPTS = 2
"""A worker that cannot start (or set up a problem) this many times running: MeasureError."""


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
        (the +2: the baseline is timed again in a per-candidate child, and the runs are padded
        by a short sleep kernel that hides the host launch gap).
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
    """A line on the report pipe (or the command pipe) is not a well-formed event (command)."""


def encode_event(event: str, **payload: Any) -> bytes:
    if event not in EVENTS:
        raise ValueError(f"unknown report event {event!r}; known: {EVENTS}")
    return (json.dumps({"event": event, **payload}, allow_nan=False) + "\n").encode()


def parse_event(line: bytes | str) -> dict[str, Any]:
    """One report line -> its event dict; raises :class:`ReportError` naming what is wrong."""
    doc = _json_object(line)
    event = doc.get("event")
    if event not in EVENTS:
        raise ReportError(f"unknown event {event!r}; known: {', '.join(EVENTS)}")
    if event == "result" and not isinstance(doc.get("measurement"), dict):
        raise ReportError("a result event needs a 'measurement' object")
    if event == "baseline" and not isinstance(doc.get("baseline"), dict):
        raise ReportError("a baseline event needs a 'baseline' object")
    return doc


def encode_command(cmd: str, **payload: Any) -> bytes:
    if cmd not in COMMANDS:
        raise ValueError(f"unknown worker command {cmd!r}; known: {COMMANDS}")
    return (json.dumps({"cmd": cmd, **payload}, allow_nan=False) + "\n").encode()


def parse_command(line: bytes | str) -> dict[str, Any]:
    """One command line -> its dict; raises :class:`ReportError` naming what is wrong."""
    doc = _json_object(line)
    cmd = doc.get("cmd")
    if cmd not in COMMANDS:
        raise ReportError(f"unknown command {cmd!r}; known: {', '.join(COMMANDS)}")
    needed = {"problem": ("problem", "runs", "warmup"),
              "measure": ("artifact", "genome_hash", "runs", "warmup", "checks")}.get(cmd, ())
    missing = [k for k in needed if k not in doc]
    if missing:
        raise ReportError(f"a {cmd} command needs {', '.join(missing)}")
    return doc


def _json_object(line: bytes | str) -> dict[str, Any]:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"not JSON ({exc.msg} at column {exc.colno}): {text[:200]!r}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"not a JSON object: {text[:200]!r}")
    return doc


def _pipe_fd(name: str, role: str) -> int:
    value = os.environ.get(name)
    if value is None or not value.isdigit():
        raise RuntimeError(
            f"{name}={value!r}: the child runner {role} a pipe that the watchdog opens; run it "
            "through tsopt.workers.watchdog, not by hand"
        )
    return int(value)


class Reporter:
    """The child's end of the report pipe (``TSOPT_REPORT_FD``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def from_env(cls) -> Reporter:
        return cls(_pipe_fd(REPORT_FD_ENV, "reports on"))

    def send(self, event: str, **payload: Any) -> None:
        data = encode_event(event, **payload)
        while data:
            data = data[os.write(self.fd, data):]


class CommandReader:
    """A worker's end of the command pipe (``TSOPT_COMMAND_FD``): commands until end of file."""

    def __init__(self, fd: int) -> None:
        self.stream = os.fdopen(fd, "rb")

    @classmethod
    def from_env(cls) -> CommandReader:
        return cls(_pipe_fd(COMMAND_FD_ENV, "reads its commands from"))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self.stream:
            yield parse_command(line)


# -- reading a child's reports -------------------------------------------------------------
class _Garbage(Exception):
    """The child wrote something that is not the protocol; the message says what."""


_TIMEOUT = "timeout"
_EOF = "eof"


class _EventReader:
    """Report lines from a pipe, with a deadline per read; keeps partial lines across reads."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def next_event(self, deadline: float) -> dict[str, Any] | str:
        """The next event, or :data:`_TIMEOUT` at ``deadline``, or :data:`_EOF`."""
        while True:
            if b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    return parse_event(line)
                except ReportError as exc:
                    raise _Garbage(f"malformed report: {exc}") from None
            if self.closed:
                return _EOF
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _TIMEOUT
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:  # the child closed the pipe: it exited (or is exiting)
                self.closed = True
                continue
            self.buffer += chunk
            if len(self.buffer) > MAX_REPORT_LINE and b"\n" not in self.buffer:
                raise _Garbage(f"report line longer than {MAX_REPORT_LINE} bytes")


# -- one child -----------------------------------------------------------------------------
@dataclass
class ChildOutcome:
    """What one child process did (or a worker did with one command), as the watchdog saw it."""

    events: list[dict[str, Any]] = field(default_factory=list)
    phase: str = "startup"  # the phase the child was in when it stopped: startup, check, timing
    final: dict[str, Any] | None = None  # the result or baseline event
    returncode: int | None = None
    killed_for: str | None = None  # the phase whose deadline passed
    limit_s: float | None = None  # that phase's deadline
    protocol_error: str | None = None
    log_tail: str = ""
    seconds: float = 0.0
    pid: int | None = None
    environment: dict[str, Any] = field(default_factory=dict)  # a worker's, from its start-up

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


def _tail(log: IO[bytes], limit: int = 4000, start: int = 0) -> str:
    """The last ``limit`` bytes of a child's log written since offset ``start``.

    Read with pread: a live worker shares the file's offset, and a seek here would make it
    write over its own log.
    """
    fd = log.fileno()
    size = os.fstat(fd).st_size
    begin = max(start, size - limit)
    return os.pread(fd, max(0, size - begin), begin).decode(errors="replace").strip()


def _follow(
    proc: subprocess.Popen[bytes], reader: _EventReader, outcome: ChildOutcome,
    deadlines: dict[str, float], transitions: dict[str, str], finals: Sequence[str],
    phase_start: float,
) -> None:
    """Read the child's events until a final one; a passed deadline or garbage kills it.

    ``outcome.phase`` is the phase to start in; ``transitions`` maps an event to the phase it
    starts (its deadline counted from that event); any other event is a protocol error. An end
    of file waits up to :data:`EXIT_GRACE_S` for the child's exit.
    """
    while outcome.final is None:
        try:
            event = reader.next_event(phase_start + deadlines[outcome.phase])
        except _Garbage as exc:
            outcome.protocol_error = str(exc)
            _kill_group(proc)
            return
        if event == _TIMEOUT:
            outcome.killed_for = outcome.phase
            outcome.limit_s = deadlines[outcome.phase]
            _kill_group(proc)
            return
        if event == _EOF:
            if reader.buffer.strip():
                outcome.protocol_error = f"unterminated report line: {reader.buffer[:200]!r}"
            _wait_exit(proc)
            return
        assert isinstance(event, dict)
        outcome.events.append(event)
        name = event["event"]
        if name in finals:
            outcome.final = event
        elif name in transitions:
            outcome.phase = transitions[name]
            phase_start = time.monotonic()
        else:
            outcome.protocol_error = f"unexpected {name!r} report in the {outcome.phase} phase"
            _kill_group(proc)
            return


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
        outcome.pid = proc.pid
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
    transitions = {"ready": "check", "checked": "timing"}
    _follow(proc, _EventReader(read_fd), outcome, deadlines, transitions, ("result", "baseline"),
            started)
    if outcome.final is not None:
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
    env = outcome.environment or (outcome.event("ready") or {}).get("environment") or {}
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
        # The watchdog's wall time: what measuring this candidate cost (process start included
        # for a child of its own).
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
        elif outcome.killed_for == "startup":
            status, why = "timeout", (
                f"the measuring process was not ready within {limit} (Python start, torch "
                "import, CUDA context); killed"
            )
        else:
            status, why = "timeout", (
                f"the measuring worker did not finish its {outcome.killed_for} within {limit}; "
                "killed"
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


# -- one candidate or one probe per process ------------------------------------------------
class MeasureError(RuntimeError):
    """This machine cannot measure at all (no GPU, no CUDA, the baseline itself failed)."""


@dataclass(frozen=True)
class Probe:
    """The vendor baseline timed in a child, and the environment it ran in."""

    baseline: Baseline
    environment: dict[str, Any]


def runner_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "tsopt.workers.runner", "--child", *args]


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


def _candidate_outcome(
    artifact_dir: Path, baseline_us: float, runs: int, warmup: int, checks: int,
    gpu: int | None,
) -> ChildOutcome:
    argv = runner_argv("measure", "--artifact", str(Path(artifact_dir).resolve()),
                       "--runs", str(runs), "--warmup", str(warmup), "--checks", str(checks))
    limits = Limits.for_candidate(baseline_us, runs, warmup, checks)
    return run_child(argv, limits, env=child_env(gpu))


def measure_candidate(
    artifact_dir: Path, genome_hash: str, problem_key: str, baseline_us: float, runs: int = 50,
    warmup: int = 10, checks: int = 2, gpu: int | None = None,
) -> Measurement:
    """Check and time one artifact in its own process; always returns a Measurement."""
    outcome = _candidate_outcome(artifact_dir, baseline_us, runs, warmup, checks, gpu)
    return outcome_to_measurement(outcome, genome_hash, problem_key)


# -- measuring many candidates -------------------------------------------------------------
def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class MeasureStats:
    """What measuring cost: processes started, wall time per candidate, every baseline timing."""

    isolation: str
    processes: int = 0  # child processes started: workers, or a probe + one per candidate
    replaced: int = 0  # workers lost to a candidate (hang, crash, sticky fault, failed health)
    recycled: int = 0  # workers retired at the candidate cap
    startup_seconds: list[float] = field(default_factory=list)  # spawn -> ready, per worker
    candidate_seconds: list[float] = field(default_factory=list)  # the watchdog's wall time
    baselines: dict[str, list[Baseline]] = field(default_factory=dict)  # by problem key
    paired_us: dict[str, list[float]] = field(default_factory=dict)  # vendor medians timed
    # with candidates, by problem key
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    @property
    def seconds(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def baseline_spread(self, problem_key: str) -> tuple[float, float, float] | None:
        """(min, max, (max - min) / min) of every vendor median timed for a problem."""
        medians = ([b.median_us for b in self.baselines.get(problem_key, [])]
                   + self.paired_us.get(problem_key, []))
        if not medians:
            return None
        return min(medians), max(medians), (max(medians) - min(medians)) / min(medians)

    def summary(self) -> str:
        """A few lines for the operator: candidates per second, processes, times, baselines."""
        n = len(self.candidate_seconds)
        total = self.seconds
        rate = f"{n / total:.2f} candidates/s" if total > 0 else "-"
        if self.isolation == "worker":
            procs = (f"{self.processes} worker process{'es' if self.processes != 1 else ''} "
                     f"started ({self.replaced} replaced after a failure, {self.recycled} "
                     "recycled at the cap)")
        else:
            procs = (f"{self.processes} child processes started (one per candidate, one "
                     "baseline probe per problem)")
        lines = [f"measured {n} candidate{'s' if n != 1 else ''} in {total:.1f} s ({rate}); "
                 f"{procs}"]
        if n:
            secs = self.candidate_seconds
            lines.append(
                f"wall time per candidate: median {_quantile(secs, 0.5):.3f} s, p90 "
                f"{_quantile(secs, 0.9):.3f} s, max {max(secs):.3f} s, sum {sum(secs):.1f} s "
                "(command to result; start-ups, baselines and health checks are the rest)"
            )
        starts = self.startup_seconds
        if starts:
            lines.append(f"worker start-up (Python, torch, CUDA context): median "
                         f"{_quantile(starts, 0.5):.2f} s over {len(starts)} "
                         f"start{'s' if len(starts) != 1 else ''}")
        for key, timings in self.baselines.items():
            spread = self.baseline_spread(key)
            if spread is None:
                continue
            lo, hi, rel = spread
            paired = len(self.paired_us.get(key, []))
            lines.append(f"baseline {key} ({timings[0].name}): {len(timings)} timing"
                         f"{'s' if len(timings) != 1 else ''} alone"
                         + (f", {paired} paired with candidates" if paired else "")
                         + f"; medians {lo:.2f}-{hi:.2f} us (spread {100 * rel:.1f} %)")
        return "\n".join(lines)


class Measurer:
    """Measures candidates one at a time on one GPU; a context manager (closing ends children).

    :meth:`probe` times a problem's baseline (raises :class:`MeasureError` when this machine
    cannot measure); :meth:`measure` returns a Measurement of any status and never raises for
    the candidate (it may raise MeasureError when the machine stops being able to measure);
    :meth:`finish_problem` is called after a problem's last candidate.
    """

    isolation = ""
    paired = True  # each candidate's ratio uses the vendor timed right after it

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 gpu: int | None = None, log: Callable[[str], None] | None = None) -> None:
        self.runs, self.warmup, self.checks, self.gpu = runs, warmup, checks, gpu
        self.log: Callable[[str], None] = log or _LOG.info
        self.stats = MeasureStats(self.isolation)
        self.probes: dict[str, Probe] = {}  # the first baseline timing of each problem
        self.last_pid: int | None = None  # the process that measured the last candidate

    def probe(self, problem: Problem) -> Probe:
        raise NotImplementedError

    def _measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        raise NotImplementedError

    def measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        measured = self._measure(Path(artifact_dir), genome_hash, problem)
        self.stats.candidate_seconds.append(measured.seconds)
        if self.paired and measured.baseline_median_us is not None:
            self.stats.paired_us.setdefault(problem.key, []).append(measured.baseline_median_us)
        return measured

    def finish_problem(self, problem: Problem) -> None:
        return None

    def close(self) -> None:
        if self.stats.ended is None:
            self.stats.ended = time.monotonic()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record_baseline(self, problem_key: str, probe: Probe) -> None:
        self.stats.baselines.setdefault(problem_key, []).append(probe.baseline)
        self.probes.setdefault(problem_key, probe)


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
                                     self.warmup, self.checks, self.gpu)
        self.last_pid = outcome.pid
        return outcome_to_measurement(outcome, genome_hash, problem.key)


class WorkerProcess:
    """One persistent measuring child (``--child worker``) with its report and command pipes."""

    def __init__(self, number: int, argv: Sequence[str], env: dict[str, str]) -> None:
        self.number = number
        self.log: IO[bytes] = tempfile.TemporaryFile()
        report_r, report_w = os.pipe()
        command_r, command_w = os.pipe()
        environ = dict(env)
        environ[REPORT_FD_ENV] = str(report_w)
        environ[COMMAND_FD_ENV] = str(command_r)
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                pass_fds=(report_w, command_r), env=environ, cwd=str(repo_root()),
                start_new_session=True,
            )
        except OSError:
            os.close(report_r)
            os.close(command_w)
            self.log.close()
            raise
        finally:
            os.close(report_w)
            os.close(command_r)
        self.reader = _EventReader(report_r)
        self.command_fd: int | None = command_w
        self.pid = self.proc.pid
        self.environment: dict[str, Any] = {}
        self.alive = True  # it is (or will be, once ready) waiting for a command
        self.problem_key: str | None = None  # the problem whose buffers it holds
        self.measured = 0
        self.since_baseline = 0
        self.mark = 0  # log offset at the start of the last command

    @property
    def name(self) -> str:
        return f"worker {self.number} (pid {self.pid})"

    def _outcome(self, phase: str) -> ChildOutcome:
        return ChildOutcome(phase=phase, pid=self.pid, environment=dict(self.environment))

    def wait_ready(self, phase: str, limit_s: float) -> ChildOutcome:
        """Wait for ``ready`` (at start-up, or idle after a command); if none comes it is gone."""
        outcome = self._outcome(phase)
        started = time.monotonic()
        _follow(self.proc, self.reader, outcome, {phase: limit_s}, {}, ("ready",), started)
        outcome.seconds = time.monotonic() - started
        if outcome.final is None:
            self._gone(outcome)
        elif phase == "startup":
            self.environment = dict(outcome.final.get("environment") or {})
            pid = outcome.final.get("pid")
            self.pid = pid if isinstance(pid, int) else self.pid
        return outcome

    def request(self, command: dict[str, Any], phase: str, deadlines: dict[str, float],
                transitions: dict[str, str], finals: Sequence[str]) -> ChildOutcome:
        """Send one command and follow the worker to its final event (or its end)."""
        outcome = self._outcome(phase)
        self.mark = os.fstat(self.log.fileno()).st_size
        started = time.monotonic()
        payload = dict(command)
        data = encode_command(payload.pop("cmd"), **payload)
        try:
            while data and self.command_fd is not None:
                data = data[os.write(self.command_fd, data):]
        except OSError:
            pass  # it has gone: its report pipe's end of file says how
        _follow(self.proc, self.reader, outcome, deadlines, transitions, finals, started)
        outcome.seconds = time.monotonic() - started
        if outcome.final is None:
            self._gone(outcome)
        return outcome

    def _gone(self, outcome: ChildOutcome) -> None:
        """It exited or was killed: reap it, keep its exit code and its output since ``mark``."""
        self.alive = False
        if self.proc.poll() is None:
            _kill_group(self.proc)
        outcome.returncode = self.proc.wait()
        outcome.log_tail = _tail(self.log, start=self.mark)

    def close(self) -> None:
        """End of file on its commands, up to EXIT_GRACE_S to exit, then the group is killed."""
        self.alive = False
        if self.command_fd is not None:
            os.close(self.command_fd)
            self.command_fd = None
        if self.proc.returncode is None:
            _wait_exit(self.proc)
            self.proc.wait()
        if not self.log.closed:
            os.close(self.reader.fd)
            self.log.close()


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


class WorkerMeasurer(Measurer):
    """Persistent measuring workers, one at a time, replaced after failures; see the module doc."""

    isolation = "worker"

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 gpu: int | None = None, *, max_candidates: int = WORKER_MAX_CANDIDATES,
                 baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
                 log: Callable[[str], None] | None = None) -> None:
        super().__init__(runs, warmup, checks, gpu, log)
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
        argv = runner_argv("worker", "--max-candidates", str(self.max_candidates))
        for _ in range(WORKER_START_ATTEMPTS):
            self.stats.processes += 1
            try:
                worker = WorkerProcess(self.stats.processes, argv, child_env(self.gpu))
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
            why = said[-1] if said else _first_line(
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
            why = _first_line(outcome_to_measurement(outcome, "baseline", problem.key).error)
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
                                      self.warmup, self.checks)
        command = {"cmd": "measure", "artifact": str(artifact_dir.resolve()),
                   "genome_hash": genome_hash, "runs": self.runs, "warmup": self.warmup,
                   "checks": self.checks, "paired": self.paired}
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
                               f"{_first_line(measured.error)})")
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


def open_measurer(
    isolation: str = "worker", runs: int = 50, warmup: int = 10, checks: int = 2,
    gpu: int | None = None, *, max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
    log: Callable[[str], None] | None = None,
) -> Measurer:
    """A :class:`WorkerMeasurer` (``isolation="worker"``) or :class:`ProcessMeasurer` (whose
    baseline is always paired)."""
    if isolation == "worker":
        return WorkerMeasurer(runs, warmup, checks, gpu, max_candidates=max_candidates,
                              baseline=baseline, rebaseline_every=rebaseline_every, log=log)
    if isolation == "process":
        return ProcessMeasurer(runs, warmup, checks, gpu, log=log)
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
    log: Callable[[str], None] | None = None,
) -> MeasureRun:
    """Measure artifacts, each isolated (see the module doc); the baseline timed per problem.

    Candidates are taken problem by problem (in order of each problem's first artifact), so a
    worker reuses its buffers; ``on_result(index, measurement)`` is called as each is measured,
    ``index`` being its position in ``artifact_dirs``, and the returned measurements are in
    that order. ``baseline``: ``"once"`` or ``"paired"`` (see the module doc). ``log``
    receives the operator's notes (workers started, replaced, recycled; baselines; the closing
    summary); by default they go to this module's logger.

    Raises :class:`MeasureError` only when the machine cannot measure at all (the baseline
    failed); every candidate-level failure is a Measurement with its status.
    """
    slots: dict[int, tuple[Measurement, int | None]] = {}

    def record(index: int, measured: Measurement, pid: int | None) -> None:
        slots[index] = (measured, pid)
        if on_result is not None:
            on_result(index, measured)

    groups: dict[str, list[tuple[int, Path, str, Problem]]] = {}
    with open_measurer(isolation, runs, warmup, checks, gpu, max_candidates=max_candidates,
                       baseline=baseline, rebaseline_every=rebaseline_every,
                       log=log) as measurer:
        for index, artifact_dir in enumerate(artifact_dirs):
            genome_hash, problem, error = _identify(Path(artifact_dir))
            if problem is None:
                record(index, Measurement(genome_hash, "", "launch_error",
                                          error=f"bad artifact: {error}"), None)
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
