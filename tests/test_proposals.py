"""Proposals legal by construction (tsopt/search/proposals.py), the verdict cache shared
across studies through the database, and the TS checker memoised by its schedule key.

Everything here is real: the GEMM space's shipped screens, the TS verifier on the host
(skeleton + exhaustive BFS checker), tsopt's checks, a SQLite database through the Store.
Knobs are restricted (as ``--knob`` does) to one consumer warpgroup and one tile per CTA where
a test verifies many genomes: the two-warpgroup and persistent BFS runs cost seconds each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

optuna = pytest.importorskip("optuna")

from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.db.store import Store  # noqa: E402
from tsopt.search.proposals import Proposer  # noqa: E402
from tsopt.search.samplers import KnobView, make_sampler  # noqa: E402
from tsopt.verify.verifier import (  # noqa: E402
    VerdictCache,
    judge_for,
    judged_key,
    verify_genome,
)

PROBLEM = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
CHEAP = {"consumers": (1,), "persistent": (False,)}
"""Restrictions that keep each verdict under a second (one consumer warpgroup, no tile loop)."""


@pytest.fixture(scope="module")
def gemm() -> Any:
    space = get_space("gemm")
    space.judge = judge_for(space)
    space.knobs(PROBLEM)
    return space


def proposals(space: Any, sampler: str, n: int, cache: VerdictCache, seed: int = 0,
              restrict: dict[str, tuple[Any, ...]] | None = None) -> list[Any]:
    """``n`` proposals of ``sampler`` through the Proposer, each verified with ``cache`` and
    told (valid: a digest of the genome, else a failure) as a study would."""
    view = KnobView.of(space, PROBLEM, sampler, restrict)
    proposer = Proposer(space, PROBLEM, view, judge_for(space, cache))
    study = optuna.create_study(sampler=make_sampler(sampler, seed, view))
    out = []
    for _ in range(n):
        trial = study.ask()
        proposal = proposer.propose(trial)
        verdict = verify_genome(proposal.genome, PROBLEM, space=space, cache=cache)
        out.append((proposal, verdict, proposer))
        if verdict.valid:
            study.tell(trial, int(proposal.genome.hash[:6], 16) / 16**6)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return out


def test_verdicts_are_shared_across_studies_through_the_database(gemm: Any, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'shared.db'}")
    try:
        first = VerdictCache(judged=store)
        judged = proposals(gemm, "random", 6, first, restrict=CHEAP)
        assert first.verified > 6  # the proposals' own factor verdicts are kept too
        assert store.judged_count("gemm") == first.verified
        # A second study, in a fresh process's memory, over the same database: every verdict
        # it needs was judged by the first, so it judges nothing itself.
        second = VerdictCache(judged=store)
        again = proposals(gemm, "random", 6, second, restrict=CHEAP)
        assert second.verified == 0 and second.misses == 0
        assert second.judged_hits >= 6
        assert [p.genome.hash for p, _, _ in again] == [p.genome.hash for p, _, _ in judged]
        for (_, before, _), (_, after, _) in zip(judged, again, strict=True):
            assert after.cached
            assert (after.valid, after.stage, after.rule) == (before.valid, before.stage,
                                                              before.rule)
    finally:
        store.close()


def test_whole_verdict_key_names_genome_problem_arch_and_version(gemm: Any) -> None:
    genome = gemm.seed_genome(PROBLEM)
    key = judged_key(gemm, genome, PROBLEM)
    other = judged_key(gemm, genome, Problem.of("gemm", "bf16", m=4096, n=4096, k=4096))
    assert key.genome_hash == genome.hash and key.arch == "sm_90a"
    assert key.problem_key == PROBLEM.key and other.problem_key != key.problem_key
    assert len(key.tool_version) == 16 and key.tool_version == other.tool_version


def test_ts_checker_is_memoised_by_its_schedule_key(gemm: Any) -> None:
    base = gemm.genome(consumers=1, tile_n=128, stages=4)
    variant = gemm.genome(consumers=1, tile_n=128, stages=4, consumer_regs=240, tile_m=64)
    assert gemm.verdict_key(base, PROBLEM) != gemm.verdict_key(variant, PROBLEM)
    assert gemm.ts_schedule_key(base, PROBLEM) == gemm.ts_schedule_key(variant, PROBLEM)
    cache = VerdictCache()
    first = verify_genome(base, PROBLEM, space=gemm, cache=cache)
    assert (cache.bfs_runs, cache.bfs_hits) == (1, 0)
    second = verify_genome(variant, PROBLEM, space=gemm, cache=cache)
    assert (cache.bfs_runs, cache.bfs_hits) == (1, 1)  # TS's other checks ran, the BFS not
    unmemoised = verify_genome(variant, PROBLEM, space=gemm, cache=VerdictCache())
    assert first.valid and (second.valid, second.stage, second.rule) == (
        unmemoised.valid, unmemoised.stage, unmemoised.rule)
    # Every numeric variant the checker does not see gets the verdict a fresh cache gives.
    for genes in ({"producer_regs": 56}, {"tile_k": 128, "consumer_regs": 160},
                  {"tile_m": 256, "tile_k": 32}):
        memoised = verify_genome(gemm.genome(consumers=1, tile_n=128, stages=4, **genes),
                                 PROBLEM, space=gemm, cache=cache)
        fresh = verify_genome(gemm.genome(consumers=1, tile_n=128, stages=4, **genes),
                              PROBLEM, space=gemm, cache=VerdictCache())
        assert (memoised.valid, memoised.stage, memoised.rule) == (fresh.valid, fresh.stage,
                                                                   fresh.rule)
    assert cache.bfs_runs == 1


@pytest.mark.parametrize("sampler", ["random", "tpe", "cmaes", "grid"])
def test_every_sampler_proposes_inside_the_declared_legal_set(gemm: Any, sampler: str) -> None:
    restrict = dict(CHEAP)
    if sampler == "grid":  # a grid small enough to build: the rest fixed at one value
        for knob in gemm.knobs(PROBLEM):
            if knob.name not in ("stages", "tile_n", "advance_on_wait", "load.placement"):
                restrict.setdefault(knob.name, (knob.choices[0],))
    made = proposals(gemm, sampler, 3, VerdictCache(), seed=1, restrict=restrict)
    for proposal, _, proposer in made:
        assert proposal.legal and proposer.legal(proposal.params), proposal.to_dict()
        view_choices = proposer.choices
        for name, value in proposal.params.items():
            assert value in view_choices[name]  # restrictions hold after the repair


def test_most_proposals_pass_the_real_verifier(gemm: Any) -> None:
    made = proposals(gemm, "random", 20, VerdictCache(), seed=3, restrict=CHEAP)
    valid = sum(verdict.valid for _, verdict, _ in made)
    repaired = sum(bool(p.repaired) for p, _, _ in made)
    assert repaired >= 5  # random proposals are mostly illegal as drawn: the repair works
    assert valid >= 16, [(v.stage, v.rule) for _, v, _ in made if not v.valid]


def test_a_resumed_trial_gets_the_same_genome(gemm: Any) -> None:
    view = KnobView.of(gemm, PROBLEM, "random", CHEAP)
    study = optuna.create_study(sampler=make_sampler("random", 5, view))
    trial = study.ask()
    first = Proposer(gemm, PROBLEM, view).propose(trial)
    again = Proposer(gemm, PROBLEM, view).propose(optuna.trial.Trial(study, trial._trial_id))
    assert again.genome.hash == first.genome.hash
    if first.repaired:
        assert study.trials[0].user_attrs["repaired"] == first.repaired


def test_a_second_study_in_the_database_judges_nothing_already_judged(tmp_path: Path) -> None:
    """Two ``tsopt tune`` studies (the real driver, GPU-less: built candidates go to the
    bundle) on one SQLite database: the second proposes the same genomes (same seed) and
    finds every verdict it needs, the proposals' factor verdicts included, in the database."""
    import io

    from rich.console import Console

    from tsopt.search.driver import run_tune
    from tsopt.search.request import TuneRequest

    url = f"sqlite:///{tmp_path / 'tune.db'}"
    problem = Problem.of("copy", "fp16", rows=256, cols=512)

    def tune(study: str) -> int:
        request = TuneRequest(
            space="copy", problem=problem, trials=3, sampler="random", db_url=url, study=study,
            bundle_dir=tmp_path / "bundles" / study, cache_dir=tmp_path / "artifacts",
            knobs=("layout=4@0,load4,40/168", "persistent=false"), measure="never",
            warm_start=False)
        return run_tune(request, Console(file=io.StringIO(), width=200))

    tune("first")
    with Store(url) as store:
        judged = store.judged_count("copy")
        first = {c.genome_hash for c in store.candidates("first")}
    assert judged >= 3
    tune("second")
    with Store(url) as store:
        assert store.judged_count("copy") == judged  # nothing judged anew
        second = store.candidates("second")
        assert {c.genome_hash for c in second} == first
        assert all(c.verdict is not None for c in second)


