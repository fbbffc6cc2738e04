"""Samplers: which Optuna sampler proposes genomes, and how a space's knobs reach it.

A space proposes a genome by calling ``trial.suggest_categorical(knob, choices)``
for each knob (``SearchSpace.suggest``). The driver hands it a
:class:`SamplingTrial` instead of the raw Optuna trial, which applies two
things the space does not know about:

- **restrictions** (``--knob stages=2,4``): a knob's choices narrowed to the
  given values (one value fixes it). Every sampler sees the narrowed choices;
  ``grid`` enumerates the restricted product.
- **ordinal encoding** (``cmaes`` only): a numeric knob whose choices are
  increasing integers is asked as an integer index ``<knob>#index`` into its
  choices, so that CMA-ES can treat it as a number. Every other knob
  (placements, layouts, flags, strings) stays categorical, and CMA-ES hands
  those to its independent sampler (TPE, univariate): Optuna's CMA-ES only
  models integer and float parameters. Conditional knobs (``ctas_per_sm`` only
  for a persistent grid) fall outside CMA-ES's intersection search space and
  go to the independent sampler too.

Whatever the sampler, its proposal then goes through ``tsopt.search.proposals``: repaired
into the space's declared legal set (``SearchSpace.proposal_factors``) before the verifier
judges it. Parameter names and choices stay the space's knobs, so resumed studies and warm
starts see the distributions they recorded; a knob whose choices grew is sampled under a
parameter name of its own (``Knob.param``: Optuna refuses other choices under a recorded
name), and :class:`KnobView` translates between the two (``param``, ``knob_name``,
``encode``/``decode``), reading a recorded trial's old name as the knob's.

Samplers: ``evolve`` (default; one-gene moves from the best measured candidates, ranked
by a cost model: :mod:`tsopt.search.evolve`), ``tpe`` (multivariate, grouped for conditional knobs, a
constant liar so that a batch of asked-but-untold trials spreads out),
``random``, ``cmaes`` and ``grid`` (exhaustive over the restricted knob
product; refused above :data:`GRID_LIMIT` combinations).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.errors import UserInputError

if TYPE_CHECKING:
    import optuna

    from tsopt.core.problem import Problem
    from tsopt.core.space import Knob, SearchSpace

SAMPLERS: tuple[str, ...] = ("evolve", "tpe", "random", "cmaes", "grid")
GRID_LIMIT = 200_000
ORDINAL_SUFFIX = "#index"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_ordinal(knob: Knob) -> bool:
    """A numeric knob whose choices are strictly increasing integers (at least two)."""
    values = [v for v in knob.choices if isinstance(v, int) and not isinstance(v, bool)]
    return (knob.kind == "numeric" and len(values) >= 2 and len(values) == len(knob.choices)
            and all(a < b for a, b in zip(values, values[1:], strict=False)))


def parse_restrictions(specs: Sequence[str], knobs: Sequence[Knob]) -> dict[str, tuple[Any, ...]]:
    """``["stages=2,4", "persistent=false"]`` -> {knob: allowed choices}, matched against the
    knobs' choices by their text (``true``/``false`` for flags). Raises UserInputError naming an
    unknown knob, a value that is not one of its choices, or a knob restricted twice (which of
    ``stages=2`` and ``stages=4`` was meant cannot be guessed)."""
    by_name = {k.name: k for k in knobs}
    restricted: dict[str, tuple[Any, ...]] = {}
    given: dict[str, str] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            raise UserInputError(f"--knob {spec!r} is not of the form NAME=V1[,V2...]")
        knob = by_name.get(name)
        if knob is None:
            raise UserInputError(f"--knob {spec!r}: no knob {name!r}; knobs: {', '.join(by_name)}")
        if name in given:
            raise UserInputError(f"--knob {spec!r}: knob {name!r} is already restricted by "
                                 f"--knob {given[name]!r}; give its choices once "
                                 f"({name}=V1,V2...)")
        given[name] = spec
        by_text = {str(c).lower(): c for c in knob.choices}
        allowed = []
        # Choices may hold commas themselves (placements): take the longest match each time.
        tokens = [t.strip() for t in values.split(",")]
        i = 0
        while i < len(tokens):
            for j in range(len(tokens), i, -1):
                text = ",".join(tokens[i:j]).lower()
                if text in by_text:
                    break
            else:
                shown = ", ".join(str(c) for c in knob.choices[:6])
                more = f" ... ({len(knob.choices)} in all)" if len(knob.choices) > 6 else ""
                raise UserInputError(f"--knob {spec!r}: {tokens[i]!r} is not a choice of {name} "
                                     f"({shown}{more})")
            value = by_text[text]
            if value not in allowed:
                allowed.append(value)
            i = j
        # Keep the knob's own order: ordinal indices and grids read it.
        restricted[name] = tuple(c for c in knob.choices if c in allowed)
    return restricted


@dataclass(frozen=True)
class KnobView:
    """The space's knobs as the sampler sees them: restricted, and which are ordinal."""

    knobs: tuple[Knob, ...]
    restrict: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    ordinal: frozenset[str] = frozenset()

    @classmethod
    def of(cls, space: SearchSpace, problem: Problem, sampler: str,
           restrict: Mapping[str, tuple[Any, ...]] | None = None) -> KnobView:
        knobs = tuple(space.knobs(problem))
        restrict = dict(restrict or {})
        ordinal = frozenset(k.name for k in knobs if sampler == "cmaes"
                            and is_ordinal(k) and len(restrict.get(k.name, k.choices)) >= 2)
        return cls(knobs, restrict, ordinal)

    def choices(self, name: str, offered: Sequence[Any]) -> list[Any]:
        """The choices of ``name`` the sampler may pick among ``offered`` (the space's)."""
        allowed = self.restrict.get(name)
        if allowed is None:
            return list(offered)
        narrowed = [c for c in offered if c in allowed]
        if not narrowed:
            raise UserInputError(f"--knob {name}: none of {list(allowed)} is a choice here "
                                 f"({', '.join(str(c) for c in offered)})")
        return narrowed

    def wrap(self, trial: Any) -> SamplingTrial:
        return SamplingTrial(trial, self)

    def grid(self) -> dict[str, list[Any]]:
        """The grid of every knob's (restricted) choices, by Optuna parameter."""
        return {k.param_name: self.choices(k.name, k.choices) for k in self.knobs}

    def param(self, name: str) -> str:
        """The Optuna parameter knob ``name`` is sampled under (``Knob.param``)."""
        return next((k.param_name for k in self.knobs if k.name == name), name)

    def knob_name(self, param: str) -> str:
        """The knob an Optuna parameter stands for: its own, or the knob's name itself, under
        which a study recorded before the knob's choices grew sampled it (the same values mean
        the same genes). An ordinal index keeps its suffix: it indexes the choices it was
        drawn from."""
        return next((k.name for k in self.knobs if param in (k.param_name, k.name)), param)

    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.grid().values())

    def encode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Knob values (``SearchSpace.params_of``) -> Optuna parameters of this view, dropping
        values outside the (restricted) choices: the sampler then picks those knobs itself."""
        by_name = {k.name: k for k in self.knobs}
        encoded: dict[str, Any] = {}
        for name, value in params.items():
            knob = by_name.get(name)
            if knob is None:
                continue
            choices = self.choices(name, knob.choices)
            if value not in choices:
                continue
            if name in self.ordinal:
                encoded[knob.param_name + ORDINAL_SUFFIX] = choices.index(value)
            else:
                encoded[knob.param_name] = value
        return encoded

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Optuna parameters of this view (or recorded under a grown knob's old name) -> knob
        values."""
        by_param = {k.param_name: k for k in self.knobs}
        decoded: dict[str, Any] = {}
        for name, value in params.items():
            knob = by_param.get(name.removesuffix(ORDINAL_SUFFIX))
            if name.endswith(ORDINAL_SUFFIX) and knob is not None:
                decoded[knob.name] = self.choices(knob.name, knob.choices)[value]
            else:
                decoded[self.knob_name(name)] = value
        return decoded


