"""What a schedule timeline draws: tasks, their warps, and their placed ops.

The drawing is generic: it takes a list of :class:`TaskView` (task name, warp
range, ops with their sections) and knows nothing about templates. Which
warps run which task is a fact of the template, so a search space may provide
``schedule_view(genome) -> list[TaskView]``; :func:`schedule_view` uses it when
the space has one and otherwise derives the views from the genome alone
(:func:`generic_schedule_view`). Only the hook path imports the space (and so
possibly the DSL).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from tsopt.core.genome import Genome, Section

OpKind = Literal["acquire", "commit", "wait", "release", "work"]

_SYNC_KINDS: dict[str, OpKind] = {
    "try_acquire": "acquire",
    "acquire": "acquire",
    "commit": "commit",
    "try_wait": "wait",
    "wait": "wait",
    "release": "release",
}


@dataclass(frozen=True)
class OpView:
    name: str
    section: Section
    kind: OpKind

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "section": self.section, "kind": self.kind}


@dataclass(frozen=True)
class TaskView:
    """One task's lane: its warps (first..last inclusive, None if unknown) and ops in order."""

    task: str
    first_warp: int | None
    last_warp: int | None
    ops: tuple[OpView, ...]

    @property
    def warps_label(self) -> str:
        if self.first_warp is None or self.last_warp is None:
            return "warps ?"
        if self.first_warp == self.last_warp:
            return f"warp {self.first_warp}"
        return f"warps {self.first_warp}\u2013{self.last_warp}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "warps": self.warps_label,
            "first_warp": self.first_warp,
            "last_warp": self.last_warp,
            "ops": [op.to_dict() for op in self.ops],
        }


def op_kind(name: str) -> OpKind:
    """The pipeline role of an op from its name (``acquire``, ``smem.release``); else work.

    Only a whole name segment counts, so a work call such as ``wgmma_wait``
    stays work.
    """
    for segment in reversed(re.split(r"[.:/\s]+", name)):
        if segment in _SYNC_KINDS:
            return _SYNC_KINDS[segment]
    return "work"


def _int_gene(genome: Genome, *names: str) -> int | None:
    for name in names:
        value = genome.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def generic_schedule_view(genome: Genome) -> list[TaskView]:
    """Task views from the genome alone.

    Warps come from numeric genes named after the task: ``<task>_warp`` or
    ``<task>_warp_idx`` (its first warp), and ``<task>_warps`` /
    ``<task>_num_warps`` (how many) or ``<task>_warpgroups`` (4 warps each).
    A first warp with no count is one warp; a count with no first warp starts
    after the previous task; a task with neither is shown as ``warps ?``.
    Templates whose layout is not spelled this way (a producer warp inside a
    padded warpgroup, say) should give their space a ``schedule_view``.
    """
    views: list[TaskView] = []
    next_free: int | None = 0
    for schedule in genome.schedule:
        task = schedule.task
        first = _int_gene(genome, f"{task}_warp", f"{task}_warp_idx")
        count = _int_gene(genome, f"{task}_warps", f"{task}_num_warps")
        groups = _int_gene(genome, f"{task}_warpgroups")
        if count is None and groups is not None:
            count = 4 * groups
        if count is None and first is not None:
            count = 1
        if first is None and count is not None:
            first = next_free
        last = first + count - 1 if first is not None and count is not None else None
        next_free = last + 1 if last is not None else None
        ops = tuple(OpView(p.op, p.section, op_kind(p.op)) for p in schedule.ops)
        views.append(TaskView(task, first, last if first is not None else None, ops))
    return views


ScheduleHook = Callable[[Genome], list[TaskView]]


@cache
def _space_hook(space: str) -> tuple[ScheduleHook | None, str]:
    """The space's ``schedule_view`` hook, or None and why not."""
    from tsopt.core.registry import get_space

    try:
        instance = get_space(space)
    except Exception as exc:  # an unknown or broken space: the genome alone still draws
        return None, f"space {space!r} not loaded ({type(exc).__name__}: {exc})"
    hook = getattr(instance, "schedule_view", None)
    if not callable(hook):
        return None, f"space {space!r} has no schedule_view"
    return hook, f"drawn by space {space!r}"


def schedule_view(genome: Genome) -> tuple[list[TaskView], str]:
    """The task views of a genome and a note on where they came from."""
    hook, note = _space_hook(genome.space)
    if hook is not None:
        try:
            return list(hook(genome)), note
        except Exception as exc:  # the drawing must not sink the report
            note = f"space {genome.space!r} schedule_view failed ({type(exc).__name__}: {exc})"
    return generic_schedule_view(genome), f"warps from the genome's genes; {note}"
