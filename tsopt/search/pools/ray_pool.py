"""Ray: verify+build tasks on CPUs, one measuring actor per GPU.

``ray.init()`` with no address starts a local cluster (``num_cpus`` = the
build workers asked for, no dashboard, a short temp dir: Ray's socket paths
must stay under 108 characters); ``--ray-address`` joins an existing one, whose
nodes must have this source tree and venv at the same path and see the
artifact cache directory (shared storage) so that GPU nodes can load what CPU
nodes built.

- :func:`evaluate_task` (``num_cpus=1``) runs :func:`tsopt.search.pipeline.evaluate`
  for one candidate: verify, then build when valid, in one task so that no DSL
  object crosses a process boundary; plain records come back. A worker process
  that dies (a crash in the compiler, the OOM killer) is replaced by Ray and
  the task retried once (``max_retries=1``); a second death reaches the
  driver as a failure, which it records as a failed build.
- :class:`MeasureActor` (``num_gpus=1``) holds one persistent
  :class:`~tsopt.search.pools.inline.GpuMeasurer` (the torch-only runner in a child process
  under the watchdog, replaced after hangs and faults); a dying actor is restarted and
  its call retried once (``max_restarts=-1, max_task_retries=1``). Ray sets the actor's
  ``CUDA_VISIBLE_DEVICES`` to its GPU, so its measuring child sees that GPU alone; where Ray
  counts no GPU on a machine that has some, the actors take none of Ray's and are pinned to
  device indices instead. A request pinned to an actor (a contender with the incumbent, the
  confirmation round) waits for that actor; an actor whose GPU cannot measure is dropped while
  others are left, and its requests go to them.

The driver alone writes the database; these only compute.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.search.pipeline import EvaluateRequest, Evaluation, evaluate, failure_text
from tsopt.search.pools.inline import GpuMeasurer
from tsopt.search.pools.protocol import BuildDone, MeasureDone, MeasureQueue, MeasureRequest, MeasureResult

REPO_ROOT = Path(__file__).resolve().parents[3]
CONNECT_CHECK_S = 5.0  # ray.init retries an address that does not answer for a minute or more
DEFAULT_GCS_PORT = 6379


def check_reachable(address: str, timeout_s: float = CONNECT_CHECK_S) -> None:
    """``--ray-address``: the head must answer within ``timeout_s``, else one UserInputError
    naming the address. A head's GCS is asked for its cluster id over gRPC (an open port is
    not enough: a proxy or another service accepts connections that ``ray.init`` then retries
    for a minute); a Ray Client address (``ray://``) must accept a connection. ``auto`` (a
    cluster of this machine, found from its session files) is left to ``ray.init``, which
    says at once when there is none."""
    if address == "auto":
        return
    client = address.startswith("ray://")
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(DEFAULT_GCS_PORT)
    if not port.isdigit() or not host or "/" in host:
        raise UserInputError(f"--ray-address {address!r} is not HOST:PORT of a Ray head "
                             f"(e.g. 10.0.0.5:{DEFAULT_GCS_PORT})")
    host = host.strip("[]")
    if client:
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError as exc:
            raise UserInputError(f"--ray-address {address!r}: no Ray Client server answers "
                                 f"there within {timeout_s:.0f} s "
                                 f"({exc.strerror or type(exc).__name__})") from None
        return
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = grpc.insecure_channel(f"{host}:{port}", options=[("grpc.enable_http_proxy", 0)])
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(  # type: ignore[no-untyped-call]
            gcs_service_pb2.GetClusterIdRequest(),  # type: ignore[attr-defined]
            timeout=timeout_s, wait_for_ready=True)
    except grpc.RpcError as exc:
        code = exc.code()
        why = ("nothing answered" if code == grpc.StatusCode.DEADLINE_EXCEEDED
               else f"{code.name.lower()}: {(exc.details() or '').splitlines()[0][:120]}")
        raise UserInputError(f"--ray-address {address!r}: no Ray head answers there within "
                             f"{timeout_s:.0f} s ({why})") from None
    finally:
        channel.close()


def default_temp_dir() -> str:
    """A short per-user directory for Ray's session files (sockets live under it)."""
    return f"/tmp/tsopt-ray-{os.getuid()}"


