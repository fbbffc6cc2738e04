"""The measurement corpus (tsopt.core.corpus, tsopt.app.corpus): evidence in, one record per
measurement out, and the shipped data made from the corpus alone.

The fixtures are made here, small, for these tests: a real SQLite study database (its timings
SYNTHETIC, recorded through the Store API and named so) packed as a ``tar.xz`` the way the
committed archives are, a bundle's ``results.json`` naming genomes by hash with the
``manifest.json`` beside it, and an experiment results file (``tests/test_evidence.py`` packs
them as an experiment's archive and builds from it). Nothing in ``bench/`` or ``evidence/``
is read; the last tests read the committed corpus (``corpus/``) and remake the
shipped files from it.
"""

from __future__ import annotations

import io
import json
import lzma
import math
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tsopt.app.corpus import (
    SHIPPED_SOURCES,
    corpus_build,
    corpus_products,
    corpus_stale,
    current_searches,
    load_corpus,
    records_from_evidence,
)
from tsopt.app.library import library_update
from tsopt.cli import app
from tsopt.core.corpus import (
    LAUNCH_ISOLATED,
    MEASUREMENTS_FILE,
    CorpusRecord,
    read_records,
)
from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement, TsSearch
from tsopt.core.registry import get_space
from tsopt.db.store import Store
from tsopt.search.library import PACKAGED, entries_from_records, entries_from_store, load_library
from tsopt.search.transfer import SHIPPED_MODEL, load_model
from tsopt.search.ts_memo import SHIPPED as SHIPPED_MEMO
from tsopt.verify.verifier import search_version

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = "SYNTHETIC (no GPU: made-up timings, not a measurement)"
COPY = Problem.of("copy", "fp16", rows=256, cols=256)


def _copy_genomes() -> list:
    space = get_space("copy")
    return [space.genome(stages=2, box_rows=8, box_cols=128, chunk=1, vector=8),
            space.genome(stages=4, box_rows=16, box_cols=256, chunk=1, vector=8),
            space.genome(stages=2, box_rows=8, box_cols=256, chunk=1, vector=8)]


