"""Several GPUs, one measuring worker each: `--gpus`, pinning, sharing the work, merging results.

There is no GPU here, so the GPUs are SIMULATED DEVICES: the real watchdog and the real
persistent measuring workers (``python -m tsopt.workers.runner --child worker``'s code) run on
the simulated device of tests/test_watchdog.py, each child told its GPU through
``CUDA_VISIBLE_DEVICES`` exactly as on a GPU machine. The script below adds to that device what a
GPU index changes: each child writes down the device it was given, a simulated GPU can be
broken (``TSOPT_SIM_BROKEN_GPU``), and a simulated kernel can crash on GPU 1 only. No figure
from it is reported anywhere.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.test_bundle import make_bundle
from tests.test_watchdog import SIM_COPY, SIMULATED_RUNNER, simulated_artifacts
from tsopt.core.bundle import read_manifest, read_results
from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.search.confirm import confirmation_requests
from tsopt.search.pools.inline import InlineMeasurePool
from tsopt.search.pools.protocol import MeasureDone, MeasureQueue, MeasureRequest
from tsopt.search.request import TuneRequest
from tsopt.workers import bundle_measure, gpus, watchdog
from tsopt.workers.bundle_measure import BundleView, GpuShare, measure_bundle
from tsopt.workers.gpus import measuring_gpus, parse_gpus

END = "sys.exit(runner.main(sys.argv[1:]))"
MULTI_GPU_RUNNER = SIMULATED_RUNNER.replace(END, '''
import os

VISIBLE = os.environ.get("CUDA_VISIBLE_DEVICES", "")
LOG = os.environ.get("TSOPT_SIM_GPU_LOG")
if LOG:  # which simulated GPU this child was given
    with open(os.path.join(LOG, str(os.getpid())), "w") as f:
        f.write(VISIBLE)
BROKEN = os.environ.get("TSOPT_SIM_BROKEN_GPU")
device.why_no_gpu = lambda: (f"no GPU: simulated GPU {VISIBLE} is broken"
                             if VISIBLE == BROKEN else None)


class MultiGpuLibrary(SimulatedLibrary):
    """"slow": 0.3 s to load, and not before two simulated GPUs have started (so that both
    are there to share the work); "crash-on-1": a segfault on simulated GPU 1 only."""

    def load_module(self):
        if self.behaviour == "slow":
            deadline = time.monotonic() + 60
            while LOG and time.monotonic() < deadline and len(
                    {open(os.path.join(LOG, p)).read() for p in os.listdir(LOG)}) < 2:
                time.sleep(0.05)
            time.sleep(0.3)
        return super().load_module()

    def launch(self, ptrs, stream):
        if self.behaviour == "crash-on-1" and VISIBLE == "1":
            ctypes.string_at(0)
        return super().launch(ptrs, stream)


device.open_library = MultiGpuLibrary.open
''' + END)
assert MULTI_GPU_RUNNER != SIMULATED_RUNNER


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Two simulated GPUs: this process "sees" two devices and every measuring child runs the
    script above; returns the folder where each child writes the device it was given."""
    script = tmp_path / "multi_gpu_runner.py"
    script.write_text(MULTI_GPU_RUNNER)
    monkeypatch.setattr(watchdog, "runner_argv",
                        lambda *args: [__import__("sys").executable, str(script), "--child",
                                       *args])
    monkeypatch.setattr("tsopt.workers.limits.LOAD_FLOOR_S", 10.0)
    monkeypatch.setattr(gpus, "visible_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log = tmp_path / "gpu-log"
    log.mkdir()
    monkeypatch.setenv("TSOPT_SIM_GPU_LOG", str(log))
    return log


def child_devices(log: Path) -> dict[int, str]:
    """pid -> the CUDA_VISIBLE_DEVICES each measuring child started with."""
    return {int(p.name): p.read_text() for p in log.iterdir()}


class Recording(BundleView):
    """The plain view, also keeping what a test checks."""

    def __init__(self) -> None:
        self.lines: list[tuple[Measurement, int | None]] = []
        self.split: list[GpuShare] = []
        self.stopped: list[str] = []

    def measured(self, m: Measurement, pid: int | None) -> None:
        self.lines.append((m, pid))
        super().measured(m, pid)

    def cannot_measure(self, error: str, started: bool) -> None:
        self.stopped.append(error)
        super().cannot_measure(error, started)

    def shares(self, shares: list[GpuShare]) -> None:
        self.split = shares
        super().shares(shares)


# -- --gpus ---------------------------------------------------------------------------------
def test_gpus_option_is_a_count_or_all_and_is_checked_against_the_devices() -> None:
    assert parse_gpus("all") is None and parse_gpus(None) is None and parse_gpus("ALL") is None
    assert parse_gpus("2") == 2
    for bad, message in [("0", "--gpus '0' must be at least 1"),
                         ("two", "--gpus 'two' is not a number of GPUs or 'all'")]:
        with pytest.raises(UserInputError, match=message):
            parse_gpus(bad)
    assert measuring_gpus(None, available=2) == (0, 1)
    assert measuring_gpus(None, available=1) == (None,)  # one GPU: as before, unpinned
    assert measuring_gpus(None, available=0) == (None,)  # it says itself why it cannot measure
    assert measuring_gpus(1, available=2) == (0,)
    with pytest.raises(UserInputError, match="--gpus 3: this process sees 2 GPUs"):
        measuring_gpus(3, available=2)
    with pytest.raises(UserInputError, match="--gpus 0 must be at least 1"):
        TuneRequest(space="copy", problem=Problem.of("copy", "fp16", rows=256, cols=256),
                    gpus=0).validate()


def test_each_gpu_index_maps_through_the_devices_this_process_may_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [watchdog.child_env(g)["CUDA_VISIBLE_DEVICES"] for g in (0, 1)] == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7")  # GPU 1 of this process is device 7
    assert [watchdog.child_env(g)["CUDA_VISIBLE_DEVICES"] for g in (None, 0, 1)] == [
        "5", "5", "7"]
    assert watchdog.child_env(2)["CUDA_VISIBLE_DEVICES"] == ""  # no such device: none visible


# -- tsopt measure --gpus 2 -----------------------------------------------------------------
@pytest.mark.slow
def test_a_bundle_on_two_gpus_shares_the_work_and_merges_into_one_results_file(
        two_gpus: Path, tmp_path: Path) -> None:
    bundle, genomes = make_bundle(tmp_path, n=8, libraries=["simulated: slow\n"] * 8)
    view = Recording()
    assert measure_bundle(bundle, runs=20, warmup=3, gpus=2, view=view) == 0
    results = read_results(bundle, read_manifest(bundle))  # the digest and checksums hold
    assert results is not None
    assert sorted(m.genome_hash for m in results.measurements) == sorted(g.hash for g in genomes)
    assert all(m.status == "ok" and m.ratio is not None for m in results.measurements)
    assert results.settings["gpus"] == 2 and len(results.baselines) == 2  # one per GPU
    by_gpu = {g: [m for m in results.measurements if m.conditions.get("gpu") == g]
              for g in (0, 1)}
    assert by_gpu[0] and by_gpu[1], "both GPUs should have measured"
    # Each result names the GPU whose pinned child measured it.
    devices = child_devices(two_gpus)
    assert set(devices.values()) == {"0", "1"}
    for m, pid in view.lines:
        assert pid is not None and devices[pid] == str(m.conditions["gpu"])
    assert [s.gpu for s in view.split] == [0, 1]
    assert sum(s.candidates for s in view.split) == 8
    assert all(0 < s.busy_fraction <= 1 and s.stopped is None for s in view.split)


@pytest.mark.slow
def test_a_crash_on_one_gpu_loses_none_of_the_other_gpus_results(
        two_gpus: Path, tmp_path: Path) -> None:
    bundle, genomes = make_bundle(tmp_path, n=6, libraries=["simulated: crash-on-1\n"] * 6)
    out = io.StringIO()
    from tsopt.app.measure import measure_bundle as tsopt_measure

    code = tsopt_measure(bundle, runs=20, warmup=3, gpus=2, console=Console(file=out, width=250))
    text = out.getvalue()
    assert code == 0, text
    results = read_results(bundle, read_manifest(bundle))
    assert results is not None and len(results.measurements) == 6
    for m in results.measurements:  # GPU 1's child dies on every kernel; GPU 0's never does
        assert (m.status, m.conditions.get("gpu")) in {("ok", 0), ("crash", 1)}, m
    assert any(m.status == "ok" for m in results.measurements)
    assert "2 GPUs: 6 candidates in" in text and "candidates/s" in text


def test_a_gpu_that_cannot_measure_stops_and_the_other_measures_the_rest(
        two_gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TSOPT_SIM_BROKEN_GPU", "1")
    bundle, genomes = make_bundle(tmp_path, n=3, libraries=["simulated: copy\n"] * 3)
    view = Recording()
    assert measure_bundle(bundle, runs=20, warmup=3, gpus=2, view=view) == 0
    results = read_results(bundle, read_manifest(bundle))
    assert results is not None
    assert [m.conditions.get("gpu") for m in results.measurements] == [0, 0, 0]
    assert len(view.stopped) == 1 and view.stopped[0].startswith("GPU 1: ")
    assert "simulated GPU 1 is broken" in view.stopped[0]
    assert view.split[1].candidates == 0 and view.split[1].stopped == view.stopped[0]


def test_more_gpus_than_the_machine_has_is_refused_naming_the_count(
        two_gpus: Path, tmp_path: Path) -> None:
    bundle, _ = make_bundle(tmp_path, n=1)
    with pytest.raises(UserInputError, match="--gpus 3: this process sees 2 GPUs"):
        measure_bundle(bundle, gpus=3, view=Recording())
    with pytest.raises(UserInputError, match="--gpu 1 names one GPU; --gpus 2"):
        bundle_measure.measure_bundle(bundle, gpu=1, gpus=2, view=Recording())
    from typer.testing import CliRunner

    from tsopt.cli import app

    result = CliRunner().invoke(app, ["measure", str(bundle), "--gpus", "two"])
    assert result.exit_code == 2 and "--gpus 'two' is not a number of GPUs or 'all'" in (
        result.output)
    result = CliRunner().invoke(app, ["measure", str(bundle), "--gpus", "3"])
    assert result.exit_code == 2 and "--gpus 3: this process sees 2 GPUs" in result.output


# -- the searching side's pool --------------------------------------------------------------
def drain(pool: InlineMeasurePool, limit_s: float = 120.0) -> list[MeasureDone]:
    done: list[MeasureDone] = []
    deadline = time.monotonic() + limit_s
    while pool.pending() and time.monotonic() < deadline:
        done += pool.poll(0.2)
    assert not pool.pending(), "the pool did not finish"
    return done


def requests(dirs: list[Path], gpu: int | None = None) -> list[MeasureRequest]:
    return [MeasureRequest(str(d), d.name, SIM_COPY.to_dict(), gpu=gpu) for d in dirs]


def test_the_inline_pool_measures_on_both_gpus_and_keeps_pinned_requests_on_theirs(
        two_gpus: Path, tmp_path: Path) -> None:
    free = simulated_artifacts(tmp_path / "free", ["slow"] * 6)
    pinned = simulated_artifacts(tmp_path / "pinned", ["copy"] * 3)
    pool = InlineMeasurePool(runs=20, warmup=3, gpus=(0, 1))
    try:
        assert pool.slots == 2
        for i, request in enumerate(requests(free) + requests(pinned, gpu=1)):
            pool.submit(i, request)
        done = drain(pool)
    finally:
        summaries = pool.close()
    assert sorted(d.tag for d in done) == list(range(9))
    for d in done:
        m = d.result.measurement
        assert m is not None and m.status == "ok" and m.conditions["gpu"] == d.worker
        assert d.result.baseline is not None
    assert {d.worker for d in done if d.tag < 6} == {0, 1}  # the free ones: both GPUs
    assert {d.worker for d in done if d.tag >= 6} == {1}  # the pinned ones: GPU 1 only
    devices = child_devices(two_gpus)
    assert {devices[d.result.pid] for d in done if d.tag >= 6} == {"1"}
    assert len(summaries) == 2 and summaries[0].startswith("GPU 0: measured")


def test_the_inline_pool_goes_on_without_a_gpu_that_cannot_measure(
        two_gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TSOPT_SIM_BROKEN_GPU", "1")
    dirs = simulated_artifacts(tmp_path / "a", ["copy"] * 3)
    pool = InlineMeasurePool(runs=20, warmup=3, gpus=(0, 1))
    try:
        for i, request in enumerate(requests(dirs[:2]) + requests(dirs[2:], gpu=1)):
            pool.submit(i, request)
        done = drain(pool)
    finally:
        summaries = pool.close()
    # Nothing came back "unusable" (that would stop the driver measuring): GPU 1's requests,
    # the one pinned to it included, went to GPU 0.
    assert sorted(d.tag for d in done) == [0, 1, 2]
    assert all(d.result.unusable is None and d.worker == 0 for d in done)
    assert any("GPU 1 stopped measuring" in s and "simulated GPU 1 is broken" in s
               for s in summaries)


def test_pinned_requests_wait_for_their_gpu_and_move_when_it_is_lost() -> None:
    queue = MeasureQueue()
    queue._workers = 2
    a, b, c = (MeasureRequest(f"/x/{n}", n, {}, gpu=g) for n, g in (("a", 1), ("b", None),
                                                                   ("c", 1)))
    for tag, request in (("a", a), ("b", b), ("c", c)):
        queue.submit(tag, request)
    taken = queue._next_for(0)
    assert taken is not None and taken[0] == "b"  # GPU 0 skips the two pinned to GPU 1
    assert queue._next_for(0) is None
    assert queue._lose(1)  # GPU 0 is left
    assert [queue._next_for(0)[0], queue._next_for(0)[0]] == ["a", "c"]  # type: ignore[index]
    assert not queue._lose(0)  # none left


def test_a_ranked_queue_measures_the_best_predicted_first_and_re_measurements_before_all() -> None:
    # An 8192^3 study builds faster than one GPU measures (bench/tune_gpu, rounds 6-7): the
    # candidate its model ranked first waited behind 30 earlier proposals. With a priority,
    # a free GPU takes what the model ranks best; what it does not rank (a contender's
    # re-measurement, the seed) goes first, in order; pins are still honoured.
    queue = MeasureQueue()
    queue._workers = 2
    scores = {"slow": 0.3, "fast": -0.2, "mid": 0.1, "pinned-fast": -0.5, "recheck": None,
              "broken": 0.0}

    def priority(tag: str) -> float | None:
        if tag == "broken":
            raise RuntimeError("a model that fails")
        return scores[tag]

    queue.priority = priority
    for tag in ("slow", "fast", "pinned-fast", "mid", "recheck"):
        queue.submit(tag, MeasureRequest(f"/x/{tag}", tag, {},
                                         gpu=1 if tag == "pinned-fast" else None))
    order = [queue._next_for(0)[0] for _ in range(4)]  # type: ignore[index]
    assert order == ["recheck", "fast", "mid", "slow"]
    assert queue._next_for(0) is None and queue._next_for(1)[0] == "pinned-fast"  # type: ignore[index]
    queue.submit("mid", MeasureRequest("/x/mid", "mid", {}))
    queue.submit("broken", MeasureRequest("/x/broken", "broken", {}))
    assert queue._next_for(0)[0] == "broken"  # type: ignore[index]  # unranked: first
    queue.priority = None
    for tag in ("slow", "fast"):
        queue.submit(tag, MeasureRequest(f"/x/{tag}", tag, {}))
    assert [queue._next_for(0)[0] for _ in range(3)] == ["mid", "slow", "fast"]  # type: ignore[index]


def test_a_confirmation_round_runs_on_one_gpu() -> None:
    class Built:
        artifact_dir = "/artifacts/x"

    class Ranked:
        def __init__(self, n: int) -> None:
            self.candidate_id, self.genome_hash, self.build = n, f"{n:064x}", Built()

    ranked: list[Any] = [Ranked(n) for n in range(3)]
    order = confirmation_requests(ranked, SIM_COPY.to_dict(), gpu=0)
    assert len(order) == 6 and {request.gpu for _, request in order} == {0}
    assert {r.gpu for _, r in confirmation_requests(ranked, SIM_COPY.to_dict())} == {None}


# -- the driver: one measuring worker per GPU -----------------------------------------------
def test_the_driver_starts_one_measuring_worker_per_gpu(
        two_gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tsopt.search.driver import Driver

    monkeypatch.setattr("tsopt.workers.machine.gpu_present", lambda: True)
    problem = Problem.of("copy", "fp16", rows=256, cols=256)
    made: dict[Any, Any] = {}
    for asked, devices in ((None, 2), (1, 1)):
        request = TuneRequest(space="copy", problem=problem, trials=1, workers=1,
                              pool="processes", gpus=asked, db_url="sqlite://")
        driver = Driver(request, Console(file=io.StringIO(), width=200))
        driver._start_workers()
        try:
            pool = driver.measure_pool
            assert isinstance(pool, InlineMeasurePool) and pool.slots == devices
            made[asked] = (pool.devices, dict(driver.run_ids))
        finally:
            driver._close_workers()
    devices, run_ids = made[None]
    assert devices == (0, 1) and sorted(run_ids) == [0, 1]  # a run id (a baseline) per GPU
    assert run_ids[0] != run_ids[1] and run_ids[1].endswith("-gpu1")
    assert made[1][0] == (0,)  # --gpus 1 of two: pinned to GPU 0
    request = TuneRequest(space="copy", problem=problem, trials=1, workers=1, pool="processes",
                          gpus=3, db_url="sqlite://")
    with pytest.raises(UserInputError, match="--gpus 3: this process sees 2 GPUs"):
        Driver(request, Console(file=io.StringIO()))._start_workers()


def test_tsopt_tune_takes_gpus_and_names_a_bad_value(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tsopt.cli import app

    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    result = CliRunner().invoke(app, ["tune", "copy", "--rows", "256", "--cols", "256",
                                      "--gpus", "none", "--db", db])
    assert result.exit_code == 2, result.output
    assert "--gpus 'none' is not a number of GPUs or 'all'" in result.output
    assert "--gpus" in CliRunner().invoke(app, ["tune", "copy", "--help"]).output
