"""Knob values <-> genomes for the Hopper TS GEMM space: knobs, seed, enumeration, sampling.

Plain Python over the kernel's configuration class (importing it loads the DSL,
but nothing here traces or builds a kernel): the funnel, the CLI listing and the
tests use it without constructing the template.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.space import Enumeration, Knob
from tsopt.search_spaces.gemm.checks import placement_dataflow_error
from tsopt.search_spaces.gemm.config import (
    ADDED_GENES,
    BODIES,
    CANONICAL_BODY,
    DEFERRABLE,
    DRAINS,
    HEAD_DEPTHS,
    KNOB_DOCS,
    NUMERIC_CHOICES,
    PENDING,
    PRIMARY_OP,
    SPACE,
    STRUCTURE_CHOICES,
    TASK_OPS,
    body_name,
    load_placement,
    mma_placement,
)

TS_KEY_GENES = ("advance_on_wait", "persistent", "producer_wg", "cluster", "tile_m", "tile_n",
                "tile_k", "stages", "consumers", "arrangement", "load_warp", "producer_regs",
                "consumer_regs", "epilogue")
"""Genes that reach the TS skeleton (pipeline, warps, registers, SMEM sizes)."""

SEED_GENES: dict[str, Any] = {
    "advance_on_wait": True, "persistent": False, "producer_wg": "first", "cluster": "1x1",
    "raster": "m", "epilogue": "direct", "arrangement": "cooperative",
    "tile_m": 128, "tile_n": 256, "tile_k": 64, "stages": 4, "consumers": 2, "load_warp": 0,
    "producer_regs": 40, "consumer_regs": 232, "swizzle": 1,
}
SEED_PLACEMENT: dict[str, Any] = {
    "load.body": body_name(CANONICAL_BODY["load"]), "load.depth": 0, "load.defer": "none",
    "mma.body": body_name(CANONICAL_BODY["mma"]), "mma.depth": 1, "mma.defer": "release",
    "mma.pending": 1, "mma.drain": "tail",
}

LoadKey = tuple[tuple[str, ...], int, str]
MmaKey = tuple[tuple[str, ...], int, str, int, str]


def raw_knobs() -> tuple[Knob, ...]:
    """The enumerator's knobs: every placement part and gene value, before any check."""
    out = [
        Knob("load.body", "structural", tuple(body_name(b) for b in BODIES["load"]),
             KNOB_DOCS["load.body"]),
        Knob("load.depth", "structural", HEAD_DEPTHS, KNOB_DOCS["load.depth"]),
        Knob("load.defer", "structural", DEFERRABLE["load"], KNOB_DOCS["load.defer"]),
        Knob("mma.body", "structural", tuple(body_name(b) for b in BODIES["mma"]),
             KNOB_DOCS["mma.body"]),
        Knob("mma.depth", "structural", HEAD_DEPTHS, KNOB_DOCS["mma.depth"]),
        Knob("mma.defer", "structural", DEFERRABLE["mma"], KNOB_DOCS["mma.defer"]),
        Knob("mma.pending", "structural", PENDING, KNOB_DOCS["mma.pending"]),
        Knob("mma.drain", "structural", DRAINS, KNOB_DOCS["mma.drain"]),
    ]
    out += [Knob(n, "structural", c, KNOB_DOCS[n]) for n, c in STRUCTURE_CHOICES.items()]
    out += [Knob(n, "numeric", c, KNOB_DOCS[n]) for n, c in NUMERIC_CHOICES.items()]
    return tuple(out)


def placement_name(key: tuple[Any, ...]) -> str:
    """``body|depth|defer[|pending|drain]``: a placement as a sampler knob value."""
    return "|".join([body_name(key[0]), *(str(v) for v in key[1:])])


def parse_placement_name(task: str, name: str) -> tuple[Any, ...]:
    parts = name.split("|")
    body = tuple(parts[0].split(","))
    if task == "load":
        return body, int(parts[1]), parts[2]
    return body, int(parts[1]), parts[2], int(parts[3]), parts[4]


