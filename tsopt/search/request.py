"""What one ``tsopt tune`` run is asked to do (:class:`TuneRequest`), checked before anything
starts. :func:`tsopt.search.driver.run_tune` carries it out."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsopt.core.devices import DeviceProfile, check_fits, default_profile, get_profile
from tsopt.core.errors import UserInputError
from tsopt.core.names import check_study_name
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import CHOOSABLE_LAUNCH_MODES
from tsopt.search.samplers import SAMPLERS

POOLS = ("ray", "processes")  # what `--workers N` verifies and builds on
LIBRARY_ON, LIBRARY_OFF, LIBRARY_EXCLUDE_SELF = "on", "off", "exclude-self"
LIBRARY_MODES = (LIBRARY_ON, LIBRARY_OFF, LIBRARY_EXCLUDE_SELF)
"""What a study started from (``TuneRequest.library_mode``)."""

WORKERS_PER_CORE = 4
"""``--workers`` on this machine: at most this many per core (and at least
:data:`MIN_WORKERS_BOUND` allowed): a build holds a core and gigabytes, and more workers than
that only queue."""
MIN_WORKERS_BOUND = 64
MAX_CLUSTER_WORKERS = 4096
"""``--workers`` with ``--ray-address``: the cluster's cores are not this machine's."""
RAY_CONNECT_TIMEOUT_S = 3.0
"""How long ``--ray-address`` may take to answer a connection before the run is refused
(Ray's own connect retries for minutes)."""


def max_workers(ray_address: str | None) -> int:
    """The most ``--workers`` a run may ask for: :data:`WORKERS_PER_CORE` per core of this
    machine (at least :data:`MIN_WORKERS_BOUND`), or :data:`MAX_CLUSTER_WORKERS` on a cluster."""
    if ray_address:
        return MAX_CLUSTER_WORKERS
    return max(MIN_WORKERS_BOUND, WORKERS_PER_CORE * (os.cpu_count() or 1))


def check_ray_address(address: str) -> None:
    """UserInputError unless ``address`` (HOST:PORT or ray://HOST:PORT; ``auto`` is Ray's to
    find) answers a TCP connection within :data:`RAY_CONNECT_TIMEOUT_S`."""
    if address in ("auto", "local"):
        return
    host, sep, port_text = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UserInputError(f"--ray-address {address!r} is not HOST:PORT (or ray://HOST:PORT, "
                             "or auto)")
    try:
        with socket.create_connection((host, int(port_text)), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise UserInputError(
            f"--ray-address {address!r}: nothing answers at {host}:{port_text} within "
            f"{RAY_CONNECT_TIMEOUT_S:g} s ({why}); start the cluster's head there "
            "(`ray start --head`) or leave --ray-address out") from None


@dataclass(frozen=True)
class TuneRequest:
    """Everything one ``tsopt tune`` run needs.

    ``trials`` is the study's total of proposals (a second run of the same command resumes up
    to it); a trial is one proposal of the sampler, and most are rejected by the verifier before
    anything is built, so ``built`` and ``measured`` bound what the study spends instead: stop
    once it holds that many built candidates, or candidates timed correct (None: no such bound;
    ``trials`` None: no bound on proposals, another budget ends the run).
    ``time_budget_s`` bounds this run; ``patience`` stops after that many trials without a
    faster measurement (never without a GPU: nothing is measured). ``workers`` > 0 (or a
    ``ray_address``) verifies and builds in Ray tasks; 0 does it here, one at a time; None
    (the default) takes :func:`auto_workers` of this machine's cores, in local build
    processes unless ``pool="ray"`` or a ``ray_address`` is given.
    ``pool="processes"`` (with ``workers`` > 0) builds in that many local processes instead
    of Ray, and measures on this machine's GPU (:mod:`tsopt.search.pools.process_pool`);
    ``pool`` None: processes for the automatic count, Ray for an explicit ``workers`` > 0.
    ``knobs`` restricts knobs (``"stages=2,4"``). ``library`` starts a new study from the seed
    library's schedules for the nearest shape class (:mod:`tsopt.search.library`), before the
    warm starts; ``library_exclude_self`` leaves out the library's entries of the study's own
    problem (same op, dtype and sizes; other shapes' entries stay) and the warm starts from
    studies of it: a leave-one-shape-out run (:attr:`library_mode`); ``library_refit`` adds
    other shapes' entries re-fitted to the problem (:mod:`tsopt.search.refit`: tile, cluster,
    split-K and swap-AB re-chosen by the cost model; origin ``library_refit``; nothing
    without ``library``); ``sampler`` defaults to
    ``evolve`` (:mod:`tsopt.search.evolve`), whose cost model starts from ``cost_prior``
    (:func:`tsopt.search.transfer.study_prior`: the shipped cross-shape model, or the
    analytical estimate).
    ``deterministic`` keeps to schedules the space calls deterministic
    (``SearchSpace.is_deterministic``: no atomic reduction); a space with none for the problem
    is refused before anything is built, and other proposals are pruned as
    ``tsopt.deterministic``.
    """

    space: str
    problem: Problem
    trials: int | None = 50
    built: int | None = None
    measured: int | None = None
    time_budget_s: float | None = None
    sampler: str = "evolve"
    arch: str = "sm_90a"
    study: str | None = None
    db_url: str = "sqlite:///tsopt.db"
    bundle_dir: Path | None = None
    workers: int | None = None  # None: auto_workers(cores, GPUs measuring here)
    seed: int = 0
    cache_dir: Path = Path(".tsopt") / "artifacts"
    measure: str = "auto"  # auto | never | always
    ray_address: str | None = None
    patience: int | None = None
    warm_start: bool = True
    library: bool = True  # start from the seed library (tsopt.search.library)
    library_exclude_self: bool = False  # leave-one-shape-out: the problem's own entries out
    library_refit: bool = True  # other shapes' entries re-fitted too (tsopt.search.refit)
    cost_prior: str = "transfer"  # what evolve's cost model starts from (transfer.COST_PRIORS)
    knobs: tuple[str, ...] = field(default_factory=tuple)
    pool: str | None = None  # ray | processes: what --workers N runs on (None: see above)
    gpus: int | None = None  # GPUs measuring, one worker each (None: every one visible)
    deterministic: bool = False  # only genomes whose output is bit-identical run after run
    # The launch mode measurements are timed in (tsopt.core.records.LAUNCH_MODES); None: a
    # resumed study's own, DEFAULT_LAUNCH ("graph") for a new one.
    launch: str | None = None
    device: str | None = None
    """The GPU profile builds are made for (``tsopt.core.devices``: ``H100_PCIE``); None: the
    GPU that measures, else the arch's default (the driver says which it took)."""
    study_config: dict[str, Any] = field(default_factory=dict)
    """More for a new study's config to record (``{"serving": ...}``: the bucket and workload a
    study of several tunes for, tsopt.app.serving_tune); ignored when the study exists."""

    @property
    def library_mode(self) -> str:
        """What the study starts from, as recorded in its config and shown by the summary and
        the report: ``on`` (the library), ``off`` (``--no-library``) or ``exclude-self``
        (leave-one-shape-out)."""
        if not self.library:
            return LIBRARY_OFF
        return LIBRARY_EXCLUDE_SELF if self.library_exclude_self else LIBRARY_ON

    def study_name(self, device: DeviceProfile | None = None) -> str:
        """Default: space, problem and arch, e.g. ``copy-fp16-4096x4096-sm_90a``, then the
        device profile's id when it is not the arch's default (``...-sm_90a-H100_PCIE``):
        studies for two GPUs never share trials."""
        if self.study:
            return self.study
        key = self.problem.key
        if key.startswith(f"{self.space}-"):
            key = key[len(self.space) + 1:]
        if device is None and self.device:
            device = self.profile()
        suffix = f"-{device.id}" if device is not None and device != default_profile(
            self.arch) else ""
        return f"{self.space}-{key}-{self.arch}{suffix}"

    def profile(self) -> DeviceProfile | None:
        """The profile ``--device`` names (None without one); UserInputError listing the known
        ones for an unknown name or one of another arch."""
        return get_profile(self.device, self.arch) if self.device else None

    def validate(self) -> None:
        """Raises UserInputError naming the first bad value."""
        if not re.fullmatch(r"sm_[0-9]+[a-z]?", self.arch):
            raise UserInputError(f"--arch {self.arch!r} is not a GPU architecture like sm_90a")
        device = self.profile()
        if not 0 <= self.seed < 2**32:
            raise UserInputError(f"--seed {self.seed} must lie in 0..{2**32 - 1}")
        # A study name lands in paths (.tsopt/bundles/<study>): a name, never a path.
        check_study_name(self.study_name(), "--study" if self.study else "study name")
        try:
            check_fits(self.problem, self.arch, device)
        except ProblemError as exc:
            raise UserInputError(str(exc)) from None
        if self.trials is not None and self.trials < 1:
            raise UserInputError(f"--trials {self.trials} must be at least 1")
        for flag, value in (("--built", self.built), ("--measured", self.measured)):
            if value is not None and value < 1:
                raise UserInputError(f"{flag} {value} must be at least 1")
        if (self.trials is None and self.built is None and self.measured is None
                and self.time_budget_s is None and self.sampler != "grid"):
            raise UserInputError("no budget: give --trials, --built, --measured or --time")
        if self.library_exclude_self and not self.library:
            raise UserInputError("--library-exclude-self leaves the study's own problem out of "
                                 "the seed library, and --no-library names no library to leave "
                                 "it out of: give one of them")
        from tsopt.search.transfer import COST_PRIORS

        if self.cost_prior not in COST_PRIORS:
            raise UserInputError(f"--cost-prior {self.cost_prior!r} is not one of "
                                 f"{', '.join(COST_PRIORS)}")
        if self.sampler not in SAMPLERS:
            raise UserInputError(f"--sampler {self.sampler!r} is not one of {', '.join(SAMPLERS)}")
        if self.workers is not None and self.workers < 0:
            raise UserInputError(f"--workers {self.workers} must be >= 0")
        bound = max_workers(self.ray_address)
        if self.workers is not None and self.workers > bound:
            where = ("on a Ray cluster" if self.ray_address else
                     f"on this machine ({os.cpu_count()} cores, {WORKERS_PER_CORE} per core)")
            raise UserInputError(f"--workers {self.workers} is more than {bound}, the most "
                                 f"{where}")
        if self.patience is not None and self.patience < 1:
            raise UserInputError(f"--patience {self.patience} must be at least 1")
        if self.measure not in ("auto", "never", "always"):
            raise UserInputError(f"measure mode {self.measure!r} is not auto, never or always")
        if self.gpus is not None and self.gpus < 1:
            raise UserInputError(f"--gpus {self.gpus} must be at least 1 (or all)")
        if self.launch is not None and self.launch not in CHOOSABLE_LAUNCH_MODES:
            raise UserInputError(
                f"--launch {self.launch!r} is not one of {', '.join(CHOOSABLE_LAUNCH_MODES)}"
                + (" (a study made before the launch modes resumes in its own isolated mode "
                   "when --launch is not given)" if self.launch == "isolated" else ""))
        if self.pool is not None and self.pool not in POOLS:
            raise UserInputError(f"--pool {self.pool!r} is not one of {', '.join(POOLS)}")
        if self.pool == "processes" and self.workers is not None and self.workers < 1:
            raise UserInputError(f"--pool processes needs --workers N >= 1 (got --workers "
                                 f"{self.workers}; --workers 0 builds in this process)")
        if self.pool == "processes" and self.ray_address:
            raise UserInputError(f"--pool processes builds on this machine; --ray-address "
                                 f"{self.ray_address!r} needs --pool ray")
        if self.ray_address:
            check_ray_address(self.ray_address)  # last: the only check that waits


# What the driver keeps for itself: its own loop (proposals, predictions, records) takes one
# core, and each GPU measured from this machine another (its measuring child's host thread
# waits on the GPU in a spin).
DRIVER_CORES = 1


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_workers(cores: int, measuring_gpus: int) -> int:
    """``--workers``' default: the cores less one for the driver and one per GPU measured
    from this machine, at least 1; 1 with no GPU to feed means building in the driver's own
    process, one at a time (0), as a second process would only add a copy of the DSL.

    A build costs 3-13 CPU-s (bench/driver_scale) while a bundle candidate measures in about
    0.25 s, so a GPU is fed only by many builders: 16 cores and one H200 give 14."""
    slots = max(1, cores - DRIVER_CORES - measuring_gpus)
    return 0 if slots == 1 and measuring_gpus == 0 else slots
