"""How bench/regret/device_pairs.py picks a study's winners on the GPU machine, where no
database is (the rule ``store.ranked`` applies to candidates measured once), and how
gpuless.py checks each pick against the database once the round is ingested here. The
measurements are SYNTHETIC, written by hand for these checks; the bundles are manifests only
(no artifact is opened before a pair bundle is written, which these tests do not do)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {"device_pairs": ROOT / "bench" / "regret" / "device_pairs.py",
           "gpuless": ROOT / "bench" / "regret" / "gpuless.py"}


def module(name: str) -> Any:
    """The experiment's script as a module (each puts its own folder on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS[name])
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def measurement(genome_hash: str, ratio: float | None, status: str = "ok") -> dict[str, Any]:
    return {"genome_hash": genome_hash, "ratio": ratio, "status": status,
            "median_us": 10.0 if ratio is not None else None}


def ship_bundle(work: Path, rel: str, hashes: list[str]) -> None:
    folder = work / rel
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"candidates": [
        {"genome_hash": h, "genome": {"numeric": {"tile_n": i}}, "artifact": f"artifacts/{h}"}
        for i, h in enumerate(hashes)]}))


def test_only_correct_timed_measurements_count_and_ties_go_to_the_smaller_hash() -> None:
    pairs = module("device_pairs")
    got = pairs.ratios({"measurements": [
        measurement("a" * 64, 1.02), measurement("b" * 64, 1.30, status="wrong"),
        measurement("c" * 64, None), measurement("d" * 64, 1.02)]})
    assert got == {"a" * 64: 1.02, "d" * 64: 1.02}
    assert pairs.best(got) == "a" * 64
    assert pairs.best({}) is None


def test_round_two_winner_is_the_best_of_both_rounds(tmp_path: Path) -> None:
    pairs = module("device_pairs")
    ship_bundle(tmp_path, "ship/r2/s1-mid", ["e" * 64, "f" * 64])
    study = {"seed": 1, "round1": {"genome_hash": "a" * 64, "genome": {"numeric": {}},
                                   "ratio": 0.95, "artifact_dir": "pairs-pre/artifacts/mid/a"},
             "round1_standings": {"a" * 64: 0.95, "b" * 64: 0.90},
             "round1_bundle": None, "round2_bundle": "ship/r2/s1-mid"}
    measured = {"r2/s1-mid": {"measurements": [measurement("e" * 64, 0.97),
                                                measurement("f" * 64, 0.93)]}}
    chosen: list[dict[str, Any]] = []
    items = pairs.study_winners(tmp_path, study, measured, chosen, "mid")
    assert [(i["genome_hash"][0], i["role"]["round"]) for i in items] == [("a", 1), ("e", 2)]
    assert items[1]["artifact_dir"] == str(tmp_path / "ship/r2/s1-mid/artifacts" / ("e" * 64))
    assert [c["ratio"] for c in chosen] == [0.95, 0.97]

    # Round 2 found nothing better: round 1's winner stays, with its carried artifact.
    measured = {"r2/s1-mid": {"measurements": [measurement("e" * 64, 0.94)]}}
    items = pairs.study_winners(tmp_path, study, measured, [], "mid")
    assert [i["genome_hash"][0] for i in items] == ["a", "a"]
    assert items[1]["artifact_dir"] == str(tmp_path / "pairs-pre/artifacts/mid/a")


def test_a_round_one_bundle_measured_there_gives_round_one_winner(tmp_path: Path) -> None:
    pairs = module("device_pairs")
    ship_bundle(tmp_path, "ship/r1/s2-mid", ["c" * 64, "d" * 64])
    study = {"seed": 2, "round1": None, "round1_standings": {},
             "round1_bundle": "ship/r1/s2-mid", "round2_bundle": None}
    measured = {"r1/s2-mid": {"measurements": [measurement("c" * 64, 0.88),
                                                measurement("d" * 64, 0.91)]}}
    chosen: list[dict[str, Any]] = []
    (item,) = pairs.study_winners(tmp_path, study, measured, chosen, "mid")
    assert item["genome_hash"] == "d" * 64 and item["role"]["round"] == 1
    assert chosen[0]["how"].startswith("device")


def test_each_device_pick_is_checked_against_the_database(tmp_path: Path) -> None:
    gpuless = module("gpuless")
    doc = tmp_path / "pairs.json"
    doc.write_text(json.dumps({"bundles": [], "chosen": [
        {"name": "mid", "seed": 1, "round": 2, "genome_hash": "e" * 64},
        {"name": "mid", "seed": 2, "round": 2, "genome_hash": "f" * 64}]}))
    winners = {"1": {"mid": {"2": {"genome_hash": "e" * 64}}},
               "2": {"mid": {"2": {"genome_hash": "a" * 64}}}}
    checks = gpuless.choice_checks([doc], winners)
    assert [c["agrees"] for c in checks] == [True, False]
    assert checks[1]["database"] == "a" * 64
