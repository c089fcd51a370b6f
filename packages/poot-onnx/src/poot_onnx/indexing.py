"""ONNX lowering rules for data movement by index (``GatherElements``, ``GatherND``, ``Pad``,
``Tile``, ``DepthToSpace``, ``Resize`` in nearest mode, ...), scatters, arg-reductions,
``ReduceMin`` and ``Dropout``.

A movement op whose every input but the data is known at import is *traced*: onnx's reference
evaluator runs the node on the element numbers of the data (``0 .. N-1`` in its shape), which
says, for each output element, the input element it copies; the node becomes one ``gather`` of
the flattened data by those numbers. So the semantics (negative indices, pad modes, the
coordinate transforms of ``Resize``) are onnx's own. ``Pad`` keeps its structure instead, with
no index weight the size of the output: in constant mode, the most common by far (a
convolution's explicit padding, TF-style "SAME" exports), a slice where a width is negative,
then per padded axis one ``concat`` of the fill broadcast before and after; +0 padding is
remembered (``Lowering.zero_padded``) so a ``Conv`` that reads it pads by itself. In edge,
reflect and wrap modes (image models' borders), per padded axis one ``concat`` of what the
mode copies from the axis (a broadcast end, a slice, a gather along the axis by the mirrored
index); a width those modes copy more than once (a reflection past the far end) is traced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_onnx import resize
from poot_onnx.context import (
    NUMERIC,
    Array,
    Const,
    Lowering,
    LoweringRule,
    Node,
    check_dtype,
    norm_axis,
)
from poot_onnx.folding import evaluate_node

__all__ = ["RULES", "arg_best"]


def _trace(lo: Lowering, n: Node, numbers_dtype: type = np.int64) -> Array:
    """What element of input 0 each output element copies, by the reference evaluator: the node
    runs on the element numbers plus one, with a constant ``Pad`` filling 0, so -1 marks an
    element that copies none."""
    shape = lo.shape(0)
    size = math.prod(shape)
    if size >= 2**31:
        raise lo.fail("value", f"the data has {size} elements; poot indexes fewer than 2^31")
    numbers: Array = np.arange(1, size + 1, dtype=numbers_dtype).reshape(shape)
    feed: dict[str, Array] = {n.inputs[0]: numbers}
    for i, name in enumerate(n.inputs[1:], start=1):
        if name and name not in feed:
            feed[name] = lo.const(i, "a parameter of the movement")
    if n.op_type == "Pad" and len(n.inputs) > 2 and n.inputs[2]:
        feed[n.inputs[2]] = np.asarray(0, numbers_dtype)  # unread outside constant mode
    (out,) = evaluate_node(lo, n, feed)[:1]
    return np.asarray(out).astype(np.int64) - 1


def _moved(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    numbers = _trace(lo, n)
    _gather_numbers(lo, n, x, numbers)


def _gather_numbers(lo: Lowering, n: Node, x: Var, numbers: Array) -> None:
    b = lo.b
    flat = b.reshape(x, (math.prod(x.shape),)) if x.type.rank != 1 else x
    pad = numbers < 0
    idx = lo.weight(f"{n.outputs[0]}.elements", np.where(pad, 0, numbers).astype(np.int32))
    y = b.gather(flat, idx, 0)
    if np.any(pad):
        where = lo.weight(f"{n.outputs[0]}.padding", pad)
        y = b.select(where, b.literal(0, x.dtype), y)  # CenterCropPad's zeros
    lo.set(0, y)


def _pad(lo: Lowering, n: Node) -> None:
    if lo.opset < 11:
        raise lo.fail("attribute", "Pad before opset 11 (pads as an attribute)")
    mode = str(lo.attr("mode") or "constant")
    if mode == "constant":
        _pad_constant(lo, n)
    elif not _pad_copied(lo, n, mode):  # every output element copies one input element
        _moved(lo, n)


def _pad_widths(lo: Lowering, x: Var) -> list[tuple[int, int]]:
    """A ``Pad``'s (before, after) widths on every axis of ``x`` (input 1, over the axes of
    input 3 where given)."""
    rank = x.type.rank
    pads = lo.ints(1, "pads")
    axes = tuple(range(rank))
    if lo.has(3):
        axes = tuple(norm_axis(lo, a, rank, "axes entry") for a in lo.ints(3, "axes"))
    if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
        raise lo.fail("value", f"{len(pads)} pads for axes {list(axes)} of a rank-{rank} input")
    widths = [(0, 0)] * rank
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[k + len(axes)])
    return widths


def _copied_width(mode: str, n: int) -> int:
    """The widest pad of an axis of ``n`` elements that ``mode`` copies from the axis once
    (``np.pad``, onnx's reference, reflects or wraps again past it: traced instead); an
    empty axis gives nothing to copy."""
    if n == 0:
        return 0
    return {"edge": 2**31, "reflect": n - 1, "wrap": n}[mode]


def _pad_copied(lo: Lowering, n: Node, mode: str) -> bool:
    """``Pad`` in edge, reflect or wrap mode as one ``concat`` per padded axis (padded in
    order, as ``np.pad`` pads, so a corner copies the padded edge): edge repeats the end
    element (a broadcast of a one-wide slice), wrap copies the other end's block (a slice),
    reflect the elements next to the end in mirror order (a one-wide slice, or a ``gather``
    along the axis by an index as long as the width: Silero's STFT pads 64 of them).
    False, with nothing built, where a width is negative or wider than the axis gives once
    (``_copied_width``): the node is traced then, onnx's own semantics."""
    if mode not in ("edge", "reflect", "wrap"):
        return False
    x = lo.var(0)
    widths = _pad_widths(lo, x)
    for d, (before, after) in zip(x.shape, widths, strict=True):
        if min(before, after) < 0:
            return False
        if max(before, after) > 0 and max(before, after) > _copied_width(mode, d):
            return False
    b = lo.b
    y = x
    for a, (before, after) in enumerate(widths):
        if not (before or after):
            continue
        m = y.shape[a]

        def cut(start: int, stop: int, y: Var = y, a: int = a) -> Var:
            lo_ = [0] * y.type.rank
            hi = list(y.shape)
            lo_[a], hi[a] = start, stop
            return b.slice(y, lo_, hi)

        def side(width: int, end: int, y: Var = y, a: int = a, m: int = m) -> list[Var]:
            """``width`` elements beside the end at ``end`` (0 or m - 1), outermost first
            for the start (reversed by the caller for the end)."""
            if mode == "edge":
                one = cut(end, end + 1)
                return [b.broadcast_in_dim(one, _widened(y.shape, a, width), range(y.type.rank))]
            if mode == "wrap":
                return [cut(m - width, m) if end == 0 else cut(0, width)]
            # reflect: the elements next to the end, outermost first on either side
            step = 1 if end == 0 else -1
            if width == 1:
                return [cut(end + step, end + step + 1)]
            picked = np.arange(end + step * width, end, -step, dtype=np.int32)
            if end:
                picked = picked[::-1]
            where = lo.weight(f"{n.outputs[0]}.reflect{a}.{'after' if end else 'before'}", picked)
            return [b.gather(y, where, a)]

        parts = side(before, 0) if before else []
        parts.append(y)
        if after:
            parts += side(after, m - 1)
        y = b.concat(parts, a)
    lo.set(0, y)
    return True


def _pad_constant(lo: Lowering, n: Node) -> None:
    """``Pad`` in constant mode: a slice for the negative widths, then one ``concat`` per
    padded axis with the fill (input 2, else 0) broadcast on either side."""
    b = lo.b
    x = lo.var(0)
    rank = x.type.rank
    widths = _pad_widths(lo, x)
    start = [max(-before, 0) for before, _ in widths]
    limit = [d - max(-after, 0) for d, (_, after) in zip(x.shape, widths, strict=True)]
    if any(hi < lo_ for lo_, hi in zip(start, limit, strict=True)):
        pads = [w for side in zip(*widths, strict=True) for w in side]
        raise lo.fail("value", f"pads {pads} crop more than the input's {list(x.shape)}")
    src = x if start == [0] * rank and limit == list(x.shape) else b.slice(x, start, limit)
    grow = tuple((max(before, 0), max(after, 0)) for before, after in widths)
    if not any(w for pair in grow for w in pair):  # a crop alone
        lo.set(0, src)
        return
    fill, zero = _fill(lo, n, src.dtype)
    y = src
    for a, (before, after) in enumerate(grow):
        parts = [y]
        if before:
            parts.insert(0, b.broadcast_in_dim(fill, _widened(y.shape, a, before), ()))
        if after:
            parts.append(b.broadcast_in_dim(fill, _widened(y.shape, a, after), ()))
        if len(parts) > 1:
            y = b.concat(parts, a)
    if zero:
        lo.zero_padded[y.id] = (src, grow)
    lo.set(0, y)


def _widened(shape: tuple[int, ...], axis: int, width: int) -> tuple[int, ...]:
    """``shape`` with ``axis`` ``width`` long: a block of fill beside the value."""
    return (*shape[:axis], width, *shape[axis + 1 :])


def _fill(lo: Lowering, n: Node, dtype: DType) -> tuple[Var, bool]:
    """A constant ``Pad``'s fill as a scalar value, and whether it is +0 (a float's +0, an
    integer's or a boolean's 0): padding a convolution adds."""
    if lo.has(2):
        v = lo.value(2)
        if isinstance(v, Var):
            return lo.b.reshape(v, ()), False
        value = v.value.reshape(())
        scalar = lo.materialize(Const(v.name, value))
        negative = value.dtype.kind == "f" and bool(np.signbit(value))
        return scalar, bool(value == 0) and not negative
    zero = lo.materialize(Const(f"{n.outputs[0]}.fill", np.zeros((), dtype.numpy)))
    return zero, True


def _resize(lo: Lowering, n: Node) -> None:
    mode = lo.attr("mode")
    if mode in ("linear", "cubic") and n.op_type == "Resize":
        resize.interpolate(lo, n)
        return
    if mode not in (None, "nearest"):
        raise lo.fail("attribute", f"mode {mode!r}: poot lowers Upsample in nearest mode only")
    x = lo.var(0)
    numbers = _trace(lo, n, np.float64)  # Resize takes float data: element numbers are exact
    _gather_numbers(lo, n, x, numbers)


def _gather_elements(lo: Lowering, n: Node) -> None:
    idx = lo.value(1)
    if isinstance(idx, Const):
        _moved(lo, n)
        return
    # Runtime indices: flat = base + index * stride along the axis, base the other coordinates.
    b = lo.b
    x = lo.var(0)
    shape = x.shape
    axis = norm_axis(lo, lo.attr_int("axis", 0), len(shape))
    check_dtype(lo, idx, (DType.I32,), "the indices")
    coords = np.indices(idx.shape).astype(np.int64)
    coords[axis] = 0
    strides = np.cumprod((1, *shape[::-1]))[-2::-1]
    base = sum(c * s for c, s in zip(coords, strides, strict=True))
    size = shape[axis]
    norm = b.select(b.gt(0, idx), b.add(idx, size), idx)
    flat_idx = b.add(
        b.mul(norm, int(strides[axis])),
        lo.weight(f"{n.outputs[0]}.base", np.asarray(base, np.int32)),
    )
    flat = b.reshape(x, (math.prod(shape),))
    lo.set(0, b.gather(flat, flat_idx, 0))


def _scatter(lo: Lowering, n: Node) -> None:
    """ScatterElements and ScatterND with indices known at import: which update element each
    output element receives (by tracing the op on element numbers), then a ``select``; with a
    reduction, one ``select`` per layer of updates that hit one element."""
    b = lo.b
    data, upd = lo.var(0), lo.var(2)
    reduction = lo.attr("reduction") or "none"
    idx = lo.const(1, "indices")
    size, k = math.prod(data.shape), math.prod(upd.shape)
    if size >= 2**31 or k >= 2**31:
        raise lo.fail("value", "too many elements for i32 indices")
    targets = _targets(lo, n, idx, data.shape)
    if len(targets) != k:
        raise lo.fail("model", f"{len(targets)} targets for {k} updates")
    layers: list[list[int]] = []
    count = np.zeros(size, np.int64)
    for u, t in enumerate(targets):
        j = int(count[t])
        if j == len(layers):
            layers.append([-1] * size)
        layers[j][t] = u
        count[t] += 1
    flat = b.reshape(data, (size,))
    ups = b.reshape(upd, (k,))
    if reduction == "none":
        src = np.full(size, -1, np.int64)
        for u, t in enumerate(targets):
            src[t] = u  # the last update wins, as the reference does
        layers = [src.tolist()]
    acc = flat
    for j, layer in enumerate(layers):
        arr = np.asarray(layer, np.int64)
        hit = lo.weight(f"{n.outputs[0]}.hit{j}", arr >= 0)
        val = b.gather(
            ups, lo.weight(f"{n.outputs[0]}.src{j}", np.maximum(arr, 0).astype(np.int32)), 0
        )
        match reduction:
            case "none":
                new = val
            case "add":
                new = b.add(acc, val)
            case "mul":
                new = b.mul(acc, val)
            case "max":
                new = b.max(acc, val)
            case "min":
                new = b.min(acc, val)
            case _:
                raise lo.fail("attribute", f"reduction {reduction!r}")
        acc = b.select(hit, new, acc)
    lo.set(0, b.reshape(acc, data.shape))


def _targets(lo: Lowering, n: Node, idx: Array, data_shape: tuple[int, ...]) -> list[int]:
    """The flat target of each update, in update order (duplicates kept)."""
    if n.op_type == "ScatterElements":
        axis = norm_axis(lo, lo.attr_int("axis", 0), len(data_shape))
        coords: list[Array] = list(np.indices(idx.shape))
        dim = data_shape[axis]
        if np.any((idx < -dim) | (idx >= dim)):
            raise lo.fail("value", f"an index lies outside an axis of {dim}")
        coords[axis] = np.where(idx < 0, idx + dim, idx)
        flat = np.ravel_multi_index(tuple(coords), data_shape)
    else:  # ScatterND: each index tuple addresses a slice of data
        q = idx.shape[-1]
        tuples = idx.reshape(-1, q)
        dims = np.asarray(data_shape[:q])
        if np.any((tuples < -dims) | (tuples >= dims)):
            raise lo.fail("value", "an index lies outside the data")
        tuples = np.where(tuples < 0, tuples + dims, tuples)
        inner = math.prod(data_shape[q:])
        base = np.asarray(np.ravel_multi_index(tuple(tuples.T), data_shape[:q])) * inner
        flat = (base[:, None] + np.arange(inner)[None, :]).reshape(-1)
    return [int(t) for t in np.asarray(flat).reshape(-1)]


def arg_best(lo: Lowering, x: Var, axis: int, kind: str, last: bool) -> Var:
    """The I32 index of the first (or ``last``) largest (``kind`` "max") or smallest value of
    ``x`` along ``axis``, which leaves the shape."""
    b = lo.b
    best = b.reduce_max(x, axis) if kind == "max" else _reduce_min(lo, x, (axis,))
    hit = b.eq(
        x, b.broadcast_in_dim(best, x.shape, tuple(d for d in range(x.type.rank) if d != axis))
    )
    pos = b.iota(x.shape, DType.I32, axis)
    if last:
        return b.reduce_max(b.select(hit, pos, -1), axis)
    return b.sub(-1, b.reduce_max(b.sub(-1, b.select(hit, pos, x.shape[axis])), axis))


def _arg(kind: str) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        x = lo.var(0)
        check_dtype(lo, x, NUMERIC, "the input")
        axis = norm_axis(lo, lo.attr_int("axis", 0), x.type.rank)
        keep = lo.attr_int("keepdims", 1) != 0
        r = arg_best(lo, x, axis, kind, lo.attr_int("select_last_index", 0) != 0)
        shape = tuple(1 if d == axis else s for d, s in enumerate(x.shape))
        y = lo.b.reshape(r, shape) if keep else r
        lo.wide.add(y.id)  # ONNX's result is int64; every value fits
        lo.set(0, y)

    return LoweringRule(handler, frozenset({"axis", "keepdims", "select_last_index"}))


def _reduce_min(lo: Lowering, x: Var, axes: tuple[int, ...]) -> Var:
    b = lo.b
    if x.dtype is DType.I32:
        return b.sub(-1, b.reduce_max(b.sub(-1, x), axes))  # -1 - x is exact for every i32
    return b.neg(b.reduce_max(b.neg(x), axes))


def _reduce_min_op(lo: Lowering, n: Node) -> None:
    b = lo.b
    x = lo.var(0)
    axes_in = lo.ints(1, "axes") if lo.has(1) else lo.attr_ints("axes")
    keep = lo.attr_int("keepdims", 1) != 0
    if not axes_in:
        if lo.attr_int("noop_with_empty_axes", 0):
            lo.set(0, x)
            return
        axes_in = tuple(range(x.type.rank))
    axes = tuple(sorted({norm_axis(lo, a, x.type.rank, "axes entry") for a in axes_in}))
    if x.dtype is DType.BOOL:
        y = b.convert(_reduce_min(lo, b.convert(x, DType.I32), axes), DType.BOOL)
    else:
        check_dtype(lo, x, NUMERIC, "the input")
        y = _reduce_min(lo, x, axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    lo.set(0, b.reshape(y, kept) if keep else y)


def _dropout(lo: Lowering, n: Node) -> None:
    if lo.has(2):
        training = lo.const(2, "training_mode")
        if bool(training.reshape(-1)[0]):
            raise lo.fail("value", "Dropout in training mode is random")
    x = lo.value(0)
    lo.set(0, x)
    if lo.wants(1):
        lo.set(1, np.ones(x.shape, np.bool_))


_MOVED = (
    "GatherND",
    "DepthToSpace",
    "SpaceToDepth",
    "Tile",
    "ReverseSequence",
    "CenterCropPad",
    "Compress",
)

RULES: Mapping[str, LoweringRule] = {
    **{
        op: LoweringRule(
            _moved,
            frozenset(
                {"batch_dims", "blocksize", "mode", "axis", "batch_axis", "time_axis", "axes"}
            ),
        )
        for op in _MOVED
    },
    "GatherElements": LoweringRule(_gather_elements, frozenset({"axis"})),
    "Pad": LoweringRule(_pad, frozenset({"mode"})),
    "Resize": LoweringRule(
        _resize,
        frozenset(
            {
                "mode",
                "coordinate_transformation_mode",
                "nearest_mode",
                "antialias",
                "axes",
                "keep_aspect_ratio_policy",
                "exclude_outside",
                "cubic_coeff_a",
                "extrapolation_value",
            }
        ),
    ),
    "Upsample": LoweringRule(_resize, frozenset({"mode"})),
    "ScatterElements": LoweringRule(_scatter, frozenset({"axis", "reduction"})),
    "ScatterND": LoweringRule(_scatter, frozenset({"reduction"})),
    "ArgMax": _arg("max"),
    "ArgMin": _arg("min"),
    "ReduceMin": LoweringRule(
        _reduce_min_op, frozenset({"axes", "keepdims", "noop_with_empty_axes"})
    ),
    "Dropout": LoweringRule(_dropout, frozenset({"seed"})),
}
