"""bench/regret/oracle_best.py's choice of a problem's oracle picks from a grown table, on a
SYNTHETIC table and plan made here (named so: no GPU measured them): the table's confirmed best
three in order, then every anchor the supplement's card ranked below them, so that a pair
bundle measured on another card keeps the first table's best; a table whose plan hash differs
is refused in one line, and so is a supplement plan whose table was never unpacked; the file
written is the document, one pick a line."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = "gemm:bf16:64x128x256"


def load_oracle_best(oracle: Path):
    spec = importlib.util.spec_from_file_location(
        "oracle_best_under_test", ROOT / "bench" / "regret" / "oracle_best.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ORACLE = oracle
    return module


def write_grown(oracle: Path, rows: list[tuple[str, str, float, bool]],
                sha: str | None = None) -> None:
    (oracle / "plans").mkdir(parents=True)
    plan = {"problem": SPEC, "candidates": [
        {"genome_hash": h, "genome": {"space": "SYNTHETIC", "hash": h}} for h, *_ in rows]}
    plan_path = oracle / "plans" / "toy.grown.json"
    plan_path.write_text(json.dumps(plan))
    table = {"problem": SPEC, "devices": ["SYNTHETIC card"],
             "plan_sha256": [sha or hashlib.sha256(plan_path.read_bytes()).hexdigest()],
             "rows": [{"genome_hash": h, "origin": origin, "family": "tile-per-cta",
                       "ratio": ratio, "ratio_lo": ratio - 0.01, "ratio_hi": ratio + 0.01,
                       "median_us": 10.0 / ratio, "confirmed": confirmed}
                      for h, origin, ratio, confirmed in rows]}
    (oracle / "grown").mkdir()
    (oracle / "grown" / "toy.grown.table.json").write_text(json.dumps(table))


def test_anchors_ranked_below_the_grown_best_still_ride_along(tmp_path: Path) -> None:
    write_grown(tmp_path, [
        ("a1", "anchor", 0.95, True), ("a2", "anchor", 1.01, True),
        ("a3", "anchor", 0.90, True), ("g1", "model", 1.03, True),
        ("g2", "coverage", 0.99, True), ("g3", "model", 0.97, True),
        ("g4", "model", 1.20, False)])  # screen only: never a pick
    entry = load_oracle_best(tmp_path).oracle_entry("toy", SPEC, top=3)
    assert [p["genome_hash"] for p in entry["oracle"]] == ["g1", "a2", "g2", "a1", "a3"]
    assert [p["rank"] for p in entry["oracle"]] == [1, 2, 3, 4, 5]
    assert entry["source"] == "toy.grown"
    assert entry["oracle"][3]["genome"] == {"space": "SYNTHETIC", "hash": "a1"}


def test_a_table_of_another_plan_is_refused_in_one_line(tmp_path: Path) -> None:
    write_grown(tmp_path, [("a1", "anchor", 0.95, True)], sha="0" * 64)
    with pytest.raises(SystemExit) as refused:
        load_oracle_best(tmp_path).oracle_entry("toy", SPEC, top=3)
    assert "plan sha256" in str(refused.value) and "\n" not in str(refused.value)


def test_a_supplement_plan_without_its_table_is_refused_not_read_as_the_first(
        tmp_path: Path) -> None:
    write_grown(tmp_path, [("a1", "anchor", 0.95, True)])
    (tmp_path / "grown" / "toy.grown.table.json").unlink()  # packed, never unpacked
    with pytest.raises(SystemExit) as refused:
        load_oracle_best(tmp_path).oracle_entry("toy", SPEC, top=3)
    assert "toy.grown.table.json is missing" in str(refused.value)
    assert "unpack oracle" in str(refused.value) and "\n" not in str(refused.value)


def test_the_written_file_is_the_document_one_pick_a_line(tmp_path: Path) -> None:
    write_grown(tmp_path, [("a1", "anchor", 0.95, True), ("g1", "model", 1.03, True)])
    module = load_oracle_best(tmp_path)
    doc = {"format": module.FORMAT, "version": 1, "top": 3,
           "problems": [module.oracle_entry("toy", SPEC, top=3)]}
    text = module.compact_json(doc)
    assert json.loads(text) == doc
    pick_lines = [line for line in text.splitlines() if line.startswith('  {"family"')]
    assert len(pick_lines) == 2
