"""The ``tsopt`` command line.

Only typer, rich and the ground floor are imported at start: ``tsopt measure`` runs on GPU
machines that have torch but neither the DSL nor the search stack, and every command should
start fast. Each command imports what it needs when it runs.

Exit codes (:data:`tsopt.core.errors.EXIT_CODES`, listed by ``tsopt --help``): 0 success,
1 a failure while working (a build broke, a bundle could not be measured, ...), 2 bad input
(the message names the bad value), 3 a Python package the command needs is not installed (the
message names it), 4 the database cannot be used (corrupted, read-only, altered, of a newer
schema: the message names it and what to do), 130 interrupted. Every failure the user can
cause is one line on stderr, never a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tsopt.app.tune_command import DB_HELP, DEFAULT_DB, register_tune_commands
from tsopt.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_DATABASE,
    EXIT_INTERRUPTED,
    EXIT_MISSING_PACKAGE,
    DatabaseUnusable,
    UserInputError,
)

if TYPE_CHECKING:
    from tsopt.core.genome import Genome

EXIT_CODES_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES)

app = typer.Typer(
    name="tsopt",
    help="Autotune CUTLASS Task Scheduling (TS) kernels: enumerate, verify, build, measure, record.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tune_app = typer.Typer(help="Search a kernel space for one problem.", no_args_is_help=True)
app.add_typer(tune_app, name="tune")
db_app = typer.Typer(help="Look after the database: `tsopt db check`.", no_args_is_help=True)
app.add_typer(db_app, name="db")
library_app = typer.Typer(help="The seed library new studies start from: `tsopt library show`, "
                               "`tsopt library update`.", no_args_is_help=True)
app.add_typer(library_app, name="library")
heldout_app = typer.Typer(help="The held-out problems the search is judged on: `tsopt heldout "
                               "list`.", no_args_is_help=True)
app.add_typer(heldout_app, name="heldout")
corpus_app = typer.Typer(help="The measurement corpus the shipped data is made from: `tsopt "
                              "corpus build`, `tsopt corpus products`.", no_args_is_help=True)
app.add_typer(corpus_app, name="corpus")

console = Console()
err_console = Console(stderr=True)



def _fail(message: str, code: int) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _missing(exc: ModuleNotFoundError) -> NoReturn:
    name = exc.name or str(exc)
    _fail(f"this command needs the Python package {name!r}, which is not installed here "
          f"({exc}); install tsopt with its dependencies: pip install -e '.[dev]'",
          EXIT_MISSING_PACKAGE)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _database_failure(exc: BaseException, db: str | None) -> UserInputError | None:
    """The one-line error for a database driver's error (Optuna's wraps the driver's), naming
    the database when the command knows it; None when ``exc`` is no database error."""
    import sqlite3

    cause = exc
    if "optuna" in sys.modules:
        import optuna

        if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
            cause = exc.__cause__
    if "sqlalchemy" not in sys.modules and not isinstance(cause, sqlite3.Error):
        return None
    from tsopt.db.engine import is_database_failure, parse_url, unusable

    if not is_database_failure(cause):
        return None
    try:
        where = parse_url(db) if db else "the database"
    except UserInputError:
        where = db or "the database"
    return unusable(cause, where)


class _Guard:
    """Turns bad input into one line + exit 2, a missing package into one line + exit 3, and a
    database that cannot be used into one line + exit 4 (naming ``db`` when given)."""

    def __init__(self, db: str | None = None) -> None:
        self.db = db

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None or isinstance(exc, typer.Exit | KeyboardInterrupt | SystemExit):
            return False
        from tsopt.core.genome import GenomeError
        from tsopt.core.problem import ProblemError

        if isinstance(exc, DatabaseUnusable):
            _fail(_first_line(exc), EXIT_DATABASE)
        if isinstance(exc, UserInputError | GenomeError | ProblemError):
            _fail(_first_line(exc), EXIT_BAD_INPUT)
        database = _database_failure(exc, self.db)
        if database is not None:
            _fail(_first_line(database), EXIT_DATABASE if isinstance(database, DatabaseUnusable)
                  else EXIT_BAD_INPUT)
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] != "tsopt":
            _missing(exc)
        if isinstance(exc, OSError) and exc.filename is not None:
            # A path given on the command line (or under it) that cannot be read or written.
            _fail(f"{exc.filename}: {exc.strerror or _first_line(exc)}", EXIT_BAD_INPUT)
        return False


# --------------------------------------------------------------------------------------
# tune: one command per registered space, its sizes from the op registry
# --------------------------------------------------------------------------------------

register_tune_commands(tune_app, _Guard, console)


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
    device: str = typer.Option(None, help="GPU profile the genome is judged for (its SM count "
                               "sets stream-K's waves), e.g. H100_PCIE; default: the arch's "
                               "(H200_SXM for sm_90a)."),
    db: str | None = typer.Option(None, help="Also read the exhaustive TS searches this database "
                                             "holds (`tsopt prove --db` records complete ones); "
                                             "nothing is written to it."),
) -> None:
    """Judge one genome with the TS verifier and tsopt's own checks; print `valid` or the rule.

    The exhaustive searches shipped with tsopt (its memo and complete proofs) are read, so a
    shipped proof makes a verdict complete. A genome whose genes do not fit its space (a wrong
    kind, out of range, not a choice) is bad input (exit 2, the gene named); a schedule the
    checks reject exits 1."""
    with _Guard(db):
        from tsopt.core.devices import check_fits
        from tsopt.core.registry import get_space, problem_for
        from tsopt.search.ts_memo import shipped_searches
        from tsopt.verify.verifier import (
            ReadOnlySearches,
            VerdictCache,
            check_genome_schema,
            search_version,
            verify_genome,
        )

        genome = _read_genome_file(genome_file)
        if domain is not None and domain < 1:
            raise UserInputError(f"--domain {domain} must be at least 1")
        target = problem_for(problem, genome.space)
        from tsopt.core.devices import resolve_profile
        from tsopt.core.dsl_env import DEFAULT_ARCH

        profile = resolve_profile(device, os.environ.get("CUTE_DSL_ARCH") or DEFAULT_ARCH)
        # The same answer as `tune` for a problem no GPU of the space's arch can hold.
        check_fits(target, get_space(genome.space).archs[0], profile if device else None)
        check_genome_schema(genome, target)
        space = get_space(genome.space)
        space.device = profile
        store = None
        if db is not None:
            from tsopt.db.store import Store

            store = Store(db)
        try:
            cache = VerdictCache(searches=ReadOnlySearches(store) if store is not None else None)
            version = search_version()
            for search in shipped_searches():
                if search.space == genome.space and search.tool_version == version:
                    cache.keep_search(search)
            verdict = verify_genome(genome, target, space=space, domain=domain, cache=cache)
        finally:
            if store is not None:
                store.close()
    if verdict.valid:
        console.print(f"[green]valid[/]  ({verdict.seconds * 1e3:.1f} ms, domain {verdict.domain})")
        if verdict.message:  # a search cut by its bound: valid, but not a complete proof
            console.print(f"[yellow]note[/]  {escape(verdict.message)}", highlight=False)
        raise typer.Exit(0)
    console.print(f"[red]rejected[/] \\[{verdict.stage}] {escape(str(verdict.rule))}: "
                  f"{escape(str(verdict.message))}", highlight=False)
    raise typer.Exit(1)


def _read_genome_file(genome_file: Path) -> Genome:
    """The genome a file holds; an unreadable, oversized or malformed file is bad input."""
    from tsopt.core.genome import MAX_GENOME_BYTES, Genome, GenomeError

    try:
        # A genome is small: read no more than its bound (and one byte to see it is over).
        with open(genome_file, "rb") as f:
            data = f.read(MAX_GENOME_BYTES + 1)
        text = data.decode()
    except OSError as exc:
        raise UserInputError(f"cannot read genome file {str(genome_file)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UserInputError(f"genome file {str(genome_file)!r} is not text ({exc.reason} at "
                             f"byte {exc.start})") from None
    try:
        return Genome.from_json(text)
    except GenomeError as exc:
        raise UserInputError(f"genome file {str(genome_file)!r}: {exc}") from None


# --------------------------------------------------------------------------------------
# measure / ingest
# --------------------------------------------------------------------------------------


@app.command()
def measure(
    bundle: Path = typer.Argument(..., help="Bundle directory written by `tsopt tune` on a build machine."),
    runs: int = typer.Option(50, help="Timed runs per candidate (at least 20)."),
    warmup: int = typer.Option(10, help="Warm-up runs per candidate."),
    limit: int = typer.Option(None, help="Measure only the first N candidates."),
    gpus: str = typer.Option("all", help="GPUs to measure on, one measuring worker each: N "
                             "(the first N this process sees) or all."),
    launch: str = typer.Option(None, help="Launch mode, graph or eager: must be the bundle's "
                               "own (its study's), which is the default."),
) -> None:
    """On a GPU machine: check and time every candidate of a bundle, write results into it."""
    with _Guard():
        from tsopt.app.measure import measure_bundle
        from tsopt.workers.gpus import parse_gpus

        code = measure_bundle(bundle, runs=runs, warmup=warmup, limit=limit, console=console,
                              gpus=parse_gpus(gpus), launch=launch)
    raise typer.Exit(code)


@app.command()
def ingest(
    bundle: Path = typer.Argument(..., help="A measured bundle directory."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
) -> None:
    """Record a measured bundle's results in the database that built it, and tell the study."""
    with _Guard(db):
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
    with _Guard(db):
        from tsopt.reports.report import report_command
        code = report_command(study=study, out=out, compare=compare or [], db_url=db, console=console)
    raise typer.Exit(code)


