"""Knobs, placements and the genome -> configuration mapping of the Hopper TS GEMM space.

The configuration itself, :class:`GemmConfig` (every knob value plus the sizes
derived from them and from the problem: K tiles, warp layout, SMEM bytes), is
defined by the kernel module (``tsopt.search_spaces.gemm.kernel``), which
reads it; this module decodes a genome into one (:func:`config_of`). The
config is plain data, so the knob tables, the checks, the funnel and the
tests use it without tracing anything.

Placements. The producer (``load``) and each consumer warpgroup (``mma``)
run a loop body that is a permutation of their ops. The head holds ``depth``
copies of that body (producer prefetch; consumer wgmma batches kept in
flight), less one sync op that is *deferred* to the tail (delayed commit;
delayed release). The consumer's ``wgmma_wait`` op is ``warpgroup.wait_group
(pending)``; ``drain`` puts a ``wait_group(0)`` in the tail before the
accumulator is read. The genome stores the explicit placement that these
knobs render (:func:`load_placement`, :func:`mma_placement`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tsopt.core.dsl_env import ensure_arch
from tsopt.core.genome import Genome
from tsopt.core.space import GeneDomain, gene_kind
from tsopt.search_spaces.common import placement
from tsopt.search_spaces.common.placement import TaskOps

ensure_arch()  # the kernel module imports the DSL, which reads its target arch once

# Re-exported for the space's modules: the kernel owns its sizes and configuration.
from tsopt.search_spaces.gemm.kernel import (  # noqa: E402, F401
    DEFAULT_SM_COUNT,
    ELEMENT_BYTES,
    EPI_COLS,
    PRIMARY_OP,
    WARPGROUP,
    GemmConfig,
    Placement,
)

SPACE = "gemm"
SMEM_CAPACITY = 232_448
"""Bytes of shared memory one CTA may use on sm_90 (227 KiB), as TS checks it."""
REGISTER_FILE = 65_536

# --------------------------------------------------------------------------------------
# Ops and placements
# --------------------------------------------------------------------------------------

LOAD_OPS = ("coords", "try_acquire", "acquire", "tma_load", "commit")
MMA_OPS = ("try_wait", "wait", "read_stage", "wgmma", "wgmma_wait", "release")
TASK_OPS = {"load": LOAD_OPS, "mma": MMA_OPS}
SYNC_OPS = {"load": ("try_acquire", "acquire", "commit"), "mma": ("try_wait", "wait", "release")}
WORK_OPS = {"load": ("coords", "tma_load"), "mma": ("read_stage", "wgmma")}
TOKENS = {"load": ("coords", "tma_load"), "mma": ("read_stage", "wgmma")}
"""(producer of a token, its consumer) per task: the token must exist before its use."""
TASKS = {
    "load": TaskOps("load", LOAD_OPS, WORK_OPS["load"], SYNC_OPS["load"], (TOKENS["load"],)),
    # wgmma_wait is placed as wgmma_wait<N>: warpgroup.wait_group(N).
    "mma": TaskOps("mma", MMA_OPS, WORK_OPS["mma"], SYNC_OPS["mma"], (TOKENS["mma"],),
                   suffixed=("wgmma_wait",)),
}

HEAD_DEPTHS = (0, 1, 2)
PENDING = (0, 1, 2)
DRAINS = ("tail", "none")
BODIES = {task: ops.bodies for task, ops in TASKS.items()}
DEFERRABLE = {task: ("none", *SYNC_OPS[task]) for task in TASK_OPS}
CANONICAL_BODY = {"load": LOAD_OPS, "mma": MMA_OPS}

LoadKey = tuple[tuple[str, ...], int, str]
"""(body, depth, defer): the producer's placement knobs."""
MmaKey = tuple[tuple[str, ...], int, str, int, str]
"""(body, depth, defer, pending, drain): a consumer warpgroup's placement knobs."""
KEY_FIELDS = {"load": (int, str), "mma": (int, str, int, str)}
"""How the parts of a placement name after the body are read, per task."""


