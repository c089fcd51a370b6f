"""A device's lifecycle: open, poisoned (a run missed its deadline), closed. One helper for
every device, so each says the same thing with the same typed errors.

::

    open --missed()--> poisoned --close()--> closed
    open --close()-----------------------> closed

Every method of a closed device raises ``DeviceFailed``; every method but ``close`` of a
poisoned device raises ``DevicePoisoned`` (a run that missed its deadline may still touch its
buffers, so nothing may run or be freed until ``close``). ``close`` is idempotent: only the first
call releases anything (``Lifecycle.close`` says whether this call is the first).
"""

from __future__ import annotations

from poot_ir import DeadlineExceeded, DeviceFailed, DevicePoisoned

__all__ = ["Lifecycle"]


class Lifecycle:
    """The lifecycle of the device ``name`` (which prefixes every error). ``usable`` is the one
    attribute a hot path reads (``if not life.usable: life.check()``)."""

    __slots__ = ("closed", "name", "poisoned", "usable")

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.poisoned = False
        self.usable = True

    def check(self) -> None:
        """Raise unless the device may be used: ``DeviceFailed`` once closed, else
        ``DevicePoisoned`` once a run missed its deadline."""
        if self.closed:
            raise DeviceFailed(f"{self.name} is closed")
        if self.poisoned:
            raise DevicePoisoned(f"{self.name}: a run missed its deadline; close the device")

    def missed(self, deadline_s: float, what: str) -> DeadlineExceeded:
        """A run missed ``deadline_s``: the device is poisoned from now on. The error to raise
        (``what`` names the run)."""
        self.poison()
        return DeadlineExceeded(deadline_s, what)

    def poison(self) -> None:
        """Poisoned from now on (a run missed its deadline, seen by whoever drives it)."""
        self.poisoned = True
        self.usable = False

    def close(self) -> bool:
        """Mark the device closed; True only on the first call (the one that releases)."""
        first = not self.closed
        self.closed = True
        self.usable = False
        return first
