"""The gridstride space (the TS tutorial's grid-stride copy) on the real TS verifier and DSL.

Every verdict comes from constructing the real TS TaskManager on the host plus
tsopt's checks; every build is a real sm_90a compile (no GPU here).
"""

import itertools
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cutlass.experimental.task_scheduling.schedule_builder import domain_loop

from tsopt.build.builder import build_candidate
from tsopt.core.bundle import BundleEntry, read_manifest, write_bundle
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.registry import get_space, problem_for
from tsopt.search_spaces.gridstride import config as C
from tsopt.search_spaces.gridstride.kernel import TileWalk, build_task_manager, vector_offset
from tsopt.verify.funnel import CountingJudge, compute_funnel, exhaustive_funnel
from tsopt.verify.verifier import VerdictCache, classify_ts_error, run_ts_checks, verify_genome

INT16 = Problem.of("copy", "int16", rows=4096, cols=4096)
FP16 = Problem.of("copy", "fp16", rows=4096, cols=4096)
RAGGED = Problem.of("copy", "fp16", rows=2050, cols=1030)  # 2111500 elements: vectors 1, 2, 4
ODD = Problem.of("copy", "int16", rows=999, cols=999)  # odd: only vector 1
ROTATED = (C.ROTATED_BODY, 1, "none")


@pytest.fixture(scope="module")
def space():  # type: ignore[no-untyped-def]
    return get_space("gridstride")


def verdict(space: Any, genome: Genome, problem: Problem = INT16) -> Any:
    return verify_genome(genome, problem, space=space, cache=VerdictCache())


# -- the space and its problems ---------------------------------------------------------------


def test_registered_for_copy_problems_of_three_dtypes(space) -> None:  # type: ignore[no-untyped-def]
    assert (space.name, space.op, space.dtypes) == ("gridstride", "copy", ("int16", "fp16", "bf16"))
    assert problem_for("copy:int16:4096x4096", "gridstride") == INT16
    for problem in (INT16, FP16, RAGGED, ODD, Problem.of("copy", "bf16", rows=3, cols=5)):
        space.check(problem)
    with pytest.raises(ProblemError, match="46341x46341 = 2147488281 elements"):
        space.check(Problem.of("copy", "fp16", rows=46341, cols=46341))
    with pytest.raises(ProblemError, match="not gemm"):
        space.check(Problem.of("gemm", "fp16", m=64, n=64, k=64))


def test_sampler_knobs_offer_only_vectors_that_divide_the_tensor(space) -> None:  # type: ignore[no-untyped-def]
    vectors = {p.key: dict((k.name, k.choices) for k in space.knobs(p))["vector"]
               for p in (INT16, RAGGED, ODD)}
    assert vectors == {INT16.key: (1, 2, 4, 8), RAGGED.key: (1, 2, 4), ODD.key: (1,)}


def test_the_seed_is_the_tutorial_as_written(space) -> None:  # type: ignore[no-untyped-def]
    seed = space.seed_genome(INT16)
    cfg = space.config(seed, INT16)
    assert cfg.copy_ops == (("load", "loop"), ("store", "loop"))
    assert (cfg.warps, cfg.vector, cfg.unroll, cfg.loop_unroll, cfg.grid) == (8, 1, 1, 1, 256)
    assert verdict(space, seed).valid


def test_placements_render_name_and_read_back(space) -> None:  # type: ignore[no-untyped-def]
    keys = C.placement_keys()
    assert len(keys) == 6 and len({C.render_copy_placement(*k) for k in keys}) == 6
    assert C.render_copy_placement(*ROTATED) == (
        ("load", "head"), ("store", "head"), ("load", "head"),
        ("store", "loop"), ("load", "loop"), ("store", "tail"))

    class Trial:
        def __init__(self, params: dict[str, Any]) -> None:
            self.params = params

        def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
            assert self.params[name] in choices, name
            return self.params[name]

    for key in keys:
        genome = space.genome(key, vector=8, unroll=4, grid="per_sm:2")
        params = space.params_of(genome)
        assert space.suggest(Trial(params), INT16) == genome


# -- the verifier: what TS accepts, what it rejects, what only tsopt sees ---------------------


def test_ts_accepts_every_placement_at_every_schedule_gene(space) -> None:  # type: ignore[no-untyped-def]
    for key, warps, loop_unroll in itertools.product(C.placement_keys(), (1, 32), (1, 4)):
        genome = space.genome(key, warps=warps, loop_unroll=loop_unroll)
        assert verdict(space, genome).valid, (key, warps, loop_unroll)


