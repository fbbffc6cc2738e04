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
returns 130; a second Ctrl-C stops at once (the next run resumes).

Several processes may run the same study on the same database at once. Each registers a run
(pid, host, a heartbeat every few seconds) and marks every trial it asks or takes up with its
run id. Asking happens under the study's lock across processes, after counting the study's
trials, so ``--trials N`` holds across all of them; a run takes up only the RUNNING trials of
runs that are gone; and a candidate is claimed by the run that evaluates it, so no genome is
built twice: a run proposing a genome another live run holds waits for that run's outcome.
A build that fails or a worker that dies after the Ctrl-C is not recorded (the
signal may have reached the compiler or the worker): its trial stays RUNNING and
the next run takes it up.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tsopt.build.builder import WORKER_FAILED_TWICE
from tsopt.core.devices import DeviceProfile, default_profile
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.records import BuildResult, Measurement, Verdict
from tsopt.db.models import ORIGINS
from tsopt.search.confirm import (
    CONFIRM_TOP_K,
    CONTENDER_WITHIN,
    INCUMBENT_CHECKS,
    Remeasure,
    confirmation_requests,
    name_winner,
)
from tsopt.search.outcomes import Outcome, open_study, outcome_of, tell
from tsopt.search.pipeline import (
    EvaluateRequest,
    Evaluation,
    judged_verdict_key,
    space_target,
    verdict_key_of,
)
from tsopt.search.pools.inline import InlineMeasurePool
from tsopt.search.pools.protocol import BuildDone, BuildPool, MeasureDone, MeasurePool, MeasureRequest
from tsopt.search.pools.serial import SerialBuildPool
from tsopt.search.progress import TuneProgress, TuneStats, print_summary
from tsopt.search.request import TuneRequest
from tsopt.search.ts_memo import seed_store

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store
    from tsopt.db.views import CandidateInfo

POLL_S = 0.2
EXIT_INTERRUPTED = 130
RUN_ATTR = "tsopt_run"  # the user attribute of a trial naming the run that works on it
LAUNCH_WORDS = {"graph": "back-to-back launches in one CUDA graph per side",
                "eager": "calls through the export's loader, host launch cost included",
                "isolated": "each launch alone after a spin kernel: a study made before the "
                            "launch modes"}
DETERMINISTIC_RULE = "tsopt.deterministic"  # a valid proposal a --deterministic run declines
FOREIGN_POLL_S = 0.5  # how often a run looks for the outcome of a candidate another run holds


@dataclass
class ForeignWait:
    """A trial whose genome a live run of another process is evaluating: told its outcome
    when that run records it (or taken up when that run is gone)."""

    trial: Any
    genome: Genome
    origin: str
    candidate_id: int
    label: str


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


@dataclass
class Job:
    """One candidate of this run: its trial (None for the seed) and what is known so far."""

    genome: Genome
    candidate_id: int
    origin: str
    trial: Any = None
    verdict: Verdict | None = None
    build: BuildResult | None = None
    measurement: Measurement | None = None
    outcome: Outcome | None = None
    awaiting: bool = False
    waiters: list[Any] = field(default_factory=list)  # duplicate trials asked meanwhile
    queued_at: float = 0.0  # monotonic: when it last joined the queue for a build slot

    @property
    def number(self) -> int | None:
        return None if self.trial is None else int(self.trial.number)

    @property
    def label(self) -> str:
        return "seed" if self.trial is None else f"trial {self.trial.number}"


