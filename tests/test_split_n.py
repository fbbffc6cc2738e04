"""Consumer warpgroups that split the tile along N (``arrangement='split_n'``) and 192-row
tiles: the real TS verifier, tsopt's checks, a real sm_90a compile, and Optuna studies
recorded before the two knobs grew resuming under the new space (a real SQLite study).

Correctness on a GPU is not shown here: ``bench/gemm_property`` builds N-split pairs
(``--knob arrangement=split_n``) for an H200 run.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

optuna = pytest.importorskip("optuna")

from optuna.distributions import CategoricalDistribution  # noqa: E402

from tests.test_hopper_gemm import compile_ptx  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search.cost_model import features, gemm_estimate  # noqa: E402
from tsopt.search.samplers import KnobView, make_sampler  # noqa: E402
from tsopt.verify.verifier import VerdictCache, judge_for, verify_genome  # noqa: E402

MID = Problem.of("gemm", "bf16", m=1536, n=3072, k=2048)
"""bench/where_space_loses's 'mid': cuBLAS runs a 192x192 coopB tile there."""
RAGGED = Problem.of("gemm", "bf16", m=3000, n=2008, k=1000)
OLD_CHOICES = {"tile_m": (64, 128, 256), "arrangement": ("cooperative", "separate")}
"""The two knobs' choices before they grew, as recorded studies hold them."""


@pytest.fixture(scope="module")
def space() -> Any:
    space = get_space("gemm")
    space.judge = judge_for(space)
    return space


def test_split_n_sizes_are_per_warpgroup(space) -> None:
    cfg = space.config(space.genome(tile_m=192, tile_n=192, arrangement="split_n"), MID)
    assert (cfg.wg_tile_m, cfg.wg_tile_n, cfg.m_repeats) == (192, 96, 3)
    assert cfg.acc_registers == 144 and (cfg.epi_cols, cfg.epi_subtiles) == (32, 3)
    assert cfg.cta_tile_m == 192 and cfg.tiles_m * cfg.tiles_n == 8 * 16  # one wave of 128
    assert cfg.chains == 1 and cfg.threads == 384
    seed = space.config(space.seed_genome(MID), MID)  # the M split keeps its extents
    assert (seed.wg_tile_m, seed.wg_tile_n, seed.epi_cols) == (64, 256, 64)


def _wgmma_shapes(ptx: str) -> set[str]:
    return set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k16)", ptx))


def test_a_192_by_128_n_split_passes_and_compiles_to_m64n64_wgmma(space) -> None:
    genome = space.genome(tile_m=192, tile_n=128, arrangement="split_n")
    verdict = verify_genome(genome, MID, space=space, cache=VerdictCache())
    assert verdict.valid, verdict.summary()
    ptx = compile_ptx(space, genome, MID)
    assert _wgmma_shapes(ptx) == {"m64n64k16"}  # each warpgroup over half the columns, not m64n128
    assert ".reqntid 384, 1, 1" in ptx and ".local" not in ptx


@pytest.mark.slow
def test_n_split_tma_store_on_a_ragged_problem_compiles_to_bulk_stores(space) -> None:
    genome = space.genome(tile_m=128, tile_n=256, arrangement="split_n", epilogue="tma_store",
                          stages=3)
    verdict = verify_genome(genome, RAGGED, space=space, cache=VerdictCache())
    assert verdict.valid, verdict.summary()
    ptx = compile_ptx(space, genome, RAGGED)
    assert _wgmma_shapes(ptx) == {"m64n128k16"}
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx and "st.global" not in ptx


def test_a_192_row_m_split_is_rejected_by_tile_shape(space) -> None:
    verdict = verify_genome(space.genome(tile_m=192, tile_n=128), MID, space=space,
                            cache=VerdictCache())
    assert (verdict.valid, verdict.rule) == (False, "tsopt.tile_shape")
    assert "96 rows each" in verdict.message and "split_n" in verdict.message


