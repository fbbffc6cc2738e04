"""The copy search space on the real TS verifier: enumeration, funnel, planted mistakes.

Every verdict here comes from constructing the real TS TaskManager on the host
(the TS schedule checks and the exhaustive BFS checker) plus tsopt's checks.
"""

from pathlib import Path

import pytest

import tsopt.search_spaces.copy.config as copy_config
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.registry import get_space
from tsopt.db.store import Store
from tsopt.search.pipeline import CandidatePipeline
from tsopt.search_spaces.copy.config import LOAD_OPS, STORE_OPS, config_of, placement_of
from tsopt.verify.funnel import CountingJudge, compute_funnel, exhaustive_funnel
from tsopt.verify.verifier import VerdictCache, judge_for, verify_genome

PROBLEM = Problem.of("copy", "fp16", rows=4096, cols=4096)


@pytest.fixture(scope="module")
def space():  # type: ignore[no-untyped-def]
    return get_space("copy")


def with_fault(genome: Genome, **fault: object) -> Genome:
    doc = genome.to_dict()
    doc["structure"].update({f"planted.{k}": v for k, v in fault.items()})
    return Genome.from_dict(doc)


# -- placements and enumeration -------------------------------------------------------


def test_placement_render_and_parse_round_trip(space) -> None:  # type: ignore[no-untyped-def]
    for task in ("load", "store"):
        for placement in space.legal_placements(task):
            ops = placement_of(*placement)
            assert copy_config.knobs_of_placement(task, ops) == placement
            assert copy_config.parse_placement_name(copy_config.placement_name(placement)) == placement


def test_enumerator_counts(space) -> None:  # type: ignore[no-untyped-def]
    # 120 loop-body orders x (depth 0 + depths 1, 2 x {none + 3 deferrable sync ops}).
    assert space.placement_count("load") == 120 * (1 + 2 * 4) == 1080
    # Dataflow: the token's producer precedes its consumer in the body: half the orders.
    assert len(space.legal_placements("load")) == 540
    assert len(space.legal_placements("store")) == 540
    enumeration = space.enumerate(PROBLEM)
    assert enumeration.raw == 1080 * 1080 * space.numeric_count(PROBLEM)
    first = [next(enumeration.genomes) for _ in range(50)]
    assert enumeration.dataflow_legal == 50
    assert all(space.dataflow_error(g) is None for g in first)
    assert len({g.hash for g in first}) == 50


