"""Hopper (sm_90a) warp-specialized GEMM written in TS: ``D = A · Bᵀ``.

A (M×K) and B (N×K) K-major, D (M×N) row-major; bf16 or fp16 in and out,
fp32 accumulation in registers. One CTA (or each CTA of a cluster) computes
``tile_m × tile_n`` tiles of D; its K loop is the TS domain.

This module is the kernel of the ``gemm`` search space and stands alone: it
imports only the CUTLASS DSL, so ``tsopt export`` ships it verbatim inside an
exported ``kernel.py``. It reads top to bottom like the TS tutorials:
configuration, resources, dependency graph, schedules, tasks, TaskManager,
the kernel, its host launch.

Resource/task flow::

                 +--------------+
                 |  TileCoords  |  (tile, k) coordinates of the next K slice
                 +------+-------+
                        |  LoadTask (1 warp): TMA A and B slices into a stage,
                        |  multicast to the other CTAs of a cluster
                        v
                 +------+-------+
                 |    SmemAB    |  TmaAsync pipeline, `stages` deep
                 +--+--------+--+
                    |        |   MathWG i (one warpgroup each): wait for a stage,
                    |        |   issue wgmma on it (asynchronous!), wait_group(N),
                    v        v   release the stage
          +---------+--+  +--+---------+
          | Accumulator0| | Accumulator1|   fp32 tile in registers (no pipeline:
          +---------+--+  +--+---------+    the same warpgroup writes and reads it)
                    |        |   MathWG i, after the K loop: read subtiles
                    v        v
               +----+--+  +--+----+
               | OutD0 |  | OutD1 |   D rows of warpgroup i: direct predicated stores,
               +-------+  +-------+   or staged in SMEM and written by TMA stores

    WorkQueue (persistent candidates only): every task walks the same static
    persistent tile stream, one tile per iteration of its work_tile_loop.

    Arrangement: ``cooperative`` (drawn above) splits one tile between the
    warpgroups along M, which share one chain TileCoords -> LoadTask -> SmemAB.
    ``split_n`` is the same chain with the tile split along N: each warpgroup
    accumulates every row of the tile over its own ``tile_n // consumers`` columns
    (so a 192-row tile is 3 m64 wgmma rows, which an M split cannot halve).
    ``separate`` gives each warpgroup a tile of its own and a chain of its own
    (TileCoords<i>, LoadTask<i> on a second warp of the producer warpgroup,
    SmemAB<i>): the work tile is then ``consumers`` tiles stacked along M.

    Swap-AB (``swap_ab``, for a small M): the host swaps A and B and views the row-major
    M x N D as the kernel's N x M D with strides (1, N), so the flow above computes
    Dᵀ = B·Aᵀ unchanged (``cfg.m``/``cfg.n`` are the kernel's extents, the problem's
    swapped). Split-K (``split_k`` > 1, one tile per CTA, cluster 1x1): the ``split_k``
    CTAs of an output tile form a cluster along z, each runs the flow above over its own
    K slices, then MathWG i adds the peers' fp32 partials into Accumulator i through
    distributed SMEM in split order (``Accumulator.reduce_split``: deterministic) and only
    split 0 writes OutD i.

The wgmma is asynchronous: ``Accumulator.wgmma`` only *issues* the MMAs of one
K slice as one commit group, and the SMEM stage they read stays in use until a
``warpgroup.wait_group(N)`` retires that group. That wait is modelled in TS as
``SmemAB.wgmma_wait(pending=N)``, a consumer work on the SMEM resource, so TS
sees that the stage is still being read there; which stage a release frees and
which batches a wait retires is checked by tsopt (``tsopt.async_release``,
see ``search_spaces/gemm/checks.py``), because TS treats the wgmma as a
synchronous producer work.

Every knob is read from a :class:`GemmConfig` where it is used: ``cfg.tile_m``,
``cfg.stages``, ``cfg.advance_on_wait`` and so on. The schedule of the load
task and of each consumer warpgroup is given as placed ops ``(op, section)``
(``cfg.load_ops``, ``cfg.mma_ops``): the head ops run before the domain loop
(producer prefetch, wgmma batches kept in flight), the loop ops every K slice,
the tail ops after it (delayed release, the final ``wait_group(0)``).
:func:`make_task_manager` renders them into ``@schedule`` functions
(:func:`placed_body`); an exported kernel passes literal ones instead.
"""

# No `from __future__ import annotations`: the DSL reads dataclass field
# annotations (Constexpr or not) at trace time.
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import cuda.bindings.driver as cuda_driver
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.experimental.task_scheduling.enums import WorkAttr
from cutlass.experimental.task_scheduling.memory import SmemAllocation, SmemAllocator
from cutlass.experimental.task_scheduling.resources import (
    MemoryResource,
    PipelineConfig,
    StageInfo,
    TaskLocalVariable,
    TileSchedulerConfig,
    WorkQueue,
    consumer_work,
    producer_work,
)
from cutlass.experimental.task_scheduling.schedule_builder import (
    domain_loop,
    schedule,
    work_tile_loop,
)
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager
from cutlass.tensor_utils import LayoutEnum

Section = Literal["head", "loop", "tail"]
Placement = tuple[tuple[str, Section], ...]

DEFAULT_SM_COUNT = 132
"""SMs of an H200 (and H100 SXM), what a :class:`GemmConfig` assumes when it names none:
the builder always names the target GPU's (``tsopt.core.devices``)."""
WARPGROUP = 4
"""Warps per warpgroup: register budgets (setmaxnreg) apply per warpgroup."""
ELEMENT_BYTES = {"bf16": 2, "fp16": 2}
EPI_COLS = 64
"""Columns of D one epilogue subtile covers (the accumulator is drained in slabs) when
a warpgroup's columns (``wg_tile_n``) are a multiple of it; others use the widest of 32, 16
that divides them (:attr:`GemmConfig.epi_cols`)."""
EPI_BARRIER = 8
"""First named-barrier id of the TMA-store epilogue (one per consumer warpgroup); TS and the
pipelines use mbarriers and barrier 0 only."""
SK_BARRIER = 10
"""First named-barrier id of the stream-K fix-up (one per consumer warpgroup)."""
PRIMARY_OP = {"load": "tma_load", "mma": "wgmma"}
"""The op that opens one K slice of each task (counted in the head: the loop start)."""

IO_DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}
CLUSTER_SCOPE = cutlass._mlir.dialects.nvvm.MemScopeKind.CLUSTER
"""Memory scope of the split-K barrier arrivals: they hand over DSMEM data between CTAs."""
ACC_DTYPE = cutlass.Float32

########################################################################################
# The configuration (every knob of the template, plus derived facts)
########################################################################################


