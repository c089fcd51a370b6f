"""Refusals: why a target will not run an equation, as values with a kind and the facts.

A refusal is what a user reads when a program does not fit an NPU, so it names the equation,
the primitive and exactly what broke: the dtype or axis, the step with no derived bound, the
missing contract, the literal and its value, the limit with the figure needed and available.
It is never a bare string; ``str(refusal)`` renders it as one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Refusal", "RefusalKind", "limit_refusal"]


class RefusalKind(Enum):
    UNSUPPORTED_PRIMITIVE = "unsupported primitive"
    UNSUPPORTED_DTYPE = "unsupported dtype"
    UNSUPPORTED_AXIS = "unsupported axis"
    MISSING_BOUND = "missing bound"
    MISSING_CONTRACT = "missing contract"
    NARROWING_RANGE = "narrowing range"
    INTEGER_TO_FLOAT = "integer to float"
    REGION_LIMIT = "region limit"
    CONTEXT_LIMIT = "context limit"
    #: a value known when planning (a weight bound at import) outside an equation's domain
    DOMAIN = "domain"


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused equation (``eqn`` is its index in the planned program; -1 for a refusal of
    the whole program, such as too many contexts).

    ``facts`` holds the figures as ``(name, value)`` pairs in a fixed order, e.g.
    ``(("limit", "tile_bytes"), ("needed", 70000), ("available", 64512))``.
    """

    kind: RefusalKind
    eqn: int
    primitive: str
    facts: tuple[tuple[str, str | int | float], ...] = ()

    def fact(self, name: str) -> str | int | float | None:
        for k, v in self.facts:
            if k == name:
                return v
        return None

    def __str__(self) -> str:
        where = "program" if self.eqn < 0 else f"equation {self.eqn} ({self.primitive})"
        facts = ", ".join(f"{k}={v}" for k, v in self.facts)
        return f"{where}: {self.kind.value}" + (f": {facts}" if facts else "")


def limit_refusal(eqn: int, primitive: str, limit: str, needed: int, available: int) -> Refusal:
    """Equation ``eqn`` refused for needing ``needed`` of a limit of which ``available`` exist
    (``REGION_LIMIT``; the facts in the order ``limit``, ``needed``, ``available``)."""
    facts = (("limit", limit), ("needed", needed), ("available", available))
    return Refusal(RefusalKind.REGION_LIMIT, eqn, primitive, facts)
