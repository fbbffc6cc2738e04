"""The Python API: ``tsopt.tune``, ``tsopt.report``, ``tsopt.export``, with the command line's
semantics, returning records instead of printing.

``tsopt/__init__.py`` imports this module only when one of them is called, so ``import tsopt``
stays cheap. Bad input raises :class:`tsopt.core.errors.UserInputError` (the command line's
exit code 2), naming the bad value: an argument of the wrong type is named before anything
runs (never a ``TypeError`` or ``AttributeError`` from deep inside), and a malformed problem
or genome (``ProblemError``, ``GenomeError``) reaches the caller as a UserInputError too.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from tsopt.app.export import ExportResult, export_studies
from tsopt.app.tune_command import DEFAULT_DB, parse_duration, resolve_trials
from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem, parse_problem_spec


@dataclass(frozen=True)
class BestCandidate:
    """A study's fastest correct candidate and its figures (against the vendor baseline timed
    in the same run)."""

    genome_hash: str
    median_us: float
    ratio: float | None
    baseline_name: str
    rate: float | None
    rate_unit: str
    device: str


@dataclass(frozen=True)
class TuneSummary:
    """What one tune run did, and where its study stands.

    ``trials``..``timed`` count this run (a trial is one proposal of the sampler; most are
    rejected before any build); ``funnel`` is the whole study's (stage, count). ``bundle`` is
    where built candidates wait for ``tsopt measure`` on a GPU machine, when none was here.
    ``exit_code``: 0 done, 1 valid candidates but none built, 130 interrupted.
    """

    study: str
    exit_code: int
    stop_reason: str | None
    trials: int
    rejected: int
    built: int
    measured: int
    timed: int
    funnel: tuple[tuple[str, int], ...]
    best: BestCandidate | None
    bundle: Path | None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["bundle"] = str(self.bundle) if self.bundle is not None else None
        doc["funnel"] = dict(self.funnel)
        return doc


_Result = TypeVar("_Result")


def _bad_input_as_user_error(function: Callable[..., _Result]) -> Callable[..., _Result]:
    """A ProblemError or GenomeError from inside reaches the caller as UserInputError (the
    error the API documents for bad input), its message unchanged."""
    from tsopt.core.genome import GenomeError
    from tsopt.core.problem import ProblemError

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> _Result:
        try:
            return function(*args, **kwargs)
        except (ProblemError, GenomeError) as exc:
            raise UserInputError(str(exc)) from None

    return wrapper


def _kind(value: Any) -> str:
    return f"{value!r} (of type {type(value).__name__})"


def _expect(name: str, value: Any, kinds: tuple[type, ...], what: str,
            optional: bool = False) -> None:
    """UserInputError naming ``name`` and ``value`` unless it is one of ``kinds`` (a bool is
    never an int here: ``built=True`` is a mistake, not 1)."""
    if value is None and optional:
        return
    if isinstance(value, bool) and bool not in kinds:
        raise UserInputError(f"{name}={_kind(value)} must be {what}")
    if not isinstance(value, kinds):
        raise UserInputError(f"{name}={_kind(value)} must be {what}")


def _names(name: str, value: Any, at_most: int | None = None) -> list[str]:
    """A study name or a sequence of them, as a list; UserInputError naming anything else."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence) or not value or not all(isinstance(v, str) for v in value):
        raise UserInputError(f"{name}={_kind(value)} must be a study name or a sequence of "
                             "study names")
    names = list(value)
    if at_most is not None and len(names) > at_most:
        raise UserInputError(f"{name}={names!r}: at most {at_most} studies")
    return names


def _problem(problem: Any) -> Problem:
    if isinstance(problem, Problem):
        return problem
    if isinstance(problem, dict):
        return Problem.from_dict(problem)
    if isinstance(problem, str):
        return parse_problem_spec(problem)
    raise UserInputError(f"problem={_kind(problem)} must be a problem spec such as "
                         "'copy:fp16:4096x4096', a Problem or its dict")


