"""Value facts: what the planner can prove about the sign and size of every F32 value.

A fact is a proven lower bound on a value's elements (``None`` when nothing is proven). That is
all the XDNA2 error-bound derivation needs: an ``add`` inside a row kernel cannot cancel when
both operands are non-negative, a ``sqrt`` has a relative bound only over positive normal
numbers, and a sum has a relative bound only over non-negative terms.

The analysis is deliberately small and sound: each rule below holds for every input, NaN aside
(a NaN input makes every bound moot, and the contracts exclude it from their domains).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poot_ir import Atom, Eqn, Literal, Prim, Program, ReduceParams, Var

__all__ = ["SMALLEST_NORMAL_F32", "Fact", "value_facts"]

SMALLEST_NORMAL_F32 = 1.1754943508222875e-38


@dataclass(frozen=True, slots=True)
class Fact:
    """``lower``: every element is >= this (``None``: nothing proven)."""

    lower: float | None = None

    @property
    def non_negative(self) -> bool:
        return self.lower is not None and self.lower >= 0.0

    @property
    def positive(self) -> bool:
        return self.lower is not None and self.lower > 0.0

    @property
    def positive_normal(self) -> bool:
        return self.lower is not None and self.lower >= SMALLEST_NORMAL_F32

    def describe(self) -> str:
        if self.positive_normal:
            return f"positive normal (>= {self.lower:g})"
        if self.positive:
            return "positive"
        if self.non_negative:
            return "non-negative"
        return "sign unknown"


UNKNOWN = Fact()


def _atom_fact(a: Atom, facts: dict[int, Fact]) -> Fact:
    if isinstance(a, Literal):
        v = a.as_float()
        return UNKNOWN if math.isnan(v) else Fact(v)
    return facts.get(a.id, UNKNOWN)


def _rule(e: Eqn, facts: dict[int, Fact]) -> Fact:
    ins = [_atom_fact(a, facts) for a in e.inputs]
    match e.prim:
        case Prim.MUL:
            a, b = e.inputs
            if isinstance(a, Var) and a == b:  # a square
                return Fact(0.0)
            fa, fb = ins
            if fa.lower is not None and fb.lower is not None and fa.lower >= 0 and fb.lower >= 0:
                # rounding is monotone, so the product of lower bounds (rounded down) is a bound;
                # we only keep "non-negative" or "positive" to stay clear of underflow.
                return Fact(0.0) if fa.lower * fb.lower == 0 else Fact(_shrink(fa.lower * fb.lower))
            return UNKNOWN
        case Prim.DIV:
            fa, fb = ins
            b = e.inputs[1]
            if fa.non_negative and isinstance(b, Literal) and b.as_float() > 0:
                return Fact(_shrink((fa.lower or 0.0) / b.as_float()))
            if fa.non_negative and fb.positive:
                return Fact(0.0)
            return UNKNOWN
        case Prim.ADD:
            fa, fb = ins
            if fa.lower is not None and fb.lower is not None and fa.lower >= 0 and fb.lower >= 0:
                # a + b >= max(a, b) for non-negative operands, even after rounding
                return Fact(max(fa.lower, fb.lower))
            return UNKNOWN
        case Prim.SQRT:
            f = ins[0]
            return (
                Fact(_shrink(math.sqrt(f.lower)))
                if f.non_negative and f.lower is not None
                else UNKNOWN
            )
        case Prim.EXP:
            return Fact(0.0)
        case Prim.ABS:
            return Fact(0.0)
        case Prim.REDUCE_SUM:
            f = ins[0]
            axes = e.params.axes if isinstance(e.params, ReduceParams) else ()
            # a sum of terms that are all >= lower >= 0 is itself >= lower (if it has a term;
            # an empty sum is 0, which still satisfies lower = 0 but not a positive lower)
            if not f.non_negative:
                return UNKNOWN
            empty = any(e.inputs[0].type.shape[ax] == 0 for ax in axes)
            return Fact(0.0) if empty else f
        case Prim.REDUCE_MAX:
            # the max of an empty axis is -inf: no lower bound survives it
            axes = e.params.axes if isinstance(e.params, ReduceParams) else ()
            empty = any(e.inputs[0].type.shape[ax] == 0 for ax in axes)
            return UNKNOWN if empty else ins[0]
        case Prim.BROADCAST_IN_DIM | Prim.RESHAPE | Prim.TRANSPOSE | Prim.SLICE:
            return ins[0]
        case Prim.MAX:
            fa, fb = ins
            lows = [f.lower for f in (fa, fb) if f.lower is not None]
            return Fact(max(lows)) if lows else UNKNOWN
        case _:
            return UNKNOWN


def _shrink(x: float) -> float:
    """A lower bound a little below ``x``, so float32 rounding of the value cannot undercut it."""
    return x * (1.0 - 2.0**-20) if x > 0 else x


def value_facts(program: Program) -> dict[int, Fact]:
    """The proven fact of every variable defined in ``program``, by var id."""
    facts: dict[int, Fact] = {}
    for e in program.eqns:
        facts[e.out.id] = _rule(e, facts)
    return facts
