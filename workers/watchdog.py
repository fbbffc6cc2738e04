"""The watchdog: one measuring child under phase deadlines, killed with its process group.

A candidate kernel can deadlock (the GPU never returns), fault (an illegal address poisons the
CUDA context for the rest of the process) or take the process down (a signal). So candidates
never run in the searching process: it starts ``python -m tsopt.workers.runner --child ...``
(:func:`runner_argv`), which speaks the protocol of tsopt.workers.protocol, and this module
follows it. :func:`run_child` runs a child that measures once and exits; :class:`WorkerProcess`
is a persistent child that takes commands. Every child leads its own session, sees one GPU
(:func:`child_env`), and writes its stdout and stderr to a file whose tail goes into the
Measurement's error. What it did is a :class:`~tsopt.workers.outcomes.ChildOutcome`; the
deadlines are tsopt.workers.limits'.

Standard library only; this side never touches the GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tsopt.workers.limits import Limits
from tsopt.workers.outcomes import ChildOutcome
from tsopt.workers.protocol import (
    COMMAND_FD_ENV,
    EOF,
    REPORT_FD_ENV,
    TIMEOUT,
    EventReader,
    Garbage,
    encode_command,
)

EXIT_GRACE_S = 10.0
"""After its last report a child should exit at once (it calls os._exit); past this it is
killed and its report kept."""


def runner_argv(*args: str) -> list[str]:
    """The command line of a measuring child (``args``: ``measure ...``, ``worker ...``)."""
    return [sys.executable, "-m", "tsopt.workers.runner", "--child", *args]


def repo_root() -> Path:
    """The directory holding the ``workers`` and ``tsopt`` folders (the child's import root)."""
    return Path(__file__).resolve().parents[1]


def child_env(gpu: int | None = None) -> dict[str, str]:
    """The child's environment: the repo importable, and exactly one GPU visible.

    The runner measures on its process's device 0, and the exported module loader loads the
    cubin onto every visible device, so a child sees only ``gpu`` (default: the first device
    this process may use) and leaves the machine's other GPUs alone. ``gpu`` counts the devices
    this process sees, as torch does: under ``CUDA_VISIBLE_DEVICES=5,7`` GPU 1 is device 7.
    """
    env = dict(os.environ)
    root = str(repo_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["CUDA_VISIBLE_DEVICES"] = visible_device(gpu)
    return env


def visible_device(gpu: int | None = None) -> str:
    """What ``CUDA_VISIBLE_DEVICES`` a child measuring on this process's GPU ``gpu`` gets (see
    :func:`child_env`); "" when this process sees no such device (the child then says so)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    index = 0 if gpu is None else gpu
    if visible is None:
        return str(index)
    # Torch stops reading the list at its first empty entry; so does this.
    entries = [e.strip() for e in visible.split(",")]
    entries = entries[:entries.index("")] if "" in entries else entries
    return entries[index] if 0 <= index < len(entries) else ""


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


def _wait_exit(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)


def _follow(
    proc: subprocess.Popen[bytes], reader: EventReader, outcome: ChildOutcome,
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
        except Garbage as exc:
            outcome.protocol_error = str(exc)
            _kill_group(proc)
            return
        if event == TIMEOUT:
            outcome.killed_for = outcome.phase
            outcome.limit_s = deadlines[outcome.phase]
            _kill_group(proc)
            return
        if event == EOF:
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


# -- a child that measures once ------------------------------------------------------------
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
    _follow(proc, EventReader(read_fd), outcome, deadlines, transitions, ("result", "baseline"),
            started)
    if outcome.final is not None:
        _wait_exit(proc)


# -- a persistent child --------------------------------------------------------------------
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
        self.reader = EventReader(report_r)
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