@app.command()
def dashboard(
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
    port: int = typer.Option(8080, help="Port for optuna-dashboard."),
) -> None:
    """Open optuna-dashboard on the same database."""
    with _Guard(db):
        from tsopt.reports.dashboard import dashboard_command
        code = dashboard_command(db_url=db, port=port, console=console)
    raise typer.Exit(code)


@app.command()
def export(
    study: str = typer.Argument(None, help="Study name (or --study / --studies)."),
    out: Path = typer.Option(..., help="Output directory: new or empty, or an earlier export "
                             "(with --force). Never the working directory, the database or .tsopt/."),
    studies: str = typer.Option(None, help="Several studies, comma-separated: one package with a "
                                "kernel per problem and a dispatch table (torch_ops.py)."),
    study_option: list[str] = typer.Option(None, "--study", help="A study (repeatable; with "
                                           "--studies and STUDY: all of them, as one package)."),
    workload: Path = typer.Option(None, help="The studies `tsopt tune gemm --workload FILE` "
                                  "made (every bucket and exact M of every problem) that have a "
                                  "timed candidate, as one package; the others are named and "
                                  "fall back to torch.matmul."),
    arch: str = typer.Option("sm_90a", help="With --workload: the arch its studies target."),
    vendor_floor: float = typer.Option(None, help="With --workload: leave a study to "
                                       "torch.matmul when its best kernel's paired ratio to the "
                                       "vendor is below this (1.0: slower than cuBLAS as measured; "
                                       "default: export every study with a timed kernel)."),
    measured_on: str = typer.Option(None, help="Rank on the measurements made on this GPU "
                                    "alone (its name as measured, e.g. 'NVIDIA H200'): the card "
                                    "the package will run on. Needed for a study measured on "
                                    "several GPUs; with --workload, a study never measured on it "
                                    "falls back to torch.matmul."),
    rank: int = typer.Option(1, help="1 = best correct timed candidate, 2 = runner-up, ..."),
    force: bool = typer.Option(False, help="Replace an earlier export in --out: only the files "
                               "its manifest lists (other files are kept)."),
    db: str = typer.Option(DEFAULT_DB, help=DB_HELP),
) -> None:
    """Export tuned kernels: source, C artifacts, manifest, loader and a PyTorch op module."""
    with _Guard(db):
        from tsopt.app.export import export_command, study_list
        names = study_list(study, study_option or [], studies)
        vendor_routes = None
        if workload is not None:
            from tsopt.app.serving_tune import workload_export_studies

            chosen, left = workload_export_studies(workload, arch, db, console,
                                                   vendor_floor=vendor_floor,
                                                   measured_on=measured_on)
            names += [n for n in chosen if n not in names]
            vendor_routes = [entry.to_dict() for entry in left]
        elif vendor_floor is not None:
            raise UserInputError(f"--vendor-floor {vendor_floor:g} applies to --workload only")
        code = export_command(studies=names, out=out, rank=rank, force=force, db_url=db,
                              console=console, measured_on=measured_on,
                              vendor_routes=vendor_routes)
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


