"""M buckets: how a GEMM's runtime M range is cut into tuned kernels, and how each is judged.

A serving stack's GEMM has fixed N and K (the weights) and an M that changes every step (the
decode batch, a prefill's token count). ``tsopt tune gemm --m 1-256`` tunes one kernel per
*bucket* of M, each a runtime-M kernel for its range; the export's op routes a call to the
bucket holding its M.

**Where the boundaries are (:func:`bucket_ranges`).** At the powers of two from
:data:`FIRST_EDGE` up: 1-16, 17-32, 33-64, 65-128, 129-256, 257-512, ... Why:

- The tile extents a kernel puts along M are powers of two: ``tile_m`` 64/128/256, and with
  ``swap_ab`` (the small-M schedules: M lies along the tile's N side) ``tile_n`` 16-256. In a
  bucket (2^(j-1), 2^j] one tile of 2^j rows covers every M of it, so one schedule (one tile
  row, the same grid) is the natural best across the bucket; past its top the same tile needs
  a second row (twice the MMA work for a few rows more), which is where another kernel should
  take over.
- The first bucket is 1-16, not 1, 2, 4, 8: 16 is the smallest M extent of a tile in the space,
  and below it every M runs the same one-tile grid, reading the same N x K weights: the time
  is the weights' read alone and does not depend on M.
- Each bucket spans a factor of two in M, so its sampled Ms (below) differ by at most 2x in
  arithmetic intensity. On an H200 (bf16 dense ~989 TFLOP/s, HBM 4.8 TB/s: a ridge near M=200
  for large N, K) the buckets up to 128 are the decode regime, bound by the weights' read;
  129-256 sits at the ridge; above it prefill is compute-bound. A kernel is never asked to span
  both sides of the ridge.

**How a bucket is judged.** Its kernel is measured paired against cuBLAS at several M inside
it (:func:`sample_ms`: both ends, the middle, and an odd M near the top three quarters, so that
a partial tile and a non-multiple of 8 are always among them), each a paired ratio with its
interval. The figures reported are the median and the worst ratio across them. What the study
ranks by is :func:`range_ratio`, ``min(median, worst + FLOOR_MARGIN)``: it reaches 1.00 exactly
when the median is at least 1.00x cuBLAS and no M is below 0.97x (issue 30's bar for a bucket),
so a kernel fast on most M but slow on one is ranked by that one.

Standard library only (the measuring side reads it too).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

FIRST_EDGE = 16
"""Top of the first bucket (1-16); then every power of two above it."""

FLOOR_MARGIN = 0.03
"""How far below its median a bucket's worst M may sit before the worst ranks the kernel."""

MAX_M = 1 << 20
"""The largest M a range may end at (a bound on the input, far above any batch)."""


class RangeError(ValueError):
    """An M range or list is malformed or impossible; the message names the bad value."""


