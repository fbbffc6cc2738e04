"""The TS grid-stride copy: GMEM -> registers -> GMEM, one task, no SMEM, no pipeline.

This module is the kernel of the ``gridstride`` search space and stands alone:
it imports only the CUTLASS DSL, so ``tsopt export`` ships it verbatim inside
an exported ``kernel.py``. It is the TS copy tutorial's first kernel opened
up, and reads like it: configuration, resources, dependency graph, schedule,
task, TaskManager, launch.

Resource/task flow::

                  +------------------+
                  |    GmemSource    |   the input, read a tile at a time
                  +--------+---------+
                           |  load: `unroll` vector loads per thread
      CopyTask (W warps):  |  (frag, tile) flow by name to the store
                           v
                  +--------+---------+
                  |     GmemSink     |   the output, written from registers
                  +------------------+

The tensor is copied as one flat run of ``rows * cols`` contiguous elements.
A *tile* is what one CTA copies in one domain-loop iteration: every thread
moves ``unroll`` vectors of ``vector`` elements, vector ``v`` of thread ``t``
at offset ``(v * threads + t) * vector`` in the tile, so each warp-wide access
covers 32 adjacent vectors. The domain loop is the tutorial's grid stride,
over tiles instead of elements: CTA ``b`` visits tiles ``b, b + grid, ...``.

The schedule is given as placed ops ``(op, section)``. A load returns the
fragment *and the tile it came from*, and a store writes the fragment back to
that tile, so a store is correct wherever the schedule puts it: in the loop
after its load (the tutorial), in the head for the first iterations, or one
iteration later, carried across the loop boundary (a rotated schedule:
``load`` in the head, ``store, load`` in the loop, ``store`` in the tail).
Head loads name their iteration (``it``) and may lie past a CTA's last tile
(the load then reads a tile in bounds and its store writes nothing); the
last tile may be partial (its vectors past the end are not stored).
"""

# No `from __future__ import annotations`: the DSL reads kernel annotations at trace time and
# must get objects, not strings.
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import cuda.bindings.driver as cuda_driver
import cutlass
import cutlass.cute as cute
from cutlass.experimental.task_scheduling.resources import (
    MemoryResource,
    TaskLocalVariable,
    consumer_work,
    producer_work,
)
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop, schedule
from cutlass.experimental.task_scheduling.task import Task
from cutlass.experimental.task_scheduling.task_manager import TaskManager

Section = Literal["head", "loop", "tail"]
Placement = tuple[tuple[str, Section], ...]
PRIMARY_OP = "load"
"""The op that opens an iteration: head loads count the iterations the loop skips."""
ELEMENT_BYTES = 2
DSL_DTYPES = {"int16": cutlass.Int16, "fp16": cutlass.Float16, "bf16": cutlass.BFloat16}

