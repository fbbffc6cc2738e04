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
import uuid
from dataclasses import replace
from pathlib import Path

from tsopt.core.bundle import (
    Baseline,
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
from tsopt.core.records import Measurement
from tsopt.workers.limits import Limits
from tsopt.workers.measure import ISOLATIONS, open_measurer
from tsopt.workers.measurer import MeasureError, MeasureStats, Probe
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
        print(f"bundle {bundle} ({manifest.study}, {manifest.problem}, {manifest.arch}): "
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

    def baseline(self, base: Baseline, limits: Limits, isolation: str, mode: str) -> None:
        print(f"{base.device}: {base.name} {base.median_us:.2f} us ({num(base.rate, '.1f')} "
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
        cost = f"{m.seconds:.2f} s{f' pid {pid}' if pid is not None else ''}"
        if m.status == "ok" and m.median_us is not None:
            figures = (f"{m.median_us:9.2f} us  {num(m.rate, '9.1f')} {m.rate_unit:<7}"
                       f"  x{num(m.ratio, '.3f')} vs {m.baseline_name}")
        else:
            figures = m.error.splitlines()[0][:160] if m.error else ""
        print(f"{m.status:<12} {m.genome_hash[:12]}  {figures}  {cost}", flush=True)

    def end(self) -> None:
        """The measuring loop is over (done, or stopped)."""

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
    cleared = replace(m, error=error, **{key: None for key in bad})
    if m.status == "ok" and {"median_us", "p10_us", "p90_us"} & set(bad):
        return replace(cleared, status="crash", median_us=None, p10_us=None, p90_us=None)
    return cleared


def _start_results(manifest: BundleManifest, probe: Probe, runs: int, warmup: int,
                   checks: int, isolation: str, baseline: str) -> BundleResults:
    env = probe.environment
    return BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device=str(env.get("device", "")),
        driver=str(env.get("driver", "")), cuda=str(env.get("cuda", "")),
        torch=str(env.get("torch", "")), started_at=utc_now(),
        settings={"runs": runs, "warmup": warmup, "checks": checks, "isolation": isolation,
                  "baseline": baseline if isolation == "worker" else "paired"},
        environment=env,
    )


def measure_bundle(
    bundle: Path, runs: int = 50, warmup: int = 10, limit: int | None = None,
    checks: int = 2, gpu: int | None = None, *,
    isolation: str = "worker", max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
    view: BundleView | None = None,
) -> int:
    """Measure a bundle's unmeasured candidates, writing results.json; returns the exit code.

    0 when every selected candidate has a result (whatever its status), 1 when this machine
    cannot measure (no GPU, the baseline failed), before or during the run. Bad options or a
    corrupted, foreign or mismatched manifest / results file raise UserInputError.
    ``isolation``: ``"worker"`` (persistent measuring processes, the default) or ``"process"``
    (one per candidate); ``baseline``: ``"once"`` (the vendor timed per problem and worker,
    again every ``rebaseline_every`` candidates and at the end; the default) or ``"paired"``
    (timed after each candidate); see tsopt.workers.worker_measurer.
    """
    view = view or BundleView()
    check_options(runs, warmup, limit, checks, isolation, max_candidates, rebaseline_every,
                  baseline)
    bundle = Path(bundle)
    manifest = read_manifest(bundle)  # every artifact file against its sha256
    try:
        check_fits(manifest.problem, manifest.arch)
    except ProblemError as exc:
        raise UserInputError(f"{bundle / 'manifest.json'}: {exc}") from None
    results = read_results(bundle, manifest)
    selected = manifest.candidates[:limit] if limit else manifest.candidates
    done = results.measured_hashes() if results else set()
    pending = [c for c in selected if c.genome_hash not in done]
    view.plan(bundle, manifest, len(selected), len(pending))
    if not pending:
        return 0

    problem = manifest.problem
    code = 0
    with open_measurer(isolation, runs, warmup, checks, gpu, max_candidates=max_candidates,
                       baseline=baseline, rebaseline_every=rebaseline_every,
                       log=view.note) as measurer:
        try:
            probe = measurer.probe(problem)
        except MeasureError as exc:
            view.cannot_measure(str(exc), started=False)
            return 1
        base = probe.baseline
        view.baseline(base, Limits.for_candidate(base.median_us, runs, warmup, checks),
                      isolation, baseline if isolation == "worker" else "paired")
        if results is None:
            results = _start_results(manifest, probe, runs, warmup, checks, isolation,
                                     baseline)
        elif results.device and results.device != base.device:
            view.resuming(results, base.device)
        run = results
        run.baselines.append(base)
        earlier_timings = list(run.baseline_timings)

        def save() -> None:
            run.baseline_timings = earlier_timings + measurer.stats.baselines.get(problem.key, [])
            write_results(bundle, run)

        save()
        view.begin(len(pending))
        try:
            for candidate in pending:
                view.start(candidate.genome_hash)
                try:
                    measured = measurer.measure(bundle / candidate.artifact,
                                                candidate.genome_hash, problem)
                except MeasureError as exc:
                    view.cannot_measure(str(exc), started=True)
                    code = 1
                    break
                run.measurements.append(finite_figures(measured))
                run.measured_files[candidate.genome_hash] = dict(candidate.files)
                save()
                view.measured(measured, measurer.last_pid)
        finally:
            view.end()
        if code == 0:
            measurer.finish_problem(problem)
    save()
    view.finished(bundle, run, measurer.stats)
    return code
