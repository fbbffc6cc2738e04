"""Stream-K on the CPU (issue 13): the decomposition, its rule, its verification at the
shortest work-tile run, and a real sm_90a compile (the fix-up's GPU-scope handshake in the
PTX, the workspace in the built library's shim). The GPU half is bench/stream_k."""

from __future__ import annotations

import os
import random
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search_spaces.gemm.checks import gemm_checks  # noqa: E402
from tsopt.search_spaces.gemm.kernel import StreamKPlan  # noqa: E402
from tsopt.verify.verifier import VerdictCache, verify_genome  # noqa: E402

SKINNY = Problem.of("gemm", "bf16", m=128, n=8192, k=8192)
SQUARE = Problem.of("gemm", "bf16", m=4096, n=4096, k=4096)
ONE_WG = {"tile_m": 64, "consumers": 1, "consumer_regs": 232}
STREAM_K = {"stream_k": True, "persistent": True, "swap_ab": True, **ONE_WG, "tile_n": 128,
            "stages": 6, "epilogue": "tma_store"}


@pytest.fixture(scope="module")
def space():
    return get_space("gemm")


def pieces(plan: StreamKPlan) -> tuple[dict, dict, dict]:
    """Every K slice's unit, each tile's owner (range, last) and its other pieces' ranges."""
    cover: dict[tuple[int, int], int] = {}
    owners: dict[int, tuple[int, int]] = {}
    others: dict[int, list[int]] = {}
    for u in range(plan.units):
        tile, k0, k_len, last = plan.segment(u)
        assert 0 <= tile < plan.tiles and k_len >= plan.granule
        if k0 >= plan.k_tiles:  # a dummy: granule slices past K
            assert k_len == plan.granule
            continue
        r = plan.range_of(u)
        for k in range(k0, k0 + k_len):
            assert (tile, k) not in cover, f"{tile}:{k} twice"
            cover[(tile, k)] = u
        if k0 == 0:
            owners[tile] = (r, last)
        else:
            assert u // plan.ctas == plan.dp_waves, "a later piece is its range's first unit"
            others.setdefault(tile, []).append(r)
    return cover, owners, others


@pytest.mark.slow
def test_the_plan_covers_every_k_slice_once_and_each_owner_waits_for_exactly_its_pieces() -> None:
    rng = random.Random(7)
    for _ in range(400):
        tiles_m, tiles_n = rng.randint(1, 40), rng.randint(1, 40)
        k_tiles, granule = rng.randint(4, 300), rng.randint(1, 4)
        ctas = rng.choice([132, 66, 13, 1])
        plan = StreamKPlan.make(tiles_m, tiles_n, k_tiles, granule, ctas, rng.random() < 0.5)
        if plan.sk_tiles == 0:
            continue
        cover, owners, others = pieces(plan)
        assert len(cover) == plan.tiles * k_tiles
        assert set(owners) == set(range(plan.tiles))
        for tile, (r, last) in owners.items():
            # The owner adds the ranges after its own, in order; each is resident before it
            # (range r is CTA ctas-1-r: a later range is a lower-numbered CTA).
            assert sorted(others.get(tile, [])) == list(range(r + 1, last + 1))