@pytest.mark.slow
def test_a_prediction_skips_the_exhaustive_search_and_is_never_recorded(gemm: Any) -> None:
    """What the searching process judges itself (proposals, library genomes) goes through
    ``predicting_judge``: TS's exhaustive search, seconds on a persistent two-warpgroup
    pipeline, is skipped where it is not memoised, and the prediction is kept apart from the
    verdicts: the full judge after it still searches, and records."""
    import time

    from tsopt.verify.verifier import predicting_judge

    real = VerdictCache()
    predict = predicting_judge(gemm, real)
    genome = gemm.seed_genome(PROBLEM).replace(persistent=True)
    key = judged_key(gemm, genome, PROBLEM)
    start = time.process_time()
    predicted = predict(genome, PROBLEM)
    predicting = time.process_time() - start
    assert predicted.valid
    assert real.find_judged(key) is None and real.bfs_runs == 0 and real.verified == 0
    start = time.process_time()
    full = judge_for(gemm, real)(genome, PROBLEM)
    searching = time.process_time() - start
    assert full.valid and real.bfs_runs >= 1 and real.find_judged(key) is not None
    assert searching > 3 * predicting, (searching, predicting)
    # Once the real memo holds the full verdict, a prediction reads it whole.
    again = predict(genome, PROBLEM)
    assert again.valid and again.cached


