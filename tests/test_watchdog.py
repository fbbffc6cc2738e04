"""The watchdog against real child processes that hang, crash, exit, or report nonsense.

The children are small Python scripts speaking the report protocol (through the real
``Reporter``), not GPU kernels: what is under test is how the parent sees and classifies a
process, which is the same whatever the process was doing on the GPU.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workers import watchdog
from workers.watchdog import (
    EXIT_GRACE_S,
    LOAD_FLOOR_S,
    MAX_SLOWDOWN,
    TIMING_FLOOR_S,
    Limits,
    Reporter,
    ReportError,
    child_env,
    encode_event,
    outcome_to_measurement,
    parse_event,
    run_child,
)

HASH = "ab" * 32
PROBLEM = "copy-fp16-64x128"
FAST = Limits(startup_s=20.0, check_s=1.0, timing_s=1.0)

PRELUDE = f"""
import ctypes, os, signal, subprocess, sys, time
from workers.watchdog import Reporter
r = Reporter.from_env()
ENV = {{"device": "child process (no GPU)", "driver": "-", "cuda": "-", "torch": "-"}}
def result(status="ok", genome_hash={HASH!r}, **kw):
    r.send("result", measurement={{"genome_hash": genome_hash, "problem_key": {PROBLEM!r},
                                   "status": status, **kw}})
