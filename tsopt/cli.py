"""The ``tsopt`` command line.

Only typer and rich are imported at start: ``tsopt measure`` runs on GPU
machines that have torch but neither the DSL nor the search stack, and every
command should start fast. Each command imports what it needs when it runs.

Exit codes: 0 success, 1 a failure while working (a build broke, a bundle
could not be measured, ...), 2 bad input (the message names the bad value),
3 a command that is not built yet.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal, NoReturn

import typer
from rich.console import Console

from tsopt.core.errors import UserInputError

app = typer.Typer(
    name="tsopt",
    help="Autotune CUTLASS Task Scheduling (TS) kernels: enumerate, verify, build, measure, record.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tune_app = typer.Typer(help="Search a kernel space for one problem.", no_args_is_help=True)
app.add_typer(tune_app, name="tune")

console = Console()
err_console = Console(stderr=True)

DEFAULT_DB = "sqlite:///tsopt.db"
DB_HELP = "SQLAlchemy URL of the database (default: tsopt.db in the working directory)."


def _fail(message: str, code: int) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _not_built(what: str) -> NoReturn:
    _fail(f"`tsopt {what}` is not built yet in this version of tsopt.", 3)


class _Guard:
    """Turns bad input into one line + exit 2, and known work failures into exit 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None or isinstance(exc, typer.Exit | KeyboardInterrupt | SystemExit):
            return False
        from tsopt.core.genome import GenomeError
        from tsopt.core.problem import ProblemError

        if isinstance(exc, UserInputError | GenomeError | ProblemError):
            _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 2)
        return False


# --------------------------------------------------------------------------------------
# tune
# --------------------------------------------------------------------------------------


def _parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600}
    value, unit = text[:-1], text[-1:]
    if unit not in units:
        value, unit = text, "s"
    try:
        seconds = float(value) * units[unit]
    except ValueError:
        raise UserInputError(f"--time {text!r} is not a duration like 90s, 30m or 2h") from None
    if seconds <= 0:
        raise UserInputError(f"--time {text!r} must be positive")
    return seconds


TRIALS_HELP = ("Trials in the study in total: running the same command again resumes it "
               "up to N (after Ctrl-C or a kill).")
SAMPLER_HELP = ("tpe (default), random, cmaes (numeric knobs; the others fall back to TPE) or "
                "grid (exhaustive; small or --knob-restricted spaces).")
WORKERS_HELP = ("Workers verifying and building in parallel (0: one at a time in this "
                "process). With N > 0 a local Ray cluster of N CPUs is started, or joined with "
                "--ray-address; each GPU gets a measuring actor. With --pool processes: N "
                "local build processes instead of Ray.")
RAY_HELP = "Join this Ray cluster (HOST:PORT of its head) instead of starting a local one."
POOL_HELP = ("What --workers N runs on: ray (default; a local Ray cluster, or --ray-address) "
             "or processes (N build processes on this machine, no Ray; measuring on this "
             "machine's GPU if it has one).")
PATIENCE_HELP = ("Stop after N trials without a faster measurement. Improvement needs "
                 "measurements: without a GPU nothing is timed and this never triggers.")
WARM_HELP = ("Start a new study from the best genomes of finished studies of the same space "
             "and dtype on the nearest shapes in the database.")
KNOB_HELP = ("Restrict a knob to some of its choices, e.g. --knob stages=2,4 (repeatable; one "
             "value fixes it). Makes --sampler grid possible on a big space.")


