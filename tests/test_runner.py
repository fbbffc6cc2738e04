"""The torch-only runner on a machine without a GPU.

What runs here for real: the import discipline (the GPU machine has torch but no DSL, optuna,
sqlalchemy or ray), the correctness checks on CPU tensors, the buffer and percentile
arithmetic, and loading a real artifact: a kernel compiled by the CuTe DSL for sm_90a, exported
and linked against the dynamic CUDA runtime exactly as the builder does. This machine has no GPU
(torch is a CPU build and there is no libcuda.so.1), so the tests that load that artifact check
that the runner says so as a ``launch_error`` instead of a traceback; the kernel itself runs in
the lead's H200 session.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.bundle import write_bundle
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError
from tsopt.workers import candidate, runner
from tsopt.workers.buffers import MAX_BUFFER_SETS, Buffers, BufferSet, make_buffers, plan_buffer_sets
from tsopt.workers.candidate import measure_artifact
from tsopt.workers.faults import KernelFault, status_of_cuda_error
from tsopt.workers.loader import (
    CudaLibraries,
    KernelLibrary,
    KernelLoadError,
    cudart_candidates,
    needed_cudart,
)
from tsopt.workers.measure import measure_artifacts
from tsopt.workers.measurer import MeasureError
from tsopt.workers.paired import EAGER_CALLS, GRAPH_MIN_LAUNCHES, PairedSettings, PairedTimer
from tsopt.workers.process_measurer import measure_candidate
from tsopt.workers.reference import (
    GEMM_REL_TOL,
    INT16_POISON,
    TORCH_DTYPES,
    CopyReference,
    GemmReference,
    OpReference,
    reference_for,
)
from tsopt.workers.session import CapturedLaunches, CaptureError, Session, Timing, percentile, rotation

REPO = Path(__file__).resolve().parents[1]
ROWS, COLS = 64, 128
COPY = Problem.of("copy", "fp16", rows=ROWS, cols=COLS)
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(),
                            reason="this machine has a GPU: the no-GPU path cannot be reached")

# -- import discipline ---------------------------------------------------------------------
BLOCKED = ("sqlalchemy", "optuna", "ray", "cutlass", "cuda", "alembic", "db")
SITECUSTOMIZE = f"""
import sys

BLOCKED = {BLOCKED!r}


class BlockGpuMachineAbsentees:
    # The GPU machine has torch, rich, typer and numpy, not these: fail every import of them.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is blocked: the GPU machine does not have it")
        return None


sys.meta_path.insert(0, BlockGpuMachineAbsentees())
"""


@pytest.fixture(scope="module")
def blocked_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose Python processes (and their children) cannot import BLOCKED."""
    site = tmp_path_factory.mktemp("blocker")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    return env


