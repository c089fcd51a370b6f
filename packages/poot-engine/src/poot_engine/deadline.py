"""Deadlines: what a dispatch's ``deadline_s`` means on each kind of device, and the helpers.

A deadline is any positive number of seconds; ``math.inf`` means none. (The engine refuses
zero, a negative number and NaN.) Three ways a device holds a run to it:

- **A runtime with its own timeout** (OpenVINO's ``wait_for``, XRT's ``run.wait``) waits in
  whole milliseconds. ``wait_slices_ms`` splits any deadline into waits none longer than
  ``MAX_WAIT_MS`` (a signed 32-bit millisecond count, about 24.9 days: a longer one overflows
  the runtime's argument or its clock arithmetic), endless for ``inf``. The run misses when
  every slice has timed out.
- **A run that can hang** (ctypes into compiled kernels) goes to ``DeadlineRunner``: a worker
  thread waited on at most the deadline. A call that misses is abandoned, not stopped: it may
  go on touching its buffers, which is why a miss poisons the device and the device keeps those
  buffers alive until it is closed. The worker is a daemon thread, so a call that never returns
  does not hold up the interpreter's exit. A call that returns, but later than its deadline
  after it was handed over (the waiting thread was descheduled while it ran), is a miss too:
  the deadline bounds the run's time, not the scheduler's. This costs a thread hand-off per run.
- **A run that cannot hang** (``CpuDevice``: the numpy oracle is finite work on finite arrays)
  runs on the caller's thread and is checked when it returns: a run that took
  longer than the deadline is ``DeadlineExceeded`` and poisons the device exactly as a timeout
  would, and its results are discarded (no output buffer, so no state, changes). The miss is
  reported when the run ends, not at the deadline; no thread hand-off is paid per step.

After a miss, on every device, every later call but ``close`` raises ``DevicePoisoned``
(``poot_engine.lifecycle``, the one place a device keeps that state).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar

from poot_ir import EngineError

from poot_engine.lifecycle import Lifecycle

__all__ = [
    "MAX_WAIT_MS",
    "DeadlineRunner",
    "check_deadline",
    "single_wait_ms",
    "wait_slices_ms",
    "wait_timeout_s",
]

T = TypeVar("T")

#: The longest single runtime wait, in milliseconds: 2^31 - 1 (about 24.9 days).
MAX_WAIT_MS: Final = 2**31 - 1


def check_deadline(deadline_s: object) -> float:
    """``deadline_s`` if it is a deadline (a positive number of seconds, ``inf`` for none),
    else ``EngineError`` (zero, a negative number, NaN, a bool or no number at all)."""
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, int | float):
        raise EngineError(f"deadline_s must be a number of seconds, got {deadline_s!r}")
    if not deadline_s > 0:
        raise EngineError(
            f"deadline_s must be a positive number of seconds (inf: none), got {deadline_s!r}"
        )
    return deadline_s


def wait_slices_ms(deadline_s: float) -> Iterator[int]:
    """The millisecond waits that together last ``deadline_s``: whole milliseconds, rounded up,
    at least 1 (XRT's 0 would wait forever), none above ``MAX_WAIT_MS``; endless for ``inf``."""
    if math.isinf(deadline_s):
        while True:
            yield MAX_WAIT_MS
    left = max(1, math.ceil(deadline_s * 1000))
    while left > 0:
        wait = min(left, MAX_WAIT_MS)
        yield wait
        left -= wait


def single_wait_ms(deadline_s: float) -> int | None:
    """``deadline_s`` as one wait (the first of ``wait_slices_ms``) when one is enough, else
    None: the common case without building an iterator on every dispatch."""
    if deadline_s * 1000 > MAX_WAIT_MS:  # inf too
        return None
    return max(1, math.ceil(deadline_s * 1000))


def wait_timeout_s(deadline_s: float) -> float | None:
    """``deadline_s`` as a ``threading`` timeout: None (no timeout) past ``TIMEOUT_MAX``, which
    ``inf`` is (``Event.wait`` raises ``OverflowError`` beyond it)."""
    return None if deadline_s >= threading.TIMEOUT_MAX else deadline_s


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
    """One worker thread that runs calls one at a time, each under a deadline, for the device
    whose lifecycle is ``life``: a miss poisons it (``Lifecycle.missed``), and ``run`` raises
    as ``Lifecycle.check`` does once the device is closed or poisoned (the abandoned call still
    owns the worker). ``close`` lets the worker exit once its current call returns.
    """

    def __init__(self, life: Lifecycle) -> None:
        self._life = life
        self._jobs: queue.SimpleQueue[_Job[object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def run(self, fn: Callable[[], T], deadline_s: float, what: str = "run") -> T:
        life = self._life
        if not life.usable:
            life.check()
        if self._thread is None:
            name = f"poot {life.name} dispatch"
            self._thread = threading.Thread(target=self._work, name=name, daemon=True)
            self._thread.start()
        job: _Job[T] = _Job(fn)
        start = time.perf_counter()
        self._jobs.put(job)  # type: ignore[arg-type]
        done = job.done.wait(wait_timeout_s(deadline_s))
        if not done or time.perf_counter() - start > deadline_s:
            raise life.missed(deadline_s, what)
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
