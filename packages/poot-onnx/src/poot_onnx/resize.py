"""``Resize`` in linear and cubic modes, as one matrix product per resized axis.

With its scales (or sizes) and roi known at import, a linear or cubic ``Resize`` is linear in
its data and separable: onnx's reference evaluator interpolates one axis at a time
(``onnx/reference/ops/op_resize.py``, ``_interpolate_nd``), so the result is the data times a
``[out, in]`` matrix along each resized axis. Each matrix is onnx's own: the evaluator runs a
two-axis ``Resize`` on the identity (rows unscaled, so each row comes back as one column of the
matrix: a scale of 1 maps every coordinate mode onto the integer grid exactly), which carries
every coordinate transform, cubic coefficient, ``exclude_outside`` and ``antialias`` over as
ONNX specifies them. ``tf_crop_and_resize`` writes ``extrapolation_value`` where a coordinate
falls outside the input: those outputs are selected afterwards.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator
from poot_ir.core import Var

from poot_onnx.context import FLOATS, Array, Lowering, Node, check_dtype

__all__ = ["interpolate"]

#: The largest ``in x out`` matrix of one axis (a row of an image is a few thousand wide).
MATRIX_LIMIT = 1 << 24


def _per_axis(lo: Lowering, n: Node, rank: int) -> tuple[list[float | None], list[int | None]]:
    """Each axis's scale (from ``scales``) or output size (from ``sizes``), full rank."""
    axes_attr = lo.attr_ints("axes")
    axes = list(range(rank)) if axes_attr is None else [a % rank for a in axes_attr]
    scales: list[float | None] = [None] * rank
    sizes: list[int | None] = [None] * rank
    scale_i, size_i = (1, None) if lo.opset < 11 else (2, 3)
    given_scales = lo.const(scale_i, "scales") if lo.has(scale_i) else np.zeros(0)
    if given_scales.size:
        if given_scales.size != len(axes):
            raise lo.fail("value", f"{given_scales.size} scales for {len(axes)} axes")
        for a, s in zip(axes, given_scales.reshape(-1).tolist(), strict=True):
            scales[a] = float(s)
        return scales, sizes
    if size_i is None or not lo.has(size_i):
        raise lo.fail("model", "Resize needs scales or sizes")
    given = [int(s) for s in lo.const(size_i, "sizes").reshape(-1).tolist()]
    if len(given) != len(axes):
        raise lo.fail("value", f"{len(given)} sizes for {len(axes)} axes")
    shape = lo.shape(0)
    policy = lo.attr("keep_aspect_ratio_policy") or "stretch"
    if policy == "stretch":
        for a, s in zip(axes, given, strict=True):
            sizes[a] = s
        return scales, sizes
    ratios = [s / shape[a] for a, s in zip(axes, given, strict=True)]
    if policy not in ("not_larger", "not_smaller"):
        raise lo.fail("attribute", f"keep_aspect_ratio_policy {policy!r}")
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        scales[a] = common
        sizes[a] = int(common * shape[a] + 0.5)  # the output size ONNX specifies: rounded
    return scales, sizes


