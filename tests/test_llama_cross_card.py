"""bench/llama_layer/cross_card.py: the same package's layer timed on two cards, side by side.
SYNTHETIC layer documents (no GPU): a bucket that meets the bar on one card and not on the
other, a flip beyond both cards' pass spread, one within it, and a refusal of two packages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "llama_layer" / "cross_card.py"


def layer(device: str, ratios: dict[int, tuple[float, float]], genome: str = "g" * 64) -> dict:
    """A layer.py document of one kernel: M -> (ratio, pass spread)."""
    return {"device": device, "command": "SYNTHETIC",
            "kernels": [{"name": "k17", "genome_hash": genome}],
            "per_m": [{"projection": "qkv", "m": m, "kernel": "k17", "ok": True, "ratio": r,
                       "pass_spread": spread} for m, (r, spread) in ratios.items()]}


def run(tmp_path: Path, a: dict, b: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.json"),
                           str(tmp_path / "b.json"), "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, check=False)


def test_two_cards_side_by_side(tmp_path: Path) -> None:
    a = layer("SYNTHETIC A", {17: (1.05, 0.01), 24: (1.04, 0.01), 32: (1.003, 0.01)})
    b = layer("SYNTHETIC B", {17: (0.95, 0.01), 24: (1.02, 0.01), 32: (0.998, 0.01)})
    done = run(tmp_path, a, b)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "x.json").read_text())
    (bucket,) = doc["buckets"]
    assert bucket["a"]["meets_bar"] and not bucket["b"]["meets_bar"]
    assert bucket["b"]["worst"] == 0.95 and bucket["b"]["worst_m"] == 17
    # M = 17 is on opposite sides beyond both spreads; M = 32 only within them
    assert bucket["flips"] == [17] and doc["ms_flipped"] == 1 and doc["ms"] == 3
    assert bucket["median_shift"] == pytest.approx(1.02 / 1.04)
    assert doc["meets"] == {"a": 1, "b": 0} and "1 of 3: 17" in done.stdout


def test_two_packages_are_refused(tmp_path: Path) -> None:
    done = run(tmp_path, layer("A", {1: (1.0, 0.0)}), layer("B", {1: (1.0, 0.0)}, "h" * 64))
    assert done.returncode != 0 and "timed different packages" in done.stderr
