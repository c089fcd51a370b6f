"""The handles an ``Engine`` issues (``Weights``, ``Entry``), the check that an argument is
one (``check_handle``) and the error for one that is not live (``unknown_entry``), and the
engine's counters (``Stats``).

Their own module so that the engine and its partitioned entries both use them without either
importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from poot_ir import UnknownEntry

__all__ = ["Entry", "Stats", "Weights", "check_handle", "unknown_entry"]


@dataclass(frozen=True, slots=True)
class Weights:
    """A handle to weights uploaded by ``Engine.load_weights``."""

    engine: int
    id: int
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """A handle to a loaded program (``Engine.add_entry``)."""

    engine: int
    id: int
    program: str


@dataclass(frozen=True, slots=True)
class Stats:
    """Counters since the engine was made. ``recordings`` counts first steps (which record and
    run), ``replays`` the later steps; ``host_s_per_step`` is the mean time a step spent in the
    engine outside the device's dispatches, ``device_s_per_step`` inside them (seconds).
    ``plans`` and ``lowerings`` count the plans the engine made and the artifact sources the
    device lowered (``add_entry``: one each; a partitioned entry one per device span).
    ``state_reads`` / ``state_writes`` count ``read_state`` / ``write_state`` calls (a handoff
    makes one of each per state), with the bytes they moved."""

    compiles: int
    cache_hits: int
    cache_repairs: int
    recordings: int
    replays: int
    steps: int
    host_s_per_step: float
    device_s_per_step: float
    plans: int = 0
    lowerings: int = 0
    verified_steps: int = 0  # steps compared with the oracle (``verify``)
    worst_error_ratio: float = 0.0  # the worst error over its bound a verified step had
    state_reads: int = 0
    state_writes: int = 0
    state_bytes_read: int = 0
    state_bytes_written: int = 0


def check_handle(given: object, kind: type, what: str) -> None:
    """A handle argument is one this API returned (callers outside mypy pass anything)."""
    if not isinstance(given, kind):
        raise UnknownEntry(f"{what} must be a {kind.__name__} handle, got a {type(given).__name__}")


def unknown_entry(entry: Entry) -> UnknownEntry:
    """The error for a handle of an entry this engine does not hold (removed, or another's)."""
    return UnknownEntry(f"entry {entry.id} ({entry.program!r}) is not live in this engine")
