"""The two pool interfaces the driver works with, and the records that cross them.

A **build pool** verifies and builds candidates (:func:`tsopt.search.pipeline.evaluate`): in
this process (:mod:`.serial`), in local processes (:mod:`.processes`) or in Ray tasks
(:mod:`.ray`). A **measure pool** times built candidates on GPUs: this machine's GPU
(:mod:`.inline`) or one Ray actor per GPU (:mod:`.ray`). A new kind of pool is one module that
implements one of these protocols.

What crosses a process or machine boundary is a frozen, serialisable record:
:class:`~tsopt.search.pipeline.EvaluateRequest` and
:class:`~tsopt.search.pipeline.Evaluation` for builds, :class:`MeasureRequest` and
:class:`MeasureResult` for measurements. The ``tag`` a caller submits with a request (the
driver's job) never leaves the driver's process: pools hand it back with the result.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from tsopt.core.bundle import Baseline
from tsopt.core.records import DEFAULT_LAUNCH, Measurement
from tsopt.search.pipeline import EvaluateRequest, Evaluation


@dataclass(frozen=True)
class BuildDone:
    """A finished build request: its evaluation, or why the worker could not give one."""

    tag: Any
    evaluation: Evaluation | None = None
    failure: str | None = None  # the worker died twice, or the function raised


@dataclass(frozen=True)
class MeasureRequest:
    """One built candidate to check and time.

    ``gpu`` pins it to one of the pool's GPU workers (the ``worker`` of a
    :class:`MeasureDone`): measurements compared with each other (a contender and the
    incumbent, a confirmation round) are taken on the same GPU. None: whichever is free.
    ``launch``: the launch mode candidate and baseline are timed in (the study's).
    """

    artifact_dir: str
    genome_hash: str
    problem: dict[str, Any]
    gpu: int | None = None
    launch: str = DEFAULT_LAUNCH

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MeasureResult:
    """What a measuring worker made of a request.

    ``measurement`` is the candidate's record (any status, ``crash`` when the worker itself
    died); ``baseline`` the problem's first baseline timing on that worker. ``unusable`` says
    that this GPU cannot measure at all (its baseline failed): the driver stops measuring and
    bundles the rest.
    """

    measurement: Measurement | None = None
    baseline: Baseline | None = None
    pid: int = 0
    seconds: float = 0.0
    unusable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"measurement": self.measurement.to_dict() if self.measurement else None,
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "pid": self.pid, "seconds": self.seconds, "unusable": self.unusable}


@dataclass(frozen=True)
class MeasureDone:
    """A finished measure request: the worker (an index into the pool's slots) and its result."""

    tag: Any
    worker: int
    result: MeasureResult


class BuildPool(Protocol):
    """Verifies and builds; up to ``slots`` candidates at a time."""

    slots: int

    def free(self) -> int:
        """How many more requests would start now."""

    def busy(self) -> int:
        """Requests submitted and not yet returned by :meth:`poll`."""

    def submit(self, tag: Any, request: EvaluateRequest) -> None: ...

    def poll(self, timeout: float) -> list[BuildDone]:
        """Finished requests, waiting up to ``timeout`` seconds for the first."""

    def close(self) -> None: ...


class MeasurePool(Protocol):
    """Measures on GPUs, one worker per GPU (``slots``)."""

    @property
    def slots(self) -> int: ...

    def submit(self, tag: Any, request: MeasureRequest) -> None: ...

    def pending(self) -> int:
        """Requests queued or being measured."""

    def poll(self, timeout: float) -> list[MeasureDone]: ...

    def drop_queued(self) -> list[Any]:
        """Forget the requests not handed to a GPU yet; returns their tags."""

    def close(self) -> list[str]:
        """Stop the workers; returns one summary line per worker that measured."""


class MeasureQueue:
    """The waiting line of a measuring pool: requests submitted, not yet handed to a GPU.

    A pool of several GPU workers takes requests with :meth:`_next_for`, which honours a
    request's pin (``gpu``); a pin to a worker the pool has lost (:meth:`_lose`) moves to
    the first worker left, so the requests pinned together stay together.
    """

    def __init__(self) -> None:
        self._queue: deque[tuple[Any, MeasureRequest]] = deque()
        self._lost: set[int] = set()
        self._workers = 1
        self.priority: Callable[[Any], float | None] | None = None
        """Which queued request a free GPU takes first: the lowest ``priority(tag)`` (a cost
        model's predicted time, say), ties in the order submitted. A tag it does not rank
        (None: a re-measurement, the seed) is taken before every ranked one, in order."""

    def submit(self, tag: Any, request: MeasureRequest) -> None:
        self._queue.append((tag, request))

    def _target(self, request: MeasureRequest) -> int | None:
        if request.gpu is None:
            return None
        if request.gpu not in self._lost and 0 <= request.gpu < self._workers:
            return request.gpu
        alive = [w for w in range(self._workers) if w not in self._lost]
        return alive[0] if alive else None

    def _next_for(self, worker: int) -> tuple[Any, MeasureRequest] | None:
        """The queued request that ``worker`` takes next (unpinned, or pinned to it): the
        first, or with a :attr:`priority` the first it does not rank, else the best ranked."""
        best: tuple[float, int] | None = None
        for position, (tag, request) in enumerate(self._queue):
            target = self._target(request)
            if target is not None and target != worker:
                continue
            score = self._score(tag)
            if score is None:
                best = (-math.inf, position)
                break
            if best is None or score < best[0]:
                best = (score, position)
        if best is None:
            return None
        tag, request = self._queue[best[1]]
        del self._queue[best[1]]
        return tag, request

    def _score(self, tag: Any) -> float | None:
        if self.priority is None:
            return None
        try:
            score = self.priority(tag)
        except Exception:  # a ranking that fails must not stop measuring: first come
            return None
        return None if score is None or not math.isfinite(score) else float(score)

    def _lose(self, worker: int) -> bool:
        """``worker`` cannot measure any more; True while the pool has another."""
        self._lost.add(worker)
        return len(self._lost) < self._workers

    def drop_queued(self) -> list[Any]:
        tags = [tag for tag, _ in self._queue]
        self._queue.clear()
        return tags
