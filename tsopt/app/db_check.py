"""``tsopt db check``: can this database be used, and if not, what is wrong with it.

Read-only: the database is opened without migrating, switching journal modes or creating
anything, so a damaged or read-only database can be examined as it is. Checks, in order:

- SQLite's ``PRAGMA integrity_check`` (every page, index and constraint of the file);
- tsopt's schema revision against the newest this tsopt knows, and every table and column;
- Optuna's schema revision against this Optuna's, and its tables and columns;
- the studies, by status (a study found ``killed`` says when its last run was heard of).

Exit code 0 when every check passes, 4 (the database cannot be used) otherwise.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from tsopt.core.errors import EXIT_DATABASE, EXIT_OK, UserInputError
from tsopt.db.engine import (
    display_url,
    first_line,
    is_sqlite_memory,
    open_engine,
    parse_url,
    sqlite_path,
)
from tsopt.db.migrate import (
    OPTUNA_TABLES,
    VERSION_TABLE,
    foreign_tables,
    head_revision,
    known_revisions,
    optuna_revisions,
    revision_in,
    schema_problems,
)


@dataclass
class CheckReport:
    """Each check's line, and the problems found."""

    lines: list[tuple[str, str, bool]] = field(default_factory=list)  # (check, finding, ok)

    def add(self, check: str, finding: str, ok: bool) -> None:
        self.lines.append((check, finding, ok))

    @property
    def problems(self) -> list[tuple[str, str, bool]]:
        return [line for line in self.lines if not line[2]]


def _read_only_engine(url: str) -> tuple[Engine, str]:
    """An engine that cannot write, and the name of the database for messages."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return open_engine(url), display_url(parsed)  # opening a server's database writes nothing
    if is_sqlite_memory(parsed):
        raise UserInputError(f"database URL {url!r} is in memory: there is nothing to check")
    path = sqlite_path(parsed)
    if path is None:
        raise UserInputError(f"database URL {url!r}: tsopt db check takes a SQLite file path")
    if not path.is_file():
        raise UserInputError(f"no database at {str(path)!r} (from --db {url!r})")

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                               check_same_thread=False)

    return create_engine("sqlite://", creator=connect, poolclass=StaticPool), str(path)


def _integrity(engine: Engine, report: CheckReport) -> bool:
    if engine.dialect.name != "sqlite":
        report.add("integrity", f"{engine.dialect.name} checks its own pages (not checked here)",
                   True)
        return True
    try:
        with engine.connect() as conn:
            rows = [r[0] for r in conn.execute(text("PRAGMA integrity_check"))]
    except (DBAPIError, sqlite3.Error) as exc:
        report.add("integrity", f"the file cannot be read as a database: {first_line(exc)}",
                   False)
        return False
    if rows == ["ok"]:
        report.add("integrity", "PRAGMA integrity_check: ok", True)
        return True
    shown = "; ".join(rows[:3]) + (f" (and {len(rows) - 3} more)" if len(rows) > 3 else "")
    report.add("integrity", f"PRAGMA integrity_check found {len(rows)} problem(s): {shown}",
               False)
    return False


def _schemas(engine: Engine, report: CheckReport) -> None:
    with engine.connect() as conn:
        revision = revision_in(conn, VERSION_TABLE)
        head = head_revision()
        foreign = foreign_tables(conn)
        if foreign:
            report.add("owner", "belongs to another program: its tables ("
                       + ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
                       + ") are none of tsopt's; tsopt refuses to write into it", False)
        if revision is None:
            report.add("tsopt schema", "no tsopt tables: not a tsopt database (yet)", False)
        elif revision == head:
            report.add("tsopt schema", f"revision {revision} (the newest this tsopt knows)", True)
        else:
            older = revision in known_revisions()
            report.add("tsopt schema", f"revision {revision}; this tsopt's newest is {head}"
                       + (" (opening it with `tsopt` migrates it)" if older else
                          ": written by a newer tsopt; upgrade tsopt"), older)
        optuna_revision = revision_in(conn, "alembic_version")
        if optuna_revision is None:
            report.add("Optuna schema", "no Optuna tables yet (created on first use)", True)
        else:
            optuna_head, known = optuna_revisions()
            import optuna

            if optuna_revision == optuna_head:
                report.add("Optuna schema", f"revision {optuna_revision} (Optuna "
                           f"{optuna.__version__}'s)", True)
            elif optuna_revision in known:
                report.add("Optuna schema", f"revision {optuna_revision}, older than Optuna "
                           f"{optuna.__version__}'s {optuna_head}: run `optuna storage upgrade "
                           "--storage URL`", False)
            else:
                report.add("Optuna schema", f"revision {optuna_revision}, which Optuna "
                           f"{optuna.__version__} does not know (a newer Optuna wrote it): "
                           "upgrade optuna", False)
        has_optuna = bool(set(OPTUNA_TABLES) & set(_tables(conn)))
        problems = schema_problems(conn, optuna=has_optuna)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            report.add("tables", f"{problems[0]}{more}", False)
            for problem in problems[1:6]:
                report.add("tables", problem, False)
        else:
            report.add("tables", "every table and column tsopt" + (" and Optuna" if has_optuna
                                                                   else "") + " expect", True)
        if revision is not None and not problems:
            _studies(conn, report)


def _tables(conn: Any) -> list[str]:
    from sqlalchemy import inspect

    return list(inspect(conn).get_table_names())


def _studies(conn: Any, report: CheckReport) -> None:
    rows = conn.execute(text("SELECT status, count(*) FROM tsopt_study GROUP BY status")).all()
    if not rows:
        report.add("studies", "none yet", True)
        return
    counts = ", ".join(f"{n} {status}" for status, n in sorted(rows))
    report.add("studies", counts, True)
    for name, killed_at in conn.execute(text(
            "SELECT name, killed_at FROM tsopt_study WHERE status = 'killed'")).all():
        report.add("studies", f"{name}: killed (its last run was last heard of at {killed_at}); "
                   "`tsopt tune` with the same options resumes it", True)


def check_database(url: str, console: Console) -> int:
    """Run every check on the database at ``url``; print one line per check; the exit code."""
    engine, where = _read_only_engine(url)
    report = CheckReport()
    try:
        if _integrity(engine, report):
            try:
                _schemas(engine, report)
            except (DBAPIError, sqlite3.Error) as exc:
                report.add("schema", f"cannot be read: {first_line(exc)}", False)
    finally:
        engine.dispose()
    console.print(f"database {escape(where)}", highlight=False)
    for check, finding, ok in report.lines:
        mark = "[green]ok[/]     " if ok else "[red]problem[/]"
        console.print(f"  {mark} {check}: {escape(finding)}", highlight=False)
    if report.problems:
        console.print(f"[red]{len(report.problems)} problem(s)[/]: this database cannot be "
                      "used as it is; restore it from a backup, or pass --db to a new one",
                      highlight=False)
        return EXIT_DATABASE
    console.print("[green]the database can be used[/]", highlight=False)
    return EXIT_OK
