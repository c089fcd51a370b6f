"""Rounding rules: ``floor``, ``ceil`` and ``round`` (both rounding methods), from poot's
``convert`` (f32 -> i32 truncates toward zero) and comparisons.

``floor x``: ``t = trunc x`` (through i32), less one where ``t > x``; a zero result takes ``x``'s
sign (``x * 0``: ``floor(-0.0) = -0.0``, NaN stays NaN); a magnitude of at least ``2^m`` (``m``
the mantissa bits: every such float is an integer, infinities too) is ``x`` itself, so the i32
range is never left. ``ceil x = -floor(-x)``. ``round`` splits ``|x|`` into ``floor`` and an
exact fraction and rounds up at a half (away from zero) or at a half with an odd floor (to
even), then puts the sign back. All exact. ``pow`` is here for its integer test of ``y``
(``floor``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_jax.context import Ctx, Refuse, Value
from poot_jax.elementwise import Rule

__all__ = ["RULES", "floor_of"]

#: The least magnitude from which every value of the type is an integer (2 ** mantissa bits).
_INTEGRAL = {DType.F32: 2.0**23, DType.F16: 2.0**10, DType.BF16: 2.0**7}


def _float(x: Value) -> Var:
    if not isinstance(x, Var) or x.dtype not in _INTEGRAL:
        raise Refuse("dtype", f"rounding of {x.dtype} (a float type only)")
    return x


def floor_of(cx: Ctx, x: Var) -> Var:
    b, dt = cx.b, x.dtype
    t = b.convert(b.convert(x, DType.I32), dt)
    f = b.sub(t, b.convert(b.gt(t, x), dt))
    f = b.select(b.eq(f, cx.lit(0.0, dt)), b.mul(x, cx.lit(0.0, dt)), f)
    return b.select(b.ge(b.abs(x), cx.lit(_INTEGRAL[dt], dt)), x, f)


def _floor(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [floor_of(cx, _float(cx.var(ins[0])))]


def _ceil(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    b = cx.b
    return [b.neg(floor_of(cx, b.neg(_float(cx.var(ins[0])))))]


def _round(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    b = cx.b
    x = _float(cx.var(ins[0]))
    dt = x.dtype
    a = b.abs(x)
    r = floor_of(cx, a)
    frac = b.sub(a, r)  # exact: r is a's integer part
    half = cx.lit(0.5, dt)
    if int(p["rounding_method"]) == 0:  # AWAY_FROM_ZERO
        up = b.ge(frac, half)
    else:  # TO_NEAREST_EVEN: past the half, or at it with an odd floor
        odd = b.gt(b.sub(r, b.mul(floor_of(cx, b.mul(r, half)), cx.lit(2.0, dt))), cx.lit(0.0, dt))
        up = cx.logical_or(b.gt(frac, half), cx.logical_and(b.eq(frac, half), odd))
    m = b.add(r, b.convert(up, dt))
    signed = b.select(b.gt(cx.lit(0.0, dt), x), b.neg(m), m)
    return [b.select(b.eq(m, cx.lit(0.0, dt)), b.mul(x, cx.lit(0.0, dt)), signed)]


def _pow(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    """``x ** y`` as C's ``pow``: ``exp(y * log|x|)`` (rounding three times where XLA rounds
    once), NaN for a negative ``x`` (``-0.0`` counts, by ``1/x``) and a non-integer ``y``,
    negated for an odd integer ``y``; 1 where ``y == 0`` or ``x == 1``."""
    b = cx.b
    x = _float(cx.var(ins[0]))
    dt = x.dtype
    y = cx.var(ins[1])
    y = y if y.dtype is dt else b.convert(y, dt)
    zero, one = cx.lit(0.0, dt), cx.lit(1.0, dt)
    magnitude = b.exp(b.mul(y, b.log(b.abs(x))))
    whole = b.eq(floor_of(cx, y), y)
    odd = b.gt(b.sub(y, b.mul(floor_of(cx, b.mul(y, cx.lit(0.5, dt))), cx.lit(2.0, dt))), zero)
    negative = cx.logical_or(b.gt(zero, x), b.gt(zero, b.recip(x)))
    signed = b.select(cx.logical_and(negative, odd), b.neg(magnitude), magnitude)
    real = b.select(
        cx.logical_and(negative, cx.logical_not(whole)), cx.lit(float("nan"), dt), signed
    )
    return [b.select(cx.logical_or(b.eq(y, zero), b.eq(x, one)), one, real)]


RULES: dict[str, Rule] = {"floor": _floor, "ceil": _ceil, "round": _round, "pow": _pow}
