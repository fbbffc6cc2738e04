"""The GPU measuring core: check one built candidate against torch and time it against the vendor.

Imports torch and the standard library only (plus tsopt's standard-library modules), because it
runs on GPU machines that have neither the DSL nor the search stack.

One candidate, in order (:func:`measure_artifact`):

1. load ``libcuda.so.1`` and a ``libcudart`` with RTLD_GLOBAL, then the artifact's library and
   its two symbols (``tsopt_load``, ``tsopt_launch``; see tsopt.core.artifact);
2. ``tsopt_load()``: the module load, its return code checked;
3. ``checks`` times: fresh random inputs, the output poisoned with NaN, one launch, compare with
   a torch reference (every element written; tolerance by dtype, see :data:`GEMM_REL_TOL`);
4. time: rotate among buffer sets whose total exceeds 2 x L2, warm-up runs, then ``runs`` runs
   each bracketed by CUDA events; median, p10, p90; afterwards the outputs of the timed runs are
   checked again (a race can pass one isolated launch and fail back-to-back ones);
5. the vendor baseline (``dst.copy_(src)``; ``torch.matmul(A, B.t(), out=D)``, i.e. cuBLAS)
   timed the same way on the same buffer sets in the same process, so results are ratios.

A CUDA fault becomes a status with its message: an illegal address or other sticky fault is
``crash``, a refused launch or module load is ``launch_error``, a wrong output is ``wrong``.
What a process cannot report about itself (a deadlock, a signal death) is the watchdog's job:
run candidates through tsopt.workers.watchdog, which starts this module with ``--child``: by default
one persistent ``--child worker`` (:class:`MeasuringWorker`) measures candidate after
candidate, reusing its CUDA context, buffers and baseline; ``--isolation process`` runs
``--child measure`` once per candidate instead.

Command line::

    python -m tsopt.workers.runner --bundle DIR [--runs 50] [--warmup 10] [--limit N]
    python -m tsopt.workers.runner --artifact DIR [--artifact DIR ...] [--runs 50] [--gpu 0]
        [--isolation worker|process] [--max-candidates 200] [--baseline once|paired]
    python -m tsopt.workers.runner --child measure|baseline|worker ...   (the watchdog's; internal)
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tsopt.core.artifact import ArtifactError, ArtifactManifest, TensorDesc
from tsopt.core.bundle import Baseline, utc_now
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import Measurement
from tsopt.workers.loader import (  # the CUDA-library loading shared with tsopt.load_kernel
    CUDART_SONAMES,  # noqa: F401 - re-exported: tests and the simulated device patch these here
    CudaLibraries,  # noqa: F401
    CudaRuntime,
    KernelLibrary,
    KernelLoadError,
    cudart_candidates,  # noqa: F401
    load_cuda,  # noqa: F401
    needed_cudart,  # noqa: F401
    torch_library_dirs,  # noqa: F401
)
from tsopt.workers.watchdog import (
    BASELINE_MODES,
    ISOLATIONS,
    REBASELINE_EVERY,
    WORKER_MAX_CANDIDATES,
    CommandReader,
    Reporter,
)

TORCH_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16}

# Correctness of a GEMM, D = A @ B^T with fp32 accumulation, against ref = A.float() @ B.float().T
# (fp32, TF32 off). The output is rounded to 16 bits, so a correct kernel's error is that
# rounding: bf16 keeps 8 significant bits (unit roundoff 2^-8; the rms relative rounding error is
# ~1.6e-3, and the GEMMs of MEASURED.md measured 1.7e-3), fp16 keeps 11 (2^-11; ~2e-4).
# The norm thresholds sit 6x (bf16) and 25x (fp16) above that floor and far below what a real
# bug gives (a dropped K stage or a wrong tile row: 1e-1 and up).
GEMM_REL_TOL: dict[str, float] = {"bf16": 1e-2, "fp16": 5e-3}
# A norm hides a small wrong region (one wrong 128x128 tile of 8192x8192 moves it by 1.6e-2 x its
# error), so each element must also satisfy |d - ref| <= tol x (|ref| + rms(ref)): 8x the
# half-ulp bound of one rounding (bf16 2^-9, fp16 2^-12); the rms term absorbs the fp32
# summation-order difference on elements near zero.
GEMM_ELEM_TOL: dict[str, float] = {"bf16": 2.0**-6, "fp16": 2.0**-9}
# A copy must reproduce its input bit for bit.

MIN_RUNS = 20
ROTATION_L2_MULTIPLE = 2  # rotated buffers total > 2 x L2, so no timed run finds its data cached
MAX_BUFFER_SETS = 4096  # tiny problems: beyond this the rotation stops growing
MEMORY_FRACTION = 0.5  # of free device memory, for the rotated sets (the reference needs room)
VERIFY_SETS_AFTER_TIMING = 8
# Each timed run is preceded by a ~50 us spin kernel so the GPU is still busy while the host
# submits start event, launch and end event: the events then time the kernel, not the host's
# launch latency (the same trick as nvbench's blocking kernel), for candidate and baseline alike.
SLEEP_CYCLES = 100_000
ALIGN_BYTES = 256

# cudaError_t values after which the context is unusable: the kernel faulted while running.
CRASH_CODES = {700, 710, 714, 715, 716, 717, 718, 719}
HANG_CODES = {702}  # cudaErrorLaunchTimeout: a display watchdog killed a kernel that ran too long


# -- errors --------------------------------------------------------------------------------
class KernelFault(Exception):
    """A CUDA call failed; ``status`` is the Measurement status it maps to."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def status_of_cuda_error(code: int) -> str:
    if code in CRASH_CODES:
        return "crash"
    if code in HANG_CODES:
        return "hang"
    return "launch_error"


