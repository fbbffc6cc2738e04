"""Measure every candidate of a bundle on this GPU machine into its ``results.json``.

Reads and validates the manifest, then measures the candidates under the watchdog (see
tsopt.workers.measure): by default in persistent measuring workers, each of which times the
vendor baseline when it starts (the first timing sets the watchdog's limits) and then measures
candidate after candidate, replaced after any failure and recycled every ``max_candidates``;
with ``isolation="process"`` a probe process times the baseline and every candidate gets a
process of its own. ``results.json`` is rewritten atomically after each candidate. Resumable:
a candidate that already has a result in ``results.json`` is skipped, and the run keeps its
``run_id``.

What the operator sees goes through a :class:`BundleView`: this one prints plain lines (the
runner's ``--bundle``); ``tsopt measure`` draws a progress bar and a table
(tsopt.app.measure). Standard library only (plus tsopt.core); the GPU work happens in the
measuring children.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tsopt.core.bundle import (
    Baseline,
    BundleCandidate,
    BundleManifest,
    BundleResults,
    read_manifest,
    read_results,
    utc_now,
    write_results,
)
from tsopt.core.devices import check_fits
from tsopt.core.errors import UserInputError
from tsopt.core.problem import ProblemError
from tsopt.core.records import LAUNCH_MODES, Measurement
from tsopt.workers.gpus import measuring_gpus
from tsopt.workers.limits import Limits
from tsopt.workers.measure import ISOLATIONS, open_measurer
from tsopt.workers.measurer import MeasureError, Measurer, MeasureStats, Probe
from tsopt.workers.worker_measurer import BASELINE_MODES, REBASELINE_EVERY, WORKER_MAX_CANDIDATES

MIN_RUNS = 20


def num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def fastest(results: BundleResults, n: int = 10) -> list[Measurement]:
    """The ``n`` fastest correct candidates, fastest first."""
    timed = sorted((m for m in results.measurements if m.status == "ok" and m.median_us),
                   key=lambda m: m.median_us or 0.0)
    return timed[:n]


def status_counts(results: BundleResults) -> str:
    counts: dict[str, int] = {}
    for m in results.measurements:
        counts[m.status] = counts.get(m.status, 0) + 1
    return "statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


class BundleView:
    """What :func:`measure_bundle` tells its operator, as plain lines on stdout."""

    def plan(self, bundle: Path, manifest: BundleManifest, selected: int, pending: int) -> None:
        print(f"bundle {bundle} ({manifest.study}, {manifest.problem}, {manifest.arch}, "
              f"launch mode {manifest.launch}): "
              f"{len(manifest.candidates)} candidates, {selected - pending} of the {selected} "
              "selected already measured", flush=True)
        if not pending:
            print("nothing left to measure", flush=True)

    def note(self, text: str) -> None:
        """The measurer's notes: workers started, replaced, recycled; baselines."""
        print(text, flush=True)

    def cannot_measure(self, error: str, started: bool) -> None:
        """This machine cannot measure (``started``: any more, part-way through)."""
        print(f"cannot measure on this machine{' any more' if started else ''}: {error}",
              flush=True)

    def baseline(self, base: Baseline, limits: Limits, isolation: str, mode: str,
                 gpu: int | None = None) -> None:
        print(f"{gpu_label(gpu)}{base.device}: {base.name} {base.median_us:.2f} us ({num(base.rate, '.1f')} "
              f"{base.rate_unit}); watchdog limits: check {limits.check_s:.1f} s, timing "
              f"{limits.timing_s:.1f} s; isolation: {isolation}, baseline: {mode}", flush=True)

    def resuming(self, results: BundleResults, device: str) -> None:
        print(f"note: resuming run {results.run_id} measured on {results.device} on a {device}",
              flush=True)

    def begin(self, total: int) -> None:
        """``total`` candidates are about to be measured."""

    def start(self, genome_hash: str) -> None:
        """One candidate is being measured."""

    def measured(self, m: Measurement, pid: int | None) -> None:
        cost = f"{m.seconds:.2f} s{f' pid {pid}' if pid is not None else ''}{on_gpu(m)}"
        if m.status == "ok" and m.median_us is not None:
            figures = (f"{m.median_us:9.2f} us  {num(m.rate, '9.1f')} {m.rate_unit:<7}"
                       f"  x{num(m.ratio, '.3f')} vs {m.baseline_name}")
        else:
            figures = m.error.splitlines()[0][:160] if m.error else ""
        print(f"{m.status:<12} {m.genome_hash[:12]}  {figures}  {cost}", flush=True)

    def end(self) -> None:
        """The measuring loop is over (done, or stopped)."""

    def shares(self, shares: list[GpuShare]) -> None:
        """What each GPU did (printed when there were several)."""
        for line in share_lines(shares):
            print(line, flush=True)

    def finished(self, bundle: Path, results: BundleResults, stats: MeasureStats) -> None:
        print(status_counts(results))
        best = fastest(results)
        if best:
            print(f"fastest correct candidates on {results.device}:")
            for m in best:
                print(f"  {m.genome_hash[:12]}  {num(m.median_us, '.2f')} us  "
                      f"({num(m.p10_us, '.2f')}-{num(m.p90_us, '.2f')})  "
                      f"{num(m.rate, '.1f')} {m.rate_unit}  x{num(m.ratio, '.3f')}  "
                      f"rel err {num(m.rel_err, '.2e')}")
        print(stats.summary())
        print(f"results written to {bundle / 'results.json'} (run {results.run_id})", flush=True)


