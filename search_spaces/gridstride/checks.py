"""What TS does not see in the grid-stride copy, checked by tsopt.

TS judges this one-task schedule's grammar: every routed fragment is the latest
one produced (a second load before the store of the first is rejected as a
stale handle), each resource is used, the dependency graph holds. It does not
see how many times an item is stored, nor anything about memory:

- :func:`placement_dataflow_error` replays the task's one register variable
  through head, loop and tail: TS accepts a loop that stores the same fragment
  twice, or a head load whose fragment is overwritten before any store (it
  only warns that the fragment is never routed), and both break "every output
  element written exactly once". The shared check
  (:func:`tsopt.search_spaces.common.placement.dataflow_error`) forbids work in
  the tail, which a rotated loop needs for its last store, so this space
  replays its register instead.
- :func:`gridstride_checks`: the launch shape, the width of one access, and
  whether the tensor is a whole number of vectors (the partial last tile is
  predicated per vector, so a vector must never straddle the end).
"""

from __future__ import annotations

from collections.abc import Sequence

from tsopt.core.space import Finding
from tsopt.search_spaces.gridstride.config import COPY_OPS
from tsopt.search_spaces.gridstride.kernel import ELEMENT_BYTES, GridStrideConfig

MAX_THREADS = 1024
MAX_ACCESS_BYTES = 16
"""The widest load/store one thread can issue (ld.global.v4.b32)."""


def _replay(ops: Sequence[str], held: bool, where: str) -> tuple[bool, str | None]:
    """Run ``ops`` on the register: whether it holds an unstored fragment after them, or why
    the ops lose or repeat a write."""
    for op in ops:
        if op == "load":
            if held:
                return held, f"a load in the {where} overwrites a fragment that was never stored"
            held = True
        elif not held:
            return held, f"a store in the {where} writes a fragment that was already stored " \
                         "(or never loaded)"
        else:
            held = False
    return held, None


def placement_dataflow_error(ops: Sequence[tuple[str, str]]) -> str | None:
    """Why a copy placement does not store every loaded fragment exactly once.

    The loop must load and store once per iteration and leave the register as it
    found it, so any number of iterations (none included) composes; the head
    opens whole iterations and at most one more load (a rotated loop), and the
    tail stores what is left.
    """
    for op, _ in ops:
        if not COPY_OPS.known(op):
            return f"unknown op {op!r} (known: {', '.join(COPY_OPS.ops)})"
    section = {sec: [op for op, s in ops if s == sec] for sec in ("head", "loop", "tail")}
    if sorted(section["loop"]) != sorted(COPY_OPS.ops):
        return f"the loop body must hold load and store once each, holds {section['loop']}"
    held, error = _replay(section["head"], False, "head")
    if error:
        return error
    after_loop, error = _replay(section["loop"], held, "loop")
    if error:
        return error
    if after_loop != held:
        return "the loop does not leave the register as it found it"
    held, error = _replay(section["tail"], held, "tail")
    if error:
        return error
    if held:
        return "the last fragment loaded is never stored"
    return None


def gridstride_checks(cfg: GridStrideConfig) -> list[Finding]:
    """What TS does not check for this template, each with a stable rule name."""
    findings: list[Finding] = []
    if cfg.threads > MAX_THREADS:
        findings.append(Finding(
            "tsopt.launch_shape",
            f"{cfg.warps} warps make a block of {cfg.threads} threads > {MAX_THREADS}"))
    access = cfg.access_bytes
    if access > MAX_ACCESS_BYTES or access & (access - 1):
        findings.append(Finding(
            "tsopt.vector_width",
            f"vector={cfg.vector} makes {access}-byte accesses: one instruction moves a power of "
            f"two of {ELEMENT_BYTES}..{MAX_ACCESS_BYTES} bytes"))
    elif cfg.elements % cfg.vector:
        findings.append(Finding(
            "tsopt.vector_divisibility",
            f"{cfg.rows}x{cfg.cols} = {cfg.elements} elements is not a multiple of vector="
            f"{cfg.vector}: the last vector would straddle the end of the tensor"))
    return findings
