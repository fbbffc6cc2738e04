"""Warm start: a new study begins with the best genomes of finished studies on nearby shapes.

"Nearby" is the distance between problem sizes on a log2 scale,
``sqrt(sum((log2 a_i - log2 b_i)^2))``: 4096x4096 and 4096x8192 are 1 apart,
4096x4096 and 8192x8192 1.41, 256x512 and 4096x4096 5.66. Only studies of the
same space, op, dtype and arch, marked ``finished``, within
:data:`MAX_DISTANCE`, count; the nearest :data:`STUDIES` of them give their
:data:`PER_STUDY` fastest correct genomes, at most :data:`LIMIT` in all.

Each genome is enqueued in the new Optuna study (``enqueue_trial``) with the
space's parameters for it (``SearchSpace.params_of``); a parameter whose value
is not among the new problem's (restricted) choices, e.g. a box that does not
divide the new shape, is left out and the sampler picks it. A genome whose
schedule the sampler cannot express (``params_of`` raises) is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store
    from tsopt.search.samplers import KnobView

MAX_DISTANCE = 4.0
STUDIES = 3
PER_STUDY = 3
LIMIT = 8


@dataclass(frozen=True)
class WarmStart:
    """A genome to start from: where it came from and how fast it was there."""

    genome: Genome
    study: str
    problem_key: str
    distance: float
    median_us: float


def shape_distance(a: Problem, b: Problem) -> float:
    """Log2 distance between the sizes of two problems of one op; inf across ops."""
    if a.op != b.op or list(a.sizes) != list(b.sizes):
        return math.inf
    return math.sqrt(sum((math.log2(a.sizes[n]) - math.log2(b.sizes[n])) ** 2 for n in a.sizes))


def nearby_best(store: Store, space: str, problem: Problem, arch: str, exclude: str,
                studies: int = STUDIES, per_study: int = PER_STUDY, limit: int = LIMIT,
                max_distance: float = MAX_DISTANCE,
                exclude_self: bool = False) -> list[WarmStart]:
    """The fastest correct genomes of the nearest finished studies (nearest first; ties by
    study name), one entry per genome; ``exclude_self``: no study of ``problem`` itself
    (leave-one-shape-out, ``tsopt tune --library-exclude-self``)."""
    near = []
    for info in store.list_studies():
        if (info.name == exclude or info.space != space or info.arch != arch
                or info.status != "finished" or info.problem.dtype != problem.dtype):
            continue
        if exclude_self and info.problem == problem:
            continue
        distance = shape_distance(info.problem, problem)
        if distance <= max_distance:
            near.append((distance, info.name, info.problem.key))
    picked: list[WarmStart] = []
    seen: set[str] = set()
    for distance, name, key in sorted(near)[:studies]:
        for ranked in store.ranked_on_card(name, limit=per_study):
            if ranked.genome_hash in seen:
                continue
            seen.add(ranked.genome_hash)
            picked.append(WarmStart(ranked.genome, name, key, distance, ranked.median_us))
    return picked[:limit]


def enqueue_genomes(study: Any, space: SearchSpace, view: KnobView,
                    genomes: Iterable[tuple[Genome, dict[str, Any]]],
                    origin: str = "warm_start") -> int:
    """Enqueue each genome as a trial (``origin``, plus its attributes); returns how many
    were. A genome the sampler cannot express is skipped."""
    done = 0
    for genome, attrs in genomes:
        try:
            params = space.params_of(genome)
        except (ValueError, KeyError):
            continue
        encoded = view.encode(params)
        if not encoded:
            continue
        study.enqueue_trial(encoded, user_attrs={"origin": origin, **attrs},
                            skip_if_exists=True)
        done += 1
    return done


def enqueue(study: Any, space: SearchSpace, view: KnobView, starts: list[WarmStart]) -> int:
    """Enqueue each start as a trial (origin ``warm_start``); returns how many were."""
    return enqueue_genomes(study, space, view, (
        (start.genome, {"warm_start_from": start.study, "warm_start_genome": start.genome.hash,
                        "warm_start_median_us": start.median_us})
        for start in starts))