def test_a_search_cut_by_its_bound_says_so_in_a_valid_verdict(gemm: Any, monkeypatch) -> None:
    """TS's exhaustive checker stops at a bound of explored states and, with no counterexample
    by then, passes the schedule while it prints a warning nobody reads. A verdict of such a
    search is valid but carries the note, with the bound, through the memo and the database's
    whole verdicts; a search that finished carries none. The bound is part of every key, so a
    verdict under one bound is never served under another."""
    from tsopt.core.errors import UserInputError
    from tsopt.verify.verifier import (
        TS_MAX_STATES_ENV,
        search_bound,
        ts_max_states,
        verdict_cache_key,
    )

    deep = gemm.genome(consumers=2, tile_n=128, stages=4)  # two warpgroups: > 2,000 states
    shallow = gemm.genome(consumers=1, tile_n=128, stages=4, split_k=2)  # ~600 states
    default_key = verdict_cache_key(gemm, deep, PROBLEM)
    monkeypatch.setenv(TS_MAX_STATES_ENV, "2000")
    assert ts_max_states() == 2000
    assert default_key.endswith("|states=ts")  # TS's own bound, named
    assert verdict_cache_key(gemm, deep, PROBLEM) == default_key.replace("=ts", "=2000")
    cache = VerdictCache()
    cut = verify_genome(deep, PROBLEM, space=gemm, cache=cache)
    assert cut.valid and search_bound(cut) == 2000 and "not a complete proof" in cut.message
    # A numeric variant of the same schedule is served by the memo: still marked as cut.
    variant = verify_genome(deep.replace(consumer_regs=216), PROBLEM, space=gemm, cache=cache)
    assert cache.bfs_hits == 1 and search_bound(variant) == 2000
    # So is the whole verdict, read back from a database.
    with Store("sqlite://") as store:
        backed = VerdictCache(judged=store)
        verify_genome(deep, PROBLEM, space=gemm, cache=backed)
        stored = store.find_judged(judged_key(gemm, deep, PROBLEM))
        assert stored is not None and search_bound(stored) == 2000
    complete = verify_genome(shallow, PROBLEM, space=gemm, cache=cache)
    assert complete.valid and complete.message is None and search_bound(complete) is None
    # A TS gate outcome read back from a stored verdict: a TS rejection or a valid verdict
    # (whose note says whether the search was cut), never a tsopt rejection, which passed TS
    # but does not say whether its search was cut.
    from tsopt.core.records import Verdict

    stored = {"ok": cut, "tsopt": Verdict.reject(deep.hash, "tsopt", "tsopt.smem", "too big")}
    for stage, kept in stored.items():
        reader = VerdictCache(lookup=lambda _space, _key, kept=kept: kept)
        outcome = reader.get("gemm", "any key")
        assert (outcome is not None, getattr(outcome, "bounded", None)) == (
            (True, 2000) if stage == "ok" else (False, None))
    for bad in ("0", "-5", "many"):
        monkeypatch.setenv(TS_MAX_STATES_ENV, bad)
        with pytest.raises(UserInputError, match=f"{TS_MAX_STATES_ENV}='{bad}'"):
            ts_max_states()