def load_placement(body: Sequence[str], depth: int, defer: str) -> Placement:
    """``depth`` head copies of ``body`` (less ``defer``), the loop body, the deferred ops."""
    return placement.render_placement(body, depth, defer)  # type: ignore[return-value]


def mma_placement(
    body: Sequence[str], depth: int, defer: str, pending: int, drain: str
) -> Placement:
    """As :func:`load_placement`, with ``wgmma_wait`` rendered as ``wgmma_wait<pending>`` and,
    with ``drain == "tail"``, a ``wgmma_wait0`` opening the tail."""
    rendered = [f"wgmma_wait{pending}" if op == "wgmma_wait" else op for op in body]
    drain_ops = ("wgmma_wait0",) if drain == "tail" else ()
    return placement.render_placement(rendered, depth, defer, drain_ops)  # type: ignore[return-value]


def load_key(ops: Sequence[tuple[str, str]]) -> LoadKey | None:
    """The knobs :func:`load_placement` renders ``ops`` from, or None."""
    key = placement.key_of_placement(ops, TASKS["load"], HEAD_DEPTHS, load_placement)
    return None if key is None else (key[0], key[1], key[2])


def mma_key(ops: Sequence[tuple[str, str]]) -> MmaKey | None:
    """The knobs :func:`mma_placement` renders ``ops`` from, or None."""
    key = placement.key_of_placement(ops, TASKS["mma"], HEAD_DEPTHS, mma_placement,
                                     (PENDING, DRAINS))
    return None if key is None else (key[0], key[1], key[2], key[3], key[4])


def placement_name(key: tuple[Any, ...]) -> str:
    """``body|depth|defer[|pending|drain]``: a placement as a sampler knob value."""
    return placement.placement_name(key)


def parse_placement_name(task: str, name: str) -> tuple[Any, ...]:
    return placement.parse_placement_name(name, KEY_FIELDS[task])


def placement_dataflow_error(task: str, ops: Sequence[tuple[str, str]]) -> str | None:
    """Why a placement cannot compute the GEMM, before any pipeline rule is judged
    (:func:`tsopt.search_spaces.common.placement.dataflow_error`). The pipeline protocol is
    TS's to judge, the asynchronous wgmma tsopt's (``checks.async_consumer_findings``)."""
    return placement.dataflow_error(TASKS[task], ops)


# --------------------------------------------------------------------------------------
# Numeric and structural genes
# --------------------------------------------------------------------------------------

