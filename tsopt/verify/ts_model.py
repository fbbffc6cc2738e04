"""The key of one TS exhaustive search: a fingerprint of exactly what TS's checker explores.

TS's ``TaskManager._exhaustive_aliasing_races`` calls ``check_all_interleavings`` once per
opaque-predicate assignment (twice when a task can skip a tile). Each call first derives,
from the tasks, the checker's whole input (``exhaustive_checker.py``, DSL 4.8.1): the
expanded per-task schedules as ``_StepInfo`` rows (stage, slot, credit index, counts, the
alias and completion flags), the dense credit layout and initial credits, the alias maps and
their overlap descriptions, the domain-interleaved resources, the DMA-consumer completion
metadata, and the names its messages print. It then builds ``_HeldStateTracker(completion)``
and runs the BFS, which reads nothing else: those values, the step rows, and of each
resource only ``name``, ``pipeline_config is None`` and ``pipeline_group``/``mode``.

:func:`model_digest` runs TS's own derivation and stops it at that point (the tracker's
construction raises, carrying the frame's locals), so the fingerprint is of the values the
DSL computed, not of a copy of its logic. Resource identities (``id()``, which TS uses as
keys and which differ between processes) become their index in TS's own resource order; the
state bound is left out (a search records the bound it ran under, ``TsSearch.settles``).
Hence, by construction: **two skeletons with one digest, under one DSL checker
(:func:`search_version`), are one search**, whatever kernel code, space or problem built
them; a kernel refactor that leaves the model alone keeps every search recorded for it, and
any change the checker would see moves the digest.

Conservative where it cannot be exact: a DSL whose step record has other fields than those
listed here, a locals frame without a name it needs, an identity not among TS's resources,
or any failure while deriving gives no digest (None): the verifier then searches and
memoises nothing.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

MODEL_FORMAT = 1
"""The form of the fingerprint; raised whenever :func:`_canonical_call` changes what it keeps."""
MODEL_ALIASING = "model"
"""The ``aliasing`` of a model-keyed ``TsSearch``: SMEM overlaps are in the model itself."""

# _StepInfo fields that hold resource identities, by shape; every other field is a plain
# value (bool, int, str or None, or tuples of int: credit indices and counts).
_REF = ("res", "rid")
_REF_TUPLE = ("group_member_rids",)
_REF_SET = ("completion_wait_rids",)  # iterated with order-free effects: kept sorted
_REF_PAIRS = ("group_member_release_slots", "group_member_wait_slots")
_ENUM = ("stage",)
_PLAIN = (
    "track", "in_alias", "is_pdl_wait", "is_pdl_launch", "cons_work_phase",
    "consecutive_same_work", "is_blocking", "is_point_write", "is_point_read",
    "is_producer_commit", "is_consumer_release", "is_consumer_wait", "is_producer_acquire",
    "is_producer_work", "is_consumer_work", "has_credit_transition", "needs_held_update",
    "is_fork_group", "is_merge_group", "is_fused_merge_group", "credit_idx",
    "producer_count", "consumer_count", "group_member_prod_counts",
    "group_member_cons_counts", "producer_slot", "consumer_slot", "commit_wait_gen",
)
_KNOWN_STEP_FIELDS = frozenset(_REF + _REF_TUPLE + _REF_SET + _REF_PAIRS + _ENUM + _PLAIN)


class _Captured(Exception):
    """Raised inside ``check_all_interleavings`` at the BFS's start: its locals."""

    def __init__(self, frame_locals: dict[str, Any]) -> None:
        super().__init__("tsopt: the checker's input, captured")
        self.frame_locals = frame_locals


class Unfingerprintable(Exception):
    """The checker's input holds something this module cannot key exactly."""


_CAPTURE: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "tsopt_ts_model_capture", default=None)
"""Set while :func:`model_digest` derives: each checker call appends its canonical input."""
_PATCH_LOCK = threading.Lock()
_PATCHED: list[bool] = []


