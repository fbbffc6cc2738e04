"""The launch mode's plumbing, for real: the tune request and its command line, the records,
the study's mode in a real SQLite database, and the report. (How each mode times is in
tests/test_runner.py and tests/test_watchdog.py, on the simulated device; bundles in
tests/test_bundle.py, ingest in tests/test_ingest.py, the export manifest in
tests/test_export.py, the migration in tests/test_db.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tsopt.cli import app
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import DEFAULT_LAUNCH, LAUNCH_MODES, Measurement
from tsopt.db.store import Store
from tsopt.reports.data import study_document
from tsopt.search.request import TuneRequest

PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)


def copy_genome(stages: int = 2) -> Genome:
    from tsopt.core.registry import get_space

    return get_space("copy").genome(stages=stages, box_rows=8, box_cols=128, chunk=1, vector=8)


def timed(genome: Genome, launch: str) -> Measurement:
    return Measurement(genome.hash, PROBLEM.key, "ok", median_us=25.0, p10_us=24.0, p90_us=26.0,
                       runs=40, rate=10.0, rate_unit="GB/s", rel_err=0.0,
                       baseline_name="torch.copy_", baseline_median_us=21.0, ratio=0.84,
                       device="simulated device", launch=launch)  # type: ignore[arg-type]


def test_graph_is_the_default_and_the_modes_are_named() -> None:
    assert DEFAULT_LAUNCH == "graph" and LAUNCH_MODES == ("graph", "eager", "isolated")
    assert Measurement("h", "p", "ok").launch == "graph"


def test_a_stored_measurement_without_a_mode_reads_as_isolated_and_an_unknown_one_is_refused(
) -> None:
    doc = timed(copy_genome(), "eager").to_dict()
    assert Measurement.from_dict(doc).launch == "eager"
    del doc["launch"]
    assert Measurement.from_dict(doc).launch == "isolated"
    with pytest.raises(ValueError, match="unknown launch mode 'replay'"):
        Measurement.from_dict({**doc, "launch": "replay"})


@pytest.mark.parametrize("launch, says", [
    ("replay", "--launch 'replay' is not one of graph, eager"),
    ("isolated", "resumes in its own isolated mode when --launch is not given"),
])
def test_a_bad_launch_mode_is_refused_before_anything_starts(launch: str, says: str,
                                                             tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=says.replace("(", "\\(")):
        TuneRequest(space="copy", problem=PROBLEM, launch=launch).validate()
    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    result = CliRunner().invoke(app, ["tune", "copy", "--rows", "256", "--cols", "512",
                                      "--trials", "1", "--db", db, "--launch", launch])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and says in " ".join(result.output.split()), result.output
    assert not (tmp_path / "tsopt.db").exists()  # a refusal changes nothing


def test_the_tune_command_offers_the_modes() -> None:
    from tsopt.app.tune_command import LAUNCH_HELP

    result = CliRunner().invoke(app, ["tune", "copy", "--help"])
    assert result.exit_code == 0 and "--launch" in result.output
    assert "graph (default for a new study" in LAUNCH_HELP and "eager" in LAUNCH_HELP


def test_the_report_states_the_studys_mode_and_any_measurement_of_another(
        tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'tsopt.db'}") as store:
        store.create_or_get_study("eager-study", "copy", PROBLEM, "sm_90a", "tpe", {},
                                  launch="eager")
        one, two = copy_genome(2), copy_genome(3)
        store.record_measurement(store.add_candidate("eager-study", one, "seed"),
                                 timed(one, "eager"), "run-1")
        doc = study_document(store, "eager-study")
        assert doc["launch"] == "eager" and doc["measurement_launches"] == {"eager": 1}
        assert doc["launch_text"] == ("eager: calls through the export's loader (GPU plus "
                                      "launch cost)")
        # A committed measurement of the old runner recorded beside it keeps its own mode,
        # and the report says so rather than taking it for an eager one.
        store.record_measurement(store.add_candidate("eager-study", two, "seed"),
                                 dataclasses.replace(timed(two, "isolated")), "run-0")
        doc = study_document(store, "eager-study")
        assert doc["measurement_launches"] == {"eager": 1, "isolated": 1}
        assert doc["launch_text"].endswith("; 1 measurement in isolated mode")
        assert doc["measured_on_text"] == f"{timed(one, 'eager').device} (2)"


def test_the_report_ranks_a_study_measured_on_two_cards_on_one(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'tsopt.db'}") as store:
        store.create_or_get_study("two-cards", "copy", PROBLEM, "sm_90a", "tpe", {})
        one, two = copy_genome(2), copy_genome(3)
        ids = {g.hash: store.add_candidate("two-cards", g, "seed") for g in (one, two)}
        # pooled, `one` would stand at the median of 1.0 and 0.5 and rank below `two`
        for g, card, ratio in ((one, "SIMULATED A", 1.0), (two, "SIMULATED A", 0.9),
                               (one, "SIMULATED B", 0.5)):
            m = dataclasses.replace(timed(g, "graph"), device=card, ratio=ratio)
            store.record_measurement(ids[g.hash], m, f"run-{card}")
        doc = study_document(store, "two-cards")
        # No profile names a simulated card: the most measured ranks.
        assert doc["measured_on_text"] == ("SIMULATED A (2), SIMULATED B (1); ranked on "
                                           "SIMULATED A alone (the study's target card where "
                                           "it measured it, else the most measured; `tsopt "
                                           "export --measured-on` picks the card)")
        assert [r["hash"] for r in doc["table"]["rows"]] == [one.hash, two.hash]


def test_a_gpu_less_tune_records_its_mode_in_the_study_and_the_bundle(tmp_path: Path) -> None:
    """A real `tsopt tune` (Python API, the real DSL build, no GPU here): the study and its
    bundle say eager; resuming the study in another mode is refused and changes nothing."""
    from tsopt.app.api import tune
    from tsopt.core.bundle import read_manifest

    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    where = {"bundle_dir": tmp_path / "bundle", "cache_dir": tmp_path / "artifacts",
             "measure": "never", "library": False, "warm_start": False}
    summary = tune("copy", "copy:fp16:512x1024", built=1, db=db, launch="eager", **where)
    assert summary.exit_code == 0 and summary.built >= 1
    manifest = read_manifest(tmp_path / "bundle")
    assert manifest.launch == "eager" and len(manifest.candidates) >= 1
    with Store(db) as store:
        info = store.get_study(summary.study)
        assert info is not None and info.launch == "eager"
    with pytest.raises(UserInputError, match="launch mode 'eager' \\(asked for 'graph'\\)"):
        tune("copy", "copy:fp16:512x1024", built=2, db=db, launch="graph", **where)
    assert len(read_manifest(tmp_path / "bundle").candidates) == len(manifest.candidates)
    # Without --launch it resumes in its own mode.
    again = tune("copy", "copy:fp16:512x1024", built=2, db=db, **where)
    assert again.exit_code == 0 and read_manifest(tmp_path / "bundle").launch == "eager"
