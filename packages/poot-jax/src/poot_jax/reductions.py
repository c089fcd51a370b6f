"""Reductions, ``argmax``/``argmin`` and ``dot_general``.

poot reduces with ``reduce_sum`` and ``reduce_max``; the rest are composed:
``reduce_min(x) = -reduce_max(-x)`` on floats and ``-1 - reduce_max(-1 - x)`` on i32 (``-1 - x``
never overflows, ``-x`` does at INT_MIN); on bool ``reduce_or`` is the i32 maximum of 0/1 and
``reduce_and`` is ``not reduce_or(not x)``. ``argmax`` is the least index whose value equals the
maximum or is NaN (JAX counts NaN as the largest, the first one wins). ``dot_general`` moves
each operand's axes to (batch, free, contracting) order, flattens them to poot's batched
``matmul`` and reshapes the product to JAX's (batch, lhs free, rhs free) layout. ``cumsum`` is
a ``matmul`` by a 0/1 triangle (n x n: a ``Budget`` bounds it like any tensor); ``cummax``,
``cummin`` and ``cumprod`` are doubling scans (``log2 n`` steps of slices, the operation and a
concat).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_jax.context import Ctx, Refuse, Value, poot_dtype
from poot_jax.elementwise import Rule

__all__ = ["RULES"]


def _axes(p: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(a) for a in p["axes"])


def _reduce_sum(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x = cx.var(ins[0])
    return [cx.b.reduce_sum(x, _axes(p)) if _axes(p) else x]


def _max(cx: Ctx, x: Var, axes: tuple[int, ...]) -> Var:
    if not axes:
        return x
    if x.dtype is DType.BOOL:
        return cx.b.gt(cx.b.reduce_max(cx.b.convert(x, DType.I32), axes), 0)
    return cx.b.reduce_max(x, axes)


def _min(cx: Ctx, x: Var, axes: tuple[int, ...]) -> Var:
    b = cx.b
    if not axes:
        return x
    if x.dtype is DType.BOOL:
        return cx.logical_not(_max(cx, cx.logical_not(x), axes))
    if x.dtype is DType.I32:
        return b.sub(-1, b.reduce_max(b.sub(-1, x), axes))
    return b.neg(b.reduce_max(b.neg(x), axes))


def _reduce_max(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [_max(cx, cx.var(ins[0]), _axes(p))]


def _reduce_min(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [_min(cx, cx.var(ins[0]), _axes(p))]


def _bool_reduce(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any], is_or: bool
) -> list[Var]:
    x = cx.var(ins[0])
    if x.dtype is not DType.BOOL:
        raise Refuse("dtype", f"a bitwise reduction of {x.dtype.value}")
    return [(_max if is_or else _min)(cx, x, _axes(p))]


def _reduce_or(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return _bool_reduce(cx, ins, p, outs, True)


def _reduce_and(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return _bool_reduce(cx, ins, p, outs, False)


def _arg(is_max: bool) -> Rule:
    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        b, x, axes = cx.b, cx.var(ins[0]), _axes(p)
        if poot_dtype(p["index_dtype"]) is not DType.I32 or len(axes) != 1:
            raise Refuse("params", f"index_dtype {p['index_dtype']} over axes {axes}")
        (axis,) = axes
        n = x.shape[axis]
        if x.dtype is DType.BOOL:
            x = b.convert(x, DType.I32)
        best = _max(cx, x, axes) if is_max else _min(cx, x, axes)
        keep = tuple(i for i in range(len(x.shape)) if i != axis)
        hit = b.eq(x, b.broadcast_in_dim(best, x.shape, keep))
        if x.dtype.is_float:
            hit = cx.logical_or(hit, cx.logical_not(b.eq(x, x)))  # NaN wins
        where = b.broadcast_in_dim(b.iota((n,), DType.I32, 0), x.shape, (axis,))
        return [_min(cx, b.select(hit, where, n), axes)]

    return rule


def _dot_general(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    b = cx.b
    lhs, rhs = cx.var(ins[0]), cx.var(ins[1])
    (lc, rc), (lb, rb) = p["dimension_numbers"]
    lc, rc, lb, rb = (tuple(int(a) for a in t) for t in (lc, rc, lb, rb))
    out = poot_dtype(outs[0].dtype)
    if out is DType.BOOL:  # or of ands: the i32 count of true products, > 0
        i32 = {**p, "preferred_element_type": None}
        wide = _dot_general(cx, [b.convert(lhs, DType.I32), b.convert(rhs, DType.I32)], i32, [_I32])
        return [b.gt(wide[0], 0)]
    # preferred_element_type: widen the operands first (products of the narrower type are
    # exact in the wider one, so this is the contraction accumulated in it)
    lhs = lhs if lhs.dtype is out else b.convert(lhs, out)
    rhs = rhs if rhs.dtype is out else b.convert(rhs, out)
    lf = tuple(i for i in range(len(lhs.shape)) if i not in lc and i not in lb)
    rf = tuple(i for i in range(len(rhs.shape)) if i not in rc and i not in rb)

    def size(x: Var, axes: tuple[int, ...]) -> int:
        return math.prod(x.shape[i] for i in axes)

    batch = tuple(lhs.shape[i] for i in lb)
    m, k, n = size(lhs, lf), size(lhs, lc), size(rhs, rf)
    bsz = math.prod(batch)
    a = _arranged(cx, lhs, lb + lf + lc, (bsz, m, k))
    c = _arranged(cx, rhs, rb + rc + rf, (bsz, k, n))
    prod = b.matmul(a, c)
    shape = batch + tuple(lhs.shape[i] for i in lf) + tuple(rhs.shape[i] for i in rf)
    return [prod if prod.shape == shape else b.reshape(prod, shape)]


class _Aval:
    """The one fact ``_dot_general`` reads of a result aval: its dtype."""

    dtype = "int32"


_I32 = _Aval()


def _cumsum(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    """A running sum as one ``matmul`` by the 0/1 triangle ``T[j, i] = j <= i`` (``j >= i``
    reversed) along the last axis: the oracle's matmul is exact then rounded once, where XLA
    adds in sequence, so floats agree within the sum's rounding."""
    b, x, axis = cx.b, cx.var(ins[0]), int(p["axis"])
    if x.dtype is DType.BOOL:
        raise Refuse("dtype", "cumsum of bool")
    n, rank = x.shape[axis], len(x.shape)
    rows, cols = b.iota((n, n), DType.I32, 0), b.iota((n, n), DType.I32, 1)
    tri = b.convert(b.ge(rows, cols) if p.get("reverse") else b.ge(cols, rows), x.dtype)
    perm = tuple(i for i in range(rank) if i != axis) + (axis,)
    moved = x if axis == rank - 1 else b.transpose(x, perm)
    lead = moved.shape[:-1]
    flat = b.reshape(moved, (max(1, math.prod(lead)), n)) if len(lead) != 1 else moved
    summed = b.matmul(flat, tri)
    summed = summed if summed.shape == moved.shape else b.reshape(summed, moved.shape)
    back = tuple(perm.index(i) for i in range(rank))
    return [summed if axis == rank - 1 else b.transpose(summed, back)]