NUMERIC_CHOICES: dict[str, tuple[int, ...]] = {
    "tile_m": (64, 128, 192, 256),
    "tile_n": (16, 32, 48, 64, 80, 96, 128, 160, 192, 256),
    "tile_k": (32, 64, 128),
    "stages": (2, 3, 4, 5, 6, 7, 8, 10, 12, 16),
    "consumers": (1, 2),
    "load_warp": (0, 3),
    "producer_regs": (24, 40, 56),
    "consumer_regs": (160, 200, 232, 240),
    "swizzle": (1, 2, 4, 8),
    "split_k": (1, 2, 3, 4),
}
STRUCTURE_CHOICES: dict[str, tuple[bool | str, ...]] = {
    "advance_on_wait": (True, False),
    "persistent": (False, True),
    "producer_wg": ("first", "last"),
    "cluster": ("1x1", "2x1", "1x2", "2x2", "4x1", "1x4"),
    "raster": ("m", "n"),
    "epilogue": ("direct", "tma_store"),
    "arrangement": ("cooperative", "separate", "split_n"),
    "swap_ab": (False, True),
    "stream_k": (False, True),
}
KNOB_DOCS = {
    "load.body": "order of the producer's loop body "
                 "(coords, try_acquire, acquire, tma_load, commit)",
    "load.depth": "producer prefetch depth: copies of the body placed in the head",
    "load.defer": "sync op of the producer's head copies deferred to the tail (delayed commit)",
    "mma.body": "order of a consumer warpgroup's loop body "
                "(try_wait, wait, read_stage, wgmma, wgmma_wait, release)",
    "mma.depth": "wgmma batches in flight: copies of the consumer body placed in the head",
    "mma.defer": "sync op of the consumer's head copies deferred to the tail (delayed release)",
    "mma.pending": "N of the loop's warpgroup.wait_group(N): wgmma batches left in flight",
    "mma.drain": "'tail': wait_group(0) before the epilogue reads the accumulator",
    "advance_on_wait": "consumer pipeline advances its stage on wait and releases from a lagging "
                       "state (needed to hold more than one stage)",
    "persistent": "static persistent WorkQueue tile loop (one wave of clusters) instead of one "
                  "tile per CTA",
    "producer_wg": "producer warpgroup before ('first') or after ('last') the consumer warpgroups",
    "cluster": "cluster shape MxN; A is TMA-multicast along N, B along M",
    "raster": "persistent tile order: along M or along N (with swizzle)",
    "epilogue": "'direct': D written by predicated stores from registers; 'tma_store': "
                "staged through a swizzled SMEM buffer per warpgroup and written by TMA stores",
    "arrangement": "'cooperative': the consumer warpgroups split one tile along M; 'split_n': "
                   "they split it along N (each over every row of the tile); 'separate': each "
                   "warpgroup on its own tile, fed by its own producer warp and SMEM pipeline",
    "swap_ab": "compute Dᵀ = B·Aᵀ (the problem's N on the tile's M side, for a small M); D "
               "is still written row-major M x N, through swapped strides",
    "tile_m": "tile rows: the CTA's (cooperative, split_n) or each warpgroup's own (separate); "
              "m64 wgmma repeats",
    "tile_n": "CTA tile columns = wgmma N (split_n: tile_n / consumers per warpgroup)",
    "tile_k": "K slice per stage (wgmma K=16 steps per slice: tile_k/16)",
    "stages": "SMEM pipeline stages of A and B slices",
    "consumers": "consumer warpgroups (see arrangement)",
    "load_warp": "warp of the producer inside its warpgroup (the rest pad)",
    "producer_regs": "register budget of the producer warpgroup (setmaxnreg)",
    "consumer_regs": "register budget of each consumer warpgroup (setmaxnreg)",
    "swizzle": "persistent raster swizzle, in clusters (1: none)",
    "split_k": "CTAs per output tile, each over 1/split_k of K, in a cluster along z; their fp32 "
               "partials are summed in a fixed order through distributed SMEM (deterministic)",
    "stream_k": "persistent data-parallel waves, then the last partial wave and one more cut "
                "into K pieces shared evenly by every CTA (stream-K); a tile's pieces are "
                "summed in a fixed order through a global workspace (deterministic)",
}
ADDED_GENES: dict[str, Any] = {"arrangement": "cooperative", "swap_ab": False, "split_k": 1,
                               "stream_k": False}
"""Genes added after studies were recorded, with the value a genome without one means (so
recorded genomes keep their hash, their verdict and their meaning)."""
OMITTED_AT_DEFAULT = ("swap_ab", "split_k", "stream_k")
"""Added genes a genome built by the space leaves out while they hold their default, so the
genomes it built before they existed (the seed, every recorded study's) keep their hash."""


PARAM_NAMES = {"tile_m": "tile_m.v2", "arrangement": "arrangement.v2"}
"""The Optuna parameter of each knob whose choices grew after studies were recorded (192 rows;
'split_n'), under a name of its own: Optuna refuses to resume a study whose recorded
parameter had other choices. A recorded trial's value under the old name means the same gene
value (``Knob.param``)."""