# -- device and environment ----------------------------------------------------------------
def why_no_gpu() -> str | None:
    """None when torch sees a CUDA device; otherwise a sentence saying why not."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (f"no GPU: torch {torch.__version__} is a CPU-only build "
                "(torch.cuda.is_available() is False)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"no GPU: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))


_DRIVER: list[str] = []


def driver_version(cuda: CudaRuntime | None = None) -> str:
    """The NVIDIA driver version (nvidia-smi), else the driver's CUDA API version."""
    if not _DRIVER:
        _DRIVER.append(_query_driver_version(cuda))
    return _DRIVER[0]


def _query_driver_version(cuda: CudaRuntime | None) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass  # no nvidia-smi here: fall back to the driver's CUDA API version
    if cuda is not None:
        code, version = cuda.driver_version()
        if code == 0 and version:
            return f"CUDA driver API {version // 1000}.{version % 1000 // 10}"
    return ""


def environment(cuda: CudaRuntime | None = None) -> dict[str, Any]:
    """Device name, driver, CUDA and torch versions, L2 size (needs a GPU)."""
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name, "driver": driver_version(cuda), "cuda": torch.version.cuda or "",
        "torch": torch.__version__, "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count, "l2_bytes": int(props.L2_cache_size),
        "memory_bytes": int(props.total_memory), "python": sys.version.split()[0],
    }


# -- the ops: what to feed, how to check, what the vendor does -----------------------------
@dataclass(frozen=True)
class CheckResult:
    ok: bool
    rel_err: float | None
    message: str = ""


class OpSpec:
    """One op's inputs, reference check, vendor baseline and rate."""

    baseline_name = ""
    rate_unit = ""
    input_std = 1.0

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.dtype = TORCH_DTYPES[problem.dtype]

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        raise NotImplementedError

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        raise NotImplementedError

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def rate(self, median_us: float) -> float:
        raise NotImplementedError

    def default_tensors(self) -> list[TensorDesc]:
        ins, outs = self.tensor_shapes()
        return ([TensorDesc(f"in{i}", "input", s, self.problem.dtype) for i, s in enumerate(ins)]
                + [TensorDesc(f"out{i}", "output", s, self.problem.dtype)
                   for i, s in enumerate(outs)])

    def check_tensors(self, tensors: Sequence[TensorDesc]) -> None:
        """The artifact's tensors, by role and in order, must be this op's; else KernelLoadError."""
        ins, outs = self.tensor_shapes()
        got_in = [t.shape for t in tensors if t.role == "input"]
        got_out = [t.shape for t in tensors if t.role == "output"]
        roles = {t.role for t in tensors} - {"input", "output"}
        dtypes = {t.dtype for t in tensors} - {self.problem.dtype}
        if got_in != ins or got_out != outs or roles or dtypes:
            have = ", ".join(f"{t.name}:{t.role}{list(t.shape)}:{t.dtype}" for t in tensors)
            raise KernelLoadError(
                f"artifact tensors [{have}] do not fit {self.problem}: expected inputs {ins} "
                f"and outputs {outs} of {self.problem.dtype}"
            )


class CopySpec(OpSpec):
    baseline_name = "torch.copy_"
    rate_unit = "GB/s"

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        shape = (self.problem["rows"], self.problem["cols"])
        return [shape], [shape]

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        src, dst = inputs[0], outputs[0]
        bits_src, bits_dst = src.view(torch.int16), dst.view(torch.int16)
        if torch.equal(bits_src, bits_dst):
            return CheckResult(True, 0.0)
        differ = int((bits_src != bits_dst).sum())
        unwritten = int(torch.isnan(dst).sum())
        written = ~torch.isnan(dst)
        diff = torch.where(written, dst.float() - src.float(), torch.zeros((), device=dst.device))
        rel = float(torch.linalg.vector_norm(diff, dtype=torch.float64)
                    / torch.linalg.vector_norm(src, dtype=torch.float64))
        return CheckResult(False, rel, (
            f"{differ} of {dst.numel()} elements differ from the input; {unwritten} of them "
            "still hold the NaN poison (never written)"
        ))

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        outputs[0].copy_(inputs[0])

    def rate(self, median_us: float) -> float:
        return self.problem.bytes_moved / (median_us * 1e3)  # read + write bytes, GB/s


class GemmSpec(OpSpec):
    baseline_name = "torch.matmul (cuBLAS)"
    rate_unit = "TFLOP/s"

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem)
        # A, B ~ N(0, K^-1/2): D's elements come out ~N(0, 1), well inside fp16's range.
        self.input_std = problem["k"] ** -0.25

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        m, n, k = self.problem["m"], self.problem["n"], self.problem["k"]
        return [(m, k), (n, k)], [(m, n)]

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        a, b = inputs
        out = outputs[0].float()
        nonfinite = int((~torch.isfinite(out)).sum())
        if nonfinite:
            return CheckResult(False, None, (
                f"{nonfinite} of {out.numel()} output elements are NaN/Inf: left unwritten (the "
                "output was poisoned with NaN) or computed non-finite"
            ))
        ref = a.float() @ b.float().t()
        diff = out - ref
        ref_norm = float(torch.linalg.vector_norm(ref, dtype=torch.float64))
        rel = float(torch.linalg.vector_norm(diff, dtype=torch.float64)) / ref_norm
        rms = ref_norm / math.sqrt(ref.numel())
        tol, elem_tol = GEMM_REL_TOL[self.problem.dtype], GEMM_ELEM_TOL[self.problem.dtype]
        over = int((diff.abs() > elem_tol * (ref.abs() + rms)).sum())
        if rel <= tol and over == 0:
            return CheckResult(True, rel)
        return CheckResult(False, rel, (
            f"relative error {rel:.3g} (limit {tol:g}); {over} of {out.numel()} elements off by "
            f"more than {elem_tol:.3g} x (|ref| + rms(ref))"
        ))

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        torch.matmul(inputs[0], inputs[1].t(), out=outputs[0])

    def rate(self, median_us: float) -> float:
        return self.problem.flops / (median_us * 1e6)  # TFLOP/s


