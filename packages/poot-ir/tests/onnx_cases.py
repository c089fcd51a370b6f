"""The ONNX node test cases as poot imports them: shared by the frontend's tests (``test_onnx.py``)
and the conformance suite (``tests/conformance/test_onnx_cases.py``), which imports this module by
the same name, so one process collects the cases once.

The cases feed shapes, axes and indices as graph inputs; a model poot imports has them as
constants, so ``constants`` binds every graph input of type int64 and every input that feeds a
position in ``STATIC_INPUTS``. Everything else stays a runtime slot (``slots``).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper
from poot_ir.onnx import STATIC_INPUTS, SUPPORTED_OPS, Imported

__all__ = ["array", "constants", "group", "is_float", "node_cases", "rtol", "slots"]


@functools.cache
def node_cases() -> tuple[Any, ...]:
    """Every case onnx generates (in memory, 5 to 10 s), once per process."""
    with warnings.catch_warnings():
        # The generators compute their expected outputs in numpy and overflow on purpose;
        # onnx may also deprecate its own helpers. Only onnx's modules are silenced.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"onnx(\.|$)")
        with np.errstate(all="ignore"):
            import onnx.backend.test.case.node as node_cases

            return tuple(node_cases.collect_testcases())


def array(x: Any) -> np.ndarray | None:
    """A tensor as an array; None for a sequence, an optional or a map."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return np.asarray(x) if isinstance(x, np.ndarray | np.generic) else None


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16)


def rtol(case: Any, dtype: np.dtype) -> float:
    """The relative tolerance for a float output: the case's own, except for bfloat16, whose
    8-bit significand cannot meet the cases' 1e-3: the expected output is itself rounded to
    bfloat16 (up to 2^-9 relative) and poot's result is too, after computing in bfloat16, so
    two bfloat16 steps, 2^-7, there."""
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return max(float(case.rtol), 2.0**-7)
    return float(case.rtol)


def group(case: Any) -> str:
    """The op type of a one-node case of a supported op, "graph" for a graph of supported ops
    (the expanded function bodies), "unsupported" otherwise (such a case may still import when
    its unsupported nodes are folded at import)."""
    nodes = case.model.graph.node
    if not {n.op_type for n in nodes} <= set(SUPPORTED_OPS):
        return "unsupported"
    return nodes[0].op_type if len(nodes) == 1 else "graph"


def constants(case: Any, inputs: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    """The graph inputs of one data set to bind at import (``import_model(constants=...)``)."""
    graph = case.model.graph
    static = {
        n.input[i]
        for n in graph.node
        for i in STATIC_INPUTS.get(n.op_type, ())
        if i < len(n.input) and n.input[i]
    }
    return {
        vi.name: value
        for vi, value in zip(graph.input, inputs, strict=False)
        if value is not None and (vi.name in static or value.dtype == np.int64)
    }


def slots(case: Any, imported: Imported, inputs: list[np.ndarray | None]) -> dict[str, Any]:
    """The values of the imported program's slots, by program name, for one data set."""
    return {
        imported.inputs[vi.name]: value
        for vi, value in zip(case.model.graph.input, inputs, strict=False)
        if vi.name in imported.inputs
    }