def gpu_label(gpu: int | None) -> str:
    """``"GPU 1: "`` before a line about one GPU's worker; nothing on the default device."""
    return "" if gpu is None else f"GPU {gpu}: "


def on_gpu(m: Measurement) -> str:
    gpu = m.conditions.get("gpu")
    return "" if gpu is None else f" GPU {gpu}"


def share_lines(shares: list[GpuShare]) -> list[str]:
    """One line per GPU, and the rate of all of them together, when several measured."""
    if len(shares) < 2:
        return []
    wall = max(s.wall_s for s in shares)
    total = sum(s.candidates for s in shares)
    lines = [f"{gpu_name(s.gpu)}: {s.candidates} candidates, measuring {s.measuring_s:.1f} s of "
             f"{s.wall_s:.1f} s ({100 * s.busy_fraction:.0f} % busy), set-up {s.setup_s:.1f} s"
             + (f"; stopped: {s.stopped}" if s.stopped else "") for s in shares]
    rate = f"{total / wall:.2f} candidates/s" if wall > 0 else "-"
    lines.append(f"{len(shares)} GPUs: {total} candidates in {wall:.1f} s ({rate})")
    return lines


def check_options(runs: int, warmup: int, limit: int | None, checks: int,
                  isolation: str = "worker", max_candidates: int = 1,
                  rebaseline_every: int = 1, baseline: str = "once") -> None:
    if runs < MIN_RUNS:
        raise UserInputError(f"--runs {runs}: at least {MIN_RUNS} timed runs are needed (p10/p90)")
    if warmup < 0:
        raise UserInputError(f"--warmup {warmup} must not be negative")
    if limit is not None and limit < 1:
        raise UserInputError(f"--limit {limit} must be at least 1")
    if checks < 1:
        raise UserInputError(f"checks={checks} must be at least 1")
    if isolation not in ISOLATIONS:
        raise UserInputError(f"isolation {isolation!r}: expected one of {', '.join(ISOLATIONS)}")
    if baseline not in BASELINE_MODES:
        raise UserInputError(f"baseline {baseline!r}: expected one of {', '.join(BASELINE_MODES)}")
    if max_candidates < 1 or rebaseline_every < 1:
        raise UserInputError(f"max_candidates={max_candidates} and rebaseline_every="
                             f"{rebaseline_every} must be at least 1")


FIGURES = ("median_us", "p10_us", "p90_us", "rate", "rel_err", "ratio", "baseline_median_us",
           "baseline_rate")


