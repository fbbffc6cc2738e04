"""The held-out protocol (issue #28, item 1): the frozen set, what must stay free of it, and
``tsopt tune --library-exclude-self``.

What is checked, as far as the tree lets it be checked:
- the set (``tsopt/data/heldout.json``) reads, every problem is one its space takes, and it
  spans the regimes the issue names (by the sizes themselves, not by the labels);
- the shipped seed library holds no entry of a held-out problem, none in a held-out problem's
  shape class, and no corpus record (every committed measurement, from which the library and
  the TS search memo are made: ``tests/test_corpus.py`` remakes them) is of a held-out shape
  or names one; ``tsopt corpus build`` refuses evidence that measured one (a results file
  made here);
- no cost-model source, shipped data file or other test names a held-out shape;
- ``--library-exclude-self`` drops the study's own problem's library entries and warm starts
  and keeps other shapes' (the real driver, TS verifier and DSL compiles of the copy space,
  nothing measured: the finished study's timings are SYNTHETIC, named so); the study records
  its mode and the summary and the report say it;
- bad input: ``--library-exclude-self --no-library``, and a held-out file naming a problem that
  is not one, each get one line and exit 2, and change nothing.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console
from typer.testing import CliRunner

from tsopt.app.corpus import load_corpus
from tsopt.app.heldout import PACKAGED as HELDOUT
from tsopt.app.heldout import check_spaces, load_heldout
from tsopt.cli import app
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.db.store import Store
from tsopt.reports.data import study_document
from tsopt.search.driver import Driver
from tsopt.search.library import (
    LIBRARY_ENV,
    PACKAGED,
    LibraryEntry,
    load_library,
    lookup,
    save_library,
    shape_class,
)
from tsopt.search.request import TuneRequest

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC_DEVICE = "SYNTHETIC (no GPU: made-up timings, not a measurement)"
LOAD = "coords,try_acquire,acquire,tma_load,commit|0|none"
STORE = "try_wait,wait,read,release,store|0|none"
NARROW = (f"load.placement={LOAD}", f"store.placement={STORE}", "layout=4@0,load4,40/168",
          "persistent=false")

optuna.logging.set_verbosity(optuna.logging.WARNING)

HELD = load_heldout()
SPEC = re.compile(r"(?<![0-9])([0-9]+)[x×]([0-9]+)[x×]([0-9]+)(?![0-9])")


def sizes_of(problem: Problem) -> tuple[int, int, int]:
    return problem["m"], problem["n"], problem["k"]


HELD_SIZES = {sizes_of(p.problem) for p in HELD.problems}
HELD_DTYPED = {(p.problem.dtype, *sizes_of(p.problem)) for p in HELD.problems}


# -- the set ---------------------------------------------------------------------------------

def test_the_heldout_set_reads_and_spans_the_regimes() -> None:
    check_spaces(HELD)  # every problem one its space takes (N and K multiples of 8, dtype)
    assert HELD.version >= 1 and len(HELD.problems) >= 10
    gemms = [sizes_of(p.problem) for p in HELD.problems]
    assert all(p.problem.op == "gemm" and p.space == "gemm" for p in HELD.problems)
    assert any(m <= 32 and n >= 8192 for m, n, k in gemms), "decode, wide N"
    assert any(m <= 32 and k >= 16384 for m, n, k in gemms), "decode, heavy K"
    assert any(n <= 128 and m >= 2048 for m, n, k in gemms), "skinny N"
    # Ragged: a multiple of no tile (tile_m >= 64, tile_n >= 16, tile_k >= 32) on any side.
    assert any(m % 64 and n % 16 and k % 32 for m, n, k in gemms), "ragged"
    assert any(2e10 <= 2 * m * n * k <= 1e11 and min(m, n) >= 1024 for m, n, k in gemms), "mid"
    assert any(2 * m * n * k >= 2e11 and max(m, n) >= 2 * min(m, n) for m, n, k in gemms), \
        "large rectangular"
    assert any(p.problem.dtype == "fp16" for p in HELD.problems)
    # Five with a 300-candidate oracle, the rest 100 (issue #28, item 2).
    assert sorted(p.oracle for p in HELD.problems)[-5:] == [300] * 5
    assert all(p.oracle >= 100 for p in HELD.problems)
    # Not the model projections another issue showcases, nor a tuned shape.
    for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (14336, 4096)):
        assert not any((pn, pk) == (n, k) for _, pn, pk in gemms)
    listed = CliRunner().invoke(app, ["heldout", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [p["name"] for p in json.loads(listed.output)["problems"]] == [
        p.name for p in HELD.problems]


# -- what must stay free of it ---------------------------------------------------------------

def test_the_shipped_library_holds_none_of_them() -> None:
    entries = load_library(PACKAGED)
    assert entries
    assert not [e.source for e in entries if HELD.holds(e.problem)]
    # Chosen outside every class the library held when frozen: a lookup for a held-out
    # problem starts from other shapes' entries only. A library entry landing in one of these
    # classes later is a choice to make consciously (this test names it).
    held_classes = {shape_class(p.problem) for p in HELD.problems}
    inside = sorted({f"{e.problem.key} ({e.shape_class})" for e in entries
                     if e.shape_class in held_classes})
    assert not inside, f"library entries in a held-out shape class: {inside}"


def test_the_corpus_build_refuses_evidence_of_a_held_out_shape(tmp_path: Path) -> None:
    """Nothing is derived from a held-out problem: evidence measuring one of its shapes (any
    dtype) is refused by ``tsopt corpus build``, naming the file, and no corpus is written.
    The evidence is made here: one results file, its timing SYNTHETIC (named so)."""
    item = HELD.problems[0]
    other_dtype = "fp16" if item.problem.dtype == "bf16" else "bf16"
    problem = Problem.of(item.problem.op, other_dtype, **dict(item.problem.dims))
    genome = get_space("gemm").seed_genome(problem)
    doc = {"measured_at": "2026-12-04T00:00:00Z", "results": [{
        "label": "SYNTHETIC", "problem": problem.to_dict(), "genome": genome.to_dict(),
        "measurement": {"genome_hash": genome.hash, "problem_key": problem.key,
                        "status": "ok", "ratio": 1.0, "device": "SYNTHETIC"}}]}
    evidence = tmp_path / "held.json"
    evidence.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["corpus", "build", "--evidence", str(evidence),
                                      "--out", str(tmp_path / "corpus")])
    assert result.exit_code == 2, result.output
    assert "a held-out shape" in result.output and "held.json" in result.output
    assert problem.key in result.output
    assert not (tmp_path / "corpus").exists()


def test_no_corpus_record_is_of_a_held_out_problem() -> None:
    """The corpus is every committed measurement (the evidence archives, read by ``tsopt
    corpus build``, which refuses a held-out shape): no record's problem is a held-out shape,
    and none of its names (study, label, source, database, library sources) writes one."""
    records, _ = load_corpus(ROOT / "corpus")
    assert len(records) > 10_000
    sizes = {sizes_of(r.problem) for r in records if r.problem.op == "gemm"}
    assert (8192, 8192, 8192) in sizes  # the records are read: the suite's shapes are there
    assert not sizes & HELD_SIZES
    names = {name for r in records for name in (r.study, r.label, r.source, r.database) if name}
    names |= {e.source for e in load_library(PACKAGED)}
    written = {tuple(map(int, m.groups())) for name in names for m in SPEC.finditer(name)}
    assert (16, 4096, 4096) in written  # the names are read: a suite shape is written in them
    assert not written & HELD_SIZES


def test_no_cost_model_constant_shipped_data_or_test_names_them() -> None:
    sources = [ROOT / "tsopt/search/cost_model.py", ROOT / "tsopt/search/evolve.py",
               ROOT / "search_spaces/gemm/config.py", ROOT / "search_spaces/gemm/checks.py"]
    sources += sorted((ROOT / "tsopt/data").glob("*.json"))
    sources += sorted((ROOT / "search_spaces").glob("*/data/*.json"))
    sources += sorted((ROOT / "tests").rglob("*.py"))
    skip = {HELDOUT.resolve(), Path(__file__).resolve()}
    named = {}
    for path in sources:
        if path.resolve() in skip:
            continue
        sizes = {tuple(map(int, m.groups())) for m in SPEC.finditer(path.read_text())}
        if sizes & HELD_SIZES:
            named[str(path.relative_to(ROOT))] = sorted(sizes & HELD_SIZES)
    assert len(sources) > 40
    assert not named, f"held-out shapes named in {named}"


# -- --library-exclude-self ------------------------------------------------------------------

def test_exclude_self_drops_the_problems_own_entries_and_keeps_the_others() -> None:
    entries = load_library(PACKAGED)
    own = Problem.of("gemm", "bf16", m=16, n=4096, k=4096)
    with_self = lookup(entries, "gemm", own, "sm_90a", limit=20)
    without = lookup(entries, "gemm", own, "sm_90a", limit=20, exclude_self=True)
    assert any(e.problem == own for e in with_self)
    assert without and all(e.problem != own for e in without)
    # The other shapes' entries stay, in the same order.
    others = [e.genome.hash for e in with_self if e.problem != own]
    assert [e.genome.hash for e in without][: len(others)] == others[: len(without)]


def _entry(genome: Genome, problem: Problem, ratio: float, source: str) -> LibraryEntry:
    return LibraryEntry(space="copy", problem=problem, arch="sm_90a", genome=genome,
                        ratio=ratio, paired=True, source=source, ratio_lo=ratio - 0.01,
                        ratio_hi=ratio + 0.01, measured_at="2026-12-03T00:00:00+00:00")


@pytest.mark.slow
def test_a_leave_one_shape_out_study_starts_from_other_shapes_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tsopt.core.records import Measurement
    from tsopt.search.progress import library_line

    space = get_space("copy")
    own_best = space.genome(stages=2, box_rows=8, box_cols=128, chunk=1, vector=8)
    neighbour = space.genome(stages=4, box_rows=16, box_cols=256, chunk=1, vector=8)
    own = Problem.of("copy", "fp16", rows=256, cols=512)
    near = Problem.of("copy", "fp16", rows=256, cols=256)
    library = tmp_path / "library.json"
    save_library([_entry(own_best, own, 1.2, "SYNTHETIC own entry"),
                  _entry(neighbour, near, 1.0, "SYNTHETIC neighbour entry")], library)
    monkeypatch.setenv(LIBRARY_ENV, str(library))
    url = f"sqlite:///{tmp_path / 'loo.db'}"
    # A finished study of the same problem: a warm start from it would leak the shape too.
    with Store(url) as store:
        store.create_or_get_study("own-earlier", "copy", own, "sm_90a", "evolve", {})
        cid = store.add_candidate("own-earlier", own_best, "suggest")
        store.record_measurement(cid, Measurement(
            own_best.hash, own.key, "ok", median_us=10.0, ratio=1.2, ratio_lo=1.19,
            ratio_hi=1.21, rounds=8, baseline_name="SYNTHETIC", device=SYNTHETIC_DEVICE),
            "synthetic")
        store.set_study_status("own-earlier", "finished")

    request = TuneRequest(space="copy", problem=own, trials=2, db_url=url, study="loo",
                          bundle_dir=tmp_path / "bundles", cache_dir=tmp_path / "artifacts",
                          knobs=NARROW, measure="never", library_exclude_self=True)
    assert request.library_mode == "exclude-self"
    out = io.StringIO()
    driver = Driver(request, Console(file=out, width=200))
    assert driver.run() == 0
    with Store(url) as store:
        trials = optuna.load_study(study_name="loo", storage=store.optuna_storage()).get_trials()
        info = store.get_study("loo")
        assert info is not None and info.config["library"] == "exclude-self"
        assert library_line(store, "loo").startswith("library: exclude-self (leave-one-shape-out")
        document = study_document(store, "loo")
    seeded = [t.user_attrs for t in trials if "seed_library" in t.user_attrs]
    assert [a["seed_library_genome"] for a in seeded] == [neighbour.hash]
    assert seeded[0]["seed_library_problem"] == near.key
    assert not [t for t in trials if "warm_start_from" in t.user_attrs]
    assert "seed library: exclude-self, 1 entry of copy-fp16-256x512 left out" in out.getvalue()
    assert "library: exclude-self (leave-one-shape-out" in out.getvalue()  # the summary
    assert document["library"] == "exclude-self"


# -- bad input -------------------------------------------------------------------------------

def test_exclude_self_without_a_library_is_refused_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    result = CliRunner().invoke(app, [
        "tune", "gemm", "--m", "8", "--n", "18432", "--k", "2048", "--built", "1",
        "--db", f"sqlite:///{db}", "--no-library", "--library-exclude-self"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--library-exclude-self" in lines[0] and "--no-library" in lines[0]
    assert not db.exists()  # refused before anything was made
    with pytest.raises(UserInputError, match="--no-library names no library"):
        TuneRequest(space="gemm", problem=HELD.problems[0].problem, library=False,
                    library_exclude_self=True).validate()


@pytest.mark.parametrize(("problem", "named"), [
    ("gemm:bf17:8x18432x2048", "unknown dtype 'bf17'"),
    ("gem:bf16:8x18432x2048", "unknown op 'gem'"),
    ("gemm:bf16:8x18432", "gemm needs 3 sizes"),
    ("gemm:bf16:8x18432x0", "k=0 must be positive"),
    ("gemm:bf16:8x18433x2048", "n=18433 is not a multiple of 8"),
    ({"op": "gemm", "dtype": "bf16", "m": 8, "n": 16}, "missing ['k']"),
])
def test_a_heldout_file_naming_no_problem_is_refused_in_one_line(
        tmp_path: Path, problem: Any, named: str) -> None:
    doc = json.loads(HELDOUT.read_text())
    doc["problems"][1]["problem"] = problem
    bad = tmp_path / "heldout.json"
    bad.write_text(json.dumps(doc))
    before = bad.read_bytes()
    result = CliRunner().invoke(app, ["heldout", "list", "--file", str(bad)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and named in lines[0] and "decode-mid" in lines[0], lines
    assert bad.read_bytes() == before


def test_a_heldout_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    doc = json.loads(HELDOUT.read_text())
    doc["problems"].append(dict(doc["problems"][0], name="again"))
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(doc))
    with pytest.raises(UserInputError, match="given twice"):
        load_heldout(twice)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "tsopt-seed-library", "entries": []}))
    with pytest.raises(UserInputError, match="not a tsopt-heldout file"):
        load_heldout(other)
    with pytest.raises(UserInputError, match="cannot be read"):
        load_heldout(tmp_path / "absent.json")


def test_library_update_leaves_heldout_measurements_out(tmp_path: Path) -> None:
    from tsopt.core.records import Measurement

    space = get_space("gemm")
    genome = space.seed_genome(HELD.problems[0].problem)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    suite = Problem.of("gemm", "bf16", m=1024, n=1024, k=1024)
    with Store(url) as store:
        for name, problem in (("held", HELD.problems[0].problem), ("suite", suite)):
            store.create_or_get_study(name, "gemm", problem, "sm_90a", "evolve", {})
            cid = store.add_candidate(name, genome, "suggest")
            store.record_measurement(cid, Measurement(
                genome.hash, problem.key, "ok", median_us=10.0, ratio=1.1, ratio_lo=1.09,
                ratio_hi=1.11, rounds=8, baseline_name="SYNTHETIC", device=SYNTHETIC_DEVICE),
                "synthetic")
            store.set_study_status(name, "finished")
    library = tmp_path / "library.json"
    result = CliRunner().invoke(app, ["library", "update", "--db", url, "--library",
                                      str(library)])
    assert result.exit_code == 0, result.output
    assert f"1 measured genomes of {HELD.problems[0].problem.key} left out" in result.output
    assert [e.problem for e in load_library(library)] == [suite]
