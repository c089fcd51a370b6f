"""Ops that ONNX itself defines as functions of other ops (``LogSoftmax``, ``HardSigmoid``,
``SoftmaxCrossEntropyLoss``, ``Attention``, ...): a node of such an op with no rule of its own is
replaced by its function body, instantiated for the node, so the decomposition is onnx's own,
maintained upstream, not a second one here.

The body is the schema's function (context-dependent ones built for the node's attributes and
input types) at the newest function opset the model's opset allows. Its values are renamed
apart (``_fn<k>_<name>``), attribute references are bound to the node's attributes or the
function's defaults, and each body node is named ``<node>/<body node>`` so that an error names
the node it came from.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import helper
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_onnx import reading
from poot_onnx.context import Const, Lowering, Node

__all__ = ["expand"]

_ELEM = {
    DType.F32: onnx.TensorProto.FLOAT,
    DType.F16: onnx.TensorProto.FLOAT16,
    DType.BF16: onnx.TensorProto.BFLOAT16,
    DType.I32: onnx.TensorProto.INT32,
    DType.BOOL: onnx.TensorProto.BOOL,
}


def _type_of(lo: Lowering, name: str) -> Any:
    value = lo.env.get(name) if name else None
    if isinstance(value, Var):
        elem = onnx.TensorProto.INT64 if value.id in lo.wide else _ELEM[value.dtype]
        return helper.make_tensor_type_proto(elem, list(value.shape))
    if isinstance(value, Const):
        elem = helper.np_dtype_to_tensor_dtype(value.value.dtype)
        return helper.make_tensor_type_proto(elem, list(value.shape))
    return onnx.TypeProto()


def _body(lo: Lowering, node: Node) -> tuple[Any, Any] | None:
    try:
        # onnx's stubs lack the function accessors of OpSchema: typed as Any
        schema: Any = onnx.defs.get_schema(node.op_type, lo.opset, "")
    except onnx.defs.SchemaError:
        return None
    raw: bytes = b""
    if schema.has_context_dependent_function:
        versions = sorted(schema.context_dependent_function_opset_versions)
        allowed = [v for v in versions if v <= lo.opset]
        if versions:
            types = [_type_of(lo, name).SerializeToString() for name in node.inputs]
            raw = schema.get_context_dependent_function_with_opset_version(
                allowed[-1] if allowed else versions[0], node.proto.SerializeToString(), types
            )
    if not raw and schema.has_function:
        # Each version expresses the same op (the schema found for the model's opset) in the
        # ops of that opset: the newest the model allows, else the oldest there is.
        versions = sorted(schema.function_opset_versions)
        allowed = [v for v in versions if v <= lo.opset]
        if versions:
            raw = schema.get_function_with_opset_version(allowed[-1] if allowed else versions[0])
    if not raw:
        return None
    fp = onnx.FunctionProto()
    fp.ParseFromString(raw)
    return fp, schema


def _rename_graph(g: Any, name: Any) -> None:
    """Rename a body node's subgraph in place: its nodes read the body's values."""
    for p in g.node:
        _rename_node(p, name)
    for vi in g.output:
        vi.name = name(vi.name)


def _rename_node(q: Any, name: Any) -> None:
    ins, outs = [name(v) for v in q.input], [name(v) for v in q.output]
    del q.input[:]
    q.input.extend(ins)
    del q.output[:]
    q.output.extend(outs)
    for a in q.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            _rename_graph(a.g, name)


def expand(lo: Lowering, node: Node) -> tuple[list[Node], int] | None:
    """The function body of ``node``'s op instantiated for it, and the default-domain opset
    the body is written in; None when ONNX defines the op as no function."""
    if node.proto is None:
        return None
    found = _body(lo, node)
    if found is None:
        return None
    fp, schema = found
    lo.expansions += 1
    prefix = f"_fn{lo.expansions}_"
    rename: dict[str, str] = {}
    for i, formal in enumerate(fp.input):
        rename[formal] = node.inputs[i] if i < len(node.inputs) else ""
    for i, formal in enumerate(fp.output):
        actual = node.outputs[i] if i < len(node.outputs) else ""
        rename[formal] = actual or prefix + formal

    def name(v: str) -> str:
        return v if not v else rename.get(v, prefix + v)

    given = {a.name: a for a in node.proto.attribute}
    defaults = {
        k: a.default_value
        for k, a in schema.attributes.items()
        if a.default_value.type != onnx.AttributeProto.UNDEFINED
    }
    defaults.update({a.name: a for a in fp.attribute_proto})
    body: list[Node] = []
    for i, p in enumerate(fp.node):
        q = onnx.NodeProto()
        q.CopyFrom(p)
        q.name = f"{node.label}/{p.name or f'{p.op_type}{i}'}"
        del q.attribute[:]
        for a in p.attribute:
            if not a.ref_attr_name:
                q.attribute.append(a)
                continue
            src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if src is not None:
                bound = onnx.AttributeProto()
                bound.CopyFrom(src)
                bound.name = a.name
                q.attribute.append(bound)
        _rename_node(q, name)
        body.append(reading.node(i, q))
    opsets = [o.version for o in fp.opset_import if o.domain in ("", "ai.onnx")]
    return body, int(opsets[0]) if opsets else lo.opset
