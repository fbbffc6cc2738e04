"""The trust boundary (issue 29, item 4), tried as an attacker and a careless user would: each
case runs the real command line (or the real Python API) and must answer with the exit code of
its kind, ONE line on stderr naming the bad value, and nothing changed: the database's rows
and bytes, the files around it.

- A bundle tampered with by someone who also writes its checksums again (a library swapped for
  another candidate's, an edited genome.json or artifact.json) is refused: ingest checks every
  artifact file against the checksums the database recorded when it built the candidate.
- Results that are incomplete (no rate, no ratio) or impossible (a median of 1e300 µs, faster
  than the roofline, a rate or ratio the times do not give) are refused, the value named.
- Files or folders a bundle's manifest does not list, and a study renamed in the manifest
  (which would create a new study), are refused.
- JSON with a key given twice or nested 100,000 deep is bad input everywhere it is read.
- ``report --out`` writes only a new file or over an earlier report; a database of another
  program is refused (exit 4) and left byte for byte as it was, journal mode included.
- The API names a wrong type; ``--knob`` given twice, ``--workers`` beyond the bound, a
  ``--ray-address`` where nothing answers and ``library show`` of nothing are bad input;
  ``verify`` refuses a problem no GPU holds, as ``tune`` does; a fixed ``--knob`` holds for
  the study's seed too.

The bundles' libraries are placeholders (nothing loads them: every case is refused before) and
the results are written by hand (tests/built_here.py: "simulated device").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

import tsopt
from tests.built_here import SIMULATED, failed, record_built, timed
from tsopt.cli import app
from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.bundle import (
    MANIFEST_NAME,
    RESULTS_NAME,
    Baseline,
    BundleEntry,
    BundleResults,
    expected_rate,
    file_sha256,
    with_checksum,
    write_bundle,
    write_results,
)
from tsopt.core.errors import EXIT_BAD_INPUT, EXIT_DATABASE, UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.db.store import Store

PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)
STUDY = "copy-boundary"


# -- running and comparing -------------------------------------------------------------------
def cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the real command line, in this process."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def refused(code: int, says: str, *args: str) -> str:
    """Run ``args``; assert the exit code and one stderr line holding ``says``; the line."""
    got, out, err = cli(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code, (got, out, err)
    assert "Traceback" not in out + err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]
    return lines[0]


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of a SQLite file."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return {t: sorted(tuple(map(repr, r)) for r in conn.execute(
                text(f'SELECT * FROM "{t}"'))) for t in inspect(conn).get_table_names()}
    finally:
        engine.dispose()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the world: a bundle and the database that built it --------------------------------------
def genomes() -> list[Genome]:
    space = get_space("copy")
    return [space.genome(stages=s, box_rows=8, box_cols=128, chunk=1, vector=8) for s in (2, 3)]


def artifact(root: Path, genome: Genome) -> Path:
    """A built artifact whose library bytes are its own (so that one can be swapped for
    another's)."""
    directory = root / "built" / genome.hash
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "libkernel.so").write_bytes(f"placeholder library of {genome.hash}".encode())
    (directory / "genome.json").write_text(genome.to_json())
    tensors = (TensorDesc("src", "input", (256, 512), "fp16"),
               TensorDesc("dst", "output", (256, 512), "fp16"))
    ArtifactManifest(genome.hash, "copy", PROBLEM.to_dict(), "sm_90a", tensors).write(directory)
    return directory


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("boundary")
    gs = genomes()
    built = [(g, artifact(root, g)) for g in gs]
    manifest = write_bundle(root / "good", study=STUDY, space="copy", problem=PROBLEM,
                            arch="sm_90a", candidates=[BundleEntry(g, d) for g, d in built])
    write_results(root / "good", BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device=SIMULATED,
        baselines=[Baseline(PROBLEM.key, "torch.copy_", SIMULATED, 21.0, 20.0, 22.0, 50,
                            expected_rate(PROBLEM, 21.0)[0], "GB/s")],
        measurements=[timed(gs[0], PROBLEM, 25.0), failed(gs[1], PROBLEM)],
        measured_files={c.genome_hash: dict(c.files) for c in manifest.candidates}))
    with Store(f"sqlite:///{root / 'built.db'}") as store:
        record_built(store, STUDY, PROBLEM, built)
    return root


