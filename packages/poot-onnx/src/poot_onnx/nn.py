"""ONNX lowering rules for convolution networks: ``Conv`` (1-D, 2-D, 3-D; groups, pads and
``auto_pad``, strides, dilations), ``MaxPool``, ``AveragePool``, ``LpPool``, the global pools,
``BatchNormalization`` (inference) and ``InstanceNormalization``.

A convolution is one ``conv`` equation (``poot_ir.window``: groups, depthwise, padding,
strides, dilations; a transposed one spreads its input with ``lhs_dilation``), a max pool one
``reduce_window_max`` (its padding is the primitive's -inf, no weight), an average pool a
``reduce_window_sum`` divided by its tap counts (a scalar when every window counts alike, else a
constant computed at import), and a global pool a window over the whole spatial extent.
A BatchNormalization whose statistics are known at import is ``x * a + b``, its per-channel
scale and shift folded there by onnx's reference evaluator (as ONNX Runtime and OpenVINO fold
them); one fed its statistics at run time computes from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import helper
from poot_ir.core import Var
from poot_ir.dtypes import DType
from poot_ir.window import window_extent

from poot_onnx.context import (
    FLOATS,
    Array,
    Const,
    Lowering,
    LoweringRule,
    Node,
    check_dtype,
)
from poot_onnx.folding import evaluate_graph

__all__ = ["RULES"]

_WINDOW = frozenset({"auto_pad", "pads", "strides", "dilations", "kernel_shape"})


@dataclass(frozen=True, slots=True)
class _Geometry:
    """A window's placement along the spatial axes: strides, dilations, the padding before
    (``begin``) and after (``end``, a ceil_mode window's hang included) and the output
    extents; ``pads_end`` is the explicit end padding alone (what count_include_pad counts)."""

    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]
    pads_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def padding(self) -> list[tuple[int, int]]:
        return list(zip(self.begin, self.end, strict=True))


def _window(
    lo: Lowering, spatial: tuple[int, ...], kernel: tuple[int, ...], ceil: bool = False
) -> _Geometry:
    """The window's geometry from the node's ``auto_pad``, ``pads``, ``strides`` and
    ``dilations`` (ONNX's extents; ceil_mode drops a last window that would start in the right
    padding, as ONNX Runtime and PyTorch do)."""
    k = len(spatial)
    strides = lo.attr_ints("strides") or (1,) * k
    dil = lo.attr_ints("dilations") or (1,) * k
    pads = lo.attr_ints("pads") or (0,) * (2 * k)
    auto = lo.attr("auto_pad") or "NOTSET"
    if len(strides) != k or len(dil) != k or len(pads) != 2 * k or len(kernel) != k:
        raise lo.fail("attribute", "strides, dilations, pads and the kernel differ in rank")
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dil) or any(p < 0 for p in pads):
        raise lo.fail("attribute", "strides and dilations must be positive, pads not negative")
    begin, end, pads_end, out = list(pads[:k]), [], list(pads[k:]), []
    for a in range(k):
        span = (kernel[a] - 1) * dil[a] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-spatial[a] // strides[a])
            total = max((o - 1) * strides[a] + span - spatial[a], 0)
            begin[a] = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads_end[a] = total - begin[a]
        elif auto == "VALID":
            begin[a] = pads_end[a] = 0
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
        # the end padding the last window reaches (the ceil hang included), never less than the
        # explicit padding (windows past o are not formed: the extent stays o)
        end.append(max((o - 1) * strides[a] + span - spatial[a] - begin[a], pads_end[a]))
        if window_extent(spatial[a], kernel[a], strides[a], begin[a], end[a], dil[a]) != o:
            raise lo.fail("value", f"axis {a}: the padding found does not give {o} windows")
        out.append(o)
    return _Geometry(strides, dil, tuple(begin), tuple(end), tuple(pads_end), tuple(out))


def _conv(lo: Lowering, n: Node) -> None:
    """One ``conv`` (groups and depthwise included), the bias added broadcast over channels."""
    b = lo.b
    x, w = lo.var(0), lo.var(1)
    check_dtype(lo, x, FLOATS, "the input")
    k = x.type.rank - 2
    if not 1 <= k <= 3 or w.type.rank != x.type.rank:
        raise lo.fail("model", f"Conv of {x.type} by {w.type}")
    groups = lo.attr_int("group", 1)
    c, (m, cg) = x.shape[1], w.shape[:2]
    kernel = tuple(lo.attr_ints("kernel_shape") or w.shape[2:])
    if groups <= 0 or c != cg * groups or m % groups or kernel != w.shape[2:]:
        raise lo.fail("model", f"{c} channels, kernel {w.type}, group {groups} do not agree")
    geo = _window(lo, x.shape[2:], kernel)
    x, padding = _own_padding(lo, x, geo.padding)
    y = b.conv(x, w, geo.strides, padding, None, geo.dilations, groups)
    if lo.has(2):
        y = b.add(y, b.broadcast_in_dim(lo.var(2), y.shape, (1,)))
    lo.set(0, y)


def _own_padding(
    lo: Lowering, x: Var, padding: list[tuple[int, int]]
) -> tuple[Var, list[tuple[int, int]]]:
    """A convolution's input and padding, with a zero ``Pad`` before it taken in: where ``x`` is
    +0 added around a value on the spatial axes alone (``Lowering.zero_padded``; TF-style
    exports pad explicitly), the value itself and its widths added to ``padding``, which pads
    with the same +0. Exact either way; the pad's concats are then unread (``build_live``).
    Not under ``auto_pad`` SAME: its padding follows from the padded input's extent."""
    held = lo.zero_padded.get(x.id)
    if held is None or (lo.attr("auto_pad") or "NOTSET") not in ("NOTSET", "VALID"):
        return x, padding
    src, grow = held
    if any(w for pair in grow[:2] for w in pair):  # batch or channels: not a conv's padding
        return x, padding
    return src, [(b + lo_, e + hi) for (b, e), (lo_, hi) in zip(padding, grow[2:], strict=True)]


def _conv_transpose(lo: Lowering, n: Node) -> None:
    """A transposed convolution as one ``conv``: the input spread by the strides
    (``lhs_dilation``), padded by ``dilation * (kernel - 1) - pads`` (the end also by
    ``output_padding``), the kernel flipped on every spatial axis and regrouped from
    ``[C, M/g, *K]`` to ``[M, C/g, *K]``."""
    b = lo.b
    x, w = lo.var(0), lo.var(1)
    check_dtype(lo, x, FLOATS, "the input")
    k = x.type.rank - 2
    if not 1 <= k <= 3 or w.type.rank != x.type.rank:
        raise lo.fail("model", f"ConvTranspose of {x.type} by {w.type}")
    groups = lo.attr_int("group", 1)
    c = x.shape[1]
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
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dil):
        raise lo.fail("attribute", "strides and dilations must be positive")
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
    flipped = w
    for a in range(k):
        rev = lo.index_weight(f"{n.outputs[0]}.flip{a}", list(range(kernel[a] - 1, -1, -1)))
        flipped = b.gather(flipped, rev, 2 + a)
    # [C, M/g, *K] = [g, C/g, M/g, *K] -> [g, M/g, C/g, *K] = [M, C/g, *K]
    regrouped = b.reshape(flipped, (groups, cg, mg, *kernel))
    regrouped = b.transpose(regrouped, (0, 2, 1, *range(3, 3 + k)))
    regrouped = b.reshape(regrouped, (groups * mg, cg, *kernel))
    lead = [(kernel[a] - 1) * dil[a] for a in range(k)]
    padding = [(lead[a] - pads[a], lead[a] - pads[a + k] + extra[a]) for a in range(k)]
    y = b.conv(x, regrouped, None, padding, strides, dil, groups)
    if lo.has(2):
        y = b.add(y, b.broadcast_in_dim(lo.var(2), y.shape, (1,)))
    lo.set(0, y)


