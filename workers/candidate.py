"""Check one built candidate against torch and time it against the vendor, in this process.

One candidate, in order (:func:`measure_artifact`):

1. load ``libcuda.so.1`` and a ``libcudart`` with RTLD_GLOBAL, then the artifact's library and
   its two symbols (``tsopt_load``, ``tsopt_launch``; see tsopt.core.artifact);
2. ``tsopt_load()``: the module load, its return code checked;
3. ``checks`` times: fresh random inputs, the output poisoned, one launch, compare with the
   torch reference (every element written; see tsopt.workers.reference);
4. time, paired with the vendor baseline (tsopt.workers.paired) in the study's launch mode
   (``graph``: each side's launches captured in a CUDA graph; ``eager``: calls through the
   export's loader; ``isolated``: launches after a spin kernel): on buffer sets rotated over
   more than 2 x L2, the two alternate until the GPU's clock settles, then in rounds until the
   median ratio's 95 % interval is within ±0.5 % or a time cap; clocks, power and throttle
   reasons are read through NVML alongside. A candidate a graph cannot capture is a
   ``launch_error`` saying so;
5. re-check: fresh inputs on the last buffer sets, the candidate launched back to back, every
   output compared again (a race can pass one isolated launch and fail back-to-back ones).

A CUDA fault becomes a status with its message (tsopt.workers.faults). A deadlocked kernel
blocks this process for good: candidates run in a child under the watchdog
(tsopt.workers.watchdog), never in the searching process. Torch and the standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from tsopt.core.artifact import ArtifactError, ArtifactManifest, TensorDesc
from tsopt.core.bundle import Baseline, utc_now
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import DEFAULT_LAUNCH, Measurement
from tsopt.workers import device
from tsopt.workers.buffers import Buffers, BufferSet, fill, fill_set
from tsopt.workers.faults import KernelFault, fault_from_torch, status_of_cuda_error
from tsopt.workers.loader import KernelLibrary, KernelLoadError, load_kernel
from tsopt.workers.nvml import device_nvml
from tsopt.workers.paired import PairedSettings, PairedTimer
from tsopt.workers.range_measure import artifact_m_range, loader_launch, measure_at_ms, samples_for
from tsopt.workers.reference import CheckResult, OpReference, reference_for
from tsopt.workers.session import Session, Timing

MIN_RUNS = 20
VERIFY_SETS_AFTER_TIMING = 8


def _kernel_launcher(lib: KernelLibrary, session: Session,
                     tensors: Sequence[TensorDesc] | None = None) -> Callable[[BufferSet], None]:
    roles = [t.role for t in tensors] if tensors is not None else None

    def launch(bset: BufferSet) -> None:
        code = lib.launch(bset.ptrs if roles is None else bset.pointers(roles), session.handle)
        if code:
            raise KernelFault(status_of_cuda_error(code),
                              f"tsopt_launch returned {lib.cuda.runtime.describe(code)}")
    return launch


def exported_call(artifact_dir: Path) -> Callable[[BufferSet], None]:
    """The candidate as a user of its export calls it: the export's loader
    (tsopt.workers.loader, copied verbatim into every export) on the set's torch tensors,
    its checks and its stream look-up included; what the ``eager`` launch mode times."""
    kernel = load_kernel(artifact_dir)

    def call(bset: BufferSet) -> None:
        kernel(*bset.inputs, out=bset.outputs)
    return call


def baseline_launcher(reference: OpReference) -> Callable[[BufferSet], None]:
    def launch(bset: BufferSet) -> None:
        reference.baseline(bset.inputs, bset.outputs)
    return launch


def load_module(lib: KernelLibrary) -> None:
    code = lib.load_module()
    if code:
        raise KernelFault(status_of_cuda_error(code),
                          f"tsopt_load returned {lib.cuda.runtime.describe(code)}")


def measure_artifact(
    artifact_dir: Path, runs: int = 50, warmup: int = 10, checks: int = 2,
    on_checked: Callable[[dict[str, Any]], None] | None = None, launch: str = DEFAULT_LAUNCH,
    m_samples: Sequence[int] | None = None,
) -> Measurement:
    """Check and time one artifact in this process; never raises for the candidate's faults.

    A runtime-M kernel (``m_range`` in its artifact.json) is measured at several M
    (tsopt.workers.range_measure), or at ``m_samples`` where given (each inside its range).

    Returns a Measurement with status ``ok`` (timed), ``wrong``, ``crash`` or ``launch_error``
    (including "no GPU here"). A deadlocked kernel blocks this call forever: isolate it with
    tsopt.workers.process_measurer.measure_candidate.
    """
    if runs < MIN_RUNS:
        raise ValueError(f"runs={runs}: at least {MIN_RUNS} timed runs are needed for p10/p90")
    if warmup < 0 or checks < 1:
        raise ValueError(f"warmup={warmup} must be >= 0 and checks={checks} >= 1")
    started = time.perf_counter()
    artifact_dir = Path(artifact_dir)
    base: dict[str, Any] = {"genome_hash": artifact_dir.name, "problem_key": "",
                            "cuda": torch.version.cuda or "", "torch": torch.__version__,
                            "launch": launch}

    def failed(status: str, message: str, **extra: Any) -> Measurement:
        return Measurement(status=status, error=message,  # type: ignore[arg-type]
                           seconds=round(time.perf_counter() - started, 3), **{**base, **extra})

    try:
        manifest = ArtifactManifest.read(artifact_dir)
        base["genome_hash"] = manifest.genome_hash
        problem = Problem.from_dict(manifest.problem)
        base["problem_key"] = problem.key
        reference = reference_for(problem)
        reference.check_tensors(manifest.tensors)
        samples = samples_for(problem, artifact_m_range(artifact_dir), m_samples)
        lib = device.open_library(artifact_dir, manifest)
    except (ArtifactError, ProblemError, KernelLoadError) as exc:
        return failed("launch_error", f"cannot load the artifact: {exc}")
    no_gpu = device.why_no_gpu()
    if no_gpu is not None:
        return failed("launch_error", no_gpu)
    cuda = lib.cuda.runtime
    code, count = cuda.device_count()
    if code or count < 1:
        # Never call tsopt_load without a device: the exported module loader then loops over
        # an uninitialised device count.
        return failed("launch_error",
                      f"cudaGetDeviceCount: {cuda.describe(code)} ({count} devices)")
    env = device.environment(cuda)
    base.update(device=env["device"], driver=env["driver"])
    session: Session | None = None
    try:
        session = device.new_session(cuda)
        with torch.cuda.stream(session.stream):
            if samples:
                load_module(lib)
                buffers = session.allocate(reference, manifest.tensors)
                return check_and_time_at_ms(samples, artifact_dir, lib, reference,
                                            manifest.tensors, buffers, session, runs, warmup,
                                            checks, on_checked, base, started, launch=launch)
            return measure_loaded(lib, reference, manifest, session, runs, warmup, checks,
                                  on_checked, base, started, launch=launch,
                                  user_call=exported_call(artifact_dir) if launch == "eager"
                                  else None)
    except KernelFault as fault:
        return failed(fault.status, fault.message)
    except RuntimeError as exc:  # a KernelLoadError too (the eager call path's loader)
        seen = fault_from_torch(exc, session.cuda if session is not None else None,
                                "the measurement")
        return failed(seen.status, seen.message)


def failure_report(genome_hash: str, problem_key: str, status: str, message: str,
                   launch: str = DEFAULT_LAUNCH) -> dict[str, Any]:
    """A failed Measurement as a child reports it (``genome_hash`` "baseline" for the vendor)."""
    return Measurement(genome_hash, problem_key, status, error=message,  # type: ignore[arg-type]
                       cuda=torch.version.cuda or "", torch=torch.__version__,
                       launch=launch).to_dict()


def _wrong(result: CheckResult, when: str, base: dict[str, Any], started: float) -> Measurement:
    return Measurement(status="wrong", rel_err=result.rel_err, error=f"{when}: {result.message}",
                       seconds=round(time.perf_counter() - started, 3), **base)


def measure_loaded(
    lib: KernelLibrary, reference: OpReference, manifest: ArtifactManifest, session: Session,
    runs: int, warmup: int, checks: int, on_checked: Callable[[dict[str, Any]], None] | None,
    base: dict[str, Any], started: float, *, launch: str = DEFAULT_LAUNCH,
    user_call: Callable[[BufferSet], None] | None = None,
) -> Measurement:
    """One candidate in a process of its own: load, allocate, check, time, time the vendor."""
    load_module(lib)
    buffers = session.allocate(reference, manifest.tensors)
    return check_and_time(lib, reference, manifest.tensors, buffers, session, runs, warmup,
                          checks, on_checked, base, started, launch=launch, user_call=user_call)


def check_and_time(
    lib: KernelLibrary, reference: OpReference, tensors: Sequence[TensorDesc], buffers: Buffers,
    session: Session, runs: int, warmup: int, checks: int,
    on_checked: Callable[[dict[str, Any]], None] | None, base: dict[str, Any], started: float,
    *, launch: str = DEFAULT_LAUNCH, user_call: Callable[[BufferSet], None] | None = None,
    kernel_launch: Callable[[BufferSet], None] | None = None,
) -> Measurement:
    """Check a loaded candidate on ``buffers``, time it paired with the vendor baseline in the
    ``launch`` mode, and check it again after back-to-back launches. ``user_call``: the
    candidate as its export's user calls it (:func:`exported_call`), which ``eager`` times;
    ``kernel_launch``: how it is launched (default: ``tsopt_launch`` on the sets' pointers).

    ``runs`` and ``warmup`` no longer fix the repetitions: the paired rounds warm up until the
    clock settles and stop on a ±0.5 % interval or the time cap (tsopt.workers.paired); they
    remain the watchdog's budget (tsopt.workers.limits).
    """
    torch.set_float32_matmul_precision("highest")  # the reference must not use TF32
    run = kernel_launch or _kernel_launcher(lib, session, tensors)
    worst = 0.0
    first = buffers.sets[0]
    for i in range(checks):
        seed = fill_set(first, reference, session.generator)
        run(first)
        session.synchronize(f"checked run {i + 1}")
        result = reference.compare(first.inputs, first.outputs)
        if not result.ok:
            return _wrong(result, f"checked run {i + 1} of {checks} (input seed {seed})",
                          base, started)
        worst = max(worst, result.rel_err or 0.0)
    if on_checked is not None:
        on_checked({"rel_err": worst, "checks": checks, "buffer_sets": len(buffers.sets)})

    fill(buffers, reference, session.generator)
    timer = PairedTimer(session, buffers.sets, device_nvml(), PairedSettings.from_env(), launch=launch)
    paired = timer.time(run, baseline_launcher(reference), user_call)
    retaken: list[str] = []
    if paired.conditions.get("abnormal"):
        # Thermal or hardware slowdown (not the power cap, which is normal under load): take
        # the measurement once more; if the GPU is still abnormal, the record says so and the
        # ranking uses it only where nothing else exists (tsopt.core.standing).
        retaken = list(paired.conditions["abnormal"])
        paired = timer.time(run, baseline_launcher(reference), user_call)
    # The baseline wrote the same buffers, so re-check on fresh ones: poisoned outputs, the
    # candidate launched back to back with no sync between. Right alone but wrong back-to-back
    # is a race.
    recheck = buffers.sets[-VERIFY_SETS_AFTER_TIMING:]
    for bset in recheck:
        fill_set(bset, reference, session.generator)
    for bset in recheck:
        run(bset)
    session.synchronize("the back-to-back re-check runs")
    for index, bset in enumerate(recheck):
        result = reference.compare(bset.inputs, bset.outputs)
        if not result.ok:
            return _wrong(result, f"correct in {checks} isolated checks but wrong in back-to-back "
                          f"launches (buffer set {len(buffers.sets) - len(recheck) + index})",
                          base, started)
        worst = max(worst, result.rel_err or 0.0)

    timing, vendor = paired.candidate, paired.baseline
    conditions = {**paired.conditions, "stopped": paired.stopped, "warmup_s": paired.warmup_s,
                  "settled": paired.settled}
    if retaken:
        conditions["retaken_after"] = retaken
    return Measurement(
        status="ok", median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us,
        runs=timing.runs, rate=reference.rate(timing.median_us), rate_unit=reference.rate_unit,
        rel_err=worst, baseline_name=reference.baseline_name,
        baseline_median_us=vendor.median_us, baseline_rate=reference.rate(vendor.median_us),
        ratio=paired.ratio, ratio_lo=paired.ratio_lo, ratio_hi=paired.ratio_hi,
        rounds=paired.rounds, conditions=conditions,
        seconds=round(time.perf_counter() - started, 3), **{**base, "launch": launch},
    )


def check_and_time_at_ms(
    samples: Sequence[int], artifact_dir: Path, lib: KernelLibrary, reference: OpReference,
    tensors: Sequence[TensorDesc], buffers: Buffers, session: Session, runs: int, warmup: int,
    checks: int, on_checked: Callable[[dict[str, Any]], None] | None, base: dict[str, Any],
    started: float, *, launch: str = DEFAULT_LAUNCH,
) -> Measurement:
    """:func:`check_and_time` at each M of ``samples`` on views of ``buffers`` (made at the
    range's top M), the kernel launched through its loader (M from A), combined into one
    Measurement with ``per_m`` (tsopt.workers.range_measure)."""
    run = loader_launch(artifact_dir, session.device.index or 0)
    user = load_kernel(artifact_dir) if launch == "eager" else None

    def one(at_m: OpReference, tensors_m: list[TensorDesc], views: Buffers,
            kernel_launch: Callable[[BufferSet], None], first: bool) -> Measurement:
        def user_call(bset: BufferSet) -> None:
            assert user is not None
            user(*bset.inputs, out=bset.outputs)

        return check_and_time(lib, at_m, tensors_m, views, session, runs, warmup, checks,
                              on_checked if first else None, base, started, launch=launch,
                              user_call=user_call if user is not None else None,
                              kernel_launch=kernel_launch)

    return measure_at_ms(samples, reference.problem, tensors, buffers, run, one, started)


# -- the vendor alone ----------------------------------------------------------------------
def time_baseline(
    problem: Problem, runs: int = 50, warmup: int = 10,
) -> tuple[Baseline, dict[str, Any]]:
    """Time the vendor baseline alone (the watchdog's probe); needs a GPU, raises KernelFault.

    Timed ``isolated`` whatever the study's launch mode: it sizes the watchdog's deadlines and
    shows the baseline's spread across a run; no ratio uses it (each candidate's baseline is
    timed beside it, in the study's mode)."""
    no_gpu = device.why_no_gpu()
    if no_gpu is not None:
        raise KernelFault("launch_error", no_gpu)
    reference = reference_for(problem)
    env = device.environment()
    session = device.new_session(None)
    with torch.cuda.stream(session.stream):
        buffers = session.allocate(reference, reference.default_tensors())
        fill(buffers, reference, session.generator)
        timing = session.time_runs(baseline_launcher(reference), buffers.sets, runs, warmup,
                                   reference.baseline_name)
    env["buffer_sets"] = len(buffers.sets)
    env["rotation_bytes"] = buffers.set_bytes * len(buffers.sets)
    return baseline_record(reference, timing, env["device"]), env


def baseline_record(reference: OpReference, timing: Timing, device_name: str) -> Baseline:
    return Baseline(
        problem_key=reference.problem.key, name=reference.baseline_name, device=device_name,
        median_us=timing.median_us, p10_us=timing.p10_us, p90_us=timing.p90_us, runs=timing.runs,
        rate=reference.rate(timing.median_us), rate_unit=reference.rate_unit,
        measured_at=utc_now(),
    )
