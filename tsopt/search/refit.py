"""A genome measured on one problem, re-fitted to another: its schedule kept, its shape
genes re-chosen by the cost model (issue #28, item 5).

A seed-library entry copied to a new shape keeps the tile, cluster and decomposition that
were chosen for the sizes it was measured on: 8192^3's 128x256 tile in a 2x1 cluster leaves
a decode GEMM's 8 rows in a tile of 128 and half the SMs idle. What carries across shapes is
the rest of the schedule, which the measurement vouched for: the placements, stages, warp
roles (consumers, their arrangement, the producer's warpgroup and warp, registers), the
epilogue. A re-fit keeps those and re-chooses :data:`REFIT_GENES` for the new problem:

1. every combination of the re-fitted genes' (restricted) choices on the entry's other
   genes, through the space's couplings (``SearchSpace.coupled``: split-K takes one tile per
   CTA and a 1x1 cluster along, stream-K the persistent loop), is ranked by the cost model
   (:class:`tsopt.search.cost_model.CostModel`: the analytical estimate for the study's
   device profile; a few thousand estimates of ~10 us);
2. best first, each is completed as the space's ``suggest`` completes it, and where outside
   the space's declared legal set, repaired to the nearest legal params with the re-fitted
   genes and the schedule (:data:`SCHEDULE_GENES`) kept (``Proposer.nearest_legal``, the
   driver's repair of every proposal): only stages, registers, the epilogue and the
   persistent scheduler's raster and swizzle may move, where the new tile's stages no longer
   fit the SMEM; a combination the schedule cannot hold (a 64-row tile shared by two
   cooperative warpgroups) gives way to the next;
3. the first whose genome the verifier accepts (the caller's ``judge``; the driver's is the
   predicting judge, and every built candidate is judged in full by its worker) is the
   re-fit. At most :data:`TRIES` combinations are tried, :data:`REPAIRS` of them repaired.
   Where the model's best legal choice is the entry's own genome, the copy is the re-fit and
   none is made.

Which entries are re-fitted, and how many re-fits a study starts from, is the seed
library's choice (:func:`tsopt.search.library.refit_library`). Pure search: no database, no
GPU; the tests run it with the real space, verifier and cost model.
"""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.genome import Genome
from tsopt.search.cost_model import CostModel
from tsopt.search.evolve import params_key, space_completer
from tsopt.search.proposals import Proposer, fixed_genome

if TYPE_CHECKING:
    from tsopt.core.problem import Problem
    from tsopt.core.space import Judge, SearchSpace
    from tsopt.search.samplers import KnobView

REFIT_GENES = ("tile_m", "tile_n", "tile_k", "cluster", "split_k", "stream_k", "swap_ab")
"""The genes a re-fit re-chooses: the tile, the cluster, the decomposition (split-K,
stream-K) and the orientation (swap-AB: which of M and N the tile's rows run along, without
which a tile re-chosen for a decode GEMM's 8 rows is a tile of 64 rows). Everything else is
the entry's, but what the couplings require of it (stream-K's persistent loop)."""
PERSISTENT_DEFAULTS = {"raster": "m", "swizzle": 1}
"""The persistent scheduler's knobs, as a re-fit that brings the persistent loop in sets
them (the neutral values: a raster along M, no swizzle), rather than drawing them."""
SCHEDULE_GENES = ("load.placement", "mma.placement", "advance_on_wait", "consumers",
                  "arrangement", "producer_wg", "load_warp")
"""What a re-fit keeps of the entry whatever the repair needs: its placements and warp roles
(the schedule its measurement vouched for)."""
TRIES = 200
"""Ranked combinations a re-fit tests at most (a test of the declared legal set is
arithmetic or a memoised cheap verdict)."""
REPAIRS = 8
"""Of those, the illegal ones repaired at most (a repair makes up to 200 tests)."""


@dataclass(frozen=True)
class Refit:
    """A genome re-fitted to ``problem``: the new genome, where it came from, what moved."""

    genome: Genome
    params: dict[str, Any]
    source: Genome
    """The genome that was re-fitted (a library entry's)."""
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Knobs whose value differs from the source's: ``(source's, re-fit's)``."""
    predicted: float = math.nan
    """The model's log relative time of the re-fit (lower is faster)."""
    source_predicted: float | None = None
    """The model's log relative time of the source copied as it is, None where the copy is
    outside the legal set here."""
    rank: int = 0
    """Position of the re-fit's combination in the model's ranking (0: its best)."""

    def to_dict(self) -> dict[str, Any]:
        return {"genome": self.genome.hash, "source": self.source.hash,
                "changed": {k: list(v) for k, v in self.changed.items()},
                "predicted": round(self.predicted, 4),
                "source_predicted": (None if self.source_predicted is None
                                     else round(self.source_predicted, 4)),
                "rank": self.rank}


