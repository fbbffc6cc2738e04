"""The build stage: a candidate sent to a build slot (verify + build) and what comes back recorded.

A candidate whose whole verdict the database keeps as invalid (any study's) is not sent at
all. Otherwise its worker is sent what the database knows of it (its TS outcome, its whole
verdict, the exhaustive TS searches of its schedule), so that nothing is verified twice; what
the worker returns is recorded before it is told: its verdict, its searches (for every later
worker and study), its build with the node that made it and the wait for a build slot. A
worker that died twice on a candidate is recorded as a failed build, its verdict judged
here. After a Ctrl-C, a failure is not recorded (the signal may have reached the compiler or
the worker): the next run takes the trial up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsopt.build.builder import WORKER_FAILED_TWICE
from tsopt.core.genome import Genome
from tsopt.core.records import BuildResult, Verdict
from tsopt.search.outcomes import Outcome, outcome_of
from tsopt.search.pipeline import EvaluateRequest, Evaluation, judged_verdict_key, verdict_key_of
from tsopt.search.pools.protocol import BuildDone
from tsopt.search.study.jobs import Job, Teller

if TYPE_CHECKING:
    from tsopt.core.devices import DeviceProfile
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store
    from tsopt.search.progress import TuneStats
    from tsopt.search.request import TuneRequest
    from tsopt.search.study.workers import Workers
    from tsopt.verify.verifier import VerdictCache


class BuildStage:
    """Sends jobs to ``workers.build`` and records what they return. A valid, built job is
    handed to ``built`` (the loop's next stage); every other outcome is told through
    ``teller``. ``interrupted`` says whether a Ctrl-C came."""

    def __init__(self, request: TuneRequest, space: SearchSpace, target: str,
                 device: DeviceProfile, store: Store, verdicts: VerdictCache, workers: Workers,
                 stats: TuneStats, teller: Teller, built: Callable[[Job], None],
                 interrupted: Callable[[], bool]) -> None:
        self.request, self.space, self.target, self.device = request, space, target, device
        self.store, self.verdicts, self.workers = store, verdicts, workers
        self.stats, self.teller, self.built, self.interrupted = stats, teller, built, interrupted

    # -- sending ---------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        request = self.request
        known_ts = None
        judged = self._judged(job.genome)
        if judged is not None and not judged.valid:
            # Judged before, by this study or another: nothing to verify, nothing to build.
            self.evaluated(BuildDone(job, Evaluation(judged, judged_verdict_key(
                self.space, job.genome, request.problem, judged))))
            return
        key = verdict_key_of(self.space, job.genome, request.problem)
        searches: tuple[dict[str, Any], ...] = ()
        if judged is None and key is not None:
            found = self.store.find_verdict(self.space.name, key)
            known_ts = found.to_dict() if found is not None else None
            searches = self._known_searches(job.genome)
        self.workers.build.submit(job, EvaluateRequest(
            space_target=self.target, genome_json=job.genome.to_json(),
            problem=request.problem.to_dict(), arch=request.arch, device=self.device.id,
            cache_dir=str(Path(request.cache_dir).resolve()), known_ts=known_ts,
            known_verdict=judged.to_dict() if judged is not None else None,
            known_searches=searches))

    def _known_searches(self, genome: Genome) -> tuple[dict[str, Any], ...]:
        """The exhaustive TS searches the database keeps for ``genome``'s schedule (any
        worker's, any study's): its worker need not run them again."""
        from tsopt.verify.verifier import search_keys, search_version

        version = search_version()
        return tuple(x.to_dict() for _, model in search_keys(self.space, genome,
                                                             self.request.problem)
                     for x in self.store.find_searches(self.space.name, model, version))

    def _judged(self, genome: Genome) -> Verdict | None:
        """The whole verdict of ``genome`` kept in the database (any study's), else None."""
        from tsopt.core.space import fault_genes
        from tsopt.verify.verifier import judged_key

        if fault_genes(genome):
            return None
        return self.verdicts.find_judged(judged_key(self.space, genome, self.request.problem))

    def _keep_judged(self, genome: Genome, verdict: Verdict) -> None:
        from tsopt.core.space import fault_genes
        from tsopt.verify.verifier import judged_key, search_bound

        if not fault_genes(genome) and verdict.genome_hash == genome.hash:
            key = judged_key(self.space, genome, self.request.problem)
            kept = self.verdicts.find_judged(key)
            if kept is None:
                self.verdicts.record_judged(key, verdict)
            elif (verdict.valid and kept.valid and search_bound(kept) is not None
                  and search_bound(verdict) is None):
                # The worker found a complete search (tsopt prove's) where the kept verdict
                # was cut: the complete verdict replaces it.
                self.verdicts.supersede_judged(key, verdict)

    # -- what comes back -------------------------------------------------------------------
    def evaluated(self, done: BuildDone) -> None:
        job, evaluation = done.tag, done.evaluation
        if evaluation is None:
            self._worker_failed(job, done.failure or "the worker gave no evaluation")
            return
        verdict, build = evaluation.verdict, evaluation.build
        for search in evaluation.searches:  # a worker's: for every later worker and study
            self.verdicts.keep_search(search)
        self._keep_judged(job.genome, verdict)
        for step, seconds in evaluation.seconds.items():
            self.stats.seconds[step] = self.stats.seconds.get(step, 0.0) + seconds
        if job.verdict is None:
            self.store.record_verdict(job.candidate_id, self.space.name, evaluation.verdict_key,
                                      verdict)
        job.verdict = verdict
        if not verdict.valid:
            self.stats.rejected[verdict.rule or "?"] += 1
            self.teller.finish(job, outcome_of(verdict, None, None) or Outcome(state="pruned"))
            return
        self.stats.valid += 1
        if build is None:
            return
        if not build.ok and self.interrupted():
            return  # maybe killed by the Ctrl-C itself: not recorded, the next run builds it
        # Queued to returned, less the worker's own time: the wait for a slot (and the trip).
        wait = (time.monotonic() - job.queued_at - evaluation.seconds.get("total", 0.0)
                if job.queued_at else None)
        self.store.record_build(job.candidate_id, build, node=evaluation.node or None,
                                wait_s=wait)
        self.stats.note_build(evaluation.node, wait)
        job.build = build
        if not build.ok:
            self.stats.build_failed += 1
            # The build's own process (forked for it) died twice: a worker failure too.
            self.stats.worker_failures += (build.error or "").startswith(WORKER_FAILED_TWICE)
            self.teller.finish(job, outcome_of(verdict, build, None) or Outcome(state="fail"))
            return
        self.stats.built += 1
        self.stats.build_cache_hits += build.cache_hit
        self.built(job)

    def _worker_failed(self, job: Job, why: str) -> None:
        """A worker (a Ray task or a build process) died twice on this candidate: record its
        verdict (judged here) and a failed build, and tell the trial FAIL."""
        from tsopt.build.builder import cache_key
        from tsopt.verify.verifier import VerdictCache, verdict_cache_key, verify_genome

        if self.interrupted():
            return  # the Ctrl-C may have reached the worker: the next run takes it up
        self.stats.worker_failures += 1
        problem = self.request.problem
        if job.verdict is None:
            verdict = verify_genome(job.genome, problem, space=self.space,
                                    cache=VerdictCache(lookup=self.store.find_verdict))
            key = (verdict_cache_key(self.space, job.genome, problem, verdict.domain)
                   if verdict.stage != "dataflow" else f"dataflow:{job.genome.hash}")
            self.store.record_verdict(job.candidate_id, self.space.name, key, verdict)
            job.verdict = verdict
        if not job.verdict.valid:
            self.stats.rejected[job.verdict.rule or "?"] += 1
            self.teller.finish(job, outcome_of(job.verdict, None, None)
                               or Outcome(state="pruned"))
            return
        self.stats.valid += 1
        build = BuildResult(
            genome_hash=job.genome.hash, problem_key=problem.key, arch=self.request.arch,
            status="error", error=why,
            cache_key=cache_key(job.genome, problem, self.request.arch,
                                self.space.source_digest(), self.device))
        self.store.record_build(job.candidate_id, build)
        job.build = build
        self.stats.build_failed += 1
        self.teller.finish(job, outcome_of(job.verdict, build, None) or Outcome(state="fail"))
