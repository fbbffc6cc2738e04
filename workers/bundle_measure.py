"""``tsopt measure BUNDLE``: measure every candidate of a bundle on this GPU machine.

Reads and validates the manifest, then measures the candidates under the watchdog (see
tsopt.workers.watchdog): by default in persistent measuring workers, each of which times the vendor
baseline when it starts (the first timing sets the watchdog's limits) and then measures
candidate after candidate, replaced after any failure and recycled every
``max_candidates``; with ``isolation="process"`` a probe process times the baseline and every
candidate gets a process of its own. ``results.json`` is rewritten atomically after each
candidate. Resumable: a candidate that already has a result in ``results.json`` is skipped, and
the run keeps its ``run_id``. The closing lines say how many processes were started and the
wall time per candidate (measurements per second).

Needs torch, rich and the standard library (no DSL, no database).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tsopt.core.bundle import (
    BundleManifest,
    BundleResults,
    read_manifest,
    read_results,
    utc_now,
    write_results,
)
from tsopt.core.errors import UserInputError
from tsopt.core.records import Measurement
from tsopt.workers.watchdog import (
    BASELINE_MODES,
    ISOLATIONS,
    REBASELINE_EVERY,
    WORKER_MAX_CANDIDATES,
    Limits,
    MeasureError,
    Probe,
    open_measurer,
)

MIN_RUNS = 20
STATUS_STYLE = {"ok": "green", "wrong": "red", "hang": "magenta", "crash": "red",
                "launch_error": "yellow", "timeout": "magenta"}


def _check_options(runs: int, warmup: int, limit: int | None, checks: int,
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


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def describe(m: Measurement, pid: int | None = None) -> str:
    """One line per candidate for the console: status, figures or error, wall time, process."""
    style = STATUS_STYLE.get(m.status, "white")
    head = f"[{style}]{m.status:<12}[/] {m.genome_hash[:12]}"
    cost = f"  [dim]{m.seconds:.2f} s{f' pid {pid}' if pid is not None else ''}[/]"
    if m.status == "ok" and m.median_us is not None:
        return (f"{head}  {m.median_us:9.2f} us  {_num(m.rate, '9.1f')} {m.rate_unit:<7}"
                f"  x{_num(m.ratio, '.3f')} vs {escape(m.baseline_name)}{cost}")
    error = escape(m.error.splitlines()[0][:160]) if m.error else ""
    return f"{head}  {error}{cost}"


def _summary(console: Console, results: BundleResults) -> None:
    counts: dict[str, int] = {}
    for m in results.measurements:
        counts[m.status] = counts.get(m.status, 0) + 1
    console.print("statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    timed = sorted((m for m in results.measurements if m.status == "ok" and m.median_us),
                   key=lambda m: m.median_us or 0.0)
    if not timed:
        return
    table = Table(title=f"fastest correct candidates on {results.device}")
    for column in ("genome", "median us", "p10-p90 us", "rate", "vs baseline", "rel err"):
        table.add_column(column, justify="left" if column == "genome" else "right")
    for m in timed[:10]:
        table.add_row(
            m.genome_hash[:12], _num(m.median_us, ".2f"),
            f"{_num(m.p10_us, '.2f')}-{_num(m.p90_us, '.2f')}",
            f"{_num(m.rate, '.1f')} {m.rate_unit}", "x" + _num(m.ratio, ".3f"),
            _num(m.rel_err, ".2e"),
        )
    console.print(table)


def measure_bundle(
    bundle: Path, runs: int = 50, warmup: int = 10, limit: int | None = None,
    console: Console | None = None, checks: int = 2, gpu: int | None = None, *,
    isolation: str = "worker", max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY,
) -> int:
    """Measure a bundle's unmeasured candidates, writing results.json; returns the exit code.

    0 when every selected candidate has a result (whatever its status), 1 when this machine
    cannot measure (no GPU, the baseline failed), before or during the run. Bad options or a
    corrupted, foreign or mismatched manifest / results file raise UserInputError.
    ``isolation``: ``"worker"`` (persistent measuring processes, the default) or ``"process"``
    (one per candidate); ``baseline``: ``"once"`` (the vendor timed per problem and worker,
    again every ``rebaseline_every`` candidates and at the end; the default) or ``"paired"``
    (timed after each candidate); see tsopt.workers.watchdog.
    """
    console = console or Console()
    _check_options(runs, warmup, limit, checks, isolation, max_candidates, rebaseline_every,
                   baseline)
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    results = read_results(bundle, manifest)
    selected = manifest.candidates[:limit] if limit else manifest.candidates
    done = results.measured_hashes() if results else set()
    pending = [c for c in selected if c.genome_hash not in done]
    console.print(
        f"bundle {bundle} ({manifest.study}, {manifest.problem}, {manifest.arch}): "
        f"{len(manifest.candidates)} candidates, {len(selected) - len(pending)} of the "
        f"{len(selected)} selected already measured", highlight=False,
    )
    if not pending:
        console.print("nothing left to measure")
        return 0

    def note(text: str) -> None:
        console.print(f"[dim]{escape(text)}[/]", highlight=False)

    problem = manifest.problem
    code = 0
    with open_measurer(isolation, runs, warmup, checks, gpu, max_candidates=max_candidates,
                       baseline=baseline, rebaseline_every=rebaseline_every,
                       log=note) as measurer:
        try:
            probe = measurer.probe(problem)
        except MeasureError as exc:
            console.print(f"[bold red]cannot measure on this machine:[/] {escape(str(exc))}",
                          highlight=False)
            return 1
        base = probe.baseline
        limits = Limits.for_candidate(base.median_us, runs, warmup, checks)
        console.print(
            f"{base.device}: {base.name} {base.median_us:.2f} us "
            f"({_num(base.rate, '.1f')} {base.rate_unit}); "
            f"watchdog limits: check {limits.check_s:.1f} s, timing {limits.timing_s:.1f} s; "
            f"isolation: {isolation}, baseline: "
            f"{baseline if isolation == 'worker' else 'paired'}", highlight=False,
        )
        if results is None:
            results = _start_results(manifest, probe, runs, warmup, checks, isolation,
                                     baseline)
        elif results.device and results.device != base.device:
            console.print(f"[yellow]note:[/] resuming run {results.run_id} measured on "
                          f"{results.device} on a {base.device}", highlight=False)
        run = results
        run.baselines.append(base)
        earlier_timings = list(run.baseline_timings)

        def save() -> None:
            run.baseline_timings = earlier_timings + measurer.stats.baselines.get(problem.key, [])
            write_results(bundle, run)

        save()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("measuring", total=len(pending))
            for candidate in pending:
                progress.update(task, description=f"measuring {candidate.genome_hash[:12]}")
                try:
                    measured = measurer.measure(bundle / candidate.artifact,
                                                candidate.genome_hash, problem)
                except MeasureError as exc:
                    progress.console.print("[bold red]cannot measure on this machine any "
                                           f"more:[/] {escape(str(exc))}", highlight=False)
                    code = 1
                    break
                run.measurements.append(measured)
                save()
                progress.console.print(describe(measured, measurer.last_pid), highlight=False)
                progress.advance(task)
        if code == 0:
            measurer.finish_problem(problem)
    save()
    _summary(console, run)
    console.print(measurer.stats.summary(), highlight=False)
    console.print(f"results written to {bundle / 'results.json'} (run {run.run_id})",
                  highlight=False)
    return code
