"""Proposals that are legal by construction: every sampler's proposal repaired into the
space's declared legal set before the verifier judges it.

A space that declares its factorisation (:meth:`SearchSpace.proposal_factors
<tsopt.core.space.SearchSpace.proposal_factors>`: factors in the order a proposal is
decided, each with its knobs and a legality test given the factors before it) gets its
proposals drawn inside it, for every sampler alike (random, TPE, CMA-ES, grid): the sampler
proposes over the space's knobs as always (same parameter names and choices, so resumed
studies and warm starts see the distributions they recorded); :class:`Proposer` reads the
proposal, then walks the factors in order and, where one is illegal, moves to the nearest
legal values of that factor's knobs (fewest knobs changed, then the least ordinal distance),
backtracking to earlier factors when a later one has no legal value. Conditional knobs that
a repaired value brings in (``raster`` once ``persistent``) are asked of the sampler, and
the result repaired again. The genome is then built from the repaired values.

The repair is deterministic (ties broken by a digest of the proposal), so a resumed trial
gives the same genome. What changed is recorded on the trial (user attribute
``repaired``). The verifier still judges every proposal: the factors are predictions.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.genome import Genome

if TYPE_CHECKING:
    from tsopt.core.problem import Problem
    from tsopt.core.space import Factor, Judge, SearchSpace
    from tsopt.search.samplers import KnobView

REPAIR_BUDGET = 200
"""Legality tests one repair may make (a test is arithmetic or a memoised cheap verdict)."""
BRANCH = 3
"""Legal values of a factor tried when the factors after it find nothing, before the factor
before it moves instead."""
SEED_BUDGET = 2000
KNOWN_LIMIT = 512
KNOWN_TRIES = 8
"""Legal params found earlier, kept (at most) and tried (nearest first) when a repair's
budget runs out."""
REPAIRED_ATTR = "repaired"
MAX_CANDIDATES = 200_000
"""Value combinations of one factor considered at most (the largest factors have ~10^3)."""


@dataclass(frozen=True)
class Proposal:
    """One proposal: the sampler's values, the repaired ones, the genome built from them."""

    genome: Genome
    proposed: dict[str, Any]
    params: dict[str, Any]
    repaired: dict[str, Any] = field(default_factory=dict)
    """Knobs the repair changed, with their new values."""
    legal: bool = True
    """Whether every factor accepts ``params`` (False: the budget ran out first)."""
    tests: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"genome": self.genome.hash, "proposed": dict(self.proposed),
                "params": dict(self.params), "repaired": dict(self.repaired),
                "legal": self.legal, "tests": self.tests}


class _Recording:
    """A trial as ``suggest`` sees it that answers from ``fixed`` where it can and asks
    ``trial`` otherwise, recording every value it hands out."""

    def __init__(self, trial: Any, fixed: Mapping[str, Any]) -> None:
        self._trial = trial
        self._fixed = fixed
        self.values: dict[str, Any] = {}
        self.asked: list[str] = []

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        if name in self._fixed and self._fixed[name] in choices:
            value = self._fixed[name]
        else:
            value = self._trial.suggest_categorical(name, choices)
            self.asked.append(name)
        self.values[name] = value
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)


class _Within:
    """A trial that answers from ``params`` where the view allows the value, else with the
    view's first allowed choice."""

    def __init__(self, params: Mapping[str, Any], view: KnobView) -> None:
        self._params = params
        self._view = view

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        allowed = self._view.choices(name, choices)
        value = self._params.get(name, _MISSING)
        return value if value in allowed else allowed[0]


