"""The database layer on real databases: SQLite files, and PostgreSQL when one is given.

PostgreSQL runs when ``TSOPT_TEST_POSTGRES_URL`` names a server (start one with
``eval "$(bash .ci/postgres.sh)"``); each test gets a fresh database there.
Without it the PostgreSQL cases skip, except under ``CI=true`` where a missing
server is a failure.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome, Section
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, Measurement, Verdict
from tsopt.db.migrate import VERSION_TABLE, head_revision, upgrade
from tsopt.db.store import Store

REPO = Path(__file__).resolve().parents[1]
TSOPT_TABLES = {
    "tsopt_study", "tsopt_candidate", "tsopt_verdict", "tsopt_build", "tsopt_measurement",
    "tsopt_baseline", VERSION_TABLE,
}
PROBLEM = Problem.of("copy", "fp16", rows=4096, cols=4096)


def copy_genome(stages: int = 2, box: int = 64, release: Section = "loop") -> Genome:
    return Genome.make(
        "copy",
        schedule={
            "load": [("acquire", "loop"), ("tma_load", "loop"), ("commit", "loop")],
            "store": [("wait", "loop"), ("tma_store", "loop"), ("release", release)],
        },
        numeric={"stages": stages, "box_cols": box, "load_warp": 0, "store_warps": 1},
    )


def measurement(genome: Genome, median_us: float | None, status: str = "ok") -> Measurement:
    timed: dict[str, float | int | None] = {}
    if median_us is not None:
        timed = dict(median_us=median_us, p10_us=median_us * 0.98, p90_us=median_us * 1.03,
                     runs=50, rate=PROBLEM.bytes_moved / median_us / 1e3, ratio=21.0 / median_us)
    return Measurement(
        genome_hash=genome.hash, problem_key=PROBLEM.key, status=status,  # type: ignore[arg-type]
        rate_unit="GB/s", rel_err=0.0 if status == "ok" else 0.5, baseline_name="torch.copy",
        baseline_median_us=21.0, baseline_rate=3200.0, device="NVIDIA H200", driver="580.65",
        cuda="13.0", torch="2.11.0", error=None if status == "ok" else f"status {status}",
        seconds=1.5, **timed,  # type: ignore[arg-type]
    )


# -- database fixtures ------------------------------------------------------------------


def _postgres_database() -> Iterator[str]:
    base = os.environ.get("TSOPT_TEST_POSTGRES_URL")
    if not base:
        reason = "TSOPT_TEST_POSTGRES_URL is not set (eval \"$(bash .ci/postgres.sh)\" sets it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    name = f"tsopt_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tsopt.db'}"
    else:
        yield from _postgres_database()


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with Store(db_url) as opened:
        yield opened


def new_study(store: Store, name: str = "copy-study") -> str:
    store.create_or_get_study(name, "copy", PROBLEM, "sm_90a", "grid", {"trials": 10, "seed": 0})
    return name


# -- migrations -------------------------------------------------------------------------


def test_migration_creates_every_table_and_reopening_is_a_no_op(db_url: str) -> None:
    with Store(db_url) as first:
        engine = create_engine(first.url)
        tables = set(inspect(engine).get_table_names())
        assert TSOPT_TABLES <= tables
        assert "alembic_version" not in tables, "Optuna's version table is not ours to create"
        with engine.connect() as conn:
            assert conn.scalar(text(f"SELECT version_num FROM {VERSION_TABLE}")) == head_revision()
        # The declared models and the migrations describe the same schema.
        from alembic.autogenerate import compare_metadata
        from alembic.runtime.migration import MigrationContext

        from tsopt.db.models import Base

        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={
                "version_table": VERSION_TABLE,
                "include_object": lambda o, n, t, r, c: t != "table" or n.startswith("tsopt_"),
            })
            assert compare_metadata(context, Base.metadata) == []
        new_study(first)
    with Store(db_url) as second:
        assert upgrade(second._engine) is False
        assert [s.name for s in second.list_studies()] == ["copy-study"]
    engine.dispose()


def test_records_from_before_the_launch_modes_read_as_isolated_never_as_graph(
        db_url: str) -> None:
    """A database at revision 0005 (no launch modes) holds a study and a measurement; after the
    upgrade they read as what they were, ``isolated``; a new study measures in graph mode,
    and asking the old one for another mode is refused."""
    from alembic import command

    from tsopt.db.migrate import alembic_config

    genome = copy_genome()
    with Store(db_url) as first:
        old = new_study(first, "old-study")
        cid = first.add_candidate(old, genome, "seed")
        first.record_measurement(cid, measurement(genome, 25.0), "run-old")
        engine = create_engine(first.url)
        with engine.begin() as conn:  # back to the schema before the modes: their columns go
            command.downgrade(alembic_config(connection=conn), "0005")
            assert "launch" not in {c["name"] for c in inspect(conn).get_columns(
                "tsopt_measurement")}
        engine.dispose()
    with Store(db_url) as reopened:  # opening upgrades it to head
        info = reopened.get_study("old-study")
        assert info is not None and info.launch == "isolated"
        [candidate] = reopened.candidates("old-study")
        assert [r.measurement.launch for r in candidate.measurements] == ["isolated"]
        # Resumed without a mode, it keeps its own; with another, it is refused.
        assert reopened.create_or_get_study("old-study", "copy", PROBLEM, "sm_90a", "grid",
                                            {}).launch == "isolated"
        with pytest.raises(UserInputError, match="launch mode 'isolated' \\(asked for 'graph'\\)"):
            reopened.create_or_get_study("old-study", "copy", PROBLEM, "sm_90a", "grid", {},
                                         launch="graph")
        fresh = reopened.create_or_get_study("new-study", "copy", PROBLEM, "sm_90a", "grid", {})
        assert fresh.launch == "graph"
        eager = reopened.create_or_get_study("eager-study", "copy", PROBLEM, "sm_90a", "grid", {},
                                             launch="eager")
        cid = reopened.add_candidate("eager-study", genome, "seed")
        timed = dataclasses.replace(measurement(genome, 30.0), launch="eager")
        reopened.record_measurement(cid, timed, "run-new")
        [candidate] = reopened.candidates("eager-study")
        assert eager.launch == "eager"
        assert [r.measurement for r in candidate.measurements] == [timed]


def test_optuna_rdb_storage_lives_in_the_same_database(db_url: str) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with Store(db_url) as ours:
        name = new_study(ours)
        storage = ours.optuna_storage()
        study = optuna.create_study(storage=storage, study_name=name, direction="minimize")
        trial = study.ask()
        trial.suggest_categorical("stages", [1, 2, 4])
        study.tell(trial, 12.5)
        storage.engine.dispose()
    with Store(db_url) as reopened:
        tables = set(inspect(create_engine(reopened.url)).get_table_names())
        assert TSOPT_TABLES <= tables
        assert {"studies", "trials", "alembic_version"} <= tables
        loaded = optuna.load_study(study_name=name, storage=reopened.optuna_storage())
        assert [t.value for t in loaded.trials] == [12.5]
        assert reopened.get_study(name) is not None


@pytest.mark.slow
def test_processes_opening_a_fresh_file_at_once_all_migrate_cleanly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    # Start together (after the imports) so that they race on creating the file and the tables.
    code = (
        "import sys, time; from tsopt.db.store import Store; start = float(sys.argv[1])\n"
        "while time.time() < start: pass\n"
        f"Store({url!r}).list_studies()"
    )
    start = str(time.time() + 2.5)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, start], cwd=REPO, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    with sqlite3.connect(tmp_path / "race.db") as conn:
        assert conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [
            (head_revision(),)
        ]


def test_concurrent_writers_of_the_same_candidate_get_one_row(db_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with Store(db_url) as first:
        study = new_study(first)
    genomes = [copy_genome(stages=s, box=b) for s in (1, 2, 3) for b in (32, 64, 128, 256)]

    def writer(seed: int) -> list[int]:
        with Store(db_url) as store:  # its own engine, as another process would have
            order = genomes[seed % 3:] + genomes[:seed % 3]
            ids = {g.hash: store.add_candidate(study, g, "suggest") for g in order}
            for g in order:
                store.record_measurement(ids[g.hash], measurement(g, 10.0 + seed), "same-run")
            return [ids[g.hash] for g in genomes]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(writer, range(4)))
    assert all(r == results[0] for r in results)
    with Store(db_url) as store:
        candidates = store.candidates(study)
    assert len(candidates) == len(genomes)
    assert all(len(c.measurements) == 1 for c in candidates)


def test_a_database_from_a_newer_tsopt_is_refused_and_left_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    with Store(url) as store:
        new_study(store)
    with sqlite3.connect(tmp_path / "newer.db") as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    with pytest.raises(UserInputError, match="'9999'.*newer tsopt"):
        Store(url)
    with sqlite3.connect(tmp_path / "newer.db") as conn:
        assert conn.execute("SELECT name FROM tsopt_study").fetchall() == [("copy-study",)]


# -- URLs -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://host/x", ""])
def test_a_malformed_url_is_one_clear_error_naming_it(url: str) -> None:
    with pytest.raises(UserInputError) as caught:
        Store(url)
    assert repr(url) in str(caught.value) or url.split(":")[0] in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_unreachable_server_names_the_url_without_its_password() -> None:
    with pytest.raises(UserInputError, match=r"cannot open database .*secret") as caught:
        Store("postgresql+psycopg2://tsopt:hunter2@127.0.0.1:1/secret")
    assert "hunter2" not in str(caught.value)


def test_sqlite_parent_directory_is_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "tsopt.db"
    with Store(f"sqlite:///{target}") as store:
        new_study(store)
    assert target.is_file()


# -- SQLite concurrency -----------------------------------------------------------------


def test_sqlite_uses_wal_journalling(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    with Store(f"sqlite:///{path}"):
        pass
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_reader_sees_committed_rows_while_a_writer_holds_a_transaction(db_url: str) -> None:
    writer_store = Store(db_url)
    study = new_study(writer_store)
    committed = writer_store.add_candidate(study, copy_genome(stages=1), "seed")
    writer = create_engine(db_url)
    with writer.connect() as conn:
        tx = conn.begin()
        if conn.dialect.name == "sqlite":
            # Take SQLite's write lock the way a long tuning transaction would.
            conn.exec_driver_sql("UPDATE tsopt_study SET status = 'running'")
        conn.execute(text(
            "INSERT INTO tsopt_candidate (study_id, genome_hash, genome_json, origin, created_at)"
            " SELECT id, 'uncommitted', '{}', 'seed', created_at FROM tsopt_study"
        ))
        reader = Store(db_url)
        started = time.monotonic()
        seen = [c.id for c in reader.candidates(study)]
        waited = time.monotonic() - started
        assert seen == [committed]
        assert waited < 2.0, f"the reader waited {waited:.1f}s on the writer"
        assert reader.funnel(study)["proposed"] == 1
        tx.rollback()
    reader.close()
    writer_store.close()
    writer.dispose()


# -- round trips ------------------------------------------------------------------------


def test_every_record_round_trips(store: Store) -> None:
    config = {"trials": 10, "seed": 3, "time_budget_s": None}
    info = store.create_or_get_study("rt", "copy", PROBLEM, "sm_90a", "grid", config)
    assert (info.name, info.space, info.problem, info.arch, info.sampler, info.status) == (
        "rt", "copy", PROBLEM, "sm_90a", "grid", "running"
    )
    assert info.config == config and info.optuna_study_name == "rt"
    assert info.created_at.tzinfo is not None
    assert store.get_study("rt") == info
    assert store.get_study("absent") is None

    genome = copy_genome(stages=3, release="tail")
    cid = store.add_candidate("rt", genome, "enumerate", trial_number=None)
    assert store.candidate_id("rt", genome.hash) == cid
    store.set_trial_number(cid, 7)

    verdict = Verdict.ok(genome.hash, seconds=0.004, domain=5)
    store.record_verdict(cid, "copy", "key-3-tail", verdict)
    assert store.find_verdict("copy", "key-3-tail") == dataclasses.replace(verdict, cached=True)

    build = BuildResult(
        genome_hash=genome.hash, problem_key=PROBLEM.key, arch="sm_90a", status="ok",
        artifact_dir="/cache/ab", library="/cache/ab/libkernel.so", compile_seconds=0.4,
        export_seconds=0.1, link_seconds=0.05, registers=40, smem_bytes=49152, spill_bytes=0,
        cache_key="ck-1", versions={"cutlass-dsl": "4.8.1"},
    )
    store.record_build(cid, build)
    assert store.find_build("ck-1") == dataclasses.replace(build, cache_hit=True)
    assert store.find_build("ck-absent") is None

    timing = measurement(genome, 25.0)
    assert store.record_measurement(cid, timing, "run-1") is True
    assert store.record_baseline(PROBLEM.key, "torch.copy", "NVIDIA H200", "run-1",
                                 21.0, 20.5, 21.7, 3195.0, "GB/s") is True
    assert store.baselines(PROBLEM.key)[0]["median_us"] == 21.0

    [candidate] = store.candidates("rt")
    assert candidate.genome == genome and candidate.origin == "enumerate"
    assert candidate.trial_number == 7
    assert candidate.verdict == dataclasses.replace(verdict, cached=True)
    assert candidate.build == dataclasses.replace(build, cache_hit=True)
    assert [r.measurement for r in candidate.measurements] == [timing]
    assert candidate.measurements[0].run_id == "run-1"

    store.set_study_status("rt", "finished")
    assert store.get_study("rt").status == "finished"  # type: ignore[union-attr]


def test_repeated_writes_add_nothing(store: Store) -> None:
    study = new_study(store)
    genome = copy_genome()
    first = store.add_candidate(study, genome, "seed")
    assert store.add_candidate(study, genome, "suggest", trial_number=4) == first
    assert len(store.candidates(study)) == 1
    assert store.candidates(study)[0].origin == "seed"

    timing = measurement(genome, 30.0)
    assert store.record_measurement(first, timing, "bundle-a") is True
    assert store.record_measurement(first, timing, "bundle-a") is False
    assert store.record_measurement(first, measurement(genome, 31.0), "bundle-b") is True
    assert len(store.candidates(study)[0].measurements) == 2

    baseline = (PROBLEM.key, "torch.copy", "H200", "bundle-a", 21.0, 20.0, 22.0, 3200.0, "GB/s")
    assert store.record_baseline(*baseline) is True
    assert store.record_baseline(*baseline) is False


def test_the_verdict_cache_is_shared_by_key_across_candidates_and_studies(store: Store) -> None:
    a, b = new_study(store, "a"), new_study(store, "b")
    g1, g2 = copy_genome(box=64), copy_genome(box=128)
    rejected = Verdict.reject(g1.hash, "ts", "ts.missing_release", "schedule is missing ...")
    store.record_verdict(store.add_candidate(a, g1, "enumerate"), "copy", "same", rejected)
    # A second genome with the same key shares the TS rejection's row.
    store.record_verdict(store.add_candidate(b, g2, "enumerate"), "copy", "same",
                         Verdict.reject(g2.hash, "ts", "ts.missing_release", "other text"))
    assert store.candidates(b)[0].verdict == dataclasses.replace(rejected, cached=True)
    engine = create_engine(store.url)
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM tsopt_verdict")) == 1
    engine.dispose()


def test_genomes_of_one_key_keep_their_own_tsopt_verdicts(store: Store) -> None:
    # Both passed TS (one key: the genes TS sees are equal); tsopt's checks, which see the
    # rest of the genome, reject one of them. Each candidate keeps its own verdict, and the
    # key still answers the TS gate for the cache.
    study = new_study(store)
    g1, g2 = copy_genome(box=64), copy_genome(box=128)
    own = Verdict.reject(g1.hash, "tsopt", "tsopt.launch_shape", "raster belongs to ...")
    store.record_verdict(store.add_candidate(study, g1, "enumerate"), "copy", "key", own)
    store.record_verdict(store.add_candidate(study, g2, "enumerate"), "copy", "key",
                         Verdict.ok(g2.hash))
    first, second = store.candidates(study)
    assert first.verdict is not None and first.verdict.rule == "tsopt.launch_shape"
    assert second.verdict is not None and second.verdict.valid
    cached = store.find_verdict("copy", "key")
    assert cached is not None and cached.stage == "tsopt"  # TS passed: the cache says so


def test_a_cached_build_failure_gives_way_to_a_later_success_but_never_the_reverse(
    store: Store,
) -> None:
    study = new_study(store)
    genome = copy_genome()
    cid = store.add_candidate(study, genome, "seed")
    failed = BuildResult(genome.hash, PROBLEM.key, "sm_90a", "error", cache_key="k",
                         error="ptxas: out of memory")
    worked = BuildResult(genome.hash, PROBLEM.key, "sm_90a", "ok", artifact_dir="/a",
                         library="/a/libkernel.so", cache_key="k")
    store.record_build(cid, failed)
    store.record_build(cid, worked)
    assert store.find_build("k") == dataclasses.replace(worked, cache_hit=True)
    store.record_build(cid, failed)
    assert store.find_build("k") == dataclasses.replace(worked, cache_hit=True)


def test_a_cached_build_whose_artifact_is_gone_points_at_the_one_rebuilt_here(
    store: Store, tmp_path: Path,
) -> None:
    study = new_study(store)
    genome = copy_genome()
    cid = store.add_candidate(study, genome, "seed")

    def built(folder: str) -> BuildResult:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "libkernel.so").write_bytes(b"kernel")
        return BuildResult(genome.hash, PROBLEM.key, "sm_90a", "ok",
                           artifact_dir=str(tmp_path / folder),
                           library=str(tmp_path / folder / "libkernel.so"), cache_key="k")

    store.record_build(cid, built("elsewhere"))
    shutil.rmtree(tmp_path / "elsewhere")  # built on another machine, or its cache cleared
    store.record_build(cid, built("here"))
    found = store.find_build("k")
    assert found is not None and found.artifact_dir == str(tmp_path / "here")
    store.record_build(cid, built("third"))  # the artifact here exists: the cached one stays
    found = store.find_build("k")
    assert found is not None and found.artifact_dir == str(tmp_path / "here")


def test_a_study_clash_is_refused_naming_it_and_changes_nothing(store: Store) -> None:
    study = new_study(store)
    other = Problem.of("copy", "fp16", rows=8192, cols=4096)
    with pytest.raises(UserInputError, match=r"'copy-study'.*problem 'copy-fp16-4096x4096'"):
        store.create_or_get_study(study, "copy", other, "sm_90a", "grid", {})
    with pytest.raises(UserInputError, match=r"arch 'sm_90a' \(asked for 'sm_100a'\)"):
        store.create_or_get_study(study, "copy", PROBLEM, "sm_100a", "grid", {})
    again = store.create_or_get_study(study, "copy", PROBLEM, "sm_90a", "tpe", {"trials": 99})
    assert again.sampler == "grid" and again.config == {"trials": 10, "seed": 0}
    assert len(store.list_studies()) == 1


def test_unknown_study_and_foreign_genome_are_clear_errors(store: Store) -> None:
    with pytest.raises(UserInputError, match="no study named 'nope'"):
        store.add_candidate("nope", copy_genome(), "seed")
    study = new_study(store)
    gemm = Genome.make("gemm", numeric={"tile_m": 128})
    with pytest.raises(UserInputError, match="space 'gemm'.*'copy'"):
        store.add_candidate(study, gemm, "planted")
    with pytest.raises(ValueError, match="origin 'magic'"):
        store.add_candidate(study, copy_genome(), "magic")


# -- study views ------------------------------------------------------------------------


def test_funnel_rejections_and_ranking(store: Store) -> None:
    study = new_study(store)
    genomes = [copy_genome(stages=s, box=b) for s in (1, 2, 3, 4) for b in (32, 64, 128)]
    ids = [store.add_candidate(study, g, "enumerate") for g in genomes]
    g, c = genomes, ids
    # 12 proposed; candidate 11 never judged.
    store.record_verdict(c[0], "copy", "k0", Verdict.reject(
        g[0].hash, "dataflow", "dataflow.use_before_produce", "tma_store uses smem before load"))
    store.record_verdict(c[1], "copy", "k1", Verdict.reject(
        g[1].hash, "ts", "ts.missing_release", "schedule is missing ConsumerRelease (a)"))
    store.record_verdict(c[2], "copy", "k2", Verdict.reject(
        g[2].hash, "ts", "ts.missing_release", "schedule is missing ConsumerRelease (b)"))
    store.record_verdict(c[3], "copy", "k3", Verdict.reject(
        g[3].hash, "tsopt", "tsopt.warp_overlap", "load and store share warp 0"))
    for i in range(4, 11):
        store.record_verdict(c[i], "copy", f"k{i}", Verdict.ok(g[i].hash))
    # 7 valid; candidate 10 not built yet, candidate 9 fails to build.
    for i in range(4, 10):
        failed = i == 9
        store.record_build(c[i], BuildResult(
            g[i].hash, PROBLEM.key, "sm_90a", "error" if failed else "ok", cache_key=f"b{i}",
            error="link failed" if failed else None,
        ))
    # 5 built: 4 wrong, 5 hangs, 6/7/8 correct; 6 measured twice (its standing combines both
    # runs: a single lucky run does not rank it; tsopt.core.standing).
    store.record_measurement(c[4], measurement(g[4], None, "wrong"), "r1")
    store.record_measurement(c[5], measurement(g[5], None, "hang"), "r1")
    store.record_measurement(c[6], measurement(g[6], 40.0), "r1")
    store.record_measurement(c[6], measurement(g[6], 20.0), "r2")
    store.record_measurement(c[7], measurement(g[7], 20.0), "r1")
    store.record_measurement(c[8], measurement(g[8], 35.0), "r1")

    assert store.funnel(study) == {
        "proposed": 12, "dataflow_legal": 10, "ts_valid": 8, "tsopt_checked": 7,
        "built": 5, "correct": 3, "timed": 3,
    }
    assert list(store.funnel(study)) == [
        "proposed", "dataflow_legal", "ts_valid", "tsopt_checked", "built", "correct", "timed",
    ]
    assert store.rejections(study) == [
        ("dataflow", "dataflow.use_before_produce", 1, "tma_store uses smem before load"),
        ("ts", "ts.missing_release", 2, "schedule is missing ConsumerRelease (a)"),
        ("tsopt", "tsopt.warp_overlap", 1, "load and store share warp 0"),
        ("build", "build.error", 1, "link failed"),
        ("measure", "measure.hang", 1, "status hang"),
        ("measure", "measure.wrong", 1, "status wrong"),
    ]

    ranked = store.ranked(study)
    # Unpaired records (no ratio) rank by the median of their runs' times: 20, 30 (40 and 20), 35.
    assert [r.genome_hash for r in ranked] == [g[7].hash, g[6].hash, g[8].hash]
    assert [r.rank for r in ranked] == [1, 2, 3]
    assert [r.standing.median_us for r in ranked if r.standing] == [20.0, 30.0, 35.0]
    both_of_6 = next(r for r in ranked if r.genome_hash == g[6].hash)
    assert both_of_6.standing is not None and both_of_6.standing.measurements == 2
    assert both_of_6.run_id in ("r1", "r2") and both_of_6.build is not None
    assert [r.genome_hash for r in store.ranked(study, limit=1)] == [g[7].hash]
    assert store.measured_hashes(study) == {g[i].hash for i in (4, 5, 6, 7, 8)}


def test_a_batch_commits_together_or_not_at_all(store: Store) -> None:
    study = new_study(store)
    kept, lost = copy_genome(stages=1), copy_genome(stages=2)
    with store.batch():
        cid = store.add_candidate(study, kept, "seed")
        store.record_measurement(cid, measurement(kept, 12.0), "run-a")
        # Reads inside the batch see its own writes.
        assert store.funnel(study)["timed"] == 1
    with pytest.raises(RuntimeError, match="ingest interrupted"), store.batch():
        other = store.add_candidate(study, lost, "seed")
        store.record_measurement(other, measurement(lost, 9.0), "run-a")
        raise RuntimeError("ingest interrupted")
    assert [c.genome for c in store.candidates(study)] == [kept]
    assert [r.genome_hash for r in store.ranked(study)] == [kept.hash]
