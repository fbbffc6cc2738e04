"""Budgets of built and measured candidates (--built N, --measured N) beside --trials, which
counts proposals (most of them rejected before anything is built).

Real copy template, verifier and sm_90a builds on this CPU, over the narrow corner of the copy
space of tests/test_driver.py; timings come from its SyntheticMeasurePool (made-up, SYNTHETIC:
no GPU here).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tests.test_driver import SyntheticMeasurePool, request
from tsopt.app.tune_command import DEFAULT_TRIALS, resolve_trials
from tsopt.core.errors import UserInputError
from tsopt.db.store import Store
from tsopt.search.driver import Driver


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
    assert "(a trial is one proposal of the sampler)" in text and "2 built" in text
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
