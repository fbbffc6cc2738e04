"""The copy space's funnel, counted by factorised verification.

The copy genome factors into

- S, the schedule: load placement x store placement x advance_on_wait x
  persistent x stages (what the TS pipeline checks and the BFS see);
- L, the warp/register layout: store_warps, store_warp, load_warp, load_regs,
  store_regs (what the TS register and group rules see);
- O, the rest: box shape, chunk, CTAs per SM (only tsopt's checks see them).

Assumptions, each tested on random genomes verified in full (the count's ``draw`` and
``predicted``, run by ``tsopt.verify.funnel.check_factorisation``):

1. TS(S, L) = TS(S, L0) and TS(S0, L), for canonical S0, L0 that pass.
2. A placement rejected by a per-task rule (anything but a deadlock or a race)
   next to the canonical partner is rejected next to every partner.
3. A persistent schedule is TS-valid iff the same schedule without the tile
   loop is, and the canonical schedule is valid persistent at that
   (advance_on_wait, stages). (Persistent BFS runs cost ~50x more.)

Everything the TS verifier judges below is judged for real, by the ``judge`` the caller
injects; only the multiplication relies on the assumptions.

The sampler's screens (:func:`screen_placements`, :func:`screen_layouts`) are this
factorisation's per-factor verdicts, kept: the placements and layouts that pass next to
the canonical rest. The space ships them (``data/copy_screened.json``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Verdict
from tsopt.core.space import Factor, FunnelCount, Judge, Progress
from tsopt.search_spaces.common import screen_cache
from tsopt.search_spaces.common.placement import PLACEMENT_RULES
from tsopt.search_spaces.common.screen_cache import ScreenKey, sources_digest
from tsopt.search_spaces.copy import checks, config
from tsopt.search_spaces.copy.checks import LAYOUT_RULES, copy_checks

JOINT_RULES = ("ts.deadlock", "ts.race")
OTHER_GENES = ("box_rows", "box_cols", "chunk", "vector", "raster")
SCREEN_PROBLEM = Problem.of("copy", "fp16", rows=4096, cols=4096)
"""The problem the sampler's screens are judged for (the rules they see do not read sizes)."""


def _ts_ok(verdict: Verdict) -> bool:
    return bool(verdict.valid or verdict.stage == "tsopt")


# -- the sampler's screens ----------------------------------------------------------------


def screen_placements(space: Any, judge: Judge, task: str) -> list[config.PlacementKnobs]:
    """Dataflow-legal placements of ``task`` that pass TS and tsopt's checks next to the
    canonical partner for some ``advance_on_wait`` setting."""
    keep = []
    for placement in space.legal_placements(task):
        for aow in config.STRUCTURE_CHOICES["advance_on_wait"]:
            genome = space.genome(**{task: placement}, advance_on_wait=aow)
            if judge(genome, SCREEN_PROBLEM).valid:
                keep.append(placement)
                break
    return keep


def screen_layouts(space: Any, judge: Judge) -> list[dict[str, int]]:
    """Warp/register layouts that pass TS and tsopt's layout rules with the canonical
    schedule. Box-dependent rules (registers per box, vectors per thread) are judged per
    candidate by the verifier, not here."""
    keep = []
    for values in itertools.product(*(config.NUMERIC_CHOICES[g] for g in config.LAYOUT_GENES)):
        genes = dict(zip(config.LAYOUT_GENES, values, strict=True))
        genome = space.genome(**genes)
        if _ts_ok(judge(genome, SCREEN_PROBLEM)) and not [
            f for f in copy_checks(config.config_of(genome, SCREEN_PROBLEM)) if f.rule in LAYOUT_RULES
        ]:
            keep.append(genes)
    return keep


def compute_screens(space: Any, judge: Judge) -> dict[str, Any]:
    """Every screen the sampler draws from: ``load`` and ``store`` placements, ``layouts``."""
    return {"load": screen_placements(space, judge, "load"),
            "store": screen_placements(space, judge, "store"),
            "layouts": screen_layouts(space, judge)}


