"""``--pool processes``: verify+build in local processes, no Ray (workers/process_pool.py).

Real parts only: the copy template, the TS verifier, DSL compiles for sm_90a on this CPU,
SQLite, spawned worker processes. The worker deaths are real deaths (``os._exit`` in the
worker process, the way a compiler crash or the OOM killer ends it); the functions that
die are the module-level functions below, handed to the pool as the function its
processes run, and they call the real :func:`tsopt.search.pipeline.evaluate` otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from tests.test_driver import NARROW, PROBLEM, optuna_trials, quiet, request
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.db.store import Store
from tsopt.search.driver import Driver
from tsopt.search.pipeline import EvaluateRequest, Evaluation, evaluate
from tsopt.search.pools.process_pool import ProcessBuildPool
from tsopt.search_spaces.copy.space import CopySpace

ROOT = Path(__file__).resolve().parents[1]
COPY = "tsopt.search_spaces.copy.space:CopySpace"
STUDY = "copy-fp16-256x512-sm_90a"


# -- what the worker processes run in the death tests (module level: pickled by name) -----


def die_on_first_call(req: EvaluateRequest) -> Evaluation:
    """Dies the first time it sees a genome (a marker file in the artifact cache), then
    evaluates it."""
    marker = Path(req.cache_dir) / f"died-{Genome.from_json(req.genome_json).hash}"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        os._exit(17)
    return evaluate(req)


def die_on_stages_3(req: EvaluateRequest) -> Evaluation:
    """Dies every time for a genome with 3 stages; evaluates the others."""
    if Genome.from_json(req.genome_json)["stages"] == 3:
        os._exit(17)
    return evaluate(req)


# -- helpers ------------------------------------------------------------------------------


def evaluate_request(genome: Genome, cache: Path, target: str = COPY) -> EvaluateRequest:
    return EvaluateRequest(target, genome.to_json(), PROBLEM.to_dict(), "sm_90a", str(cache))


def drain(pool: ProcessBuildPool, count: int, limit_s: float = 120) -> dict[Any, Evaluation | str]:
    results: dict[Any, Evaluation | str] = {}
    deadline = time.monotonic() + limit_s
    while len(results) < count:
        assert time.monotonic() < deadline, f"only {results} came back in time"
        results.update({done.tag: done.evaluation if done.evaluation is not None else
                        done.failure or "" for done in pool.poll(0.5)})
    assert pool.busy() == 0 and pool.free() == pool.slots
    return results


def tsopt(args: list[str], cwd: Path, extra_path: Path | None = None
          ) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(p) for p in (extra_path, ROOT) if p is not None)
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "tsopt", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300, check=False)


def tune_args(trials: int, *extra: str) -> list[str]:
    args = ["tune", "copy", "--rows", "256", "--cols", "512", "--trials", str(trials),
            "--sampler", "random", "--seed", "2", *extra]
    for spec in NARROW:
        args += ["--knob", spec]
    return args


# -- the command line, end to end, on a machine without Ray ------------------------------


@pytest.mark.slow
def test_tune_copy_with_build_processes_and_no_ray_records_verdicts_and_builds(
        tmp_path: Path) -> None:
    # Ray cannot even be imported: a `ray` package on the path that refuses to load.
    no_ray = tmp_path / "no-ray"
    (no_ray / "ray").mkdir(parents=True)
    (no_ray / "ray" / "__init__.py").write_text(
        'raise ImportError("ray is not installed on this machine (test)")\n')
    work = tmp_path / "work"
    work.mkdir()
    result = tsopt(tune_args(4, "--pool", "processes", "--workers", "2"), work, no_ray)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "workers: 2 build processes on this machine" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr

    url = f"sqlite:///{work / 'tsopt.db'}"
    with Store(url) as store:
        candidates = store.candidates(STUDY)
        assert store.get_study(STUDY).status == "finished"  # type: ignore[union-attr]
    assert len(candidates) >= 2 and any(c.origin == "seed" for c in candidates)
    assert all(c.verdict is not None for c in candidates)
    built = [c for c in candidates if c.build is not None and c.build.ok]
    assert built, "nothing was built"
    for c in built:
        assert Path(c.build.artifact_dir or "").is_dir()  # type: ignore[union-attr]
    frozen = optuna_trials(url, STUDY)
    assert len(frozen) == 4
    by_trial = {c.trial_number: c for c in candidates if c.trial_number is not None}
    for t in frozen:  # rejected, or built (waiting in the bundle, or measured with a GPU)
        if "duplicate_of" in t.user_attrs:
            continue
        c = by_trial[t.number]
        if t.state == TrialState.PRUNED:
            assert "rejected" in t.user_attrs and c.build is None
        else:
            assert c.build is not None and c.build.ok, (t, c)
            assert t.state != TrialState.RUNNING or "awaiting_measurement" in t.user_attrs
    unmeasured = {c.genome_hash for c in built if not c.measurements}
    if unmeasured:  # no GPU here: the built candidates went to the bundle
        manifest = json.loads((work / ".tsopt" / "bundles" / STUDY / "manifest.json").read_text())
        assert unmeasured <= {c["genome_hash"] for c in manifest["candidates"]}


# -- worker deaths ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_worker_that_dies_once_is_replaced_and_the_candidate_retried(
        tmp_path: Path) -> None:
    space = CopySpace()
    cache = tmp_path / "artifacts"
    genomes = {s: space.genome(stages=s, box_rows=8, box_cols=256, chunk=1) for s in (2, 4)}
    pool = ProcessBuildPool(2, function=die_on_first_call)
    try:
        for stages, genome in genomes.items():
            pool.submit(stages, evaluate_request(genome, cache))
        assert pool.busy() == 2 and pool.free() == 0
        results = drain(pool, 2)
    finally:
        pool.close()
    for stages, genome in genomes.items():
        evaluation = results[stages]
        assert isinstance(evaluation, Evaluation), evaluation
        dead = int((cache / f"died-{genome.hash}").read_text())
        assert evaluation.pid not in (dead, os.getpid())  # built by a fresh process
        assert evaluation.verdict.valid
        assert evaluation.build is not None and evaluation.build.ok
        assert Path(evaluation.build.artifact_dir or "").is_dir()


@pytest.mark.slow
def test_a_candidate_whose_retry_dies_too_fails_and_spares_its_neighbour(
        tmp_path: Path) -> None:
    space = CopySpace()
    cache = tmp_path / "artifacts"
    doomed = space.genome(stages=3, box_rows=8, box_cols=256, chunk=1)
    fine = space.genome(stages=4, box_rows=8, box_cols=256, chunk=1)
    pool = ProcessBuildPool(2, function=die_on_stages_3)
    try:
        pool.submit("doomed", evaluate_request(doomed, cache))
        pool.submit("fine", evaluate_request(fine, cache))
        # A function that raises (here the real evaluate, on a space that does not exist)
        # is not retried: its text comes back.
        pool.submit("raises", evaluate_request(fine, cache, "tsopt.search_spaces.copy.space:NoSuchSpace"))
        assert pool.busy() == 3  # one waits for a slot
        results = drain(pool, 3)
    finally:
        pool.close()
    failure = results["doomed"]
    assert isinstance(failure, str)
    assert failure.startswith("worker failed twice (retried once): BrokenProcessPool")
    assert "exit code 17" in failure
    neighbour = results["fine"]  # in the other process: untouched by the deaths
    assert isinstance(neighbour, Evaluation), neighbour
    assert neighbour.build is not None and neighbour.build.ok
    assert results["raises"] == ("AttributeError: module 'tsopt.search_spaces.copy.space' has no "
                                 "attribute 'NoSuchSpace'")


@pytest.mark.slow
def test_the_driver_records_a_worker_that_died_twice_as_a_failed_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.crashing_space import GRID_KNOBS, check_the_grid_outcome
    from tsopt.core import registry

    # The crashing variant of the copy space (tests/crashing_space.py): its build kills its
    # own process for stages=2 (first attempt only) and stages=3 (every attempt).
    crash_dir = tmp_path / "crash"
    crash_dir.mkdir()
    monkeypatch.setenv("TSOPT_TEST_CRASH_DIR", str(crash_dir))  # spawned workers inherit it
    monkeypatch.setitem(registry.SPACES, "copy",
                        registry.SpaceEntry("copy", "tests.crashing_space:CrashingCopySpace", "copy", ""))
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    knobs = (*NARROW, *GRID_KNOBS)
    console = quiet()
    driver = Driver(request(tmp_path, url, sampler="grid", trials=3, knobs=knobs, workers=2,
                            pool="processes"), console)
    assert driver.run() == 0
    assert "workers: 2 build processes on this machine" in console.file.getvalue()  # type: ignore[attr-defined]
    check_the_grid_outcome(url, driver.name, crash_dir, optuna_trials(url, driver.name))
    assert driver.stats.worker_failures == 1


# -- the option's bad values --------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pool": "threads", "workers": 2}, "--pool 'threads' is not one of ray, processes"),
        ({"pool": "processes", "workers": 0}, "--pool processes needs --workers N >= 1 (got "
                                              "--workers 0"),
        ({"pool": "processes", "workers": 2, "ray_address": "head:6379"},
         "--pool processes builds on this machine; --ray-address 'head:6379' needs --pool ray"),
    ],
)
def test_bad_pool_options_are_refused_by_name(overrides: dict[str, Any], message: str,
                                              tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    tune = request(tmp_path, url, **overrides)
    with pytest.raises(UserInputError) as caught:
        tune.validate()
    assert message in str(caught.value)
    with pytest.raises(UserInputError):  # the driver refuses it before it opens anything
        Driver(tune, quiet()).run()
    assert not (tmp_path / "tsopt.db").exists()


def test_the_command_line_refuses_a_bad_pool_in_one_line(tmp_path: Path) -> None:
    result = tsopt(tune_args(2, "--pool", "processes", "--workers", "0"), tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "--pool processes needs --workers N >= 1 (got --workers 0" in lines[0]
    assert not (tmp_path / "tsopt.db").exists()
