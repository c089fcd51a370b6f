"""ONNX lowering rules for convolution networks: ``Conv`` (1-D, 2-D, 3-D; groups, pads and
``auto_pad``, strides, dilations), ``MaxPool``, ``AveragePool``, the global pools,
``BatchNormalization`` (inference) and ``InstanceNormalization``.

A convolution is an im2col: one ``gather`` of the flattened spatial axes by the window taps
(computed at import; a tap in the padding reads an appended column of zeros, or of -inf for a
max pool), then one ``matmul`` per group against the reshaped kernel. A pool reduces the taps.
A BatchNormalization whose statistics are known at import is ``x * a + b``, its per-channel
scale and shift folded there by onnx's reference evaluator (as ONNX Runtime and OpenVINO fold
them); one fed its statistics at run time computes from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from onnx import helper
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_onnx.context import (
    FLOATS,
    Array,
    Const,
    Lowering,
    LoweringRule,
    Node,
    check_dtype,
    reshape,
)
from poot_onnx.folding import evaluate_graph

__all__ = ["RULES"]

_WINDOW = frozenset({"auto_pad", "pads", "strides", "dilations", "kernel_shape"})


def _window(
    lo: Lowering, spatial: tuple[int, ...], kernel: tuple[int, ...], ceil: bool = False
) -> tuple[tuple[int, ...], Array]:
    """The output extents and, for each output position (flattened) and tap (flattened), the
    flat input position it reads, or -1 for padding."""
    k = len(spatial)
    strides = lo.attr_ints("strides") or (1,) * k
    dil = lo.attr_ints("dilations") or (1,) * k
    pads = lo.attr_ints("pads") or (0,) * (2 * k)
    auto = lo.attr("auto_pad") or "NOTSET"
    if len(strides) != k or len(dil) != k or len(pads) != 2 * k or len(kernel) != k:
        raise lo.fail("attribute", "strides, dilations, pads and the kernel differ in rank")
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dil) or any(p < 0 for p in pads):
        raise lo.fail("attribute", "strides and dilations must be positive, pads not negative")
    begin, out = list(pads[:k]), []
    for a in range(k):
        span = (kernel[a] - 1) * dil[a] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-spatial[a] // strides[a])
            total = max((o - 1) * strides[a] + span - spatial[a], 0)
            begin[a] = total // 2 if auto == "SAME_UPPER" else total - total // 2
        elif auto == "VALID":
            begin[a] = 0
            o = (spatial[a] - span) // strides[a] + 1
        elif auto == "NOTSET":
            room = spatial[a] + pads[a] + pads[a + k] - span
            o = (-(-room // strides[a]) if ceil else room // strides[a]) + 1
            if ceil and (o - 1) * strides[a] >= spatial[a] + pads[a]:
                o -= 1  # a window must start inside the input or its left padding
        else:
            raise lo.fail("attribute", f"auto_pad {auto!r}")
        if o <= 0:
            raise lo.fail("value", f"the window does not fit axis {a} of {spatial[a]}")
        out.append(o)
    return tuple(out), _tap_map(spatial, kernel, strides, dil, begin, out)


def _tap_map(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dil: Sequence[int],
    begin: Sequence[int],
    out: Sequence[int],
) -> Array:
    """For each output position and kernel tap (both flattened), the flat input position the
    tap reads, or -1 outside the input."""
    k = len(spatial)
    coords = []
    for a in range(k):
        c = (
            np.arange(out[a])[:, None] * strides[a]
            - begin[a]
            + np.arange(kernel[a])[None, :] * dil[a]
        )
        coords.append(c)
    grids_o = np.indices(out).reshape(k, -1)  # per output position, its coordinates
    grids_t = np.indices(kernel).reshape(k, -1)
    flat = np.zeros((grids_o.shape[1], grids_t.shape[1]), np.int64)
    inside = np.ones_like(flat, dtype=bool)
    for a in range(k):
        c = coords[a][grids_o[a][:, None], grids_t[a][None, :]]
        inside &= (c >= 0) & (c < spatial[a])
        flat = flat * spatial[a] + np.clip(c, 0, spatial[a] - 1)
    return np.where(inside, flat, -1)


def _taps(lo: Lowering, x: Var, taps: Array, fill: float) -> Var:
    """[N, C, O, T]: the input at every tap of every window (``fill`` in the padding)."""
    b = lo.b
    n, c = x.shape[:2]
    size = math.prod(x.shape[2:])
    flat = b.reshape(x, (n, c, size))
    if np.any(taps < 0):
        one = lo.weight(f"{lo.node.outputs[0]}.fill", np.full((1,), fill, x.dtype.numpy))
        pad = b.broadcast_in_dim(one, (n, c, 1), (2,))
        flat = b.concat([flat, pad], 2)
    idx = lo.weight(f"{lo.node.outputs[0]}.taps", np.where(taps < 0, size, taps).astype(np.int32))
    return b.gather(flat, idx, 2)


def _conv(lo: Lowering, n: Node) -> None:
    b = lo.b
    x, w = lo.var(0), lo.var(1)
    check_dtype(lo, x, FLOATS, "the input")
    if x.type.rank < 3 or w.type.rank != x.type.rank:
        raise lo.fail("model", f"Conv of {x.type} by {w.type}")
    groups = lo.attr_int("group", 1)
    nb, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = tuple(lo.attr_ints("kernel_shape") or w.shape[2:])
    if groups <= 0 or c != cg * groups or m % groups or kernel != w.shape[2:]:
        raise lo.fail("model", f"{c} channels, kernel {w.type}, group {groups} do not agree")
    out, taps = _window(lo, x.shape[2:], kernel)
    o, t = taps.shape
    cols = _taps(lo, x, taps, 0.0)  # [N, C, O, T]
    cols = b.transpose(cols, (0, 2, 1, 3))  # [N, O, C, T]
    mg = m // groups
    parts = []
    for g in range(groups):
        part = cols if groups == 1 else b.slice(cols, (0, 0, g * cg, 0), (nb, o, (g + 1) * cg, t))
        a2 = b.reshape(part, (nb * o, cg * t))
        wg = (
            w
            if groups == 1
            else b.slice(w, (g * mg,) + (0,) * (w.type.rank - 1), ((g + 1) * mg, *w.shape[1:]))
        )
        w2 = b.transpose(b.reshape(wg, (mg, cg * t)), (1, 0))
        parts.append(b.matmul(a2, w2))  # [N*O, M/G]
    y = parts[0] if groups == 1 else b.concat(parts, 1)
    if lo.has(2):
        y = b.add(y, b.broadcast_in_dim(lo.var(2), (nb * o, m), (1,)))
    y = b.transpose(b.reshape(y, (nb, o, m)), (0, 2, 1))
    lo.set(0, b.reshape(y, (nb, m, *out)))


def _conv_transpose(lo: Lowering, n: Node) -> None:
    """A transposed convolution as a stride-1 convolution with the kernel flipped, over the
    input spread by the strides and padded by ``dilation * (kernel - 1) - pads``: the spread
    and the padding are folded into the taps, so it is one gather and the matmuls."""
    b = lo.b
    x, w = lo.var(0), lo.var(1)
    check_dtype(lo, x, FLOATS, "the input")
    k = x.type.rank - 2
    if k < 1 or w.type.rank != x.type.rank:
        raise lo.fail("model", f"ConvTranspose of {x.type} by {w.type}")
    groups = lo.attr_int("group", 1)
    nb, c = x.shape[:2]
    cg, mg = w.shape[:2]
    spatial, kernel = x.shape[2:], tuple(lo.attr_ints("kernel_shape") or w.shape[2:])
    if groups <= 0 or c != cg or c % groups or kernel != w.shape[2:]:
        raise lo.fail("model", f"{c} channels, kernel {w.type}, group {groups} do not agree")
    cg //= groups
    strides = lo.attr_ints("strides") or (1,) * k
    dil = lo.attr_ints("dilations") or (1,) * k
    extra = lo.attr_ints("output_padding") or (0,) * k
    pads = list(lo.attr_ints("pads") or (0,) * (2 * k))
    auto = lo.attr("auto_pad") or "NOTSET"
    shape_attr = lo.attr_ints("output_shape")
    if len(strides) != k or len(dil) != k or len(extra) != k or len(pads) != 2 * k:
        raise lo.fail("attribute", "strides, dilations, output_padding and pads differ in rank")
    full = [
        strides[a] * (spatial[a] - 1) + extra[a] + (kernel[a] - 1) * dil[a] + 1 for a in range(k)
    ]
    if shape_attr is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = (
            list(shape_attr[-k:])
            if shape_attr is not None
            else [spatial[a] * strides[a] for a in range(k)]
        )
        for a in range(k):
            total = full[a] - want[a]
            half = total // 2
            upper = auto == "SAME_UPPER"
            pads[a], pads[a + k] = (half, total - half) if upper else (total - half, half)
    elif auto == "VALID":
        pads = [0] * (2 * k)
    elif auto != "NOTSET":
        raise lo.fail("attribute", f"auto_pad {auto!r}")
    out = [full[a] - pads[a] - pads[a + k] for a in range(k)]
    if any(o <= 0 for o in out):
        raise lo.fail("value", f"the output would be {out}")
    # virtual input: position v reads x at (v - lead) / stride when that is whole and inside
    lead = [(kernel[a] - 1) * dil[a] - pads[a] for a in range(k)]
    virtual = [out[a] + (kernel[a] - 1) * dil[a] for a in range(k)]
    grid = np.indices(virtual).reshape(k, -1)
    src = np.zeros(grid.shape[1], np.int64)
    ok = np.ones(grid.shape[1], bool)
    for a in range(k):
        u = grid[a] - lead[a]
        i = np.floor_divide(u, strides[a])
        ok &= (u >= 0) & (u % strides[a] == 0) & (i < spatial[a])
        src = src * spatial[a] + np.clip(i, 0, spatial[a] - 1)
    spread = np.where(ok, src, -1)
    vtaps = _tap_map(virtual, kernel, (1,) * k, dil, (0,) * k, out)
    taps = np.where(vtaps < 0, -1, spread[np.maximum(vtaps, 0)])
    o, t = taps.shape
    cols = b.transpose(_taps(lo, x, taps, 0.0), (0, 2, 1, 3))  # [N, O, C, T]
    # the kernel flipped on every spatial axis, as [G, Mg, Cg * T]
    flipped = w
    for a in range(k):
        rev = lo.index_weight(f"{n.outputs[0]}.flip{a}", list(range(kernel[a] - 1, -1, -1)))
        flipped = b.gather(flipped, rev, 2 + a)
    wg = b.transpose(b.reshape(flipped, (groups, cg, mg, t)), (0, 2, 1, 3))
    parts = []
    for g in range(groups):
        part = cols if groups == 1 else b.slice(cols, (0, 0, g * cg, 0), (nb, o, (g + 1) * cg, t))
        kern = b.reshape(b.slice(wg, (g, 0, 0, 0), (g + 1, mg, cg, t)), (mg, cg * t))
        parts.append(b.matmul(b.reshape(part, (nb * o, cg * t)), b.transpose(kern, (1, 0))))
    m = mg * groups
    y = parts[0] if groups == 1 else b.concat(parts, 1)
    if lo.has(2):
        y = b.add(y, b.broadcast_in_dim(lo.var(2), (nb * o, m), (1,)))
    y = b.transpose(b.reshape(y, (nb, o, m)), (0, 2, 1))
    lo.set(0, b.reshape(y, (nb, m, *out)))


def _pool(kind: str) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        b = lo.b
        x = lo.var(0)
        check_dtype(lo, x, FLOATS, "the input")
        if x.type.rank < 3:
            raise lo.fail("model", f"pooling of {x.type}")
        if lo.wants(1):
            raise lo.fail("attribute", "MaxPool's Indices output")
        if lo.attr_int("storage_order", 0):
            raise lo.fail("attribute", "storage_order 1")
        kernel = lo.attr_ints("kernel_shape")
        if kernel is None:
            raise lo.fail("model", "has no kernel_shape")
        ceil = lo.attr_int("ceil_mode", 0) != 0
        out, taps = _window(lo, x.shape[2:], tuple(kernel), ceil)
        nb, c = x.shape[:2]
        if kind == "max":
            y = b.reduce_max(_taps(lo, x, taps, float("-inf")), 3)
        else:
            total = b.reduce_sum(_taps(lo, x, taps, 0.0), 3)
            if lo.attr_int("count_include_pad", 0):
                # Padding counts, but not the taps a ceil_mode window hangs past it.
                count = _included(lo, x.shape[2:], tuple(kernel), taps.shape[0], out)
            else:
                count = (taps >= 0).sum(axis=1)
            counts = lo.weight(f"{n.outputs[0]}.count", count.astype(x.dtype.numpy))
            y = b.div(total, b.broadcast_in_dim(counts, (nb, c, taps.shape[0]), (2,)))
        lo.set(0, b.reshape(y, (nb, c, *out)))

    attrs = _WINDOW | {"ceil_mode", "count_include_pad", "storage_order"}
    return LoweringRule(handler, frozenset(attrs))


def _included(
    lo: Lowering, spatial: tuple[int, ...], kernel: tuple[int, ...], o: int, out: Sequence[int]
) -> Array:
    """Per window, its taps inside the input or its explicit padding."""
    k = len(spatial)
    strides = lo.attr_ints("strides") or (1,) * k
    dil = lo.attr_ints("dilations") or (1,) * k
    pads = lo.attr_ints("pads") or (0,) * (2 * k)
    counts = np.ones(o, np.int64)
    grid = np.indices(out).reshape(k, -1)
    for a in range(k):
        start = grid[a] * strides[a] - pads[a]
        taps = start[:, None] + np.arange(kernel[a])[None, :] * dil[a]
        ok = (taps >= -pads[a]) & (taps < spatial[a] + pads[a + k])
        counts *= ok.sum(axis=1)
    return counts


def _global(kind: str) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        b = lo.b
        x = lo.var(0)
        check_dtype(lo, x, FLOATS, "the input")
        axes = tuple(range(2, x.type.rank))
        if kind == "max":
            y = b.reduce_max(x, axes)
        else:
            y = b.div(b.reduce_sum(x, axes), float(math.prod(x.shape[2:])))
        lo.set(0, reshape(b, y, (*x.shape[:2], *(1,) * len(axes))))

    return LoweringRule(handler)


def _channel(lo: Lowering, i: int, x: Var) -> Var:
    """Input ``i``, one value per channel, broadcast over ``x`` (axis 1)."""
    return lo.b.broadcast_in_dim(lo.var(i), x.shape, (1,))


#: The graph that folds a BatchNormalization's statistics into one scale and shift per channel,
#: as ONNX Runtime's CPU kernel computes them (onnxruntime ``core/providers/cpu/nn/
#: batch_norm.h``: ``inv_std = (var + epsilon).sqrt().inverse(); new_scale = inv_std * scale;
#: new_bias = bias - mean * new_scale``, then ``Y = X * new_scale + new_bias``); OpenVINO's
#: ``BatchNormDecomposition`` makes the same two constants.
_BN_FOLD = (
    helper.make_node("Add", ["var", "eps"], ["shifted"]),
    helper.make_node("Sqrt", ["shifted"], ["std"]),
    helper.make_node("Reciprocal", ["std"], ["inv_std"]),
    helper.make_node("Mul", ["inv_std", "scale"], ["a"]),
    helper.make_node("Mul", ["mean", "a"], ["mean_a"]),
    helper.make_node("Sub", ["bias", "mean_a"], ["b"]),
)
#: The opset ``_BN_FOLD`` is written in (its own, not the model's: a model of opset 6 would give
#: ``Add`` its old broadcasting rules).
_BN_FOLD_OPSET = 18
#: The types folded: those numpy computes in natively (a BF16 model keeps the unfused path).
_FOLDED = (DType.F32, DType.F16)


def _folded_batchnorm(lo: Lowering, x: Var, eps: float) -> tuple[Array, Array] | None:
    """The per-channel scale ``a`` and shift ``b`` of a BatchNormalization whose four
    statistics are known at import (initializers or folded constants) and share ``x``'s dtype,
    computed by the reference evaluator (``_BN_FOLD``); None when they are not (then the rule
    keeps the statistics as values, as a graph that feeds them at run time needs).

    Why fold: the statistics are not the values the model computes with. A trained variance
    can be 1e7 (PaddleOCR's detector has one), beyond FP16's 65504, so an FP16 device could not
    even hold the weight, while the scale it stands for, 1/sqrt(var + eps), is ordinary."""
    vals = [lo.value(i) for i in (1, 2, 3, 4)]
    if x.dtype not in _FOLDED or not all(isinstance(v, Const) and v.dtype is x.dtype for v in vals):
        return None
    scale, bias, mean, var = (v.value for v in vals if isinstance(v, Const))
    inputs = {
        "scale": scale,
        "bias": bias,
        "mean": mean,
        "var": var,
        "eps": np.asarray(eps, dtype=var.dtype),
    }
    a, shift = evaluate_graph(lo, lo.node, _BN_FOLD, _BN_FOLD_OPSET, inputs, ("a", "b"))
    return a, shift


def _batchnorm(lo: Lowering, n: Node) -> None:
    if lo.attr_int("training_mode", 0) or any(lo.wants(k) for k in (1, 2)):
        raise lo.fail("attribute", "BatchNormalization in training mode")
    b = lo.b
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the input")
    eps = lo.attr_float("epsilon", 1e-5)
    folded = _folded_batchnorm(lo, x, eps)
    if folded is not None:
        base = n.outputs[0] if n.outputs and n.outputs[0] else n.label
        a, shift = (
            b.broadcast_in_dim(lo.weight(f"{base}.{what}", arr), x.shape, (1,))
            for what, arr in zip(("scale", "shift"), folded, strict=True)
        )
        lo.set(0, b.add(b.mul(x, a), shift))
        return
    scale, bias, mean, var = (_channel(lo, i, x) for i in (1, 2, 3, 4))
    inv = b.recip(b.sqrt(b.add(var, eps)))
    lo.set(0, b.add(b.mul(b.mul(b.sub(x, mean), inv), scale), bias))


def _instancenorm(lo: Lowering, n: Node) -> None:
    b = lo.b
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the input")
    eps = lo.attr_float("epsilon", 1e-5)
    nb, c = x.shape[:2]
    width = math.prod(x.shape[2:])
    x2 = b.reshape(x, (nb * c, width))
    mean = b.div(b.reduce_sum(x2, (1,)), float(width))
    xc = b.sub(x2, b.broadcast_in_dim(mean, x2.shape, (0,)))
    var = b.div(b.reduce_sum(b.mul(xc, xc), (1,)), float(width))
    normed = b.div(xc, b.broadcast_in_dim(b.sqrt(b.add(var, eps)), x2.shape, (0,)))
    y = b.reshape(normed, x.shape)
    lo.set(0, b.add(b.mul(y, _channel(lo, 1, x)), _channel(lo, 2, x)))


RULES: Mapping[str, LoweringRule] = {
    "Conv": LoweringRule(_conv, _WINDOW | {"group"}),
    "ConvTranspose": LoweringRule(
        _conv_transpose, _WINDOW | {"group", "output_padding", "output_shape"}
    ),
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global("avg"),
    "GlobalMaxPool": _global("max"),
    "BatchNormalization": LoweringRule(
        _batchnorm, frozenset({"epsilon", "momentum", "training_mode", "spatial"})
    ),
    "InstanceNormalization": LoweringRule(_instancenorm, frozenset({"epsilon"})),
}
