"""Budgets of built and measured candidates (--built N, --measured N) beside --trials, which
counts proposals (most of them rejected before anything is built).

Real copy template, verifier and sm_90a builds on this CPU, over the narrow corner of the copy
space of tests/test_driver.py; timings come from its SyntheticMeasurePool (made-up, SYNTHETIC:
no GPU here).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.test_driver import SyntheticMeasurePool, request
from tsopt.app.tune_command import DEFAULT_TRIALS, resolve_trials
from tsopt.core.errors import UserInputError
from tsopt.db.store import Store
from tsopt.search.driver import Driver
from tsopt.search.pools.protocol import MeasureQueue


def run(req, pool=None) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    console = Console(file=io.StringIO(), width=300)
    code = Driver(req, console, measure_pool=pool).run()
    return code, console.file.getvalue()  # type: ignore[attr-defined]


def funnel(url: str, study: str) -> dict[str, int]:
    with Store(url) as store:
        return store.funnel(study)


def test_built_bounds_the_study_by_built_candidates_and_resumes_to_a_larger_bound(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    code, text = run(request(tmp_path, url, study="built", trials=None, built=2))
    assert code == 0
    assert funnel(url, "built")["built"] == 2
    assert "stopped: the study holds 2 built candidates (--built 2)" in text
    # The space's seed is built beside the trials, and the counts say so (2 built, 1 trial).
    assert "1 trials this run" in text and "2 built" in text
    assert "(a trial is one proposal of the sampler, besides the space's seed)" in text
    assert "proposed 1 + the seed |" in text
    code, text = run(request(tmp_path, url, study="built", trials=None, built=3))
    assert code == 0 and funnel(url, "built")["built"] == 3  # the study's total, as --trials


def test_measured_bounds_the_study_by_timed_candidates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    code, text = run(request(tmp_path, url, study="measured", trials=None, measured=2),
                     SyntheticMeasurePool())
    assert code == 0
    assert funnel(url, "measured")["timed"] == 2
    assert "stopped: the study holds 2 timed candidates (--measured 2)" in text


def test_measured_without_a_gpu_stops_at_once_and_says_why(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    code, text = run(request(tmp_path, url, study="no-gpu", trials=None, measured=3))
    assert code == 0
    assert "--measured 3: nothing is measured on this machine (no GPU)" in text
    assert funnel(url, "no-gpu")["proposed"] == 1  # the seed only: no trial was asked


def test_a_run_needs_some_budget() -> None:
    with pytest.raises(UserInputError, match="no budget: give --trials, --built, --measured or --time"):
        request(Path("."), "sqlite://", trials=None).validate()
    with pytest.raises(UserInputError, match="--built 0 must be at least 1"):
        request(Path("."), "sqlite://", built=0).validate()
    assert resolve_trials(None, None, None, None) == DEFAULT_TRIALS
    assert resolve_trials(None, 5, None, None) is None and resolve_trials(7, 5, None, None) == 7


class SlowGpuPool(SyntheticMeasurePool):
    """SYNTHETIC: the made-up measurements of SyntheticMeasurePool, but a GPU that takes
    ``seconds`` per candidate, so that built candidates queue up behind it."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def poll(self, timeout: float):  # type: ignore[no-untyped-def]
        import time

        if self.queue:
            time.sleep(self.seconds)
        return super().poll(timeout)