_TEMPLATE: dict[type, str] = {}


def _template_digest(space: Any) -> str:
    """The screen key's sources digest, once per process (source files do not change under a
    running process, and reading them costs ~10 ms a call)."""
    kind = type(space)
    if kind not in _TEMPLATE:
        _TEMPLATE[kind] = sources_digest(space.source_digest(), checks, *PLACEMENT_RULES, screen_placements,
                                          screen_layouts)
    return _TEMPLATE[kind]


def screen_key(space: Any) -> ScreenKey:
    """What the screens' verdicts depend on: the kernel and genome mapping
    (``space.source_digest()``), tsopt's checks, the placement rules, the screening code;
    the installed DSL; the problem, the canonical genes and the choices screened."""
    template = _template_digest(space)
    params = {
        "problem": SCREEN_PROBLEM.key,
        "canonical": {**config.DEFAULT_STRUCTURE, **config.DEFAULT_NUMERIC},
        "ops": config.TASK_OPS,
        "head_depths": config.HEAD_DEPTHS,
        "deferrable": config.DEFERRABLE,
        "advance_on_wait": config.STRUCTURE_CHOICES["advance_on_wait"],
        "layouts": {g: config.NUMERIC_CHOICES[g] for g in config.LAYOUT_GENES},
    }
    return screen_cache.screen_key(config.SPACE, template, params)


