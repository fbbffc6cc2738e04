"""The watchdog against real child processes that hang, crash, exit, or report nonsense.

The children are small Python scripts speaking the report protocol (through the real
``Reporter``), not GPU kernels: what is under test is how the parent sees and classifies a
process, which is the same whatever the process was doing on the GPU. The persistent measuring
worker is tested at the end with real worker processes running the real runner on a simulated
device (see SIMULATED_RUNNER).
"""

from __future__ import annotations

import hashlib
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.problem import Problem
from tsopt.workers import watchdog
from tsopt.workers.limits import LOAD_FLOOR_S, MAX_SLOWDOWN, TIMING_FLOOR_S, Limits
from tsopt.workers.measure import MeasureRun, measure_artifacts
from tsopt.workers.measurer import MeasureError
from tsopt.workers.outcomes import ChildOutcome, outcome_to_measurement
from tsopt.workers.protocol import (
    REPORT_FD_ENV,
    Reporter,
    ReportError,
    encode_command,
    encode_event,
    parse_command,
    parse_event,
)
from tsopt.workers.watchdog import EXIT_GRACE_S, child_env, run_child

HASH = "ab" * 32
PROBLEM = "copy-fp16-64x128"
FAST = Limits(startup_s=20.0, check_s=1.0, timing_s=1.0)

PRELUDE = f"""
import ctypes, os, signal, subprocess, sys, time
from tsopt.workers.protocol import Reporter
r = Reporter.from_env()
ENV = {{"device": "child process (no GPU)", "driver": "-", "cuda": "-", "torch": "-"}}
def result(status="ok", genome_hash={HASH!r}, **kw):
    r.send("result", measurement={{"genome_hash": genome_hash, "problem_key": {PROBLEM!r},
                                   "status": status, **kw}})
"""


def child(tmp_path: Path, body: str, limits: Limits = FAST) -> ChildOutcome:
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return run_child([sys.executable, str(script)], limits, env=child_env())


def measured(outcome: ChildOutcome):  # type: ignore[no-untyped-def]
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
    monkeypatch.delenv(REPORT_FD_ENV, raising=False)
    with pytest.raises(RuntimeError, match="TSOPT_REPORT_FD=None"):
        Reporter.from_env()
    read_fd, write_fd = os.pipe()
    try:
        monkeypatch.setenv(REPORT_FD_ENV, str(write_fd))
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