def case(world: Path, name: str) -> tuple[Path, Path]:
    """A fresh copy of the good bundle and of its database, for one case to change."""
    bundle = world / "cases" / name / "bundle"
    shutil.copytree(world / "good", bundle)
    db = bundle.parent / "tsopt.db"
    shutil.copy(world / "built.db", db)
    return bundle, db


def rewrite(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a bundle's JSON document as an attacker who knows the format: its own checksum
    written again."""
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(with_checksum(doc)))


def relist(bundle: Path, genome_hash: str, name: str) -> None:
    """After a file of an artifact was replaced: its new sha256 written into the manifest and
    into the results' measured files, both checksums again (nothing of tsopt's format left
    to catch it)."""
    new = file_sha256(bundle / "artifacts" / genome_hash / name)

    def manifest(doc: dict[str, Any]) -> None:
        for c in doc["candidates"]:
            if c["genome_hash"] == genome_hash:
                c["files"][name] = new

    def results(doc: dict[str, Any]) -> None:
        doc["measured_files"][genome_hash][name] = new

    rewrite(bundle / MANIFEST_NAME, manifest)
    rewrite(bundle / RESULTS_NAME, results)


def ingest_refused(bundle: Path, db: Path, says: str) -> str:
    """Ingest must refuse with ``says`` and leave the database as it was, byte for byte."""
    before_rows, before_bytes = rows(db), digest(db)
    line = refused(EXIT_BAD_INPUT, says, "ingest", str(bundle), "--db", f"sqlite:///{db}")
    assert rows(db) == before_rows
    assert digest(db) == before_bytes
    return line


def test_the_good_bundle_ingests_into_the_database_that_built_it(world: Path) -> None:
    """The control: what every case below changes one thing of."""
    bundle, db = case(world, "control")
    code, out, err = cli("ingest", str(bundle), "--db", f"sqlite:///{db}")
    assert code == 0, err
    assert "recorded 2 new measurements" in " ".join(out.split())


# -- artifacts checked against the database, not the bundle's own manifest --------------------
def test_a_library_swapped_for_another_candidates_is_refused(world: Path) -> None:
    bundle, db = case(world, "swapped-library")
    first, second = (g.hash for g in genomes())
    shutil.copy(bundle / "artifacts" / second / "libkernel.so",
                bundle / "artifacts" / first / "libkernel.so")
    relist(bundle, first, "libkernel.so")
    ingest_refused(bundle, db, f"artifacts/{first}/libkernel.so is not the file this database "
                               f"recorded when it built candidate {first[:12]}...")


@pytest.mark.parametrize("name", ["genome.json", "artifact.json"])
def test_an_edited_artifact_file_with_fresh_checksums_is_refused(world: Path, name: str) -> None:
    bundle, db = case(world, f"edited-{name}")
    first = genomes()[0].hash
    path = bundle / "artifacts" / first / name
    doc = json.loads(path.read_text())
    if name == "genome.json":
        doc["numeric"]["stages"] = 4  # the schedule the GPU machine would have built instead
    else:
        doc["launch"] = {"grid": [1, 1, 1]}
    path.write_text(json.dumps(doc))
    relist(bundle, first, name)
    ingest_refused(bundle, db, f"artifacts/{first}/{name} is not the file this database recorded")


def test_a_build_recorded_before_checksums_is_checked_against_the_build_cache(
    world: Path,
) -> None:
    """A build row of revision 0005 (no checksums): the artifact in the build cache stands in
    while it is there; without it the bundle is refused, nothing recorded."""
    bundle, db = case(world, "predates")
    cache = bundle.parent / "cache"
    first = genomes()[0].hash
    shutil.copytree(world / "built", cache)
    with sqlite3.connect(db) as conn:
        for g in genomes():
            conn.execute("UPDATE tsopt_build SET files_json = NULL, artifact_dir = ? "
                         "WHERE genome_hash = ?", (str(cache / g.hash), g.hash))
    conn.close()
    moved = cache.with_name("cache-gone")
    cache.rename(moved)
    ingest_refused(bundle, db, f"candidate {first[:12]}... was built before this database "
                               "recorded artifact checksums")
    moved.rename(cache)
    (cache / first / "libkernel.so").write_bytes(b"another library")  # the cache says no
    ingest_refused(bundle, db, "libkernel.so is not the file this database recorded")
    shutil.copy(world / "built" / first / "libkernel.so", cache / first / "libkernel.so")
    code, _, err = cli("ingest", str(bundle), "--db", f"sqlite:///{db}")
    assert code == 0, err


# -- measurements that could not have been taken ----------------------------------------------
def _measured(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: change(doc["measurements"][0])


def _fast(m: dict[str, Any]) -> None:
    """Faster than any Hopper part, every figure consistent with the forged time."""
    m.update(median_us=0.05, p10_us=0.04, p90_us=0.06, rate=expected_rate(PROBLEM, 0.05)[0],
             ratio=21.0 / 0.05)


@pytest.mark.parametrize("name, change, says", [
    ("no-rate", _measured(lambda m: m.pop("rate")), "status 'ok' without rate"),
    ("rate-null", _measured(lambda m: m.update(rate=None)), "status 'ok' without rate"),
    ("no-ratio", _measured(lambda m: m.pop("ratio")), "status 'ok' without ratio"),
    ("median-1e300", _measured(lambda m: m.update(median_us=1e300, p90_us=1e300)),
     "median_us 1e+300 µs is more than 60000000 µs"),
    ("beyond-roofline", _measured(_fast),
     "median_us 0.05 µs is faster than any sm_90a GPU can run copy-fp16-256x512"),
    ("rate-forged", _measured(lambda m: m.update(rate=m["rate"] * 10)),
     "is not what a median of 25.0 µs gives"),
    ("ratio-forged", _measured(lambda m: m.update(ratio=m["ratio"] * 3)),
     "disagrees with the times"),
    ("baseline-beyond-roofline", lambda d: d["baselines"][0].update(
        median_us=0.05, p10_us=0.05, p90_us=0.05, rate=None),
     "baselines[0] (torch.copy_): median_us 0.05 µs is faster than any sm_90a GPU"),
])
def test_an_impossible_or_incomplete_measurement_is_refused_naming_it(
    world: Path, name: str, change: Callable[[dict[str, Any]], None], says: str,
) -> None:
    bundle, db = case(world, name)
    rewrite(bundle / RESULTS_NAME, change)
    ingest_refused(bundle, db, says)


# -- the bundle's contents and its study -------------------------------------------------------
@pytest.mark.parametrize("name, plant, says", [
    ("file-at-top", lambda b: (b / "payload.so").write_bytes(b"\x7fELF"), "payload.so is not listed"),
    ("folder-at-top", lambda b: (b / "extra").mkdir(), "extra is not listed"),
    ("file-in-artifact", lambda b: (b / "artifacts" / genomes()[0].hash / "libevil.so")
     .write_bytes(b"\x7fELF"), "libevil.so is not listed"),
    ("folder-in-artifact", lambda b: (b / "artifacts" / genomes()[0].hash / "more").mkdir(),
     "more is not listed"),
    ("unknown-artifact", lambda b: (b / "artifacts" / ("ab" * 32)).mkdir(),
     "no candidate of that genome hash"),
])
def test_what_the_manifest_does_not_list_is_refused(
    world: Path, name: str, plant: Callable[[Path], Any], says: str,
) -> None:
    bundle, db = case(world, name)
    plant(bundle)
    ingest_refused(bundle, db, says)


def test_a_study_renamed_in_the_manifest_is_refused_not_created(world: Path) -> None:
    bundle, db = case(world, "renamed-study")
    rewrite(bundle / MANIFEST_NAME, lambda d: d.update(study="copy-boundary-renamed"))
    ingest_refused(bundle, db, "study 'copy-boundary-renamed' is not in this database "
                               f"(its studies: {STUDY})")
    with Store(f"sqlite:///{db}") as store:
        assert [s.name for s in store.list_studies()] == [STUDY]


def test_a_bundle_into_a_database_that_does_not_exist_creates_nothing(world: Path) -> None:
    bundle, db = case(world, "no-database")
    missing = db.with_name("nowhere.db")
    refused(EXIT_BAD_INPUT, "no database at", "ingest", str(bundle), "--db", f"sqlite:///{missing}")
    assert not missing.exists()


# -- JSON: one strict reader ------------------------------------------------------------------
def _duplicated(key: str, doc: dict[str, Any], value: Any) -> str:
    """``doc`` as JSON with ``key`` given a second time (``value``), after the first."""
    text_ = json.dumps(doc)
    return text_[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"


def test_a_key_given_twice_is_refused_everywhere(world: Path, tmp_path: Path) -> None:
    genome = genomes()[0].to_dict()
    inner = json.dumps(genome["numeric"])
    twice = json.dumps(genome).replace(inner, inner[:-1] + ', "stages": 9}')
    (tmp_path / "twice.json").write_text(twice)
    refused(EXIT_BAD_INPUT, "key 'stages' is given twice", "verify", str(tmp_path / "twice.json"))

    bundle, db = case(world, "manifest-key-twice")
    doc = json.loads((bundle / MANIFEST_NAME).read_text())
    (bundle / MANIFEST_NAME).write_text(_duplicated("study", doc, "another-study"))
    ingest_refused(bundle, db, "key 'study' is given twice")

    library = tmp_path / "library.json"
    library.write_text('{"format": "tsopt-seed-library", "format": "x", "entries": []}')
    refused(EXIT_BAD_INPUT, "key 'format' is given twice", "library", "show", "--library",
            str(library))


def test_json_nested_100000_deep_is_one_line_not_a_recursion_error(
    world: Path, tmp_path: Path,
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.json").write_text(deep)
    refused(EXIT_BAD_INPUT, "nest more than 64 deep", "verify", str(tmp_path / "deep.json"))
    (tmp_path / "deep-object.json").write_text('{"a":' * 500 + "1" + "}" * 500)
    refused(EXIT_BAD_INPUT, "nest more than 64 deep", "verify", str(tmp_path / "deep-object.json"))
    bundle, db = case(world, "manifest-deep")
    (bundle / MANIFEST_NAME).write_text(deep)
    ingest_refused(bundle, db, "manifest.json is corrupted: arrays and objects nest more than")
    bundle, db = case(world, "results-deep")
    (bundle / RESULTS_NAME).write_text(deep)
    ingest_refused(bundle, db, "results.json is corrupted: arrays and objects nest more than")


def test_verify_refuses_a_problem_no_gpu_holds_as_tune_does(tmp_path: Path) -> None:
    (tmp_path / "g.json").write_text(genomes()[0].to_json())
    huge = "copy:fp16:1000000000x1000000000"
    said = refused(EXIT_BAD_INPUT, "it cannot fit", "verify", str(tmp_path / "g.json"),
                   "--problem", huge)
    db = tmp_path / "t.db"
    tuned = refused(EXIT_BAD_INPUT, "it cannot fit", "tune", "copy", "--rows", "1000000000",
                    "--cols", "1000000000", "--db", f"sqlite:///{db}")
    assert said == tuned and not db.exists()


# -- report --out and databases of other programs --------------------------------------------
@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with one study (synthetic rows: the report reads, nothing is measured)."""
    from tests.synthetic_study import make_study

    root = tmp_path_factory.mktemp("report")
    with Store(f"sqlite:///{root / 'r.db'}") as store:
        make_study(store, "syn", 5)
    return root


