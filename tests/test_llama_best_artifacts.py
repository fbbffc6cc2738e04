"""bench/llama_layer/best_artifacts.py: on the GPU machine, each measured bundle's best kernel
(store.ranked's rule for candidates measured once) made into one package for layer.py. The
bundles and measurements are SYNTHETIC, written by hand for these checks; no kernel is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "llama_layer" / "best_artifacts.py"


def bundle(top: Path, name: str, m_range: list[int], hashes: list[str],
           measurements: list[dict[str, Any]] | None) -> None:
    folder = top / name
    candidates = []
    for h in hashes:
        artifact = folder / "artifacts" / h
        artifact.mkdir(parents=True)
        (artifact / "artifact.json").write_text(json.dumps({
            "problem": {"op": "gemm", "dtype": "bf16", "m": m_range[1], "n": 4096, "k": 4096},
            "m_range": m_range, "genome_hash": h}))
        candidates.append({"genome_hash": h, "artifact": f"artifacts/{h}"})
    (folder / "manifest.json").write_text(json.dumps({"candidates": candidates}))
    if measurements is not None:
        (folder / "results.json").write_text(json.dumps({"measurements": measurements}))


def ok(h: str, ratio: float) -> dict[str, Any]:
    return {"genome_hash": h, "status": "ok", "ratio": ratio, "median_us": 10.0}


def test_each_bucket_gets_its_best_correct_kernel_and_an_unmeasured_one_falls_back(
        tmp_path: Path) -> None:
    bundles = tmp_path / "bundles"
    bundle(bundles, "gemm-bf16-1-16x4096x4096-sm_90a", [1, 16], ["aa", "bb", "cc", "dd"],
           [ok("aa", 1.02), ok("bb", 1.05), ok("cc", 1.05),
            {"genome_hash": "dd", "status": "wrong_answer", "ratio": 1.5, "median_us": 9.0}])
    bundle(bundles, "gemm-bf16-17-32x4096x4096-sm_90a", [17, 32], ["ee"], None)
    package, picks_path = tmp_path / "pkg", tmp_path / "picks.json"
    run = subprocess.run([sys.executable, str(SCRIPT), str(bundles), "--package", str(package),
                          "--json", str(picks_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    picks = {p["bundle"]: p for p in json.loads(picks_path.read_text())["picks"]}
    # the wrong answer's 1.5 is no standing; the tie at 1.05 goes to the smaller hash
    assert picks["gemm-bf16-1-16x4096x4096-sm_90a"]["genome_hash"] == "bb"
    assert picks["gemm-bf16-1-16x4096x4096-sm_90a"]["ratio"] == 1.05
    assert picks["gemm-bf16-17-32x4096x4096-sm_90a"]["genome_hash"] is None
    assert "none (torch.matmul)" in run.stdout
    kernels = json.loads((package / "manifest.json").read_text())["kernels"]
    assert [(k["name"], k["genome_hash"], k["m_range"], k["runtime_m"]) for k in kernels] == [
        ("gemm_bf16_1_16x4096x4096", "bb", [1, 16], True)]
    assert (package / "gemm_bf16_1_16x4096x4096" / "artifact.json").exists()
    assert (package / "torch_ops.py").exists() and (package / "loader.py").exists()


def test_no_bundle_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--package",
                          str(tmp_path / "pkg"), "--json", str(tmp_path / "p.json")],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == f"error: no bundle (manifest.json) under {tmp_path}"
    assert not (tmp_path / "pkg").exists()




def on(h: str, ratio: float, device: str) -> dict[str, Any]:
    return {**ok(h, ratio), "device": device}


def test_picks_made_on_two_cards_are_named_and_measured_on_picks_on_one(tmp_path: Path) -> None:
    """stop 54: a call given an H100 measured the buckets an H200 had not, and the package
    mixed the two cards' picks without a word."""
    bundles = tmp_path / "bundles"
    bundle(bundles, "gemm-bf16-1-16x4096x4096-sm_90a", [1, 16], ["aa", "bb"],
           [on("aa", 1.02, "NVIDIA H200"), on("bb", 1.01, "NVIDIA H200")])
    bundle(bundles, "gemm-bf16-17-32x4096x4096-sm_90a", [17, 32], ["cc", "dd"],
           [on("cc", 0.97, "NVIDIA H100 80GB HBM3"), on("dd", 0.99, "NVIDIA H100 80GB HBM3")])

    def pick(*extra: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
        package, picks_path = tmp_path / f"pkg{len(extra)}", tmp_path / f"p{len(extra)}.json"
        run = subprocess.run([sys.executable, str(SCRIPT), str(bundles), "--package",
                              str(package), "--json", str(picks_path), *extra],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return json.loads(picks_path.read_text()), run

    mixed, run = pick()
    assert [(p["genome_hash"], p["device"]) for p in mixed["picks"]] == [
        ("aa", "NVIDIA H200"), ("dd", "NVIDIA H100 80GB HBM3")]
    assert ("note: these picks were made on 2 GPUs (NVIDIA H100 80GB HBM3: 1, NVIDIA H200: 1 "
            "buckets)") in run.stdout
    one, run = pick("--measured-on", "NVIDIA H200")
    assert one["measured_on"] == "NVIDIA H200"
    assert [(p["genome_hash"], p["device"], p["measured"]) for p in one["picks"]] == [
        ("aa", "NVIDIA H200", 2), (None, None, 0)]
    assert "note:" not in run.stdout and "none (torch.matmul)" in run.stdout
