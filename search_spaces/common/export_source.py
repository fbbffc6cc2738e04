"""What every exported ``kernel.py`` shares, whatever the template.

A rendered file is: the export's header as its docstring; ``CUTE_DSL_ARCH`` set before any DSL
import; the kernel module verbatim (its docstring turned into a comment block); the candidate
(configuration as literals, schedule bodies written out op by op); the template's own
``compile_kernel`` and ``check_on_gpu``; and the common ``main`` below (``--cubin`` compiles for an
arch with no GPU and writes the cubin; no flag runs the GPU check).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

RULE = "# " + "=" * 86

MAIN = '''

def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cubin", help="compile for --arch and write the cubin here (no GPU needed)")
    parser.add_argument("--arch", default=ARCH)
    args = parser.parse_args(argv)
    if args.cubin:
        import tempfile

        with tempfile.TemporaryDirectory() as keep:
            compiled = compile_kernel(args.arch, keep)
            with open(args.cubin, "wb") as f:
                f.write(cubin_bytes(compiled))
        print(f"wrote {args.cubin}")
        return 0
    return check_on_gpu()


def cubin_bytes(compiled):
    """The cubin of a compiled function, as the DSL kept it (--keep-cubin)."""
    cubin = compiled.__cubin__
    if isinstance(cubin, str):
        with open(cubin, "rb") as f:
            return f.read()
    return bytes(cubin)


if __name__ == "__main__":
    raise SystemExit(main())
'''


def render_body(
    task: str,
    ops: Sequence[tuple[str, str]],
    *,
    resources: tuple[str, str],
    primary_op: str,
    op_line: Callable[[str, int | None], str],
    domain: str = "domain",
    head_note: str = "the first iterations",
    loop_note: str = "",
) -> str:
    """One task's schedule body as Python source: head, ``domain_loop``, tail.

    ``op_line(op, index)`` renders one op; in the head ``index`` counts that op's copies (its
    iteration), elsewhere it is None. The loop starts after the head's copies of ``primary_op``.
    """
    first, second = resources
    lines = [f"def {task}_body(res, {domain}):", f'    {first}, {second} = res["{first}"], res["{second}"]']
    head = [op for op, sec in ops if sec == "head"]
    if head:
        lines.append(f"    # head: {head_note}, before the domain loop")
    seen: dict[str, int] = {}
    for op in head:
        seen[op] = seen.get(op, 0) + 1
        lines.append(f"    {op_line(op, seen[op] - 1)}")
    comment = f"  # {loop_note}" if loop_note else ""
    lines.append(f"    with domain_loop({head.count(primary_op)}, {domain}, 1):{comment}")
    lines += [f"        {op_line(op, None)}" for op, sec in ops if sec == "loop"]
    tail = [op for op, sec in ops if sec == "tail"]
    if tail:
        lines.append("    # tail: after the domain loop")
        lines += [f"    {op_line(op, None)}" for op in tail]
    return "\n".join(lines) + "\n"


def render_config(cfg: Any, comment: tuple[str, ...], ops_fields: tuple[str, ...] = ()) -> str:
    """``CONFIG = <Class>(...)`` with every field as a literal; ``ops_fields`` one line per section."""
    lines = [f"    # {line}" for line in comment]
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in ops_fields:
            lines.append(f"    {f.name}=(")
            for section in ("head", "loop", "tail"):
                placed = [(op, sec) for op, sec in value if sec == section]
                if placed:
                    lines.append("        " + " ".join(f"{p!r}," for p in placed))
            lines.append("    ),")
        else:
            lines.append(f"    {f.name}={value!r},")
    return f"CONFIG = {type(cfg).__name__}(\n" + "\n".join(lines) + "\n)\n"


def assemble(module: ModuleType, header: str, arch: str, candidate: Sequence[str],
             template_main: str) -> str:
    """The whole file from the kernel module, the rendered candidate (its configuration and
    each task's schedule body) and the template's main parts."""
    source = inspect.getsource(module)
    preamble = (
        f'"""{header.strip()}\n"""\n\n'
        "import os\n\n"
        "# The DSL reads its target when first imported; with no GPU there is nothing to detect.\n"
        f'os.environ.setdefault("CUTE_DSL_ARCH", "{arch}")\n'
        f'ARCH = "{arch}"\n\n'
    )
    # One docstring per file: the kernel module's becomes a comment block.
    if source.startswith('"""'):
        _, doc, body = source.split('"""', 2)
        kernel_doc = "# " + "\n# ".join(doc.strip().splitlines()) + "\n"
        kernel_doc = kernel_doc.replace("# \n", "#\n")
    else:
        kernel_doc, body = "", source
    exported = (
        f"\n\n{RULE}\n# The exported candidate: configuration and schedule, written out.\n{RULE}\n\n"
        + "\n\n".join(candidate)
    )
    return preamble + kernel_doc + body + exported + template_main.rstrip() + "\n" + MAIN
