"""Render one gridstride candidate as a standalone ``kernel.py``.

The exported file is the kernel module verbatim, followed by the candidate:
its configuration as literals and its schedule body written out op by op (no
genome, no lookup at run time), and a ``main`` that checks the kernel against
torch on a GPU machine with the DSL, or compiles it for an arch and writes the
cubin (``--cubin``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tsopt.search_spaces.common import export_source as _export_source
from tsopt.search_spaces.gridstride import kernel as grid_stride_kernel
from tsopt.search_spaces.gridstride.kernel import PRIMARY_OP, GridStrideConfig

LOAD_HEAD = "frag, tile = src.load(it={it})"
LOAD_LOOP = "frag, tile = src.load()"
STORE = "dst.store(frag=frag, tile=tile)"


def render_body(ops: Sequence[tuple[str, str]]) -> str:
    """The copy task's schedule body as Python source: head, ``domain_loop``, tail."""
    lines = ["def copy_body(res, walk):", '    src, dst = res["src"], res["dst"]']
    head = [op for op, sec in ops if sec == "head"]
    if head:
        lines.append("    # head: this CTA's first iterations, before the domain loop")
    loads = 0
    for op in head:
        lines.append("    " + (LOAD_HEAD.format(it=loads) if op == "load" else STORE))
        loads += op == "load"
    skipped = head.count(PRIMARY_OP)
    lines.append(f"    with domain_loop(walk.start({skipped}), walk.end, walk.step, "
                 "unroll=walk.unroll):")
    lines += ["        " + (LOAD_LOOP if op == "load" else STORE) for op, sec in ops if sec == "loop"]
    tail = [op for op, sec in ops if sec == "tail"]
    if tail:
        lines.append("    # tail: after the domain loop (the fragment of the last iteration)")
        lines += ["    " + (LOAD_LOOP if op == "load" else STORE) for op in tail]
    return "\n".join(lines) + "\n"


def render_config(cfg: GridStrideConfig) -> str:
    return _export_source.render_config(
        cfg,
        (
            "copy_ops: the same schedule as data (the head's loads set where the loop starts);",
            "the schedule that runs is copy_body below, written out op by op.",
            f"grid: CTAs launched; tiles of {cfg.tile_elems} elements: {cfg.tiles}.",
        ),
        ops_fields=("copy_ops",),
    )


TEMPLATE_MAIN = '''

def compile_kernel(arch, keep_dir=None):
    """Compile this candidate for ``arch`` (no GPU needed); returns the compiled function.
    With ``keep_dir`` the DSL keeps the cubin there (see :func:`cubin_bytes`)."""
    options = f"--gpu-arch {arch}"
    if keep_dir:
        options += f" --keep-cubin --dump-dir {keep_dir}"
    return cute.compile(make_kernel(CONFIG, copy_body), *compile_args(CONFIG), options=options)


def check_on_gpu():
    """Run on fresh random inputs with the output poisoned; compare with torch. Needs a GPU."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    shape = (CONFIG.rows, CONFIG.cols)
    if CONFIG.dtype == "int16":
        src = torch.randint(-32768, 32768, shape, dtype=torch.int16, device="cuda")
        dst = torch.full_like(src, -1)
    else:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[CONFIG.dtype]
        src = torch.randn(shape, device="cuda").to(dtype)
        dst = torch.full_like(src, float("nan"))
    compiled = compile_kernel(ARCH)
    stream = cuda_driver.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled(from_dlpack(src, assumed_align=16), from_dlpack(dst, assumed_align=16), stream)
    torch.cuda.synchronize()
    same = torch.equal(dst.view(torch.int16), src.view(torch.int16))
    print("PASS: output equals input bit for bit" if same else
          f"FAIL: {(dst.view(torch.int16) != src.view(torch.int16)).sum().item()} elements differ")
    return 0 if same else 1


'''


def export_source(cfg: GridStrideConfig, header: str, arch: str) -> str:
    """The whole exported ``kernel.py`` of one configuration."""
    candidate = (render_config(cfg), render_body(cfg.copy_ops))
    return _export_source.assemble(grid_stride_kernel, header, arch, candidate, TEMPLATE_MAIN)