class Refitter:
    """Re-fits genomes of ``space`` to ``problem`` (see the module doc). ``view``: the
    sampler's knobs (restrictions kept); ``judge``: the verifier (None: no verdict asked, the
    declared legal set alone); ``model``: the ranking (default: the analytical estimate for
    ``space.device``); ``genes``: the re-fitted genes."""

    def __init__(self, space: SearchSpace, problem: Problem, view: KnobView,
                 judge: Judge | None = None, model: CostModel | None = None,
                 genes: Sequence[str] = REFIT_GENES, tries: int = TRIES,
                 proposer: Proposer | None = None) -> None:
        self.space = space
        self.problem = problem
        self.view = view
        self.judge = judge
        self.model = model or CostModel(dict(problem.sizes), device=space.device)
        self.proposer = proposer or Proposer(space, problem, view, judge)
        self.complete = space_completer(space, problem, view)
        self.choices = {k.name: tuple(view.choices(k.name, k.choices)) for k in view.knobs}
        self.genes = tuple(g for g in genes if len(self.choices.get(g, ())) > 0)
        self.tries = tries

    @property
    def possible(self) -> bool:
        """Whether the model ranks this space's re-fitted genes on this problem at all."""
        return bool(self.genes) and any(g in self.model.reads for g in self.genes)

    def _completed(self, params: Mapping[str, Any]) -> dict[str, Any]:
        # Completion draws what params leave open from an RNG of their own: the same params
        # always complete the same way.
        rng = random.Random(zlib.crc32(repr(params_key(params)).encode()))
        return self.complete(params, rng)

    def drafts(self, base: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every combination of the re-fitted genes on ``base``, through the couplings, one
        per distinct result, ranked by the model (best first)."""
        genes = [g for g in self.genes if g in base]
        found: dict[Any, dict[str, Any]] = {}
        for values in itertools.product(*(self.choices[g] for g in genes)):
            draft = {**base, **dict(zip(genes, values, strict=True))}
            draft = self.space.coupled(draft)
            if any(repr(draft.get(g)) != repr(v) for g, v in zip(genes, values, strict=True)):
                continue  # a coupling moved a re-fitted gene: another combination is it
            if draft.get("persistent") is True:
                for name, value in PERSISTENT_DEFAULTS.items():
                    if name in self.choices and name not in draft:
                        draft[name] = value
            found.setdefault(params_key(draft), draft)
        drafts = list(found.values())
        if not drafts:
            return []
        predicted = self.model.predict(drafts)
        order = sorted(range(len(drafts)), key=lambda i: (predicted[i], i))
        return [drafts[i] for i in order]

    def _repaired(self, full: Mapping[str, Any], keep: Sequence[str]) -> dict[str, Any] | None:
        """``full`` repaired into the declared legal set with ``keep`` unchanged, or None."""
        repaired = self.proposer.nearest_legal(full, keep=[k for k in keep if k in full])
        if repaired is None:
            return None
        done = self._completed(repaired)
        if not self.proposer.legal(done) or any(
                repr(done.get(k)) != repr(full.get(k)) for k in keep if k in full):
            return None
        return done

    def refit(self, genome: Genome) -> Refit | None:
        """``genome`` re-fitted to the problem, or None: the space cannot express it, no
        ranked combination is legal and accepted within :data:`TRIES`, or the model's best
        legal choice is ``genome`` itself."""
        if not self.possible:
            return None
        try:
            params = self.space.params_of(genome)
        except (ValueError, KeyError):
            return None
        base = self.view.decode(self.view.encode(params))
        if any(k not in base for k in params if k in self.choices and k not in self.genes):
            # A kept knob's value is outside the (restricted) choices here: the schedule
            # cannot be kept, so it is not re-fitted.
            return None
        copy = self._completed(base)
        source_predicted = (float(self.model.predict([copy])[0])
                            if self.proposer.legal(copy) else None)
        keep = [g for g in (*self.genes, *SCHEDULE_GENES) if g in base]
        repairs = REPAIRS
        for rank, draft in enumerate(self.drafts(base)[: self.tries]):
            completed = self._completed(draft)
            full = completed if self.proposer.legal(completed) else None
            if full is None:
                if repairs <= 0:
                    continue
                repairs -= 1
                full = self._repaired(completed, keep)
                if full is None:
                    continue
            candidate = fixed_genome(self.space, self.problem, full)
            if candidate.hash == genome.hash:
                return None  # the model keeps the copy
            if self.judge is not None and not self.judge(candidate, self.problem).valid:
                continue
            changed = {k: (base.get(k), v) for k, v in full.items()
                       if repr(base.get(k)) != repr(v)}
            return Refit(candidate, full, genome, changed,
                         float(self.model.predict([full])[0]), source_predicted, rank)
        return None