OP_SPECS: dict[str, type[OpSpec]] = {"copy": CopySpec, "gemm": GemmSpec}


def op_spec(problem: Problem) -> OpSpec:
    if problem.op not in OP_SPECS:
        raise ProblemError(f"the runner cannot check op {problem.op!r}; known: {list(OP_SPECS)}")
    return OP_SPECS[problem.op](problem)


# -- buffers -------------------------------------------------------------------------------
def plan_buffer_sets(set_bytes: int, l2_bytes: int, free_bytes: int) -> int:
    """How many input/output sets to rotate: enough to total > 2 x L2, at least 2, memory allowing.

    Raises ValueError when not even one set fits in :data:`MEMORY_FRACTION` of free memory.
    """
    if set_bytes <= 0:
        raise ValueError(f"a buffer set of {set_bytes} bytes")
    # The fewest sets whose total strictly exceeds 2 x L2; at least 2 so that no run follows
    # one on the same buffers.
    want = max(2, ROTATION_L2_MULTIPLE * l2_bytes // set_bytes + 1)
    afford = int(MEMORY_FRACTION * free_bytes) // set_bytes
    if afford < 1:
        raise ValueError(
            f"one buffer set needs {set_bytes / 2**20:.0f} MiB; only {free_bytes / 2**20:.0f} MiB "
            "of device memory are free"
        )
    return max(1, min(want, MAX_BUFFER_SETS, afford))


@dataclass
class BufferSet:
    tensors: list[torch.Tensor]  # in the order the set was made for
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]
    ptrs: ctypes.Array[ctypes.c_void_p]  # of ``tensors``, in that order
    bound: dict[tuple[str, ...], ctypes.Array[ctypes.c_void_p]] = field(
        default_factory=dict, repr=False)

    def pointers(self, roles: Sequence[str]) -> ctypes.Array[ctypes.c_void_p]:
        """The device pointers in a launch order given by role: a worker's buffers are made
        once per problem (inputs, then outputs), and an artifact may interleave them (D, A, B).
        Within a role the order is the op's (``OpSpec.check_tensors`` holds artifacts to it).
        """
        key = tuple(roles)
        cached = self.bound.get(key)
        if cached is None:
            ins, outs = iter(self.inputs), iter(self.outputs)
            views = [next(ins) if role == "input" else next(outs) for role in key]
            cached = (ctypes.c_void_p * len(views))(*[v.data_ptr() for v in views])
            self.bound[key] = cached
        return cached


@dataclass
class Buffers:
    """Every set's inputs in one allocation and outputs in another, so one fill covers each."""

    sets: list[BufferSet]
    input_region: torch.Tensor
    output_region: torch.Tensor
    set_bytes: int


def _aligned(numel: int, element_bytes: int) -> int:
    per = ALIGN_BYTES // element_bytes
    return (numel + per - 1) // per * per


def make_buffers(tensors: Sequence[TensorDesc], dtype: torch.dtype, n_sets: int,
                 device: torch.device) -> Buffers:
    elem = torch.tensor([], dtype=dtype).element_size()
    sizes = [_aligned(math.prod(t.shape), elem) for t in tensors]
    in_per_set = sum(s for s, t in zip(sizes, tensors, strict=True) if t.role == "input")
    out_per_set = sum(s for s, t in zip(sizes, tensors, strict=True) if t.role == "output")
    inputs = torch.empty(max(in_per_set * n_sets, 1), dtype=dtype, device=device)
    outputs = torch.empty(max(out_per_set * n_sets, 1), dtype=dtype, device=device)
    sets = []
    for i in range(n_sets):
        offsets = {"input": i * in_per_set, "output": i * out_per_set}
        views = []
        for size, t in zip(sizes, tensors, strict=True):
            region = inputs if t.role == "input" else outputs
            start = offsets[t.role]
            views.append(region[start:start + math.prod(t.shape)].view(t.shape))
            offsets[t.role] += size
        ptrs = (ctypes.c_void_p * len(views))(*[v.data_ptr() for v in views])
        sets.append(BufferSet(
            views, [v for v, t in zip(views, tensors, strict=True) if t.role == "input"],
            [v for v, t in zip(views, tensors, strict=True) if t.role == "output"], ptrs,
        ))
    return Buffers(sets, inputs, outputs, (in_per_set + out_per_set) * elem)


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & (2**63 - 1)


# -- timing --------------------------------------------------------------------------------
def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    runs: int

    @classmethod
    def of(cls, samples_us: Sequence[float]) -> Timing:
        ordered = sorted(samples_us)
        return cls(percentile(ordered, 0.5), percentile(ordered, 0.1), percentile(ordered, 0.9),
                   len(ordered))


def rotation(n_sets: int, warmup: int, runs: int) -> tuple[list[int], list[int]]:
    """The buffer set of each warm-up run and of each timed run: round robin over the sets."""
    order = [i % n_sets for i in range(warmup + runs)]
    return order[:warmup], order[warmup:]


