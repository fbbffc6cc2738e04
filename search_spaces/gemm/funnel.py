"""The GEMM space's funnel, counted by factorised verification.

The raw space (5e13 genomes) cannot be verified one genome at a time, so the
genome is factored into

- S, the schedule: load placement x mma placement x advance_on_wait x
  persistent x stages (what the TS pipeline checks and the BFS see);
- L, the warp/register layout: consumers and their arrangement, producer_wg,
  load_warp, producer_regs, consumer_regs, cluster (what the TS register,
  warpgroup and cooperative-group rules see);
- O, the rest: tile shape, raster order, swizzle, epilogue. TS sees O only
  through the SMEM size (with the stage count and the arrangement: separate
  warpgroups have a pipeline each); tsopt's checks see all of it.

The TS verifier judges every factor for real:

1. each dataflow-legal placement next to a canonical partner that passes
   (per ``advance_on_wait``), in the one-consumer layout L0 whose BFS is ~20x
   cheaper than the two-warpgroup one;
2. every layout with the canonical schedule S0;
3. every pair of surviving placements at every stage count (non-persistent,
   L0); a persistent schedule is taken as valid iff the same schedule without
   the tile loop is and the canonical schedule is valid persistent at that
   (advance_on_wait, stages) (persistent BFS runs cost ~10-40x more);
4. TS's SMEM capacity check is the allocator's byte count, which
   ``GemmConfig.smem_bytes`` reproduces exactly (tested), so S x L x O is
   TS-valid iff S and L are and the SMEM fits.

Assumptions (TS(S, L) = TS(S, L0) and TS(S0, L); a placement rejected by a
per-task rule next to the canonical partner is rejected next to every
partner; the persistence rule) are tested by :func:`tsopt.verify.funnel.check_factorisation`
on random genomes verified in full, and the agreement is recorded in the funnel.
tsopt's checks are then counted over the TS-valid S x L x O: the asynchronous-
consumer replay once per schedule, the resource checks once per (L, O) group.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.search_spaces.gemm import layout as S
from tsopt.search_spaces.gemm.checks import async_consumer_findings, gemm_checks
from tsopt.search_spaces.gemm.config import (
    BODIES,
    CANONICAL_BODY,
    DEFERRABLE,
    DRAINS,
    HEAD_DEPTHS,
    NUMERIC_CHOICES,
    PENDING,
    SMEM_CAPACITY,
    STRUCTURE_CHOICES,
    GemmConfig,
    load_placement,
    mma_placement,
    parse_cluster,
)
from tsopt.verify.funnel import Funnel, Judge, Progress, check_factorisation

JOINT_RULES = ("ts.deadlock", "ts.race")
LAYOUT_GENES = ("consumers", "arrangement", "producer_wg", "load_warp", "producer_regs",
                "consumer_regs", "cluster")
L0 = {"consumers": 1, "tile_n": 128}
"""The cheap canonical layout for schedule screens (one consumer warpgroup, 128x128 tiles)."""
LAYOUT_SCREEN_O = {"tile_n": 128, "stages": 3}
"""Tiles and stages of the layout screen: small enough that every arrangement's SMEM fits, so
the screen sees the layout's own rules (TS sees O and stages only through the SMEM size)."""
CANONICAL_LOAD: S.LoadKey = (CANONICAL_BODY["load"], 0, "none")
CANONICAL_MMA: dict[bool, S.MmaKey] = {
    # With advance_on_wait one batch stays in flight; without it the consumer can hold only
    # one stage, so its canonical schedule retires every batch before the release.
    True: (CANONICAL_BODY["mma"], 1, "release", 1, "tail"),
    False: (CANONICAL_BODY["mma"], 0, "none", 0, "none"),
}


def _ts_ok(verdict: Any) -> bool:
    return bool(verdict.valid or verdict.stage == "tsopt")


def _choices(name: str) -> tuple[Any, ...]:
    if name in NUMERIC_CHOICES:
        return NUMERIC_CHOICES[name]
    return STRUCTURE_CHOICES[name]


def _others(persistent: bool) -> list[dict[str, Any]]:
    """Every O (tile shape, raster, swizzle, epilogue) consistent with ``persistent``."""
    rasters = _choices("raster") if persistent else ("m",)
    swizzles = _choices("swizzle") if persistent else (1,)
    out = []
    for tm, tn, tk, r, sw, epi in itertools.product(
        _choices("tile_m"), _choices("tile_n"), _choices("tile_k"), rasters, swizzles,
        _choices("epilogue"),
    ):
        out.append({"tile_m": tm, "tile_n": tn, "tile_k": tk, "raster": r, "swizzle": sw,
                    "epilogue": epi})
    return out


SMEM_LAYOUT_GENES = ("consumers", "arrangement")
"""The layout genes the SMEM size depends on (pipelines and epilogue buffers)."""


