"""Elementwise rules: arithmetic, comparisons, logic, ``select_n``, ``convert_element_type``,
``integer_pow`` and the functions poot composes from its primitives.

Composites (each a few poot primitives, so each rounds more than once where XLA may round once):
``rsqrt = recip(sqrt x)``, ``logistic = recip(1 + exp(-x))``, ``erfc = 1 - erf x``,
``integer_pow`` by repeated squaring (``recip`` of it for a negative power), ``lt``/``le`` as
``gt``/``ge`` with the operands swapped, ``ne = not eq``, ``sign`` by two selects, i32 ``rem``
as ``a - (a / d) * d`` (C truncation, as XLA); on bool, ``max`` is or and ``min`` is
and, and the order comparisons compare 0/1 as i32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from poot_ir.core import Literal as PootLiteral
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_jax.context import Ctx, Refuse, Value, poot_dtype

__all__ = ["RULES"]

Rule = Callable[[Ctx, Sequence[Value], dict[str, Any], Sequence[Any]], list[Var]]


def _unary(name: str) -> Rule:
    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        x = cx.var(ins[0])
        method: Callable[[Var], Var] = getattr(cx.b, name)
        return [method(x)]

    return rule


def _binary(name: str) -> Rule:
    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        a, b = ins
        if not isinstance(a, Var) and not isinstance(b, Var):  # two literals: one a tensor
            a = cx.var(a)
        if a.dtype is DType.BOOL and name in ("max", "min"):
            return [cx.logical_or(a, b) if name == "max" else cx.logical_and(a, b)]
        if a.dtype is DType.BOOL and name != "eq":
            if name in ("add", "sub", "mul", "div"):
                raise Refuse("dtype", f"{name} on bool")
            a, b = cx.to_i32(a), cx.to_i32(b)
        method: Callable[[Value, Value], Var] = getattr(cx.b, name)
        return [method(a, b)]

    return rule


def _swapped(name: str) -> Rule:
    inner = _binary(name)

    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        return inner(cx, (ins[1], ins[0]), p, outs)

    return rule


def _ne(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [cx.logical_not(cx.b.eq(cx.var(ins[0]), ins[1]))]


def _bool_only(op: str) -> Rule:
    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        if any(x.dtype is not DType.BOOL for x in ins):
            raise Refuse("dtype", f"bitwise {op} on {ins[0].dtype.value} (poot has logic on bool)")
        match op:
            case "not":
                return [cx.logical_not(ins[0])]
            case "and":
                return [cx.logical_and(ins[0], ins[1])]
            case "or":
                return [cx.logical_or(ins[0], ins[1])]
            case _:  # xor
                return [cx.logical_not(cx.b.eq(ins[0], ins[1]))]

    return rule


def _rsqrt(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [cx.b.recip(cx.b.sqrt(cx.var(ins[0])))]


def _logistic(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    b = cx.b
    return [b.recip(b.add(b.exp(b.neg(cx.var(ins[0]))), 1.0))]


def _erfc(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [cx.b.sub(1.0, cx.b.erf(cx.var(ins[0])))]


def _square(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x = cx.var(ins[0])
    return [cx.b.mul(x, x)]


def _is_finite(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    # x - x is 0 for a finite x and NaN for an infinity or a NaN, and NaN == 0 is false
    x = cx.var(ins[0])
    return [cx.b.eq(cx.b.sub(x, x), 0.0)]


def _integer_pow(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    x, y = cx.var(ins[0]), int(p["y"])
    if y < 0 and not x.dtype.is_float:
        raise Refuse("params", f"a negative power ({y}) of an integer")
    if y == 0:
        return [cx.full(1, x.shape, x.dtype)]
    result: Var | None = None
    base, n = x, abs(y)
    while n:  # repeated squaring, as XLA expands integer_pow
        if n & 1:
            result = base if result is None else cx.b.mul(result, base)
        n >>= 1
        if n:
            base = cx.b.mul(base, base)
    assert result is not None
    return [cx.b.recip(result) if y < 0 else result]


def _exp2(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    """``exp2 x = exp(x * ln 2)``: the product rounds once more than XLA's exp2."""
    x = cx.var(ins[0])
    return [cx.b.exp(cx.b.mul(x, cx.lit(math.log(2.0), x.dtype)))]


def _select_n(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    if isinstance(ins[0], PootLiteral):  # known at import: that case (JAX: out of range is UB)
        chosen = cx.var(ins[1:][min(int(ins[0].value), len(ins) - 2)])
        shape = tuple(outs[0].shape)
        return [chosen if chosen.shape == shape else cx.b.broadcast_in_dim(chosen, shape, ())]
    pred, cases = cx.var(ins[0]), ins[1:]
    if len(cases) == 1:
        return [cx.var(cases[0])]
    if pred.dtype is DType.BOOL:
        return [cx.b.select(pred, cases[1], cases[0])]
    result = cx.var(cases[0])
    for i, case in enumerate(cases[1:], start=1):  # an out-of-range index is undefined in JAX
        result = cx.b.select(cx.b.eq(pred, i), case, result)
    return [result]


def _convert(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x, to = cx.var(ins[0]), poot_dtype(p["new_dtype"])
    return [x if x.dtype is to else cx.b.convert(x, to)]


def _clamp(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    lo, x, hi = ins  # lax.clamp(min, x, max)
    if x.dtype is DType.BOOL:
        raise Refuse("dtype", "clamp on bool")
    return [cx.b.min(cx.b.max(x, lo), hi)]


def _sign(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    # 1 above zero, -1 below, else x itself: zero keeps its sign and NaN stays NaN, exactly
    b, x = cx.b, cx.var(ins[0])
    return [b.select(b.gt(x, 0), 1, b.select(b.gt(0, x), -1, x))]


def _rem(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    a, d = ins
    if a.dtype is not DType.I32:  # a - trunc(a / d) * d rounds twice in floating point
        raise Refuse("dtype", f"rem on {a.dtype.value} (poot expresses it exactly on i32 only)")
    a = cx.var(a) if not isinstance(d, Var) else a
    # C remainder: div truncates toward zero, so a - (a / d) * d has the dividend's sign
    return [cx.b.sub(a, cx.b.mul(cx.b.div(a, d), d))]


def _identity(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [cx.var(x) for x in ins]


RULES: dict[str, Rule] = {
    **{n: _unary(n) for n in ("neg", "exp", "log", "tanh", "erf", "sqrt", "abs")},
    **{n: _binary(n) for n in ("add", "sub", "mul", "div", "max", "min", "ge", "gt", "eq")},
    "lt": _swapped("gt"),
    "le": _swapped("ge"),
    "ne": _ne,
    "not": _bool_only("not"),
    "and": _bool_only("and"),
    "or": _bool_only("or"),
    "xor": _bool_only("xor"),
    "rsqrt": _rsqrt,
    "logistic": _logistic,
    "erfc": _erfc,
    "square": _square,
    "is_finite": _is_finite,
    "integer_pow": _integer_pow,
    "select_n": _select_n,
    "convert_element_type": _convert,
    "clamp": _clamp,
    "sign": _sign,
    "rem": _rem,
    "stop_gradient": _identity,
    "copy": _identity,
    "copy_p": _identity,
    "optimization_barrier": _identity,
    "device_put": _identity,
    "add_any": _binary("add"),
    "exp2": _exp2,
}
