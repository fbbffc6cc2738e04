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
   L_DEPTH: L0 with stages small enough that the deepest pipeline fits); a persistent
   schedule is taken as valid iff the same schedule without
   the tile loop is and the canonical schedule is valid persistent at that
   (advance_on_wait, stages) (persistent BFS runs cost ~10-40x more);
4. TS's SMEM capacity check is the allocator's byte count, which
   ``GemmConfig.smem_bytes`` reproduces exactly (tested), so S x L x O is
   TS-valid iff S and L are and the SMEM fits.

Assumptions (TS(S, L) = TS(S, L0) and TS(S0, L); a placement rejected by a
per-task rule next to the canonical partner is rejected next to every
partner; the persistence rule) are tested on random genomes verified in full (the count's
``draw`` and ``predicted``, run by ``tsopt.verify.funnel.check_factorisation``), and the
agreement is recorded in the funnel.
tsopt's checks are then counted over the TS-valid S x L x O: the asynchronous-
consumer replay once per schedule, the resource checks once per (L, O) group.

Every verdict comes from the ``judge`` the caller injects. The sampler's screen
(:func:`screen_placements`) is step 1 kept: the placements that the verifier accepts
next to the canonical partner, shipped in ``data/gemm_screened.json``.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Verdict
from tsopt.core.space import Factor, FunnelCount, Judge, Progress
from tsopt.search_spaces.common import screen_cache
from tsopt.search_spaces.common.placement import PLACEMENT_RULES
from tsopt.search_spaces.common.screen_cache import ScreenKey, sources_digest
from tsopt.search_spaces.gemm import checks
from tsopt.search_spaces.gemm.checks import async_consumer_findings, gemm_checks
from tsopt.search_spaces.gemm.config import (
    CANONICAL_BODY,
    DEFERRABLE,
    DRAINS,
    HEAD_DEPTHS,
    NUMERIC_CHOICES,
    PENDING,
    SEED_GENES,
    SEED_PLACEMENT,
    SMEM_CAPACITY,
    SPACE,
    STRUCTURE_CHOICES,
    TASK_OPS,
    GemmConfig,
    LoadKey,
    MmaKey,
    load_key,
    load_placement,
    mma_key,
    mma_placement,
    parse_cluster,
    parse_placement_name,
)

JOINT_RULES = ("ts.deadlock", "ts.race")
LAYOUT_GENES = ("consumers", "arrangement", "producer_wg", "load_warp", "producer_regs",
                "consumer_regs", "cluster")
L0 = {"consumers": 1, "tile_n": 128}
"""The cheap canonical layout for schedule screens (one consumer warpgroup, 128x128 tiles)."""
L_DEPTH = {**L0, "tile_m": 64, "tile_k": 32}
"""L0 with stages small enough (64x128x32: 12 KiB) that the deepest pipeline of the choices
fits in SMEM, for the joint schedule at each stage count. TS sees tiles only through the SMEM
size, so a schedule is judged here, and whether a genome's own stages fit is its SMEM
check's to say (the ``rest`` factor). In L0 (32 KiB a stage) 8 stages or more never fit, and
the legal set held no schedule deeper than 7 stages: found on the H200 (issue #12), where
64x4096x4096's fastest kernel, 64x32 tiles with 16 stages, was never proposed."""
LAYOUT_SCREEN_O = {"tile_n": 128, "stages": 3}
"""Tiles and stages of the layout screen: small enough that every arrangement's SMEM fits, so
the screen sees the layout's own rules (TS sees O and stages only through the SMEM size)."""
CANONICAL_LOAD: LoadKey = (CANONICAL_BODY["load"], 0, "none")
CANONICAL_MMA: dict[bool, MmaKey] = {
    # With advance_on_wait one batch stays in flight; without it the consumer can hold only
    # one stage, so its canonical schedule retires every batch before the release.
    True: (CANONICAL_BODY["mma"], 1, "release", 1, "tail"),
    False: (CANONICAL_BODY["mma"], 0, "none", 0, "none"),
}


SCREEN_PROBLEM = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
"""The problem the sampler's screen is judged for."""


def _ts_ok(verdict: Verdict) -> bool:
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
            load: LoadKey = CANONICAL_LOAD, mma: MmaKey | None = None) -> GemmConfig:
    """A GemmConfig straight from gene values (no genome: the funnel builds millions)."""
    values = {**SEED_GENES, **genes}
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


