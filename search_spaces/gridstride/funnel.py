"""The gridstride space's funnel: raw -> dataflow-legal -> TS-valid -> tsopt-checked.

The genome factors into

- S, the schedule TS sees: the copy placement, the task's warps and the
  domain loop's unroll hint (the space's ``verdict_key``);
- O, the rest: vector width, loads per thread and the grid, which reach only
  tsopt's checks and the compiled kernel.

The judge (the verifier, handed in by the caller: a space does not import it)
judges every S for real, with the seed's O; tsopt's checks then run on every
TS-valid S x O. The one assumption, that TS's verdict does not depend on O, is
tested by the caller on random genomes verified in full (``draw`` and
``predicted`` of the returned count). The space is small enough that the tests
also compare this count with verifying every genome.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Verdict
from tsopt.core.space import FunnelCount, Judge, Progress
from tsopt.search_spaces.gridstride.checks import gridstride_checks, placement_dataflow_error
from tsopt.search_spaces.gridstride.config import (
    NUMERIC_CHOICES,
    TASK,
    config_of,
    make_genome,
    placement_keys,
    render_copy_placement,
)

SCHEDULE_GENES = ("warps", "loop_unroll")
OTHER_GENES = tuple(name for name in NUMERIC_CHOICES if name not in SCHEDULE_GENES)


def _ts_ok(verdict: Verdict) -> bool:
    """TS accepted it (tsopt's checks may still reject it)."""
    return verdict.valid or verdict.stage == "tsopt"


def gridstride_funnel(
    space: Any, problem: Problem, judge: Judge, progress: Progress | None = None
) -> FunnelCount:
    """The funnel for ``problem`` (see the module doc), judged by ``judge``."""
    space.check(problem)
    keys = placement_keys()
    legal = [key for key in keys if placement_dataflow_error(render_copy_placement(*key)) is None]
    schedules = list(itertools.product(legal, *(NUMERIC_CHOICES[g] for g in SCHEDULE_GENES)))
    others = [dict(zip(OTHER_GENES, values, strict=True))
              for values in itertools.product(*(NUMERIC_CHOICES[g] for g in OTHER_GENES))]
    numeric = math.prod(len(choices) for choices in NUMERIC_CHOICES.values())

    def tick(what: str, done: int, total: int) -> None:
        if progress:
            progress(what, done, total)

    # 1. TS judges every schedule, with the seed's other genes.
    ts_valid: set[tuple[Any, ...]] = set()
    for i, (key, *values) in enumerate(schedules):
        genes = dict(zip(SCHEDULE_GENES, values, strict=True))
        if _ts_ok(judge(make_genome(key, **genes), problem)):
            ts_valid.add((key, *values))
        tick("verifying schedules", i + 1, len(schedules))

    # 2. tsopt's checks on every TS-valid schedule with every other gene value.
    checked = 0
    for i, (key, *values) in enumerate(sorted(ts_valid)):
        genes = dict(zip(SCHEDULE_GENES, values, strict=True))
        for other in others:
            checked += not gridstride_checks(config_of(make_genome(key, **genes, **other), problem))
        tick("tsopt checks", i + 1, len(ts_valid))

    def draw(rng: random.Random) -> Genome:
        return make_genome(rng.choice(keys), **{g: rng.choice(c) for g, c in NUMERIC_CHOICES.items()})

    def predicted(genome: Genome) -> bool:
        placement = tuple((p.op, p.section) for p in genome.task(TASK).ops)
        key = next((k for k in keys if render_copy_placement(*k) == placement), None)
        return (key, *(genome[g] for g in SCHEDULE_GENES)) in ts_valid

    return FunnelCount(
        raw=len(keys) * numeric,
        dataflow_legal=len(legal) * numeric,
        ts_valid=len(ts_valid) * len(others),
        tsopt_checked=checked,
        method="every schedule (placement x warps x loop unroll) verified, tsopt's checks on "
               "every TS-valid genome (search_spaces/gridstride/funnel.py)",
        draw=draw,
        predicted=predicted,
    )
