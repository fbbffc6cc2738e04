"""The table's sub-space: the GEMM space's knobs narrowed (as ``tsopt tune --knob`` narrows
them) to a product small enough to build and measure every legal point of it.

The simulated searches (``simulate.py``) are run over the same narrowed knobs through the
driver's own ``KnobView``, so every proposal lies in the product: it is either in the table
(measured), or rejected by the verifier / failed to build (a failed trial, as in the driver).
This is Kernel Tuner's simulation mode: a brute-forced cache of a (sub-)space, replayed.

The product holds the recorded best schedules of bench/gemm_h200 (cluster 2x1, TMA-store
epilogue, 256x128 / 128x256 tiles, 3-4 stages, 24/240 registers), so the table holds the
region of the best; knobs left out keep the seed genome's value.
"""

from __future__ import annotations

import itertools
from typing import Any

PROBLEM_SPEC = "gemm:bf16:8192x8192x8192"
LOAD0 = "coords,try_acquire,acquire,tma_load,commit|0|none"
MMA_BODY = "try_wait,wait,read_stage,wgmma,wgmma_wait,release"

RESTRICT: dict[str, tuple[Any, ...]] = {
    "load.placement": (LOAD0, LOAD0.replace("|0|", "|1|")),
    "mma.placement": (f"{MMA_BODY}|1|release|1|tail", f"{MMA_BODY}|2|release|1|tail"),
    "advance_on_wait": (True,),
    "persistent": (False, True),
    "producer_wg": ("first",),
    "cluster": ("1x1", "2x1", "1x2"),
    "raster": ("m",),
    "epilogue": ("direct", "tma_store"),
    "arrangement": ("cooperative", "separate"),
    "tile_m": (64, 128, 256),
    "tile_n": (128, 256),
    "tile_k": (64,),
    "stages": (2, 3, 4, 5, 6),
    "consumers": (1, 2),
    "load_warp": (0,),
    "producer_regs": (24, 40),
    "consumer_regs": (240,),
    "swizzle": (1, 8),
}
"""Knob -> the values the table covers. A knob of the space not named here (a gene added
later) is fixed at its first choice by :func:`restriction`."""

CORE: dict[str, tuple[Any, ...]] = {
    **RESTRICT,
    "load.placement": (LOAD0,),
    "cluster": ("1x1", "2x1"),
    "tile_m": (128, 256),
    "stages": (3, 4),
    "consumers": (2,),
}
"""A smaller product inside :data:`RESTRICT` around the recorded best (168 points pass
tsopt's checks), built first: on a shared 2-core build machine a GEMM compile takes ~20 s
of wall time, so the core is what can be complete in an hour; the rest of the product is
built after it, and a replay runs on the largest product that is complete."""

SMALL: dict[str, tuple[Any, ...]] = {
    **CORE,
    "mma.placement": CORE["mma.placement"][:1],
}
"""Half the core (one consumer placement: the recorded best's), built first of all."""

LEVELS = (SMALL, CORE, RESTRICT)
"""The build order: each product complete before the next one starts."""

CONDITIONAL = ("raster", "swizzle")
"""Asked only of persistent genomes (``HopperGemmSpace.suggest``)."""


def restriction(space: Any, problem: Any) -> dict[str, tuple[Any, ...]]:
    """:data:`RESTRICT` over the space's current knobs: every knob narrowed (an unnamed knob
    to its first choice, the old behaviour of a gene added later)."""
    out: dict[str, tuple[Any, ...]] = {}
    for knob in space.knobs(problem):
        allowed = RESTRICT.get(knob.name, knob.choices[:1])
        kept = tuple(c for c in knob.choices if c in allowed)
        if not kept:
            raise ValueError(f"table knob {knob.name}: none of {allowed!r} is a choice now")
        out[knob.name] = kept
    return out


def in_product(values: dict[str, Any], restrict: dict[str, tuple[Any, ...]]) -> bool:
    """Whether a knob assignment lies in the product ``restrict``."""
    return all(values.get(n) in c for n, c in restrict.items()
               if values.get(n) is not None or n not in CONDITIONAL)


def points(restrict: dict[str, tuple[Any, ...]] | None = None) -> list[dict[str, Any]]:
    """Every knob assignment of the product, as ``suggest`` would ask them (raster and
    swizzle only when persistent)."""
    restrict = dict(RESTRICT if restrict is None else restrict)
    names = [n for n in restrict if n not in CONDITIONAL]
    out = []
    for values in itertools.product(*(restrict[n] for n in names)):
        base = dict(zip(names, values, strict=True))
        if base.get("persistent"):
            for extra in itertools.product(*(restrict[n] for n in CONDITIONAL)):
                out.append({**base, **dict(zip(CONDITIONAL, extra, strict=True))})
        else:
            out.append(base)
    return out


def genome_of(space: Any, values: dict[str, Any]) -> Any:
    """The genome of one knob assignment, as ``HopperGemmSpace.suggest`` makes it (without
    listing the space's knobs, which needs the placement screen)."""
    from tsopt.search_spaces.gemm.config import parse_placement_name

    values = dict(values)
    load = parse_placement_name("load", str(values.pop("load.placement")))
    mma = parse_placement_name("mma", str(values.pop("mma.placement")))
    return space.genome(load=load, mma=mma, **values)