# --------------------------------------------------------------------------------------
# The configuration (every knob of the template, plus derived facts)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridStrideConfig:
    """Everything the template needs: the genome's genes, resolved, and the problem's sizes."""

    dtype: str
    rows: int
    cols: int
    copy_ops: Placement
    warps: int
    vector: int
    unroll: int
    loop_unroll: int
    grid: int

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def access_bytes(self) -> int:
        """Bytes of one load or store instruction of one thread."""
        return self.vector * ELEMENT_BYTES

    @property
    def frag_elems(self) -> int:
        """Elements one thread holds in registers between its load and its store."""
        return self.unroll * self.vector

    @property
    def tile_elems(self) -> int:
        return self.threads * self.frag_elems

    @property
    def tiles(self) -> int:
        return -(-self.elements // self.tile_elems)

    @property
    def full_tiles(self) -> int:
        """Tiles that lie wholly inside the tensor (all but a partial last one)."""
        return self.elements // self.tile_elems

    @property
    def head_loads(self) -> int:
        """Iterations the head opens, so the domain loop starts that many strides later."""
        return sum(1 for op, sec in self.copy_ops if sec == "head" and op == PRIMARY_OP)


def vector_offset(cfg: GridStrideConfig, tile: Any, v: int, tid: Any) -> Any:
    """First element of vector ``v`` of thread ``tid`` in ``tile`` (Python or DSL integers)."""
    return tile * cfg.tile_elems + (v * cfg.threads + tid) * cfg.vector


def first_tile_and_stride(cfg: GridStrideConfig) -> tuple[Any, int]:
    """This CTA's first tile and the grid stride (on the device)."""
    bx, _, _ = cute.arch.block_idx()
    return bx, cfg.grid


# --------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------


@dataclass
class GmemSource(MemoryResource):
    """The input tensor: ``load`` brings one thread's share of a tile into registers."""

    cfg: cutlass.Constexpr = field(init=False, default=None)
    src: Any = field(init=False, default=None)
    frag: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()
    tile: cutlass.Constexpr[TaskLocalVariable] = TaskLocalVariable.uninitialized()

    def __init__(self, cfg: GridStrideConfig, src: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.src = src
        dt = DSL_DTYPES[cfg.dtype]
        # A factory, not a value: building the default creates IR, which the host
        # verifier (no tracer) must never do.
        self.frag = TaskLocalVariable(
            dtype=dt, default_factory=lambda: cutlass.full([cfg.frag_elems], 0, dt),
            docs="One thread's vectors of the tile being copied.",
        )
        # Until a load says otherwise the fragment belongs to no tile: a store skips it.
        self.tile = TaskLocalVariable(
            dtype=cutlass.Int32, default=cutlass.Int32(cfg.tiles),
            docs="The tile `frag` was loaded from (>= tiles: none).",
        )

    @consumer_work(returns=(frag, tile))
    @cute.jit
    def load(self, stage_info: Any, *, it: cutlass.Constexpr[int] = -1) -> Any:
        cfg = self.cfg
        dt = DSL_DTYPES[cfg.dtype]
        tile = stage_info.loop_offset
        read_tile = tile
        if cutlass.const_expr(it >= 0):
            # A head load opens this CTA's iteration `it`, which may lie past its last tile:
            # it then reads the last tile (in bounds) and its store writes nothing.
            first, stride = first_tile_and_stride(cfg)
            tile = first + it * stride
            read_tile = cutlass.min(tile, cfg.tiles - 1)
        tx, _, _ = cute.arch.thread_idx()
        ptr = self.src.iterator.raw_ptr()
        elems: tuple[Any, ...] = ()
        for v in cutlass.range_constexpr(cfg.unroll):
            e = vector_offset(cfg, cutlass.Int64(read_tile), v, tx)
            if cutlass.const_expr(cfg.full_tiles != cfg.tiles):
                # The partial last tile: its vectors past the end re-read the last vector
                # (always in bounds, never stored), so loads need no branch.
                e = cutlass.min(e, cutlass.Int64(cfg.elements - cfg.vector))
            vec = (ptr + e).load(alignment=cfg.access_bytes, count=cfg.vector)
            elems = elems + cutlass.Vector(vec, dtype=dt).to_elements()
        return cutlass.Vector.from_elements(elems, dt), tile


@dataclass
class GmemSink(MemoryResource):
    """The output tensor: ``store`` writes a fragment back to the tile it was loaded from."""

    cfg: cutlass.Constexpr = field(init=False, default=None)
    dst: Any = field(init=False, default=None)

    def __init__(self, cfg: GridStrideConfig, dst: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.dst = dst

    @cute.jit
    def _store_vectors(self, frag: Any, tile: Any, ragged: cutlass.Constexpr[bool]) -> None:
        cfg = self.cfg
        tx, _, _ = cute.arch.thread_idx()
        ptr = self.dst.iterator.raw_ptr()
        for v in cutlass.range_constexpr(cfg.unroll):
            e = vector_offset(cfg, cutlass.Int64(tile), v, tx)
            part = frag[v * cfg.vector : (v + 1) * cfg.vector]
            if cutlass.const_expr(ragged):
                if e < cfg.elements:  # vectors never straddle the end (elements % vector == 0)
                    (ptr + e).store(part, alignment=cfg.access_bytes)
            else:
                (ptr + e).store(part, alignment=cfg.access_bytes)

    @producer_work
    @cute.jit
    def store(self, stage_info: Any, *, frag: Any, tile: cutlass.Int32) -> None:
        cfg = self.cfg
        if cutlass.const_expr(cfg.full_tiles == cfg.tiles):
            if tile < cfg.tiles:
                self._store_vectors(frag, tile, False)
        else:
            if tile < cfg.full_tiles:
                self._store_vectors(frag, tile, False)
            elif tile < cfg.tiles:
                self._store_vectors(frag, tile, True)


# --------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TileWalk:
    """The domain loop of one CTA: tiles ``first, first + step, ...`` below ``end``.

    On the device ``first`` is the CTA index and ``step`` the grid; the host
    verifier walks ``0, 1, ..., end - 1`` (TS needs a concrete domain).
    """

    first: Any
    end: Any
    step: Any
    unroll: int

    def start(self, skip: int) -> Any:
        """Where the loop starts once the head has opened ``skip`` iterations."""
        return self.first + skip * self.step


ScheduleBody = Callable[[dict[str, Any], TileWalk], None]
"""The task's schedule body: called inside ``@schedule`` with the resource proxies by name
(``src``, ``dst``) and the CTA's tile walk."""


def emit_ops(ops: Sequence[tuple[str, Section]], section: Section, res: dict[str, Any],
             tokens: dict[str, Any]) -> None:
    """Record one section's ops; head loads carry their iteration (``it``). ``tokens`` holds
    the latest (frag, tile) across sections, as the schedule's variables do."""
    head_loads = 0
    for op, sec in ops:
        if sec != section:
            continue
        if op == "load" and section == "head":
            tokens["frag"], tokens["tile"] = res["src"].load(it=head_loads)
            head_loads += 1
        elif op == "load":
            tokens["frag"], tokens["tile"] = res["src"].load()
        elif op == "store" and "frag" in tokens:
            res["dst"].store(frag=tokens["frag"], tile=tokens["tile"])
        elif op == "store":
            raise ValueError(f"a store in the {section} before any load: no fragment to store")
        else:
            raise ValueError(f"unknown op {op!r} of the copy task")


def placed_body(cfg: GridStrideConfig) -> ScheduleBody:
    """The schedule body from the placed ops: head, domain loop, tail."""

    def body(res: dict[str, Any], walk: TileWalk) -> None:
        tokens: dict[str, Any] = {}
        emit_ops(cfg.copy_ops, "head", res, tokens)
        with domain_loop(walk.start(cfg.head_loads), walk.end, walk.step, unroll=walk.unroll):
            emit_ops(cfg.copy_ops, "loop", res, tokens)
        emit_ops(cfg.copy_ops, "tail", res, tokens)

    return body


# --------------------------------------------------------------------------------------
# Dependency graph, task, TaskManager
# --------------------------------------------------------------------------------------


def build_task_manager(
    cfg: GridStrideConfig,
    walk: TileWalk,
    *,
    src: Any = None,
    dst: Any = None,
    on_device: bool = False,
    body: ScheduleBody | None = None,
) -> Any:
    """Resources, dependency graph, schedule, task and the TaskManager of one configuration.

    ``body`` is the copy task's schedule body (default: rendered from the placed
    ops of ``cfg`` by :func:`placed_body`). Constructing the TaskManager runs the
    TS checks and raises ``ValueError`` on an invalid schedule.
    """
    # -- resources ------------------------------------------------------------------
    source = GmemSource(cfg, src, name="GmemSource")
    sink = GmemSink(cfg, dst, name="GmemSink")

    # -- dependency graph -------------------------------------------------------------
    # The output is produced from what was consumed from the input.
    dependencies = {sink: [source]}

    # -- schedule ---------------------------------------------------------------------
    run_body = body or placed_body(cfg)

    @schedule
    def copy_schedule(s: Any, d: Any) -> None:
        run_body({"src": s, "dst": d}, walk)

    # -- task -------------------------------------------------------------------------
    task = Task(
        name="CopyTask",
        src_resources=[source],
        dst_resources=[sink],
        warp_idx=0,
        num_warps=cfg.warps,
        schedule=copy_schedule(source, sink),
    )

    # -- TaskManager ------------------------------------------------------------------
    return TaskManager(
        tasks=[task],
        resource_dependency_graph=dependencies,
        verbose=False,
        # On the device the schedule was already verified on the host with a concrete
        # domain; the trace-time checker would only repeat it.
        exhaustive_deadlock_race_check=not on_device,
    )


# --------------------------------------------------------------------------------------
# Kernel and host launch
# --------------------------------------------------------------------------------------


def make_kernel(cfg: GridStrideConfig, body: ScheduleBody | None = None) -> Any:
    """The ``@cute.jit`` host function for one configuration: (src, dst, stream)."""

    @cute.kernel
    def grid_stride_copy_kernel(src: cute.Tensor, dst: cute.Tensor) -> None:
        first, stride = first_tile_and_stride(cfg)
        walk = TileWalk(first=first, end=cfg.tiles, step=stride, unroll=cfg.loop_unroll)
        task_manager = build_task_manager(cfg, walk, src=src, dst=dst, on_device=True, body=body)
        task_manager.setup_resources_and_tasks()
        task_manager.run()

    @cute.jit
    def grid_stride_copy(src: cute.Tensor, dst: cute.Tensor, stream: cuda_driver.CUstream) -> None:
        grid_stride_copy_kernel(src, dst).launch(
            grid=(cfg.grid, 1, 1), block=(cfg.threads, 1, 1), stream=stream
        )

    return grid_stride_copy


def compile_args(cfg: GridStrideConfig) -> tuple[Any, ...]:
    """Fake arguments for ``cute.compile``: row-major compact tensors, 16-byte aligned, and a
    stream (no GPU needed)."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    dt = DSL_DTYPES[cfg.dtype]
    shape = (cfg.rows, cfg.cols)
    src = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
    dst = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
    return src, dst, make_fake_stream()
