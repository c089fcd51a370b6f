"""Constant folding: a node whose inputs are all known at import is evaluated there, by onnx's own
reference evaluator (``onnx.reference.ReferenceEvaluator``), whatever its dtype: one semantics,
maintained upstream, rather than a second implementation of each op on constants.

One op is replaced (``GatherElements``, below). onnx's own (1.23) picks with ``np.choose``, which
takes fewer than 64 choices, and its fallback for a longer axis takes one element per row, so
BERT's ``token_type_ids`` (a buffer of 512 along axis 1, gathered to the sequence) could not
fold; it also refused a negative axis, and indices shorter than the data off the axis.

The node is evaluated alone, in a one-node model with the importing model's opsets. Every
folded value is charged to the memory budget (``poot_ir.budget``): the importer holds each one
until the import ends, so the charge is the running total of the import's folds
(``Lowering.folded_bytes``). Where a node's output size follows from its inputs before it is
computed (``estimate``: ``ConstantOfShape``, ``Expand``, ``Tile``, ``Pad``, ``Range``, broadcasting
elementwise ops, ``MatMul``), a fold over the budget is refused before the evaluator is asked,
so it never allocates; any other result is charged as soon as it is computed. The refusal is
``BudgetExceeded`` naming the node, the value's size and the budget.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from poot_ir.budget import check_alloc

from poot_onnx.context import Array, Lowering, Node

__all__ = ["NEVER_FOLDED", "estimate", "evaluate_graph", "evaluate_node"]

#: Ops never folded: control flow (its branches read the enclosing scope; ``If`` is inlined),
#: and ops whose result is random.
NEVER_FOLDED = frozenset(
    {
        "If",
        "Loop",
        "Scan",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    }
)


#: Elementwise ops whose output is the numpy-style broadcast of their inputs.
_BROADCASTING = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where",
        "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor",
        "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu",
    }
)  # fmt: skip


def estimate(node: Node, values: Sequence[Array | None]) -> int | None:
    """How many elements the node's output will hold, for the ops where that follows from
    their inputs (a value, as for ``ConstantOfShape``, or shapes, as for a broadcast); None for
    any other op, or when the inputs are malformed (the evaluator then refuses them)."""

    def ints(i: int) -> list[int]:
        v = values[i] if i < len(values) else None
        return [] if v is None else [int(x) for x in np.asarray(v).reshape(-1).tolist()]

    op = node.op_type
    if op == "ConstantOfShape":
        return math.prod(max(d, 0) for d in ints(0))
    if op == "Expand" and values[0] is not None:
        shape = ints(1)
        src = list(values[0].shape)
        rank = max(len(shape), len(src))
        a = [1] * (rank - len(src)) + src
        b = [1] * (rank - len(shape)) + shape
        return math.prod(max(x, y, 0) for x, y in zip(a, b, strict=True))
    if op == "Tile" and values[0] is not None:
        return int(values[0].size) * math.prod(max(r, 0) for r in ints(1))
    if op == "Pad" and values[0] is not None:  # a traced Pad (edge, reflect, wrap) grows too
        shape = list(values[0].shape)
        pads = ints(1)
        axes = [ax % len(shape) for ax in ints(3)] if shape else []
        axes = axes or list(range(len(shape)))
        if len(pads) != 2 * len(axes):
            return None  # the evaluator refuses it
        for i, ax in enumerate(axes):
            shape[ax] += pads[i] + pads[i + len(axes)]
        return math.prod(max(d, 0) for d in shape)
    if op == "Range" and all(v is not None for v in values[:3]):
        s, lim, d = (float(np.asarray(v).reshape(-1)[0]) for v in values[:3])
        if d == 0 or not all(math.isfinite(x) for x in (s, lim, d)):
            return None  # the evaluator refuses it
        return max(math.ceil((lim - s) / d), 0)
    shapes = [v.shape for v in values if v is not None]
    try:
        if op in _BROADCASTING and shapes:
            return math.prod(int(d) for d in np.broadcast_shapes(*shapes))
        if op == "MatMul" and len(shapes) == 2 and all(len(s) > 0 for s in shapes):
            left = tuple(int(d) for d in shapes[0])
            right = tuple(int(d) for d in shapes[1])
            left = left if len(left) > 1 else (1, *left)
            right = right if len(right) > 1 else (*right, 1)
            batch = np.broadcast_shapes(left[:-2], right[:-2])
            return math.prod(int(d) for d in batch) * left[-2] * right[-1]
    except ValueError:  # shapes that do not broadcast
        return None
    return None


class GatherElements(OpRun):
    """ONNX GatherElements for the reference evaluator (replacing onnx's, see the module):
    ``take_along_axis`` after negative indices count from the end. Off the axis the indices
    may be shorter than the data (ONNX Runtime reads the leading part; onnx's refuses); an
    index outside the axis is an error, as the operator says (onnx's wraps it around)."""

    def _run(self, data: Array, indices: Array, axis: int = 0) -> tuple[Array]:
        axis = axis + data.ndim if axis < 0 else axis
        idx = np.asarray(indices, np.int64)
        if idx.ndim != data.ndim or any(
            k > d for a, (k, d) in enumerate(zip(idx.shape, data.shape, strict=True)) if a != axis
        ):
            raise ValueError(f"indices of shape {idx.shape} for data of shape {data.shape}")
        n = data.shape[axis]
        if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise ValueError(f"an index outside [-{n}, {n - 1}] along axis {axis}")
        lead = tuple(slice(None) if a == axis else slice(k) for a, k in enumerate(idx.shape))
        return (np.take_along_axis(data[lead], np.where(idx < 0, idx + n, idx), axis),)


def _itemsize(node: Node, values: Sequence[Array | None]) -> int:
    """The bytes per element of the node's output, as far as ``estimate`` needs it: the
    ``value`` of a ``ConstantOfShape`` (f32 by default), else the widest input."""
    if node.op_type == "ConstantOfShape":
        value = node.attrs.get("value")
        return value.dtype.itemsize if isinstance(value, np.ndarray) else 4
    return max((v.dtype.itemsize for v in values if v is not None), default=1)


def _charge(lo: Lowering, node: Node, what: str, size: int, commit: bool = True) -> None:
    """Charge ``size`` more folded bytes to the budget (only check, unless ``commit``), or
    refuse the fold with ``BudgetExceeded``."""
    before = lo.folded_bytes
    held = f", with the {before} bytes folded before it" if before else ""
    check_alloc(f"folding ONNX node {node.label!r} ({node.op_type}) to {what}{held}", before + size)
    if commit:
        lo.folded_bytes = before + size


def evaluate_node(lo: Lowering, node: Node, inputs: Mapping[str, Array]) -> list[Array]:
    """The node's outputs, computed by the reference evaluator from ``inputs`` (by ONNX name).
    Raises ``UnsupportedOnnx`` (kind ``"value"``) when it cannot or a result is not a tensor,
    and ``BudgetExceeded`` when the results would outgrow the memory budget (see the module)."""
    values = [inputs.get(name) if name else None for name in node.inputs]
    size = estimate(node, values)
    if size is not None:  # checked before, charged below at the size the result really has
        item = _itemsize(node, values)
        _charge(lo, node, f"{size} elements of {item} bytes", size * item, commit=False)
    return evaluate_graph(lo, node, [node.proto], lo.opset, inputs, [o for o in node.outputs if o])


def evaluate_graph(
    lo: Lowering,
    node: Node,
    nodes: Sequence[Any],
    opset: int,
    inputs: Mapping[str, Array],
    names: Sequence[str],
) -> list[Array]:
    """The values ``names`` of a small graph of ``nodes`` in ``opset`` (NodeProtos a rule
    builds to compute its parameters at import, as ``BatchNormalization`` folds its
    statistics; ``evaluate_node`` runs one node of the model this way), run by the reference
    evaluator on ``inputs``, for the rule lowering ``node``, its size charged to the budget."""
    graph_inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)
        )
        for name, arr in inputs.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(o) for o in names]
    graph = helper.make_graph(list(nodes), "fold", graph_inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=onnx.IR_VERSION,
    )
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            evaluator = ReferenceEvaluator(model, new_ops=[GatherElements])
            got: Any = evaluator.run(None, dict(inputs))
    except Exception as err:  # the evaluator's own errors, whatever their type
        raise lo.fail("value", f"computing it from its constant inputs: {err}") from err
    out: list[Array] = []
    for name, value in zip(names, got, strict=True):
        if not isinstance(value, np.ndarray | np.generic):
            raise lo.fail("value", f"{name!r} folds to a {type(value).__name__}, not a tensor")
        arr = np.asarray(value)
        _charge(lo, node, f"{name!r} ({arr.dtype}{list(arr.shape)})", int(arr.nbytes))
        out.append(arr)
    return out