def test_the_last_wave_is_shared_evenly(space) -> None:
    # 4096^3 in 128x256 tiles: 512 tiles, 3.88 waves of 132. Two whole waves stay data
    # parallel; the 248 tiles after them are shared by every CTA within one block.
    cfg = space.config(space.genome(stream_k=True, persistent=True), SQUARE)
    plan = cfg.sk_plan
    assert (plan.tiles, plan.dp_waves, plan.sk_tiles, plan.sk_ctas) == (512, 2, 248, 132)
    share = [0] * plan.ctas
    for u in range(plan.units):
        _, k0, k_len, _ = plan.segment(u)
        if u // plan.ctas >= plan.dp_waves and k0 < plan.k_tiles:
            share[u % plan.ctas] += k_len
    block = -(-plan.k_tiles // plan.blocks)
    assert max(share) - min(share) <= block
    assert cfg.grid == (1, 1, 132) and cfg.workspace_bytes == 132 * 2 * (64 * 256 * 4 + 4)


@pytest.mark.parametrize("genes, words", [
    ({"persistent": False}, "one tile per CTA"),
    ({"cluster": "2x1"}, "cluster 2x1"),
    ({"split_k": 2, "persistent": False}, "split_k=2"),
    ({"arrangement": "separate", "consumers": 2, "tile_m": 64}, "arrangement 'separate'"),
    ({"swizzle": 2}, "swizzle 2"),
])
def test_the_rule_refuses_what_the_fix_up_cannot_run(space, genes, words) -> None:
    g = space.genome(**{**STREAM_K, **genes})
    found = [f for f in gemm_checks(space.config(g, SKINNY)) if f.rule == "tsopt.stream_k"]
    assert len(found) == 1 and words in found[0].message, found


def test_whole_waves_have_nothing_to_balance(space) -> None:
    # 132 tiles of 64x128 (swapped: N = 8448 rows of the kernel) fill one wave exactly.
    whole = Problem.of("gemm", "bf16", m=128, n=64 * 132, k=4096)
    found = [f for f in gemm_checks(space.config(space.genome(**STREAM_K), whole))
             if f.rule == "tsopt.stream_k"]
    assert len(found) == 1 and "whole wave(s) of 132 CTAs: nothing to balance" in found[0].message
    # A K too short for one piece (a head of 1 + 1) is refused by the domain rule first.
    assert not verify_genome(space.genome(**STREAM_K), Problem.of("gemm", "bf16", m=128, n=8192, k=64),
                             space=space, cache=VerdictCache()).valid


def test_ts_judges_the_schedule_at_the_shortest_run_too(space) -> None:
    g = space.genome(**STREAM_K)
    cfg = space.config(g, SKINNY)
    assert space.extra_verify_domains(g, SKINNY) == (cfg.sk_plan.granule,)
    gates = []
    for genome in (g, space.genome(**{**STREAM_K, "stream_k": False})):
        cache = VerdictCache()
        verdict = verify_genome(genome, SKINNY, space=space, cache=cache)
        assert verdict.valid, verdict.summary()
        gates.append(cache.misses)  # TS gates judged: one per domain
    assert gates == [2, 1]
    assert space.is_deterministic(g)
    assert "stream_k" not in space.seed_genome(SKINNY).genes  # old genomes keep their hash


@pytest.mark.slow
def test_it_compiles_to_a_gpu_scope_handshake_and_a_library_that_owns_its_workspace(
        space, tmp_path) -> None:
    import tempfile

    import cutlass.cute as cute

    from tsopt.build.builder import build_candidate

    g = space.genome(**STREAM_K)
    spec = space.kernel_spec(g, SKINNY, "sm_90a")
    assert spec.workspace_bytes == space.config(g, SKINNY).workspace_bytes > 0
    assert spec.launch["workspace_bytes"] == spec.workspace_bytes
    with tempfile.TemporaryDirectory() as dump:
        ptx = cute.compile(spec.host_fn, *spec.compile_args,
                           options=f"--gpu-arch sm_90a --keep-ptx --dump-dir {dump}").__ptx__
    # A later piece raises its flag with a GPU-scope release; the owner spins with an acquire
    # and reads the partials from L2 (.cg). No atomics: the partials are added in range order.
    assert re.search(r"st\.release\.gpu(\.global)?\.(b|s|u)32", ptx), "release store"
    assert re.search(r"ld\.acquire\.gpu(\.global)?\.(b|s|u)32", ptx), "acquire load"
    assert len(re.findall(r"ld\.global\.cg\.(f|b)32", ptx)) >= 64, "L2 loads of a partial"
    assert "fence.acq_rel.gpu" in ptx
    assert not re.search(r"^\s*(atom|red)\.", ptx, re.M)
    built = build_candidate(space, g, SKINNY, "sm_90a", cache_dir=tmp_path / "artifacts")
    assert built.ok, built.error
    shim = (tmp_path / "artifacts" / built.cache_key / "shim.c").read_text()
    # Callers pass a, b, d only: the library allocates and zeroes one workspace per device.
    assert "if (n != 3 ||" in shim
    assert f"cudaMalloc(&tsopt_workspace[d], {spec.workspace_bytes}ull)" in shim
    assert "cudaMemset(tsopt_workspace[d], 0" in shim


def test_the_export_states_what_keeps_each_cross_cta_wait_from_hanging(space) -> None:
    # Written into the export's manifest: stream-K relies on in-order dispatch (its CTAs wait
    # only for lower-numbered ones), split-K on the cluster's co-scheduling; the rest have no
    # cross-CTA wait. bench/forward_progress runs them beside a kernel holding SMs.
    stream_k = space.forward_progress(space.genome(**STREAM_K))
    assert "lower-numbered" in stream_k and "not a CUDA guarantee" in stream_k
    split = space.forward_progress(space.genome(split_k=2, persistent=False))
    assert "cluster" in split and "guaranteed" in split
    plain = space.forward_progress(space.genome(**{**STREAM_K, "stream_k": False}))
    assert plain.startswith("none needed")
    copy = get_space("copy")
    assert copy.forward_progress(copy.seed_genome(Problem.of("copy", "fp16", rows=256, cols=512))
                                 ).startswith("none needed")