class Session:
    """One process's GPU state for measuring: the stream and the CUDA runtime for error codes."""

    def __init__(self, cuda: CudaRuntime | None) -> None:
        self.cuda = cuda
        self.device = torch.device("cuda", 0)
        self.stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        self.generator = torch.Generator(device=self.device)

    @property
    def handle(self) -> int:
        return int(self.stream.cuda_stream)

    def synchronize(self, when: str) -> None:
        """Wait for the stream; a CUDA error becomes a KernelFault naming ``when``."""
        if self.cuda is None:
            self.stream.synchronize()
            return
        for code in (self.cuda.synchronize(self.handle), self.cuda.last_error()):
            if code:
                raise KernelFault(status_of_cuda_error(code),
                                  f"CUDA error {self.cuda.describe(code)} during {when}")

    def time_runs(self, launch: Callable[[BufferSet], None], sets: Sequence[BufferSet],
                  runs: int, warmup: int, what: str) -> Timing:
        warm, timed = rotation(len(sets), warmup, runs)
        for index in warm:
            launch(sets[index])
        self.synchronize(f"the warm-up runs of {what}")
        event = torch.cuda.Event
        starts = [event(enable_timing=True) for _ in range(runs)]  # type: ignore[no-untyped-call]
        ends = [event(enable_timing=True) for _ in range(runs)]  # type: ignore[no-untyped-call]
        sleep = getattr(torch.cuda, "_sleep", None)
        for start, end, index in zip(starts, ends, timed, strict=True):
            if sleep is not None:
                sleep(SLEEP_CYCLES)
            start.record(self.stream)
            launch(sets[index])
            end.record(self.stream)
        self.synchronize(f"the timed runs of {what}")
        return Timing.of([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)])


def _kernel_launcher(lib: KernelLibrary, session: Session,
                     tensors: Sequence[TensorDesc] | None = None) -> Callable[[BufferSet], None]:
    roles = [t.role for t in tensors] if tensors is not None else None

    def launch(bset: BufferSet) -> None:
        code = lib.launch(bset.ptrs if roles is None else bset.pointers(roles), session.handle)
        if code:
            raise KernelFault(status_of_cuda_error(code),
                              f"tsopt_launch returned {lib.cuda.runtime.describe(code)}")
    return launch


def _baseline_launcher(spec: OpSpec) -> Callable[[BufferSet], None]:
    def launch(bset: BufferSet) -> None:
        spec.baseline(bset.inputs, bset.outputs)
    return launch


def _fill(buffers: Buffers, spec: OpSpec, session: Session) -> int:
    seed = fresh_seed()
    session.generator.manual_seed(seed)
    buffers.input_region.normal_(0.0, spec.input_std, generator=session.generator)
    buffers.output_region.fill_(float("nan"))
    return seed


def _fill_set(bset: BufferSet, spec: OpSpec, session: Session) -> int:
    seed = fresh_seed()
    session.generator.manual_seed(seed)
    for t in bset.inputs:
        t.normal_(0.0, spec.input_std, generator=session.generator)
    for t in bset.outputs:
        t.fill_(float("nan"))
    return seed


def _allocate(spec: OpSpec, tensors: Sequence[TensorDesc], session: Session) -> Buffers:
    elem = torch.tensor([], dtype=spec.dtype).element_size()
    set_bytes = sum(_aligned(math.prod(t.shape), elem) for t in tensors) * elem
    free, _total = torch.cuda.mem_get_info(session.device)
    l2 = torch.cuda.get_device_properties(session.device).L2_cache_size
    try:
        n_sets = plan_buffer_sets(set_bytes, l2, free)
    except ValueError as exc:
        raise KernelFault("launch_error", f"cannot measure {spec.problem}: {exc}") from None
    return make_buffers(tensors, spec.dtype, n_sets, session.device)


# -- one candidate -------------------------------------------------------------------------
def _fault_from_torch(exc: RuntimeError, session: Session | None, when: str) -> KernelFault:
    """A torch call failed: after a candidate's fault, torch is often the first to hear of it."""
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    cuda = session.cuda if session is not None else None
    code = cuda.last_error() if cuda is not None else 0
    if cuda is not None and code:
        return KernelFault(status_of_cuda_error(code),
                           f"CUDA error {cuda.describe(code)} during {when} (torch: {first_line})")
    sticky = ("illegal memory access", "misaligned address", "illegal instruction",
              "unspecified launch failure", "device-side assert", "invalid program counter")
    status = "crash" if any(s in str(exc) for s in sticky) else "launch_error"
    return KernelFault(status, f"{type(exc).__name__} during {when}: {first_line}")