def finite_figures(m: Measurement) -> Measurement:
    """``m`` with every non-finite figure (a NaN, an infinity: results.json holds neither)
    dropped to None and named in its error. A correct check whose time is not finite is no
    timing: it becomes a ``crash`` of the timing."""
    bad = {key: getattr(m, key) for key in FIGURES
           if isinstance(getattr(m, key), float) and not math.isfinite(getattr(m, key))}
    if not bad:
        return m
    error = "; ".join(x for x in (m.error, "non-finite " + ", ".join(
        f"{key}={value}" for key, value in bad.items())) if x)
    nones: dict[str, Any] = {key: None for key in bad}
    cleared = replace(m, error=error, **nones)
    if m.status == "ok" and {"median_us", "p10_us", "p90_us"} & set(bad):
        return replace(cleared, status="crash", median_us=None, p10_us=None, p90_us=None)
    return cleared


def _start_results(manifest: BundleManifest, probe: Probe,
                   settings: dict[str, Any]) -> BundleResults:
    env = probe.environment
    return BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device=str(env.get("device", "")),
        driver=str(env.get("driver", "")), cuda=str(env.get("cuda", "")),
        torch=str(env.get("torch", "")), started_at=utc_now(), settings=dict(settings),
        environment=env,
    )


@dataclass(frozen=True)
class GpuShare:
    """What one GPU's measuring worker did in one :func:`measure_bundle` call."""

    gpu: int | None  # the device index (None: this process's default device)
    candidates: int  # measured (any status)
    measuring_s: float  # inside the measurer's measure() calls: the GPU worker busy
    setup_s: float  # starting its first worker and timing the baseline
    wall_s: float  # the whole call's measuring phase, every GPU's
    stopped: str | None = None  # why this GPU stopped before the queue was empty

    @property
    def busy_fraction(self) -> float:
        return self.measuring_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "busy_fraction": self.busy_fraction}


def gpu_name(gpu: int | None) -> str:
    return "the default GPU" if gpu is None else f"GPU {gpu}"


class _Shared:
    """The state every GPU's thread writes, under one lock: the results (created by the
    first baseline), the queue of candidates, the view."""

    def __init__(self, bundle: Path, manifest: BundleManifest, results: BundleResults | None,
                 pending: list[BundleCandidate], view: BundleView, settings: dict[str, Any],
                 measurers: list[Measurer]) -> None:
        self.bundle, self.manifest, self.results, self.view = bundle, manifest, results, view
        self.queue = deque(pending)
        self.pending = len(pending)
        self.settings = settings
        self.measurers = measurers
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.begun = False
        self.earlier_timings = list(results.baseline_timings) if results else []

    def save(self) -> None:
        assert self.results is not None
        key = self.manifest.problem.key
        self.results.baseline_timings = self.earlier_timings + [
            b for m in self.measurers for b in m.stats.baselines.get(key, [])]
        write_results(self.bundle, self.results)

    def started(self, probe: Probe, gpu: int | None) -> None:
        """A GPU's baseline is timed: results begun (or resumed), its baseline recorded."""
        with self.lock:
            s, base = self.settings, probe.baseline
            self.view.baseline(base, Limits.for_candidate(base.median_us, s["runs"],
                                                          s["warmup"], s["checks"]),
                               s["isolation"], s["baseline"], gpu=gpu)
            if self.results is None:
                self.results = _start_results(self.manifest, probe, s)
            elif self.results.device and self.results.device != base.device:
                self.view.resuming(self.results, base.device)
            self.results.baselines.append(base)
            self.save()
            if not self.begun:
                self.begun = True
                self.view.begin(self.pending)

    def take(self) -> BundleCandidate | None:
        with self.lock:
            if self.stop.is_set() or not self.queue:
                return None
            candidate = self.queue.popleft()
            self.view.start(candidate.genome_hash)
            return candidate

    def put_back(self, candidate: BundleCandidate) -> None:
        with self.lock:
            self.queue.appendleft(candidate)

    def record(self, candidate: BundleCandidate, measured: Measurement, pid: int | None) -> None:
        with self.lock:
            assert self.results is not None
            self.results.measurements.append(finite_figures(measured))
            self.results.measured_files[candidate.genome_hash] = dict(candidate.files)
            self.save()
            self.view.measured(measured, pid)