@pytest.mark.slow
def test_time_budget_cuts_the_queue_and_a_resume_takes_it_up(tmp_path: Path) -> None:
    """--time bounds the run: candidates still waiting for the GPU when it is spent are not
    measured by this run (a queue of dozens would overrun it by minutes at 8192^3); they stay
    in the study, built and recorded, and the next run measures them."""
    import time

    import optuna

    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    pool = SlowGpuPool(seconds=2.5)
    knobs = ("stages=1,2,4,8", "box_rows=8,16,32", "box_cols=256", "chunk=1", "vector=8",
             "raster=row")
    from tests.test_driver import NARROW

    req = request(tmp_path, url, study="cut", sampler="grid", trials=None, knobs=(*NARROW, *knobs),
                  time_budget_s=6.0, pool="processes", workers=2)
    started = time.monotonic()
    code, text = run(req, pool)
    took = time.monotonic() - started
    assert code == 0
    assert "stopped: time budget of 6 s reached" in text
    left = [t for t in optuna.load_study(study_name="cut", storage=url).get_trials()
            if t.state == optuna.trial.TrialState.RUNNING]
    assert left, "nothing was left for a resume: the test did not fill the queue"
    assert f"{len(left)} candidate" in text and "run the same command with more --time" in text
    # Bounded: the budget, the measurement in flight, the final round (top 5 x 2 x 1.5 s).
    assert took < 6.0 + 2 * 2.5 + 10 * 2.5 + 20, took
    measured_before = set(pool.measured)
    resumed = SlowGpuPool(seconds=0.0)
    code, text = run(request(tmp_path, url, study="cut", sampler="grid", trials=None,
                             knobs=(*NARROW, *knobs), time_budget_s=120.0), resumed)
    assert code == 0 and "unfinished trial" in text and "taken up again" in text
    assert set(resumed.measured) - measured_before, "the resume measured nothing new"
    assert not [t for t in optuna.load_study(study_name="cut", storage=url).get_trials()
                if t.state == optuna.trial.TrialState.RUNNING]


class QueuedSlowGpuPool(MeasureQueue):
    """SYNTHETIC: SyntheticMeasurePool's made-up measurements behind the real measuring
    queue (``MeasureQueue``, as the inline and Ray pools use it), on a GPU slower than the
    builds, recording what was queued each time it took one."""

    name = "synthetic"
    slots = 1

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.inner = SyntheticMeasurePool()
        self.takes: list[tuple[Any, list[Any]]] = []

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout: float):  # type: ignore[no-untyped-def]
        import time

        waiting = [tag for tag, _ in self._queue]
        item = self._next_for(0)
        if item is None:
            return []
        time.sleep(self.seconds)
        self.takes.append((item[0], waiting))
        self.inner.queue.append(item)
        return self.inner.poll(timeout)

    def close(self) -> list[str]:
        return []


@pytest.mark.slow
def test_what_waits_for_the_gpu_is_measured_in_the_sampler_s_predicted_order(tmp_path: Path) -> None:
    """A GPU slower than the builds (an 8192^3 GEMM study, bench/tune_gpu rounds 6-7) gets a
    queue; a sampler that predicts (evolve's cost model) has it measured best first."""
    import optuna

    from tests.test_driver import NARROW
    from tsopt.search.driver import Job

    class StagesFirst(optuna.samplers.RandomSampler):
        """Random proposals, and a SYNTHETIC prediction: more stages, faster."""

        def predicted(self, params: dict[str, Any]) -> float | None:
            return -float(params["stages"]) if "stages" in params else None

    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    pool = QueuedSlowGpuPool(seconds=0.6)
    knobs = ("stages=1,2,4,8", "box_rows=8,16,32", "box_cols=256", "chunk=1", "vector=8",
             "raster=row")
    req = request(tmp_path, url, study="ranked", trials=10, knobs=(*NARROW, *knobs),
                  pool="processes", workers=2)
    console = Console(file=io.StringIO(), width=300)
    assert Driver(req, console, measure_pool=pool, sampler=StagesFirst(seed=3)).run() == 0

    def stages(tag: Any) -> int:
        return int(tag.genome["stages"])

    def ranked(tag: Any) -> bool:
        return isinstance(tag, Job) and tag.trial is not None and tag.origin == "suggest"

    chose = 0
    for taken, waiting in pool.takes:
        trials = [t for t in waiting if ranked(t)]
        if not ranked(taken):  # unranked: the first of those
            assert all(ranked(t) for t in waiting[:waiting.index(taken)])
            continue
        assert stages(taken) == max(stages(t) for t in trials), (taken, waiting)
        chose += stages(taken) != stages(trials[0])  # not the first come
    assert chose >= 1, "the queue never held a choice: the test shows nothing"


