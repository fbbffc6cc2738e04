"""Engines for a tsopt database URL: parsing, SQLite set-up, transaction modes.

SQLite is the default database and several processes share it (a tuning run
writes while a dashboard or a report reads), so every SQLite connection gets
WAL journalling (readers never block the writer), a busy timeout (a second
writer waits instead of failing) and foreign keys. WAL is a lasting property of
the file, so it is switched on only once the store has found the database to be
tsopt's and usable (:func:`allow_wal`): a refused database is left as it was. pysqlite's own implicit
transactions break SAVEPOINT and begin too late, so the driver is put in
autocommit mode and the engine emits ``BEGIN`` itself: deferred for reads,
``IMMEDIATE`` for writes, so that a read-then-write transaction takes the
write lock up front instead of failing with SQLITE_BUSY when it upgrades.

:func:`database_lock` is a lock across processes that holds no database transaction (a
file lock beside a SQLite file, an advisory lock on PostgreSQL), for work that spans several
transactions of tsopt's and Optuna's own engines: creating Optuna's tables, asking a study for
its next trial within its budget. :func:`unusable` turns a driver error into the one line that
says what is wrong with the database and what to do.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.util
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from tsopt.core.errors import DatabaseUnusable, UserInputError

SQLITE_BUSY_TIMEOUT_MS = 30_000
BEGIN_OPTION = "tsopt_sqlite_begin"


def parse_url(url: str) -> URL:
    """The parsed URL; raises :class:`UserInputError` naming a malformed one.

    A bare ``postgresql://`` means psycopg (3) to SQLAlchemy 2.1; when only
    psycopg2 is installed (tsopt's dev extra), it is used instead.
    """
    if not isinstance(url, str) or not url.strip():
        raise UserInputError(f"database URL {url!r} is empty; expected e.g. sqlite:///tsopt.db")
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise UserInputError(f"database URL {url!r} is not a SQLAlchemy URL: {exc}") from None
    if parsed.drivername == "postgresql" and not _importable("psycopg") and _importable("psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return parsed


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def display_url(url: URL) -> str:
    """The URL for messages, password masked."""
    return url.render_as_string(hide_password=True)


def is_sqlite_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and (
        url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
    )


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory ones."""
    if is_sqlite_memory(url) or not url.database or url.database.startswith("file:"):
        return None
    return Path(url.database).expanduser()


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL (a lasting property of the file) unless it already is.

    SQLite does not call the busy handler while another process creates the
    database file and switches it to WAL at the same moment: it answers
    "database is locked" at once. So the switch is retried until the busy
    timeout has passed.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


_WAL_ALLOWED: weakref.WeakSet[Engine] = weakref.WeakSet()


def allow_wal(engine: Engine) -> None:
    """Let ``engine``'s SQLite connections switch the file to WAL from now on (the store
    calls it once the database has passed its checks); pooled connections are closed, so the
    next one switches."""
    if engine.dialect.name != "sqlite" or is_sqlite_memory(engine.url):
        return  # no journal to switch; and disposing would drop an in-memory database
    _WAL_ALLOWED.add(engine)
    engine.dispose()


def _configure_sqlite(engine: Engine, memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if not memory and engine in _WAL_ALLOWED:
            _enable_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def open_engine(url: str) -> Engine:
    """An engine for ``url``; creates the parent directory of a SQLite file if missing.

    Raises :class:`UserInputError` naming the URL when it is malformed or names
    a database driver that is not installed.
    """
    parsed = parse_url(url)
    kwargs: dict[str, Any] = {}
    sqlite = parsed.get_backend_name() == "sqlite"
    memory = is_sqlite_memory(parsed)
    if sqlite:
        path = sqlite_path(parsed)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserInputError(
                    f"database URL {url!r}: cannot create directory {str(path.parent)!r}: "
                    f"{exc.strerror}"
                ) from None
        if memory:
            # One shared connection, or every checkout would see its own empty database.
            kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError, ArgumentError) as exc:
        raise UserInputError(
            f"database URL {display_url(parsed)!r}: cannot load its driver ({exc})"
        ) from None
    if sqlite:
        _configure_sqlite(engine, memory)
    return engine


def write_engine(engine: Engine) -> Engine:
    """The same engine (same pool) whose SQLite transactions take the write lock at BEGIN."""
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})


