"""What Optuna is told about a timing: its ratio to the vendor baseline and its rate ride along
as user attributes (optuna-dashboard shows them), for the driver and ingest alike. The
measurement is the H200 timing of copy genome d4032827a38d (bench/copy_h200's copy-4096-fenced,
as cut into tests/fixtures/copy_h200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures import FIXTURES
from tsopt.core.records import Measurement
from tsopt.db.store import Store
from tsopt.search.outcomes import (
    OBJECTIVE,
    add_finished_trial,
    figures,
    measurement_outcome,
    open_study,
    tell,
)

EVIDENCE = FIXTURES / "copy_h200" / "copy-4096-fenced"


def recorded() -> Measurement:
    results = json.loads((EVIDENCE / "results.json").read_text())
    doc = next(m for m in results["measurements"] if m["genome_hash"].startswith("d4032827a38d"))
    return Measurement.from_dict(doc)


def test_a_timing_carries_its_ratio_and_rate() -> None:
    m = recorded()
    assert m.status == "ok" and m.rate_unit == "GB/s" and m.ratio is not None
    outcome = measurement_outcome(m)
    # The objective: time relative to the vendor baseline timed beside it (1 / ratio); the time
    # itself goes with it (told instead to a study that minimises microseconds).
    assert outcome.value == pytest.approx(1 / m.ratio)
    assert outcome.time_us == m.median_us
    assert outcome.attrs == {**figures(m), "median_us": round(m.median_us or 0.0, 3)}
    assert outcome.attrs["ratio"] == round(m.ratio, 4) and outcome.attrs["baseline"] == m.baseline_name
    assert outcome.attrs["GB/s"] == round(m.rate or 0.0, 2)


def test_a_failed_measurement_has_no_figures() -> None:
    failed = Measurement(genome_hash="x", problem_key="copy-fp16-4096x4096", status="wrong",
                         error="checked run 1 of 2: 12 elements differ", ratio=None)
    reason = "wrong: checked run 1 of 2: 12 elements differ"
    assert measurement_outcome(failed).attrs == {"measure_failed": reason}
    paired = Measurement(genome_hash="y", problem_key="gemm-bf16-8x8x8", status="ok", median_us=2.0,
                         rate=700.0, rate_unit="TFLOP/s", ratio=1.01, ratio_lo=0.99, ratio_hi=1.03,
                         baseline_name="cuBLAS")
    assert figures(paired) == {"ratio": 1.01, "baseline": "cuBLAS", "ratio_95": [0.99, 1.03],
                               "TFLOP/s": 700.0}


def test_told_and_added_trials_show_them_in_the_study(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'tsopt.db'}") as store:
        study = open_study(store, "named")
        assert study.metric_names == [OBJECTIVE]  # optuna-dashboard labels the objective
        outcome = measurement_outcome(recorded())
        tell(study, study.ask(), outcome)
        number = add_finished_trial(study, outcome, {"genome_hash": "d4032827a38d"})
        for frozen in (study.trials[0], study.trials[number]):
            assert frozen.value == outcome.value
            assert {"ratio", "baseline", "GB/s"} <= set(frozen.user_attrs)
