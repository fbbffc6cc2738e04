"""Issue 13 on the CPU: the small-M fix of the TMA-store epilogue, tile_n off the 64-column
grid, swap-AB. Real sm_90a compiles (PTX inspected), the real verifier, tsopt's checks.

The cause of the small-M failures, pinned by the first test: where D has a single 64-row
block (M <= 64), ``zipped_divide`` gives the block mode extent 1 and *stride 0*, so the TMA
store of any later block (the second warpgroup's rows, the second m64 repeat, the CTA of a
cluster past the problem) was not clipped but landed on rows 0..63 with zeros.
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

# After tsopt (which checks CUTE_DSL_ARCH first); module level: the DSL reads the probe's
# annotations in this module's globals.
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import cutlass.utils.hopper_helpers as sm90_utils  # noqa: E402
from cutlass.cute.runtime import make_fake_compact_tensor  # noqa: E402
from cutlass.tensor_utils import LayoutEnum  # noqa: E402

from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search_spaces.gemm.checks import gemm_checks  # noqa: E402
from tsopt.verify.verifier import VerdictCache, verify_genome  # noqa: E402

SMALL = Problem.of("gemm", "bf16", m=64, n=4096, k=4096)
TINY = Problem.of("gemm", "bf16", m=16, n=8192, k=1024)
BIG = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
BULK_STORE = "cp.async.bulk.tensor.2d.global.shared::cta"
ONE_WG = {"tile_m": 64, "consumers": 1, "consumer_regs": 160}


@pytest.fixture(scope="module")
def space():
    return get_space("gemm")


def verdict(space, genome: Genome, problem: Problem):
    return verify_genome(genome, problem, space=space, cache=VerdictCache())


def compile_ptx(space, genome: Genome, problem: Problem) -> str:
    import tempfile

    spec = space.kernel_spec(genome, problem, "sm_90a")
    with tempfile.TemporaryDirectory() as dump:
        compiled = cute.compile(spec.host_fn, *spec.compile_args,
                                options=f"--gpu-arch sm_90a --keep-ptx --dump-dir {dump}")
        return compiled.__ptx__


def test_a_single_block_of_d_has_a_stride_zero_block_mode() -> None:
    # The cause: block 1 of a 64-row D is block 0 again (CuTe), not a clipped box past M.
    seen = {}

    @cute.jit
    def probe(d: cute.Tensor) -> None:
        epi = sm90_utils.make_smem_layout_epi(cutlass.BFloat16, LayoutEnum.from_tensor(d),
                                              (64, 64), 1)
        _, tma_d = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), d, cute.slice_(epi, (None, None, 0)),
            (64, 64))
        blocks = cute.zipped_divide(tma_d, (64, 64))
        seen[d.shape[0]] = (str(blocks[((0, 0), (1, 0))]), str(blocks[((0, 0), (0, 0))]))

    for rows in (64, 128):
        d = make_fake_compact_tensor(cutlass.BFloat16, (rows, 4096), stride_order=(1, 0),
                                     assumed_align=16)
        cute.compile(probe, d)
    assert seen[64][0] == seen[64][1]  # block 1 aliases block 0 (the bug's cause)
    assert seen[128][0] != seen[128][1]


@pytest.mark.slow
def test_tma_store_boxes_past_a_small_m_are_skipped(space) -> None:
    # Schedule (b) of the issue: one tile per CTA, TMA-store epilogue, 2x1 cluster. At M=64
    # every bulk store sits alone in a block guarded by "the box starts inside D".
    g = space.genome(tile_n=128, epilogue="tma_store", cluster="2x1")
    assert verdict(space, g, SMALL).valid
    guarded = re.findall(re.escape(BULK_STORE) + r"[^\n]*\n\s*(\$L__BB)?", compile_ptx(space, g, SMALL))
    # 2 consumer warpgroups x 2 subtiles of 64 columns, each store guarded
    assert len(guarded) == 4 and all(guarded)


def test_tile_n_off_the_64_grid_gets_narrower_epilogue_subtiles(space) -> None:
    widths = {}
    for tile_n in (16, 32, 48, 80, 96, 160, 192):
        cfg = space.config(space.genome(tile_n=tile_n, stages=3), BIG)
        widths[tile_n] = (cfg.epi_cols, cfg.epi_subtiles)
        assert cfg.epi_cols * cfg.epi_subtiles == tile_n
    assert widths == {16: (16, 1), 32: (32, 1), 48: (16, 3), 80: (16, 5), 96: (32, 3),
                      160: (32, 5), 192: (64, 3)}
    for tile_n in (16, 48, 80, 96, 160):  # the new tile_n choices verify
        v = verdict(space, space.genome(tile_n=tile_n, stages=4), BIG)
        assert v.valid, v.summary()
    # An odd multiple of 8 has no 16-column subtile: still refused, naming the columns.
    v = verdict(space, space.genome(tile_n=200, stages=3), BIG)
    assert (v.valid, v.rule) == (False, "tsopt.epilogue_coverage")
    assert "columns 192..199" in (v.message or "")


@pytest.mark.slow
def test_tile_n_80_compiles_with_five_16_column_tma_stores(space) -> None:
    g = space.genome(**ONE_WG, tile_n=80, stages=10, epilogue="tma_store")
    ptx = compile_ptx(space, g, Problem.of("gemm", "bf16", m=1024, n=1040, k=1024))
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n80k16\.f32\.bf16\.bf16", ptx)
    assert ptx.count(BULK_STORE) == 5 and ".local" not in ptx


def test_swap_ab_swaps_the_kernel_sizes_not_the_tensors(space) -> None:
    g = space.genome(swap_ab=True, **ONE_WG, tile_n=16, stages=8)
    cfg = space.config(g, TINY)
    assert (cfg.m, cfg.n, cfg.problem_m, cfg.problem_n) == (8192, 16, 16, 8192)
    assert (cfg.tiles_m, cfg.tiles_n, cfg.grid) == (128, 1, (128, 1, 1))
    spec = space.kernel_spec(g, TINY, "sm_90a")
    assert [t.shape for t in spec.tensors] == [(16, 1024), (8192, 1024), (16, 8192)]
    assert verdict(space, g, TINY).valid
    # The gene at its default is left out: the seed (and every recorded genome) keeps its hash.
    seed = space.seed_genome(BIG)
    assert "swap_ab" not in seed.genes and space.genome(swap_ab=False) == seed
    assert space.config(seed, BIG).swap_ab is False


@pytest.mark.slow
def test_swap_ab_compiles_to_transposed_stores(space) -> None:
    # Direct epilogue: the pair of columns a thread holds is two rows of D apart, so it is
    # written as two 16-bit stores; nothing is written as a 32-bit pair.
    g = space.genome(swap_ab=True, **ONE_WG, tile_n=16, stages=8)
    ptx = compile_ptx(space, g, TINY)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n16k16\.f32\.bf16\.bf16", ptx)
    assert "st.global.b16" in ptx and "st.global.b32" not in ptx
    # The wgmma's rows run over the problem's N: the grid has N / 64 CTAs.
    assert space.kernel_spec(g, TINY, "sm_90a").launch["grid"] == [128, 1, 1]
    assert not gemm_checks(space.config(g, TINY))


# -- split-K: a DSMEM reduction inside a cluster along z -----------------------------------------

SPLIT = {"split_k": 4, **ONE_WG, "tile_n": 128, "stages": 6, "epilogue": "tma_store"}
NARROW = Problem.of("gemm", "bf16", m=128, n=8192, k=8192)


def test_split_k_geometry_and_smem(space) -> None:
    from tsopt.search_spaces.gemm.kernel import make_task_manager

    g = space.genome(**SPLIT)
    cfg = space.config(g, NARROW)
    assert (cfg.split_tiles, cfg.grid, cfg.cluster_size) == (32, (2, 64, 4), 4)
    assert space.kernel_spec(g, NARROW, "sm_90a").launch["cluster"] == [1, 1, 4]
    allocator = make_task_manager(cfg, None, domain=10).smem_allocator
    assert allocator.total_smem_bytes + allocator.barrier_smem_bytes == cfg.smem_bytes
    assert cfg.red_bytes == 64 * 128 * 4 + 16  # the fp32 partial and two mbarriers
    assert verdict(space, g, NARROW).valid
    assert space.is_deterministic(g)  # partials added in split order, no atomics
    assert "split_k" not in space.seed_genome(BIG).genes


@pytest.mark.parametrize("genes, words", [
    ({"persistent": True}, "a persistent tile loop"),
    ({"cluster": "2x1"}, "cluster 2x1"),
])
def test_split_k_rule_refuses_what_its_protocol_cannot_run(space, genes, words) -> None:
    v = verdict(space, space.genome(**{**SPLIT, "stages": 4, **genes}), NARROW)
    assert (v.valid, v.stage, v.rule) == (False, "tsopt", "tsopt.split_k"), v.summary()
    assert "split_k=4 cannot run with " + words in (v.message or "")


def test_split_k_needs_a_k_slice_per_split(space) -> None:
    short = Problem.of("gemm", "bf16", m=128, n=8192, k=192)  # 3 K slices of 64 for 4 splits
    found = [f for f in gemm_checks(space.config(space.genome(**SPLIT), short))
             if f.rule == "tsopt.split_k"]
    assert len(found) == 1 and "3 K slice(s) of 64: a split would have none" in found[0].message
    fits = Problem.of("gemm", "bf16", m=128, n=8192, k=256)
    assert not [f for f in gemm_checks(space.config(space.genome(**SPLIT), fits))
                if f.rule == "tsopt.split_k"]


@pytest.mark.slow
def test_split_k_compiles_to_an_ordered_dsmem_reduction(space) -> None:
    g = space.genome(**SPLIT)
    ptx = compile_ptx(space, g, NARROW)
    # Split 0 reads 3 peers x 64 fp32 values per thread through DSMEM, after a cluster-scope
    # acquire fence; the peers hand over with release arrivals at cluster scope.
    assert ptx.count("ld.shared::cluster.b32") == 3 * 64
    assert "fence.acq_rel.cluster" in ptx
    assert "mbarrier.arrive.release.cluster.shared::cluster" in ptx
    assert not re.search(r"^\s*(atom|red)\.", ptx, re.M)  # no atomics: a deterministic sum
    assert ".local" not in ptx


# -- M = 1: a 1-row operand, refused (tsopt.unit_extent) ---------------------------------------

def test_a_one_row_operand_gets_a_one_dimensional_tma_descriptor() -> None:
    # The cause of the 12 M = 1 crashes of the property test (CUDA error 715): CuTe drops the
    # extent-1 row mode of a 1 x K operand from the TMA coordinates (stride 0, one TMA
    # dimension), while 2 x K keeps both; the kernel loads 2-D boxes of tile rows through it.
    seen = {}

    @cute.jit
    def probe(a: cute.Tensor) -> None:
        smem = sm90_utils.make_smem_layout_a(LayoutEnum.from_tensor(a), (64, 64, 64),
                                             cutlass.BFloat16, 2)
        _, coords = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(smem, (None, None, 0)),
            (64, 64))
        seen[a.shape[0]] = str(coords)

    for rows in (1, 2):
        a = make_fake_compact_tensor(cutlass.BFloat16, (rows, 4096), stride_order=(1, 0),
                                     assumed_align=16)
        cute.compile(probe, a)
    assert seen[1].endswith("(1,4096):(0,1@0)>")  # one TMA dimension: K
    assert seen[2].endswith("(2,4096):(1@1,1@0)>")  # two: rows and K


@pytest.mark.parametrize("swap_ab", [False, True])
def test_m_1_is_refused_by_a_named_rule_and_m_2_is_not(space, swap_ab) -> None:
    g = space.genome(swap_ab=swap_ab, **ONE_WG, tile_n=16, stages=8)
    one = Problem.of("gemm", "bf16", m=1, n=4096, k=4096)
    v = verdict(space, g, one)
    assert (v.valid, v.stage, v.rule) == (False, "tsopt", "tsopt.unit_extent"), v.summary()
    assert (v.message or "").startswith("M=1") and "use M >= 2" in (v.message or "")
    assert ("the kernel's N: swap_ab" in (v.message or "")) == swap_ab
    two = verdict(space, g, Problem.of("gemm", "bf16", m=2, n=4096, k=4096))
    assert two.valid, two.summary()

