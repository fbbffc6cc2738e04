"""The copy space's funnel, counted by factorised verification.

The copy genome factors into

- S, the schedule: load placement x store placement x advance_on_wait x
  persistent x stages (what the TS pipeline checks and the BFS see);
- L, the warp/register layout: store_warps, store_warp, load_warp, load_regs,
  store_regs (what the TS register and group rules see);
- O, the rest: box shape, chunk, CTAs per SM (only tsopt's checks see them).

Assumptions, each tested by :func:`tsopt.verify.funnel.check_factorisation` on
random genomes verified in full:

1. TS(S, L) = TS(S, L0) and TS(S0, L), for canonical S0, L0 that pass.
2. A placement rejected by a per-task rule (anything but a deadlock or a race)
   next to the canonical partner is rejected next to every partner.
3. A persistent schedule is TS-valid iff the same schedule without the tile
   loop is, and the canonical schedule is valid persistent at that
   (advance_on_wait, stages). (Persistent BFS runs cost ~50x more.)

Everything the TS verifier judges below is judged for real; only the
multiplication relies on the assumptions.
"""

import dataclasses
import itertools
import math
import random
import time
from collections import Counter
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.verify.funnel import Funnel, Judge, Progress, check_factorisation

JOINT_RULES = ("ts.deadlock", "ts.race")
OTHER_GENES = ("box_rows", "box_cols", "chunk", "vector", "raster")


def _ts_ok(verdict: Any) -> bool:
    return bool(verdict.valid or verdict.stage == "tsopt")