def test_report_out_writes_only_a_new_file_or_over_an_earlier_report(
    reported: Path, tmp_path: Path,
) -> None:
    db = f"sqlite:///{reported / 'r.db'}"
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a report\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # a device-like node: writing it would block or reach whoever reads it
    link = tmp_path / "link.html"
    link.symlink_to(notes)
    for out, says in ((notes, "already exists and is not a tsopt report"),
                      (fifo, "is not a plain file"), (link, "is a symbolic link"),
                      (Path("/dev/null"), "is not a plain file")):
        refused(EXIT_BAD_INPUT, f"--out {str(out)!r}", "report", "syn", "--out", str(out),
                "--db", db)
        refused(EXIT_BAD_INPUT, says, "report", "syn", "--out", str(out), "--db", db)
    assert notes.read_text() == "my notes, not a report\n" and link.is_symlink()
    assert Path("/dev/null").is_char_device()
    fresh = tmp_path / "new.html"
    assert cli("report", "syn", "--out", str(fresh), "--db", db)[0] == 0
    first = fresh.read_text()
    assert cli("report", "syn", "--out", str(fresh), "--db", db)[0] == 0  # an earlier report
    assert fresh.read_text().startswith("<!DOCTYPE html>") and first


def foreign_database(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('mine')")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("command", [
    ("report",), ("report", "syn"), ("export", "syn", "--out", "{d}/exported"),
    ("tune", "copy", "--rows", "64", "--cols", "64", "--trials", "1"),
    ("ingest", "{bundle}"), ("db", "check"),
])
def test_a_database_of_another_program_is_refused_and_left_as_it_was(
    world: Path, tmp_path: Path, command: tuple[str, ...],
) -> None:
    path = foreign_database(tmp_path / "theirs.db")
    before = digest(path)
    args = [a.replace("{d}", str(tmp_path)).replace("{bundle}", str(world / "good"))
            for a in command]
    code, out, err = cli(*args, "--db", f"sqlite:///{path}")
    assert code == EXIT_DATABASE, (code, out, err)
    said = err if command != ("db", "check") else out
    assert "belongs to another program" in " ".join(said.split())
    if command != ("db", "check"):
        assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("theirs")) == [
        "theirs.db"]  # no -wal, no -shm, no lock file
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


