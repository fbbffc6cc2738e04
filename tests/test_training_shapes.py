"""bench/training_shapes/draw.py: the frozen rule draws the same shapes every time, none of them
a held-out problem (their measurements are meant for the corpus, which refuses held-out
shapes), each a valid GEMM for the space (N and K multiples of 8) within the flop cap."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from tsopt.app.heldout import load_heldout

DRAW = Path(__file__).resolve().parents[1] / "bench" / "training_shapes" / "draw.py"


def _draw_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("training_draw", DRAW)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rule_draws_the_same_valid_shapes_and_none_is_held_out(tmp_path: Path) -> None:
    draw = _draw_module()
    problems = draw.draw()
    assert draw.draw() == problems  # seeded: the same set every time
    (tmp_path / "shapes.json").write_text(json.dumps(
        {"format": "tsopt-heldout", "version": 1, "frozen": "2026-12-06", "doc": "training",
         "problems": problems}))
    shapes = load_heldout(tmp_path / "shapes.json")  # each a valid problem of the gemm space
    held = load_heldout()
    assert len(shapes.problems) == draw.COUNT
    for item in shapes.problems:
        assert not held.holds(item.problem), item.name
        sizes = item.problem.sizes
        assert sizes["n"] % 8 == 0 and sizes["k"] % 8 == 0
        assert 2 * sizes["m"] * sizes["n"] * sizes["k"] <= draw.MAX_FLOP
    assert [p.problem.dtype for p in shapes.problems].count("fp16") == draw.COUNT // 4
