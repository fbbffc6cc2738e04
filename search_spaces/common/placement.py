"""Op placements of a TS task: the dataflow check, knob values <-> placements, and their names.

A *placement* is the explicit op list a genome stores for one task: ``((op, section), ...)``
with ``section`` one of ``"head"``, ``"loop"``, ``"tail"`` (:data:`Placement`). Every space
draws placements from the same knobs, a *placement key* ``(body, depth, defer, *extra)``:

- ``body``: the loop body, a permutation of the task's ops;
- ``depth``: head copies of the body (producer prefetch, consumer work kept in flight);
- ``defer``: one sync op of those head copies moved to the tail (``"none"``: none), e.g. a
  delayed release or commit;
- ``extra``: space-specific fields (the GEMM consumer adds ``pending`` and ``drain``), which
  only the space's own render function reads.

A task is described by :class:`TaskOps` (its ops, work ops, sync ops and data tokens). The API:

- ``TaskOps(task, ops, work, sync, tokens, suffixed=())``: ``tokens`` are ``(producer,
  consumer)`` pairs (the consumer op uses what the producer op made in the same iteration);
  ``suffixed`` names ops that a placement renders with an integer argument (``wgmma_wait`` ->
  ``wgmma_wait1``). Properties ``bodies`` (every permutation of ``ops``) and ``deferrable``
  (``("none", *sync)``); methods ``known(op)`` and ``base(op)`` (``wgmma_wait1`` ->
  ``wgmma_wait``).
- :func:`dataflow_error` ``(task_ops, placement) -> str | None``: why a placement cannot
  compute anything, before any pipeline rule (those are TS's to judge): an unknown op, a loop
  without each work op exactly once, partial iterations of the work ops in the head, work ops
  in the tail, a token used before it is produced in its section.
- :func:`render_placement` ``(body, depth, defer, tail_first=()) -> Placement``: the placement
  a key describes (``tail_first``: ops opening the tail, e.g. the GEMM's drain).
- :func:`placement_keys` ``(task_ops, depths, bodies=None)`` / :func:`placement_key_count`:
  every ``(body, depth, defer)`` key (``defer`` is ``"none"`` at depth 0; ``bodies``
  restricts the loop bodies, default every permutation), and how many.
- :func:`key_of_placement` ``(placement, task_ops, depths, render, extras=())``: the key
  whose ``render(*key)`` is ``placement`` (``extras``: the choices of each extra field), or
  None when no key renders it (a hand-written placement the sampler cannot express).
- :func:`placement_name` ``(key) -> str`` (``body|depth|defer[|extra...]``, the body
  comma-joined) and :func:`parse_placement_name` ``(name, fields=(int, str))``, its inverse
  (``fields`` convert the parts after the body).
- :func:`head_depth` ``(placement, primary_op) -> int``: head copies of the body, counted by
  the task's primary op.
- :data:`PLACEMENT_RULES`: the classes and functions that decide which placements exist and
  pass (a screen's digest covers their source).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Placement = tuple[tuple[str, str], ...]
"""``((op, section), ...)`` in program order; section is ``head``, ``loop`` or ``tail``."""
PlacementKey = tuple[Any, ...]
"""``(body, depth, defer, *extra)``: the knob values a placement is rendered from."""
SECTIONS = ("head", "loop", "tail")


@dataclass(frozen=True)
class TaskOps:
    """The ops of one TS task as placements see them."""

    task: str
    ops: tuple[str, ...]
    """Every op of the task: a loop body is a permutation of these."""
    work: tuple[str, ...]
    """Ops that do the task's work: once per loop iteration, whole iterations in the head."""
    sync: tuple[str, ...]
    """Pipeline ops: the ones a head copy may defer to the tail."""
    tokens: tuple[tuple[str, str], ...]
    """(producer, consumer) op pairs: the consumer uses what the producer made."""
    suffixed: tuple[str, ...] = ()
    """Ops rendered with an integer argument appended (``wgmma_wait`` -> ``wgmma_wait1``)."""

    @property
    def bodies(self) -> tuple[tuple[str, ...], ...]:
        return tuple(itertools.permutations(self.ops))

    @property
    def deferrable(self) -> tuple[str, ...]:
        return ("none", *self.sync)

    def base(self, op: str) -> str:
        """The op a rendered op stands for (``wgmma_wait1`` -> ``wgmma_wait``)."""
        for name in self.suffixed:
            if op.startswith(name) and op.removeprefix(name).isdigit():
                return name
        return op

    def known(self, op: str) -> bool:
        return (op in self.ops and op not in self.suffixed) or self.base(op) != op