def knobs(space: Any = None) -> tuple[Knob, ...]:
    """The sampler's knobs: each task's placement drawn from the verifier's per-task screen
    (search_spaces/_gemm_screen.py), then the structural and numeric genes."""
    from tsopt.search_spaces.gemm.screen import screened

    out = []
    if space is not None:
        screen = screened(space)
        out = [
            Knob("load.placement", "structural", tuple(placement_name(k) for k in screen["load"]),
                 "producer placement (body | prefetch depth | deferred op) the verifier accepts"),
            Knob("mma.placement", "structural", tuple(placement_name(k) for k in screen["mma"]),
                 "consumer placement (body | batches in flight | deferred op | wait_group pending "
                 "| drain) the verifier accepts"),
        ]
    out += [Knob(n, "structural", c, KNOB_DOCS[n]) for n, c in STRUCTURE_CHOICES.items()]
    out += [Knob(n, "numeric", c, KNOB_DOCS[n]) for n, c in NUMERIC_CHOICES.items()]
    return tuple(out)


def params_of(space: Any, genome: Genome) -> dict[str, Any]:
    """The sampler's parameters for ``genome`` (inverse of :func:`suggest`)."""
    from tsopt.search_spaces.gemm.funnel import _load_key, _mma_key

    cfg = space.config(genome, Problem.of("gemm", "bf16", m=8192, n=8192, k=8192))
    load, mma = _load_key(cfg), _mma_key(cfg)
    if load is None or mma is None:
        raise ValueError(f"{genome.short_hash}: its placement is not one the sampler can express")
    params: dict[str, Any] = {"load.placement": placement_name(load), "mma.placement": placement_name(mma)}
    for name, value in genome.genes.items():
        if name in ("raster", "swizzle") and not genome["persistent"]:
            continue
        params[name] = value
    for name, meaning in ADDED_GENES.items():
        params.setdefault(name, meaning)
    return params


def make_genome(**values: Any) -> Genome:
    """A genome from knob values; every knob not given takes the seed's value.

    Placement knobs may also be given as tuples: ``load=(body, depth, defer)``,
    ``mma=(body, depth, defer, pending, drain)``.
    """
    placement = dict(SEED_PLACEMENT)
    genes = dict(SEED_GENES)
    if "load" in values:
        body, depth, defer = values.pop("load")
        placement.update({"load.body": body_name(body), "load.depth": depth, "load.defer": defer})
    if "mma" in values:
        body, depth, defer, pending, drain = values.pop("mma")
        placement.update({"mma.body": body_name(body), "mma.depth": depth, "mma.defer": defer,
                          "mma.pending": pending, "mma.drain": drain})
    for name, value in values.items():
        if name in placement:
            placement[name] = value
        elif name in genes:
            genes[name] = value
        else:
            raise KeyError(f"gemm space has no knob {name!r}")
    structure = {n: genes[n] for n in STRUCTURE_CHOICES}
    numeric = {n: genes[n] for n in NUMERIC_CHOICES}
    load = load_placement(str(placement["load.body"]).split(","), int(placement["load.depth"]),
                          str(placement["load.defer"]))
    mma = mma_placement(str(placement["mma.body"]).split(","), int(placement["mma.depth"]),
                        str(placement["mma.defer"]), int(placement["mma.pending"]),
                        str(placement["mma.drain"]))
    return Genome.make(SPACE, {"load": load, "mma": mma}, structure, numeric)


def head_depth(genome: Genome, task: str) -> int:
    return sum(1 for p in genome.task(task).ops if p.section == "head" and p.op == PRIMARY_OP[task])


# -- enumeration -----------------------------------------------------------------------


def load_keys() -> Iterator[LoadKey]:
    for body in BODIES["load"]:
        for depth in HEAD_DEPTHS:
            for defer in DEFERRABLE["load"] if depth else ("none",):
                yield body, depth, defer


def mma_keys() -> Iterator[MmaKey]:
    for body in BODIES["mma"]:
        for depth in HEAD_DEPTHS:
            for defer in DEFERRABLE["mma"] if depth else ("none",):
                for pending in PENDING:
                    for drain in DRAINS:
                        yield body, depth, defer, pending, drain


def placement_count(task: str) -> int:
    per_body = 1 + (len(HEAD_DEPTHS) - 1) * len(DEFERRABLE[task])
    if task == "mma":
        per_body *= len(PENDING) * len(DRAINS)
    return len(BODIES[task]) * per_body


