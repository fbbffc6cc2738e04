"""Runtime M (issue #30, item 1): a GEMM problem whose M is a launch argument, on the CPU.

Real parts: the problem spec, the real sm_90a compile and link of a range problem, its
artifact.json and shim, the loader and the torch op refusing an M outside the range (CPU
tensors: nothing launches here; ``bench/runtime_m`` runs every M on the H200), and the
verifier's rules for ranges (TS's checks and tsopt's at each M of the range's sample).
"""

from __future__ import annotations

import ctypes
import json
import re
from pathlib import Path

import pytest
import torch

from tsopt.build.builder import build_candidate, cache_key
from tsopt.core.artifact import ArtifactManifest
from tsopt.core.problem import Problem, ProblemError, parse_problem_spec
from tsopt.core.registry import get_space
from tsopt.search_spaces.gemm.checks import range_sizes
from tsopt.verify.verifier import VerdictCache, verify_genome
from tsopt.workers import torch_ops
from tsopt.workers.loader import KernelInputError, load_kernel

RANGE = "gemm:bf16:1-256x512x1024"


@pytest.fixture(scope="module")
def space():
    return get_space("gemm")


def verdict(space, genome, spec: str):
    return verify_genome(genome, parse_problem_spec(spec), space=space, cache=VerdictCache())


# -- the problem ---------------------------------------------------------------------------
def test_a_range_problem_reads_writes_and_keys_its_range() -> None:
    problem = parse_problem_spec("gemm:bf16:1-256x4096x4096")
    assert problem.m_range == (1, 256) and problem["m"] == 256
    assert problem.key == "gemm-bf16-1-256x4096x4096"
    assert problem.spec == "gemm:bf16:1-256x4096x4096"
    assert str(problem) == "gemm bf16 m=1-256 n=4096 k=4096"
    assert Problem.from_dict(json.loads(problem.to_json())) == problem
    fixed = parse_problem_spec("gemm:bf16:256x4096x4096")
    # The fixed-M problem is the one of before ranges: key, document, equality.
    assert fixed.m_range is None and fixed.key == "gemm-bf16-256x4096x4096"
    assert fixed.to_dict() == {"op": "gemm", "dtype": "bf16", "m": 256, "n": 4096, "k": 4096}
    assert fixed != problem and fixed.key != problem.key


@pytest.mark.parametrize(("spec", "match"), [
    ("gemm:bf16:0-256x8x8", r"m range 0-256 must have 1 <= lo <= hi"),
    ("gemm:bf16:300-256x8x8", r"m range 300-256 must have 1 <= lo <= hi"),
    ("gemm:bf16:1-x8x8", r"M range '1-' is not two integers"),
    ("copy:fp16:1-4x8", r"only a gemm's M may be a range"),
])
def test_a_bad_range_is_named(spec: str, match: str) -> None:
    with pytest.raises(ProblemError, match=match):
        parse_problem_spec(spec)
    with pytest.raises(ProblemError, match="m=128 must be its upper end 256"):
        Problem.of("gemm", "bf16", m_range=(1, 256), m=128, n=8, k=8)


# -- the verifier at the extremes of a range ------------------------------------------------
def test_a_range_is_judged_at_its_extremes_tiles_and_persistent_turns(space) -> None:
    problem = parse_problem_spec("gemm:bf16:1-1024x4096x4096")
    seed = space.config(space.genome(), problem)  # 128-row tiles, one per CTA
    assert range_sizes(seed) == (1, 128, 129, 1024)
    # Persistent, 128x128 tiles: 32 tiles across N, a wave of 132 CTAs holds 4 M-tiles' rows;
    # M = 513 is the first at which a CTA takes a second tile.
    persistent = space.config(space.genome(persistent=True, tile_n=128), problem)
    assert range_sizes(persistent) == (1, 128, 129, 513, 1024)
    swapped = space.config(space.genome(swap_ab=True, tile_n=64), parse_problem_spec(
        "gemm:bf16:1-300x4096x4096"))
    # Swapped, M runs along the tile's 64 columns; 257 is the partial last tile at the top.
    assert range_sizes(swapped) == (1, 64, 65, 257, 300)


def test_a_range_accepts_what_its_every_m_can_run(space) -> None:
    genome = space.genome()
    assert verdict(space, genome, RANGE).valid
    # M = 1 compiled in is refused (CuTe folds the extent-1 row mode of the TMA descriptor);
    # a runtime M keeps that mode dynamic, so the range from 1 is accepted.
    fixed_one = verdict(space, genome, "gemm:bf16:1x512x1024")
    assert not fixed_one.valid and fixed_one.rule == "tsopt.unit_extent"


