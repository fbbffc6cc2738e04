"""Alembic environment for tsopt's tables.

tsopt keeps its own version table (``tsopt_alembic_version``): Optuna's RDB
storage shares the database and owns ``alembic_version``. Autogenerate only
looks at ``tsopt_`` tables for the same reason.

``tsopt.db.migrate`` hands a live connection in ``config.attributes["connection"]``
(already inside the transaction that serialises concurrent upgrades); the
``alembic`` command line falls back to ``sqlalchemy.url``.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from tsopt.db.models import Base

VERSION_TABLE = "tsopt_alembic_version"


def _include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    if type_ == "table":
        return bool(name and name.startswith("tsopt_"))
    return True


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_object=_include_object,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
