"""Ingesting measured bundles into a real SQLite database and its Optuna study.

The measurements are written by hand as a GPU machine would have written them (the device name
says "simulated device"); they test what ingest records and tells, not any kernel's speed. Each
bundle is ingested into a database that recorded its builds (:mod:`tests.built_here`), as the
database whose ``tsopt tune`` wrote the bundle has them.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console
from typer.testing import CliRunner

from tests.built_here import failed, record_built, timed
from tsopt.app.ingest import ingest_bundle, ingest_results
from tsopt.cli import app
from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.bundle import (
    RESULTS_NAME,
    Baseline,
    BundleEntry,
    BundleError,
    BundleResults,
    read_manifest,
    read_results,
    write_bundle,
    write_results,
)
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.db.store import Store

PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)
STUDY = "copy-ingest"


def genome(stages: int) -> Genome:
    """A real copy schedule that passes verification for PROBLEM (ingest verifies again)."""
    from tsopt.core.registry import get_space

    return get_space("copy").genome(stages=stages, box_rows=8, box_cols=128, chunk=1, vector=8)


def measured(g: Genome, status: str, median_us: float | None = None) -> Measurement:
    if status != "ok" or median_us is None:
        return failed(g, PROBLEM, status)
    return timed(g, PROBLEM, median_us, p10_us=median_us, p90_us=median_us)


def built(tmp_path: Path, genomes: list[Genome]) -> list[tuple[Genome, Path]]:
    return [(g, tmp_path / "built" / g.hash) for g in genomes]


def built_database(url: str, tmp_path: Path, genomes: list[Genome]) -> None:
    """A database that built the bundle's candidates (as `tsopt tune` leaves it)."""
    with Store(url) as store:
        record_built(store, STUDY, PROBLEM, built(tmp_path, genomes[:3]))
        record_built(store, STUDY, PROBLEM, built(tmp_path, genomes[3:]), origin="seed")


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, list[Genome]]:
    genomes = [genome(s) for s in (2, 3, 4, 5)]
    entries = []
    for g in genomes:
        art = tmp_path / "built" / g.hash
        art.mkdir(parents=True)
        (art / "libkernel.so").write_bytes(b"placeholder library, never loaded here")
        tensors = (TensorDesc("src", "input", (256, 512), "fp16"),
                   TensorDesc("dst", "output", (256, 512), "fp16"))
        ArtifactManifest(g.hash, "copy", PROBLEM.to_dict(), "sm_90a", tensors).write(art)
        entries.append(BundleEntry(g, art, origin="seed" if g is genomes[3] else "suggest"))
    path = tmp_path / "bundle"
    manifest = write_bundle(path, study=STUDY, space="copy", problem=PROBLEM, arch="sm_90a",
                            candidates=entries)
    results = BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device="simulated device",
        baselines=[Baseline(PROBLEM.key, "torch.copy_", "simulated device", 21.0, 20.0, 22.0,
                            50, PROBLEM.bytes_moved / 21e3, "GB/s")],
        measurements=[measured(genomes[0], "ok", 25.0), measured(genomes[1], "wrong"),
                      measured(genomes[2], "ok", 30.0), measured(genomes[3], "ok", 40.0)],
        measured_files={c.genome_hash: dict(c.files) for c in manifest.candidates},
    )
    write_results(path, results)
    return path, genomes


def prepared_store(url: str, genomes: list[Genome],
                   tmp_path: Path) -> tuple[Store, optuna.Study]:
    """A study whose first three candidates came from Optuna trials 0-2; the fourth is seeded;
    every one built here."""
    store = Store(url)
    info = store.create_or_get_study(STUDY, "copy", PROBLEM, "sm_90a", "tpe", {})
    study = optuna.create_study(study_name=info.optuna_study_name, direction="minimize",
                                storage=store.optuna_storage())
    numbers = {g.hash: study.ask().number for g in genomes[:3]}
    record_built(store, STUDY, PROBLEM, built(tmp_path, genomes[:3]), trial_numbers=numbers)
    record_built(store, STUDY, PROBLEM, built(tmp_path, genomes[3:]), origin="seed")
    study.tell(2, 99.0)  # finished before the results came back: must be left alone
    return store, study


