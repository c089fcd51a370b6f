"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Figure", "alternating", "median_time"]


@dataclass(frozen=True, slots=True)
class Figure:
    """One reported figure: ``value`` in ``unit``, with the aim it is held to, if any."""

    name: str
    value: float
    unit: str
    aim: str = ""
    note: str = ""

    def line(self) -> str:
        aim = f"  (aim: {self.aim})" if self.aim else ""
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.name:<64} {self.value:>12.4g} {self.unit}{aim}{note}"


def median_time(fn: Callable[[], object], repeat: int = 7, number: int = 1) -> float:
    """The median over ``repeat`` rounds of the mean time of ``number`` calls, in seconds.

    Garbage collection is off while timing so a collection does not land in one side of a ratio.
    """
    fn()  # warm up: first calls pay for imports and caches
    times = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times.append((time.perf_counter() - t0) / number)
    finally:
        if gc_was:
            gc.enable()
    return statistics.median(times)


def alternating(
    fns: dict[str, Callable[[], object]],
    rounds: int = 15,
    calls: int = 400,
    clock: Callable[[], float] = time.perf_counter,
    warmup: int = 50,
) -> dict[str, float]:
    """The median over ``rounds`` rounds of each function's mean time per call (seconds), the
    functions taking turns within each round so a noisy neighbour hits all of them alike.
    ``clock=time.thread_time`` counts only this thread's CPU time (not the time the thread
    waits for a core on a loaded machine): right for work that runs on the calling thread only."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in fns.items():
                t0 = clock()
                for _ in range(calls):
                    fn()
                times[name].append((clock() - t0) / calls)
    finally:
        if gc_was:
            gc.enable()
    return {k: statistics.median(v) for k, v in times.items()}
