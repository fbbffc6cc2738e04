"""The search driver end to end: samplers, dedup, caches, warm start, budgets, resume, Ray.

Everything is real (the copy template, the TS verifier, DSL compiles for sm_90a on
this CPU, SQLite and PostgreSQL, a local Ray cluster) except measuring: there is no
GPU here, so the tests that need timings use :class:`SyntheticMeasurePool`, whose
made-up timings are named SYNTHETIC and never reported as a figure.

The candidates come from a narrow corner of the copy space on a small problem
(``--knob`` fixes the placements, the warp layout and a one-CTA-per-tile grid), so
that most are valid and each builds in well under a second.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from tests.test_db import db_url  # noqa: F401  (the SQLite + PostgreSQL fixture)
from tsopt.core.bundle import Baseline
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.core.registry import get_space
from tsopt.db.store import Store
from tsopt.search.confirm import Remeasure
from tsopt.search.driver import Driver
from tsopt.search.pools.protocol import MeasureDone, MeasureRequest, MeasureResult
from tsopt.search.request import TuneRequest
from tsopt.search.samplers import KnobView, make_sampler, parse_restrictions

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)
LOAD = "coords,try_acquire,acquire,tma_load,commit|0|none"
STORE = "try_wait,wait,read,release,store|0|none"
NARROW = (f"load.placement={LOAD}", f"store.placement={STORE}", "layout=4@0,load4,40/168",
          "persistent=false")
SYNTHETIC_DEVICE = "SYNTHETIC (no GPU: made-up timings, not a measurement)"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def space():  # type: ignore[no-untyped-def]
    return get_space("copy")


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def request(tmp_path: Path, url: str, **overrides: Any) -> TuneRequest:
    fields: dict[str, Any] = dict(
        space="copy", problem=PROBLEM, trials=4, sampler="random", db_url=url,
        bundle_dir=tmp_path / "bundles" / str(overrides.get("study")),
        cache_dir=tmp_path / "artifacts", knobs=NARROW,
        measure="never", warm_start=False)
    fields.update(overrides)
    return TuneRequest(**fields)


def optuna_trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    with Store(url) as store:
        return optuna.load_study(study_name=study, storage=store.optuna_storage()).get_trials()


# -- samplers ---------------------------------------------------------------------------


def test_restrictions_parse_against_choices_and_name_bad_values(space) -> None:  # type: ignore[no-untyped-def]
    knobs = space.knobs(PROBLEM)
    restricted = parse_restrictions([*NARROW, "stages=4,2", "advance_on_wait=FALSE"], knobs)
    assert restricted["stages"] == (2, 4)  # the knob's own order
    assert restricted["load.placement"] == (LOAD,)  # a choice with commas in it
    assert restricted["persistent"] == (False,) and restricted["advance_on_wait"] == (False,)
    for spec, message in (("stages=5", "'5' is not a choice of stages"),
                          ("warp_drive=1", "no knob 'warp_drive'"),
                          ("stages", "not of the form NAME=V1")):
        with pytest.raises(UserInputError, match=message):
            parse_restrictions([spec], knobs)


def test_grid_enumerates_a_restricted_space_and_refuses_a_big_one(space) -> None:  # type: ignore[no-untyped-def]
    big = KnobView.of(space, PROBLEM, "grid")
    with pytest.raises(UserInputError, match="knob combinations .* --knob"):
        make_sampler("grid", 0, big)
    knobs = space.knobs(PROBLEM)
    view = KnobView.of(space, PROBLEM, "grid", parse_restrictions(
        [*NARROW, "stages=2,4", "box_rows=8", "box_cols=128,256", "chunk=1", "vector=8",
         "advance_on_wait=false", "raster=row", "ctas_per_sm=1"], knobs))
    assert view.grid_size() == 4
    study = optuna.create_study(sampler=make_sampler("grid", 0, view))
    genomes = set()
    for _ in range(4):
        trial = study.ask()
        genomes.add(space.suggest(view.wrap(trial), PROBLEM).hash)
        study.tell(trial, 1.0)
    assert len(genomes) == 4 and study.sampler.is_exhausted(study)  # type: ignore[attr-defined]


def test_seeded_samplers_repeat_and_cmaes_models_only_ordinal_knobs(space) -> None:  # type: ignore[no-untyped-def]
    def proposals(name: str, seed: int, n: int = 6) -> list[str]:
        view = KnobView.of(space, PROBLEM, name)
        study = optuna.create_study(sampler=make_sampler(name, seed, view))
        out = []
        for i in range(n):
            trial = study.ask()
            out.append(space.suggest(view.wrap(trial), PROBLEM).hash)
            study.tell(trial, float(i % 3))
        return out

    for name in ("random", "tpe"):
        assert proposals(name, 1) == proposals(name, 1)
        assert proposals(name, 1) != proposals(name, 2)
    # CMA-ES: numeric knobs with increasing integer choices are asked as integer indices,
    # which CMA-ES models; placements, the layout and flags stay categorical and go to its
    # independent sampler (TPE). A fixed knob is not ordinal.
    view = KnobView.of(space, PROBLEM, "cmaes",
                       parse_restrictions(["vector=8"], space.knobs(PROBLEM)))
    assert {"stages", "box_rows", "box_cols", "chunk"} <= view.ordinal
    assert not {"layout", "vector", "load.placement", "persistent"} & view.ordinal
    study = optuna.create_study(sampler=make_sampler("cmaes", 0, view))
    trial = study.ask()
    genome = space.suggest(view.wrap(trial), PROBLEM)
    assert isinstance(trial.distributions["stages#index"], optuna.distributions.IntDistribution)
    assert isinstance(trial.distributions["layout"], optuna.distributions.CategoricalDistribution)
    assert view.decode(trial.params)["stages"] == genome["stages"]
    assert view.encode(space.params_of(genome))["stages#index"] == trial.params["stages#index"]
    study.tell(trial, 1.0)
    for i in range(4):  # past its start-up trial CMA-ES proposes the ordinal knobs itself
        trial = study.ask()
        space.suggest(view.wrap(trial), PROBLEM)
        study.tell(trial, float(i))
    fixed = KnobView.of(space, PROBLEM, "cmaes", parse_restrictions(
        ["stages=4", "box_rows=8", "box_cols=128", "chunk=1", "vector=8", "ctas_per_sm=1"],
        space.knobs(PROBLEM)))
    with pytest.raises(UserInputError, match="cmaes needs numeric knobs"):
        make_sampler("cmaes", 0, fixed)


# -- dedup and caches (SQLite and PostgreSQL) -------------------------------------------


@pytest.mark.slow
def test_seen_genomes_are_never_rebuilt_and_duplicates_get_the_known_outcome(
        tmp_path: Path, db_url: str) -> None:  # noqa: F811
    # A grid over stages {2, 4} x ctas_per_sm {1, 2} with a one-CTA-per-tile grid: ctas_per_sm
    # is never asked, so the 4 grid points are 2 genomes, each proposed twice. The seed obeys
    # the --knob restrictions too, so it is one of the 2: every grid point is a duplicate but
    # the first proposal of the other genome.
    knobs = (*NARROW, "stages=2,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
             "advance_on_wait=false", "raster=row", "ctas_per_sm=1,2")
    first = Driver(request(tmp_path, db_url, sampler="grid", trials=10, knobs=knobs), quiet())
    assert first.run() == 0
    assert first.stop_reason and "grid exhausted" in first.stop_reason
    assert (first.stats.proposed, first.stats.duplicates, first.stats.built) == (4, 3, 2)
    trials = optuna_trials(db_url, first.name)
    assert len(trials) == 4
    duplicates = [t for t in trials if "duplicate_of" in t.user_attrs]
    assert len(duplicates) == 3
    with Store(db_url) as store:
        candidates = store.candidates(first.name)
    seed = next(c for c in candidates if c.origin == "seed")
    for dup in duplicates:
        of = dup.user_attrs["duplicate_of"]
        known = (seed.genome_hash if of == "seed" else
                 next(t for t in trials if t.number == int(of[6:])).user_attrs["genome_hash"])
        assert dup.user_attrs["genome_hash"] == known
        assert dup.state == TrialState.FAIL
        assert "awaits measurement" in dup.user_attrs["fail_reason"]
    assert len(candidates) == 2 and all(c.verdict is not None for c in candidates)
    # Another study of the same problem: every build and TS verdict comes from the caches.
    again = Driver(request(tmp_path, db_url, sampler="grid", trials=10, knobs=knobs,
                           study="copy-again"), quiet())
    assert again.run() == 0
    assert again.stats.built == 2 and again.stats.build_cache_hits == 2
    with Store(db_url) as store:
        builds = {c.genome_hash: c.build for c in store.candidates("copy-again")}
    assert all(b is not None and b.cache_hit for b in builds.values())


# -- measured outcomes, patience, ties (SYNTHETIC timings) ------------------------------


class SyntheticMeasurePool:
    """SYNTHETIC stand-in for the GPU measuring actor: made-up timings, never a figure.

    Times are a made-up function of the genes; ``stages == 3`` comes back ``wrong`` and
    ``stages == 6`` ``hang``, to exercise the failed outcomes.
    """

    name = "synthetic"
    slots = 1

    def __init__(self) -> None:
        self.queue: deque[tuple[Any, MeasureRequest]] = deque()
        self.measured: list[str] = []
        self.remeasured: list[str] = []  # contenders re-checked, the top k confirmed

    def pending(self) -> int:
        return len(self.queue)

    def submit(self, tag: Any, request: MeasureRequest) -> None:
        self.queue.append((tag, request))

    def drop_queued(self) -> list[Any]:
        tags = [q[0] for q in self.queue]
        self.queue.clear()
        return tags

    def poll(self, timeout: float) -> list[MeasureDone]:
        if not self.queue:
            return []
        tag, request = self.queue.popleft()
        genome_hash, problem = request.genome_hash, request.problem
        if isinstance(tag, Remeasure):
            self.remeasured.append(genome_hash)
        else:
            self.measured.append(genome_hash)
        genome = Genome.from_json((Path(request.artifact_dir) / "genome.json").read_text())
        stages, key = int(genome["stages"]), Problem.from_dict(problem).key  # type: ignore[arg-type]
        if stages in (3, 6):
            status = "wrong" if stages == 3 else "hang"
            m = Measurement(genome_hash, key, status, device=SYNTHETIC_DEVICE,  # type: ignore[arg-type]
                            error=f"synthetic {status}")
        else:
            median = 10.0 + 8.0 / stages  # ties on purpose: equal stages, equal time
            m = Measurement(genome_hash, key, "ok", median_us=median, runs=50, rate=1.0,
                            rate_unit="GB/s", baseline_name="torch.copy (synthetic)",
                            baseline_median_us=12.0, ratio=12.0 / median,
                            device=SYNTHETIC_DEVICE)
        baseline = Baseline(key, "torch.copy (synthetic)", SYNTHETIC_DEVICE, 12.0, 12.0, 12.0,
                            50, rate_unit="GB/s")
        return [MeasureDone(tag, 0, MeasureResult(m, baseline))]

    def close(self) -> list[str]:
        return []


@pytest.mark.slow
def test_measured_outcomes_are_told_and_ties_break_by_hash(tmp_path: Path, space) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    pool = SyntheticMeasurePool()
    knobs = (*NARROW, "stages=1,3,4,6", "box_rows=8,16", "box_cols=256", "chunk=1",
             "vector=8", "raster=row")
    driver = Driver(request(tmp_path, url, sampler="grid", trials=20, knobs=knobs), quiet(),
                    measure_pool=pool)
    assert driver.run() == 0
    assert len(pool.measured) == len(set(pool.measured)), "a genome was measured twice"
    # Measured again on purpose only: contenders beside the incumbent, the top k confirmed.
    assert pool.remeasured and driver.stats.remeasured == len(pool.remeasured)
    trials = optuna_trials(url, driver.name)
    told = {t.number: t for t in trials}
    with Store(url) as store:
        candidates = store.candidates(driver.name)
        ranked = store.ranked(driver.name)
    for c in candidates:
        if c.trial_number is None or not c.measurements:
            continue
        m = c.measurements[0].measurement
        trial = told[c.trial_number]
        if m.status == "ok":  # the objective: time relative to the baseline, paired
            assert trial.state == TrialState.COMPLETE and m.ratio is not None
            assert trial.value == pytest.approx(1 / m.ratio)
            assert trial.user_attrs["median_us"] == pytest.approx(m.median_us, abs=1e-3)
        else:  # wrong / hang: FAIL with the reason, and the row stays in the database
            assert trial.state == TrialState.FAIL
            assert trial.user_attrs["measure_failed"].startswith(m.status)
    # Ties (equal synthetic times) rank by genome hash, and the run's best agrees.
    fastest = [r for r in ranked if r.median_us == ranked[0].median_us]
    assert len(fastest) >= 2
    assert [r.genome_hash for r in fastest] == sorted(r.genome_hash for r in fastest)
    assert driver.stats.best_hash == ranked[0].genome_hash


def test_a_run_killed_after_recording_a_measurement_is_told_without_measuring_again(
        tmp_path: Path, space) -> None:  # type: ignore[no-untyped-def]
    from tsopt.search.pipeline import EvaluateRequest, evaluate, space_target

    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    knobs = (*NARROW, "stages=2,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
             "advance_on_wait=false", "raster=row", "ctas_per_sm=1")
    first = request(tmp_path, url, sampler="grid", trials=2, knobs=knobs)
    # What a killed run leaves: trial 0 asked, its candidate verified, built and measured
    # (SYNTHETIC timing) in the database, but never told.
    view = KnobView.of(space, PROBLEM, "grid", parse_restrictions(knobs, space.knobs(PROBLEM)))
    with Store(url) as store:
        store.create_or_get_study(first.study_name(), "copy", PROBLEM, "sm_90a", "grid",
                                  {"knobs": list(knobs)})
        study = optuna.create_study(study_name=first.study_name(), direction="minimize",
                                    storage=store.optuna_storage(), load_if_exists=True,
                                    sampler=make_sampler("grid", 0, view))
        trial = study.ask()
        genome = space.suggest(view.wrap(trial), PROBLEM)
        trial.set_user_attr("genome_hash", genome.hash)
        cid = store.add_candidate(first.study_name(), genome, "suggest", trial.number)
        done = evaluate(EvaluateRequest(space_target("copy"), genome.to_json(), PROBLEM.to_dict(),
                                        "sm_90a", str(tmp_path / "artifacts")))
        assert done.build is not None and done.build.ok
        store.record_verdict(cid, "copy", done.verdict_key, done.verdict)
        store.record_build(cid, done.build)
        store.record_measurement(cid, Measurement(genome.hash, PROBLEM.key, "ok", median_us=7.5,
                                                  device=SYNTHETIC_DEVICE), "synthetic-killed")
    pool = SyntheticMeasurePool()
    driver = Driver(first, quiet(), measure_pool=pool)
    assert driver.run() == 0
    # The seed obeys the knobs: it is trial 1's genome, measured once.
    assert genome.hash not in pool.measured and len(pool.measured) == 1
    told = {t.number: t for t in optuna_trials(url, first.study_name())}
    assert told[trial.number].state == TrialState.COMPLETE and told[trial.number].value == 7.5
    with Store(url) as store:
        again = store.candidates(first.study_name())
    # Each candidate measured once as a candidate; any more are the final confirmation round's.
    assert all(len([r for r in c.measurements if "-confirm" not in r.run_id
                    and "-recheck" not in r.run_id]) == 1 for c in again)


def test_patience_stops_after_trials_without_improvement(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    knobs = (*NARROW, "stages=2", "box_cols=256", "chunk=1", "vector=8")
    driver = Driver(request(tmp_path, url, trials=40, patience=3, knobs=knobs, seed=5),
                    quiet(), measure_pool=SyntheticMeasurePool())
    assert driver.run() == 0
    assert driver.stop_reason and "--patience 3" in driver.stop_reason
    assert driver.asked < 40


# -- warm start (SQLite and PostgreSQL) -------------------------------------------------


@pytest.mark.slow
def test_warm_start_enqueues_the_best_genomes_of_nearby_finished_studies(
        tmp_path: Path, db_url: str, space) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    near = Problem.of("copy", "fp16", rows=256, cols=512)
    best = space.genome(stages=2, box_rows=8, box_cols=128, chunk=1, vector=8)
    second = space.genome(stages=4, box_rows=16, box_cols=256, chunk=1, vector=8)
    far_best = space.genome(stages=8, box_rows=8, box_cols=64, chunk=1, vector=8)

    def finished(store: Store, name: str, problem: Problem, genomes: dict[Genome, float],
                 status: str = "finished", dtype: str = "fp16") -> None:
        problem = Problem.of("copy", dtype, **problem.sizes)
        store.create_or_get_study(name, "copy", problem, "sm_90a", "tpe", {})
        for g, us in genomes.items():  # SYNTHETIC timings recorded through the real store
            cid = store.add_candidate(name, g, "suggest")
            store.record_measurement(cid, Measurement(
                g.hash, problem.key, "ok", median_us=us, device=SYNTHETIC_DEVICE), "synthetic")
        store.set_study_status(name, status)

    with Store(db_url) as store:
        finished(store, "near", near, {second: 20.0, best: 10.0})
        finished(store, "far", Problem.of("copy", "fp16", rows=8192, cols=16384), {far_best: 1.0})
        finished(store, "running", near, {far_best: 1.0}, status="running")
        finished(store, "bf16", near, {far_best: 1.0}, dtype="bf16")
    # 256x192: 1.4 from 256x512; box_cols 128 and 256 do not divide 192 (the sampler picks 64).
    target = Problem.of("copy", "fp16", rows=256, cols=192)
    driver = Driver(request(tmp_path, db_url, problem=target, trials=3, warm_start=True,
                            knobs=()), quiet())
    assert driver.run() == 0
    trials = sorted(optuna_trials(db_url, driver.name), key=lambda t: t.number)
    warm = [t for t in trials if t.user_attrs.get("origin") == "warm_start"]
    assert [t.user_attrs["warm_start_genome"] for t in warm] == [best.hash, second.hash]
    assert all(t.user_attrs["warm_start_from"] == "near" for t in warm)
    for trial, source in zip(warm, (best, second), strict=True):
        assert trial.params["box_cols"] == 64
        assert trial.params["stages"] == source["stages"]
        assert trial.params["box_rows"] == source["box_rows"]
    with Store(db_url) as store:
        origins = {c.trial_number: c.origin for c in store.candidates(driver.name)}
    assert origins[warm[0].number] == "warm_start"


# -- resume after kill -9 and Ctrl-C (the CLI in a subprocess) --------------------------


def tune_args(trials: int, seed: int = 2) -> list[str]:
    args = ["tune", "copy", "--rows", "256", "--cols", "512", "--trials", str(trials),
            "--sampler", "random", "--seed", str(seed)]
    for spec in NARROW:
        args += ["--knob", spec]
    return args


def start_tsopt(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tsopt", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def built_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(build_id) FROM tsopt_candidate").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def wait_for_builds(proc: subprocess.Popen[str], db: Path, count: int,
                    limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while built_count(db) < count:
        assert proc.poll() is None, f"tsopt ended early:\n{proc.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, "no builds recorded in time"
        time.sleep(0.1)


def artifact_stamps(cache: Path) -> dict[str, tuple[int, int]]:
    return {p.parent.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in cache.glob("*/build.json")}


def check_resumed_study(tmp_path: Path, trials: int) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    study = "copy-fp16-256x512-sm_90a"
    frozen = optuna_trials(url, study)
    assert len(frozen) == trials
    for t in frozen:  # nothing left RUNNING but trials waiting in the bundle
        assert t.state != TrialState.RUNNING or "awaiting_measurement" in t.user_attrs, t
    with Store(url) as store:
        candidates = store.candidates(study)
    assert all(c.verdict is not None for c in candidates), "a recorded candidate has no verdict"
    by_trial = {c.trial_number: c for c in candidates if c.trial_number is not None}
    for t in frozen:  # every trial is a recorded candidate or a told duplicate of one
        assert t.number in by_trial or "duplicate_of" in t.user_attrs
    built = [c for c in candidates if c.build is not None and c.build.ok]
    manifest = json.loads((tmp_path / ".tsopt" / "bundles" / study / "manifest.json").read_text())
    assert {c.genome_hash for c in built} == {c["genome_hash"] for c in manifest["candidates"]}
    with Store(url) as store:
        assert store.get_study(study).status == "finished"  # type: ignore[union-attr]


@pytest.mark.slow
def test_kill_9_mid_run_then_the_same_command_resumes_with_nothing_lost(tmp_path: Path) -> None:
    db = tmp_path / "tsopt.db"
    proc = start_tsopt(tune_args(14), tmp_path)
    wait_for_builds(proc, db, 4)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    stamps = artifact_stamps(tmp_path / ".tsopt" / "artifacts")
    with Store(f"sqlite:///{db}") as store:
        before = {c.genome_hash: c for c in store.candidates("copy-fp16-256x512-sm_90a")}
    assert len(stamps) >= 4
    again = start_tsopt(tune_args(14), tmp_path)
    output = again.communicate(timeout=300)[0]
    assert again.returncode == 0, output[-3000:]
    check_resumed_study(tmp_path, 14)
    # Nothing built before the kill was built again, and nothing recorded was lost.
    after = artifact_stamps(tmp_path / ".tsopt" / "artifacts")
    assert {k: after[k] for k in stamps} == stamps
    with Store(f"sqlite:///{db}") as store:
        now = {c.genome_hash: c for c in store.candidates("copy-fp16-256x512-sm_90a")}
    for genome_hash, c in before.items():
        assert now[genome_hash].id == c.id
        if c.verdict is not None:
            assert now[genome_hash].verdict == c.verdict


@pytest.mark.slow
def test_ctrl_c_stops_at_a_trial_boundary_marks_the_study_interrupted_and_resumes(
        tmp_path: Path) -> None:
    db = tmp_path / "tsopt.db"
    proc = start_tsopt(tune_args(40, seed=3), tmp_path)
    wait_for_builds(proc, db, 3)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output[-3000:]
    assert "interrupted" in output and "Traceback" not in output
    url = f"sqlite:///{db}"
    with Store(url) as store:
        assert store.get_study("copy-fp16-256x512-sm_90a").status == "interrupted"  # type: ignore[union-attr]
    frozen = optuna_trials(url, "copy-fp16-256x512-sm_90a")
    assert 0 < len(frozen) < 40
    for t in frozen:  # stopped at a trial boundary: every trial told or in the bundle
        assert t.state != TrialState.RUNNING or "awaiting_measurement" in t.user_attrs
    again = start_tsopt(tune_args(len(frozen) + 2, seed=3), tmp_path)
    output = again.communicate(timeout=300)[0]
    assert again.returncode == 0, output[-3000:]
    check_resumed_study(tmp_path, len(frozen) + 2)


# -- Ray --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real local Ray cluster of 2 CPUs for the module; yields the crash-marker folder."""
    from tsopt.search.pools.ray_pool import start_ray, stop_ray

    crash_dir = tmp_path_factory.mktemp("crash")
    cluster = start_ray(None, 2, "sm_90a", env={"TSOPT_TEST_CRASH_DIR": str(crash_dir)})
    try:
        yield crash_dir
    finally:
        stop_ray(cluster)


