"""Engines for a tsopt database URL: parsing, SQLite set-up, transaction modes.

SQLite is the default database and several processes share it (a tuning run
writes while a dashboard or a report reads), so every SQLite connection gets
WAL journalling (readers never block the writer), a busy timeout (a second
writer waits instead of failing) and foreign keys. pysqlite's own implicit
transactions break SAVEPOINT and begin too late, so the driver is put in
autocommit mode and the engine emits ``BEGIN`` itself: deferred for reads,
``IMMEDIATE`` for writes, so that a read-then-write transaction takes the
write lock up front instead of failing with SQLITE_BUSY when it upgrades.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from tsopt.core.errors import UserInputError

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


def _configure_sqlite(engine: Engine, memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if not memory:
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