"""


def child(tmp_path: Path, body: str, limits: Limits = FAST) -> watchdog.ChildOutcome:
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return run_child([sys.executable, str(script)], limits, env=child_env())


def measured(outcome: watchdog.ChildOutcome):  # type: ignore[no-untyped-def]
    return outcome_to_measurement(outcome, HASH, PROBLEM)


# -- deadlines -----------------------------------------------------------------------------
def test_a_child_stuck_after_ready_is_killed_as_hang(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = child(tmp_path, """
        r.send("ready", environment=ENV)
        time.sleep(600)
    """)
    elapsed = time.monotonic() - started
    m = measured(outcome)
    assert m.status == "hang"
    assert "killed" in (m.error or "") and "1.0 s" in (m.error or "")
    assert m.device == "child process (no GPU)"
    assert outcome.killed_for == "check" and outcome.returncode is not None
    assert elapsed < 10, f"the hang took {elapsed:.1f} s to kill with a 1.0 s limit"


def test_a_child_that_never_gets_ready_is_a_startup_timeout(tmp_path: Path) -> None:
    limits = Limits(startup_s=1.0, check_s=60.0, timing_s=60.0)
    m = measured(child(tmp_path, "time.sleep(600)\n", limits))
    assert m.status == "timeout"
    assert "not ready within 1.0 s" in (m.error or "")


def test_a_child_stuck_after_its_check_is_a_timing_timeout(tmp_path: Path) -> None:
    outcome = child(tmp_path, """
        r.send("ready", environment=ENV)
        r.send("checked", rel_err=0.0)
        time.sleep(600)
    """)
    m = measured(outcome)
    assert m.status == "timeout"
    assert "passed its check" in (m.error or "")
    assert [e["event"] for e in outcome.events] == ["ready", "checked"]


def test_the_deadline_restarts_at_each_phase(tmp_path: Path) -> None:
    # 1.0 s per phase and two phases of 0.6 s each: 1.2 s in all, but never 1 s in one phase.
    limits = Limits(startup_s=20.0, check_s=1.0, timing_s=1.0)
    m = measured(child(tmp_path, """
        r.send("ready", environment=ENV)
        time.sleep(0.6)
        r.send("checked", rel_err=0.0)
        time.sleep(0.6)
        result(median_us=10.0)
    """, limits))
    assert m.status == "ok", m.error


def test_the_whole_process_group_is_killed(tmp_path: Path) -> None:
    outcome = child(tmp_path, """
        sleeper = subprocess.Popen(["sleep", "600"])
        r.send("ready", environment={**ENV, "grandchild": sleeper.pid})
        time.sleep(600)
    """)
    assert measured(outcome).status == "hang"
    pid = (outcome.event("ready") or {})["environment"]["grandchild"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":  # dead, waiting for a reaper
            return
        time.sleep(0.05)
    pytest.fail(f"grandchild {pid} survived the kill of its process group")


# -- deaths and garbage --------------------------------------------------------------------
def test_abort_is_a_crash_naming_the_signal(tmp_path: Path) -> None:
    m = measured(child(tmp_path, """
        r.send("ready", environment=ENV)
        os.abort()
    """))
    assert m.status == "crash"
    assert "SIGABRT" in (m.error or "") and "check phase" in (m.error or "")


def test_a_segfault_is_a_crash_naming_the_signal(tmp_path: Path) -> None:
    m = measured(child(tmp_path, """
        r.send("ready", environment=ENV)
        ctypes.string_at(0)
    """))
    assert m.status == "crash"
    assert "SIGSEGV" in (m.error or "")


def test_a_nonzero_exit_without_result_is_a_crash_with_the_output_tail(tmp_path: Path) -> None:
    m = measured(child(tmp_path, """
        print("the module load said: boom", file=sys.stderr)
        sys.exit(3)
    """))
    assert m.status == "crash"
    assert "exited with code 3 in the startup phase" in (m.error or "")
    assert "the module load said: boom" in (m.error or "")


def test_a_clean_exit_without_result_is_a_crash(tmp_path: Path) -> None:
    m = measured(child(tmp_path, 'r.send("ready", environment=ENV)\n'))
    assert m.status == "crash"
    assert "without a result" in (m.error or "")


def test_malformed_report_is_a_crash(tmp_path: Path) -> None:
    outcome = child(tmp_path, """
        os.write(r.fd, b"Got Cuda Error cudaErrorInsufficientDriver\\n")
        time.sleep(600)
    """)
    m = measured(outcome)
    assert m.status == "crash"
    assert "malformed report: not JSON" in (m.error or "")
    assert outcome.seconds < 10  # killed on the bad line, not at a deadline


def test_unknown_event_and_unterminated_line_are_crashes(tmp_path: Path) -> None:
    m = measured(child(tmp_path, 'os.write(r.fd, b\'{"event": "progress"}\\n\')\n'))
    assert m.status == "crash" and "unknown event 'progress'" in (m.error or "")
    m = measured(child(tmp_path, 'os.write(r.fd, b\'{"event": "ready"\')\n'))
    assert m.status == "crash" and "unterminated report line" in (m.error or "")


def test_a_result_for_another_genome_is_a_crash(tmp_path: Path) -> None:
    m = measured(child(tmp_path, 'result(genome_hash="cd" * 32, median_us=1.0)\n'))
    assert m.status == "crash"
    assert "cdcdcdcdcdcd" in (m.error or "")


def test_a_result_with_a_bad_field_is_a_crash(tmp_path: Path) -> None:
    m = measured(child(tmp_path, 'result(status="fast")\n'))
    assert m.status == "crash"
    assert "unknown measurement status 'fast'" in (m.error or "")


def test_cannot_start_is_a_crash(tmp_path: Path) -> None:
    outcome = run_child([str(tmp_path / "no-such-program")], FAST)
    m = measured(outcome)
    assert m.status == "crash" and "could not start" in (m.error or "")


# -- results the child classified itself ---------------------------------------------------
def test_a_reported_result_is_kept_despite_stdout_noise(tmp_path: Path) -> None:
    outcome = child(tmp_path, """
        print("Got Cuda Error cudaErrorInsufficientDriver: noise on stdout, no newline", end="")
        sys.stdout.flush()
        r.send("ready", environment=ENV)
        r.send("checked", rel_err=0.0)
        result(median_us=12.5, p10_us=12.0, p90_us=13.0, runs=50, seconds=0.25)
    """)
    m = measured(outcome)
    assert m.status == "ok" and m.median_us == 12.5 and m.runs == 50
    assert m.seconds == pytest.approx(outcome.seconds, abs=1e-3)  # the watchdog's wall time
    assert "noise on stdout" in outcome.log_tail


def test_a_cuda_fault_reported_by_the_child_keeps_its_status(tmp_path: Path) -> None:
    m = measured(child(tmp_path, """
        r.send("ready", environment=ENV)
        result(status="crash", error="CUDA error 700 cudaErrorIllegalAddress during checked run 1")
    """))
    assert m.status == "crash"
    assert m.error == "CUDA error 700 cudaErrorIllegalAddress during checked run 1"


def test_a_child_that_hangs_after_its_result_is_killed_and_the_result_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchdog, "EXIT_GRACE_S", 0.5)
    started = time.monotonic()
    outcome = child(tmp_path, """
        result(status="launch_error", error="tsopt_load returned 209")
        time.sleep(600)
    """)
    assert measured(outcome).status == "launch_error"
    assert outcome.returncode is not None and outcome.returncode < 0
    assert time.monotonic() - started < 10
    assert EXIT_GRACE_S == 10.0  # the real grace period is untouched by the patch


def test_the_parent_goes_on_after_each_failure(tmp_path: Path) -> None:
    bodies = {
        "hang": 'r.send("ready", environment=ENV)\ntime.sleep(600)\n',
        "crash": 'r.send("ready", environment=ENV)\nos.abort()\n',
        "ok": 'r.send("ready", environment=ENV)\nresult(median_us=3.0)\n',
    }
    statuses = []
    for name, body in bodies.items():
        directory = tmp_path / name
        directory.mkdir()
        statuses.append(measured(child(directory, body)).status)
    assert statuses == ["hang", "crash", "ok"]


# -- the formula and the protocol ----------------------------------------------------------
def test_limits_follow_the_stated_formula() -> None:
    limits = Limits.for_candidate(baseline_us=21.0, runs=50, warmup=10, checks=2)
    assert limits.check_s == pytest.approx(LOAD_FLOOR_S + MAX_SLOWDOWN * 21e-6 * 2)
    assert limits.timing_s == pytest.approx(TIMING_FLOOR_S + (MAX_SLOWDOWN + 2) * 21e-6 * 60)
    # The H200's cuBLAS 8192^3 bf16 GEMM (1.366 ms): a 1000x slower GEMM is given ~12.7 s.
    gemm = Limits.for_candidate(baseline_us=1366.0, runs=50, warmup=10, checks=2)
    assert gemm.check_s == pytest.approx(10.0 + 2.732)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="baseline time"):
            Limits.for_candidate(bad, 50, 10, 2)


def test_events_round_trip_and_bad_lines_are_named() -> None:
    line = encode_event("result", measurement={"status": "ok"})
    assert line.endswith(b"\n")
    assert parse_event(line.strip()) == {"event": "result", "measurement": {"status": "ok"}}
    with pytest.raises(ValueError, match="unknown report event"):
        encode_event("progress")
    with pytest.raises(ValueError):
        encode_event("result", measurement={"median_us": float("nan")})  # NaN is not JSON
    for bad, why in [
        (b"hello", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"event": 3}', "unknown event 3"),
        (b'{"event": "result"}', "needs a 'measurement' object"),
        (b'{"event": "baseline", "baseline": []}', "needs a 'baseline' object"),
    ]:
        with pytest.raises(ReportError, match=why):
            parse_event(bad)


def test_reporter_needs_the_watchdog_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(watchdog.REPORT_FD_ENV, raising=False)
    with pytest.raises(RuntimeError, match="TSOPT_REPORT_FD=None"):
        Reporter.from_env()
    read_fd, write_fd = os.pipe()
    try:
        monkeypatch.setenv(watchdog.REPORT_FD_ENV, str(write_fd))
        Reporter.from_env().send("ready", environment={})
        assert parse_event(os.read(read_fd, 1000).strip())["event"] == "ready"
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_each_child_sees_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert child_env()["CUDA_VISIBLE_DEVICES"] == "0"
    assert child_env(gpu=3)["CUDA_VISIBLE_DEVICES"] == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7")
    assert child_env()["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # none visible stays none visible
    assert child_env()["CUDA_VISIBLE_DEVICES"] == ""
    assert child_env()["PYTHONPATH"].split(os.pathsep)[0] == str(watchdog.repo_root())