def _seconds(time: Any) -> float | None:
    _expect("time", time, (str, int, float), "a duration ('30m') or seconds", optional=True)
    if time is None or isinstance(time, str):
        return parse_duration(time)
    return parse_duration(str(float(time)))


_OPTION_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "sampler": ((str,), "a sampler's name"), "arch": ((str,), "an arch such as 'sm_90a'"),
    "study": ((str,), "a study name"), "bundle_dir": ((str, Path), "a path"),
    "workers": ((int,), "an int"), "seed": ((int,), "an int"),
    "cache_dir": ((str, Path), "a path"), "measure": ((str,), "auto, never or always"),
    "ray_address": ((str,), "HOST:PORT"), "patience": ((int,), "an int"),
    "warm_start": ((bool,), "True or False"), "pool": ((str,), "ray or processes"),
    "library": ((bool,), "True or False"), "gpus": ((int,), "an int"),
    "deterministic": ((bool,), "True or False"),
    "library_exclude_self": ((bool,), "True or False"), "launch": ((str,), "graph or eager"),
    "library_refit": ((bool,), "True or False"),
    "cost_prior": ((str,), "transfer or analytical"),
    "device": ((str,), "a device profile such as 'H100_PCIE'"),
}
# None is each one's default: workers (auto), pool (the one --workers implies), launch (a
# resumed study's own, graph for a new one), device (the GPU that measures, or the arch's).
_OPTIONAL = {"study", "bundle_dir", "ray_address", "patience", "gpus", "workers", "pool",
             "launch", "device"}


def _check_options(options: dict[str, Any]) -> None:
    for name, value in options.items():
        if name == "knobs":
            if isinstance(value, str) or not isinstance(value, Sequence) or not all(
                    isinstance(v, str) for v in value):
                raise UserInputError(f"knobs={_kind(value)} must be a sequence of 'NAME=V1,V2' "
                                     "texts, e.g. ['stages=2,4']")
            continue
        kinds, what = _OPTION_KINDS[name]
        _expect(name, value, kinds, what, optional=name in _OPTIONAL)


# The TuneRequest fields tune() passes through as they are (the others it builds itself).
_PASSED = ("sampler", "arch", "study", "bundle_dir", "workers", "seed", "cache_dir", "measure",
           "ray_address", "patience", "warm_start", "knobs", "pool", "library",
           "library_exclude_self", "library_refit", "cost_prior", "gpus", "deterministic",
           "launch", "device")


