"""Render one GEMM candidate as a standalone ``kernel.py``.

The exported file is the kernel module (``kernel.py``) verbatim,
followed by the candidate: its configuration as literals and its two
schedule bodies (the load task's and each consumer warpgroup's) written out
op by op (no genome, no lookup at run time), and a ``main`` that checks the
kernel against torch on a GPU machine with the DSL, or compiles it for an
arch and writes the cubin (``--cubin``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tsopt.search_spaces.common import export_source as _export_source
from tsopt.search_spaces.gemm import kernel as hopper_gemm_kernel
from tsopt.search_spaces.gemm.config import config_of
from tsopt.search_spaces.gemm.kernel import (
    DEFAULT_SM_COUNT,
    PIPELINE_OPS,
    PRIMARY_OP,
    GemmConfig,
)

_RESOURCES = {"load": ("coords", "smem"), "mma": ("smem", "acc")}


def _op_line(op: str, head_iteration: int | None, stream_k: bool = False) -> str:
    """One op as a call on the resource proxies; head copies of ``coords`` name their K slice.
    With stream-K the coordinates are the unit's, from its origin tokens (``res["origin"]``)."""
    if op == "coords":
        it = "" if head_iteration is None else f"it={head_iteration}"
        if stream_k:
            args = ", ".join(["base_m=base_m", "base_n=base_n", "base_k=base_k",
                              *([it] if it else [])])
            return f"tile_m, tile_n, k_tile = coords.unit_coords({args})"
        return f"tile_m, tile_n, k_tile = coords.compute_coords({it})"
    if op == "tma_load":
        return "smem.tma_load(tile_m=tile_m, tile_n=tile_n, k_tile=k_tile)"
    if op == "read_stage":
        return "stage = smem.read_stage()"
    if op == "wgmma":
        return "acc.wgmma(stage=stage)"
    if op.startswith("wgmma_wait"):
        pending = int(op.removeprefix("wgmma_wait"))
        return f"smem.wgmma_wait(pending={pending})  # warpgroup.wait_group({pending})"
    if op in PIPELINE_OPS:
        return f"smem.{op}()"
    raise KeyError(f"unknown op {op!r}")


def render_body(task: str, ops: Sequence[tuple[str, str]], stream_k: bool = False) -> str:
    """One task's schedule body as Python source: head, ``domain_loop``, tail."""
    source = _export_source.render_body(
        task,
        ops,
        resources=_RESOURCES[task],
        primary_op=PRIMARY_OP[task],
        op_line=lambda op, index: _op_line(op, index if op == "coords" else None, stream_k),
        domain="k_tiles",
        loop_note="the remaining K slices",
        head_note="K slices loaded ahead" if task == "load" else "wgmma batches issued ahead",
    )
    if stream_k and task == "load":
        # The unit's origin, worked out once per unit by the schedule (TileCoords.unit_origin).
        first, rest = source.split("\n", 2)[:2], source.split("\n", 2)[2]
        source = "\n".join([*first, '    base_m, base_n, base_k = res["origin"]', rest])
    return source


def render_config(cfg: GemmConfig) -> str:
    return _export_source.render_config(
        cfg,
        (
            "load_ops/mma_ops: the same schedule as data (what tsopt's checks replayed); the",
            "schedule that runs is load_body/mma_body below, written out op by op.",
        ),
        ops_fields=("load_ops", "mma_ops"),
    )


TEMPLATE_MAIN = '''

BODIES = {"load": load_body, "mma": mma_body}


def compile_kernel(arch, keep_dir=None):
    """Compile this candidate for ``arch`` (no GPU needed); returns the compiled function.
    With ``keep_dir`` the DSL keeps the cubin there (see :func:`cubin_bytes`)."""
    options = f"--gpu-arch {arch}"
    if keep_dir:
        options += f" --keep-cubin --dump-dir {keep_dir}"
    return cute.compile(make_kernel(CONFIG, BODIES), *compile_args(CONFIG), options=options)


def check_on_gpu():
    """D = A @ B^T on fresh random inputs, D poisoned with NaN first; compared with
    A.float() @ B.float().T (relative error, Frobenius norm). A runtime-M kernel
    (CONFIG.m_range) is checked at the smallest, a middle and the largest M of its range,
    with no recompile. Needs a GPU."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[CONFIG.dtype]
    tolerance = {"bf16": 1e-2, "fp16": 5e-3}[CONFIG.dtype]
    m_top, n = CONFIG.problem_m, CONFIG.problem_n  # CONFIG.m/n are the kernel's (swap_ab)
    ranged = CONFIG.m_range is not None
    lo, hi = CONFIG.m_range if ranged else (m_top, m_top)
    compiled = compile_kernel(ARCH)
    stream = cuda_driver.CUstream(torch.cuda.current_stream().cuda_stream)
    workspace = None
    if CONFIG.workspace_bytes:  # stream-K's fix-up: zeroed once, left zeroed by the kernel
        workspace = torch.zeros(CONFIG.workspace_bytes // 4, dtype=torch.float32, device="cuda")
    failed = 0
    for m in sorted({lo, (lo + hi) // 2, hi}):
        a = torch.randn(m, CONFIG.k, device="cuda").to(dtype)
        b = torch.randn(n, CONFIG.k, device="cuda").to(dtype)
        d = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        tensors = [from_dlpack(t, assumed_align=16) for t in (a, b, d)]
        if ranged:  # M is a launch argument: A's and D's rows are dynamic
            for i, t in ((0, a), (2, d)):
                tensors[i] = tensors[i].mark_compact_shape_dynamic(
                    mode=0, stride_order=t.dim_order())
        if workspace is not None:
            tensors.append(from_dlpack(workspace, assumed_align=16))
        compiled(*tensors, stream)
        torch.cuda.synchronize()
        reference = a.float() @ b.float().T
        unwritten = int(torch.isnan(d).sum().item())
        rel_err = float((d.float() - reference).norm() / reference.norm())
        ok = unwritten == 0 and rel_err < tolerance
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}: D = A @ B^T ({m}x{n}x{CONFIG.k} "
              f"{CONFIG.dtype}), relative error {rel_err:.2e} (limit {tolerance:.0e}), "
              f"{unwritten} elements unwritten")
    return 1 if failed else 0

'''


def render_kernel_source(cfg: GemmConfig, header: str, arch: str) -> str:
    """The whole exported ``kernel.py``."""
    candidate = (render_config(cfg), render_body("load", cfg.load_ops, cfg.stream_k),
                 render_body("mma", cfg.mma_ops))
    return _export_source.assemble(hopper_gemm_kernel, header, arch, candidate, TEMPLATE_MAIN)


def export_source(genome: Any, problem: Any, arch: str, header: str,
                  sm_count: int = DEFAULT_SM_COUNT) -> str:
    return render_kernel_source(config_of(genome, problem.sizes, problem.dtype, sm_count),
                                header, arch)