@pytest.mark.slow
def test_factorised_funnel_equals_exhaustive_verification_on_a_subspace(
    space,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """On a sub-space small enough to verify every genome, the factorised count is exact."""
    # Smaller tables make another space: an instance of its own (nothing it lists or caches
    # leaks into the other tests' space), whose screens, if anything lists its knobs, the
    # verifier recomputes into tmp_path (the shipped ones are the full tables' screens).
    space = type(space)()
    monkeypatch.setattr(type(space), "screen_file", tmp_path / "copy_screened.json")
    space.judge = judge_for(space, VerdictCache())
    bodies = {
        "load": (
            LOAD_OPS,
            ("try_acquire", "acquire", "coords", "tma_load", "commit"),
            ("coords", "try_acquire", "acquire", "commit", "tma_load"),
        ),
        "store": (
            STORE_OPS,
            ("try_wait", "wait", "read", "store", "release"),
            ("try_wait", "wait", "release", "read", "store"),
        ),
    }
    monkeypatch.setattr(copy_config, "BODIES", bodies)
    small = dict(
        copy_config.NUMERIC_CHOICES,
        stages=(1, 4),
        box_rows=(32,),
        box_cols=(128,),
        store_warps=(4,),
        store_warp=(0, 4),
        load_warp=(4, 8),
        load_regs=(40,),
        store_regs=(168,),
        chunk=(2, 8),
        ctas_per_sm=(0,),
        vector=(8,),
    )
    monkeypatch.setattr(copy_config, "NUMERIC_CHOICES", small)
    monkeypatch.setattr(
        copy_config, "STRUCTURE_CHOICES", dict(copy_config.STRUCTURE_CHOICES, raster=("row",))
    )
    exhaustive = exhaustive_funnel(space, PROBLEM, CountingJudge(space, VerdictCache()), None)
    factorised = compute_funnel(space, PROBLEM, sample=0, cache=VerdictCache())
    assert exhaustive.raw == factorised.raw
    assert exhaustive.dataflow_legal == factorised.dataflow_legal
    assert exhaustive.ts_valid == factorised.ts_valid
    assert exhaustive.tsopt_checked == factorised.tsopt_checked
    assert 0 < factorised.tsopt_checked < factorised.ts_valid < factorised.dataflow_legal
    # The verifier really judged: several distinct TS and tsopt rules fired.
    assert {"ts.missing_commit", "ts.work_before_wait", "tsopt.stage_identity"} <= set(
        exhaustive.rejections
    )


@pytest.mark.slow
def test_full_funnel_and_its_factorisation_check(space) -> None:  # type: ignore[no-untyped-def]
    funnel = compute_funnel(space, PROBLEM, sample=40)
    assert funnel.raw > funnel.dataflow_legal > funnel.ts_valid > funnel.tsopt_checked > 0
    assert funnel.sample_agreement == funnel.sample_size == 40
    assert funnel.verdicts_per_second > 10


# -- the verifier on planted mistakes, each recorded in a real database ---------------

PLANTED = {
    "release_before_consumer_work": (
        lambda s: s.genome(store=(("try_wait", "wait", "release", "read", "store"), 0, "none")),
        "ts",
        "ts.missing_release",
    ),
    "consumer_without_wait": (
        lambda s: s.genome().with_schedule(
            "store",
            [("try_wait", "loop"), ("read", "loop"), ("release", "loop"), ("store", "loop")],
        ),
        "ts",
        "ts.unconsumed_commit",
    ),
    "commit_before_producer_work": (
        lambda s: s.genome(
            load=(("coords", "try_acquire", "acquire", "commit", "tma_load"), 0, "none")
        ),
        "ts",
        "ts.missing_commit",
    ),
    "acquire_without_commit": (
        lambda s: s.genome().with_schedule(
            "load",
            [
                ("coords", "loop"),
                ("try_acquire", "loop"),
                ("acquire", "loop"),
                ("tma_load", "loop"),
            ],
        ),
        "ts",
        "ts.deadlock",
    ),
    "consumer_group_not_matching_store_warps": (
        lambda s: with_fault(s.genome(), consumer_threads=96),
        "ts",
        "ts.group_size",
    ),
    "two_tasks_on_the_same_warps": (
        lambda s: s.genome(load_warp=0, store_warp=0, load_regs=40, store_regs=40),
        "tsopt",
        "tsopt.warp_overlap",
    ),
    "delayed_release_without_advance_on_wait": (
        lambda s: s.genome(store=(STORE_OPS, 1, "release")),
        "tsopt",
        "tsopt.stage_identity",
    ),
    "in_flight_deeper_than_stages": (
        lambda s: s.genome(store=(STORE_OPS, 2, "release"), advance_on_wait=True, stages=1),
        "ts",
        "ts.deadlock",
    ),
    "token_used_before_produced": (
        lambda s: s.genome(store=(("try_wait", "wait", "store", "read", "release"), 0, "none")),
        "dataflow",
        "dataflow",
    ),
}


def test_planted_invalid_schedules_are_rejected_and_recorded(  # type: ignore[no-untyped-def]
    space, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TSOPT_ALLOW_FAULT_GENES", "1")  # one case plants a fault gene
    store = Store(f"sqlite:///{tmp_path / 'tsopt.db'}")
    store.create_or_get_study("planted", "copy", PROBLEM, "sm_90a", "manual", {})
    pipeline = CandidatePipeline(store, space, PROBLEM, "sm_90a", "planted", tmp_path / "artifacts")
    expected = {}
    for name, (make, stage, rule) in PLANTED.items():
        genome = make(space)
        candidate = store.add_candidate("planted", genome, "planted")
        verdict = pipeline.verify(candidate, genome)
        assert not verdict.valid, name
        assert (verdict.stage, verdict.rule) == (stage, rule), (name, verdict.message)
        assert verdict.message
        expected[genome.hash] = (rule, verdict.message)
    store.close()
    reopened = Store(f"sqlite:///{tmp_path / 'tsopt.db'}")
    recorded = {c.genome_hash: c.verdict for c in reopened.candidates("planted")}
    assert len(recorded) == len(PLANTED)
    for genome_hash, (rule, message) in expected.items():
        verdict = recorded[genome_hash]
        assert verdict is not None and not verdict.valid
        assert (verdict.rule, verdict.message) == (rule, message)
    rules = {r.rule for r in reopened.rejections("planted")}
    assert {"ts.missing_release", "ts.missing_commit", "tsopt.warp_overlap"} <= rules
    reopened.close()


def test_valid_schedules_pass(space) -> None:  # type: ignore[no-untyped-def]
    for genome in (
        space.genome(),
        space.seed_genome(PROBLEM),
        space.genome(load=(LOAD_OPS, 2, "none"), stages=4),
        space.genome(store=(STORE_OPS, 2, "release"), advance_on_wait=True, stages=3),
        space.genome(persistent=True, ctas_per_sm=2, raster="col"),
    ):
        verdict = verify_genome(genome, PROBLEM, space=space)
        assert verdict.valid, verdict.summary()
        assert verdict.domain >= int(genome["stages"]) + 2


def test_a_dsl_valued_domain_accepts_what_the_host_domain_accepts(  # type: ignore[no-untyped-def]
    space, monkeypatch
) -> None:
    """The kernel hands TS its domain as a DSL value (so trace time does not walk ``chunk``
    iterations, bench/build_memory): a schedule the host verifier accepts must pass TS's
    trace-time checks with such a domain too, or it would not build. bench/build_memory/
    domain_check.py runs this over every screened placement pair and stage count."""
    import tsopt.search_spaces.copy.kernel as copy_kernel

    host_manager = copy_kernel.TaskManager

    def kernel_manager(**kwargs):  # type: ignore[no-untyped-def]
        # As in the kernel (on_device): every TS check but the exhaustive BFS.
        return host_manager(**{**kwargs, "exhaustive_deadlock_race_check": False})

    class NotAnInt:
        """What TS sees of a DSL value at trace time."""

    screen = space.screens()
    genomes = [space.genome(load=(tuple(b), d, x), stages=2) for b, d, x in screen["load"]]
    genomes += [space.genome(store=(tuple(b), d, x), stages=3, advance_on_wait=True)
                for b, d, x in screen["store"]]
    genomes.append(space.genome(store=(STORE_OPS, 1, "release"), stages=1))  # rejected
    accepted = 0
    for genome in genomes:
        cfg = config_of(genome, PROBLEM)
        try:
            copy_kernel.build_task_manager(cfg, domain=space.verify_domain(genome))
        except ValueError:
            host = False
        else:
            host = True
        monkeypatch.setattr(copy_kernel, "TaskManager", kernel_manager)
        try:
            copy_kernel.build_task_manager(cfg, domain=NotAnInt())
        except ValueError:
            kernel = False
        else:
            kernel = True
        monkeypatch.setattr(copy_kernel, "TaskManager", host_manager)
        assert kernel == host, (genome.short_hash, host, kernel)
        accepted += host
    assert 0 < accepted < len(genomes)


def test_verdicts_are_cached_by_the_genes_that_can_change_them(space) -> None:  # type: ignore[no-untyped-def]
    cache = VerdictCache()
    first = verify_genome(space.genome(chunk=8, box_rows=32), PROBLEM, space=space, cache=cache)
    # Box shape and chunk are invisible to TS: same cached TS outcome.
    second = verify_genome(space.genome(chunk=16, box_rows=64), PROBLEM, space=space, cache=cache)
    third = verify_genome(space.genome(stages=3), PROBLEM, space=space, cache=cache)
    assert (first.cached, second.cached, third.cached) == (False, True, False)
    assert cache.hits == 1


def test_tsopt_checks_resource_feasibility(space) -> None:  # type: ignore[no-untyped-def]
    rules = {
        f.rule
        for f in space.tsopt_checks(space.genome(stages=8, box_rows=128, box_cols=256), PROBLEM)
    }
    assert "tsopt.smem" in rules
    spills = space.genome(
        store_warps=1, box_rows=128, box_cols=128, store_regs=64, store_warp=4, load_warp=0
    )
    assert "tsopt.registers" in {f.rule for f in space.tsopt_checks(spills, PROBLEM)}
    odd = Problem.of("copy", "fp16", rows=4096 + 8, cols=4096)
    assert "tsopt.tile_divisibility" in {f.rule for f in space.tsopt_checks(space.genome(), odd)}


def test_problem_checks(space) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProblemError, match="cols=100 is not a multiple of 64"):
        space.check_problem(Problem.of("copy", "fp16", rows=64, cols=100))
    with pytest.raises(ProblemError, match="not 'gemm'"):
        space.check_problem(Problem.of("gemm", "bf16", m=64, n=64, k=64))


def test_derived_padding_covers_every_warp_group(space) -> None:  # type: ignore[no-untyped-def]
    cfg = config_of(space.genome(store_warps=2, store_warp=4, load_warp=0), PROBLEM)
    owned = {0, 4, 5} | {w for first, n, _ in cfg.padding() for w in range(first, first + n)}
    assert owned == set(range(cfg.block_warps))
    regs = {w: r for first, n, r in cfg.padding() for w in range(first, first + n)}
    assert regs[1] == cfg.load_regs and regs[6] == cfg.store_regs


def test_suggest_and_params_of_are_inverse(space) -> None:  # type: ignore[no-untyped-def]
    import optuna

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(5):
        trial = study.ask()
        genome = space.suggest(trial, PROBLEM)
        assert space.params_of(genome) == trial.params
        study.tell(trial, 1.0)
