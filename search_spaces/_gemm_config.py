"""Knobs, placements and the decoded configuration of the Hopper TS GEMM space.

A :class:`GemmConfig` is what the template (``search_spaces.hopper_gemm``)
reads: the genome's genes and schedule placements decoded, plus the sizes
derived from them and from the problem (K tiles, warp layout, SMEM bytes).
It is plain Python (no DSL) so that the knob tables, the checks, the funnel
and the tests can use it without tracing anything.

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

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from tsopt.genome import Genome, Section

SPACE = "gemm"
SMEM_CAPACITY = 232_448
"""Bytes of shared memory one CTA may use on sm_90 (227 KiB), as TS checks it."""
REGISTER_FILE = 65_536
SM_COUNT = 132
"""SMs of an H200 (and H100 SXM): a persistent grid is one wave of clusters."""
WARPGROUP = 4
"""Warps per warpgroup: register budgets (setmaxnreg) apply per warpgroup."""
ELEMENT_BYTES = {"bf16": 2, "fp16": 2}
EPI_COLS = 64
"""Columns of D one epilogue subtile covers (the accumulator is drained in slabs)."""

Placement = tuple[tuple[str, Section], ...]

# --------------------------------------------------------------------------------------
# Ops and placements
# --------------------------------------------------------------------------------------

LOAD_OPS = ("coords", "try_acquire", "acquire", "tma_load", "commit")
MMA_OPS = ("try_wait", "wait", "read_stage", "wgmma", "wgmma_wait", "release")
TASK_OPS = {"load": LOAD_OPS, "mma": MMA_OPS}
SYNC_OPS = {"load": ("try_acquire", "acquire", "commit"), "mma": ("try_wait", "wait", "release")}
WORK_OPS = {"load": ("coords", "tma_load"), "mma": ("read_stage", "wgmma")}
PRIMARY_OP = {"load": "tma_load", "mma": "wgmma"}
TOKENS = {"load": ("coords", "tma_load"), "mma": ("read_stage", "wgmma")}
"""(producer of a token, its consumer) per task: the token must exist before its use."""

HEAD_DEPTHS = (0, 1, 2)
PENDING = (0, 1, 2)
DRAINS = ("tail", "none")
BODIES = {task: tuple(itertools.permutations(ops)) for task, ops in TASK_OPS.items()}
DEFERRABLE = {task: ("none", *SYNC_OPS[task]) for task in TASK_OPS}
CANONICAL_BODY = {"load": LOAD_OPS, "mma": MMA_OPS}


def load_placement(body: Sequence[str], depth: int, defer: str) -> Placement:
    """``depth`` head copies of ``body`` (less ``defer``), the loop body, the deferred ops."""
    head = [(op, "head") for _ in range(depth) for op in body if op != defer]
    loop = [(op, "loop") for op in body]
    tail = [(defer, "tail")] * depth if defer != "none" and depth else []
    return tuple(head + loop + tail)  # type: ignore[arg-type]


def mma_placement(
    body: Sequence[str], depth: int, defer: str, pending: int, drain: str
) -> Placement:
    """As :func:`load_placement`, with ``wgmma_wait`` rendered as ``wgmma_wait<pending>`` and,
    with ``drain == "tail"``, a ``wgmma_wait0`` opening the tail."""
    rendered = [f"wgmma_wait{pending}" if op == "wgmma_wait" else op for op in body]
    head = [(op, "head") for _ in range(depth) for op in rendered if op != defer]
    loop = [(op, "loop") for op in rendered]
    tail = [("wgmma_wait0", "tail")] if drain == "tail" else []
    tail += [(defer, "tail")] * depth if defer != "none" and depth else []
    return tuple(head + loop + tail)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Numeric and structural genes
# --------------------------------------------------------------------------------------

NUMERIC_CHOICES: dict[str, tuple[int, ...]] = {
    "tile_m": (64, 128, 256),
    "tile_n": (64, 128, 192, 256),
    "tile_k": (32, 64, 128),
    "stages": (2, 3, 4, 5, 6, 7, 8),
    "consumers": (1, 2),
    "load_warp": (0, 3),
    "producer_regs": (24, 40, 56),
    "consumer_regs": (160, 200, 232, 240),
    "swizzle": (1, 2, 4, 8),
}
STRUCTURE_CHOICES: dict[str, tuple[bool | str, ...]] = {
    "advance_on_wait": (True, False),
    "persistent": (False, True),
    "producer_wg": ("first", "last"),
    "cluster": ("1x1", "2x1", "1x2"),
    "raster": ("m", "n"),
    "epilogue": ("direct",),
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
    "epilogue": "D written by direct predicated stores from registers",
    "tile_m": "CTA tile rows (64 per consumer warpgroup per wgmma m64 repeat)",
    "tile_n": "CTA tile columns = wgmma N",
    "tile_k": "K slice per stage (wgmma K=16 steps per slice: tile_k/16)",
    "stages": "SMEM pipeline stages of A and B slices",
    "consumers": "consumer warpgroups, cooperative on one tile (each owns tile_m/consumers rows)",
    "load_warp": "warp of the producer inside its warpgroup (the rest pad)",
    "producer_regs": "register budget of the producer warpgroup (setmaxnreg)",
    "consumer_regs": "register budget of each consumer warpgroup (setmaxnreg)",
    "swizzle": "persistent raster swizzle, in clusters (1: none)",
}
PLACEMENT_KNOBS = ("load.body", "load.depth", "load.defer",
                   "mma.body", "mma.depth", "mma.defer", "mma.pending", "mma.drain")


def body_name(body: Sequence[str]) -> str:
    return ",".join(body)


def parse_cluster(text: str) -> tuple[int, int]:
    m, n = text.split("x")
    return int(m), int(n)


# --------------------------------------------------------------------------------------
# The decoded configuration
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    """Every knob value of one candidate, for one problem. Derived values are properties."""

    dtype: str
    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    consumers: int
    producer_wg: str
    load_warp: int
    producer_regs: int
    consumer_regs: int
    cluster_m: int
    cluster_n: int
    raster: str
    swizzle: int
    persistent: bool
    epilogue: str
    advance_on_wait: bool
    load_ops: Placement
    mma_ops: Placement

    @classmethod
    def from_genome(cls, genome: Genome, problem_sizes: dict[str, int], dtype: str) -> GemmConfig:
        def num(name: str) -> int:
            value = genome[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"gene {name}={value!r} must be an integer")
            return value

        cluster_m, cluster_n = parse_cluster(str(genome["cluster"]))
        return cls(
            dtype=dtype, m=problem_sizes["m"], n=problem_sizes["n"], k=problem_sizes["k"],
            tile_m=num("tile_m"), tile_n=num("tile_n"), tile_k=num("tile_k"),
            stages=num("stages"), consumers=num("consumers"),
            producer_wg=str(genome["producer_wg"]), load_warp=num("load_warp"),
            producer_regs=num("producer_regs"), consumer_regs=num("consumer_regs"),
            cluster_m=cluster_m, cluster_n=cluster_n,
            raster=str(genome["raster"]), swizzle=num("swizzle"),
            persistent=bool(genome["persistent"]), epilogue=str(genome["epilogue"]),
            advance_on_wait=bool(genome["advance_on_wait"]),
            load_ops=tuple((p.op, p.section) for p in genome.task("load").ops),
            mma_ops=tuple((p.op, p.section) for p in genome.task("mma").ops),
        )

    # -- schedule shape --------------------------------------------------------------
    @staticmethod
    def section(ops: Placement, section: Section) -> tuple[str, ...]:
        return tuple(op for op, sec in ops if sec == section)

    def head_depth(self, task: str) -> int:
        ops = self.load_ops if task == "load" else self.mma_ops
        return self.section(ops, "head").count(PRIMARY_OP[task])

    @property
    def prefetch(self) -> int:
        """K slices the producer loads in its head, before its domain loop."""
        return self.head_depth("load")

    @property
    def inflight(self) -> int:
        """wgmma batches issued in the consumer head, before its domain loop."""
        return self.head_depth("mma")

    # -- sizes -----------------------------------------------------------------------
    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def k_tiles(self) -> int:
        return -(-self.k // self.tile_k)

    @property
    def tiles_m(self) -> int:
        return -(-self.m // self.tile_m)

    @property
    def tiles_n(self) -> int:
        return -(-self.n // self.tile_n)

    @property
    def wg_tile_m(self) -> int:
        """Rows of the CTA tile one consumer warpgroup accumulates."""
        return self.tile_m // self.consumers

    @property
    def m_repeats(self) -> int:
        """m64 wgmma instructions per K step per consumer warpgroup."""
        return self.wg_tile_m // 64

    @property
    def acc_registers(self) -> int:
        """fp32 accumulator registers per consumer thread."""
        return self.wg_tile_m * self.tile_n // 128

    @property
    def a_stage_bytes(self) -> int:
        return self.tile_m * self.tile_k * self.element_bytes

    @property
    def b_stage_bytes(self) -> int:
        return self.tile_n * self.tile_k * self.element_bytes

    @property
    def stage_bytes(self) -> int:
        return self.a_stage_bytes + self.b_stage_bytes

    @property
    def smem_bytes(self) -> int:
        """What TS's allocator counts: A and B stages (1024-aligned) plus two mbarriers a stage."""
        a = -(-self.stages * self.a_stage_bytes // 1024) * 1024
        return a + self.stages * self.b_stage_bytes + 16 * self.stages

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def mcast_size(self) -> int:
        """CTAs whose consumers release a stage before its producer may refill it."""
        return self.cluster_m + self.cluster_n - 1

    @property
    def epi_subtiles(self) -> int:
        return self.tile_n // EPI_COLS

    @property
    def ragged(self) -> bool:
        """M or N not a multiple of the tile: the epilogue must predicate its stores."""
        return self.m % self.tile_m != 0 or self.n % self.tile_n != 0

    @property
    def overhang(self) -> bool:
        """The launch visits tiles beyond the problem: a grid rounded up to whole clusters,
        or a persistent raster swizzle rounded up to whole swizzle bands. Their stores
        must be skipped (their loads are TMA zero fill)."""
        cm, cn = self.cluster_m, self.cluster_n
        if self.tiles_m % cm or self.tiles_n % cn:
            return True
        if self.persistent and self.swizzle > 1:
            clusters = self.tiles_n // cn if self.raster == "m" else self.tiles_m // cm
            return clusters % self.swizzle != 0
        return False

    # -- warp layout -----------------------------------------------------------------
    @property
    def producer_group(self) -> int:
        """First warp of the producer warpgroup."""
        return 0 if self.producer_wg == "first" else WARPGROUP * self.consumers

    @property
    def producer_warp(self) -> int:
        return self.producer_group + self.load_warp

    @property
    def consumer_warps(self) -> tuple[int, ...]:
        """First warp of each consumer warpgroup."""
        base = WARPGROUP if self.producer_wg == "first" else 0
        return tuple(base + WARPGROUP * i for i in range(self.consumers))

    def padding(self) -> list[tuple[int, int]]:
        """(first warp, warps) of the padding tasks: the producer warpgroup's other warps."""
        pads = []
        if self.load_warp > 0:
            pads.append((self.producer_group, self.load_warp))
        if self.load_warp < WARPGROUP - 1:
            pads.append((self.producer_warp + 1, WARPGROUP - 1 - self.load_warp))
        return pads

    @property
    def threads(self) -> int:
        return 32 * WARPGROUP * (1 + self.consumers)

    @property
    def grid(self) -> tuple[int, int, int]:
        """Launch grid: every tile (rounded up to whole clusters) or one wave of clusters."""
        cm, cn = self.cluster_m, self.cluster_n
        clusters_m, clusters_n = -(-self.tiles_m // cm), -(-self.tiles_n // cn)
        if not self.persistent:
            return (clusters_m * cm, clusters_n * cn, 1)
        # The static persistent scheduler's grid: (cluster_m, cluster_n, clusters).
        return (cm, cn, min(clusters_m * clusters_n, SM_COUNT // self.cluster_size))

    def describe(self) -> str:
        return (
            f"{self.tile_m}x{self.tile_n}x{self.tile_k} s{self.stages} c{self.consumers} "
            f"r{self.producer_regs}/{self.consumer_regs} cl{self.cluster_m}x{self.cluster_n} "
            f"{'persist' if self.persistent else 'grid'} P{self.prefetch} D{self.inflight}"
        )
