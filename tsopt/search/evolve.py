"""The ``evolve`` sampler: one-gene moves from the incumbents, ranked by a cost model.

As TVM MetaSchedule's evolutionary search and a hand sweep both do: the next proposal is a
neighbour of one of the best measured candidates, one gene (knob) changed; a numeric knob
mostly steps to the next value up or down, any other knob to another of its choices.
:class:`Evolution` draws a pool of such mutants, drops those already proposed and those
outside the space's declared legal set, ranks the rest with the cost model
(:mod:`tsopt.search.cost_model`: its prior first, the cross-shape model shipped for a GEMM
or the analytical estimate, then learned from the study's measurements as they come) and
proposes the one predicted fastest; now and then (``explore``) a random one of the pool
instead, so that a wrong model cannot lock the search in. Before anything is measured the
pool is random draws, ranked by the prior alone. Failed and pruned
proposals are never proposed again and do not breed. The pool also holds every one-gene
neighbour of the incumbent along the knobs the model reads (``CostModel.reads``: tiles,
stages, split, swap, cluster...), so a move the model ranks first is never missed because a
random draw spent the pool on knobs it cannot tell apart (placements, warp indices): a
decode GEMM's best is often several stages or a split away from the incumbent. And it holds
a short descent on the model alone (:data:`GENERATIONS`): mutants of mutants, the best ranked
kept, so a schedule several genes from every measured one is proposed when the model ranks
it first. Drafts are ranked again as the schedules they complete to, and a move keeps its
value against the space's couplings (``SearchSpace.coupled``).

:class:`Evolution` is pure (parameter dicts in, a parameter dict out, a seeded RNG): a
simulation replays it on a measured table with no GPU and no study, and this module imports
no Optuna. :class:`tsopt.search.evolve_sampler.EvolveSampler` is it as an Optuna sampler,
which the driver binds to a space and problem: a plan is then completed through the space's
own ``suggest`` (:func:`space_completer`: conditional knobs decided) and kept inside the
space's declared legal set (:func:`declared_legal`, from ``SearchSpace.proposal_factors``)
when the space declares one, and the cost model reads the problem's sizes; unbound it works
on the parameters alone. The cost model reads the parameters (a space's knobs are named as its
genes; a placement is one categorical value).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tsopt.search.cost_model import CostModel

if TYPE_CHECKING:
    from tsopt.core.problem import Problem
    from tsopt.core.space import Judge, SearchSpace

POPULATION = 8
"""Parents: the best measured candidates."""
POOL = 64
"""Mutants drawn (and ranked) per proposal."""
EXPLORE = 0.1
"""Share of proposals taken at random from the pool rather than by the model's rank."""
STEP = 0.7
"""Chance that a numeric knob moves to a neighbouring value (else to any other)."""
RANDOM_SHARE = 0.1
"""Share of the pool drawn at random rather than mutated (a way out of a local basin)."""
GENERATIONS = 3
"""Generations of the model-guided descent that adds to each pool: mutants of mutants,
selected by the model alone, so a schedule several genes from every parent (a decode GEMM's
best: other tiles, cluster, split and stages at once) can be proposed when the model ranks it
first, as MetaSchedule's evolutionary search evolves on its cost model before measuring."""
DESCENT_KEEP = 8
"""Legal, unseen drafts the descent keeps per generation (its next parents)."""
DESCENT_CHILDREN = 8
"""Mutants the descent draws per kept draft and generation."""
RERANK = 8
"""Legal drafts, taken in the pool's rank order, that are ranked again once completed."""
SURVEY = 8
"""Schedule families the first proposals of a study survey, one each: the best legal schedule
the cost model ranks in each :data:`FAMILY` among :data:`SURVEY_DRAWS` random drafts, best
family first. Measured as they are built (:meth:`Evolution.predicted` ranks none of them),
they give the learned model evidence from across the space before the one-gene moves narrow
it to the first basin measured, and a shape that no library entry covers starts from the
model's picks rather than from random draws. On the H200, round 6's studies spent half of
their first random draws on stream-K schedules at 0.2-0.8x at decode shapes, while the
analytical model ranks the best known schedule of each problem in the seed library ahead of
93-100 % of random draws (but 32x4096x4096, whose only entry runs at 0.57x: 45 %;
bench/tune_gpu/analysis/round9_space_rank.json); on the measured 8192^3 table the survey
takes the replay from P 0.60 to 0.76 (bench/search_table, round 9). Where the model's best
families measure poorly (128x8192x8192: 4-CTA clusters, tile_k 32), the survey does not
help: bench/tune_gpu, round 9."""
SURVEY_DRAWS = 4096
"""Random draws of the model's genes the survey ranks (the analytical model costs microseconds
a schedule)."""
SURVEY_TESTS = 256
"""Legality tests the survey makes at most (a test is arithmetic or a memoised cheap verdict)."""
SURVEY_BASES = 8
"""Legal random drafts whose other genes (placements, warps) the survey's picks borrow."""
SURVEY_LEADS = 8
"""Families per survey slot the survey ranks, improves and tries to make legal (at most
:data:`SURVEY_TESTS` tests). The model does not see every rule, so at a large shape its best
families are mostly illegal (a 256x256 tile over the register cap): with 2 a slot, the
survey at 8192^3 and 4096^3 kept 1-3 of its 8 (seeds 1-3); with 8 it keeps 8, for about 2 s
more per study (``bench/proposals/survey_size.py``)."""
FAMILY = ("tile_m", "tile_n", "cluster", "swap_ab", "split_k", "stream_k")
"""The genes that make a schedule family for the survey: its tile, cluster and decomposition."""