# -- the persistent measuring worker, on a SIMULATED DEVICE --------------------------------
# These run the real watchdog against real worker processes running the real runner code
# (``python -m tsopt.workers.runner --child worker``'s MeasuringWorker, its command loop, its fault
# classification and health check). What cannot exist here is the GPU, so the child script
# below puts a SIMULATED DEVICE under the runner: CPU tensors, a synchronous session whose
# clock is a model (SIM_LAUNCH_US a launch, never the host's clock), and Python functions in
# place of the artifacts' libraries, chosen by the text of each artifact's libkernel.so. No
# figure from it is reported anywhere.
SIMULATED_RUNNER = '''
"""python -m tsopt.workers.runner on a SIMULATED DEVICE (the tests' stand-in for a GPU)."""
import ctypes
import sys
import time

import torch

from tsopt.workers import device, runner
from tsopt.workers.buffers import make_buffers
from tsopt.workers.faults import KernelFault
from tsopt.workers.loader import CudaLibraries
from tsopt.workers.session import CapturedLaunches, Session, Timing, rotation

POINTERS = {}  # data_ptr -> the simulated device's tensor at that address
CONTEXT = {"healthy": True}
# One CPU thread a simulated GPU: torch splits a copy of a few hundred KB over its threads, and
# on a busy host each split copy waits for a second core (~4 ms a copy, not ~8 us), enough for
# a candidate's timing to outrun the watchdog's deadline, which the modelled baseline sizes.
torch.set_num_threads(1)

# The simulated device's clock is a MODEL: every launch it times takes SIM_LAUNCH_US, whatever
# the host did meanwhile (the launch still runs, for the checks, hangs and crashes). It was the
# host clock, and on a busy machine a sample is then mostly the child's wait for a CPU: over the
# few rounds a time-capped pairing takes here (tests/conftest.py), the paired ratio (the median
# of per-round ratios) strayed from the ratio of the two medians the result also reports (a
# ratio of 1.0001 beside a baseline median of 3383 us), and the bundle reader rightly refused
# it (tsopt.core.bundle._ratio_against_times). One modelled time for both sides makes the
# medians equal and the ratio 1.0 by construction, however loaded the host. No figure from the
# simulated device is reported anywhere.
SIM_LAUNCH_US = 20.0


class SimulatedSession(Session):
    """The GPU session on the CPU: synchronous, timed by the model (SIM_LAUNCH_US a launch)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.device = torch.device("cpu")
        self.stream = None  # torch.cuda.stream(None) does nothing
        self.generator = torch.Generator()

    @property
    def handle(self):
        return 0

    def synchronize(self, when):
        if not CONTEXT["healthy"]:
            raise KernelFault("crash", f"simulated poisoned context during {when}")

    def allocate(self, reference, tensors):
        buffers = make_buffers(tensors, reference.dtype, 3, torch.device("cpu"))
        for bset in buffers.sets:
            for view in bset.tensors:
                POINTERS[view.data_ptr()] = view
        return buffers

    def time_runs(self, launch, sets, runs, warmup, what):
        warm, timed = rotation(len(sets), warmup, runs)
        for index in warm:
            launch(sets[index])
        for index in timed:
            launch(sets[index])
        return Timing.of([SIM_LAUNCH_US] * len(timed))

    def time_launches(self, launch, sets, what):
        for bset in sets:
            launch(bset)
        return [SIM_LAUNCH_US] * len(sets)

    def record_graph(self, launch, sets):  # the capture: each launch told it is captured
        CONTEXT["capturing"] = True
        try:
            for bset in sets:
                launch(bset)
        finally:
            CONTEXT["capturing"] = False
        return CapturedLaunches(SimulatedGraph(launch, list(sets)), len(sets))

    def time_replays(self, captured, count, what):
        for _ in range(count):
            captured.replay()
        return [SIM_LAUNCH_US] * count  # a sample is per launch

    def time_calls(self, call, sets, what):
        for bset in sets:
            call(bset)
        return SIM_LAUNCH_US  # a sample is per call


class SimulatedGraph:
    def __init__(self, launch, sets):
        self.launch, self.sets = launch, sets

    def replay(self):
        for bset in self.sets:
            self.launch(bset)

    def reset(self):
        self.sets = []


class SimulatedRuntime:
    path = "simulated libcudart"

    def describe(self, code):
        return f"{code} simulated"

    def device_count(self):
        return 0, 1

    def synchronize(self, stream):
        return 0

    def last_error(self):
        return 0


class SimulatedLibrary:
    """An artifact's library; its libkernel.so reads "simulated: BEHAVIOUR"."""

    def __init__(self, behaviour, manifest):
        self.behaviour = behaviour
        self.roles = [t.role for t in manifest.tensors]
        self.cuda = CudaLibraries(SimulatedRuntime(), None)

    @classmethod
    def open(cls, artifact_dir, manifest):
        text = (artifact_dir / manifest.library).read_text()
        return cls(text.split(":", 1)[1].strip(), manifest)

    def load_module(self):
        if self.behaviour == "refused-poison":  # refused, and the context is gone with it
            CONTEXT["healthy"] = False
        return 209 if self.behaviour.startswith("refused") else 0

    def launch(self, ptrs, stream):
        if self.behaviour == "hang":
            time.sleep(600)  # a deadlocked kernel: the synchronize after it never returns
        if self.behaviour == "segfault":
            ctypes.string_at(0)
        if self.behaviour == "illegal-address":
            return 700
        if self.behaviour == "syncs" and CONTEXT.get("capturing"):
            return 900  # cudaErrorStreamCaptureUnsupported: its host code synchronised
        views = [POINTERS[p] for p in ptrs]
        ins = [v for v, r in zip(views, self.roles) if r == "input"]
        outs = [v for v, r in zip(views, self.roles) if r == "output"]
        outs[0].copy_(ins[0])
        if self.behaviour == "wrong":
            outs[0][0, 0] = 1000.0
        return 0


# tsopt.workers.device is the seam: the measuring code reaches the GPU only through it.
device.why_no_gpu = lambda: None
device.create_context = lambda: None
device.environment = lambda cuda=None: {
    "device": "simulated device", "driver": "none", "cuda": "none", "torch": torch.__version__}
device.new_session = SimulatedSession
device.open_library = SimulatedLibrary.open
sys.exit(runner.main(sys.argv[1:]))
'''

