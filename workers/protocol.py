"""The pipes between the watchdog and a measuring child: report events and worker commands.

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
     "paired": true, "launch": "graph"}      (paired: time the vendor after the candidate;
                                              launch: the mode both are timed in; optional
                                              "m_samples": [M, ...]: the Ms a runtime-M kernel
                                              is measured at, each inside its m_range; absent:
                                              tsopt.core.buckets.sample_ms of the range)
    {"cmd": "baseline"}                       time the baseline again on the same buffers
    (end of file)                             exit

The child writes with :class:`Reporter` and reads with :class:`CommandReader`; the watchdog
reads with :class:`EventReader`. Standard library only.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator
from typing import Any

REPORT_FD_ENV = "TSOPT_REPORT_FD"
COMMAND_FD_ENV = "TSOPT_COMMAND_FD"
EVENTS = ("ready", "checked", "result", "baseline")
COMMANDS = ("problem", "measure", "baseline")
MAX_REPORT_LINE = 1 << 20  # a report line is a few hundred bytes; a megabyte is a runaway child


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


# -- the child's ends ----------------------------------------------------------------------
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


# -- the watchdog's end --------------------------------------------------------------------
class Garbage(Exception):
    """The child wrote something that is not the protocol; the message says what."""


TIMEOUT = "timeout"
EOF = "eof"


class EventReader:
    """Report lines from a pipe, with a deadline per read; keeps partial lines across reads."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def next_event(self, deadline: float) -> dict[str, Any] | str:
        """The next event, or :data:`TIMEOUT` at ``deadline``, or :data:`EOF`."""
        while True:
            if b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    return parse_event(line)
                except ReportError as exc:
                    raise Garbage(f"malformed report: {exc}") from None
            if self.closed:
                return EOF
            remaining = deadline - time.monotonic()
            # Past the deadline, one last look without waiting: a parent thread kept from
            # running (several GPUs' watchdogs in one process) must not call a report that
            # arrived in time a hang.
            ready, _, _ = select.select([self.fd], [], [], max(0.0, remaining))
            if not ready:
                if remaining <= 0:
                    return TIMEOUT
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:  # the child closed the pipe: it exited (or is exiting)
                self.closed = True
                continue
            self.buffer += chunk
            if len(self.buffer) > MAX_REPORT_LINE and b"\n" not in self.buffer:
                raise Garbage(f"report line longer than {MAX_REPORT_LINE} bytes")
