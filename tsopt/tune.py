"""``tsopt tune``: propose, verify, build, record, and measure (or bundle for later).

One trial, end to end (DESIGN.md): the sampler proposes a genome through the
space's knobs; the verifier judges it (cached by the genes that can change
the verdict); a valid one is compiled for the target arch on this machine;
with a GPU present it is measured inline by the isolated runner, otherwise
its artifact joins a bundle for ``tsopt measure`` on a GPU machine. Every
candidate, verdict, build and measurement is recorded in the database, and
every outcome is told to Optuna: rejected candidates as PRUNED and failed
builds/measurements as FAIL, each with its reason as a user attribute.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tsopt.errors import UserInputError
from tsopt.genome import Genome
from tsopt.problem import Problem
from tsopt.records import BuildResult, Measurement, Verdict

if TYPE_CHECKING:
    import optuna

    from db.store import Store
    from search_spaces.base import SearchSpace

SAMPLERS = ("tpe", "random", "grid", "cmaes")
GRID_LIMIT = 200_000


@dataclass(frozen=True)
class TuneRequest:
    space: str
    problem: Problem
    trials: int = 50
    time_budget_s: float | None = None
    sampler: str = "tpe"
    arch: str = "sm_90a"
    study: str | None = None
    db_url: str = "sqlite:///tsopt.db"
    bundle_dir: Path | None = None
    workers: int = 0
    seed: int = 0
    cache_dir: Path = Path(".tsopt") / "artifacts"
    measure: str = "auto"  # auto | never | always

    def study_name(self) -> str:
        """Default: space, problem and arch, e.g. ``copy-fp16-4096x4096-sm_90a``."""
        if self.study:
            return self.study
        key = self.problem.key
        if key.startswith(f"{self.space}-"):
            key = key[len(self.space) + 1:]
        return f"{self.space}-{key}-{self.arch}"

    def validate(self) -> None:
        if self.trials < 1:
            raise UserInputError(f"--trials {self.trials} must be at least 1")
        if self.sampler not in SAMPLERS:
            raise UserInputError(f"--sampler {self.sampler!r} is not one of {', '.join(SAMPLERS)}")
        if self.workers < 0:
            raise UserInputError(f"--workers {self.workers} must be >= 0")
        if self.measure not in ("auto", "never", "always"):
            raise UserInputError(f"measure mode {self.measure!r} is not auto, never or always")


@dataclass
class TuneStats:
    proposed: int = 0
    duplicates: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    valid: int = 0
    built: int = 0
    build_failed: int = 0
    measured: Counter[str] = field(default_factory=Counter)
    best_us: float | None = None
    best_ratio: float | None = None
    best_hash: str | None = None

    def line(self) -> str:
        rejected = sum(self.rejected.values())
        best = (f"best {self.best_us:.1f} µs ({self.best_ratio:.2f}x baseline)"
                if self.best_us is not None and self.best_ratio is not None else "best: not timed")
        measured = ", ".join(f"{k} {v}" for k, v in sorted(self.measured.items())) or "0"
        return (f"valid {self.valid} | rejected {rejected} | built {self.built} "
                f"(failed {self.build_failed}) | measured {measured} | {best}")


def make_sampler(name: str, seed: int, space: SearchSpace, problem: Problem) -> optuna.samplers.BaseSampler:
    import optuna

    if name == "tpe":
        # constant_liar keeps a batch of asked-but-untold trials from piling onto one point.
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        numeric = [k for k in space.knobs(problem) if k.kind == "numeric"]
        if not numeric:
            raise UserInputError(f"--sampler cmaes needs numeric knobs; space {space.name!r} has none")
        # CMA-ES handles the numeric knobs; categorical (schedule) knobs go to the fallback.
        return optuna.samplers.CmaEsSampler(
            seed=seed, independent_sampler=optuna.samplers.TPESampler(seed=seed), warn_independent_sampling=False
        )
    grid: dict[str, list[Any]] = {k.name: list(k.choices) for k in space.knobs(problem)}
    size = 1
    for choices in grid.values():
        size *= len(choices)
    if size > GRID_LIMIT:
        raise UserInputError(
            f"--sampler grid: space {space.name!r} has {size:,} knob combinations (limit {GRID_LIMIT:,}); "
            "use tpe or random"
        )
    return optuna.samplers.GridSampler(grid, seed=seed)


class CandidatePipeline:
    """Verify and build one candidate, recording each outcome; shared by every driver."""

    def __init__(self, store: Store, space: SearchSpace, problem: Problem, arch: str,
                 study: str, cache_dir: Path) -> None:
        from tsopt.verifier import VerdictCache

        self.store = store
        self.space = space
        self.problem = problem
        self.arch = arch
        self.study = study
        self.cache_dir = cache_dir
        self.cache = VerdictCache(lookup=store.find_verdict)

    def verify(self, candidate_id: int, genome: Genome) -> Verdict:
        from tsopt.verifier import verdict_cache_key, verify_genome

        verdict = verify_genome(genome, self.problem, space=self.space, cache=self.cache)
        key = (verdict_cache_key(self.space, genome, self.problem, verdict.domain)
               if verdict.stage != "dataflow" else f"dataflow:{genome.hash}")
        self.store.record_verdict(candidate_id, self.space.name, key, verdict)
        return verdict

    def build(self, candidate_id: int, genome: Genome) -> BuildResult:
        from tsopt.builder import build_candidate, cache_key

        key = cache_key(genome, self.problem, self.arch)
        known = self.store.find_build(key)
        if known is not None and known.ok and known.artifact_dir and Path(known.artifact_dir).exists():
            result = BuildResult(**{**known.to_dict(), "cache_hit": True})
        else:
            result = build_candidate(self.space, genome, self.problem, self.arch, self.cache_dir)
        self.store.record_build(candidate_id, result)
        return result


def _gpu_available(mode: str) -> bool:
    if mode == "never":
        return False
    from workers.watchdog import gpu_present

    present = gpu_present()
    if mode == "always" and not present:
        raise UserInputError("measurement was requested but no GPU is present on this machine")
    return present


def run_tune(request: TuneRequest, console: Console) -> int:
    """The main job. Returns the exit code (0: done, 1: valid candidates but none could be built)."""
    import optuna

    from db.store import Store
    from search_spaces import get_space

    request.validate()
    from tsopt.dsl_env import ensure_arch

    ensure_arch(request.arch)
    space = get_space(request.space)
    space.check_problem(request.problem)
    if request.arch not in space.archs:
        raise UserInputError(f"--arch {request.arch!r}: space {space.name!r} builds for {', '.join(space.archs)}")
    store = Store(request.db_url)
    name = request.study_name()
    store.create_or_get_study(
        name, space.name, request.problem, request.arch, request.sampler,
        {"trials": request.trials, "time_budget_s": request.time_budget_s, "seed": request.seed},
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name, storage=store.optuna_storage(), direction="minimize", load_if_exists=True,
        sampler=make_sampler(request.sampler, request.seed, space, request.problem),
    )
    pipeline = CandidatePipeline(store, space, request.problem, request.arch, name, request.cache_dir)
    measure_inline = _gpu_available(request.measure)
    bundle_dir = request.bundle_dir or Path(".tsopt") / "bundles" / name
    run_id = f"inline-{uuid.uuid4()}"

    stats = TuneStats()
    start = time.monotonic()
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
    )
    bar = progress.add_task(f"tune {space.name} {request.problem}", total=request.trials)
    status = Table.grid()
    status_text = TextColumn("")

    def render() -> Group:
        return Group(progress, stats.line())

    batch_size = max(1, request.workers)
    with Live(render(), console=console, refresh_per_second=8, transient=False) as live:
        # The template's reference schedule (e.g. the TS tutorial's) is built and measured
        # in every study, beside the candidates, but it is not an Optuna trial: its genes
        # may lie outside the knobs' choices.
        seed = _seed_candidate(space, request, pipeline, store, name, stats)
        if seed is not None:
            _finish_batch([seed], study, space, request, store, name, bundle_dir, measure_inline,
                          run_id, stats)
        while stats.proposed < request.trials:
            if request.time_budget_s is not None and time.monotonic() - start > request.time_budget_s:
                console.print(f"time budget of {request.time_budget_s:.0f} s reached")
                break
            n = min(batch_size, request.trials - stats.proposed)
            trials = [study.ask() for _ in range(n)]
            built: list[tuple[optuna.trial.Trial, int, Genome, BuildResult]] = []
            for trial in trials:
                outcome = _propose_one(trial, study, space, request, pipeline, store, name, stats)
                if outcome is not None:
                    built.append(outcome)
                progress.advance(bar)
                live.update(render())
            if built:
                _finish_batch(built, study, space, request, store, name, bundle_dir, measure_inline,
                              run_id, stats)
            live.update(render())

    _summary(console, store, name, stats, measure_inline, bundle_dir, time.monotonic() - start)
    store.close()
    # A run whose proposals were all rejected did its job; one that could build nothing valid did not.
    return 1 if stats.valid and not stats.built else 0


def _origin(trial: Any) -> str:
    return "seed" if trial is None else str(trial.user_attrs.get("origin", "suggest"))


def _seed_candidate(space: SearchSpace, request: TuneRequest, pipeline: CandidatePipeline,
                    store: Store, name: str, stats: TuneStats) -> Any:
    """Verify and build the space's reference genome once per study."""
    genome = space.seed_genome(request.problem)
    if store.candidate_id(name, genome.hash) is not None:
        return None
    candidate_id = store.add_candidate(name, genome, "seed", None)
    verdict = pipeline.verify(candidate_id, genome)
    if not verdict.valid:
        stats.rejected[verdict.rule or "?"] += 1
        return None
    stats.valid += 1
    build = pipeline.build(candidate_id, genome)
    if not build.ok:
        stats.build_failed += 1
        return None
    stats.built += 1
    return None, candidate_id, genome, build


