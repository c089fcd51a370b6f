"""The ONNX op table: one lowering rule per op type, and ``lower`` to run them over a graph.

A rule names the attributes it reads (any other attribute is refused) and lowers one node
through a ``Lowering``: to poot primitives, to a composite of ``poot_ir.ops``, or, when every
input is a constant the rule may fold, to a numpy value computed at import time. Inputs that
must be constants (shapes, axes, slice bounds, ``Range`` bounds) are listed in
``STATIC_INPUTS``. Nothing here imports onnx.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from poot_ir import ops
from poot_ir.builder import Builder
from poot_ir.core import Atom, Literal, Var
from poot_ir.dtypes import DType
from poot_ir.errors import EvaluationError, TypeCheckError, UnsupportedOnnx
from poot_ir.onnx_lowering import Array, Const, Lowering, Node, identifier
from poot_ir.oracle import evaluate

__all__ = ["OPS", "STATIC_INPUTS", "Rule", "lower"]

Handler = Callable[[Lowering, Node], None]


@dataclass(frozen=True, slots=True)
class Rule:
    handler: Handler
    attrs: frozenset[str] = frozenset()


#: Input positions whose values must be known at import time, per op type.
STATIC_INPUTS: Mapping[str, tuple[int, ...]] = {
    "ConstantOfShape": (0,),
    "Expand": (1,),
    "Pow": (1,),
    "Range": (0, 1, 2),
    "ReduceMax": (1,),
    "ReduceMean": (1,),
    "ReduceSum": (1,),
    "Reshape": (1,),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}


def lower(lo: Lowering, nodes: Sequence[Node]) -> None:
    """Lower ``nodes`` (in graph order) into ``lo``. Raises ``UnsupportedOnnx`` naming the
    first node poot cannot express; nothing else escapes for a malformed model."""
    for node in nodes:
        lo.enter(node)
        if node.domain not in ("", "ai.onnx"):
            raise lo.fail("op", f"op type {node.op_type!r} of domain {node.domain!r}")
        rule = OPS.get(node.op_type)
        if rule is None:
            raise lo.fail("op", f"poot has no lowering for the ONNX op {node.op_type!r}")
        unknown = sorted(set(node.attrs) - rule.attrs)
        if unknown:
            raise lo.fail("attribute", f"unknown attribute(s) {', '.join(unknown)}")
        try:
            with np.errstate(all="ignore"):
                if not _fold_by_oracle(lo, node, rule):
                    rule.handler(lo, node)
        except UnsupportedOnnx:
            raise
        except EvaluationError as err:
            raise lo.fail("value", f"computing it from its constant inputs: {err}") from err
        except (TypeCheckError, ValueError, IndexError, ZeroDivisionError, OverflowError) as err:
            raise lo.fail("model", f"{type(err).__name__}: {err}") from err
    lo.enter(None)


#: Ops whose constant results stay in the program: an iota costs nothing, a weight costs memory.
_GENERATORS = frozenset({"Range"})


def _fold_by_oracle(lo: Lowering, node: Node, rule: Rule) -> bool:
    """Compute a node whose inputs are all constants (not initializers, of poot dtypes except
    where static) at import time: lower it alone into a scratch program and run the oracle, so
    the constant is exactly what the program would have computed. Returns False, and does
    nothing, for any other node (and for ``_GENERATORS``)."""
    static = STATIC_INPUTS.get(node.op_type, ())
    present = [(i, name) for i, name in enumerate(node.inputs) if name]
    if not present or node.op_type in _GENERATORS:
        return False
    for i, name in present:
        c = lo.env.get(name)
        if not isinstance(c, Const) or c.initializer or (c.dtype is None and i not in static):
            return False
    scratch = Lowering(Builder(f"fold_{identifier(node.op_type)}"), lo.opset, lo.elem_types)
    feed: dict[str, Array] = {}
    for i, name in present:
        c = lo.env[name]
        assert isinstance(c, Const)
        if name in scratch.env:
            continue
        if i in static or c.dtype is None:
            scratch.env[name] = c
        else:
            v = scratch.slot(name, c.dtype, c.shape)
            assert v.name is not None
            scratch.env[name] = v
            feed[v.name] = c.value
    scratch.enter(node)
    rule.handler(scratch, node)
    computed: list[tuple[str, str]] = []
    for k, out in enumerate(node.outputs):
        value = scratch.env.get(out) if out else None
        if isinstance(value, Const):
            lo.env[out] = Const(out, value.value)
        elif isinstance(value, Var):
            scratch.b.output(f"out{k}", value)
            computed.append((out, f"out{k}"))
    if computed:
        results = evaluate(scratch.b.build(), {**feed, **scratch.weights})
        for out, key in computed:
            lo.env[out] = Const(out, results[key])
    return True


# -- helpers --------------------------------------------------------------------------------


def _axis(lo: Lowering, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise lo.fail("attribute", f"{what} {axis} is outside rank {rank}")
    return axis % rank


def _axes(lo: Lowering, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    norm = [_axis(lo, a, rank, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        raise lo.fail("attribute", f"axes {tuple(axes)} repeat an axis")
    return tuple(sorted(norm))


def _to(b: Builder, v: Var, shape: tuple[int, ...]) -> Var:
    """numpy-style broadcast of ``v`` to ``shape`` (trailing axes aligned)."""
    if v.shape == shape:
        return v
    offset = len(shape) - v.type.rank
    return b.broadcast_in_dim(v, shape, tuple(range(offset, len(shape))))


def _reshape(b: Builder, v: Var, shape: Sequence[int]) -> Var:
    shape = tuple(shape)
    return v if v.shape == shape else b.reshape(v, shape)


def _check_dtype(lo: Lowering, v: Var, allowed: Sequence[DType], what: str) -> None:
    if v.dtype not in allowed:
        raise lo.fail(
            "dtype", f"{what} is {v.type}; poot lowers it for {[d.value for d in allowed]}"
        )


_FLOATS = (DType.F32, DType.F16, DType.BF16)
_NUMERIC = (*_FLOATS, DType.I32)


# -- elementwise ----------------------------------------------------------------------------


def _np_div(a: Array, b: Array) -> Array:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        if np.any(b == 0):
            raise ZeroDivisionError("integer division by zero in a constant")
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))
    return np.asarray(np.divide(a, b))


def _np_erf(x: Array) -> Array:
    flat = [math.erf(float(v)) for v in x.reshape(-1).tolist()]
    return np.asarray(flat, dtype=x.dtype).reshape(x.shape)


def _unary(
    emit: Callable[[Builder, Var], Var],
    fold: Callable[[Array], Array],
    dtypes: Sequence[DType] = _FLOATS,
) -> Rule:
    def handler(lo: Lowering, n: Node) -> None:
        vals = lo.folded((0,))
        if vals is not None and vals[0] is not None:
            lo.set(0, np.asarray(fold(vals[0])))
            return
        x = lo.var(0)
        _check_dtype(lo, x, dtypes, "the input")
        lo.set(0, emit(lo.b, x))

    return Rule(handler)


def _binary(
    emit: Callable[[Builder, Atom, Atom], Var], fold: Callable[[Array, Array], Array]
) -> Rule:
    def handler(lo: Lowering, n: Node) -> None:
        if len(n.inputs) != 2:
            raise lo.fail("model", f"takes 2 inputs, got {len(n.inputs)}")
        vals = lo.folded((0, 1))
        if vals is not None and vals[0] is not None and vals[1] is not None:
            lo.set(0, np.asarray(fold(vals[0], vals[1])))
            return
        a, c = lo.atoms((0, 1))
        lo.set(0, emit(lo.b, a, c))

    return Rule(handler)


def _variadic(is_max: bool) -> Rule:
    def handler(lo: Lowering, n: Node) -> None:
        k = len(n.inputs)
        if k == 0:
            raise lo.fail("model", "takes at least one input")
        vals = lo.folded(range(k))
        if vals is not None:
            arrays = [v for v in vals if v is not None]
            lo.set(0, reduce(np.maximum if is_max else np.minimum, arrays))
            return
        atoms = lo.atoms(range(k))
        # Values first: max and min are symmetric, and the first operand must be a value.
        order = [a for a in atoms if isinstance(a, Var)] + [
            a for a in atoms if isinstance(a, Literal)
        ]
        first = order[0]
        assert isinstance(first, Var)  # atoms() keeps at least one value
        acc: Var = first
        for a in order[1:]:
            acc = lo.b.max(acc, a) if is_max else lo.b.min(acc, a)
        lo.set(0, acc)

    return Rule(handler)


def _relu(lo: Lowering, n: Node) -> None:
    vals = lo.folded((0,))
    if vals is not None and vals[0] is not None:
        lo.set(0, np.maximum(vals[0], np.zeros((), vals[0].dtype)))
        return
    x = lo.var(0)
    _check_dtype(lo, x, _NUMERIC, "the input")
    lo.set(0, lo.b.max(x, lo.b.literal(0, x.dtype)))


def _pow(lo: Lowering, n: Node) -> None:
    vals = lo.folded((0, 1))
    if vals is not None and vals[0] is not None and vals[1] is not None:
        lo.set(0, np.power(vals[0], vals[1]))
        return
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
    vals = lo.folded((0, 1, 2), movement=True)
    if vals is not None and all(v is not None for v in vals):
        cond, x, y = vals
        assert cond is not None and x is not None and y is not None
        lo.set(0, np.where(cond, x, y))
        return
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
    if dst is None:
        raise lo.fail("dtype", f"Cast to {name}, which poot has no type for")
    x = lo.var(0)
    lo.set(0, x if x.dtype is dst else lo.b.convert(x, dst))


# -- reductions -----------------------------------------------------------------------------


def _reduce(kind: str) -> Rule:
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
        axes = _axes(lo, axes_in, rank)
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        count = math.prod(shape[a] for a in axes)
        vals = lo.folded((0,))
        if vals is not None and vals[0] is not None:
            v = vals[0]
            if kind == "max":
                r = np.max(v, axis=axes, keepdims=keep)
            else:
                r = np.sum(v, axis=axes, keepdims=keep)
                r = r / count if kind == "mean" else r
            lo.set(0, np.asarray(r, v.dtype))
            return
        b = lo.b
        x = lo.var(0)
        if kind == "max" and x.dtype is DType.BOOL:
            # max over bool is "any": 0/1 as i32; max with 0 makes an empty reduction false.
            y = b.convert(b.max(b.reduce_max(b.convert(x, DType.I32), axes), 0), DType.BOOL)
        else:
            _check_dtype(lo, x, _NUMERIC, "the input")
            y = b.reduce_max(x, axes) if kind == "max" else b.reduce_sum(x, axes)
            if kind == "mean":
                y = b.div(y, float(count) if x.dtype.is_float else count)
        lo.set(0, _reshape(b, y, kept) if keep else y)

    return Rule(handler, frozenset({"axes", "keepdims", "noop_with_empty_axes"}))


# -- data movement --------------------------------------------------------------------------


def _identity(lo: Lowering, n: Node) -> None:
    lo.set(0, lo.value(0))


def _gather(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    if not shape:
        raise lo.fail("model", "cannot gather from a scalar")
    axis = _axis(lo, lo.attr_int("axis", 0), len(shape))
    size = shape[axis]
    vals = lo.folded((0,), movement=True)
    if vals is not None and vals[0] is not None and vals[1] is not None:
        if vals[1].dtype.kind not in "iu":
            raise lo.fail("value", f"indices are {vals[1].dtype}, not integers")
        lo.check_indices(vals[1], size, n.inputs[1])
        lo.set(0, np.take(vals[0], vals[1], axis=axis))
        return
    b = lo.b
    idx = lo.value(1)
    if isinstance(idx, Const) and idx.value.ndim == 0 and idx.value.dtype.kind in "iu":
        # One constant index: a slice and a reshape, no index tensor.
        lo.check_indices(idx.value, size, idx.name)
        i = int(idx.value) % size
        x = lo.var(0)
        start = tuple(i if a == axis else 0 for a in range(len(shape)))
        limit = tuple(i + 1 if a == axis else d for a, d in enumerate(shape))
        part = b.slice(x, start, limit)
        lo.set(0, b.reshape(part, shape[:axis] + shape[axis + 1 :]))
        return
    indices = lo.index_var(1, size)
    lo.set(0, b.gather(lo.var(0), indices, axis))


def _transpose(lo: Lowering, n: Node) -> None:
    rank = len(lo.shape(0))
    perm = lo.attr_ints("perm")
    perm = tuple(reversed(range(rank))) if perm is None else perm
    if sorted(perm) != list(range(rank)):
        raise lo.fail("attribute", f"perm {perm} is not a permutation of {rank} axes")
    vals = lo.folded((0,), movement=True)
    if vals is not None and vals[0] is not None:
        lo.set(0, np.transpose(vals[0], perm))
        return
    x = lo.var(0)
    lo.set(0, x if perm == tuple(range(rank)) else lo.b.transpose(x, perm))


def _resolve_shape(
    lo: Lowering, src: tuple[int, ...], spec: Sequence[int], allowzero: bool
) -> tuple[int, ...]:
    out: list[int] = []
    infer: int | None = None
    for i, d in enumerate(spec):
        if d == -1:
            if infer is not None:
                raise lo.fail("value", f"shape {tuple(spec)} has more than one -1")
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(src):
                raise lo.fail("value", f"shape {tuple(spec)}: 0 at {i} copies no input axis")
            out.append(src[i])
        elif d < 0:
            raise lo.fail("value", f"shape {tuple(spec)} has a negative extent")
        else:
            out.append(d)
    total = math.prod(src)
    if infer is not None:
        rest = math.prod(out)
        if rest == 0 or total % rest:
            raise lo.fail("value", f"cannot infer -1 in {tuple(spec)} for {total} elements")
        out[infer] = total // rest
    if math.prod(out) != total:
        raise lo.fail("value", f"cannot reshape {src} to {tuple(spec)}")
    return tuple(out)


def _reshape_to(lo: Lowering, shape: tuple[int, ...]) -> None:
    """Output 0 is input 0 reshaped to ``shape`` (folded for constants)."""
    vals = lo.folded((0,), movement=True)
    if vals is not None and vals[0] is not None:
        lo.set(0, np.reshape(vals[0], shape))
        return
    lo.set(0, _reshape(lo.b, lo.var(0), shape))


def _reshape_op(lo: Lowering, n: Node) -> None:
    spec = lo.ints(1, "shape") if lo.has(1) else lo.attr_ints("shape")
    if spec is None:
        raise lo.fail("model", "has no shape")
    allowzero = lo.attr_int("allowzero", 0) != 0
    _reshape_to(lo, _resolve_shape(lo, lo.shape(0), spec, allowzero))


def _flatten(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    axis = lo.attr_int("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise lo.fail("attribute", f"axis {axis} is outside rank {len(shape)}")
    axis += len(shape) if axis < 0 else 0
    _reshape_to(lo, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _axes_of(lo: Lowering) -> tuple[int, ...] | None:
    if lo.has(1):
        return lo.ints(1, "axes")
    return lo.attr_ints("axes")


def _unsqueeze(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    axes_in = _axes_of(lo)
    if axes_in is None:
        raise lo.fail("model", "has no axes")
    rank = len(shape) + len(axes_in)
    axes = _axes(lo, axes_in, rank)
    dims = iter(shape)
    _reshape_to(lo, tuple(1 if i in axes else next(dims) for i in range(rank)))


def _squeeze(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    axes_in = _axes_of(lo)
    if axes_in is None:
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        axes = _axes(lo, axes_in, len(shape))
    if any(shape[a] != 1 for a in axes):
        raise lo.fail("value", f"cannot squeeze axes {axes} of shape {shape}")
    _reshape_to(lo, tuple(d for i, d in enumerate(shape) if i not in axes))


def _expand(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    out = tuple(int(d) for d in np.broadcast_shapes(shape, lo.ints(1, "shape")))
    vals = lo.folded((0,), movement=True)
    if vals is not None and vals[0] is not None:
        lo.set(0, np.array(np.broadcast_to(vals[0], out)))
        return
    lo.set(0, _to(lo.b, lo.var(0), out))


def _slice(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    rank = len(shape)
    if lo.opset < 10:
        starts, ends = lo.attr_ints("starts"), lo.attr_ints("ends")
        axes_in, steps_in = lo.attr_ints("axes"), None
    else:
        starts, ends = lo.ints(1, "starts"), lo.ints(2, "ends")
        axes_in = lo.ints(3, "axes") if lo.has(3) else None
        steps_in = lo.ints(4, "steps") if lo.has(4) else None
    if starts is None or ends is None:
        raise lo.fail("model", "has no starts or ends")
    axes = axes_in if axes_in is not None else tuple(range(len(starts)))
    steps = steps_in if steps_in is not None else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise lo.fail("model", "starts, ends, axes and steps differ in length")
    norm = [_axis(lo, a, rank, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        raise lo.fail("attribute", f"axes {axes} repeat an axis")
    window = [slice(None)] * rank
    for a, s, e, st in zip(norm, starts, ends, steps, strict=True):
        if st == 0:
            raise lo.fail("value", f"step 0 on axis {a}")
        window[a] = slice(s, e, st)  # Python's clamping is ONNX's
    vals = lo.folded((0,), movement=True)
    if vals is not None and vals[0] is not None:
        lo.set(0, np.array(vals[0][tuple(window)]))
        return
    b = lo.b
    start, limit, stride = [0] * rank, list(shape), [1] * rank
    backward: list[tuple[int, range]] = []
    for a, w in enumerate(window):
        lo_, hi, st = w.indices(shape[a])
        if st > 0:
            start[a], limit[a], stride[a] = lo_, max(lo_, hi), st
        else:
            backward.append((a, range(lo_, hi, st)))
    y = lo.var(0)
    if (start, limit, stride) != ([0] * rank, list(shape), [1] * rank):
        y = b.slice(y, start, limit, stride)
    for a, r in backward:
        # A negative step is a gather of the indices it visits.
        indices = lo.index_weight(f"{n.outputs[0]}.indices{a}", list(r))
        y = b.gather(y, indices, a)
    lo.set(0, y)


def _concat(lo: Lowering, n: Node) -> None:
    if not n.inputs:
        raise lo.fail("model", "takes at least one input")
    rank = len(lo.shape(0))
    axis = _axis(lo, lo.attr_int("axis", 0), rank)
    k = len(n.inputs)
    vals = lo.folded(range(k), movement=True)
    if vals is not None and all(v is not None for v in vals):
        lo.set(0, np.concatenate([v for v in vals if v is not None], axis=axis))
        return
    lo.set(0, lo.b.concat([lo.var(i) for i in range(k)], axis))


def _range(lo: Lowering, n: Node) -> None:
    start, limit, delta = (lo.const(i, what) for i, what in enumerate(("start", "limit", "delta")))
    if any(v.size != 1 for v in (start, limit, delta)):
        raise lo.fail("value", "start, limit and delta must be scalars")
    s, lim, d = (v.reshape(-1)[0] for v in (start, limit, delta))
    if d == 0:
        raise lo.fail("value", "delta is 0")
    count = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
    dtype = DType.from_numpy(s.dtype)
    if dtype is None or dtype is DType.BOOL:
        lo.set(0, np.arange(count, dtype=s.dtype) * d + s)
        return
    # start + i * delta, i counted by iota: no weight, however long the range.
    b = lo.b
    y = b.iota((count,), dtype, 0)
    if float(d) != 1:
        y = b.mul(y, Literal.of(d, dtype))
    if not (float(s) == 0 and float(d) > 0):
        y = b.add(y, Literal.of(s, dtype))
    lo.set(0, y)


def _constant(lo: Lowering, n: Node) -> None:
    given = [k for k in n.attrs if k.startswith("value") or k == "sparse_value"]
    if len(given) != 1:
        raise lo.fail("model", f"needs exactly one value attribute, got {given}")
    key = given[0]
    raw = lo.attr(key)
    if isinstance(raw, np.ndarray):
        arr = raw
    elif key == "value_float":
        arr = np.asarray(raw, np.float32)
    elif key == "value_floats":
        arr = np.asarray(raw, np.float32).reshape(-1)
    elif key == "value_int":
        arr = np.asarray(raw, np.int64)
    elif key == "value_ints":
        arr = np.asarray(raw, np.int64).reshape(-1)
    else:
        raise lo.fail("dtype", f"a {key} constant")
    lo.set(0, arr)


def _constant_of_shape(lo: Lowering, n: Node) -> None:
    shape = lo.ints(0, "shape")
    if any(d < 0 for d in shape):
        raise lo.fail("value", f"shape {shape} has a negative extent")
    fill = lo.attr_tensor("value")
    fill = np.zeros(1, np.float32) if fill is None else fill
    if fill.size != 1:
        raise lo.fail("attribute", "value must hold one element")
    lo.set(0, np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype))


def _shape(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    start, end = lo.attr_int("start", 0), lo.attr_int("end", len(shape))
    lo.set(0, np.asarray(shape[start:end], dtype=np.int64).reshape(-1))


def _size(lo: Lowering, n: Node) -> None:
    lo.set(0, np.asarray(math.prod(lo.shape(0)), dtype=np.int64))


# -- contraction ----------------------------------------------------------------------------


def _matmul(lo: Lowering, n: Node) -> None:
    vals = lo.folded((0, 1))
    if vals is not None and vals[0] is not None and vals[1] is not None:
        lo.set(0, np.matmul(vals[0], vals[1]))
        return
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
        y = b.matmul(_to(b, a2, (*batch, m, k)), _to(b, c2, (*batch, *c2.shape[-2:])))
    final = batch + ((m,) if ra > 1 else ()) + ((nn,) if rc > 1 else ())
    lo.set(0, _reshape(b, y, final))


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
    _check_dtype(lo, x, _FLOATS, "the input")
    if not shape:
        raise lo.fail("model", "Softmax of a scalar")
    if lo.opset >= 13:
        axis = _axis(lo, lo.attr_int("axis", -1), len(shape))
        lo.set(0, ops.softmax(lo.b, x, axis))
        return
    # Before opset 13 the input is coerced to 2-D at axis, and softmax runs over the rest.
    axis = lo.attr_int("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise lo.fail("attribute", f"axis {axis} is outside rank {len(shape)}")
    axis += len(shape) if axis < 0 else 0
    flat = _reshape(lo.b, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    lo.set(0, _reshape(lo.b, ops.softmax(lo.b, flat, -1), shape))


def _norm_input(lo: Lowering) -> tuple[Var, int, tuple[int, ...], tuple[int, ...]]:
    """Input 0 and the normalized axis, the leading and the normalized shape."""
    x = lo.var(0)
    _check_dtype(lo, x, _FLOATS, "the input")
    if lo.attr_int("stash_type", 1) != 1:
        raise lo.fail("attribute", "stash_type other than 1 (float32)")
    if not x.shape:
        raise lo.fail("model", "normalization of a scalar")
    axis = _axis(lo, lo.attr_int("axis", -1), x.type.rank)
    return x, axis, x.shape[:axis], x.shape[axis:]


def _flat_param(lo: Lowering, i: int, tail: tuple[int, ...]) -> Var:
    """A scale or bias broadcast to the normalized shape and flattened to one axis."""
    p = _to(lo.b, lo.var(i), tail)
    return _reshape(lo.b, p, (math.prod(tail),))


def _layernorm(lo: Lowering, n: Node) -> None:
    b = lo.b
    x, _, lead, tail = _norm_input(lo)
    eps = lo.attr_float("epsilon", 1e-5)
    width = math.prod(tail)
    x2 = _reshape(b, x, (math.prod(lead), width))
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
    lo.set(0, _reshape(b, y, x.shape))


def _rmsnorm(lo: Lowering, n: Node) -> None:
    b = lo.b
    x, _, lead, tail = _norm_input(lo)
    eps = lo.attr_float("epsilon", 1e-5)
    x2 = _reshape(b, x, (math.prod(lead), math.prod(tail)))
    scale = _flat_param(lo, 1, tail)
    if x.dtype is DType.F32:
        y = ops.rmsnorm(b, x2, scale, eps)
    else:
        y = b.mul(b.convert(ops.rmsnorm(b, b.convert(x2, DType.F32), None, eps), x.dtype), scale)
    lo.set(0, _reshape(b, y, x.shape))


# -- the table ------------------------------------------------------------------------------


OPS: Mapping[str, Rule] = {
    "Abs": _unary(Builder.abs, np.abs, _NUMERIC),
    "Neg": _unary(Builder.neg, np.negative, _NUMERIC),
    "Reciprocal": _unary(Builder.recip, np.reciprocal),
    "Exp": _unary(Builder.exp, np.exp),
    "Log": _unary(Builder.log, np.log),
    "Tanh": _unary(Builder.tanh, np.tanh),
    "Erf": _unary(Builder.erf, _np_erf),
    "Sqrt": _unary(Builder.sqrt, np.sqrt),
    "Relu": Rule(_relu),
    "Add": _binary(Builder.add, np.add),
    "Sub": _binary(Builder.sub, np.subtract),
    "Mul": _binary(Builder.mul, np.multiply),
    "Div": _binary(Builder.div, _np_div),
    "Pow": Rule(_pow),
    "Greater": _binary(Builder.gt, np.greater),
    "GreaterOrEqual": _binary(Builder.ge, np.greater_equal),
    "Less": _binary(lambda b, x, y: b.gt(y, x), np.less),
    "LessOrEqual": _binary(lambda b, x, y: b.ge(y, x), np.less_equal),
    "Equal": _binary(Builder.eq, np.equal),
    "Max": _variadic(True),
    "Min": _variadic(False),
    "Where": Rule(_where),
    "Cast": Rule(_cast, frozenset({"to", "saturate", "round_mode"})),
    "CastLike": Rule(_cast_like, frozenset({"saturate", "round_mode"})),
    "ReduceSum": _reduce("sum"),
    "ReduceMax": _reduce("max"),
    "ReduceMean": _reduce("mean"),
    "Identity": Rule(_identity),
    "Gather": Rule(_gather, frozenset({"axis"})),
    "Transpose": Rule(_transpose, frozenset({"perm"})),
    "Reshape": Rule(_reshape_op, frozenset({"shape", "allowzero"})),
    "Flatten": Rule(_flatten, frozenset({"axis"})),
    "Unsqueeze": Rule(_unsqueeze, frozenset({"axes"})),
    "Squeeze": Rule(_squeeze, frozenset({"axes"})),
    "Expand": Rule(_expand),
    "Slice": Rule(_slice, frozenset({"starts", "ends", "axes"})),
    "Concat": Rule(_concat, frozenset({"axis"})),
    "Range": Rule(_range),
    "Constant": Rule(
        _constant,
        frozenset(
            {
                "value",
                "value_float",
                "value_floats",
                "value_int",
                "value_ints",
                "value_string",
                "value_strings",
                "sparse_value",
            }
        ),
    ),
    "ConstantOfShape": Rule(_constant_of_shape, frozenset({"value"})),
    "Shape": Rule(_shape, frozenset({"start", "end"})),
    "Size": Rule(_size),
    "MatMul": Rule(_matmul),
    "Gemm": Rule(_gemm, frozenset({"alpha", "beta", "transA", "transB"})),
    "Softmax": Rule(_softmax, frozenset({"axis"})),
    "LayerNormalization": Rule(_layernorm, frozenset({"axis", "epsilon", "stash_type"})),
    "RMSNormalization": Rule(_rmsnorm, frozenset({"axis", "epsilon", "stash_type"})),
}
