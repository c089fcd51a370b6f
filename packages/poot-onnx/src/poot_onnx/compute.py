"""ONNX lowering rules for computation: elementwise ops, casts, reductions, matrix products and
the normalizations (``poot_ir.ops`` composites where the chain is theirs).

Elementwise rules broadcast numpy-style through the ``Builder``; a constant operand becomes a
literal where ``Lowering.atoms`` allows. Integer ``Div`` truncates toward zero, as poot's I32
``div`` and ONNX do. F16 and BF16 normalizations compute in F32 (ONNX's ``stash_type`` 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from poot_ir import ops
from poot_ir.builder import Builder
from poot_ir.core import Atom, Literal, Var
from poot_ir.dtypes import DType
from poot_ir.oracle import evaluate

from poot_onnx.context import (
    FLOATS,
    NUMERIC,
    Const,
    Lowering,
    LoweringRule,
    Node,
    bcast,
    check_dtype,
    norm_axes,
    norm_axis,
    reshape,
)

__all__ = ["RULES"]


# -- elementwise ----------------------------------------------------------------------------


def _unary(emit: Callable[[Builder, Var], Var], dtypes: Sequence[DType] = FLOATS) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        x = lo.var(0)
        check_dtype(lo, x, dtypes, "the input")
        lo.set(0, emit(lo.b, x))

    return LoweringRule(handler)


def _binary(emit: Callable[[Builder, Atom, Atom], Var]) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        if len(n.inputs) != 2:
            raise lo.fail("model", f"takes 2 inputs, got {len(n.inputs)}")
        a, c = lo.atoms((0, 1))
        lo.set(0, emit(lo.b, a, c))

    return LoweringRule(handler)


def _variadic(kind: str) -> LoweringRule:
    """Max, Min and Sum over any number of inputs, left to right."""

    def handler(lo: Lowering, n: Node) -> None:
        k = len(n.inputs)
        if k == 0:
            raise lo.fail("model", "takes at least one input")
        atoms = lo.atoms(range(k))
        # Values first (each operation is symmetric, and the first operand must be a value).
        values = [a for a in atoms if isinstance(a, Var)]  # atoms() keeps at least one
        rest = values[1:] + [
            a for a in atoms if isinstance(a, Literal) and not _identity(kind, a, values[0])
        ]
        b, acc = lo.b, values[0]
        for a in rest:
            acc = (
                b.max(acc, a)
                if kind == "max"
                else b.min(acc, a)
                if kind == "min"
                else b.add(acc, a)
            )
        lo.set(0, acc)

    return LoweringRule(handler)


def _identity(kind: str, lit: Literal, x: Var) -> bool:
    """``lit`` is the identity of ``kind`` on values like ``x``: -inf of max, +inf of min.

    ``max(x, -inf) = x`` and ``min(x, +inf) = x`` exactly for every float ``x``, NaN and -0
    included, under the oracle's IEEE 754-2019 maximum and minimum (``poot_ir.oracle``), so the
    operand is dropped rather than kept as an equation. It is how a jax-exported softmax (magika)
    starts its row maximum, ``max(-inf, reduce_max(x))``; kept, its infinite literal is one the
    FP16 narrowing must refuse (``poot_planner.fp16.narrowing``: an infinite literal outside an add
    or subtract). Only a literal of ``x``'s dtype that does not widen the broadcast reaches here
    (``Lowering.atoms``), so the result's type is ``x``'s either way. The identity of a sum, 0,
    is not exact (``-0 + 0 = +0``) and stays."""
    if lit.dtype is not x.dtype or not x.dtype.is_float:
        return False
    v = lit.as_float()
    return (kind == "max" and v == -math.inf) or (kind == "min" and v == math.inf)


def _relu(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    check_dtype(lo, x, NUMERIC, "the input")
    lo.set(0, lo.b.max(x, lo.b.literal(0, x.dtype)))


def _pow(lo: Lowering, n: Node) -> None:
    e = lo.const(1, "exponent")
    x = lo.var(0)
    flat = np.unique(e.reshape(-1).astype(np.float64))
    if flat.size != 1 or np.broadcast_shapes(x.shape, e.shape) != x.shape:
        raise lo.fail("value", "the exponent must be one scalar value")
    p = float(flat[0])
    b = lo.b
    if p == 1.0:
        y = x
    elif p == 2.0:
        y = b.mul(x, x)
    elif p == 3.0:
        y = b.mul(b.mul(x, x), x)
    elif p == 0.5 and x.dtype.is_float:
        y = b.sqrt(x)
    elif p == -1.0 and x.dtype.is_float:
        y = b.recip(x)
    else:
        raise lo.fail("value", f"exponent {p!r}: poot lowers Pow for 1, 2, 3, 0.5 and -1 only")
    lo.set(0, y)


def _where(lo: Lowering, n: Node) -> None:
    pred = lo.var(0)
    if pred.dtype is not DType.BOOL:
        raise lo.fail("dtype", f"the condition must be bool, got {pred.type}")
    x_atom, y_atom = lo.atoms((1, 2), extra=pred.shape)
    lo.set(0, lo.b.select(pred, x_atom, y_atom))


def _cast(lo: Lowering, n: Node) -> None:
    code = lo.attr_int("to", -1)
    name, np_to = lo.elem_types.get(code, (f"type {code}", None))
    _cast_to(lo, name, np_to)


def _cast_like(lo: Lowering, n: Node) -> None:
    like = lo.value(1)
    if isinstance(like, Const):
        _cast_to(lo, str(like.value.dtype), like.value.dtype)
    else:
        _cast_to(lo, like.dtype.value, like.dtype.numpy)


def _cast_to(lo: Lowering, name: str, np_to: np.dtype[Any] | None) -> None:
    src = lo.value(0)
    dst = DType.from_numpy(np_to) if np_to is not None else None
    if isinstance(src, Const) and np_to is not None and (src.dtype is None or dst is None):
        lo.set(0, src.value.astype(np_to))
        return
    if isinstance(src, Var) and np_to is not None and np_to == np.int64:
        # int64 is held as I32 (``Lowering.wide``): exact from i32 and bool, but a float may
        # not fit, and poot cannot check a value computed at run time.
        if src.dtype not in (DType.I32, DType.BOOL):
            raise lo.fail(
                "dtype",
                f"Cast of a {src.dtype.value} value to int64 at run time: poot holds int64 as "
                "i32 and cannot show the values fit",
            )
        y = src if src.dtype is DType.I32 else lo.b.convert(src, DType.I32)
        lo.wide.add(y.id)
        lo.set(0, y)
        return
    if dst is None:
        raise lo.fail("dtype", f"Cast to {name}, which poot has no type for")
    if isinstance(src, Const) and not src.initializer and src.dtype is not None:
        # CastLike of a constant to the type of a runtime value: still a constant, converted
        # as the oracle converts.
        b = Builder("fold_convert")
        b.output("y", b.convert(b.slot("x", src.dtype, src.shape), dst))
        lo.set(0, evaluate(b.build(), {"x": src.value})["y"])
        return
    x = lo.var(0)
    lo.set(0, x if x.dtype is dst else lo.b.convert(x, dst))


# -- reductions -----------------------------------------------------------------------------


def _reduce(kind: str) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        attr_axes = lo.attr_ints("axes")
        if lo.has(1):
            if attr_axes is not None:
                raise lo.fail("model", "axes given both as an attribute and as an input")
            axes_in: tuple[int, ...] | None = lo.ints(1, "axes")
        else:
            axes_in = attr_axes
        keep = lo.attr_int("keepdims", 1) != 0
        noop = lo.attr_int("noop_with_empty_axes", 0) != 0
        shape = lo.shape(0)
        rank = len(shape)
        if not axes_in:
            if noop:
                lo.set(0, lo.value(0))
                return
            axes_in = tuple(range(rank))
        axes = norm_axes(lo, axes_in, rank)
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        count = math.prod(shape[a] for a in axes)
        b = lo.b
        x = lo.var(0)
        if kind == "max" and x.dtype is DType.BOOL:
            # max over bool is "any": 0/1 as i32; max with 0 makes an empty reduction false.
            y = b.convert(b.max(b.reduce_max(b.convert(x, DType.I32), axes), 0), DType.BOOL)
        else:
            check_dtype(lo, x, NUMERIC, "the input")
            y = b.reduce_max(x, axes) if kind == "max" else b.reduce_sum(x, axes)
            if kind == "mean":
                y = b.div(y, float(count) if x.dtype.is_float else count)
        lo.set(0, reshape(b, y, kept) if keep else y)

    return LoweringRule(handler, frozenset({"axes", "keepdims", "noop_with_empty_axes"}))


# -- contraction ----------------------------------------------------------------------------


def _matmul(lo: Lowering, n: Node) -> None:
    b = lo.b
    a, c = lo.var(0), lo.var(1)
    ra, rc = a.type.rank, c.type.rank
    if ra == 0 or rc == 0:
        raise lo.fail("model", "MatMul of a scalar")
    a2 = b.reshape(a, (1, a.shape[0])) if ra == 1 else a
    c2 = b.reshape(c, (c.shape[0], 1)) if rc == 1 else c
    m, k, nn = a2.shape[-2], a2.shape[-1], c2.shape[-1]
    batch = tuple(int(d) for d in np.broadcast_shapes(a2.shape[:-2], c2.shape[:-2]))
    if c2.type.rank == 2 and a2.type.rank > 2:
        # [..., m, k] @ [k, n]: one matrix product over the flattened batch, no copies of c.
        flat = b.reshape(a2, (math.prod(batch) * m, k))
        y = b.reshape(b.matmul(flat, c2), (*batch, m, nn))
    else:
        y = b.matmul(bcast(b, a2, (*batch, m, k)), bcast(b, c2, (*batch, *c2.shape[-2:])))
    final = batch + ((m,) if ra > 1 else ()) + ((nn,) if rc > 1 else ())
    lo.set(0, reshape(b, y, final))


def _gemm(lo: Lowering, n: Node) -> None:
    b = lo.b
    a, c = lo.var(0), lo.var(1)
    if a.type.rank != 2 or c.type.rank != 2:
        raise lo.fail("model", f"Gemm takes matrices, got {a.type} and {c.type}")
    if lo.attr_int("transA", 0):
        a = b.transpose(a, (1, 0))
    if lo.attr_int("transB", 0):
        c = b.transpose(c, (1, 0))
    y = b.matmul(a, c)
    alpha, beta = lo.attr_float("alpha", 1.0), lo.attr_float("beta", 1.0)
    if alpha != 1.0:
        y = b.mul(y, alpha)
    if lo.has(2) and beta != 0.0:
        bias = lo.var(2)
        y = b.add(y, bias if beta == 1.0 else b.mul(bias, beta))
    lo.set(0, y)


# -- composites -----------------------------------------------------------------------------


def _softmax(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the input")
    if not shape:
        raise lo.fail("model", "Softmax of a scalar")
    if lo.opset >= 13:
        axis = norm_axis(lo, lo.attr_int("axis", -1), len(shape))
        lo.set(0, ops.softmax(lo.b, x, axis))
        return
    # Before opset 13 the input is coerced to 2-D at axis, and softmax runs over the rest.
    axis = lo.attr_int("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise lo.fail("attribute", f"axis {axis} is outside rank {len(shape)}")
    axis += len(shape) if axis < 0 else 0
    flat = reshape(lo.b, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    lo.set(0, reshape(lo.b, ops.softmax(lo.b, flat, -1), shape))


def _norm_input(lo: Lowering) -> tuple[Var, int, tuple[int, ...], tuple[int, ...]]:
    """Input 0 and the normalized axis, the leading and the normalized shape."""
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the input")
    if lo.attr_int("stash_type", 1) != 1:
        raise lo.fail("attribute", "stash_type other than 1 (float32)")
    if not x.shape:
        raise lo.fail("model", "normalization of a scalar")
    axis = norm_axis(lo, lo.attr_int("axis", -1), x.type.rank)
    return x, axis, x.shape[:axis], x.shape[axis:]


def _flat_param(lo: Lowering, i: int, tail: tuple[int, ...]) -> Var:
    """A scale or bias broadcast to the normalized shape and flattened to one axis."""
    p = bcast(lo.b, lo.var(i), tail)
    return reshape(lo.b, p, (math.prod(tail),))


def _layernorm(lo: Lowering, n: Node) -> None:
    b = lo.b
    x, _, lead, tail = _norm_input(lo)
    eps = lo.attr_float("epsilon", 1e-5)
    width = math.prod(tail)
    x2 = reshape(b, x, (math.prod(lead), width))
    scale = _flat_param(lo, 1, tail)
    bias = _flat_param(lo, 2, tail) if lo.has(2) else None
    narrow = x.dtype is not DType.F32
    stats = lo.wants(1) or lo.wants(2)
    if bias is not None and not narrow and not stats:
        y = ops.layernorm(b, x2, scale, bias, eps)
    else:
        # ops.layernorm's chain, with its statistics kept and F16/BF16 computed in F32
        # (stash_type 1) as ONNX specifies.
        xf = b.convert(x2, DType.F32) if narrow else x2
        keep = (0,)
        mean = b.div(b.reduce_sum(xf, (1,)), float(width))
        xc = b.sub(xf, b.broadcast_in_dim(mean, xf.shape, keep))
        var = b.div(b.reduce_sum(b.mul(xc, xc), (1,)), float(width))
        std = b.sqrt(b.add(var, eps))
        normed = b.div(xc, b.broadcast_in_dim(std, xf.shape, keep))
        normed = b.convert(normed, x.dtype) if narrow else normed
        y = b.mul(normed, scale)
        y = y if bias is None else b.add(y, bias)
        stat_shape = lead + (1,) * len(tail)
        if lo.wants(1):
            lo.set(1, b.reshape(mean, stat_shape))
        if lo.wants(2):
            lo.set(2, b.reshape(b.recip(std), stat_shape))
    lo.set(0, reshape(b, y, x.shape))


def _rmsnorm(lo: Lowering, n: Node) -> None:
    b = lo.b
    x, _, lead, tail = _norm_input(lo)
    eps = lo.attr_float("epsilon", 1e-5)
    x2 = reshape(b, x, (math.prod(lead), math.prod(tail)))
    scale = _flat_param(lo, 1, tail)
    if x.dtype is DType.F32:
        y = ops.rmsnorm(b, x2, scale, eps)
    else:
        y = b.mul(b.convert(ops.rmsnorm(b, b.convert(x2, DType.F32), None, eps), x.dtype), scale)
    lo.set(0, reshape(b, y, x.shape))


RULES: Mapping[str, LoweringRule] = {
    "Abs": _unary(Builder.abs, NUMERIC),
    "Neg": _unary(Builder.neg, NUMERIC),
    "Reciprocal": _unary(Builder.recip),
    "Exp": _unary(Builder.exp),
    "Log": _unary(Builder.log),
    "Tanh": _unary(Builder.tanh),
    "Erf": _unary(Builder.erf),
    "Sqrt": _unary(Builder.sqrt),
    "Relu": LoweringRule(_relu),
    "Add": _binary(Builder.add),
    "Sub": _binary(Builder.sub),
    "Mul": _binary(Builder.mul),
    "Div": _binary(Builder.div),
    "Pow": LoweringRule(_pow),
    "Greater": _binary(Builder.gt),
    "GreaterOrEqual": _binary(Builder.ge),
    "Less": _binary(lambda b, x, y: b.gt(y, x)),
    "LessOrEqual": _binary(lambda b, x, y: b.ge(y, x)),
    "Equal": _binary(Builder.eq),
    "Max": _variadic("max"),
    "Min": _variadic("min"),
    "Sum": _variadic("sum"),
    "Where": LoweringRule(_where),
    "Cast": LoweringRule(_cast, frozenset({"to", "saturate", "round_mode"})),
    "CastLike": LoweringRule(_cast_like, frozenset({"saturate", "round_mode"})),
    "ReduceSum": _reduce("sum"),
    "ReduceMax": _reduce("max"),
    "ReduceMean": _reduce("mean"),
    "MatMul": LoweringRule(_matmul),
    "Gemm": LoweringRule(_gemm, frozenset({"alpha", "beta", "transA", "transB"})),
    "Softmax": LoweringRule(_softmax, frozenset({"axis"})),
    "LayerNormalization": LoweringRule(_layernorm, frozenset({"axis", "epsilon", "stash_type"})),
    "RMSNormalization": LoweringRule(_rmsnorm, frozenset({"axis", "epsilon", "stash_type"})),
}