def test_a_library_genome_is_measured_before_what_the_model_ranks(tmp_path: Path) -> None:
    """The genomes a study starts from (the seed library, warm starts) are measured
    evidence of what is best: the GPU takes them in the order they are built, before what the
    model ranks, whatever it predicts for them (round 8 on the H200: the library's stream-K
    kernel, which the analytical estimate ranks behind, waited unmeasured for 50 s of an 80 s
    8192^3 study). Judged by the driver's own rule, on the real measuring queue."""
    from types import SimpleNamespace

    import optuna

    from tests.test_driver import NARROW
    from tsopt.core.registry import get_space
    from tsopt.search.driver import Job
    from tsopt.search.pools.protocol import MeasureRequest

    class StagesFirst(optuna.samplers.RandomSampler):
        """A SYNTHETIC prediction: more stages, faster."""

        def predicted(self, params: dict[str, Any]) -> float | None:
            return -float(params["stages"])

    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    driver = Driver(request(tmp_path, url, study="order", trials=1, knobs=NARROW),
                    Console(file=io.StringIO()), sampler=StagesFirst(seed=1))
    driver.sampler = StagesFirst(seed=1)
    space = get_space("copy")

    def job(stages: int, origin: str, number: int) -> Job:
        genome = space.genome(stages=stages, box_rows=8, box_cols=256, chunk=1, vector=8)
        return Job(genome, number, origin,
                   SimpleNamespace(number=number, params={"stages": stages}))

    queue = MeasureQueue()
    queue.priority = driver._measure_priority
    submitted = [job(2, "suggest", 1), job(1, "warm_start", 2), job(8, "suggest", 3),
                 job(1, "warm_start", 4), job(4, "suggest", 5)]
    for tag in submitted:
        queue.submit(tag, MeasureRequest("unused", tag.genome.hash, {}))
    order = []
    while (item := queue._next_for(0)) is not None:
        order.append((item[0].origin, int(item[0].genome["stages"])))
    assert order == [("warm_start", 1), ("warm_start", 1), ("suggest", 8), ("suggest", 4),
                     ("suggest", 2)]


def test_a_contender_is_re_checked_beside_an_incumbent_until_it_is_pinned(tmp_path: Path) -> None:
    """Every proposal ties (SYNTHETIC times depend on the stages only), so each is a
    contender: the incumbent is measured beside the first contenders, and once it has
    INCUMBENT_CHECKS measurements only the contenders are measured again."""
    from tests.test_driver import NARROW
    from tsopt.search.confirm import INCUMBENT_CHECKS

    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    pool = SyntheticMeasurePool()
    knobs = ("stages=8", "box_rows=8,16,32", "box_cols=128,256", "chunk=1", "vector=8",
             "raster=row,col")
    driver = Driver(request(tmp_path, url, sampler="grid", trials=12, knobs=(*NARROW, *knobs)),
                    Console(file=io.StringIO(), width=200), measure_pool=pool)
    assert driver.run() == 0
    with Store(url) as store:
        candidates = store.candidates(driver.name)
    searched = {c.genome_hash: [r for r in c.measurements if "-confirm" not in r.run_id]
                for c in candidates}
    rechecked = {h: len([r for r in rows if "-recheck" in r.run_id]) for h, rows in searched.items()}
    contenders = [h for h, n in rechecked.items() if n >= 1]
    assert len(contenders) >= 6, rechecked  # enough ties to have re-checked an incumbent often
    assert max(len(rows) for rows in searched.values()) == INCUMBENT_CHECKS, rechecked
