"""Bad input, tried as a new user would and as a hostile one would: every case runs the real
``tsopt`` command line in a subprocess and must answer with one line on stderr naming what is
wrong, the exit code of its kind (2 bad input, 4 a database that cannot be used; see
``tsopt.core.errors.EXIT_CODES``) and no traceback.

The world the cases run in is made once per module (``world``): genome files with genes of the
wrong kind or out of range, databases that are corrupted, read-only, of a newer schema or with
a column dropped, and bundles whose files, checksums, results or genomes were tampered with.
The bundles' libraries are placeholders (nothing here loads them: every case is refused
before); their genomes are real copy schedules, verified for real at ingest. The cases run a
few at a time (``outcomes``), then each is asserted on its own.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.built_here import record_built, timed
from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.bundle import (
    MANIFEST_NAME,
    RESULTS_NAME,
    Baseline,
    BundleEntry,
    BundleResults,
    read_manifest,
    with_checksum,
    write_bundle,
    write_results,
)
from tsopt.core.errors import EXIT_BAD_INPUT, EXIT_DATABASE
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, default_problem
from tsopt.core.records import Measurement

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)
STUDY = "copy-bad-input"
DEVICE = "simulated device"  # the results here are written by hand, never measured
PARALLEL = 3


@dataclass(frozen=True)
class Case:
    """One bad input: the command (``{w}`` is the world's directory), the exit code it must
    give, and words its one line must hold. ``report``: the command reports on stdout (``tsopt
    db check``) and stderr stays empty."""

    name: str
    args: tuple[str, ...]
    code: int
    says: str
    report: bool = False


def tune(*extra: str, db: str = "sqlite:///{w}/scratch.db") -> tuple[str, ...]:
    return ("tune", "copy", "--rows", "64", "--cols", "64", "--trials", "2", "--db", db, *extra)


def ingest(bundle: str, db: str = "") -> tuple[str, ...]:
    return ("ingest", f"{{w}}/bundles/{bundle}", "--db",
            db or f"sqlite:///{{w}}/ingest-{bundle}.db")


BAD, DB = EXIT_BAD_INPUT, EXIT_DATABASE

CASES: tuple[Case, ...] = (
    # -- tsopt verify: genes of the wrong kind or out of range, named -------------------------
    Case("gene-stages-text", ("verify", "{w}/genes/stages_four.json"), BAD, "gene 'stages'"),
    Case("gene-chunk-0", ("verify", "{w}/genes/chunk_0.json"), BAD, "gene 'chunk' is 0"),
    Case("gene-box_cols-0", ("verify", "{w}/genes/box_cols_0.json"), BAD, "gene 'box_cols' is 0"),
    Case("gene-vector-0", ("verify", "{w}/genes/vector_0.json"), BAD, "gene 'vector' is 0"),
    Case("gene-cluster-2by1", ("verify", "{w}/genes/cluster_2by1.json"), BAD,
         "gene 'cluster' is '2by1'"),
    Case("gene-tile_k-0", ("verify", "{w}/genes/tile_k_0.json"), BAD, "gene 'tile_k' is 0"),
    Case("gene-stages-huge", ("verify", "{w}/genes/stages_huge.json"), BAD, "gene 'stages'"),
    Case("gene-stages-negative", ("verify", "{w}/genes/stages_negative.json"), BAD,
         "gene 'stages' is -3"),
    Case("gene-stages-bool", ("verify", "{w}/genes/stages_bool.json"), BAD,
         "gene 'stages' is True"),
    Case("gene-raster-int", ("verify", "{w}/genes/raster_int.json"), BAD, "gene 'raster'"),
    Case("gene-persistent-text", ("verify", "{w}/genes/persistent_yes.json"), BAD,
         "gene 'persistent'"),
    Case("gene-missing", ("verify", "{w}/genes/no_stages.json"), BAD, "no gene 'stages'"),
    Case("gene-tile_m-huge", ("verify", "{w}/genes/tile_m_huge.json"), BAD, "gene 'tile_m'"),
    Case("gene-list", ("verify", "{w}/genes/vector_list.json"), BAD, "gene 'vector'"),
    # -- tsopt verify: files that are no genome ----------------------------------------------
    Case("genome-missing-file", ("verify", "{w}/genes/none.json"), BAD, "cannot read genome file"),
    Case("genome-directory", ("verify", "{w}/genes"), BAD, "cannot read genome file"),
    Case("genome-not-json", ("verify", "{w}/genes/not_json.json"), BAD, "not valid JSON"),
    Case("genome-a-list", ("verify", "{w}/genes/a_list.json"), BAD, "must be a JSON object"),
    Case("genome-binary", ("verify", "{w}/genes/binary.json"), BAD, "is not text"),
    Case("genome-unknown-space", ("verify", "{w}/genes/warp_drive.json"), BAD,
         "unknown search space 'warp-drive'"),
    Case("genome-float-gene", ("verify", "{w}/genes/float_gene.json"), BAD, "unsupported value"),
    Case("genome-unknown-field", ("verify", "{w}/genes/extra_field.json"), BAD,
         "unknown genome field"),
    Case("genome-hash-mismatch", ("verify", "{w}/genes/wrong_hash.json"), BAD,
         "genome hash mismatch"),
    Case("genome-2-million-ops", ("verify", "{w}/genes/huge.json"), BAD, "bytes of JSON"),
    Case("genome-5000-ops", ("verify", "{w}/genes/many_ops.json"), BAD, "places 5,000 ops"),
    Case("genome-bad-problem", ("verify", "{w}/genes/good.json", "--problem", "copy:fp16:4096"),
         BAD, "needs 2 sizes"),
    Case("genome-other-op", ("verify", "{w}/genes/good.json", "--problem",
                             "gemm:bf16:128x128x64"), BAD, "is a gemm problem"),
    Case("genome-domain-0", ("verify", "{w}/genes/good.json", "--domain", "0"), BAD,
         "--domain 0"),
    Case("genome-domain-huge", ("verify", "{w}/genes/good.json", "--domain", "100000000"), BAD,
         "at most 4096 iterations"),
    Case("genome-dev-zero", ("verify", "/dev/zero"), BAD, "bytes of JSON"),
    # -- tsopt tune: options ------------------------------------------------------------------
    Case("time-infm", tune("--time", "infm"), BAD, "--time 'infm' must be a finite"),
    Case("time-nan", tune("--time", "nan"), BAD, "--time 'nan' must be a finite"),
    Case("time-negative", tune("--time", "-5s"), BAD, "--time '-5s'"),
    Case("time-zero", tune("--time", "0"), BAD, "--time '0'"),
    Case("cost-prior-unknown", tune("--cost-prior", "oracle"), BAD,
         "--cost-prior 'oracle' is not one of transfer, analytical"),
    Case("time-words", tune("--time", "soon"), BAD, "--time 'soon'"),
    Case("study-up-and-out", tune("--study", "../../x"), BAD, "not a plain name"),
    Case("study-absolute", tune("--study", "/tmp/tsopt-escape"), BAD, "not a plain name"),
    Case("study-nested", tune("--study", "a/b"), BAD, "not a plain name"),
    Case("study-hidden", tune("--study", ".hidden"), BAD, "not a plain name"),
    Case("problem-too-big", ("tune", "copy", "--rows", "1000000000", "--cols", "1000000000",
                             "--db", "sqlite:///{w}/scratch.db"), BAD,
         "needs 4,000,000,000,000,000,000 bytes"),
    Case("trials-0", tune("--trials", "0"), BAD, "--trials 0"),
    Case("rows-0", ("tune", "copy", "--rows", "0", "--cols", "64"), BAD, "rows=0"),
    Case("dtype-fp8", tune("--dtype", "fp8"), BAD, "unknown dtype 'fp8'"),
    Case("sampler-magic", tune("--sampler", "magic"), BAD, "--sampler 'magic'"),
    Case("knob-not-a-choice", tune("--knob", "stages=5"), BAD, "'5' is not a choice"),
    Case("workers-negative", tune("--workers", "-1"), BAD, "--workers -1"),
    Case("pool-threads", tune("--pool", "threads", "--workers", "2"), BAD, "--pool 'threads'"),
    Case("seed-negative", tune("--seed", "-1"), BAD, "--seed -1"),
    Case("arch-path", tune("--arch", "../../x"), BAD, "not a GPU architecture"),
    # -- databases that cannot be used --------------------------------------------------------
    Case("tune-read-only-db", tune(db="sqlite:///{w}/ro/tsopt.db"), DB, "is read-only"),
    Case("tune-corrupted-db", tune(db="sqlite:///{w}/corrupted.db"), DB, "is corrupted"),
    Case("tune-newer-optuna", tune(db="sqlite:///{w}/newer_optuna.db"), DB,
         "another Optuna version"),
    Case("tune-dropped-optuna-column", tune(db="sqlite:///{w}/dropped_optuna.db"), DB,
         "has no column 'value_type'"),
    Case("tune-dropped-tsopt-column", tune(db="sqlite:///{w}/dropped_tsopt.db"), DB,
         "has no column 'origin'"),
    Case("tune-newer-tsopt", tune(db="sqlite:///{w}/newer_tsopt.db"), DB, "newer tsopt"),
    Case("report-corrupted-db", ("report", "--db", "sqlite:///{w}/corrupted.db"), DB,
         "is corrupted"),
    Case("report-study-corrupted-db", ("report", "syn", "--out", "{w}/r.html", "--db",
                                       "sqlite:///{w}/corrupted.db"), DB, "is corrupted"),
    Case("report-dropped-column", ("report", "--db", "sqlite:///{w}/dropped_tsopt.db"), DB,
         "has no column 'origin'"),
    Case("report-not-a-database", ("report", "--db", "sqlite:///{w}/not_a_database.db"), DB,
         "is corrupted"),
    Case("report-no-database", ("report", "--db", "sqlite:///{w}/nowhere.db"), BAD,
         "no database at"),
    Case("report-no-study", ("report", "nosuch", "--db", "sqlite:///{w}/base.db"), BAD,
         "no study named 'nosuch'"),
    Case("export-corrupted-db", ("export", "syn", "--out", "{w}/exported", "--db",
                                 "sqlite:///{w}/corrupted.db"), DB, "is corrupted"),
    Case("export-dropped-column", ("export", "syn", "--out", "{w}/exported", "--db",
                                   "sqlite:///{w}/dropped_tsopt.db"), DB, "has no column"),
    Case("db-check-corrupted", ("db", "check", "--db", "sqlite:///{w}/corrupted.db"), DB,
         "malformed", report=True),
    Case("db-check-newer-optuna", ("db", "check", "--db", "sqlite:///{w}/newer_optuna.db"), DB,
         "does not know", report=True),
    Case("db-check-dropped-column", ("db", "check", "--db", "sqlite:///{w}/dropped_tsopt.db"),
         DB, "has no column 'origin'", report=True),
    Case("db-check-no-database", ("db", "check", "--db", "sqlite:///{w}/nowhere.db"), BAD,
         "no database at"),
    Case("db-check-in-memory", ("db", "check", "--db", "sqlite://"), BAD, "is in memory"),
    Case("db-check-unknown-driver", ("db", "check", "--db", "nosuchdb://x"), BAD,
         "cannot load its driver"),
    # -- tsopt ingest: results that cannot be trusted -----------------------------------------
    Case("median-negative", ingest("median_negative"), BAD, "median_us -5.0"),
    Case("median-zero", ingest("median_zero"), BAD, "median_us 0"),
    Case("median-nan", ingest("median_nan"), BAD, "median_us nan"),
    Case("median-null-ok", ingest("median_null"), BAD, "median_us None"),
    Case("median-infinite", ingest("median_inf"), BAD, "median_us inf"),
    Case("failed-with-times", ingest("failed_with_times"), BAD, "a failed candidate has no times"),
    Case("unknown-device", ingest("unknown_device"), BAD, "device 'my laptop'"),
    Case("p10-above-median", ingest("p10_above"), BAD, "does not hold"),
    Case("runs-zero", ingest("runs_zero"), BAD, "runs 0"),
    Case("results-edited", ingest("results_edited"), BAD, "changed after tsopt wrote it"),
    Case("results-foreign", ingest("results_foreign"), BAD, "mismatched results"),
    Case("results-missing", ingest("unmeasured"), BAD, "has not been measured"),
    Case("results-truncated", ingest("results_truncated"), BAD, "results.json is corrupted"),
    # -- tsopt ingest and measure: bundles tampered with --------------------------------------
    Case("library-edited", ingest("library_edited"), BAD, "libkernel.so was changed"),
    Case("genome-json-edited", ingest("genome_json_edited"), BAD, "genome.json was changed"),
    Case("artifact-json-edited", ingest("artifact_json_edited"), BAD,
         "artifact.json was changed"),
    Case("manifest-edited", ingest("manifest_edited"), BAD, "manifest.json was changed"),
    Case("manifest-version-1", ingest("manifest_v1"), BAD, "older tsopt"),
    Case("manifest-study-path", ingest("study_path"), BAD, "not a plain name"),
    Case("manifest-binary", ingest("manifest_binary"), BAD, "not text"),
    Case("manifest-endless", ingest("manifest_endless"), BAD, "symbolic link"),
    Case("library-link", ingest("library_link"), BAD, "symbolic link"),
    Case("results-a-directory", ingest("results_directory"), BAD, "not a plain file"),
    Case("bundle-a-file", ("ingest", "{w}/genes/good.json"), BAD, "not a bundle directory"),
    Case("planted-schema-invalid", ingest("planted_schema"), BAD, "does not pass verification"),
    Case("planted-ts-invalid", ingest("planted_ts"), BAD, "ts.missing_commit"),
    Case("ingest-corrupted-db", ingest("good", db="sqlite:///{w}/corrupted.db"), DB,
         "is corrupted"),
    Case("ingest-read-only-db", ingest("good", db="sqlite:///{w}/ro/tsopt.db"), DB,
         "is read-only"),
    Case("measure-library-edited", ("measure", "{w}/bundles/library_edited"), BAD,
         "libkernel.so was changed"),
    Case("measure-runs-5", ("measure", "{w}/bundles/good", "--runs", "5"), BAD, "--runs 5"),
    Case("measure-no-bundle", ("measure", "{w}/bundles/nowhere"), BAD, "does not exist"),
    Case("spaces-unknown", ("spaces", "nope"), BAD, "unknown search space 'nope'"),
)


# -- the world -----------------------------------------------------------------------------
def _genome_files(root: Path) -> None:
    from tsopt.core.registry import get_space

    genes = root / "genes"
    genes.mkdir()
    copy = get_space("copy").seed_genome(default_problem("copy")).to_dict()
    gemm = get_space("gemm").seed_genome(default_problem("gemm")).to_dict()

    def write(name: str, doc: Any) -> None:
        (genes / name).write_text(json.dumps(doc))

    def changed(doc: dict[str, Any], part: str, gene: str, value: Any) -> dict[str, Any]:
        out = json.loads(json.dumps(doc))
        if value is _DROP:
            del out[part][gene]
        else:
            out[part][gene] = value
        return out

    write("good.json", copy)
    for name, doc, part, gene, value in (
        ("stages_four", copy, "numeric", "stages", "four"),
        ("chunk_0", copy, "numeric", "chunk", 0),
        ("box_cols_0", copy, "numeric", "box_cols", 0),
        ("vector_0", copy, "numeric", "vector", 0),
        ("cluster_2by1", gemm, "structure", "cluster", "2by1"),
        ("tile_k_0", gemm, "numeric", "tile_k", 0),
        ("stages_huge", copy, "numeric", "stages", 10**9),
        ("stages_negative", copy, "numeric", "stages", -3),
        ("stages_bool", copy, "numeric", "stages", True),
        ("raster_int", copy, "structure", "raster", 7),
        ("persistent_yes", copy, "structure", "persistent", "yes"),
        ("no_stages", copy, "numeric", "stages", _DROP),
        ("tile_m_huge", gemm, "numeric", "tile_m", 1 << 20),
        ("vector_list", copy, "numeric", "vector", [1, 2]),
        ("float_gene", copy, "numeric", "stages", 1.5),
    ):
        write(f"{name}.json", changed(doc, part, gene, value))
    (genes / "not_json.json").write_text("{oops")
    write("a_list.json", [1, 2, 3])
    (genes / "binary.json").write_bytes(b"\xff\xfe\x00\x81" * 64)
    write("warp_drive.json", {**copy, "space": "warp-drive"})
    write("extra_field.json", {**copy, "evil": 1})
    write("wrong_hash.json", {**copy, "hash": "0" * 64})
    ops = [["coords", "loop"]] * 2_000_000  # 44 MB: the genome the tester fed the verifier
    write("huge.json", {**copy, "schedule": {"load": ops}})
    write("many_ops.json", {**copy, "schedule": {"load": [["coords", "loop"]] * 5000}})


_DROP = object()


def _databases(root: Path) -> None:
    from tests.synthetic_study import make_study
    from tsopt.db.store import Store

    base = root / "base.db"
    with Store(f"sqlite:///{base}") as store:
        make_study(store, "syn", 30)
        store.optuna_storage().engine.dispose()  # Optuna's tables too

    def variant(name: str, change: Callable[[sqlite3.Connection], None] | None = None) -> Path:
        path = root / name
        shutil.copy(base, path)
        if change is not None:
            with sqlite3.connect(path) as conn:
                change(conn)
            conn.close()
        return path

    corrupted = variant("corrupted.db")
    with open(corrupted, "r+b") as f:
        page_size = 4096
        f.seek(3 * page_size)  # the root page of tsopt_study: every command reads it
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    variant("newer_optuna.db",
            lambda c: c.execute("UPDATE alembic_version SET version_num = 'v99.0.0'"))
    variant("newer_tsopt.db",
            lambda c: c.execute("UPDATE tsopt_alembic_version SET version_num = '9999'"))
    variant("dropped_optuna.db",
            lambda c: c.execute("ALTER TABLE trial_values DROP COLUMN value_type"))
    variant("dropped_tsopt.db",
            lambda c: c.execute("ALTER TABLE tsopt_candidate DROP COLUMN origin"))
    (root / "not_a_database.db").write_text("these are my notes, not a database\n")
    read_only = root / "ro"
    read_only.mkdir()
    shutil.copy(base, read_only / "tsopt.db")


def _artifact(root: Path, genome: Genome) -> Path:
    directory = root / "built" / genome.hash
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "libkernel.so").write_bytes(b"placeholder library, never loaded here")
    (directory / "genome.json").write_text(genome.to_json())
    shape = (PROBLEM["rows"], PROBLEM["cols"])
    tensors = (TensorDesc("src", "input", shape, "fp16"), TensorDesc("dst", "output", shape, "fp16"))
    ArtifactManifest(genome.hash, "copy", PROBLEM.to_dict(), "sm_90a", tensors).write(directory)
    return directory


def _measurement(genome: Genome, **changes: Any) -> Measurement:
    figures: dict[str, Any] = {"median_us": 25.0, "p10_us": 24.0, "p90_us": 26.0, **changes}
    return timed(genome, PROBLEM, **figures)


def _built_databases(root: Path, genomes: list[Genome]) -> None:
    """Each bundle's database (``ingest-<bundle>.db``) as `tsopt tune` left it: the study and
    every candidate's build, its artifact checksums recorded (ingest checks against them)."""
    from tsopt.db.store import Store

    template = root / "built.db"
    with Store(f"sqlite:///{template}") as store:
        record_built(store, STUDY, PROBLEM, [(g, root / "built" / g.hash) for g in genomes])
    for bundle in sorted((root / "bundles").iterdir()):
        shutil.copy(template, root / f"ingest-{bundle.name}.db")
    with Store(f"sqlite:///{root / 'ro' / 'tsopt.db'}") as store:  # made read-only after
        record_built(store, STUDY, PROBLEM, [(g, root / "built" / g.hash) for g in genomes])


def _bundle(root: Path, name: str, genomes: list[Genome], measured: bool = True,
            **changes: Any) -> Path:
    """A bundle of ``genomes`` with results (the first candidate's result changed by
    ``changes``), written by tsopt's own writers."""
    path = root / "bundles" / name
    manifest = write_bundle(path, study=STUDY, space="copy", problem=PROBLEM, arch="sm_90a",
                            candidates=[BundleEntry(g, _artifact(root, g)) for g in genomes])
    if measured:
        results = BundleResults(
            bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device=DEVICE,
            baselines=[Baseline(PROBLEM.key, "torch.copy_", DEVICE, 21.0, 20.0, 22.0, 50)],
            measurements=[_measurement(genomes[0], **changes),
                          *(_measurement(g) for g in genomes[1:])],
            measured_files={c.genome_hash: dict(c.files) for c in manifest.candidates})
        write_results(path, results)
    return path


def _edit_json(path: Path, change: Callable[[Any], None], *, checksum: bool,
               allow_nan: bool = False) -> None:
    """Edit a bundle's JSON file; ``checksum``: as a hostile editor who knows the format
    would, writing a fresh checksum."""
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(with_checksum(doc) if checksum else doc, allow_nan=allow_nan))