SIM_COPY = Problem.of("copy", "fp16", rows=32, cols=64)
SIM_COPY_2 = Problem.of("copy", "fp16", rows=16, cols=128)


def use_simulated_runner(monkeypatch: pytest.MonkeyPatch, directory: Path,
                         check_floor_s: float = 4.0) -> None:
    """Make the watchdog start its children on the simulated device, with a short check floor
    (a simulated hang is then killed after ~4 s instead of LOAD_FLOOR_S)."""
    script = directory / "simulated_runner.py"
    script.write_text(SIMULATED_RUNNER)
    monkeypatch.setattr(watchdog, "runner_argv",
                        lambda *args: [sys.executable, str(script), "--child", *args])
    monkeypatch.setattr("tsopt.workers.limits.LOAD_FLOOR_S", check_floor_s)


def simulated_artifacts(root: Path, behaviours: Sequence[str], problem: Problem = SIM_COPY,
                        output_first: bool = False) -> list[Path]:
    """Artifact directories whose library is a simulated kernel with the given behaviour."""
    dirs = []
    shape = (problem["rows"], problem["cols"])
    for i, behaviour in enumerate(behaviours):
        genome_hash = hashlib.sha256(f"{root}/{problem.key}/{i}/{behaviour}".encode()).hexdigest()
        directory = root / genome_hash
        directory.mkdir(parents=True)
        (directory / "libkernel.so").write_text(f"simulated: {behaviour}\n")
        tensors = (TensorDesc("src", "input", shape, problem.dtype),
                   TensorDesc("dst", "output", shape, problem.dtype))
        if output_first:
            tensors = tensors[::-1]
        ArtifactManifest(genome_hash, "copy", problem.to_dict(), "sm_90a", tensors).write(directory)
        dirs.append(directory)
    return dirs


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    use_simulated_runner(monkeypatch, tmp_path)
    return tmp_path / "artifacts"


def _gone(pid: int | None) -> bool:
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def run_simulated(dirs: Sequence[Path], **options: Any) -> tuple[MeasureRun, list[str]]:
    notes: list[str] = []
    run = measure_artifacts(dirs, runs=20, warmup=3, log=notes.append, **options)
    assert run.stats is not None
    return run, notes


def test_simulated_worker_measures_several_candidates_in_one_process(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "copy", "wrong", "copy"])
    run, notes = run_simulated(dirs, rebaseline_every=2)
    assert [m.status for m in run.measurements] == ["ok", "ok", "wrong", "ok"]
    assert [m.genome_hash for m in run.measurements] == [d.name for d in dirs]
    # One process measured them all: the pid in every result line is the same, and not ours.
    assert len(set(run.pids)) == 1 and run.pids[0] != os.getpid()
    assert run.stats is not None
    assert (run.stats.processes, run.stats.replaced, run.stats.recycled) == (1, 0, 0)
    assert all(m.device == "simulated device" for m in run.measurements)
    # The baseline (once, the default): timed at set-up, again after 2 candidates, at the end.
    timings = run.baselines[SIM_COPY.key]
    assert len(timings) == 3 and run.probes[SIM_COPY.key].baseline == timings[0]
    # Each correct candidate's ratio is its own: the vendor alternated with it in paired rounds.
    assert [m.baseline_median_us is not None and m.ratio_lo is not None
            for m in run.measurements] == [True, True, False, True]
    assert notes[0].startswith(f"worker 1 (pid {run.pids[0]}) started: ready in ")
    assert "measured 4 candidates in" in notes[-1]
    assert "1 worker process started (0 replaced after a failure, 0 recycled" in notes[-1]
    assert "wall time per candidate: median" in notes[-1]
    assert f"baseline {SIM_COPY.key} (torch.copy_): 3 timings alone; medians" in notes[-1]
    assert _gone(run.pids[0])  # closed at the end


