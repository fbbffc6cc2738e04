"""What a measuring child did, as the watchdog saw it, and the Measurement status it comes to.

Standard library only (plus tsopt.core.records).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace
from typing import Any

from tsopt.core.records import Measurement
from tsopt.workers.limits import LOAD_FLOOR_S, MAX_SLOWDOWN, TIMING_FLOOR_S


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


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


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
