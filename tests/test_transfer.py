"""The cross-shape cost model (tsopt.search.transfer): it learns what holds across shapes
and carries it to a shape it has not seen; its file round-trips; the shipped one is the
prior of a GEMM study's cost model, and steps aside where it cannot speak.

The tables are SYNTHETIC (made-up ratios with a planted effect, not measurements); the
judgement on the measured corpus is bench/transfer_model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tsopt.core.corpus import LAUNCH_ISOLATED, CorpusRecord
from tsopt.core.devices import PROFILES, DeviceProfile
from tsopt.core.problem import Problem
from tsopt.search.cost_model import CostModel, analytical_log
from tsopt.search.transfer import (
    MODEL_DEVICE,
    ShapeTable,
    TransferModel,
    fit_tables,
    load_model,
    shape_tables,
    study_prior,
)

SHAPES = ({"m": 4096, "n": 4096, "k": 4096}, {"m": 128, "n": 8192, "k": 8192},
          {"m": 2048, "n": 2048, "k": 16384}, {"m": 8192, "n": 1024, "k": 8192})


def _genes() -> list[dict[str, object]]:
    out = []
    for tile_n, stages, cluster, persistent in itertools.product(
            (64, 128, 256), (2, 4, 6), ("1x1", "2x1"), (False, True)):
        out.append({"tile_m": 128, "tile_n": tile_n, "tile_k": 64, "stages": stages,
                    "consumers": 2, "cluster": cluster, "persistent": persistent,
                    "epilogue": "tma_store", "producer_regs": 24, "consumer_regs": 240})
    return out


def _table(sizes: dict[str, int]) -> ShapeTable:
    """SYNTHETIC: the analytical estimate, and a planted 15 % loss wherever the pipeline has
    two stages (the estimate does not see it)."""
    genes = _genes()
    ratios = [math.exp(-(analytical_log(g, sizes) + (0.15 if g["stages"] == 2 else 0.0)))
              for g in genes]
    return ShapeTable("x".join(str(sizes[d]) for d in "mnk"), sizes, genes, ratios)


def test_an_effect_seen_on_other_shapes_ranks_a_new_one() -> None:
    tables = [_table(s) for s in SHAPES]
    model = fit_tables(tables[:3], rounds=200, rate=0.3)
    held = tables[3]
    predicted = model.predict(held.genes, held.sizes)
    analytical = np.array([analytical_log(g, held.sizes) for g in held.genes])
    residual = predicted - model.slope * analytical
    two = np.array([g["stages"] == 2 for g in held.genes])
    # The planted loss is learned on three shapes and found on the fourth (in part: the
    # line over the estimate takes some of it).
    assert residual[two].mean() - residual[~two].mean() > 0.05
    truth = -np.log(held.ratios)
    assert np.corrcoef(predicted, truth)[0, 1] > np.corrcoef(analytical, truth)[0, 1]


def test_the_model_file_round_trips(tmp_path: Path) -> None:
    tables = [_table(s) for s in SHAPES[:2]]
    model = fit_tables(tables, rounds=10)
    path = model.save(tmp_path / "model.json")
    again = load_model(path)
    assert isinstance(again, TransferModel) and again.shapes == model.shapes
    held = _table(SHAPES[2])
    assert np.allclose(again.predict(held.genes, held.sizes), model.predict(held.genes,
                                                                             held.sizes))
    assert load_model(tmp_path / "absent.json") is None


def test_shape_tables_take_each_genomes_median_over_its_passes() -> None:
    problem = Problem.of("gemm", "bf16", m=256, n=256, k=256)
    genome = {"structure": {"cluster": "1x1"}, "numeric": {"tile_m": 128, "tile_n": 128,
                                                           "tile_k": 64}}

    def record(ratio: float, genome_hash: str, paired: bool = True, device: str = "SYNTHETIC",
               launch: str = LAUNCH_ISOLATED) -> CorpusRecord:
        return CorpusRecord(
            space="gemm", problem=problem, arch="sm_90a", genome_hash=genome_hash,
            genome=genome, status="ok", ratio=ratio, ratio_lo=ratio - 0.01 if paired else None,
            ratio_hi=ratio + 0.01 if paired else None, rounds=8, paired=paired,
            median_us=1.0, baseline_median_us=1.0, baseline_name="SYNTHETIC",
            device=device, driver="", launch=launch, measured_at=None,
            pass_id="p", machine="SYNTHETIC", experiment="x", source="x", kind="bundle-results",
            order=0)

    # another card's and another launch mode's figures are left out: they rank differently
    records = [record(0.9, "a"), record(1.0, "a"), record(1.2, "a"), record(0.5, "b"),
               record(2.0, "b", paired=False), record(3.0, "b", device="ANOTHER SYNTHETIC"),
               record(3.0, "b", launch="graph")]
    (table,) = shape_tables(records, min_genomes=2, gpu="SYNTHETIC")
    assert table.ratios == [1.0, 0.5] and table.genes[0] == {"cluster": "1x1", "tile_m": 128,
                                                             "tile_n": 128, "tile_k": 64}
    assert shape_tables(records, min_genomes=3, gpu="SYNTHETIC") == []
    assert shape_tables(records, min_genomes=1) == []  # none on the model's card


def test_a_cost_model_with_a_prior_ranks_by_it_then_fits_its_line_over_it() -> None:
    """Before :data:`MIN_FIT` measurements the prior ranks alone; after, the study's line is
    fitted over the prior, not over the analytical estimate (SYNTHETIC values: twice the
    prior, which the analytical estimate does not see)."""
    sizes = SHAPES[0]
    genes = _genes()

    def prior(batch: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return np.array([0.1 * float(g["stages"]) - 0.05 * float(g["tile_n"] == 256)
                         for g in batch])

    model = CostModel(sizes, prior=prior)
    assert np.array_equal(model.predict(genes), prior(genes))
    assert not np.array_equal(CostModel(sizes).predict(genes), prior(genes))
    values = [math.exp(2.0 * v) for v in prior(genes)]
    model.fit(genes, values)
    assert model.learned and model.line[1] == pytest.approx(2.0, rel=1e-6)
    assert np.allclose(model.predict(genes), np.log(values), atol=1e-6)


def _device(name: str) -> DeviceProfile:
    return PROFILES[name]


@pytest.fixture(scope="module")
def gemm_space():  # type: ignore[no-untyped-def]
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for

    space = get_space("gemm")
    space.judge = judge_for(space)
    return space


def test_a_gemm_study_on_the_corpus_s_device_starts_from_the_shipped_model(
        gemm_space) -> None:  # type: ignore[no-untyped-def]
    """The shipped model (``tsopt corpus products``) is what an evolve study of a GEMM it
    was not fitted on starts from: the survey is its best family first, as it predicts."""
    from tsopt.search.evolve import declared_legal
    from tsopt.search.evolve_sampler import evolve_sampler
    from tsopt.search.proposals import Proposer
    from tsopt.search.samplers import KnobView
    from tsopt.verify.verifier import predicting_judge

    model = load_model()
    assert model is not None and len(model.shapes) >= 10 and model.rows > 1000
    problem = Problem.of("gemm", "bf16", m=24, n=5120, k=3072)  # no corpus shape
    assert problem.key not in model.shapes
    prior, said = study_prior("transfer", "gemm", problem, _device(MODEL_DEVICE), False)
    assert prior is not None and said.startswith("the cross-shape model (")
    view = KnobView.of(gemm_space, problem, "evolve")
    sampler = evolve_sampler(view, 3)
    judge = predicting_judge(gemm_space)
    legal = declared_legal(gemm_space, problem, judge)
    sampler.bind(gemm_space, problem, legal,
                 Proposer(gemm_space, problem, view, judge).nearest_legal, prior)
    survey = sampler.evolution.surveyed()
    assert len(survey) >= 4
    ranked = sampler.evolution.model.predict(survey)
    assert np.array_equal(ranked, model.predict(survey, dict(problem.sizes)))
    assert list(ranked) == sorted(ranked)


def test_the_prior_steps_aside_where_the_model_cannot_speak() -> None:
    model = load_model()
    assert model is not None
    fitted_on = Problem.of("gemm", "bf16", **dict(zip("mnk", (
        int(v) for v in model.shapes[0].rsplit("-", 1)[1].split("x")), strict=True)))
    assert fitted_on.key == model.shapes[0]
    h200 = _device(MODEL_DEVICE)
    copy = Problem.of("copy", "fp16", rows=4096, cols=4096)
    cases = {
        "analytical": study_prior("analytical", "gemm", fitted_on, h200, False),
        "copy": study_prior("transfer", "copy", copy, h200, False),
        "other GPU": study_prior("transfer", "gemm", fitted_on, _device("H100_PCIE"), False),
        "leave-one-shape-out": study_prior("transfer", "gemm", fitted_on, h200, True),
        "own shape, kept": study_prior("transfer", "gemm", fitted_on, h200, False),
    }
    assert all(prior is None for prior, _ in list(cases.values())[:4])
    assert "--cost-prior analytical" in cases["analytical"][1]
    assert "H100_PCIE" in cases["other GPU"][1]
    assert "leave-one-shape-out" in cases["leave-one-shape-out"][1]
    # Not left out: the problem's own measurements are in the model, and no run asked to
    # leave them out.
    assert cases["own shape, kept"][0] is not None
    with pytest.raises(ValueError, match="'bogus'"):
        study_prior("bogus", "gemm", fitted_on, h200, False)
