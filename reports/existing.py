"""Open an existing database for a read-only command (report, dashboard).

``Store(url)`` creates a missing SQLite file, which is right for ``tune`` but
would turn a mistyped ``--db`` of ``report`` into an empty report; these
commands refuse a file that does not exist instead.
"""

from __future__ import annotations

from tsopt.core.errors import UserInputError
from tsopt.db.engine import display_url, parse_url, sqlite_path
from tsopt.db.store import Store


def open_existing(db_url: str) -> Store:
    """A store on an existing database; UserInputError naming a missing SQLite file."""
    parsed = parse_url(db_url)
    # A server's database (PostgreSQL) has no file to look for; the store refuses a missing one.
    path = sqlite_path(parsed) if parsed.get_backend_name() == "sqlite" else None
    if path is not None and not path.is_file():
        raise UserInputError(
            f"no database at {str(path)!r} (from --db {display_url(parse_url(db_url))!r}); "
            "run `tsopt tune` first or pass the right --db"
        )
    return Store(db_url)