def _pool(kind: str) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        b = lo.b
        x = lo.var(0)
        check_dtype(lo, x, FLOATS, "the input")
        if not 3 <= x.type.rank <= 5:
            raise lo.fail("model", f"pooling of {x.type}")
        if lo.wants(1):
            raise lo.fail("attribute", "MaxPool's Indices output")
        if lo.attr_int("storage_order", 0):
            raise lo.fail("attribute", "storage_order 1")
        kernel = lo.attr_ints("kernel_shape")
        if kernel is None:
            raise lo.fail("model", "has no kernel_shape")
        geo = _window(lo, x.shape[2:], tuple(kernel), lo.attr_int("ceil_mode", 0) != 0)
        window = (1, 1, *kernel)
        strides = (1, 1, *geo.strides)
        padding = [(0, 0), (0, 0), *geo.padding]
        dilation = (1, 1, *geo.dilations)
        if kind == "max":
            lo.set(0, b.reduce_window_max(x, window, strides, padding, dilation))
            return
        total = b.reduce_window_sum(x, window, strides, padding, dilation)
        count = _counts(geo, x.shape[2:], tuple(kernel), lo.attr_int("count_include_pad", 0) != 0)
        if np.all(count == count.flat[0]):
            lo.set(0, b.div(total, float(count.flat[0])))
            return
        counts = lo.weight(f"{n.outputs[0]}.count", count.astype(x.dtype.numpy))
        dims = tuple(range(2, x.type.rank))
        lo.set(0, b.div(total, b.broadcast_in_dim(counts, total.shape, dims)))

    attrs = _WINDOW | {"ceil_mode", "count_include_pad", "storage_order"}
    return LoweringRule(handler, frozenset(attrs))


