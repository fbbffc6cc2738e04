"""Kernel templates and their knobs.

Spaces are registered by name and imported lazily: each imports the CUTLASS
DSL, which is heavy, and the CLI must start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tsopt.errors import UserInputError

if TYPE_CHECKING:
    from search_spaces.base import SearchSpace

SPACES: dict[str, str] = {
    "copy": "search_spaces.copy_tma:CopySpace",
    "gemm": "search_spaces.hopper_gemm:HopperGemmSpace",
}
"""Space name -> ``module:Class``."""


class UnknownSpaceError(UserInputError):
    """No search space has this name."""


def get_space(name: str) -> SearchSpace:
    """The search space called ``name``; raises :class:`UnknownSpaceError` naming it."""
    target = SPACES.get(name)
    if target is None:
        raise UnknownSpaceError(f"unknown search space {name!r}; known: {', '.join(SPACES)}")
    module_name, cls_name = target.split(":")
    from tsopt.dsl_env import ensure_arch

    ensure_arch()  # before the space module imports the DSL
    module = importlib.import_module(module_name)
    space: SearchSpace = getattr(module, cls_name)()
    return space
