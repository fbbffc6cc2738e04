"""The screening cache (search_spaces/common/screen_cache.py): a shipped screen is used only
when its digest matches the code; a stale or tampered one is recomputed with the injected
verifier, and the user is told."""

from __future__ import annotations

import importlib
import json
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.search_spaces.common.screen_cache import (  # noqa: E402
    ScreenKey,
    StaleScreenError,
    StaleScreenWarning,
    load_screen,
    screen_key,
    write_screen,
)

KEY = ScreenKey("toy", "template-1", "4.8.1", {"problem": "toy-fp16-8", "depths": [0, 1]})
SCREEN = {"load": [[["a", "b"], 1, "none"]], "layouts": [{"warps": 4}]}


def _never() -> object:
    raise AssertionError("a current screen must not be recomputed")


def test_a_current_screen_is_read_without_recomputing(tmp_path: Path) -> None:
    path = tmp_path / "data" / "toy_screened.json"
    write_screen(path, KEY, SCREEN)
    assert load_screen(path, KEY, _never) == SCREEN
    doc = json.loads(path.read_text())
    assert doc["digest"] == KEY.digest and doc["key"] == KEY.to_dict()


@pytest.mark.parametrize(
    ("changed", "what"),
    [
        (ScreenKey("toy", "template-2", "4.8.1", KEY.params), "template"),
        (ScreenKey("toy", "template-1", "4.9.0", KEY.params), "dsl"),
        (ScreenKey("toy", "template-1", "4.8.1", {**KEY.params, "depths": [0, 1, 2]}), "params"),
    ],
)
def test_a_stale_screen_is_recomputed_and_the_user_told(
    tmp_path: Path, changed: ScreenKey, what: str
) -> None:
    path = tmp_path / "toy_screened.json"
    write_screen(path, KEY, SCREEN)
    fresh = {"load": [], "layouts": [{"warps": 8}]}
    with pytest.warns(StaleScreenWarning, match=f"screened for another {what}"):
        assert load_screen(path, changed, lambda: fresh) == fresh
    # Written back: the next load is current and computes nothing.
    assert load_screen(path, changed, _never) == fresh


def test_a_tampered_screen_or_digest_is_detected_and_recomputed(tmp_path: Path) -> None:
    path = tmp_path / "toy_screened.json"
    write_screen(path, KEY, SCREEN)
    doc = json.loads(path.read_text())
    doc["screen"]["load"].append([["b", "a"], 0, "none"])  # a hand-added placement
    path.write_text(json.dumps(doc))
    with pytest.warns(StaleScreenWarning, match="edited after it was screened"):
        assert load_screen(path, KEY, lambda: SCREEN) == SCREEN
    doc = json.loads(path.read_text())
    doc["digest"] = "0" * 16
    path.write_text(json.dumps(doc))
    with pytest.warns(StaleScreenWarning, match="screened for another"):
        assert load_screen(path, KEY, lambda: SCREEN) == SCREEN
    path.write_text("{not json")
    with pytest.warns(StaleScreenWarning, match="cannot be read"):
        assert load_screen(path, KEY, lambda: SCREEN) == SCREEN
    assert load_screen(path, KEY, _never) == SCREEN


def test_without_a_verifier_a_stale_screen_is_an_error_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "toy_screened.json"
    with pytest.raises(StaleScreenError, match="does not exist.*tsopt spaces toy"):
        load_screen(path, KEY, None)
    write_screen(path, KEY, SCREEN)
    with pytest.raises(StaleScreenError, match="screened for another template"):
        load_screen(path, ScreenKey("toy", "template-2", "4.8.1", KEY.params), None)


def test_keys_compare_as_they_read_back() -> None:
    key = screen_key("toy", "t", {"depths": (0, 1), "partners": {"load": (("a", "b"), 0)}})
    assert key.params == {"depths": [0, 1], "partners": {"load": [["a", "b"], 0]}}
    assert key == ScreenKey("toy", "t", key.dsl, json.loads(json.dumps(key.params)))


# -- the shipped screens of the spaces ------------------------------------------------------


@pytest.mark.parametrize("name", ["copy", "gemm"])
def test_the_shipped_screens_are_current(name: str) -> None:
    """Fails when a change to the template, its checks, the placement rules or the DSL left
    a space's shipped screen stale: ``tsopt spaces NAME`` recomputes and rewrites it."""
    from tsopt.core.registry import get_space

    space = get_space(name)
    funnel = importlib.import_module(f"tsopt.search_spaces.{name}.funnel")
    load_screen(space.screen_file, funnel.screen_key(space), None)


@pytest.mark.slow
def test_a_space_recomputes_a_tampered_screen_with_the_injected_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tsopt.search_spaces.copy.space import CopySpace
    from tsopt.verify.verifier import VerdictCache, judge_for

    shipped = json.loads(CopySpace.screen_file.read_text())["screen"]
    tampered = tmp_path / "copy_screened.json"
    shutil.copy(CopySpace.screen_file, tampered)
    doc = json.loads(tampered.read_text())
    doc["screen"]["load"] = doc["screen"]["load"][:1]  # placements dropped by hand
    tampered.write_text(json.dumps(doc))
    monkeypatch.setattr(CopySpace, "screen_file", tampered)

    with pytest.raises(StaleScreenError, match="edited after it was screened"):
        CopySpace().screened_placements("load")  # no verifier injected: refused, not trusted

    space = CopySpace()
    space.judge = judge_for(space, VerdictCache())
    with pytest.warns(StaleScreenWarning, match="recomputing it with the verifier"):
        recomputed = space.screens()
    assert recomputed == shipped  # the verifier's verdicts, equal to the shipped screen
    assert json.loads(tampered.read_text())["screen"] == shipped