def measure_artifact(
    artifact_dir: Path, runs: int = 50, warmup: int = 10, checks: int = 2,
    on_checked: Callable[[dict[str, Any]], None] | None = None,
) -> Measurement:
    """Check and time one artifact in this process; never raises for the candidate's faults.

    Returns a Measurement with status ``ok`` (timed), ``wrong``, ``crash`` or ``launch_error``
    (including "no GPU here"). A deadlocked kernel blocks this call forever: isolate it with
    tsopt.workers.watchdog.measure_candidate.
    """
    if runs < MIN_RUNS:
        raise ValueError(f"runs={runs}: at least {MIN_RUNS} timed runs are needed for p10/p90")
    if warmup < 0 or checks < 1:
        raise ValueError(f"warmup={warmup} must be >= 0 and checks={checks} >= 1")
    started = time.perf_counter()
    artifact_dir = Path(artifact_dir)
    base: dict[str, Any] = {"genome_hash": artifact_dir.name, "problem_key": "",
                            "cuda": torch.version.cuda or "", "torch": torch.__version__}

    def failed(status: str, message: str, **extra: Any) -> Measurement:
        return Measurement(status=status, error=message,  # type: ignore[arg-type]
                           seconds=round(time.perf_counter() - started, 3), **{**base, **extra})

    try:
        manifest = ArtifactManifest.read(artifact_dir)
        base["genome_hash"] = manifest.genome_hash
        problem = Problem.from_dict(manifest.problem)
        base["problem_key"] = problem.key
        spec = op_spec(problem)
        spec.check_tensors(manifest.tensors)
        lib = KernelLibrary.open(artifact_dir, manifest)
    except (ArtifactError, ProblemError, KernelLoadError) as exc:
        return failed("launch_error", f"cannot load the artifact: {exc}")
    no_gpu = why_no_gpu()
    if no_gpu is not None:
        return failed("launch_error", no_gpu)
    cuda = lib.cuda.runtime
    code, count = cuda.device_count()
    if code or count < 1:
        # Never call tsopt_load without a device: the exported module loader then loops over
        # an uninitialised device count.
        return failed("launch_error",
                      f"cudaGetDeviceCount: {cuda.describe(code)} ({count} devices)")
    env = environment(cuda)
    base.update(device=env["device"], driver=env["driver"])
    session: Session | None = None
    try:
        session = Session(cuda)
        with torch.cuda.stream(session.stream):
            return _measure_loaded(lib, spec, manifest, session, runs, warmup, checks,
                                   on_checked, base, started)
    except KernelFault as fault:
        return failed(fault.status, fault.message)
    except RuntimeError as exc:
        seen = _fault_from_torch(exc, session, "the measurement")
        return failed(seen.status, seen.message)


def _wrong(result: CheckResult, when: str, base: dict[str, Any], started: float) -> Measurement:
    return Measurement(status="wrong", rel_err=result.rel_err, error=f"{when}: {result.message}",
                       seconds=round(time.perf_counter() - started, 3), **base)


def _load_module(lib: KernelLibrary) -> None:
    code = lib.load_module()
    if code:
        raise KernelFault(status_of_cuda_error(code),
                          f"tsopt_load returned {lib.cuda.runtime.describe(code)}")


def _measure_loaded(
    lib: KernelLibrary, spec: OpSpec, manifest: ArtifactManifest, session: Session, runs: int,
    warmup: int, checks: int, on_checked: Callable[[dict[str, Any]], None] | None,
    base: dict[str, Any], started: float,
) -> Measurement:
    """One candidate in a process of its own: load, allocate, check, time, time the vendor."""
    _load_module(lib)
    buffers = _allocate(spec, manifest.tensors, session)
    return _check_and_time(lib, spec, manifest.tensors, buffers, session, runs, warmup, checks,
                           on_checked, base, started)


def _check_and_time(
    lib: KernelLibrary, spec: OpSpec, tensors: Sequence[TensorDesc], buffers: Buffers,
    session: Session, runs: int, warmup: int, checks: int,
    on_checked: Callable[[dict[str, Any]], None] | None, base: dict[str, Any], started: float,
    vendor: Timing | None = None,
) -> Measurement:
    """Check a loaded candidate on ``buffers``, time it, re-check; compare with the vendor.

    ``vendor``: the baseline already timed on these buffers in this process (a worker's); None
    times it now, after the candidate.
    """
    torch.set_float32_matmul_precision("highest")  # the reference must not use TF32
    launch = _kernel_launcher(lib, session, tensors)
    worst = 0.0
    first = buffers.sets[0]
    for i in range(checks):
        seed = _fill_set(first, spec, session)
        launch(first)
        session.synchronize(f"checked run {i + 1}")
        result = spec.compare(first.inputs, first.outputs)
        if not result.ok:
            return _wrong(result, f"checked run {i + 1} of {checks} (input seed {seed})",
                          base, started)
        worst = max(worst, result.rel_err or 0.0)
    if on_checked is not None:
        on_checked({"rel_err": worst, "checks": checks, "buffer_sets": len(buffers.sets)})

    _fill(buffers, spec, session)
    timing = session.time_runs(launch, buffers.sets, runs, warmup, "the candidate")
    # Re-check sets the warm-up and timed runs wrote: right alone but wrong back-to-back is a race.
    warm, timed = rotation(len(buffers.sets), warmup, runs)
    for index in sorted(set(warm + timed))[-VERIFY_SETS_AFTER_TIMING:]:
        bset = buffers.sets[index]
        result = spec.compare(bset.inputs, bset.outputs)
        if not result.ok:
            return _wrong(result, f"correct in {checks} isolated checks but wrong after the "
                          f"timed runs (buffer set {index})", base, started)
        worst = max(worst, result.rel_err or 0.0)

    if vendor is None:
        vendor = session.time_runs(_baseline_launcher(spec), buffers.sets, runs, warmup,
                                   f"the {spec.baseline_name} baseline")
    return Measurement(
        status="ok", median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us,
        runs=timing.runs, rate=spec.rate(timing.median_us), rate_unit=spec.rate_unit,
        rel_err=worst, baseline_name=spec.baseline_name, baseline_median_us=vendor.median_us,
        baseline_rate=spec.rate(vendor.median_us), ratio=vendor.median_us / timing.median_us,
        seconds=round(time.perf_counter() - started, 3), **base,
    )