def _finish_batch(built: list[Any], study: Any, space: SearchSpace, request: TuneRequest,
                  store: Store, name: str, bundle_dir: Path, measure_inline: bool, run_id: str,
                  stats: TuneStats) -> None:
    """Bundle the built candidates, then measure them inline or leave them for the bundle."""
    from tsopt.bundle import BundleEntry, write_bundle

    write_bundle(
        bundle_dir, study=name, space=space.name, problem=request.problem, arch=request.arch,
        candidates=[BundleEntry(g, Path(b.artifact_dir or ""), _origin(t)) for t, _, g, b in built],
        append=bundle_dir.exists(),
    )
    if measure_inline:
        _measure_inline(built, study, store, run_id, stats)
        return
    for trial, _, _, _ in built:
        if trial is not None:
            trial.set_user_attr("awaiting_measurement", str(bundle_dir))


def _propose_one(trial: Any, study: Any, space: SearchSpace, request: TuneRequest,
                 pipeline: CandidatePipeline, store: Store, name: str, stats: TuneStats) -> Any:
    """Verify and build one trial's genome; returns (trial, id, genome, build) when built."""
    from optuna.trial import TrialState

    genome = space.suggest(trial, request.problem)
    stats.proposed += 1
    trial.set_user_attr("genome_hash", genome.hash)
    earlier = store.candidate_id(name, genome.hash)
    candidate_id = store.add_candidate(name, genome, _origin(trial), trial.number)
    if earlier is not None:
        # Seen before in this study: never rebuilt or re-measured; Optuna gets the known outcome.
        stats.duplicates += 1
        ranked = {r.genome_hash: r for r in store.ranked(name)}
        trial.set_user_attr("duplicate_of", genome.hash)
        known = ranked.get(genome.hash)
        if known is not None:
            study.tell(trial, known.measurement.median_us)
        else:
            study.tell(trial, state=TrialState.PRUNED)
        return None
    verdict = pipeline.verify(candidate_id, genome)
    if not verdict.valid:
        stats.rejected[verdict.rule or "?"] += 1
        trial.set_user_attr("rejected", f"{verdict.rule}: {verdict.message}"[:500])
        study.tell(trial, state=TrialState.PRUNED)
        return None
    stats.valid += 1
    build = pipeline.build(candidate_id, genome)
    if not build.ok:
        stats.build_failed += 1
        trial.set_user_attr("build_error", (build.error or "")[:500])
        study.tell(trial, state=TrialState.FAIL)
        return None
    stats.built += 1
    return trial, candidate_id, genome, build


