"""Where ``tsopt export`` may write, and what it may replace there.

An export goes into a new or empty directory, or replaces an earlier export's files (those its
``manifest.json`` lists, with ``--force``); it never deletes a file it did not write. It refuses
an ``--out`` that is, or contains, what a study lives in: the working directory (or one of its
ancestors), the database file, the ``.tsopt/`` cache. Files are written to a staging directory
beside ``--out`` first and moved in at the end, so a failed export leaves ``--out`` as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tsopt.core.errors import UserInputError
from tsopt.core.strict_json import strict_loads

MANIFEST = "manifest.json"
FORMAT = "tsopt-export"


@dataclass(frozen=True)
class Protected:
    """A path an export must never be written over: what it is, for the message."""

    path: Path
    what: str


def protected_paths(db_file: Path | None, cwd: Path | None = None) -> list[Protected]:
    """The working directory, its ``.tsopt/`` and the SQLite database file (if any)."""
    here = (cwd or Path.cwd()).resolve()
    found = [Protected(here, "the working directory"), Protected(here / ".tsopt", "tsopt's cache .tsopt/")]
    if db_file is not None:
        found.append(Protected(Path(db_file).resolve(), "the database"))
    return found


def _within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def check_not_protected(out: Path, protected: Iterable[Protected]) -> None:
    """Refuse an ``--out`` that is, or contains, a protected path (compared resolved)."""
    target = out.resolve()
    for item in protected:
        if _within(item.path, target):
            relation = "is" if item.path == target else "contains"
            raise UserInputError(
                f"--out {str(out)!r} {relation} {item.what} ({item.path}): an export must not be "
                "written over it; choose a new directory, e.g. --out exports/NAME")


def owned_files(out: Path) -> list[Path] | None:
    """The files an earlier export in ``out`` wrote (its manifest's list, and the manifest);
    None when ``out`` holds no tsopt export manifest."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        doc = strict_loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("files"), dict):
        return None
    root = out.resolve()
    owned = [root / MANIFEST]
    for name in doc["files"]:
        # Normalised, not resolved: a link the export wrote is deleted itself, never its target.
        candidate = Path(os.path.normpath(root / str(name)))
        # A manifest names files inside its own directory; anything else is not ours to delete.
        if root in candidate.parents:
            owned.append(candidate)
    return owned


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def check_replaceable(out: Path, force: bool, writes: Iterable[str] = ()) -> list[Path]:
    """What must be deleted from ``out`` before ``writes`` (relative paths) go in; refuses a
    non-empty directory that is not an earlier export, an earlier export without ``--force``,
    and a write over a file the earlier export did not write."""
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {str(out)!r} exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    owned = owned_files(out)
    if owned is None:
        shown = ", ".join(sorted(p.name for p in out.iterdir())[:5])
        raise UserInputError(
            f"--out {str(out)!r} is not empty ({shown}) and holds no earlier tsopt export: "
            "choose a new or empty directory (export never deletes files it did not write)")
    if not force:
        raise UserInputError(
            f"--out {str(out)!r} holds an earlier tsopt export: pass --force to replace the files "
            "its manifest lists (other files there are kept), or choose another directory")
    root = out.resolve()
    keep = _files_under(root) - set(owned)
    clash = sorted(str(p.relative_to(root)) for p in keep if str(p.relative_to(root)) in set(writes))
    if clash:
        raise UserInputError(
            f"--out {str(out)!r}: the export would overwrite {', '.join(clash)}, which the earlier "
            "export did not write; move them away or choose another directory")
    return [p for p in owned if p.is_file() or p.is_symlink()]


def staging_dir(out: Path) -> Path:
    """A fresh directory beside ``out`` (same filesystem, so the final moves are renames)."""
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=parent))


def move_in(staged: Path, out: Path, remove: Iterable[Path]) -> None:
    """Delete the earlier export's files, then move every staged file into ``out``."""
    root = out.resolve()
    for path in remove:
        path.unlink(missing_ok=True)
        parent = path.parent
        # Its kernel subdirectories go too, once nothing else is left in them.
        while parent != root and root in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    root.mkdir(parents=True, exist_ok=True)
    for source in sorted(p for p in staged.rglob("*") if p.is_file()):
        target = root / source.relative_to(staged)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
    shutil.rmtree(staged)