@dataclass(frozen=True)
class GemmConfig:
    """Every knob value of one candidate, for one problem. Derived values are properties.

    Plain data: the host verifier, tsopt's checks and the funnel read it without
    tracing anything.
    """

    dtype: str
    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    consumers: int
    arrangement: str
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
    swap_ab: bool = False
    """Compute Dᵀ = B·Aᵀ: the kernel's rows are the problem's N, its columns the problem's M
    (``m``/``n`` above are the kernel's; :attr:`problem_m`/:attr:`problem_n` the problem's),
    its A operand is B and its D the problem's D seen through swapped strides."""
    split_k: int = 1
    """CTAs that share one output tile, each over its own run of K slices; their fp32 partial
    tiles are summed in a fixed order through distributed SMEM (:meth:`Accumulator.reduce_split`)
    inside a cluster of ``split_k`` CTAs along z; the first CTA of the cluster stores D."""
    sm_count: int = DEFAULT_SM_COUNT
    """SMs of the GPU the kernel is built for: a persistent grid is one wave of clusters over
    them, stream-K one CTA per SM (its units and its workspace's slots and flags). A kernel
    launched on a GPU with another count would compute another decomposition than the one
    it was compiled with, so the artifact records it and the loader refuses a mismatch."""
    stream_k: bool = False
    """Data-parallel waves, then stream-K over the rest (:class:`StreamKPlan`): on the persistent
    tile loop, the tiles past the last full wave but one are cut into K pieces shared evenly
    by every CTA, and a tile's pieces are summed in a fixed order through a global workspace
    (:meth:`Accumulator.fixup`) by the CTA that computes its first piece, which alone stores D."""
    m_range: tuple[int, int] | None = None
    """The problem's M range (lo, hi) when M is a launch argument (N and K stay fixed): the
    TMA descriptors, the grid and the tile scheduler's extent follow each call's M, and
    every store is predicated. ``m`` (``n`` when swapped) is then ``hi``, what the sizes
    decided at build time are for. None: a kernel for exactly its ``m``."""

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
    def runtime_m(self) -> bool:
        """M is read from each launch's tensors (:attr:`m_range`), not compiled in."""
        return self.m_range is not None

    @property
    def problem_m(self) -> int:
        """Rows of the problem's A and D (the kernel's ``n`` when A and B are swapped)."""
        return self.n if self.swap_ab else self.m

    @property
    def problem_n(self) -> int:
        return self.m if self.swap_ab else self.n

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def k_tiles(self) -> int:
        return -(-self.k // self.tile_k)

    @property
    def split_tiles(self) -> int:
        """K slices one CTA multiplies (the TS domain): all of them, or its split's share
        (the last split's run may pass the end of K: TMA zero-fills those slices)."""
        return -(-self.k_tiles // self.split_k)

    @property
    def sk_granule(self) -> int:
        """Fewest K slices of a stream-K piece: one more than either task's head holds, so
        each piece runs its loop at least once and commits as many stages as it consumes."""
        return max(self.prefetch, self.inflight) + 1

    @functools.cached_property
    def sk_plan(self) -> "StreamKPlan | None":
        """The stream-K decomposition of this problem (None without ``stream_k``)."""
        if not self.stream_k:
            return None
        return StreamKPlan.make(self.tiles_m, self.tiles_n, self.k_tiles, self.sk_granule,
                                self.sm_count, self.raster == "m")

    @property
    def workspace_bytes(self) -> int:
        """Global memory the kernel keeps between launches (zeroed once; the kernel leaves it
        zeroed): per stream-K CTA and consumer warpgroup one fp32 partial tile, then one
        Int32 flag each. 0 without stream-K."""
        if not self.stream_k:
            return 0
        slots = self.sm_count * self.consumers
        return slots * self.wg_tile_m * self.wg_tile_n * 4 + slots * 4

    @property
    def red_bytes(self) -> int:
        """One consumer warpgroup's split-K exchange buffer: its fp32 partial tile plus two
        mbarriers (``ready`` in the first CTA, ``done`` in the others); 0 without split-K."""
        return 0 if self.split_k == 1 else self.wg_tile_m * self.wg_tile_n * 4 + 16

    @property
    def tiles_m(self) -> int:
        """Work tiles along M (each ``cta_tile_m`` rows)."""
        return -(-self.m // self.cta_tile_m)

    @property
    def tiles_n(self) -> int:
        return -(-self.n // self.tile_n)

    @property
    def separate(self) -> bool:
        """Each consumer warpgroup on its own tile, rather than cooperating on one."""
        return self.arrangement == "separate"

    @property
    def split_n(self) -> bool:
        """Cooperating warpgroups split the tile along N (each owns every row of the tile and
        ``tile_n // consumers`` columns), rather than along M."""
        return self.arrangement == "split_n"

    @property
    def chains(self) -> int:
        """(producer warp, SMEM pipeline) pairs: one shared by cooperating warpgroups, or one
        per warpgroup when each has its own tile."""
        return self.consumers if self.separate else 1

    @property
    def mma_warpgroups(self) -> int:
        """Warpgroups one tiled MMA spans: those cooperating on one tile."""
        return 1 if self.separate else self.consumers

    @property
    def cta_tile_m(self) -> int:
        """Rows of D one CTA covers per work tile: one tile, or one tile per warpgroup."""
        return self.tile_m * self.chains

    @property
    def wg_tile_m(self) -> int:
        """Rows of D one consumer warpgroup accumulates."""
        return self.tile_m if self.split_n else self.tile_m // self.mma_warpgroups

    @property
    def wg_tile_n(self) -> int:
        """Columns of D one consumer warpgroup accumulates: the N of the wgmma it issues."""
        return self.tile_n // self.mma_warpgroups if self.split_n else self.tile_n

    @property
    def m_repeats(self) -> int:
        """m64 wgmma instructions per K step per consumer warpgroup."""
        return self.wg_tile_m // 64

    @property
    def acc_registers(self) -> int:
        """fp32 accumulator registers per consumer thread."""
        return self.wg_tile_m * self.wg_tile_n // 128

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
    def epi_buffer_bytes(self) -> int:
        """One consumer warpgroup's SMEM staging of a D subtile for the TMA store (0: direct)."""
        if self.epilogue != "tma_store":
            return 0
        return self.wg_tile_m * self.epi_cols * self.element_bytes

    @property
    def smem_bytes(self) -> int:
        """What TS's allocator counts: every chain's A and B stages, then the epilogue
        buffers, each bump-allocated 1024-aligned, plus two mbarriers a stage."""
        sizes = [self.stages * self.a_stage_bytes, self.stages * self.b_stage_bytes] * self.chains
        sizes += [self.epi_buffer_bytes] * self.consumers if self.epi_buffer_bytes else []
        sizes += [self.red_bytes] * self.consumers if self.red_bytes else []
        offset = 0
        for size in sizes:
            offset = -(-offset // 1024) * 1024 + size
        return offset + 16 * self.stages * self.chains

    @property
    def cluster_size(self) -> int:
        """CTAs of one cluster: the multicast shape times the split-K CTAs (along z)."""
        return self.cluster_m * self.cluster_n * self.split_k

    @property
    def mcast_size(self) -> int:
        """CTAs whose consumers release a stage before its producer may refill it."""
        return self.cluster_m + self.cluster_n - 1

    @property
    def epi_cols(self) -> int:
        """Columns of one epilogue subtile: 64, or for a warpgroup's ``wg_tile_n`` that is not
        a multiple of 64 the widest of 32, 16 dividing it (80 -> 16, 96 -> 32), so the
        subtiles cover its columns exactly. No 8-column subtile: the 16-byte TMA store box of
        one aborts the DSL compiler (nvidia-cutlass-dsl 4.8.1), so a ``wg_tile_n`` that is an
        odd multiple of 8 keeps 64 and is refused by ``tsopt.epilogue_coverage``."""
        for cols in (EPI_COLS, 32, 16):
            if self.wg_tile_n % cols == 0:
                return cols
        return EPI_COLS

    @property
    def epi_subtiles(self) -> int:
        """Subtiles one warpgroup drains: its own columns, ``wg_tile_n``."""
        return self.wg_tile_n // self.epi_cols

    @property
    def ragged(self) -> bool:
        """M or N not a multiple of the work tile, or M known only at launch: the epilogue
        must predicate its stores."""
        return self.runtime_m or self.m % self.cta_tile_m != 0 or self.n % self.tile_n != 0

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
    def producer_warps(self) -> tuple[int, ...]:
        """The load warp of each chain: ``load_warp``, then its neighbour inside the warpgroup."""
        step = 1 if self.load_warp + self.chains <= WARPGROUP else -1
        return tuple(self.producer_group + self.load_warp + step * c for c in range(self.chains))

    @property
    def producer_warp(self) -> int:
        return self.producer_warps[0]

    @property
    def consumer_warps(self) -> tuple[int, ...]:
        """First warp of each consumer warpgroup."""
        base = WARPGROUP if self.producer_wg == "first" else 0
        return tuple(base + WARPGROUP * i for i in range(self.consumers))

    def padding(self) -> list[tuple[int, int]]:
        """(first warp, warps) of the padding tasks: runs of the producer warpgroup's other
        warps."""
        idle = [w for w in range(self.producer_group, self.producer_group + WARPGROUP)
                if w not in self.producer_warps]
        pads: list[tuple[int, int]] = []
        for w in idle:
            if pads and pads[-1][0] + pads[-1][1] == w:
                pads[-1] = (pads[-1][0], pads[-1][1] + 1)
            else:
                pads.append((w, 1))
        return pads

    @property
    def threads(self) -> int:
        return 32 * WARPGROUP * (1 + self.consumers)

    @property
    def grid(self) -> tuple[int, int, int]:
        """Launch grid: every tile (rounded up to whole clusters) or one wave of clusters."""
        cm, cn = self.cluster_m, self.cluster_n
        clusters_m, clusters_n = -(-self.tiles_m // cm), -(-self.tiles_n // cn)
        if self.stream_k:
            return (1, 1, self.sm_count)  # the static scheduler's grid over StreamKPlan's units
        if not self.persistent:
            return (clusters_m * cm, clusters_n * cn, self.split_k)
        # The static persistent scheduler's grid: (cluster_m, cluster_n, clusters).
        return (cm, cn, min(clusters_m * clusters_n, self.sm_count // self.cluster_size))


@dataclass(frozen=True)
class StreamKPlan:
    """Data-parallel waves, then stream-K: which tile and K slices each persistent CTA takes.

    ``ctas`` CTAs (one per SM) walk ``units_per_cta`` units each, CTA ``c`` the units
    ``u = c + j * ctas`` of the static persistent scheduler (a 1-D problem of ``units``).
    The first ``dp_waves`` units of a CTA are whole tiles (``j * ctas + c``). The tiles
    after them (the last partial wave and one full wave before it, or every tile when there
    are fewer tiles than CTAs) are cut into ``blocks`` K blocks each (at least
    ``granule`` K slices a block), and their ``sk_blocks`` blocks are shared out as
    contiguous ranges, one per CTA, as even as whole blocks allow. A range covers the end of
    one tile, maybe whole tiles, and the start of another: one segment (a unit) per tile it
    touches, ``slots`` at most; a CTA with fewer runs dummy units (see :meth:`segment`).

    The ranges run in reverse CTA order (range ``r`` is CTA ``ctas - 1 - r``), so a CTA
    only ever waits for a lower-numbered one, which the hardware launched first. A tile's
    first piece (``k_begin == 0``) is the last segment of its range and is computed last:
    its CTA owns the tile, waits for the pieces of the ranges after its own (``r + 1`` ..
    ``last``: their first segments, computed first), adds their fp32 partials in range
    order (deterministic) and stores D. Every other piece writes its partial to its range's
    workspace slot and raises the slot's flag; the owner lowers it again.

    Plain integers in, a segment out: :meth:`segment` runs on the host (checks, tests) on
    Python ints and in the kernel on DSL Int32 alike (arithmetic and ``cutlass.min``/``max``
    only, no branches).
    """

    ctas: int
    dp_waves: int
    tiles: int
    tiles_m: int
    tiles_n: int
    raster_m: bool
    k_tiles: int
    blocks: int
    slots: int
    granule: int

    @staticmethod
    def make(tiles_m: int, tiles_n: int, k_tiles: int, granule: int, ctas: int,
             raster_m: bool) -> "StreamKPlan":
        tiles = tiles_m * tiles_n
        waves = tiles // ctas
        # The last partial wave and the full one before it are streamed (one SK wave of
        # between one and two tiles a CTA); whole waves alone leave nothing to balance.
        dp_waves = waves if tiles % ctas == 0 else max(0, waves - 1)
        granule = max(1, granule)
        blocks = max(1, k_tiles // granule)
        plan = StreamKPlan(ctas, dp_waves, tiles, tiles_m, tiles_n, raster_m, k_tiles,
                           blocks, 0, granule)
        slots = 0
        for r in range(plan.sk_ctas):
            lo, hi = plan.range_blocks(r)
            slots = max(slots, (hi - 1) // blocks - lo // blocks + 1)
        return StreamKPlan(ctas, dp_waves, tiles, tiles_m, tiles_n, raster_m, k_tiles,
                           blocks, slots, granule)

    @property
    def sk_tiles(self) -> int:
        return self.tiles - self.dp_waves * self.ctas

    @property
    def sk_blocks(self) -> int:
        return self.sk_tiles * self.blocks

    @property
    def sk_ctas(self) -> int:
        """CTAs with a stream-K range: every CTA, unless there are fewer blocks than CTAs
        (then one block each, and the rest have data-parallel tiles only)."""
        return min(self.ctas, self.sk_blocks)

    def range_blocks(self, r: Any) -> tuple[Any, Any]:
        """Blocks ``[first, end)`` of range ``r`` (empty from ``sk_ctas`` on)."""
        s, b = max(1, self.sk_ctas), self.sk_blocks
        return cutlass.min(r, s) * b // s, cutlass.min(r + 1, s) * b // s

    @property
    def units_per_cta(self) -> int:
        return self.dp_waves + self.slots

    @property
    def units(self) -> int:
        return self.ctas * self.units_per_cta

    @property
    def min_piece(self) -> int:
        """K slices of the shortest non-empty stream-K piece (one block)."""
        return self.k_tiles // self.blocks

    def segment(self, u: Any) -> tuple[Any, Any, Any, Any]:
        """Unit ``u`` as ``(tile, k_begin, k_len, last)``: the linear tile, its first K slice
        and count, and for a tile's first piece the last range whose partial it adds (its own
        range: none). An empty unit (its range touches fewer tiles than ``slots``) is a
        dummy: ``k_begin == k_tiles`` and ``granule`` K slices (its loads reread the tile's
        first slices: ``TileCoords.unit_origin``); it adds nothing and stores nothing. (TS
        could skip such units through ``work_tile_loop(skip_if=...)``, but in DSL 4.8.1 its
        skipped-tile path leaves the head's task-local values inside a branch the K loop
        reads them from after, and the kernel does not compile.)"""
        lo_, hi_ = cutlass.min, cutlass.max
        p, w, nb, kt = self.ctas, self.dp_waves, self.blocks, self.k_tiles
        b, s = max(1, self.sk_blocks), max(1, self.sk_ctas)
        c, j = u % p, u // p
        dp = lo_(hi_(w - j, 0), 1)  # 1 for a data-parallel unit, else 0
        r = p - 1 - c
        first, end = self.range_blocks(r)
        q = first // nb + hi_(j - w, 0)  # this unit's tile among the streamed ones
        b0 = hi_(first, q * nb) - q * nb
        b1 = hi_(lo_(end, q * nb + nb) - q * nb, b0)
        k0, k1 = b0 * kt // nb, b1 * kt // nb
        empty = 1 - lo_(k1 - k0, 1)  # 1 for a dummy unit
        last = (lo_(q * nb + nb, b) * s - 1) // b  # the range holding the tile's last block
        tile = lo_(dp * (j * p + c) + (1 - dp) * (w * p + q), self.tiles - 1)
        k_begin = (1 - dp) * (k0 + empty * (kt - k0))
        k_len = dp * kt + (1 - dp) * (k1 - k0 + empty * self.granule)
        return tile, k_begin, k_len, dp * r + (1 - dp) * last

    def tile_coords(self, tile: Any) -> tuple[Any, Any]:
        """(tile_m, tile_n) of a linear tile, along M first (raster 'm') or N first."""
        if self.raster_m:
            return tile % self.tiles_m, tile // self.tiles_m
        return tile // self.tiles_n, tile % self.tiles_n

    def range_of(self, u: Any) -> Any:
        """The stream-K range (and workspace slot) of unit ``u``'s CTA."""
        return self.ctas - 1 - u % self.ctas


########################################################################################
# Resources
########################################################################################


@dataclass
class KernelArgs:
    """Trace-time objects the resources need; ``None`` when the skeleton is built on the host."""

    tma_atom_a: Any
    mA: Any
    tma_atom_b: Any
    mB: Any
    mD: Any
    tiled_mma: Any
    a_layout: Any
    b_layout: Any
    cta_layout_mnk: Any
    tile_sched_params: Any
    tma_atom_d: Any = None
    mD_tma: Any = None
    epi_layout: Any = None
    mW: Any = None
    """Stream-K's workspace (fp32 partials, then Int32 flags; :attr:`GemmConfig.workspace_bytes`)."""


@dataclass
class TileCoords(MemoryResource):
    """Coordinate source (no storage, no pipeline): which tile and K slice to load next.

    With warpgroups on their own tiles, chain ``chain`` of ``chains`` loads the
    ``chain``-th ``tile_m`` rows of the work tile."""

    chain: cutlass.Constexpr[int] = field(init=False, default=0)
    chains: cutlass.Constexpr[int] = field(init=False, default=1)
    split_tiles: cutlass.Constexpr[int] = field(init=False, default=0)
    plan: cutlass.Constexpr = field(init=False, default=None)
    tile_m: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    tile_n: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    k_tile: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    base_m: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    base_n: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    base_k: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __init__(self, chain: int = 0, chains: int = 1, split_tiles: int = 0,
                 plan: "StreamKPlan | None" = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.chain = chain
        self.chains = chains
        self.split_tiles = split_tiles  # K slices per split; 0: no split-K
        self.plan = plan  # stream-K: the work tile is a unit of the plan
        self.tile_m = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.tile_n = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.k_tile = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.base_m = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.base_n = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.base_k = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))

    @consumer_work(work_attrs=WorkAttr.AUXILIARY, returns=(base_m, base_n, base_k))
    @cute.jit
    def unit_origin(self, stage_info: StageInfo) -> tuple:
        """Stream-K: the tile and first K slice of this unit, worked out once per unit rather
        than per K slice (the plan's arithmetic has integer divisions; on the H200 the two
        measured the same, bench/stream_k round 2)."""
        u, _, _ = stage_info.work_tile.tile_idx
        tile, k_begin, _, _ = self.plan.segment(cutlass.Int32(u))
        tile_m, tile_n = self.plan.tile_coords(tile)
        # A dummy unit (k_begin == k_tiles) loads its tile's first K slices again rather
        # than boxes wholly past K: it adds and stores nothing either way.
        return (cutlass.Int32(tile_m), cutlass.Int32(tile_n),
                cutlass.Int32(k_begin % self.plan.k_tiles))

    @consumer_work(returns=(tile_m, tile_n, k_tile))
    @cute.jit
    def unit_coords(self, stage_info: StageInfo, *, base_m: cutlass.Int32,
                    base_n: cutlass.Int32, base_k: cutlass.Int32,
                    it: cutlass.Constexpr[int] = -1) -> tuple:
        """Stream-K's :meth:`compute_coords`: the unit's K slice ``it`` (head copies) or the
        loop's, from the unit's origin."""
        k = stage_info.loop_offset if cutlass.const_expr(it < 0) else it
        return base_m, base_n, base_k + cutlass.Int32(k)

    @consumer_work(returns=(tile_m, tile_n, k_tile))
    @cute.jit
    def compute_coords(self, stage_info: StageInfo, *, it: cutlass.Constexpr[int] = -1) -> tuple:
        # Non-persistent: the work tile is the block index, and the grid is the
        # tile grid. Persistent: the static scheduler already maps its linear
        # index to (m, n) with the raster order and swizzle of the knobs.
        m_idx, n_idx, _ = stage_info.work_tile.tile_idx
        # Head copies (prefetch) run with loop_offset 0; they pass their own K slice.
        k = stage_info.loop_offset if cutlass.const_expr(it < 0) else it
        if cutlass.const_expr(self.split_tiles > 0):
            # Split-K: this CTA's run of K slices starts at its split (the grid's z).
            _, _, split = stage_info.work_tile.tile_idx
            k = k + cutlass.Int32(split) * self.split_tiles
        m = cutlass.Int32(m_idx) * self.chains + self.chain
        return m, cutlass.Int32(n_idx), cutlass.Int32(k)


@dataclass
class SmemAB(MemoryResource):
    """The staged A and B K-slices in SMEM behind one TmaAsync pipeline.

    ``wgmma_wait`` is the asynchronous-consumer model: it stands for
    ``warpgroup.wait_group(pending)`` and is a consumer work on this resource
    because the SMEM reads of the issued wgmma end there, not at the issue.
    """

    cfg: cutlass.Constexpr = field(init=False, default=None)
    args: cutlass.Constexpr = field(init=False, default=None)
    sA: Any = field(init=False, default=None)
    sB: Any = field(init=False, default=None)
    mcast_mask_a: Any = field(init=False, default=None)
    mcast_mask_b: Any = field(init=False, default=None)
    cluster_coord: Any = field(init=False, default=None)
    stage: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    _alloc_a: cutlass.Constexpr = field(init=False, default=None)
    _alloc_b: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, cfg: GemmConfig, args: KernelArgs | None, chain: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.args = args
        self.stage = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        # 1024-byte alignment: the 128-byte swizzle pattern repeats every 8 rows.
        self._alloc_a = SmemAllocation(f"smem_a{chain}", cfg.stages * cfg.a_stage_bytes,
                                       alignment=1024)
        self._alloc_b = SmemAllocation(f"smem_b{chain}", cfg.stages * cfg.b_stage_bytes,
                                       alignment=1024)
        if args is not None:
            # Runtime state must keep one structure through the task's dynamic
            # control flow, so it exists (with placeholder values) from the start.
            self.sA = _smem_tensor_at(0, args.a_layout, cfg)
            self.sB = _smem_tensor_at(0, args.b_layout, cfg)
            self.cluster_coord = (cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(0))
            self.mcast_mask_a = cutlass.Int16(0)
            self.mcast_mask_b = cutlass.Int16(0)

    def get_smem_requirements(self) -> list:
        return [self._alloc_a, self._alloc_b]

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def init_load(self, stage_info: StageInfo) -> None:
        self.sA = _smem_tensor(stage_info, self._alloc_a, self.args.a_layout, self.cfg)
        self.sB = _smem_tensor(stage_info, self._alloc_b, self.args.b_layout, self.cfg)
        layout = self.args.cta_layout_mnk
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        if cutlass.const_expr(self.cfg.split_k > 1):
            # The split-K CTAs follow the multicast shape along z: only (m, n) is multicast.
            rank = rank % (self.cfg.cluster_m * self.cfg.cluster_n)
        coord = layout.get_flat_coord(rank)
        # Extent-1 modes fold to Python ints; loop-carried state must be DSL values.
        self.cluster_coord = tuple(cutlass.Int32(c) for c in coord)
        # A is shared by the CTAs of a cluster row (same m), B by a cluster column.
        self.mcast_mask_a = cutlass.Int16(cute.make_layout_image_mask(layout, coord, mode=1))
        self.mcast_mask_b = cutlass.Int16(cute.make_layout_image_mask(layout, coord, mode=0))

    @producer_work
    @cute.jit
    def tma_load(
        self,
        stage_info: StageInfo,
        *,
        tile_m: cutlass.Int32,
        tile_n: cutlass.Int32,
        k_tile: cutlass.Int32,
    ) -> None:
        cfg = self.cfg
        layout = self.args.cta_layout_mnk
        gA = cute.local_tile(self.args.mA, (cfg.tile_m, cfg.tile_k), (tile_m, None))
        gB = cute.local_tile(self.args.mB, (cfg.tile_n, cfg.tile_k), (tile_n, None))
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            self.args.tma_atom_a,
            self.cluster_coord[1],
            cute.make_layout(cute.slice_(layout, (0, None, 0)).shape),
            cute.group_modes(self.sA, 0, 2),
            cute.group_modes(gA, 0, 2),
        )
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            self.args.tma_atom_b,
            self.cluster_coord[0],
            cute.make_layout(cute.slice_(layout, (None, 0, 0)).shape),
            cute.group_modes(self.sB, 0, 2),
            cute.group_modes(gB, 0, 2),
        )
        bar = cute.make_ptr(
            cutlass.Int64, stage_info.barrier.data_ptr().toint(), cutlass.AddressSpace.smem
        )
        cute.copy(
            self.args.tma_atom_a,
            tAgA[(None, k_tile)],
            tAsA[(None, stage_info.stage_idx)],
            tma_bar_ptr=bar,
            mcast_mask=self.mcast_mask_a if cutlass.const_expr(cfg.cluster_n > 1) else 0,
        )
        cute.copy(
            self.args.tma_atom_b,
            tBgB[(None, k_tile)],
            tBsB[(None, stage_info.stage_idx)],
            tma_bar_ptr=bar,
            mcast_mask=self.mcast_mask_b if cutlass.const_expr(cfg.cluster_m > 1) else 0,
        )

    @consumer_work(returns=stage)
    @cute.jit
    def read_stage(self, stage_info: StageInfo) -> cutlass.Int32:
        """The stage the consumer just waited for, handed to the wgmma that reads it."""
        return cutlass.Int32(stage_info.stage_idx)

    @consumer_work
    @cute.jit
    def wgmma_wait(self, stage_info: StageInfo, *, pending: cutlass.Constexpr[int] = 0) -> None:
        """``warpgroup.wait_group(pending)``: all but the newest ``pending`` batches are done."""
        cute.nvgpu.warpgroup.wait_group(pending)


@dataclass
class Accumulator(MemoryResource):
    """One consumer warpgroup's fp32 accumulator tile, in registers.

    No pipeline: the same warpgroup issues the wgmma into it (producer work) and
    drains it in the epilogue (consumer work).
    """

    cfg: cutlass.Constexpr = field(init=False, default=None)
    args: cutlass.Constexpr = field(init=False, default=None)
    wg: cutlass.Constexpr[int] = field(init=False, default=0)
    smem_offsets: cutlass.Constexpr = field(init=False, default=None)
    _alloc_red: cutlass.Constexpr = field(init=False, default=None)
    acc: Any = field(init=False, default=None)
    tCrA: Any = field(init=False, default=None)
    tCrB: Any = field(init=False, default=None)
    frag: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __init__(
        self, cfg: GemmConfig, args: KernelArgs | None, wg: int, smem: SmemAB, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.args = args
        self.wg = wg
        self.smem_offsets = (smem._alloc_a, smem._alloc_b)
        if cfg.split_k > 1:
            self._alloc_red = SmemAllocation(f"smem_red{wg}", cfg.red_bytes, alignment=1024)
        n = 4 * (cfg.epi_cols // 8) * cfg.m_repeats
        self.frag = TaskLocalVariable(
            dtype=ACC_DTYPE, default_factory=lambda: cutlass.full([n], 0.0, ACC_DTYPE)
        )
        if args is not None:
            thr = args.tiled_mma.get_slice(0)
            self.tCrA = args.tiled_mma.make_fragment_A(
                thr.partition_A(_smem_tensor_at(0, args.a_layout, cfg)))
            self.tCrB = args.tiled_mma.make_fragment_B(
                thr.partition_B(_smem_tensor_at(0, args.b_layout, cfg)))
            # The accumulator lives for the whole kernel; wgmma writes it in place.
            tile_c = cute.make_identity_tensor((cfg.tile_m, cfg.tile_n))
            self.acc = cute.make_rmem_tensor(thr.partition_C(tile_c).shape, ACC_DTYPE)

    def get_smem_requirements(self) -> list:
        return [self._alloc_red] if self._alloc_red is not None else []

    @cute.jit
    def _thr_mma(self) -> Any:
        return _thr_mma(self.args.tiled_mma, self.cfg, self.wg)

    @consumer_work
    @cute.jit
    def reduce_split(self, stage_info: StageInfo) -> None:
        """Split-K: sum the partial tiles of the cluster's CTAs into the first one's registers.

        Split s > 0 writes its partial to its own buffer (thread-major: value i of thread t
        at i*128 + t), arrives (release, cluster scope) on the first CTA's ``ready`` barrier
        and waits on its own ``done`` barrier so its SMEM outlives the reads. Split 0 waits
        for every peer's arrival, then adds the peers' buffers in split order 1, 2, ... (a
        fixed order: the result is deterministic) read through DSMEM, and arrives on each
        peer's ``done``. Each barrier completes one phase: one tile per CTA."""
        cfg = self.cfg
        _, _, split = stage_info.work_tile.tile_idx
        tidx, _, _ = cute.arch.thread_idx()
        t = tidx % 128
        values = cute.size(self.acc)
        base = stage_info.context.smem_base.data_ptr() + self._alloc_red.offset
        buf = cute.make_tensor(
            cute.make_ptr(ACC_DTYPE, base.toint(), cute.AddressSpace.smem, assumed_align=16),
            cute.make_layout((values, 128), stride=(128, 1)))
        bar_at = base.toint() + values * 128 * 4
        ready = cute.make_ptr(cutlass.Int64, bar_at, cute.AddressSpace.smem, assumed_align=8)
        done = cute.make_ptr(cutlass.Int64, bar_at + 8, cute.AddressSpace.smem, assumed_align=8)
        if cutlass.Int32(split) != 0:
            for i in cutlass.range_constexpr(values):
                buf[(i, t)] = self.acc[i]
            cute.arch.mbarrier_arrive(ready, 0, scope=CLUSTER_SCOPE)
            cute.arch.mbarrier_wait(done, 0)
        else:
            cute.arch.mbarrier_wait(ready, 0)
            # The wait observed the peers' release arrivals; acquire their writes.
            cute.arch.fence_acq_rel_cluster()
            for peer in cutlass.range_constexpr(1, cfg.split_k):
                # A DSMEM tensor cannot be indexed: load through the mapped pointer.
                remote = cute.arch.map_dsmem_ptr(buf.iterator + t, peer)
                for i in cutlass.range_constexpr(values):
                    self.acc[i] = self.acc[i] + (remote + i * 128).load()
            for peer in cutlass.range_constexpr(1, cfg.split_k):
                cute.arch.mbarrier_arrive(done, peer, scope=CLUSTER_SCOPE)

    @consumer_work
    @cute.jit
    def fixup(self, stage_info: StageInfo) -> None:
        """Stream-K: hand a piece's fp32 partial over, or add the other pieces into the tile.

        A piece that does not start the tile (``k_begin > 0``) writes its partial to its
        range's workspace slot (thread-major: value i of thread t at i*128 + t), syncs the
        warpgroup and raises the slot's flag (release, GPU scope). A tile's first piece
        takes, for each later range in order, the flag (acquire, GPU scope, spinning), lowers
        it for the next launch, syncs the warpgroup and adds that partial: a fixed order, so
        D is the same bits run after run. A data-parallel tile has no later ranges. Which
        pieces exist and who waits for whom is :class:`StreamKPlan`'s; a CTA only waits for
        lower-numbered CTAs, every one of which is resident (one persistent CTA per SM)."""
        cfg = self.cfg
        plan = cfg.sk_plan
        u = cutlass.Int32(stage_info.work_tile.tile_idx[0])
        _, k_begin, _, last = plan.segment(u)
        r = plan.range_of(u)
        tidx, _, _ = cute.arch.thread_idx()
        t = tidx % 128
        values = cute.size(self.acc)
        slot_floats = values * 128
        base = self.args.mW.iterator
        flags = cute.recast_ptr(base + cfg.sm_count * cfg.consumers * slot_floats,
                                dtype=cutlass.Int32)
        barrier = SK_BARRIER + self.wg
        if (k_begin != 0) & (k_begin < plan.k_tiles):  # a later piece (a dummy has none)
            dst = base + (r * cfg.consumers + self.wg) * slot_floats + t
            for i in cutlass.range_constexpr(values):
                (dst + i * 128).store(self.acc[i])
            cute.arch.barrier(barrier_id=barrier, number_of_threads=128)
            if t == 0:
                cute.arch.fence_acq_rel_gpu()
                cute.arch.store(flags + (r * cfg.consumers + self.wg), cutlass.Int32(1),
                                sem="release", scope="gpu")
        elif k_begin == 0:  # the tile's first piece (or a whole tile)
            for peer in cutlass.range(r + 1, last + 1):
                flag = flags + (peer * cfg.consumers + self.wg)
                if t == 0:
                    seen = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
                    while seen == 0:
                        seen = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
                    cute.arch.store(flag, cutlass.Int32(0))
                cute.arch.barrier(barrier_id=barrier, number_of_threads=128)
                src = base + (peer * cfg.consumers + self.wg) * slot_floats + t
                for i in cutlass.range_constexpr(values):
                    # Plain loads, ordered after the flag by the acquire and the barrier, from
                    # L2 (.cg: the partial was written on another SM), free to be in flight
                    # together (bench/stream_k: round 2 read them with GPU-scope relaxed loads).
                    self.acc[i] = self.acc[i] + cute.arch.load(src + i * 128, ACC_DTYPE,
                                                               cop="cg")

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def init_acc(self, stage_info: StageInfo) -> None:
        alloc_a, alloc_b = self.smem_offsets
        sA = _smem_tensor(stage_info, alloc_a, self.args.a_layout, self.cfg)
        sB = _smem_tensor(stage_info, alloc_b, self.args.b_layout, self.cfg)
        thr = self._thr_mma()
        self.tCrA = self.args.tiled_mma.make_fragment_A(thr.partition_A(sA))
        self.tCrB = self.args.tiled_mma.make_fragment_B(thr.partition_B(sB))

    @producer_work(work_attrs=WorkAttr.AUXILIARY)
    @cute.jit
    def zero_acc(self, stage_info: StageInfo) -> None:
        self.acc.fill(0.0)

    @producer_work
    @cute.jit
    def wgmma(self, stage_info: StageInfo, *, stage: cutlass.Int32) -> None:
        """Issue the wgmma of one K slice (one commit group); does not wait for it."""
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(self.cfg.tile_k // 16):
            cute.gemm(
                self.args.tiled_mma,
                self.acc,
                self.tCrA[(None, None, kb, stage)],
                self.tCrB[(None, None, kb, stage)],
                self.acc,
            )
        cute.nvgpu.warpgroup.commit_group()

    @consumer_work(returns=frag)
    @cute.jit
    def read_acc(self, stage_info: StageInfo, *, subtile: cutlass.Constexpr[int]) -> Any:
        """Accumulator values of columns [subtile*epi_cols, (subtile+1)*epi_cols) of this
        thread's rows."""
        groups = self.cfg.epi_cols // 8
        vals = []
        for rr in cutlass.range_constexpr(self.cfg.m_repeats):
            for g in cutlass.range_constexpr(groups):
                for r2 in cutlass.range_constexpr(2):
                    for c2 in cutlass.range_constexpr(2):
                        vals.append(self.acc[((c2, r2, subtile * groups + g), rr, 0)])
        return cutlass.Vector.from_elements(vals, ACC_DTYPE)


@dataclass
class OutD(MemoryResource):
    """The rows of D one consumer warpgroup writes from its accumulator registers.

    ``epilogue == "direct"``: predicated stores straight from registers.
    ``epilogue == "tma_store"``: each 64-column subtile is staged in this warpgroup's SMEM
    buffer (swizzled, one 64-row box per m64 repeat) and written by TMA stores, which clip
    at the edges of D by themselves. One buffer: before rewriting it the warpgroup's leader
    waits until the previous TMA store has read it, and the warpgroup syncs on its own named
    barrier; the generic-proxy writes are fenced before the async-proxy TMA reads them.
    """

    cfg: cutlass.Constexpr = field(init=False, default=None)
    args: cutlass.Constexpr = field(init=False, default=None)
    wg: cutlass.Constexpr[int] = field(init=False, default=0)
    _alloc: cutlass.Constexpr = field(init=False, default=None)

    def __init__(self, cfg: GemmConfig, args: KernelArgs | None, wg: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.args = args
        self.wg = wg
        if cfg.epilogue == "tma_store":
            self._alloc = SmemAllocation(f"smem_d{wg}", cfg.epi_buffer_bytes, alignment=1024)

    def get_smem_requirements(self) -> list:
        return [self._alloc] if self._alloc is not None else []

    @producer_work
    @cute.jit
    def store(
        self, stage_info: StageInfo, *, frag: cutlass.Float32, subtile: cutlass.Constexpr[int]
    ) -> None:
        cfg = self.cfg
        thr = _thr_mma(self.args.tiled_mma, cfg, self.wg)
        tCcC = thr.partition_C(cute.make_identity_tensor((cfg.tile_m, cfg.tile_n)))
        m_idx, n_idx, _ = stage_info.work_tile.tile_idx
        if cutlass.const_expr(cfg.stream_k):
            # Stream-K: the unit's tile, stored by the CTA that holds its first piece.
            tile, k_begin, _, _ = cfg.sk_plan.segment(cutlass.Int32(m_idx))
            tm, tn = cfg.sk_plan.tile_coords(tile)
            m0 = cutlass.Int32(tm) * cfg.tile_m
            n0 = cutlass.Int32(tn) * cfg.tile_n
            if k_begin == 0:
                self._store_any(stage_info, frag, subtile, tCcC, m0, n0, tm, tn)
        elif cutlass.const_expr(cfg.split_k > 1):
            # Split-K: the first CTA of the cluster holds the sum; the others store nothing.
            m0, n0 = self._origin(m_idx, n_idx)
            _, _, split = stage_info.work_tile.tile_idx
            if cutlass.Int32(split) == 0:
                self._store_any(stage_info, frag, subtile, tCcC, m0, n0, m_idx, n_idx)
        else:
            m0, n0 = self._origin(m_idx, n_idx)
            self._store_any(stage_info, frag, subtile, tCcC, m0, n0, m_idx, n_idx)

    def _origin(self, m_idx: Any, n_idx: Any) -> tuple[Any, Any]:
        """The first row and column of this warpgroup's tile: the work tile's, or its own."""
        cfg = self.cfg
        m0 = (cutlass.Int32(m_idx) * cfg.chains + (self.wg if cfg.separate else 0)) * cfg.tile_m
        return m0, cutlass.Int32(n_idx) * cfg.tile_n

    @cute.jit
    def _store_any(self, stage_info: StageInfo, frag: Any, subtile: cutlass.Constexpr[int],
                   tCcC: Any, m0: Any, n0: Any, m_idx: Any, n_idx: Any) -> None:
        if cutlass.const_expr(self.cfg.epilogue == "tma_store"):
            self._store_tma(stage_info, frag, subtile, tCcC, m0, n0)
        else:
            self._store_direct(frag, subtile, tCcC, m0, n0, m_idx, n_idx)

    @cute.jit
    def _store_direct(self, frag: Any, subtile: cutlass.Constexpr[int], tCcC: Any, m0: Any,
                      n0: Any, m_idx: Any, n_idx: Any) -> None:
        cfg = self.cfg
        d_ptr = self.args.mD.iterator.raw_ptr()
        out_dtype = IO_DTYPES[cfg.dtype]
        m, n = kernel_extents(cfg, self.args.mD)
        # Tiles past the problem (cluster or swizzle rounding) write nothing.
        tile_in = (cutlass.Int32(m_idx) < cfg.tiles_m) & (cutlass.Int32(n_idx) < cfg.tiles_n)
        for _, row, col, pair in _fragment_pairs(cfg, frag, tCcC, subtile):
            if cutlass.const_expr(cfg.swap_ab):
                self._store_transposed(d_ptr, pair.to(out_dtype), m0 + row, n0 + col, tile_in)
                continue
            dst = d_ptr + (cutlass.Int64(m0 + row) * cfg.n + cutlass.Int64(n0 + col))
            if cutlass.const_expr(cfg.ragged):
                # A pair is wholly in or out: N % 8 == 0 and col is even.
                if (m0 + row < m) & (n0 + col < n):
                    dst.store(pair.to(out_dtype), alignment=4)
            elif cutlass.const_expr(cfg.overhang):
                if tile_in:
                    dst.store(pair.to(out_dtype), alignment=4)
            else:
                dst.store(pair.to(out_dtype), alignment=4)

    @cute.jit
    def _store_transposed(self, d_ptr: Any, out: Any, row: Any, col: Any, tile_in: Any) -> None:
        """Swapped A and B: the kernel's (row, col) is the problem's D[col, row], so the two
        columns of a pair are two rows of D apart: two 2-byte stores."""
        cfg = self.cfg
        m, n = kernel_extents(cfg, self.args.mD)
        for j in cutlass.range_constexpr(2):
            dst = d_ptr + (cutlass.Int64(col + j) * cfg.m + cutlass.Int64(row))
            if cutlass.const_expr(cfg.ragged):
                if (row < m) & (col + j < n):
                    dst.store(out[j])
            elif cutlass.const_expr(cfg.overhang):
                if tile_in:
                    dst.store(out[j])
            else:
                dst.store(out[j])

    @cute.jit
    def _store_tma(self, stage_info: StageInfo, frag: Any, subtile: cutlass.Constexpr[int],
                   tCcC: Any, m0: Any, n0: Any) -> None:
        cfg = self.cfg
        out_dtype = IO_DTYPES[cfg.dtype]
        tidx, _, _ = cute.arch.thread_idx()
        leader = tidx % 128 == 0
        barrier = EPI_BARRIER + self.wg
        # (64, epi_cols, m_repeats): one swizzled 64-row box per m64 repeat.
        sD = _smem_tensor(stage_info, self._alloc, self.args.epi_layout, cfg)
        if leader:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=barrier, number_of_threads=128)
        for rr, row, col, pair in _fragment_pairs(cfg, frag, tCcC, subtile):
            out = pair.to(out_dtype)
            sD[(row % 64, col % cfg.epi_cols, rr)] = out[0]
            sD[(row % 64, col % cfg.epi_cols + 1, rr)] = out[1]
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=barrier, number_of_threads=128)
        if leader:
            bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
                self.args.tma_atom_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2),
                cute.zipped_divide(self.args.mD_tma, (64, cfg.epi_cols)),
            )
            # Split along M, warpgroups interleave in m64 blocks; split along N, each owns
            # every row and its own run of epi_subtiles boxes across.
            slot = 0 if cfg.separate or cfg.split_n else self.wg
            col_boxes = self.wg * cfg.epi_subtiles if cfg.split_n else 0
            for rr in cutlass.range_constexpr(cfg.m_repeats):
                block_m = m0 // 64 + (rr * (1 if cfg.split_n else cfg.mma_warpgroups) + slot)
                block_n = n0 // cfg.epi_cols + col_boxes + subtile
                # Only boxes that start inside D are stored. Not just a saving: where D has a
                # single block along a mode (M <= 64, or N <= epi_cols), CuTe gives that
                # block mode extent 1 and stride 0, so a box past the edge would not be
                # clipped by the TMA but land on block 0, over the rows (columns) already
                # written, with the zeros of the out-of-bounds accumulator rows.
                if cutlass.const_expr(cfg.ragged or cfg.overhang):
                    m, n = kernel_extents(cfg, self.args.mD)
                    if (block_m * 64 < m) & (block_n * cfg.epi_cols < n):
                        cute.copy(self.args.tma_atom_d, bSG_sD[(None, rr)],
                                  bSG_gD[(None, (block_m, block_n))])
                else:
                    cute.copy(self.args.tma_atom_d, bSG_sD[(None, rr)],
                              bSG_gD[(None, (block_m, block_n))])
            cute.arch.cp_async_bulk_commit_group()
            if cutlass.const_expr(subtile == cfg.epi_subtiles - 1):
                # The CTA may exit after its last tile: SMEM must outlive the TMA's reads.
                cute.arch.cp_async_bulk_wait_group(0, read=True)


def kernel_extents(cfg: Any, mD: Any) -> tuple[Any, Any]:
    """The kernel's (M, N): the configuration's, or with a runtime M the launch's, read from
    the kernel's D (whose rows, or swapped columns, are the problem's M: a DSL Int32)."""
    if cfg.m_range is None:
        return cfg.m, cfg.n
    return cute.size(mD, mode=[0]), cute.size(mD, mode=[1])


def launch_tiles(cfg: Any, rows: Any) -> tuple[Any, Any]:
    """Work tiles along the kernel's M and N for a launch on ``rows`` rows of the problem's A
    (the configuration's for a fixed M; swapped, the problem's M is the kernel's N)."""
    if cfg.m_range is None:
        return cfg.tiles_m, cfg.tiles_n
    if cfg.swap_ab:
        return cfg.tiles_m, (rows + (cfg.tile_n - 1)) // cfg.tile_n
    return (rows + (cfg.cta_tile_m - 1)) // cfg.cta_tile_m, cfg.tiles_n


def _fragment_pairs(cfg: Any, frag: Any, tCcC: Any, subtile: int) -> Iterator[tuple]:
    """(m64 repeat, row, col, two fp32 values) of each column pair this thread holds in a
    subtile's fragment (``Accumulator.read_acc``'s order), unrolled at trace time."""
    groups = cfg.epi_cols // 8
    for rr in range(cfg.m_repeats):
        for g in range(groups):
            for r2 in range(2):
                i = ((rr * groups + g) * 2 + r2) * 2
                row, col = tCcC[((0, r2, subtile * groups + g), rr, 0)]
                yield rr, row, col, cutlass.Vector.from_elements([frag[i], frag[i + 1]],
                                                                 ACC_DTYPE)


@cute.jit
def _thr_mma(tiled_mma: Any, cfg: Any, wg: int) -> Any:
    """Warpgroup ``wg``'s thread slice of the tiled MMA (cooperating warpgroups are slices of
    one MMA; a warpgroup on its own tile is the whole of its own)."""
    tidx, _, _ = cute.arch.thread_idx()
    slot = 0 if cfg.separate else wg
    return tiled_mma.get_slice(tidx % 128 + 128 * slot)


@cute.jit
def _smem_tensor(stage_info: StageInfo, alloc: SmemAllocation, layout: Any, cfg: Any) -> Any:
    """A swizzled, staged SMEM tensor over one allocation of the TS allocator."""
    return _smem_tensor_at(stage_info.context.smem_base.data_ptr() + alloc.offset, layout, cfg)


def _smem_tensor_at(address: Any, layout: Any, cfg: Any) -> Any:
    ptr = cute.make_ptr(IO_DTYPES[cfg.dtype], address, cute.AddressSpace.smem, assumed_align=1024)
    return cute.make_tensor(cute.recast_ptr(ptr, layout.inner), layout.outer)


class StreamKTask(Task):
    """A task whose K domain is its unit's (``StreamKPlan.segment``): the schedules' domain
    loops end at :meth:`get_domain` in the kernel (the host verifier gives concrete ones: the
    space's usual domain and the shortest run, a dummy unit's ``StreamKPlan.granule``)."""

    def __init__(self, plan: StreamKPlan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sk_plan = plan

    def get_domain(self, tile_coord: Any) -> Any:
        _, _, k_len, _ = self.sk_plan.segment(cutlass.Int32(tile_coord[0]))
        return k_len


########################################################################################
# Schedules: each task's placed ops, head / domain loop / tail
########################################################################################

ScheduleBody = Callable[[dict[str, Any], int], None]
"""A task's schedule body: called inside its ``@schedule`` with the resource proxies by name
(load: ``coords``, ``smem``, and with stream-K ``origin``, the unit's origin tokens; mma:
``smem``, ``acc``) and the domain's length (K slices)."""

PIPELINE_OPS = ("try_acquire", "acquire", "commit", "try_wait", "wait", "release")


def emit_ops(ops: Sequence[tuple[str, Section]], section: Section, res: dict[str, Any]) -> None:
    """Record one section's ops in order. Head copies of ``coords`` carry their own K slice
    (``it``); ``wgmma_wait<N>`` is ``warpgroup.wait_group(N)``."""
    tokens: dict[str, Any] = {}
    copies = 0
    for op, sec in ops:
        if sec != section:
            continue
        if op == "coords":
            it = copies if section == "head" else -1
            copies += 1
            if "origin" in res:  # stream-K: K slices of the unit's own tile and run
                base_m, base_n, base_k = res["origin"]
                tokens["coords"] = res["coords"].unit_coords(
                    base_m=base_m, base_n=base_n, base_k=base_k, it=it)
            else:
                tokens["coords"] = res["coords"].compute_coords(it=it)
        elif op == "tma_load":
            tile_m, tile_n, k_tile = tokens["coords"]
            res["smem"].tma_load(tile_m=tile_m, tile_n=tile_n, k_tile=k_tile)
        elif op == "read_stage":
            tokens["stage"] = res["smem"].read_stage()
        elif op == "wgmma":
            res["acc"].wgmma(stage=tokens["stage"])
        elif op.startswith("wgmma_wait"):
            res["smem"].wgmma_wait(pending=int(op.removeprefix("wgmma_wait")))
        elif op in PIPELINE_OPS:
            getattr(res["smem"], op)()
        else:
            raise KeyError(f"unknown op {op!r}")


def placed_body(task: str, cfg: GemmConfig) -> ScheduleBody:
    """The schedule body of ``task`` (``load`` or ``mma``) from its placed ops: the head
    (``prefetch`` K slices loaded, or ``inflight`` wgmma batches issued, before the loop),
    the domain loop over the remaining K slices, the tail."""
    ops = cfg.load_ops if task == "load" else cfg.mma_ops

    def body(res: dict[str, Any], k_tiles: int) -> None:
        emit_ops(ops, "head", res)
        with domain_loop(cfg.head_depth(task), k_tiles, 1):
            emit_ops(ops, "loop", res)
        emit_ops(ops, "tail", res)

    return body


########################################################################################
# Dependency graph, tasks, TaskManager
########################################################################################


def make_task_manager(cfg: GemmConfig, args: KernelArgs | None,
                      domain: int | cutlass.Int32 | None = None,
                      verbose: bool = False,
                      bodies: dict[str, ScheduleBody] | None = None) -> TaskManager:
    """Build the TS skeleton of one candidate.

    With ``args=None`` nothing touches the DSL tracer: this is what the host
    verifier constructs (``domain`` then overrides the K-tile count). In the
    kernel the same function builds the skeleton that is compiled, so the
    verified schedule and the compiled one cannot drift apart. ``bodies`` are
    the load and mma schedule bodies (default: rendered from the placed ops of
    ``cfg`` by :func:`placed_body`).
    """
    k_tiles: Any = cfg.split_tiles if domain is None else domain
    plan = cfg.sk_plan
    if plan is not None and args is not None:
        k_tiles = StreamKTask.get_domain  # each unit's own run of K slices

    # -- resources ---------------------------------------------------------------------
    pipeline_cfg = PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=cfg.stages,
        # Bytes landing in *this* CTA's stage: the full A and B slices, part of
        # them written by the multicast of the other CTAs of the cluster.
        num_bytes=cfg.stage_bytes,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        # CUTLASS TmaAsync release: one lane per consumer warp signals every
        # CTA that multicasts into this stage.
        consumer_group=pipeline.CooperativeGroup(
            pipeline.Agent.Thread, WARPGROUP * cfg.mma_warpgroups * cfg.mcast_size
        ),
        cta_layout_vmnk=(1, cfg.cluster_m, cfg.cluster_n, 1),
        advance_on_wait=cfg.advance_on_wait,
    )
    # One chain (coordinates -> SMEM pipeline) feeds cooperating warpgroups; with warpgroups
    # on their own tiles each has its own chain, suffixed by its index.
    suffix = [str(c) if cfg.separate else "" for c in range(cfg.chains)]
    split_tiles = cfg.split_tiles if cfg.split_k > 1 else 0
    coords = [TileCoords(c, cfg.chains, split_tiles, plan, name=f"TileCoords{suffix[c]}")
              for c in range(cfg.chains)]
    smems = [SmemAB(cfg, args, c, name=f"SmemAB{suffix[c]}", pipeline_config=pipeline_cfg)
             for c in range(cfg.chains)]
    feeds = [smems[i if cfg.separate else 0] for i in range(cfg.consumers)]
    accs = [Accumulator(cfg, args, i, feeds[i], name=f"Acc{i}") for i in range(cfg.consumers)]
    outs = [OutD(cfg, args, i, name=f"OutD{i}") for i in range(cfg.consumers)]
    wq = None
    if cfg.persistent:
        scheduler = TileSchedulerConfig.create_static_persistent_tile_scheduler_params(
            tile_scheduler_params=None if args is None else args.tile_sched_params
        )
        wq = WorkQueue(tile_scheduler_config=scheduler, name="WorkQueue")
    allocator = SmemAllocator()
    for resource in [*smems, *outs, *accs]:
        if resource.get_smem_requirements():
            allocator.add_resource(resource)
    allocator.compute_layout()

    # -- dependency graph --------------------------------------------------------------
    queue = [wq] if wq is not None else []
    dependency_graph: dict = {smem: [coord, *queue] for smem, coord in zip(smems, coords,
                                                                            strict=True)}
    for acc, out, feed in zip(accs, outs, feeds, strict=True):
        dependency_graph[acc] = [feed, *queue]
        dependency_graph[out] = [acc, *queue]

    # -- schedules ---------------------------------------------------------------------
    bodies = bodies or {"load": placed_body("load", cfg), "mma": placed_body("mma", cfg)}

    def tiles(wq: WorkQueue | None) -> Any:
        return work_tile_loop(wq) if wq is not None else contextlib.nullcontext()

    def next_tile(wq: WorkQueue | None) -> None:
        if wq is not None:
            wq.try_wait()
            wq.wait()
            wq.get_and_advance_work_tile()
            wq.release()

    @schedule
    def load_schedule(coords: TileCoords, smem_ab: SmemAB, *queue: WorkQueue) -> None:
        wq = queue[0] if queue else None
        smem_ab.init_load()
        with tiles(wq):
            res = {"coords": coords, "smem": smem_ab}
            if plan is not None:
                res["origin"] = coords.unit_origin()
            bodies["load"](res, k_tiles)
            next_tile(wq)

    @schedule
    def mma_schedule(smem_ab: SmemAB, acc: Accumulator, out: OutD, *queue: WorkQueue) -> None:
        wq = queue[0] if queue else None
        acc.init_acc()
        with tiles(wq):
            acc.zero_acc()
            bodies["mma"]({"smem": smem_ab, "acc": acc}, k_tiles)
            if cfg.split_k > 1:
                acc.reduce_split()
            if plan is not None:
                acc.fixup()
            for subtile in range(cfg.epi_subtiles):  # trace-time unrolled epilogue
                out.store(frag=acc.read_acc(subtile=subtile), subtile=subtile)
            next_tile(wq)

    @schedule
    def padding_schedule(*queue: WorkQueue) -> None:
        wq = queue[0] if queue else None
        with tiles(wq):
            with domain_loop(0, k_tiles, 1):
                pass
            next_tile(wq)

    # -- tasks -------------------------------------------------------------------------
    def make_task(**kwargs: Any) -> Task:
        return Task(**kwargs) if plan is None else StreamKTask(plan, **kwargs)

    tasks = [
        make_task(name=f"LoadTask{suffix[c]}", src_resources=[coords[c], *queue],
                  dst_resources=[smems[c]], warp_idx=cfg.producer_warps[c], num_warps=1,
                  schedule=load_schedule(coords[c], smems[c], *queue),
                  num_registers=cfg.producer_regs)
        for c in range(cfg.chains)
    ]
    # Register budgets are per warpgroup: the rest of the producer's warpgroup
    # idles with the producer's budget.
    for i, (first, warps) in enumerate(cfg.padding()):
        tasks.append(
            make_task(name=f"PaddingTask{i}", src_resources=[*queue], dst_resources=[],
                      warp_idx=first, num_warps=warps, schedule=padding_schedule(*queue),
                      num_registers=cfg.producer_regs)
        )
    for i, (acc, out, feed) in enumerate(zip(accs, outs, feeds, strict=True)):
        tasks.append(
            make_task(name=f"MathWG{i}", src_resources=[feed, acc, *queue],
                      dst_resources=[acc, out], warp_idx=cfg.consumer_warps[i],
                      num_warps=WARPGROUP, schedule=mma_schedule(feed, acc, out, *queue),
                      num_registers=cfg.consumer_regs)
        )

    # -- TaskManager: runs every TS check and the exhaustive deadlock/race BFS ----------
    manager = TaskManager(
        tasks=tasks, resource_dependency_graph=dependency_graph, smem_allocator=allocator,
        verbose=verbose,
        # In the kernel the schedule was already verified on the host with a
        # concrete domain of stages + 2; the trace-time checks would repeat it at the
        # full K domain, where TS's credit simulation stops after (longest schedule +
        # 100) lock steps and reports stalled long domains (e.g. 128 K slices through 2
        # stages) as unmatched acquires. So in the kernel TS only warns.
        exhaustive_deadlock_race_check=args is None,
        skip_validation=args is not None,
    )
    # Split-K's exchange barriers (ready, done) per consumer warpgroup, as SMEM byte offsets:
    # the kernel initialises them before the cluster-wide sync, so no peer can arrive first.
    manager.split_barriers = [acc._alloc_red.offset + cfg.red_bytes - 16 for acc in accs
                              if acc._alloc_red is not None]
    return manager


########################################################################################
# Run: the kernel and its host launch
########################################################################################


def make_kernel(cfg: GemmConfig, bodies: dict[str, ScheduleBody] | None = None) -> Any:
    """The ``@cute.jit`` host function of one configuration: ``(a, b, d, stream)`` launches
    one GEMM. ``bodies``: the schedule bodies (default: rendered from ``cfg``)."""

    @cute.kernel
    def gemm_kernel(tma_atom_a: cute.CopyAtom, mA: cute.Tensor, tma_atom_b: cute.CopyAtom,
                    mB: cute.Tensor, mD: cute.Tensor, tiled_mma: cute.TiledMma,
                    a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
                    cta_layout_mnk: cute.Layout, tile_sched_params: Any, tma_atom_d: Any,
                    mD_tma: Any, epi_layout: Any, mW: Any) -> None:
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == cfg.producer_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
        args = KernelArgs(tma_atom_a, mA, tma_atom_b, mB, mD, tiled_mma, a_layout, b_layout,
                          cta_layout_mnk, tile_sched_params, tma_atom_d, mD_tma, epi_layout, mW)
        # The K domain as a DSL value, not a Python int: TS's trace-time schedule simulation
        # walks an int domain slice by slice, so build time and memory grew with K (225 s and
        # 0.46 GiB at K = 4,194,304; bench/build_memory). Given a DSL value it simulates a few
        # representative iterations, and the compiler still sees a constant (the same cubins:
        # bench/build_memory/gemm-cubin-identity.json). The host verifier checks the schedule
        # with a concrete domain.
        task_manager = make_task_manager(cfg, args, domain=cutlass.Int32(cfg.split_tiles),
                                         bodies=bodies)
        task_manager.setup_resources_and_tasks()
        if cutlass.const_expr(cfg.split_k > 1):
            _init_split_barriers(task_manager._smem_base.data_ptr(),
                                 tuple(task_manager.split_barriers), cfg.split_k)
        cute.arch.mbarrier_init_fence()
        # Peers multicast into this CTA's stages and arrive on its barriers: every
        # barrier of the cluster must be initialised before anyone runs.
        if cutlass.const_expr(cfg.cluster_size > 1):
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()
        task_manager.run()

    def launch(a: Any, b: Any, d: Any, w: Any, stream: Any) -> None:
        """The host side of one launch (traced inside the ``@cute.jit`` entry points below)."""
        io = IO_DTYPES[cfg.dtype]
        # The problem's M: compiled in, or (runtime M) this launch's rows of A and D.
        rows = cfg.problem_m if cfg.m_range is None else cute.size(a, mode=[0])
        if cfg.swap_ab:
            # Dᵀ = B·Aᵀ: B is the kernel's A operand, and the row-major M x N D is the
            # kernel's N x M D with strides (1, N), so the epilogue writes it transposed.
            a, b = b, a
            d = cute.make_tensor(d.iterator, cute.make_layout((cfg.m, rows), stride=(1, cfg.m)))
        tile_mnk = (cfg.tile_m, cfg.tile_n, cfg.tile_k)
        # Cooperating warpgroups split the tile along M (each issues m64 x tile_n wgmma) or,
        # split_n, along N (each m64 x wg_tile_n over every row); the thread slice of
        # warpgroup i is the i-th atom either way (_thr_mma).
        atoms = (1, cfg.mma_warpgroups, 1) if cfg.split_n else (cfg.mma_warpgroups, 1, 1)
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            io, io, LayoutEnum.from_tensor(a).sm90_mma_major_mode(),
            LayoutEnum.from_tensor(b).sm90_mma_major_mode(), ACC_DTYPE,
            atoms, tiler_mn=(64, cfg.wg_tile_n),
        )
        # Every wgmma accumulates: the accumulator is zeroed per tile instead.
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        a_layout = sm90_utils.make_smem_layout_a(
            LayoutEnum.from_tensor(a), tile_mnk, io, cfg.stages)
        b_layout = sm90_utils.make_smem_layout_b(
            LayoutEnum.from_tensor(b), tile_mnk, io, cfg.stages)
        # A is shared by the CTAs of a cluster row, B by those of a cluster column:
        # each CTA loads 1/cluster_n of A's slice (1/cluster_m of B's) and multicasts it.
        tma_atom_a, mA = _tma_load_atom(a, a_layout, (cfg.tile_m, cfg.tile_k), cfg.cluster_n)
        tma_atom_b, mB = _tma_load_atom(b, b_layout, (cfg.tile_n, cfg.tile_k), cfg.cluster_m)
        cta_layout_mnk = cute.make_layout((cfg.cluster_m, cfg.cluster_n, 1))
        tile_sched_params = None
        grid = cfg.grid
        tiles_m, tiles_n = launch_tiles(cfg, rows)
        if cfg.m_range is not None and not cfg.persistent:
            cm, cn = cfg.cluster_m, cfg.cluster_n  # every tile, rounded up to whole clusters
            grid = ((tiles_m + (cm - 1)) // cm * cm, (tiles_n + (cn - 1)) // cn * cn, cfg.split_k)
        if cfg.stream_k:
            # The scheduler walks the plan's units as a 1-D problem: CTA c gets c, c + P, ...
            tile_sched_params = utils.PersistentTileSchedulerParams(
                (cfg.sk_plan.units, 1, 1), (1, 1, 1), swizzle_size=1, raster_along_m=True)
            grid = utils.StaticPersistentTileScheduler.get_grid_shape(
                tile_sched_params, cfg.sm_count)
        elif cfg.persistent:
            tile_sched_params = utils.PersistentTileSchedulerParams(
                (tiles_m, tiles_n, 1), (cfg.cluster_m, cfg.cluster_n, 1),
                swizzle_size=cfg.swizzle, raster_along_m=cfg.raster == "m",
            )
            grid = utils.StaticPersistentTileScheduler.get_grid_shape(
                tile_sched_params, cfg.sm_count // cfg.cluster_size)
        tma_atom_d, mD_tma, epi_layout = None, None, None
        if cfg.epilogue == "tma_store":
            # One 64 x epi_cols box of D per m64 repeat of a warpgroup's subtile.
            epi_layout = sm90_utils.make_smem_layout_epi(
                io, LayoutEnum.from_tensor(d), (64, cfg.epi_cols), cfg.m_repeats)
            tma_atom_d, mD_tma = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), d,
                cute.slice_(epi_layout, (None, None, 0)), (64, cfg.epi_cols))
        gemm_kernel(
            tma_atom_a, mA, tma_atom_b, mB, d, tiled_mma, a_layout, b_layout, cta_layout_mnk,
            tile_sched_params, tma_atom_d, mD_tma, epi_layout, w,
        ).launch(grid=grid, block=[cfg.threads, 1, 1], cluster=(cfg.cluster_m, cfg.cluster_n, cfg.split_k),
                 stream=stream)

    @cute.jit
    def gemm_host(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor,
                  stream: cuda_driver.CUstream) -> None:
        launch(a, b, d, None, stream)

    @cute.jit
    def gemm_host_workspace(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, w: cute.Tensor,
                            stream: cuda_driver.CUstream) -> None:
        """Stream-K: ``w`` is the workspace (:attr:`GemmConfig.workspace_bytes`, zeroed before
        the first launch; every launch leaves it zeroed)."""
        launch(a, b, d, w, stream)

    return gemm_host_workspace if cfg.workspace_bytes else gemm_host


@cute.jit
def _init_split_barriers(base: Any, offsets: cutlass.Constexpr, split_k: cutlass.Constexpr[int]
                         ) -> None:
    """Split-K's barriers, by thread 0: ``ready`` counts every thread of every peer CTA's
    warpgroup, ``done`` every thread of the first CTA's."""
    if cute.arch.thread_idx()[0] == 0:
        for offset in cutlass.range_constexpr(len(offsets)):
            at = (base + offsets[offset]).toint()
            cute.arch.mbarrier_init(
                cute.make_ptr(cutlass.Int64, at, cute.AddressSpace.smem, assumed_align=8),
                (split_k - 1) * 128)
            cute.arch.mbarrier_init(
                cute.make_ptr(cutlass.Int64, at + 8, cute.AddressSpace.smem, assumed_align=8),
                128)


def _tma_load_atom(tensor: Any, layout_staged: Any, tile: tuple[int, int], mcast: int) -> Any:
    op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp() if mcast == 1
          else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp())
    return cute.nvgpu.cpasync.make_tiled_tma_atom(
        op, tensor, cute.slice_(layout_staged, (None, None, 0)), tile, num_multicast=mcast)


def compile_args(cfg: GemmConfig) -> tuple:
    """Fake A, B, D and stream for ``cute.compile``: static shapes (one kernel per problem), or
    with a runtime M one dynamic extent shared by A's and D's rows (a launch argument)."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    io = IO_DTYPES[cfg.dtype]
    m: Any = cfg.problem_m if cfg.m_range is None else cute.sym_int32()
    n = cfg.problem_n
    a = make_fake_compact_tensor(io, (m, cfg.k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(io, (n, cfg.k), stride_order=(1, 0), assumed_align=16)
    d = make_fake_compact_tensor(io, (m, n), stride_order=(1, 0), assumed_align=16)
    if not cfg.workspace_bytes:
        return a, b, d, make_fake_stream()
    w = make_fake_compact_tensor(ACC_DTYPE, (cfg.workspace_bytes // 4,), assumed_align=16)
    return a, b, d, w, make_fake_stream()
