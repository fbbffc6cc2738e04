"""What a tuning run shows while it works, and its closing summary (rich).

The live view has four lines under a trial bar: candidates per stage
(proposed and seen before, verified valid, rejected by rule, built with cache
hits and failures, measured by status, waiting in a bundle), the best so far
against the vendor baseline, the rate with an ETA from whichever budget
ends first (trials or time), and the flow: each GPU's busy fraction (its
measuring time over the time since measuring started) and how long candidates
waited for a build slot and for a GPU (median and longest). The summary repeats
the flow line and says which nodes built how many of the study's candidates.

A trial is one proposal of the sampler. Most proposals of a schedule space are
rejected by the verifier before anything is built, so the summary says what
the trials became, and how to bound the run by built or measured candidates.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from tsopt.db.store import Store


@dataclass
class TuneStats:
    """Counters of one run (the study's earlier runs are in the database)."""

    proposed: int = 0  # trials asked (or resumed) in this run
    seeded: bool = False  # the space's own seed taken up: judged and built, but not a trial
    duplicates: int = 0  # of them, genomes this study had seen: never rebuilt or re-measured
    rejected: Counter[str] = field(default_factory=Counter)
    valid: int = 0
    built: int = 0
    build_cache_hits: int = 0
    build_failed: int = 0
    worker_failures: int = 0
    measured: Counter[str] = field(default_factory=Counter)
    awaiting: int = 0  # built and left in a bundle for `tsopt measure`
    remeasured: int = 0  # contenders re-checked and the top k confirmed, measured again
    seconds: dict[str, float] = field(default_factory=dict)  # CPU seconds by step (verify, ...)
    told: int = 0  # trials finished (told to Optuna) in this run
    best_us: float | None = None
    best_ratio: float | None = None
    best_hash: str | None = None
    best_trial: int | None = None
    baseline_name: str = ""
    started: float = field(default_factory=time.monotonic)
    measuring_since: float | None = None  # monotonic: when the GPUs' workers were started
    gpu_busy_s: dict[int, float] = field(default_factory=dict)  # measuring seconds per GPU
    build_waits: list[float] = field(default_factory=list)  # per built candidate, seconds
    gpu_waits: list[float] = field(default_factory=list)  # per measurement, seconds
    built_on: Counter[str] = field(default_factory=Counter)  # node -> candidates built
    # The study's rank 1 when this run started (ratio, genome hash, baseline name): a run that
    # resumes after `tsopt ingest` shows it until this run times something better.
    earlier_best: tuple[float, str, str] | None = None

    def note_build(self, node: str, wait_s: float | None) -> None:
        """A build came back from ``node`` after waiting ``wait_s`` for its slot."""
        if node:
            self.built_on[node] += 1
        if wait_s is not None:
            self.build_waits.append(max(0.0, wait_s))

    def busy_fractions(self, now: float | None = None) -> dict[int, float]:
        """Each GPU worker's measuring time over the time since measuring started."""
        if self.measuring_since is None:
            return {}
        span = max(1e-9, (time.monotonic() if now is None else now) - self.measuring_since)
        return {gpu: min(1.0, busy / span) for gpu, busy in sorted(self.gpu_busy_s.items())}

    def flow_line(self) -> str:
        """GPUs' busy fractions and the waits for a build slot and for a GPU."""
        busy = self.busy_fractions()
        gpus = (", ".join(f"{gpu} {share:.0%}" for gpu, share in busy.items())
                if busy else ("idle so far" if self.measuring_since is not None else "none here"))
        return (f"GPU busy: {gpus} | waited for a build: {_waits(self.build_waits)}"
                f" | for a GPU: {_waits(self.gpu_waits)}")

    def offer_best(self, median_us: float, ratio: float | None, genome_hash: str,
                   trial: int | None, baseline_name: str = "") -> bool:
        """Take a correct timing as the best if it is faster (ties: the smaller genome hash,
        the rule the database's ranking uses). Returns whether it became the best."""
        if self.best_us is not None and self.best_hash is not None and (
                (median_us, genome_hash) >= (self.best_us, self.best_hash)):
            return False
        self.best_us, self.best_ratio, self.best_hash = median_us, ratio, genome_hash
        self.best_trial, self.baseline_name = trial, baseline_name or self.baseline_name
        return True

    def stage_line(self) -> str:
        rejected = sum(self.rejected.values())
        top = ", ".join(f"{rule} {n}" for rule, n in self.rejected.most_common(3))
        measured = sum(self.measured.values())
        by_status = ", ".join(f"{k} {v}" for k, v in sorted(self.measured.items()))
        parts = [
            f"proposed {self.proposed}" + (" + the seed" if self.seeded else "")
            + (f" (seen before {self.duplicates})" if self.duplicates else ""),
            f"valid {self.valid}",
            f"rejected {rejected}" + (f" ({top})" if top else ""),
            f"built {self.built}" + (f" (cached {self.build_cache_hits})"
                                     if self.build_cache_hits else "")
            + (f", failed {self.build_failed}" if self.build_failed else ""),
            f"measured {measured}" + (f" ({by_status})" if by_status else ""),
        ]
        if self.awaiting:
            parts.append(f"in bundle {self.awaiting}")
        return " | ".join(parts)

    def best_line(self) -> str:
        earlier = ""
        if self.earlier_best is not None:
            ratio, genome_hash, baseline = self.earlier_best
            earlier = (f"the study's best before this run: {ratio:.3f}x "
                       f"{baseline or 'baseline'} ({genome_hash[:12]})")
        if self.best_us is None:
            return (f"best: nothing timed in this run; {earlier}" if earlier
                    else "best: nothing timed yet")
        ratio = (f", {self.best_ratio:.3f}x {self.baseline_name or 'baseline'}"
                 if self.best_ratio is not None else "")
        trial = f", trial {self.best_trial}" if self.best_trial is not None else ""
        line = f"best: {self.best_us:.2f} µs{ratio} ({(self.best_hash or '')[:12]}{trial})"
        behind = (self.earlier_best is not None and self.best_ratio is not None
                  and self.best_ratio < self.earlier_best[0])
        return f"{line}; {earlier}" if behind else line

    def rate_line(self, remaining_trials: int | None, time_left_s: float | None) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.proposed / elapsed if elapsed > 0 else 0.0
        etas = []
        if remaining_trials is not None and rate > 0:
            etas.append(remaining_trials / rate)
        if time_left_s is not None:
            etas.append(max(0.0, time_left_s))
        eta = f", ETA {_clock(min(etas))}" if etas else ""
        return f"rate: {rate * 60:.1f} trials/min{eta}"

    def line(self) -> str:
        return f"{self.stage_line()} | {self.best_line()}"


def _waits(waits: list[float]) -> str:
    if not waits:
        return "-"
    ordered = sorted(waits)
    return f"median {ordered[len(ordered) // 2]:.1f} s, longest {ordered[-1]:.1f} s (n={len(ordered)})"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


ACROSS_STUDIES: ContextVar[Callable[[], RenderableType] | None] = ContextVar(
    "tsopt_across_studies", default=None)
"""Set by a run of several studies (tsopt.app.serving_tune): the view of all of them, which
every study's live view shows above its own bar (one live view across the problems)."""


class TuneProgress:
    """The live view: a bar of trials (of the study's budget) and the three lines, under the
    view across studies when a run of several sets one (:data:`ACROSS_STUDIES`)."""

    def __init__(self, console: Console, stats: TuneStats, title: str, total: int | None,
                 done: int) -> None:
        """``total``: the study's trials, None when another budget (--built, --measured,
        --time) ends the run."""
        self.console = console
        self.stats = stats
        self.total = total
        self.remaining: int | None = None if total is None else max(0, total - done)
        self.time_left_s: float | None = None
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        self.task = self.bar.add_task(title, total=total, completed=done)
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=False)

    def _render(self) -> RenderableType:
        lines = Text("\n".join((self.stats.stage_line(), self.stats.best_line(),
                                self.stats.rate_line(self.remaining, self.time_left_s),
                                self.stats.flow_line())))
        across = ACROSS_STUDIES.get()
        return Group(across(), self.bar, lines) if across is not None else Group(self.bar, lines)

    def update(self, done: int, time_left_s: float | None = None) -> None:
        self.bar.update(self.task, completed=done if self.total is None else min(done, self.total))
        self.remaining = None if self.total is None else max(0, self.total - done)
        self.time_left_s = time_left_s
        self.live.update(self._render())

    def __enter__(self) -> TuneProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._render())
        self.live.__exit__(None, None, None)
        if not self.console.is_terminal:
            self.console.print()  # the last frame ends without a newline off a terminal


