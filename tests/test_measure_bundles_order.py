"""bench/regret/measure_bundles.py orders the bundles a deadline may cut: ``--first`` globs go
first, in the order given; the rest follow in path order. A deadline of 0 starts no bundle,
so the script lists every one as left, in the order it would have measured them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "regret" / "measure_bundles.py"


def left_in_order(folder: Path, out: Path, *args: str) -> list[str]:
    run = subprocess.run([sys.executable, str(SCRIPT), str(folder), "--deadline", "0",
                          "--out", str(out), *args], capture_output=True, text=True,
                         check=True)
    assert json.loads(run.stdout.strip().splitlines()[-1])["measured"] == 0
    return [Path(p).name for p in json.loads(out.read_text())["left"]]


def test_first_globs_go_first_in_the_order_given(tmp_path: Path) -> None:
    names = ["gemm-1-16x64", "gemm-17-32x64", "gemm-33-64x64", "gemm-65-128x64",
             "gemm-65-128x32"]
    for name in names:
        (tmp_path / "b" / name).mkdir(parents=True)
        (tmp_path / "b" / name / "manifest.json").write_text("{}")
    out = tmp_path / "o.json"
    assert left_in_order(tmp_path / "b", out) == sorted(names)
    assert left_in_order(tmp_path / "b", out, "--first", "*-65-128x*",
                         "--first", "*-17-32x*") == [
        "gemm-65-128x32", "gemm-65-128x64", "gemm-17-32x64", "gemm-1-16x64", "gemm-33-64x64"]
    # a bundle that two globs match goes where the first of them puts it
    assert left_in_order(tmp_path / "b", out, "--first", "*x64", "--first", "*-65-128x*")[-1] \
        == "gemm-65-128x32"
