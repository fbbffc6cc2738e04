"""A study measured on several GPUs ranks on one of them, in the search as in the export.

A kernel fastest on one card can lose on another (the Llama layer's H100 picks met the bar in
11 of 16 buckets there and 5 on an H200). So the search's rankings (its best so far, the
confirmation, warm starts, the seed library) read one card's measurements: the GPU a live run
measures on where it measured the study, else the study's target card (the profile its config
records), else the most measured. Evolve's parents come from that card's figures, though Optuna
holds each trial's first told value only. Real database, real Optuna study, real sampler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from tests.fixtures import FIXTURES
from tsopt.core.devices import PROFILES, derive_profile, is_part
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.db.store import Store
from tsopt.db.views import ranking_gpu
from tsopt.search.confirm import name_winner
from tsopt.search.evolve_sampler import EvolveSampler
from tsopt.search.outcomes import card_values, open_study

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
EVIDENCE = FIXTURES / "copy_h200" / "copy-4096-fenced"
ROOT = Path(__file__).resolve().parents[1]


def test_a_gpu_name_is_its_own_part_only() -> None:
    assert is_part(PROFILES["H200_SXM"], H200)
    assert not is_part(PROFILES["H200_SXM"], H100)
    assert is_part(PROFILES["H100_SXM"], H100)
    # The longest name wins: an H200 NVL is not the SXM part, nor an H100 PCIe the SXM5.
    assert is_part(PROFILES["H200_NVL"], "NVIDIA H200 NVL")
    assert not is_part(PROFILES["H200_SXM"], "NVIDIA H200 NVL")
    assert not is_part(PROFILES["H100_SXM"], "NVIDIA H100 PCIe")
    # A MIG slice's derived profile is still its part's; an unknown GPU is nobody's.
    assert is_part(derive_profile(PROFILES["H200_SXM"], 66), H200)
    assert not any(is_part(p, "NVIDIA B300") for p in PROFILES.values())


def test_which_card_ranks() -> None:
    h200 = PROFILES["H200_SXM"]
    assert ranking_gpu({}, h200) is None
    assert ranking_gpu({H100: 9}, h200) is None  # one card: nothing to keep apart
    assert ranking_gpu({H100: 9, "": 3}, h200) is None  # a record that named no GPU
    assert ranking_gpu({H100: 9, H200: 2}, h200) == H200  # the target, though measured less
    assert ranking_gpu({H100: 9, "NVIDIA H20": 4}, h200) == H100  # else the most measured
    assert ranking_gpu({H100: 4, "NVIDIA H20": 4}, None) == "NVIDIA H20"  # ties: the last name
    assert ranking_gpu({H100: 9, H200: 2}, h200, prefer=H100) == H100  # the live run's GPU
    assert ranking_gpu({H100: 9, H200: 2}, h200, prefer="NVIDIA H20") == H200  # not measured


def _genomes() -> tuple[list[Genome], Measurement, Problem]:
    """The fixture's two measured copy genomes and a seed-library copy genome, with one of the
    fixture's H200 measurements as the template of every record."""
    manifest = json.loads((EVIDENCE / "manifest.json").read_text())
    results = json.loads((EVIDENCE / "results.json").read_text())
    measured = {m["genome_hash"]: m for m in results["measurements"] if m["status"] == "ok"}
    docs = [c for c in manifest["candidates"] if c["genome_hash"] in measured]
    problem = Problem.from_dict(manifest["problem"])
    genomes = [Genome.from_dict(d["genome"]) for d in docs[:2]]
    library = json.loads((ROOT / "tsopt" / "data" / "seed_library.json").read_text())
    known = {g.hash for g in genomes}
    genomes.append(next(Genome.from_dict(e["genome"]) for e in library["entries"]
                        if e["space"] == "copy" and e["genome_hash"] not in known))
    return genomes, Measurement.from_dict(measured[docs[0]["genome_hash"]]), problem


# Three genomes; each card prefers another. The third was timed on the H100 only.
RATIOS = {H100: (0.90, 1.10, 1.20), H200: (1.05, 0.95, None)}


