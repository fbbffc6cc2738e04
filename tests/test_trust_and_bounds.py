"""Nothing trusted, nothing lost, everything bounded (issue #14, items 2, 4 and 6).

- Bundles: every file has its sha256 in the manifest and an edit is named; results are checked
  for finite, positive, coherent figures; ingest verifies every genome again, records the
  verdicts, and is one transaction with Optuna's tables (SQLite and PostgreSQL): a bundle
  refused half-way leaves the database exactly as it was, and the corrected one ingests.
- The genome schema: every gene against the space's knobs, the bad one named; the seed and
  the sampler's genomes always fit it. Genomes beyond the size bounds are refused unparsed.
- Study names are names; problems that cannot fit the GPU are refused with the byte count.
- A study whose process was killed is marked ``killed`` (with when) by the next command, and
  the next ``tsopt tune`` takes up its trials. A build beyond its memory limit is recorded as
  a failed build, ``memory: ...``, and the process that asked lives on.

The bundles' libraries are placeholders and their results are written by hand (the device
says "simulated device"): they test what is checked and recorded, never any kernel's speed.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console
from sqlalchemy import create_engine, inspect, text

from tests.built_here import failed, record_built, timed
from tests.test_db import db_url  # noqa: F401  (the SQLite + PostgreSQL fixture)
from tsopt.app import ingest as ingest_module
from tsopt.app.ingest import ingest_bundle
from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.bundle import (
    Baseline,
    BundleEntry,
    BundleError,
    BundleResults,
    measurement_problem,
    read_manifest,
    read_results,
    write_bundle,
    write_results,
)
from tsopt.core.devices import GPU_MEMORY, check_fits
from tsopt.core.errors import UserInputError
from tsopt.core.genome import MAX_GENOME_BYTES, Genome, GenomeError
from tsopt.core.names import check_study_name
from tsopt.core.problem import OP_SPECS, Problem, ProblemError, default_problem, parse_problem_spec
from tsopt.core.records import Measurement
from tsopt.core.registry import get_space
from tsopt.db.store import Store

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)
STUDY = "copy-trust"
DEVICE = "simulated device"


def valid_genome(stages: int) -> Genome:
    return get_space("copy").genome(stages=stages, box_rows=8, box_cols=128, chunk=1, vector=8)


def artifact(root: Path, genome: Genome) -> Path:
    directory = root / "built" / genome.hash
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "libkernel.so").write_bytes(b"placeholder library, never loaded here")
    (directory / "genome.json").write_text(genome.to_json())
    shape = (PROBLEM["rows"], PROBLEM["cols"])
    tensors = (TensorDesc("src", "input", shape, "fp16"), TensorDesc("dst", "output", shape, "fp16"))
    ArtifactManifest(genome.hash, "copy", PROBLEM.to_dict(), "sm_90a", tensors).write(directory)
    return directory


def measured(genome: Genome, median_us: float | None = 25.0, status: str = "ok") -> Measurement:
    timed = status == "ok"
    return Measurement(
        genome_hash=genome.hash, problem_key=PROBLEM.key, status=status,  # type: ignore[arg-type]
        median_us=median_us if timed else None,
        p10_us=median_us - 1.0 if timed and median_us else None,
        p90_us=median_us + 1.0 if timed and median_us else None,
        runs=50 if timed else 0, rate_unit="GB/s",
        baseline_name="torch.copy_", baseline_median_us=21.0, device=DEVICE,
        error=None if timed else "12 of 131072 elements differ")


def make_bundle(root: Path, name: str, genomes: list[Genome],
                statuses: list[str] | None = None) -> Path:
    path = root / name
    manifest = write_bundle(path, study=STUDY, space="copy", problem=PROBLEM, arch="sm_90a",
                            candidates=[BundleEntry(g, artifact(root, g)) for g in genomes])
    statuses = statuses or ["ok"] * len(genomes)
    write_results(path, BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device=DEVICE,
        baselines=[Baseline(PROBLEM.key, "torch.copy_", DEVICE, 21.0, 20.0, 22.0, 50)],
        measurements=[timed(g, PROBLEM, 25.0 + i) if s == "ok" else failed(g, PROBLEM, s)
                      for i, (g, s) in enumerate(zip(genomes, statuses, strict=True))],
        measured_files={c.genome_hash: dict(c.files) for c in manifest.candidates}))
    return path


# -- checksums ------------------------------------------------------------------------------
def test_every_bundled_file_has_a_checksum_and_an_edit_is_named(tmp_path: Path) -> None:
    genomes = [valid_genome(2), valid_genome(3)]
    path = make_bundle(tmp_path, "b", genomes)
    manifest = read_manifest(path)
    assert all({"artifact.json", "libkernel.so", "genome.json"} <= dict(c.files).keys()
               for c in manifest.candidates)
    results = read_results(path, manifest)
    assert results is not None and results.measured_files[genomes[0].hash] == dict(
        manifest.candidates[0].files)
    first = path / "artifacts" / genomes[0].hash
    for name in ("libkernel.so", "genome.json", "artifact.json"):
        original = (first / name).read_bytes()
        (first / name).write_bytes(original + b" ")
        with pytest.raises(BundleError, match=f"{name} was changed after the bundle was written"):
            read_manifest(path)
        with pytest.raises(BundleError, match=f"{name} was changed"):
            read_manifest(path, check_artifacts="present")  # what ingest reads
        (first / name).write_bytes(original)
    # Results may come back without the artifacts: those absent are not checked, the results
    # still name the checksums of what was measured.
    for c in manifest.candidates:
        for f in (path / c.artifact).iterdir():
            f.unlink()
        (path / c.artifact).rmdir()
    assert read_manifest(path, check_artifacts="present").candidates
    with pytest.raises(BundleError, match="no artifact manifest"):
        read_manifest(path)  # what measure reads: every artifact


@pytest.mark.parametrize("change, message", [
    ({"median_us": -5.0}, "median_us -5.0"),
    ({"median_us": 0.0}, "median_us 0.0"),
    ({"median_us": math.nan}, "median_us nan"),
    ({"median_us": math.inf}, "median_us inf"),
    ({"median_us": None}, "median_us None"),
    ({"p90_us": 20.0}, "does not hold"),
    ({"runs": 0}, "runs 0"),
    ({"device": ""}, "on no device"),
    ({"device": "another GPU"}, "device 'another GPU' is none of"),
    ({"ratio": -1.0}, "ratio -1.0"),
    ({"rate": math.nan}, "rate nan"),
    ({"status": "wrong"}, "a failed candidate has no times"),
])
def test_a_result_that_cannot_be_trusted_is_named(change: dict[str, Any], message: str) -> None:
    doc = {**measured(valid_genome(2)).to_dict(), **change}
    assert message in (measurement_problem(Measurement(**doc), {DEVICE}) or "")


def test_trustworthy_results_pass() -> None:
    genome = valid_genome(2)
    assert measurement_problem(measured(genome), {DEVICE}) is None
    assert measurement_problem(measured(genome, status="hang"), {DEVICE}) is None


# -- verified ingest, one transaction ----------------------------------------------------------
def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, tsopt's and Optuna's, in a stable order."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = inspect(conn).get_table_names()
            return {t: sorted(tuple(map(repr, r)) for r in conn.execute(text(f'SELECT * FROM "{t}"')))
                    for t in tables}
    finally:
        engine.dispose()


def test_a_refused_bundle_leaves_the_database_as_it_was_then_the_corrected_one_ingests(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    # A database with an earlier study in it, tsopt's and Optuna's tables both.
    # The study that built the bundles' candidates is in it too (ingest checks a bundle against
    # the builds its database recorded): the planted genome among them, so that it is the
    # verifier that refuses it.
    genomes = [valid_genome(s) for s in (2, 3, 4)]
    planted = get_space("copy").genome(
        load=(("coords", "try_acquire", "acquire", "commit", "tma_load"), 0, "none"),
        stages=2, box_rows=8, box_cols=128, chunk=1, vector=8)
    with Store(db_url) as store:
        store.create_or_get_study("earlier", "copy", PROBLEM, "sm_90a", "tpe", {})
        earlier = optuna.create_study(study_name="earlier", storage=store.optuna_storage())
        earlier.tell(earlier.ask(), 42.0)
        record_built(store, STUDY, PROBLEM, [(g, artifact(tmp_path, g))
                                             for g in [*genomes, planted]])
    before = snapshot(db_url)

    # 1. A planted genome the verifier rejects: refused before anything is written.
    bad = make_bundle(tmp_path, "planted", [genomes[0], planted])
    with pytest.raises(BundleError, match="does not pass verification.*ts.missing_commit"):
        ingest_bundle(bad, db_url, Console(quiet=True))
    assert snapshot(db_url) == before

    # 2. A failure half-way, after the baseline, the measurements and the first Optuna trial
    #    were written in the transaction: all of it rolls back, Optuna's study included.
    good = make_bundle(tmp_path, "good", genomes, ["ok", "wrong", "ok"])
    calls = {"n": 0}
    real = ingest_module.add_finished_trial

    def failing_after_one(*args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device (simulated half-way failure)")
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest_module, "add_finished_trial", failing_after_one)
    with pytest.raises(OSError, match="simulated half-way failure"):
        ingest_bundle(good, db_url, Console(quiet=True))
    assert calls["n"] == 2
    assert snapshot(db_url) == before

    # 3. The same bundle, the failure gone: everything is recorded once, every genome with the
    #    verdict it was judged by again.
    monkeypatch.setattr(ingest_module, "add_finished_trial", real)
    out = io.StringIO()
    assert ingest_bundle(good, db_url, Console(file=out, width=300)) == 0
    assert "verified 3 genomes again" in out.getvalue()
    with Store(db_url) as store:
        candidates = [c for c in store.candidates(STUDY) if c.genome_hash != planted.hash]
        assert sorted(c.genome_hash for c in candidates) == sorted(g.hash for g in genomes)
        assert all(c.verdict is not None and c.verdict.valid for c in candidates)
        assert [len(c.measurements) for c in candidates] == [1, 1, 1]
        study = optuna.load_study(study_name=STUDY, storage=store.optuna_storage())
        states = sorted(t.state.name for t in study.get_trials(deepcopy=False))
        assert states == ["COMPLETE", "COMPLETE", "FAIL"]  # none left RUNNING
    assert snapshot(db_url)["trials"] != before["trials"]


# -- the genome schema -------------------------------------------------------------------------
@pytest.mark.parametrize("space_name, spec", [
    ("copy", "copy:fp16:4096x4096"), ("copy", "copy:fp16:64x64"),
    ("copy", "copy:bf16:1048576x128"), ("gemm", "gemm:bf16:8192x8192x8192"),
    ("gemm", "gemm:bf16:128x128x64"),
])
def test_the_seed_and_every_sampled_genome_fit_the_schema(space_name: str, spec: str) -> None:
    from tsopt.verify.verifier import schema_error

    space = get_space(space_name)
    problem = parse_problem_spec(spec)
    assert schema_error(space.seed_genome(problem), problem, space) is None
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(150):
        trial = study.ask()
        genome = space.suggest(trial, problem)
        assert schema_error(genome, problem, space) is None, genome.describe()
        study.tell(trial, 1.0)


@pytest.mark.parametrize("space_name, gene, value, message", [
    ("copy", "stages", "four", "gene 'stages' is 'four' (a text); it must be an integer"),
    ("copy", "chunk", 0, "gene 'chunk' is 0; it must lie in 1.."),
    ("copy", "box_cols", 0, "gene 'box_cols' is 0; it must lie in 64.."),
    ("copy", "vector", 0, "gene 'vector' is 0; it must lie in 1.."),
    ("copy", "persistent", 1, "gene 'persistent' is 1 (an integer); it must be true or false"),
    ("gemm", "cluster", "2by1", "gene 'cluster' is '2by1'; it must be one of '1x1'"),
    ("gemm", "tile_k", 0, "gene 'tile_k' is 0; it must lie in 32.."),
])
def test_a_bad_gene_is_named_before_anything_reads_it(space_name: str, gene: str, value: Any,
                                                      message: str) -> None:
    from tsopt.verify.verifier import SCHEMA_RULE, check_genome_schema, verify_genome

    space = get_space(space_name)
    problem = default_problem(space.op)
    genome = space.seed_genome(problem).replace(**{gene: value})
    verdict = verify_genome(genome, problem, space=space)
    assert not verdict.valid and verdict.stage == "dataflow" and verdict.rule == SCHEMA_RULE
    assert message in (verdict.message or "")
    # Values far beyond anything the space proposes never reach the verifier either.
    if isinstance(value, int) and not isinstance(value, bool):
        absurd = space.seed_genome(problem).replace(**{gene: 10**9})
        assert verify_genome(absurd, problem, space=space).rule == SCHEMA_RULE
    with pytest.raises(UserInputError, match=gene):
        check_genome_schema(genome, problem, space)


def test_genomes_beyond_the_size_bounds_are_refused_unparsed() -> None:
    seed = get_space("copy").seed_genome(default_problem("copy")).to_dict()
    huge = json.dumps({**seed, "schedule": {"load": [["coords", "loop"]] * 2_000_000}})
    start = time.perf_counter()
    with pytest.raises(GenomeError, match="bytes of JSON"):
        Genome.from_json(huge)
    assert time.perf_counter() - start < 1.0 and len(huge) > MAX_GENOME_BYTES
    with pytest.raises(GenomeError, match="places 5,000 ops"):
        Genome.from_dict({**seed, "schedule": {"load": [["coords", "loop"]] * 5000}})
    with pytest.raises(GenomeError, match="a text of 1000 characters"):
        Genome.from_dict({**seed, "structure": {**seed["structure"], "raster": "r" * 1000}})


# -- names and sizes -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "a/b", ".hidden", "", "a b", "x" * 201,
                                  "..", "nul\x00l"])
def test_a_study_name_is_a_name_not_a_path(name: str, tmp_path: Path) -> None:
    with pytest.raises(UserInputError):
        check_study_name(name)
    with Store(f"sqlite:///{tmp_path / 'n.db'}") as store, pytest.raises(UserInputError):
        store.create_or_get_study(name, "copy", PROBLEM, "sm_90a", "tpe", {})


def test_problems_that_cannot_fit_the_gpu_are_refused_with_the_byte_count() -> None:
    huge = Problem.of("copy", "fp16", rows=10**9, cols=10**9)
    with pytest.raises(ProblemError, match="needs 4,000,000,000,000,000,000 bytes.*"
                                           "141,000,000,000 bytes"):
        check_fits(huge, "sm_90a")
    for op in OP_SPECS:
        check_fits(default_problem(op), "sm_90a")
    capacity = GPU_MEMORY["sm_90a"].bytes
    rows = capacity // (2 * 2 * 4096)
    check_fits(Problem.of("copy", "fp16", rows=rows, cols=4096), "sm_90a")
    with pytest.raises(ProblemError):
        check_fits(Problem.of("copy", "fp16", rows=rows + 1, cols=4096), "sm_90a")


# -- killed studies -----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_study_whose_process_was_killed_is_marked_killed_and_resumed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a")
    args = [sys.executable, "-m", "tsopt", "tune", "copy", "--rows", "256", "--cols", "512",
            "--trials", "40", "--sampler", "random", "--no-warm-start", "--db", url]
    victim = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    study = "copy-fp16-256x512-sm_90a"
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            time.sleep(1)
            if (tmp_path / "tsopt.db").exists() and victim.poll() is None:
                with Store(url) as store:
                    info = store.get_study(study)
                    if info is not None and store.live_runs(study) and len(
                            store.candidates(study)) >= 2:
                        break
        else:
            pytest.fail("the tune process never got going")
    finally:
        victim.send_signal(signal.SIGKILL)  # the OOM killer's way: no finally, no goodbye
        victim.wait()
    with Store(url) as store:  # the next command to touch the study
        info = store.get_study(study)
        assert info is not None and info.status == "killed" and info.killed_at is not None
        assert not store.live_runs(study)
    resumed = subprocess.run([*args[:-6], "2", *args[-5:]], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with Store(url) as store:
        assert store.get_study(study).status == "finished"  # type: ignore[union-attr]
        storage = store.optuna_storage()
        trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    # What the killed run left RUNNING was taken up (or waits in the bundle for a GPU).
    assert all(t.state.is_finished() or "awaiting_measurement" in t.user_attrs for t in trials)


# -- bounded builds ------------------------------------------------------------------------------
def test_a_build_beyond_its_memory_limit_is_recorded_and_the_asker_lives_on(
    tmp_path: Path,
) -> None:
    from tests.memory_hungry_space import MemoryHungryCopySpace
    from tsopt.build.builder import build_isolated, build_limited, parse_memory

    space = MemoryHungryCopySpace()
    genome = valid_genome(2)
    for build in (build_isolated, build_limited):
        result = build(space, genome, PROBLEM, "sm_90a", tmp_path / build.__name__,
                       parse_memory("256M"))
        assert not result.ok and (result.error or "").startswith(
            "memory: the build exceeded its memory limit of 256 MiB"), result.error
        assert "MemoryError" in (result.error or "")
    with pytest.raises(UserInputError, match="TSOPT_BUILD_MEMORY='lots'"):
        parse_memory("lots")
    assert parse_memory("0") is None and parse_memory("2G") == 2 * 2**30


@pytest.mark.slow
def test_the_driver_records_a_build_over_its_memory_limit_as_build_failed_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tsopt.core import registry
    from tsopt.search.driver import Driver
    from tsopt.search.request import TuneRequest

    monkeypatch.setitem(registry.SPACES, "copy", registry.SpaceEntry(
        "copy", "tests.memory_hungry_space:MemoryHungryCopySpace", "copy", ""))
    monkeypatch.setenv("TSOPT_BUILD_MEMORY", "256M")
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    request = TuneRequest(space="copy", problem=PROBLEM, trials=1, sampler="random",
                          db_url=url, measure="never", warm_start=False,
                          cache_dir=tmp_path / "artifacts", bundle_dir=tmp_path / "bundle")
    code = Driver(request, Console(quiet=True)).run()
    assert code == 1  # valid candidates, none could be built
    with Store(url) as store:
        builds = [c.build for c in store.candidates(request.study_name()) if c.build]
    assert builds and all(not b.ok and (b.error or "").startswith("memory:") for b in builds)
