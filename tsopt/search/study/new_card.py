"""A study moved to a GPU it was never measured on: the old card's best timed again here first.

A kernel fastest on one card can lose on another, so a study measured on several GPUs ranks
on one card's figures (:func:`tsopt.db.views.ranking_gpu`). A run that moves a study to a new
card starts with none of that card's figures: its sampler would plan from the old card's
values beside the new card's, or, ranking on the new card alone, from one parent while the
old card's winners are dropped. So once the run's first timing names its GPU, the old card's
top :data:`RETIME_TOP_K` are measured again here, ahead of the sampler's ranked proposals
(origin ``retime``: no trial, like the seed; rebuilt where their artifact is not on this
machine), and once they are in, the sampler plans from this card's figures alone
(``replan``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tsopt.db.views import named_gpus, ranking_gpu
from tsopt.search.study.jobs import Job

if TYPE_CHECKING:
    from rich.console import Console

    from tsopt.core.devices import DeviceProfile
    from tsopt.db.store import Store

RETIME_TOP_K = 5
"""How many of the old card's best are timed on the new one (the confirmation's k: the
candidates the old card could not separate from its winner are among them)."""
ORIGIN = "retime"


class NewCard:
    """Watches the run's GPU (``card()``: None until its first timing) for study ``name``;
    ``advance`` sends a job on (to a build slot, or to the GPU where its artifact is here);
    ``replan(card)`` points the sampler at one card's figures."""

    def __init__(self, store: Store, name: str, target: DeviceProfile | None,
                 card: Callable[[], str | None], advance: Callable[[Job], None],
                 replan: Callable[[str], None], console: Console) -> None:
        self.store, self.name, self.target = store, name, target
        self.card, self.advance, self.replan, self.console = card, advance, replan, console
        self.jobs: list[Job] | None = None  # None: the run's GPU is not known yet
        # The cards of earlier runs: by the time the first timing names this run's GPU, the
        # study has been measured on it.
        self.before = named_gpus(store.measured_devices(name))
        self.replanned = False

    def poll(self) -> None:
        """Once the GPU is known, start the re-timing; once it is done, re-plan."""
        if self.jobs is None:
            live = self.card()
            if live is not None:
                self.jobs = self._retime(live)
            return
        if self.jobs and not self.replanned and all(j.outcome is not None for j in self.jobs):
            self.replanned = True
            live = self.card()
            if live is not None:
                self.replan(live)

    def _retime(self, live: str) -> list[Job]:
        """The old card's top k, not yet measured on ``live``, as jobs on their way."""
        others = self.before
        if live in others or not others:
            return []  # measured here before (or nowhere): nothing moved
        old = ranking_gpu(others, self.target) or next(iter(others))  # None: one card
        here = {r.genome_hash for r in self.store.ranked(self.name, device=live)}
        jobs = []
        for ranked in self.store.ranked(self.name, RETIME_TOP_K, device=old):
            if ranked.genome_hash in here:
                continue  # this run has timed it here already
            info, _holder = self.store.candidate(self.name, ranked.candidate_id)
            job = Job(ranked.genome, ranked.candidate_id, ORIGIN, None, info.verdict,
                      info.build)
            jobs.append(job)
            self.advance(job)
        if jobs:
            self.console.print(
                f"new card: study {self.name} was measured on {old}, never on {live}; its "
                f"top {len(jobs)} there are timed here first, then the sampler plans from "
                f"{live}'s figures alone", highlight=False)
        return jobs
