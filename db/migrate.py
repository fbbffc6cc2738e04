"""Alembic migrations of tsopt's tables, configured in code.

The configuration is built here rather than read from an ``alembic.ini`` so
that migrations run the same from a checkout and from an installed package.
``upgrade`` is safe to call from many processes at once: it does nothing when
the database is already at head, and otherwise migrates inside one
transaction that holds the write lock (SQLite ``BEGIN IMMEDIATE``) or an
advisory lock (PostgreSQL), so a second process waits and then finds the
tables already there. Optuna's tables are created the same way (:func:`ensure_optuna_schema`),
under a lock across processes: Optuna creating them from two processes at once fails ("table
trial_params already exists"). :func:`schema_problems` lists what a database lacks of the
tables it should have (``tsopt db check``, and every store that opens it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Engine, MetaData, inspect
from sqlalchemy.engine import Connection

from tsopt.core.errors import DatabaseUnusable
from tsopt.db.engine import database_lock, display_url, write_engine
from tsopt.db.models import Base

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
        raise DatabaseUnusable(
            f"database {display_url(engine.url)!r} is at tsopt schema revision {revision!r}, "
            f"which this tsopt does not know (its newest is {head_revision()!r}): it was "
            "written by a newer tsopt; upgrade tsopt, or pass --db to another database"
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


OPTUNA_TABLES = ("studies", "trials", "version_info", "alembic_version")


def optuna_metadata() -> MetaData:
    from optuna.storages._rdb import models  # Optuna's own table declarations

    return models.BaseModel.metadata


def ensure_optuna_schema(engine: Engine, make_storage: Any) -> None:
    """Create Optuna's tables once, under a lock across processes, by constructing Optuna's
    storage (``make_storage()``) while holding it; a database that has them is left alone."""
    if set(OPTUNA_TABLES) <= set(inspect(engine).get_table_names()):
        return
    with database_lock(engine, "tsopt-schema"):
        engine.dispose()  # the inspector's cached view predates the lock
        if set(OPTUNA_TABLES) <= set(inspect(engine).get_table_names()):
            return
        storage = make_storage()
        storage.engine.dispose()


def schema_problems(connection: Connection, optuna: bool = True) -> list[str]:
    """Each table or column of tsopt's (and Optuna's) schema that the database lacks."""
    inspector = inspect(connection)
    present = set(inspector.get_table_names())
    problems: list[str] = []
    metadatas: list[tuple[str, MetaData]] = [("tsopt", Base.metadata)]
    if optuna and set(OPTUNA_TABLES) & present:
        metadatas.append(("Optuna", optuna_metadata()))
    for owner, metadata in metadatas:
        for table in metadata.sorted_tables:
            if table.name not in present:
                problems.append(f"{owner} table {table.name!r} is missing")
                continue
            have = {c["name"] for c in inspector.get_columns(table.name)}
            problems += [f"{owner} table {table.name!r} has no column {c.name!r}"
                         for c in table.columns if c.name not in have]
    return problems


def foreign_tables(connection: Connection) -> list[str]:
    """The tables of a database that belongs to another program: it has tables, and tsopt's
    revision table is not among them (Optuna's alone count too: tsopt makes its own first).
    Empty when the database is tsopt's or empty."""
    present = sorted(n for n in inspect(connection).get_table_names()
                     if not n.startswith("sqlite_"))
    return [] if not present or VERSION_TABLE in present else present


def known_revisions() -> set[str]:
    """Every tsopt schema revision this tsopt knows."""
    return {r.revision for r in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def optuna_revisions() -> tuple[str, set[str]]:
    """This Optuna's newest schema revision and every revision it knows."""
    import optuna.storages._rdb as rdb

    config = Config()
    config.set_main_option("script_location", str(Path(rdb.__file__).resolve().parent / "alembic"))
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    assert head is not None, "Optuna ships its migrations"
    return head, {r.revision for r in script.walk_revisions()}


def revision_in(connection: Connection, version_table: str) -> str | None:
    """The revision recorded in an Alembic version table (None when the table is absent)."""
    if version_table not in inspect(connection).get_table_names():
        return None
    context = MigrationContext.configure(connection, opts={"version_table": version_table})
    return context.get_current_revision()