def test_exhaustive_searches_are_shared_through_the_database(gemm: Any, monkeypatch,
                                                            tmp_path: Path) -> None:
    """A build worker's exhaustive TS search comes back with its evaluation; the driver keeps
    it in the database; a later worker (another process, another study, another problem)
    verifying a genome of the same schedule is sent it and searches nothing, and its verdict
    is the one a fresh verifier gives."""
    from tsopt.core.dsl_env import DEFAULT_ARCH
    from tsopt.search import pipeline
    from tsopt.search.pipeline import EvaluateRequest, Evaluation, evaluate, space_target
    from tsopt.verify.verifier import (
        TS_MAX_STATES_ENV,
        search_bound,
        search_keys,
        search_version,
    )

    monkeypatch.setenv(TS_MAX_STATES_ENV, "2000")  # two warpgroups: cut at 2,000 states, fast
    deep = gemm.genome(consumers=2, tile_n=128, stages=4)
    variant = deep.replace(tile_k=32, consumer_regs=216)  # numeric genes the search never sees
    other = Problem.of("gemm", "bf16", m=4096, n=1024, k=2048)

    def request(genome: Any, problem: Problem, known: tuple = ()) -> EvaluateRequest:
        return EvaluateRequest(space_target=space_target("gemm"), genome_json=genome.to_json(),
                               problem=problem.to_dict(), arch=DEFAULT_ARCH,
                               cache_dir=str(tmp_path / "cache"), known_searches=known,
                               build=False)

    monkeypatch.setattr(pipeline, "_VERDICTS", {})  # a fresh worker process
    first = Evaluation.from_dict(evaluate(request(deep, PROBLEM)).to_dict())
    assert first.verdict.valid and len(first.searches) == 1
    assert first.searches[0].bounded == 2000 and first.searches[0].error is None
    with Store(f"sqlite:///{tmp_path / 'searches.db'}") as store:
        driver = VerdictCache(searches=store)
        for search in first.searches:
            driver.keep_search(search)
        assert store.search_count() == 1
        ((_, schedule),) = search_keys(gemm, variant, other)
        assert schedule == first.searches[0].schedule  # numeric genes and problem: not in it
        known = tuple(x.to_dict() for x in store.find_searches(
            "gemm", schedule, search_version()))
        assert len(known) == 1
    monkeypatch.setattr(pipeline, "_VERDICTS", {})  # another worker, another study
    second = evaluate(request(variant, other, known))
    assert second.searches == ()  # nothing searched: the database's search served
    fresh = verify_genome(variant, other, space=gemm, cache=VerdictCache())
    assert (second.verdict.valid, second.verdict.stage, second.verdict.rule) == (
        fresh.valid, fresh.stage, fresh.rule)
    assert second.verdict.valid and search_bound(second.verdict) == search_bound(fresh) == 2000


def test_a_database_that_cannot_keep_a_search_never_changes_the_verdict(gemm: Any,
                                                                        monkeypatch) -> None:
    """The search is recorded from inside TS's checker: a backing that fails (a read-only or
    busy database) costs a later search, never this genome's verdict."""
    from tsopt.verify.verifier import TS_MAX_STATES_ENV

    class ReadOnly:
        def find_search(self, *key: str) -> None:
            return None

        def record_search(self, search: Any) -> None:
            raise RuntimeError("attempt to write a readonly database")

    monkeypatch.setenv(TS_MAX_STATES_ENV, "2000")
    deep = gemm.genome(consumers=2, tile_n=128, stages=4)
    cache = VerdictCache(searches=ReadOnly())
    verdict = verify_genome(deep, PROBLEM, space=gemm, cache=cache)
    fresh = verify_genome(deep, PROBLEM, space=gemm, cache=VerdictCache())
    assert (verdict.valid, verdict.stage, verdict.rule) == (fresh.valid, fresh.stage, fresh.rule)
    assert verdict.valid and cache.unsaved_searches == 1
    again = verify_genome(deep.replace(consumer_regs=216), PROBLEM, space=gemm, cache=cache)
    assert again.valid and cache.bfs_hits == 1  # memoised here all the same