@_bad_input_as_user_error
def tune(space: str, problem: str | Problem | dict[str, Any], *, trials: int | None = None,
         built: int | None = None, measured: int | None = None, time: str | float | None = None,
         db: str = DEFAULT_DB, progress: bool = False, **options: Any) -> TuneSummary:
    """``tsopt tune SPACE``: search ``space`` for ``problem`` (``"gemm:bf16:8192x8192x8192"``,
    a :class:`Problem` or its dict). Budgets as on the command line: ``trials`` (the study's
    total of proposals; default 100 unless another budget is given), ``built``, ``measured``
    (candidates), ``time`` (``"30m"`` or seconds). ``options``: ``sampler``, ``arch``,
    ``study``, ``bundle_dir``, ``workers``, ``seed``, ``cache_dir``, ``measure`` (auto, never,
    always), ``ray_address``, ``patience``, ``warm_start``, ``knobs`` (``["stages=2,4"]``),
    ``pool``, ``library`` (start from the seed library), ``library_exclude_self``
    (leave-one-shape-out: without the problem's own entries), ``library_refit`` (other
    shapes' entries re-fitted to the problem too), ``cost_prior`` (``"transfer"``, the
    default, or ``"analytical"``: what the cost model starts from), ``gpus`` (GPUs measuring; None: every
    one), ``deterministic``, ``launch`` (graph or eager; default: a resumed study's own, graph
    for a new one), ``device`` (the GPU profile builds are for: ``"H100_PCIE"``).
    ``progress`` shows the live view on the terminal."""
    from tsopt.db.store import Store
    from tsopt.search.driver import Driver
    from tsopt.search.request import TuneRequest

    unknown = sorted(set(options) - set(_PASSED))
    if unknown:
        raise UserInputError(f"tune() got unknown option(s) {', '.join(unknown)}; "
                             f"known: {', '.join(_PASSED)}")
    _expect("space", space, (str,), "a space's name such as 'copy'")
    for name, value in (("trials", trials), ("built", built), ("measured", measured)):
        _expect(name, value, (int,), "an int", optional=True)
    _expect("db", db, (str,), "a database URL such as 'sqlite:///tsopt.db'")
    _expect("progress", progress, (bool,), "True or False")
    _check_options(options)
    target = _problem(problem)
    from tsopt.core.registry import get_space

    get_space(space).check(target)  # a problem of another op, named before anything starts
    if "knobs" in options:
        options["knobs"] = tuple(options["knobs"])
    for name in ("bundle_dir", "cache_dir"):
        if options.get(name) is not None:
            options[name] = Path(options[name])
    time_budget_s = _seconds(time)
    request = TuneRequest(space=space, problem=target, db_url=db, built=built,
                          measured=measured, time_budget_s=time_budget_s,
                          trials=resolve_trials(trials, built, measured, time_budget_s), **options)
    console = Console() if progress else Console(file=io.StringIO(), width=200)
    driver = Driver(request, console)
    code = driver.run()
    stats = driver.stats
    name = driver.name  # the device profile the run chose may have named it
    with Store(db) as store:
        funnel = tuple(store.funnel(name).items())
        ranked = store.ranked_on_card(name, limit=1)
    best = None
    if ranked:
        m = ranked[0].measurement
        best = BestCandidate(ranked[0].genome_hash, float(m.median_us or 0.0), m.ratio,
                             m.baseline_name, m.rate, m.rate_unit, m.device)
    waiting = stats.awaiting > 0 or (driver.measure_pool is None and driver.bundle_dir.exists())
    return TuneSummary(
        study=name, exit_code=code,
        stop_reason=None if driver.stop_reason == "trials" else driver.stop_reason,
        trials=stats.proposed, rejected=sum(stats.rejected.values()), built=stats.built,
        measured=sum(stats.measured.values()), timed=stats.measured.get("ok", 0), funnel=funnel,
        best=best, bundle=driver.bundle_dir if waiting else None)


@_bad_input_as_user_error
def report(study: str | Sequence[str], *, out: str | Path | None = None,
           db: str = DEFAULT_DB) -> Path:
    """``tsopt report``: write the self-contained HTML report of a study (or of two, side by
    side: a pair of names); returns its path."""
    from tsopt.reports.report import write_report

    names = _names("study", study)
    _expect("out", out, (str, Path), "a path", optional=True)
    _expect("db", db, (str,), "a database URL such as 'sqlite:///tsopt.db'")
    if not 1 <= len(names) <= 2 or len(set(names)) != len(names):
        raise UserInputError(f"report() takes one study or two different ones, got {names!r}")
    return write_report(names, Path(out) if out is not None else None, db).path


@_bad_input_as_user_error
def export(study: str | Sequence[str], out: str | Path, *, rank: int = 1, force: bool = False,
           db: str = DEFAULT_DB) -> ExportResult:
    """``tsopt export``: one study's kernel of rank ``rank``, or several studies as one package
    (a sequence of names), into ``out``; returns what was written (its manifest is
    ``result.manifest_path``). Refuses, with ``UserInputError``, what the command refuses."""
    from tsopt.db.store import Store

    names = _names("study", study)
    _expect("out", out, (str, Path), "a path")
    _expect("rank", rank, (int,), "an int")
    _expect("force", force, (bool,), "True or False")
    _expect("db", db, (str,), "a database URL such as 'sqlite:///tsopt.db'")
    with Store(db) as store:
        return export_studies(store, names, Path(out), rank, force)


__all__ = ["BestCandidate", "ExportResult", "TuneSummary", "export", "report", "tune"]
