"""What a schedule timeline draws: tasks, their warps, and their placed ops.

The drawing is generic: it takes a list of :class:`TaskView` (task name, warp
range, ops with their sections; declared with the space interface in
``tsopt.core.space``) and knows nothing about templates. Which warps run which
task is a fact of the template, so :func:`schedule_view` asks the genome's space
(:meth:`SearchSpace.schedule_view <tsopt.core.space.SearchSpace.schedule_view>`);
a space that draws none, or cannot be loaded, gets views derived from the genome
alone (:func:`generic_schedule_view`). Loading the space imports it (and so
possibly the DSL).
"""

from __future__ import annotations

from functools import cache

from tsopt.core.genome import Genome
from tsopt.core.space import OpKind, OpView, SearchSpace, TaskView, op_kind

__all__ = ["OpKind", "OpView", "TaskView", "generic_schedule_view", "op_kind", "schedule_view"]

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


@cache
def _loaded_space(space: str) -> tuple[SearchSpace | None, str]:
    """The space called ``space``, or None and why not."""
    from tsopt.core.registry import get_space

    try:
        return get_space(space), f"drawn by space {space!r}"
    except Exception as exc:  # an unknown or broken space: the genome alone still draws
        return None, f"space {space!r} not loaded ({type(exc).__name__}: {exc})"


def schedule_view(genome: Genome) -> tuple[list[TaskView], str]:
    """The task views of a genome and a note on where they came from."""
    space, note = _loaded_space(genome.space)
    if space is not None:
        try:
            views = space.schedule_view(genome)
        except Exception as exc:  # the drawing must not sink the report
            note = f"space {genome.space!r} schedule_view failed ({type(exc).__name__}: {exc})"
        else:
            if views is not None:
                return list(views), note
            note = f"space {genome.space!r} draws no schedule view of its own"
    return generic_schedule_view(genome), f"warps from the genome's genes; {note}"
