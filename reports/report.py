"""``tsopt report``: list the studies, or write one study's (or two studies') HTML report."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from tsopt.core.errors import UserInputError
from tsopt.db.engine import display_url, parse_url
from tsopt.db.store import Store
from tsopt.reports.data import report_document
from tsopt.reports.existing import open_existing
from tsopt.reports.render import render_html


def _study_names(study: str | None, compare: Sequence[str]) -> list[str]:
    """The studies to report: none (list them), one, or two side by side.

    ``--compare A B`` reaches us as compare=[A] and study=B (the second name
    is the positional argument), so one compare name plus a study is a pair.
    """
    names = list(compare)
    if not names:
        return [study] if study else []
    if study is not None:
        names.append(study)
    if len(names) != 2:
        raise UserInputError(
            f"--compare takes two studies, got {len(names)}: {', '.join(map(repr, names))}"
        )
    if names[0] == names[1]:
        raise UserInputError(f"--compare needs two different studies, got {names[0]!r} twice")
    return names


def _default_out(names: Sequence[str]) -> Path:
    safe = [re.sub(r"[^A-Za-z0-9._-]+", "_", n) for n in names]
    return Path("report-" + "-vs-".join(safe) + ".html")


REPORT_MARK = b'<meta name="generator" content="tsopt report">'
"""The line every report carries near its top (reports/assets/report.html): what tells an
earlier report, which ``--out`` may replace, from any other file, which it must not."""


def check_out(path: Path) -> None:
    """UserInputError naming ``path`` unless it is free or an earlier tsopt report: a report
    never replaces a device, a link, a directory or a file it did not write."""
    if path.is_symlink():
        raise UserInputError(f"--out {str(path)!r} is a symbolic link; a report is written "
                             "only to a new file or over an earlier report")
    if not path.exists():
        return
    if not path.is_file():
        raise UserInputError(f"--out {str(path)!r} is not a plain file (a device, a pipe or a "
                             "socket); a report is written only to a new file or over an "
                             "earlier report")
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise UserInputError(f"--out {str(path)!r}: cannot be read ({exc.strerror})") from None
    if REPORT_MARK not in head:
        raise UserInputError(f"--out {str(path)!r} already exists and is not a tsopt report; "
                             "a report replaces only an earlier report: choose another path "
                             "or remove the file")


def _write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file, so a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def list_studies(store: Store, console: Console) -> int:
    studies = store.list_studies()
    if not studies:
        console.print(f"No studies in {display_url(parse_url(store.url))}.")
        return 0
    table = Table(title=f"Studies in {display_url(parse_url(store.url))}", box=box.SIMPLE_HEAD)
    # The name is what the user types next: never cut it short.
    table.add_column("study", overflow="fold", min_width=max(len(s.name) for s in studies))
    for column in ("space", "problem", "arch", "status"):
        table.add_column(column, overflow="fold")
    table.add_column("timed/valid/all", justify="right", no_wrap=True)
    table.add_column("best", justify="right", no_wrap=True)
    for info in studies:
        funnel = store.funnel(info.name)
        best = store.ranked_on_card(info.name, limit=1)
        table.add_row(
            info.name, info.space, info.problem_key, info.arch, info.status,
            f"{funnel['timed']}/{funnel['tsopt_checked']}/{funnel['proposed']}",
            f"{best[0].median_us:.4g} µs" if best else "–",
        )
    console.print(table)
    console.print("Write one: tsopt report STUDY [--out report.html]")
    return 0


@dataclass(frozen=True)
class WrittenReport:
    """A report on disk: its path, size, and each study with its count of timed candidates."""

    path: Path
    kib: float
    studies: tuple[tuple[str, int], ...]


def write_report(names: Sequence[str], out: Path | None, db_url: str) -> WrittenReport:
    """Write the HTML report of one study (or two side by side); ``out`` a file or a folder
    (default: ``report-<study>.html`` here)."""
    # Checked before the database is opened: a refused --out touches nothing.
    path = out if out is not None else _default_out(names)
    if path.is_dir() and not path.is_symlink():
        path = path / _default_out(names)
    check_out(path)
    with open_existing(db_url) as store:
        known = {s.name for s in store.list_studies()}
        for name in names:
            if name not in known:
                listed = ", ".join(sorted(known)) or "none"
                raise UserInputError(f"no study named {name!r}; studies in the database: {listed}")
        document = report_document(store, names, display_url(parse_url(db_url)))
    page = render_html(document)
    check_out(path)  # again: the path may have changed while the report was made
    _write_atomically(path, page)
    timed = [s["funnel"][-1]["count"] for s in document["studies"]]
    return WrittenReport(path, len(page.encode()) / 1024, tuple(zip(names, timed, strict=True)))


def report_command(
    study: str | None, out: Path | None, compare: Sequence[str], db_url: str, console: Console,
) -> int:
    """List the studies (no study given) or write the HTML report; returns the exit code."""
    names = _study_names(study, compare)
    if not names:
        with open_existing(db_url) as store:
            return list_studies(store, console)
    written = write_report(names, out, db_url)
    console.print(
        f"Wrote {written.path} ({written.kib:.0f} KiB) for "
        + ", ".join(f"{n} ({t} timed)" for n, t in written.studies)
    )
    return 0
