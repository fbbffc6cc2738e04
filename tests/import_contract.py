"""The floors of ARCHITECTURE.md as a checked contract (the tests run it; so can a person).

``python -m tests.import_contract`` prints every violation and exits 1 if there is one.

Every import in the tree counts: at module level, inside functions and under
``TYPE_CHECKING`` alike, since each is an arrow a reader must follow. The rules:

1. **Layers.** A module may import from its own floor or a floor below, never above.
2. **Independent roles.** The roles floor's packages do not import each other.
3. **Ground floor:** the standard library only (and itself).
4. **Measuring side** (``tsopt.workers``): torch, the standard library and the ground floor.
5. **No cycles** between files.
6. **One namespace:** no import of a bare ``db``, ``workers``, ``search_spaces`` or ``reports``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Folders installed as subpackages of tsopt (setup.py maps them the same way).
MAPPED = {"tsopt.db": "db", "tsopt.workers": "workers", "tsopt.search_spaces": "search_spaces",
          "tsopt.reports": "reports"}

# Floors, top to bottom: a module belongs to the first package prefix that matches it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("applications", ("tsopt.cli", "tsopt.__main__", "tsopt.app", "tsopt.reports")),
    ("search", ("tsopt.search",)),
    ("roles", ("tsopt.verify", "tsopt.build", "tsopt.workers", "tsopt.db", "tsopt.search_spaces")),
    ("ground", ("tsopt.core",)),
)
INDEPENDENT = LAYERS[2][1]
GROUND = "tsopt.core"
MEASURING = "tsopt.workers"
MEASURING_EXTERNAL = {"torch"}
BARE_NAMES = {folder for folder in MAPPED.values()}
ROOT_PACKAGE = "tsopt"  # its __init__ may reach any floor lazily (the Python API)


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a module of the tree, or an external top-level name
    line: int
    internal: bool


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: [{self.rule}] {self.message}"


def package_roots(root: Path) -> dict[str, Path]:
    return {"tsopt": root / "tsopt", **{pkg: root / folder for pkg, folder in MAPPED.items()}}


def discover(root: Path) -> dict[str, Path]:
    """Every module of the installed namespace -> its file."""
    modules: dict[str, Path] = {}
    for package, folder in package_roots(root).items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            # a mapped folder wins over a same-named path under tsopt/ (there is none)
            modules.setdefault(name, path)
    return modules


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        targets: list[tuple[str, int]] = []
        if isinstance(node, ast.Import):
            targets = [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, is_package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append((full if full in modules else base, node.lineno))
        for target, line in targets:
            top = target.split(".")[0]
            internal = top == ROOT_PACKAGE
            if internal:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
            yield Import(module, target if internal else top, line, internal)


def floor_of(module: str) -> tuple[int, str] | None:
    for index, (_, packages) in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return index, package
    return None


def check(root: Path = ROOT) -> list[Violation]:
    modules = discover(root)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    violations: list[Violation] = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        where_module = floor_of(module)
        for imp in imports_of(module, path, modules):
            where = f"{path.relative_to(root)}:{imp.line}"
            if not imp.internal:
                if imp.target in BARE_NAMES:
                    violations.append(Violation("namespace", where, f"imports bare {imp.target!r}; "
                                                f"use tsopt.{imp.target}"))
                elif module.startswith(GROUND) and imp.target not in stdlib:
                    violations.append(Violation("ground-stdlib", where,
                                                f"{module} imports {imp.target} (not stdlib)"))
                elif (module.startswith(MEASURING) and imp.target not in stdlib
                      and imp.target not in MEASURING_EXTERNAL):
                    violations.append(Violation("measuring-torch", where,
                                                f"{module} imports {imp.target}"))
                continue
            if imp.target == module or imp.target == ROOT_PACKAGE:
                continue
            graph[module].add(imp.target)
            if module == ROOT_PACKAGE:
                continue
            where_target = floor_of(imp.target)
            if where_module is None or where_target is None:
                violations.append(Violation("unplaced", where, f"{module} -> {imp.target}: a "
                                            "module on no floor (add it to LAYERS)"))
                continue
            if where_target[0] < where_module[0]:
                violations.append(Violation("layers", where, f"{module} ({LAYERS[where_module[0]][0]})"
                                            f" imports {imp.target} ({LAYERS[where_target[0]][0]})"))
            elif (where_module[1] in INDEPENDENT and where_target[1] in INDEPENDENT
                  and where_module[1] != where_target[1]):
                violations.append(Violation("independent-roles", where,
                                            f"{module} imports {imp.target}"))
            if module.startswith(MEASURING) and not (imp.target.startswith(MEASURING)
                                                     or imp.target.startswith(GROUND)):
                violations.append(Violation("measuring-torch", where,
                                            f"{module} imports {imp.target}"))
    for cycle in cycles(graph):
        violations.append(Violation("cycle", " -> ".join(cycle), "files import each other in a loop"))
    return violations


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan), each as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in graph:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


if __name__ == "__main__":
    problems = check()
    for violation in problems:
        print(violation)
    print(f"{len(problems)} violation(s)")
    sys.exit(1 if problems else 0)
