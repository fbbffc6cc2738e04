"""Genes -> kernel configuration of the ``copy`` space: its ops, placements, knob tables.

The kernel (:mod:`tsopt.search_spaces.copy.kernel`) defines :class:`CopyConfig`; this
module decodes a genome into one (:func:`config_of`) and holds the tables the rest of the
space reads: each task's ops (:data:`TASKS`, for :mod:`tsopt.search_spaces.common.placement`)
and the choices of every gene.

Placement genes. Each task's loop body is a permutation of its five ops; the
head holds ``depth`` copies of that body for the first iterations (producer
prefetch, or consumer work kept in flight), and one sync op of those head
copies may be *deferred* to the tail (delayed release on the consumer side,
delayed commit on the producer side). The genome stores the resulting
explicit placement; :func:`placement_of` renders knob values into it and
:func:`knobs_of_placement` reads them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tsopt.core.devices import default_profile
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.search_spaces.common import placement
from tsopt.search_spaces.common.placement import Placement, TaskOps
from tsopt.search_spaces.copy.kernel import CopyConfig

SPACE = "copy"
SMEM_CAPACITY = 232_448
REGISTER_FILE = 65_536

# --------------------------------------------------------------------------------------
# Ops and placements
# --------------------------------------------------------------------------------------

LOAD_OPS = ("coords", "try_acquire", "acquire", "tma_load", "commit")
STORE_OPS = ("try_wait", "wait", "read", "release", "store")
TASK_OPS = {"load": LOAD_OPS, "store": STORE_OPS}
WORK_OPS = {"load": ("coords", "tma_load"), "store": ("read", "store")}
SYNC_OPS = {"load": ("try_acquire", "acquire", "commit"), "store": ("try_wait", "wait", "release")}
# (producer of a token, its consumer): the token must exist before it is used.
TOKENS = {"load": ("coords", "tma_load"), "store": ("read", "store")}
TASKS = {task: TaskOps(task, TASK_OPS[task], WORK_OPS[task], SYNC_OPS[task], (TOKENS[task],))
         for task in TASK_OPS}

CANONICAL_BODY = {"load": LOAD_OPS, "store": STORE_OPS}
HEAD_DEPTHS = (0, 1, 2)

PlacementKnobs = tuple[tuple[str, ...], int, str]
"""(body, depth, defer): one task's placement knobs."""


def placement_of(body: Sequence[str], depth: int, defer: str) -> Placement:
    """Explicit placement: ``depth`` head copies of ``body`` (less ``defer``), the loop body,
    and one deferred ``defer`` op per head copy in the tail."""
    return placement.render_placement(body, depth, defer)


def knobs_of_placement(task: str, ops: Sequence[tuple[str, str]]) -> PlacementKnobs | None:
    """(body, depth, defer) if ``ops`` is a placement :func:`placement_of` renders, else None."""
    key = placement.key_of_placement(ops, TASKS[task], HEAD_DEPTHS, placement_of)
    return None if key is None else (key[0], key[1], key[2])


def placement_name(knobs: PlacementKnobs) -> str:
    """``coords,try_acquire,acquire,tma_load,commit|1|none``: a placement as a knob value."""
    return placement.placement_name(knobs)


def parse_placement_name(name: str) -> PlacementKnobs:
    body, depth, defer = placement.parse_placement_name(name, (int, str))
    return body, depth, defer


def placement_dataflow_error(task: str, ops: Sequence[tuple[str, str]]) -> str | None:
    """Why a placement cannot compute a copy (:func:`placement.dataflow_error`)."""
    return placement.dataflow_error(TASKS[task], ops)


# --------------------------------------------------------------------------------------
# From a genome to the kernel's configuration
# --------------------------------------------------------------------------------------


def config_of(genome: Genome, problem: Problem, arch: str = "sm_90a",
              sm_count: int | None = None) -> CopyConfig:
    """The kernel configuration a genome describes for a problem, on a GPU of ``sm_count``
    SMs (None: the arch's default device profile, ``tsopt.core.devices``)."""

    def num(name: str) -> int:
        value = genome[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"gene {name}={value!r} must be an integer")
        return value

    return CopyConfig(
        dtype=problem.dtype,
        rows=problem["rows"],
        cols=problem["cols"],
        load_ops=tuple((p.op, p.section) for p in genome.task("load").ops),
        store_ops=tuple((p.op, p.section) for p in genome.task("store").ops),
        advance_on_wait=bool(genome["advance_on_wait"]),
        persistent=bool(genome["persistent"]),
        stages=num("stages"),
        box_rows=num("box_rows"),
        box_cols=num("box_cols"),
        store_warps=num("store_warps"),
        store_warp=num("store_warp"),
        load_warp=num("load_warp"),
        load_regs=num("load_regs"),
        store_regs=num("store_regs"),
        chunk=num("chunk"),
        ctas_per_sm=num("ctas_per_sm"),
        vector=num("vector"),
        raster=str(genome["raster"]),
        sm_count=sm_count if sm_count is not None else default_profile(arch).sm_count,
        planted=tuple(
            (k.removeprefix("planted."), v)
            for k, v in genome.genes.items()
            if k.startswith("planted.")
        ),
    )


