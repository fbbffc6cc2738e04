"""``tsopt tune <space>``: one command per registered space, declared from the registries.

A space's command takes its op's sizes (``--rows --cols`` for copy, ``--m --n --k`` for
gemm, with the op registry's help) and the options every tune shares, declared once in
:data:`TUNE_OPTIONS`. Registering a space (one line in :mod:`tsopt.core.registry`) is all it
takes for its command to exist; nothing here imports a space.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from tsopt.app.workload import ServedGemm, Workload, read_workload
from tsopt.core.buckets import RangeError, parse_m
from tsopt.core.devices import PROFILES
from tsopt.core.errors import UserInputError
from tsopt.core.problem import OP_SPECS, Problem
from tsopt.core.registry import SPACES, SpaceEntry

DEFAULT_DB = "sqlite:///tsopt.db"
DB_HELP = "SQLAlchemy URL of the database (default: tsopt.db in the working directory)."

DEFAULT_TRIALS = 100
TRIALS_HELP = (f"Trials in the study in total (default {DEFAULT_TRIALS}, or no bound when --built, "
               "--measured or --time is given): running the same command again resumes it up to "
               "N (after Ctrl-C or a kill). A trial is one proposal of the sampler, not a kernel: "
               "most proposals are rejected by the verifier before anything is built (on the "
               "GEMM space, --trials 200 may build fewer than 10 candidates).")
BUILT_HELP = ("Stop once the study holds N built candidates (counted like --trials, over the "
              "whole study; candidates already in flight finish).")
MEASURED_HELP = ("Stop once the study holds N candidates measured correct (timed). Needs a GPU "
                 "here: without one nothing is measured, use --built.")
SAMPLER_HELP = ("evolve (default: one-gene moves from the best measured, ranked by a cost model), "
                "tpe, random, cmaes (numeric knobs; the others fall back to TPE) or grid "
                "(exhaustive; small or --knob-restricted spaces).")
WORKERS_HELP = ("Workers verifying and building in parallel: auto (default: this machine's "
                "cores less one for the driver and one per GPU measuring here, as local build "
                "processes; 1 means one at a time in this process), 0 (one at a time in this "
                "process) or N. With N > 0 a local Ray cluster of N CPUs is started, or joined "
                "with --ray-address; each GPU gets a measuring actor. With --pool processes: N "
                "local build processes instead of Ray. At most 4 per core of this machine (at least "
                "64), or 4096 with --ray-address.")
RAY_HELP = ("Join this Ray cluster (HOST:PORT of its head) instead of starting a local one; "
            "refused when nothing answers there within seconds.")
POOL_HELP = ("What --workers N runs on: ray (the default for an explicit N; a local Ray "
             "cluster, or --ray-address) or processes (the default for --workers auto: N build "
             "processes on this machine, no Ray; measuring on this machine's GPU if it has one).")
GPUS_HELP = ("GPUs that measure, one measuring worker each (pinned to its GPU): N (the first "
             "N this process sees) or all.")
PATIENCE_HELP = ("Stop after N trials without a faster measurement. Improvement needs "
                 "measurements: without a GPU nothing is timed and this never triggers.")
WARM_HELP = ("Start a new study from the best genomes of finished studies of the same space "
             "and dtype on the nearest shapes in the database.")
LIBRARY_HELP = ("Start a new study from the seed library's best-known schedules for the nearest "
                "shape class (`tsopt library show`), those the verifier accepts here.")
LIBRARY_EXCLUDE_SELF_HELP = (
    "Leave-one-shape-out: the seed library without its entries of this very problem (same op, "
    "dtype and sizes; other shapes' entries stay), and no warm start from studies of it. The "
    "study records its library mode (on, off, exclude-self); the summary and report show it.")
LIBRARY_REFIT_HELP = (
    "Also start from other shapes' library entries re-fitted to this problem: their schedule "
    "(placements, stages, warp roles) kept, tile, cluster, split-K and swap-AB re-chosen by "
    "the cost model, made legal and judged like any proposal (origin library_refit). Part of "
    "the library: nothing with --no-library.")
COST_PRIOR_HELP = (
    "What the evolve sampler's cost model starts from, before the study has measured enough to "
    "learn from itself: 'transfer' (default), the cross-shape model shipped with tsopt, trained "
    "on the measurement corpus's other shapes (bench/transfer_model judges it); 'analytical', "
    "the first-principles estimate alone. A GEMM on the device the corpus measured (H200_SXM); "
    "elsewhere, and in a --library-exclude-self run of a shape the model was fitted on, the "
    "analytical estimate.")
DETERMINISTIC_HELP = ("Only schedules whose output is bit-identical run after run (no atomic "
                      "reductions); refused up front if the space has none for the problem.")
LAUNCH_HELP = ("How candidates and the vendor baseline are launched while timed, paired: graph "
               "(default for a new study: back-to-back launches in one CUDA graph per side, GPU "
               "time as a serving stack replaying graphs sees it) or eager (back-to-back calls "
               "through the export's loader: GPU plus launch cost, what eager PyTorch sees). "
               "Default: a resumed study's own mode.")
KNOB_HELP = ("Restrict a knob to some of its choices, e.g. --knob stages=2,4 (repeatable; one "
             "value fixes it). Makes --sampler grid possible on a big space.")

DEVICE_HELP = ("GPU the kernels are built for (its SM count sets persistent grids, stream-K "
               "and the cost model's waves): " + ", ".join(PROFILES) + ", or ID-NSM for a "
               "part of N SMs (a MIG slice). Default: the GPU that measures here, else the "
               "arch's default (H200_SXM for sm_90a).")

# (parameter name, annotation, typer option) for every option all tune commands share.
TUNE_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("trials", int | None, typer.Option(None, help=TRIALS_HELP, show_default=False)),
    ("built", int | None, typer.Option(None, help=BUILT_HELP)),
    ("measured", int | None, typer.Option(None, help=MEASURED_HELP)),
    ("time", str | None, typer.Option(None, "--time",
                                      help="Wall-clock budget of this run, e.g. 30m.")),
    ("patience", int | None, typer.Option(None, help=PATIENCE_HELP)),
    ("sampler", str, typer.Option("evolve", help=SAMPLER_HELP)),
    ("knob", list[str] | None, typer.Option(None, "--knob", help=KNOB_HELP)),
    ("arch", str, typer.Option("sm_90a", help="Target architecture.")),
    ("device", str | None, typer.Option(None, help=DEVICE_HELP, show_default=False)),
    ("study", str | None, typer.Option(None, help="Study name (default: derived from the "
                                                  "problem).")),
    ("db", str, typer.Option(DEFAULT_DB, help=DB_HELP)),
    ("bundle", Path | None, typer.Option(None, help="Bundle directory (default: "
                                                     ".tsopt/bundles/<study>).")),
    ("workers", str, typer.Option("auto", help=WORKERS_HELP)),
    ("ray_address", str | None, typer.Option(None, "--ray-address", help=RAY_HELP)),
    ("pool", str | None, typer.Option(None, help=POOL_HELP)),
    ("gpus", str, typer.Option("all", help=GPUS_HELP)),
    ("warm_start", bool, typer.Option(True, "--warm-start/--no-warm-start", help=WARM_HELP)),
    ("library", bool, typer.Option(True, "--library/--no-library", help=LIBRARY_HELP)),
    ("library_exclude_self", bool, typer.Option(False, "--library-exclude-self",
                                                help=LIBRARY_EXCLUDE_SELF_HELP)),
    ("library_refit", bool, typer.Option(True, "--library-refit/--no-library-refit",
                                         help=LIBRARY_REFIT_HELP)),
    ("cost_prior", str, typer.Option("transfer", "--cost-prior", help=COST_PRIOR_HELP)),
    ("seed", int, typer.Option(0, help="Sampler seed.")),
    ("deterministic", bool, typer.Option(False, "--deterministic", help=DETERMINISTIC_HELP)),
    ("launch", str | None, typer.Option(None, help=LAUNCH_HELP, show_default=False)),
)


def parse_duration(text: str | None) -> float | None:
    """``90s``, ``30m``, ``2h`` or plain seconds -> seconds; UserInputError naming the text."""
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
    if not math.isfinite(seconds) or seconds <= 0:
        raise UserInputError(f"--time {text!r} must be a finite, positive duration")
    return seconds


def resolve_trials(trials: int | None, built: int | None, measured: int | None,
                   time_budget_s: float | None) -> int | None:
    """``--trials`` as given; unset, the default unless another budget bounds the run."""
    if trials is not None:
        return trials
    return None if (built, measured, time_budget_s) != (None, None, None) else DEFAULT_TRIALS


def parse_workers(text: str | int | None) -> int | None:
    """``--workers``: ``"auto"`` (or None) -> None, ``"4"`` -> 4; UserInputError naming it."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "auto"):
        return None
    try:
        count = int(text)
    except (TypeError, ValueError):
        raise UserInputError(f"--workers {text!r} is not a number of workers or 'auto'") from None
    if count < 0:
        raise UserInputError(f"--workers {count} must be >= 0 (or 'auto')")
    return count


