"""The search driver: Optuna ask/tell over a space, candidates through verify, build, measure.

::

    ask ──▶ suggest (genome) ──▶ seen before? ──yes──▶ tell the known outcome (never rebuilt
     ▲                               │ no                 or re-measured)
     │                               ▼
     │                 evaluate: verify + build  (in process, in a build process, or a Ray task)
     │                               │
     │        rejected ─▶ PRUNED     │ built        failed ─▶ FAIL
     │                               ▼
     │                 measure (a GPU here or a Ray actor per GPU) ─▶ ok: tell the time;
     │                               │                                wrong/hang/crash: FAIL
     │                               └─ no GPU: bundle it; the trial waits for `tsopt ingest`
     └──────────── refill while budgets last (trials, time, patience, grid) ─────────────┘

Batches are sized to the workers: as many candidates are in flight as there are
build slots (one when serial), and asking pauses while the GPUs' queue is
long. Every outcome is recorded before it is told, and told with its reason
(``rejected``, ``build_error``, ``measure_failed``, ``duplicate_of``).

Resume: ``--trials N`` is the study's total. A run starts by finishing what a
killed or interrupted run left: every trial still RUNNING (except those
waiting in a bundle when there is no GPU to measure them) is taken up again
with its genome re-derived from its stored parameters, and whatever the
database already holds for that candidate (verdict, build, measurement) is
used as is, so nothing is built or measured twice. Ctrl-C stops asking,
lets the candidates in flight finish, marks the study ``interrupted`` and
returns 130; a second Ctrl-C stops at once (the next run resumes). Several
processes may run the same study on the same database at once
(:mod:`tsopt.search.study.claims`).

:class:`Driver` is the loop; each role it turns is a module of :mod:`tsopt.search.study`:

- ``opening``: the request checked, the device chosen (``machine``), the study opened and joined;
- ``workers``: the build and measure pools started and closed;
- ``budgets``: when asking stops (``--trials``, ``--built``/``--measured``, ``--time``,
  ``--patience``, the grid);
- ``claims``: asking under the study's lock, resuming, and the candidates other runs hold;
- ``building``: a candidate to a build slot, what comes back recorded;
- ``measuring``: the GPUs' queue, contender re-checks, the final confirmation;
- ``bundling``: what nothing measures here, written to the bundle;
- ``jobs``: the run's candidates, and the one place trials are told.
- ``new_card``: a study moved to a GPU it was never measured on, its old best timed there first.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tsopt.search.outcomes import Outcome, outcome_of
from tsopt.search.pools.protocol import BuildPool, MeasurePool
from tsopt.search.progress import TuneProgress, TuneStats, print_summary
from tsopt.search.request import TuneRequest
from tsopt.search.study.budgets import Budgets
from tsopt.search.study.building import BuildStage
from tsopt.search.study.bundling import BundleWriter
from tsopt.search.study.claims import Claims, Heartbeat
from tsopt.search.study.jobs import POLL_S, Job, Teller
from tsopt.search.study.measuring import MeasureStage, measure_priority
from tsopt.search.study.new_card import NewCard
from tsopt.search.study.opening import open_run
from tsopt.search.study.workers import Workers

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store

EXIT_INTERRUPTED = 130
DETERMINISTIC_RULE = "tsopt.deterministic"  # a valid proposal a --deterministic run declines


class Driver:
    """One ``tsopt tune`` run over one study (see the module doc)."""

    def __init__(self, request: TuneRequest, console: Console,
                 measure_pool: Any = None, sampler: Any = None) -> None:
        """``measure_pool`` replaces the GPU measuring (tests on machines with no GPU);
        ``sampler`` replaces the Optuna sampler named by the request (scripts)."""
        self.request = request
        self.injected_measure_pool = measure_pool
        self.injected_sampler = sampler
        self.console = console
        self.stats = TuneStats()
        self.to_evaluate: deque[Job] = deque()  # jobs waiting for a build slot
        self.interrupted = False
        self.stop_reason: str | None = None
        self.asked = 0
        self.cut_at_budget = False  # the time budget is spent: nothing new is started
        self.left_for_resume = 0  # candidates this run left unbuilt or unmeasured at the cut
        self.started = time.monotonic()
        self.run_id = str(uuid.uuid4())
        self.workers = Workers()

    @property
    def pool(self) -> BuildPool:
        return self.workers.build

    @property
    def measure_pool(self) -> MeasurePool | None:
        """What measures for this run (None: nothing here; built candidates go to the bundle)."""
        return self.workers.measure

    @property
    def run_ids(self) -> dict[int, str]:
        return self.workers.run_ids

    # -- set-up ----------------------------------------------------------------------------
    def run(self) -> int:
        """The main job; returns the exit code (0 done, 1 nothing valid could be built,
        130 interrupted)."""
        opened = open_run(self.request, self.console, self.run_id, self.injected_measure_pool)
        self.space: SearchSpace = opened.space
        self.target, self.view, self.predict = opened.target, opened.view, opened.predict
        self.store: Store = opened.store
        self.verdicts = opened.verdicts
        self.device, self.device_note = opened.device, opened.device_note
        self.prior, self.prior_note = opened.prior, opened.prior_note
        self.name, self.launch, self.study = opened.name, opened.launch, opened.study
        try:
            return self._run(self.request, opened.trials, opened.others)
        finally:
            self.store.close()

    def _plan_on_one_card(self, live: str | None = None) -> None:
        """Evolve's parents from one GPU's figures where the study was measured on several:
        Optuna holds each trial's first figure only (outcomes.card_values); ``live``: the GPU
        this run measures on, once the old card's best were timed on it (study.new_card)."""
        from tsopt.search.evolve_sampler import EvolveSampler
        from tsopt.search.outcomes import card_values

        if not isinstance(self.sampler, EvolveSampler):
            return  # the others read Optuna's told values as they are
        found = card_values(self.store, self.name, self.study, self.device, prefer=live)
        if found is None:
            return
        card, values, elsewhere = found
        self.sampler.use_card_values(values, elsewhere)
        self.console.print(
            f"sampler: measured on several GPUs; parents ranked on {card}'s figures "
            f"({len(values)} trials), {len(elsewhere)} timed on other GPUs only count as "
            "unmeasured", highlight=False)

    def _note_earlier_best(self) -> None:
        """The study's rank 1 from its earlier runs (an ingested bundle, a run on another
        machine), for the live view: a resumed run has timed nothing of its own at first."""
        top = self.store.ranked_on_card(self.name, limit=1)
        if not top:
            return
        standing, measured = top[0].standing, top[0].measurement
        ratio = standing.ratio if standing is not None else measured.ratio
        if ratio is not None:
            self.stats.earlier_best = (ratio, top[0].genome_hash, measured.baseline_name)

    def _run(self, request: TuneRequest, trials: list[Any], others: int) -> int:
        """The run once it is registered: its sampler, the search, the run's end recorded."""
        import optuna

        from tsopt.db.store import HEARTBEAT_S
        from tsopt.search.proposals import Proposer
        from tsopt.search.samplers import make_sampler

        # A resumed run must not replay the first run's random stream (its proposals would all
        # be known genomes): the seed moves on with the study's length, deterministically; and
        # with the runs of other processes alive at the start, so that runs started together
        # do not propose the same genomes. Not the grid's: its seed orders the grid points,
        # which trials refer to by number.
        seed = request.seed if request.sampler == "grid" else resumed_seed(
            request.seed, len(trials) + others * 104_729)
        self.sampler = self.injected_sampler or make_sampler(request.sampler, seed, self.view)
        self.study.sampler = self.sampler
        # Every sampler's proposal is repaired into the space's declared legal set.
        self.proposer = Proposer(self.space, request.problem, self.view, self.predict)
        if hasattr(self.sampler, "bind"):  # evolve: plans completed and ranked in the space
            from tsopt.search.evolve import declared_legal

            self.console.print(f"cost model: starts from {self.prior_note}", highlight=False)
            self.sampler.bind(self.space, request.problem,
                              declared_legal(self.space, request.problem, self.predict),
                              self.proposer.nearest_legal, self.prior)
        self._plan_on_one_card()
        self.bundle_dir = request.bundle_dir or Path(".tsopt") / "bundles" / self.name
        self._note_earlier_best()
        heartbeat = Heartbeat(self.store, self.run_id, HEARTBEAT_S)
        self._stages(heartbeat)
        interrupted_before = signal.getsignal(signal.SIGINT)
        code = EXIT_INTERRUPTED
        try:
            self.asked = sum(1 for t in trials if t.state != optuna.trial.TrialState.WAITING)
            self.budgets.patience_history(trials)
            if request.library and not trials:
                from tsopt.search.library import seed_study

                seed_study(self.study, self.space, self.view, request.problem, request.arch,
                           self.predict, lambda text: self.console.print(text, highlight=False),
                           exclude_self=request.library_exclude_self,
                           refit=request.library_refit)
            if request.warm_start and not trials:
                self._warm_start()
            signal.signal(signal.SIGINT, self._on_sigint)
            self._start_workers()
            code = self._search()
        finally:
            signal.signal(signal.SIGINT, interrupted_before)
            heartbeat.stop()
            self._close_workers()
            # The study stays ``running`` while a run of another process is alive.
            self.store.finish_run(self.run_id,
                                  "interrupted" if code == EXIT_INTERRUPTED else "finished")
        return code

    def _stages(self, heartbeat: Heartbeat) -> None:
        """The roles the loop turns, each handed what it works with."""
        request = self.request

        def interrupted() -> bool:
            return self.interrupted

        self.budgets = Budgets(request, self.started, self.store, self.name, self.view,
                               self.sampler, self.study)
        self.teller = Teller(self.study, self.stats, self.budgets)
        self.bundle = BundleWriter(self.bundle_dir, self.name, self.space.name, request.problem,
                                   request.arch, self.launch, self.stats, self.teller)
        self.builds = BuildStage(request, self.space, self.target, self.device, self.store,
                                 self.verdicts, self.workers, self.stats, self.teller,
                                 self._to_measure, interrupted)
        self.measuring = MeasureStage(self.store, self.study, self.name, request.problem,
                                      self.launch, self.workers, self.stats, self.console,
                                      self.teller, self.bundle, interrupted)
        self.claims = Claims(self.store, self.study, self.name, self.run_id, heartbeat,
                             self.workers, self.stats, self.teller, self._advance)
        self.new_card = NewCard(self.store, self.name, self.device, lambda: self.measuring.card,
                                self._advance, self._plan_on_one_card, self.console)

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        self.console.print("[yellow]interrupted:[/] no new trials; finishing the ones started "
                           "(Ctrl-C again to stop at once; the same command resumes)")

    def _warm_start(self) -> None:
        from tsopt.search.warm_start import enqueue, nearby_best

        starts = nearby_best(self.store, self.space.name, self.request.problem,
                             self.request.arch, exclude=self.name,
                             exclude_self=self.request.library_exclude_self)
        if not starts:
            return
        count = enqueue(self.study, self.space, self.view, starts)
        sources = sorted({(s.distance, s.study) for s in starts})
        self.console.print(
            f"warm start: {count} genome{'s' if count != 1 else ''} from "
            + ", ".join(f"{name} (distance {d:.2f})" for d, name in sources), highlight=False)

    def _start_workers(self) -> None:
        self.workers.start(self.request, self.console, self.injected_measure_pool)
        if self.measure_pool is not None:
            self.stats.measuring_since = time.monotonic()
        if self.measure_pool is not None and hasattr(self.measure_pool, "priority"):
            # The GPU is the narrow end at large problems (a 8192^3 study builds faster than
            # it measures): what waits is measured in the model's order, not the proposals'.
            self.measure_pool.priority = self._measure_priority

    def _measure_priority(self, tag: Any) -> float | None:
        """A queued candidate's rank for the GPU (:func:`~tsopt.search.study.measuring.measure_priority`)."""
        return measure_priority(getattr(self, "sampler", None), tag)

    def _close_workers(self) -> None:
        self.workers.close(self.console)

    # -- the loop --------------------------------------------------------------------------
    def _search(self) -> int:
        request = self.request
        title = f"tune {self.space.name} {request.problem}"
        with TuneProgress(self.console, self.stats, title, request.trials,
                          self.asked) as progress:
            self._resume()
            while True:
                self._fill()
                if not self.cut_at_budget and self.budgets.time_spent():
                    self._cut()
                timeout = POLL_S if self.pool.busy() else 0.0
                for built in self.pool.poll(timeout):
                    self.builds.evaluated(built)
                if self.measure_pool is not None:
                    busy = self.pool.busy() or self.to_evaluate
                    self.measuring.poll(0.0 if busy else POLL_S)
                    self.new_card.poll()
                self.bundle.flush()
                self.claims.poll_foreign(self._busy)
                progress.update(self.asked, self.budgets.time_left())
                if self._idle() and not self._may_ask():
                    break
        seconds = time.monotonic() - self.started
        if self.cut_at_budget and self.measure_pool is not None:
            self.left_for_resume += self.pool.busy()  # abandoned when the workers close
        if self.interrupted:
            self.console.print(f"study {self.name} interrupted after {seconds:.1f} s; run the "
                               "same command again to resume it", highlight=False)
            return EXIT_INTERRUPTED
        if self.stop_reason and self.stop_reason != "trials":
            self.console.print(f"stopped: {self.stop_reason}", highlight=False)
        if self.left_for_resume:
            self.console.print(
                f"{self.left_for_resume} candidate{'s' if self.left_for_resume != 1 else ''} "
                "proposed before the time budget ran out were left unbuilt or unmeasured; they "
                "stay in the study: run the same command with more --time to resume them",
                highlight=False)
        self.measuring.confirm()
        if self.interrupted:
            return EXIT_INTERRUPTED
        print_summary(self.console, self.store, self.name, self.stats,
                      self.measure_pool is not None, self.bundle_dir, seconds)
        self.console.print(f"built for {self.device.describe()}: {self.device_note}",
                           highlight=False)
        # A run whose proposals were all rejected did its job; one that built nothing valid not.
        return 1 if self.stats.valid and not self.stats.built else 0

    def _cut(self) -> None:
        """``--time`` is a bound on the run, not a wish: once it is spent, what waits for a
        build slot or for the GPU is not started (a GPU measures a few candidates a second at
        best, and the queue may hold dozens). Those trials stay running in the study, with
        whatever was recorded of them; a later run of the same study takes them up. Builds
        under way are abandoned when the run closes its workers; the final confirmation
        round still runs."""
        self.cut_at_budget = True
        if self.measure_pool is None:
            return  # built candidates go to the bundle, which costs nothing
        self.left_for_resume += len(self.to_evaluate)
        self.to_evaluate.clear()
        queued = self.measure_pool.drop_queued()
        self.left_for_resume += sum(1 for tag in queued if isinstance(tag, Job))

    def _busy(self) -> bool:
        """Whether a pool, the build queue or the bundle has work (else the loop may sleep)."""
        return bool(self.pool.busy() or self.to_evaluate or self.bundle.waiting or (
            self.measure_pool is not None and self.measure_pool.pending()))

    def _idle(self) -> bool:
        measuring = self.measure_pool.pending() if self.measure_pool is not None else 0
        if self.cut_at_budget and self.measure_pool is not None:
            # Builds under way are abandoned; only a measurement in flight is waited for.
            return not (measuring or self.bundle.waiting or self.claims.foreign)
        return not (self.pool.busy() or self.to_evaluate or measuring or self.bundle.waiting
                    or self.claims.foreign)

    def _may_ask(self) -> bool:
        if self.interrupted or self.stop_reason:
            return False
        self.stop_reason = self.budgets.stop_reason(self.asked, self.measure_pool is not None)
        if self.stop_reason:
            return False
        # Backpressure: proposals wait while the GPUs have a queue (the sampler learns more).
        if self.measure_pool is not None:
            return bool(self.measure_pool.pending() < 2 * max(self.pool.slots,
                                                              self.measure_pool.slots))
        return True

    def _fill(self) -> None:
        while self.pool.free() > 0:
            if self.to_evaluate:
                self.builds.submit(self.to_evaluate.popleft())
                continue
            if not self._may_ask():
                return
            trial = self._ask()
            if trial is None:
                return
            self._admit(trial)

    def _ask(self) -> Any:
        """A new trial, or None when the study's ``--trials`` are spent (counted across the
        processes sharing the study: :meth:`Claims.ask`)."""
        trial, counted = self.claims.ask(self.request.trials)
        if trial is None:
            self.asked = counted
            self.stop_reason = "trials"
            return None
        self.asked = counted + 1
        return trial

    # -- candidates ------------------------------------------------------------------------
    def _resume(self) -> None:
        """Take up what an earlier run left: the seed, then every unfinished trial."""
        seed = self.proposer.within_restrictions(self.space.seed_genome(self.request.problem))
        self.claims.resume_seed(seed)
        taken = self.claims.take_up()
        for trial in taken:
            self._admit(trial)
        resumed = len(taken)
        if resumed:
            self.console.print(f"resuming study {self.name}: {resumed} unfinished trial"
                               f"{'s' if resumed != 1 else ''} taken up again", highlight=False)

    def _admit(self, trial: Any) -> None:
        """Derive the trial's genome; tell a duplicate's known outcome, else start its job."""
        origin = str(trial.user_attrs.get("origin", "suggest"))
        try:
            # An enqueued genome (warm start, library) is meant as it is; a sampler's proposal
            # is repaired into the legal set.
            genome = self.proposer.propose(trial, repair=origin == "suggest").genome
        except (ValueError, KeyError) as exc:
            self.teller.tell(trial, Outcome(state="fail", attrs={"suggest_error": str(exc)[:500]}))
            return
        self.stats.proposed += 1
        trial.set_user_attr("genome_hash", genome.hash)
        if self.request.deterministic and not self.space.is_deterministic(genome):
            # Not a verdict: the schedule is valid, only not what this run asked for, so
            # nothing is recorded for other studies to reuse.
            self.stats.rejected[DETERMINISTIC_RULE] += 1
            self.teller.tell(trial, Outcome(state="pruned", attrs={"rule": DETERMINISTIC_RULE}))
            return
        self.claims.place(trial, genome, origin)

    def _advance(self, job: Job) -> None:
        """Send the job to the stage it needs next (or finish it from what is recorded)."""
        outcome = outcome_of(job.verdict, job.build, job.measurement)
        if outcome is not None:
            self.teller.finish(job, outcome)
            return
        built = job.build is not None and job.build.ok and bool(job.build.artifact_dir) and \
            Path(job.build.artifact_dir or "").exists()
        if job.verdict is None or not built:
            job.queued_at = time.monotonic()
            self.to_evaluate.append(job)
            return
        self._to_measure(job)

    def _to_measure(self, job: Job) -> None:
        """A built job to the GPUs, or to the bundle when nothing measures here."""
        assert job.build is not None and job.build.artifact_dir
        if self.measure_pool is not None and self.cut_at_budget:
            self.left_for_resume += 1  # built after the cut: measured by a later run
            return
        if self.measure_pool is not None:
            self.measuring.submit(job)
        else:
            self.bundle.add([job])


def resumed_seed(seed: int, trials: int) -> int:
    """The sampler seed of a run that finds ``trials`` trials in its study (``seed`` for a new
    study): the same history gives the same seed, a longer one another."""
    if trials == 0:
        return seed
    return (seed * 1_000_003 + trials * 7_919) % (2**31 - 1)


def run_tune(request: TuneRequest, console: Console) -> int:
    """The main job. Returns the exit code: 0 done, 1 valid candidates but none could be
    built, 130 interrupted (Ctrl-C; the same command resumes)."""
    return Driver(request, console).run()
