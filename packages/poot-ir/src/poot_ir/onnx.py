"""The ONNX frontend (the ``onnx`` extra): ``import_model`` turns a model with static shapes into a
poot ``Program`` and the values of its weights.

``import poot_ir`` does not import onnx; ``import poot_ir.onnx`` does.

- Graph inputs become slots, initializers become weights named after them, graph outputs become
  outputs; every name is made an identifier (``identifier``: characters outside
  ``[A-Za-z0-9_.]`` become ``_``) and de-duplicated with ``_1``, ``_2``, ... in graph order.
  ``Imported.inputs`` and ``Imported.outputs`` map the ONNX names to the program's.
- Each node is lowered by the rule for its op type (``SUPPORTED_OPS``; ``poot_ir.onnx_ops``).
  Constants (initializers, ``Constant`` nodes, inputs bound with ``constants=``) are folded
  where ONNX needs a static value or where poot has no dtype for them (int64 shapes, axes and
  indices); a scalar constant becomes an inline literal where broadcasting allows, and a tensor
  constant that an equation needs becomes a weight named after its ONNX value.
- Element types: float32, float16, bfloat16, int32 and bool. A runtime value of any other type
  (float64, int64, ...) is refused; int64 constants are folded, and narrowed to i32 only where
  they index, after a range check.
- Anything poot cannot express raises ``UnsupportedOnnx`` naming the node (name, op type), the
  kind of refusal and the facts. A malformed model is refused the same way (kind ``"model"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from poot_ir.builder import Builder
from poot_ir.core import Program, Var
from poot_ir.dtypes import DType
from poot_ir.errors import UnsupportedOnnx
from poot_ir.onnx_lowering import (
    Array,
    AttrValue,
    Const,
    ElemTypes,
    Lowering,
    Node,
    Unreadable,
    identifier,
)
from poot_ir.onnx_ops import OPS, STATIC_INPUTS, lower

__all__ = ["STATIC_INPUTS", "SUPPORTED_OPS", "Imported", "identifier", "import_model"]

#: The ONNX op types (default domain) the importer lowers.
SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(OPS))


@dataclass(frozen=True, slots=True)
class Imported:
    """An imported model: the program, the value of each of its weights by argument name, and
    the ONNX names of its slots and outputs (ONNX name -> program name)."""

    program: Program
    weights: dict[str, np.ndarray]
    inputs: dict[str, str]
    outputs: dict[str, str]


def import_model(
    model: onnx.ModelProto | str | os.PathLike[str],
    *,
    name: str | None = None,
    constants: Mapping[str, Any] | None = None,
) -> Imported:
    """Import ``model`` (an ``onnx.ModelProto``, or the path of a ``.onnx`` file).

    ``name`` names the program (default: the graph's name, else ``"onnx"``). ``constants``
    binds graph inputs to values known at import time (by ONNX name; each must match the
    input's element type): they become constants, not slots, which is how a shape or index
    input that the model takes at run time is made static.

    Raises ``UnsupportedOnnx`` for anything poot cannot express, and ``OSError`` when a path
    cannot be read.
    """
    proto = _load(model)
    graph = proto.graph
    bound = dict(constants or {})
    b = Builder(name or graph.name or "onnx")
    lo = Lowering(b, _opset(proto), _elem_types())

    inits: dict[str, Any] = {t.name: t for t in graph.initializer}
    for t in graph.sparse_initializer:
        raise UnsupportedOnnx(t.values.name, "initializer", "value", "a sparse initializer")
    inputs: dict[str, str] = {}
    declared = {vi.name for vi in graph.input}
    for key in bound:
        if key not in declared or key in inits:
            raise UnsupportedOnnx(key, "graph input", "model", "constants= binds no graph input")
    for vi in graph.input:
        if vi.name in inits:
            continue  # IR < 4 lists initializers among the inputs
        if vi.name in bound:
            lo.env[vi.name] = Const(vi.name, _bound(vi, bound[vi.name]))
            continue
        dtype, shape = _tensor_type(vi, "graph input")
        inputs[vi.name], v = lo.slot(vi.name, dtype, shape)
        lo.env[vi.name] = v
    for key, t in inits.items():
        lo.env[key] = Const(key, _array(t, key, "initializer"), initializer=True)

    lower(lo, [_node(i, p) for i, p in enumerate(graph.node)])

    outputs: dict[str, str] = {}
    taken: set[str] = set()
    for vi in graph.output:
        lo.enter(None, (vi.name, "graph output"))
        value = lo.env.get(vi.name)
        if value is None:
            raise lo.fail("model", "no node computes this graph output")
        var = value if isinstance(value, Var) else lo.materialize(value)
        out, k = identifier(vi.name), 0
        while out in taken:
            k += 1
            out = f"{identifier(vi.name)}_{k}"
        taken.add(out)
        b.output(out, var)
        outputs[vi.name] = out
    return Imported(b.build(), dict(lo.weights), inputs, outputs)


# -- decoding the protobuf ------------------------------------------------------------------


def _load(model: Any) -> Any:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, str | os.PathLike):
        path = Path(model)
        try:
            return onnx.load(str(path))
        except OSError:
            raise
        except Exception as err:  # protobuf's DecodeError and friends: a file that is no model
            raise UnsupportedOnnx(str(path), "model", "model", f"cannot be read: {err}") from err
    raise UnsupportedOnnx(
        type(model).__name__, "model", "model", "import_model takes an onnx.ModelProto or a path"
    )


def _opset(proto: Any) -> int:
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return int(onnx.defs.onnx_opset_version())


@cache
def _elem_types() -> ElemTypes:
    table: dict[int, tuple[str, np.dtype[Any] | None]] = {}
    for code in onnx.TensorProto.DataType.values():
        name = onnx.TensorProto.DataType.Name(code)
        try:
            table[int(code)] = (name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)))
        except (KeyError, TypeError, ValueError):
            table[int(code)] = (name, None)
    return table


def _tensor_type(vi: Any, where: str) -> tuple[DType, tuple[int, ...]]:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedOnnx(
            vi.name, where, "dtype", f"a value of {kind or 'no'} type; poot takes tensors"
        )
    tt = vi.type.tensor_type
    name, np_dtype = _elem_types().get(tt.elem_type, (f"type {tt.elem_type}", None))
    dtype = DType.from_numpy(np_dtype) if np_dtype is not None else None
    if dtype is None:
        hint = ""
        if np_dtype is not None and np_dtype.kind in "iu":
            hint = " (a shape or index known at import time can be bound with constants=)"
        raise UnsupportedOnnx(vi.name, where, "dtype", f"{name}, which poot has no type for{hint}")
    if not tt.HasField("shape"):
        raise UnsupportedOnnx(vi.name, where, "dynamic", "the shape (even the rank) is unknown")
    dims: list[int] = []
    for i, d in enumerate(tt.shape.dim):
        if d.WhichOneof("value") != "dim_value" or d.dim_value < 0:
            what = repr(d.dim_param) if d.dim_param else "unknown"
            raise UnsupportedOnnx(
                vi.name, where, "dynamic", f"axis {i} is {what}; shapes must be static"
            )
        dims.append(int(d.dim_value))
    return dtype, tuple(dims)


def _bound(vi: Any, value: Any) -> Array:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedOnnx(vi.name, "graph input", "dtype", f"a value of {kind or 'no'} type")
    name, np_dtype = _elem_types().get(vi.type.tensor_type.elem_type, ("?", None))
    arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np_dtype)
    if np_dtype is None or arr.dtype != np_dtype:
        raise UnsupportedOnnx(
            vi.name, "graph input", "model", f"bound to a {arr.dtype} value, but it is {name}"
        )
    return arr


def _array(t: Any, name: str, where: str) -> Array:
    try:
        return np.asarray(numpy_helper.to_array(t))
    except Exception as err:  # external data that is missing, a malformed tensor, ...
        raise UnsupportedOnnx(name, where, "model", f"its value cannot be read: {err}") from err


def _node(index: int, p: Any) -> Node:
    attrs: dict[str, AttrValue | Unreadable] = {a.name: _attr(a) for a in p.attribute}
    return Node(
        index,
        str(p.name),
        str(p.op_type),
        str(p.domain),
        tuple(str(x) for x in p.input),
        tuple(str(x) for x in p.output),
        attrs,
    )


def _attr(a: Any) -> AttrValue | Unreadable:
    A = onnx.AttributeProto
    t = a.type
    if t == A.FLOAT:
        return float(a.f)
    if t == A.INT:
        return int(a.i)
    if t == A.STRING:
        return bytes(a.s).decode("utf-8", "replace")
    if t == A.FLOATS:
        return tuple(float(x) for x in a.floats)
    if t == A.INTS:
        return tuple(int(x) for x in a.ints)
    if t == A.STRINGS:
        return tuple(bytes(x).decode("utf-8", "replace") for x in a.strings)
    if t == A.TENSOR:
        try:
            return np.asarray(numpy_helper.to_array(a.t))
        except Exception as err:  # an unreadable tensor is refused if a rule reads it
            return Unreadable(f"tensor that cannot be read ({err})")
    return Unreadable(f"{A.AttributeType.Name(t)} attribute")
