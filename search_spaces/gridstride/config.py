"""Genes, placements and the genome -> configuration mapping of the gridstride space.

The configuration itself, :class:`GridStrideConfig`, is defined by the kernel
module, which reads it; this module decodes a genome into one
(:func:`config_of`), and owns the knobs' choices and the placements.

Placements. The copy task has two ops, ``load`` and ``store``, and one
register variable between them (the fragment and its tile). A placement key
is ``(body, depth, "none")`` in the shared format of
:mod:`tsopt.search_spaces.common.placement` (nothing can be deferred: the task
has no pipeline ops):

- body ``load,store``: the tutorial's loop body; the head holds ``depth``
  whole iterations (:func:`~tsopt.search_spaces.common.placement.render_placement`);
- body ``store,load``: the loop is rotated by one op: each iteration stores
  the fragment loaded by the one before and loads its own, so the head holds
  ``depth`` whole iterations and then the first load, and the tail the last
  store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tsopt.core.devices import default_profile
from tsopt.core.dsl_env import ensure_arch
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.search_spaces.common.placement import TaskOps, render_placement

ensure_arch()  # the kernel module imports the DSL, which reads its target arch once

from tsopt.search_spaces.gridstride.kernel import (  # noqa: E402
    ELEMENT_BYTES,
    GridStrideConfig,
    Placement,
)

SPACE = "gridstride"
TASK = "copy"

COPY_OPS = TaskOps(TASK, ops=("load", "store"), work=("load", "store"), sync=(),
                   tokens=(("load", "store"),))
CANONICAL_BODY = ("load", "store")
ROTATED_BODY = ("store", "load")
HEAD_DEPTHS = (0, 1, 2)

NUMERIC_CHOICES: dict[str, tuple[Any, ...]] = {
    "warps": (1, 2, 4, 8, 16, 32),
    "vector": (1, 2, 4, 8),
    "unroll": (1, 2, 4, 8),
    "loop_unroll": (1, 2, 4),
    "grid": ("per_sm:1", "per_sm:2", "per_sm:4", "per_sm:8", "per_sm:16", "ctas:256", "per_tile"),
}
KNOB_DOCS = {
    "copy.placement": "copy task placement: body | head depth | deferred op (none: no pipeline); "
                      "body store,load is the loop rotated by one op (load ahead, last store in the "
                      "tail)",
    "warps": "warps per CTA (the copy task's warps)",
    "vector": f"elements per load/store instruction of one thread ({ELEMENT_BYTES}-byte "
              "elements: 8 = a 16-byte access)",
    "unroll": "vector loads per thread per iteration, all issued before its first store",
    "loop_unroll": "unroll hint of the TS domain loop (the tutorial's `unroll`)",
    "grid": "CTAs launched: per_sm:N = N per SM, ctas:256 = the tutorial's fixed grid, "
            "per_tile = one CTA per tile (no striding); never more CTAs than tiles",
}
SEED_GENES: dict[str, Any] = {
    "warps": 8, "vector": 1, "unroll": 1, "loop_unroll": 1, "grid": "ctas:256",
}
"""The tutorial's kernel as written: 8 warps, one int16 per thread per iteration, a domain loop
unroll of 1 and a fixed grid of 256 CTAs."""


def render_copy_placement(body: Sequence[str], depth: int, defer: str = "none") -> Placement:
    """The placement a key describes: the tutorial's body with ``depth`` head iterations, or
    the rotated body (the head then also opens the first loop iteration's load)."""
    if defer != "none":
        raise ValueError(f"the copy task has no pipeline op to defer, got {defer!r}")
    if tuple(body) == CANONICAL_BODY:
        return render_placement(body, depth, defer)  # type: ignore[return-value]
    if tuple(body) == ROTATED_BODY:
        head = [(op, "head") for _ in range(depth) for op in CANONICAL_BODY] + [("load", "head")]
        return (*head, ("store", "loop"), ("load", "loop"), ("store", "tail"))  # type: ignore[return-value]
    raise ValueError(f"copy task body must order load and store, got {tuple(body)}")


def placement_keys() -> list[tuple[tuple[str, ...], int, str]]:
    """Every placement key, in enumeration order: bodies outermost, then head depths."""
    return [(body, depth, "none") for body in COPY_OPS.bodies for depth in HEAD_DEPTHS]


# --------------------------------------------------------------------------------------
# From a genome to the kernel's configuration
# --------------------------------------------------------------------------------------


def resolve_grid(grid: str, tiles: int, sm_count: int) -> int:
    """CTAs launched for a ``grid`` gene: never more than there are tiles."""
    kind, _, count = grid.partition(":")
    if kind == "per_tile" and not count:
        return tiles
    if kind in ("per_sm", "ctas") and count.isdigit() and int(count) > 0:
        wanted = int(count) * (sm_count if kind == "per_sm" else 1)
        return min(tiles, wanted)
    raise ValueError(f"grid {grid!r} is not per_sm:N, ctas:N or per_tile")


def config_of(genome: Genome, problem: Problem, arch: str = "sm_90a",
              sm_count: int | None = None) -> GridStrideConfig:
    """The kernel configuration a genome describes for a problem, on a GPU of ``sm_count``
    SMs (None: the arch's default device profile, ``tsopt.core.devices``)."""

    def num(name: str) -> int:
        value = genome[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"gene {name}={value!r} must be an integer")
        return value

    warps, vector, unroll = num("warps"), num("vector"), num("unroll")
    elements = problem["rows"] * problem["cols"]
    tile_elems = 32 * warps * vector * unroll
    tiles = -(-elements // tile_elems) if tile_elems > 0 else 0
    return GridStrideConfig(
        dtype=problem.dtype,
        rows=problem["rows"],
        cols=problem["cols"],
        copy_ops=tuple((p.op, p.section) for p in genome.task(TASK).ops),
        warps=warps,
        vector=vector,
        unroll=unroll,
        loop_unroll=num("loop_unroll"),
        grid=resolve_grid(str(genome["grid"]), tiles,
                          sm_count if sm_count is not None else default_profile(arch).sm_count),
    )


def make_genome(placement: tuple[Sequence[str], int, str] = (CANONICAL_BODY, 0, "none"),
                **genes: Any) -> Genome:
    """A genome from knob values: ``placement`` is a key (body, depth, defer); the genes
    default to the seed's."""
    numeric = dict(SEED_GENES)
    for name, value in genes.items():
        if name not in numeric:
            raise KeyError(f"gridstride space has no gene {name!r}")
        numeric[name] = value
    return Genome.make(SPACE, schedule={TASK: render_copy_placement(*placement)}, numeric=numeric)