def _measure_share(shared: _Shared, measurer: Measurer, gpu: int | None,
                   wall_start: float) -> GpuShare:
    """One GPU's worker: its baseline, then candidates from the shared queue until it is
    empty (or this GPU cannot measure any more)."""
    problem = shared.manifest.problem
    start = time.monotonic()
    try:
        probe = measurer.probe(problem)
    except MeasureError as exc:
        why = str(exc) if gpu is None else f"{gpu_name(gpu)}: {exc}"
        with shared.lock:
            shared.view.cannot_measure(why, started=False)
        return GpuShare(gpu, 0, 0.0, time.monotonic() - start, 0.0, why)
    setup_s = time.monotonic() - start
    shared.started(probe, gpu)
    measured_n, busy, stopped = 0, 0.0, None
    while (candidate := shared.take()) is not None:
        began = time.monotonic()
        try:
            measured = measurer.measure(shared.bundle / candidate.artifact,
                                        candidate.genome_hash, problem)
        except MeasureError as exc:
            shared.put_back(candidate)  # another GPU may still measure it
            stopped = str(exc) if gpu is None else f"{gpu_name(gpu)}: {exc}"
            with shared.lock:
                shared.view.cannot_measure(stopped, started=True)
            break
        finally:
            busy += time.monotonic() - began
        measured_n += 1
        shared.record(candidate, measured, measurer.last_pid)
    if stopped is None and not shared.stop.is_set():
        measurer.finish_problem(problem)
    return GpuShare(gpu, measured_n, busy, setup_s, time.monotonic() - wall_start, stopped)


def _run_threads(shared: _Shared, measurers: list[Measurer],
                 gpus: tuple[int | None, ...], wall_start: float) -> list[GpuShare]:
    """Every GPU's worker in a thread of its own (each supervises its own measuring child; the
    threads mostly wait on their children's pipes)."""
    shares: list[GpuShare | None] = [None] * len(gpus)
    errors: list[BaseException] = []

    def run(slot: int) -> None:
        try:
            shares[slot] = _measure_share(shared, measurers[slot], gpus[slot], wall_start)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(exc)
            shared.stop.set()

    threads = [threading.Thread(target=run, args=(i,), name=f"tsopt-{gpu_name(g)}", daemon=True)
               for i, g in enumerate(gpus)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    except KeyboardInterrupt:
        # Each GPU finishes the candidate it holds (its result is saved), then stops.
        shared.stop.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]
    return [s for s in shares if s is not None]


