"""Defaults that keep the GPUs busy (issue #32): ``--workers auto``, each GPU's busy fraction,
the waits for a build slot and for a GPU (recorded per candidate), and the bad input that must
be refused at once (``--gpus`` beyond this machine's GPUs, a ``--ray-address`` that does not
answer).

Real copy builds and a real SQLite database; the device is SIMULATED (tests/test_driver.py's
SyntheticMeasurePool, given a made-up measuring time): no GPU here, and no figure of it is a
GPU's.
"""

from __future__ import annotations

import io
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from tests.test_driver import NARROW, SyntheticMeasurePool, request
from tsopt.search.driver import Driver
from tsopt.search.pools.protocol import MeasureDone, MeasureResult
from tsopt.search.request import auto_workers

REPO = Path(__file__).resolve().parents[1]


def test_auto_workers_leaves_a_core_to_the_driver_and_one_per_measuring_gpu() -> None:
    assert auto_workers(2, 0) == 0  # this machine: one builder, in the driver's own process
    assert auto_workers(1, 0) == 0
    assert auto_workers(2, 1) == 1  # a GPU to feed: a build process beside the driver
    assert auto_workers(16, 1) == 14  # one H200 machine
    assert auto_workers(32, 2) == 29
    assert auto_workers(128, 8) == 119


class SlowSimulatedPool(SyntheticMeasurePool):
    """SIMULATED device: the synthetic timings, each said to have taken 0.3 s of its GPU."""

    MEASURE_S = 0.3

    def poll(self, timeout: float) -> list[MeasureDone]:
        done = super().poll(timeout)
        if done:
            time.sleep(self.MEASURE_S)
        return [MeasureDone(d.tag, d.worker, MeasureResult(
            d.result.measurement, d.result.baseline, seconds=self.MEASURE_S)) for d in done]


def test_the_summary_shows_gpu_busy_and_waits_and_the_database_keeps_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    knobs = (*NARROW, "stages=1,2,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
             "raster=row")
    console = Console(file=io.StringIO(), width=300)
    driver = Driver(request(tmp_path, url, sampler="grid", trials=3, knobs=knobs, workers=None),
                    console, measure_pool=SlowSimulatedPool())
    assert driver.run() == 0
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    # One simulated GPU counted by the rule: on 2 cores, one build process beside the driver.
    assert "(--workers auto: 2 cores less 1 for the driver and 1 for measuring)" in out or (
        os.cpu_count() != 2)
    busy = driver.stats.busy_fractions()
    assert set(busy) == {0} and 0 < busy[0] <= 1
    # The fraction is of the time since measuring began, so it falls while the summary prints.
    assert re.search(r"GPU busy: 0 \d+%", out), out
    assert "waited for a build: median" in out and "| for a GPU: median" in out
    with sqlite3.connect(tmp_path / "tsopt.db") as db:
        built = list(db.execute("SELECT build_node, build_wait_s FROM tsopt_candidate "
                                "WHERE build_id IS NOT NULL"))
        waits = [w for (w,) in db.execute("SELECT wait_s FROM tsopt_measurement")]
    assert len(built) >= 3 and all(node and wait is not None and wait >= 0
                                   for node, wait in built)
    assert waits and all(w is not None and w >= 0 for w in waits)
    assert len(driver.stats.gpu_waits) == len(waits)


def cli(tmp_path: Path, *args: str) -> tuple[int, str, float]:
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", PYTHONPATH=str(REPO), COLUMNS="250")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tsopt", "tune", "copy", "--rows", "4096", "--cols", "128",
         "--trials", "1", "--db", f"sqlite:///{tmp_path / 'tsopt.db'}", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def test_too_many_gpus_and_an_unreachable_ray_head_are_refused_at_once(tmp_path: Path) -> None:
    from tsopt.workers.machine import gpu_present

    cases: list[tuple[tuple[str, ...], str]] = [
        (("--ray-address", "127.0.0.1:1"),
         "--ray-address '127.0.0.1:1': nothing answers at 127.0.0.1:1 within 3 s"),
        (("--ray-address", "10.0.0.1:http"), "--ray-address '10.0.0.1:http' is not HOST:PORT"),
        (("--workers", "two"), "--workers 'two' is not a number of workers or 'auto'"),
    ]
    if not gpu_present():
        cases.append((("--gpus", "2"), "--gpus 2: this machine has no GPU"))
    for args, line in cases:
        code, out, seconds = cli(tmp_path, *args)
        assert code == 2 and line in out, (args, out)
        assert len([x for x in out.splitlines() if x.strip()]) == 1, out  # one line
        assert seconds < 60, (args, seconds)  # seconds on a loaded 2-core machine, not a hang
        assert not (tmp_path / "tsopt.db").exists()  # a refusal changes nothing
