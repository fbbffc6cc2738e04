"""Hopper (sm_90a) warp-specialized GEMM written in TS, with every schedule knob exposed.

``D = A · Bᵀ`` with A (M×K) and B (N×K) K-major, D (M×N) row-major; bf16 or
fp16 in and out, fp32 accumulation in registers. One CTA (or each CTA of a
cluster) computes ``tile_m × tile_n`` tiles of D; its K loop is the TS domain.

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
               | OutD0 |  | OutD1 |   D rows of warpgroup i, direct predicated stores
               +-------+  +-------+

    WorkQueue (persistent candidates only): every task walks the same static
    persistent tile stream, one tile per iteration of its work_tile_loop.

The wgmma is asynchronous: ``Accumulator.wgmma`` only *issues* the MMAs of one
K slice as one commit group, and the SMEM stage they read stays in use until a
``warpgroup.wait_group(N)`` retires that group. That wait is modelled in TS as
``SmemAB.wgmma_wait(pending=N)``, a consumer work on the SMEM resource, so TS
sees that the stage is still being read there; which stage a release frees and
which batches a wait retires is checked by tsopt (``tsopt.async_release``,
see ``search_spaces/_gemm_checks.py``), because TS treats the wgmma as a
synchronous producer work.

The module reads top to bottom like the TS tutorials: resources, dependency
graph, schedules, tasks, TaskManager, run (the kernel), host launch; then the
search space. Every knob is read from a :class:`GemmConfig` where it is used:
``cfg.tile_m``, ``cfg.stages``, ``cfg.load_ops``/``cfg.mma_ops`` (the schedule
placements), ``cfg.advance_on_wait`` and so on.
"""

# No `from __future__ import annotations`: the DSL reads dataclass field
# annotations (Constexpr or not) at trace time.
import contextlib
from dataclasses import dataclass, field
from typing import Any

from tsopt.dsl_env import ensure_arch  # noqa: E402

ensure_arch()  # the DSL reads its target arch when first imported

import cuda.bindings.driver as cuda_driver  # noqa: E402
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402
import cutlass.utils as utils  # noqa: E402
import cutlass.utils.hopper_helpers as sm90_utils  # noqa: E402
from cutlass.experimental.task_scheduling.enums import WorkAttr  # noqa: E402
from cutlass.experimental.task_scheduling.memory import (  # noqa: E402
    SmemAllocation,
    SmemAllocator,
)
from cutlass.experimental.task_scheduling.resources import (  # noqa: E402
    MemoryResource,
    PipelineConfig,
    StageInfo,
    TaskLocalVariable,
    TileSchedulerConfig,
    WorkQueue,
    consumer_work,
    producer_work,
)
from cutlass.experimental.task_scheduling.schedule_builder import (  # noqa: E402
    domain_loop,
    schedule,
    work_tile_loop,
)
from cutlass.experimental.task_scheduling.task import Task  # noqa: E402
from cutlass.experimental.task_scheduling.task_manager import TaskManager  # noqa: E402
from cutlass.tensor_utils import LayoutEnum  # noqa: E402

from search_spaces import _gemm_space as _space  # noqa: E402
from search_spaces._gemm_checks import gemm_checks  # noqa: E402
from search_spaces._gemm_config import (  # noqa: E402
    EPI_COLS,
    SM_COUNT,
    SPACE,
    WARPGROUP,
    GemmConfig,
)
from search_spaces.base import (  # noqa: E402
    Enumeration,
    Finding,
    KernelSpec,
    Knob,
    SearchSpace,
    TensorArg,
)
from tsopt.genome import Genome  # noqa: E402
from tsopt.problem import Problem, ProblemError  # noqa: E402

IO_DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}
ACC_DTYPE = cutlass.Float32


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


########################################################################################
# Resources
########################################################################################