@tune_app.command("copy")
def tune_copy(
    rows: int = typer.Option(..., help="Rows of the 2-D tensor."),
    cols: int = typer.Option(..., help="Columns of the 2-D tensor (contiguous)."),
    dtype: str = typer.Option("fp16", help="Element type: fp16 or bf16."),
    trials: int = typer.Option(50, help=TRIALS_HELP),
    time: str = typer.Option(None, "--time", help="Wall-clock budget of this run, e.g. 30m."),
    patience: int = typer.Option(None, help=PATIENCE_HELP),
    sampler: str = typer.Option("tpe", help=SAMPLER_HELP),
    knob: list[str] = typer.Option(None, "--knob", help=KNOB_HELP),
    arch: str = typer.Option("sm_90a", help="Target architecture."),
    study: str = typer.Option(None, help="Study name (default: derived from the problem)."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
    bundle: Path = typer.Option(None, help="Bundle directory (default: .tsopt/bundles/<study>)."),
    workers: int = typer.Option(0, help=WORKERS_HELP),
    ray_address: str = typer.Option(None, "--ray-address", help=RAY_HELP),
    pool: str = typer.Option("ray", help=POOL_HELP),
    warm_start: bool = typer.Option(True, "--warm-start/--no-warm-start", help=WARM_HELP),
    seed: int = typer.Option(0, help="Sampler seed."),
) -> None:
    """Tune the TS TMA copy (GMEM -> SMEM -> GMEM) for one tensor."""
    with _Guard():
        from tsopt.core.problem import Problem
        from tsopt.search.tune import TuneRequest, run_tune

        problem = Problem.of("copy", dtype, rows=rows, cols=cols)
        request = TuneRequest(
            space="copy", problem=problem, trials=trials, time_budget_s=_parse_duration(time),
            sampler=sampler, arch=arch, study=study, db_url=db, bundle_dir=bundle,
            workers=workers, seed=seed, ray_address=ray_address, patience=patience,
            warm_start=warm_start, knobs=tuple(knob or ()), pool=pool,
        )
        code = run_tune(request, console)
    raise typer.Exit(code)


@tune_app.command("gemm")
def tune_gemm(
    m: int = typer.Option(..., help="Rows of A and D."),
    n: int = typer.Option(..., help="Rows of B, columns of D."),
    k: int = typer.Option(..., help="Columns of A and B (the reduction)."),
    dtype: str = typer.Option("bf16", help="Input/output type: bf16 or fp16 (fp32 accumulation)."),
    trials: int = typer.Option(100, help=TRIALS_HELP),
    time: str = typer.Option(None, "--time", help="Wall-clock budget of this run, e.g. 30m."),
    patience: int = typer.Option(None, help=PATIENCE_HELP),
    sampler: str = typer.Option("tpe", help=SAMPLER_HELP),
    knob: list[str] = typer.Option(None, "--knob", help=KNOB_HELP),
    arch: str = typer.Option("sm_90a", help="Target architecture."),
    study: str = typer.Option(None, help="Study name (default: derived from the problem)."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
    bundle: Path = typer.Option(None, help="Bundle directory (default: .tsopt/bundles/<study>)."),
    workers: int = typer.Option(0, help=WORKERS_HELP),
    ray_address: str = typer.Option(None, "--ray-address", help=RAY_HELP),
    pool: str = typer.Option("ray", help=POOL_HELP),
    warm_start: bool = typer.Option(True, "--warm-start/--no-warm-start", help=WARM_HELP),
    seed: int = typer.Option(0, help="Sampler seed."),
) -> None:
    """Tune the Hopper warp-specialized TS GEMM D = A @ B^T."""
    with _Guard():
        from tsopt.core.problem import Problem
        from tsopt.search.tune import TuneRequest, run_tune

        problem = Problem.of("gemm", dtype, m=m, n=n, k=k)
        request = TuneRequest(
            space="gemm", problem=problem, trials=trials, time_budget_s=_parse_duration(time),
            sampler=sampler, arch=arch, study=study, db_url=db, bundle_dir=bundle,
            workers=workers, seed=seed, ray_address=ray_address, patience=patience,
            warm_start=warm_start, knobs=tuple(knob or ()), pool=pool,
        )
        code = run_tune(request, console)
    raise typer.Exit(code)


# --------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------


@app.command()
def verify(
    genome_file: Path = typer.Argument(..., help="Genome JSON file (as written by tsopt)."),
    problem: str = typer.Option(
        None, help="Problem, e.g. 'copy:fp16:4096x4096' or 'gemm:bf16:8192x8192x8192' "
        "(default: a small problem of the genome's space).",
    ),
    domain: int = typer.Option(None, help="Concrete domain iterations (default: stages + 2)."),
) -> None:
    """Judge one genome with the TS verifier and tsopt's own checks; print `valid` or the rule."""
    with _Guard():
        from tsopt.core.genome import Genome
        from tsopt.core.registry import problem_for
        from tsopt.verify.verifier import verify_genome

        try:
            text = genome_file.read_text()
        except OSError as exc:
            raise UserInputError(f"cannot read genome file {str(genome_file)!r}: {exc.strerror}") from None
        genome = Genome.from_json(text)
        verdict = verify_genome(genome, problem_for(problem, genome.space), domain=domain)
    if verdict.valid:
        console.print(f"[green]valid[/]  ({verdict.seconds * 1e3:.1f} ms, domain {verdict.domain})")
        raise typer.Exit(0)
    console.print(f"[red]rejected[/] [{verdict.stage}] {verdict.rule}: {verdict.message}", highlight=False)
    raise typer.Exit(1)


# --------------------------------------------------------------------------------------
# measure / ingest
# --------------------------------------------------------------------------------------


@app.command()
def measure(
    bundle: Path = typer.Argument(..., help="Bundle directory written by `tsopt tune` on a build machine."),
    runs: int = typer.Option(50, help="Timed runs per candidate (at least 20)."),
    warmup: int = typer.Option(10, help="Warm-up runs per candidate."),
    limit: int = typer.Option(None, help="Measure only the first N candidates."),
) -> None:
    """On a GPU machine: check and time every candidate of a bundle, write results into it."""
    with _Guard():
        from tsopt.workers.bundle_measure import measure_bundle

        code = measure_bundle(bundle, runs=runs, warmup=warmup, limit=limit, console=console)
    raise typer.Exit(code)


@app.command()
def ingest(
    bundle: Path = typer.Argument(..., help="A measured bundle directory."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
) -> None:
    """Record a measured bundle's results in the database and tell the study."""
    with _Guard():
        from tsopt.app.ingest import ingest_bundle

        code = ingest_bundle(bundle, db_url=db, console=console)
    raise typer.Exit(code)


# --------------------------------------------------------------------------------------
# report / dashboard / export / spaces
# --------------------------------------------------------------------------------------


@app.command()
def report(
    study: str = typer.Argument(None, help="Study name (omit to list the studies)."),
    out: Path = typer.Option(None, help="Output HTML file (default: report-<study>.html)."),
    compare: list[str] = typer.Option(None, help="Two studies to put side by side: --compare A --compare B."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
) -> None:
    """Write a self-contained HTML dashboard for a study (or list the studies)."""
    with _Guard():
        try:
            from tsopt.reports.report import report_command
        except ImportError:
            _not_built("report")
        code = report_command(study=study, out=out, compare=compare or [], db_url=db, console=console)
    raise typer.Exit(code)


@app.command()
def dashboard(
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
    port: int = typer.Option(8080, help="Port for optuna-dashboard."),
) -> None:
    """Open optuna-dashboard on the same database."""
    with _Guard():
        try:
            from tsopt.reports.dashboard import dashboard_command
        except ImportError:
            _not_built("dashboard")
        code = dashboard_command(db_url=db, port=port, console=console)
    raise typer.Exit(code)


@app.command()
def export(
    study: str = typer.Argument(..., help="Study name."),
    out: Path = typer.Option(..., help="Output directory."),
    rank: int = typer.Option(1, help="1 = best correct timed candidate, 2 = runner-up, ..."),
    force: bool = typer.Option(False, help="Write into a non-empty directory."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
) -> None:
    """Export a tuned kernel: source, C artifacts, manifest and loader."""
    with _Guard():
        try:
            from tsopt.app.export import export_command
        except ImportError:
            _not_built("export")
        code = export_command(study=study, out=out, rank=rank, force=force, db_url=db, console=console)
    raise typer.Exit(code)


@app.command()
def spaces(
    name: str = typer.Argument(None, help="A space to describe (omit to list all)."),
    problem: str = typer.Option(
        None, help="Problem for knob choices and the funnel, e.g. copy:fp16:4096x4096."
    ),
    funnel: bool = typer.Option(False, help="Run the enumerator funnel (verifies every candidate)."),
    build: int = typer.Option(0, help="With --funnel: also build this many valid candidates."),
) -> None:
    """List search spaces and their knobs; with --funnel, count raw -> built."""
    with _Guard():
        from tsopt.app.spaces import spaces_command

        code = spaces_command(name=name, problem=problem, funnel=funnel, build=build, console=console)
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except UserInputError as exc:  # raised outside a guarded command body (option parsing)
        _fail(str(exc), 2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