@dataclass(frozen=True)
class RayCluster:
    """The cluster the driver works with."""

    address: str | None  # None: a local cluster
    cpus: int
    gpus: int
    started_here: bool  # this call started or joined it (and stop_ray ends that)


def start_ray(address: str | None, workers: int, arch: str, temp_dir: str | None = None,
              env: dict[str, str] | None = None) -> RayCluster:
    """Start a local cluster with ``workers`` CPUs (no address), or join ``address``.

    Every worker gets ``CUTE_DSL_ARCH=arch`` (the DSL reads it when first imported) and this
    source tree on its ``PYTHONPATH``.
    """
    env_vars = {"CUTE_DSL_ARCH": arch,
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT),
                                                          os.environ.get("PYTHONPATH")) if p)}
    env_vars.update(env or {})
    if ray.is_initialized():  # a cluster this process already uses (an embedding caller, tests)
        resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return RayCluster(address, int(resources.get("CPU", 0)), int(resources.get("GPU", 0)),
                          started_here=False)
    common: dict[str, Any] = dict(runtime_env={"env_vars": env_vars}, log_to_driver=False,
                                  logging_level=logging.WARNING, configure_logging=True)
    if address:
        try:
            ray.init(address=address, **common)
        except ConnectionError as exc:  # 'auto' with no cluster here, a head that went away
            raise UserInputError(f"--ray-address {address!r}: {str(exc).splitlines()[0]}") from None
    else:
        temp = temp_dir or default_temp_dir()
        Path(temp).mkdir(parents=True, exist_ok=True)
        # Local workers inherit the raylet's environment, set when it starts.
        saved = dict(os.environ)
        os.environ.update(env_vars)
        try:
            ray.init(num_cpus=max(1, workers), include_dashboard=False, _temp_dir=temp,
                     **common)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return RayCluster(address or None, int(resources.get("CPU", 0)), int(resources.get("GPU", 0)),
                      started_here=True)


def stop_ray(cluster: RayCluster | None) -> None:
    """Shut down the local cluster that :func:`start_ray` started (from a joined one, only
    disconnect); a cluster that was already in use is left alone."""
    if cluster is not None and cluster.started_here and ray.is_initialized():
        ray.shutdown()


@ray.remote(num_cpus=1, max_retries=1, retry_exceptions=False)
def evaluate_task(request: EvaluateRequest) -> Evaluation:
    """Verify and build one candidate in a Ray worker process."""
    # A Ray worker is expendable: it builds under the memory limit itself (no child of its own,
    # a fork beside Ray's threads is unsafe), and Ray retries a task whose worker died.
    evaluation = evaluate(replace(request, isolate_build=False))
    # Two nodes may share a host (and its name): the node id says which built it.
    return replace(evaluation, node=ray.get_runtime_context().get_node_id())