@dataclass
class TileCoords(MemoryResource):
    """Coordinate source (no storage, no pipeline): which tile and K slice to load next."""

    tile_m: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    tile_n: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    k_tile: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tile_m = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.tile_n = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        self.k_tile = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))

    @consumer_work(returns=(tile_m, tile_n, k_tile))
    @cute.jit
    def compute_coords(self, stage_info: StageInfo, *, it: cutlass.Constexpr[int] = -1) -> tuple:
        # Non-persistent: the work tile is the block index, and the grid is the
        # tile grid. Persistent: the static scheduler already maps its linear
        # index to (m, n) with the raster order and swizzle of the knobs.
        m_idx, n_idx, _ = stage_info.work_tile.tile_idx
        # Head copies (prefetch) run with loop_offset 0; they pass their own K slice.
        k = stage_info.loop_offset if cutlass.const_expr(it < 0) else it
        return cutlass.Int32(m_idx), cutlass.Int32(n_idx), cutlass.Int32(k)


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

    def __init__(self, cfg: GemmConfig, args: KernelArgs | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.args = args
        self.stage = TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
        # 1024-byte alignment: the 128-byte swizzle pattern repeats every 8 rows.
        self._alloc_a = SmemAllocation("smem_a", cfg.stages * cfg.a_stage_bytes, alignment=1024)
        self._alloc_b = SmemAllocation("smem_b", cfg.stages * cfg.b_stage_bytes, alignment=1024)
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
        n = 4 * (EPI_COLS // 8) * cfg.m_repeats
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

    @cute.jit
    def _thr_mma(self) -> Any:
        tidx, _, _ = cute.arch.thread_idx()
        return self.args.tiled_mma.get_slice(tidx % 128 + 128 * self.wg)

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
        """Accumulator values of columns [subtile*64, subtile*64+64) of this thread's rows."""
        groups = EPI_COLS // 8
        vals = []
        for rr in cutlass.range_constexpr(self.cfg.m_repeats):
            for g in cutlass.range_constexpr(groups):
                for r2 in cutlass.range_constexpr(2):
                    for c2 in cutlass.range_constexpr(2):
                        vals.append(self.acc[((c2, r2, subtile * groups + g), rr, 0)])
        return cutlass.Vector.from_elements(vals, ACC_DTYPE)


@dataclass
class OutD(MemoryResource):
    """The rows of D one consumer warpgroup writes: direct, predicated stores from registers."""

    cfg: cutlass.Constexpr = field(init=False, default=None)
    args: cutlass.Constexpr = field(init=False, default=None)
    wg: cutlass.Constexpr[int] = field(init=False, default=0)

    def __init__(self, cfg: GemmConfig, args: KernelArgs | None, wg: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.args = args
        self.wg = wg

    @producer_work
    @cute.jit
    def store(
        self, stage_info: StageInfo, *, frag: cutlass.Float32, subtile: cutlass.Constexpr[int]
    ) -> None:
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        thr = self.args.tiled_mma.get_slice(tidx % 128 + 128 * self.wg)
        tCcC = thr.partition_C(cute.make_identity_tensor((cfg.tile_m, cfg.tile_n)))
        m_idx, n_idx, _ = stage_info.work_tile.tile_idx
        m0 = cutlass.Int32(m_idx) * cfg.tile_m
        n0 = cutlass.Int32(n_idx) * cfg.tile_n
        d_ptr = self.args.mD.iterator.raw_ptr()
        out_dtype = IO_DTYPES[cfg.dtype]
        groups = EPI_COLS // 8
        # Tiles past the problem (cluster or swizzle rounding) write nothing.
        tile_in = (cutlass.Int32(m_idx) < cfg.tiles_m) & (cutlass.Int32(n_idx) < cfg.tiles_n)
        for rr in cutlass.range_constexpr(cfg.m_repeats):
            for g in cutlass.range_constexpr(groups):
                for r2 in cutlass.range_constexpr(2):
                    i = ((rr * groups + g) * 2 + r2) * 2
                    row, col = tCcC[((0, r2, subtile * groups + g), rr, 0)]
                    pair = cutlass.Vector.from_elements([frag[i], frag[i + 1]], ACC_DTYPE)
                    dst = d_ptr + (cutlass.Int64(m0 + row) * cfg.n + cutlass.Int64(n0 + col))
                    if cutlass.const_expr(cfg.ragged):
                        # A pair is wholly in or out: N % 8 == 0 and col is even.
                        if (m0 + row < cfg.m) & (n0 + col < cfg.n):
                            dst.store(pair.to(out_dtype), alignment=4)
                    elif cutlass.const_expr(cfg.overhang):
                        if tile_in:
                            dst.store(pair.to(out_dtype), alignment=4)
                    else:
                        dst.store(pair.to(out_dtype), alignment=4)


@cute.jit
def _smem_tensor(stage_info: StageInfo, alloc: SmemAllocation, layout: Any, cfg: Any) -> Any:
    """A swizzled, staged SMEM tensor over one allocation of the TS allocator."""
    return _smem_tensor_at(stage_info.context.smem_base.data_ptr() + alloc.offset, layout, cfg)


def _smem_tensor_at(address: Any, layout: Any, cfg: Any) -> Any:
    ptr = cute.make_ptr(IO_DTYPES[cfg.dtype], address, cute.AddressSpace.smem, assumed_align=1024)
    return cute.make_tensor(cute.recast_ptr(ptr, layout.inner), layout.outer)


########################################################################################
# Dependency graph, schedules, tasks, TaskManager
########################################################################################


def make_task_manager(cfg: GemmConfig, args: KernelArgs | None, domain: int | None = None,
                      verbose: bool = False) -> TaskManager:
    """Build the TS skeleton of one candidate.

    With ``args=None`` nothing touches the DSL tracer: this is what the host
    verifier constructs (``domain`` then overrides the K-tile count). In the
    kernel the same function builds the skeleton that is compiled, so the
    verified schedule and the compiled one cannot drift apart.
    """
    k_tiles = cfg.k_tiles if domain is None else domain

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
            pipeline.Agent.Thread, WARPGROUP * cfg.consumers * cfg.mcast_size
        ),
        cta_layout_vmnk=(1, cfg.cluster_m, cfg.cluster_n, 1),
        advance_on_wait=cfg.advance_on_wait,
    )
    coords = TileCoords(name="TileCoords")
    smem_ab = SmemAB(cfg, args, name="SmemAB", pipeline_config=pipeline_cfg)
    accs = [Accumulator(cfg, args, i, smem_ab, name=f"Acc{i}") for i in range(cfg.consumers)]
    outs = [OutD(cfg, args, i, name=f"OutD{i}") for i in range(cfg.consumers)]
    wq = None
    if cfg.persistent:
        wq = WorkQueue(
            tile_scheduler_config=TileSchedulerConfig.create_static_persistent_tile_scheduler_params(
                tile_scheduler_params=None if args is None else args.tile_sched_params
            ),
            name="WorkQueue",
        )
    allocator = SmemAllocator()
    allocator.add_resource(smem_ab)
    allocator.compute_layout()

    # -- dependency graph --------------------------------------------------------------
    queue = [wq] if wq is not None else []
    dependency_graph: dict = {smem_ab: [coords, *queue]}
    for acc, out in zip(accs, outs, strict=True):
        dependency_graph[acc] = [smem_ab, *queue]
        dependency_graph[out] = [acc, *queue]

    # -- schedules ---------------------------------------------------------------------
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
            ops = _LoadOps(coords, smem_ab)
            ops.emit(cfg.section(cfg.load_ops, "head"), head=True)  # `prefetch` K slices ahead
            with domain_loop(cfg.prefetch, k_tiles, 1):
                ops.emit(cfg.section(cfg.load_ops, "loop"))
            ops.emit(cfg.section(cfg.load_ops, "tail"))
            next_tile(wq)

    @schedule
    def mma_schedule(smem_ab: SmemAB, acc: Accumulator, out: OutD, *queue: WorkQueue) -> None:
        wq = queue[0] if queue else None
        acc.init_acc()
        with tiles(wq):
            acc.zero_acc()
            ops = _MmaOps(smem_ab, acc)
            ops.emit(cfg.section(cfg.mma_ops, "head"))  # `inflight` wgmma batches issued
            with domain_loop(cfg.inflight, k_tiles, 1):
                ops.emit(cfg.section(cfg.mma_ops, "loop"))
            ops.emit(cfg.section(cfg.mma_ops, "tail"))
            for subtile in range(cfg.tile_n // EPI_COLS):  # trace-time unrolled epilogue
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
    tasks = [
        Task(name="LoadTask", src_resources=[coords, *queue], dst_resources=[smem_ab],
             warp_idx=cfg.producer_warp, num_warps=1,
             schedule=load_schedule(coords, smem_ab, *queue), num_registers=cfg.producer_regs),
    ]
    # Register budgets are per warpgroup: the rest of the producer's warpgroup
    # idles with the producer's budget.
    for i, (first, warps) in enumerate(cfg.padding()):
        tasks.append(
            Task(name=f"PaddingTask{i}", src_resources=[*queue], dst_resources=[],
                 warp_idx=first, num_warps=warps, schedule=padding_schedule(*queue),
                 num_registers=cfg.producer_regs)
        )
    for i, (acc, out) in enumerate(zip(accs, outs, strict=True)):
        tasks.append(
            Task(name=f"MathWG{i}", src_resources=[smem_ab, acc, *queue],
                 dst_resources=[acc, out], warp_idx=cfg.consumer_warps[i], num_warps=WARPGROUP,
                 schedule=mma_schedule(smem_ab, acc, out, *queue),
                 num_registers=cfg.consumer_regs)
        )

    # -- TaskManager: runs every TS check and the exhaustive deadlock/race BFS ----------
    return TaskManager(
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


class _LoadOps:
    """The producer's movable ops; ``emit`` records them in genome order."""

    def __init__(self, coords: TileCoords, smem_ab: SmemAB) -> None:
        self.coords, self.smem_ab = coords, smem_ab
        self.tok: dict[str, Any] = {}

    def emit(self, ops: tuple[str, ...], head: bool = False) -> None:
        for op in ops:
            if op == "coords":
                it = self.tok.get("copies", 0) if head else -1
                self.tok["copies"] = self.tok.get("copies", 0) + 1
                self.tok["coords"] = self.coords.compute_coords(it=it)
            elif op == "try_acquire":
                self.smem_ab.try_acquire()
            elif op == "acquire":
                self.smem_ab.acquire()
            elif op == "tma_load":
                tile_m, tile_n, k_tile = self.tok["coords"]
                self.smem_ab.tma_load(tile_m=tile_m, tile_n=tile_n, k_tile=k_tile)
            elif op == "commit":
                self.smem_ab.commit()
            else:
                raise KeyError(f"unknown load op {op!r}")


class _MmaOps:
    """The consumer's movable ops; ``wgmma_wait<N>`` is ``warpgroup.wait_group(N)``."""

    def __init__(self, smem_ab: SmemAB, acc: Accumulator) -> None:
        self.smem_ab, self.acc = smem_ab, acc
        self.tok: dict[str, Any] = {}

    def emit(self, ops: tuple[str, ...]) -> None:
        for op in ops:
            if op == "try_wait":
                self.smem_ab.try_wait()
            elif op == "wait":
                self.smem_ab.wait()
            elif op == "read_stage":
                self.tok["stage"] = self.smem_ab.read_stage()
            elif op == "wgmma":
                self.acc.wgmma(stage=self.tok["stage"])
            elif op.startswith("wgmma_wait"):
                self.smem_ab.wgmma_wait(pending=int(op.removeprefix("wgmma_wait")))
            elif op == "release":
                self.smem_ab.release()
            else:
                raise KeyError(f"unknown mma op {op!r}")


########################################################################################
# Run: the kernel and its host launch
########################################################################################


class HopperGemmKernel:
    """The compiled object: ``HopperGemmKernel(cfg)(a, b, d, stream)`` launches one GEMM."""

    def __init__(self, cfg: GemmConfig) -> None:
        self.cfg = cfg

    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, d: cute.Tensor,
                 stream: cuda_driver.CUstream) -> None:
        cfg = self.cfg
        io = IO_DTYPES[cfg.dtype]
        tile_mnk = (cfg.tile_m, cfg.tile_n, cfg.tile_k)
        # Warpgroups split the tile along M; each issues m64 x tile_n wgmma.
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            io, io, LayoutEnum.from_tensor(a).sm90_mma_major_mode(),
            LayoutEnum.from_tensor(b).sm90_mma_major_mode(), ACC_DTYPE,
            (cfg.consumers, 1, 1), tiler_mn=(64, cfg.tile_n),
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
        if cutlass.const_expr(cfg.persistent):
            tile_sched_params = utils.PersistentTileSchedulerParams(
                (cfg.tiles_m, cfg.tiles_n, 1), (cfg.cluster_m, cfg.cluster_n, 1),
                swizzle_size=cfg.swizzle, raster_along_m=cfg.raster == "m",
            )
            grid = utils.StaticPersistentTileScheduler.get_grid_shape(
                tile_sched_params, SM_COUNT // cfg.cluster_size)
        self.kernel(
            tma_atom_a, mA, tma_atom_b, mB, d, tiled_mma, a_layout, b_layout, cta_layout_mnk,
            tile_sched_params,
        ).launch(grid=grid, block=[cfg.threads, 1, 1], cluster=(cfg.cluster_m, cfg.cluster_n, 1),
                 stream=stream)

    @cute.kernel
    def kernel(self, tma_atom_a: cute.CopyAtom, mA: cute.Tensor, tma_atom_b: cute.CopyAtom,
               mB: cute.Tensor, mD: cute.Tensor, tiled_mma: cute.TiledMma,
               a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
               cta_layout_mnk: cute.Layout, tile_sched_params: Any) -> None:
        cfg = self.cfg
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == cfg.producer_warp:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
        args = KernelArgs(tma_atom_a, mA, tma_atom_b, mB, mD, tiled_mma, a_layout, b_layout,
                          cta_layout_mnk, tile_sched_params)
        task_manager = make_task_manager(cfg, args)
        task_manager.setup_resources_and_tasks()
        cute.arch.mbarrier_init_fence()
        # Peers multicast into this CTA's stages and arrive on its barriers: every
        # barrier of the cluster must be initialised before anyone runs.
        if cutlass.const_expr(cfg.cluster_size > 1):
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()
        task_manager.run()


def _tma_load_atom(tensor: Any, layout_staged: Any, tile: tuple[int, int], mcast: int) -> Any:
    op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp() if mcast == 1
          else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp())
    return cute.nvgpu.cpasync.make_tiled_tma_atom(
        op, tensor, cute.slice_(layout_staged, (None, None, 0)), tile, num_multicast=mcast)


def compile_args(cfg: GemmConfig) -> tuple:
    """Fake A, B, D and stream for ``cute.compile`` (static shapes: one kernel per problem)."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    io = IO_DTYPES[cfg.dtype]
    a = make_fake_compact_tensor(io, (cfg.m, cfg.k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(io, (cfg.n, cfg.k), stride_order=(1, 0), assumed_align=16)
    d = make_fake_compact_tensor(io, (cfg.m, cfg.n), stride_order=(1, 0), assumed_align=16)
    return a, b, d, make_fake_stream()


########################################################################################
# The search space
########################################################################################


class HopperGemmSpace(SearchSpace):
    """The warp-specialized TS GEMM above, with its schedule placements and knobs as genes."""

    name = SPACE
    op = "gemm"
    description = ("Hopper warp-specialized TS GEMM D = A.B^T (TMA producer, wgmma consumer "
                   "warpgroups), bf16/fp16, sm_90a")
    archs = ("sm_90a",)

    # -- problems and knobs ----------------------------------------------------------
    def check_problem(self, problem: Problem) -> None:
        if problem.op != "gemm":
            raise ProblemError(f"space 'gemm' tunes gemm problems, not {problem.op!r}")
        for name in ("n", "k"):
            if problem[name] % 8:
                raise ProblemError(
                    f"{name}={problem[name]} is not a multiple of 8: TMA needs 16-byte rows "
                    "(K) and the epilogue 4-byte aligned pairs in every row of D (N)")

    def knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        return _space.knobs(self)

    def raw_knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        return _space.raw_knobs()

    def params_of(self, genome: Genome) -> dict[str, Any]:
        return _space.params_of(self, genome)

    def genome(self, **values: Any) -> Genome:
        """A genome from knob values (placement knobs and genes; defaults: the seed)."""
        return _space.make_genome(**values)

    def seed_genome(self, problem: Problem) -> Genome:
        """A hand-written schedule: 128x256x64 tiles, 4 stages, two cooperative consumer
        warpgroups at 232 registers, one wgmma batch in flight, one tile per CTA."""
        return _space.make_genome()

    # -- search ----------------------------------------------------------------------
    def enumerate(self, problem: Problem) -> Enumeration:
        self.check_problem(problem)
        return _space.enumerate_space(problem)

    def suggest(self, trial: Any, problem: Problem) -> Genome:
        return _space.suggest(trial, self)

    def funnel(self, problem: Problem, **kwargs: Any) -> Any:
        """The funnel by factorised verification (see ``search_spaces/_gemm_funnel.py``)."""
        from search_spaces._gemm_funnel import gemm_funnel

        return gemm_funnel(self, problem, **kwargs)

    # -- verification ----------------------------------------------------------------
    def config(self, genome: Genome, problem: Problem) -> GemmConfig:
        return GemmConfig.from_genome(genome, problem.sizes, problem.dtype)

    def dataflow_error(self, genome: Genome) -> str | None:
        return _space.dataflow_error(genome)

    def build_skeleton(self, genome: Genome, problem: Problem, domain: int) -> Any:
        return make_task_manager(self.config(genome, problem), None, domain=domain)

    def verify_domain(self, genome: Genome) -> int:
        stages = genome["stages"]
        assert isinstance(stages, int)
        depth = max(_space.head_depth(genome, task) for task in ("load", "mma"))
        return max(4, stages + 2, depth + 2)

    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        return gemm_checks(self.config(genome, problem))

    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        cfg = self.config(genome, problem)
        # Raster order, swizzle and the epilogue never reach the TS skeleton.
        ts_genes = {name: genome[name] for name in _space.TS_KEY_GENES}
        return repr((cfg.load_ops, cfg.mma_ops, sorted(ts_genes.items())))

    # -- build -----------------------------------------------------------------------
    def source_modules(self) -> tuple[str, ...]:
        # GemmConfig's derived sizes (SMEM, grid, epilogue guards) shape the kernel too.
        return (type(self).__module__, "search_spaces._gemm_config")

    def kernel_spec(self, genome: Genome, problem: Problem, arch: str) -> KernelSpec:
        cfg = self.config(genome, problem)
        return KernelSpec(
            host_fn=HopperGemmKernel(cfg),
            compile_args=compile_args(cfg),
            tensors=(
                TensorArg("a", "input", (cfg.m, cfg.k), cfg.dtype),
                TensorArg("b", "input", (cfg.n, cfg.k), cfg.dtype),
                TensorArg("d", "output", (cfg.m, cfg.n), cfg.dtype),
            ),
            launch={"grid": list(cfg.grid), "block": [cfg.threads, 1, 1],
                    "cluster": [cfg.cluster_m, cfg.cluster_n, 1], "smem_bytes": cfg.smem_bytes},
        )
