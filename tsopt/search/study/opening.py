"""A run's set-up: the request checked, the space and device chosen, the study opened and joined.

In order, so that a refusal changes nothing: the request and the space's own checks, this
machine's GPUs (``--gpus``) and a ``--ray-address`` head; then the database, the device
profile builds are made for (:func:`tsopt.search.study.machine.choose_device`), the study
(created, or found and checked against what it was run with: knob restrictions, the SM
count), and this run registered among the study's runs, with the shipped TS search memo
copied in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tsopt.core.devices import DeviceProfile, default_profile
from tsopt.core.errors import UserInputError
from tsopt.search.outcomes import open_study
from tsopt.search.pipeline import space_target
from tsopt.search.study.machine import check_gpu_count, choose_device
from tsopt.search.transfer import study_prior
from tsopt.search.ts_memo import seed_store

if TYPE_CHECKING:
    from rich.console import Console

    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store
    from tsopt.db.views import StudyInfo
    from tsopt.search.request import TuneRequest
    from tsopt.search.samplers import KnobView
    from tsopt.verify.verifier import VerdictCache

LAUNCH_WORDS = {"graph": "back-to-back launches in one CUDA graph per side",
                "eager": "calls through the export's loader, host launch cost included",
                "isolated": "each launch alone after a spin kernel: a study made before the "
                            "launch modes"}


@dataclass
class OpenedStudy:
    """What a run works with once it is set up (the store is open: the run closes it)."""

    space: SearchSpace
    target: str  # the space's import target, for build workers
    view: KnobView
    store: Store
    verdicts: VerdictCache  # whole verdicts, shared across studies through the database
    predict: Any  # the predicting judge: proposals and library genomes screened here
    device: DeviceProfile
    device_note: str  # why that profile
    prior: Any  # what evolve's cost model starts from (transfer.study_prior; None: the estimate)
    prior_note: str  # which, and why
    name: str
    launch: str  # every measurement of the study is timed in its mode
    study: Any  # Optuna's
    trials: list[Any]  # the study's trials when the run started
    others: int  # runs of other processes at work on the study


def load_space(request: TuneRequest) -> SearchSpace:
    """The request checked and its space, judged by the verifier, with the problem checked."""
    from tsopt.core.dsl_env import ensure_arch
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for

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
    return space


def open_run(request: TuneRequest, console: Console, run_id: str,
             injected: Any = None) -> OpenedStudy:
    """Set the run up (see the module doc); ``injected`` is a measure pool in place of the
    GPUs. Raises :class:`UserInputError` naming what is refused."""
    import optuna

    from tsopt.db.store import Store
    from tsopt.search.samplers import KnobView, parse_restrictions
    from tsopt.verify.verifier import VerdictCache, judge_for, predicting_judge

    space = load_space(request)
    knobs = space.knobs(request.problem)
    view = KnobView.of(space, request.problem, request.sampler,
                       parse_restrictions(request.knobs, knobs))
    # Refused before the database is touched: a refusal changes nothing.
    check_gpu_count(request, injected)
    if request.ray_address:
        from tsopt.search.pools.ray_pool import check_reachable

        check_reachable(request.ray_address)
    store = Store(request.db_url)
    # Whole verdicts are shared across studies through the database: the proposals'
    # factor verdicts and the candidates' alike are read before verifying, written after.
    verdicts = VerdictCache(lookup=store.find_verdict, judged=store, searches=store)
    space.judge = judge_for(space, verdicts)
    # Proposals and library genomes are screened in this process, where a TS exhaustive
    # search of seconds to minutes would hold up the builds and leave the GPU idle: they
    # get predictions (no search not already memoised); their workers verify in full.
    predict = predicting_judge(space, verdicts)
    # The GPU builds are made for: its SMs set the persistent grids, stream-K's layout,
    # the cost model's waves and the cache key; chosen before anything is judged or built.
    device, device_note = choose_device(request, console, injected)
    space.device = device
    console.print(f"device: {device.describe()}: {device_note}", highlight=False)
    prior, prior_note = study_prior(request.cost_prior, space.name, request.problem, device,
                                    request.library_exclude_self)
    # Recorded where a cost model ranks with it: evolve on a GEMM.
    ranks = request.sampler == "evolve" and space.name == "gemm"
    name = request.study_name(device)
    # Optuna's side of the database first: one it cannot use must not leave a study behind.
    store.optuna_storage().engine.dispose()
    info = store.create_or_get_study(
        name, space.name, request.problem, request.arch, request.sampler,
        {"trials": request.trials, "time_budget_s": request.time_budget_s,
         "seed": request.seed, "knobs": list(request.knobs),
         "library": request.library_mode, "library_refit": request.library_refit,
         # What the cost model started from: the prior asked for, unless it stood aside.
         **({"cost_prior": request.cost_prior if prior is not None else "analytical"}
            if ranks else {}),
         "device": {"id": device.id, "sm_count": device.sm_count},
         **request.study_config},
        launch=request.launch,
    )
    study = open_study(store, name, optuna.samplers.RandomSampler(seed=request.seed))
    trials = study.get_trials(deepcopy=False)
    check_recorded(request, info, trials, name, device)
    others = join(store, space, console, info, name, run_id)
    return OpenedStudy(space, space_target(request.space), view, store, verdicts, predict,
                       device, device_note, prior, prior_note, name, info.launch, study, trials,
                       others)


def check_recorded(request: TuneRequest, info: StudyInfo, trials: list[Any], name: str,
                   device: DeviceProfile) -> None:
    """A study with trials is resumed only as it was run: the same knob restrictions (Optuna
    cannot change a parameter's choices within a study) and a GPU of the same SM count."""
    recorded_knobs = list(info.config.get("knobs", []))
    if trials and recorded_knobs != list(request.knobs):
        raise UserInputError(
            f"study {name!r} was run with knob restrictions {recorded_knobs or 'none'}; "
            f"this run asks for {list(request.knobs) or 'none'}: Optuna cannot change a "
            "parameter's choices within a study; pass --study NAME for a new one")
    recorded_device = info.config.get("device") or {"id": default_profile(request.arch).id,
                                                    "sm_count": default_profile(
                                                        request.arch).sm_count}
    if trials and recorded_device.get("sm_count") != device.sm_count:
        raise UserInputError(
            f"study {name!r} was built for {recorded_device.get('id')} "
            f"({recorded_device.get('sm_count')} SMs); this run targets "
            f"{device.describe()}: its kernels would be another GPU's; pass --study "
            "NAME for a new one (or --device for the study's GPU)")


def join(store: Store, space: SearchSpace, console: Console, info: StudyInfo, name: str,
         run_id: str) -> int:
    """Register run ``run_id`` on study ``name`` and copy the shipped TS search memo in;
    returns how many runs of other processes are at work on it."""
    if info.status == "killed":
        when = f"{info.killed_at:%Y-%m-%d %H:%M:%S %Z}" if info.killed_at else "an unknown time"
        console.print(f"study {name} was killed (its last run was last heard of "
                      f"at {when}): resuming it", highlight=False)
    console.print(f"study {name}: timed in launch mode {info.launch} "
                  f"({LAUNCH_WORDS[info.launch]})", highlight=False)
    others: int = store.start_run(name, run_id)
    shipped = seed_store(store, space)
    if shipped:
        console.print(f"TS search memo: {shipped} exhaustive searches of committed "
                      "studies (this verifier version) added to the database", highlight=False)
    if others:
        console.print(f"study {name}: {others} other run{'s' if others != 1 else ''}"
                      " at work on it; sharing its trials", highlight=False)
    return others