def test_ingest_records_and_tells_the_study_once(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, genomes = bundle
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    store, study = prepared_store(url, genomes, tmp_path)
    manifest = read_manifest(path)
    results = read_results(path, manifest)
    assert results is not None

    report = ingest_results(store, manifest, results)
    assert (report.measurements_new, report.baselines_new) == (4, 1)
    assert (report.trials_completed, report.trials_failed, report.trials_added,
            report.trials_left) == (1, 1, 1, 1)

    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert trials[0].state == TrialState.COMPLETE
    assert trials[0].value == pytest.approx(25.0 / 21.0)  # the time relative to the baseline's
    assert trials[0].user_attrs["run_id"] == results.run_id
    assert trials[1].state == TrialState.FAIL
    assert trials[1].user_attrs["measure_failed"].startswith("wrong: checked run 1 of 2")
    assert trials[2].value == 99.0  # already finished: untouched
    added = trials[3]
    assert added.state == TrialState.COMPLETE and added.value == pytest.approx(40.0 / 21.0)
    assert added.user_attrs["genome_hash"] == genomes[3].hash
    assert added.user_attrs["stages"] == 5 and added.user_attrs["box_cols"] == 128
    assert added.user_attrs["raster"] == genomes[3]["raster"]
    by_hash = {c.genome_hash: c for c in store.candidates(STUDY)}
    assert by_hash[genomes[3].hash].trial_number == 3
    assert all(len(c.measurements) == 1 and c.measurements[0].run_id == results.run_id
               for c in by_hash.values())
    assert [b["median_us"] for b in store.baselines(PROBLEM.key)] == [21.0]

    again = ingest_results(store, manifest, results)
    assert not again.changed
    assert (again.measurements_known, again.baselines_known, again.trials_left) == (4, 1, 4)
    assert len(study.get_trials(deepcopy=False)) == 4
    assert all(len(c.measurements) == 1 for c in store.candidates(STUDY))
    store.close()


def test_ingest_into_a_database_that_did_not_build_the_bundle_is_refused(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    """A bundle is checked against the builds its database recorded: a database without them
    (a missing file, one without the study) refuses it and is left as it was."""
    path, genomes = bundle
    missing = tmp_path / "fresh.db"
    with pytest.raises(UserInputError, match="no database at"):
        ingest_bundle(path, f"sqlite:///{missing}", Console(quiet=True))
    assert not missing.exists()
    url = f"sqlite:///{tmp_path / 'other.db'}"
    with Store(url) as store:
        store.create_or_get_study("another", "copy", PROBLEM, "sm_90a", "tpe", {})
    before = (tmp_path / "other.db").read_bytes()
    with pytest.raises(BundleError, match=f"study '{STUDY}' is not in this database "
                                          r"\(its studies: another\)"):
        ingest_bundle(path, url, Console(quiet=True))
    assert (tmp_path / "other.db").read_bytes() == before
    with Store(url) as store:
        assert store.get_study(STUDY) is None


def test_ingest_into_the_database_that_built_it(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, genomes = bundle
    url = f"sqlite:///{tmp_path / 'built.db'}"
    built_database(url, tmp_path, genomes)
    out = io.StringIO()
    assert ingest_bundle(path, url, Console(file=out, width=300)) == 0
    with Store(url) as store:
        candidates = store.candidates(STUDY)
        assert {c.genome_hash for c in candidates} == {g.hash for g in genomes}
        origins = {c.genome_hash: c.origin for c in candidates}
        assert origins[genomes[3].hash] == "seed" and origins[genomes[0].hash] == "suggest"
        info = store.get_study(STUDY)
        assert info is not None
        study = optuna.load_study(study_name=info.optuna_study_name,
                                  storage=store.optuna_storage())
        states = sorted(t.state.name for t in study.get_trials(deepcopy=False))
        assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"]
        assert all(c.trial_number is not None for c in candidates)
        assert [r.genome_hash for r in store.ranked(STUDY)] == [genomes[0].hash,
                                                                genomes[2].hash,
                                                                genomes[3].hash]


def test_cli_ingest_twice_adds_nothing_the_second_time(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, genomes = bundle
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    built_database(url, tmp_path, genomes)
    first = CliRunner().invoke(app, ["ingest", str(path), "--db", url])
    assert first.exit_code == 0, first.output
    assert "recorded 4 new measurements" in first.output
    second = CliRunner().invoke(app, ["ingest", str(path), "--db", url])
    assert second.exit_code == 0, second.output
    assert "nothing new" in " ".join(second.output.split())
    with Store(url) as store:
        assert sum(len(c.measurements) for c in store.candidates(STUDY)) == 4


def test_unmeasured_corrupted_or_mismatched_results_are_refused(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, genomes = bundle
    url = f"sqlite:///{tmp_path / 'x.db'}"
    built_database(url, tmp_path, genomes)
    saved = (path / RESULTS_NAME).read_text()
    (path / RESULTS_NAME).unlink()
    with pytest.raises(BundleError, match="has not been measured: it has no results.json"):
        ingest_bundle(path, url, Console(quiet=True))

    (path / RESULTS_NAME).write_text(saved[:100])
    result = CliRunner().invoke(app, ["ingest", str(path), "--db", url])
    assert result.exit_code == 2 and "results.json is corrupted" in result.output

    doc = json.loads(saved)
    doc["bundle_id"] = str(uuid.uuid4())
    (path / RESULTS_NAME).write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="mismatched results"):
        ingest_bundle(path, url, Console(quiet=True))


def test_a_study_of_another_problem_is_not_mixed_in(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, _ = bundle
    url = f"sqlite:///{tmp_path / 'other.db'}"
    with Store(url) as store:
        store.create_or_get_study(STUDY, "copy", Problem.of("copy", "fp16", rows=64, cols=64),
                                  "sm_90a", "tpe", {})
    with pytest.raises(BundleError, match="problem 'copy-fp16-256x512', but study "
                                          "'copy-ingest' of this database is of problem "
                                          "'copy-fp16-64x64'"):
        ingest_bundle(path, url, Console(quiet=True))


def test_a_bundle_of_another_launch_mode_than_its_study_is_refused_and_changes_nothing(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, genomes = bundle
    url = f"sqlite:///{tmp_path / 'eager.db'}"
    with Store(url) as store:  # the study measures eagerly; the bundle was measured in graphs
        store.create_or_get_study(STUDY, "copy", PROBLEM, "sm_90a", "tpe", {}, launch="eager")
    built_database(url, tmp_path, genomes)
    with pytest.raises(UserInputError, match="bundle measured in launch mode 'graph', but "
                                             "study 'copy-ingest' is measured in 'eager'"):
        ingest_bundle(path, url, Console(quiet=True))
    with Store(url) as store:
        assert all(not c.measurements for c in store.candidates(STUDY))
    result = CliRunner().invoke(app, ["ingest", str(path), "--db", url])
    assert result.exit_code == 2 and "measured in 'eager'" in result.output


def test_ingest_records_each_measurement_in_the_bundles_mode(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    path, genomes = bundle
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    built_database(url, tmp_path, genomes)
    assert ingest_bundle(path, url, Console(quiet=True)) == 0
    with Store(url) as store:
        info = store.get_study(STUDY)
        assert info is not None and info.launch == "graph"
        assert {r.measurement.launch for c in store.candidates(STUDY)
                for r in c.measurements} == {"graph"}


def test_a_run_resumed_after_ingest_shows_the_study_best_before_it(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    """A GPU-less round 2 times nothing of its own: its live view names the study's rank 1 from
    the ingested round instead of "nothing timed yet", until the run times something better.
    The timings are SYNTHETIC (simulated device)."""
    from types import SimpleNamespace

    from tsopt.search.driver import Driver
    from tsopt.search.progress import TuneStats

    path, genomes = bundle
    store, _ = prepared_store(f"sqlite:///{tmp_path / 'tsopt.db'}", genomes, tmp_path)
    manifest = read_manifest(path)
    results = read_results(path, manifest)
    assert results is not None
    ingest_results(store, manifest, results)
    run = SimpleNamespace(store=store, name=STUDY, stats=TuneStats())
    Driver._note_earlier_best(run)  # type: ignore[arg-type]  (what it reads of a Driver)
    store.close()

    stats = run.stats
    assert stats.earlier_best == (pytest.approx(21.0 / 25.0), genomes[0].hash, "torch.copy_")
    assert stats.best_line() == ("best: nothing timed in this run; the study's best before "
                                 f"this run: 0.840x torch.copy_ ({genomes[0].hash[:12]})")
    stats.offer_best(30.0, 0.70, "f" * 64, 5, "torch.copy_")
    assert stats.best_line().endswith(f"the study's best before this run: 0.840x torch.copy_ "
                                      f"({genomes[0].hash[:12]})")
    stats.offer_best(20.0, 1.05, "0" * 64, 6, "torch.copy_")
    assert stats.best_line() == "best: 20.00 µs, 1.050x torch.copy_ (000000000000, trial 6)"


def test_results_from_another_gpu_are_recorded_with_a_note(
    tmp_path: Path, bundle: tuple[Path, list[Genome]],
) -> None:
    # The same bundle measured again on another card (a new run): recorded beside the first
    # card's figures, with a note saying the study now spans two GPUs.
    path, genomes = bundle
    store, _ = prepared_store(f"sqlite:///{tmp_path / 'tsopt.db'}", genomes, tmp_path)
    manifest = read_manifest(path)
    first = read_results(path, manifest)
    assert first is not None
    assert ingest_results(store, manifest, first).notes == []
    other = BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device="another device",
        baselines=first.baselines,
        measurements=[Measurement.from_dict({**m.to_dict(), "device": "another device"})
                      for m in first.measurements],
        measured_files=first.measured_files)
    report = ingest_results(store, manifest, other)
    assert report.measurements_new == 4
    assert store.measured_devices(STUDY) == {"another device": 3, "simulated device": 3}
    assert len(report.notes) == 1 and report.notes[0].startswith(
        f"study {STUDY!r} was measured on simulated device before; this run was measured on "
        "another device.")
    # the same card again says nothing
    again = BundleResults(bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()),
                          device="another device", baselines=other.baselines,
                          measurements=other.measurements, measured_files=other.measured_files)
    assert ingest_results(store, manifest, again).notes == []
    store.close()