class SamplingTrial:
    """An Optuna trial as ``SearchSpace.suggest`` sees it: restricted choices, ordinal knobs
    asked as integer indices. Everything else is the wrapped trial's."""

    def __init__(self, trial: Any, view: KnobView) -> None:
        self._trial = trial
        self._view = view

    @property
    def trial(self) -> Any:
        return self._trial

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        narrowed = self._view.choices(name, choices)
        param = self._view.param(name)
        if name in self._view.ordinal and len(narrowed) >= 2 and all(_is_int(c) for c in narrowed):
            index = self._trial.suggest_int(param + ORDINAL_SUFFIX, 0, len(narrowed) - 1)
            return narrowed[index]
        return self._trial.suggest_categorical(param, narrowed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)


def make_sampler(name: str, seed: int, view: KnobView) -> optuna.samplers.BaseSampler:
    """The Optuna sampler called ``name`` over ``view``; raises UserInputError for ``cmaes``
    with no ordinal knob, or ``grid`` over more than :data:`GRID_LIMIT` combinations."""
    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == "evolve":  # one-gene moves ranked by a cost model (tsopt.search.evolve)
        from tsopt.search.evolve_sampler import evolve_sampler

        return evolve_sampler(view, seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        if not view.ordinal:
            raise UserInputError(
                "--sampler cmaes needs numeric knobs with at least two integer choices; "
                "this space (as restricted) has none: use tpe or random")
        # CMA-ES models the ordinal knobs; categorical ones go to the independent sampler.
        return optuna.samplers.CmaEsSampler(
            seed=seed, independent_sampler=optuna.samplers.TPESampler(seed=seed),
            warn_independent_sampling=False)
    if name == "grid":
        size = view.grid_size()
        if size > GRID_LIMIT:
            raise UserInputError(
                f"--sampler grid: {size:,} knob combinations (limit {GRID_LIMIT:,}); fix or "
                "narrow knobs with --knob NAME=V1,V2 (see `tsopt spaces NAME`), or use tpe or "
                "random")
        return _ask_tell_grid_sampler()(view.grid(), seed=seed)
    raise UserInputError(f"--sampler {name!r} is not one of {', '.join(SAMPLERS)}")


def _ask_tell_grid_sampler() -> type[optuna.samplers.GridSampler]:
    import optuna

    class AskTellGridSampler(optuna.samplers.GridSampler):
        """Optuna's grid sampler calls ``Study.stop()`` after the last grid point, which
        raises outside ``optimize`` (and leaves that trial RUNNING); the driver stops on
        :func:`grid_exhausted` instead."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return AskTellGridSampler


def grid_exhausted(sampler: Any, study: Any) -> bool:
    """Whether a grid sampler has handed out every grid point (always False for others)."""
    import optuna

    return isinstance(sampler, optuna.samplers.GridSampler) and bool(sampler.is_exhausted(study))
