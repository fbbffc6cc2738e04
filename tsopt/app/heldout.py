"""The held-out problems (issue #28): shapes the search is judged on and nothing is derived from.

The frozen set ships as ``tsopt/data/heldout.json`` beside the seed library and the TS search
memo, the two files it must stay out of (``tests/test_heldout.py`` checks that neither the
library, nor the evidence it is made from, nor a cost-model or test source names one of
them). Each problem has a name, its space, its problem spec, the regime it stands for, how many
oracle candidates it gets (``bench/oracle``) and why it was chosen. ``tsopt heldout list``
shows them; a file naming a problem that is not one (bad op, dtype or sizes, or one its space
refuses) is refused with one line naming the entry, wherever a held-out file is read
(:func:`load_heldout`).

Standard library and ``tsopt.core`` only, so the GPU machine's scripts can read it; the space's
own check (:func:`check_spaces`) imports the space, and so the DSL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem, ProblemError, parse_problem_spec

PACKAGED = Path(__file__).resolve().parents[1] / "data" / "heldout.json"
FORMAT = "tsopt-heldout"
FIELDS = ("name", "space", "problem", "regime", "oracle", "reason")


@dataclass(frozen=True)
class HeldoutProblem:
    """One held-out problem and why it is in the set."""

    name: str
    space: str
    problem: Problem
    regime: str
    oracle: int
    """Legal candidates its oracle measures at least (bench/oracle)."""
    reason: str

    @property
    def spec(self) -> str:
        """``gemm:bf16:8x18432x2048``: the form ``parse_problem_spec`` reads."""
        return (f"{self.problem.op}:{self.problem.dtype}:"
                + "x".join(str(v) for _, v in self.problem.dims))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "space": self.space, "problem": self.spec,
                "regime": self.regime, "oracle": self.oracle, "reason": self.reason}


@dataclass(frozen=True)
class HeldoutSet:
    """The frozen set: its version and its problems, in the file's order."""

    version: int
    frozen: str
    problems: tuple[HeldoutProblem, ...]
    path: str

    def by_name(self, name: str) -> HeldoutProblem:
        for item in self.problems:
            if item.name == name:
                return item
        raise UserInputError(f"held-out set {self.path}: no problem named {name!r} "
                             f"(known: {', '.join(p.name for p in self.problems)})")

    def holds(self, problem: Problem) -> bool:
        """Whether ``problem`` (op, dtype and sizes) is one of the set."""
        return any(item.problem == problem for item in self.problems)


def _entry(doc: Any, where: str, index: int) -> HeldoutProblem:
    if not isinstance(doc, dict):
        raise UserInputError(f"held-out set {where}: problem {index} is not an object")
    missing = [f for f in FIELDS if f not in doc]
    if missing:
        raise UserInputError(f"held-out set {where}: problem {index} lacks {', '.join(missing)}")
    name = doc["name"]
    label = f"problem {index} ({name!r})"
    if not isinstance(name, str) or not name:
        raise UserInputError(f"held-out set {where}: problem {index}: name {name!r} is not a name")
    spec = doc["problem"]
    try:
        if isinstance(spec, str):
            problem = parse_problem_spec(spec)
        else:
            problem = Problem.from_dict(spec)
    except (ProblemError, TypeError) as exc:
        raise UserInputError(f"held-out set {where}: {label}: {exc}") from None
    oracle = doc["oracle"]
    if isinstance(oracle, bool) or not isinstance(oracle, int) or oracle < 1:
        raise UserInputError(f"held-out set {where}: {label}: oracle {oracle!r} is not a "
                             "positive count of candidates")
    for field in ("space", "regime", "reason"):
        if not isinstance(doc[field], str) or not doc[field]:
            raise UserInputError(f"held-out set {where}: {label}: {field} {doc[field]!r} is "
                                 "not text")
    from tsopt.core.registry import SPACES

    entry = SPACES.get(doc["space"])
    if entry is None:
        raise UserInputError(f"held-out set {where}: {label}: space {doc['space']!r} is not "
                             f"one of {', '.join(SPACES)}")
    if entry.op != problem.op:
        raise UserInputError(f"held-out set {where}: {label}: space {entry.name!r} tunes "
                             f"{entry.op}, not {problem.op}")
    return HeldoutProblem(name=name, space=doc["space"], problem=problem, regime=doc["regime"],
                          oracle=oracle, reason=doc["reason"])


def load_heldout(path: Path | str | None = None) -> HeldoutSet:
    """The held-out set at ``path`` (default: the packaged one). Raises UserInputError naming
    the file and the first bad entry: not JSON, not this format, a problem that is not one (bad
    op, dtype or sizes), a name or a problem given twice."""
    where = Path(path) if path is not None else PACKAGED
    try:
        doc = json.loads(where.read_text())
    except OSError as exc:
        raise UserInputError(f"held-out set {where}: cannot be read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise UserInputError(f"held-out set {where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UserInputError(f"held-out set {where}: not a {FORMAT} file")
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UserInputError(f"held-out set {where}: version {version!r} is not a positive "
                             "integer")
    items = doc.get("problems")
    if not isinstance(items, list) or not items:
        raise UserInputError(f"held-out set {where}: 'problems' is not a non-empty list")
    problems = tuple(_entry(item, str(where), i) for i, item in enumerate(items))
    names: dict[str, int] = {}
    specs: dict[Problem, str] = {}
    for i, item in enumerate(problems):
        if item.name in names:
            raise UserInputError(f"held-out set {where}: name {item.name!r} given twice "
                                 f"(problems {names[item.name]} and {i})")
        if item.problem in specs:
            raise UserInputError(f"held-out set {where}: problem {item.spec} given twice "
                                 f"({specs[item.problem]!r} and {item.name!r})")
        names[item.name], specs[item.problem] = i, item.name
    return HeldoutSet(version=version, frozen=str(doc.get("frozen", "")), problems=problems,
                      path=str(where))


def check_spaces(held: HeldoutSet) -> None:
    """Every problem against its space (``SearchSpace.check``: dtype, alignment): a problem
    the space refuses raises UserInputError naming the entry."""
    from tsopt.core.registry import get_space

    for item in held.problems:
        try:
            get_space(item.space).check(item.problem)
        except ProblemError as exc:
            raise UserInputError(f"held-out set {held.path}: {item.name} ({item.spec}): "
                                 f"{exc}") from None


def heldout_list(path: Path | str | None, console: Any, as_json: bool = False) -> int:
    """``tsopt heldout list``: the set, each problem checked against its space; 0, or
    UserInputError naming the bad entry."""
    from rich.table import Table

    from tsopt.search.library import shape_class

    held = load_heldout(path)
    check_spaces(held)
    if as_json:
        console.print_json(json.dumps({"version": held.version, "frozen": held.frozen,
                                       "path": held.path,
                                       "problems": [p.to_dict() for p in held.problems]}))
        return 0
    table = Table(title=f"held-out set v{held.version} (frozen {held.frozen}): {held.path}",
                  title_justify="left")
    for column in ("name", "problem", "class", "regime", "oracle"):
        table.add_column(column, justify="right" if column == "oracle" else "left")
    for item in held.problems:
        table.add_row(item.name, item.spec, shape_class(item.problem), item.regime,
                      str(item.oracle))
    console.print(table)
    return 0