def measure_bundle(
    bundle: Path, runs: int = 50, warmup: int = 10, limit: int | None = None,
    checks: int = 2, gpu: int | None = None, *,
    isolation: str = "worker", max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
    view: BundleView | None = None, gpus: int | None = None, launch: str | None = None,
) -> int:
    """Measure a bundle's unmeasured candidates, writing results.json; returns the exit code.

    0 when every selected candidate has a result (whatever its status), 1 when this machine
    cannot measure (no GPU, the baseline failed), before or during the run. Bad options or a
    corrupted, foreign or mismatched manifest / results file raise UserInputError.
    ``isolation``: ``"worker"`` (persistent measuring processes, the default) or ``"process"``
    (one per candidate); ``baseline``: ``"once"`` (the vendor timed per problem and worker,
    again every ``rebaseline_every`` candidates and at the end; the default) or ``"paired"``
    (timed after each candidate); see tsopt.workers.worker_measurer.

    ``gpus``: how many GPUs measure (None: every one this process sees; see
    tsopt.workers.gpus), one measuring worker each, pinned to its GPU, taking the next
    candidate when it is free; every result goes into the one results.json as it comes, and
    names its GPU (``conditions["gpu"]``). A GPU that cannot measure stops; the others measure
    the rest. ``gpu``: measure on this one device only.

    ``launch``: the launch mode, which must be the bundle's own (its study's; None: take it
    from the manifest): a bundle measured in another mode could not be ingested beside its
    study's measurements, so another mode is refused before anything is measured.
    """
    view = view or BundleView()
    check_options(runs, warmup, limit, checks, isolation, max_candidates, rebaseline_every,
                  baseline)
    if launch is not None and launch not in LAUNCH_MODES:
        raise UserInputError(f"--launch {launch!r}: expected one of {', '.join(LAUNCH_MODES)}")
    if gpu is not None and gpus not in (None, 1):
        raise UserInputError(f"--gpu {gpu} names one GPU; --gpus {gpus} asks for several")
    bundle = Path(bundle)
    manifest = _measurable_manifest(bundle, launch)
    results = read_results(bundle, manifest)
    selected = manifest.candidates[:limit] if limit else manifest.candidates
    done = results.measured_hashes() if results else set()
    pending = [c for c in selected if c.genome_hash not in done]
    view.plan(bundle, manifest, len(selected), len(pending))
    if not pending:
        return 0
    devices = (gpu,) if gpu is not None else measuring_gpus(gpus)

    settings: dict[str, Any] = {
        "runs": runs, "warmup": warmup, "checks": checks, "isolation": isolation,
        "baseline": baseline if isolation == "worker" else "paired", "launch": manifest.launch}
    if len(devices) > 1:
        settings["gpus"] = len(devices)

    def open_one(device: int | None) -> Measurer:
        return open_measurer(isolation, runs, warmup, checks, device,
                             max_candidates=max_candidates, baseline=baseline,
                             rebaseline_every=rebaseline_every, log=view.note,
                             launch=manifest.launch)

    return _measure_pending(bundle, manifest, results, pending, view, settings, devices,
                            open_one)


def _measurable_manifest(bundle: Path, launch: str | None) -> BundleManifest:
    """The bundle's manifest, every artifact file checked against its sha256; UserInputError
    when its problem cannot fit the arch's GPUs or ``launch`` is not the study's mode."""
    manifest = read_manifest(bundle)  # every artifact file against its sha256
    try:
        check_fits(manifest.problem, manifest.arch)
    except ProblemError as exc:
        raise UserInputError(f"{bundle / 'manifest.json'}: {exc}") from None
    if launch is not None and launch != manifest.launch:
        raise UserInputError(
            f"--launch {launch}: bundle {bundle} is of study {manifest.study!r}, which measures "
            f"in launch mode {manifest.launch!r}; measure it with --launch {manifest.launch} "
            "(or tune a study with the other mode)")
    return manifest


def _measure_pending(bundle: Path, manifest: BundleManifest, results: BundleResults | None,
                     pending: list[BundleCandidate], view: BundleView, settings: dict[str, Any],
                     devices: tuple[int | None, ...],
                     open_one: Callable[[int | None], Measurer]) -> int:
    """``pending`` measured on ``devices`` (a measurer each, from ``open_one``), every result
    saved into results.json as it comes; the exit code of :func:`measure_bundle`."""
    with ExitStack() as stack:
        measurers = [stack.enter_context(open_one(device)) for device in devices]
        shared = _Shared(bundle, manifest, results, pending, view, settings, measurers)
        wall_start = time.monotonic()
        try:
            if len(devices) == 1:  # in this thread: a Ctrl-C stops it where it is
                shares = [_measure_share(shared, measurers[0], devices[0], wall_start)]
            else:
                shares = _run_threads(shared, measurers, devices, wall_start)
        finally:
            if shared.begun:
                view.end()
    if shared.results is None:
        return 1  # no GPU could time the baseline: nothing was measured
    shared.save()
    stats = MeasureStats.merged([m.stats for m in measurers])
    view.shares(shares)
    view.finished(bundle, shared.results, stats)
    return 1 if shared.queue else 0