def time_baseline(
    problem: Problem, runs: int = 50, warmup: int = 10,
) -> tuple[Baseline, dict[str, Any]]:
    """Time the vendor baseline alone (the watchdog's probe); needs a GPU, raises KernelFault."""
    no_gpu = why_no_gpu()
    if no_gpu is not None:
        raise KernelFault("launch_error", no_gpu)
    spec = op_spec(problem)
    env = environment()
    session = Session(None)
    with torch.cuda.stream(session.stream):
        buffers = _allocate(spec, spec.default_tensors(), session)
        _fill(buffers, spec, session)
        timing = session.time_runs(_baseline_launcher(spec), buffers.sets, runs, warmup,
                                   spec.baseline_name)
    env["buffer_sets"] = len(buffers.sets)
    env["rotation_bytes"] = buffers.set_bytes * len(buffers.sets)
    return _baseline_record(spec, timing, env["device"]), env


def _baseline_record(spec: OpSpec, timing: Timing, device: str) -> Baseline:
    return Baseline(
        problem_key=spec.problem.key, name=spec.baseline_name, device=device,
        median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us, runs=timing.runs,
        rate=spec.rate(timing.median_us), rate_unit=spec.rate_unit, measured_at=utc_now(),
    )


# -- the watchdog's child ------------------------------------------------------------------
def _child_failure(hash_: str, problem_key: str, status: str, message: str) -> dict[str, Any]:
    return Measurement(hash_, problem_key, status, error=message,  # type: ignore[arg-type]
                       cuda=torch.version.cuda or "", torch=torch.__version__).to_dict()


def child_main(args: argparse.Namespace) -> None:
    """Run one measurement and report it on the watchdog's pipe; exits without teardown."""
    reporter = Reporter.from_env()
    code = 0
    try:
        _child_work(args, reporter)
    except Exception as exc:  # noqa: BLE001 - any runner failure is reported as a status
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(traceback.format_exc(), file=sys.stderr)
        try:
            hash_ = _artifact_hash(Path(args.artifact)) if args.artifact else "baseline"
            reporter.send("result", measurement=_child_failure(
                hash_, "", "crash", f"runner error: {detail}"))
        except OSError:
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter and CUDA teardown: after a fault it can block, and nothing is left to do.
    os._exit(code)


def _artifact_hash(artifact_dir: Path) -> str:
    """The genome hash an artifact's manifest names (its directory's name when unreadable: a
    builder cache directory is named by cache key, not genome hash)."""
    try:
        return ArtifactManifest.read(artifact_dir).genome_hash
    except ArtifactError:
        return artifact_dir.name


def _child_work(args: argparse.Namespace, reporter: Reporter) -> None:
    if args.child == "baseline":
        problem = Problem.from_dict(json.loads(args.problem))
        no_gpu = why_no_gpu()
        if no_gpu is not None:
            reporter.send("result", measurement=_child_failure("baseline", problem.key,
                                                               "launch_error", no_gpu))
            return
        reporter.send("ready", environment=environment())
        try:
            baseline, env = time_baseline(problem, args.runs, args.warmup)
        except (KernelFault, RuntimeError) as exc:  # RuntimeError: CUDA error or OOM in torch
            fault = exc if isinstance(exc, KernelFault) else _fault_from_torch(
                exc, None, f"the {problem} baseline")
            reporter.send("result", measurement=_child_failure(
                "baseline", problem.key, fault.status, fault.message))
            return
        reporter.send("baseline", baseline=baseline.to_dict(), environment=env)
        return
    artifact = Path(args.artifact)
    if why_no_gpu() is None:
        reporter.send("ready", environment=environment())
    measured = measure_artifact(
        artifact, runs=args.runs, warmup=args.warmup, checks=args.checks,
        on_checked=lambda info: reporter.send("checked", **info),
    )
    reporter.send("result", measurement=measured.to_dict())


# -- the persistent worker -----------------------------------------------------------------
STICKY_STATUSES = ("crash", "hang")  # the child's own classification: the context is unusable


def create_context() -> None:
    """Create this process's CUDA context now (a worker's start-up), not in the first candidate."""
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.empty(1, device="cuda").fill_(1.0)
    torch.cuda.synchronize()


def context_healthy(session: Session) -> str | None:
    """None when a tiny torch op still runs and checks out on the session's context; else why.

    After a non-sticky error (a refused launch, a wrong result) the context should be fine; a
    worker proves it before taking the next candidate, and exits if not.
    """
    try:
        with torch.cuda.stream(session.stream):
            probe = torch.arange(1, 65, dtype=torch.float32, device=session.device)
            total = probe.sum()
            session.synchronize("the health check")
            value = float(total)
    except KernelFault as fault:
        return f"the health check after the candidate failed: {fault.message}"
    except RuntimeError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return f"the health check after the candidate failed: {first}"
    if value != 2080.0:
        return f"the health check after the candidate computed 1 + ... + 64 = {value}, not 2080"
    return None


@dataclass
class ProblemState:
    """A worker's buffers and vendor timing for one problem, reused by all its candidates."""

    problem: Problem
    spec: OpSpec
    buffers: Buffers
    runs: int
    warmup: int
    vendor: Timing | None = None


