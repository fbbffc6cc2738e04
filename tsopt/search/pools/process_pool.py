"""Verify+build in local processes: ``tsopt tune --pool processes --workers N``.

For GPU hosts without Ray (no network to install it, its wheel too big): the
build slots are processes of this machine, and the driver measures on this
machine's GPU itself (:class:`tsopt.search.pools.inline.InlineMeasurePool`), as with
``--workers 0``. Nothing here imports Ray.

Each slot is its own one-process :class:`~concurrent.futures.ProcessPoolExecutor`
(``spawn`` start method: a fresh interpreter, no forked DSL or CUDA state)
running :func:`tsopt.search.pipeline.evaluate`, the function a Ray task runs, so plain
records come back. The worker process lives on from one candidate to the next
(the DSL is imported once per slot) and ignores SIGINT: a Ctrl-C reaches the
driver, which lets the candidates in flight finish.

One executor per slot rather than one of N processes: when a process of an
executor dies (a crash in the compiler, the OOM killer), the executor is broken
and every candidate in it fails. With one process per executor only the
candidate that was in the dying process is affected, like a Ray task: it is
retried once in a fresh process, and a second death comes back as
``"worker failed twice (retried once): ..."``, which the driver records as a
failed build. An exception raised by the function is not retried (Ray's
``retry_exceptions=False``); it comes back as its one-line text.

``spawn`` imports the main module of the program again in each worker: a script that
runs the driver with this pool needs the usual ``if __name__ == "__main__":`` guard
(``tsopt`` and ``python -m tsopt`` are fine as they are).
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import Any

from tsopt.search.pipeline import EvaluateRequest, Evaluation, evaluate, failure_text
from tsopt.search.pools.protocol import BuildDone


@dataclass(frozen=True)
class _Task:
    tag: Any
    request: EvaluateRequest
    attempt: int = 0  # 1: the retry after the first worker died


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the driver's to handle (it finishes what is in flight)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ProcessBuildPool:
    """A :class:`~tsopt.search.pools.protocol.BuildPool`: up to ``slots`` evaluations in
    flight, one worker process each."""

    def __init__(self, slots: int,
                 function: Callable[[EvaluateRequest], Evaluation] = evaluate) -> None:
        """``function`` is what each worker process runs on a request: a module-level
        function (it is pickled by name); :func:`tsopt.search.pipeline.evaluate` but in tests."""
        self.slots = max(1, slots)
        self.function = function
        self._context = multiprocessing.get_context("spawn")
        self._executors: list[ProcessPoolExecutor | None] = [None] * self.slots
        self._idle: deque[int] = deque(range(self.slots))
        self._waiting: deque[_Task] = deque()  # submitted beyond the slots, or to retry
        self._inflight: dict[Future[Evaluation], tuple[_Task, int]] = {}

    def free(self) -> int:
        return self.slots - self.busy()

    def busy(self) -> int:
        return len(self._inflight) + len(self._waiting)

    def submit(self, tag: Any, request: EvaluateRequest) -> None:
        self._waiting.append(_Task(tag, request))
        self._dispatch()

    def poll(self, timeout: float) -> list[BuildDone]:
        """Finished evaluations (or a failure's text), waiting up to ``timeout`` for one."""
        self._dispatch()
        if not self._inflight:
            return []
        finished, _ = wait(list(self._inflight), timeout=timeout, return_when=FIRST_COMPLETED)
        done: list[BuildDone] = []
        for future in finished:
            task, slot = self._inflight.pop(future)
            self._idle.append(slot)
            try:
                done.append(BuildDone(task.tag, evaluation=future.result()))
            except BrokenProcessPool as exc:
                why = f"{failure_text(exc)}{self._exit_status(slot)}"
                self._discard(slot)
                if task.attempt == 0:
                    self._waiting.appendleft(replace(task, attempt=1))
                else:
                    done.append(BuildDone(task.tag, failure=f"worker failed twice (retried once): {why}"))
            except BaseException as exc:  # raised by the function in the worker
                done.append(BuildDone(task.tag, failure=failure_text(exc)))
        self._dispatch()
        return done

    def close(self) -> None:
        """Stop every worker process; those still evaluating are terminated."""
        busy = {slot for _, slot in self._inflight.values()}
        for slot, executor in enumerate(self._executors):
            if executor is None:
                continue
            processes = list((getattr(executor, "_processes", None) or {}).values())
            executor.shutdown(wait=slot not in busy, cancel_futures=True)
            if slot in busy:
                for process in processes:
                    process.terminate()
                    process.join(timeout=10)
            self._executors[slot] = None
        self._inflight.clear()
        self._waiting.clear()
        self._idle = deque(range(self.slots))

    # -- internals -------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Hand waiting tasks to idle slots."""
        while self._waiting and self._idle:
            slot = self._idle.popleft()
            task = self._waiting.popleft()
            try:
                future = self._executor(slot).submit(self.function, task.request)
            except BrokenProcessPool:  # its process died while idle: not this task's doing
                self._discard(slot)
                future = self._executor(slot).submit(self.function, task.request)
            self._inflight[future] = (task, slot)

    def _executor(self, slot: int) -> ProcessPoolExecutor:
        executor = self._executors[slot]
        if executor is None:
            executor = ProcessPoolExecutor(max_workers=1, mp_context=self._context,
                                           initializer=_ignore_sigint)
            self._executors[slot] = executor
        return executor

    def _discard(self, slot: int) -> None:
        """Forget a broken executor; the slot's next task starts a fresh process."""
        executor = self._executors[slot]
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        self._executors[slot] = None

    def _exit_status(self, slot: int) -> str:
        """How the slot's dead process ended, when CPython's executor still knows."""
        executor = self._executors[slot]
        processes = list((getattr(executor, "_processes", None) or {}).values())
        deadline = time.monotonic() + 2  # the executor sees the death before it is reaped
        while not (codes := [p.exitcode for p in processes if p.exitcode is not None]):
            if not processes or time.monotonic() > deadline:
                return ""
            time.sleep(0.02)
        code = codes[0]
        if code < 0:
            try:
                return f" (killed by {signal.Signals(-code).name})"
            except ValueError:
                return f" (killed by signal {-code})"
        return f" (exit code {code})"