def _bundles(root: Path) -> None:
    from tsopt.core.registry import get_space

    space = get_space("copy")
    genomes = [space.genome(stages=s, box_rows=8, box_cols=128, chunk=1, vector=8)
               for s in (2, 3)]
    _bundle(root, "good", genomes)
    for name, changes in (
        ("median_negative", {"median_us": -5.0, "p10_us": -6.0, "p90_us": -4.0}),
        ("median_zero", {"median_us": 0.0, "p10_us": 0.0}),
        ("median_null", {"median_us": None}),
        ("failed_with_times", {"status": "wrong", "error": "12 elements differ"}),
        ("unknown_device", {"device": "my laptop"}),
        ("p10_above", {"p10_us": 30.0}),
        ("runs_zero", {"runs": 0}),
    ):
        _bundle(root, name, genomes, **changes)
    for name, value in (("median_nan", math.nan), ("median_inf", math.inf)):
        path = _bundle(root, name, genomes)
        _edit_json(path / RESULTS_NAME,
                   lambda d, v=value: d["measurements"][0].update(median_us=v),
                   checksum=False, allow_nan=True)
    path = _bundle(root, "results_edited", genomes)  # a plausible number, typed in by hand
    _edit_json(path / RESULTS_NAME, lambda d: d["measurements"][0].update(median_us=24.5),
               checksum=False)
    path = _bundle(root, "results_foreign", genomes)
    _edit_json(path / RESULTS_NAME, lambda d: d.update(bundle_id=str(uuid.uuid4())),
               checksum=True)
    _bundle(root, "unmeasured", genomes, measured=False)
    path = _bundle(root, "results_truncated", genomes)
    text = (path / RESULTS_NAME).read_text()
    (path / RESULTS_NAME).write_text(text[: len(text) // 2])

    first = genomes[0].hash
    path = _bundle(root, "library_edited", genomes)
    (path / "artifacts" / first / "libkernel.so").write_bytes(b"placeholder library, patched")
    path = _bundle(root, "genome_json_edited", genomes)
    edited = genomes[0].replace(stages=4).to_json()
    (path / "artifacts" / first / "genome.json").write_text(edited)
    path = _bundle(root, "artifact_json_edited", genomes)
    artifact_json = path / "artifacts" / first / "artifact.json"
    artifact_json.write_text(artifact_json.read_text() + "\n")
    path = _bundle(root, "manifest_edited", genomes)
    _edit_json(path / MANIFEST_NAME, lambda d: d["candidates"][0].update(origin="seed"),
               checksum=False)
    path = _bundle(root, "manifest_v1", genomes)
    _edit_json(path / MANIFEST_NAME, lambda d: d.update(version=1), checksum=True)
    path = _bundle(root, "study_path", genomes)
    _edit_json(path / MANIFEST_NAME, lambda d: d.update(study="../../escape"), checksum=True)

    path = _bundle(root, "manifest_binary", genomes)
    (path / MANIFEST_NAME).write_bytes(b"\xff\xfe" + os.urandom(64))
    path = _bundle(root, "manifest_endless", genomes)  # reading it would never end
    (path / MANIFEST_NAME).unlink()
    (path / MANIFEST_NAME).symlink_to("/dev/zero")
    path = _bundle(root, "library_link", genomes)
    library = path / "artifacts" / first / "libkernel.so"
    library.unlink()
    library.symlink_to(root / "built" / first / "libkernel.so")  # the same bytes, linked
    path = _bundle(root, "results_directory", genomes)
    (path / RESULTS_NAME).unlink()
    (path / RESULTS_NAME).mkdir()

    # Planted genomes: consistent bundles (hashes, checksums), genomes the verifier rejects.
    bad_schema = space.genome(stages=2, box_rows=8, box_cols=128, chunk=0, vector=8)
    _bundle(root, "planted_schema", [bad_schema, genomes[1]])
    missing_commit = space.genome(
        load=(("coords", "try_acquire", "acquire", "commit", "tma_load"), 0, "none"),
        stages=2, box_rows=8, box_cols=128, chunk=1, vector=8)
    _bundle(root, "planted_ts", [missing_commit, genomes[1]])
    _built_databases(root, [*genomes, bad_schema, missing_commit])


def _make_read_only(directory: Path) -> Callable[[], None]:
    """Make ``directory`` and its database read-only for the cases; returns the undoing.
    root ignores file modes: there the database is made immutable (``chattr +i``)."""
    database = directory / "tsopt.db"
    if os.geteuid() != 0:
        database.chmod(0o444)
        directory.chmod(0o555)
        return lambda: (directory.chmod(0o755), database.chmod(0o644))  # type: ignore[func-returns-value]
    done = subprocess.run(["chattr", "+i", str(database)], capture_output=True, check=False)
    if done.returncode != 0:
        return lambda: None
    return lambda: subprocess.run(["chattr", "-i", str(database)], check=False)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("bad-input")
    _genome_files(root)
    _databases(root)
    _bundles(root)
    undo = _make_read_only(root / "ro")
    try:
        yield root
    finally:
        undo()


def read_only_works(root: Path) -> bool:
    try:
        with open(root / "ro" / "tsopt.db", "ab"):
            return False
    except OSError:
        return True


def run_case(case: Case, root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a")
    args = [a.replace("{w}", str(root)) for a in case.args]
    work = root / "work" / case.name  # what a command writes lands here, never in the repo
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "tsopt", *args], capture_output=True,
                          text=True, cwd=work, env=env, timeout=600, check=False)


@pytest.fixture(scope="module")
def outcomes(world: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        done = dict(zip([c.name for c in CASES],
                        pool.map(lambda c: run_case(c, world), CASES), strict=True))
    return done


def test_the_suite_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_with_its_exit_code(
    case: Case, world: Path, outcomes: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    if "read-only" in case.name and not read_only_works(world):
        pytest.skip("this machine cannot make a file read-only for this user (chattr)")
    result = outcomes[case.name]
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything, everything[-3000:]
    assert result.returncode == case.code, (result.returncode, everything[-3000:])
    if case.report:
        assert not result.stderr.strip(), result.stderr
        assert case.says in " ".join(result.stdout.split()), result.stdout
        return
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and case.says in lines[0], lines[0]


@pytest.mark.slow
def test_nothing_was_written_outside_the_work_directories(world: Path,
                                                          outcomes: dict[str, Any]) -> None:
    """The study names that were paths wrote nothing anywhere (their tune was refused)."""
    assert not Path("/tmp/tsopt-escape").exists()
    assert not (world.parent / "x").exists() and not (world / "escape").exists()
    for name in ("study-up-and-out", "study-absolute", "study-nested", "study-hidden"):
        assert not list((world / "work" / name).iterdir())


def test_the_tampered_bundles_were_consistent_but_for_the_tampering(world: Path) -> None:
    """The hostile bundles passed tsopt's own format checks where their tamperer rewrote the
    checksums: what refused them is what each case names."""
    for name in ("planted_schema", "planted_ts", "results_foreign"):
        assert read_manifest(world / "bundles" / name).candidates
