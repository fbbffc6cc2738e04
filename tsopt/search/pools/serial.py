"""Verifying and building in the driver's own process, one candidate at a time
(``--workers 0``)."""

from __future__ import annotations

from typing import Any

from tsopt.search.pipeline import EvaluateRequest, evaluate
from tsopt.search.pools.protocol import BuildDone


class SerialBuildPool:
    """A :class:`~tsopt.search.pools.protocol.BuildPool` of one slot: the driver's process."""

    slots = 1

    def __init__(self) -> None:
        self._done: list[BuildDone] = []

    def free(self) -> int:
        return 0 if self._done else 1

    def busy(self) -> int:
        return len(self._done)

    def submit(self, tag: Any, request: EvaluateRequest) -> None:
        self._done.append(BuildDone(tag, evaluation=evaluate(request)))

    def poll(self, timeout: float) -> list[BuildDone]:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        self._done.clear()
