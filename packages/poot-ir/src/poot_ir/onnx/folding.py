"""Constant folding: a node whose inputs are all known at import is evaluated there, by onnx's own
reference evaluator (``onnx.reference.ReferenceEvaluator``), whatever its dtype: one semantics,
maintained upstream, rather than a second implementation of each op on constants.

The node is evaluated alone, in a one-node model with the importing model's opsets. What it
would allocate is bounded first for the ops whose output size comes from a value
(``ConstantOfShape``, ``Expand``, ``Tile``, ``Range``), and every result after: a fold past
``FOLD_LIMIT`` elements is refused, never attempted.
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

from poot_ir.onnx.context import Array, Lowering, Node

__all__ = ["FOLD_LIMIT", "NEVER_FOLDED", "estimate", "evaluate_node"]

#: The most elements one folded value may hold (1 GiB of float32).
FOLD_LIMIT = 2**28

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


def estimate(node: Node, values: Sequence[Array | None]) -> int | None:
    """How many elements the node's output would hold, for the ops whose size comes from an
    input's value (None when it is bounded by its inputs' sizes)."""

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
    if op == "Range" and all(v is not None for v in values[:3]):
        s, lim, d = (float(np.asarray(v).reshape(-1)[0]) for v in values[:3])
        if d == 0 or not all(math.isfinite(x) for x in (s, lim, d)):
            return None  # the evaluator refuses it
        return max(math.ceil((lim - s) / d), 0)
    return None


def evaluate_node(lo: Lowering, node: Node, inputs: Mapping[str, Array]) -> list[Array]:
    """The node's outputs, computed by the reference evaluator from ``inputs`` (by ONNX name).
    Raises ``UnsupportedOnnx`` (kind ``"value"``) when it cannot, or when a result is not a
    tensor or is too large."""
    values = [inputs.get(name) if name else None for name in node.inputs]
    size = estimate(node, values)
    if size is not None and size > FOLD_LIMIT:
        raise lo.fail("value", f"folding it would make {size} elements, beyond {FOLD_LIMIT}")
    graph_inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)
        )
        for name, arr in inputs.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.outputs if o]
    graph = helper.make_graph([node.proto], "fold", graph_inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", lo.opset)],
        ir_version=onnx.IR_VERSION,
    )
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got: Any = ReferenceEvaluator(model).run(None, dict(inputs))
    except Exception as err:  # the evaluator's own errors, whatever their type
        raise lo.fail("value", f"computing it from its constant inputs: {err}") from err
    out: list[Array] = []
    for name, value in zip([o for o in node.outputs if o], got, strict=True):
        if not isinstance(value, np.ndarray | np.generic):
            raise lo.fail("value", f"{name!r} folds to a {type(value).__name__}, not a tensor")
        arr = np.asarray(value)
        if arr.size > FOLD_LIMIT:
            raise lo.fail("value", f"{name!r} folds to {arr.size} elements, beyond {FOLD_LIMIT}")
        out.append(arr)
    return out