def _gpu_here(mode: str) -> bool:
    if mode == "never":
        return False
    from tsopt.workers.machine import gpu_present

    present = gpu_present()
    if mode == "always" and not present:
        raise UserInputError("measurement was requested but no GPU is present on this machine")
    return present


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
        self.jobs: dict[str, Job] = {}
        self.to_evaluate: deque[Job] = deque()
        self.to_bundle: list[Job] = []
        self.interrupted = False
        self.stop_reason: str | None = None
        self.asked = 0
        self.rechecks = 0  # contender re-measurements submitted in this run
        self.cut_at_budget = False  # the time budget is spent: nothing new is started
        self.left_for_resume = 0  # candidates this run left unbuilt or unmeasured at the cut
        self.machine_checked = False
        self.best_value: float | None = None
        self.since_best = 0
        self.run_ids: dict[int, str] = {}
        self.baselines_recorded: set[tuple[str, str]] = set()
        self.cluster: Any = None
        self.pool: BuildPool = SerialBuildPool()
        self.measure_pool: MeasurePool | None = None
        self.started = time.monotonic()
        self.run_id = str(uuid.uuid4())
        self.heartbeat: Heartbeat | None = None
        self.foreign: list[ForeignWait] = []
        self.next_foreign_poll = 0.0
        self.gpu_queued_at: dict[int, float] = {}  # id(tag) -> monotonic, handed to the GPUs

    # -- set-up ----------------------------------------------------------------------------
    def run(self) -> int:
        """The main job; returns the exit code (0 done, 1 nothing valid could be built,
        130 interrupted)."""
        import optuna

        from tsopt.core.dsl_env import ensure_arch
        from tsopt.core.registry import get_space
        from tsopt.db.store import Store
        from tsopt.search.samplers import KnobView, parse_restrictions
        from tsopt.verify.verifier import VerdictCache, judge_for, predicting_judge

        request = self.request
        request.validate()
        ensure_arch(request.arch)
        space = get_space(request.space)
        # A space screens its knobs with the verifier, which it may not import: it is handed one.
        space.judge = judge_for(space)
        space.check(request.problem)
        if request.deterministic and not space.has_deterministic_schedule(request.problem):
            raise UserInputError(f"--deterministic: space {space.name!r} has no deterministic "
                                 f"schedule for {request.problem} (its reductions use "
                                 "atomics); drop --deterministic or choose another space")
        if request.arch not in space.archs:
            raise UserInputError(f"--arch {request.arch!r}: space {space.name!r} builds for "
                                 f"{', '.join(space.archs)}")
        self.space: SearchSpace = space
        self.target = space_target(request.space)
        knobs = space.knobs(request.problem)
        self.view = KnobView.of(space, request.problem, request.sampler,
                                parse_restrictions(request.knobs, knobs))

        # Refused before the database is touched: a refusal changes nothing.
        self._check_gpu_count()
        if request.ray_address:
            from tsopt.search.pools.ray_pool import check_reachable

            check_reachable(request.ray_address)
        self.store: Store = Store(request.db_url)
        # Whole verdicts are shared across studies through the database: the proposals'
        # factor verdicts and the candidates' alike are read before verifying, written after.
        self.verdicts = VerdictCache(lookup=self.store.find_verdict, judged=self.store,
                                     searches=self.store)
        space.judge = judge_for(space, self.verdicts)
        # Proposals and library genomes are screened in this process, where a TS exhaustive
        # search of seconds to minutes would hold up the builds and leave the GPU idle: they
        # get predictions (no search not already memoised); their workers verify in full.
        self.predict = predicting_judge(space, self.verdicts)
        # The GPU builds are made for: its SMs set the persistent grids, stream-K's layout,
        # the cost model's waves and the cache key; chosen before anything is judged or built.
        self.device, self.device_note = self._choose_device()
        space.device = self.device
        self.console.print(f"device: {self.device.describe()}: {self.device_note}",
                           highlight=False)
        self.name = request.study_name(self.device)
        # Optuna's side of the database first: one it cannot use must not leave a study behind.
        self.store.optuna_storage().engine.dispose()
        info = self.store.create_or_get_study(
            self.name, space.name, request.problem, request.arch, request.sampler,
            {"trials": request.trials, "time_budget_s": request.time_budget_s,
             "seed": request.seed, "knobs": list(request.knobs),
             "library": request.library_mode,
             "device": {"id": self.device.id, "sm_count": self.device.sm_count},
             **request.study_config},
            launch=request.launch,
        )
        self.launch = info.launch  # every measurement of the study is timed in its mode
        self.study = open_study(self.store, self.name,
                                optuna.samplers.RandomSampler(seed=request.seed))
        trials = self.study.get_trials(deepcopy=False)
        recorded_knobs = list(info.config.get("knobs", []))
        if trials and recorded_knobs != list(request.knobs):
            raise UserInputError(
                f"study {self.name!r} was run with knob restrictions {recorded_knobs or 'none'}; "
                f"this run asks for {list(request.knobs) or 'none'}: Optuna cannot change a "
                "parameter's choices within a study; pass --study NAME for a new one")
        recorded_device = info.config.get("device") or {"id": default_profile(request.arch).id,
                                                        "sm_count": default_profile(
                                                            request.arch).sm_count}
        if trials and recorded_device.get("sm_count") != self.device.sm_count:
            raise UserInputError(
                f"study {self.name!r} was built for {recorded_device.get('id')} "
                f"({recorded_device.get('sm_count')} SMs); this run targets "
                f"{self.device.describe()}: its kernels would be another GPU's; pass --study "
                "NAME for a new one (or --device for the study's GPU)")
        if info.status == "killed":
            when = f"{info.killed_at:%Y-%m-%d %H:%M:%S %Z}" if info.killed_at else "an unknown time"
            self.console.print(f"study {self.name} was killed (its last run was last heard of "
                               f"at {when}): resuming it", highlight=False)
        self.console.print(f"study {self.name}: timed in launch mode {self.launch} "
                           f"({LAUNCH_WORDS[self.launch]})", highlight=False)
        others = self.store.start_run(self.name, self.run_id)
        shipped = seed_store(self.store, space)
        if shipped:
            self.console.print(f"TS search memo: {shipped} exhaustive searches of committed "
                               "studies (this verifier version) added to the database",
                               highlight=False)
        if others:
            self.console.print(f"study {self.name}: {others} other run{'s' if others != 1 else ''}"
                               " at work on it; sharing its trials", highlight=False)
        try:
            return self._run(request, trials, others)
        finally:
            self.store.close()

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

            self.sampler.bind(self.space, request.problem,
                              declared_legal(self.space, request.problem, self.predict),
                              self.proposer.nearest_legal)
        heartbeat = Heartbeat(self.store, self.run_id, HEARTBEAT_S)
        self.heartbeat = heartbeat
        interrupted_before = signal.getsignal(signal.SIGINT)
        code = EXIT_INTERRUPTED
        try:
            self.recorded: dict[str, CandidateInfo] = {
                c.genome_hash: c for c in self.store.candidates(self.name)}
            self.asked = sum(1 for t in trials if t.state != optuna.trial.TrialState.WAITING)
            self._patience_history(trials)
            self.bundle_dir = request.bundle_dir or Path(".tsopt") / "bundles" / self.name
            if request.library and not trials:
                from tsopt.search.library import seed_study

                seed_study(self.study, self.space, self.view, request.problem, request.arch,
                           self.predict, lambda text: self.console.print(text, highlight=False),
                           exclude_self=request.library_exclude_self)
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

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        self.console.print("[yellow]interrupted:[/] no new trials; finishing the ones started "
                           "(Ctrl-C again to stop at once; the same command resumes)")

    def _patience_history(self, trials: list[Any]) -> None:
        for trial in sorted(trials, key=lambda t: t.number):
            if not trial.state.is_finished():
                continue
            self._count_for_patience(trial.value if trial.state.name == "COMPLETE" else None)

    def _count_for_patience(self, value: float | None) -> None:
        if value is not None and (self.best_value is None or value < self.best_value):
            self.best_value, self.since_best = value, 0
        elif self.best_value is not None:
            self.since_best += 1

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

    def _choose_device(self) -> tuple[DeviceProfile, str]:
        """The device profile this run builds for, and why: ``--device``; else the GPU that
        measures here (torch's name and SM count: a MIG slice or an unknown part gets a
        profile derived from its SMs); else the arch's default. ``--device`` with a GPU of
        another SM count measuring here is refused (the loader would refuse every kernel)."""
        from tsopt.core.devices import known_profiles, profile_for_gpu

        request = self.request
        chosen = request.profile()
        gpu = self._measuring_gpu()
        if chosen is not None:
            if gpu is not None and int(gpu["sm_count"]) != chosen.sm_count:
                raise UserInputError(
                    f"--device {chosen.id} has {chosen.sm_count} SMs but the GPU measuring "
                    f"here ({gpu['name']}) has {gpu['sm_count']}: drop --device, or build "
                    "for it where no GPU measures (a bundle for that GPU)")
            return chosen, "chosen with --device"
        if gpu is not None:
            found = profile_for_gpu(str(gpu["name"]), int(gpu["sm_count"]), request.arch)
            how = (f"derived from its {found.sm_count} SMs (no known profile of that name "
                   "and SM count: a MIG or MPS slice, or an unknown part)"
                   if found.derived else "its known profile")
            return found, f"the GPU that measures ({gpu['name']}, {gpu['sm_count']} SMs), {how}"
        default = default_profile(request.arch)
        return default, (f"the {request.arch} default, as no GPU measures here (--device NAME "
                         f"builds for another: {known_profiles(request.arch)})")

    def _measuring_gpu(self) -> dict[str, Any] | None:
        """The first GPU that will measure on this machine, as torch sees it, or None (no GPU,
        ``--measure never``, a Ray cluster's or an injected measurer). GPUs of two SM counts
        measuring one study are refused."""
        request = self.request
        if (self.injected_measure_pool is not None or request.ray_address
                or request.measure == "never"):
            return None
        from tsopt.workers.gpus import measuring_gpus
        from tsopt.workers.machine import gpu_identities, gpu_present

        if not gpu_present():
            return None
        found, why = gpu_identities()
        if not found:
            self.console.print(f"device: {why}; builds take the {request.arch} default",
                               highlight=False)
            return None
        indices = [d if d is not None else 0 for d in measuring_gpus(request.gpus, len(found))]
        chosen = [g for g in found if g.get("index") in indices] or found[:1]
        counts = sorted({int(g["sm_count"]) for g in chosen})
        if len(counts) > 1:
            raise UserInputError(f"the GPUs measuring here have {counts} SMs: one study builds "
                                 "for one SM count; pick GPUs of one kind (CUDA_VISIBLE_DEVICES"
                                 " or --gpus)")
        first: dict[str, Any] = dict(chosen[0])
        return first

    def _start_workers(self) -> None:
        request = self.request
        if self.injected_measure_pool is not None:
            self.measure_pool = self.injected_measure_pool
            kind = str(getattr(self.measure_pool, "name", "injected"))
            self.run_ids = {i: f"{kind}-{uuid.uuid4()}-{i}"
                            for i in range(self.measure_pool.slots)}
        workers, pool, rule = self._resolve_workers()
        if pool == "processes":
            from tsopt.search.pools.process_pool import ProcessBuildPool

            self.pool = ProcessBuildPool(workers)
            if self.measure_pool is None and _gpu_here(request.measure):
                self._measure_here()
            measuring = ("nothing measured here: built candidates go to the bundle"
                         if self.measure_pool is None else
                         f"measuring on {self.measure_pool.slots} of this machine's GPUs"
                         if self.measure_pool.slots > 1 else "measuring on this machine's GPU")
            self.console.print(f"workers: {self.pool.slots} build processes on this machine{rule} "
                               f"({measuring})", highlight=False)
        elif pool == "ray":
            from tsopt.search.pools.ray_pool import RayBuildPool, RayMeasurePool, start_ray

            self.cluster = start_ray(request.ray_address, workers, request.arch)
            slots = workers or max(1, self.cluster.cpus)
            self.pool = RayBuildPool(slots)
            gpus = self.cluster.gpus if request.measure != "never" else 0
            devices: tuple[int | None, ...] = ()
            if (not gpus and request.measure != "never" and not request.ray_address
                    and self.measure_pool is None and _gpu_here("auto")):
                # Ray counted no GPU on this machine, which has some: actors on device indices.
                from tsopt.workers.gpus import measuring_gpus

                devices = measuring_gpus(request.gpus)
                gpus = len(devices)
            if request.measure == "always" and not gpus and self.measure_pool is None:
                raise UserInputError("measurement was requested but the Ray cluster has no GPU")
            if request.gpus is not None and not devices and gpus:
                if request.gpus > gpus:
                    raise UserInputError(f"--gpus {request.gpus}: the Ray cluster has {gpus} "
                                         f"GPU{'s' if gpus != 1 else ''}")
                gpus = request.gpus
            if gpus and self.measure_pool is None:
                self.measure_pool = (
                    RayMeasurePool(gpus, gpus_per_actor=0,
                                   devices=[d if d is not None else 0 for d in devices])
                    if devices else RayMeasurePool(gpus))
                self.run_ids = {i: f"ray-{uuid.uuid4()}-gpu{i}" for i in range(gpus)}
            where = request.ray_address or "a local Ray cluster"
            self.console.print(f"workers: {slots} build slots on {where}{rule} "
                               f"({self.cluster.cpus} CPUs, {self.cluster.gpus} GPUs)",
                               highlight=False)
        else:
            self.pool = SerialBuildPool()
            if self.measure_pool is None and _gpu_here(request.measure):
                self._measure_here()
            if rule:
                self.console.print(f"workers: building in this process, one at a time{rule}",
                                   highlight=False)
        if self.measure_pool is not None:
            self.stats.measuring_since = time.monotonic()
        if self.measure_pool is not None and hasattr(self.measure_pool, "priority"):
            # The GPU is the narrow end at large problems (a 8192^3 study builds faster than
            # it measures): what waits is measured in the model's order, not the proposals'.
            self.measure_pool.priority = self._measure_priority

    def _resolve_workers(self) -> tuple[int, str, str]:
        """How many build workers, on which pool (``serial``, ``processes`` or ``ray``), and
        the rule that chose the count when ``--workers`` was not given (else "")."""
        from tsopt.search.request import DRIVER_CORES, auto_workers, machine_cores

        request = self.request
        if request.ray_address:
            # Joining a cluster with no count: as many build slots as the cluster has CPUs.
            return request.workers or 0, "ray", ""
        if request.workers == 0:
            return 0, "serial", ""
        if request.workers is not None:
            return request.workers, "processes" if request.pool == "processes" else "ray", ""
        gpus = self._gpus_measured_here()
        cores = machine_cores()
        workers = auto_workers(cores, gpus)
        rule = (f" (--workers auto: {cores} core{'s' if cores != 1 else ''} less "
                f"{DRIVER_CORES} for the driver and {gpus} for measuring)")
        if request.pool is not None:
            return max(1, workers), request.pool, rule
        return workers, "processes" if workers else "serial", rule

    def _gpus_measured_here(self) -> int:
        """GPUs this process will measure on (each takes a core of the driver's machine)."""
        if self.injected_measure_pool is not None:
            return int(self.injected_measure_pool.slots)
        if self.request.measure == "never":
            return 0
        from tsopt.workers.machine import gpu_present

        if not gpu_present():
            return 0
        from tsopt.workers.gpus import measuring_gpus

        return len(measuring_gpus(self.request.gpus))

    def _check_gpu_count(self) -> None:
        """``--gpus N`` beyond this machine's GPUs is refused before anything is recorded
        (a Ray cluster's GPUs are counted when it is joined)."""
        request = self.request
        if (request.gpus is None or request.measure == "never" or request.ray_address
                or self.injected_measure_pool is not None):
            return
        from tsopt.workers.machine import gpu_present

        if not gpu_present():
            raise UserInputError(f"--gpus {request.gpus}: this machine has no GPU (without "
                                 "--gpus, built candidates go to a bundle for `tsopt measure`)")
        from tsopt.workers.gpus import measuring_gpus

        measuring_gpus(request.gpus)  # raises naming the count it sees

    def _measure_priority(self, tag: Any) -> float | None:
        """A queued candidate's rank for the GPU: the sampler's predicted time for its trial.
        None (first come, first measured, before every ranked one) for re-measurements, the
        seed, a sampler that does not predict (or predicts nothing for the trial: evolve's
        survey), and the genomes a study was started from (origin
        ``warm_start``: the seed library's and nearby studies' best): they are measured evidence of what is
        best, which the model must not overrule (a fresh 8192^3 study on the H200 never
        measured the library's best genome, a stream-K kernel the analytical estimate ranks
        behind: bench/tune_gpu round 8)."""
        predict = getattr(getattr(self, "sampler", None), "predicted", None)
        if (predict is None or not isinstance(tag, Job) or tag.trial is None
                or tag.origin != "suggest"):
            return None
        predicted = predict(tag.trial.params)
        return None if predicted is None else float(predicted)

    def _measure_here(self) -> None:
        """One measuring worker per GPU of this machine (``--gpus``), each pinned to its GPU;
        each has a run id of its own (a baseline is recorded per GPU)."""
        from tsopt.workers.gpus import measuring_gpus

        devices = measuring_gpus(self.request.gpus)
        self.measure_pool = InlineMeasurePool(gpus=devices)
        run = uuid.uuid4()
        self.run_ids = ({0: f"inline-{run}"} if len(devices) == 1
                        else {i: f"inline-{run}-gpu{d}" for i, d in enumerate(devices)})

    def _close_workers(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.measure_pool is not None:
            for summary in self.measure_pool.close():
                self.console.print(summary, highlight=False)
        if self.cluster is not None:
            from tsopt.search.pools.ray_pool import stop_ray

            stop_ray(self.cluster)

    # -- the loop --------------------------------------------------------------------------
    def _search(self) -> int:
        request = self.request
        title = f"tune {self.space.name} {request.problem}"
        with TuneProgress(self.console, self.stats, title, request.trials,
                          self.asked) as progress:
            self._resume()
            while True:
                self._fill()
                if not self.cut_at_budget and self._budget_spent():
                    self._cut()
                timeout = POLL_S if self.pool.busy() else 0.0
                for built in self.pool.poll(timeout):
                    self._evaluated(built)
                if self.measure_pool is not None:
                    busy = self.pool.busy() or self.to_evaluate
                    for measured in self.measure_pool.poll(0.0 if busy else POLL_S):
                        self._measured(measured)
                self._flush_bundle()
                self._poll_foreign()
                progress.update(self.asked, self._time_left())
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
        self._confirm()
        if self.interrupted:
            return EXIT_INTERRUPTED
        print_summary(self.console, self.store, self.name, self.stats,
                      self.measure_pool is not None, self.bundle_dir, seconds)
        self.console.print(f"built for {self.device.describe()}: {self.device_note}",
                           highlight=False)
        # A run whose proposals were all rejected did its job; one that built nothing valid not.
        return 1 if self.stats.valid and not self.stats.built else 0

    def _time_left(self) -> float | None:
        budget = self.request.time_budget_s
        return None if budget is None else budget - (time.monotonic() - self.started)

    def _budget_spent(self) -> bool:
        budget = self.request.time_budget_s
        return budget is not None and time.monotonic() - self.started > budget

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

    def _idle(self) -> bool:
        measuring = self.measure_pool.pending() if self.measure_pool is not None else 0
        if self.cut_at_budget and self.measure_pool is not None:
            # Builds under way are abandoned; only a measurement in flight is waited for.
            return not (measuring or self.to_bundle or self.foreign)
        return not (self.pool.busy() or self.to_evaluate or measuring or self.to_bundle
                    or self.foreign)

    def _may_ask(self) -> bool:
        from tsopt.search.samplers import grid_exhausted

        request = self.request
        if self.interrupted or self.stop_reason:
            return False
        if request.trials is not None and self.asked >= request.trials:
            self.stop_reason = "trials"
        elif (spent := self._candidate_budget_spent()) is not None:
            self.stop_reason = spent
        elif request.time_budget_s is not None and (
                time.monotonic() - self.started > request.time_budget_s):
            self.stop_reason = f"time budget of {request.time_budget_s:.0f} s reached"
        elif (request.patience is not None and self.best_value is not None
              and self.since_best >= request.patience):
            self.stop_reason = (f"{self.since_best} trials without improvement "
                                f"(--patience {request.patience})")
        elif request.sampler == "grid" and (self.asked >= self.view.grid_size()
                                            or grid_exhausted(self.sampler, self.study)):
            self.stop_reason = "grid exhausted: every knob combination was proposed"
        if self.stop_reason:
            return False
        # Backpressure: proposals wait while the GPUs have a queue (the sampler learns more).
        if self.measure_pool is not None:
            return bool(self.measure_pool.pending() < 2 * max(self.pool.slots,
                                                              self.measure_pool.slots))
        return True

    def _candidate_budget_spent(self) -> str | None:
        """Why --built or --measured ends the run, else None: the study's totals (as --trials),
        read from the database, so that runs sharing a study share these budgets too."""
        request = self.request
        if request.built is None and request.measured is None:
            return None
        if request.measured is not None and self.measure_pool is None:
            return (f"--measured {request.measured}: nothing is measured on this machine (no GPU); "
                    "built candidates go to the bundle: bound them with --built")
        held = self.store.funnel(self.name)
        if request.built is not None and held["built"] >= request.built:
            return f"the study holds {held['built']} built candidates (--built {request.built})"
        if request.measured is not None and held["timed"] >= request.measured:
            return f"the study holds {held['timed']} timed candidates (--measured {request.measured})"
        return None

    def _fill(self) -> None:
        while self.pool.free() > 0:
            if self.to_evaluate:
                self._submit(self.to_evaluate.popleft())
                continue
            if not self._may_ask():
                return
            trial = self._ask()
            if trial is None:
                return
            self._admit(trial)

    def _ask(self) -> Any:
        """A new trial, or None when the study's ``--trials`` are spent: the study's trials
        are counted and the trial asked under the study's lock across processes, so that runs
        sharing the study share its budget; the trial is marked as this run's."""
        import optuna

        if self.heartbeat is not None and self.heartbeat.error is not None:
            raise UserInputError(self.heartbeat.error)
        with self.store.study_lock(self.name):
            counted = sum(1 for t in self.study.get_trials(deepcopy=False)
                          if t.state != optuna.trial.TrialState.WAITING)
            self.asked = counted
            if self.request.trials is not None and counted >= self.request.trials:
                self.stop_reason = "trials"
                return None
            trial = self.study.ask()
            trial.set_user_attr(RUN_ATTR, self.run_id)
        self.asked = counted + 1
        return trial

    # -- candidates ------------------------------------------------------------------------
    def _resume(self) -> None:
        """Take up what an earlier run left: the seed, then every unfinished trial."""
        import optuna

        seed = self.proposer.within_restrictions(self.space.seed_genome(self.request.problem))
        claim = self.store.claim_candidate(self.name, seed, "seed", None, self.run_id)
        recorded = claim.info
        # A seed another live run holds is that run's to finish.
        if claim.mine and outcome_of(recorded.verdict, recorded.build,
                                     recorded_measurement(recorded)) is None:
            job = Job(seed, claim.candidate_id, "seed")
            job.verdict, job.build = recorded.verdict, recorded.build
            self.jobs[seed.hash] = job
            self._advance(job)
        taken = []
        with self.store.study_lock(self.name):
            live = self.store.live_runs(self.name) - {self.run_id}
            stale = self.study.get_trials(deepcopy=False,
                                          states=(optuna.trial.TrialState.RUNNING,))
            for frozen in sorted(stale, key=lambda t: t.number):
                if "awaiting_measurement" in frozen.user_attrs and self.measure_pool is None:
                    continue  # measured by `tsopt measure` + `tsopt ingest`
                if frozen.user_attrs.get(RUN_ATTR) in live:
                    continue  # a run of another process works on it
                trial = optuna.trial.Trial(self.study, frozen._trial_id)
                trial.set_user_attr(RUN_ATTR, self.run_id)
                taken.append(trial)
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
            self._tell(trial, Outcome(state="fail", attrs={"suggest_error": str(exc)[:500]}))
            return
        self.stats.proposed += 1
        trial.set_user_attr("genome_hash", genome.hash)
        if self.request.deterministic and not self.space.is_deterministic(genome):
            # Not a verdict: the schedule is valid, only not what this run asked for, so
            # nothing is recorded for other studies to reuse.
            self.stats.rejected[DETERMINISTIC_RULE] += 1
            self._tell(trial, Outcome(state="pruned", attrs={"rule": DETERMINISTIC_RULE}))
            return
        self._place(trial, genome, origin)

    def _place(self, trial: Any, genome: Genome, origin: str) -> None:
        """Start the trial's job, or tell it the known outcome of the trial (of any run) that
        has its genome, or wait for the live run of another process that holds it."""
        current = self.jobs.get(genome.hash)
        if current is not None and current.number != trial.number:
            self.stats.duplicates += 1
            if current.outcome is not None or current.awaiting:
                self._tell(trial, self._duplicate_outcome(current.outcome, current.label))
            else:
                current.waiters.append(trial)
            return
        claim = self.store.claim_candidate(self.name, genome, origin if origin in ORIGINS
                                           else "suggest", trial.number, self.run_id)
        recorded = claim.info
        label = "seed" if recorded.origin == "seed" else f"trial {recorded.trial_number}"
        known = outcome_of(recorded.verdict, recorded.build, recorded_measurement(recorded))
        if (not claim.created and claim.mine and known is None and recorded.origin != "seed"
                and recorded.trial_number != trial.number and not self._awaits_bundle(recorded)):
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
            self._advance(job)
            return
        self.stats.duplicates += 1
        if known is None and not claim.mine and not self._awaits_bundle(recorded):
            self.foreign.append(ForeignWait(trial, genome, origin, claim.candidate_id, label))
            return
        self._tell(trial, self._duplicate_outcome(known, label))

    def _awaits_bundle(self, recorded: CandidateInfo) -> bool:
        """A built, unmeasured candidate when nothing is measured here: it waits in a bundle."""
        return (self.measure_pool is None and recorded.build is not None and recorded.build.ok
                and not recorded.measurements)

    def _poll_foreign(self) -> None:
        """Tell the trials waiting on other processes' candidates the outcomes recorded since;
        take up those whose holder is gone. Sleeps a little when nothing else is to be done."""
        if not self.foreign:
            return
        now = time.monotonic()
        if now < self.next_foreign_poll:
            if not (self.pool.busy() or self.to_evaluate or self.to_bundle or (
                    self.measure_pool is not None and self.measure_pool.pending())):
                time.sleep(min(POLL_S, self.next_foreign_poll - now))
            return
        self.next_foreign_poll = now + FOREIGN_POLL_S
        waiting, self.foreign = self.foreign, []
        for wait in waiting:
            recorded, holder = self.store.candidate(self.name, wait.candidate_id)
            known = outcome_of(recorded.verdict, recorded.build, recorded_measurement(recorded))
            if known is not None:
                self._tell(wait.trial, known.duplicate(wait.label))
            elif holder is None:
                self._place(wait.trial, wait.genome, wait.origin)  # its run is gone: take over
            elif self._awaits_bundle(recorded):
                self._tell(wait.trial, self._duplicate_outcome(None, wait.label))
            else:
                self.foreign.append(wait)

    @staticmethod
    def _duplicate_outcome(known: Outcome | None, label: str) -> Outcome:
        if known is None:
            return Outcome(state="fail", attrs={"duplicate_of": label,
                                                "fail_reason": f"duplicate of {label}, which "
                                                "awaits measurement"})
        return known.duplicate(label)

    def _advance(self, job: Job) -> None:
        """Send the job to the stage it needs next (or finish it from what is recorded)."""
        outcome = outcome_of(job.verdict, job.build, job.measurement)
        if outcome is not None:
            self._finish(job, outcome)
            return
        built = job.build is not None and job.build.ok and bool(job.build.artifact_dir) and \
            Path(job.build.artifact_dir or "").exists()
        if job.verdict is None or not built:
            job.queued_at = time.monotonic()
            self.to_evaluate.append(job)
            return
        self._to_measure(job)

    def _submit(self, job: Job) -> None:
        request = self.request
        known_ts = None
        judged = self._judged(job.genome)
        if judged is not None and not judged.valid:
            # Judged before, by this study or another: nothing to verify, nothing to build.
            self._evaluated(BuildDone(job, Evaluation(judged, judged_verdict_key(
                self.space, job.genome, request.problem, judged))))
            return
        key = verdict_key_of(self.space, job.genome, request.problem)
        searches: tuple[dict[str, Any], ...] = ()
        if judged is None and key is not None:
            found = self.store.find_verdict(self.space.name, key)
            known_ts = found.to_dict() if found is not None else None
            searches = self._known_searches(job.genome)
        self.pool.submit(job, EvaluateRequest(
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

    def _evaluated(self, built: BuildDone) -> None:
        job, evaluation = built.tag, built.evaluation
        if evaluation is None:
            self._worker_failed(job, built.failure or "the worker gave no evaluation")
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
            self._finish(job, outcome_of(verdict, None, None) or Outcome(state="pruned"))
            return
        self.stats.valid += 1
        if build is None:
            return
        if not build.ok and self.interrupted:
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
            self._finish(job, outcome_of(verdict, build, None) or Outcome(state="fail"))
            return
        self.stats.built += 1
        self.stats.build_cache_hits += build.cache_hit
        self._to_measure(job)

    def _worker_failed(self, job: Job, why: str) -> None:
        """A worker (a Ray task or a build process) died twice on this candidate: record its
        verdict (judged here) and a failed build, and tell the trial FAIL."""
        from tsopt.build.builder import cache_key
        from tsopt.verify.verifier import VerdictCache, verdict_cache_key, verify_genome

        if self.interrupted:
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
            self._finish(job, outcome_of(job.verdict, None, None) or Outcome(state="pruned"))
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
        self._finish(job, outcome_of(job.verdict, build, None) or Outcome(state="fail"))

    def _to_measure(self, job: Job) -> None:
        assert job.build is not None and job.build.artifact_dir
        if self.measure_pool is not None and self.cut_at_budget:
            self.left_for_resume += 1  # built after the cut: measured by a later run
            return
        if self.measure_pool is not None:
            self._submit_measure(job, MeasureRequest(job.build.artifact_dir, job.genome.hash,
                                                     self.request.problem.to_dict(),
                                                     launch=self.launch))
        else:
            self.to_bundle.append(job)

    def _submit_measure(self, tag: Any, request: MeasureRequest) -> None:
        assert self.measure_pool is not None
        self.gpu_queued_at[id(tag)] = time.monotonic()
        self.measure_pool.submit(tag, request)

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

    def _flush_bundle(self) -> None:
        """Add the built candidates to the bundle; their trials wait for `tsopt ingest`."""
        if not self.to_bundle:
            return
        from tsopt.core.bundle import BundleEntry, write_bundle

        jobs, self.to_bundle = self.to_bundle, []
        request = self.request
        write_bundle(
            self.bundle_dir, study=self.name, space=self.space.name, problem=request.problem,
            arch=request.arch, append=True,  # other runs of the study may write it too
            launch=self.launch,
            candidates=[BundleEntry(j.genome, Path(j.build.artifact_dir or ""), j.origin)
                        for j in jobs if j.build is not None],
        )
        for job in jobs:
            job.awaiting = True
            self.stats.awaiting += 1
            if job.trial is not None:
                job.trial.set_user_attr("awaiting_measurement", str(self.bundle_dir))
            for waiter in job.waiters:
                self._tell(waiter, self._duplicate_outcome(None, job.label))
            job.waiters.clear()

    def _measured(self, done: MeasureDone) -> None:
        job, result = done.tag, done.result
        wait = self._gpu_wait(done)
        if isinstance(job, Remeasure):
            self._remeasured(job, done, wait)
            return
        if result.unusable is not None or result.measurement is None:
            # This GPU cannot measure at all (its baseline failed): bundle from here on.
            self.console.print(f"[bold red]measuring stopped:[/] {result.unusable}; built "
                               f"candidates go to the bundle {self.bundle_dir}", highlight=False)
            assert self.measure_pool is not None
            queued = self.measure_pool.drop_queued()
            self.measure_pool.close()
            self.measure_pool = None
            self.to_bundle.extend([job, *queued])
            return
        measured = result.measurement
        if measured.status == "crash" and self.interrupted:
            return  # the Ctrl-C may have reached the worker: the next run measures it
        run_id = self.run_ids.get(done.worker, "ray")
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
        self._finish(job, outcome_of(job.verdict, job.build, measured) or Outcome(state="fail"))

    def _note_machine(self, measured: Measurement) -> None:
        """On this run's first timing, say so if the study was measured on another device,
        driver or clock limit before: ratios stay comparable, absolute times do not."""
        if self.machine_checked or measured.status != "ok":
            return
        self.machine_checked = True
        limit = measured.conditions.get("sm_mhz_limit")
        now = (measured.device, measured.driver, limit)
        seen = set()
        for c in self.store.candidates(self.name):
            for r in c.measurements:
                m = r.measurement
                if m.status == "ok" and m.device and r.run_id not in self.run_ids.values():
                    seen.add((m.device, m.driver, m.conditions.get("sm_mhz_limit")))
        before = {s for s in seen if s != now and s[0]}
        if seen and before:
            was = "; ".join(f"{d} (driver {v or '?'}, SM clock limit {c or '?'} MHz)"
                            for d, v, c in sorted(before, key=str))
            self.console.print(
                f"[yellow]note:[/] study {self.name} was measured before on {was}; this run "
                f"measures on {now[0]} (driver {now[1] or '?'}, SM clock limit {now[2] or '?'} "
                "MHz): ratios to the baseline stay comparable, absolute times do not",
                highlight=False)
            self.study.set_user_attr("machines_changed", True)

    # -- measuring again: contenders, and the final confirmation ---------------------------
    def _recheck_if_contender(self, job: Job, measured: Measurement, gpu: int) -> None:
        """A first ratio within CONTENDER_WITHIN of the incumbent's (or above it): measure the
        candidate again, and the incumbent beside it while the incumbent has fewer than
        INCUMBENT_CHECKS measurements, so neither ranks on one draw; both on ``gpu`` (the
        pool's worker that measured the candidate)."""
        if self.measure_pool is None or measured.ratio is None or self.interrupted:
            return
        ranked = self.store.ranked(self.name, limit=2)
        incumbent = next((r for r in ranked if r.genome_hash != job.genome.hash), None)
        if (incumbent is None or incumbent.standing is None or incumbent.standing.ratio is None
                or measured.ratio < incumbent.standing.ratio * (1 - CONTENDER_WITHIN)):
            return
        problem = self.request.problem.to_dict()
        again = [(job.candidate_id, job.genome.hash,
                  job.build.artifact_dir if job.build else None)]
        if incumbent.standing.measurements < INCUMBENT_CHECKS:
            again.insert(0, (incumbent.candidate_id, incumbent.genome_hash,
                             incumbent.build.artifact_dir if incumbent.build else None))
        for candidate_id, genome_hash, artifact in again:
            if artifact and Path(artifact).exists():
                self.rechecks += 1
                self._submit_measure(
                    Remeasure(candidate_id, genome_hash, f"recheck{self.rechecks}"),
                    MeasureRequest(artifact, genome_hash, problem, gpu=gpu, launch=self.launch))

    def _remeasured(self, tag: Remeasure, done: MeasureDone, wait: float | None) -> None:
        measured = done.result.measurement
        if measured is None or done.result.unusable is not None:
            return  # a remeasurement adds evidence; without one the first stands
        run_id = f"{self.run_ids.get(done.worker, 'ray')}-{tag.label}"
        self.store.record_measurement(tag.candidate_id, measured, run_id, wait_s=wait)
        self.stats.remeasured += 1

    def _confirm(self) -> None:
        """The final paired round over the top k, then the winner named (tsopt.search.confirm)."""
        if self.measure_pool is None or self.interrupted:
            return
        ranked = self.store.ranked(self.name, limit=CONFIRM_TOP_K)
        order = confirmation_requests(ranked, self.request.problem.to_dict(), gpu=0,
                                      launch=self.launch)
        if len(ranked) < 2 or not order:
            return
        self.console.print(f"confirming the top {len(ranked)}: each measured again, twice, in "
                           "alternation", highlight=False)
        for tag, request in order:
            self._submit_measure(tag, request)
        while self.measure_pool is not None and self.measure_pool.pending() and not self.interrupted:
            for done in self.measure_pool.poll(POLL_S):
                self._measured(done)
        winner = name_winner(self.store, self.name, len(ranked))
        if winner is None:
            return
        self.console.print(winner.describe(), highlight=False)
        s = winner.standing
        self.study.set_user_attr("winner", s.genome_hash)
        self.study.set_user_attr("winner_ratio", s.ratio)
        self.study.set_user_attr("winner_ratio_95", [s.ratio_lo, s.ratio_hi])
        self.study.set_user_attr("winner_unseparated", [u.genome_hash for u in winner.unseparated])

    # -- telling ---------------------------------------------------------------------------
    def _finish(self, job: Job, outcome: Outcome) -> None:
        job.outcome = outcome
        if job.trial is not None:
            self._tell(job.trial, outcome)
        for waiter in job.waiters:
            self._tell(waiter, outcome.duplicate(job.label))
        job.waiters.clear()

    def _tell(self, trial: Any, outcome: Outcome) -> None:
        if not tell(self.study, trial, outcome):
            return  # another process told it first
        self.stats.told += 1
        self._count_for_patience(outcome.value_for(self.study))


def resumed_seed(seed: int, trials: int) -> int:
    """The sampler seed of a run that finds ``trials`` trials in its study (``seed`` for a new
    study): the same history gives the same seed, a longer one another."""
    if trials == 0:
        return seed
    return (seed * 1_000_003 + trials * 7_919) % (2**31 - 1)


def recorded_measurement(info: CandidateInfo) -> Measurement | None:
    """A recorded candidate's best correct timing, else its latest measurement of any status."""
    best = info.best
    if best is not None:
        return best.measurement
    return info.measurements[-1].measurement if info.measurements else None


def run_tune(request: TuneRequest, console: Console) -> int:
    """The main job. Returns the exit code: 0 done, 1 valid candidates but none could be
    built, 130 interrupted (Ctrl-C; the same command resumes)."""
    return Driver(request, console).run()
