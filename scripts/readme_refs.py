"""Every code reference in README.md resolves: the named file exists, the named symbol is defined there.

    .venv/bin/python scripts/readme_refs.py [--readme README.md]   # exit 1 naming each that does not

A reference is an inline code span (fenced blocks are commands, not references) of one of
these forms:

- a path of the tree (``tsopt/search/evolve.py``, ``bench/oracle/``, ``corpus/SCHEMA.md``; a
  glob must match a file): it exists;
- ``path.py::name`` or ``path.py::Class.name``: the file exists and defines the name (a
  function, class or assignment at that level; an import is not a definition);
- a dotted name under the package, ``tsopt.search.evolve.SURVEY`` (``tsopt.workers`` is
  ``workers/``, as ``setup.py`` maps it): the longest prefix that is a module exists and
  defines the rest;
- ``NAME`` in ``path.py`` (the words between two spans): the file defines ``NAME``.

Standard library only: the files are read, never imported.
"""

from __future__ import annotations

import argparse
import ast
import glob
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ("tsopt/", "workers/", "db/", "search_spaces/", "reports/", "bench/", "corpus/",
        "scripts/", "tests/", ".ci/")
TOP_FILES = ("README.md", "ARCHITECTURE.md", "pyproject.toml", "setup.py")
PACKAGES = {"tsopt.workers": "workers", "tsopt.db": "db", "tsopt.search_spaces": "search_spaces",
            "tsopt.reports": "reports", "tsopt": "tsopt"}
SPAN = re.compile(r"`([^`\n]+)`")
NAME_IN_FILE = re.compile(r"`([A-Za-z_][\w.]*)`\s+in\s+`([\w/.-]+\.py)`")
DOTTED = re.compile(r"^tsopt(\.[A-Za-z_]\w*)+$")


@dataclass(frozen=True)
class Broken:
    line: int
    reference: str
    why: str

    def __str__(self) -> str:
        return f"README.md:{self.line}: `{self.reference}`: {self.why}"


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """The README's lines outside fenced code blocks, numbered from 1."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def _defined(path: Path, dotted: str) -> bool:
    """Whether the module at ``path`` defines ``dotted`` (``name`` or ``Class.name``)."""
    try:
        body: list[ast.stmt] = ast.parse(path.read_text()).body
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        found: ast.stmt | None = None
        for node in body:
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            if part in names:
                found = node
        if found is None:
            return False
        if depth < len(parts) - 1:
            if not isinstance(found, ast.ClassDef):
                return False
            body = found.body
    return True


def _module(dotted: str) -> tuple[Path, str] | None:
    """The file of the longest module prefix of ``dotted`` and the rest of the name."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        package = max((p for p in PACKAGES if name == p or name.startswith(p + ".")), key=len,
                      default=None)
        if package is None:
            continue
        folder = ROOT / PACKAGES[package] / Path(*name[len(package):].split(".")[1:])
        for candidate in (folder.with_suffix(".py"), folder / "__init__.py"):
            if candidate.is_file():
                return candidate, ".".join(parts[cut:])
    return None


def check_span(span: str) -> str | None:
    """Why ``span`` does not resolve (None: it does, or it is not a reference)."""
    path_part, _, symbol = span.partition("::")
    if path_part.startswith(TREE) or path_part in TOP_FILES:
        if "<" in path_part or " " in path_part:
            return None  # a pattern such as search_spaces/<name>/, not a file
        if any(c in path_part for c in "*?["):
            return None if glob.glob(str(ROOT / path_part)) else "the glob matches no file"
        target = ROOT / path_part
        if not target.exists():
            return "no such file or folder"
        if symbol and not _defined(target, symbol):
            return f"{path_part} defines no {symbol}"
        return None
    name = span.split("(")[0]
    if DOTTED.match(name):
        found = _module(name)
        if found is None:
            return "no such module"
        path, rest = found
        if rest and not _defined(path, rest):
            return f"{path.relative_to(ROOT)} defines no {rest}"
    return None


def broken_references(text: str) -> list[Broken]:
    out = []
    for number, line in _prose(text):
        for match in SPAN.finditer(line):
            why = check_span(match[1])
            if why:
                out.append(Broken(number, match[1], why))
        for match in NAME_IN_FILE.finditer(line):
            path = ROOT / match[2]
            if path.is_file() and not _defined(path, match[1]):
                out.append(Broken(number, f"{match[1]}` in `{match[2]}",
                                  f"{match[2]} defines no {match[1]}"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text()
    except OSError as exc:
        print(f"readme_refs: {args.readme}: {exc.strerror}", file=sys.stderr)
        return 2
    broken = broken_references(text)
    for item in broken:
        print(item, file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
