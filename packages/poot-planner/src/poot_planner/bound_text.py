"""Bounds as people read them: ``render_bound`` phrases one contract bound (the feature matrix's
tables, a legalization's derived bound in ``poot plan``, ``poot acceptance``'s report), and
``figure`` one number (small powers of two as ``2^-k``)."""

from __future__ import annotations

import math
from typing import assert_never

from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Bound,
    Derived,
    LargerOperandUlps,
    Normwise,
    ProductSum,
    Relative,
    RoundedTwice,
    ScaledSum,
)

__all__ = ["figure", "render_bound"]


def figure(x: float) -> str:
    """A figure as people write it: small powers of two as ``2^-k``, the rest with ``%g``."""
    if x > 0 and math.isfinite(x):
        m, e = math.frexp(x)
        if m == 0.5 and (e - 1 <= -8 or e - 1 >= 20):
            return f"2^{e - 1}"
    return f"{x:g}"


def render_bound(b: Bound) -> str:
    """One bound as a phrase (``within 2 x 2^-23 of the larger operand``)."""
    match b:
        case BitExact(signed_zero=True):
            return "bit exact"
        case BitExact():
            return "bit exact (sign of zero not promised)"
        case LargerOperandUlps(ulps=u, unit=unit):
            return f"within {figure(u)} x {figure(unit)} of the larger operand"
        case AbsRel(abs=a, rel=r):
            return f"abs {figure(a)} + rel {figure(r)}"
        case Relative(rel=r):
            return f"rel {figure(r)}"
        case ScaledSum(ulps_per_term=u, unit=unit):
            return f"within {figure(u)} x n x {figure(unit)} of the sum of the n terms' magnitudes"
        case RoundedTwice(rel=r, floor=f):
            return f"rel {figure(r)} + (N + 2) x {figure(f)}, N summands (rounded twice)"
        case Normwise(rel=r, floor=f):
            return f"normwise rel {figure(r)}" + (f" + {figure(f)} per element" if f else "")
        case Derived():
            return "a bound derived per input by a running error analysis"
        case ProductSum(operand_unit=uo, unit=unit):
            return (
                f"operands rounded at {figure(uo)}, products exact, summed in order at "
                f"{figure(unit)}: (2 x {figure(uo)} + K x {figure(unit)}) of the sum of |a||b|"
            )
        case _:
            assert_never(b)
