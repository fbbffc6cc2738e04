"""Before a study names its winner: the top k measured again, in alternation, paired.

A single measurement's interval says how well one run pinned a ratio down, not whether the
next run agrees: near-best candidates lie within a few percent of each other, and the order
of their first measurements is partly the GPU's drift. So the driver, once its search stops
and while it still has a GPU, re-measures the top ``k`` (by their standings) in two passes,
``1..k`` then ``k..1``, so that a slow drift over the round favours nobody. Each new
measurement is recorded under its own run id; the standings then combine every measurement
a candidate has (:mod:`tsopt.core.standing`), and the winner is the first of the new ranking,
with the candidates the noise cannot separate from it named beside it.

The same mechanism re-measures a *contender* during the search: a candidate whose first
ratio comes within ``CONTENDER_WITHIN`` of the incumbent's is measured again together with
the incumbent (until the incumbent has ``INCUMBENT_CHECKS`` measurements), so that neither
ranks on one draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tsopt.core.records import DEFAULT_LAUNCH
from tsopt.core.standing import Standing, rank, unseparated
from tsopt.search.pools.protocol import MeasureRequest

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.db.views import RankedCandidate

CONFIRM_TOP_K = 5
CONTENDER_WITHIN = 0.03
INCUMBENT_CHECKS = 3
"""A contender's re-check measures the incumbent beside it only while the incumbent has fewer
measurements than this: at 8192^3 nearly every candidate is within 3 % of the incumbent, and
re-measuring the incumbent with each (8 times in 80 s, bench/tune_gpu round 8) spent the GPU
on a standing already pinned down instead of on candidates not yet measured."""


@dataclass(frozen=True)
class Remeasure:
    """The tag of a measurement taken again (a confirmation pass or a contender's re-check)."""

    candidate_id: int
    genome_hash: str
    label: str  # "confirm1", "confirm2", "recheck3", ...


@dataclass(frozen=True)
class Winner:
    """The study's named winner after confirmation."""

    standing: Standing
    unseparated: tuple[Standing, ...]  # ranked next to it, intervals overlapping its own
    confirmed: int  # candidates re-measured in the final round

    def describe(self) -> str:
        s = self.standing
        text = (f"winner {s.genome_hash[:12]}: {s.ratio:.3f}x the vendor baseline "
                f"[{s.ratio_lo:.3f}-{s.ratio_hi:.3f}] over {s.measurements} measurements"
                if s.ratio is not None and s.ratio_lo is not None and s.ratio_hi is not None
                else f"winner {s.genome_hash[:12]}: {s.median_us:.2f} us (unpaired)")
        if self.unseparated:
            text += ("; the noise cannot separate it from " + ", ".join(
                f"{u.genome_hash[:12]} ({u.ratio:.3f}x)" if u.ratio is not None
                else u.genome_hash[:12] for u in self.unseparated))
        return text


def confirmation_requests(ranked: list[RankedCandidate], problem: dict[str, object],
                          passes: int = 2, gpu: int | None = None,
                          launch: str = DEFAULT_LAUNCH) -> list[tuple[Remeasure, MeasureRequest]]:
    """The final round's measurements, in order: ``1..k``, then ``k..1``, ... for ``passes``
    passes; candidates whose artifact is not on this machine are left out. ``gpu`` pins the
    whole round to one of the pool's GPUs: a round compares its candidates with each other,
    and one GPU's drift is shared by all of them (another GPU's need not be)."""
    usable = [r for r in ranked if r.build is not None and r.build.artifact_dir]
    order: list[tuple[Remeasure, MeasureRequest]] = []
    for number in range(1, passes + 1):
        sequence = usable if number % 2 else list(reversed(usable))
        for r in sequence:
            assert r.build is not None and r.build.artifact_dir
            order.append((Remeasure(r.candidate_id, r.genome_hash, f"confirm{number}"),
                          MeasureRequest(r.build.artifact_dir, r.genome_hash, dict(problem),
                                         gpu=gpu, launch=launch)))
    return order


def name_winner(store: Store, study: str, confirmed: int,
                prefer: str | None = None) -> Winner | None:
    """The first of the study's ranking (on one GPU's measurements: ``prefer``, the GPU that
    confirmed, where it measured the study), with the ones its interval overlaps."""
    standings = [r.standing for r in store.ranked_on_card(study, prefer=prefer)
                 if r.standing is not None]
    ordered = rank(standings)
    if not ordered:
        return None
    return Winner(ordered[0], tuple(unseparated(ordered)[:4]), confirmed)