def trials_line(stats: TuneStats, seconds: float) -> str:
    """What this run's trials became: a trial is a proposal, not a built or timed kernel."""
    rejected = sum(stats.rejected.values())
    measured = sum(stats.measured.values())
    besides = ", besides the space's seed" if stats.seeded else ""
    line = (f"{stats.proposed} trials this run in {seconds:.1f} s (a trial is one proposal of the "
            f"sampler{besides}): {rejected} rejected by the checks, {stats.duplicates} seen before, "
            f"{stats.built} built ({stats.build_cache_hits} from the cache"
            + (f", {stats.build_failed} failed" if stats.build_failed else "")
            + f"), {measured} measured ({stats.measured.get('ok', 0)} timed correct)")
    if stats.proposed and stats.built * 2 < stats.proposed:
        line += (". Most proposals never reach a build: --built N or --measured N bound the run "
                 "by candidates instead")
    return line


def cpu_line(stats: TuneStats) -> str | None:
    """What the build side cost this run, in CPU seconds (issue #12's figure: every
    evaluation's CPU, rejected ones included, over the candidates built), and this process's
    own (the driver: proposals, predictions, records). None when nothing was built."""
    import resource

    evaluated = stats.seconds.get("cpu", 0.0)
    if not stats.built or not evaluated:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    own = usage.ru_utime + usage.ru_stime
    return (f"CPU: {evaluated:.0f} CPU-s in the build workers (verification, compile, export, "
            f"link), {evaluated / stats.built:.1f} CPU-s per built candidate; "
            f"{own:.0f} CPU-s in this process")


