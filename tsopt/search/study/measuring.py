"""The measuring stage: built candidates on the GPUs, contenders re-checked, the winner confirmed.

What waits for a GPU is taken in the sampler's predicted order when the sampler predicts
(:func:`measure_priority`, set as the pool's ``priority``); re-measurements, the seed and
the genomes the study started from first, as they come. Each measurement is recorded with
its GPU's run id (the baseline once per GPU and problem) and the wait for its GPU before
it is told. A first ratio near the incumbent's makes the candidate a contender, measured
again beside the incumbent (:mod:`tsopt.search.confirm` holds the policy); once the search
stops, the top k are measured again in alternation and the winner named. A GPU that cannot
measure at all (its baseline failed) is stopped: what it held goes to the bundle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsopt.core.records import Measurement
from tsopt.search.confirm import (
    CONFIRM_TOP_K,
    CONTENDER_WITHIN,
    INCUMBENT_CHECKS,
    Remeasure,
    confirmation_requests,
    name_winner,
)
from tsopt.search.outcomes import Outcome, outcome_of
from tsopt.search.pools.protocol import MeasureDone, MeasureRequest
from tsopt.search.study.jobs import POLL_S, Job, Teller

if TYPE_CHECKING:
    from rich.console import Console

    from tsopt.core.problem import Problem
    from tsopt.db.store import Store
    from tsopt.search.progress import TuneStats
    from tsopt.search.study.bundling import BundleWriter
    from tsopt.search.study.workers import Workers



def measure_priority(sampler: Any, tag: Any) -> float | None:
    """A queued candidate's rank for the GPU: the sampler's predicted time for its trial.
    None (first come, first measured, before every ranked one) for re-measurements, the
    seed, a sampler that does not predict (or predicts nothing for the trial: evolve's
    survey), and the genomes a study was started from (origin
    ``warm_start``: the seed library's and nearby studies' best): they are measured evidence of what is
    best, which the model must not overrule (a fresh 8192^3 study on the H200 never
    measured the library's best genome, a stream-K kernel the analytical estimate ranks
    behind: bench/tune_gpu round 8)."""
    predict = getattr(sampler, "predicted", None)
    if (predict is None or not isinstance(tag, Job) or tag.trial is None
            or tag.origin != "suggest"):
        return None
    predicted = predict(tag.trial.params)
    return None if predicted is None else float(predicted)


class MeasureStage:
    """Measures on ``workers.measure`` for study ``name`` (Optuna's ``study``), timed in
    ``launch``; a measured job is told through ``teller``, and what a GPU that cannot measure
    held goes to ``bundle``."""

    def __init__(self, store: Store, study: Any, name: str, problem: Problem, launch: str,
                 workers: Workers, stats: TuneStats, console: Console, teller: Teller,
                 bundle: BundleWriter, interrupted: Callable[[], bool]) -> None:
        self.store, self.study, self.name = store, study, name
        self.problem, self.launch, self.workers = problem, launch, workers
        self.stats, self.console, self.teller = stats, console, teller
        self.bundle, self.interrupted = bundle, interrupted
        self.rechecks = 0  # contender re-measurements submitted in this run
        self.machine_checked = False
        self.card: str | None = None  # the GPU this run measures on, from its first timing
        self.baselines_recorded: set[tuple[str, str]] = set()
        self.gpu_queued_at: dict[int, float] = {}  # id(tag) -> monotonic, handed to the GPUs

    # -- the queue -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        assert job.build is not None and job.build.artifact_dir
        self._submit(job, MeasureRequest(job.build.artifact_dir, job.genome.hash,
                                         self.problem.to_dict(), launch=self.launch))

    def _submit(self, tag: Any, request: MeasureRequest) -> None:
        assert self.workers.measure is not None
        self.gpu_queued_at[id(tag)] = time.monotonic()
        self.workers.measure.submit(tag, request)

    def poll(self, timeout: float) -> None:
        """Record and tell what the GPUs finished within ``timeout`` seconds."""
        assert self.workers.measure is not None
        for done in self.workers.measure.poll(timeout):
            self.measured(done)

    def _gpu_wait(self, done: MeasureDone) -> float | None:
        """How long ``done``'s request waited for its GPU (queued to returned, less the
        measuring worker's own time); its GPU's busy time is counted."""
        self.stats.gpu_busy_s[done.worker] = (self.stats.gpu_busy_s.get(done.worker, 0.0)
                                              + done.result.seconds)
        queued = self.gpu_queued_at.pop(id(done.tag), None)
        if queued is None:
            return None
        wait = max(0.0, time.monotonic() - queued - done.result.seconds)
        self.stats.gpu_waits.append(wait)
        return wait

    # -- what comes back -------------------------------------------------------------------
    def measured(self, done: MeasureDone) -> None:
        job, result = done.tag, done.result
        wait = self._gpu_wait(done)
        if isinstance(job, Remeasure):
            self._remeasured(job, done, wait)
            return
        if result.unusable is not None or result.measurement is None:
            # This GPU cannot measure at all (its baseline failed): bundle from here on.
            self.console.print(f"[bold red]measuring stopped:[/] {result.unusable}; built "
                               f"candidates go to the bundle {self.bundle.bundle_dir}",
                               highlight=False)
            pool = self.workers.measure
            assert pool is not None
            queued = pool.drop_queued()
            pool.close()
            self.workers.measure = None
            # Only candidates go to the bundle: a re-measurement queued behind them is of a
            # candidate measured already (its first figure stands), and no bundle holds it.
            self.bundle.add([j for j in (job, *queued) if isinstance(j, Job)])
            return
        measured = result.measurement
        if measured.status == "crash" and self.interrupted():
            return  # the Ctrl-C may have reached the worker: the next run measures it
        run_id = self.workers.run_ids.get(done.worker, "ray")
        baseline = result.baseline
        if baseline is not None and (run_id, baseline.problem_key) not in self.baselines_recorded:
            self.store.record_baseline(
                baseline.problem_key, baseline.name, baseline.device, run_id, baseline.median_us,
                baseline.p10_us, baseline.p90_us, baseline.rate, baseline.rate_unit)
            self.baselines_recorded.add((run_id, baseline.problem_key))
        self.store.record_measurement(job.candidate_id, measured, run_id, wait_s=wait)
        job.measurement = measured
        self._note_machine(measured)
        self.stats.measured[measured.status] += 1
        if measured.status == "ok" and measured.median_us is not None:
            self.stats.offer_best(measured.median_us, measured.ratio, job.genome.hash,
                                  job.number, measured.baseline_name)
            self._recheck_if_contender(job, measured, done.worker)
        self.teller.finish(job, outcome_of(job.verdict, job.build, measured)
                           or Outcome(state="fail"))

    def _note_machine(self, measured: Measurement) -> None:
        """On this run's first timing, say so if the study was measured on another device,
        driver or clock limit before: ratios stay comparable, absolute times do not."""
        if self.machine_checked or measured.status != "ok":
            return
        self.machine_checked = True
        self.card = measured.device or None
        limit = measured.conditions.get("sm_mhz_limit")
        now = (measured.device, measured.driver, limit)
        seen = set()
        for c in self.store.candidates(self.name):
            for r in c.measurements:
                m = r.measurement
                if m.status == "ok" and m.device and r.run_id not in self.workers.run_ids.values():
                    seen.add((m.device, m.driver, m.conditions.get("sm_mhz_limit")))
        before = {s for s in seen if s != now and s[0]}
        if seen and before:
            was = "; ".join(f"{d} (driver {v or '?'}, SM clock limit {c or '?'} MHz)"
                            for d, v, c in sorted(before, key=str))
            other_gpu = any(d != now[0] for d, _v, _c in before)
            kept = (f"another GPU ranks kernels differently, so this run ranks its best and its "
                    f"confirmation on {now[0]}'s measurements alone" if other_gpu else
                    "ratios to the baseline stay comparable, absolute times do not")
            self.console.print(
                f"[yellow]note:[/] study {self.name} was measured before on {was}; this run "
                f"measures on {now[0]} (driver {now[1] or '?'}, SM clock limit {now[2] or '?'} "
                f"MHz): {kept}", highlight=False)
            self.study.set_user_attr("machines_changed", True)

    # -- measuring again: contenders, and the final confirmation ---------------------------
    def _recheck_if_contender(self, job: Job, measured: Measurement, gpu: int) -> None:
        """A first ratio within CONTENDER_WITHIN of the incumbent's (or above it): measure the
        candidate again, and the incumbent beside it while the incumbent has fewer than
        INCUMBENT_CHECKS measurements, so neither ranks on one draw; both on ``gpu`` (the
        pool's worker that measured the candidate)."""
        if self.workers.measure is None or measured.ratio is None or self.interrupted():
            return
        ranked = self.store.ranked_on_card(self.name, limit=2, prefer=measured.device or None)
        incumbent = next((r for r in ranked if r.genome_hash != job.genome.hash), None)
        if (incumbent is None or incumbent.standing is None or incumbent.standing.ratio is None
                or measured.ratio < incumbent.standing.ratio * (1 - CONTENDER_WITHIN)):
            return
        problem = self.problem.to_dict()
        again = [(job.candidate_id, job.genome.hash,
                  job.build.artifact_dir if job.build else None)]
        if incumbent.standing.measurements < INCUMBENT_CHECKS:
            again.insert(0, (incumbent.candidate_id, incumbent.genome_hash,
                             incumbent.build.artifact_dir if incumbent.build else None))
        for candidate_id, genome_hash, artifact in again:
            if artifact and Path(artifact).exists():
                self.rechecks += 1
                self._submit(
                    Remeasure(candidate_id, genome_hash, f"recheck{self.rechecks}"),
                    MeasureRequest(artifact, genome_hash, problem, gpu=gpu, launch=self.launch))

    def _remeasured(self, tag: Remeasure, done: MeasureDone, wait: float | None) -> None:
        measured = done.result.measurement
        if measured is None or done.result.unusable is not None:
            return  # a remeasurement adds evidence; without one the first stands
        run_id = f"{self.workers.run_ids.get(done.worker, 'ray')}-{tag.label}"
        self.store.record_measurement(tag.candidate_id, measured, run_id, wait_s=wait)
        self.stats.remeasured += 1

    def confirm(self) -> None:
        """The final paired round over the top k, then the winner named (tsopt.search.confirm)."""
        if self.workers.measure is None or self.interrupted():
            return
        ranked = self.store.ranked_on_card(self.name, limit=CONFIRM_TOP_K, prefer=self.card)
        order = confirmation_requests(ranked, self.problem.to_dict(), gpu=0, launch=self.launch)
        if len(ranked) < 2 or not order:
            return
        self.console.print(f"confirming the top {len(ranked)}: each measured again, twice, in "
                           "alternation", highlight=False)
        for tag, request in order:
            self._submit(tag, request)
        while (self.workers.measure is not None and self.workers.measure.pending()
               and not self.interrupted()):
            for done in self.workers.measure.poll(POLL_S):
                self.measured(done)
        winner = name_winner(self.store, self.name, len(ranked), prefer=self.card)
        if winner is None:
            return
        self.console.print(winner.describe(), highlight=False)
        s = winner.standing
        self.study.set_user_attr("winner", s.genome_hash)
        self.study.set_user_attr("winner_ratio", s.ratio)
        self.study.set_user_attr("winner_ratio_95", [s.ratio_lo, s.ratio_hi])
        self.study.set_user_attr("winner_unseparated", [u.genome_hash for u in winner.unseparated])