def copy_funnel(
    space: Any, problem: Problem, *, judge: Judge, progress: Progress | None, sample: int = 200
) -> Funnel:
    from tsopt.search_spaces.copy.space import (
        LAYOUT_GENES,
        STRUCTURE_CHOICES,
        config_of,
        copy_checks,
    )

    start = time.perf_counter()
    space.check(problem)
    knobs = {k.name: k.choices for k in space.raw_knobs(problem)}
    knobs["raster"] = STRUCTURE_CHOICES["raster"]
    legal = {t: space.legal_placements(t) for t in ("load", "store")}
    n_other = {False: 0, True: 0}  # O combinations per persistence (ctas_per_sm 0 vs > 0)
    ctas = knobs["ctas_per_sm"]
    for persistent in (False, True):
        n_ctas = sum(1 for c in ctas if (c > 0) == persistent)
        n_other[persistent] = n_ctas * math.prod(len(knobs[g]) for g in OTHER_GENES)
    layouts = list(itertools.product(*(knobs[g] for g in LAYOUT_GENES)))
    n_layouts = len(layouts)
    stages_choices = knobs["stages"]
    aows = STRUCTURE_CHOICES["advance_on_wait"]

    def tick(what: str, done: int, total: int) -> None:
        if progress:
            progress(what, done, total)

    # 1. Per-task screen: each legal placement next to the canonical partner.
    alive: dict[tuple[str, bool], list[Any]] = {}
    total = 2 * len(aows) * (len(legal["load"]) + len(legal["store"]))
    done = 0
    for aow in aows:
        for task in ("load", "store"):
            keep = []
            for placement in legal[task]:
                genome = space.genome(**{task: placement}, advance_on_wait=aow)
                verdict = judge(genome)
                done += 1
                tick("screening placements", done, total)
                if _ts_ok(verdict) or verdict.rule in JOINT_RULES:
                    keep.append(placement)
            alive[(task, aow)] = keep

    # 2. Layout screen: every warp/register layout with the canonical schedule.
    layout_ok = []
    for i, values in enumerate(layouts):
        genes = dict(zip(LAYOUT_GENES, values, strict=True))
        verdict = judge(space.genome(**genes))
        tick("screening layouts", i + 1, n_layouts)
        if _ts_ok(verdict):
            layout_ok.append(genes)

    # 3. Joint schedules, non-persistent, verified exactly; persistence by assumption 3.
    persistent_ok = {}
    for aow in aows:
        for stages in stages_choices:
            genome = space.genome(
                advance_on_wait=aow, persistent=True, ctas_per_sm=ctas[-1], stages=stages
            )
            persistent_ok[(aow, stages)] = _ts_ok(judge(genome))
    ts_valid_schedules: list[tuple[Any, Any, bool, bool, int]] = []
    joint_total = sum(len(alive[("load", a)]) * len(alive[("store", a)]) for a in aows) * len(
        stages_choices
    )
    done = 0
    for aow in aows:
        for load in alive[("load", aow)]:
            for store in alive[("store", aow)]:
                for stages in stages_choices:
                    verdict = judge(space.genome(load, store, advance_on_wait=aow, stages=stages))
                    done += 1
                    tick("verifying joint schedules", done, joint_total)
                    if _ts_ok(verdict):
                        ts_valid_schedules.append((load, store, aow, False, stages))
                        if persistent_ok[(aow, stages)]:
                            ts_valid_schedules.append((load, store, aow, True, stages))

    # Counts. Each schedule S pairs with every layout and every O of its persistence.
    ts_valid = sum(len(layout_ok) * n_other[s[3]] for s in ts_valid_schedules)
    raw = (
        space.placement_count("load")
        * space.placement_count("store")
        * space.numeric_count(problem)
    )
    legal_n = len(legal["load"]) * len(legal["store"]) * space.numeric_count(problem)

    # 4. tsopt's checks over S-groups x layouts x O (they only see these fields).
    groups: Counter[tuple[Any, ...]] = Counter()
    for load, store, aow, persistent, stages in ts_valid_schedules:
        probe = space.genome(load, store, advance_on_wait=aow, stages=stages)
        cfg = config_of(probe, problem)
        identity = [f for f in copy_checks(cfg) if f.rule == "tsopt.stage_identity"]
        if identity:
            continue
        groups[(load[1], store[1], persistent, stages)] += 1
    # Only the domain rule (head depth < chunk) ties a schedule's placement to O, so the
    # other checks are counted once per (stages, persistence, chunk) and reused.
    base = config_of(space.genome(), problem)
    passing: Counter[tuple[int, bool, int]] = Counter()
    for stages, persistent in itertools.product(stages_choices, (False, True)):
        tick("tsopt checks", 0, 0)
        for genes in layout_ok:
            for values in itertools.product(*(knobs[g] for g in OTHER_GENES)):
                other = dict(zip(OTHER_GENES, values, strict=True))
                for c in (c for c in ctas if (c > 0) == persistent):
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

    # 5. Test the assumptions on random genomes verified in full.
    valid_keys = {(s[0], s[1], s[2], s[3], s[4]) for s in ts_valid_schedules}
    layout_keys = {tuple(g[k] for k in LAYOUT_GENES) for g in layout_ok}

    def draw(rng: random.Random) -> Genome:
        aow = rng.choice(aows)
        # Half the draws from the surviving schedules, so valid ones are tested too.
        if rng.random() < 0.5 and ts_valid_schedules:
            load, store, aow, persistent, stages = rng.choice(ts_valid_schedules)
        else:
            load, store = rng.choice(legal["load"]), rng.choice(legal["store"])
            persistent, stages = rng.choice((False, True)), rng.choice(stages_choices)
        layout = rng.choice(
            layout_ok
            if rng.random() < 0.7 and layout_ok
            else [dict(zip(LAYOUT_GENES, v, strict=True)) for v in layouts]
        )
        return space.genome(
            load,
            store,
            advance_on_wait=aow,
            persistent=persistent,
            ctas_per_sm=ctas[-1] if persistent else 0,
            stages=stages,
            **layout,
        )

    def predicted(genome: Genome) -> bool:
        cfg = config_of(genome, problem)
        from tsopt.search_spaces.copy.space import knobs_of_placement

        load = knobs_of_placement(cfg.load_ops)
        store = knobs_of_placement(cfg.store_ops)
        key = (load, store, cfg.advance_on_wait, cfg.persistent, cfg.stages)
        layout = tuple(genome[g] for g in LAYOUT_GENES)
        return key in valid_keys and layout in layout_keys

    agreement = (
        check_factorisation(space, problem, draw, predicted, sample, progress=progress)
        if sample
        else 0
    )
    return Funnel(
        space.name,
        problem.key,
        raw,
        legal_n,
        ts_valid,
        checked,
        verifications=judge.calls,
        verify_seconds=judge.seconds,
        seconds=time.perf_counter() - start,
        method="factorised verification (search_spaces/_copy_funnel.py)",
        rejections=dict(judge.rejections),
        sample_size=sample,
        sample_agreement=agreement,
    )
