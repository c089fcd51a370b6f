"""ONNX lowering rules for the ``ai.onnx.ml`` operators skl2onnx emits for linear models, scalers,
normalizers and MLPs (``Scaler``, ``Normalizer``, ``LinearClassifier``, ``LinearRegressor``,
``ArrayFeatureExtractor``, ``Binarizer``, ``Imputer``), each lowered to poot primitives with the
arithmetic ONNX Runtime's CPU kernels use (onnxruntime/core/providers/cpu/ml/*.cc), since that
is what a converted pipeline is checked against:

- ``Normalizer`` divides each row by its maximum (``MAX``: the largest value, not the largest
  magnitude) or the sum of magnitudes (``L1``), or (``L2``) takes ``sign(x) * sqrt(x^2 / s)``
  with ``s`` the sum of squares; a row whose norm is 0 is passed through unchanged.
- ``LinearClassifier`` with one target and two class labels scores ``[1 - p, p]`` where ``p`` is
  the raw score (``NONE``, and ``SOFTMAX``, which a single column leaves alone) or its logistic
  (``LOGISTIC``); its label is the second class where the raw score is above 0. With several
  targets the label is the first highest raw score's class. ``SOFTMAX_ZERO`` and ``PROBIT``
  are refused. String class labels (``classlabels_strings``) are refused when the label output
  is used: poot has no string type (re-export with integer labels); the scores alone import.
- ``Binarizer`` maps NaN to 0 (ONNX Runtime refuses a NaN input at run time).
- ``ZipMap`` (a sequence of maps) is refused, with the converter option that removes it.

A label is ONNX int64, held as I32 like every int64 value (``Lowering.wide``): class labels
beyond I32 are refused at import.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from poot_ir import ops
from poot_ir.core import Var
from poot_ir.dtypes import DType
from poot_ir.ops import sigmoid

from poot_onnx.context import Lowering, LoweringRule, Node, check_dtype, reshape
from poot_onnx.indexing import arg_best

__all__ = ["REFUSED", "RULES"]


def _features(lo: Lowering) -> Var:
    """Input 0 as an F32 matrix ``[N, C]`` (a vector is one row), as the ML kernels read it;
    an I32 input is converted."""
    x = lo.var(0)
    check_dtype(lo, x, (DType.F32, DType.I32), "the input")
    if x.type.rank == 1:
        x = lo.b.reshape(x, (1, x.shape[0]))
    if x.type.rank != 2:
        raise lo.fail("model", f"the input must be a vector or a matrix, got {x.type}")
    return x if x.dtype is DType.F32 else lo.b.convert(x, DType.F32)


def _floats(lo: Lowering, name: str, required: bool = True) -> np.ndarray:
    v = lo.attr(name)
    if v is None:
        if required:
            raise lo.fail("attribute", f"{name!r} is required")
        return np.zeros(0, np.float32)
    if isinstance(v, float | int):
        v = (float(v),)
    if not isinstance(v, tuple) or not all(isinstance(f, float | int) for f in v):
        raise lo.fail("attribute", f"{name!r} must be a list of floats, got {v!r}")
    return np.asarray(v, np.float32)


def _param(lo: Lowering, name: str, values: np.ndarray) -> Var:
    """A constant of the node as a weight named after the node's output and ``name``."""
    return lo.weight(f"{lo.node.outputs[0]}.{name}", values)


def _row(lo: Lowering, name: str, values: np.ndarray, width: int) -> Var | float:
    """A per-column parameter of length 1 (a scalar literal) or ``width`` (a weight)."""
    if values.size == 1:
        return float(values[0])
    if values.size != width:
        raise lo.fail("attribute", f"{name!r} has {values.size} values; the input has {width}")
    return _param(lo, name, values)


def _scaler(lo: Lowering, n: Node) -> None:
    x = _features(lo)
    width = x.shape[1]
    offset, scale = _floats(lo, "offset", False), _floats(lo, "scale", False)
    offset = offset if offset.size else np.zeros(1, np.float32)
    scale = scale if scale.size else np.ones(1, np.float32)
    if offset.size != scale.size:
        raise lo.fail(
            "attribute", f"offset has {offset.size} values and scale {scale.size}; they must agree"
        )
    b = lo.b
    lo.set(0, b.mul(b.sub(x, _row(lo, "offset", offset, width)), _row(lo, "scale", scale, width)))


def _safe_divisor(lo: Lowering, norm: Var) -> tuple[Var, Var]:
    """``norm`` with 0 replaced by 1 (so no division by zero is ever made), and where it was 0."""
    b = lo.b
    zero = b.eq(norm, 0.0)
    return b.select(zero, 1.0, norm), zero


