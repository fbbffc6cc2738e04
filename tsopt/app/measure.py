"""``tsopt measure BUNDLE``: measure every candidate of a bundle on this GPU machine.

The measuring is tsopt.workers.bundle_measure's (resumable, results.json rewritten after each
candidate, candidates isolated under the watchdog); this module is what the operator sees: a
progress bar, one line per candidate, a table of the fastest, and what measuring cost (the
processes started, the wall time per candidate).

Needs torch, rich and the standard library (no DSL, no database): it runs on the GPU machine.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from tsopt.core.bundle import Baseline, BundleManifest, BundleResults
from tsopt.core.records import Measurement
from tsopt.workers import bundle_measure
from tsopt.workers.bundle_measure import (
    BundleView,
    GpuShare,
    fastest,
    gpu_label,
    num,
    on_gpu,
    share_lines,
    status_counts,
)
from tsopt.workers.limits import Limits
from tsopt.workers.measurer import MeasureStats
from tsopt.workers.worker_measurer import REBASELINE_EVERY, WORKER_MAX_CANDIDATES

STATUS_STYLE = {"ok": "green", "wrong": "red", "hang": "magenta", "crash": "red",
                "launch_error": "yellow", "timeout": "magenta"}


def describe(m: Measurement, pid: int | None = None) -> str:
    """One line per candidate for the console: status, figures or error, wall time, process."""
    style = STATUS_STYLE.get(m.status, "white")
    head = f"[{style}]{m.status:<12}[/] {m.genome_hash[:12]}"
    cost = f"  [dim]{m.seconds:.2f} s{f' pid {pid}' if pid is not None else ''}{on_gpu(m)}[/]"
    if m.status == "ok" and m.median_us is not None:
        return (f"{head}  {m.median_us:9.2f} us  {num(m.rate, '9.1f')} {m.rate_unit:<7}"
                f"  x{num(m.ratio, '.3f')} vs {escape(m.baseline_name)}{cost}")
    error = escape(m.error.splitlines()[0][:160]) if m.error else ""
    return f"{head}  {error}{cost}"


class ConsoleView(BundleView):
    """The bundle's measuring on a rich console: a progress bar while it runs, a table after."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def plan(self, bundle: Path, manifest: BundleManifest, selected: int, pending: int) -> None:
        self.console.print(
            f"bundle {bundle} ({manifest.study}, {manifest.problem}, {manifest.arch}, "
            f"launch mode {manifest.launch}): "
            f"{len(manifest.candidates)} candidates, {selected - pending} of the "
            f"{selected} selected already measured", highlight=False,
        )
        if not pending:
            self.console.print("nothing left to measure")

    def note(self, text: str) -> None:
        self.console.print(f"[dim]{escape(text)}[/]", highlight=False)

    def cannot_measure(self, error: str, started: bool) -> None:
        head = "cannot measure on this machine any more:" if started else (
            "cannot measure on this machine:")
        self.console.print(f"[bold red]{head}[/] {escape(error)}", highlight=False)

    def baseline(self, base: Baseline, limits: Limits, isolation: str, mode: str,
                 gpu: int | None = None) -> None:
        self.console.print(
            f"{gpu_label(gpu)}{base.device}: {base.name} {base.median_us:.2f} us "
            f"({num(base.rate, '.1f')} {base.rate_unit}); "
            f"watchdog limits: check {limits.check_s:.1f} s, timing {limits.timing_s:.1f} s; "
            f"isolation: {isolation}, baseline: {mode}", highlight=False,
        )

    def resuming(self, results: BundleResults, device: str) -> None:
        self.console.print(f"[yellow]note:[/] resuming run {results.run_id} measured on "
                           f"{results.device} on a {device}", highlight=False)

    def begin(self, total: int) -> None:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        self.progress = Progress(*columns, console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task("measuring", total=total)

    def start(self, genome_hash: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=f"measuring {genome_hash[:12]}")

    def measured(self, m: Measurement, pid: int | None) -> None:
        self.console.print(describe(m, pid), highlight=False)
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.progress = self.task = None

    def shares(self, shares: list[GpuShare]) -> None:
        for line in share_lines(shares):
            self.console.print(line, highlight=False)

    def finished(self, bundle: Path, results: BundleResults, stats: MeasureStats) -> None:
        self.console.print(status_counts(results))
        best = fastest(results)
        if best:
            table = Table(title=f"fastest correct candidates on {results.device}")
            for column in ("genome", "median us", "p10-p90 us", "rate", "vs baseline", "rel err"):
                table.add_column(column, justify="left" if column == "genome" else "right")
            for m in best:
                table.add_row(
                    m.genome_hash[:12], num(m.median_us, ".2f"),
                    f"{num(m.p10_us, '.2f')}-{num(m.p90_us, '.2f')}",
                    f"{num(m.rate, '.1f')} {m.rate_unit}", "x" + num(m.ratio, ".3f"),
                    num(m.rel_err, ".2e"),
                )
            self.console.print(table)
        self.console.print(stats.summary(), highlight=False)
        self.console.print(f"results written to {bundle / 'results.json'} (run {results.run_id})",
                           highlight=False)


def measure_bundle(
    bundle: Path, runs: int = 50, warmup: int = 10, limit: int | None = None,
    console: Console | None = None, checks: int = 2, gpu: int | None = None, *,
    isolation: str = "worker", max_candidates: int = WORKER_MAX_CANDIDATES,
    baseline: str = "once", rebaseline_every: int = REBASELINE_EVERY, gpus: int | None = None,
    launch: str | None = None,
) -> int:
    """``tsopt measure``: measure a bundle on ``console``; returns the exit code.

    ``gpus``: one measuring worker on each of that many GPUs (None: all this process sees).
    ``launch``: the launch mode, which must be the bundle's (None: the bundle's).

    0 when every selected candidate has a result, 1 when this machine cannot measure; bad
    options or a bad manifest / results file raise UserInputError (see
    tsopt.workers.bundle_measure.measure_bundle, which does the measuring).
    """
    return bundle_measure.measure_bundle(
        bundle, runs=runs, warmup=warmup, limit=limit, checks=checks, gpu=gpu,
        isolation=isolation, max_candidates=max_candidates, baseline=baseline,
        rebaseline_every=rebaseline_every, view=ConsoleView(console or Console()), gpus=gpus,
        launch=launch,
    )
