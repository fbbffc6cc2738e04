"""When a run stops asking for trials: its budgets, checked before every ask.

``--trials`` (the study's total, counted under the study's lock when a trial is asked:
:meth:`tsopt.search.study.claims.Claims.ask`), ``--built`` and ``--measured`` (the study's
totals, read from the database, so that runs of several processes share them), ``--time``
(this run's, from its start), ``--patience`` (trials told since the best value, counted
over the study's history) and the grid's end. The first that is spent is the run's stop
reason; the loop's back-pressure on the GPUs' queue is not a budget and stays the loop's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.search.request import TuneRequest
    from tsopt.search.samplers import KnobView


class Budgets:
    """The budgets of one run over study ``name`` (Optuna's ``study``, asked by ``sampler``),
    started (monotonic) at ``started``."""

    def __init__(self, request: TuneRequest, started: float, store: Store, name: str,
                 view: KnobView, sampler: Any, study: Any) -> None:
        self.request, self.started = request, started
        self.store, self.name, self.view, self.sampler, self.study = store, name, view, sampler, study
        self.best_value: float | None = None
        self.since_best = 0

    # -- time --------------------------------------------------------------------------------
    def time_left(self) -> float | None:
        budget = self.request.time_budget_s
        return None if budget is None else budget - (time.monotonic() - self.started)

    def time_spent(self) -> bool:
        budget = self.request.time_budget_s
        return budget is not None and time.monotonic() - self.started > budget

    # -- patience ----------------------------------------------------------------------------
    def patience_history(self, trials: list[Any]) -> None:
        """Count the study's finished trials, in order, as if this run had told them."""
        for trial in sorted(trials, key=lambda t: t.number):
            if not trial.state.is_finished():
                continue
            self.count_for_patience(trial.value if trial.state.name == "COMPLETE" else None)

    def count_for_patience(self, value: float | None) -> None:
        if value is not None and (self.best_value is None or value < self.best_value):
            self.best_value, self.since_best = value, 0
        elif self.best_value is not None:
            self.since_best += 1

    # -- the stop reason ---------------------------------------------------------------------
    def stop_reason(self, asked: int, measuring: bool) -> str | None:
        """Why no trial may be asked after ``asked`` of them (``measuring``: whether a GPU
        measures for this run), else None."""
        from tsopt.search.samplers import grid_exhausted

        request = self.request
        if request.trials is not None and asked >= request.trials:
            return "trials"
        if (spent := self.candidate_budget_spent(measuring)) is not None:
            return spent
        if request.time_budget_s is not None and (
                time.monotonic() - self.started > request.time_budget_s):
            return f"time budget of {request.time_budget_s:.0f} s reached"
        if (request.patience is not None and self.best_value is not None
                and self.since_best >= request.patience):
            return (f"{self.since_best} trials without improvement "
                    f"(--patience {request.patience})")
        if request.sampler == "grid" and (asked >= self.view.grid_size()
                                          or grid_exhausted(self.sampler, self.study)):
            return "grid exhausted: every knob combination was proposed"
        return None

    def candidate_budget_spent(self, measuring: bool) -> str | None:
        """Why --built or --measured ends the run, else None: the study's totals (as --trials),
        read from the database, so that runs sharing a study share these budgets too."""
        request = self.request
        if request.built is None and request.measured is None:
            return None
        if request.measured is not None and not measuring:
            return (f"--measured {request.measured}: nothing is measured on this machine (no GPU); "
                    "built candidates go to the bundle: bound them with --built")
        held = self.store.funnel(self.name)
        if request.built is not None and held["built"] >= request.built:
            return f"the study holds {held['built']} built candidates (--built {request.built})"
        if request.measured is not None and held["timed"] >= request.measured:
            return f"the study holds {held['timed']} timed candidates (--measured {request.measured})"
        return None