Schedule = tuple[Any, Any, bool, bool, int]
"""(load key, mma key, advance_on_wait, persistent, stages): one TS-valid S."""


class _Funnel:
    """One funnel count of the GEMM space for ``problem``: each step of the module doc as a
    method, every verdict from ``judge``."""

    def __init__(self, space: Any, problem: Problem, judge: Judge,
                 progress: Progress | None) -> None:
        space.check(problem)
        self.space, self.problem, self.judge, self.progress = space, problem, judge, progress
        self.mnk = (problem["m"], problem["n"], problem["k"])
        self.aows = _choices("advance_on_wait")
        self.stages = _choices("stages")
        self.legal = {"load": space.legal_placements("load"),
                      "mma": space.legal_placements("mma")}
        self.others = {p: _others(p) for p in (False, True)}

    def tick(self, what: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(what, done, total)

    def screen_tasks(self) -> dict[tuple[str, bool], list[Any]]:
        """1. Each legal placement next to the canonical partner, layout L0."""
        alive: dict[tuple[str, bool], list[Any]] = {}
        total = len(self.aows) * (len(self.legal["load"]) + len(self.legal["mma"]))
        done = 0
        for aow in self.aows:
            for task in ("load", "mma"):
                keep = []
                for key in self.legal[task]:
                    genome = self.space.genome(**{task: key}, **_partner(task, aow),
                                               advance_on_wait=aow, **L0)
                    verdict = self.judge(genome, self.problem)
                    done += 1
                    self.tick("screening placements", done, total)
                    if _ts_ok(verdict) or verdict.rule in JOINT_RULES:
                        keep.append(key)
                alive[(task, aow)] = keep
        return alive

    def screen_layouts(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """2. Every warp/register/cluster layout with the canonical schedule: (all, valid)."""
        layouts = [dict(zip(LAYOUT_GENES, v, strict=True))
                   for v in itertools.product(*(_choices(g) for g in LAYOUT_GENES))]
        layout_ok = []
        for i, genes in enumerate(layouts):
            if _ts_ok(self.judge(self.space.genome(**genes, **LAYOUT_SCREEN_O), self.problem)):
                layout_ok.append(genes)
            self.tick("screening layouts", i + 1, len(layouts))
        return layouts, layout_ok

    def joint_schedules(self, alive: dict[tuple[str, bool], list[Any]]) -> list[Schedule]:
        """3. Joint schedules (non-persistent, L_DEPTH) at every stage count; persistence by
        rule."""
        persistent_ok = {}
        for aow in self.aows:
            for stages in self.stages:
                genome = self.space.genome(advance_on_wait=aow, persistent=True, stages=stages,
                                           mma=CANONICAL_MMA[aow], **L_DEPTH)
                persistent_ok[(aow, stages)] = _ts_ok(self.judge(genome, self.problem))
        schedules: list[Schedule] = []
        total = sum(len(alive[("load", a)]) * len(alive[("mma", a)]) for a in self.aows)
        total *= len(self.stages)
        done = 0
        for aow in self.aows:
            for load, mma in itertools.product(alive[("load", aow)], alive[("mma", aow)]):
                for stages in self.stages:
                    verdict = self.judge(self.space.genome(
                        load=load, mma=mma, advance_on_wait=aow, stages=stages, **L_DEPTH),
                        self.problem)
                    done += 1
                    self.tick("verifying joint schedules", done, total)
                    if _ts_ok(verdict):
                        schedules.append((load, mma, aow, False, stages))
                        if persistent_ok[(aow, stages)]:
                            schedules.append((load, mma, aow, True, stages))
        return schedules

    def smem_fits(self, layout_ok: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
        """The O whose SMEM fits, per (persistent, stages, SMEM class of the layout)."""
        classes = sorted({_smem_class(layout) for layout in layout_ok})
        return {(p, st, c): [o for o in self.others[p] if _smem_fits(st, o, self.problem.dtype, c)]
                for p in (False, True) for st in self.stages for c in classes}

    def tsopt_checked(self, schedules: list[Schedule], layout_ok: list[dict[str, Any]],
                      fits: dict[Any, list[dict[str, Any]]]) -> int:
        """4. tsopt's checks: the schedule hazards once per S, the resource rules per (L, O)."""
        lo_pass: dict[tuple[bool, int, int], int] = {}
        checked = 0
        dtype = self.problem.dtype
        for si, (load, mma, aow, persistent, stages) in enumerate(schedules):
            self.tick("tsopt checks", si + 1, len(schedules))
            probe = _config({"advance_on_wait": aow, "persistent": persistent, "stages": stages},
                            dtype, self.mnk, load, mma)
            if async_consumer_findings(probe, probe.k_tiles) or any(
                    f.rule == "tsopt.stage_identity" for f in gemm_checks(probe)):
                continue
            key = (persistent, stages, max(probe.prefetch, probe.inflight))
            if key not in lo_pass:
                lo_pass[key] = sum(
                    1 for layout in layout_ok
                    for other in fits[(persistent, stages, _smem_class(layout))]
                    if not _resource_findings(
                        {**layout, **other, "persistent": persistent, "stages": stages,
                         "advance_on_wait": aow}, dtype, self.mnk, load, mma))
            checked += lo_pass[key]
        return checked

    def draw_and_predict(self, schedules: list[Schedule], layouts: list[dict[str, Any]],
                         layout_ok: list[dict[str, Any]]) -> tuple[Any, Any]:
        """5. A random genome of the space, and whether the factorisation says it is valid:
        the pair that tests the factorisation against full verification."""
        space, problem, legal = self.space, self.problem, self.legal
        valid_keys = set(schedules)
        layout_keys = {tuple(g[k] for k in LAYOUT_GENES) for g in layout_ok}

        def draw(rng: random.Random) -> Genome:
            if rng.random() < 0.5 and schedules:
                load, mma, aow, persistent, stages = rng.choice(schedules)
            else:
                aow = rng.choice(self.aows)
                load, mma = rng.choice(legal["load"]), rng.choice(legal["mma"])
                persistent, stages = rng.random() < 0.2, rng.choice(self.stages)
            pool = layout_ok if rng.random() < 0.7 and layout_ok else layouts
            layout = dict(rng.choice(pool))
            if persistent or rng.random() < 0.5:  # persistent BFS runs are the slow ones
                layout.update(consumers=1, arrangement="cooperative")
            other = rng.choice(self.others[persistent])
            return space.genome(load=load, mma=mma, advance_on_wait=aow, persistent=persistent,
                                stages=stages, **layout, **other)

        def predicted(genome: Genome) -> bool:
            cfg = space.config(genome, problem)
            key = (load_key(cfg.load_ops), mma_key(cfg.mma_ops), cfg.advance_on_wait,
                   cfg.persistent, cfg.stages)
            layout = tuple(genome[g] for g in LAYOUT_GENES)
            return key in valid_keys and layout in layout_keys and cfg.smem_bytes <= SMEM_CAPACITY

        return draw, predicted


def gemm_funnel(space: Any, problem: Problem, judge: Judge, progress: Progress | None) -> FunnelCount:
    """The GEMM space's funnel for ``problem`` (see the module doc), judged by ``judge``."""
    run = _Funnel(space, problem, judge, progress)
    alive = run.screen_tasks()
    layouts, layout_ok = run.screen_layouts()
    schedules = run.joint_schedules(alive)
    # Each TS-valid S pairs with every TS-valid L and every O whose SMEM fits (the SMEM size
    # depends on S's stages, O's tiles and epilogue, L's warpgroup arrangement).
    fits = run.smem_fits(layout_ok)
    ts_valid = sum(len(fits[(s[3], s[4], _smem_class(layout))])
                   for s in schedules for layout in layout_ok)
    raw = space.placement_count("load") * space.placement_count("mma") * space.gene_count()
    legal_n = len(run.legal["load"]) * len(run.legal["mma"]) * space.gene_count()
    checked = run.tsopt_checked(schedules, layout_ok, fits)
    draw, predicted = run.draw_and_predict(schedules, layouts, layout_ok)
    return FunnelCount(raw, legal_n, ts_valid, checked,
                       method="factorised verification (search_spaces/gemm/funnel.py)",
                       draw=draw, predicted=predicted)


def _partner(task: str, aow: bool) -> dict[str, Any]:
    """The canonical placement of the *other* task."""
    return {"mma": CANONICAL_MMA[aow]} if task == "load" else {"load": CANONICAL_LOAD}


def _resource_findings(genes: dict[str, Any], dtype: str, mnk: tuple[int, int, int],
                       load: LoadKey, mma: MmaKey) -> list[Any]:
    cfg = _config(genes, dtype, mnk, load, mma)
    skip = ("tsopt.async_release", "tsopt.stage_identity", "tsopt.async_acc_read")
    return [f for f in gemm_checks(cfg, k_tiles=0) if f.rule not in skip]


# -- the sampler's screen ------------------------------------------------------------------


def screen_placements(space: Any, judge: Judge, progress: Progress | None = None) -> dict[str, list[Any]]:
    """Each task's dataflow-legal placements that the verifier accepts next to the canonical
    partner for some ``advance_on_wait``, in the cheap layout L0 (the funnel's step 1, kept
    for the sampler: ~40,000 verifier calls)."""
    kept: dict[str, list[Any]] = {}
    for task in TASK_OPS:
        keys = space.legal_placements(task)
        keep = []
        for i, key in enumerate(keys):
            for aow in (True, False):
                genome = space.genome(**{task: key}, **_partner(task, aow), advance_on_wait=aow, **L0)
                if judge(genome, SCREEN_PROBLEM).valid:
                    keep.append(key)
                    break
            if progress:
                progress(f"screening {task} placements", i + 1, len(keys))
        kept[task] = keep
    return kept


_TEMPLATE: dict[type, str] = {}


def _template_digest(space: Any) -> str:
    """The screen key's sources digest, once per process (source files do not change under a
    running process, and reading them costs ~10 ms a call)."""
    kind = type(space)
    if kind not in _TEMPLATE:
        _TEMPLATE[kind] = sources_digest(space.source_digest(), checks, *PLACEMENT_RULES, load_placement,
                                          mma_placement, screen_placements)
    return _TEMPLATE[kind]


def screen_key(space: Any) -> ScreenKey:
    """What the screen's verdicts depend on: the kernel and genome mapping
    (``space.source_digest()``), tsopt's checks, the placement rules, the screening code;
    the installed DSL; the problem, the canonical partners and layout, the choices screened."""
    template = _template_digest(space)
    params = {
        "problem": SCREEN_PROBLEM.key,
        "seed": {**SEED_GENES, **SEED_PLACEMENT},
        "layout": L0,
        "partners": {"load": CANONICAL_LOAD, "mma": {str(aow): key for aow, key in CANONICAL_MMA.items()}},
        "ops": TASK_OPS,
        "head_depths": HEAD_DEPTHS,
        "deferrable": DEFERRABLE,
        "pending": PENDING,
        "drains": DRAINS,
    }
    return screen_cache.screen_key(SPACE, template, params)


# -- proposals drawn inside the legal set ---------------------------------------------------

LAYOUT_TSOPT_RULES = ("tsopt.arrangement", "tsopt.cluster_size")
"""tsopt's rules that judge the layout alone (warpgroups and their arrangement, the cluster)."""
PLACEMENT_FACTOR_KNOBS = {"load": ("advance_on_wait", "load.placement"), "mma": ("mma.placement",)}
DEPTH_KNOBS = ("stages", "persistent")


def gemm_factors(space: Any, problem: Problem, judge: Judge) -> tuple[Factor, ...]:
    """The funnel's factorisation as proposals use it (``SearchSpace.proposal_factors``), in
    the order a proposal is decided; every TS verdict from ``judge`` on the funnel's cheap
    canonical genomes, memoised here per factor value:

    1. ``load``: advance_on_wait and the producer placement, next to the canonical consumer
       (funnel step 1, layout L0);
    2. ``mma``: the consumer placement next to the canonical producer, for that
       advance_on_wait;
    3. ``depth``: stages and persistence for the two placements (step 3: the joint schedule
       at L_DEPTH; persistent iff the canonical schedule is valid persistent there), and no
       schedule hazard of tsopt's (stage identity, asynchronous consumer);
    4. ``layout``: warps, registers and cluster with the canonical schedule (step 2);
    5. ``rest``: every other knob (tiles, epilogue, raster, swizzle, genes added later),
       given all the above: the genome's SMEM fits and tsopt's checks pass on it.
    """
    judges = _FactorJudges(space, problem, judge)
    return (
        Factor("load", PLACEMENT_FACTOR_KNOBS["load"], lambda p: judges.task_ok("load", p),
               "producer placement next to the canonical consumer (TS at L0)"),
        Factor("mma", PLACEMENT_FACTOR_KNOBS["mma"], lambda p: judges.task_ok("mma", p),
               "consumer placement next to the canonical producer (TS at L0)"),
        Factor("depth", DEPTH_KNOBS, judges.depth_ok,
               "the joint schedule at these stages (TS at L_DEPTH), persistence, schedule hazards"),
        Factor("layout", judges.layout_knobs, judges.layout_ok,
               "warps, registers, cluster (TS with S0)"),
        Factor("rest", judges.rest_knobs, judges.rest_ok,
               "SMEM and tsopt's checks on the genome itself"),
    )


class _FactorJudges:
    """Each factor's ``legal(params)`` of :func:`gemm_factors`, the verdicts memoised per
    factor value."""

    def __init__(self, space: Any, problem: Problem, judge: Judge) -> None:
        self.space, self.problem, self.judge = space, problem, judge
        knob_names = [k.name for k in space.knobs(problem)]
        self.layout_knobs = tuple(g for g in LAYOUT_GENES if g in knob_names)
        decided = {*PLACEMENT_FACTOR_KNOBS["load"], *PLACEMENT_FACTOR_KNOBS["mma"],
                   *DEPTH_KNOBS, *self.layout_knobs}
        self.rest_knobs = tuple(n for n in knob_names if n not in decided)
        self.memo: dict[Any, bool] = {}

    def remembered(self, key: Any, decide: Any) -> bool:
        if key not in self.memo:
            self.memo[key] = bool(decide())
        return self.memo[key]

    @staticmethod
    def placement(params: Any, task: str) -> Any:
        return parse_placement_name(task, str(params[f"{task}.placement"]))

    def task_ok(self, task: str, params: Any) -> bool:
        aow = bool(params["advance_on_wait"])
        key = self.placement(params, task)

        def decide() -> bool:
            verdict = self.judge(self.space.genome(**{task: key}, **_partner(task, aow),
                                                   advance_on_wait=aow, **L0), self.problem)
            return _ts_ok(verdict) or verdict.rule in JOINT_RULES
        return self.remembered((task, aow, key), decide)

    def depth_ok(self, params: Any) -> bool:
        space, problem = self.space, self.problem
        aow, persistent, stages = (bool(params["advance_on_wait"]), bool(params["persistent"]),
                                   int(params["stages"]))
        load, mma = self.placement(params, "load"), self.placement(params, "mma")

        def joint() -> bool:
            genome = space.genome(load=load, mma=mma, advance_on_wait=aow, stages=stages,
                                  **L_DEPTH)
            if not _ts_ok(self.judge(genome, problem)):
                return False
            cfg = space.config(space.genome(load=load, mma=mma, advance_on_wait=aow,
                                            stages=stages, persistent=persistent), problem)
            return not (async_consumer_findings(cfg, cfg.k_tiles) or any(
                f.rule == "tsopt.stage_identity" for f in gemm_checks(cfg)))

        def persistent_ok() -> bool:
            return _ts_ok(self.judge(space.genome(advance_on_wait=aow, persistent=True,
                                                  stages=stages, mma=CANONICAL_MMA[aow],
                                                  **L_DEPTH), problem))
        return (self.remembered(("joint", load, mma, aow, stages, persistent), joint)
                and (not persistent or self.remembered(("persistent", aow, stages),
                                                       persistent_ok)))

    def layout_ok(self, params: Any) -> bool:
        genes = {g: params[g] for g in self.layout_knobs}

        def decide() -> bool:
            genome = self.space.genome(**genes, **LAYOUT_SCREEN_O)
            verdict = self.judge(genome, self.problem)
            if verdict.stage == "tsopt":  # only the rules no tile or schedule can change
                findings = self.space.tsopt_checks(genome, self.problem)
                return not any(f.rule in LAYOUT_TSOPT_RULES for f in findings)
            return _ts_ok(verdict)
        return self.remembered(("layout", tuple(genes.items())), decide)

    def rest_ok(self, params: Any) -> bool:
        genome = proposal_genome(self.space, params)
        cfg = self.space.config(genome, self.problem)
        return cfg.smem_bytes <= SMEM_CAPACITY and not self.space.tsopt_checks(genome,
                                                                                self.problem)


def proposal_genome(space: Any, params: Any) -> Genome:
    """The genome of sampler params (as ``suggest`` builds it; conditional knobs not asked
    keep the seed's values)."""
    values = dict(params)
    load = parse_placement_name("load", str(values.pop("load.placement")))
    mma = parse_placement_name("mma", str(values.pop("mma.placement")))
    return space.genome(load=load, mma=mma, **values)