def test_simulated_hang_in_the_middle_is_killed_and_a_new_worker_goes_on(
    simulated: Path,
) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "hang", "copy", "copy"])
    run, notes = run_simulated(dirs, baseline="paired")
    assert [m.status for m in run.measurements] == ["ok", "hang", "ok", "ok"]
    hang = run.measurements[1]
    assert "killed" in (hang.error or "") and "within 4.0 s" in (hang.error or "")
    assert 4.0 <= hang.seconds < 15
    first, _, second, third = run.pids
    assert run.pids[1] == first and second == third != first
    assert _gone(first)  # the hung worker's process group was killed
    assert run.stats is not None and (run.stats.processes, run.stats.replaced) == (2, 1)
    assert any(f"was lost to candidate {dirs[1].name[:12]} (hang" in n for n in notes)
    # Paired: each ratio uses the vendor timed right after its candidate, none at the end.
    assert len(run.baselines[SIM_COPY.key]) == 2  # worker 1's and worker 2's set-up
    assert run.stats.paired_us[SIM_COPY.key] == [
        m.baseline_median_us for m in run.measurements if m.status == "ok"]
    assert "2 timings alone, 3 paired with candidates" in notes[-1]


def test_simulated_crash_and_sticky_fault_end_their_worker(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "segfault", "copy", "illegal-address",
                                           "copy"])
    run, notes = run_simulated(dirs)
    assert [m.status for m in run.measurements] == ["ok", "crash", "ok", "crash", "ok"]
    segv, sticky = run.measurements[1], run.measurements[3]
    assert "died from SIGSEGV in the check phase" in (segv.error or "")
    # The sticky fault is the child's own report; it then exits rather than go on.
    assert sticky.error == "tsopt_launch returned 700 simulated"
    a, a2, b, b2, c = run.pids
    assert a == a2 and b == b2 and len({a, b, c}) == 3
    assert run.stats is not None and (run.stats.processes, run.stats.replaced) == (3, 2)
    assert any(f"exited after candidate {dirs[3].name[:12]}: a sticky CUDA fault (crash)" in n
               for n in notes)


def test_simulated_uncapturable_candidate_is_a_launch_error_and_the_worker_goes_on(
        simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "syncs", "copy"])
    run, _notes = run_simulated(dirs)
    assert [m.status for m in run.measurements] == ["ok", "launch_error", "ok"]
    assert run.measurements[1].error == ("the candidate cannot be captured in a CUDA graph: "
                                         "tsopt_launch returned 900 simulated")
    assert {m.launch for m in run.measurements} == {"graph"}
    assert len(set(run.pids)) == 1  # the same worker measured the one after it


def test_simulated_worker_times_in_the_mode_it_is_given(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "syncs"])
    run, _notes = run_simulated(dirs, launch="isolated")
    assert [(m.status, m.launch) for m in run.measurements] == [("ok", "isolated")] * 2
    assert [m.conditions["launches_per_sample"] for m in run.measurements] == [1, 1]


def test_simulated_launch_error_continues_only_with_a_healthy_context(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["refused", "copy", "refused-poison", "copy"])
    run, notes = run_simulated(dirs)
    assert [m.status for m in run.measurements] == ["launch_error", "ok", "launch_error", "ok"]
    assert "tsopt_load returned 209 simulated" in (run.measurements[0].error or "")
    a, a2, a3, b = run.pids
    assert a == a2 == a3 != b  # the refused load left the context fine; the poisoning did not
    assert any("exited between candidates: the health check after the candidate failed: "
               "simulated poisoned context" in n for n in notes)