class MeasuringWorker:
    """The watchdog's persistent child: one CUDA context, many candidates.

    Commands arrive on the command pipe (see tsopt.workers.watchdog): ``problem`` frees the last
    problem's buffers, allocates this one's and times the vendor baseline on them;
    ``measure`` loads a candidate's library and checks and times it on those buffers (and,
    paired, the vendor after it); ``baseline`` times the vendor again. After each command it
    checks its context with a tiny torch op and says ``ready``, or exits: after a sticky fault
    (which it reports in the result), a failed health check, or ``max_candidates``
    candidates. The candidates' libraries stay loaded until it exits.
    """

    def __init__(self, reporter: Reporter, max_candidates: int = WORKER_MAX_CANDIDATES) -> None:
        self.reporter = reporter
        self.max_candidates = max_candidates
        self.pid = os.getpid()
        self.no_gpu = why_no_gpu()
        self.environment: dict[str, Any] = {
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "python": sys.version.split()[0],
        }
        self.session: Session | None = None
        if self.no_gpu is None:
            create_context()
            self.environment = environment()
            self.session = Session(None)
        self.state: ProblemState | None = None
        self.measured = 0
        self.libraries: list[KernelLibrary] = []  # loaded for good: ctypes cannot unload
        self.current: tuple[str, str] | None = None  # (genome hash, problem key) in hand

    def serve(self, commands: CommandReader) -> None:
        """Answer commands until the command pipe closes or a reason to exit comes up."""
        self.reporter.send("ready", environment=self.environment, pid=self.pid, measured=0)
        for command in commands:
            exiting = self.handle(command)
            self.current = None
            if exiting is None and self.measured >= self.max_candidates:
                exiting = f"measured {self.measured} candidates, the cap; recycled"
            if exiting is None and self.session is not None:
                exiting = context_healthy(self.session)
            if exiting is not None:
                print(f"tsopt worker {self.pid} exiting: {exiting}", file=sys.stderr, flush=True)
                return
            self.reporter.send("ready", pid=self.pid, measured=self.measured)

    def handle(self, command: dict[str, Any]) -> str | None:
        """Carry out one command and report it; returns why this worker must exit, if it must."""
        if command["cmd"] == "problem":
            problem = Problem.from_dict(command["problem"])
            return self._baseline(problem, int(command["runs"]), int(command["warmup"]))
        if command["cmd"] == "baseline":
            if self.state is None:
                return self._baseline_failed("", "launch_error", "no problem is set up")
            return self._baseline(self.state.problem, self.state.runs, self.state.warmup)
        return self._candidate(Path(command["artifact"]), str(command["genome_hash"]),
                               int(command["runs"]), int(command["warmup"]),
                               int(command["checks"]), bool(command.get("paired", False)))

    # -- the vendor baseline ---------------------------------------------------------------
    def _baseline_failed(self, problem_key: str, status: str, message: str) -> str | None:
        self.reporter.send("result", measurement=_child_failure("baseline", problem_key, status,
                                                                message))
        if status in STICKY_STATUSES:
            return f"a sticky CUDA fault ({status}) while timing the baseline: {message}"
        return None

    def _baseline(self, problem: Problem, runs: int, warmup: int) -> str | None:
        """Set up ``problem`` (unless it is the one held) and time the vendor on its buffers."""
        self.current = ("baseline", problem.key)
        if self.no_gpu is not None or self.session is None:
            return self._baseline_failed(problem.key, "launch_error", self.no_gpu or "no GPU")
        session = self.session
        try:
            if self.state is None or self.state.problem.key != problem.key:
                self._drop_problem()
                spec = op_spec(problem)
                with torch.cuda.stream(session.stream):
                    buffers = _allocate(spec, spec.default_tensors(), session)
                self.state = ProblemState(problem, spec, buffers, runs, warmup)
            state = self.state
            with torch.cuda.stream(session.stream):
                _fill(state.buffers, state.spec, session)
                state.vendor = session.time_runs(_baseline_launcher(state.spec),
                                                 state.buffers.sets, runs, warmup,
                                                 state.spec.baseline_name)
        except ProblemError as exc:
            return self._baseline_failed(problem.key, "launch_error", str(exc))
        except KernelFault as fault:
            return self._baseline_failed(problem.key, fault.status, fault.message)
        except RuntimeError as exc:
            seen = _fault_from_torch(exc, session, f"the {problem} baseline")
            return self._baseline_failed(problem.key, seen.status, seen.message)
        env = {**self.environment, "pid": self.pid,
               "buffer_sets": len(state.buffers.sets),
               "rotation_bytes": state.buffers.set_bytes * len(state.buffers.sets)}
        baseline = _baseline_record(state.spec, state.vendor, str(env.get("device", "")))
        self.reporter.send("baseline", baseline=baseline.to_dict(), environment=env)
        return None

    def _drop_problem(self) -> None:
        """Free the last problem's buffers before allocating the next one's."""
        if self.state is None:
            return
        self.state = None
        gc.collect()
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    # -- a candidate -----------------------------------------------------------------------
    def _candidate(self, artifact_dir: Path, genome_hash: str, runs: int, warmup: int,
                   checks: int, paired: bool) -> str | None:
        state = self.state
        self.current = (genome_hash, state.problem.key if state is not None else "")
        measured = self.measure(artifact_dir, genome_hash, runs, warmup, checks, paired)
        self.measured += 1
        exiting = None
        if measured.status in STICKY_STATUSES:
            exiting = f"a sticky CUDA fault ({measured.status}) leaves the context unusable"
        self.reporter.send("result", measurement=measured.to_dict(),
                           worker={"pid": self.pid, "measured": self.measured,
                                   "exiting": exiting})
        return exiting

    def measure(self, artifact_dir: Path, genome_hash: str, runs: int, warmup: int,
                checks: int, paired: bool = True) -> Measurement:
        """Check and time one artifact on the held problem's buffers; never raises for it.

        ``paired``: time the vendor right after it on the same buffers (else use the worker's
        timing of the problem).
        """
        started = time.perf_counter()
        state = self.state
        base: dict[str, Any] = {
            "genome_hash": genome_hash, "problem_key": state.problem.key if state else "",
            "cuda": torch.version.cuda or "", "torch": torch.__version__,
            "device": str(self.environment.get("device", "")),
            "driver": str(self.environment.get("driver", "")),
        }

        def failed(status: str, message: str) -> Measurement:
            return Measurement(status=status, error=message,  # type: ignore[arg-type]
                               seconds=round(time.perf_counter() - started, 3), **base)

        if self.no_gpu is not None or self.session is None:
            return failed("launch_error", self.no_gpu or "no GPU")
        if state is None or state.vendor is None:
            return failed("launch_error", "the measuring worker has no problem set up")
        try:
            manifest = ArtifactManifest.read(artifact_dir)
            if manifest.genome_hash != genome_hash:
                raise KernelLoadError(f"{artifact_dir} holds genome {manifest.genome_hash[:12]}, "
                                      f"not {genome_hash[:12]}")
            problem = Problem.from_dict(manifest.problem)
            if problem.key != state.problem.key:
                raise KernelLoadError(f"it was built for {problem.key}; this worker holds "
                                      f"{state.problem.key}")
            state.spec.check_tensors(manifest.tensors)
            lib = KernelLibrary.open(artifact_dir, manifest)
        except (ArtifactError, ProblemError, KernelLoadError) as exc:
            return failed("launch_error", f"cannot load the artifact: {exc}")
        self.libraries.append(lib)
        session = self.session
        session.cuda = lib.cuda.runtime  # error codes through the runtime the artifact uses
        try:
            with torch.cuda.stream(session.stream):
                _load_module(lib)
                return _check_and_time(
                    lib, state.spec, manifest.tensors, state.buffers, session, runs, warmup,
                    checks, lambda info: self.reporter.send("checked", **info), base, started,
                    vendor=None if paired else state.vendor,
                )
        except KernelFault as fault:
            return failed(fault.status, fault.message)
        except RuntimeError as exc:
            seen = _fault_from_torch(exc, session, "the measurement")
            return failed(seen.status, seen.message)