class _Fixed:
    """A trial that answers from ``params`` (a knob it lacks: its first choice)."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = params

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        value = self._params.get(name)
        return value if value in choices else choices[0]


def _digest(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode())


class Proposer:
    """Proposals of ``space`` for ``problem`` drawn inside its declared legal set, through
    the sampler's knob ``view`` (restrictions, ordinal encoding). Without a factorisation
    (the space declares none) a proposal is the sampler's as it came."""

    def __init__(self, space: SearchSpace, problem: Problem, view: KnobView,
                 judge: Judge | None = None, budget: int = REPAIR_BUDGET) -> None:
        from tsopt.verify.verifier import judge_for

        self.space = space
        self.problem = problem
        self.view = view
        self.budget = budget
        judge = judge or space.judge or judge_for(space)
        self.factors: tuple[Factor, ...] = tuple(space.proposal_factors(problem, judge) or ())
        self.choices = {k.name: list(view.choices(k.name, k.choices)) for k in view.knobs}
        self.proposals = 0
        self.repairs = 0
        self._known: list[dict[str, Any]] = []

    # -- legality --------------------------------------------------------------------
    def legal(self, params: Mapping[str, Any]) -> bool:
        """Whether every factor accepts ``params`` (inside the declared legal set)."""
        return all(f.legal(params) for f in self.factors)

    def violated(self, params: Mapping[str, Any]) -> str | None:
        """The first factor ``params`` violate, else None."""
        return next((f.name for f in self.factors if not f.legal(params)), None)

    # -- proposing -------------------------------------------------------------------
    def propose(self, trial: Any, repair: bool = True) -> Proposal:
        """The genome of ``trial`` (an Optuna trial, or anything with
        ``suggest_categorical``), repaired into the legal set; records what changed on the
        trial when it takes user attributes. ``repair=False``: the trial's own values (an
        enqueued genome, a warm start, is meant as it is)."""
        wrapped = self.view.wrap(trial)
        first = _Recording(wrapped, {})
        genome = self.space.suggest(first, self.problem)
        proposed = dict(first.values)
        self.proposals += 1
        if not self.factors or not repair:
            return Proposal(genome, proposed, proposed, legal=not self.factors or self.legal(
                proposed))
        params, legal, tests = dict(proposed), True, 0
        for _ in range(3):  # a repair may bring in conditional knobs; they are asked, then
            params, legal, spent = self.repair(params)  # repaired in turn
            tests += spent
            replay = _Recording(wrapped, params)
            genome = self.space.suggest(replay, self.problem)
            params = dict(replay.values)
            if not replay.asked:
                break
        repaired = {k: v for k, v in params.items() if proposed.get(k, _MISSING) != v}
        if repaired:
            self.repairs += 1
            if hasattr(trial, "set_user_attr"):
                trial.set_user_attr(REPAIRED_ATTR, repaired)
        return Proposal(genome, proposed, params, repaired, legal, tests)

    def within_restrictions(self, genome: Genome) -> Genome:
        """``genome`` (the space's seed) with each knob a ``--knob`` fixes set to an allowed
        choice, the other knobs repaired around them into the legal set: the study's first
        candidate obeys its restrictions like every other. ``genome`` itself when it does."""
        params = self.space.params_of(genome)
        if all(params.get(k, _MISSING) in allowed for k, allowed in self.view.restrict.items()
               if k in params):
            return genome
        restrict = self.view.restrict
        fixed = {k: v if k not in restrict or v in restrict[k] else restrict[k][0]
                 for k, v in params.items()}
        if self.factors:
            found = self.nearest_legal(fixed, keep=frozenset(self.view.restrict))
            if found is not None:
                fixed = found
        return self.space.suggest(_Within(fixed, self.view), self.problem)

    def repair(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], bool, int]:
        """The nearest params every factor accepts: (params, legal, tests made). Factor by
        factor in order; a factor's knobs move to the nearest legal values; when none is
        legal, the factor before moves on to its next nearest. With the budget spent, the
        params as proposed (the verifier will say why)."""
        found, tests = self._solve(params, self.budget)
        if found is None:
            found, spent = self._nearest_known(params)
            tests += spent
        if found is None:
            return dict(params), False, tests
        if len(self._known) < KNOWN_LIMIT:
            self._known.append(found)
        return found, True, tests

    def nearest_legal(self, params: Mapping[str, Any],
                      keep: Collection[str] = ()) -> dict[str, Any] | None:
        """The nearest params every factor accepts with the knobs in ``keep`` left as they are
        (the repair's search, within its budget), or None."""
        found, _ = self._solve(params, self.budget, frozenset(keep))
        return found

    def _solve(self, params: Mapping[str, Any], budget: int,
               keep: frozenset[str] = frozenset()) -> tuple[dict[str, Any] | None, int]:
        tests = 0
        salt = _digest(sorted(params.items(), key=lambda kv: kv[0]))

        def solve(i: int, current: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal tests
            if i == len(self.factors):
                return current
            factor = self.factors[i]
            dead_ends = 0
            for change in self._nearest(factor, current, salt, keep):
                if tests >= budget:
                    return None
                candidate = {**current, **change}
                tests += 1
                if factor.legal(candidate):
                    found = solve(i + 1, candidate)
                    if found is not None:
                        return found
                    # A later factor found nothing here: a few more values of this one, then
                    # the factor before moves (else a wide factor eats the whole budget).
                    dead_ends += 1
                    if dead_ends >= BRANCH:
                        return None
            return None

        return solve(0, dict(params)), tests

    def _nearest_known(self, params: Mapping[str, Any]) -> tuple[dict[str, Any] | None, int]:
        """When the repair's budget is spent: the nearest legal params already found (the
        seed's first), changed only where they differ."""
        tests = 0
        if not self._known:
            # None found yet: the seed's values (within the restrictions), repaired once with
            # a larger budget.
            try:
                seed = self.view.decode(self.view.encode(
                    self.space.params_of(self.space.seed_genome(self.problem))))
            except (ValueError, KeyError):
                seed = {}
            start, tests = self._solve({**params, **seed}, SEED_BUDGET)
            if start is not None:
                self._known.append(start)

        def distance(known: Mapping[str, Any]) -> tuple[int, int]:
            return (sum(params.get(k, _MISSING) != v for k, v in known.items()),
                    _digest(sorted(known.items(), key=lambda kv: kv[0])))

        for known in sorted(self._known, key=distance)[:KNOWN_TRIES]:
            candidate = {**params, **known}
            tests += 1
            if self.legal(candidate):
                return candidate, tests
        return None, tests

    def _nearest(self, factor: Factor, params: Mapping[str, Any], salt: int,
                 keep: frozenset[str] = frozenset()) -> Iterator[dict[str, Any]]:
        """Values of the factor's knobs (those ``params`` has, less ``keep``), nearest first:
        the current ones, then by knobs changed, then by ordinal distance (index in the
        choices)."""
        names = [n for n in factor.knobs if n in params and n in self.choices and n not in keep]
        yield {}
        options = [self.choices[n] for n in names]
        if not names or not all(options):
            return
        index = {n: {repr(v): i for i, v in enumerate(c)} for n, c in zip(names, options,
                                                                              strict=True)}
        here = [index[n].get(repr(params[n]), 0) for n in names]
        # Integers are ordered (a step is a distance); any other choice is just different.
        ordered = [all(isinstance(v, int) and not isinstance(v, bool) for v in c)
                   for c in options]
        ranked = []
        for values in itertools.islice(itertools.product(*options), MAX_CANDIDATES):
            spots = [index[n][repr(v)] for n, v in zip(names, values, strict=True)]
            changed = sum(a != b for a, b in zip(spots, here, strict=True))
            if not changed:
                continue
            distance = sum(abs(a - b) if o else int(a != b)
                           for a, b, o in zip(spots, here, ordered, strict=True))
            ranked.append((changed, distance, _digest(salt, values), values))
        ranked.sort(key=lambda r: r[:3])
        for *_, values in ranked:
            yield dict(zip(names, values, strict=True))


_MISSING = object()


def legal_params(space: SearchSpace, problem: Problem, view: KnobView,
                 judge: Judge | None = None) -> Callable[[Mapping[str, Any]], bool]:
    """``params -> bool``: whether sampler params lie inside ``space``'s declared legal set
    (always True for a space without a factorisation)."""
    return Proposer(space, problem, view, judge).legal


def fixed_genome(space: SearchSpace, problem: Problem, params: Mapping[str, Any]) -> Genome:
    """The genome ``space.suggest`` builds from ``params`` (conditional knobs not given:
    their first choice)."""
    return space.suggest(_Fixed(params), problem)