def _counts(
    geo: _Geometry, spatial: tuple[int, ...], kernel: tuple[int, ...], include_pad: bool
) -> Array:
    """Per output position, the taps an average divides by: those inside the input, or inside
    the input and its explicit padding (``include_pad``); never the taps a ceil_mode window
    hangs past the padding. Computed here by sliding a mask of the counted region."""
    k = len(spatial)
    inside = np.ones(spatial, np.int64)
    if include_pad:
        explicit = [(b, e) for b, e in zip(geo.begin, geo.pads_end, strict=True)]
        inside = np.pad(inside, explicit, constant_values=1)
        hang = [e - p for e, p in zip(geo.end, geo.pads_end, strict=True)]
        mask = np.pad(inside, [(0, h) for h in hang])
    else:
        mask = np.pad(inside, geo.padding)
    spans = [(kernel[a] - 1) * geo.dilations[a] + 1 for a in range(k)]
    win = np.lib.stride_tricks.sliding_window_view(mask, spans)
    taps: tuple[Any, ...] = (Ellipsis, *(slice(None, None, d) for d in geo.dilations))
    starts = tuple(slice(None, o * s, s) for o, s in zip(geo.out, geo.strides, strict=True))
    win = win[taps][starts]
    return np.asarray(win.sum(axis=tuple(range(k, 2 * k))))


def _global(kind: str) -> LoweringRule:
    """A window over the whole of every spatial axis: the size-1 axes ONNX keeps come out of
    the window reduction itself."""

    def handler(lo: Lowering, n: Node) -> None:
        b = lo.b
        x = lo.var(0)
        check_dtype(lo, x, FLOATS, "the input")
        if x.type.rank < 3 or 0 in x.shape[2:]:
            raise lo.fail("model", f"global pooling of {x.type}")
        window = (1, 1, *x.shape[2:])
        if kind == "max":
            lo.set(0, b.reduce_window_max(x, window))
        else:
            total = b.reduce_window_sum(x, window)
            lo.set(0, b.div(total, float(math.prod(x.shape[2:]))))

    return LoweringRule(handler)


def _lp_pool(whole: bool) -> LoweringRule:
    """``LpPool`` and ``GlobalLpPool``: ``(sum over the window of |x|^p)^(1/p)``, a
    ``reduce_window_sum`` of ``|x|`` (p = 1) or of ``x * x`` then ``sqrt`` (p = 2, the default);
    padding adds zeros, as ONNX Runtime's ``LpPool`` pads. Another ``p`` is refused (typed):
    its root has no primitive that keeps the result exact at a zero sum."""

    def handler(lo: Lowering, n: Node) -> None:
        b = lo.b
        x = lo.var(0)
        check_dtype(lo, x, FLOATS, "the input")
        if not 3 <= x.type.rank <= 5 or (whole and 0 in x.shape[2:]):
            raise lo.fail("model", f"Lp pooling of {x.type}")
        p = lo.attr_int("p", 2)
        if p not in (1, 2):
            raise lo.fail("attribute", f"p={p}: poot lowers LpPool for p = 1 and p = 2 only")
        powered = b.abs(x) if p == 1 else b.mul(x, x)
        if whole:
            total = b.reduce_window_sum(powered, (1, 1, *x.shape[2:]))
        else:
            kernel = lo.attr_ints("kernel_shape")
            if kernel is None:
                raise lo.fail("model", "has no kernel_shape")
            geo = _window(lo, x.shape[2:], tuple(kernel), lo.attr_int("ceil_mode", 0) != 0)
            total = b.reduce_window_sum(
                powered,
                (1, 1, *kernel),
                (1, 1, *geo.strides),
                [(0, 0), (0, 0), *geo.padding],
                (1, 1, *geo.dilations),
            )
        lo.set(0, total if p == 1 else b.sqrt(total))

    attrs = frozenset({"p"}) if whole else _WINDOW | {"p", "ceil_mode"}
    return LoweringRule(handler, attrs)


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
    "LpPool": _lp_pool(whole=False),
    "GlobalLpPool": _lp_pool(whole=True),
    "BatchNormalization": LoweringRule(
        _batchnorm, frozenset({"epsilon", "momentum", "training_mode", "spatial"})
    ),
    "InstanceNormalization": LoweringRule(_instancenorm, frozenset({"epsilon"})),
}