Params = dict[str, Any]
Completer = Callable[[Mapping[str, Any], random.Random], Params]
"""``(params, rng) -> full params``: fills in what ``params`` leaves open (a conditional knob
a move brought in) and drops what the space would not ask."""
Coupler = Callable[[Mapping[str, Any], Collection[str]], Params]
"""``(params, moved) -> params``: what the knobs in ``moved`` now require of the others."""
Repairer = Callable[[Mapping[str, Any], Collection[str]], "Params | None"]
"""``(params, keep) -> params or None``: the nearest legal params with the knobs in ``keep``
left as they are."""


@dataclass(frozen=True)
class Observation:
    """A proposal and what it came to: a relative time, or None (pruned, failed)."""

    params: Mapping[str, Any]
    value: float | None


def params_key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable identity of a parameter set (values by their repr: 1 and True differ)."""
    return tuple(sorted((name, repr(value)) for name, value in params.items()))


def _ordinal(choices: Sequence[Any]) -> bool:
    return len(choices) >= 2 and all(isinstance(c, int) and not isinstance(c, bool)
                                     for c in choices)


def mutate(params: Mapping[str, Any], choices: Mapping[str, Sequence[Any]], rng: random.Random,
           genes: int = 1, step: float = STEP) -> Params:
    """``params`` with ``genes`` knobs changed, each to another of its ``choices`` (a numeric
    knob to a neighbouring value with chance ``step``). A knob ``params`` lacks is left
    out; knobs with one choice never move."""
    movable = [name for name in params if len(choices.get(name, ())) > 1]
    child = dict(params)
    for name in rng.sample(movable, min(genes, len(movable))):
        options = list(choices[name])
        here = next((i for i, c in enumerate(options) if repr(c) == repr(child[name])), None)
        if here is not None and _ordinal(options) and rng.random() < step:
            steps = [i for i in (here - 1, here + 1) if 0 <= i < len(options)]
            child[name] = options[rng.choice(steps)]
            continue
        others = [c for i, c in enumerate(options) if i != here]
        child[name] = rng.choice(others)
    return child


def random_params(choices: Mapping[str, Sequence[Any]], rng: random.Random) -> Params:
    return {name: rng.choice(list(options)) for name, options in choices.items() if options}


def _plain(params: Mapping[str, Any], _rng: random.Random) -> Params:
    return dict(params)


class Evolution:
    """The search itself: history in, the next parameter set out (see the module doc).

    ``choices``: each knob's values. ``complete`` fills a parameter set in (default: as
    is); ``legal`` says whether one lies in the space's declared legal set (default: all
    do); ``model`` ranks (default: a :class:`CostModel` over ``sizes``)."""

    def __init__(self, choices: Mapping[str, Sequence[Any]], seed: int = 0, *,
                 sizes: Mapping[str, int] | None = None, complete: Completer | None = None,
                 legal: Callable[[Mapping[str, Any]], bool] | None = None,
                 model: CostModel | None = None, population: int = POPULATION,
                 pool: int = POOL, explore: float = EXPLORE,
                 random_share: float = RANDOM_SHARE,
                 generations: int = GENERATIONS,
                 couple: Coupler | None = None,
                 universe: Sequence[Mapping[str, Any]] | None = None,
                 survey: int | None = None,
                 repair: Repairer | None = None) -> None:
        self.universe = [dict(p) for p in universe] if universe is not None else None
        """A finite set to propose from (a measured table, in a simulation): a move then
        goes to the unseen members nearest a parent (fewest knobs different)."""
        self.choices = {name: tuple(values) for name, values in choices.items()}
        self.seed = seed
        self.rng = random.Random(seed)
        self.complete = complete or _plain
        self.legal = legal
        self.model = model or CostModel(sizes)
        self.population = population
        self.pool = pool
        self.explore = explore
        self.random_share = random_share
        self.generations = generations
        self.couple = couple
        """The space's couplings with the knobs a move changed kept (``SearchSpace.coupled``):
        a move the model ranks is then the schedule it names, not one a coupling undid."""
        self._completed: dict[tuple[tuple[str, str], ...], Params] = {}
        self._legal: dict[tuple[tuple[str, str], ...], bool] = {}
        self._fitted_on = -1
        self.survey = SURVEY if survey is None else survey
        self.repair = repair
        """The nearest params in the space's declared legal set with some knobs kept, or None
        (the driver's ``Proposer.nearest_legal``); the survey uses it."""
        self._survey: list[Params] | None = None
        self.last: dict[str, Any] = {}
        """How the last proposal was made (``how``, ``pool``, ``predicted``): for the trial's
        user attributes and the tests."""

    # -- pieces ---------------------------------------------------------------------------
    def _complete(self, params: Mapping[str, Any]) -> Params:
        key = params_key(params)
        done = self._completed.get(key)
        if done is None:
            # Completion draws what params leave open from an RNG of their own, so the same
            # params always complete the same way.
            done = self.complete(params, random.Random(zlib.crc32(repr(key).encode())))
            self._completed[key] = done
        return done

    def _is_legal(self, params: Mapping[str, Any]) -> bool:
        if self.legal is None:
            return True
        key = params_key(params)
        if key not in self._legal:
            try:
                self._legal[key] = bool(self.legal(params))
            except (ValueError, KeyError, TypeError):
                self._legal[key] = False
        return self._legal[key]

    def _moved(self, parent: Mapping[str, Any], draft: Params) -> Params:
        """``draft`` (``parent`` with some knobs moved) through the couplings, the moved knobs
        kept."""
        if self.couple is None:
            return draft
        moved = [name for name, value in draft.items() if repr(value) != repr(parent.get(name))]
        return self.couple(draft, moved) if moved else draft

    def _pool_from_universe(self, parents: Sequence[Observation], seen: set[Any],
                            pool: dict[Any, tuple[Params, str]]) -> None:
        assert self.universe is not None
        unseen = [p for p in self.universe if params_key(p) not in seen]
        if not unseen:
            return
        randoms = max(1, int(self.pool * self.random_share)) if parents else self.pool
        for p in self.rng.sample(unseen, min(randoms, len(unseen))):
            pool.setdefault(params_key(p), (p, "random"))
        if not parents:
            return
        scored = []
        for p in unseen:
            distance = min(sum(repr(p.get(n)) != repr(v) for n, v in o.params.items())
                           for o in parents)
            scored.append((distance, self.rng.random(), p))
        scored.sort(key=lambda s: s[:2])
        for _, _, p in scored[: self.pool]:
            pool.setdefault(params_key(p), (p, "mutate"))

    def _neighbourhood(self, params: Mapping[str, Any], seen: set[Any],
                       pool: dict[Any, tuple[Params, str]]) -> None:
        """Every unseen one-gene neighbour of ``params`` along the knobs the model reads."""
        for name in self.model.reads:
            if name not in params:
                continue
            for value in self.choices.get(name, ()):
                if repr(value) == repr(params[name]):
                    continue
                draft = self._moved(params, {**params, name: value})
                key = params_key(draft)
                if key not in seen:
                    pool.setdefault(key, (draft, "neighbour"))

    def _descend(self, parents: Sequence[Observation], seen: set[Any],
                 pool: dict[Any, tuple[Params, str]]) -> None:
        """The model-guided descent (see :data:`GENERATIONS`): from the parents, each
        generation's mutants ranked by the model, the best :data:`DESCENT_KEEP` legal and
        unseen ones kept, added to the pool and bred again. In a simulation (``universe``)
        a mutant is one of the unseen members nearest a kept draft."""
        frontier = [dict(o.params) for o in parents]
        for _ in range(self.generations):
            drafts: dict[Any, Params] = {}
            if self.universe is not None:
                unseen = [p for p in self.universe if params_key(p) not in seen]
                scored = sorted(
                    ((min(sum(repr(p.get(n)) != repr(v) for n, v in f.items())
                          for f in frontier), self.rng.random(), p) for p in unseen),
                    key=lambda s: s[:2])
                for _, _, p in scored[: DESCENT_CHILDREN * len(frontier)]:
                    drafts[params_key(p)] = p
            else:
                # Moves along the knobs the model reads: the others it cannot rank.
                readable = {name: self.choices[name] for name in self.model.reads
                            if name in self.choices}
                for params in frontier:
                    for _ in range(DESCENT_CHILDREN):
                        draft = self._moved(params, mutate(params, readable or self.choices,
                                                           self.rng))
                        key = params_key(draft)
                        if key not in seen:
                            drafts.setdefault(key, draft)
            # Ranked as completed: a draft's couplings and conditional knobs can change what
            # it is (a move to stream-K takes the persistent loop and a 1x1 cluster along).
            kept = self._completed_legal(drafts.values(), seen)
            if not kept:
                return
            kept = kept[:DESCENT_KEEP]
            for full, _ in kept:
                pool.setdefault(params_key(full), (full, "descent"))
            frontier = [full for full, _ in kept]

    def _completed_legal(self, drafts: Any, seen: set[Any]) -> list[tuple[Params, float]]:
        """``drafts`` completed, those unseen and legal, with the model's prediction for
        each, best first."""
        fulls: dict[Any, Params] = {}
        for draft in drafts:
            full = self._complete(draft)
            key = params_key(full)
            if key in seen or key in fulls or not self._is_legal(full):
                continue
            fulls[key] = full
        if not fulls:
            return []
        entries = list(fulls.values())
        predicted = self.model.predict(entries)
        order = sorted(range(len(entries)), key=lambda i: (predicted[i], i))
        return [(entries[i], float(predicted[i])) for i in order]

    def surveyed(self) -> list[Params]:
        """The survey (see :data:`SURVEY`): per family, the best legal schedule the model ranks,
        best first; made once, on the first call, with the model as fitted then (analytical
        in a fresh study). Empty where the model reads no gene of a family.

        The model's genes alone are searched first (they are all it ranks, and it costs
        microseconds a schedule): :data:`SURVEY_DRAWS` random draws, the best of each family
        improved one gene at a time (:meth:`_improve`). The best families are then made legal:
        a random draft is rarely legal as a whole (placements, warps and stages must fit
        together), so the model's genes are put on the other genes of a legal random draft
        (:data:`SURVEY_BASES`), and what is still illegal is repaired (``repair``: the
        driver's, nearest legal values first) with its family kept. In a
        simulation (``universe``) the survey is the best member of each family."""
        if self._survey is not None:
            return self._survey
        self._survey = []
        reads = [name for name in self.model.reads if name in self.choices]
        if not self.survey or not any(name in reads for name in FAMILY):
            return self._survey
        if self.universe is not None:
            self._survey = self._best_per_family(self.universe)[: self.survey]
            return self._survey
        # An RNG of its own: the survey does not shift the draws of the search after it.
        rng = random.Random(zlib.crc32(f"survey:{self.seed}".encode()))
        genes = {name: self.choices[name] for name in reads}
        couple = self.couple or (lambda params, moved: dict(params))
        draws = [couple(random_params(genes, rng), ()) for _ in range(SURVEY_DRAWS)]
        leaders = self._best_per_family(draws)[: self.survey * SURVEY_LEADS]
        improved = self._best_per_family([self._improve(p, genes, couple) for p in leaders])
        tests = 0
        bases: list[Params] = []
        while len(bases) < SURVEY_BASES and tests < SURVEY_TESTS // 2:
            full = self._complete(random_params(self.choices, rng))
            tests += 1
            if self._is_legal(full):
                bases.append(full)
        for j, chosen in enumerate(improved):
            if len(self._survey) >= self.survey or tests >= SURVEY_TESTS or not bases:
                break
            family = tuple(repr(chosen.get(name)) for name in FAMILY)
            full = self._complete({**bases[j % len(bases)], **chosen})
            tests += 1
            if not self._is_legal(full) and self.repair is not None:
                # The model cannot see every rule (stages for SMEM, registers for the layout):
                # the nearest legal schedule, as the driver repairs every proposal.
                repaired = self.repair(full, FAMILY)
                full = self._complete(repaired) if repaired is not None else full
                tests += 1
            if self._is_legal(full) and tuple(repr(full.get(n)) for n in FAMILY) == family:
                self._survey.append(full)
        if self._survey:
            predicted = self.model.predict(self._survey)
            self._survey = [self._survey[i] for i in sorted(range(len(self._survey)),
                                                            key=lambda i: (predicted[i], i))]
        return self._survey

    def _best_per_family(self, candidates: Sequence[Mapping[str, Any]]) -> list[Params]:
        """The model's best of each family among ``candidates``, best family first."""
        if not candidates:
            return []
        predicted = self.model.predict(list(candidates))
        best: dict[tuple[str, ...], Params] = {}
        for i in sorted(range(len(candidates)), key=lambda i: (predicted[i], i)):
            family = tuple(repr(candidates[i].get(name)) for name in FAMILY)
            best.setdefault(family, dict(candidates[i]))
        return list(best.values())

    def _improve(self, params: Params, genes: Mapping[str, Sequence[Any]],
                 couple: Coupler) -> Params:
        """``params`` improved by the model one gene at a time, its family's genes kept: each
        other gene in turn moved to its best value where that is strictly better, twice over.
        A gene the model is indifferent to keeps its drawn value (a tie broken towards the
        first choice would pick the fewest stages and registers every time)."""
        current = dict(params)
        for _ in range(2):
            for name, values in genes.items():
                if name in FAMILY:
                    continue
                options = [couple({**current, name: value}, (name,)) for value in values]
                options = [o for o in options
                           if all(repr(o.get(f)) == repr(current.get(f)) for f in FAMILY)]
                if not options:
                    continue
                predicted = self.model.predict([current, *options])
                best = min(range(len(options)), key=lambda i: (predicted[i + 1], i))
                if predicted[best + 1] < predicted[0] - 1e-9:
                    current = options[best]
        return current

    # -- proposing ------------------------------------------------------------------------
    def propose(self, history: Sequence[Observation],
                pending: Sequence[Mapping[str, Any]] = ()) -> Params:
        """The next parameter set: unseen (neither in ``history`` nor ``pending``), legal
        where a legality test is given, the best the model ranks among the pool.

        The pool holds drafts (a parent's params with one knob moved), ranked as they are;
        only drafts taken in rank order are completed and tested for legality until one is
        unseen and legal, since completing one runs the space's ``suggest`` and a legality
        test may judge a factor."""
        seen = {params_key(o.params) for o in history} | {params_key(p) for p in pending}
        measured = [o for o in history if o.value is not None and math.isfinite(o.value)]
        self._fit(measured)
        survey = self.surveyed()
        for rank, full in enumerate(survey):
            if params_key(full) not in seen:
                self.last = {"how": "survey", "pool": len(survey), "rank": rank,
                             "predicted": float(self.model.predict([full])[0]),
                             "learned": self.model.learned}
                return dict(full)
        parents = sorted(measured, key=lambda o: o.value)  # type: ignore[arg-type, return-value]
        best_of: dict[tuple[tuple[str, str], ...], Observation] = {}
        for o in parents:  # a genome measured twice breeds once
            best_of.setdefault(params_key(o.params), o)
        parents = list(best_of.values())[: self.population]

        pool: dict[tuple[tuple[str, str], ...], tuple[Params, str]] = {}
        if self.universe is not None:
            self._pool_from_universe(parents, seen, pool)
        if parents and self.universe is None:
            self._neighbourhood(parents[0].params, seen, pool)
        tries = 0 if self.universe is None else self.pool * 8
        genes_moved = 1
        drawn = len(pool)
        while len(pool) < self.pool + drawn and tries < self.pool * 8:
            tries += 1
            if tries % (self.pool * 2) == 0:
                genes_moved += 1  # the one-gene neighbours are all known: move more
            if parents and self.rng.random() >= self.random_share:
                weights = [1.0 / (rank + 1) for rank in range(len(parents))]
                parent = self.rng.choices(parents, weights)[0]
                draft = self._moved(parent.params,
                                    mutate(parent.params, self.choices, self.rng, genes_moved))
                how = "mutate"
            else:
                draft, how = random_params(self.choices, self.rng), "random"
            key = params_key(draft)
            if key not in seen and key not in pool:
                pool[key] = (draft, how)
        if parents and self.generations:
            self._descend(parents, seen, pool)
        entries = list(pool.values())
        predicted = self.model.predict([draft for draft, _ in entries])
        order = sorted(range(len(entries)), key=lambda i: (predicted[i], i))
        explore = self.rng.random() < self.explore
        if explore:
            self.rng.shuffle(order)
        # The first RERANK legal completions in the drafts' order, ranked again as completed
        # (completion can turn a draft into another schedule, see _descend); exploring takes
        # the first.
        chosen: list[tuple[int, int, Params]] = []
        taken: set[Any] = set()
        for tested, i in enumerate(order):
            full = self._complete(entries[i][0])
            key = params_key(full)
            if key in seen or key in taken or not self._is_legal(full):
                continue
            taken.add(key)
            chosen.append((tested, i, full))
            if explore or len(chosen) >= RERANK:
                break
        if chosen:
            again = self.model.predict([c[2] for c in chosen])
            best = min(range(len(chosen)), key=lambda j: (again[j], j))
            tested, i, full = chosen[best]
            self.last = {"how": "explore" if explore else entries[i][1], "pool": len(entries),
                         "rank": tested, "predicted": float(again[best]),
                         "learned": self.model.learned}
            return dict(full)
        self.last = {"how": "random", "pool": len(entries)}
        return random_params(self.choices, self.rng)

    def predicted(self, params: Mapping[str, Any]) -> float | None:
        """The model's prediction for ``params`` as fitted now (log relative time; lower is
        faster), or None where it has nothing to go on, and for the survey's picks: they are
        what a study starts from, measured as they come (a driver ranks what waits for the
        GPU by this; on the H200, ranked by the model fitted to the first few, most of round
        9's surveys waited behind the descent's proposals until the time ran out)."""
        if not params:
            return None
        if self._survey and params_key(params) in {params_key(p) for p in self._survey}:
            return None
        value = float(self.model.predict([dict(params)])[0])
        return value if math.isfinite(value) else None

    def _fit(self, measured: Sequence[Observation]) -> None:
        if len(measured) == self._fitted_on:
            return
        self._fitted_on = len(measured)
        self.model.fit([o.params for o in measured],
                       [float(o.value) for o in measured if o.value is not None])


# -- as an Optuna sampler ----------------------------------------------------------------


class _PlanTrial:
    """What ``SearchSpace.suggest`` sees while a plan is completed: planned values where
    they are among the choices, a draw of ``rng`` otherwise; every value asked recorded."""

    def __init__(self, params: Mapping[str, Any], rng: random.Random,
                 view: Any) -> None:
        self.params, self.rng, self.view = params, rng, view
        self.values: Params = {}

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        options = list(self.view.choices(name, choices)) if self.view is not None else list(choices)
        value = self.params.get(name)
        keys = [repr(c) for c in options]
        chosen = options[keys.index(repr(value))] if repr(value) in keys else self.rng.choice(options)
        self.values[name] = chosen
        return chosen


def space_completer(space: SearchSpace, problem: Problem, view: Any) -> Completer:
    """A plan completed by ``space.suggest``: the knobs it asks, conditional ones decided,
    after the space's couplings (``SearchSpace.coupled``: a move to a structure that needs
    other knob values takes them along)."""

    def complete(params: Mapping[str, Any], rng: random.Random) -> Params:
        trial = _PlanTrial(space.coupled(params), rng, view)
        space.suggest(trial, problem)
        return trial.values

    return complete


def declared_legal(space: SearchSpace, problem: Problem,
                   judge: Judge | None = None) -> Callable[[Mapping[str, Any]], bool] | None:
    """The space's declared legal set (``SearchSpace.proposal_factors``) as a test on params,
    when it declares one (and has a verifier to judge its factors with: ``judge``, else the
    space's own)."""
    factors_of = getattr(space, "proposal_factors", None)
    judge = judge or space.judge
    if factors_of is None or judge is None:
        return None
    factors = tuple(factors_of(problem, judge) or ())
    if not factors:
        return None
    return lambda params: all(f.legal(params) for f in factors)