class RayBuildPool:
    """A :class:`~tsopt.search.pools.protocol.BuildPool`: up to ``slots`` evaluate tasks in
    flight on the cluster."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self._inflight: dict[Any, Any] = {}

    def free(self) -> int:
        return self.slots - len(self._inflight)

    def busy(self) -> int:
        return len(self._inflight)

    def submit(self, tag: Any, request: EvaluateRequest) -> None:
        self._inflight[evaluate_task.remote(request)] = tag

    def poll(self, timeout: float) -> list[BuildDone]:
        """Finished evaluations (or a failure's text), waiting up to ``timeout`` for one."""
        if not self._inflight:
            return []
        done: list[BuildDone] = []
        for ref in _finished(list(self._inflight), timeout):
            tag = self._inflight.pop(ref)
            try:
                done.append(BuildDone(tag, evaluation=ray.get(ref)))
            except ray.exceptions.RayError as exc:
                done.append(BuildDone(tag, failure="worker failed twice (retried once): "
                                                   f"{failure_text(exc)}"))
        return done

    def close(self) -> None:
        for ref in list(self._inflight):
            ray.cancel(ref, force=True)
        self._inflight.clear()


@ray.remote(num_cpus=0, num_gpus=1, max_restarts=-1, max_task_retries=1)
class MeasureActor:
    """Measures candidates on the GPU Ray gave it, through one persistent measurer."""

    def __init__(self, runs: int = 50, warmup: int = 10, checks: int = 2,
                 isolation: str = "worker", gpu: int | None = None,
                 label: int | None = None) -> None:
        """``gpu``: the device to measure on when Ray gave this actor none (None: the one
        Ray gave it); ``label``: the pool's number for it, which its measurements name."""
        self.gpu = GpuMeasurer(runs, warmup, checks, isolation, gpu=gpu, label=label)

    def measure(self, request: MeasureRequest) -> MeasureResult:
        return self.gpu.measure(request)

    def close(self) -> str:
        return self.gpu.close()


def _finished(refs: list[Any], timeout: float) -> list[Any]:
    """Wait up to ``timeout`` for one result, then take every other one already done."""
    ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    if ready:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return list(ready)


class RayMeasurePool(MeasureQueue):
    """One :class:`MeasureActor` per GPU; a queue of candidates handed to idle actors."""

    name = "ray"

    def __init__(self, gpus: int, runs: int = 50, warmup: int = 10, checks: int = 2,
                 gpus_per_actor: float = 1, devices: Sequence[int] | None = None) -> None:
        """``gpus`` actors of ``gpus_per_actor`` GPUs each. ``gpus_per_actor=0`` places them
        without Ray's GPUs: on ``devices`` (device indices of this machine, one per actor:
        where Ray sees no GPU the machine has), or on a CPU (tests)."""
        super().__init__()
        if devices is not None and len(devices) != gpus:
            raise ValueError(f"{gpus} actors need {gpus} devices, not {list(devices)}")
        actor = MeasureActor.options(num_gpus=gpus_per_actor)  # type: ignore[attr-defined]
        self.actors = [actor.remote(runs, warmup, checks, "worker",
                                    devices[i] if devices is not None else None, i)
                       for i in range(gpus)]
        self._workers = len(self.actors)
        self._idle = list(range(len(self.actors)))
        self.notes: list[str] = []  # actors lost while others went on
        self._inflight: dict[Any, tuple[Any, int, MeasureRequest]] = {}

    @property
    def slots(self) -> int:
        return len(self.actors)

    def pending(self) -> int:
        return len(self._queue) + len(self._inflight)

    def poll(self, timeout: float) -> list[MeasureDone]:
        """Each finished measurement; an actor that died twice measured a ``crash``."""
        # Handed out here only, never after results: a caller that stops measuring on an
        # unusable result drops what is still queued, and nothing must be in flight then.
        self._dispatch()
        if not self._inflight:
            return []
        done: list[MeasureDone] = []
        for ref in _finished(list(self._inflight), timeout):
            tag, index, request = self._inflight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                why = f"measuring actor died twice (retried once): {failure_text(exc)}"
                problem_key = Problem.from_dict(request.problem).key
                result = MeasureResult(Measurement(request.genome_hash, problem_key, "crash",
                                                   error=why, conditions={"gpu": index},
                                                   launch=request.launch))
            if result.unusable is not None and self._lose(index):
                # This actor's GPU cannot measure; the others can: its request waits for them.
                self.notes.append(f"measuring actor {index} stopped: {result.unusable}")
                self._queue.appendleft((tag, request))
                continue
            self._idle.append(index)
            done.append(MeasureDone(tag, index, result))
        return done

    def _dispatch(self) -> None:
        """Hand each idle actor the first request it may take (see MeasureQueue)."""
        for index in list(self._idle):
            item = self._next_for(index)
            if item is None:
                continue
            self._idle.remove(index)
            tag, request = item
            self._inflight[self.actors[index].measure.remote(request)] = (tag, index, request)

    def close(self) -> list[str]:
        summaries = []
        for actor in self.actors:
            try:
                summaries.append(ray.get(actor.close.remote(), timeout=60))
            except (ray.exceptions.RayError, TimeoutError):
                pass
            ray.kill(actor)
        return self.notes + [s for s in summaries if s]
