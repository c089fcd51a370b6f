"""ONNX lowering rules for the norm-like reductions (``ReduceL1``, ``ReduceL2``,
``ReduceSumSquare``, ``ReduceLogSumExp``) and ``LpNormalization``, in the default domain.

Before opset 18 the reduced axes are an attribute, from 18 an input known at import; an empty
list reduces every axis (or, with ``noop_with_empty_axes``, none). ``ReduceLogSumExp`` shifts by
the maximum (``m + log(sum(exp(x - m)))``, as ONNX Runtime computes it) so that it neither
overflows nor underflows; an infinite maximum is not subtracted (``inf - inf`` would be NaN), so
a slice of ``-inf`` gives ``-inf`` and one holding ``+inf`` gives ``+inf``. ``LpNormalization``
(p 1 or 2) gives 0 where the norm is 0, as ONNX Runtime does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from poot_ir.builder import Builder
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_onnx.context import (
    FLOATS,
    NUMERIC,
    Lowering,
    LoweringRule,
    Node,
    check_dtype,
    norm_axes,
    norm_axis,
    reshape,
)

__all__ = ["RULES"]


def _axes(lo: Lowering, rank: int) -> tuple[int, ...] | None:
    """The reduced axes (None: the node is the identity, ``noop_with_empty_axes``)."""
    attr_axes = lo.attr_ints("axes")
    if lo.has(1):
        if attr_axes is not None:
            raise lo.fail("model", "axes given both as an attribute and as an input")
        given: tuple[int, ...] | None = lo.ints(1, "axes")
    else:
        given = attr_axes
    if not given:
        return None if lo.attr_int("noop_with_empty_axes", 0) else tuple(range(rank))
    return norm_axes(lo, given, rank)


def _lse(b: Builder, x: Var, axes: tuple[int, ...]) -> Var:
    m = b.reduce_max(x, axes)
    # m - m is 0 exactly where m is finite: an infinite (or NaN) maximum is not subtracted.
    shift = b.select(b.eq(b.sub(m, m), 0.0), m, 0.0)
    kept = tuple(d for d in range(x.type.rank) if d not in axes)
    s = b.reduce_sum(b.exp(b.sub(x, b.broadcast_in_dim(shift, x.shape, kept))), axes)
    return b.add(b.log(s), shift)


_KINDS: Mapping[str, tuple[Callable[[Builder, Var, tuple[int, ...]], Var], tuple[DType, ...]]] = {
    "ReduceL1": (lambda b, x, a: b.reduce_sum(b.abs(x), a), NUMERIC),
    "ReduceL2": (lambda b, x, a: b.sqrt(b.reduce_sum(b.mul(x, x), a)), FLOATS),
    "ReduceSumSquare": (lambda b, x, a: b.reduce_sum(b.mul(x, x), a), NUMERIC),
    "ReduceLogSumExp": (_lse, FLOATS),
}


def _reduce(lo: Lowering, n: Node) -> None:
    emit, dtypes = _KINDS[n.op_type]
    x = lo.var(0)
    check_dtype(lo, x, dtypes, "the input")
    axes = _axes(lo, x.type.rank)
    if axes is None:
        lo.set(0, x)
        return
    if not axes:  # a scalar: reducing no axis is the element itself, through the same chain
        x = lo.b.reshape(x, (1,))
        axes = (0,)
    y = emit(lo.b, x, axes)
    keep = lo.attr_int("keepdims", 1) != 0
    kept = tuple(1 if i in axes else d for i, d in enumerate(lo.shape(0)))
    lo.set(0, reshape(lo.b, y, kept) if keep else reshape(lo.b, y, _drop(lo.shape(0), axes)))


def _drop(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _lp_normalization(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the input")
    if not x.shape:
        raise lo.fail("model", "LpNormalization of a scalar")
    axis = norm_axis(lo, lo.attr_int("axis", -1), x.type.rank)
    p = lo.attr_int("p", 2)
    b = lo.b
    match p:
        case 1:
            norm = b.reduce_sum(b.abs(x), axis)
        case 2:
            norm = b.sqrt(b.reduce_sum(b.mul(x, x), axis))
        case _:
            raise lo.fail("attribute", f"p {p}; ONNX defines 1 and 2")
    keep = tuple(d for d in range(x.type.rank) if d != axis)
    zero = b.broadcast_in_dim(b.eq(norm, 0.0), x.shape, keep)
    safe = b.broadcast_in_dim(b.select(b.eq(norm, 0.0), 1.0, norm), x.shape, keep)
    lo.set(0, b.select(zero, 0.0, b.div(x, safe)))


_AXES = frozenset({"axes", "keepdims", "noop_with_empty_axes"})

RULES: Mapping[str, LoweringRule] = {
    **{op: LoweringRule(_reduce, _AXES) for op in _KINDS},
    "LpNormalization": LoweringRule(_lp_normalization, frozenset({"axis", "p"})),
}
