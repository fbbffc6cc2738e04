"""The space registry: every search space by name, with its op, without importing it.

A space module imports the CUTLASS DSL, which is heavy, and the measuring side
has no DSL at all; so the registry names each space's class by its import path
and :func:`get_space` imports it on first use. The command line reads the rest
of an entry (the op, the summary) to declare ``tsopt tune <space>`` with no import.

Adding a space is one line in :data:`SPACES` (and its own folder under
``search_spaces/``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tsopt.core.errors import UserInputError
from tsopt.core.problem import OP_SPECS, Problem, ProblemError, default_problem, parse_problem_spec

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace


@dataclass(frozen=True)
class SpaceEntry:
    """One registered space: ``target`` is ``module:Class``; ``op`` one of the op registry's."""

    name: str
    target: str
    op: str
    summary: str


_ENTRIES: tuple[SpaceEntry, ...] = (
    SpaceEntry("copy", "tsopt.search_spaces.copy.space:CopySpace", "copy",
               "Tune the TS TMA copy (GMEM -> SMEM -> GMEM) for one tensor."),
    SpaceEntry("gemm", "tsopt.search_spaces.gemm.space:HopperGemmSpace", "gemm",
               "Tune the Hopper warp-specialized TS GEMM D = A @ B^T."),
    SpaceEntry("gridstride", "tsopt.search_spaces.gridstride.space:GridStrideSpace", "copy",
               "Tune the TS grid-stride copy (GMEM -> registers -> GMEM, one task, no SMEM)."),
)

SPACES: dict[str, SpaceEntry] = {entry.name: entry for entry in _ENTRIES}
"""Space name -> its entry."""


class UnknownSpaceError(UserInputError):
    """No search space has this name."""


def space_entry(name: str) -> SpaceEntry:
    """The entry of the space called ``name``; raises :class:`UnknownSpaceError` naming it."""
    entry = SPACES.get(name)
    if entry is None:
        raise UnknownSpaceError(f"unknown search space {name!r}; known: {', '.join(SPACES)}")
    if entry.op not in OP_SPECS:  # a registry line naming an op nobody declared
        raise UnknownSpaceError(f"space {name!r} names unknown op {entry.op!r}")
    return entry


def get_space(name: str) -> SearchSpace:
    """The search space called ``name``, imported on first use."""
    entry = space_entry(name)
    module_name, cls_name = entry.target.split(":")
    from tsopt.core.dsl_env import ensure_arch

    ensure_arch()  # before the space module imports the DSL
    module = importlib.import_module(module_name)
    space: SearchSpace = getattr(module, cls_name)()
    return space


def problem_for(spec: str | None, space_name: str) -> Problem:
    """The problem ``spec`` (``op:dtype:AxB``) for a space, or its op's default when None;
    raises UserInputError naming the bad value."""
    entry = space_entry(space_name)
    try:
        problem = default_problem(entry.op) if spec is None else parse_problem_spec(spec)
    except ProblemError as exc:
        raise UserInputError(str(exc)) from None
    if problem.op != entry.op:
        raise UserInputError(f"problem {spec!r} is a {problem.op} problem; space {space_name!r} "
                             f"tunes {entry.op}")
    return problem