def bucket_ranges(lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """``[lo, hi]`` cut at the bucket boundaries, in order: ``bucket_ranges(1, 256)`` is
    ``((1, 16), (17, 32), (33, 64), (65, 128), (129, 256))``; a range not on the boundaries
    keeps its own ends (``bucket_ranges(8, 40)`` is ``((8, 16), (17, 32), (33, 40))``)."""
    check_range(lo, hi)
    found = []
    start = lo
    edge = FIRST_EDGE
    while start <= hi:
        while edge < start:
            edge *= 2
        end = min(edge, hi)
        found.append((start, end))
        start = end + 1
    return tuple(found)


def sample_ms(lo: int, hi: int) -> tuple[int, ...]:
    """The Ms a range's kernel is measured at: ``lo``, the middle, an odd M near three
    quarters of the way up, and ``hi`` (fewer when the range is narrower), ascending.
    ``sample_ms(1, 16)`` is ``(1, 8, 13, 16)``, ``sample_ms(65, 128)`` ``(65, 96, 113, 128)``."""
    check_range(lo, hi)
    middle = (lo + hi) // 2
    odd = min(hi, (lo + 3 * (hi - lo) // 4) | 1)
    return tuple(sorted({lo, middle, odd, hi}))


def check_range(lo: int, hi: int) -> None:
    """RangeError unless ``1 <= lo <= hi <= MAX_M`` (integers)."""
    for value in (lo, hi):
        if isinstance(value, bool) or not isinstance(value, int):
            raise RangeError(f"M {value!r} is not an integer")
    if lo < 1:
        raise RangeError(f"M range {lo}-{hi}: M starts at 1")
    if hi < lo:
        raise RangeError(f"M range {lo}-{hi} is empty: its end is below its start")
    if hi > MAX_M:
        raise RangeError(f"M range {lo}-{hi}: M beyond {MAX_M} is not supported")


def parse_m(text: Any) -> tuple[tuple[int, int] | None, tuple[int, ...]]:
    """An M as a user gives it -> ``(range, ())`` or ``(None, exact Ms)``.

    ``"1-256"`` (or ``[1, 256]`` in a workload file) is a range, tuned as buckets of runtime-M
    kernels; ``256`` or ``"256"`` one exact M; ``"1,8,32"`` several exact Ms, each a fixed-M
    kernel. RangeError naming the text for anything else."""
    if isinstance(text, bool):
        raise RangeError(f"M {text!r} is not an integer or a range like 1-256")
    if isinstance(text, int):
        check_range(text, text)
        return None, (text,)
    if isinstance(text, (list, tuple)):
        if len(text) != 2:
            raise RangeError(f"M {list(text)!r}: a range is [lo, hi], two integers")
        lo, hi = text
        check_range(lo, hi)
        return (lo, hi), ()
    if not isinstance(text, str):
        raise RangeError(f"M {text!r} is not an integer or a range like 1-256")
    spec = text.strip()
    try:
        if "-" in spec:
            lo_text, _, hi_text = spec.partition("-")
            lo, hi = int(lo_text), int(hi_text)
        else:
            values = tuple(int(v) for v in spec.split(","))
    except ValueError:
        raise RangeError(f"M {text!r} is not an integer, a range like 1-256 or a list like "
                         "1,8,32") from None
    if "-" in spec:
        check_range(lo, hi)
        return (lo, hi), ()
    for value in values:
        check_range(value, value)
    if len(set(values)) != len(values):
        raise RangeError(f"M {text!r} names an M twice")
    return None, tuple(sorted(values))


def range_ratio(ratios: Sequence[float]) -> float:
    """A range kernel's figure to rank by, from its paired ratios at the sampled Ms:
    ``min(median, worst + FLOOR_MARGIN)`` (see the module doc)."""
    if not ratios:
        raise ValueError("a range kernel needs a ratio at one M at least")
    return min(float(statistics.median(ratios)), min(ratios) + FLOOR_MARGIN)


def summary_of(per_m: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median and worst ratio (and at which M) of a measurement's ``per_m`` entries
    (``{"m": M, "ratio": R, ...}``); empty when none has a ratio."""
    rated = [(e["m"], e["ratio"]) for e in per_m if e.get("ratio") is not None]
    if not rated:
        return {}
    worst_m, worst = min(rated, key=lambda item: (item[1], item[0]))
    return {"ms": [m for m, _ in rated], "median": float(statistics.median(r for _, r in rated)),
            "worst": worst, "worst_m": worst_m}


def problem_m_range(problem: Any) -> tuple[int, int] | None:
    """The runtime M range of a GEMM problem (``Problem.m_range``), None for a fixed-M one."""
    found = getattr(problem, "m_range", None)
    return (int(found[0]), int(found[1])) if found else None


def samples_of(problem: Any) -> int:
    """How many Ms a problem's kernel is measured at: its range's :func:`sample_ms`, else 1."""
    found = problem_m_range(problem)
    return len(sample_ms(*found)) if found is not None else 1