@pytest.mark.parametrize(("genes", "rule", "words"), [
    ({"arrangement": "split_n", "consumers": 1}, "tsopt.arrangement", "needs 2 consumer"),
    ({"arrangement": "split_n", "tile_n": 80}, "tsopt.epilogue_coverage", "40 columns"),
    ({"arrangement": "split_n", "tile_m": 256, "tile_n": 256, "stages": 2},
     "tsopt.registers", "256x128 per warpgroup"),
    # cuBLAS's coopB tile: 144 accumulator registers, which this kernel spills (checks.py).
    ({"arrangement": "split_n", "tile_m": 192, "tile_n": 192},
     "tsopt.registers", "192x96 per warpgroup"),
])
def test_n_splits_the_kernel_cannot_compute_are_named(space, genes, rule, words) -> None:
    findings = space.tsopt_checks(space.genome(**genes), MID)
    named = [f for f in findings if f.rule == rule]
    assert named and words in named[0].message, findings


def test_recorded_genomes_keep_their_hashes(space) -> None:
    # Hashes computed by the space before split_n and 192 existed (main at d31c27b).
    assert space.seed_genome(MID).hash.startswith("6c2f4a73b6129d29")
    assert space.genome(arrangement="separate", tile_m=64, tile_n=128).hash.startswith(
        "fb42fd9c91d42d72")
    assert space.genome(tile_m=256, tile_n=128, persistent=True, stream_k=True).hash.startswith(
        "37712090f96c4221")


def test_the_cost_model_reads_the_n_split(space) -> None:
    genes = dict(space.genome(tile_m=192, tile_n=192, arrangement="split_n").genes)
    assert features(genes, MID.sizes)["arrangement=split_n"] == 1.0
    # Each warpgroup issues m64n96: a narrower wgmma than the M split's m64n192.
    split_n = gemm_estimate(genes, MID.sizes)
    m_split = gemm_estimate({**genes, "arrangement": "cooperative", "tile_m": 256}, MID.sizes)
    assert split_n is not None and m_split is not None
    assert split_n.terms["mma_eff"] < m_split.terms["mma_eff"]


# -- Optuna: a study recorded before the knobs grew resumes -----------------------------------


def _old_trial(view: KnobView, params: dict[str, Any]) -> Any:
    """A finished trial as the space before split_n recorded it: every knob under its own name,
    ``tile_m`` and ``arrangement`` with their old choices."""
    dists = {}
    for knob in view.knobs:
        if knob.name not in params:
            continue
        dists[knob.name] = CategoricalDistribution(OLD_CHOICES.get(knob.name, knob.choices))
    return optuna.trial.create_trial(params={n: params[n] for n in dists},
                                     distributions=dists, value=1.0)


@pytest.mark.parametrize("sampler", ["tpe", "evolve"])
def test_a_study_recorded_before_the_knobs_grew_resumes(space, tmp_path, sampler) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path / 'old.db'}"
    view = KnobView.of(space, MID, sampler)
    old = optuna.create_study(study_name="old", storage=storage)
    recorded = [space.params_of(space.genome(tile_m=m, arrangement=a, tile_n=128))
                for m, a in ((64, "cooperative"), (256, "separate"), (128, "cooperative"))]
    for params in recorded:
        old.add_trial(_old_trial(view, params))

    resumed = optuna.load_study(study_name="old", storage=storage,
                                sampler=make_sampler(sampler, 0, view))
    # Why the new knobs need names of their own: the old name with the new choices is refused.
    with pytest.raises(ValueError, match="dynamic value space"):
        resumed.ask().suggest_categorical("tile_m", [64, 128, 192, 256])
    for _ in range(3):
        trial = resumed.ask()
        genome = space.suggest(view.wrap(trial), MID)
        assert genome["tile_m"] in (64, 128, 192, 256)
        assert {"tile_m.v2", "arrangement.v2"} <= set(trial.params)
        assert trial.params["tile_m.v2"] == genome["tile_m"]
        resumed.tell(trial, 1.0)
    # The recorded trials still read as the genes they were.
    first = resumed.trials[0]
    assert view.decode(first.params)["tile_m"] == 64
    assert view.decode(first.params)["arrangement"] == "cooperative"


def test_warm_starts_enqueue_the_new_parameter_names(space, tmp_path) -> None:
    view = KnobView.of(space, MID, "tpe")
    genome = space.genome(tile_m=192, tile_n=192, arrangement="split_n")
    encoded = view.encode(space.params_of(genome))
    assert encoded["tile_m.v2"] == 192 and encoded["arrangement.v2"] == "split_n"
    assert "tile_m" not in encoded and "arrangement" not in encoded
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'warm.db'}")
    study.enqueue_trial(encoded)
    assert space.suggest(view.wrap(study.ask()), MID) == genome
