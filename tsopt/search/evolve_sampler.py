"""``evolve`` as an Optuna sampler: :class:`~tsopt.search.evolve.Evolution` planning each trial.

:class:`EvolveSampler` plans a trial's whole parameter set in ``before_trial`` from the
study's trials (their params and told values) and hands the planned values out in
``sample_independent``; any parameter it did not plan (a conditional knob, a knob it has not
seen yet) is drawn at random from the distribution asked. Optuna stays the record: enqueued
trials (seed library, warm starts) keep their fixed values, and every outcome is read back
from the study. Bound to a space and problem (:meth:`EvolveSampler.bind`, the driver does
it), a plan is completed through the space's own ``suggest`` and kept in its declared legal
set. A module of its own so that :mod:`tsopt.search.evolve`, which simulations replay on a
measured table, does not import Optuna.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tsopt.search.evolve import (
    Evolution,
    Observation,
    Params,
    Repairer,
    declared_legal,
    space_completer,
)

if TYPE_CHECKING:
    from tsopt.core.problem import Problem
    from tsopt.core.space import SearchSpace
    from tsopt.search.cost_model import Prior


class EvolveSampler(optuna.samplers.BaseSampler):
    """:class:`Evolution` as an Optuna sampler (see the module doc)."""

    def __init__(self, view: Any = None, seed: int = 0,
                 space: SearchSpace | None = None, problem: Problem | None = None,
                 legal: Callable[[Mapping[str, Any]], bool] | None = None,
                 **options: Any) -> None:
        self.view = view
        self.seed = seed
        self.options = options
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._plans: dict[int, Params] = {}
        # Trial number -> its value on the one GPU the study ranks on, and the trials measured
        # on other GPUs only (use_card_values); empty: the told values, as Optuna holds them.
        self._card_values: dict[int, float] = {}
        self._elsewhere: frozenset[int] = frozenset()
        self._choices: dict[str, tuple[Any, ...]] = (
            {k.name: tuple(view.choices(k.name, k.choices)) for k in view.knobs}
            if view is not None else {})
        self.evolution = Evolution(self._choices, seed, **options)
        if space is not None and problem is not None:
            self.bind(space, problem, legal)
        elif legal is not None:
            self.evolution.legal = legal

    def bind(self, space: SearchSpace, problem: Problem,
             legal: Callable[[Mapping[str, Any]], bool] | None = None,
             repair: Repairer | None = None, prior: Prior | None = None) -> None:
        """Plans completed through ``space`` for ``problem``, ranked with its sizes, and
        kept in its declared legal set (``legal``, else the space's own factors);
        ``repair`` (the driver's) makes the survey's picks legal; ``prior`` ranks before
        the study has measured enough (the cross-shape model, ``transfer.study_prior``;
        None: the analytical estimate)."""
        self.evolution.complete = space_completer(space, problem, self.view)
        self.evolution.couple = space.coupled
        self.evolution.model.sizes = dict(problem.sizes)
        self.evolution.model.device = space.device  # waves over the target GPU's SMs
        self.evolution.model.prior = prior
        if legal is None:
            legal = declared_legal(space, problem)
        self.evolution.legal = legal
        self.evolution.repair = repair

    # -- Optuna's interface -----------------------------------------------------------
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any,
                        search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def use_card_values(self, values: Mapping[int, float], elsewhere: set[int]) -> None:
        """Plan from one GPU's figures where a study was measured on several. A trial is told
        once, with the first figure that reached it (an H100's, say, before the H200 it is
        tuned for measured it), and a kernel fastest on one card can lose on another. So a
        trial in ``values`` counts with that value instead of its told one, and a trial in
        ``elsewhere`` (timed only on another GPU) counts as pending: its genome is known and
        not proposed again, but it ranks no parent."""
        self._card_values = dict(values)
        self._elsewhere = frozenset(elsewhere)

    def before_trial(self, study: Any, trial: Any) -> None:
        if trial.system_attrs.get("fixed_params"):
            return  # an enqueued trial (library, warm start) keeps its values
        history, pending = [], []
        for t in study.get_trials(deepcopy=False):
            if t.number == trial.number:
                continue
            for name, dist in t.distributions.items():
                knob = self._knob(name)
                if isinstance(dist, CategoricalDistribution) and knob not in self._choices:
                    self._choices[knob] = tuple(dist.choices)
            params = self._knob_params(t.params)
            if t.number in self._card_values:
                history.append(Observation(params, self._card_values[t.number]))
            elif t.number in self._elsewhere:
                pending.append(params)
            elif t.state == TrialState.COMPLETE and t.value is not None:
                history.append(Observation(params, float(t.value)))
            elif t.state in (TrialState.PRUNED, TrialState.FAIL):
                history.append(Observation(params, None))
            elif t.state == TrialState.RUNNING:
                pending.append(self._plans.get(t.number, params))
        self.evolution.choices = dict(self._choices)
        if not self._choices:
            return  # nothing known of the space yet: the first trial is random
        plan = self.evolution.propose(history, pending)
        self._plans[trial.number] = plan
        last = self.evolution.last
        try:
            study._storage.set_trial_user_attr(trial._trial_id, "evolve", {
                k: (round(v, 4) if isinstance(v, float) else v) for k, v in last.items()})
        except AttributeError:
            pass

    def _knob(self, param: str) -> str:
        """The knob an Optuna parameter samples (a grown knob's is not its name)."""
        return self.view.knob_name(param) if self.view is not None else param

    def _knob_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's Optuna parameters by knob: what plans, moves and the cost model read."""
        return self.view.decode(params) if self.view is not None else dict(params)

    def sample_independent(self, study: Any, trial: Any, name: str,
                           distribution: Any) -> Any:
        knob = self._knob(name)
        if isinstance(distribution, CategoricalDistribution) and knob not in self._choices:
            self._choices[knob] = tuple(distribution.choices)
        plan = self._plans.get(trial.number, {})
        if knob in plan and isinstance(distribution, CategoricalDistribution):
            keys = [repr(c) for c in distribution.choices]
            if repr(plan[knob]) in keys:
                return distribution.choices[keys.index(repr(plan[knob]))]
        return self._random.sample_independent(study, trial, name, distribution)

    def predicted(self, params: Mapping[str, Any]) -> float | None:
        """The cost model's prediction for a trial's Optuna params (see Evolution.predicted)."""
        return self.evolution.predicted(self._knob_params(params))

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._plans.pop(trial.number, None)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()


def evolve_sampler(view: Any = None, seed: int = 0, **options: Any) -> EvolveSampler:
    """An :class:`EvolveSampler` (an ``optuna.samplers.BaseSampler``) over ``view``'s knobs;
    ``options`` go to :class:`Evolution` (population, pool, explore, sizes...)."""
    return EvolveSampler(view, seed, **options)