# -- the funnel ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _FunnelSetting:
    """What every step of the funnel counts over, for one problem."""

    space: Any
    problem: Problem
    judge: Judge
    knobs: dict[str, Any]
    legal: dict[str, list[Any]]
    layouts: list[tuple[Any, ...]]
    progress: Progress | None

    @property
    def aows(self) -> tuple[Any, ...]:
        return tuple(config.STRUCTURE_CHOICES["advance_on_wait"])

    @property
    def ctas(self) -> list[int]:
        return list(self.knobs["ctas_per_sm"])

    @property
    def stages_choices(self) -> list[int]:
        return list(self.knobs["stages"])

    def tick(self, what: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(what, done, total)


def copy_funnel(space: Any, problem: Problem, judge: Judge, progress: Progress | None) -> FunnelCount:
    """The copy space's funnel for ``problem`` (see the module doc), judged by ``judge``."""
    space.check(problem)
    knobs = {k.name: k.choices for k in space.raw_knobs(problem)}
    knobs["raster"] = config.STRUCTURE_CHOICES["raster"]
    legal = {t: space.legal_placements(t) for t in ("load", "store")}
    layouts = list(itertools.product(*(knobs[g] for g in config.LAYOUT_GENES)))
    setting = _FunnelSetting(space, problem, judge, knobs, legal, layouts, progress)
    n_other = {False: 0, True: 0}  # O combinations per persistence (ctas_per_sm 0 vs > 0)
    for persistent in (False, True):
        n_ctas = sum(1 for c in setting.ctas if (c > 0) == persistent)
        n_other[persistent] = n_ctas * math.prod(len(knobs[g]) for g in OTHER_GENES)

    alive = _placement_screen(setting)
    layout_ok = _layout_screen(setting)
    ts_valid_schedules = _joint_schedules(setting, alive)

    # Counts. Each schedule S pairs with every layout and every O of its persistence.
    ts_valid = sum(len(layout_ok) * n_other[s[3]] for s in ts_valid_schedules)
    raw = (
        space.placement_count("load")
        * space.placement_count("store")
        * space.numeric_count(problem)
    )
    legal_n = len(legal["load"]) * len(legal["store"]) * space.numeric_count(problem)
    checked = _tsopt_checked(setting, ts_valid_schedules, layout_ok)
    draw, predicted = _assumption_tests(setting, ts_valid_schedules, layout_ok)
    return FunnelCount(
        raw,
        legal_n,
        ts_valid,
        checked,
        method="factorised verification (search_spaces/copy/funnel.py)",
        draw=draw,
        predicted=predicted,
    )


def _placement_screen(setting: _FunnelSetting) -> dict[tuple[str, bool], list[Any]]:
    """1. Per-task screen: each legal placement next to the canonical partner."""
    alive: dict[tuple[str, bool], list[Any]] = {}
    legal = setting.legal
    total = 2 * len(setting.aows) * (len(legal["load"]) + len(legal["store"]))
    done = 0
    for aow in setting.aows:
        for task in ("load", "store"):
            keep = []
            for placement in legal[task]:
                genome = setting.space.genome(**{task: placement}, advance_on_wait=aow)
                verdict = setting.judge(genome, setting.problem)
                done += 1
                setting.tick("screening placements", done, total)
                if _ts_ok(verdict) or verdict.rule in JOINT_RULES:
                    keep.append(placement)
            alive[(task, aow)] = keep
    return alive


def _layout_screen(setting: _FunnelSetting) -> list[dict[str, Any]]:
    """2. Layout screen: every warp/register layout with the canonical schedule."""
    layout_ok = []
    for i, values in enumerate(setting.layouts):
        genes = dict(zip(config.LAYOUT_GENES, values, strict=True))
        verdict = setting.judge(setting.space.genome(**genes), setting.problem)
        setting.tick("screening layouts", i + 1, len(setting.layouts))
        if _ts_ok(verdict):
            layout_ok.append(genes)
    return layout_ok


def _joint_schedules(setting: _FunnelSetting, alive: dict[tuple[str, bool], list[Any]]
                     ) -> list[tuple[Any, Any, bool, bool, int]]:
    """3. Joint schedules, non-persistent, verified exactly; persistence by assumption 3."""
    space, problem, judge = setting.space, setting.problem, setting.judge
    persistent_ok = {}
    for aow in setting.aows:
        for stages in setting.stages_choices:
            genome = space.genome(
                advance_on_wait=aow, persistent=True, ctas_per_sm=setting.ctas[-1], stages=stages
            )
            persistent_ok[(aow, stages)] = _ts_ok(judge(genome, problem))
    ts_valid_schedules: list[tuple[Any, Any, bool, bool, int]] = []
    joint_total = sum(len(alive[("load", a)]) * len(alive[("store", a)])
                      for a in setting.aows) * len(setting.stages_choices)
    done = 0
    for aow in setting.aows:
        for load in alive[("load", aow)]:
            for store in alive[("store", aow)]:
                for stages in setting.stages_choices:
                    verdict = judge(space.genome(load, store, advance_on_wait=aow, stages=stages), problem)
                    done += 1
                    setting.tick("verifying joint schedules", done, joint_total)
                    if _ts_ok(verdict):
                        ts_valid_schedules.append((load, store, aow, False, stages))
                        if persistent_ok[(aow, stages)]:
                            ts_valid_schedules.append((load, store, aow, True, stages))
    return ts_valid_schedules


def _tsopt_checked(setting: _FunnelSetting, ts_valid_schedules: list[tuple[Any, ...]],
                   layout_ok: list[dict[str, Any]]) -> int:
    """4. tsopt's checks over S-groups x layouts x O (they only see these fields)."""
    space, problem, knobs = setting.space, setting.problem, setting.knobs
    groups: Counter[tuple[Any, ...]] = Counter()
    for load, store, aow, persistent, stages in ts_valid_schedules:
        probe = space.genome(load, store, advance_on_wait=aow, stages=stages)
        cfg = config.config_of(probe, problem)
        identity = [f for f in copy_checks(cfg) if f.rule == "tsopt.stage_identity"]
        if identity:
            continue
        groups[(load[1], store[1], persistent, stages)] += 1
    # Only the domain rule (head depth < chunk) ties a schedule's placement to O, so the
    # other checks are counted once per (stages, persistence, chunk) and reused.
    base = config.config_of(space.genome(), problem)
    passing: Counter[tuple[int, bool, int]] = Counter()
    for stages, persistent in itertools.product(setting.stages_choices, (False, True)):
        setting.tick("tsopt checks", 0, 0)
        for genes in layout_ok:
            for values in itertools.product(*(knobs[g] for g in OTHER_GENES)):
                other = dict(zip(OTHER_GENES, values, strict=True))
                for c in (c for c in setting.ctas if (c > 0) == persistent):
                    cfg = dataclasses.replace(
                        base, **genes, **other, persistent=persistent, stages=stages, ctas_per_sm=c
                    )
                    if not copy_checks(cfg):
                        passing[(stages, persistent, other["chunk"])] += 1
    checked = 0
    for (load_depth, store_depth, persistent, stages), count in groups.items():
        for chunk in knobs["chunk"]:
            if chunk > max(load_depth, store_depth):
                checked += count * passing[(stages, persistent, chunk)]
    return checked


def _assumption_tests(setting: _FunnelSetting, ts_valid_schedules: list[tuple[Any, ...]],
                      layout_ok: list[dict[str, Any]]) -> tuple[Any, Any]:
    """5. Test the assumptions on random genomes verified in full: a draw and the
    factorisation's prediction of its verdict."""
    space, problem, legal, aows = setting.space, setting.problem, setting.legal, setting.aows
    valid_keys = {(s[0], s[1], s[2], s[3], s[4]) for s in ts_valid_schedules}
    layout_keys = {tuple(g[k] for k in config.LAYOUT_GENES) for g in layout_ok}

    def draw(rng: random.Random) -> Genome:
        aow = rng.choice(aows)
        # Half the draws from the surviving schedules, so valid ones are tested too.
        if rng.random() < 0.5 and ts_valid_schedules:
            load, store, aow, persistent, stages = rng.choice(ts_valid_schedules)
        else:
            load, store = rng.choice(legal["load"]), rng.choice(legal["store"])
            persistent, stages = rng.choice((False, True)), rng.choice(setting.stages_choices)
        layout = rng.choice(
            layout_ok
            if rng.random() < 0.7 and layout_ok
            else [dict(zip(config.LAYOUT_GENES, v, strict=True)) for v in setting.layouts]
        )
        return space.genome(
            load,
            store,
            advance_on_wait=aow,
            persistent=persistent,
            ctas_per_sm=setting.ctas[-1] if persistent else 0,
            stages=stages,
            **layout,
        )

    def predicted(genome: Genome) -> bool:
        cfg = config.config_of(genome, problem)
        load = config.knobs_of_placement("load", cfg.load_ops)
        store = config.knobs_of_placement("store", cfg.store_ops)
        key = (load, store, cfg.advance_on_wait, cfg.persistent, cfg.stages)
        layout = tuple(genome[g] for g in config.LAYOUT_GENES)
        return key in valid_keys and layout in layout_keys

    return draw, predicted


# -- proposals drawn inside the legal set ---------------------------------------------------


def copy_factors(space: Any, problem: Problem, judge: Judge) -> tuple[Factor, ...]:
    """The funnel's factorisation as proposals use it (``SearchSpace.proposal_factors``), in
    the order a proposal is decided; TS verdicts from ``judge`` on the funnel's canonical
    genomes, memoised here per factor value:

    1. ``load``: advance_on_wait and the load placement next to the canonical store task;
    2. ``store``: the store placement next to the canonical load task, for that setting;
    3. ``depth``: stages and persistence for the two placements (the joint schedule; a
       persistent one iff the canonical schedule is valid persistent at those stages), and
       no stage-identity hazard;
    4. ``layout``: warps and registers with the canonical schedule (TS and the layout rules);
    5. ``rest``: every other knob (box, chunk, vector, raster, CTAs per SM, genes added
       later), given all the above: tsopt's checks pass on the genome itself.
    """
    knob_names = [k.name for k in space.knobs(problem)]
    decided = {"advance_on_wait", "load.placement", "store.placement", "stages", "persistent",
               "layout"}
    rest_knobs = tuple(n for n in knob_names if n not in decided)
    ctas = max(config.NUMERIC_CHOICES["ctas_per_sm"])
    memo: dict[Any, bool] = {}

    def remembered(key: Any, decide: Any) -> bool:
        if key not in memo:
            memo[key] = bool(decide())
        return memo[key]

    def task_ok(task: str, params: Any) -> bool:
        aow = bool(params["advance_on_wait"])
        placement = config.parse_placement_name(str(params[f"{task}.placement"]))

        def decide() -> bool:
            verdict = judge(space.genome(**{task: placement}, advance_on_wait=aow), problem)
            return _ts_ok(verdict) or verdict.rule in JOINT_RULES
        return remembered((task, aow, placement), decide)

    def depth_ok(params: Any) -> bool:
        aow, persistent, stages = (bool(params["advance_on_wait"]), bool(params["persistent"]),
                                   int(params["stages"]))
        load = config.parse_placement_name(str(params["load.placement"]))
        store = config.parse_placement_name(str(params["store.placement"]))

        def joint() -> bool:
            genome = space.genome(load, store, advance_on_wait=aow, stages=stages)
            if not _ts_ok(judge(genome, problem)):
                return False
            return not [f for f in copy_checks(config.config_of(genome, problem))
                        if f.rule == "tsopt.stage_identity"]

        def persistent_ok() -> bool:
            return _ts_ok(judge(space.genome(advance_on_wait=aow, persistent=True,
                                             ctas_per_sm=ctas, stages=stages), problem))
        return (remembered(("joint", load, store, aow, stages), joint)
                and (not persistent or remembered(("persistent", aow, stages), persistent_ok)))

    def layout_ok(params: Any) -> bool:
        genes = config.parse_layout_name(str(params["layout"]))

        def decide() -> bool:
            genome = space.genome(**genes)
            return _ts_ok(judge(genome, problem)) and not [
                f for f in copy_checks(config.config_of(genome, problem))
                if f.rule in LAYOUT_RULES]
        return remembered(("layout", str(params["layout"])), decide)

    def rest_ok(params: Any) -> bool:
        genome = proposal_genome(space, params)
        return not space.tsopt_checks(genome, problem)

    return (
        Factor("load", ("advance_on_wait", "load.placement"), lambda p: task_ok("load", p),
               "load placement next to the canonical store task (TS)"),
        Factor("store", ("store.placement",), lambda p: task_ok("store", p),
               "store placement next to the canonical load task (TS)"),
        Factor("depth", ("stages", "persistent"), depth_ok,
               "the joint schedule at these stages (TS), persistence, stage identity"),
        Factor("layout", ("layout",), layout_ok, "warps and registers (TS, layout rules)"),
        Factor("rest", rest_knobs, rest_ok, "tsopt's checks on the genome itself"),
    )


def proposal_genome(space: Any, params: Any) -> Genome:
    """The genome of sampler params, as ``suggest`` builds it (CTAs per SM only when
    persistent; when not asked yet, the least)."""
    values = dict(params)
    load = config.parse_placement_name(str(values.pop("load.placement")))
    store = config.parse_placement_name(str(values.pop("store.placement")))
    values.update(config.parse_layout_name(str(values.pop("layout"))))
    if values.get("persistent"):
        values.setdefault("ctas_per_sm", min(c for c in config.NUMERIC_CHOICES["ctas_per_sm"]
                                             if c > 0))
    else:
        values["ctas_per_sm"] = 0
    return space.genome(load, store, **values)