def worker_main(args: argparse.Namespace) -> None:
    """The watchdog's persistent child; exits without teardown (see :class:`MeasuringWorker`)."""
    reporter = Reporter.from_env()
    worker: MeasuringWorker | None = None
    code = 0
    try:
        worker = MeasuringWorker(reporter, args.max_candidates)
        worker.serve(CommandReader.from_env())
    except Exception as exc:  # noqa: BLE001 - any runner failure is reported as a status
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(traceback.format_exc(), file=sys.stderr)
        current = worker.current if worker is not None else None
        code = 1
        if current is not None:  # in the middle of a command: its answer is a crash
            try:
                reporter.send("result", measurement=_child_failure(
                    current[0], current[1], "crash", f"runner error: {detail}"))
                code = 0
            except OSError:
                pass
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter and CUDA teardown: after a fault it can block, and nothing is left to do.
    os._exit(code)


# -- command line --------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tsopt.workers.runner", description=__doc__.split("\n")[0])
    p.add_argument("--bundle", type=Path, help="measure a bundle (as `tsopt measure BUNDLE`)")
    p.add_argument("--artifact", action="append", default=None,
                   help="an artifact directory to measure (repeatable; each isolated)")
    p.add_argument("--child", choices=("measure", "baseline", "worker"), help=argparse.SUPPRESS)
    p.add_argument("--problem", help=argparse.SUPPRESS)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--checks", type=int, default=2)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--gpu", type=int, default=None, help="the GPU index to use")
    p.add_argument("--isolation", choices=ISOLATIONS, default="worker",
                   help="worker: persistent measuring processes, restarted after any failure "
                   "(default); process: a fresh process per candidate")
    p.add_argument("--max-candidates", type=int, default=WORKER_MAX_CANDIDATES,
                   help="candidates per worker process before it is recycled")
    p.add_argument("--baseline", choices=BASELINE_MODES, default="once",
                   help="once: time the vendor once per problem and worker, again every "
                   "--rebaseline-every candidates and at the end (default); paired: right after "
                   "each candidate")
    p.add_argument("--rebaseline-every", type=int, default=REBASELINE_EVERY,
                   help="with --baseline once: time it again after this many candidates")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child == "worker":
        worker_main(args)  # does not return
    if args.child:
        if args.child == "measure":
            args.artifact = (args.artifact or [None])[0]
        child_main(args)  # does not return
    if args.runs < MIN_RUNS:
        print(f"error: --runs {args.runs}: at least {MIN_RUNS} timed runs are needed",
              file=sys.stderr)
        return 2
    if args.max_candidates < 1 or args.rebaseline_every < 1:
        print("error: --max-candidates and --rebaseline-every must be at least 1",
              file=sys.stderr)
        return 2
    options = dict(isolation=args.isolation, max_candidates=args.max_candidates,
                   baseline=args.baseline, rebaseline_every=args.rebaseline_every)
    if args.bundle is not None:
        from rich.console import Console

        from tsopt.core.errors import UserInputError
        from tsopt.workers.bundle_measure import measure_bundle

        try:
            return measure_bundle(args.bundle, runs=args.runs, warmup=args.warmup,
                                  limit=args.limit, console=Console(), checks=args.checks,
                                  gpu=args.gpu, **options)
        except UserInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.artifact:
        from tsopt.workers.watchdog import MeasureError, measure_artifacts

        def show(_index: int, m: Measurement) -> None:
            print(json.dumps(m.to_dict()), flush=True)

        def note(text: str) -> None:
            print(text, file=sys.stderr, flush=True)

        try:
            measure_artifacts([Path(a) for a in args.artifact], runs=args.runs,
                              warmup=args.warmup, checks=args.checks, gpu=args.gpu,
                              on_result=show, log=note, **options)
        except MeasureError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    _parser().print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
