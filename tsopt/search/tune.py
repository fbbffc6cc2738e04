"""``tsopt tune``: propose, verify, build, record, and measure (or bundle for later).

One trial, end to end (DESIGN.md): the sampler proposes a genome through the
space's knobs; the verifier judges it (cached by the genes that can change
the verdict); a valid one is compiled for the target arch; with a GPU it is
measured by the isolated runner, otherwise its artifact joins a bundle for
``tsopt measure`` on a GPU machine. Every candidate, verdict, build and
measurement is recorded in the database, and every outcome is told to Optuna:
rejected candidates as PRUNED, failed builds and measurements as FAIL, each
with its reason as a user attribute.

The pieces: :mod:`tsopt.search.driver` (the ask/tell loop, budgets, resume),
:mod:`tsopt.search.samplers`, :mod:`tsopt.search.pipeline` (verify + build of one
candidate), :mod:`tsopt.search.progress`, :mod:`tsopt.search.warm_start`, and
:mod:`tsopt.search.pools.ray_pool` (Ray tasks and GPU actors) or :mod:`tsopt.search.pools.process_pool`
(local build processes, no Ray). This module holds the request and the entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem
from tsopt.search.pipeline import CandidatePipeline
from tsopt.search.samplers import GRID_LIMIT, SAMPLERS, make_sampler

__all__ = ["GRID_LIMIT", "POOLS", "SAMPLERS", "CandidatePipeline", "TuneRequest",
           "make_sampler", "run_tune"]

POOLS = ("ray", "processes")  # what `--workers N` verifies and builds on


@dataclass(frozen=True)
class TuneRequest:
    """Everything one ``tsopt tune`` run needs.

    ``trials`` is the study's total (a second run of the same command resumes up to it);
    ``time_budget_s`` bounds this run; ``patience`` stops after that many trials without a
    faster measurement (never without a GPU: nothing is measured). ``workers`` > 0 (or a
    ``ray_address``) verifies and builds in Ray tasks; 0 does it here, one at a time.
    ``pool="processes"`` (with ``workers`` > 0) builds in that many local processes instead
    of Ray, and measures on this machine's GPU (:mod:`tsopt.search.pools.process_pool`).
    ``knobs`` restricts knobs (``"stages=2,4"``).
    """

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
    ray_address: str | None = None
    patience: int | None = None
    warm_start: bool = True
    knobs: tuple[str, ...] = field(default_factory=tuple)
    pool: str = "ray"  # ray | processes: what --workers N runs on

    def study_name(self) -> str:
        """Default: space, problem and arch, e.g. ``copy-fp16-4096x4096-sm_90a``."""
        if self.study:
            return self.study
        key = self.problem.key
        if key.startswith(f"{self.space}-"):
            key = key[len(self.space) + 1:]
        return f"{self.space}-{key}-{self.arch}"

    def validate(self) -> None:
        """Raises UserInputError naming the first bad value."""
        if self.trials < 1:
            raise UserInputError(f"--trials {self.trials} must be at least 1")
        if self.sampler not in SAMPLERS:
            raise UserInputError(f"--sampler {self.sampler!r} is not one of {', '.join(SAMPLERS)}")
        if self.workers < 0:
            raise UserInputError(f"--workers {self.workers} must be >= 0")
        if self.patience is not None and self.patience < 1:
            raise UserInputError(f"--patience {self.patience} must be at least 1")
        if self.measure not in ("auto", "never", "always"):
            raise UserInputError(f"measure mode {self.measure!r} is not auto, never or always")
        if self.pool not in POOLS:
            raise UserInputError(f"--pool {self.pool!r} is not one of {', '.join(POOLS)}")
        if self.pool == "processes" and self.workers < 1:
            raise UserInputError(f"--pool processes needs --workers N >= 1 (got --workers "
                                 f"{self.workers}; --workers 0 builds in this process)")
        if self.pool == "processes" and self.ray_address:
            raise UserInputError(f"--pool processes builds on this machine; --ray-address "
                                 f"{self.ray_address!r} needs --pool ray")


def run_tune(request: TuneRequest, console: Console) -> int:
    """The main job. Returns the exit code: 0 done, 1 valid candidates but none could be
    built, 130 interrupted (Ctrl-C; the same command resumes)."""
    from tsopt.search.driver import Driver

    return Driver(request, console).run()