def _measure_inline(built: list[Any], study: Any, store: Store, run_id: str, stats: TuneStats) -> None:
    from optuna.trial import TrialState

    from workers.watchdog import measure_artifacts

    dirs = [Path(b.artifact_dir) for _, _, _, b in built]
    run = measure_artifacts(dirs)
    for probe in run.probes.values():
        base = probe.baseline
        store.record_baseline(base.problem_key, base.name, base.device, run_id, base.median_us,
                              base.p10_us, base.p90_us, base.rate, base.rate_unit)
    for (trial, candidate_id, _, _), measured in zip(built, run.measurements, strict=True):
        store.record_measurement(candidate_id, measured, run_id)
        stats.measured[measured.status] += 1
        if trial is None:  # the seed: recorded, not a trial
            continue
        if measured.status == "ok" and measured.median_us is not None:
            study.tell(trial, measured.median_us)
            if stats.best_us is None or measured.median_us < stats.best_us:
                stats.best_us, stats.best_ratio = measured.median_us, measured.ratio
                stats.best_hash = measured.genome_hash
        else:
            trial.set_user_attr("measure_failed", f"{measured.status}: {measured.error or ''}"[:500])
            study.tell(trial, state=TrialState.FAIL)


def _summary(console: Console, store: Store, name: str, stats: TuneStats, measured: bool,
             bundle_dir: Path, seconds: float) -> None:
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
    console.print(f"{stats.proposed} proposed ({stats.duplicates} seen before) in {seconds:.1f} s")
    if measured:
        ranked = store.ranked(name, limit=5)
        if ranked:
            best = ranked[0].measurement
            console.print(
                f"best: {ranked[0].genome_hash[:12]} {best.median_us:.2f} µs, {best.rate:.1f} "
                f"{best.rate_unit}, {best.ratio:.3f}x {best.baseline_name}"
            )
        else:
            console.print("[yellow]no candidate measured correct[/]")
    else:
        console.print(
            "[bold yellow]Nothing was timed: no GPU is present on this machine.[/] "
            f"Built candidates are in the bundle {bundle_dir}: run `tsopt measure {bundle_dir}` "
            f"on a GPU machine, then `tsopt ingest {bundle_dir}` here."
        )