def _install() -> None:
    """Put the capture point in TS's checker module: the tracker the BFS is about to use."""
    with _PATCH_LOCK:
        if _PATCHED:
            return
        from cutlass.experimental.task_scheduling import exhaustive_checker

        tracker = exhaustive_checker._HeldStateTracker

        def capturing_tracker(completion: Any) -> Any:
            if _CAPTURE.get() is not None:
                raise _Captured(dict(sys._getframe(1).f_locals))
            return tracker(completion)

        exhaustive_checker._tsopt_tracker = tracker  # type: ignore[attr-defined]
        exhaustive_checker._HeldStateTracker = capturing_tracker  # type: ignore[misc,assignment]
        _PATCHED.append(True)


def capturing() -> bool:
    """Whether the calling thread is deriving a model (the checker must not search)."""
    return _CAPTURE.get() is not None


def capture_call(search: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One ``check_all_interleavings`` call while a model is derived: its canonical input
    recorded instead of searched, and an empty safe result returned in its place."""
    from cutlass.experimental.task_scheduling.exhaustive_checker import CheckResult

    calls = _CAPTURE.get()
    assert calls is not None
    try:
        search(*args, **kwargs)
    except _Captured as captured:
        try:
            calls.append(_canonical_call(captured.frame_locals))
        except (Unfingerprintable, KeyError, AttributeError, TypeError):
            calls.append(None)
    else:
        calls.append({"no tasks": True})  # TS returns before its BFS: nothing to explore
    return CheckResult([], [], 0, 0, True)


def model_digest(manager: Any, exhaustive: Callable[[Any], None]) -> str | None:
    """The digest of every checker input ``exhaustive(manager)`` (TS's
    ``_exhaustive_aliasing_races``, through tsopt's patched search) would explore, in order;
    None when it cannot be keyed exactly (the search is then run and not memoised)."""
    _install()
    calls: list[Any] = []
    token = _CAPTURE.set(calls)
    try:
        exhaustive(manager)
    except Exception:  # noqa: BLE001 - whatever fails here fails again in the real search
        return None
    finally:
        _CAPTURE.reset(token)
    if not calls or any(call is None for call in calls):
        return None
    text = json.dumps({"format": MODEL_FORMAT, "calls": calls}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_VERSION: list[str] = []


def search_version() -> str:
    """The ``tool_version`` of a model-keyed search: the model's form, the DSL's version and
    a digest of its checker's source (``exhaustive_checker.py``, which explores, and
    ``task_manager.py``, which calls it and words its verdict). tsopt's spaces and verifier
    are not in it: they only build the model, which the digest keys."""
    if not _VERSION:
        import importlib.metadata

        from cutlass.experimental.task_scheduling import exhaustive_checker, task_manager

        try:
            dsl = importlib.metadata.version("nvidia-cutlass-dsl")
        except importlib.metadata.PackageNotFoundError:
            dsl = "unknown"
        source = hashlib.sha256()
        for module in (exhaustive_checker, task_manager):
            with open(module.__file__ or "", "rb") as f:
                source.update(f.read())
        _VERSION.append(f"ts-model{MODEL_FORMAT}/dsl-{dsl}/{source.hexdigest()[:12]}")
    return _VERSION[0]


def _canonical_call(frame: dict[str, Any]) -> dict[str, Any]:
    """The input one BFS reads, with resource identities as TS's resource indices."""
    _check_records()
    context = frame["context"]
    refs = {rid: index for index, rid in enumerate(context.id_to_res)}

    def ref(rid: int) -> int:
        if rid not in refs:
            raise Unfingerprintable("an identity outside TS's resources")
        return refs[rid]

    def ref_map(mapping: dict[int, Any]) -> list[Any]:
        return sorted([ref(k), sorted(ref(v) for v in vs)] for k, vs in mapping.items())

    resources = []
    for rid, resource in context.id_to_res.items():
        group = getattr(resource, "pipeline_group", None)
        resources.append([ref(rid), str(resource.name), resource.pipeline_config is None,
                          None if group is None else ref(id(group)),
                          None if group is None else str(group.mode.name)])
    steps = [[None if step is None else _canonical_step(step, ref) for step in row]
             for row in context.schedule_steps]
    completion = frame["completion"]
    opaque = frame["opaque_assignment"]
    return {
        "task_names": [str(n) for n in context.task_names],
        "n_tasks": context.n_tasks,
        "schedule_lens": list(context.schedule_lens),
        "cursor_strides": list(context.cursor_strides),
        "credit_key_order": [[ref(rid), stage] for rid, stage in context.credit_key_order],
        "resources": resources,
        "steps": steps,
        "alias_map": ref_map(context.alias_map),
        "prod_alias_map": ref_map(context.prod_alias_map),
        "cons_alias_map": ref_map(context.cons_alias_map),
        # TS looks a description up by (min, max) of the two ids: an unordered pair.
        "overlap_descs": sorted([sorted([ref(a), ref(b)]), str(text)]
                                for (a, b), text in context.overlap_descs.items()),
        "domain_rids": sorted(ref(rid) for rid in context.domain_rids),
        "cursor_only_visited": bool(context.cursor_only_visited),
        "assume_pdl_wait_completed": bool(context.assume_pdl_wait_completed),
        "dma_consumer_rids": sorted(ref(rid) for rid in completion.dma_consumer_rids),
        "completion_wait_rids": ref_map(completion.completion_wait_rids),
        "initial_cons": [int(v) for v in frame["initial_cons_dense"]],
        "zero_credits": [int(v) for v in frame["zero_credits"]],
        "initial_cursors": [int(v) for v in frame["initial_cursors"]],
        "early_exit": bool(frame["early_exit"]),
        "skipped_tile": bool(frame["skipped_tile"]),
        # The assignment is already applied to the steps; its words are in TS's messages.
        "opaque": None if opaque is None else [[str(k), bool(v)] for k, v in opaque.items()],
    }


_KNOWN_CONTEXT_FIELDS = frozenset((
    "task_names", "n_tasks", "schedule_lens", "cursor_strides", "credit_key_order",
    "schedule_steps", "id_to_res", "alias_map", "prod_alias_map", "cons_alias_map",
    "overlap_descs", "domain_rids", "cursor_only_visited", "assume_pdl_wait_completed"))
_KNOWN_COMPLETION_FIELDS = frozenset(("dma_consumer_rids", "completion_wait_rids"))


def _check_records() -> None:
    """TS's records are those this module keys, field for field (another DSL may add one)."""
    from cutlass.experimental.task_scheduling import exhaustive_checker as checker

    for record, known in ((checker._StepInfo, _KNOWN_STEP_FIELDS),
                          (checker._CheckerContext, _KNOWN_CONTEXT_FIELDS),
                          (checker._ConsumerCompletionMetadata, _KNOWN_COMPLETION_FIELDS)):
        fields = {f.name for f in dataclasses.fields(record)}
        if fields != known:
            raise Unfingerprintable(f"TS's {record.__name__} has fields {sorted(fields)}")


def _canonical_step(step: Any, ref: Callable[[int], int]) -> dict[str, Any]:
    out: dict[str, Any] = {name: _plain(getattr(step, name)) for name in _PLAIN}
    out["stage"] = str(step.stage.name)
    out["res"] = ref(id(step.res))
    out["rid"] = ref(step.rid)
    out["group_member_rids"] = [ref(r) for r in step.group_member_rids]
    out["completion_wait_rids"] = sorted(ref(r) for r in step.completion_wait_rids)
    for name in _REF_PAIRS:
        out[name] = [[ref(rid), int(slot)] for rid, slot in getattr(step, name)]
    return out


def _plain(value: Any) -> Any:
    """A step's plain value as JSON keeps it; anything else cannot be keyed exactly."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    raise Unfingerprintable(f"a step value of type {type(value).__name__}")