M_HELP = ("Rows of A and D: one M (256), exact Ms (1,8,32: a fixed-M kernel each) or a range "
          "(1-256: a runtime-M kernel per M bucket, 1-16, 17-32, 33-64, ..., each measured "
          "paired at several M inside it). Not with --workload.")
WORKLOAD_HELP = ("A TOML or JSON file of GEMMs to tune together (name, n, k, m, dtype each; e.g. "
                 "one transformer layer's projections, examples/llama3_8b_layer.toml): one "
                 "database, one progress view, one package to export (`tsopt export "
                 "--workload FILE`). Sizes and --dtype come from the file.")


def _served(entry: SpaceEntry, options: dict[str, Any]) -> Workload | None:
    """What a GEMM's command asks of several studies (a workload file, an M range or exact
    Ms), or None for one problem; UserInputError naming what is wrong."""
    sizes = OP_SPECS[entry.op].size_names
    if options.get("workload") is not None:
        given = [f"--{name}" for name in sizes if options[name] is not None]
        if given:
            raise UserInputError(f"--workload {options['workload']} gives every problem's sizes; "
                                 f"drop {', '.join(given)}")
        return read_workload(options["workload"])
    missing = [f"--{name}" for name in sizes if options[name] is None]
    if missing:
        raise UserInputError(f"missing option {missing[0]} (or give --workload FILE)")
    try:
        m_range, exact = parse_m(options["m"])
    except RangeError as exc:
        raise UserInputError(f"--m: {exc}") from None
    if m_range is None and len(exact) == 1:
        options["m"] = exact[0]
        return None
    gemm = ServedGemm("gemm", options["dtype"], options["n"], options["k"], m_range, exact)
    return Workload(f"gemm {options['dtype']} M {gemm.m_text} x N {gemm.n} x K {gemm.k}",
                    (gemm,))


