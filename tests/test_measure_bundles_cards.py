"""bench/regret/measure_bundles.py measures a bundle on one card: a results.json another GPU
measured is set aside (renamed after that GPU, its bytes kept) rather than resumed, so that the
runner times every candidate here; one this GPU measured is resumed as before."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def measure_bundles() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "measure_bundles", ROOT / "bench" / "regret" / "measure_bundles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measured(bundle: Path, device: str | None) -> str:
    bundle.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"device": device, "measurements": [{"genome_hash": "aa"}]})
    (bundle / "results.json").write_text(text)
    return text


def test_results_of_another_gpu_are_set_aside_and_this_gpus_are_resumed(tmp_path: Path) -> None:
    mb = measure_bundles()
    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    same = tmp_path / "same"
    measured(same, h200)
    assert mb.set_aside_other_card(same, h200) is None
    assert (same / "results.json").exists()

    other = tmp_path / "other"
    text = measured(other, h100)
    assert mb.set_aside_other_card(other, h200) == "results-nvidia-h100-80gb-hbm3.json"
    assert not (other / "results.json").exists()
    assert (other / "results-nvidia-h100-80gb-hbm3.json").read_text() == text
    # a second card change never writes over the first set-aside file
    measured(other, h100)
    assert mb.set_aside_other_card(other, h200) == "results-nvidia-h100-80gb-hbm3-2.json"
    assert (other / "results-nvidia-h100-80gb-hbm3.json").read_text() == text


def test_nothing_is_set_aside_without_a_card_or_a_recorded_device(tmp_path: Path) -> None:
    mb = measure_bundles()
    unnamed = tmp_path / "unnamed"
    measured(unnamed, None)
    assert mb.set_aside_other_card(unnamed, "NVIDIA H200") is None
    named = tmp_path / "named"
    measured(named, "NVIDIA H100 80GB HBM3")
    assert mb.set_aside_other_card(named, None) is None  # no GPU here, or --resume-across-cards
    assert mb.set_aside_other_card(tmp_path / "empty", "NVIDIA H200") is None
    assert (unnamed / "results.json").exists() and (named / "results.json").exists()