@pytest.mark.slow
def test_ray_tasks_build_and_a_dying_worker_is_replaced_and_retried_once(
        ray_cluster: Path, tmp_path: Path, space, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from tests.crashing_space import GRID_KNOBS, check_the_grid_outcome
    from tsopt.core import registry

    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    # The driver (here) and the Ray workers load the crashing variant of the copy space.
    monkeypatch.setitem(registry.SPACES, "copy",
                        registry.SpaceEntry("copy", "tests.crashing_space:CrashingCopySpace", "copy", ""))
    knobs = (*NARROW, *GRID_KNOBS)
    driver = Driver(request(tmp_path, url, sampler="grid", trials=3, knobs=knobs, workers=2),
                    quiet())
    assert driver.run() == 0
    check_the_grid_outcome(url, driver.name, ray_cluster, optuna_trials(url, driver.name))
    assert driver.stats.worker_failures == 1


@pytest.mark.slow
def test_ray_pool_evaluates_in_worker_processes(ray_cluster: Path, tmp_path: Path, space) -> None:  # type: ignore[no-untyped-def]
    from tsopt.search.pipeline import EvaluateRequest, Evaluation
    from tsopt.search.pools.ray_pool import RayBuildPool

    pool = RayBuildPool(2)
    genomes = [space.genome(stages=s, box_rows=8, box_cols=256, chunk=1) for s in (2, 4)]
    bad = space.genome(load=(("coords", "try_acquire", "acquire", "commit", "tma_load"), 0,
                             "none"))
    for g in (*genomes, bad):
        pool.submit(g.hash, EvaluateRequest("tsopt.search_spaces.copy.space:CopySpace", g.to_json(),
                                            PROBLEM.to_dict(), "sm_90a",
                                            str(tmp_path / "artifacts")))
    results: dict[str, Evaluation | str] = {}
    deadline = time.monotonic() + 120
    while len(results) < 3 and time.monotonic() < deadline:
        results.update({done.tag: done.evaluation if done.evaluation is not None else
                        done.failure or "" for done in pool.poll(0.5)})
    evaluations = {k: v for k, v in results.items() if isinstance(v, Evaluation)}
    assert len(evaluations) == 3, results
    assert all(e.pid != os.getpid() for e in evaluations.values())
    for g in genomes:
        e = evaluations[g.hash]
        assert e.verdict.valid and e.build is not None and e.build.ok
        assert Path(e.build.artifact_dir or "").is_dir()
    assert evaluations[bad.hash].verdict.rule == "ts.missing_commit"
    assert evaluations[bad.hash].build is None


def test_a_gpu_that_cannot_measure_bundles_the_candidates_queued_not_the_remeasurements(
        tmp_path: Path) -> None:
    """The GPU's baseline fails while a contender's re-check waits behind a candidate: the
    candidates go to the bundle and the re-check is dropped (its candidate's figure stands;
    once it went to the bundle too, which then could not be written)."""
    from tsopt.search.progress import TuneStats
    from tsopt.search.study.bundling import BundleWriter
    from tsopt.search.study.jobs import Job
    from tsopt.search.study.measuring import MeasureStage
    from tsopt.search.study.workers import Workers

    space = get_space("copy")
    first, second = space.seed_genome(PROBLEM), space.genome(stages=4)
    pool = SyntheticMeasurePool()
    stats = TuneStats()
    bundle = BundleWriter(tmp_path / "bundle", "s", "copy", PROBLEM, "sm_90a", "graph", stats,
                          teller=None)  # type: ignore[arg-type]  (nothing is told here)
    console = Console(file=io.StringIO(), width=200)
    stage = MeasureStage(None, None, "s", PROBLEM, "graph",  # type: ignore[arg-type]
                         Workers(measure=pool), stats, console, None,  # type: ignore[arg-type]
                         bundle, lambda: False)
    job_a, job_b = Job(first, 1, "suggest"), Job(second, 2, "suggest")
    recheck = Remeasure(7, "ab" * 32, "recheck7")
    request = MeasureRequest(str(tmp_path), first.hash, PROBLEM.to_dict())
    pool.submit(recheck, request)
    pool.submit(job_b, request)
    stage.measured(MeasureDone(job_a, 0, MeasureResult(unusable="baseline failed: no GPU")))
    assert "measuring stopped" in console.file.getvalue()  # type: ignore[attr-defined]
    assert stage.workers.measure is None and pool.pending() == 0
    assert bundle.waiting == [job_a, job_b]


@pytest.mark.slow
def test_a_measuring_actor_that_cannot_measure_sends_the_rest_to_the_bundle(
        ray_cluster: Path, tmp_path: Path) -> None:
    from tsopt.search.pools.ray_pool import RayMeasurePool

    # A real MeasureActor, placed on a CPU (no GPU here): its runner cannot time the baseline,
    # the actor says so, and the driver stops measuring and bundles every built candidate.
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    knobs = (*NARROW, "stages=2,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
             "advance_on_wait=false", "raster=row", "ctas_per_sm=1")
    console = Console(file=io.StringIO(), width=200)
    driver = Driver(request(tmp_path, url, sampler="grid", trials=2, knobs=knobs), console,
                    measure_pool=RayMeasurePool(1, gpus_per_actor=0))
    assert driver.run() == 0
    assert "measuring stopped" in console.file.getvalue()  # type: ignore[attr-defined]
    # The seed obeys the knobs: it is one of the 2 trials' genomes.
    assert driver.measure_pool is None and driver.stats.awaiting == 2
    with Store(url) as store:
        assert all(not c.measurements for c in store.candidates(driver.name))


@pytest.mark.slow
def test_the_top_k_are_confirmed_before_a_winner_is_named(tmp_path: Path, space) -> None:  # type: ignore[no-untyped-def]
    """SYNTHETIC timings: the final round measures the top k again, twice, in alternation
    (1..k, then k..1), and the study records the winner with its interval and the candidates
    the noise cannot separate from it."""
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    pool = SyntheticMeasurePool()
    knobs = (*NARROW, "stages=1,2,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
             "raster=row")
    console = Console(file=io.StringIO(), width=200)
    driver = Driver(request(tmp_path, url, sampler="grid", trials=6, knobs=knobs), console,
                    measure_pool=pool)
    assert driver.run() == 0
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "confirming the top" in text and "winner " in text
    with Store(url) as store:
        ranked = store.ranked(driver.name)
    confirmed = [r for r in ranked if r.standing is not None and r.standing.measurements >= 3]
    assert confirmed, "the top candidates were not measured twice more"
    study = optuna.load_study(study_name=driver.name, storage=url)
    assert study.user_attrs["winner"] == ranked[0].genome_hash
    low, high = study.user_attrs["winner_ratio_95"]
    assert low <= study.user_attrs["winner_ratio"] <= high


class OtherDevicePool(SyntheticMeasurePool):
    """The SYNTHETIC pool, reporting another device name (a study resumed elsewhere)."""

    def poll(self, timeout: float) -> list[MeasureDone]:
        return [MeasureDone(d.tag, d.worker, MeasureResult(
            replace(d.result.measurement, device="SYNTHETIC other GPU"), d.result.baseline))
            if d.result.measurement is not None else d for d in super().poll(timeout)]


def _moved(tmp_path: Path, url: str, sampler: str, first_trials: int, trials: int,
           drop_artifacts: bool = False) -> tuple[Driver, str]:
    """A study run on the SYNTHETIC card for ``first_trials``, then on "SYNTHETIC other GPU"
    up to ``trials`` (``drop_artifacts``: the first run's artifacts deleted in between, as on
    another machine); the second driver and what it printed."""
    knobs = (*NARROW, "stages=1,2,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
             "raster=row")
    first = Driver(request(tmp_path, url, sampler=sampler, trials=first_trials, knobs=knobs),
                   quiet(), measure_pool=SyntheticMeasurePool())
    assert first.run() == 0
    if drop_artifacts:
        with Store(url) as store:
            for c in store.candidates(first.name):
                if c.build is not None and c.build.artifact_dir:
                    shutil.rmtree(c.build.artifact_dir)
    console = Console(file=io.StringIO(), width=300)
    again = Driver(request(tmp_path, url, sampler=sampler, trials=trials, knobs=knobs), console,
                   measure_pool=OtherDevicePool())
    assert again.run() == 0
    return again, console.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("artifacts", ["kept", "gone"])
def test_a_study_resumed_on_another_device_is_told_so(tmp_path: Path, space,  # type: ignore[no-untyped-def]
                                                      artifacts: str) -> None:
    """SYNTHETIC timings, two device names. ``gone``: the first run's artifacts are not on the
    second run's machine, so the old card's best are rebuilt before they are timed again."""
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    again, text = _moved(tmp_path, url, "grid", 2, 4, drop_artifacts=artifacts == "gone")
    assert f"was measured before on {SYNTHETIC_DEVICE}" in text
    assert "this run measures on SYNTHETIC other GPU" in text
    # Its best and its confirmation rank on the card it measures on, never both pooled.
    assert "confirmation on SYNTHETIC other GPU's measurements alone" in text
    assert text.index("confirming the top") > text.index("this run measures on")
    # The old card's best are timed on the new one before the sampler plans from it.
    assert f"was measured on {SYNTHETIC_DEVICE}, never on SYNTHETIC other GPU" in text
    with Store(url) as store:
        assert set(store.measured_devices(again.name)) == {SYNTHETIC_DEVICE,
                                                          "SYNTHETIC other GPU"}
        on_card = store.ranked(again.name, device="SYNTHETIC other GPU")
        old_best = store.ranked(again.name, device=SYNTHETIC_DEVICE)
    assert old_best and {r.genome_hash for r in old_best} <= {r.genome_hash for r in on_card}
    # Two new trials built; and, where their artifacts were gone, the old best rebuilt.
    assert again.stats.built == 2 + (len(old_best) if artifacts == "gone" else 0)
    assert all(r.build is not None and Path(r.build.artifact_dir or "").is_dir()
               for r in on_card)
    study = optuna.load_study(study_name=again.name, storage=url)
    assert study.user_attrs["winner"] == on_card[0].genome_hash


@pytest.mark.slow
def test_a_moved_study_plans_from_the_new_cards_figures(tmp_path: Path, space) -> None:  # type: ignore[no-untyped-def]
    """SYNTHETIC timings, evolve: once the old card's best are timed on the new card, the
    sampler's parents are ranked on the new card's figures alone (study.new_card)."""
    _again, text = _moved(tmp_path, f"sqlite:///{tmp_path / 'tsopt.db'}", "evolve", 3, 6)
    moved = text.index("never on SYNTHETIC other GPU")
    assert text.index("parents ranked on SYNTHETIC other GPU's figures") > moved
