"""The store: the one API the rest of tsopt uses to record and read results.

``Store(url)`` opens (and creates or migrates) the database; every method
runs in its own short transaction (or in the caller's ``with store.batch():``)
and returns plain data (``tsopt.core.records`` and ``tsopt.db.views``), never ORM
objects. Writes are idempotent where a caller may repeat them (a candidate
proposed twice, a bundle ingested twice) and never overwrite a recorded
result (the one exception: a cached build failure gives way to a later
success under the same cache key), so nothing already recorded is lost.

Several processes may share one study. Each ``tsopt tune`` registers a run (pid, host,
heartbeat: :meth:`Store.start_run`); a candidate is claimed by the run that evaluates it
(:meth:`Store.claim_candidate`), so no two runs build the same genome; a study left
``running`` by a run that is gone (killed by the system) is marked ``killed``, with when,
by the next store that opens the database (:meth:`Store.reap_killed`).

A database that cannot be used (corrupted, read-only, altered, of a newer schema) raises
:class:`~tsopt.core.errors.DatabaseUnusable` naming it and saying what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from tsopt.core.bundle import artifact_checksums
from tsopt.core.errors import DatabaseUnusable, UserInputError
from tsopt.core.genome import Genome
from tsopt.core.names import check_study_name
from tsopt.core.problem import Problem
from tsopt.core.records import (
    DEFAULT_LAUNCH,
    MEASURE_STATUSES,
    BuildResult,
    Measurement,
    TsSearch,
    Verdict,
)
from tsopt.core.space import JudgedKey
from tsopt.db import queries
from tsopt.db.engine import (
    allow_wal,
    database_lock,
    display_url,
    is_database_failure,
    is_sqlite_memory,
    open_engine,
    parse_url,
    sqlite_path,
    unusable,
    write_engine,
)
from tsopt.db.migrate import ensure_optuna_schema, foreign_tables, schema_problems, upgrade
from tsopt.db.models import (
    BUILD_STATUSES,
    ORIGINS,
    RUN_STATUSES,
    STUDY_STATUSES,
    BaselineRow,
    BuildRow,
    CandidateRow,
    JudgedRow,
    MeasurementRow,
    RunRow,
    StudyRow,
    TsSearchRow,
    VerdictRow,
    utcnow,
)
from tsopt.db.views import CandidateInfo, RankedCandidate, Rejection, StudyInfo

if TYPE_CHECKING:
    import optuna

Row = TypeVar("Row", bound=Any)

# Optuna's own engine on a shared SQLite file must wait for our writers too.
_OPTUNA_SQLITE_TIMEOUT_S = 30

HEARTBEAT_S = 5.0
"""How often a run's heartbeat is written (:class:`tsopt.search.driver.Driver` beats)."""
STALE_S = 60.0
"""A run on another host not heard of for this long is gone."""
STALE_LOCAL_S = 600.0
"""A run on this host is gone at once when its process is; one whose process lives (a build
may hold the interpreter a while) is gone when not heard of for this long (its pid reused)."""
HOST = socket.gethostname()


@dataclass(frozen=True)
class Claim:
    """The outcome of :meth:`Store.claim_candidate`: the candidate, whether this run now holds
    it (new, already its own, or taken over from a run that is gone), else the live run that
    does, and what is recorded of it."""

    candidate_id: int
    mine: bool
    created: bool
    holder: str | None
    info: CandidateInfo


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def run_alive(row: RunRow) -> bool:
    """A run is alive while it says it runs and: on this host, its process exists and was
    heard of within :data:`STALE_LOCAL_S`; on another, it was heard of within :data:`STALE_S`."""
    if row.status != "running":
        return False
    local = row.host == HOST
    heard = utcnow() - queries.aware(row.heartbeat_at)
    if heard > timedelta(seconds=STALE_LOCAL_S if local else STALE_S):
        return False
    return not local or _pid_alive(row.pid)


VERDICT_KEY_LENGTH = 255  # tsopt_verdict.verdict_key is VARCHAR(255)


def stored_verdict_key(verdict_key: str) -> str:
    """The verdict key as stored: itself when it fits the column, else ``sha256:<digest>``
    (a space's key spells out the genes that reach TS and may be longer; SQLite would keep
    it whole, PostgreSQL refuses it)."""
    if len(verdict_key) <= VERDICT_KEY_LENGTH:
        return verdict_key
    return "sha256:" + hashlib.sha256(verdict_key.encode()).hexdigest()


@dataclass(frozen=True)
class RecordedBuild:
    """A candidate's build as the database recorded it: ``files`` the {name: sha256} of its
    artifact's bundled files (None for a build recorded before revision 0007)."""

    candidate_id: int
    genome_hash: str
    problem_key: str
    arch: str
    status: str
    artifact_dir: str | None
    files: dict[str, str] | None