def _smem_class(layout: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(layout[g] for g in SMEM_LAYOUT_GENES)


def _smem_fits(stages: int, other: dict[str, Any], dtype: str, smem_class: tuple[Any, ...]) -> bool:
    cfg = _config({"stages": stages, **other, **dict(zip(SMEM_LAYOUT_GENES, smem_class,
                                                        strict=True))}, dtype, (8, 8, 8))
    return cfg.smem_bytes <= SMEM_CAPACITY


def _config(genes: dict[str, Any], dtype: str, mnk: tuple[int, int, int],
            load: S.LoadKey = CANONICAL_LOAD, mma: S.MmaKey | None = None) -> GemmConfig:
    """A GemmConfig straight from gene values (no genome: the funnel builds millions)."""
    values = {**S.SEED_GENES, **genes}
    mma = mma if mma is not None else CANONICAL_MMA[bool(values["advance_on_wait"])]
    cm, cn = parse_cluster(str(values["cluster"]))
    return GemmConfig(
        dtype=dtype, m=mnk[0], n=mnk[1], k=mnk[2], tile_m=values["tile_m"],
        tile_n=values["tile_n"], tile_k=values["tile_k"], stages=values["stages"],
        consumers=values["consumers"], arrangement=values["arrangement"],
        producer_wg=values["producer_wg"],
        load_warp=values["load_warp"], producer_regs=values["producer_regs"],
        consumer_regs=values["consumer_regs"], cluster_m=cm, cluster_n=cn,
        raster=values["raster"], swizzle=values["swizzle"], persistent=values["persistent"],
        epilogue=values["epilogue"], advance_on_wait=values["advance_on_wait"],
        load_ops=load_placement(*load), mma_ops=mma_placement(*mma),
    )


def gemm_funnel(space: Any, problem: Problem, *, judge: Judge, progress: Progress | None,
                sample: int = 200) -> Funnel:
    start = time.perf_counter()
    space.check(problem)
    mnk = (problem["m"], problem["n"], problem["k"])
    aows = _choices("advance_on_wait")
    stages_choices = _choices("stages")
    legal = {"load": S.legal_load_keys(), "mma": S.legal_mma_keys()}

    def tick(what: str, done: int, total: int) -> None:
        if progress:
            progress(what, done, total)

    # 1. Per-task screen: each legal placement next to the canonical partner, layout L0.
    alive: dict[tuple[str, bool], list[Any]] = {}
    total = len(aows) * (len(legal["load"]) + len(legal["mma"]))
    done = 0
    for aow in aows:
        for task in ("load", "mma"):
            keep = []
            for key in legal[task]:
                genome = space.genome(**{task: key}, **_partner(task, aow),
                                      advance_on_wait=aow, **L0)
                verdict = judge(genome)
                done += 1
                tick("screening placements", done, total)
                if _ts_ok(verdict) or verdict.rule in JOINT_RULES:
                    keep.append(key)
            alive[(task, aow)] = keep

    # 2. Layout screen: every warp/register/cluster layout with the canonical schedule.
    layouts = [dict(zip(LAYOUT_GENES, v, strict=True))
               for v in itertools.product(*(_choices(g) for g in LAYOUT_GENES))]
    layout_ok = []
    for i, genes in enumerate(layouts):
        if _ts_ok(judge(space.genome(**genes, **LAYOUT_SCREEN_O))):
            layout_ok.append(genes)
        tick("screening layouts", i + 1, len(layouts))

    # 3. Joint schedules (non-persistent, L0) at every stage count; persistence by rule.
    persistent_ok = {}
    for aow in aows:
        for stages in stages_choices:
            genome = space.genome(advance_on_wait=aow, persistent=True, stages=stages,
                                  mma=CANONICAL_MMA[aow], **L0)
            persistent_ok[(aow, stages)] = _ts_ok(judge(genome))
    schedules: list[tuple[Any, Any, bool, bool, int]] = []
    joint_total = sum(len(alive[("load", a)]) * len(alive[("mma", a)]) for a in aows)
    joint_total *= len(stages_choices)
    done = 0
    for aow in aows:
        for load in alive[("load", aow)]:
            for mma in alive[("mma", aow)]:
                for stages in stages_choices:
                    verdict = judge(space.genome(load=load, mma=mma, advance_on_wait=aow,
                                                 stages=stages, **L0))
                    done += 1
                    tick("verifying joint schedules", done, joint_total)
                    if _ts_ok(verdict):
                        schedules.append((load, mma, aow, False, stages))
                        if persistent_ok[(aow, stages)]:
                            schedules.append((load, mma, aow, True, stages))

    # Counts. Each TS-valid S pairs with every TS-valid L and every O whose SMEM fits
    # (the SMEM size depends on S's stages, O's tiles and epilogue, L's warpgroup arrangement).
    others = {p: _others(p) for p in (False, True)}
    classes = sorted({_smem_class(layout) for layout in layout_ok})
    fits = {(p, st, c): [o for o in others[p] if _smem_fits(st, o, problem.dtype, c)]
            for p in (False, True) for st in stages_choices for c in classes}
    ts_valid = sum(len(fits[(s[3], s[4], _smem_class(layout))])
                   for s in schedules for layout in layout_ok)
    raw = S.placement_count("load") * S.placement_count("mma") * S.gene_count()
    legal_n = len(legal["load"]) * len(legal["mma"]) * S.gene_count()

    # 4. tsopt's checks: the schedule hazards once per S, the resource rules per (L, O).
    lo_pass: dict[tuple[bool, int, int], int] = {}
    checked = 0
    for si, (load, mma, aow, persistent, stages) in enumerate(schedules):
        tick("tsopt checks", si + 1, len(schedules))
        probe = _config({"advance_on_wait": aow, "persistent": persistent, "stages": stages},
                        problem.dtype, mnk, load, mma)
        if async_consumer_findings(probe, probe.k_tiles) or any(
                f.rule == "tsopt.stage_identity" for f in gemm_checks(probe)):
            continue
        depth = max(probe.prefetch, probe.inflight)
        key = (persistent, stages, depth)
        if key not in lo_pass:
            lo_pass[key] = sum(
                1 for layout in layout_ok
                for other in fits[(persistent, stages, _smem_class(layout))]
                if not _resource_findings(
                    {**layout, **other, "persistent": persistent, "stages": stages,
                     "advance_on_wait": aow},
                    problem.dtype, mnk, load, mma)
            )
        checked += lo_pass[key]

    # 5. Test the factorisation on random genomes verified in full.
    valid_keys = {(s[0], s[1], s[2], s[3], s[4]) for s in schedules}
    layout_keys = {tuple(g[k] for k in LAYOUT_GENES) for g in layout_ok}

    def draw(rng: random.Random) -> Genome:
        if rng.random() < 0.5 and schedules:
            load, mma, aow, persistent, stages = rng.choice(schedules)
        else:
            aow = rng.choice(aows)
            load, mma = rng.choice(legal["load"]), rng.choice(legal["mma"])
            persistent, stages = rng.random() < 0.2, rng.choice(stages_choices)
        pool = layout_ok if rng.random() < 0.7 and layout_ok else layouts
        layout = dict(rng.choice(pool))
        if persistent or rng.random() < 0.5:  # persistent BFS runs are the slow ones
            layout.update(consumers=1, arrangement="cooperative")
        other = rng.choice(others[persistent])
        return space.genome(load=load, mma=mma, advance_on_wait=aow, persistent=persistent,
                            stages=stages, **layout, **other)

    def predicted(genome: Genome) -> bool:
        cfg = space.config(genome, problem)
        key = (_load_key(cfg), _mma_key(cfg), cfg.advance_on_wait, cfg.persistent, cfg.stages)
        layout = tuple(genome[g] for g in LAYOUT_GENES)
        return key in valid_keys and layout in layout_keys and cfg.smem_bytes <= SMEM_CAPACITY

    agreement = (check_factorisation(space, problem, draw, predicted, sample, progress=progress)
                 if sample else 0)
    return Funnel(
        space.name, problem.key, raw, legal_n, ts_valid, checked,
        verifications=judge.calls, verify_seconds=judge.seconds,
        seconds=time.perf_counter() - start,
        method="factorised verification (search_spaces/_gemm_funnel.py)",
        rejections=dict(judge.rejections), sample_size=sample, sample_agreement=agreement,
    )


def _partner(task: str, aow: bool) -> dict[str, Any]:
    """The canonical placement of the *other* task."""
    return {"mma": CANONICAL_MMA[aow]} if task == "load" else {"load": CANONICAL_LOAD}


def _resource_findings(genes: dict[str, Any], dtype: str, mnk: tuple[int, int, int],
                       load: S.LoadKey, mma: S.MmaKey) -> list[Any]:
    cfg = _config(genes, dtype, mnk, load, mma)
    skip = ("tsopt.async_release", "tsopt.stage_identity", "tsopt.async_acc_read")
    return [f for f in gemm_checks(cfg, k_tiles=0) if f.rule not in skip]


def _load_key(cfg: GemmConfig) -> S.LoadKey | None:
    for key in _keys_with_body(cfg.load_ops, "load"):
        if load_placement(*key) == cfg.load_ops:
            return key
    return None


def _mma_key(cfg: GemmConfig) -> S.MmaKey | None:
    for key in _keys_with_body(cfg.mma_ops, "mma"):
        if mma_placement(*key) == cfg.mma_ops:
            return key
    return None


def _keys_with_body(ops: Any, task: str) -> list[Any]:
    """Every placement key whose loop body is the loop of ``ops``."""
    loop = tuple("wgmma_wait" if op.startswith("wgmma_wait") else op
                 for op, sec in ops if sec == "loop")
    if loop not in BODIES[task]:
        return []
    shapes = [(d, f) for d in HEAD_DEPTHS for f in (DEFERRABLE[task] if d else ("none",))]
    if task == "load":
        return [(loop, d, f) for d, f in shapes]
    return [(loop, d, f, p, dr) for d, f in shapes for p in PENDING for dr in DRAINS]