def dataflow_error(task_ops: TaskOps, placement: Sequence[tuple[str, str]]) -> str | None:
    """Why ``placement`` cannot compute the task's result, before any pipeline rule is judged.

    Only the data is checked: each op is known; the loop holds each work op exactly once;
    the head holds whole iterations of the work ops and the tail none; every token is
    produced earlier in the same section and iteration. The pipeline protocol (brackets,
    pairing, deadlock) is the TS verifier's job.
    """
    for op, _ in placement:
        if not task_ops.known(op):
            return f"unknown op {op!r} (known: {', '.join(task_ops.ops)})"
    loop = [op for op, sec in placement if sec == "loop"]
    for op in task_ops.work:
        if loop.count(op) != 1:
            return (f"the loop body must hold {op} exactly once per iteration, "
                    f"holds it {loop.count(op)}x")
    head = [op for op, sec in placement if sec == "head"]
    counts = {op: head.count(op) for op in task_ops.work}
    if len(set(counts.values())) > 1:
        return f"head holds partial iterations of the work ops: {counts}"
    if any(op in task_ops.work for op, sec in placement if sec == "tail"):
        return "work ops in the tail: the loop already covers every remaining iteration"
    for producer, consumer in task_ops.tokens:
        for section in ("head", "loop"):
            available = 0
            for op, sec in placement:
                if sec != section:
                    continue
                if op == producer:
                    available += 1
                elif op == consumer:
                    if available == 0:
                        return f"{consumer} uses its input before {producer} produces it ({section})"
                    available -= 1
    return None


def render_placement(
    body: Sequence[str], depth: int, defer: str, tail_first: Sequence[str] = ()
) -> Placement:
    """``depth`` head copies of ``body`` (less ``defer``), the loop body, then the tail:
    ``tail_first`` and one deferred ``defer`` per head copy."""
    head = [(op, "head") for _ in range(depth) for op in body if op != defer]
    loop = [(op, "loop") for op in body]
    tail = [(op, "tail") for op in tail_first]
    tail += [(defer, "tail")] * depth if defer != "none" and depth else []
    return tuple(head + loop + tail)


def placement_keys(
    task_ops: TaskOps, depths: Iterable[int], bodies: Iterable[Sequence[str]] | None = None
) -> Iterator[tuple[tuple[str, ...], int, str]]:
    """Every ``(body, depth, defer)``: bodies outermost (``bodies``, default every
    permutation of the task's ops); at depth 0 nothing can be deferred."""
    depths = tuple(depths)
    for body in task_ops.bodies if bodies is None else bodies:
        for depth in depths:
            for defer in task_ops.deferrable if depth else ("none",):
                yield tuple(body), depth, defer


def placement_key_count(
    task_ops: TaskOps, depths: Sequence[int], bodies: Sequence[Sequence[str]] | None = None
) -> int:
    """How many keys :func:`placement_keys` yields, without listing them."""
    per_body = sum(len(task_ops.deferrable) if depth else 1 for depth in depths)
    return len(task_ops.bodies if bodies is None else bodies) * per_body


def key_of_placement(
    placement: Sequence[tuple[str, str]],
    task_ops: TaskOps,
    depths: Sequence[int],
    render: Callable[..., Placement],
    extras: Sequence[Sequence[Any]] = (),
) -> PlacementKey | None:
    """The key ``(body, depth, defer, *extra)`` that ``render`` turns into ``placement``,
    or None when no key of these choices renders it."""
    body = tuple(task_ops.base(op) for op, sec in placement if sec == "loop")
    if sorted(body) != sorted(task_ops.ops):
        return None
    target = tuple((op, sec) for op, sec in placement)
    for depth in depths:
        for defer in task_ops.deferrable if depth else ("none",):
            for extra in itertools.product(*extras):
                key = (body, depth, defer, *extra)
                if render(*key) == target:
                    return key
    return None


def placement_name(key: PlacementKey) -> str:
    """``coords,try_acquire,acquire,tma_load,commit|1|none``: a placement key as a knob value."""
    return "|".join([",".join(key[0]), *(str(v) for v in key[1:])])


def parse_placement_name(
    name: str, fields: Sequence[Callable[[str], Any]] = (int, str)
) -> PlacementKey:
    """The key :func:`placement_name` wrote: the body, then ``fields[i]`` of each later part."""
    body, *rest = name.split("|")
    if len(rest) != len(fields):
        raise ValueError(f"placement {name!r} has {len(rest)} parts after the body, "
                         f"expected {len(fields)}")
    parts = (convert(part) for convert, part in zip(fields, rest, strict=True))
    return (tuple(body.split(",")), *parts)


def head_depth(placement: Sequence[Any], primary_op: str) -> int:
    """Head copies of the loop body, counted by the task's primary op. ``placement`` holds
    ``(op, section)`` pairs or objects with ``.op`` and ``.section`` (a genome's ops)."""
    pairs = ((p.op, p.section) if hasattr(p, "op") else p for p in placement)
    return sum(1 for op, sec in pairs if sec == "head" and op == primary_op)


PLACEMENT_RULES = (TaskOps, dataflow_error, render_placement, placement_keys)
"""The code whose edits change which placements exist and pass: screens key on its source."""
