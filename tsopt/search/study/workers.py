"""The pools a run builds and measures with: chosen, started and closed here.

``--workers auto`` (the default): local build processes, as many as
:func:`tsopt.search.request.auto_workers` gives (none: building in the driver's process);
``--workers 0``: building in the driver's process; ``--workers N``: Ray (or local build
processes with ``--pool processes``); ``--ray-address``: the cluster's build slots and a
measuring actor per GPU. Measuring is this machine's GPUs (one inline worker per GPU,
``--gpus``), the cluster's, an injected pool (tests, scripts), or none: built candidates
go to the bundle. Each measuring worker has a run id of its own (a baseline is recorded
per GPU).

A new pool is one module of :mod:`tsopt.search.pools` and a branch in :meth:`Workers.start`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.errors import UserInputError
from tsopt.search.pools.inline import InlineMeasurePool
from tsopt.search.pools.protocol import BuildPool, MeasurePool
from tsopt.search.pools.serial import SerialBuildPool
from tsopt.search.study.machine import gpu_here, gpus_measured_here

if TYPE_CHECKING:
    from rich.console import Console

    from tsopt.search.request import TuneRequest


@dataclass
class Workers:
    """The pools one run holds. ``measure`` is None when nothing measures here, and becomes
    None when a GPU turns out unable to measure (the measuring stage stops it). Started in
    place, so that what :meth:`start` made before a refusal is still closed."""

    build: BuildPool = field(default_factory=SerialBuildPool)
    measure: MeasurePool | None = None
    run_ids: dict[int, str] = field(default_factory=dict)  # measuring worker -> its run id
    cluster: Any = None  # the Ray cluster joined or started, if any

    def start(self, request: TuneRequest, console: Console, injected: Any = None) -> None:
        """Start the pools ``request`` asks for; ``injected`` measures in place of the GPUs."""
        if injected is not None:
            self.measure = injected
            kind = str(getattr(injected, "name", "injected"))
            self.run_ids = {i: f"{kind}-{uuid.uuid4()}-{i}" for i in range(injected.slots)}
        workers, pool, rule = resolve_workers(request, injected)
        if pool == "processes":
            self._start_processes(request, console, workers, rule)
        elif pool == "ray":
            self._start_ray(request, console, workers, rule)
        else:
            self.build = SerialBuildPool()
            if self.measure is None and gpu_here(request.measure):
                self._measure_here(request)
            if rule:
                console.print(f"workers: building in this process, one at a time{rule}",
                              highlight=False)

    def _start_processes(self, request: TuneRequest, console: Console, workers: int,
                         rule: str) -> None:
        from tsopt.search.pools.process_pool import ProcessBuildPool

        self.build = ProcessBuildPool(workers)
        if self.measure is None and gpu_here(request.measure):
            self._measure_here(request)
        measuring = ("nothing measured here: built candidates go to the bundle"
                     if self.measure is None else
                     f"measuring on {self.measure.slots} of this machine's GPUs"
                     if self.measure.slots > 1 else "measuring on this machine's GPU")
        console.print(f"workers: {self.build.slots} build processes on this machine{rule} "
                      f"({measuring})", highlight=False)

    def _start_ray(self, request: TuneRequest, console: Console, workers: int, rule: str) -> None:
        from tsopt.search.pools.ray_pool import RayBuildPool, RayMeasurePool, start_ray

        self.cluster = start_ray(request.ray_address, workers, request.arch)
        slots = workers or max(1, self.cluster.cpus)
        self.build = RayBuildPool(slots)
        gpus = self.cluster.gpus if request.measure != "never" else 0
        devices: tuple[int | None, ...] = ()
        if (not gpus and request.measure != "never" and not request.ray_address
                and self.measure is None and gpu_here("auto")):
            # Ray counted no GPU on this machine, which has some: actors on device indices.
            from tsopt.workers.gpus import measuring_gpus

            devices = measuring_gpus(request.gpus)
            gpus = len(devices)
        if request.measure == "always" and not gpus and self.measure is None:
            raise UserInputError("measurement was requested but the Ray cluster has no GPU")
        if request.gpus is not None and not devices and gpus:
            if request.gpus > gpus:
                raise UserInputError(f"--gpus {request.gpus}: the Ray cluster has {gpus} "
                                     f"GPU{'s' if gpus != 1 else ''}")
            gpus = request.gpus
        if gpus and self.measure is None:
            self.measure = (
                RayMeasurePool(gpus, gpus_per_actor=0,
                               devices=[d if d is not None else 0 for d in devices])
                if devices else RayMeasurePool(gpus))
            self.run_ids = {i: f"ray-{uuid.uuid4()}-gpu{i}" for i in range(gpus)}
        where = request.ray_address or "a local Ray cluster"
        console.print(f"workers: {slots} build slots on {where}{rule} "
                      f"({self.cluster.cpus} CPUs, {self.cluster.gpus} GPUs)", highlight=False)

    def _measure_here(self, request: TuneRequest) -> None:
        """One measuring worker per GPU of this machine (``--gpus``), each pinned to its GPU;
        each has a run id of its own (a baseline is recorded per GPU)."""
        from tsopt.workers.gpus import measuring_gpus

        devices = measuring_gpus(request.gpus)
        self.measure = InlineMeasurePool(gpus=devices)
        run = uuid.uuid4()
        self.run_ids = ({0: f"inline-{run}"} if len(devices) == 1
                        else {i: f"inline-{run}-gpu{d}" for i, d in enumerate(devices)})

    def close(self, console: Console) -> None:
        """Close the pools (each measuring worker's summary printed) and a Ray cluster."""
        if self.build is not None:
            self.build.close()
        if self.measure is not None:
            for summary in self.measure.close():
                console.print(summary, highlight=False)
        if self.cluster is not None:
            from tsopt.search.pools.ray_pool import stop_ray

            stop_ray(self.cluster)


def resolve_workers(request: TuneRequest, injected: Any = None) -> tuple[int, str, str]:
    """How many build workers, on which pool (``serial``, ``processes`` or ``ray``), and
    the rule that chose the count when ``--workers`` was not given (else "")."""
    from tsopt.search.request import DRIVER_CORES, auto_workers, machine_cores

    if request.ray_address:
        # Joining a cluster with no count: as many build slots as the cluster has CPUs.
        return request.workers or 0, "ray", ""
    if request.workers == 0:
        return 0, "serial", ""
    if request.workers is not None:
        return request.workers, "processes" if request.pool == "processes" else "ray", ""
    gpus = gpus_measured_here(request, injected)
    cores = machine_cores()
    workers = auto_workers(cores, gpus)
    rule = (f" (--workers auto: {cores} core{'s' if cores != 1 else ''} less "
            f"{DRIVER_CORES} for the driver and {gpus} for measuring)")
    if request.pool is not None:
        return max(1, workers), request.pool, rule
    return workers, "processes" if workers else "serial", rule