def _matrix(
    lo: Lowering, n: Node, size: int, scale: float | None, out: int | None, roi: tuple[float, float]
) -> tuple[Array, Array]:
    """One axis's ``[out, in]`` interpolation matrix and its ``[out]`` extrapolation mask,
    by the reference evaluator on the identity."""
    # the node's own attributes, as onnx wrote them, less those about which axes resize
    keep = [a for a in n.proto.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")]
    probe = np.concatenate([np.eye(size), np.zeros((1, size))]).astype(np.float64)
    feeds: dict[str, Array] = {"x": probe}
    inputs = ["x"]
    if lo.opset >= 11:
        feeds["roi"] = np.asarray([0.0, roi[0], 1.0, roi[1]], np.float64)
        inputs.append("roi")
    if scale is not None:
        feeds["scales"] = np.asarray([1.0, scale], np.float32)
        inputs.append("scales")
    else:
        if lo.opset >= 11:
            inputs.append("")
        feeds["sizes"] = np.asarray([size + 1, out], np.int64)
        inputs.append("sizes")
    node = helper.make_node("Resize", inputs, ["y"])
    node.attribute.extend(keep)
    graph = helper.make_graph(
        [node],
        "probe",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
        ],
        [helper.make_empty_tensor_value_info("y")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", lo.opset)], ir_version=onnx.IR_VERSION
    )
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got: Any = ReferenceEvaluator(model).run(None, feeds)
    except Exception as err:  # the evaluator's own errors, whatever their type
        raise lo.fail("value", f"computing its interpolation weights: {err}") from err
    y = np.asarray(got[0], np.float64)
    if y.ndim != 2 or y.shape[0] != size + 1:
        raise lo.fail("value", f"its interpolation probe came back as {y.shape}")
    base = y[size]  # the zero row: extrapolation_value where a coordinate leaves the input
    mask = base != 0
    weights = (y[:size] - base).T
    weights[mask] = 0.0
    return weights, mask


def interpolate(lo: Lowering, n: Node) -> None:
    b = lo.b
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the data")
    rank = x.type.rank
    scales, sizes = _per_axis(lo, n, rank)
    mode = lo.attr("coordinate_transformation_mode") or "half_pixel"
    roi_all = None
    if mode == "tf_crop_and_resize" and lo.opset >= 11 and lo.has(1):
        roi_all = lo.const(1, "roi").reshape(-1).astype(np.float64)
    axes_attr = lo.attr_ints("axes")
    axes = list(range(rank)) if axes_attr is None else [a % rank for a in axes_attr]
    y = x
    masks: list[tuple[int, Array]] = []
    fill = lo.attr_float("extrapolation_value", 0.0)
    for a in range(rank):
        if scales[a] is None and sizes[a] is None:
            continue
        roi = (0.0, 1.0)
        if roi_all is not None and a in axes:
            k = axes.index(a)
            roi = (float(roi_all[k]), float(roi_all[len(axes) + k]))
        size = x.shape[a]
        if size * (sizes[a] or math.ceil(size * (scales[a] or 1.0))) > MATRIX_LIMIT:
            raise lo.fail("value", f"axis {a}'s interpolation matrix would be too large")
        weights, mask = _matrix(lo, n, size, scales[a], sizes[a], roi)
        if sizes[a] is not None and weights.shape[0] != sizes[a]:
            raise lo.fail("value", f"axis {a} resizes to {weights.shape[0]}, not {sizes[a]}")
        if np.any(mask):
            masks.append((a, mask))
        if weights.shape[0] == size and np.array_equal(weights, np.eye(size)):
            continue  # an unscaled axis
        y = _along(lo, y, a, weights, f"{n.outputs[0]}.axis{a}")
    if masks:
        where = np.zeros(y.shape, np.bool_)
        for a, mask in masks:
            where |= mask.reshape([-1 if d == a else 1 for d in range(rank)])
        y = b.select(lo.weight(f"{n.outputs[0]}.outside", where), fill, y)
    lo.set(0, y)


def _along(lo: Lowering, y: Var, a: int, weights: Array, name: str) -> Var:
    """``y`` times ``weights`` (``[out, in]``) along axis ``a``."""
    b = lo.b
    rank = y.type.rank
    perm = [d for d in range(rank) if d != a] + [a]
    moved = b.transpose(y, perm) if a != rank - 1 else y
    lead = moved.shape[:-1]
    flat = b.reshape(moved, (math.prod(lead), moved.shape[-1]))
    wt = lo.weight(name, np.ascontiguousarray(weights.T).astype(y.dtype.numpy))
    out = b.reshape(b.matmul(flat, wt), (*lead, weights.shape[0]))
    if a == rank - 1:
        return out
    back = [0] * rank
    for i, p in enumerate(perm):
        back[p] = i
    return b.transpose(out, back)
