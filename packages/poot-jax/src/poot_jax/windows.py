"""Window rules: ``conv_general_dilated`` and the window reductions, onto poot's ``conv`` and
``reduce_window_sum``/``reduce_window_max`` (``poot_ir.window``: float operands).

``conv_general_dilated`` transposes the operands to poot's layout (``[N, C, *S]`` by
``[O, I, *K]``: JAX's ``lhs_spec`` and ``rhs_spec`` are exactly those permutations) and the result
back by ``out_spec``; padding, strides, both dilations and ``feature_group_count`` carry over
(a gradient's ``batch_group_count`` G: one conv per group, batch rows g-major by output
features, concatenated). ``reduce_window_min`` is ``-max(-x)`` (negation
is exact; the -inf padding of max is min's +inf). A ``base_dilation`` fills the operand's holes
with the identity. An i32 or bool
window (poot's window primitives are float) unrolls into one strided slice per window position
(at most ``MAX_UNROLLED``). ``lax.reduce_window`` with an ``add``/``max``/``min`` reducer and a
literal init value is the same, ``init`` combined once into each window (as XLA:CPU computes
it: padding and a base dilation's holes count for nothing).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from poot_ir.core import Literal as PootLiteral
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_jax.context import Ctx, Refuse, Value, poot_dtype
from poot_jax.elementwise import Rule
from poot_jax.shapes import interior

__all__ = ["RULES"]


def _ints(xs: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


def _permuted(cx: Ctx, x: Var, perm: tuple[int, ...]) -> Var:
    return x if perm == tuple(range(len(perm))) else cx.b.transpose(x, perm)


def _rows(cx: Ctx, x: Var, lo: int, hi: int) -> Var:
    return cx.b.slice(x, (lo,) + (0,) * (len(x.shape) - 1), (hi, *x.shape[1:]))


def _conv(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    lhs, rhs = cx.var(ins[0]), cx.var(ins[1])
    preferred = p.get("preferred_element_type")
    if preferred is not None and poot_dtype(preferred) is not lhs.dtype:
        want = poot_dtype(preferred)
        if lhs.dtype is not DType.I32 or want is not DType.F32:
            raise Refuse("params", f"preferred_element_type {np.dtype(preferred)} on {lhs.dtype}")
        # XLA converts integer operands to the preferred float type and convolves in it
        lhs, rhs = cx.b.convert(lhs, want), cx.b.convert(rhs, want)
    dn = p["dimension_numbers"]
    x = _permuted(cx, lhs, _ints(dn.lhs_spec))
    w = _permuted(cx, rhs, _ints(dn.rhs_spec))
    args = (
        _ints(p["window_strides"]),
        [(int(lo), int(hi)) for lo, hi in p["padding"]],
        _ints(p["lhs_dilation"]),
        _ints(p["rhs_dilation"]),
        int(p["feature_group_count"]),
    )
    groups = int(p["batch_group_count"])
    if groups == 1:
        y = cx.b.conv(x, w, *args)
    else:  # a gradient's: batch group g (of N/G, g-major) by output features group g
        n, o = x.shape[0] // groups, w.shape[0] // groups
        ys = [
            cx.b.conv(_rows(cx, x, g * n, (g + 1) * n), _rows(cx, w, g * o, (g + 1) * o), *args)
            for g in range(groups)
        ]
        y = cx.b.concat(ys, 1)
    out_spec = _ints(dn.out_spec)  # result axis out_spec[i] is poot's axis i
    back = tuple(out_spec.index(j) for j in range(len(out_spec)))
    return [_permuted(cx, y, back)]


#: The most window positions an integer or bool window reduction unrolls into slices.
MAX_UNROLLED = 64


def _window(kind: str) -> Rule:
    def rule(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
        return [_reduce_window(cx, cx.var(ins[0]), kind, None, p)]

    return rule


def _generic(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    """``lax.reduce_window`` with its own reducer: one ``add``, ``max`` or ``min`` of the two
    scalars (XLA pads with ``init`` and folds each window from ``init``)."""
    body = p["jaxpr"]
    eqns = list(body.eqns)
    if (
        len(ins) != 2
        or p.get("consts")
        or len(eqns) != 1
        or set(eqns[0].invars) != set(body.invars)
        or list(body.outvars) != list(eqns[0].outvars)
        or eqns[0].primitive.name not in ("add", "max", "min")
    ):
        raise Refuse("params", "a reducer other than one add, max or min of its two operands")
    if not isinstance(ins[1], PootLiteral):
        raise Refuse("params", "an init value computed at run time")
    kind = {"add": "sum", "max": "max", "min": "min"}[eqns[0].primitive.name]
    return [_reduce_window(cx, cx.var(ins[0]), kind, ins[1], p)]


def _reduce_window(cx: Ctx, x: Var, kind: str, init: PootLiteral | None, p: dict[str, Any]) -> Var:
    window, strides = _ints(p["window_dimensions"]), _ints(p["window_strides"])
    padding = [(int(lo), int(hi)) for lo, hi in p["padding"]]
    dilation, base = _ints(p["window_dilation"]), _ints(p["base_dilation"])
    floats = x.dtype in (DType.F32, DType.F16, DType.BF16)
    identity = {"sum": 0, "max": -np.inf, "min": np.inf}[kind]
    if not floats:
        info = np.iinfo(np.int32)
        identity = {"sum": 0, "max": int(info.min), "min": int(info.max)}[kind]
        if x.dtype is DType.BOOL:
            identity = kind == "min"
    fill = cx.lit(identity, x.dtype)
    x = _dilated(cx, x, fill, base)  # holes and padding count for nothing; init, once
    if not floats:
        return _unrolled(cx, x, kind, init, fill, window, strides, padding, dilation)
    b = cx.b
    match kind:
        case "sum":
            y = b.reduce_window_sum(x, window, strides, padding, dilation)
        case "max":
            y = b.reduce_window_max(x, window, strides, padding, dilation)
        case _:
            y = b.neg(b.reduce_window_max(b.neg(x), window, strides, padding, dilation))
    if init is None or float(init.value) == identity:
        return y
    return {"sum": b.add, "max": b.max, "min": b.min}[kind](y, init)


def _dilated(cx: Ctx, x: Var, fill: Value, base: tuple[int, ...]) -> Var:
    for axis, d in enumerate(base):
        if d > 1:
            x = interior(cx, x, cx.var(fill), axis, d - 1)
    return x


def _unrolled(
    cx: Ctx,
    x: Var,
    kind: str,
    init: PootLiteral | None,
    fill: Value,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    padding: list[tuple[int, int]],
    dilation: tuple[int, ...],
) -> Var:
    """An i32 or bool window reduction as one strided slice per window position, combined
    elementwise (exact): the operand padded with the reduction's identity, ``init`` combined
    once."""
    b, dt = cx.b, x.dtype
    if math.prod(window) > MAX_UNROLLED:
        raise Refuse("params", f"an {dt} window of more than {MAX_UNROLLED} positions")
    if dt is DType.BOOL and kind == "sum":
        raise Refuse("dtype", "a window sum of bool")

    def combine(a: Var, c: Value) -> Var:
        if dt is DType.BOOL:
            return cx.logical_or(a, c) if kind == "max" else cx.logical_and(a, c)
        return {"sum": b.add, "max": b.max, "min": b.min}[kind](a, c)

    for axis, (lo, hi) in enumerate(padding):
        if lo < 0 or hi < 0:
            raise Refuse("params", "negative padding of an integer window")
        parts = []
        for n in (lo, hi):
            shape = tuple(n if i == axis else d for i, d in enumerate(x.shape))
            parts.append(b.broadcast_in_dim(cx.var(fill), shape, ()) if n else None)
        pieces = [v for v in (parts[0], x, parts[1]) if v is not None]
        x = b.concat(pieces, axis) if len(pieces) > 1 else x
    counts = [
        (n - ((k - 1) * d + 1)) // s + 1
        for n, k, s, d in zip(x.shape, window, strides, dilation, strict=True)
    ]
    if any(c <= 0 for c in counts):
        raise Refuse("params", "an integer window larger than its padded operand")
    result: Var | None = None
    for offset in itertools.product(*(range(k) for k in window)):
        start = tuple(o * d for o, d in zip(offset, dilation, strict=True))
        limit = tuple(st + (c - 1) * s + 1 for st, c, s in zip(start, counts, strides, strict=True))
        piece = b.slice(x, start, limit, strides)
        result = piece if result is None else combine(result, piece)
    assert result is not None
    return result if init is None else combine(result, init)


RULES: dict[str, Rule] = {
    "conv_general_dilated": _conv,
    "reduce_window_sum": _window("sum"),
    "reduce_window_max": _window("max"),
    "reduce_window_min": _window("min"),
    "reduce_window": _generic,
}
