"""The open database under every role of the store: the engine, its transactions, Optuna's
storage on it, and the row lookups the roles share.

``Database(url)`` opens (and creates or migrates) the database. A role's method runs in its
own short transaction (``_reading``/``_writing``) or in the caller's ``with store.batch():``
or ``with store.atomic():``; every failure of the database itself becomes
:class:`~tsopt.core.errors.DatabaseUnusable` naming it and saying what to do.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from tsopt.core.errors import DatabaseUnusable, UserInputError
from tsopt.core.genome import Genome
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
from tsopt.db.models import ORIGINS, CandidateRow, StudyRow

if TYPE_CHECKING:
    import optuna

Row = TypeVar("Row", bound=Any)

# Optuna's own engine on a shared SQLite file must wait for our writers too.
_OPTUNA_SQLITE_TIMEOUT_S = 30


class Database:
    """One database opened for tsopt: checked (not another program's, the tables this tsopt
    expects), migrated to the newest revision, with its sessions.

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({display_url(self._parsed)!r})"

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
        with self._transaction(self._read) as session:
            yield session

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        with self._transaction(self._write_sessions) as session:
            yield session

    @contextmanager
    def _transaction(self, sessions: Callable[[], Any]) -> Iterator[Session]:
        """A transaction on a session from ``sessions`` (the batch's own inside
        :meth:`batch`), a database failure raised as this database's error."""
        batched: Session | None = getattr(self._local, "session", None)
        if batched is not None:
            yield batched
            return
        try:
            with sessions() as session, session.begin():
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

    # -- rows the roles share ------------------------------------------------------------
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
