"""How candidates are ranked: by their paired ratio to the vendor baseline, with its interval.

A candidate may be measured more than once (a contender re-measured beside the incumbent, the
top k confirmed before a winner is named, a later device call). Its *standing* combines them:
the median of its measurements' ratios, and the envelope of their 95 % intervals (the lowest
low, the highest high), so a drift between measurements widens the interval rather than
hiding. Two standings are *separable* when their intervals do not overlap; a ranking the
noise cannot separate is flagged, never presented as a fact.

Absolute times are not ranked: under sustained load the H200 sits at its power cap and a
kernel's time moves by ±10 % within seconds, while its ratio to a baseline timed in
alternation moves far less. A measurement with no ratio (none recorded) falls back to its
time, ranked after every candidate that has one. Measurements whose GPU readings were
abnormal (thermal or hardware slowdown) are used only when a candidate has no other.

Standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tsopt.core.records import Measurement


@dataclass(frozen=True)
class Standing:
    """One candidate's combined, rankable result."""

    genome_hash: str
    ratio: float | None  # median over measurements of baseline / candidate; None: not paired
    ratio_lo: float | None
    ratio_hi: float | None
    median_us: float  # the median over measurements of the candidate's median time
    measurements: int
    abnormal: tuple[str, ...] = ()

    def sort_key(self) -> tuple[int, float, str]:
        if self.ratio is not None:
            return (0, -self.ratio, self.genome_hash)
        return (1, self.median_us, self.genome_hash)

    def separable_from(self, other: Standing) -> bool:
        """True when this standing's interval lies wholly above ``other``'s."""
        if None in (self.ratio_lo, other.ratio_hi):
            return False
        assert self.ratio_lo is not None and other.ratio_hi is not None
        return self.ratio_lo > other.ratio_hi


def standing(genome_hash: str, measurements: Iterable[Measurement]) -> Standing | None:
    """The standing of one candidate from its measurements (None: no correct timing)."""
    timed = [m for m in measurements if m.status == "ok" and m.median_us is not None
             and m.median_us > 0]
    if not timed:
        return None
    normal = [m for m in timed if not m.abnormal]
    used = normal or timed
    ratios = [m.ratio for m in used if m.ratio is not None]
    lows = [m.ratio_lo if m.ratio_lo is not None else m.ratio for m in used if m.ratio is not None]
    highs = [m.ratio_hi if m.ratio_hi is not None else m.ratio for m in used
             if m.ratio is not None]
    abnormal = tuple(sorted({a for m in used for a in m.abnormal}))
    median_us = float(statistics.median(m.median_us or 0.0 for m in used))
    if not ratios:
        return Standing(genome_hash, None, None, None, median_us, len(used), abnormal)
    return Standing(genome_hash, float(statistics.median(ratios)),
                    min(x for x in lows if x is not None), max(x for x in highs if x is not None),
                    median_us, len(used), abnormal)


def rank(standings: Iterable[Standing]) -> list[Standing]:
    """Best first: paired ratio (higher is better), then time for the unpaired, then hash."""
    return sorted(standings, key=Standing.sort_key)


def unseparated(ranked: Sequence[Standing]) -> list[Standing]:
    """The candidates after the first whose interval overlaps the first's: the ones the noise
    cannot tell from the winner."""
    if not ranked:
        return []
    first = ranked[0]
    return [s for s in ranked[1:] if not first.separable_from(s)]


def contenders(ranked: Sequence[Standing], within: float = 0.03) -> list[Standing]:
    """Candidates within ``within`` (a fraction) of the incumbent's ratio, the incumbent
    excluded: the ones worth re-measuring beside it."""
    if not ranked or ranked[0].ratio is None:
        return []
    floor = ranked[0].ratio * (1 - within)
    return [s for s in ranked[1:] if s.ratio is not None and s.ratio >= floor]