PLANTED = {
    # name: (copy placement, TS's own verdict on it (None: accepted), the verifier's rule)
    "two loads, then two stores": (
        [("load", "loop"), ("load", "loop"), ("store", "loop"), ("store", "loop")], None,
        "dataflow"),
    "a fragment stored twice": ([("load", "loop"), ("store", "loop"), ("store", "loop")], None,
                                "dataflow"),
    "a head load overwritten by the loop's": (
        [("load", "head"), ("load", "loop"), ("store", "loop")], None, "dataflow"),
    "a rotated loop without its last store": (
        [("load", "head"), ("store", "loop"), ("load", "loop")], None, "dataflow"),
    "no store at all": ([("load", "loop")], "has no entries in the schedule list", "dataflow"),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_schedules_are_rejected_even_where_ts_accepts_them(space, name: str) -> None:  # type: ignore[no-untyped-def]
    ops, ts_says, rule = PLANTED[name]
    genome = space.genome().with_schedule("copy", ops)
    ts = run_ts_checks(space, genome, INT16, 6)  # TS alone, without the dataflow gate
    if ts_says is None:
        assert ts.valid, ts.message
    else:
        assert not ts.valid and ts_says in (ts.message or "")
    found = verdict(space, genome)
    assert (found.valid, found.stage, found.rule) == (False, "dataflow", rule)
    assert found.message and found.message.startswith("copy: ")


def test_ts_rejects_a_second_live_fragment_of_one_variable(space) -> None:  # type: ignore[no-untyped-def]
    """Loads hoisted ahead of stores across two fragments need two variables: TS refuses the
    first fragment once a second load re-produced it (so `unroll` lives inside one load)."""
    cfg = space.config(space.seed_genome(INT16), INT16)

    def hoisted(res: dict[str, Any], walk: TileWalk) -> None:
        with domain_loop(walk.start(0), walk.end, walk.step, unroll=walk.unroll):
            first = res["src"].load()
            second = res["src"].load()
            res["dst"].store(frag=first[0], tile=first[1])
            res["dst"].store(frag=second[0], tile=second[1])

    with pytest.raises(ValueError, match="stale handle") as caught:
        build_task_manager(cfg, TileWalk(0, 6, 1, 1), body=hoisted)
    assert classify_ts_error(caught.value) == "ts.other"


@pytest.mark.parametrize(
    ("genes", "problem", "rule"),
    [
        ({"warps": 40}, INT16, "tsopt.launch_shape"),  # TS accepts a 1280-thread task
        ({"vector": 16}, INT16, "tsopt.vector_width"),  # 32-byte accesses do not exist
        ({"vector": 3}, INT16, "tsopt.vector_width"),
        ({"vector": 8}, RAGGED, "tsopt.vector_divisibility"),
        ({"vector": 2}, ODD, "tsopt.vector_divisibility"),
        ({"warps": 0}, INT16, "dataflow"),
        ({"grid": "waves"}, INT16, "dataflow"),
    ],
)
def test_genes_ts_does_not_judge_are_rejected_by_name(space, genes, problem, rule) -> None:  # type: ignore[no-untyped-def]
    found = verdict(space, space.genome(**genes), problem)
    assert not found.valid and found.rule == rule, found.message
    assert str(next(iter(genes.values()))) in (found.message or "")


# -- every element written once: the schedule and the kernel's index function, replayed --------


def stored_elements(cfg: Any) -> Counter[int]:
    """Elements each CTA's schedule stores, replaying head, loop and tail with the kernel's own
    :func:`vector_offset` (a store writes the tile its fragment was loaded from, if any;
    vectors past the end are not written)."""
    written: Counter[int] = Counter()

    def store(tile: int) -> None:
        if tile >= cfg.tiles:
            return
        for tid, v in itertools.product(range(cfg.threads), range(cfg.unroll)):
            e = vector_offset(cfg, tile, v, tid)
            if e < cfg.elements:
                written.update(range(e, e + cfg.vector))

    for cta in range(cfg.grid):
        held, head_loads = cfg.tiles, 0
        for op, sec in cfg.copy_ops:
            if sec == "head" and op == "load":
                held, head_loads = cta + head_loads * cfg.grid, head_loads + 1
            elif sec == "head":
                store(held)
        for tile in range(cta + cfg.head_loads * cfg.grid, cfg.tiles, cfg.grid):
            for op, sec in cfg.copy_ops:
                if sec == "loop" and op == "load":
                    held = tile
                elif sec == "loop":
                    store(held)
        for _ in (op for op, sec in cfg.copy_ops if sec == "tail"):
            store(held)
    return written


@pytest.mark.parametrize("grid", ["ctas:1", "ctas:3", "ctas:256", "per_tile"])
def test_every_element_is_written_exactly_once(space, grid: str) -> None:  # type: ignore[no-untyped-def]
    problem = Problem.of("copy", "fp16", rows=50, cols=37)  # 1850: a partial last tile
    for key in C.placement_keys():
        cfg = space.config(space.genome(key, warps=1, vector=2, unroll=2, grid=grid), problem)
        assert cfg.tiles == 15 and cfg.full_tiles == 14
        written = stored_elements(cfg)
        assert set(written) == set(range(cfg.elements)), (key, grid)
        assert set(written.values()) == {1}, (key, grid)


# -- the funnel ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_funnel_counts_and_equals_verifying_every_genome(space) -> None:  # type: ignore[no-untyped-def]
    for problem, checked in ((INT16, 12096), (RAGGED, 9072)):
        funnel = compute_funnel(space, problem, sample=30)
        assert [count for _, count in funnel.rows()[:4]] == [12096, 12096, 12096, checked]
        assert funnel.verifications == 6 * 6 * 3  # placements x warps x loop unrolls
        assert funnel.sample_agreement == funnel.sample_size == 30
        every = exhaustive_funnel(space, problem, CountingJudge(space, VerdictCache()), None)
        assert every.rows() == funnel.rows()
    assert every.rejections == {"tsopt.vector_divisibility": 12096 - 9072}


# -- builds, export and a bundle: real sm_90a compiles --------------------------------------------


@pytest.mark.slow
def test_every_knob_value_compiles(space, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    genomes = space.diverse_genomes(RAGGED, 8)
    seen = {name: {space.params_of(g)[name] for g in genomes} for name in space.params_of(genomes[0])}
    assert all(set(k.choices) <= seen[k.name] for k in space.knobs(RAGGED))
    for genome in genomes:
        assert verdict(space, genome, RAGGED).valid
        built = build_candidate(space, genome, RAGGED, "sm_90a", tmp_path)
        assert built.ok, (genome.describe(), built.error)
        assert built.spill_bytes == 0 and built.registers


def recompile(kernel_py: Path, cubin: Path) -> None:
    """``python -I kernel.py --cubin F`` in its own directory, without tsopt's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUTE_DSL_ARCH", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-I", str(kernel_py), "--cubin", str(cubin)],
        cwd=kernel_py.parent, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize(("problem", "placement", "genes"), [
    (INT16, (C.CANONICAL_BODY, 0, "none"), {}),
    (RAGGED, ROTATED, {"vector": 4, "unroll": 4, "grid": "per_sm:2", "loop_unroll": 2}),
], ids=["seed-int16", "rotated-ragged-fp16"])
def test_exported_kernel_recompiles_to_the_built_cubin(space, problem, placement, genes,  # type: ignore[no-untyped-def]
                                                       tmp_path: Path) -> None:
    genome = space.genome(placement, **genes)
    built = build_candidate(space, genome, problem, "sm_90a", tmp_path / "artifacts")
    assert built.ok, built.error
    source = space.export_source(genome, problem, "sm_90a", f"test export of {genome.short_hash}")
    assert "tsopt" not in source.split("# The exported candidate")[1]
    assert "make_kernel(CONFIG, copy_body)" in source
    (tmp_path / "kernel.py").write_text(source)
    recompile(tmp_path / "kernel.py", tmp_path / "again.cubin")
    built_cubin = (Path(built.artifact_dir or "") / "kernel.cubin").read_bytes()
    assert (tmp_path / "again.cubin").read_bytes() == built_cubin


@pytest.mark.slow
def test_diverse_valid_candidates_build_into_a_bundle(space, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for problem in (INT16, FP16):
        entries = []
        for genome in space.diverse_genomes(problem, 3):
            assert verdict(space, genome, problem).valid
            built = build_candidate(space, genome, problem, "sm_90a", tmp_path / "artifacts")
            assert built.ok, built.error
            entries.append(BundleEntry(genome, Path(built.artifact_dir or ""), origin="diverse"))
        bundle = tmp_path / f"bundle-{problem.key}"
        write_bundle(bundle, study=f"gridstride-{problem.key}", space="gridstride",
                     problem=problem, arch="sm_90a", candidates=entries)
        manifest = read_manifest(bundle)  # every artifact checked against genome and problem
        assert [c.genome for c in manifest.candidates] == [e.genome for e in entries]
        assert manifest.candidates[0].genome == space.seed_genome(problem)