def _measurement(genome_hash: str, ratio: float | None, status: str = "ok",
                 launch: str = "isolated") -> Measurement:
    if status != "ok":
        return Measurement(genome_hash, COPY.key, status, error="SYNTHETIC wrong result",  # type: ignore[arg-type]
                           device=SYNTHETIC, launch=launch)
    assert ratio is not None
    return Measurement(genome_hash, COPY.key, "ok", median_us=20.0 / ratio, ratio=ratio,
                       ratio_lo=ratio - 0.01, ratio_hi=ratio + 0.01, rounds=8,
                       baseline_name="SYNTHETIC", baseline_median_us=20.0, device=SYNTHETIC,
                       driver="SYNTHETIC", launch=launch)


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three kinds of evidence file, small; paths by kind."""
    folder = tmp_path_factory.mktemp("evidence")
    best, second, third = _copy_genomes()
    db = folder / "study.db"
    with Store(f"sqlite:///{db}") as store:
        store.create_or_get_study("synthetic", "copy", COPY, "sm_90a", "evolve", {})
        # best: measured twice (its standing combines both); second: once; third: wrong.
        for genome, run, ratio in ((best, "run-a", 1.04), (second, "run-a", 0.90),
                                   (best, "run-b", 1.08)):
            cid = store.add_candidate("synthetic", genome, "suggest")
            store.record_measurement(cid, _measurement(genome.hash, ratio), run)
        cid = store.add_candidate("synthetic", third, "suggest")
        store.record_measurement(cid, _measurement(third.hash, None, "wrong"), "run-a")
        store.record_search(TsSearch("copy", "sched-1", "alias-1", "SYNTHETIC-version", None,
                                     None, 0.5))
        store.set_study_status("synthetic", "finished")
    archive = folder / "studies.db.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(db, arcname="study.db")
    db.unlink()

    bundle = folder / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"candidates": [
        {"genome_hash": third.hash, "genome": third.to_dict()}]}))
    (bundle / "results.json").write_text(json.dumps({
        "format": "tsopt-bundle-results", "run_id": "bundle-run", "device": SYNTHETIC,
        "driver": "SYNTHETIC", "updated_at": "2026-12-01T00:00:00+00:00",
        "environment": {"device": SYNTHETIC, "sm_count": 132},
        "measurements": [_measurement(third.hash, 1.01, launch="graph").to_dict()]}))

    results = folder / "sweep.json"
    results.write_text(json.dumps({"measured_at": "2026-12-02T00:00:00Z", "results": [
        {"label": "hand-made", "problem": COPY.to_dict(), "genome": second.to_dict(),
         "measurement": _measurement(second.hash, 0.95).to_dict()}]}))
    return {"archive": archive, "bundle": bundle / "results.json", "results": results}


def test_every_measurement_becomes_one_record_saying_where_it_came_from(
        evidence: dict[str, Path]) -> None:
    paths = [evidence["results"], evidence["archive"], evidence["bundle"]]
    records = records_from_evidence(paths, evidence["archive"].parent)
    # Study databases first, then the files in the order given.
    assert [r.kind for r in records] == ["study-database"] * 4 + ["results-file",
                                                                  "bundle-results"]
    best, second, third = _copy_genomes()
    db = records[:4]
    assert [(r.genome_hash, r.status, r.pass_id) for r in db] == [
        (best.hash, "ok", "run-a"), (best.hash, "ok", "run-b"),
        (second.hash, "ok", "run-a"), (third.hash, "wrong", "run-a")]
    assert all(r.study == "synthetic" and r.study_status == "finished"
               and r.database == "study.db" and r.source == "studies.db.tar.xz" for r in db)
    assert db[3].ratio is None and db[3].error == "SYNTHETIC wrong result" and not db[3].ok
    assert all(r.problem == COPY for r in records)
    # each record in the launch mode its measurement says: the bundle's was timed in graphs
    assert [r.launch for r in records] == [LAUNCH_ISOLATED] * 5 + ["graph"]
    assert db[0].ratio_lo == pytest.approx(1.03) and db[0].rounds == 8 and db[0].paired
    bundle = records[5]
    # Named by hash only; the manifest beside it gives the genome.
    assert bundle.genome == third.to_dict() and bundle.pass_id == "bundle-run"
    assert bundle.machine == f"{SYNTHETIC}, 132 SMs, driver SYNTHETIC"
    assert bundle.document_at == "2026-12-01T00:00:00+00:00"
    assert records[4].label == "hand-made" and records[4].genome == second.to_dict()


def test_the_library_of_a_study_read_from_the_corpus_is_the_one_its_database_gives(
        evidence: dict[str, Path], tmp_path: Path) -> None:
    """The corpus route (records, standings recomputed) and the database route
    (``Store.ranked``) agree: same genomes, figures, intervals, times."""
    records = records_from_evidence([evidence["archive"]], evidence["archive"].parent)
    from_corpus = entries_from_records(records)
    with tarfile.open(evidence["archive"], "r:xz") as tar:
        tar.extractall(tmp_path, filter="data")
    with Store(f"sqlite:///{tmp_path / 'study.db'}") as store:
        from_db = entries_from_store(store, ["synthetic"])
    assert [e.genome.hash for e in from_corpus] == [e.genome.hash for e in from_db]
    for a, b in zip(from_corpus, from_db, strict=True):
        assert (a.ratio, a.ratio_lo, a.ratio_hi, a.paired, a.measured_at) == (
            b.ratio, b.ratio_lo, b.ratio_hi, b.paired, b.measured_at)
    # The best's standing: the median of its two ratios, the envelope of their intervals.
    assert from_corpus[0].ratio == pytest.approx(1.06)
    assert (from_corpus[0].ratio_lo, from_corpus[0].ratio_hi) == (pytest.approx(1.03),
                                                                  pytest.approx(1.09))


def test_the_corpus_file_round_trips_and_is_the_same_for_the_same_evidence(
        evidence: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(evidence["archive"].parent)
    paths = list(evidence.values())
    one = corpus_build(paths, tmp_path / "one")
    two = corpus_build(paths, tmp_path / "two")
    assert one["tables"] == two["tables"]
    assert one["tables"][MEASUREMENTS_FILE]["records"] == 6
    records, searches = load_corpus(tmp_path / "one")
    assert records == records_from_evidence(paths)
    assert [CorpusRecord.from_dict(r.to_dict()) for r in records] == records
    assert [(s.search.schedule, s.sources) for s in searches] == [
        ("sched-1", ("studies.db.tar.xz",))]
    # A search of another verifier version is kept in the corpus, never shipped.
    assert current_searches(searches, ["*"]) == []


def test_a_library_update_from_evidence_reads_it_as_the_corpus_does(
        evidence: dict[str, Path], tmp_path: Path) -> None:
    library = tmp_path / "library.json"
    paths = list(evidence.values())
    assert library_update(None, (), paths, library, Console(file=io.StringIO())) == 0
    source = {e.genome.hash: e.source for e in load_library(library)}
    best, second, third = _copy_genomes()
    assert set(source) == {best.hash, second.hash, third.hash}
    assert source[best.hash] == f"{evidence['archive']}: study synthetic (study.db)"
    assert source[third.hash] == f"{evidence['bundle']}: {third.hash[:12]}"


def test_a_corpus_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"manifest.json: not readable JSON"):
        load_corpus(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "tsopt-corpus",
                                                        "version": 99}))
    with pytest.raises(UserInputError, match=r"corpus version 99, this tsopt reads version 1"):
        load_corpus(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "tsopt-corpus",
                                                        "version": 1}))
    with lzma.open(tmp_path / MEASUREMENTS_FILE, "wt") as stream:
        stream.write('{"space": "copy"}\n')
    with pytest.raises(UserInputError, match=rf"{MEASUREMENTS_FILE}: line 1: "):
        load_corpus(tmp_path)
    with pytest.raises(ValueError, match="unknown launch mode 'graphs'"):
        CorpusRecord.from_dict({**read_records_fixture(), "launch": "graphs"})
    result = CliRunner().invoke(app, ["corpus", "products", "--corpus", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "manifest.json: not readable JSON" in result.output
    assert not (tmp_path / "none").exists()


def read_records_fixture() -> dict:
    record = read_records(ROOT / "corpus" / MEASUREMENTS_FILE)[0]
    return record.to_dict()


def test_the_committed_corpus_holds_every_committed_measurement_in_its_launch_mode() -> None:
    records, searches = load_corpus(ROOT / "corpus")
    assert len(records) >= 12000 and len(searches) >= 900
    # The runner's isolated launches; the headline rounds of bench/gemm_h200 (7) and
    # bench/search_efficiency_h200 (75), back to back; and in CUDA graphs, the Llama layer's
    # runtime-M studies alone (an H100's runs and an H200's).
    assert {r.launch for r in records} == {"isolated", "back-to-back-rounds", "graph"}
    assert sum(r.launch == "back-to-back-rounds" for r in records) == 82
    graphed = [r for r in records if r.launch == "graph"]
    assert graphed and {r.experiment.rsplit("/", 1)[-1] for r in graphed} == {"llama_layer"}
    assert all(r.problem.m_range is not None for r in graphed)
    sources = set(json.loads((ROOT / "corpus" / "manifest.json").read_text())["sources"])
    assert {r.source for r in records} <= sources
    assert all(source.startswith("bench/") for source in sources)
    assert {r.device for r in records if r.ok and r.launch != "graph"} == {"NVIDIA H200"}
    assert {r.device for r in graphed if r.ok} == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}


def same_numbers(made: Any, shipped: Any, rel: float = 1e-9) -> bool:
    """``made`` and ``shipped`` hold the same keys, lists and strings, and floats within
    ``rel`` of each other."""
    if isinstance(made, dict) and isinstance(shipped, dict):
        return made.keys() == shipped.keys() and all(
            same_numbers(made[k], shipped[k], rel) for k in made)
    if isinstance(made, list) and isinstance(shipped, list):
        return len(made) == len(shipped) and all(
            same_numbers(a, b, rel) for a, b in zip(made, shipped, strict=True))
    if isinstance(made, float) and isinstance(shipped, float):
        return math.isclose(made, shipped, rel_tol=rel, abs_tol=1e-12)
    return type(made) is type(shipped) and made == shipped


def test_the_shipped_library_memo_and_model_are_made_from_the_corpus(tmp_path: Path) -> None:
    """``tsopt corpus products`` remakes the shipped files byte for byte from corpus/ alone."""
    library, memo, model = tmp_path / "library.json", tmp_path / "memo.json", tmp_path / "m.json"
    made = corpus_products(ROOT / "corpus", library, memo, model)
    assert made["library entries"] == len(load_library(PACKAGED))
    assert library.read_bytes() == PACKAGED.read_bytes(), (
        "tsopt/data/seed_library.json is stale: run `tsopt corpus products`")
    assert memo.read_bytes() == SHIPPED_MEMO.read_bytes(), (
        "tsopt/data/ts_searches.json is stale: run `tsopt corpus products`")
    # The model is a least-squares fit: another numpy or BLAS build moves its last digits
    # (numpy 2.4.6 did, 2026-12-06), so it is compared to 1e-9, not byte for byte. A stale
    # model differs in its shapes, features or coefficients far beyond that.
    assert same_numbers(json.loads(model.read_text()), json.loads(SHIPPED_MODEL.read_text())), (
        "tsopt/data/cost_model.json is stale: run `tsopt corpus products`")
    assert made["cost model shapes"] == len(load_model().shapes)  # type: ignore[union-attr]
    assert all(s.tool_version == search_version()
               for s in current_searches(load_corpus(ROOT / "corpus")[1], SHIPPED_SOURCES))


def test_a_stale_corpus_is_named_and_left_as_it_is(evidence: dict[str, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(evidence["archive"].parent)
    paths = [evidence["archive"], evidence["results"]]
    corpus_build(paths, tmp_path / "c")
    assert corpus_stale(paths, tmp_path / "c") == []
    before = (tmp_path / "c" / MEASUREMENTS_FILE).read_bytes()
    result = CliRunner().invoke(app, [
        "corpus", "build", "--check", "--out", str(tmp_path / "c"),
        *[a for p in [*paths, evidence["bundle"]] for a in ("--evidence", str(p))]])
    assert result.exit_code == 1
    assert f"{MEASUREMENTS_FILE}: 5 records" in result.output and "makes 6" in result.output
    assert (tmp_path / "c" / MEASUREMENTS_FILE).read_bytes() == before

