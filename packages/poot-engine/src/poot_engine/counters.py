"""``Counters``: what an engine counts as it runs, and the ``Stats`` it reports from them.

One mutable record per engine, plain attributes in slots: a step adds to a few of them, and an
attribute increment is the cheapest bookkeeping Python has (a dict of counters costs a hash per
update). ``Engine.stats`` freezes them into a ``Stats``.
"""

from __future__ import annotations

from poot_engine.artifacts import Fetch
from poot_engine.handles import Stats

__all__ = ["Counters"]


class Counters:
    """Since the engine was made: compiles and cache hits (``loaded``), plans and lowerings,
    steps recorded and replayed (counted once their checks passed), the seconds steps spent
    outside and inside the device's dispatches, and the states read and written."""

    __slots__ = (
        "bytes_read",
        "bytes_written",
        "compiles",
        "device_s",
        "hits",
        "host_s",
        "lowerings",
        "plans",
        "reads",
        "recordings",
        "repairs",
        "replays",
        "steps",
        "writes",
    )

    def __init__(self) -> None:
        self.compiles = self.hits = self.repairs = self.plans = self.lowerings = 0
        self.recordings = self.replays = self.steps = 0
        self.reads = self.writes = self.bytes_read = self.bytes_written = 0
        self.host_s = self.device_s = 0.0

    def loaded(self, fetch: Fetch) -> None:
        """An artifact loaded from the blob cache (a hit) or compiled; a repaired entry too."""
        if fetch is Fetch.HIT:
            self.hits += 1
        else:
            self.compiles += 1
        if fetch is Fetch.REPAIRED:
            self.repairs += 1

    def stats(self, verified_steps: int, worst_error_ratio: float) -> Stats:
        steps = max(self.steps, 1)
        return Stats(
            compiles=self.compiles,
            cache_hits=self.hits,
            cache_repairs=self.repairs,
            recordings=self.recordings,
            replays=self.replays,
            steps=self.steps,
            host_s_per_step=self.host_s / steps,
            device_s_per_step=self.device_s / steps,
            plans=self.plans,
            lowerings=self.lowerings,
            verified_steps=verified_steps,
            worst_error_ratio=worst_error_ratio,
            state_reads=self.reads,
            state_writes=self.writes,
            state_bytes_read=self.bytes_read,
            state_bytes_written=self.bytes_written,
        )