def _tune_body(entry: SpaceEntry, guard: Callable[[str], AbstractContextManager[None]],
               console: Console) -> Callable[..., None]:
    sizes = OP_SPECS[entry.op].size_names
    served = "m" in sizes  # a GEMM: M varies at run time, N and K are the weights'

    def tune(**options: Any) -> None:
        with guard(options["db"]):  # a database that cannot be used is named
            from tsopt.search.driver import run_tune
            from tsopt.search.request import TuneRequest
            from tsopt.workers.gpus import parse_gpus

            several = _served(entry, options) if served else None
            if several is not None:  # the problem is each study's own: a placeholder here
                problem = Problem.of(entry.op, several.gemms[0].dtype,
                                     **{name: 1 for name in sizes})
            else:
                problem = Problem.of(entry.op, options["dtype"],
                                     **{name: options[name] for name in sizes})
            time_budget_s = parse_duration(options["time"])
            request = TuneRequest(
                space=entry.name, problem=problem,
                trials=resolve_trials(options["trials"], options["built"], options["measured"],
                                      time_budget_s),
                built=options["built"], measured=options["measured"],
                time_budget_s=time_budget_s, sampler=options["sampler"],
                arch=options["arch"], study=options["study"], db_url=options["db"],
                bundle_dir=options["bundle"], workers=parse_workers(options["workers"]),
                seed=options["seed"],
                ray_address=options["ray_address"], patience=options["patience"],
                warm_start=options["warm_start"], library=options["library"],
                library_exclude_self=options["library_exclude_self"],
                library_refit=options["library_refit"], cost_prior=options["cost_prior"],
                knobs=tuple(options["knob"] or ()),
                pool=options["pool"], gpus=parse_gpus(options["gpus"]),
                deterministic=options["deterministic"], launch=options["launch"],
                device=options["device"],
            )
            if several is not None:
                from tsopt.app.serving_tune import run_studies

                code = run_studies(several, request, console)
            else:
                code = run_tune(request, console)
        raise typer.Exit(code)

    spec = OP_SPECS[entry.op]
    if served:  # M as text (a range or a list), the sizes optional beside --workload
        parameters = [inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=str | None if name == "m" else
            int | None, default=typer.Option(None, help=M_HELP if name == "m" else help_text,
                                             show_default=False))
            for name, help_text in spec.sizes]
        parameters.append(inspect.Parameter(
            "workload", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
            default=typer.Option(None, help=WORKLOAD_HELP, show_default=False)))
    else:
        parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=int,
                                        default=typer.Option(..., help=help_text))
                      for name, help_text in spec.sizes]
    parameters.append(inspect.Parameter(
        "dtype", inspect.Parameter.KEYWORD_ONLY, annotation=str,
        default=typer.Option(spec.default_dtype, help="Element type (`tsopt spaces "
                             f"{entry.name}` lists the ones this space takes).")))
    parameters += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                     default=option) for name, kind, option in TUNE_OPTIONS]
    tune.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    tune.__doc__ = entry.summary
    tune.__name__ = f"tune_{entry.name}"
    return tune


def register_tune_commands(app: typer.Typer,
                           guard: Callable[[str], AbstractContextManager[None]],
                           console: Console) -> None:
    """Add ``tune <space>`` to ``app`` for every registered space."""
    for entry in SPACES.values():
        app.command(entry.name)(_tune_body(entry, guard, console))