# -- locks across processes -----------------------------------------------------------------
_MEMORY_LOCKS: dict[str, threading.Lock] = {}
_MEMORY_LOCKS_GUARD = threading.Lock()


def _lock_number(name: str) -> int:
    """A signed 64-bit number for a lock name (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextmanager
def database_lock(engine: Engine, name: str) -> Iterator[None]:
    """Hold the lock ``name`` of this database across processes until the block ends.

    SQLite file: ``flock`` on a file beside the database (``<db>.lock``); SQLite's own lock
    cannot be used, since the work inside runs on other connections (Optuna's). PostgreSQL:
    a session advisory lock on a connection of its own. In-memory SQLite: a lock of this
    process. A SQLite database whose directory is read-only gets no lock file: nothing can be
    written there anyway, and the write itself says so.
    """
    url = engine.url
    if url.get_backend_name() == "sqlite" and not is_sqlite_memory(url):
        path = sqlite_path(url)
        if path is None:
            yield
            return
        lock_path = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                yield
                return
            raise
        try:
            # One byte per name: locks of different names do not wait for each other.
            offset = _lock_number(name) % (1 << 30)
            fcntl.lockf(fd, fcntl.LOCK_EX, 1, offset)
            try:
                yield
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
        finally:
            os.close(fd)
        return
    if url.get_backend_name() == "postgresql":
        number = _lock_number(name)
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:n)"), {"n": number})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:n)"), {"n": number})
                conn.commit()
        return
    with _MEMORY_LOCKS_GUARD:
        lock = _MEMORY_LOCKS.setdefault(f"{url}|{name}", threading.Lock())
    with lock:
        yield


# -- what a driver error means ----------------------------------------------------------------
_ADVICE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("readonly", "read-only", "read only"),
     "is read-only: give this user write access to the file and its directory (SQLite writes "
     "a -wal and a -shm file beside it), or copy it somewhere writable and pass --db"),
    (("malformed", "not a database", "file is encrypted", "disk i/o error", "database corrupt"),
     "is corrupted: restore it from a backup or start a new one with --db; `tsopt db check` "
     "shows what is damaged"),
    (("no such column", "no such table", "has no column", "does not exist", "undefinedcolumn",
      "undefinedtable"),
     "does not have the tables this tsopt expects (a table or column is missing: altered by "
     "hand, or written by another version); `tsopt db check` shows which"),
    (("database is locked", "database table is locked", "lock timeout"),
     "is locked by another process beyond the wait; retry when it is done"),
    (("unable to open database file", "could not connect", "connection refused",
      "could not translate host", "password authentication failed", "timeout expired"),
     "cannot be opened: check that it exists and is reachable, and the credentials"),
)


def describe_failure(reason: str) -> str:
    """What a database error message means for the user, and what to do."""
    lowered = reason.lower()
    for words, advice in _ADVICE:
        if any(w in lowered for w in words):
            return advice
    return "cannot be used; `tsopt db check` says more"


def first_line(exc: BaseException) -> str:
    """The driver's own message (without SQLAlchemy's statement and link), first line."""
    orig = getattr(exc, "orig", None)
    text_ = str(orig if orig is not None else exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__


_CANNOT_OPEN = _ADVICE[-1][1]


def unusable(exc: BaseException, url: URL | str) -> UserInputError:
    """The error to raise for a driver error: a :class:`DatabaseUnusable` naming the
    database, what the error means and the error; a URL that leads to no database at all
    (unreachable, refused, no such file) is bad input instead (``cannot open database``)."""
    shown = display_url(url) if isinstance(url, URL) else url
    parsed = url if isinstance(url, URL) else None
    path = sqlite_path(parsed) if parsed is not None else None
    where = f"database {str(path)!r}" if path is not None else f"database {shown!r}"
    reason = first_line(exc)
    advice = describe_failure(reason)
    if advice == _CANNOT_OPEN:
        return UserInputError(f"cannot open database {shown!r}: {reason}")
    return DatabaseUnusable(f"{where} {advice} ({reason})")


def is_database_failure(exc: BaseException) -> bool:
    """A driver error that says the database cannot be used (an integrity error, which a
    store resolves itself, is not one)."""
    from sqlalchemy.exc import IntegrityError

    if isinstance(exc, IntegrityError) or isinstance(exc, sqlite3.IntegrityError):
        return False
    return isinstance(exc, DBAPIError | sqlite3.DatabaseError)