# -- the Python API names a wrong type ---------------------------------------------------------
@pytest.mark.parametrize("call, says", [
    (lambda db: tsopt.tune("copy", problem=42, db=db), "problem=42 (of type int)"),
    (lambda db: tsopt.tune("copy", "copy:fp16:64x64", built="2", db=db),
     "built='2' (of type str) must be an int"),
    (lambda db: tsopt.tune("copy", "copy:fp16:64x64", built=True, db=db), "built=True"),
    (lambda db: tsopt.tune("copy", "gemm:bf16:128x128x64", built=1, db=db),
     "space 'copy' tunes copy, not gemm"),
    (lambda db: tsopt.tune(7, "copy:fp16:64x64", db=db), "space=7"),
    (lambda db: tsopt.tune("copy", "copy:fp16:64x64", knobs="stages=2", db=db),
     "knobs='stages=2'"),
    (lambda db: tsopt.tune("copy", "copy:fp16:64x64", workers="4", db=db), "workers='4'"),
    (lambda db: tsopt.tune("copy", {"op": "copy", "dtype": "fp16"}, db=db), "rows"),
    (lambda db: tsopt.export(None, "out", db=db), "study=None"),
    (lambda db: tsopt.export("syn", None, db=db), "out=None"),
    (lambda db: tsopt.export("syn", "out", rank="1", db=db), "rank='1'"),
    (lambda db: tsopt.report(123, db=db), "study=123"),
    (lambda db: tsopt.report("syn", out=5, db=db), "out=5"),
    (lambda db: tsopt.report("syn", db=5), "db=5"),
])
def test_the_api_refuses_a_wrong_type_with_user_input_error(
    tmp_path: Path, call: Callable[[str], Any], says: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "api.db"
    with pytest.raises(UserInputError) as caught:
        call(f"sqlite:///{db}")
    assert says in str(caught.value) and len(str(caught.value).splitlines()) == 1
    assert not db.exists() and not list(tmp_path.iterdir())


# -- tune's options ------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again once the socket is


@pytest.mark.parametrize("extra, says", [
    (("--knob", "stages=2", "--knob", "stages=4"),
     "--knob 'stages=4': knob 'stages' is already restricted by --knob 'stages=2'"),
    (("--workers", "100000"), "--workers 100000 is more than"),
    (("--ray-address", "no-port-here", "--workers", "2"), "--ray-address 'no-port-here' is not"),
])
def test_tune_options_that_cannot_hold_are_refused_before_anything_is_written(
    tmp_path: Path, extra: tuple[str, ...], says: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "t.db"
    refused(EXIT_BAD_INPUT, says, "tune", "copy", "--rows", "64", "--cols", "64", "--trials",
            "1", "--db", f"sqlite:///{db}", *extra)
    assert not list(tmp_path.iterdir())


def test_a_ray_address_where_nothing_answers_fails_within_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    address = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    refused(EXIT_BAD_INPUT, f"--ray-address {address!r}: nothing answers", "tune", "copy",
            "--rows", "64", "--cols", "64", "--trials", "1", "--workers", "2", "--ray-address",
            address, "--db", f"sqlite:///{tmp_path / 't.db'}")
    assert time.monotonic() - started < 15
    assert not list(tmp_path.iterdir())


def test_library_show_of_an_unknown_space_or_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    refused(EXIT_BAD_INPUT, "unknown search space 'warp-drive'", "library", "show", "--space",
            "warp-drive")
    missing = tmp_path / "none.json"
    refused(EXIT_BAD_INPUT, f"--library {str(missing)!r}: no library file there", "library",
            "show", "--library", str(missing))
    assert not missing.exists()
    assert cli("library", "show", "--space", "copy")[0] == 0


@pytest.mark.parametrize("space_name, spec, fixed", [
    ("copy", "copy:fp16:4096x4096", "stages=2"),
    ("gemm", "gemm:bf16:8192x8192x8192", "stages=2"),
    ("gemm", "gemm:bf16:8192x8192x8192", "stages=4"),
])
def test_a_fixed_knob_holds_for_the_seed(space_name: str, spec: str, fixed: str) -> None:
    """The study's first candidate (the space's seed) obeys ``--knob`` like every other: the
    fixed knob takes its value, the others are repaired around it into the legal set."""
    from tsopt.core.problem import parse_problem_spec
    from tsopt.search.proposals import Proposer
    from tsopt.search.samplers import KnobView, parse_restrictions

    space = get_space(space_name)
    problem = parse_problem_spec(spec)
    view = KnobView.of(space, problem, "evolve", parse_restrictions([fixed], space.knobs(problem)))
    proposer = Proposer(space, problem, view)
    seed = space.seed_genome(problem)
    within = proposer.within_restrictions(seed)
    name, value = fixed.split("=")
    assert within[name] == int(value)
    assert proposer.legal(space.params_of(within))
    if seed[name] == int(value):
        assert within == seed  # a seed that obeys already is left as it is


@pytest.mark.slow
def test_tune_builds_the_seed_with_the_fixed_knob(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The real driver, one build: the seed candidate recorded has the --knob's value, and the
    bundle it wrote is one its database recorded."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 't.db'}"
    code, _, err = cli("tune", "copy", "--rows", "256", "--cols", "512", "--built", "1",
                       "--knob", "stages=2", "--db", db)
    assert code == 0, err
    from tsopt.app.ingest import check_provenance
    from tsopt.core.bundle import read_manifest

    manifest = read_manifest(tmp_path / ".tsopt" / "bundles" / "copy-fp16-256x512-sm_90a")
    with Store(db) as store:
        seeds = [c for c in store.candidates("copy-fp16-256x512-sm_90a") if c.origin == "seed"]
        # The real driver recorded each build's checksums: its own bundle passes the check.
        assert set(check_provenance(store, manifest)) == {c.genome_hash for c in
                                                          manifest.candidates}
    assert len(seeds) == 1 and seeds[0].genome["stages"] == 2


def test_a_measurement_an_older_tsopt_ingested_without_rate_or_ratio_still_exports(
    tmp_path: Path,
) -> None:
    """Nothing recorded is lost: a correct timing without rate and ratio (which ingest now
    refuses, and an older tsopt let in) still ranks, and its export's header shows the figures
    missing instead of crashing with a TypeError."""
    from tsopt.app.export import _header_text

    db = f"sqlite:///{tmp_path / 'old.db'}"
    g = genomes()[0]
    with Store(db) as store:
        ids = record_built(store, STUDY, PROBLEM, [(g, artifact(tmp_path, g))])
        store.record_measurement(ids[g.hash], timed(g, PROBLEM, 25.0, rate=None, ratio=None),
                                 "older-tsopt")
        ranked = store.ranked(STUDY)
        info = store.get_study(STUDY)
    assert info is not None and [r.genome_hash for r in ranked] == [g.hash]
    header = _header_text(info, ranked[0], 1)
    assert "(not recorded) GB/s, (not recorded)x torch.copy_" in header


@pytest.mark.parametrize("alter, says", [
    ("ALTER TABLE tsopt_candidate DROP COLUMN origin", "has no column 'origin'"),
    ("UPDATE tsopt_alembic_version SET version_num = '9999'", "newer tsopt"),
])
def test_a_tsopt_database_refused_is_not_switched_to_wal_first(
    tmp_path: Path, alter: str, says: str,
) -> None:
    """WAL is a lasting property of the file: it is switched on only once the database passed
    its checks, so a refused one keeps its journal mode and its bytes."""
    path = tmp_path / "tsopt.db"
    with Store(f"sqlite:///{path}") as store:
        record_built(store, STUDY, PROBLEM, [])
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(alter)
    conn.commit()
    conn.close()
    before = digest(path)
    refused(EXIT_DATABASE, says, "report", "--db", f"sqlite:///{path}")
    assert digest(path) == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()