# --------------------------------------------------------------------------------------
# db
# --------------------------------------------------------------------------------------


@db_app.command("check")
def db_check(db: str = typer.Option(DEFAULT_DB, help=DB_HELP)) -> None:
    """Check the database without changing it: SQLite's integrity check, tsopt's and Optuna's
    schema versions and tables, the studies (killed ones with when). Exit 0 when it can be
    used, 4 when not."""
    with _Guard(db):
        from tsopt.app.db_check import check_database

        code = check_database(db, console)
    raise typer.Exit(code)


# --------------------------------------------------------------------------------------
# library
# --------------------------------------------------------------------------------------

LIBRARY_PATH_HELP = ("Library file (default: $TSOPT_LIBRARY, else the one shipped in the "
                     "package, tsopt/data/seed_library.json).")


@app.command()
def prove(
    study: str | None = typer.Option(None, help="Prove this study's best --top candidates "
                                                "(needs --db); their recorded verdicts are settled."),
    export_dir: Path | None = typer.Option(None, "--export", help="Prove the kernels of this "
                                                                  "export directory."),
    library: Path | None = typer.Option(None, help="Prove this seed library's genomes (default: "
                                                   "the shipped one, when no other source is "
                                                   "given)."),
    genome: Path | None = typer.Option(None, help="Prove this genome file (as `tsopt verify` "
                                                  "takes it)."),
    problem: str | None = typer.Option(None, help="With --genome: its problem, e.g. "
                                                  "'gemm:bf16:8192x8192x8192'."),
    db: str | None = typer.Option(None, help="Record the searches in this database (the one "
                                             "`tsopt export` reads)."),
    top: int = typer.Option(1, help="With --study: how many of its best candidates."),
    max_states: int = typer.Option(200_000_000, help="The exhaustive search's bound on explored "
                                                     "states (TS's own is 1,000,000)."),
    out: Path | None = typer.Option(None, help="Also write the searches run to this JSON file "
                                               "(a TS search memo file)."),
    ship: list[Path] | None = typer.Option(None, "--ship", help=(
        "Merge the complete searches of these JSON files (from --out or bench/proofs) into the "
        "shipped proofs, tsopt/data/ts_proofs.json; nothing is searched.")),
) -> None:
    """Run TS's exhaustive interleaving search to the end (off the critical path) for the
    schedules that win, and record complete searches, so their verdicts are proofs, not
    "nothing found within the bound". Exit 1 while a valid genome remains cut."""
    with _Guard(db):
        from tsopt.app.prove import prove_command

        named = [n for n, v in (("--study", study), ("--export", export_dir),
                                ("--library", library), ("--genome", genome)) if v is not None]
        if len(named) > 1:
            raise UserInputError(f"{' and '.join(named)}: prove one source at a time")
        if problem is not None and genome is None:
            raise UserInputError(f"--problem {problem!r} goes with --genome FILE")
        source = ("study" if study else "export" if export_dir else
                  "genome" if genome else "library")
        code = prove_command(source, db, study, top, export_dir, library, max_states, out,
                             tuple(ship or ()), console, genome, problem)
    raise typer.Exit(code)


