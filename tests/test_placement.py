"""The shared placement module (search_spaces/common/placement.py) on both spaces' ops."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.search_spaces.common import placement as P  # noqa: E402
from tsopt.search_spaces.copy import config as copy_config  # noqa: E402
from tsopt.search_spaces.gemm import config as gemm_config  # noqa: E402

COPY = copy_config.TASKS
GEMM = gemm_config.TASKS


def test_canonical_placements_of_both_spaces_pass_the_dataflow_check() -> None:
    for task, ops in copy_config.CANONICAL_BODY.items():
        for depth in copy_config.HEAD_DEPTHS:
            assert P.dataflow_error(COPY[task], P.render_placement(ops, depth, "none")) is None
    load = gemm_config.load_placement(gemm_config.LOAD_OPS, 2, "commit")
    assert P.dataflow_error(GEMM["load"], load) is None
    mma = gemm_config.mma_placement(gemm_config.MMA_OPS, 1, "release", 1, "tail")
    assert ("wgmma_wait1", "loop") in mma and mma[-2:] == (("wgmma_wait0", "tail"), ("release", "tail"))
    assert P.dataflow_error(GEMM["mma"], mma) is None


@pytest.mark.parametrize(
    ("tasks", "task", "ops", "error"),
    [
        (COPY, "store", [("try_wait", "loop"), ("wait", "loop"), ("store", "loop"), ("read", "loop"),
                         ("release", "loop")],
         "store uses its input before read produces it (loop)"),
        (GEMM, "mma", [("try_wait", "loop"), ("wait", "loop"), ("wgmma", "loop"),
                       ("read_stage", "loop"), ("wgmma_wait0", "loop"), ("release", "loop")],
         "wgmma uses its input before read_stage produces it (loop)"),
        (COPY, "load", [("coords", "loop"), ("tma_load", "loop"), ("bogus", "loop")],
         "unknown op 'bogus' (known: coords, try_acquire, acquire, tma_load, commit)"),
        (COPY, "load", [("coords", "loop"), ("tma_load", "loop"), ("tma_load", "loop")],
         "the loop body must hold tma_load exactly once per iteration, holds it 2x"),
        (COPY, "load", [("coords", "head"), ("coords", "loop"), ("tma_load", "loop")],
         "head holds partial iterations of the work ops: {'coords': 1, 'tma_load': 0}"),
        (GEMM, "load", [("coords", "loop"), ("tma_load", "loop"), ("coords", "tail")],
         "work ops in the tail: the loop already covers every remaining iteration"),
        (COPY, "load", [("tma_load", "head"), ("coords", "head"), ("coords", "loop"),
                        ("tma_load", "loop")],
         "tma_load uses its input before coords produces it (head)"),
    ],
)
def test_dataflow_errors_name_the_broken_rule(
    tasks: dict[str, P.TaskOps], task: str, ops: list[tuple[str, str]], error: str
) -> None:
    assert P.dataflow_error(tasks[task], ops) == error


def test_suffixed_ops_are_known_only_with_their_number() -> None:
    mma = GEMM["mma"]
    assert mma.known("wgmma_wait2") and mma.base("wgmma_wait2") == "wgmma_wait"
    assert not mma.known("wgmma_wait") and not mma.known("wgmma_waitx")
    assert not COPY["load"].known("wgmma_wait1")
    loop = [("try_wait", "loop"), ("wait", "loop"), ("read_stage", "loop"), ("wgmma", "loop"),
            ("wgmma_wait", "loop"), ("release", "loop")]
    assert P.dataflow_error(mma, loop) == (
        "unknown op 'wgmma_wait' (known: try_wait, wait, read_stage, wgmma, wgmma_wait, release)")


def test_keys_counts_and_the_dataflow_filter_of_both_spaces() -> None:
    # 120 loop-body orders x (depth 0 + depths 1, 2 x {none + 3 deferrable sync ops}); the
    # token's producer precedes its consumer in half of the orders.
    for tasks, task in ((COPY, "load"), (COPY, "store"), (GEMM, "load")):
        keys = list(P.placement_keys(tasks[task], (0, 1, 2)))
        assert len(keys) == P.placement_key_count(tasks[task], (0, 1, 2)) == 1080
        assert all(defer == "none" for _, depth, defer in keys if depth == 0)
        legal = [k for k in keys if P.dataflow_error(tasks[task], P.render_placement(*k)) is None]
        assert len(legal) == 540
    two = [copy_config.LOAD_OPS, tuple(reversed(copy_config.LOAD_OPS))]
    assert len(list(P.placement_keys(COPY["load"], (0, 1), two))) == P.placement_key_count(
        COPY["load"], (0, 1), two) == 2 * (1 + 4)


def test_knobs_round_trip_through_placements_and_names() -> None:
    for key in P.placement_keys(COPY["store"], copy_config.HEAD_DEPTHS):
        ops = copy_config.placement_of(*key)
        assert copy_config.knobs_of_placement("store", ops) == key
        assert copy_config.parse_placement_name(copy_config.placement_name(key)) == key
    for body, depth, defer in list(P.placement_keys(GEMM["mma"], gemm_config.HEAD_DEPTHS))[:300]:
        for pending in gemm_config.PENDING:
            for drain in gemm_config.DRAINS:
                key = (body, depth, defer, pending, drain)
                assert gemm_config.mma_key(gemm_config.mma_placement(*key)) == key
                name = gemm_config.placement_name(key)
                assert name.count("|") == 4
                assert gemm_config.parse_placement_name("mma", name) == key
    # A placement no key renders (a hand-written one) has no knobs.
    odd = (("coords", "loop"), ("tma_load", "loop"), ("commit", "tail"))
    assert copy_config.knobs_of_placement("load", odd) is None
    with pytest.raises(ValueError, match="expected 2"):
        P.parse_placement_name("a,b|1|none|2")


def test_head_depth_counts_the_primary_op_in_the_head() -> None:
    ops = copy_config.placement_of(copy_config.LOAD_OPS, 2, "commit")
    assert P.head_depth(ops, "tma_load") == 2
    assert P.head_depth(copy_config.placement_of(copy_config.LOAD_OPS, 0, "none"), "tma_load") == 0