def test_the_blocker_blocks(blocked_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-c", "import optuna"], env=blocked_env,
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0 and "optuna is blocked" in proc.stderr


@pytest.mark.slow
def test_gpu_side_modules_import_with_torch_and_stdlib_only(blocked_env: dict[str, str]) -> None:
    code = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        import tsopt.workers
        for info in pkgutil.iter_modules(tsopt.workers.__path__, "tsopt.workers."):
            importlib.import_module(info.name)
        import tsopt.app.measure, tsopt.core.bundle, tsopt.cli
        print(sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=blocked_env, capture_output=True,
                          text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# Beyond the GPU machine's absentees: tsopt.workers itself takes torch and the standard library
# only (rich and typer are for the command line, tsopt.app and tsopt.cli).
ONLY_TORCH_AND_STDLIB = """
import importlib, pkgutil, sys
import torch

ALLOWED = set(sys.stdlib_module_names) | {m.split(".")[0] for m in sys.modules} | {"tsopt"}


class OnlyTorchAndStdlib:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in ALLOWED:
            raise ImportError(f"{name} is not torch, the standard library or tsopt")
        return None


sys.meta_path.insert(0, OnlyTorchAndStdlib())
import tsopt.workers
names = [info.name for info in pkgutil.iter_modules(tsopt.workers.__path__, "tsopt.workers.")]
for name in names:
    importlib.import_module(name)
print(len(names), sorted(m for m in sys.modules if m.split(".")[0] in ("rich", "typer")))
"""


@pytest.mark.slow
def test_every_measuring_module_imports_with_torch_and_the_standard_library_alone() -> None:
    proc = subprocess.run([sys.executable, "-c", ONLY_TORCH_AND_STDLIB], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    count, loaded = proc.stdout.strip().split(" ", 1)
    assert int(count) >= 15 and loaded == "[]"


def _placeholder_bundle(root: Path) -> Path:
    """A bundle whose artifact holds a placeholder library: it is never loaded in this test."""
    genome = Genome.make("copy", numeric={"stages": 2})
    art = root / "art" / genome.hash
    art.mkdir(parents=True)
    (art / "libkernel.so").write_bytes(b"placeholder, never loaded")
    ArtifactManifest(genome.hash, "copy", COPY.to_dict(), "sm_90a", _copy_tensors()).write(art)
    write_bundle(root / "bundle", study="s", space="copy", problem=COPY, arch="sm_90a",
                 candidates=[(genome, art)])
    return root / "bundle"


@pytest.mark.slow
@NO_GPU
def test_tsopt_measure_runs_under_the_blocker_and_says_there_is_no_gpu(
    blocked_env: dict[str, str], tmp_path: Path,
) -> None:
    bundle = _placeholder_bundle(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tsopt", "measure", str(bundle)],
                          env={**blocked_env, "COLUMNS": "200"}, capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "cannot measure on this machine" in out and "no GPU" in out
    assert "blocked" not in out and "Traceback" not in out
    assert not (bundle / "results.json").exists()


# -- correctness checks, on CPU tensors ----------------------------------------------------
def _copy_tensors(rows: int = ROWS, cols: int = COLS) -> tuple[TensorDesc, ...]:
    return (TensorDesc("src", "input", (rows, cols), "fp16"),
            TensorDesc("dst", "output", (rows, cols), "fp16"))


def test_copy_check_is_bit_exact_and_counts_unwritten_elements() -> None:
    spec = CopyReference(COPY)
    src = torch.randn(ROWS, COLS).half()
    assert spec.compare([src], [src.clone()]).ok
    dst = src.clone()
    dst[3, 5] = float("nan")  # poison left in place: never written
    dst[7, 9] = dst[7, 9] + 1
    result = spec.compare([src], [dst])
    assert not result.ok
    assert "2 of 8192 elements differ" in result.message
    assert "1 of them still hold the NaN poison" in result.message
    negative_zero = torch.zeros(ROWS, COLS).half()
    assert not spec.compare([negative_zero], [-negative_zero]).ok  # bits, not values


def _gemm_inputs(problem: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = TORCH_DTYPES[problem.dtype]
    std = problem["k"] ** -0.25
    a = (torch.randn(problem["m"], problem["k"]) * std).to(dtype)
    b = (torch.randn(problem["n"], problem["k"]) * std).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_gemm_check_passes_a_correct_product_and_states_its_error(dtype: str) -> None:
    problem = Problem.of("gemm", dtype, m=128, n=96, k=512)
    spec = GemmReference(problem)
    a, b = _gemm_inputs(problem)
    d = (a.float() @ b.float().t()).to(a.dtype)  # fp32 accumulation, one rounding at the end
    result = spec.compare([a, b], [d])
    assert result.ok, result.message
    assert result.rel_err is not None and 0 < result.rel_err < GEMM_REL_TOL[dtype] / 4


@pytest.mark.slow
def test_gemm_check_fails_unwritten_nan_dropped_k_and_one_wrong_tile() -> None:
    problem = Problem.of("gemm", "bf16", m=256, n=256, k=512)
    spec = GemmReference(problem)
    a, b = _gemm_inputs(problem)
    good = (a.float() @ b.float().t()).to(torch.bfloat16)

    unwritten = good.clone()
    unwritten[:, 200:] = float("nan")
    result = spec.compare([a, b], [unwritten])
    assert not result.ok and result.rel_err is None
    assert "14336 of 65536 output elements are NaN/Inf" in result.message

    dropped_k = (a[:, 64:].float() @ b[:, 64:].float().t()).to(torch.bfloat16)  # one K stage lost
    result = spec.compare([a, b], [dropped_k])
    assert not result.ok and (result.rel_err or 0) > 0.1

    # One 16x16 tile off by 5 %: the norm moves by ~3e-3, under the 1e-2 limit; the element
    # check catches it.
    one_tile = good.clone()
    one_tile[:16, :16] = (good[:16, :16].float() * 1.05 + 0.05).to(torch.bfloat16)
    result = spec.compare([a, b], [one_tile])
    assert (result.rel_err or 1) < GEMM_REL_TOL["bf16"]
    assert not result.ok and "elements off by more than" in result.message


def test_artifact_tensors_must_fit_the_problem() -> None:
    CopyReference(COPY).check_tensors(_copy_tensors())
    with pytest.raises(KernelLoadError, match=r"expected inputs \[\(64, 128\)\]"):
        CopyReference(COPY).check_tensors(_copy_tensors(64, 64))
    gemm = Problem.of("gemm", "bf16", m=128, n=64, k=32)
    a = TensorDesc("A", "input", (128, 32), "bf16")
    b = TensorDesc("B", "input", (64, 32), "bf16")
    d = TensorDesc("D", "output", (128, 64), "bf16")
    GemmReference(gemm).check_tensors((a, b, d))
    GemmReference(gemm).check_tensors((d, a, b))  # roles, not positions, say which is which
    with pytest.raises(KernelLoadError, match="do not fit"):
        GemmReference(gemm).check_tensors((b, a, d))  # A and B swapped
    with pytest.raises(KernelLoadError, match="do not fit"):
        GemmReference(gemm).check_tensors((a, b, TensorDesc("D", "output", (128, 64), "fp16")))


# -- arithmetic ----------------------------------------------------------------------------
def test_buffer_rotation_exceeds_twice_l2() -> None:
    l2, free = 50 * 2**20, 140 * 2**30  # H200-like
    copy_set = 2 * 4096 * 4096 * 2  # fp16 4096^2 in and out: 64 MiB
    n = plan_buffer_sets(copy_set, l2, free)
    assert n * copy_set > 2 * l2 and (n - 1) * copy_set <= 2 * l2 and n >= 2
    gemm_set = (3 * 8192 * 8192) * 2  # A, B, D bf16: 384 MiB, already > 2 x L2
    assert plan_buffer_sets(gemm_set, l2, free) == 2
    assert plan_buffer_sets(16 * 1024, l2, free) == MAX_BUFFER_SETS  # tiny: capped
    assert plan_buffer_sets(copy_set, l2, 3 * copy_set) == 1  # memory-bound
    with pytest.raises(ValueError, match="only 10 MiB of device memory are free"):
        plan_buffer_sets(copy_set, l2, 10 * 2**20)


def test_percentiles_interpolate_between_ranks() -> None:
    timing = Timing.of([float(x) for x in (11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6)])
    assert (timing.median_us, timing.p10_us, timing.p90_us, timing.runs) == (6.0, 2.0, 10.0, 11)
    assert percentile([1.0, 2.0], 0.5) == 1.5
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_cuda_error_codes_map_to_statuses() -> None:
    assert status_of_cuda_error(700) == "crash"  # illegal address
    assert status_of_cuda_error(719) == "crash"  # unspecified launch failure
    assert status_of_cuda_error(702) == "hang"  # launch timeout
    assert status_of_cuda_error(701) == "launch_error"  # too many resources requested
    assert status_of_cuda_error(209) == "launch_error"  # no kernel image for the device
    assert status_of_cuda_error(-1) == "launch_error"  # the shim refused the tensor count


def test_cudart_search_order() -> None:
    found = cudart_candidates("libcudart.so.12")
    assert found[0] == "libcudart.so.12"
    first_13 = found.index("libcudart.so.13")
    assert all("so.12" in f for f in found[:first_13])
    for toolkit in glob.glob("/usr/local/cuda*/lib64/libcudart.so.13"):
        assert toolkit in found


def test_measure_refuses_too_few_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="runs=5"):
        measure_artifact(tmp_path, runs=5)
    assert runner.main(["--artifact", str(tmp_path), "--runs", "5"]) == 2
    assert runner.main([]) == 2


# -- a real artifact: compiled by the DSL, exported, linked with the dynamic CUDA runtime ----
BUILD_SCRIPT = f"""
import os, sys
os.environ["CUTE_DSL_ARCH"] = "sm_90a"
import cutlass, cutlass.cute as cute
import cuda.bindings.driver as cuda_driver
from cutlass.cute.runtime import make_fake_compact_tensor
from cutlass.runtime import make_fake_stream

R, C = {ROWS}, {COLS}


@cute.kernel
def copy_kernel(src: cute.Tensor, dst: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 128 + tidx
    if i < R * C:
        dst[i // C, i % C] = src[i // C, i % C]


@cute.jit
def host(src: cute.Tensor, dst: cute.Tensor, stream: cuda_driver.CUstream):
    copy_kernel(src, dst).launch(grid=((R * C + 127) // 128, 1, 1), block=(128, 1, 1),
                                 stream=stream)


a = make_fake_compact_tensor(cutlass.Float16, (R, C), stride_order=(1, 0), assumed_align=16)
b = make_fake_compact_tensor(cutlass.Float16, (R, C), stride_order=(1, 0), assumed_align=16)
cute.compile(host, a, b, make_fake_stream()).export_to_c(sys.argv[1], "kernel", "tsk")
"""

SHIM = """
#include "kernel.h"
static tsk_Kernel_Module_t g_mod;
static int g_loaded = 0;
int tsopt_load(void) {
  if (!g_loaded) { tsk_Kernel_Module_Load(&g_mod); g_loaded = 1; }
  return (int)cudaGetLastError();
}
int tsopt_launch(void **ptrs, int n, cudaStream_t s) {
  if (n != 2) return -1;
  tsk_Tensor_src_t a = {ptrs[0]}; tsk_Tensor_dst_t b = {ptrs[1]};
  return cute_dsl_tsk_wrapper(&g_mod, &a, &b, s);
}
"""


def _toolchain() -> tuple[str, Path, Path] | str:
    """(gcc, CUDA toolkit, DSL runtime archive), or why the artifact cannot be built here."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return "no gcc on this machine"
    toolkits = [Path(p).parent.parent for p in
                sorted(glob.glob("/usr/local/cuda*/include/cuda_runtime.h"), reverse=True)]
    if not toolkits:
        return "no CUDA toolkit headers under /usr/local/cuda*"
    archives = [Path(p) for entry in sys.path for p in glob.glob(
        f"{entry}/nvidia_cutlass_dsl/*/lib/libcuda_dialect_runtime_static.a")]
    if not archives:
        return "nvidia-cutlass-dsl (its CUDA-dialect runtime) is not installed"
    return gcc, toolkits[0], archives[0]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real artifact directory: DSL-compiled sm_90a copy kernel, shim, libkernel.so."""
    tools = _toolchain()
    if isinstance(tools, str):
        pytest.skip(f"cannot build a real artifact: {tools}")
    gcc, toolkit, archive = tools
    genome = Genome.make("copy", numeric={"stages": 1, "box_cols": COLS})
    out = tmp_path_factory.mktemp("artifacts") / genome.hash
    out.mkdir()
    script = out.parent / "build_copy_kernel.py"  # the DSL compiles from source files only
    script.write_text(BUILD_SCRIPT)
    build = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    (out / "shim.c").write_text(SHIM)
    lib64 = toolkit / "lib64" if (toolkit / "lib64").is_dir() else toolkit / "lib"
    link = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "shim.c", "kernel.o", str(archive),
         f"-I{toolkit / 'include'}", f"-L{lib64}", "-lcudart", "-ldl", "-lpthread", "-lrt",
         "-o", "libkernel.so"], cwd=out, capture_output=True, text=True, timeout=120)
    assert link.returncode == 0, link.stderr[-3000:]
    ArtifactManifest(genome.hash, "copy", COPY.to_dict(), "sm_90a", _copy_tensors()).write(out)
    return out


def _variant(artifact: Path, tmp_path: Path, **changes: object) -> Path:
    """A copy of the artifact with fields of its artifact.json changed."""
    copy = tmp_path / artifact.name
    shutil.copytree(artifact, copy)
    doc = json.loads((copy / "artifact.json").read_text())
    doc.update(changes)
    (copy / "artifact.json").write_text(json.dumps(doc))
    return copy


@pytest.mark.slow
def test_the_artifact_links_the_cuda_runtime_dynamically(artifact: Path) -> None:
    soname = needed_cudart(artifact / "libkernel.so")
    assert soname in ("libcudart.so.13", "libcudart.so.12")
    assert (artifact / "libkernel.so").stat().st_size < 200_000  # no static cudart inside


def test_the_runner_loads_the_artifact_and_binds_its_symbols(artifact: Path) -> None:
    lib = KernelLibrary.open(artifact, ArtifactManifest.read(artifact))
    assert lib._load.restype is not None and lib._launch.argtypes is not None
    assert Path(lib.cuda.runtime.path).name.startswith("libcudart.so")
    if not any(Path(d).exists() for d in ("/dev/nvidiactl", "/dev/nvidia0")):
        # No NVIDIA driver here: the runtime says so by error code, which the runner can name.
        assert lib.cuda.driver_error is not None and "libcuda.so.1" in lib.cuda.driver_error
        code, _count = lib.cuda.runtime.device_count()
        assert code != 0 and "cudaError" in lib.cuda.runtime.describe(code)


@NO_GPU
def test_without_a_gpu_measuring_the_artifact_is_a_named_launch_error(artifact: Path) -> None:
    m = measure_artifact(artifact)
    assert m.status == "launch_error"
    assert m.error is not None and m.error.startswith("no GPU: torch")
    assert m.genome_hash == artifact.name and m.problem_key == COPY.key
    assert m.torch == torch.__version__ and m.median_us is None


def test_a_missing_symbol_or_library_or_bad_tensors_is_a_launch_error(
    artifact: Path, tmp_path: Path,
) -> None:
    m = measure_artifact(_variant(artifact, tmp_path / "a", launch_symbol="tsopt_launch_v2"))
    assert m.status == "launch_error" and "lacks an artifact ABI symbol" in (m.error or "")
    assert "tsopt_launch_v2" in (m.error or "")
    m = measure_artifact(_variant(artifact, tmp_path / "b", library="libmissing.so"))
    assert m.status == "launch_error" and "no library 'libmissing.so'" in (m.error or "")
    wrong = [t.to_dict() for t in _copy_tensors(ROWS, 2 * COLS)]
    m = measure_artifact(_variant(artifact, tmp_path / "c", tensors=wrong))
    assert m.status == "launch_error" and "do not fit copy fp16" in (m.error or "")
    m = measure_artifact(_variant(artifact, tmp_path / "d", abi=7))
    assert m.status == "launch_error" and "abi 7" in (m.error or "")


@pytest.mark.slow
@NO_GPU
def test_without_a_gpu_the_isolated_child_reports_the_same_launch_error(artifact: Path) -> None:
    m = measure_candidate(artifact, artifact.name, COPY.key, baseline_us=20.0)
    assert m.status == "launch_error"
    assert (m.error or "").startswith("no GPU: torch")
    assert m.seconds > 0  # the watchdog's wall time of a real child process


@NO_GPU
def test_without_a_gpu_measure_artifacts_stops_at_the_baseline_probe(artifact: Path) -> None:
    with pytest.raises(MeasureError, match="cannot time the copy fp16 rows=64 cols=128 baseline "
                                           "here: no GPU"):
        measure_artifacts([artifact])


# -- the measuring flow, on a simulated device ---------------------------------------------
# measure_loaded is the GPU path: check, time, re-check, baseline. It runs here on a SIMULATED
# DEVICE: CPU tensors, a synchronous host-timed session, and Python functions planted in place
# of the kernel. What is under test is the flow and what it records (statuses, messages, the
# rotation, the Measurement's fields); the host timings it produces are never reported.
class SimulatedSession(Session):
    """A CPU stand-in for the GPU session: synchronous, timed with the host clock; its buffers
    are CPU tensors that ``kernel`` reads and writes."""

    def __init__(self, kernel: PlantedKernel) -> None:  # no CUDA stream here
        self.cuda = None
        self.device = torch.device("cpu")
        self.generator = torch.Generator()
        self.kernel = kernel

    def allocate(self, reference: OpReference, tensors) -> Buffers:  # type: ignore[no-untyped-def]
        return self.kernel.register(make_buffers(tensors, reference.dtype, 3, self.device))

    @property
    def handle(self) -> int:
        return 0

    def synchronize(self, when: str) -> None:
        return None

    def time_runs(self, launch, sets, runs, warmup, what):  # type: ignore[no-untyped-def]
        warm, timed = rotation(len(sets), warmup, runs)
        for index in warm:
            launch(sets[index])
        samples = []
        for index in timed:
            start = time.perf_counter()
            launch(sets[index])
            samples.append((time.perf_counter() - start) * 1e6)
        return Timing.of(samples)

    def time_launches(self, launch, sets, what):  # type: ignore[no-untyped-def]
        samples = []
        for bset in sets:
            start = time.perf_counter()
            launch(bset)
            samples.append((time.perf_counter() - start) * 1e6)
        return samples

    # The graph mode on the simulated device: "capturing" launches each set once with the
    # kernel told it is under capture (a kernel that synchronises refuses there, as CUDA
    # does), then a replay runs the recorded launches again in order.
    def record_graph(self, launch, sets):  # type: ignore[no-untyped-def]
        self.kernel.capturing = True
        try:
            for bset in sets:
                launch(bset)
        finally:
            self.kernel.capturing = False
        self.kernel.captures.append(len(sets))
        return CapturedLaunches(SimulatedGraph(launch, list(sets)), len(sets))

    def time_replays(self, captured, count, what):  # type: ignore[no-untyped-def]
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            captured.replay()
            samples.append((time.perf_counter() - start) * 1e6 / captured.launches)
        return samples

    def time_calls(self, call, sets, what):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        for bset in sets:
            call(bset)
        return (time.perf_counter() - start) * 1e6 / len(sets)


class SimulatedGraph:
    """A captured graph's stand-in on the simulated device: the recorded launches, in order."""

    def __init__(self, launch, sets) -> None:  # type: ignore[no-untyped-def]
        self.launch, self.sets = launch, sets

    def replay(self) -> None:
        for bset in self.sets:
            self.launch(bset)

    def reset(self) -> None:
        self.sets = []


CAPTURE_UNSUPPORTED = 900  # cudaErrorStreamCaptureUnsupported: a sync inside a capture


class PlantedKernel:
    """A Python function in place of the artifact's library (simulated device)."""

    def __init__(self, body, load_code: int = 0,  # type: ignore[no-untyped-def]
                 syncs: bool = False) -> None:
        self.body = body
        self.load_code = load_code
        self.syncs = syncs  # its host code synchronises the stream: refused under capture
        self.capturing = False
        self.captures: list[int] = []  # launches per captured graph
        self.launches = 0
        self.sets: dict[tuple[int, ...], BufferSet] = {}
        self.cuda = CudaLibraries(FakeRuntime(), None)  # type: ignore[arg-type]

    def register(self, buffers: Buffers) -> Buffers:
        for bset in buffers.sets:
            self.sets[tuple(bset.ptrs)] = bset  # type: ignore[arg-type]
        return buffers

    def load_module(self) -> int:
        return self.load_code

    def launch(self, ptrs, stream: int) -> int:  # type: ignore[no-untyped-def]
        if self.capturing and self.syncs:
            return CAPTURE_UNSUPPORTED
        self.launches += 1
        bset = self.sets[tuple(ptrs)]
        return int(self.body(bset.inputs, bset.outputs, self.launches) or 0)


class FakeRuntime:
    def describe(self, code: int) -> str:
        return f"{code} simulated"


def run_planted(problem: Problem, body,  # type: ignore[no-untyped-def]
                load_code: int = 0, runs: int = 20, warmup: int = 3, launch: str = "graph",
                user_call=None, syncs: bool = False):
    kernel = PlantedKernel(body, load_code, syncs)
    reference = reference_for(problem)
    tensors = reference.default_tensors()
    manifest = ArtifactManifest("ab" * 32, problem.op, problem.to_dict(), "sm_90a", tuple(tensors))
    checked: list[dict[str, object]] = []
    base = {"genome_hash": "ab" * 32, "problem_key": problem.key, "device": "simulated device"}
    m = candidate.measure_loaded(kernel, reference, manifest, SimulatedSession(kernel), runs,  # type: ignore[arg-type]
                                 warmup, 2, checked.append, base, time.perf_counter(),
                                 launch=launch, user_call=user_call)
    return m, checked, kernel


SMALL_COPY = Problem.of("copy", "fp16", rows=32, cols=64)


@pytest.mark.parametrize("launch", ["graph", "isolated"])
def test_simulated_correct_copy_is_ok_and_checked_timed_and_compared(launch: str) -> None:
    def copy(ins, outs, n):  # type: ignore[no-untyped-def]
        outs[0].copy_(ins[0])

    m, checked, kernel = run_planted(SMALL_COPY, copy, launch=launch)
    assert m.status == "ok", m.error
    assert m.rel_err == 0.0 and m.rate_unit == "GB/s"
    assert m.baseline_name == "torch.copy_" and m.ratio is not None and m.ratio > 0
    assert m.p10_us is not None and m.median_us is not None and m.p90_us is not None
    assert m.p10_us <= m.median_us <= m.p90_us
    assert checked == [{"rel_err": 0.0, "checks": 2, "buffer_sets": 3}]
    # Paired rounds: the candidate and torch's copy alternate, each round a batch of each.
    assert m.rounds >= 3 and m.runs % m.rounds == 0
    assert m.ratio_lo is not None and m.ratio_hi is not None
    assert m.ratio_lo <= m.ratio <= m.ratio_hi
    assert m.conditions["stopped"] in ("converged", "time cap", "max rounds")
    assert m.conditions["nvml"].startswith("unavailable")  # no GPU to read here
    # checks, the warm-up (two samples per batch), the timed samples, the back-to-back
    # re-check; in graph mode a sample is a replay of 32, after two runs outside the capture
    # and the (simulated) capture's own 32.
    per, graph = (GRAPH_MIN_LAUNCHES, 2 + GRAPH_MIN_LAUNCHES) if launch == "graph" else (1, 0)
    warm_batches = ((kernel.launches - 2 - graph - 3) / per - m.runs) / 2
    assert warm_batches >= 1 and warm_batches == int(warm_batches)


def test_simulated_partial_write_is_wrong_naming_the_poison() -> None:
    def half(ins, outs, n):  # type: ignore[no-untyped-def]
        outs[0][:16].copy_(ins[0][:16])

    m, checked, _ = run_planted(SMALL_COPY, half)
    assert m.status == "wrong" and checked == []
    assert "checked run 1 of 2 (input seed" in (m.error or "")
    assert "1024 of 2048 elements differ" in (m.error or "")
    assert "1024 of them still hold the NaN poison" in (m.error or "")


def test_simulated_race_after_the_checks_is_wrong() -> None:
    def racy(ins, outs, n):  # type: ignore[no-untyped-def]
        outs[0].copy_(ins[0])
        if n > 6:  # right in the two checks, wrong once launches pile up
            outs[0][5, 5] = 0.0

    m, checked, _ = run_planted(SMALL_COPY, racy)
    assert checked and m.status == "wrong"
    assert "correct in 2 isolated checks but wrong in back-to-back launches" in (m.error or "")


def test_simulated_launch_and_load_errors_raise_the_mapped_fault() -> None:
    with pytest.raises(KernelFault) as fault:
        run_planted(SMALL_COPY, lambda ins, outs, n: 700)
    assert fault.value.status == "crash"
    assert fault.value.message == "tsopt_launch returned 700 simulated"
    with pytest.raises(KernelFault) as fault:
        run_planted(SMALL_COPY, lambda ins, outs, n: 0, load_code=209)
    assert fault.value.status == "launch_error" and "tsopt_load returned 209" in fault.value.message


@pytest.mark.slow
def test_simulated_gemm_is_checked_against_the_fp32_reference() -> None:
    problem = Problem.of("gemm", "bf16", m=64, n=32, k=128)

    def gemm(ins, outs, n):  # type: ignore[no-untyped-def]
        outs[0].copy_((ins[0].float() @ ins[1].float().t()).to(outs[0].dtype))

    m, _, _ = run_planted(problem, gemm)
    assert m.status == "ok", m.error
    assert m.rate_unit == "TFLOP/s" and m.baseline_name == "torch.matmul (cuBLAS)"
    assert m.rel_err is not None and 0 < m.rel_err < GEMM_REL_TOL["bf16"]


SMALL_COPY_INT16 = Problem.of("copy", "int16", rows=32, cols=64)


def test_simulated_int16_copy_is_ok_bit_exact_against_torch_copy() -> None:
    seen: list[torch.Tensor] = []

    def copy(ins, outs, n):  # type: ignore[no-untyped-def]
        seen.append(ins[0].clone())
        outs[0].copy_(ins[0])

    m, checked, kernel = run_planted(SMALL_COPY_INT16, copy)
    assert m.status == "ok", m.error
    assert m.problem_key == "copy-int16-32x64" and m.rel_err == 0.0 and m.rate_unit == "GB/s"
    assert m.baseline_name == "torch.copy_" and m.ratio is not None and m.ratio > 0
    assert checked == [{"rel_err": 0.0, "checks": 2, "buffer_sets": 3}]
    assert kernel.launches > 2 + m.runs  # checks, warm-up, paired rounds, re-check
    assert all(t.dtype == torch.int16 for t in seen)
    assert not torch.equal(seen[0], seen[1])  # fresh random inputs for each check


def test_simulated_int16_partial_write_is_wrong_naming_the_poison() -> None:
    def half(ins, outs, n):  # type: ignore[no-untyped-def]
        outs[0][:16].copy_(ins[0][:16])

    m, checked, _ = run_planted(SMALL_COPY_INT16, half)
    assert m.status == "wrong" and checked == []
    assert "checked run 1 of 2 (input seed" in (m.error or "")
    # An input equal to the poison (once in 2^16) is neither counted as differing nor unwritten.
    assert "of 2048 elements differ" in (m.error or "")
    assert f"of them still hold the poison {INT16_POISON} (never written)" in (m.error or "")


def _copy_body(ins, outs, n):  # type: ignore[no-untyped-def]
    outs[0].copy_(ins[0])


def test_simulated_graph_mode_captures_each_side_over_every_rotated_set() -> None:
    m, _checked, kernel = run_planted(SMALL_COPY, _copy_body, launch="graph")
    assert m.status == "ok", m.error
    assert m.launch == "graph"
    # One graph per side (the candidate's, then torch's copy), of GRAPH_MIN_LAUNCHES launches
    # cycling over the simulated session's 3 buffer sets; a sample is one replay over 32.
    assert kernel.captures == [GRAPH_MIN_LAUNCHES, GRAPH_MIN_LAUNCHES]
    assert m.conditions["launches_per_sample"] == GRAPH_MIN_LAUNCHES
    assert m.ratio is not None and m.ratio_lo is not None and m.rounds >= 3


def test_simulated_graph_timer_captures_the_baseline_too_and_alternates_abba() -> None:
    session = SimulatedSession(PlantedKernel(_copy_body))
    reference = reference_for(SMALL_COPY)
    buffers = session.allocate(reference, reference.default_tensors())
    captured: list[tuple[str, int]] = []
    replayed: list[str] = []
    real_record, real_replays = session.record_graph, session.time_replays

    def record(launch, sets):  # type: ignore[no-untyped-def]
        captured.append((launch.__name__, len(sets)))
        return real_record(launch, sets)

    def replays(graph, count, what):  # type: ignore[no-untyped-def]
        replayed.append(graph.graph.launch.__name__)
        return real_replays(graph, count, what)
    session.record_graph = record  # type: ignore[method-assign]
    session.time_replays = replays  # type: ignore[method-assign]

    def cand(bset: BufferSet) -> None:
        bset.outputs[0].copy_(bset.inputs[0])

    def base(bset: BufferSet) -> None:
        bset.outputs[0].copy_(bset.inputs[0])

    settings = PairedSettings(min_rounds=4, max_rounds=4, warmup_min_s=0.0, warmup_max_s=0.0,
                              target=0.0)
    timing = PairedTimer(session, buffers.sets, None, settings, launch="graph").time(cand, base)
    assert captured == [("cand", GRAPH_MIN_LAUNCHES), ("base", GRAPH_MIN_LAUNCHES)]
    assert timing.rounds == 4 and timing.conditions["launches_per_sample"] == GRAPH_MIN_LAUNCHES
    # The warm-up replays each side once, then the rounds alternate AB, BA, AB, BA.
    assert replayed == ["cand", "base"] + ["cand", "base", "base", "cand"] * 2


def test_simulated_eager_mode_times_the_user_call_path_not_the_launch() -> None:
    calls: list[int] = []

    def user_call(bset: BufferSet) -> None:  # the export's loader, as its user calls it
        calls.append(1)
        bset.outputs[0].copy_(bset.inputs[0])

    m, _checked, kernel = run_planted(SMALL_COPY, _copy_body, launch="eager", user_call=user_call)
    assert m.status == "ok", m.error
    assert m.launch == "eager" and m.conditions["launches_per_sample"] == EAGER_CALLS
    assert kernel.captures == []
    assert len(calls) % EAGER_CALLS == 0 and len(calls) >= EAGER_CALLS * m.rounds
    with pytest.raises(ValueError, match="pass candidate_call"):
        run_planted(SMALL_COPY, _copy_body, launch="eager")


def test_simulated_isolated_mode_is_the_old_runner_and_says_so() -> None:
    m, _checked, kernel = run_planted(SMALL_COPY, _copy_body, launch="isolated")
    assert m.status == "ok", m.error
    assert m.launch == "isolated" and m.conditions["launches_per_sample"] == 1
    assert kernel.captures == []


def test_simulated_kernel_that_syncs_cannot_be_captured_and_says_why() -> None:
    with pytest.raises(CaptureError) as fault:
        run_planted(SMALL_COPY, _copy_body, launch="graph", syncs=True)
    assert fault.value.status == "launch_error"
    assert fault.value.message == ("the candidate cannot be captured in a CUDA graph: "
                                   "tsopt_launch returned 900 simulated")
    # The same kernel measures in the other modes: only its capture fails.
    m, _checked, _kernel = run_planted(SMALL_COPY, _copy_body, launch="isolated", syncs=True)
    assert m.status == "ok", m.error


def test_an_unknown_launch_mode_is_refused_by_the_timer() -> None:
    session = SimulatedSession(PlantedKernel(_copy_body))
    with pytest.raises(ValueError, match="launch mode 'replay': expected one of graph, eager"):
        PairedTimer(session, [], None, launch="replay")


def test_int16_inputs_span_the_type_and_outputs_hold_the_poison() -> None:
    reference = reference_for(SMALL_COPY_INT16)
    values = torch.empty(1 << 18, dtype=torch.int16)
    reference.fill_inputs(values, torch.Generator().manual_seed(7))
    assert int(values.min()) < -32000 and int(values.max()) > 32000  # every value, as randint
    out = torch.empty(8, dtype=torch.int16)
    reference.poison(out)
    assert bool((out == INT16_POISON).all()) and bool(reference.unwritten(out).all())


def test_int16_copy_check_is_bit_exact_and_counts_the_poison() -> None:
    reference = CopyReference(SMALL_COPY_INT16)
    src = torch.randint(-2**15, 2**15, (32, 64), dtype=torch.int16)
    src[3, 5], src[7, 9] = 11, -12
    assert reference.compare([src], [src.clone()]).ok
    dst = src.clone()
    dst[3, 5] = INT16_POISON  # never written
    dst[7, 9] = -13
    result = reference.compare([src], [dst])
    assert not result.ok and result.rel_err is not None and result.rel_err > 0
    assert "2 of 2048 elements differ" in result.message
    assert f"1 of them still hold the poison {INT16_POISON}" in result.message


def test_gemm_has_no_int16_reference() -> None:
    with pytest.raises(ProblemError, match="cannot check gemm on int16; it checks fp16, bf16"):
        reference_for(Problem.of("gemm", "int16", m=64, n=32, k=128))


def test_rotation_is_round_robin() -> None:
    assert rotation(3, 2, 5) == ([0, 1], [2, 0, 1, 2, 0])
    warm, timed = rotation(2, 10, 50)
    order = warm + timed
    assert all(order[i] != order[i + 1] for i in range(len(order) - 1))  # never twice in a row