@library_app.command("show")
def library_show(
    library: Path | None = typer.Option(None, help=LIBRARY_PATH_HELP),
    space: str | None = typer.Option(None, help="Only this space's entries."),
    json_out: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """The best-known schedules per shape class, with their ratio to the vendor baseline and
    where each figure came from."""
    with _Guard():
        from tsopt.app.library import library_show as show

        code = show(library, space, console, as_json=json_out)
    raise typer.Exit(code)


@library_app.command("update")
def library_update(
    db: str | None = typer.Option(None, help="Take the best of this database's finished "
                                              "studies (SQLAlchemy URL)."),
    study: list[str] | None = typer.Option(None, "--study", help="Only these studies of --db "
                                                                 "(finished or not; repeatable)."),
    evidence: list[str] | None = typer.Option(None, "--evidence", help=(
        "Committed measured results to take (study dumps, bench result files, bundle "
        "results.json; globs allowed; repeatable).")),
    library: Path | None = typer.Option(None, help=LIBRARY_PATH_HELP),
) -> None:
    """Merge the best measured schedules of finished studies (and/or committed evidence) into
    the seed library: per problem the best three, paired figures first."""
    with _Guard(db):
        from tsopt.app.corpus import evidence_files
        from tsopt.app.library import library_update as update

        code = update(db, tuple(study or ()), evidence_files(evidence or ()), library, console)
    raise typer.Exit(code)


@heldout_app.command("list")
def heldout_list(
    file: Path | None = typer.Option(None, "--file", help=(
        "Held-out set (default: the one shipped in the package, tsopt/data/heldout.json).")),
    json_out: bool = typer.Option(False, "--json", help="Print the set as JSON."),
) -> None:
    """The frozen held-out problems, each checked against its space: name, problem, shape
    class, regime and the oracle's candidate count (bench/oracle)."""
    with _Guard():
        from tsopt.app.heldout import heldout_list as show

        code = show(file, console, as_json=json_out)
    raise typer.Exit(code)
# --------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------

CORPUS_HELP = "The corpus folder (default: corpus/, from the repository root)."


@corpus_app.command("build")
def corpus_build(
    evidence: list[str] | None = typer.Option(None, "--evidence", help=(
        "Evidence files to read instead of the archives (globs allowed; repeatable).")),
    archives: Path = typer.Option(Path("evidence"), "--archives", help=(
        "The evidence archives: every one is unpacked (checked against its MANIFEST.json) "
        "and tsopt.app.corpus.EVIDENCE's files are read from it (default: evidence/, from "
        "the repository root).")),
    out: Path = typer.Option(Path("corpus"), help=CORPUS_HELP),
    check: bool = typer.Option(False, "--check", help=(
        "Change nothing: exit 1 naming what differs when the corpus in --out is not the one "
        "the evidence makes.")),
) -> None:
    """Make the measurement corpus from the evidence: every measurement one record, the TS
    searches of the study databases a table of their own (corpus/SCHEMA.md)."""
    with _Guard():
        from tsopt.app.corpus import corpus_build as build
        from tsopt.app.corpus import corpus_stale, evidence_to_read

        with evidence_to_read(evidence or (), archives) as (files, root):
            if check:
                stale = corpus_stale(files, out, root)
                for line in stale:
                    err_console.print(f"stale corpus {out}: {line}", highlight=False)
                if not stale:
                    console.print(f"corpus {out}: up to date with its evidence",
                                  highlight=False)
                raise typer.Exit(1 if stale else 0)
            manifest = build(files, out, root)
        for table, about in manifest["tables"].items():
            console.print(f"{out / table}: {about['records']} records", highlight=False)
    raise typer.Exit(0)


@corpus_app.command("products")
def corpus_products(
    corpus: Path = typer.Option(Path("corpus"), help=CORPUS_HELP),
    library: Path | None = typer.Option(None, help="Seed library to write (default: the "
                                                   "package's, tsopt/data/seed_library.json)."),
    memo: Path | None = typer.Option(None, help="TS search memo to write (default: the "
                                                "package's, tsopt/data/ts_searches.json)."),
    model: Path | None = typer.Option(None, help="Cross-shape cost model to write (default: "
                                                 "the package's, tsopt/data/cost_model.json)."),
) -> None:
    """Make the shipped seed library, TS search memo and cross-shape cost model from the
    corpus alone."""
    with _Guard():
        from tsopt.app.corpus import corpus_products as products

        for what, count in products(corpus, library, memo, model).items():
            console.print(f"{what}: {count}", highlight=False)
    raise typer.Exit(0)


def main() -> None:
    try:
        app()
    except DatabaseUnusable as exc:  # raised outside a guarded command body
        _fail(_first_line(exc), EXIT_DATABASE)
    except UserInputError as exc:  # raised outside a guarded command body (option parsing)
        _fail(_first_line(exc), EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