def library_line(store: Store, name: str) -> str:
    """What the study started from, as it recorded (``TuneRequest.library_mode``): a figure
    of a held-out problem is library-off or leave-one-shape-out, and says which."""
    info = store.get_study(name)
    mode = info.config.get("library") if info is not None else None
    meaning = {"on": "started from the seed library",
               "off": "started without the seed library (--no-library)",
               "exclude-self": "leave-one-shape-out: the seed library without this problem's "
                               "own entries (--library-exclude-self)"}
    prior = info.config.get("cost_prior") if info is not None else None
    return (f"library: {mode or 'not recorded'}" + (f" ({meaning[mode]})" if mode in meaning
                                                     else "")
            + (f"; cost model's prior: {prior} (--cost-prior)" if prior else ""))


def print_summary(console: Console, store: Store, name: str, stats: TuneStats, measured: bool,
                  bundle_dir: Path, seconds: float) -> None:
    """The funnel of the whole study, this run's rejections, the best candidate (or where the
    bundle is when nothing could be timed here)."""
    funnel = store.funnel(name)
    table = Table(title=f"study {name}", title_justify="left")
    table.add_column("stage")
    table.add_column("candidates", justify="right")
    for stage, count in funnel.items():
        table.add_row(stage.replace("_", "-"), str(count))
    console.print(table)
    if stats.rejected:
        top = ", ".join(f"{rule} {n}" for rule, n in stats.rejected.most_common(6))
        console.print(f"rejected this run: {top}")
    console.print(trials_line(stats, seconds), highlight=False)
    console.print(library_line(store, name), highlight=False)
    cpu = cpu_line(stats)
    if cpu is not None:
        console.print(cpu, highlight=False)
    console.print(stats.flow_line(), highlight=False)
    nodes = store.build_nodes(name)
    if len(nodes) > 1 or (nodes and stats.built_on):
        console.print("built on: " + ", ".join(f"{node[:16]} {count}" for node, count in
                                               sorted(nodes.items(), key=lambda x: -x[1]))
                      + " (the study's candidates, by the node whose worker built them)",
                      highlight=False)
    ranked = store.ranked_on_card(name, limit=1)
    if ranked:
        best = ranked[0].measurement
        ratio = f", {best.ratio:.3f}x {best.baseline_name}" if best.ratio is not None else ""
        rate = f", {best.rate:.1f} {best.rate_unit}" if best.rate is not None else ""
        console.print(f"best: {ranked[0].genome_hash[:12]} {best.median_us:.2f} µs{rate}{ratio}")
    elif measured:
        console.print("[yellow]no candidate measured correct[/]")
    if not measured:
        console.print(
            "[bold yellow]Nothing was timed: no GPU is present on this machine.[/] "
            f"Built candidates are in the bundle {bundle_dir}: run `tsopt measure {bundle_dir}` "
            f"on a GPU machine, then `tsopt ingest {bundle_dir}` here.")