def _per_row(lo: Lowering, v: Var, like: Var, axis: int) -> Var:
    keep = tuple(d for d in range(like.type.rank) if d != axis)
    return lo.b.broadcast_in_dim(v, like.shape, keep)


def _normalizer(lo: Lowering, n: Node) -> None:
    x = _features(lo)
    b = lo.b
    norm = lo.attr("norm")
    match norm:
        case "MAX":
            d = b.reduce_max(x, 1)
        case "L1":
            d = b.reduce_sum(b.abs(x), 1)
        case "L2":
            # ORT's NormalizeL2: sign(x) * sqrt(x^2 / sum(x^2)), not x / sqrt(sum(x^2)); the two
            # differ where the squares overflow (ORT's NaN, kept).
            sq = b.mul(x, x)
            ss = b.reduce_sum(sq, 1)
            safe, zero = _safe_divisor(lo, ss)
            r = b.sqrt(b.div(sq, _per_row(lo, safe, x, 1)))
            signed = b.select(b.ge(x, 0.0), r, b.neg(r))
            lo.set(0, b.select(_per_row(lo, zero, x, 1), x, signed))
            return
        case _:
            raise lo.fail("attribute", f"norm {norm!r}; ONNX defines MAX, L1 and L2")
    safe, _ = _safe_divisor(lo, d)
    lo.set(0, b.div(x, _per_row(lo, safe, x, 1)))


