"""Running a call under a deadline, for devices whose runtime has no timeout of its own.

A Python call cannot be interrupted, so the call runs in a worker thread and the caller waits
for it at most the deadline. A call that misses it is abandoned, not stopped: it may go on
touching its buffers, which is why a miss poisons the device and the device keeps those buffers
alive until it is closed. The worker is a daemon thread, so a call that never returns does not
hold up the interpreter's exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from poot_ir import DeadlineExceeded, DevicePoisoned

__all__ = ["DeadlineRunner"]

T = TypeVar("T")


class _Job(Generic[T]):
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as err:  # handed to the waiting caller, never lost in the thread
            self.error = err
        finally:
            self.done.set()


class DeadlineRunner:
    """One worker thread that runs calls one at a time, each under a deadline.

    After a miss every later ``run`` raises ``DevicePoisoned``: the abandoned call still owns
    the worker. ``close`` lets the worker exit once its current call returns.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job[object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.missed = False

    def run(self, fn: Callable[[], T], deadline_s: float, what: str = "run") -> T:
        if self.missed:
            raise DevicePoisoned(f"{self._name}: a run missed its deadline; close the device")
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        job: _Job[T] = _Job(fn)
        self._jobs.put(job)  # type: ignore[arg-type]
        if not job.done.wait(deadline_s):
            self.missed = True
            raise DeadlineExceeded(deadline_s, what)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
