"""The Hopper TS GEMM space on the CPU: the real TS verifier, tsopt's checks, real sm_90a compiles.

No GPU here: kernels are compiled for sm_90a with ``cute.compile`` and their
PTX is inspected for what each knob must produce; correctness on hardware is
``bench/gemm_h200/gemm_h200.py`` (results beside it).
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search_spaces.gemm.checks import async_consumer_findings, gemm_checks  # noqa: E402
from tsopt.search_spaces.gemm.config import MMA_OPS, GemmConfig  # noqa: E402
from tsopt.verify.verifier import VerdictCache, run_ts_checks, verify_genome  # noqa: E402

BIG = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
RAGGED = Problem.of("gemm", "fp16", m=3000, n=2008, k=1000)
RAGGED_BF16 = Problem.of("gemm", "bf16", m=3000, n=2008, k=1000)
BODY = MMA_OPS  # try_wait, wait, read_stage, wgmma, wgmma_wait, release
RELEASE_FIRST = ("try_wait", "wait", "read_stage", "wgmma", "release", "wgmma_wait")


@pytest.fixture(scope="module")
def space():
    return get_space("gemm")


def verdict(space, genome: Genome, problem: Problem = BIG):
    return verify_genome(genome, problem, space=space, cache=VerdictCache())


# -- the planted hazards of the asynchronous wgmma consumer ------------------------------


def test_release_before_the_wgmma_wait_is_rejected(space) -> None:
    # One batch in flight, but the loop releases before wait_group(1): the stage of the
    # batch just issued... no: the *oldest* held stage, whose batch is still unretired.
    g = space.genome(mma=(RELEASE_FIRST, 1, "release", 1, "tail"))
    ts = run_ts_checks(space, g, BIG, space.verify_domain(g))
    assert ts.valid, "TS accepts it: it sees the wgmma as a finished producer work"
    v = verdict(space, g)
    assert not v.valid and v.stage == "tsopt" and v.rule == "tsopt.async_release"
    assert "still in flight" in v.message


def test_release_before_the_wait_with_nothing_in_flight_is_rejected_by_ts(space) -> None:
    # Without a head batch the wait_group after the release is consumer work outside
    # any wait/release bracket: TS itself rejects it, and tsopt's replay agrees.
    g = space.genome(mma=(RELEASE_FIRST, 0, "none", 0, "none"))
    v = verdict(space, g)
    assert not v.valid and v.stage == "ts" and v.rule == "ts.work_before_wait"
    rules = {f.rule for f in gemm_checks(space.config(g, BIG))}
    assert "tsopt.async_release" in rules


def test_wait_for_all_but_one_then_release_the_current_stage_is_rejected(space) -> None:
    # wait_group(1) keeps the batch just issued in flight; releasing the stage it reads
    # hands it to the producer's next TMA while the wgmma is still reading it.
    g = space.genome(mma=(BODY, 0, "none", 1, "none"))
    assert run_ts_checks(space, g, BIG, space.verify_domain(g)).valid
    v = verdict(space, g)
    assert not v.valid and v.rule == "tsopt.async_release"
    assert "stage of K slice 0 released while wgmma batch 0" in v.message
    rules = {f.rule for f in gemm_checks(space.config(g, BIG))}
    assert "tsopt.async_acc_read" in rules  # and the epilogue reads a live accumulator


def test_delayed_release_without_advancing_the_stage_is_rejected(space) -> None:
    g = space.genome(advance_on_wait=False)  # the seed holds one stage across iterations
    v = verdict(space, g)
    assert not v.valid
    assert v.rule == "ts.work_before_wait"
    # tsopt's replay finds it independently: the second wait re-waits the held stage,
    # so the second wgmma reads K slice 0 again.
    findings = {f.rule: f.message for f in gemm_checks(space.config(g, BIG))}
    assert "reads the stage of K slice 0, not slice 1" in findings["tsopt.stage_identity"]


def test_reading_the_accumulator_before_the_last_batch_retires_is_rejected(space) -> None:
    g = space.genome(mma=(BODY, 1, "release", 1, "none"))
    v = verdict(space, g)
    assert not v.valid and v.stage == "tsopt"
    rules = {f.rule for f in gemm_checks(space.config(g, BIG))}
    assert rules >= {"tsopt.async_release", "tsopt.async_acc_read"}


@pytest.mark.parametrize(
    ("depth", "pending", "safe"),
    [(0, 0, True), (1, 1, True), (1, 0, True), (2, 2, True), (2, 1, True), (1, 2, False),
     (2, 3, False)],
)
def test_in_flight_depth_against_pending_count(space, depth: int, pending: int, safe: bool) -> None:
    # Releasing stage k - depth after wait_group(pending) is safe iff pending <= depth.
    defer, drain = ("release", "tail") if depth else ("none", "none")
    pending_op = min(pending, 2)
    g = space.genome(mma=(BODY, depth, defer, pending_op, drain))
    cfg = space.config(g, BIG)
    if pending > 2:  # beyond the knob's choices: render the placement by hand
        ops = tuple((f"wgmma_wait{pending}" if op.startswith("wgmma_wait") and sec == "loop"
                     else op, sec) for op, sec in cfg.mma_ops)
        cfg = GemmConfig(**{**cfg.__dict__, "mma_ops": ops})
    findings = async_consumer_findings(cfg, 16)
    assert (not findings) == safe, findings


# -- verification of the valid knob settings ---------------------------------------------


@pytest.mark.parametrize("knobs", [
    {},
    {"mma": (BODY, 0, "none", 0, "none"), "advance_on_wait": False},
    {"mma": (BODY, 2, "release", 2, "tail"), "stages": 5, "tile_k": 32},
    {"load": (("try_acquire", "acquire", "coords", "tma_load", "commit"), 2, "none")},
    {"consumers": 1, "tile_m": 64, "producer_wg": "last", "load_warp": 3},
    {"cluster": "1x2", "producer_regs": 24, "consumer_regs": 240},
])
def test_valid_schedules_pass_both_verifiers(space, knobs) -> None:
    v = verdict(space, space.genome(**knobs))
    assert v.valid, v.summary()


def test_register_and_smem_budgets(space) -> None:
    v = verdict(space, space.genome(consumer_regs=240, producer_regs=56))
    assert not v.valid and v.rule == "ts.register_file"
    v = verdict(space, space.genome(stages=5))  # 5 x 48 KiB of A and B slices
    assert not v.valid and v.rule == "ts.smem"
    v = verdict(space, space.genome(tile_m=64))  # two warpgroups cannot split 64 rows
    assert not v.valid and v.rule == "tsopt.tile_shape"


@pytest.mark.slow
def test_smem_bytes_match_the_ts_allocator(space) -> None:
    from tsopt.search_spaces.gemm.kernel import make_task_manager

    for knobs in ({}, {"tile_n": 192, "stages": 5, "tile_k": 32}, {"tile_m": 64, "consumers": 1},
                  {"epilogue": "tma_store", "stages": 3},
                  {"arrangement": "separate", "tile_n": 128, "stages": 3},
                  {"arrangement": "separate", "tile_n": 64, "tile_k": 32, "stages": 5,
                   "epilogue": "tma_store"}):
        cfg = space.config(space.genome(**knobs), BIG)
        allocator = make_task_manager(cfg, None, domain=6).smem_allocator
        assert allocator.total_smem_bytes + allocator.barrier_smem_bytes == cfg.smem_bytes


# -- the space interface -------------------------------------------------------------------


def test_knobs_seed_and_genome_round_trip(space) -> None:
    genes = {"tile_m", "tile_n", "tile_k", "stages", "consumers", "producer_wg", "load_warp",
             "producer_regs", "consumer_regs", "cluster", "raster", "swizzle", "persistent"}
    # The sampler draws whole placements (screened by the verifier); the enumerator their parts.
    assert genes | {"load.placement", "mma.placement"} <= {k.name for k in space.knobs(BIG)}
    assert genes | {"mma.depth", "mma.pending", "load.depth", "mma.body", "load.body"} <= {
        k.name for k in space.raw_knobs(BIG)}
    seed = space.seed_genome(BIG)
    assert Genome.from_json(seed.to_json()) == seed
    assert space.dataflow_error(seed) is None
    cfg = space.config(seed, BIG)
    assert (cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.consumers, cfg.inflight) == (128, 256, 64, 2, 1)


def test_build_digest_covers_the_kernel_module_and_the_genome_mapping_only(space) -> None:
    # Knobs, checks, enumeration, funnel and export never reach a kernel: editing them keeps
    # every build. The kernel module and the genome -> configuration mapping do.
    import hashlib
    import inspect

    from tsopt.search_spaces.gemm import config as _gemm_config
    from tsopt.search_spaces.gemm import kernel as hopper_gemm_kernel

    assert space.source_modules() == ("tsopt.search_spaces.gemm.kernel",)
    module = hashlib.sha256(inspect.getsource(hopper_gemm_kernel).encode()).hexdigest()[:16]
    digest = hashlib.sha256(module.encode())
    for fn in (_gemm_config.config_of, _gemm_config.parse_cluster):
        digest.update(inspect.getsource(fn).encode())
    assert space.source_digest() == digest.hexdigest()[:16]


def test_dataflow_rejects_a_wgmma_before_its_stage(space) -> None:
    body = ("try_wait", "wait", "wgmma", "read_stage", "wgmma_wait", "release")
    g = space.genome(mma=(body, 0, "none", 0, "none"))
    assert "wgmma uses its input before read_stage" in space.dataflow_error(g)
    assert verdict(space, g).stage == "dataflow"


def test_the_space_draws_its_schedule_view_on_its_warps(space) -> None:
    from tsopt.reports.schedule import schedule_view

    views, note = schedule_view(space.seed_genome(BIG))
    assert "drawn by space 'gemm'" in note
    # Producer warpgroup first (load warp 0), then two consumer warpgroups running `mma`.
    assert [(v.task, v.warps_label) for v in views] == [("load", "warp 0"), ("mma", "warps 4\u201311")]
    last = space.schedule_view(space.genome(producer_wg="last", load_warp=3, consumers=1))
    assert [(v.task, v.first_warp, v.last_warp) for v in last] == [("load", 7, 7), ("mma", 0, 3)]
    kinds = {op.name: op.kind for op in last[1].ops}
    assert kinds == {"try_wait": "wait", "wait": "wait", "read_stage": "work", "wgmma": "work",
                     "wgmma_wait1": "work", "wgmma_wait0": "work", "release": "release"}


def test_verdict_key_ignores_raster_and_swizzle(space) -> None:
    a = space.genome(persistent=True)
    b = space.genome(persistent=True, raster="n", swizzle=8)
    c = space.genome(persistent=True, stages=3)
    assert space.verdict_key(a, BIG) == space.verdict_key(b, BIG) != space.verdict_key(c, BIG)


def test_enumeration_counts_and_yields_dataflow_legal_genomes(space) -> None:
    enum = space.enumerate(BIG)
    assert enum.raw == space.placement_count("load") * space.placement_count("mma") * space.gene_count()
    first = [next(enum.genomes) for _ in range(50)]
    assert enum.dataflow_legal == 50
    assert all(space.dataflow_error(g) is None for g in first)
    assert len({g.hash for g in first}) == 50


def test_suggest_samples_every_knob_with_optuna(space) -> None:
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(8):
        trial = study.ask()
        genome = space.suggest(trial, BIG)
        assert genome.space == "gemm"
        if not genome["persistent"]:
            assert "raster" not in trial.params and genome["raster"] == "m"
        v = verify_genome(genome, BIG, space=space)
        assert v.stage in ("dataflow", "ts", "tsopt", "ok")
        study.tell(trial, 1.0 if v.valid else None,
                   state=None if v.valid else optuna.trial.TrialState.PRUNED)


# -- real sm_90a compiles ------------------------------------------------------------------


def compile_ptx(space, genome: Genome, problem: Problem) -> str:
    import tempfile

    import cutlass.cute as cute

    spec = space.kernel_spec(genome, problem, "sm_90a")
    with tempfile.TemporaryDirectory() as dump:  # kept PTX is dumped too: not into the repo
        compiled = cute.compile(spec.host_fn, *spec.compile_args,
                                options=f"--gpu-arch sm_90a --keep-ptx --dump-dir {dump}")
        return compiled.__ptx__


@pytest.mark.slow
def test_seed_compiles_to_warp_specialized_wgmma(space) -> None:
    ptx = compile_ptx(space, space.seed_genome(BIG), BIG)
    assert "setmaxnreg.dec.sync.aligned.u32 \t40" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 \t232" in ptx
    # Two warpgroups x (head + loop) x 4 K steps of m64n256k16.
    wgmma = r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16"
    assert len(re.findall(wgmma, ptx)) == 16
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)  # mma.pending = 1
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+0;", ptx)  # the drain (tail)
    assert "cp.async.bulk.tensor.2d" in ptx and ".multicast::cluster" not in ptx
    assert ".local" not in ptx  # no spills to local memory
    assert ".reqntid 384, 1, 1" in ptx


@pytest.mark.slow
def test_persistent_multicast_cluster_compiles(space) -> None:
    g = space.genome(persistent=True, cluster="2x1", swizzle=8, raster="n",
                     load=(("coords", "try_acquire", "acquire", "tma_load", "commit"), 1, "none"))
    assert verdict(space, g).valid
    ptx = compile_ptx(space, g, BIG)
    assert ".multicast::cluster" in ptx  # B is shared by the two CTAs of an M-pair
    assert "barrier.cluster.arrive" in ptx


@pytest.mark.slow
def test_one_consumer_ragged_fp16_compiles_with_predicated_stores(space) -> None:
    g = space.genome(consumers=1, tile_m=64, tile_n=128, tile_k=32, stages=6, producer_wg="last",
                     load_warp=3, mma=(BODY, 0, "none", 0, "none"), cluster="1x2")
    assert verdict(space, g, RAGGED).valid
    ptx = compile_ptx(space, g, RAGGED)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16", ptx)
    assert ".reqntid 256, 1, 1" in ptx
    stores = re.findall(r"st\.global\.b32[^\n]*\n(\$L__BB)?", ptx)
    assert stores and all(stores)  # every D store is the last op of a bounds-guarded block


@pytest.mark.slow
def test_tiles_past_the_problem_store_nothing(space) -> None:
    # One 128-row tile of M, a 2x1 cluster: the launch rounds up to two M tiles, and the
    # second one's stores must be skipped; an exact problem needs no guard at all.
    small_m = Problem.of("gemm", "bf16", m=128, n=8192, k=8192)
    g = space.genome(cluster="2x1")
    assert space.config(g, small_m).overhang and not space.config(g, BIG).overhang
    guarded = re.findall(r"st\.global\.b32[^\n]*\n(\$L__BB)?", compile_ptx(space, g, small_m))
    assert guarded and all(guarded)
    swizzled = space.genome(persistent=True, swizzle=8)  # 1024 / 256 = 4 N tiles < 8
    assert space.config(swizzled, Problem.of("gemm", "bf16", m=8192, n=1024, k=8192)).overhang


@pytest.mark.slow
def test_seed_builds_an_artifact(space, tmp_path) -> None:
    from tsopt.build.builder import build_candidate
    from tsopt.core.artifact import ArtifactManifest

    problem = Problem.of("gemm", "bf16", m=512, n=512, k=512)
    result = build_candidate(space, space.seed_genome(problem), problem, "sm_90a", tmp_path)
    assert result.ok, result.error
    assert result.spill_bytes == 0 and result.registers is not None
    manifest = ArtifactManifest.read(result.artifact_dir)
    assert [t.name for t in manifest.tensors] == ["a", "b", "d"]
    assert manifest.launch["cluster"] == [1, 1, 1] and manifest.launch["block"] == [384, 1, 1]


# -- the epilogue and warpgroup-arrangement knobs ------------------------------------------


def test_separate_warpgroups_get_a_producer_and_a_pipeline_each(space) -> None:
    from tsopt.search_spaces.gemm.kernel import make_task_manager

    g = space.genome(arrangement="separate", tile_n=128, stages=3, load_warp=3)
    v = verdict(space, g)
    assert v.valid, v.summary()
    cfg = space.config(g, BIG)
    assert (cfg.chains, cfg.mma_warpgroups, cfg.wg_tile_m, cfg.cta_tile_m) == (2, 1, 128, 256)
    assert cfg.producer_warps == (3, 2) and cfg.padding() == [(0, 2)]
    tasks = make_task_manager(cfg, None, domain=5).tasks
    names = sorted(t.name for t in tasks)
    assert names == ["LoadTask0", "LoadTask1", "MathWG0", "MathWG1", "PaddingTask0"]
    # Each warpgroup's tile has its own A rows: 8192 rows are 32 work tiles of 2 x 128.
    assert cfg.tiles_m == 32 and cfg.grid == (32, 64, 1)
    # With one consumer warpgroup, 'separate' would be the cooperative kernel again.
    one = verdict(space, space.genome(arrangement="separate", consumers=1, tile_m=64))
    assert not one.valid and one.rule == "tsopt.arrangement"


def test_separate_smem_counts_both_pipelines(space) -> None:
    # 4 stages x 32 KiB per pipeline fit once (cooperative 128x128) but not twice.
    assert verdict(space, space.genome(tile_n=128, stages=4)).valid
    v = verdict(space, space.genome(arrangement="separate", tile_n=128, stages=4))
    assert not v.valid and v.rule == "ts.smem"


def test_tma_store_epilogue_costs_smem(space) -> None:
    # 4 stages of 128x256 use 192 KiB: the two 64x64 staging boxes fit beside them.
    cfg = space.config(space.genome(epilogue="tma_store"), BIG)
    assert cfg.epi_buffer_bytes == 64 * 64 * 2
    assert verdict(space, space.genome(epilogue="tma_store")).valid
    # 7 stages of 128x128 (224 KiB) fit with direct stores, not beside the staging boxes.
    assert verdict(space, space.genome(tile_n=128, stages=7)).valid
    v = verdict(space, space.genome(epilogue="tma_store", tile_n=128, stages=7))
    assert not v.valid and v.rule == "ts.smem"


@pytest.mark.slow
def test_tma_store_epilogue_compiles_to_staged_bulk_stores(space) -> None:
    ptx = compile_ptx(space, space.genome(epilogue="tma_store", stages=3), RAGGED_BF16)
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert "cp.async.bulk.commit_group" in ptx and re.search(r"cp\.async\.bulk\.wait_group\.read\s+0;", ptx)
    assert "fence.proxy.async.shared::cta" in ptx
    assert "bar.sync \t8, 128" in ptx and "bar.sync \t9, 128" in ptx  # one per warpgroup
    # TMA clips at the edges of D: no predicated register stores are left.
    assert "st.global" not in ptx
    assert ".local" not in ptx


@pytest.mark.slow
def test_separate_warpgroups_compile(space) -> None:
    g = space.genome(arrangement="separate", tile_n=128, stages=3, cluster="1x2")
    ptx = compile_ptx(space, g, RAGGED_BF16)
    # Each warpgroup issues its own m64n128 wgmma over its whole 128-row tile.
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16", ptx)
    assert ".reqntid 384, 1, 1" in ptx and ".local" not in ptx
    assert ".multicast::cluster" in ptx