def gene_choices(name: str) -> tuple[Any, ...]:
    """The choices of a structural or numeric gene."""
    return STRUCTURE_CHOICES.get(name) or NUMERIC_CHOICES[name]


def gene(genome: Genome, name: str) -> object:
    """``genome[name]``, or the meaning of its absence for a gene added later."""
    if name in ADDED_GENES and name not in genome.genes:
        return ADDED_GENES[name]
    return genome[name]


TS_KEY_GENES = ("advance_on_wait", "persistent", "producer_wg", "cluster", "tile_m", "tile_n",
                "tile_k", "stages", "consumers", "arrangement", "load_warp", "producer_regs",
                "consumer_regs", "epilogue")
"""Genes that reach the TS skeleton (pipeline, warps, registers, SMEM sizes)."""

SEED_GENES: dict[str, Any] = {
    "advance_on_wait": True, "persistent": False, "producer_wg": "first", "cluster": "1x1",
    "raster": "m", "epilogue": "direct", "arrangement": "cooperative", "swap_ab": False,
    "tile_m": 128, "tile_n": 256, "tile_k": 64, "stages": 4, "consumers": 2, "load_warp": 0,
    "producer_regs": 40, "consumer_regs": 232, "swizzle": 1, "split_k": 1, "stream_k": False,
}
SEED_PLACEMENT: dict[str, Any] = {
    "load.body": ",".join(CANONICAL_BODY["load"]), "load.depth": 0, "load.defer": "none",
    "mma.body": ",".join(CANONICAL_BODY["mma"]), "mma.depth": 1, "mma.defer": "release",
    "mma.pending": 1, "mma.drain": "tail",
}
"""The hand-written seed (a genome's knobs when not given): see ``HopperGemmSpace.seed_genome``."""

PLACEMENT_KNOBS = ("load.body", "load.depth", "load.defer",
                   "mma.body", "mma.depth", "mma.defer", "mma.pending", "mma.drain")


def parse_cluster(text: str) -> tuple[int, int]:
    m, n = text.split("x")
    return int(m), int(n)


# --------------------------------------------------------------------------------------
# From a genome to the kernel's configuration
# --------------------------------------------------------------------------------------


def config_of(genome: Genome, problem_sizes: dict[str, int], dtype: str,
              sm_count: int = DEFAULT_SM_COUNT,
              m_range: tuple[int, int] | None = None) -> GemmConfig:
    """The kernel configuration a genome describes for a problem, on a GPU of ``sm_count``
    SMs (the target's device profile: ``HopperGemmSpace.config``); ``m_range``: the problem's
    runtime M range (its ``m`` is the upper end), None for a fixed M."""

    def num(name: str) -> int:
        value = genome[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"gene {name}={value!r} must be an integer")
        return value

    cluster_m, cluster_n = parse_cluster(str(genome["cluster"]))
    swap_ab = bool(gene(genome, "swap_ab"))
    # Swapped, the kernel computes Dᵀ: its rows are the problem's N, its columns its M.
    m, n = problem_sizes["m"], problem_sizes["n"]
    if swap_ab:
        m, n = n, m
    return GemmConfig(
        dtype=dtype, m=m, n=n, k=problem_sizes["k"],
        tile_m=num("tile_m"), tile_n=num("tile_n"), tile_k=num("tile_k"),
        stages=num("stages"), consumers=num("consumers"), arrangement=str(gene(genome, "arrangement")),
        producer_wg=str(genome["producer_wg"]), load_warp=num("load_warp"),
        producer_regs=num("producer_regs"), consumer_regs=num("consumer_regs"),
        cluster_m=cluster_m, cluster_n=cluster_n,
        raster=str(genome["raster"]), swizzle=num("swizzle"),
        persistent=bool(genome["persistent"]), epilogue=str(genome["epilogue"]),
        advance_on_wait=bool(genome["advance_on_wait"]),
        load_ops=tuple((p.op, p.section) for p in genome.task("load").ops),
        mma_ops=tuple((p.op, p.section) for p in genome.task("mma").ops),
        swap_ab=swap_ab,
        split_k=int(gene(genome, "split_k")),  # type: ignore[call-overload]
        stream_k=bool(gene(genome, "stream_k")),
        sm_count=sm_count,
        m_range=m_range,
    )