def test_stream_k_is_refused_for_a_range_with_its_reason(space) -> None:
    genome = space.genome(persistent=True, stream_k=True, tile_n=128)
    assert verdict(space, genome, "gemm:bf16:2048x4096x4096").valid
    judged = verdict(space, genome, "gemm:bf16:1-2048x4096x4096")
    assert not judged.valid and judged.rule == "tsopt.runtime_m"
    assert "stream_k cannot take M at run time (range 1-2048)" in judged.message
    assert "tune a fixed M" in judged.message


def test_a_rule_that_fails_inside_the_range_names_the_m(space) -> None:
    # Raster 'n' bands of 2 clusters across M: fine at M = 256 (2 tiles), wasted at M = 1.
    genome = space.genome(persistent=True, swizzle=2, raster="n")
    assert verdict(space, genome, "gemm:bf16:256x4096x4096").valid
    judged = verdict(space, genome, "gemm:bf16:1-256x4096x4096")
    assert judged.rule == "tsopt.swizzle_band"
    assert judged.message.endswith("(at M=1 of the runtime range 1-256)")


# -- the build: artifact, shim, library ------------------------------------------------------
@pytest.fixture(scope="module")
def built(space, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cache = tmp_path_factory.mktemp("artifacts")
    out = {}
    for name, spec in (("range", RANGE), ("fixed", "gemm:bf16:256x512x1024")):
        result = build_candidate(space, space.genome(), parse_problem_spec(spec), "sm_90a", cache)
        assert result.ok, result.error
        out[name] = Path(result.artifact_dir or "")
    return out


@pytest.mark.slow
def test_a_range_problem_builds_with_m_as_a_launch_argument(built) -> None:
    directory = built["range"]
    manifest = ArtifactManifest.read(directory)
    assert manifest.m_range == (1, 256)
    assert [(t.name, t.shape, t.runtime_dims) for t in manifest.tensors] == [
        ("a", (256, 1024), (0,)), ("b", (512, 1024), ()), ("d", (256, 512), (0,))]
    shim = (directory / "shim.c").read_text()
    assert "int tsopt_launch_m(void **data, int n, int m, void *stream) {" in shim
    assert "  if (m < 1 || m > 256) return -2;" in shim
    assert re.search(r"_Tensor_a_t t0 = \{data\[0\], \{m\}\};", shim)
    assert re.search(r"_Tensor_b_t t1 = \{data\[1\]\};", shim)  # N x K: fixed
    assert "return tsopt_launch_m(data, n, 256, stream);" in shim  # tsopt_launch: at hi
    # The compiled kernel takes the extent (the exported tensor struct carries it).
    assert re.search(r"void \*data;\s*int32_t dynamic_shapes\[1\];\s*\} \w+_Tensor_a_t;",
                     (directory / "kernel.h").read_text())
    library = ctypes.CDLL(str(directory / "libkernel.so"))
    assert library.tsopt_launch_m and library.tsopt_launch


@pytest.mark.slow
def test_a_fixed_m_build_is_the_one_of_before_ranges(space, built) -> None:
    directory = built["fixed"]
    doc = json.loads((directory / "artifact.json").read_text())
    assert "m_range" not in doc and all("runtime_dims" not in t for t in doc["tensors"])
    assert "tsopt_launch_m" not in (directory / "shim.c").read_text()
    assert "dynamic_shapes" not in (directory / "kernel.h").read_text()
    with pytest.raises(AttributeError):
        ctypes.CDLL(str(directory / "libkernel.so")).tsopt_launch_m  # noqa: B018
    # Keys: a fixed problem's key is made of the parts it always was; a range is another key.
    genome, fixed = space.genome(), parse_problem_spec("gemm:bf16:256x512x1024")
    assert cache_key(genome, fixed, "sm_90a", "t") != cache_key(
        genome, parse_problem_spec("gemm:bf16:1-256x512x1024"), "sm_90a", "t")


@pytest.mark.slow
def test_the_loader_refuses_an_m_outside_the_range_in_one_line(built) -> None:
    kernel = load_kernel(built["range"])
    assert kernel.m_range == (1, 256)
    assert "a: bf16[1..256, 1024]" in repr(kernel) and "d: bf16[1..256, 512]" in repr(kernel)
    b = torch.zeros(512, 1024, dtype=torch.bfloat16)
    for m in (257, 1000):
        with pytest.raises(KernelInputError) as refused:
            kernel(torch.zeros(m, 1024, dtype=torch.bfloat16), b)
        text = str(refused.value)
        assert f"a: M={m} (dimension 0) is outside this kernel's M range 1..256" in text
        assert "\n" not in text
    with pytest.raises(KernelInputError, match=r"a: M=0 \(dimension 0\) is outside"):
        kernel(torch.zeros(0, 1024, dtype=torch.bfloat16), b)
    # A fixed dimension still names the expected shape, with M's range in it.
    with pytest.raises(KernelInputError, match=r"a: shape \(8, 512\) != \(1\.\.256, 1024\)"):
        kernel(torch.zeros(8, 512, dtype=torch.bfloat16), b)
    # An M in range passes the shape check (and fails here only for want of a GPU).
    with pytest.raises(KernelInputError) as cpu_only:
        kernel(torch.zeros(7, 1024, dtype=torch.bfloat16), b)
    assert "outside" not in str(cpu_only.value) and "not on a CUDA device" in str(cpu_only.value)
    assert kernel.output_shapes(7) == [(7, 512)]


@pytest.mark.slow
def test_the_loader_wants_one_m_in_a_call(built) -> None:
    kernel = load_kernel(built["range"])
    a = torch.zeros(7, 1024, dtype=torch.bfloat16, device="meta")
    d = torch.zeros(9, 512, dtype=torch.bfloat16, device="meta")
    with pytest.raises(KernelInputError, match=r"d: dimension 0 is 9, but the call's M \(from a\) "
                       r"is 7"):
        kernel._check_m_agrees([a, torch.zeros(512, 1024, device="meta"), d])


# -- the torch op -------------------------------------------------------------------------
def test_the_torch_op_of_a_range_kernel_follows_m_and_refuses_outside(tmp_path: Path) -> None:
    # Sizes no other test registers: the op registry and its dispatch table are the process's.
    directory = tmp_path / "k"
    directory.mkdir()
    (directory / "artifact.json").write_text(json.dumps({
        "library": "libkernel.so", "genome_hash": "ab" * 32, "m_range": [8, 72],
        "tensors": [{"name": "a", "role": "input", "shape": [72, 40], "dtype": "bf16",
                     "runtime_dims": [0]},
                    {"name": "b", "role": "input", "shape": [24, 40], "dtype": "bf16"},
                    {"name": "d", "role": "output", "shape": [72, 24], "dtype": "bf16",
                     "runtime_dims": [0]}]}))
    name = "gemm_bf16_8_72x24x40_rtm_test"
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": "tsopt-export", "version": 2, "package": True, "files": {}, "kernels": [
            {"name": name, "op": "gemm", "dtype": "bf16", "sizes": [["m", 72], ["n", 24],
                                                                     ["k", 40]],
             "dir": "k", "genome_hash": "ab" * 32}]}))
    package = torch_ops.load(tmp_path, preload=False)
    (kernel,) = package.kernels
    assert kernel.m_range == (8, 72) and kernel.problem_text == "gemm bf16 8-72x24x40"
    op = package.op(name)
    b = torch.empty(24, 40, dtype=torch.bfloat16, device="meta")
    for m in (8, 33, 72):  # the fake output follows the call's M
        out = op(torch.empty(m, 40, dtype=torch.bfloat16, device="meta"), b)
        assert tuple(out.shape) == (m, 24)
    for m in (7, 73):
        with pytest.raises(KernelInputError) as refused:
            op(torch.empty(m, 40, dtype=torch.bfloat16, device="meta"), b)
        text = str(refused.value)
        assert f"a: M={m}, outside the kernel's range 8-72" in text
        assert "inputs a bf16[M, 40] for M in 8-72, b bf16[24, 40]" in text
    # Traced with a dynamic M: one graph for every M of the range, no graph break.
    graphs = []

    def recording(gm, example_inputs):  # type: ignore[no-untyped-def]
        graphs.append(gm)
        return gm.forward  # the fake implementation on meta tensors: nothing launches

    compiled = torch.compile(lambda x, w: op(x, w).float().sum(dim=1), fullgraph=True,
                             dynamic=True, backend=recording)
    for m in (9, 17, 72):
        assert tuple(compiled(torch.empty(m, 40, dtype=torch.bfloat16, device="meta"),
                              b).shape) == (m,)
    assert len(graphs) == 1


@pytest.mark.slow
def test_the_exported_kernel_of_a_range_recompiles_to_the_built_cubin(space, built,
                                                                      tmp_path: Path) -> None:
    from tests.test_gemm_export import recompile

    source = space.export_source(space.genome(), parse_problem_spec(RANGE), "sm_90a",
                                 f"test export for {RANGE}")
    assert "m_range=(1, 256)," in source and "mark_compact_shape_dynamic" in source
    (tmp_path / "kernel.py").write_text(source)
    recompile(tmp_path / "kernel.py", tmp_path / "again.cubin")
    assert (tmp_path / "again.cubin").read_bytes() == (built["range"] / "kernel.cubin").read_bytes()
