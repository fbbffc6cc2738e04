"""Alembic migrations of tsopt's tables, configured in code.

The configuration is built here rather than read from an ``alembic.ini`` so
that migrations run the same from a checkout and from an installed package.
``upgrade`` is safe to call from many processes at once: it does nothing when
the database is already at head, and otherwise migrates inside one
transaction that holds the write lock (SQLite ``BEGIN IMMEDIATE``) or an
advisory lock (PostgreSQL), so a second process waits and then finds the
tables already there.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from tsopt.core.errors import UserInputError
from tsopt.db.engine import display_url, write_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "tsopt_alembic_version"
# Any fixed 64-bit number: identifies tsopt's migration lock among PostgreSQL advisory locks.
_PG_LOCK_ID = 0x7450_5F4D_4947


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic config for tsopt's migrations, bound to a connection or a URL."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "tsopt ships at least one migration"
    return head


def current_revision(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _check_known(revision: str | None, engine: Engine) -> None:
    if revision is None:
        return
    script = ScriptDirectory.from_config(alembic_config())
    try:
        script.get_revision(revision)
    except CommandError:
        raise UserInputError(
            f"database {display_url(engine.url)!r} is at tsopt schema revision {revision!r}, "
            f"which this tsopt does not know (its newest is {head_revision()!r}): "
            "it was written by a newer tsopt"
        ) from None


def upgrade(engine: Engine) -> bool:
    """Bring tsopt's tables to the newest revision; returns True if anything was migrated."""
    head = head_revision()
    with engine.connect() as conn:
        revision = current_revision(conn)
    if revision == head:
        return False
    _check_known(revision, engine)
    with write_engine(engine).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK_ID})")
        # Re-read under the lock: another process may have migrated while we waited.
        if current_revision(conn) == head:
            return False
        command.upgrade(alembic_config(connection=conn), "head")
    return True
