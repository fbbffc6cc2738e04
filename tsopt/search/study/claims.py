"""Claims: what this run holds of a study that the runs of other processes may share.

Each run registers itself (pid, host, a :class:`Heartbeat` every few seconds) and marks
every trial it asks or takes up with its run id (the trial's user attribute
:data:`RUN_ATTR`). Asking happens under the study's lock across processes, after counting
the study's trials, so ``--trials N`` holds across all of them (:meth:`Claims.ask`); a
resumed run takes up only the RUNNING trials of runs that are gone (:meth:`Claims.take_up`);
and a candidate is claimed by the run that evaluates it, so no genome is built twice: a
run proposing a genome another live run holds waits for that run's outcome
(:class:`~tsopt.search.study.jobs.ForeignWait`, :meth:`Claims.poll_foreign`), or takes it
over once that run is gone. A trial whose genome this run already holds waits on that job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.db.models import ORIGINS
from tsopt.search.outcomes import outcome_of
from tsopt.search.study.jobs import (
    POLL_S,
    ForeignWait,
    Job,
    Teller,
    duplicate_outcome,
    recorded_measurement,
)

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.db.views import CandidateInfo
    from tsopt.search.progress import TuneStats
    from tsopt.search.study.workers import Workers

RUN_ATTR = "tsopt_run"  # the user attribute of a trial naming the run that works on it
FOREIGN_POLL_S = 0.5  # how often a run looks for the outcome of a candidate another run holds


class Heartbeat:
    """Writes this run's heartbeat every :data:`tsopt.db.store.HEARTBEAT_S` from a thread of
    its own (a build in this process can take minutes), so other processes know it is alive."""

    def __init__(self, store: Store, run_id: str, every: float) -> None:
        self.store, self.run_id, self.every = store, run_id, every
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="tsopt-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.store.heartbeat(self.run_id)
            except UserInputError as exc:  # the database became unusable: the loop says so
                self.error = str(exc)
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every + 5)


class Claims:
    """The jobs run ``run_id`` holds of study ``name`` (Optuna's ``study``), and the trials
    it waits on for other runs. A job it starts is handed to ``start`` (the loop sends it to
    the stage it needs); a duplicate is told through ``teller``."""

    def __init__(self, store: Store, study: Any, name: str, run_id: str, heartbeat: Heartbeat,
                 workers: Workers, stats: TuneStats, teller: Teller,
                 start: Callable[[Job], None]) -> None:
        self.store, self.study, self.name, self.run_id = store, study, name, run_id
        self.heartbeat, self.workers, self.stats = heartbeat, workers, stats
        self.teller, self.start = teller, start
        self.jobs: dict[str, Job] = {}  # genome hash -> this run's job
        self.foreign: list[ForeignWait] = []
        self.next_foreign_poll = 0.0

    # -- asking and resuming ---------------------------------------------------------------
    def ask(self, trials: int | None) -> tuple[Any, int]:
        """A new trial marked as this run's, or None when the study's ``trials`` are spent,
        with the study's trials counted before it: they are counted and the trial asked under
        the study's lock across processes, so that runs sharing the study share its budget."""
        import optuna

        if self.heartbeat.error is not None:
            raise UserInputError(self.heartbeat.error)
        with self.store.study_lock(self.name):
            counted = sum(1 for t in self.study.get_trials(deepcopy=False)
                          if t.state != optuna.trial.TrialState.WAITING)
            if trials is not None and counted >= trials:
                return None, counted
            trial = self.study.ask()
            trial.set_user_attr(RUN_ATTR, self.run_id)
        return trial, counted

    def resume_seed(self, seed: Genome) -> None:
        """Take up the seed, unless it is finished or a live run of another process holds it
        (that run's to finish)."""
        claim = self.store.claim_candidate(self.name, seed, "seed", None, self.run_id)
        recorded = claim.info
        if claim.mine and outcome_of(recorded.verdict, recorded.build,
                                     recorded_measurement(recorded)) is None:
            job = Job(seed, claim.candidate_id, "seed")
            job.verdict, job.build = recorded.verdict, recorded.build
            self.jobs[seed.hash] = job
            self.stats.seeded = True
            self.start(job)

    def take_up(self) -> list[Any]:
        """The study's RUNNING trials that no live run works on, marked as this run's (those
        waiting in a bundle stay for `tsopt ingest` when nothing measures here)."""
        import optuna

        taken = []
        with self.store.study_lock(self.name):
            live = self.store.live_runs(self.name) - {self.run_id}
            stale = self.study.get_trials(deepcopy=False,
                                          states=(optuna.trial.TrialState.RUNNING,))
            for frozen in sorted(stale, key=lambda t: t.number):
                if "awaiting_measurement" in frozen.user_attrs and self.workers.measure is None:
                    continue  # measured by `tsopt measure` + `tsopt ingest`
                if frozen.user_attrs.get(RUN_ATTR) in live:
                    continue  # a run of another process works on it
                trial = optuna.trial.Trial(self.study, frozen._trial_id)
                trial.set_user_attr(RUN_ATTR, self.run_id)
                taken.append(trial)
        return taken

    # -- placing a trial -------------------------------------------------------------------
    def place(self, trial: Any, genome: Genome, origin: str) -> None:
        """Start the trial's job, or tell it the known outcome of the trial (of any run) that
        has its genome, or wait for the live run of another process that holds it."""
        current = self.jobs.get(genome.hash)
        if current is not None and current.number != trial.number:
            self.stats.duplicates += 1
            if current.outcome is not None or current.awaiting:
                self.teller.tell(trial, duplicate_outcome(current.outcome, current.label))
            else:
                current.waiters.append(trial)
            return
        claim = self.store.claim_candidate(self.name, genome, origin if origin in ORIGINS
                                           else "suggest", trial.number, self.run_id)
        recorded = claim.info
        label = "seed" if recorded.origin == "seed" else f"trial {recorded.trial_number}"
        known = outcome_of(recorded.verdict, recorded.build, recorded_measurement(recorded))
        if (not claim.created and claim.mine and known is None and recorded.origin != "seed"
                and recorded.trial_number != trial.number and not self.awaits_bundle(recorded)):
            # Another trial's genome, left unfinished by a run that is gone: this trial takes
            # it over (that trial, when taken up, finds the outcome recorded).
            self.store.set_trial_number(claim.candidate_id, trial.number)
            recorded = replace(recorded, trial_number=trial.number)
        if claim.created or recorded.trial_number == trial.number:
            if not claim.mine:  # its own candidate, held by a live run of another process
                self.foreign.append(ForeignWait(trial, genome, origin, claim.candidate_id, label))
                return
            job = Job(genome, claim.candidate_id, origin, trial)
            job.verdict, job.build, job.measurement = (recorded.verdict, recorded.build,
                                                       recorded_measurement(recorded))
            self.jobs[genome.hash] = job
            self.start(job)
            return
        self.stats.duplicates += 1
        if known is None and not claim.mine and not self.awaits_bundle(recorded):
            self.foreign.append(ForeignWait(trial, genome, origin, claim.candidate_id, label))
            return
        self.teller.tell(trial, duplicate_outcome(known, label))

    def awaits_bundle(self, recorded: CandidateInfo) -> bool:
        """A built, unmeasured candidate when nothing is measured here: it waits in a bundle."""
        return (self.workers.measure is None and recorded.build is not None and recorded.build.ok
                and not recorded.measurements)

    def poll_foreign(self, busy: Callable[[], bool]) -> None:
        """Tell the trials waiting on other processes' candidates the outcomes recorded since;
        take up those whose holder is gone. Sleeps a little when nothing else is to be done
        (``busy`` says whether something is)."""
        if not self.foreign:
            return
        now = time.monotonic()
        if now < self.next_foreign_poll:
            if not busy():
                time.sleep(min(POLL_S, self.next_foreign_poll - now))
            return
        self.next_foreign_poll = now + FOREIGN_POLL_S
        waiting, self.foreign = self.foreign, []
        for wait in waiting:
            recorded, holder = self.store.candidate(self.name, wait.candidate_id)
            known = outcome_of(recorded.verdict, recorded.build, recorded_measurement(recorded))
            if known is not None:
                self.teller.tell(wait.trial, known.duplicate(wait.label))
            elif holder is None:
                self.place(wait.trial, wait.genome, wait.origin)  # its run is gone: take over
            elif self.awaits_bundle(recorded):
                self.teller.tell(wait.trial, duplicate_outcome(None, wait.label))
            else:
                self.foreign.append(wait)
