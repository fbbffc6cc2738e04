"""Render one copy candidate as a standalone ``kernel.py``.

The exported file is the kernel module (``kernel.py``) verbatim,
followed by the candidate: its configuration as literals and its two
schedule bodies written out op by op (no genome, no lookup at run time),
and a ``main`` that checks the kernel against torch on a GPU machine with
the DSL, or compiles it for an arch and writes the cubin (``--cubin``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tsopt.search_spaces.common import export_source as _export_source
from tsopt.search_spaces.copy import kernel as copy_tma_kernel
from tsopt.search_spaces.copy.config import config_of
from tsopt.search_spaces.copy.kernel import PRIMARY_OP, CopyConfig

_CALLS = {
    "coords": ("row, col = coords.coords({it})", "coords"),
    "tma_load": ("smem.tma_load(row=row, col=col)", "smem"),
    "read": ("frag = smem.read({it})", "smem"),
    "store": ("out.store(frag=frag{comma_it})", "out"),
}


def _op_line(op: str, head_iteration: int | None) -> str:
    it = "" if head_iteration is None else f"it={head_iteration}"
    if op in _CALLS:
        template, _ = _CALLS[op]
        comma_it = "" if head_iteration is None else f", it={head_iteration}"
        return template.format(it=it, comma_it=comma_it)
    return f"smem.{op}()"


def render_body(task: str, ops: Sequence[tuple[str, str]]) -> str:
    """One task's schedule body as Python source: head, ``domain_loop``, tail."""
    return _export_source.render_body(
        task,
        ops,
        resources=("coords", "smem") if task == "load" else ("smem", "out"),
        primary_op=PRIMARY_OP[task],
        op_line=_op_line,
    )


def render_config(cfg: CopyConfig) -> str:
    return _export_source.render_config(
        cfg,
        (
            "load_ops/store_ops: the same schedule as data, for the derived facts (loop starts);",
            "the schedule that runs is load_body/store_body below, written out op by op.",
        ),
    )


TEMPLATE_MAIN = '''

BODIES = {"load": load_body, "store": store_body}


def compile_kernel(arch, keep_dir=None):
    """Compile this candidate for ``arch`` (no GPU needed); returns the compiled function.
    With ``keep_dir`` the DSL keeps the cubin there (see :func:`cubin_bytes`)."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    dt = dsl_dtype(CONFIG)
    shape = (CONFIG.rows, CONFIG.cols)
    src = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
    dst = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
    options = f"--gpu-arch {arch}"
    if keep_dir:
        options += f" --keep-cubin --dump-dir {keep_dir}"
    return cute.compile(make_kernel(CONFIG, BODIES), src, dst, make_fake_stream(), options=options)


def check_on_gpu():
    """Run on fresh random inputs with the output poisoned; compare with torch. Needs a GPU."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[CONFIG.dtype]
    src = torch.randn(CONFIG.rows, CONFIG.cols, device="cuda").to(dtype)
    dst = torch.full_like(src, float("nan"))
    compiled = compile_kernel(ARCH)
    stream = cuda_driver.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled(from_dlpack(src, assumed_align=16), from_dlpack(dst, assumed_align=16), stream)
    torch.cuda.synchronize()
    same = torch.equal(dst, src)
    print("PASS: output equals input bit for bit" if same else
          f"FAIL: {(dst != src).sum().item()} elements differ")
    return 0 if same else 1


'''


def render_kernel_source(cfg: CopyConfig, header: str, arch: str) -> str:
    """The whole exported ``kernel.py``."""
    candidate = (render_config(cfg), render_body("load", cfg.load_ops),
                 render_body("store", cfg.store_ops))
    return _export_source.assemble(copy_tma_kernel, header, arch, candidate, TEMPLATE_MAIN)


def export_source(genome: Any, problem: Any, arch: str, header: str,
                  sm_count: int | None = None) -> str:
    return render_kernel_source(config_of(genome, problem, arch, sm_count), header, arch)