def _reduce_prod(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    """A product over ``axes`` by halving: the first half times the second, an odd element
    carried, until one is left (a float product associates differently from XLA's and agrees
    within its rounding; an i32 product wraps the same in any order)."""
    b, x = cx.b, cx.var(ins[0])
    if x.dtype is DType.BOOL:
        raise Refuse("dtype", "reduce_prod of bool")
    if 0 in x.shape:
        return [cx.full(1, tuple(outs[0].shape), x.dtype)]
    for axis in _axes(p):
        while (n := x.shape[axis]) > 1:
            h = n // 2

            def cut(lo: int, hi: int, y: Var = x, axis: int = axis) -> Var:
                start = tuple(lo if i == axis else 0 for i in range(len(y.shape)))
                limit = tuple(hi if i == axis else d for i, d in enumerate(y.shape))
                return b.slice(y, start, limit)

            half = b.mul(cut(0, h), cut(h, 2 * h))
            x = b.concat([half, cut(2 * h, n)], axis) if n % 2 else half
    shape = tuple(outs[0].shape)
    return [x if x.shape == shape else b.reshape(x, shape)]


def _scan(op: str) -> Rule:
    """``cummax``/``cummin``/``cumprod`` as a doubling scan (Hillis-Steele): ``log2 n`` steps,
    step ``k`` combining each element with the one ``k`` before it (after it, reversed), the
    first ``k`` kept. Exact for max and min; a float product associates differently from XLA's
    and agrees within its rounding; an i32 product wraps the same in any order."""

    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        b, y, axis = cx.b, cx.var(ins[0]), int(p["axis"])
        if y.dtype is DType.BOOL:
            raise Refuse("dtype", f"{op} of bool")
        combine = {"max": b.max, "min": b.min, "mul": b.mul}[op]
        n, rank, k = y.shape[axis], len(y.shape), 1

        def cut(x: Var, lo: int, hi: int) -> Var:
            start = tuple(lo if i == axis else 0 for i in range(rank))
            return b.slice(x, start, tuple(hi if i == axis else d for i, d in enumerate(x.shape)))

        while k < n:
            if p.get("reverse"):
                parts = [combine(cut(y, 0, n - k), cut(y, k, n)), cut(y, n - k, n)]
            else:
                parts = [cut(y, 0, k), combine(cut(y, k, n), cut(y, 0, n - k))]
            y = b.concat(parts, axis)
            k *= 2
        return [y]

    return rule


def _arranged(cx: Ctx, x: Var, perm: tuple[int, ...], shape: tuple[int, ...]) -> Var:
    if perm != tuple(range(len(x.shape))):
        x = cx.b.transpose(x, perm)
    return x if x.shape == shape else cx.b.reshape(x, shape)


RULES: dict[str, Rule] = {
    "reduce_sum": _reduce_sum,
    "reduce_max": _reduce_max,
    "reduce_min": _reduce_min,
    "reduce_or": _reduce_or,
    "reduce_and": _reduce_and,
    "argmax": _arg(True),
    "argmin": _arg(False),
    "dot_general": _dot_general,
    "cumsum": _cumsum,
    "reduce_prod": _reduce_prod,
    "cummax": _scan("max"),
    "cummin": _scan("min"),
    "cumprod": _scan("mul"),
}