def legal_load_keys() -> list[LoadKey]:
    return [key for key in load_keys()
            if placement_dataflow_error("load", load_placement(*key)) is None]


def legal_mma_keys() -> list[MmaKey]:
    return [key for key in mma_keys()
            if placement_dataflow_error("mma", mma_placement(*key)) is None]


def gene_combinations() -> Iterator[dict[str, Any]]:
    """Every consistent assignment of the structural and numeric genes.

    Raster order and swizzle belong to the persistent scheduler: a one-tile-per-CTA
    grid takes only raster 'm' and swizzle 1, so only consistent sets are produced.
    """
    names = [*STRUCTURE_CHOICES, *NUMERIC_CHOICES]
    choices = [*STRUCTURE_CHOICES.values(), *NUMERIC_CHOICES.values()]
    for values in itertools.product(*choices):
        genes = dict(zip(names, values, strict=True))
        if not genes["persistent"] and (genes["raster"] != "m" or genes["swizzle"] != 1):
            continue
        yield genes


def gene_count() -> int:
    others = math.prod(len(c) for n, c in {**STRUCTURE_CHOICES, **NUMERIC_CHOICES}.items()
                       if n not in ("persistent", "raster", "swizzle"))
    raster_swizzle = len(STRUCTURE_CHOICES["raster"]) * len(NUMERIC_CHOICES["swizzle"])
    return others * (1 + raster_swizzle)  # one-tile-per-CTA: 1 raster/swizzle; persistent: all


def enumerate_space(problem: Problem) -> Enumeration:
    """Placements x genes.

    ``raw`` counts every placement pair (loop-body permutations x head depth x
    deferred op, and for the consumer x pending count x drain) times every
    consistent gene assignment: 2.3e14 for the default choices, so it is counted
    analytically (:func:`placement_count`, :func:`gene_count`), never listed.
    ``genomes`` yields the dataflow-legal ones lazily, placements outermost.
    """
    raw = placement_count("load") * placement_count("mma") * gene_count()
    enumeration = Enumeration(raw=raw, genomes=iter(()))
    loads, mmas = legal_load_keys(), legal_mma_keys()

    def genomes() -> Iterator[Genome]:
        for load in loads:
            for mma in mmas:
                for genes in gene_combinations():
                    enumeration.dataflow_legal += 1
                    yield make_genome(load=load, mma=mma, **genes)

    enumeration.genomes = genomes()
    return enumeration


def suggest(trial: Any, space: Any) -> Genome:
    """One genome from an Optuna trial: ``suggest_categorical`` per knob.

    Raster order and swizzle are asked only of persistent trials (a conditional
    parameter; every Optuna sampler supports that).
    """
    values: dict[str, Any] = {}
    for knob in knobs(space):
        if knob.name in ("raster", "swizzle") and not values.get("persistent"):
            continue
        values[knob.name] = trial.suggest_categorical(knob.name, list(knob.choices))
    load = parse_placement_name("load", str(values.pop("load.placement")))
    mma = parse_placement_name("mma", str(values.pop("mma.placement")))
    return make_genome(load=load, mma=mma, **values)


# -- dataflow --------------------------------------------------------------------------


def dataflow_error(genome: Genome) -> str | None:
    if genome.space != SPACE:
        return f"genome is of space {genome.space!r}, not {SPACE!r}"
    tasks = {t.task for t in genome.schedule}
    if tasks != set(TASK_OPS):
        return f"gemm genomes schedule tasks {sorted(TASK_OPS)}, got {sorted(tasks)}"
    missing = [g for g in (*NUMERIC_CHOICES, *STRUCTURE_CHOICES)
               if g not in genome.genes and g not in ADDED_GENES]
    if missing:
        return f"genome lacks gene(s) {missing}"
    unknown = sorted(set(genome.genes) - {*NUMERIC_CHOICES, *STRUCTURE_CHOICES})
    if unknown:
        return f"unknown gene(s) {unknown} for space {SPACE!r}"
    for task in TASK_OPS:
        ops = tuple((p.op, p.section) for p in genome.task(task).ops)
        error = placement_dataflow_error(task, ops)
        if error:
            return f"{task}: {error}"
    return None