class Store:
    """tsopt's database: studies, candidates, the verdict and build caches, measurements.

    Raises :class:`UserInputError` naming the URL when it is malformed, its
    driver is missing or the database cannot be opened.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._parsed = parse_url(url)
        self._engine = open_engine(url)
        try:
            with self._engine.connect() as conn:
                foreign = foreign_tables(conn)
            if foreign:
                shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
                raise DatabaseUnusable(
                    f"database {self._where()} belongs to another program: it holds tables "
                    f"tsopt did not make ({shown}) and none of tsopt's; it was left as it "
                    "was: pass --db to a new file for tsopt")
            upgrade(self._engine)
            with self._engine.connect() as conn:
                problems = schema_problems(conn, optuna=False)
        except DatabaseUnusable:
            self._engine.dispose()
            raise
        except (DBAPIError, sqlite3.Error) as exc:  # unreachable, corrupted, read-only ...
            self._engine.dispose()
            if not is_database_failure(exc):
                raise
            raise unusable(exc, self._parsed) from None
        if problems:
            self._engine.dispose()
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise DatabaseUnusable(
                f"database {self._where()} does not have the tables this tsopt expects: "
                f"{problems[0]}{more}; it was altered by hand or by another program: restore "
                "it from a backup, or pass --db to another database (`tsopt db check` lists "
                "every difference)")
        allow_wal(self._engine)
        self._read = sessionmaker(self._engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(write_engine(self._engine), expire_on_commit=False)
        self._local = threading.local()
        self._optuna_schema_ready = False
        try:
            self.reap_killed()
        except DatabaseUnusable as exc:
            # A read-only database is read as it is (a report needs no write); any other
            # failure shows again at the first query, with its message.
            if "read-only" not in str(exc):
                raise

    def _where(self) -> str:
        path = sqlite_path(self._parsed)
        return repr(str(path)) if path is not None else repr(display_url(self._parsed))

    def _failed(self, exc: BaseException) -> UserInputError:
        return unusable(exc, self._parsed)

    # -- plumbing -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({display_url(self._parsed)!r})"

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run every store call inside the block in one transaction (in this thread).

        All or nothing: an exception leaving the block rolls back every write
        made in it. Use it to ingest a bundle atomically, or to record many
        rows quickly (one commit instead of one per call). Nested blocks join
        the outer one.
        """
        if getattr(self._local, "session", None) is not None:
            yield
            return
        try:
            with self._write_sessions() as session, session.begin():
                self._local.session = session
                try:
                    yield
                finally:
                    self._local.session = None
        except (DBAPIError, sqlite3.Error) as exc:
            if not is_database_failure(exc):
                raise
            raise self._failed(exc) from None

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction for every store call in the block (in this thread) *and* for
        Optuna's storage (:meth:`optuna_storage` hands out one bound to it meanwhile): all of
        it is written, or none of it (an ingest refused half-way leaves no study, no trial,
        no row behind). Optuna's tables must exist before (they are created, if need be, on
        entry)."""
        import optuna

        if getattr(self._local, "session", None) is not None:
            raise RuntimeError("Store.atomic() cannot be nested in a batch")
        storage = self.optuna_storage()
        try:
            with write_engine(self._engine).connect() as conn, conn.begin():
                # Both sessions join the connection's transaction; each commit of theirs only
                # releases a savepoint, and the block's end commits all.
                session = Session(bind=conn, join_transaction_mode="create_savepoint",
                                  expire_on_commit=False)
                bound = scoped_session(sessionmaker(bind=conn,
                                                    join_transaction_mode="create_savepoint"))
                storage.scoped_session = bound
                self._local.session = session
                self._local.optuna = storage
                try:
                    yield
                    session.commit()
                finally:
                    self._local.session = None
                    self._local.optuna = None
                    session.close()
                    bound.remove()
        except optuna.exceptions.StorageInternalError as exc:
            cause = exc.__cause__
            if cause is None or not is_database_failure(cause):
                raise
            raise self._failed(cause) from None
        except (DBAPIError, sqlite3.Error) as exc:
            if not is_database_failure(exc):
                raise
            raise self._failed(exc) from None
        finally:
            storage.engine.dispose()

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        batched: Session | None = getattr(self._local, "session", None)
        if batched is not None:
            yield batched
            return
        try:
            with self._read() as session, session.begin():
                yield session
        except (DBAPIError, sqlite3.Error) as exc:
            if not is_database_failure(exc):
                raise
            raise self._failed(exc) from None

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        batched: Session | None = getattr(self._local, "session", None)
        if batched is not None:
            yield batched
            return
        try:
            with self._write_sessions() as session, session.begin():
                yield session
        except (DBAPIError, sqlite3.Error) as exc:
            if not is_database_failure(exc):
                raise
            raise self._failed(exc) from None

    @contextmanager
    def study_lock(self, name: str) -> Iterator[None]:
        """Hold study ``name``'s lock across processes (no transaction held): asking Optuna
        for a trial within the budget, taking up a trial another run left."""
        with database_lock(self._engine, f"study:{name}"):
            yield

    def optuna_storage(self) -> optuna.storages.RDBStorage:
        """Optuna's RDB storage on the same database, so optuna-dashboard reads it too.

        Optuna's tables are created under a lock across processes the first time (two
        processes creating them at once collide). Inside :meth:`atomic` this is the storage
        bound to the block's transaction. A schema of a newer Optuna, or tables that lack a
        column, raise DatabaseUnusable."""
        import optuna

        bound = getattr(self._local, "optuna", None)
        if bound is not None:
            return bound  # type: ignore[no-any-return]
        if is_sqlite_memory(self._parsed):
            raise UserInputError(
                f"database URL {self._url!r} is in memory: Optuna would open a second, "
                "separate database; use a file (sqlite:///tsopt.db)"
            )
        kwargs: dict[str, Any] = {}
        if self._parsed.get_backend_name() == "sqlite":
            kwargs["connect_args"] = {"timeout": _OPTUNA_SQLITE_TIMEOUT_S}
        # The parsed URL, not the raw string: it carries the driver chosen by parse_url.
        url = self._parsed.render_as_string(hide_password=False)

        def make() -> optuna.storages.RDBStorage:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)

        try:
            if not self._optuna_schema_ready:
                ensure_optuna_schema(self._engine, make)
                with self._engine.connect() as conn:
                    problems = schema_problems(conn)
                if problems:
                    raise DatabaseUnusable(
                        f"database {self._where()} does not have the tables Optuna expects: "
                        f"{problems[0]}; restore it from a backup, or pass --db to another "
                        "database (`tsopt db check` lists every difference)")
                self._optuna_schema_ready = True
            return make()
        except RuntimeError as exc:
            # Optuna's own refusal of a schema it does not know (a newer Optuna's).
            if "compatible with the table schema" not in str(exc):
                raise
            raise DatabaseUnusable(
                f"database {self._where()} holds Optuna tables of another Optuna version: "
                f"{str(exc).strip().splitlines()[0]}") from None
        except optuna.exceptions.StorageInternalError as exc:
            cause = exc.__cause__
            if cause is None or not is_database_failure(cause):
                raise
            raise self._failed(cause) from None
        except (DBAPIError, sqlite3.Error) as exc:
            if not is_database_failure(exc):
                raise
            raise self._failed(exc) from None

    def _study_row(self, session: Session, name: str) -> StudyRow:
        # Remembered per session: a batch of thousands of writes looks the study up once.
        known: dict[str, StudyRow] = session.info.setdefault("tsopt_studies", {})
        row = known.get(name) or session.scalar(select(StudyRow).where(StudyRow.name == name))
        if row is None:
            raise UserInputError(
                f"no study named {name!r} in {display_url(self._parsed)!r}"
            )
        known[name] = row
        return row

    @staticmethod
    def _candidate_row(session: Session, candidate_id: int) -> CandidateRow:
        row = session.get(CandidateRow, candidate_id)
        if row is None:
            raise ValueError(f"no candidate with id {candidate_id}")
        return row

    @staticmethod
    def _insert_or_get(session: Session, row: Row, lookup: Callable[[], Row | None]) -> Row:
        """Insert ``row`` unless ``lookup`` finds it; a concurrent insert of the same key wins."""
        existing = lookup()
        if existing is not None:
            return existing
        if session.get_bind().dialect.name == "sqlite":
            # Writes hold SQLite's write lock from BEGIN: nobody can insert in between.
            session.add(row)
            session.flush()
            return row
        try:
            with session.begin_nested():
                session.add(row)
        except IntegrityError:
            found = lookup()
            if found is None:
                raise
            return found
        return row

    # -- studies ------------------------------------------------------------------------
    def create_or_get_study(
        self, name: str, space: str, problem: Problem, arch: str, sampler: str,
        config: dict[str, Any], launch: str | None = None,
    ) -> StudyInfo:
        """The study called ``name``, created if new, measured in the ``launch`` mode (None:
        an existing study's own, :data:`~tsopt.core.records.DEFAULT_LAUNCH` for a new one).

        An existing study keeps its recorded sampler, config and launch mode. Raises
        :class:`UserInputError` when it exists for another space, problem, arch or (asked
        for) launch mode: its measurements would not compare with the new ones.
        """
        check_study_name(name)
        with self._writing() as session:
            fresh = StudyRow(
                name=name, space=space, problem_key=problem.key, problem_json=problem.to_json(),
                arch=arch, sampler=sampler, status="running",
                config_json=json.dumps(config, sort_keys=True), optuna_study_name=name,
                launch=launch or DEFAULT_LAUNCH,
            )

            def lookup() -> StudyRow | None:
                return session.scalar(select(StudyRow).where(StudyRow.name == name))

            row = self._insert_or_get(session, fresh, lookup)
            clash = [
                f"{field} {have!r} (asked for {want!r})"
                for field, have, want in (
                    ("space", row.space, space),
                    ("problem", row.problem_key, problem.key),
                    ("arch", row.arch, arch),
                    ("launch mode", row.launch, launch or row.launch),
                )
                if have != want
            ]
            if clash:
                raise UserInputError(
                    f"study {name!r} already exists with " + ", ".join(clash)
                    + "; choose another study name"
                )
            return queries.study_info(row)

    def get_study(self, name: str) -> StudyInfo | None:
        with self._reading() as session:
            row = session.scalar(select(StudyRow).where(StudyRow.name == name))
            return queries.study_info(row) if row is not None else None

    def list_studies(self) -> list[StudyInfo]:
        """Every study, oldest first."""
        with self._reading() as session:
            rows = session.scalars(select(StudyRow).order_by(StudyRow.created_at, StudyRow.id))
            return [queries.study_info(r) for r in rows]

    def set_study_status(self, name: str, status: str) -> None:
        if status not in STUDY_STATUSES:
            raise ValueError(f"study status {status!r} is not one of {STUDY_STATUSES}")
        with self._writing() as session:
            row = self._study_row(session, name)
            row.status = status
            row.updated_at = utcnow()
            if status != "killed":
                row.killed_at = None

    # -- runs ---------------------------------------------------------------------------
    def start_run(self, study: str, run_id: str) -> int:
        """Register this process as a run of ``study`` (status ``running``); returns how many
        other runs of it are alive now."""
        with self._writing() as session:
            row = self._study_row(session, study)
            others = [r for r in session.scalars(select(RunRow).where(
                RunRow.study_id == row.id, RunRow.status == "running")) if run_alive(r)]
            now = utcnow()
            session.add(RunRow(run_id=run_id, study_id=row.id, pid=os.getpid(), host=HOST,
                               status="running", started_at=now, heartbeat_at=now))
            row.status, row.killed_at, row.updated_at = "running", None, now
            return len(others)

    def heartbeat(self, run_id: str) -> None:
        """This run is alive (the driver writes it every :data:`HEARTBEAT_S`)."""
        with self._writing() as session:
            session.execute(update(RunRow).where(RunRow.run_id == run_id,
                                                 RunRow.status == "running")
                            .values(heartbeat_at=utcnow()))

    def finish_run(self, run_id: str, status: str) -> str:
        """End a run; the study takes ``status`` unless another of its runs is still alive
        (then it stays ``running``). Returns the study's status."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status {status!r} is not one of {RUN_STATUSES}")
        with self._writing() as session:
            run = session.scalar(select(RunRow).where(RunRow.run_id == run_id))
            if run is None:
                raise ValueError(f"no run {run_id!r}")
            run.status, run.finished_at = status, utcnow()
            study = session.get(StudyRow, run.study_id)
            assert study is not None
            others = [r for r in session.scalars(select(RunRow).where(
                RunRow.study_id == study.id, RunRow.status == "running",
                RunRow.run_id != run_id)) if run_alive(r)]
            study_status = "running" if others else (
                status if status in STUDY_STATUSES else "interrupted")
            study.status, study.updated_at = study_status, utcnow()
            if study_status != "killed":
                study.killed_at = None
            return study_status

    def run_alive(self, run_id: str) -> bool:
        with self._reading() as session:
            row = session.scalar(select(RunRow).where(RunRow.run_id == run_id))
            return row is not None and run_alive(row)

    def live_runs(self, study: str) -> set[str]:
        """The runs of ``study`` alive now."""
        with self._reading() as session:
            row = self._study_row(session, study)
            return {r.run_id for r in session.scalars(select(RunRow).where(
                RunRow.study_id == row.id, RunRow.status == "running")) if run_alive(r)}

    def reap_killed(self) -> list[str]:
        """Mark every study left ``running`` with no live run (its process killed by the
        system, the machine gone) as ``killed``, with when it was last heard of, and its dead
        runs the same. Returns the names marked. Runs when a store opens the database: the
        next command to touch a killed study says so."""
        stale_before = utcnow() - timedelta(seconds=STALE_S)
        with self._reading() as session:
            running = list(session.scalars(select(StudyRow).where(StudyRow.status == "running")))
            suspects = []
            for study in running:
                runs = list(session.scalars(select(RunRow).where(RunRow.study_id == study.id)))
                if any(run_alive(r) for r in runs):
                    continue
                if not runs and queries.aware(study.updated_at) > stale_before:
                    continue  # just created; its run registers in a moment
                suspects.append(study.id)
        if not suspects:
            return []
        marked = []
        with self._writing() as session:
            for study_id in suspects:
                study = session.get(StudyRow, study_id)
                if study is None or study.status != "running":
                    continue
                runs = list(session.scalars(select(RunRow).where(RunRow.study_id == study_id)))
                if any(run_alive(r) for r in runs):
                    continue
                dead = [r for r in runs if r.status == "running"]
                heard = [queries.aware(r.heartbeat_at) for r in dead] or [
                    queries.aware(study.updated_at)]
                for r in dead:
                    r.status, r.finished_at = "killed", queries.aware(r.heartbeat_at)
                study.status, study.killed_at = "killed", max(heard)
                marked.append(study.name)
        return marked

    # -- candidates ---------------------------------------------------------------------
    def add_candidate(
        self, study: str, genome: Genome, origin: str, trial_number: int | None = None,
    ) -> int:
        """The candidate id of ``genome`` in ``study``; added if new, else the existing id."""
        with self._writing() as session:
            study_row, fresh = self._new_candidate_row(session, study, genome, origin, trial_number)

            def lookup() -> CandidateRow | None:
                return session.scalar(select(CandidateRow).where(
                    CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome.hash,
                ))

            return self._insert_or_get(session, fresh, lookup).id

    def _new_candidate_row(
        self, session: Session, study: str, genome: Genome, origin: str, trial_number: int | None,
    ) -> tuple[StudyRow, CandidateRow]:
        """The study's row and an unsaved candidate row for ``genome``; the origin and the
        genome's space checked against the study."""
        if origin not in ORIGINS:
            raise ValueError(f"candidate origin {origin!r} is not one of {ORIGINS}")
        study_row = self._study_row(session, study)
        if genome.space != study_row.space:
            raise UserInputError(
                f"genome {genome.short_hash} is of space {genome.space!r}, "
                f"but study {study!r} searches space {study_row.space!r}"
            )
        return study_row, CandidateRow(
            study_id=study_row.id, genome_hash=genome.hash, genome_json=genome.canonical_json(),
            origin=origin, trial_number=trial_number,
        )

    def candidate_id(self, study: str, genome_hash: str) -> int | None:
        with self._reading() as session:
            study_row = self._study_row(session, study)
            return session.scalar(select(CandidateRow.id).where(
                CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome_hash,
            ))

    def set_trial_number(self, candidate_id: int, n: int) -> None:
        with self._writing() as session:
            self._candidate_row(session, candidate_id).trial_number = n

    def claim_candidate(
        self, study: str, genome: Genome, origin: str, trial_number: int | None, run_id: str,
    ) -> Claim:
        """Add ``genome`` to ``study`` held by run ``run_id``, or find it; this run holds it
        when it is new, already this run's, or held by no live run (taken over: a run killed
        part-way leaves its candidates to the next). Otherwise the live run that holds it is
        named, and this run must not evaluate it (it waits for that run's outcome)."""
        with self._writing() as session:
            study_row, fresh = self._new_candidate_row(session, study, genome, origin, trial_number)
            fresh.claimed_by = run_id

            def lookup() -> CandidateRow | None:
                return session.scalar(select(CandidateRow).where(
                    CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome.hash,
                ).with_for_update())

            row = self._insert_or_get(session, fresh, lookup)
            created = row is fresh
            holder = None
            if not created and row.claimed_by != run_id:
                claimer = None if row.claimed_by is None else session.scalar(
                    select(RunRow).where(RunRow.run_id == row.claimed_by))
                if claimer is not None and run_alive(claimer):
                    holder = claimer.run_id
                else:
                    row.claimed_by = run_id
            session.flush()
            info = queries.candidates(session, study_row, row.id)[0]
            return Claim(row.id, holder is None, created, holder, info)

    def candidate(self, study: str, candidate_id: int) -> tuple[CandidateInfo, str | None]:
        """What is recorded of one candidate, and the live run holding it (None when none)."""
        with self._reading() as session:
            study_row = self._study_row(session, study)
            found = queries.candidates(session, study_row, candidate_id)
            if not found:
                raise ValueError(f"no candidate {candidate_id} in study {study!r}")
            row = self._candidate_row(session, candidate_id)
            claimer = None if row.claimed_by is None else session.scalar(
                select(RunRow).where(RunRow.run_id == row.claimed_by))
            return found[0], (claimer.run_id if claimer is not None and run_alive(claimer)
                              else None)

    # -- verdict cache ------------------------------------------------------------------
    def find_verdict(self, space: str, verdict_key: str) -> Verdict | None:
        """The cached verdict (``cached=True``; ``genome_hash`` of the genome first judged)."""
        verdict_key = stored_verdict_key(verdict_key)
        with self._reading() as session:
            row = session.scalar(select(VerdictRow).where(
                VerdictRow.space == space, VerdictRow.verdict_key == verdict_key,
            ))
            return queries.verdict_record(row) if row is not None else None

    def record_verdict(
        self, candidate_id: int, space: str, verdict_key: str, verdict: Verdict,
    ) -> None:
        """Attach the verdict to the candidate, reusing the cached row for the key if present.

        The key caches the TS gate, which every genome of one key shares: a TS (or dataflow)
        rejection is one row for all of them. Past TS, tsopt's checks judge the genome itself
        (they see genes the key leaves out), so a ``tsopt`` or ``ok`` verdict is also kept in a
        row of its own genome, and the candidate points at that one: never at a verdict
        another genome of the key got.
        """
        keys = [stored_verdict_key(verdict_key)]
        if verdict.stage in ("tsopt", "ok"):
            keys.append(stored_verdict_key(f"{verdict_key}|genome={verdict.genome_hash}"))
        with self._writing() as session:
            candidate = self._candidate_row(session, candidate_id)
            for key in keys:
                fresh = VerdictRow(
                    space=space, verdict_key=key, genome_hash=verdict.genome_hash,
                    valid=verdict.valid, stage=verdict.stage, rule=verdict.rule,
                    message=verdict.message, seconds=verdict.seconds, domain=verdict.domain,
                )

                def lookup(key: str = key) -> VerdictRow | None:
                    return session.scalar(select(VerdictRow).where(
                        VerdictRow.space == space, VerdictRow.verdict_key == key,
                    ))

                candidate.verdict_id = self._insert_or_get(session, fresh, lookup).id

    # -- whole verdicts, shared across studies --------------------------------------------
    def find_judged(self, key: JudgedKey) -> Verdict | None:
        """The whole verdict recorded under ``key`` (any study's), ``cached=True``; None when
        this genome was never judged for this problem, arch and verifier version."""
        with self._reading() as session:
            row = session.scalar(select(JudgedRow).where(
                JudgedRow.space == key.space, JudgedRow.genome_hash == key.genome_hash,
                JudgedRow.problem_key == key.problem_key, JudgedRow.arch == key.arch,
                JudgedRow.tool_version == key.tool_version,
            ))
            return queries.verdict_record(row) if row is not None else None

    def record_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        """Keep ``verdict`` under ``key`` (a concurrent writer of the same key wins: the
        verdict is the same)."""
        if verdict.genome_hash != key.genome_hash:
            raise UserInputError(f"verdict of genome {verdict.genome_hash[:12]} recorded under "
                                 f"genome {key.genome_hash[:12]}")
        with self._writing() as session:
            fresh = JudgedRow(
                space=key.space, genome_hash=key.genome_hash, problem_key=key.problem_key,
                arch=key.arch, tool_version=key.tool_version, valid=verdict.valid,
                stage=verdict.stage, rule=verdict.rule, message=verdict.message,
                seconds=verdict.seconds, domain=verdict.domain,
            )

            def lookup() -> JudgedRow | None:
                return session.scalar(select(JudgedRow).where(
                    JudgedRow.space == key.space, JudgedRow.genome_hash == key.genome_hash,
                    JudgedRow.problem_key == key.problem_key, JudgedRow.arch == key.arch,
                    JudgedRow.tool_version == key.tool_version,
                ))

            self._insert_or_get(session, fresh, lookup)

    def supersede_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        """Keep ``verdict`` under ``key`` in place of the one recorded: a valid verdict whose
        exhaustive search was cut, judged again once a complete search of its schedule was
        recorded (``tsopt prove``)."""
        if verdict.genome_hash != key.genome_hash:
            raise UserInputError(f"verdict of genome {verdict.genome_hash[:12]} recorded under "
                                 f"genome {key.genome_hash[:12]}")
        with self._writing() as session:
            row = session.scalar(select(JudgedRow).where(
                JudgedRow.space == key.space, JudgedRow.genome_hash == key.genome_hash,
                JudgedRow.problem_key == key.problem_key, JudgedRow.arch == key.arch,
                JudgedRow.tool_version == key.tool_version,
            ))
            if row is None:
                session.add(JudgedRow(
                    space=key.space, genome_hash=key.genome_hash, problem_key=key.problem_key,
                    arch=key.arch, tool_version=key.tool_version, valid=verdict.valid,
                    stage=verdict.stage, rule=verdict.rule, message=verdict.message,
                    seconds=verdict.seconds, domain=verdict.domain))
                return
            row.valid, row.stage, row.rule = verdict.valid, verdict.stage, verdict.rule
            row.message, row.seconds, row.domain = verdict.message, verdict.seconds, verdict.domain

    def settle_verdict(self, space: str, verdict_key: str, verdict: Verdict) -> int:
        """Give the valid verdict rows a study's candidates point at (``verdict_key``'s and the
        genome's own, :meth:`record_verdict`) the message of ``verdict``, a valid verdict of
        the same genome judged again once its schedule's searches were complete (``tsopt
        prove``): the report then no longer counts it cut. How many rows changed."""
        if not verdict.valid:
            return 0
        keys = [stored_verdict_key(verdict_key),
                stored_verdict_key(f"{verdict_key}|genome={verdict.genome_hash}")]
        changed = 0
        with self._writing() as session:
            for row in session.scalars(select(VerdictRow).where(
                    VerdictRow.space == space, VerdictRow.verdict_key.in_(keys))).all():
                if row.valid and row.stage == "ok" and row.message != verdict.message:
                    row.message = verdict.message
                    changed += 1
        return changed

    def judged_count(self, space: str | None = None) -> int:
        """Whole verdicts kept (of ``space``, or all)."""
        from sqlalchemy import func

        with self._reading() as session:
            query = select(func.count(JudgedRow.id))
            if space is not None:
                query = query.where(JudgedRow.space == space)
            return int(session.scalar(query) or 0)

    # -- TS's exhaustive searches, shared across workers and studies --------------------
    def find_search(self, space: str, schedule: str, aliasing: str,
                    tool_version: str) -> TsSearch | None:
        """The exhaustive search recorded under this key (any worker's or study's), or None."""
        with self._reading() as session:
            row = session.scalar(select(TsSearchRow).where(
                TsSearchRow.space == space, TsSearchRow.schedule == schedule,
                TsSearchRow.aliasing == aliasing, TsSearchRow.tool_version == tool_version))
            return queries.search_record(row) if row is not None else None

    def find_searches(self, space: str, schedule: str, tool_version: str) -> list[TsSearch]:
        """Every search recorded for ``schedule`` (one per SMEM aliasing seen): what a worker
        about to verify a genome of that schedule is sent."""
        with self._reading() as session:
            rows = session.scalars(select(TsSearchRow).where(
                TsSearchRow.space == space, TsSearchRow.schedule == schedule,
                TsSearchRow.tool_version == tool_version).order_by(TsSearchRow.id)).all()
            return [queries.search_record(row) for row in rows]

    def record_search(self, search: TsSearch) -> None:
        """Keep ``search``. A row of the same key is replaced only by a search that says more
        (:meth:`TsSearch.supersedes`: complete against cut, or cut at a higher bound); a
        concurrent writer of the same outcome wins."""
        self._keep_search(search)

    def _keep_search(self, search: TsSearch) -> bool:
        """:meth:`record_search`; whether the row is now ``search``'s."""
        with self._writing() as session:
            fresh = _search_row(search)

            def lookup() -> TsSearchRow | None:
                return session.scalar(select(TsSearchRow).where(
                    TsSearchRow.space == search.space, TsSearchRow.schedule == search.schedule,
                    TsSearchRow.aliasing == search.aliasing,
                    TsSearchRow.tool_version == search.tool_version))

            kept = self._insert_or_get(session, fresh, lookup)
            if kept is fresh:
                return True
            if search.supersedes(queries.search_record(kept)):
                _fill_search_row(kept, search)
                return True
            return False

    def record_searches(self, searches: Iterable[TsSearch]) -> int:
        """Keep every search of ``searches`` not kept yet, or saying more than the row kept
        (:meth:`TsSearch.supersedes`), in one transaction (the shipped memo and proofs a study
        starts with, ``tsopt.search.ts_memo``); how many were new or replaced a row. A
        concurrent writer of the same keys is met by keeping them one by one
        (:meth:`record_search`)."""
        wanted: dict[tuple[str, str, str, str], TsSearch] = {}
        for search in searches:
            held = wanted.get(search.key)
            if held is None or search.supersedes(held):
                wanted[search.key] = search
        if not wanted:
            return 0
        versions = sorted({key[3] for key in wanted})
        try:
            with self._writing() as session:
                kept = {(row.space, row.schedule, row.aliasing, row.tool_version): row
                        for row in session.scalars(select(TsSearchRow).where(
                            TsSearchRow.tool_version.in_(versions)))}
                fresh = [s for key, s in wanted.items() if key not in kept]
                better = [(kept[key], s) for key, s in wanted.items()
                          if key in kept and s.supersedes(queries.search_record(kept[key]))]
                session.add_all([_search_row(s) for s in fresh])
                for row, search in better:
                    _fill_search_row(row, search)
            return len(fresh) + len(better)
        except IntegrityError:
            return sum(self._keep_search(search) for search in wanted.values())

    def searches(self) -> list[TsSearch]:
        """Every search kept, oldest first (the evidence the shipped memo is made from)."""
        with self._reading() as session:
            rows = session.scalars(select(TsSearchRow).order_by(TsSearchRow.id)).all()
            return [queries.search_record(row) for row in rows]

    def search_count(self) -> int:
        """Exhaustive searches kept."""
        from sqlalchemy import func

        with self._reading() as session:
            return int(session.scalar(select(func.count(TsSearchRow.id))) or 0)

    # -- build cache --------------------------------------------------------------------
    def find_build(self, cache_key: str) -> BuildResult | None:
        """The cached build (``cache_hit=True``) or None."""
        with self._reading() as session:
            row = session.scalar(select(BuildRow).where(BuildRow.cache_key == cache_key))
            return queries.build_record(row) if row is not None else None

    def record_build(self, candidate_id: int, build: BuildResult, node: str | None = None,
                     wait_s: float | None = None) -> None:
        """Attach the build to the candidate, caching it by ``build.cache_key``; ``node``
        (the Ray node or host whose worker built it) and ``wait_s`` (how long it waited for a
        build slot) are the candidate's, not the cached build's.

        A cached successful build is kept; a cached failure is replaced by a
        later success under the same key (a retry that worked).
        """
        if not build.cache_key:
            raise ValueError(f"build of {build.genome_hash[:12]} has no cache_key")
        if build.status not in BUILD_STATUSES:
            raise ValueError(f"build status {build.status!r} is not one of {BUILD_STATUSES}")
        values = dict(
            genome_hash=build.genome_hash, problem_key=build.problem_key, arch=build.arch,
            status=build.status, artifact_dir=build.artifact_dir, library=build.library,
            compile_seconds=build.compile_seconds, export_seconds=build.export_seconds,
            link_seconds=build.link_seconds, registers=build.registers,
            smem_bytes=build.smem_bytes, spill_bytes=build.spill_bytes, error=build.error,
            versions_json=json.dumps(build.versions, sort_keys=True),
        )
        # What ingest checks a bundle of this build against (a bundle's own manifest is
        # written by whoever last edited the bundle).
        files = (artifact_checksums(Path(build.artifact_dir))
                 if build.ok and build.artifact_dir and Path(build.artifact_dir).is_dir() else {})
        values["files_json"] = json.dumps(files, sort_keys=True) if files else None
        with self._writing() as session:
            candidate = self._candidate_row(session, candidate_id)

            def lookup() -> BuildRow | None:
                return session.scalar(select(BuildRow).where(BuildRow.cache_key == build.cache_key))

            fresh = BuildRow(cache_key=build.cache_key, **values)
            row = self._insert_or_get(session, fresh, lookup)
            if row.status != "ok" and build.ok:
                for key, value in values.items():
                    setattr(row, key, value)
            elif row.files_json is None and row.status == "ok" and files:
                row.files_json = values["files_json"]  # a build recorded before revision 0007
            candidate.build_id = row.id
            if node is not None:
                candidate.build_node = node[:255]
            if wait_s is not None:
                candidate.build_wait_s = max(0.0, wait_s)

    def build_nodes(self, study: str) -> dict[str, int]:
        """How many of the study's candidates each node built (recorded ones only)."""
        with self._reading() as session:
            study_id = self._study_row(session, study).id
            rows = session.execute(select(CandidateRow.build_node).where(
                CandidateRow.study_id == study_id, CandidateRow.build_node.is_not(None))).all()
        counts: dict[str, int] = {}
        for (node,) in rows:
            counts[node] = counts.get(node, 0) + 1
        return counts

    def recorded_build(self, study: str, genome_hash: str) -> RecordedBuild | None:
        """What this database recorded of the build of ``genome_hash`` in ``study``: None when
        the study has no such candidate or the candidate no build."""
        with self._reading() as session:
            study_row = session.scalar(select(StudyRow).where(StudyRow.name == study))
            if study_row is None:
                return None
            candidate = session.scalar(select(CandidateRow).where(
                CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome_hash))
            if candidate is None or candidate.build_id is None:
                return None
            row = session.get(BuildRow, candidate.build_id)
            if row is None:
                return None
            files = json.loads(row.files_json) if row.files_json is not None else None
            return RecordedBuild(candidate.id, row.genome_hash, row.problem_key, row.arch,
                                 row.status, row.artifact_dir, files)

    # -- measurements -------------------------------------------------------------------
    def record_measurement(self, candidate_id: int, m: Measurement, run_id: str,
                           wait_s: float | None = None) -> bool:
        """Record one timing of a candidate (``wait_s``: how long it waited for a GPU);
        False if this run already recorded it."""
        if m.status not in MEASURE_STATUSES:
            raise ValueError(f"measurement status {m.status!r} is not one of {MEASURE_STATUSES}")
        with self._writing() as session:
            self._candidate_row(session, candidate_id)

            def lookup() -> MeasurementRow | None:
                return session.scalar(select(MeasurementRow).where(
                    MeasurementRow.candidate_id == candidate_id, MeasurementRow.run_id == run_id,
                ))

            fields = m.to_dict()
            for derived in ("genome_hash", "problem_key"):
                fields.pop(derived)
            fields["conditions_json"] = json.dumps(fields.pop("conditions"), sort_keys=True)
            fields["per_m_json"] = json.dumps(fields.pop("per_m"), sort_keys=True)
            fresh = MeasurementRow(candidate_id=candidate_id, run_id=run_id,
                                   wait_s=None if wait_s is None else max(0.0, wait_s), **fields)
            return self._insert_or_get(session, fresh, lookup) is fresh

    def record_baseline(
        self, problem_key: str, name: str, device: str, run_id: str,
        median_us: float | None, p10_us: float | None, p90_us: float | None,
        rate: float | None, rate_unit: str,
    ) -> bool:
        """Record a vendor baseline timing; False if this run already recorded it."""
        with self._writing() as session:
            fresh = BaselineRow(
                problem_key=problem_key, name=name, device=device, run_id=run_id,
                median_us=median_us, p10_us=p10_us, p90_us=p90_us, rate=rate, rate_unit=rate_unit,
            )

            def lookup() -> BaselineRow | None:
                return session.scalar(select(BaselineRow).where(
                    BaselineRow.problem_key == problem_key, BaselineRow.name == name,
                    BaselineRow.run_id == run_id,
                ))

            return self._insert_or_get(session, fresh, lookup) is fresh

    def baselines(self, problem_key: str) -> list[dict[str, Any]]:
        """Every baseline recorded for a problem, oldest first, as plain dicts."""
        with self._reading() as session:
            rows = session.scalars(
                select(BaselineRow).where(BaselineRow.problem_key == problem_key)
                .order_by(BaselineRow.id)
            )
            return [
                dict(name=r.name, device=r.device, run_id=r.run_id, median_us=r.median_us,
                     p10_us=r.p10_us, p90_us=r.p90_us, rate=r.rate, rate_unit=r.rate_unit,
                     measured_at=queries.aware(r.measured_at))
                for r in rows
            ]

    # -- study views --------------------------------------------------------------------
    def funnel(self, study: str) -> dict[str, int]:
        """Counts: proposed, dataflow_legal, ts_valid, tsopt_checked, built, correct, timed."""
        with self._reading() as session:
            return queries.funnel(session, self._study_row(session, study))

    def rejections(self, study: str) -> list[Rejection]:
        """(stage, rule, count, example message) per reason; see :func:`tsopt.db.queries.rejections`."""
        with self._reading() as session:
            return queries.rejections(session, self._study_row(session, study))

    def ranked(self, study: str, limit: int | None = None) -> list[RankedCandidate]:
        """Correct, timed candidates, fastest first (best measurement each, ties by hash)."""
        with self._reading() as session:
            return queries.ranked(session, self._study_row(session, study), limit)

    def measured_hashes(self, study: str) -> set[str]:
        with self._reading() as session:
            return queries.measured_hashes(session, self._study_row(session, study))

    def candidates(self, study: str) -> list[CandidateInfo]:
        with self._reading() as session:
            return queries.candidates(session, self._study_row(session, study))


def _search_row(search: TsSearch) -> TsSearchRow:
    row = TsSearchRow(space=search.space, schedule=search.schedule, aliasing=search.aliasing,
                      tool_version=search.tool_version)
    _fill_search_row(row, search)
    return row


def _fill_search_row(row: TsSearchRow, search: TsSearch) -> None:
    row.error, row.bounded, row.seconds = search.error, search.bounded, search.seconds
    row.complete, row.domain = search.complete, search.domain
    row.states, row.max_states = search.states, search.max_states
