"""TS TMA copy: GMEM -> SMEM (TMA, pipelined) -> registers -> GMEM.

The search space of the TS tutorial's kernel 02 (``02_copy_tma.py``), opened
up: every schedule op placed by the genome, every numeric knob a gene. The
module reads like a TS tutorial: resources, dependency graph, schedules,
tasks, TaskManager, run; the search-space class that drives it comes last.

Resource/task flow::

                  +---------------+
                  |  TileCoords   |   which (row, col) box an iteration copies
                  +-------+-------+
                          |  coords
      LoadTask (1 warp):  v  try_acquire, acquire, tma_load, commit
                  +-------+-------+
                  |   SmemTiles   |   `stages` boxes of box_rows x box_cols,
                  | TMA->async    |   one mbarrier pair per stage
                  +-------+-------+
                          |  read: 16-byte vectors -> registers
      StoreTask (W warps):v  try_wait, wait, read, release, store
                  +-------+-------+
                  |    GmemOut    |   16-byte vector stores
                  +---------------+

One domain-loop iteration copies one box. A CTA copies ``chunk`` boxes (its
work tile); with ``persistent`` a static persistent WorkQueue hands work
tiles to ``sm_count * ctas_per_sm`` CTAs, otherwise there is one CTA per work
tile.

Placement genes. Each task's loop body is a permutation of its five ops; the
head holds ``depth`` copies of that body for the first iterations (producer
prefetch, or consumer work kept in flight), and one sync op of those head
copies may be *deferred* to the tail (delayed release on the consumer side,
delayed commit on the producer side). The genome stores the resulting
explicit placement; :func:`placement_of` renders knob values into it and
:func:`knobs_of_placement` reads them back.
"""

# No `from __future__ import annotations`: the DSL reads kernel annotations (GridConstant,
# Constexpr) at trace time and must get objects, not strings.

import itertools
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search_spaces.base import Enumeration, Finding, KernelSpec, Knob, SearchSpace, TensorArg
from tsopt.genome import Genome, Section
from tsopt.problem import Problem, ProblemError

SPACE = "copy"
SM_COUNT = {"sm_90a": 132, "sm_100a": 148}
SMEM_CAPACITY = 232_448
REGISTER_FILE = 65_536
VECTOR_BYTES = 16

# --------------------------------------------------------------------------------------
# Ops and placements
# --------------------------------------------------------------------------------------

LOAD_OPS = ("coords", "try_acquire", "acquire", "tma_load", "commit")
STORE_OPS = ("try_wait", "wait", "read", "release", "store")
TASK_OPS = {"load": LOAD_OPS, "store": STORE_OPS}
WORK_OPS = {"load": ("coords", "tma_load"), "store": ("read", "store")}
SYNC_OPS = {"load": ("try_acquire", "acquire", "commit"), "store": ("try_wait", "wait", "release")}
PRIMARY_OP = {"load": "tma_load", "store": "read"}
# (producer of a token, its consumer): the token must exist before it is used.
TOKENS = {"load": ("coords", "tma_load"), "store": ("read", "store")}

CANONICAL_BODY = {"load": LOAD_OPS, "store": STORE_OPS}
HEAD_DEPTHS = (0, 1, 2)


def placement_of(
    body: Sequence[str], depth: int, defer: str
) -> tuple[tuple[str, Section], ...]:
    """Explicit placement: ``depth`` head copies of ``body`` (less ``defer``), the loop body,
    and one deferred ``defer`` op per head copy in the tail."""
    head: list[tuple[str, Section]] = []
    for _ in range(depth):
        head.extend((op, "head") for op in body if op != defer)
    loop = [(op, "loop") for op in body]
    tail = [(defer, "tail")] * depth if defer != "none" and depth else []
    return tuple(head + loop + tail)


def knobs_of_placement(ops: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], int, str] | None:
    """(body, depth, defer) if ``ops`` is of the form :func:`placement_of` renders, else None."""
    body = tuple(op for op, sec in ops if sec == "loop")
    tail = [op for op, sec in ops if sec == "tail"]
    defer = tail[0] if tail else "none"
    if any(op != defer for op in tail):
        return None
    for depth in HEAD_DEPTHS:
        if placement_of(body, depth, defer) == tuple((op, sec) for op, sec in ops):
            return body, depth, defer
    return None