# --------------------------------------------------------------------------------------
# Gene tables
# --------------------------------------------------------------------------------------

BODIES = {task: ops.bodies for task, ops in TASKS.items()}
DEFERRABLE = {task: ("none", *SYNC_OPS[task]) for task in TASK_OPS}

NUMERIC_CHOICES: dict[str, tuple[int, ...]] = {
    "stages": (1, 2, 3, 4, 6, 8),
    "box_rows": (1, 8, 16, 32, 64, 128),
    "box_cols": (64, 128, 256),
    "store_warps": (1, 2, 4, 8),
    "store_warp": (0, 4),
    "load_warp": (0, 4, 8),
    "load_regs": (24, 40),
    "store_regs": (64, 128, 168, 232),
    "chunk": (1, 2, 4, 8, 16, 32),
    "ctas_per_sm": (0, 1, 2, 4),
    "vector": (1, 2, 4, 8),
}
STRUCTURE_CHOICES: dict[str, tuple[Any, ...]] = {
    "advance_on_wait": (False, True),
    "persistent": (False, True),
    "raster": ("row", "col"),
}
# Genes ``planted.<name>`` (``tsopt.core.space.FAULT_GENE_PREFIX``): the verifier rejects a
# genome carrying one (rule ``tsopt.fault_gene``) unless TSOPT_ALLOW_FAULT_GENES=1.
PLANTED_FAULTS = {
    "skip_validation": "build even if TS rejects the schedule (TS warns instead of raising)",
    "consumer_threads": "consumer cooperative-group size that does not match the store warps",
    "smem_read_offset": "store warps read SMEM this many elements past their stage (out of bounds)",
    "skip_vectors": "each store thread leaves its last N vectors unwritten",
    "no_proxy_fence": "no fence.proxy.async between the store warps' SMEM reads and the release",
}
KNOB_DOCS = {
    "load.body": "order of the producer's loop body (coords, try_acquire, acquire, tma_load, commit)",
    "load.depth": "producer prefetch depth: copies of the body placed in the head",
    "load.defer": "sync op of the head copies deferred to the tail (delayed commit)",
    "store.body": "order of the consumer's loop body (try_wait, wait, read, release, store)",
    "store.depth": "consumer in-flight depth: copies of the body placed in the head",
    "store.defer": "sync op of the head copies deferred to the tail (delayed release)",
    "advance_on_wait": "consumer pipeline advances its stage on wait, releases from a lagging state",
    "persistent": "static persistent WorkQueue tile loop instead of one CTA per work tile",
    "stages": "SMEM pipeline stages",
    "box_rows": "TMA box rows (one box per iteration)",
    "box_cols": "TMA box columns (contiguous)",
    "store_warps": "warps of the store task (consumer group = 32 x this)",
    "store_warp": "first warp of the store task",
    "load_warp": "warp of the load task",
    "load_regs": "register budget of the load warp's group (setmaxnreg)",
    "store_regs": "register budget of the store warps' groups (setmaxnreg)",
    "chunk": "boxes per work tile (domain-loop iterations per tile)",
    "ctas_per_sm": "persistent CTAs per SM (0: not persistent)",
    "vector": "elements per SMEM read and GMEM store of one thread (8 = 16 bytes at fp16)",
    "raster": "boxes of a work tile run along rows (row) or down a column strip (col)",
}


DEFAULT_STRUCTURE: dict[str, Any] = {"advance_on_wait": False, "persistent": False, "raster": "row"}
DEFAULT_NUMERIC: dict[str, int] = {
    "stages": 4,
    "box_rows": 32,
    "box_cols": 128,
    "store_warps": 4,
    "store_warp": 0,
    "load_warp": 4,
    "load_regs": 40,
    "store_regs": 168,
    "chunk": 8,
    "ctas_per_sm": 0,
    "vector": 8,
}
"""The genes of a genome that does not name them: the structural ones, the numeric ones."""

LAYOUT_GENES = ("store_warps", "store_warp", "load_warp", "load_regs", "store_regs")


def layout_name(genes: dict[str, int]) -> str:
    """``4@0,load4,40/168``: store warps @ first store warp, load warp, load/store registers."""
    return (
        f"{genes['store_warps']}@{genes['store_warp']},load{genes['load_warp']},"
        f"{genes['load_regs']}/{genes['store_regs']}"
    )


def parse_layout_name(name: str) -> dict[str, int]:
    store, load, regs = name.split(",")
    store_warps, store_warp = store.split("@")
    load_regs, store_regs = regs.split("/")
    return {
        "store_warps": int(store_warps),
        "store_warp": int(store_warp),
        "load_warp": int(load.removeprefix("load")),
        "load_regs": int(load_regs),
        "store_regs": int(store_regs),
    }


TS_KEY_GENES = ("stages", "store_warps", "store_warp", "load_warp", "load_regs", "store_regs")
"""Numeric genes the TS checks see (the rest only matter to tsopt's checks and speed)."""