# --------------------------------------------------------------------------------------
# Genomes from knob values, and what makes one unfit for the kernel
# --------------------------------------------------------------------------------------


def genome_of(**values: Any) -> Genome:
    """A genome from knob values; every knob not given takes the seed's value
    (``HopperGemmSpace.genome``).

    Placement knobs may also be given as tuples: ``load=(body, depth, defer)``,
    ``mma=(body, depth, defer, pending, drain)``.
    """
    placement = dict(SEED_PLACEMENT)
    genes = dict(SEED_GENES)
    if "load" in values:
        body, depth, defer = values.pop("load")
        placement.update({"load.body": ",".join(body), "load.depth": depth,
                          "load.defer": defer})
    if "mma" in values:
        body, depth, defer, pending, drain = values.pop("mma")
        placement.update({"mma.body": ",".join(body), "mma.depth": depth, "mma.defer": defer,
                          "mma.pending": pending, "mma.drain": drain})
    for name, value in values.items():
        if name in placement:
            placement[name] = value
        elif name in genes:
            genes[name] = value
        else:
            raise KeyError(f"gemm space has no knob {name!r}")
    structure = {n: genes[n] for n in STRUCTURE_CHOICES
                 if not (n in OMITTED_AT_DEFAULT and genes[n] == ADDED_GENES[n])}
    numeric = {n: genes[n] for n in NUMERIC_CHOICES
               if not (n in OMITTED_AT_DEFAULT and genes[n] == ADDED_GENES[n])}
    load = load_placement(str(placement["load.body"]).split(","), int(placement["load.depth"]),
                          str(placement["load.defer"]))
    mma = mma_placement(str(placement["mma.body"]).split(","), int(placement["mma.depth"]),
                        str(placement["mma.defer"]), int(placement["mma.pending"]),
                        str(placement["mma.drain"]))
    return Genome.make(SPACE, {"load": load, "mma": mma}, structure, numeric)


def genome_dataflow_error(genome: Genome) -> str | None:
    """Why ``genome`` is not a GEMM genome the kernel can compute (another space, a task or
    gene missing or unknown, an added gene out of its choices, a placement using a value
    before it is produced), else None (``HopperGemmSpace.dataflow_error``)."""
    if genome.space != SPACE:
        return f"genome is of space {genome.space!r}, not {SPACE!r}"
    tasks = {t.task for t in genome.schedule}
    if tasks != set(TASK_OPS):
        return f"gemm genomes schedule tasks {sorted(TASK_OPS)}, got {sorted(tasks)}"
    missing = [g for g in (*NUMERIC_CHOICES, *STRUCTURE_CHOICES)
               if g not in genome.genes and g not in ADDED_GENES]
    if missing:
        return f"genome lacks gene(s) {missing}"
    unknown = sorted(set(genome.genes) - {*NUMERIC_CHOICES, *STRUCTURE_CHOICES})
    if unknown:
        return f"unknown gene(s) {unknown} for space {SPACE!r}"
    for name, meaning in ADDED_GENES.items():
        # Left out of the schema (a genome may lack it), so judged here when present:
        # any value but the choices would silently mean the default to the kernel.
        if name in genome.genes:
            choices = gene_choices(name)
            error = GeneDomain(name, gene_kind(meaning), choices=choices).error(genome[name])
            if error is not None:
                return error
    for task in TASK_OPS:
        ops = tuple((p.op, p.section) for p in genome.task(task).ops)
        error = placement_dataflow_error(task, ops)
        if error:
            return f"{task}: {error}"
    return None