def test_simulated_worker_is_recycled_at_the_cap(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy"] * 5)
    run, notes = run_simulated(dirs, max_candidates=2)
    assert [m.status for m in run.measurements] == ["ok"] * 5
    a, a2, b, b2, c = run.pids
    assert a == a2 and b == b2 and len({a, b, c}) == 3
    assert run.stats is not None
    assert (run.stats.processes, run.stats.replaced, run.stats.recycled) == (3, 0, 2)
    assert sum("recycled after 2 candidates" in n for n in notes) == 2


def test_simulated_worker_groups_by_problem_and_reports_in_the_given_order(
    simulated: Path,
) -> None:
    one = simulated_artifacts(simulated / "one", ["copy", "copy"])
    two = simulated_artifacts(simulated / "two", ["copy"], problem=SIM_COPY_2,
                              output_first=True)  # launched with its pointers as (dst, src)
    order: list[int] = []
    notes: list[str] = []
    run = measure_artifacts([one[0], two[0], one[1]], runs=20, warmup=3, log=notes.append,
                            on_result=lambda i, m: order.append(i))
    assert order == [0, 2, 1]  # problem by problem, so the buffers are reused
    assert [m.problem_key for m in run.measurements] == [SIM_COPY.key, SIM_COPY_2.key,
                                                         SIM_COPY.key]
    assert [m.status for m in run.measurements] == ["ok"] * 3
    assert len(set(run.pids)) == 1  # one worker, its buffers freed and made again
    assert set(run.baselines) == {SIM_COPY.key, SIM_COPY_2.key}


def test_simulated_process_isolation_is_still_there(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "wrong"])
    run, _ = run_simulated(dirs, isolation="process")
    assert [m.status for m in run.measurements] == ["ok", "wrong"]
    assert len(set(run.pids)) == 2
    assert run.stats is not None and run.stats.processes == 3  # a probe, then one each
    assert run.measurements[0].baseline_name == "torch.copy_"


SIM_COPY_INT16 = Problem.of("copy", "int16", rows=32, cols=64)


def test_simulated_int16_copy_is_checked_bit_exact_against_torch_copy(simulated: Path) -> None:
    dirs = simulated_artifacts(simulated, ["copy", "wrong", "copy"], problem=SIM_COPY_INT16)
    run, _ = run_simulated(dirs)
    assert [m.status for m in run.measurements] == ["ok", "wrong", "ok"]
    ok, wrong = run.measurements[0], run.measurements[1]
    assert ok.problem_key == "copy-int16-32x64" and ok.rel_err == 0.0
    assert ok.baseline_name == "torch.copy_" and ok.rate_unit == "GB/s"
    assert "1 of 2048 elements differ from the input" in (wrong.error or "")
    assert run.baselines[SIM_COPY_INT16.key][0].name == "torch.copy_"
    # The baseline probe and the per-candidate child fill int16 buffers the same way.
    run, _ = run_simulated(simulated_artifacts(simulated / "process", ["copy"],
                                               problem=SIM_COPY_INT16), isolation="process")
    assert [m.status for m in run.measurements] == ["ok"], run.measurements[0].error
    assert run.probes[SIM_COPY_INT16.key].baseline.name == "torch.copy_"


def test_worker_commands_round_trip_and_bad_ones_are_named() -> None:
    line = encode_command("measure", artifact="/a", genome_hash="ab", runs=20, warmup=3,
                          checks=2)
    assert parse_command(line.strip())["artifact"] == "/a"
    assert parse_command(encode_command("baseline")) == {"cmd": "baseline"}
    with pytest.raises(ValueError, match="unknown worker command"):
        encode_command("sleep")
    with pytest.raises(ReportError, match="a measure command needs genome_hash, checks"):
        parse_command(b'{"cmd": "measure", "artifact": "/a", "runs": 20, "warmup": 3}')
    with pytest.raises(ReportError, match="unknown command 'exit'"):
        parse_command(b'{"cmd": "exit"}')


def test_a_worker_that_cannot_start_is_a_measure_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import sys\nprint('no torch on this machine', file=sys.stderr)\n"
                      "sys.exit(3)\n")
    monkeypatch.setattr(watchdog, "runner_argv", lambda *args: [sys.executable, str(script)])
    with pytest.raises(MeasureError, match="cannot start a measuring worker: the "
                       "measuring process exited with code 3 in the startup phase"):
        measure_artifacts(simulated_artifacts(tmp_path / "a", ["copy"]))
