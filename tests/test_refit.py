"""Library entries of other shapes re-fitted to a new one (tsopt.search.refit, the seed
library's ``refit_library`` and ``seed_study``), and ``evolve``'s model learning from the
study's own measurements.

Real parts: the GEMM space, the TS verifier (the full one for the re-fit's verdict, the
predicting one a study screens with), the analytical cost model, the shipped seed library,
Optuna studies in SQLite. The objective told in the learning test is SYNTHETIC (a made-up
function of the genes, named so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.search.cost_model import MIN_FIT, CostModel
from tsopt.search.library import (
    PACKAGED,
    REFIT_ORIGIN,
    LibraryEntry,
    load_library,
    refit_library,
    refit_sources,
    save_library,
    seed_study,
)
from tsopt.search.proposals import Proposer, fixed_genome
from tsopt.search.refit import REFIT_GENES, Refitter
from tsopt.search.samplers import KnobView, make_sampler
from tsopt.verify.verifier import VerdictCache, judge_for, predicting_judge, verify_genome

optuna.logging.set_verbosity(optuna.logging.WARNING)

UNSEEN = Problem.of("gemm", "bf16", m=8, n=6144, k=1024)
"""A decode shape no library entry, study or held-out problem holds."""
SQUARE = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)


@pytest.fixture(scope="module")
def gemm():  # type: ignore[no-untyped-def]
    space = get_space("gemm")
    cache = VerdictCache()
    space.judge = judge_for(space, cache)
    return space, predicting_judge(space, cache)


def _square_entry() -> LibraryEntry:
    """The shipped library's best paired 8192^3 entry that is not stream-K (a 2x1 cluster,
    128-row tiles: a copy's tile and cluster are the big square's)."""
    entries = [e for e in load_library(PACKAGED) if e.space == "gemm" and e.problem == SQUARE
               and e.paired and not e.genome.genes.get("stream_k")]
    assert entries, "the shipped library holds 8192^3 entries"
    return max(entries, key=lambda e: e.ratio)


def test_a_refit_for_an_unseen_shape_rechooses_tile_and_cluster_and_is_legal(gemm) -> None:  # type: ignore[no-untyped-def]
    space, predict = gemm
    entry = _square_entry()
    view = KnobView.of(space, UNSEEN, "evolve")
    model = CostModel(dict(UNSEEN.sizes), device=space.device)
    refitter = Refitter(space, UNSEEN, view, predict, model)
    found = refitter.refit(entry.genome)
    assert found is not None
    source = space.params_of(entry.genome)
    # The model says the square's tile and cluster are wrong here, and the re-fit moves them:
    # a copy keeps a 128-row tile for 8 rows.
    assert found.source_predicted is not None and found.predicted < found.source_predicted
    moved = set(found.changed)
    assert moved & {"tile_m", "tile_n", "cluster", "swap_ab"}, found.changed
    assert found.genome.hash != entry.genome.hash
    # What the model ranks is what was chosen: its best ranked legal combination.
    assert found.rank == 0 or all(
        not refitter.proposer.legal(refitter._completed(d))
        for d in refitter.drafts(refitter.view.decode(refitter.view.encode(source)))[:found.rank])
    # The schedule is the entry's: placements and warp roles kept.
    for knob in ("load.placement", "mma.placement", "consumers", "arrangement", "producer_wg",
                 "advance_on_wait"):
        assert found.params[knob] == source[knob], knob
    assert all(k in REFIT_GENES or k in ("persistent", "raster", "swizzle", "stages",
                                         "producer_regs", "consumer_regs", "load_warp",
                                         "epilogue") for k in moved), found.changed
    # Legal: inside the declared legal set, and valid by the full verifier (TS's search run).
    assert Proposer(space, UNSEEN, view, predict).legal(found.params)
    verdict = verify_genome(found.genome, UNSEEN, space=space)
    assert verdict.valid, verdict.summary()


def test_a_shape_gene_the_model_cannot_improve_is_left_as_the_entry_had_it(gemm) -> None:  # type: ignore[no-untyped-def]
    """Re-fitted to a shape next to its own, an entry's shape genes move only where the model
    says so: each moved gene, put back, is predicted no faster or is outside the legal set."""
    space, predict = gemm
    entry = _square_entry()
    near = Problem.of("gemm", "bf16", m=8192, n=8192, k=6144)
    view = KnobView.of(space, near, "evolve")
    refitter = Refitter(space, near, view, predict)
    found = refitter.refit(entry.genome)
    assert found is not None and found.changed  # (swap-AB and tile_n move here)
    base = view.decode(view.encode(space.params_of(entry.genome)))
    for gene in found.changed:
        if gene not in REFIT_GENES:
            continue
        reverted = refitter._completed(space.coupled({**found.params, gene: base[gene]},
                                                     (gene,)))
        assert (refitter.model.predict([found.params])[0]
                <= refitter.model.predict([reverted])[0] + 1e-9
                or not refitter.proposer.legal(reverted)), gene


def _entry(genome: Any, problem: Problem, ratio: float, source: str) -> LibraryEntry:
    return LibraryEntry(space="gemm", problem=problem, arch="sm_90a", genome=genome,
                        ratio=ratio, paired=True, source=source, ratio_lo=ratio - 0.01,
                        ratio_hi=ratio + 0.01, measured_at="2026-12-04T00:00:00+00:00")


def test_exclude_self_keeps_the_problems_own_entries_out_of_the_refit_source(
        gemm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space, predict = gemm
    square = _square_entry()
    own = _entry(space.genome(tile_m=64, tile_n=64, stages=6, consumers=1, cluster="1x1"),
                 UNSEEN, 1.2, "SYNTHETIC own entry")
    other = _entry(square.genome, SQUARE, 1.05, "SYNTHETIC other shape's entry")
    path = tmp_path / "library.json"
    save_library([own, other], path)
    held = load_library(path)
    # The re-fit's sources never hold the problem's own entries.
    assert [e.genome.hash for e in refit_sources(held, "gemm", UNSEEN, "sm_90a")] == [
        square.genome.hash]
    view = KnobView.of(space, UNSEEN, "evolve")
    said: list[str] = []
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="loo")
    count = seed_study(study, space, view, UNSEEN, "sm_90a", predict, said.append, path=path,
                       exclude_self=True, refit=True)
    attrs = [t.user_attrs for t in study.get_trials(deepcopy=False)]
    assert count == len(attrs) >= 1
    assert "seed library: exclude-self, 1 entry of gemm-bf16-8x6144x1024 left out" in said
    refits = [a for a in attrs if a["origin"] == REFIT_ORIGIN]
    assert refits and all(a["library_refit_genome"] == square.genome.hash
                          and a["library_refit_problem"] == SQUARE.key for a in refits)
    # The genome a driver derives from an enqueued re-fit's parameters is the re-fit's.
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs["origin"] == REFIT_ORIGIN:
            fixed = view.decode(t.system_attrs["fixed_params"])
            assert fixed_genome(space, UNSEEN, fixed).hash == t.user_attrs["library_refit"][
                "genome"]
    # Nothing of the own entry: neither copied nor re-fitted.
    assert own.genome.hash not in {a.get("seed_library_genome") for a in attrs}
    assert own.genome.hash not in {a.get("library_refit_genome") for a in attrs}
    assert any("re-fitted to gemm-bf16-8x6144x1024" in line for line in said)
    # Without exclude-self the own entry is copied, and still no re-fit source.
    again = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="with")
    seed_study(again, space, view, UNSEEN, "sm_90a", predict, said.append, path=path,
               exclude_self=False, refit=True)
    attrs = [t.user_attrs for t in again.get_trials(deepcopy=False)]
    assert own.genome.hash in {a.get("seed_library_genome") for a in attrs}
    assert own.genome.hash not in {a.get("library_refit_genome") for a in attrs}


def test_refit_off_enqueues_the_copies_alone(gemm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space, predict = gemm
    square = _square_entry()
    path = tmp_path / "library.json"
    save_library([_entry(square.genome, SQUARE, 1.05, "SYNTHETIC other shape's entry")], path)
    view = KnobView.of(space, UNSEEN, "evolve")
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="off")
    seed_study(study, space, view, UNSEEN, "sm_90a", predict, lambda _: None, path=path,
               refit=False)
    assert all(t.user_attrs["origin"] != REFIT_ORIGIN for t in study.get_trials())


def test_the_shipped_library_refits_to_an_unseen_shape_in_distinct_genomes(gemm) -> None:  # type: ignore[no-untyped-def]
    space, predict = gemm
    view = KnobView.of(space, UNSEEN, "evolve")
    held = load_library(PACKAGED)
    found = refit_library(held, space, UNSEEN, "sm_90a", view, predict)
    assert 1 <= len(found) <= 4
    hashes = [r.genome.hash for _, r in found]
    assert len(set(hashes)) == len(hashes)
    assert all(e.problem != UNSEEN and r.source.hash == e.genome.hash for e, r in found)
    assert all(predict(r.genome, UNSEEN).valid for _, r in found)


# -- evolve learns from the study's own measurements -------------------------------------------

def synthetic_value(params: dict[str, Any]) -> float:
    """SYNTHETIC relative time: a made-up function of the genes (not a measurement)."""
    return (1.0 + 0.3 * (params.get("tile_n") != 64) + 0.2 * (params.get("stages", 4) < 4)
            + 0.1 * (params.get("cluster") != "1x1"))


@pytest.mark.slow
def test_evolve_refits_its_learned_part_on_the_studys_measurements_as_they_come(
        gemm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space, predict = gemm
    from tsopt.search.evolve import declared_legal

    view = KnobView.of(space, UNSEEN, "evolve")
    url = f"sqlite:///{tmp_path / 'learn.db'}"

    def bound(seed: int) -> Any:
        sampler = make_sampler("evolve", seed, view)
        sampler.bind(space, UNSEEN, declared_legal(space, UNSEEN, predict),
                     Proposer(space, UNSEEN, view, predict).nearest_legal)
        return sampler

    sampler = bound(0)
    study = optuna.create_study(storage=url, study_name="learn", sampler=sampler)
    fitted = []
    for _ in range(MIN_FIT + 3):
        trial = study.ask()
        space.suggest(view.wrap(trial), UNSEEN)
        fitted.append(sampler.evolution.model.fitted)
        study.tell(trial, synthetic_value(trial.params))
    # Each proposal was ranked by a model fitted on every measurement told before it.
    assert fitted == list(range(MIN_FIT + 3))
    model = sampler.evolution.model
    assert model.learned and model.stumps
    analytical = CostModel(dict(UNSEEN.sizes), device=space.device)
    told = [t.params for t in study.trials]
    assert (model.predict(told) != analytical.predict(told)).any()
    # A later run of the study (a resume after `tsopt ingest`) fits on what the study holds
    # before its first proposal.
    later = bound(1)
    resumed = optuna.load_study(study_name="learn", storage=url, sampler=later)
    trial = resumed.ask()
    space.suggest(view.wrap(trial), UNSEEN)
    assert later.evolution.model.fitted == MIN_FIT + 3 and later.evolution.model.learned


def test_the_refit_option_is_on_the_command_line_and_in_the_api() -> None:
    from typer.testing import CliRunner

    import tsopt
    from tsopt.cli import app
    from tsopt.core.errors import UserInputError
    from tsopt.search.request import TuneRequest

    shown = CliRunner().invoke(app, ["tune", "gemm", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "--no-library-refit" in shown.output
    assert TuneRequest(space="gemm", problem=UNSEEN).library_refit is True
    with pytest.raises(UserInputError, match="library_refit='no' .*must be True or False"):
        tsopt.tune("gemm", UNSEEN, trials=1, library_refit="no")