def _binarizer(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    check_dtype(lo, x, (DType.F32,), "the input")
    t = lo.attr_float("threshold", 0.0)
    lo.set(0, lo.b.convert(lo.b.gt(x, t), DType.F32))


def _imputer(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    check_dtype(lo, x, (DType.F32,), "the input")
    if lo.attr("imputed_value_int64s") is not None:
        raise lo.fail("dtype", "int64 imputation: poot imputes float inputs only")
    values = _floats(lo, "imputed_value_floats")
    if x.type.rank != 2:
        raise lo.fail("model", f"the input must be a matrix, got {x.type}")
    fill = _row(lo, "imputed", values, x.shape[1])
    replaced = lo.attr_float("replaced_value_float", 0.0)
    b = lo.b
    if np.isnan(replaced):
        # NaN is the only value unequal to itself: "x == x" is false exactly where x is NaN.
        lo.set(0, b.select(b.eq(x, x), x, fill))
    else:
        lo.set(0, b.select(b.eq(x, replaced), fill, x))


def _linear(lo: Lowering, x: Var, targets: int) -> Var:
    """``x @ coefficients^T + intercepts`` with ``coefficients`` ``[targets, C]``."""
    coef = _floats(lo, "coefficients")
    width = x.shape[1]
    if coef.size != targets * width:
        raise lo.fail(
            "attribute",
            f"{coef.size} coefficients for {targets} target(s) of {width} features",
        )
    b = lo.b
    w = _param(lo, "coefficients", np.ascontiguousarray(coef.reshape(targets, width).T))
    y = b.matmul(x, w)
    intercepts = _floats(lo, "intercepts", False)
    if intercepts.size:
        if intercepts.size != targets:
            raise lo.fail("attribute", f"{intercepts.size} intercepts for {targets} target(s)")
        y = b.add(y, b.broadcast_in_dim(_param(lo, "intercepts", intercepts), y.shape, (1,)))
    return y


def _linear_regressor(lo: Lowering, n: Node) -> None:
    post = lo.attr("post_transform")
    if post not in (None, "NONE"):
        raise lo.fail("attribute", f"post_transform {post!r}: poot lowers NONE only")
    targets = lo.attr_int("targets", 1)
    if targets < 1:
        raise lo.fail("attribute", f"targets {targets}")
    lo.set(0, _linear(lo, _features(lo), targets))


def _labels(lo: Lowering) -> tuple[int, ...] | None:
    """The integer class labels (None when there are none), refused beyond I32. String labels
    are refused here: only a used label output reads them."""
    strings = lo.attr("classlabels_strings")
    if strings is not None:
        raise lo.fail(
            "dtype",
            "the label output holds strings (classlabels_strings), which poot has no type for: "
            "convert the model with integer class labels, or leave the label output unused",
        )
    ints = lo.attr_ints("classlabels_ints")
    if ints is None:
        return None
    info = np.iinfo(np.int32)
    for k, label in enumerate(ints):
        if not info.min <= label <= info.max:
            raise lo.fail("value", f"class label {label} (at {k}) is beyond i32")
    return ints


def _label_of(lo: Lowering, index: Var, labels: tuple[int, ...] | None) -> Var:
    """Class index -> class label (the index itself when the labels are 0, 1, ...)."""
    if labels is None or labels == tuple(range(len(labels))):
        return index
    table = lo.index_weight(f"{lo.node.outputs[0]}.classes", labels)
    return lo.b.gather(table, index, 0)


def _linear_classifier(lo: Lowering, n: Node) -> None:
    b = lo.b
    x = _features(lo)
    intercepts = _floats(lo, "intercepts", False)
    targets = max(intercepts.size, 1)
    post = lo.attr("post_transform") or "NONE"
    if post not in ("NONE", "LOGISTIC", "SOFTMAX"):
        raise lo.fail("attribute", f"post_transform {post!r}: poot lowers NONE, LOGISTIC, SOFTMAX")
    ints, strings = lo.attr_ints("classlabels_ints") or (), _strings(lo)
    count = len(ints) or len(strings)
    labels = _labels(lo) if lo.wants(0) else None
    raw = _linear(lo, x, targets)
    if targets == 1:
        s = reshape(b, raw, (raw.shape[0],))
        positive = b.convert(b.gt(s, 0.0), DType.I32)
        if lo.wants(0):
            two = labels if labels is not None and len(labels) == 2 else None
            lo.set(0, _mark(lo, _label_of(lo, positive, two)))
        if count == 2:
            p = sigmoid(b, raw) if post == "LOGISTIC" else raw
            scores = b.concat([b.sub(1.0, p), p], 1)
        elif post == "LOGISTIC":
            scores = sigmoid(b, raw)
        elif post == "NONE":
            scores = raw
        else:
            raise lo.fail("attribute", "SOFTMAX over a single score without two class labels")
        lo.set(1, scores)
        return
    if labels is not None and len(labels) != targets:
        raise lo.fail("attribute", f"{len(labels)} class labels for {targets} targets")
    if lo.wants(0):
        lo.set(0, _mark(lo, _label_of(lo, arg_best(lo, raw, 1, "max", last=False), labels)))
    match post:
        case "NONE":
            scores = raw
        case "LOGISTIC":
            scores = sigmoid(b, raw)
        case _:
            scores = ops.softmax(b, raw, 1)
    lo.set(1, scores)


def _strings(lo: Lowering) -> tuple[str, ...]:
    v = lo.attr("classlabels_strings")
    return tuple(s for s in v if isinstance(s, str)) if isinstance(v, tuple) else ()


def _mark(lo: Lowering, label: Var) -> Var:
    """A label is ONNX int64, held as I32 (every value was checked to fit)."""
    lo.wide.add(label.id)
    return label


def _array_feature_extractor(lo: Lowering, n: Node) -> None:
    """``data[..., indices]`` over the last axis, the indices flattened; a vector is one row
    (ONNX Runtime's array_feature_extractor.cc)."""
    b = lo.b
    data = lo.var(0)
    if data.type.rank == 0:
        raise lo.fail("model", "ArrayFeatureExtractor of a scalar")
    size = data.shape[-1]
    idx = lo.index_var(1, size)
    flat = reshape(b, idx, (int(np.prod(idx.shape)),))
    y = b.gather(data, flat, data.type.rank - 1)
    lo.set(0, reshape(b, y, (1, flat.shape[0])) if data.type.rank == 1 else y)


#: ``ai.onnx.ml`` op types refused with a way around them (any other op without a rule is
#: refused as poot having no lowering for it).
REFUSED: Mapping[str, str] = {
    "ZipMap": "ZipMap makes a sequence of maps, which poot has no type for: convert with "
    "skl2onnx's options={'zipmap': False} (probabilities as one tensor)",
}


#: Every ``ai.onnx.ml`` op type the importer lowers, with its rule.
RULES: Mapping[str, LoweringRule] = {
    "Scaler": LoweringRule(_scaler, frozenset({"offset", "scale"})),
    "Normalizer": LoweringRule(_normalizer, frozenset({"norm"})),
    "Binarizer": LoweringRule(_binarizer, frozenset({"threshold"})),
    "Imputer": LoweringRule(
        _imputer,
        frozenset(
            {
                "imputed_value_floats",
                "imputed_value_int64s",
                "replaced_value_float",
                "replaced_value_int64",
            }
        ),
    ),
    "LinearRegressor": LoweringRule(
        _linear_regressor, frozenset({"coefficients", "intercepts", "targets", "post_transform"})
    ),
    "LinearClassifier": LoweringRule(
        _linear_classifier,
        frozenset(
            {
                "coefficients",
                "intercepts",
                "classlabels_ints",
                "classlabels_strings",
                "multi_class",
                "post_transform",
            }
        ),
    ),
    "ArrayFeatureExtractor": LoweringRule(_array_feature_extractor),
}