# --------------------------------------------------------------------------------------
# The configuration a genome describes (plus derived facts)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CopyConfig:
    """Everything the template needs, read off a genome and a problem.

    Derived, never mutated: padding warps, block size, consumer group size,
    per-thread fragment size, grid.
    """

    dtype: str
    rows: int
    cols: int
    load_ops: tuple[tuple[str, Section], ...]
    store_ops: tuple[tuple[str, Section], ...]
    advance_on_wait: bool
    persistent: bool
    stages: int
    box_rows: int
    box_cols: int
    store_warps: int
    store_warp: int
    load_warp: int
    load_regs: int
    store_regs: int
    chunk: int
    ctas_per_sm: int
    vector: int = 8
    raster: str = "row"
    sm_count: int = 132
    # Deliberate faults for tests and the isolation demo only (genes named
    # ``planted.*``); the enumerator and samplers never produce them.
    planted: tuple[tuple[str, Any], ...] = ()

    def fault(self, name: str, default: Any = None) -> Any:
        return dict(self.planted).get(name, default)

    # -- derived ---------------------------------------------------------------------
    @property
    def elem_bytes(self) -> int:
        return 2

    @property
    def box_bytes(self) -> int:
        return self.box_rows * self.box_cols * self.elem_bytes

    @property
    def vec(self) -> int:
        """Elements per SMEM read / GMEM store of one thread."""
        return self.vector

    @property
    def access_bytes(self) -> int:
        return self.vector * self.elem_bytes

    @property
    def store_threads(self) -> int:
        return 32 * self.store_warps

    @property
    def vectors_per_thread(self) -> int:
        return max(1, self.box_rows * self.box_cols // (self.vec * self.store_threads))

    @property
    def tiles_c(self) -> int:
        return self.cols // self.box_cols

    @property
    def tiles_r(self) -> int:
        return self.rows // self.box_rows

    @property
    def tiles(self) -> int:
        return self.tiles_r * self.tiles_c

    def box_origin(self, t: Any) -> tuple[Any, Any]:
        """(row, col) of box ``t``: boxes run along rows (``row``) or down columns (``col``)."""
        if self.raster == "col":
            return (t % self.tiles_r) * self.box_rows, (t // self.tiles_r) * self.box_cols
        return (t // self.tiles_c) * self.box_rows, (t % self.tiles_c) * self.box_cols

    @property
    def work_tiles(self) -> int:
        return self.tiles // self.chunk

    @property
    def block_warps(self) -> int:
        last = max(self.store_warp + self.store_warps, self.load_warp + 1)
        return 4 * math.ceil(last / 4)

    @property
    def grid(self) -> int:
        if self.persistent:
            return min(self.work_tiles, self.sm_count * self.ctas_per_sm)
        return self.work_tiles

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.box_bytes + 16 * self.stages

    def head_depth(self, task: str) -> int:
        ops = self.load_ops if task == "load" else self.store_ops
        return sum(1 for op, sec in ops if sec == "head" and op == PRIMARY_OP[task])

    def padding(self) -> list[tuple[int, int, int]]:
        """(first warp, warps, registers) of padding tasks: every warp of a 4-warp group
        must be owned by a task with that group's register budget."""
        owner: dict[int, int] = {}
        for w in range(self.store_warp, self.store_warp + self.store_warps):
            owner[w] = self.store_regs
        owner.setdefault(self.load_warp, self.load_regs)
        pads: list[tuple[int, int, int]] = []
        for group in range(self.block_warps // 4):
            warps = range(4 * group, 4 * group + 4)
            regs = next((owner[w] for w in warps if w in owner), self.load_regs)
            start = None
            for w in list(warps) + [None]:
                free = w is not None and w not in owner
                if free and start is None:
                    start = w
                if not free and start is not None:
                    pads.append((start, (w if w is not None else 4 * group + 4) - start, regs))
                    start = None
        return pads

    @classmethod
    def from_genome(cls, genome: Genome, problem: Problem, arch: str = "sm_90a") -> "CopyConfig":
        def num(name: str) -> int:
            value = genome[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"gene {name}={value!r} must be an integer")
            return value

        return cls(
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
            sm_count=SM_COUNT.get(arch, 132),
            planted=tuple(
                (k.removeprefix("planted."), v) for k, v in genome.genes.items()
                if k.startswith("planted.")
            ),
        )


# --------------------------------------------------------------------------------------
# The TS kernel: resources, dependency graph, schedules, tasks, TaskManager, run.
# Built by one function for both uses: on the host with a concrete domain (the
# verifier; no IR is created) and inside the traced kernel (the builder).
# --------------------------------------------------------------------------------------


def _ts_modules() -> Any:
    """The DSL, imported on first use (it is heavy; the CLI must start fast)."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.pipeline as pipeline
    from cutlass.experimental import primitives as prims
    from cutlass.experimental.task_scheduling.memory import SmemAllocation, SmemAllocator
    from cutlass.experimental.task_scheduling.resources import (
        MemoryResource,
        PipelineConfig,
        StageInfo,
        TaskLocalVariable,
        TileSchedulerConfig,
        WorkAttr,
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

    return _Modules(**locals())


class _Modules:
    def __init__(self, **mods: Any) -> None:
        self.__dict__.update(mods)


_RESOURCE_CLASSES: dict[str, Any] = {}


def _resource_classes() -> dict[str, Any]:
    """The three resource classes (defined once; their methods read ``self.cfg``)."""
    if _RESOURCE_CLASSES:
        return _RESOURCE_CLASSES
    m = _ts_modules()
    cutlass, cute, prims = m.cutlass, m.cute, m.prims
    from dataclasses import dataclass as dc
    from dataclasses import field

    def dsl_dtype(cfg: CopyConfig) -> Any:
        return cutlass.Float16 if cfg.dtype == "fp16" else cutlass.BFloat16

    @dc
    class TileCoords(m.MemoryResource):
        """Coordinate source: the (row, col) of the box an iteration copies."""

        cfg: cutlass.Constexpr = field(init=False, default=None)
        row: cutlass.Constexpr[m.TaskLocalVariable] = m.TaskLocalVariable.uninitialized()
        col: cutlass.Constexpr[m.TaskLocalVariable] = m.TaskLocalVariable.uninitialized()

        def __init__(self, cfg: CopyConfig, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.cfg = cfg
            self.row = m.TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))
            self.col = m.TaskLocalVariable(dtype=cutlass.Int32, default=cutlass.Int32(0))

        @m.consumer_work(returns=(row, col))
        @cute.jit
        def coords(self, stage_info: Any, *, it: cutlass.Constexpr[int] = -1) -> Any:
            # Head copies run with loop_offset 0; they pass their own iteration.
            i = stage_info.loop_offset if cutlass.const_expr(it < 0) else it
            return self.cfg.box_origin(_tile_of(self.cfg, stage_info, i))

    @dc
    class SmemTiles(m.MemoryResource):
        """``stages`` boxes in SMEM behind a TMA->async pipeline."""

        cfg: cutlass.Constexpr = field(init=False, default=None)
        tma_desc: Any = field(init=False, default=None)
        buf: Any = field(init=False, default=None)
        frag: cutlass.Constexpr[m.TaskLocalVariable] = m.TaskLocalVariable.uninitialized()
        _alloc: cutlass.Constexpr = field(init=False, default=None)

        def __init__(self, cfg: CopyConfig, tma_desc: Any, on_device: bool, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.cfg = cfg
            self.tma_desc = tma_desc
            n = cfg.vectors_per_thread * cfg.vec
            dt = dsl_dtype(cfg)
            # A factory, not a value: building the default creates IR, which the
            # host verifier (no tracer) must never do.
            self.frag = m.TaskLocalVariable(dtype=dt, default_factory=lambda: cutlass.full([n], 0.0, dt))
            self._alloc = m.SmemAllocation(
                "copy_boxes", dtype=dt, count=cfg.stages * cfg.box_rows * cfg.box_cols, alignment=128
            )
            if on_device:
                self.buf = self._array(cutlass.inttoptr(0, mem_space=3, dtype=dt))

        def _array(self, ptr: Any) -> Any:
            cfg = self.cfg
            return cutlass.Array(
                ptr, dtype=dsl_dtype(cfg), shape=(cfg.stages * cfg.box_rows * cfg.box_cols,), addrspace=3
            )

        def get_smem_requirements(self) -> list[Any]:
            return [self._alloc]

        @cute.jit
        def _bind(self, stage_info: Any) -> None:
            self.buf = self._array(stage_info.context.smem_base.data_ptr() + self._alloc.offset)

        @m.producer_work(work_attrs=m.WorkAttr.AUXILIARY)
        @cute.jit
        def init_load(self, stage_info: Any) -> None:
            self._bind(stage_info)

        @m.consumer_work(work_attrs=m.WorkAttr.AUXILIARY)
        @cute.jit
        def init_read(self, stage_info: Any) -> None:
            self._bind(stage_info)

        @m.producer_work
        @cute.jit
        def tma_load(self, stage_info: Any, *, row: cutlass.Int32, col: cutlass.Int32) -> None:
            cfg = self.cfg
            if prims.elect_sync():
                prims.cp_async_bulk_tensor_shared_cta_global(
                    self.buf.subview(stage_info.stage_idx * cfg.box_rows * cfg.box_cols),
                    self.tma_desc,
                    (col, row),
                    stage_info.barrier,
                )

        @m.consumer_work(returns=frag)
        @cute.jit
        def read(self, stage_info: Any, *, it: cutlass.Constexpr[int] = -1) -> Any:
            cfg = self.cfg
            dt = dsl_dtype(cfg)
            tx, _, _ = cute.arch.thread_idx()
            tid = tx % cfg.store_threads
            base = stage_info.stage_idx * cfg.box_rows * cfg.box_cols
            elems: tuple[Any, ...] = ()
            base = base + cfg.fault("smem_read_offset", 0)
            for v in cutlass.range_constexpr(cfg.vectors_per_thread):
                e = (v * cfg.store_threads + tid) * cfg.vec
                vec = self.buf.load(base + e, vector_size=cfg.vec, alignment=cfg.access_bytes)
                elems = elems + cutlass.Vector(vec, dtype=dt).to_elements()
            return cutlass.Vector.from_elements(elems, dt)

    @dc
    class GmemOut(m.MemoryResource):
        """GMEM sink: the register fragment back to the same box of the output."""

        cfg: cutlass.Constexpr = field(init=False, default=None)
        dst: Any = field(init=False, default=None)

        def __init__(self, cfg: CopyConfig, dst: Any, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.cfg = cfg
            self.dst = dst

        @m.producer_work
        @cute.jit
        def store(self, stage_info: Any, *, frag: Any, it: cutlass.Constexpr[int] = -1) -> None:
            cfg = self.cfg
            i = stage_info.loop_offset if cutlass.const_expr(it < 0) else it
            r0, c0 = cfg.box_origin(_tile_of(cfg, stage_info, i))
            tx, _, _ = cute.arch.thread_idx()
            tid = tx % cfg.store_threads
            ptr = self.dst.iterator.raw_ptr()
            # planted.skip_vectors leaves the last vectors of every thread unwritten.
            for v in cutlass.range_constexpr(cfg.vectors_per_thread - cfg.fault("skip_vectors", 0)):
                e = (v * cfg.store_threads + tid) * cfg.vec
                r = r0 + e // cfg.box_cols
                c = c0 + e % cfg.box_cols
                (ptr + cutlass.Int64(r) * cfg.cols + cutlass.Int64(c)).store(
                    frag[v * cfg.vec : (v + 1) * cfg.vec], alignment=cfg.access_bytes
                )

    _RESOURCE_CLASSES.update(TileCoords=TileCoords, SmemTiles=SmemTiles, GmemOut=GmemOut)
    return _RESOURCE_CLASSES


def _tile_of(cfg: CopyConfig, stage_info: Any, i: Any) -> Any:
    """Box index of iteration ``i`` of the current work tile."""
    import cutlass.cute as cute

    if cfg.persistent:
        w = stage_info.work_tile.tile_idx[0]
    else:
        w, _, _ = cute.arch.block_idx()
    return w * cfg.chunk + i


def build_task_manager(
    cfg: CopyConfig,
    *,
    domain: int,
    tma_desc: Any = None,
    dst: Any = None,
    tile_sched_params: Any = None,
    on_device: bool = False,
) -> Any:
    """Resources, dependency graph, schedules, tasks and the TaskManager of one genome.

    Constructing the TaskManager runs the TS checks (schedule table, pairing
    rules, the exhaustive BFS deadlock/race checker) and raises ``ValueError``
    on an invalid schedule.
    """
    m = _ts_modules()
    classes = _resource_classes()
    consumer_threads = cfg.fault("consumer_threads", cfg.store_threads)

    # -- resources ------------------------------------------------------------------
    pipeline_config = m.PipelineConfig.create_tma_async_pipeline_cfg(
        num_stages=cfg.stages,
        num_bytes=cfg.box_bytes,
        producer_group=m.pipeline.CooperativeGroup(m.pipeline.Agent.Thread),
        consumer_group=m.pipeline.CooperativeGroup(m.pipeline.Agent.Thread, consumer_threads),
        advance_on_wait=cfg.advance_on_wait,
    )
    coords = classes["TileCoords"](cfg, name="TileCoords")
    smem = classes["SmemTiles"](
        cfg, tma_desc, on_device, name="SmemTiles", pipeline_config=pipeline_config
    )
    out = classes["GmemOut"](cfg, dst, name="GmemOut")
    work_queue = None
    if cfg.persistent:
        work_queue = m.WorkQueue(
            tile_scheduler_config=m.TileSchedulerConfig.create_static_persistent_tile_scheduler_params(
                tile_scheduler_params=tile_sched_params
            ),
            name="WorkQueue",
        )
    allocator = m.SmemAllocator()
    allocator.add_resource(smem)
    allocator.compute_layout()

    # -- dependency graph -------------------------------------------------------------
    wq_src = [work_queue] if work_queue is not None else []
    dependencies: dict[Any, list[Any]] = {smem: [coords, *wq_src], out: [smem, *wq_src]}

    # -- schedules --------------------------------------------------------------------
    def emit(ops: Sequence[tuple[str, Section]], section: Section, task: str, res: dict[str, Any]) -> None:
        tokens: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for op, sec in ops:
            if sec != section:
                continue
            it = seen.get(op, 0) if section == "head" else -1
            seen[op] = seen.get(op, 0) + 1
            if op == "coords":
                tokens["row"], tokens["col"] = res["coords"].coords(it=it)
            elif op == "tma_load":
                res["smem"].tma_load(row=tokens["row"], col=tokens["col"])
            elif op == "read":
                tokens["frag"] = res["smem"].read(it=it)
            elif op == "store":
                res["out"].store(frag=tokens["frag"], it=it)
            else:  # a pipeline op on the SMEM resource
                getattr(res["smem"], op)()

    def body(task: str, ops: Sequence[tuple[str, Section]], res: dict[str, Any]) -> None:
        emit(ops, "head", task, res)
        with m.domain_loop(cfg.head_depth(task), domain, 1):
            emit(ops, "loop", task, res)
        emit(ops, "tail", task, res)

    def advance_work_tile(wq: Any) -> None:
        wq.try_wait()
        wq.wait()
        wq.get_and_advance_work_tile()
        wq.release()

    if work_queue is None:

        @m.schedule
        def load_schedule(c: Any, s: Any) -> None:
            s.init_load()
            body("load", cfg.load_ops, {"coords": c, "smem": s})

        @m.schedule
        def store_schedule(s: Any, o: Any) -> None:
            s.init_read()
            body("store", cfg.store_ops, {"smem": s, "out": o})

        @m.schedule
        def padding_schedule() -> None:
            with m.domain_loop(0, domain, 1):
                pass

        load_sched = load_schedule(coords, smem)
        store_sched = store_schedule(smem, out)
        make_padding = padding_schedule
    else:

        @m.schedule
        def load_schedule(c: Any, s: Any, wq: Any) -> None:
            s.init_load()
            with m.work_tile_loop(wq):
                body("load", cfg.load_ops, {"coords": c, "smem": s})
                advance_work_tile(wq)

        @m.schedule
        def store_schedule(s: Any, o: Any, wq: Any) -> None:
            s.init_read()
            with m.work_tile_loop(wq):
                body("store", cfg.store_ops, {"smem": s, "out": o})
                advance_work_tile(wq)

        @m.schedule
        def padding_schedule(wq: Any) -> None:
            with m.work_tile_loop(wq):
                with m.domain_loop(0, domain, 1):
                    pass
                advance_work_tile(wq)

        load_sched = load_schedule(coords, smem, work_queue)
        store_sched = store_schedule(smem, out, work_queue)
        make_padding = lambda: padding_schedule(work_queue)  # noqa: E731

    # -- tasks ------------------------------------------------------------------------
    tasks = [
        m.Task(
            name="LoadTask", src_resources=[coords, *wq_src], dst_resources=[smem],
            warp_idx=cfg.load_warp, num_warps=1, schedule=load_sched, num_registers=cfg.load_regs,
        ),
        m.Task(
            name="StoreTask", src_resources=[smem, *wq_src], dst_resources=[out],
            warp_idx=cfg.store_warp, num_warps=cfg.store_warps, schedule=store_sched,
            num_registers=cfg.store_regs,
        ),
    ]
    if True:
        for i, (first, warps, regs) in enumerate(cfg.padding()):
            tasks.append(
                m.Task(
                    name=f"PaddingTask{i}", src_resources=list(wq_src), dst_resources=[],
                    warp_idx=first, num_warps=warps, schedule=make_padding(), num_registers=regs,
                )
            )

    # -- TaskManager ------------------------------------------------------------------
    return m.TaskManager(
        tasks=tasks,
        resource_dependency_graph=dependencies,
        smem_allocator=allocator,
        verbose=False,
        # A planted fault may be *built* on purpose (the isolation demo): TS then warns
        # instead of raising. Host verification is always strict.
        skip_validation=on_device and bool(cfg.fault("skip_validation", False)),
        # On the device path the schedule was already verified on the host with a
        # concrete domain; the trace-time BFS would only repeat it at compile cost.
        exhaustive_deadlock_race_check=not on_device,
    )


def make_kernel(cfg: CopyConfig) -> Any:
    """The ``@cute.jit`` host function for one configuration: (src, dst, stream)."""
    import cuda.bindings.driver as cuda_driver
    import cutlass
    import cutlass.cute as cute
    import cutlass.experimental.cuda as cuda
    import cutlass.utils as utils
    from cutlass.experimental import primitives as prims

    @cute.kernel
    def copy_kernel(
        tma_desc: cutlass.GridConstant[cuda.TensorMap], dst: cute.Tensor, tile_sched_params: Any
    ) -> None:
        if prims.elect_sync():
            prims.prefetch_tensormap(tma_desc.get_ptr())
        task_manager = build_task_manager(
            cfg, domain=cfg.chunk, tma_desc=tma_desc.get_ptr(), dst=dst,
            tile_sched_params=tile_sched_params, on_device=True,
        )
        task_manager.setup_resources_and_tasks()
        prims.fence_mbarrier_init()
        prims.barrier_cta_sync(0)
        task_manager.run()

    @cute.jit
    def copy_host(src: cute.Tensor, dst: cute.Tensor, stream: cuda_driver.CUstream) -> None:
        tma_desc = cuda.create_tensor_map_tiled_from_view(
            src, box_dims=(cfg.box_rows, cfg.box_cols), swizzle=cuda.TensorMapSwizzle.none
        )
        params = utils.PersistentTileSchedulerParams((cfg.work_tiles, 1, 1), (1, 1, 1))
        # The static persistent scheduler strides its tile stream over blockIdx.z.
        grid = (1, 1, cfg.grid) if cfg.persistent else (cfg.grid, 1, 1)
        copy_kernel(tma_desc, dst, params).launch(
            grid=grid, block=(32 * cfg.block_warps, 1, 1), stream=stream
        )

    return copy_host


# --------------------------------------------------------------------------------------
# The search space
# --------------------------------------------------------------------------------------

BODIES = {task: tuple(itertools.permutations(ops)) for task, ops in TASK_OPS.items()}
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
PLANTED_FAULTS = {
    "skip_validation": "build even if TS rejects the schedule (TS warns instead of raising)",
    "consumer_threads": "consumer cooperative-group size that does not match the store warps",
    "smem_read_offset": "store warps read SMEM this many elements past their stage (out of bounds)",
    "skip_vectors": "each store thread leaves its last N vectors unwritten",
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


def _body_name(body: Sequence[str]) -> str:
    return ",".join(body)


def placement_name(placement: tuple[Sequence[str], int, str]) -> str:
    """``coords,try_acquire,acquire,tma_load,commit|1|none``: a placement as a knob value."""
    body, depth, defer = placement
    return f"{_body_name(body)}|{depth}|{defer}"


def parse_placement_name(name: str) -> tuple[tuple[str, ...], int, str]:
    body, depth, defer = name.split("|")
    return tuple(body.split(",")), int(depth), defer


_SCREENED: dict[str, list[tuple[tuple[str, ...], int, str]]] = {}


def _screen_cache_path(what: str) -> Path:
    """Screening verdicts depend only on this template's source and the DSL version."""
    import hashlib
    from importlib.metadata import version

    digest = hashlib.sha256(Path(__file__).read_bytes() + version("nvidia-cutlass-dsl").encode())
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tsopt"
    return root / f"copy-screen-{what}-{digest.hexdigest()[:16]}.json"


def _screen_cache_read(what: str) -> Any:
    try:
        return json.loads(_screen_cache_path(what).read_text())
    except (OSError, ValueError):
        return None


def _screen_cache_write(what: str, value: Any) -> None:
    path = _screen_cache_path(what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a re-screen next time
_SCREENED_LAYOUTS: dict[str, list[dict[str, int]]] = {}
LAYOUT_GENES = ("store_warps", "store_warp", "load_warp", "load_regs", "store_regs")


def layout_name(genes: dict[str, int]) -> str:
    """``4@0,load4,40/168``: store warps @ first store warp, load warp, load/store registers."""
    return (f"{genes['store_warps']}@{genes['store_warp']},load{genes['load_warp']},"
            f"{genes['load_regs']}/{genes['store_regs']}")


def parse_layout_name(name: str) -> dict[str, int]:
    store, load, regs = name.split(",")
    store_warps, store_warp = store.split("@")
    load_regs, store_regs = regs.split("/")
    return {"store_warps": int(store_warps), "store_warp": int(store_warp),
            "load_warp": int(load.removeprefix("load")), "load_regs": int(load_regs),
            "store_regs": int(store_regs)}


def _ts_key_genes() -> tuple[str, ...]:
    """Numeric genes the TS checks see (the rest only matter to tsopt's checks and speed)."""
    return ("stages", "store_warps", "store_warp", "load_warp", "load_regs", "store_regs")


class CopySpace(SearchSpace):
    """The TS TMA copy (GMEM -> SMEM -> GMEM) for fp16/bf16 2-D tensors."""

    name = SPACE
    op = "copy"
    description = "TS TMA copy GMEM -> SMEM -> GMEM (the TS tutorial's kernel 02), fp16/bf16 2-D"
    archs = ("sm_90a", "sm_100a")

    # -- problems and knobs ----------------------------------------------------------
    def check_problem(self, problem: Problem) -> None:
        if problem.op != "copy":
            raise ProblemError(f"space 'copy' tunes copy problems, not {problem.op!r}")
        for name in ("rows", "cols"):
            value = problem[name]
            unit = 8 if name == "rows" else 64
            if value % unit:
                raise ProblemError(
                    f"{name}={value} is not a multiple of {unit} (the smallest TMA box this space uses)"
                )

    def raw_knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The enumerator's knobs: every placement part and gene value, before any check."""
        knobs = []
        for task in ("load", "store"):
            knobs.append(Knob(f"{task}.body", "structural",
                              tuple(_body_name(b) for b in BODIES[task]), KNOB_DOCS[f"{task}.body"]))
            knobs.append(Knob(f"{task}.depth", "structural", HEAD_DEPTHS, KNOB_DOCS[f"{task}.depth"]))
            knobs.append(Knob(f"{task}.defer", "structural", DEFERRABLE[task], KNOB_DOCS[f"{task}.defer"]))
        for name, choices in STRUCTURE_CHOICES.items():
            knobs.append(Knob(name, "structural", choices, KNOB_DOCS[name]))
        for name, nchoices in NUMERIC_CHOICES.items():
            if problem is not None and name in ("box_rows", "box_cols"):
                size = problem["rows" if name == "box_rows" else "cols"]
                nchoices = tuple(c for c in nchoices if size % c == 0)
            knobs.append(Knob(name, "numeric", nchoices, KNOB_DOCS[name]))
        return tuple(knobs)

    def knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The sampler's knobs. Placements are drawn from those the TS verifier accepted
        task by task (:meth:`screened_placements`), not from all 540 orders per task."""
        knobs = []
        for task in ("load", "store"):
            choices = tuple(placement_name(p) for p in self.screened_placements(task))
            knobs.append(Knob(f"{task}.placement", "structural", choices,
                              f"{task} task placement: body | head depth | deferred op "
                              f"({KNOB_DOCS[task + '.depth']}; {KNOB_DOCS[task + '.defer']})"))
        knobs.append(Knob("layout", "numeric", tuple(layout_name(g) for g in self.screened_layouts()),
                          "warps and register budgets: store_warps@store_warp, load_warp, "
                          "load_regs/store_regs (layouts TS accepts)"))
        for knob in self.raw_knobs(problem):
            if knob.name.split(".")[0] in ("load", "store") or knob.name in LAYOUT_GENES:
                continue
            if knob.name == "ctas_per_sm":
                knob = Knob(knob.name, knob.kind, tuple(c for c in knob.choices if c > 0),
                            "persistent CTAs per SM (only when persistent)")
            knobs.append(knob)
        return tuple(knobs)

    def screened_layouts(self) -> list[dict[str, int]]:
        """Warp/register layouts that pass TS and tsopt's checks with the canonical schedule."""
        if "layout" not in _SCREENED_LAYOUTS:
            cached = _screen_cache_read("layouts")
            if cached is not None:
                _SCREENED_LAYOUTS["layout"] = cached
                return cached
            from tsopt.verifier import run_ts_checks

            problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
            keep = []
            for values in itertools.product(*(NUMERIC_CHOICES[g] for g in LAYOUT_GENES)):
                genes = dict(zip(LAYOUT_GENES, values, strict=True))
                genome = self.genome(**genes)
                # Only the layout's own rules: box-dependent ones (registers per box,
                # vectors per thread) are judged per candidate by the verifier.
                if run_ts_checks(self, genome, problem, self.verify_domain(genome)).valid and not [
                    f for f in copy_checks(CopyConfig.from_genome(genome, problem))
                    if f.rule in ("tsopt.warp_overlap", "tsopt.launch_shape")
                ]:
                    keep.append(genes)
            _SCREENED_LAYOUTS["layout"] = keep
            _screen_cache_write("layouts", keep)
        return _SCREENED_LAYOUTS["layout"]

    def screened_placements(self, task: str) -> list[tuple[tuple[str, ...], int, str]]:
        """Dataflow-legal placements of ``task`` that pass TS and tsopt's checks next to the
        canonical partner for some advance_on_wait setting (the verifier decides; cached)."""
        if task not in _SCREENED:
            cached = _screen_cache_read(f"placements-{task}")
            if cached is not None:
                _SCREENED[task] = [(tuple(b), int(d), str(x)) for b, d, x in cached]
                return _SCREENED[task]
            from tsopt.verifier import VerdictCache, verify_genome

            problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
            cache = VerdictCache()
            keep = []
            for placement in self.legal_placements(task):
                for aow in STRUCTURE_CHOICES["advance_on_wait"]:
                    genome = self.genome(**{task: placement}, advance_on_wait=aow)
                    if verify_genome(genome, problem, space=self, cache=cache).valid:
                        keep.append(placement)
                        break
            _SCREENED[task] = keep
            _screen_cache_write(f"placements-{task}", keep)
        return _SCREENED[task]

    def genome(
        self,
        load: tuple[Sequence[str], int, str] = (LOAD_OPS, 0, "none"),
        store: tuple[Sequence[str], int, str] = (STORE_OPS, 0, "none"),
        **genes: Any,
    ) -> Genome:
        """A genome from knob values: ``load``/``store`` are (body, depth, defer)."""
        structure = {"advance_on_wait": False, "persistent": False, "raster": "row"}
        numeric = {
            "stages": 4, "box_rows": 32, "box_cols": 128, "store_warps": 4, "store_warp": 0,
            "load_warp": 4, "load_regs": 40, "store_regs": 168, "chunk": 8, "ctas_per_sm": 0,
            "vector": 8,
        }
        for name, value in genes.items():
            if name in structure:
                structure[name] = value
            elif name in numeric:
                numeric[name] = value
            else:
                raise KeyError(f"copy space has no gene {name!r}")
        return Genome.make(
            SPACE,
            {"load": placement_of(*load), "store": placement_of(*store)},
            structure,
            numeric,
        )

    def seed_genome(self, problem: Problem) -> Genome:
        """The TS tutorial's kernel 02 as written: one stage; each CTA owns a 128-column
        strip and walks down it one 1x128 row box per iteration (``raster=col``,
        ``chunk=rows``); 4 store warps, one element per thread; load warp 4 + 3 padding
        warps at 40 registers (the tutorial gives its store warps 160, this space 168)."""
        box_cols = 128 if problem["cols"] % 128 == 0 else 64
        return self.genome(
            stages=1, box_rows=1, box_cols=box_cols, store_warps=4, store_warp=0, load_warp=4,
            load_regs=40, store_regs=168, chunk=problem["rows"], vector=box_cols // 128 or 1,
            raster="col",
        )

    # -- search ----------------------------------------------------------------------
    def _placements(self, task: str) -> Iterator[tuple[tuple[str, ...], int, str]]:
        for body in BODIES[task]:
            for depth in HEAD_DEPTHS:
                for defer in DEFERRABLE[task] if depth else ("none",):
                    yield body, depth, defer

    def placement_count(self, task: str) -> int:
        return len(BODIES[task]) * (1 + (len(HEAD_DEPTHS) - 1) * len(DEFERRABLE[task]))

    def numeric_combinations(self, problem: Problem) -> Iterator[dict[str, Any]]:
        """Every consistent assignment of the structural flags and numeric genes.

        ``persistent`` and ``ctas_per_sm`` go together (0 CTAs per SM means one
        CTA per work tile), so only consistent pairs are produced.
        """
        knobs = [k for k in self.raw_knobs(problem) if k.kind == "numeric"]
        names = [k.name for k in knobs]
        flags = STRUCTURE_CHOICES["advance_on_wait"], STRUCTURE_CHOICES["raster"]
        for aow, raster in itertools.product(*flags):
            for values in itertools.product(*(k.choices for k in knobs)):
                genes = dict(zip(names, values, strict=True))
                genes.update(advance_on_wait=aow, raster=raster, persistent=genes["ctas_per_sm"] > 0)
                yield genes

    def numeric_count(self, problem: Problem) -> int:
        """Consistent flag x numeric assignments (``persistent`` follows ``ctas_per_sm``)."""
        knobs = {k.name: len(k.choices) for k in self.raw_knobs(problem) if k.kind == "numeric"}
        flags = len(STRUCTURE_CHOICES["advance_on_wait"]) * len(STRUCTURE_CHOICES["raster"])
        return flags * math.prod(knobs.values())

    def enumerate(self, problem: Problem) -> Enumeration:
        """Placements x structural flags x numeric genes.

        ``raw`` counts every placement pair (loop-body permutations x head
        depths x deferred op, per task) times every consistent assignment of
        the flags and numeric genes; the genomes yielded are those whose
        placements are dataflow-legal (each token produced before its use, in
        the same iteration). The pipeline protocol is the verifier's to judge.
        """
        self.check_problem(problem)
        raw = self.placement_count("load") * self.placement_count("store") * self.numeric_count(problem)
        legal = {task: self.legal_placements(task) for task in TASK_OPS}
        enumeration = Enumeration(raw=raw, genomes=iter(()))

        def genomes() -> Iterator[Genome]:
            for load in legal["load"]:
                for store in legal["store"]:
                    for genes in self.numeric_combinations(problem):
                        enumeration.dataflow_legal += 1
                        yield self.genome(load, store, **genes)

        enumeration.genomes = genomes()
        return enumeration

    def funnel(self, problem: Problem, **kwargs: Any) -> Any:
        """The funnel by factorised verification (see ``search_spaces/_copy_funnel.py``)."""
        from search_spaces._copy_funnel import copy_funnel

        return copy_funnel(self, problem, **kwargs)

    def legal_placements(self, task: str) -> list[tuple[tuple[str, ...], int, str]]:
        return [p for p in self._placements(task)
                if _placement_dataflow_error(task, placement_of(*p)) is None]

    def suggest(self, trial: Any, problem: Problem) -> Genome:
        genes: dict[str, Any] = {}
        for knob in self.knobs(problem):
            if knob.name == "ctas_per_sm":
                continue
            genes[knob.name] = trial.suggest_categorical(knob.name, list(knob.choices))
        # Conditional: CTAs per SM only means something for a persistent grid.
        ctas = [k for k in self.knobs(problem) if k.name == "ctas_per_sm"][0]
        genes["ctas_per_sm"] = (
            trial.suggest_categorical("ctas_per_sm", list(ctas.choices)) if genes["persistent"] else 0
        )
        load = parse_placement_name(str(genes.pop("load.placement")))
        store = parse_placement_name(str(genes.pop("store.placement")))
        genes.update(parse_layout_name(str(genes.pop("layout"))))
        return self.genome(load, store, **genes)

    def params_of(self, genome: Genome) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for task in ("load", "store"):
            placement = knobs_of_placement([(p.op, p.section) for p in genome.task(task).ops])
            if placement is None:
                raise ValueError(f"{task} placement of {genome.short_hash} is not a sampler placement")
            params[f"{task}.placement"] = placement_name(placement)
        params["layout"] = layout_name({g: int(genome[g]) for g in LAYOUT_GENES})
        for name, value in genome.genes.items():
            if name == "ctas_per_sm" and not genome["persistent"]:
                continue
            if not name.startswith("planted.") and name not in LAYOUT_GENES:
                params[name] = value
        return params

    # -- verification ----------------------------------------------------------------
    def dataflow_error(self, genome: Genome) -> str | None:
        if genome.space != SPACE:
            return f"genome is of space {genome.space!r}, not {SPACE!r}"
        tasks = {t.task for t in genome.schedule}
        if tasks != set(TASK_OPS):
            return f"copy genomes schedule tasks {sorted(TASK_OPS)}, got {sorted(tasks)}"
        missing = [g for g in (*NUMERIC_CHOICES, *STRUCTURE_CHOICES) if g not in genome.genes]
        if missing:
            return f"genome lacks gene(s) {missing}"
        known = {*NUMERIC_CHOICES, *STRUCTURE_CHOICES, *(f"planted.{p}" for p in PLANTED_FAULTS)}
        unknown = sorted(set(genome.genes) - known)
        if unknown:
            return f"unknown gene(s) {unknown} for space {SPACE!r}"
        for task in ("load", "store"):
            error = _placement_dataflow_error(
                task, tuple((p.op, p.section) for p in genome.task(task).ops)
            )
            if error:
                return f"{task}: {error}"
        return None

    def build_skeleton(self, genome: Genome, problem: Problem, domain: int) -> Any:
        cfg = CopyConfig.from_genome(genome, problem)
        return build_task_manager(cfg, domain=domain)

    def verify_domain(self, genome: Genome) -> int:
        stages = genome["stages"]
        depth = max(_head_depth(genome, t) for t in TASK_OPS)
        assert isinstance(stages, int)
        return max(4, stages + 2, depth + 2)

    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        return copy_checks(CopyConfig.from_genome(genome, problem))

    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        cfg = CopyConfig.from_genome(genome, problem)
        # tsopt's checks also read box shape, chunk and grid; they are cheap and run
        # every time, so only the TS-relevant genes key the cached TS verdict.
        ts = {name: genome[name] for name in _ts_key_genes()}
        return repr((cfg.load_ops, cfg.store_ops, cfg.advance_on_wait, cfg.persistent,
                     sorted(ts.items()), cfg.planted))

    # -- build -----------------------------------------------------------------------
    def kernel_spec(self, genome: Genome, problem: Problem, arch: str) -> KernelSpec:
        import cutlass
        from cutlass.cute.runtime import make_fake_compact_tensor
        from cutlass.runtime import make_fake_stream

        cfg = CopyConfig.from_genome(genome, problem, arch)
        dt = cutlass.Float16 if cfg.dtype == "fp16" else cutlass.BFloat16
        shape = (cfg.rows, cfg.cols)
        src = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
        dst = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
        return KernelSpec(
            host_fn=make_kernel(cfg),
            compile_args=(src, dst, make_fake_stream()),
            tensors=(
                TensorArg("src", "input", shape, cfg.dtype),
                TensorArg("dst", "output", shape, cfg.dtype),
            ),
            launch={"grid": [1, 1, cfg.grid] if cfg.persistent else [cfg.grid, 1, 1],
                    "block": [32 * cfg.block_warps, 1, 1],
                    "smem_bytes": cfg.smem_bytes},
        )


def _head_depth(genome: Genome, task: str) -> int:
    return sum(1 for p in genome.task(task).ops if p.section == "head" and p.op == PRIMARY_OP[task])


def _placement_dataflow_error(task: str, ops: Sequence[tuple[str, str]]) -> str | None:
    """Why a placement cannot compute a copy, before any pipeline rule is judged.

    The pipeline protocol (brackets, pairing, deadlock) is the TS verifier's
    job; this only checks the data: each op is known; the loop holds each op of
    the task exactly once; the head holds whole iterations of the work ops and
    the tail none; and every token (coords -> tma_load, read -> store) is
    produced earlier in the same section and iteration.
    """
    known = TASK_OPS[task]
    for op, _ in ops:
        if op not in known:
            return f"unknown op {op!r} (known: {', '.join(known)})"
    loop = [op for op, sec in ops if sec == "loop"]
    for op in WORK_OPS[task]:
        if loop.count(op) != 1:
            return f"the loop body must hold {op} exactly once per iteration, holds it {loop.count(op)}x"
    head = [op for op, sec in ops if sec == "head"]
    counts = {op: head.count(op) for op in WORK_OPS[task]}
    if len(set(counts.values())) != 1:
        return f"head holds partial iterations of the work ops: {counts}"
    if any(op in WORK_OPS[task] for op, sec in ops if sec == "tail"):
        return "work ops in the tail: the loop already covers every remaining iteration"
    producer, consumer = TOKENS[task]
    for section in ("head", "loop"):
        available = 0
        for op, sec in ops:
            if sec != section:
                continue
            if op == producer:
                available += 1
            elif op == consumer:
                if available == 0:
                    return f"{consumer} uses its input before {producer} produces it ({section})"
                available -= 1
    return None


def copy_checks(cfg: CopyConfig) -> list[Finding]:
    """What TS does not check for this template, each a stable rule name."""
    findings: list[Finding] = []
    store = range(cfg.store_warp, cfg.store_warp + cfg.store_warps)
    if cfg.load_warp in store:
        findings.append(Finding(
            "tsopt.warp_overlap",
            f"LoadTask warp {cfg.load_warp} lies inside StoreTask warps "
            f"{cfg.store_warp}..{cfg.store_warp + cfg.store_warps - 1}",
        ))
    if cfg.store_warps > 1 and cfg.store_warp % 4 + cfg.store_warps > 4 and cfg.store_warp % 4:
        findings.append(Finding(
            "tsopt.launch_shape",
            f"StoreTask warps {cfg.store_warp}.. straddle a warpgroup boundary",
        ))
    if 32 * cfg.block_warps > 1024:
        findings.append(Finding("tsopt.launch_shape", f"block of {32 * cfg.block_warps} threads > 1024"))
    # Stage identity: a deferred release/commit frees the *oldest* held stage only
    # when the pipeline keeps a separate lagging state for it.
    store_tail = [op for op, sec in cfg.store_ops if sec == "tail"]
    if "release" in store_tail and not cfg.advance_on_wait:
        findings.append(Finding(
            "tsopt.stage_identity",
            "delayed release without advance_on_wait: release would free the stage just waited on, "
            "not the oldest one still held",
        ))
    if "commit" in [op for op, sec in cfg.load_ops if sec == "tail"]:
        findings.append(Finding(
            "tsopt.stage_identity",
            "delayed commit needs advance_on_acquire, which TMA->async pipelines do not offer: "
            "commit would signal the wrong stage",
        ))
    if cfg.smem_bytes > SMEM_CAPACITY:
        findings.append(Finding(
            "tsopt.smem",
            f"{cfg.stages} stages x {cfg.box_rows}x{cfg.box_cols} boxes need {cfg.smem_bytes} B SMEM "
            f"> {SMEM_CAPACITY} B",
        ))
    elems = cfg.box_rows * cfg.box_cols
    if elems % (cfg.vec * cfg.store_threads):
        findings.append(Finding(
            "tsopt.launch_shape",
            f"a {cfg.box_rows}x{cfg.box_cols} box is not a whole number of 16-byte vectors for "
            f"{cfg.store_threads} store threads",
        ))
    # Fragment registers: 2 bytes per element, 4 per register, plus ~32 for addressing.
    need = cfg.vectors_per_thread * cfg.vec * cfg.elem_bytes // 4 + 32
    if need > cfg.store_regs:
        findings.append(Finding(
            "tsopt.registers",
            f"each store thread holds {cfg.vectors_per_thread * cfg.vec} elements (~{need} registers) "
            f"> budget {cfg.store_regs}: it would spill",
        ))
    if cfg.rows % cfg.box_rows or cfg.cols % cfg.box_cols:
        findings.append(Finding(
            "tsopt.tile_divisibility",
            f"{cfg.rows}x{cfg.cols} is not a whole number of {cfg.box_rows}x{cfg.box_cols} boxes",
        ))
    elif cfg.tiles % cfg.chunk:
        findings.append(Finding(
            "tsopt.tile_divisibility", f"{cfg.tiles} boxes do not split into chunks of {cfg.chunk}"
        ))
    if cfg.persistent != (cfg.ctas_per_sm > 0):
        findings.append(Finding(
            "tsopt.launch_shape",
            f"persistent={cfg.persistent} with ctas_per_sm={cfg.ctas_per_sm}: a persistent grid needs "
            "ctas_per_sm > 0, a non-persistent one 0",
        ))
    for head_task, ops in (("load", cfg.load_ops), ("store", cfg.store_ops)):
        if cfg.head_depth(head_task) >= cfg.chunk:
            findings.append(Finding(
                "tsopt.domain",
                f"{head_task} head holds {cfg.head_depth(head_task)} iterations but a work tile has "
                f"only {cfg.chunk}",
            ))
    return findings