@pytest.fixture()
def two_card_study(tmp_path: Path) -> tuple[Store, str, list[Genome]]:
    genomes, template, problem = _genomes()
    store = Store(f"sqlite:///{tmp_path / 'tsopt.db'}")
    name = "two-cards"
    store.create_or_get_study(name, "copy", problem, "sm_90a", "evolve",
                              {"device": {"id": "H200_SXM", "sm_count": 132}})
    for number, genome in enumerate(genomes):
        candidate = store.add_candidate(name, genome, "suggest")
        store.set_trial_number(candidate, number)
        for device, ratios in RATIOS.items():
            if ratios[number] is None:
                continue
            r = ratios[number]
            m = Measurement.from_dict({**template.to_dict(), "genome_hash": genome.hash,
                                       "device": device, "ratio": r, "ratio_lo": r,
                                       "ratio_hi": r})
            assert store.record_measurement(candidate, m, f"run-{device.split()[1]}")
    return store, name, genomes


def test_the_search_ranks_on_the_target_card(
        two_card_study: tuple[Store, str, list[Genome]]) -> None:
    store, name, genomes = two_card_study
    assert store.measured_devices(name) == {H100: 3, H200: 2}
    # Pooled, the H100's favourite would lead; the study is built for an H200, which measured it.
    assert store.ranking_gpu(name) == H200
    assert [r.genome_hash for r in store.ranked_on_card(name)] == [genomes[0].hash,
                                                                   genomes[1].hash]
    winner = name_winner(store, name, 2)
    assert winner is not None and winner.standing.genome_hash == genomes[0].hash
    # A run measuring on the H100 confirms there, and names the H100's winner.
    winner = name_winner(store, name, 2, prefer=H100)
    assert winner is not None and winner.standing.genome_hash == genomes[2].hash


def test_evolve_plans_from_the_cards_figures(
        two_card_study: tuple[Store, str, list[Genome]]) -> None:
    store, name, _genomes_ = two_card_study
    study = open_study(store, name)
    knob = CategoricalDistribution(("a", "b", "c"))
    for number, told in enumerate(RATIOS[H100]):  # each trial told its H100 figure first
        study.add_trial(optuna.trial.create_trial(params={"k": "abc"[number]},
                                                  distributions={"k": knob},
                                                  value=1.0 / told))
    found = card_values(store, name, study, PROFILES["H200_SXM"])
    assert found is not None
    card, values, elsewhere = found
    assert card == H200
    assert values == pytest.approx({0: 1 / 1.05, 1: 1 / 0.95})
    assert elsewhere == {2}
    sampler = EvolveSampler(seed=1)
    sampler.use_card_values(values, elsewhere)
    seen: dict[str, Any] = {}

    def propose(history: list[Any], pending: list[Any]) -> dict[str, Any]:
        seen["history"] = sorted((o.params["k"], o.value) for o in history)
        seen["pending"] = [p["k"] for p in pending]
        return {"k": "a"}

    sampler.evolution.propose = propose  # type: ignore[method-assign]
    study.sampler = sampler
    study.ask({"k": knob})
    assert seen["history"] == [("a", pytest.approx(1 / 1.05)), ("b", pytest.approx(1 / 0.95))]
    assert seen["pending"] == ["c"]  # timed on the H100 only: known, but no parent
    # A run measuring on the H100 (its old best re-timed there: study.new_card) plans from
    # the H100's figures: every trial it timed, none pending.
    moved = card_values(store, name, study, PROFILES["H200_SXM"], prefer=H100)
    assert moved is not None and moved[0] == H100 and not moved[2]
    assert moved[1][2] == pytest.approx(1 / RATIOS[H100][2])


def test_a_study_on_one_card_keeps_its_told_values(tmp_path: Path) -> None:
    genomes, template, problem = _genomes()
    store = Store(f"sqlite:///{tmp_path / 'tsopt.db'}")
    store.create_or_get_study("one", "copy", problem, "sm_90a", "evolve", {})
    candidate = store.add_candidate("one", genomes[0], "suggest")
    store.set_trial_number(candidate, 0)
    assert store.record_measurement(candidate, template, "run")
    assert store.ranking_gpu("one") is None
    assert card_values(store, "one", open_study(store, "one"), PROFILES["H200_SXM"]) is None
