"""Reading an ONNX model: the file or proto, its opset, its element types, value infos, tensors,
nodes and attributes, decoded into the records of ``poot_onnx.context``."""

from __future__ import annotations

import os
import re
import stat
import warnings
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from poot_ir.dtypes import DType
from poot_ir.errors import UnsupportedOnnx

from poot_onnx.context import Array, AttrValue, ElemTypes, Graph, Node, Unreadable

__all__ = [
    "MIN_OPSET",
    "array",
    "attr",
    "bound",
    "check_graph",
    "dims",
    "elem",
    "elem_types",
    "graph",
    "imports",
    "load",
    "node",
    "opset",
    "symbols",
]


#: The default-domain opsets the importer implements: the rules read attributes as opset 7 and
#: later define them (opset 1 to 6 differ in broadcasting, ``consumed_inputs`` and more).
MIN_OPSET = 7

#: The largest file read: protobuf itself cannot parse a message of 2 GiB or more.
MAX_FILE_BYTES = 2**31 - 1


def _model_error(what: str, detail: str) -> UnsupportedOnnx:
    return UnsupportedOnnx(what, "model", "model", detail)


def load(model: Any) -> Any:
    """The ``ModelProto`` of ``model``: a proto, or the path of a regular ``.onnx`` file (its
    external data, if any, read from beside it). A path that is no regular file (a FIFO, a device
    such as ``/dev/null``, a directory), an empty or oversized file, or bytes that are no model
    are refused without blocking."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, str | os.PathLike):
        raise _model_error(type(model).__name__, "import_model takes an onnx.ModelProto or a path")
    path = Path(model)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then says what it is.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise _model_error(str(path), f"cannot be read: {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _model_error(str(path), "is not a regular file (a FIFO, device or directory)")
    with os.fdopen(fd, "rb") as f:
        if st.st_size == 0:
            raise _model_error(str(path), "is an empty file, not a model")
        if st.st_size > MAX_FILE_BYTES:
            raise _model_error(
                str(path), f"is {st.st_size} bytes, beyond the {MAX_FILE_BYTES} a model can hold"
            )
        data = f.read(MAX_FILE_BYTES + 1)
    try:
        proto = onnx.load_model_from_string(data)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
            onnx.external_data_helper.load_external_data_for_model(proto, str(path.parent))
    except Exception as err:  # protobuf's DecodeError, missing external data, ...
        raise _model_error(str(path), f"cannot be read: {err}") from err
    return proto


def opset(proto: Any) -> int:
    """The default-domain opset of ``proto`` (0 when it imports only other domains), refused
    when the model imports none, or one outside what the importer implements (``MIN_OPSET`` to
    onnx's own latest). A domain imported twice at one version is one import (skl2onnx writes
    the default domain twice, both 17, and ONNX Runtime accepts it); at two versions it is
    refused, naming both."""
    if not proto.opset_import:
        raise _model_error("opset_import", "the model imports no opset at all")
    versions = imports(proto)
    latest = int(onnx.defs.onnx_opset_version())
    version = versions.get("")
    if version is None:
        return 0  # only other domains: each of their nodes is refused by its domain
    if not MIN_OPSET <= version <= latest:
        raise _model_error(
            "opset_import",
            f"default-domain opset {version}; the importer implements {MIN_OPSET} to {latest}",
        )
    return version


def imports(proto: Any) -> dict[str, int]:
    """Each imported domain's version (``"ai.onnx"`` spelled ``""``), a domain imported twice
    at the same version counted once; two versions of one domain are refused."""
    found: dict[str, int] = {}
    for e in proto.opset_import:
        domain = "" if e.domain in ("", "ai.onnx") else str(e.domain)
        version = int(e.version)
        seen = found.setdefault(domain, version)
        if seen != version:
            raise _model_error(
                "opset_import",
                f"the {'default' if not domain else repr(domain)} domain is imported at two "
                f"versions, {seen} and {version}",
            )
    return found


def check_graph(graph: Any) -> None:
    """Refuse a graph in which a value is defined twice: by two nodes, or by a node and a graph
    input or initializer (ONNX graphs are single-assignment)."""
    given = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    seen: set[str] = set()
    for i, p in enumerate(graph.node):
        for out in p.output:
            why = (
                "is produced by two nodes"
                if out in seen
                else "is also a graph input or initializer"
                if out in given
                else None
            )
            if why is not None:
                raise UnsupportedOnnx(p.name or f"#{i}", str(p.op_type), "model", f"{out!r} {why}")
            if out:
                seen.add(out)


@cache
def elem_types() -> ElemTypes:
    table: dict[int, tuple[str, np.dtype[Any] | None]] = {}
    for code in onnx.TensorProto.DataType.values():
        name = onnx.TensorProto.DataType.Name(code)
        try:
            table[int(code)] = (name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)))
        except (KeyError, TypeError, ValueError):
            table[int(code)] = (name, None)
    return table


def elem(vi: Any, where: str) -> tuple[str, np.dtype[Any], DType]:
    """A tensor value info's element type: its ONNX name, numpy dtype and poot dtype. int64 is
    held as I32 (a slot that range-checks every value, see ``Arg.wide``); any other type poot
    lacks is refused."""
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedOnnx(
            vi.name, where, "dtype", f"a value of {kind or 'no'} type; poot takes tensors"
        )
    code = vi.type.tensor_type.elem_type
    name, np_dtype = elem_types().get(code, (f"type {code}", None))
    if np_dtype is not None and np_dtype == np.int64:
        return name, np_dtype, DType.I32
    dtype = DType.from_numpy(np_dtype) if np_dtype is not None else None
    if dtype is None or np_dtype is None:
        raise UnsupportedOnnx(vi.name, where, "dtype", f"{name}, which poot has no type for")
    return name, np_dtype, dtype


def symbols(vi: Any) -> tuple[str | None, ...]:
    """The symbolic name of each axis of a tensor value info (None for a static or an unnamed
    one); empty when the rank is unknown."""
    tt = vi.type.tensor_type
    if vi.type.WhichOneof("value") != "tensor_type" or not tt.HasField("shape"):
        return ()
    # A dim_param that is no identifier ("?", as some exporters write) names no dim.
    return tuple(
        str(d.dim_param)
        if d.WhichOneof("value") == "dim_param" and _SYMBOL.match(d.dim_param)
        else None
        for d in tt.shape.dim
    )


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")


def dims(
    vi: Any, where: str, given: tuple[int, ...] | None, bound_dims: Mapping[str, int]
) -> tuple[int, ...]:
    """The static shape of a graph input: its declared extents, with each dynamic one fixed by
    ``given`` (the whole shape, from ``shapes=``) or by its symbol in ``bound_dims``. An axis
    left dynamic is refused, naming the input and the axis."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        if given is not None:
            return given
        raise UnsupportedOnnx(
            vi.name,
            where,
            "dynamic",
            f"the shape (even the rank) is unknown: fix it with "
            f"shapes={{{vi.name!r}: (...)}} or --shape {vi.name}=AxB",
        )
    declared = list(tt.shape.dim)
    syms = symbols(vi)
    if given is not None and len(given) != len(declared):
        raise UnsupportedOnnx(
            vi.name,
            where,
            "model",
            f"shapes= gives rank {len(given)}, the input has {len(declared)}",
        )
    out: list[int] = []
    for i, d in enumerate(declared):
        static = d.dim_value if d.WhichOneof("value") == "dim_value" and d.dim_value >= 0 else None
        sym = syms[i]
        want = given[i] if given is not None else None
        if want is None and sym is not None:
            want = bound_dims.get(sym)
        if static is not None and want is not None and want != static:
            raise UnsupportedOnnx(
                vi.name, where, "model", f"axis {i} is {static}; shapes= asks for {want}"
            )
        if static is None and want is None:
            what = f"{sym!r}" if sym else "unnamed"
            raise UnsupportedOnnx(
                vi.name,
                where,
                "dynamic",
                f"axis {i} ({what}) is dynamic: fix it with shapes= or --shape {sym or vi.name}=N",
            )
        out.append(int(static if static is not None else want))  # type: ignore[arg-type]
    return tuple(out)


def bound(vi: Any, value: Any) -> Array:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedOnnx(vi.name, "graph input", "dtype", f"a value of {kind or 'no'} type")
    name, np_dtype = elem_types().get(vi.type.tensor_type.elem_type, ("?", None))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow in the cast
            arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np_dtype)
    except (TypeError, ValueError, OverflowError, RuntimeWarning) as err:  # junk, or too large
        raise UnsupportedOnnx(
            vi.name, "graph input", "model", f"constants= binds it to {value!r}, not {name}: {err}"
        ) from None
    if np_dtype is None or arr.dtype != np_dtype:
        raise UnsupportedOnnx(
            vi.name, "graph input", "model", f"bound to a {arr.dtype} value, but it is {name}"
        )
    return arr


def array(t: Any, name: str, where: str) -> Array:
    try:
        return np.asarray(numpy_helper.to_array(t))
    except Exception as err:  # external data that is missing, a malformed tensor, ...
        raise UnsupportedOnnx(name, where, "model", f"its value cannot be read: {err}") from err


def node(index: int, p: Any) -> Node:
    attrs: dict[str, AttrValue | Unreadable] = {a.name: attr(a) for a in p.attribute}
    return Node(
        index,
        str(p.name),
        str(p.op_type),
        str(p.domain),
        tuple(str(x) for x in p.input),
        tuple(str(x) for x in p.output),
        attrs,
        p,
    )


def graph(g: Any) -> Graph:
    """A subgraph (an ``If`` branch): its nodes, outputs and initializers, decoded."""
    return Graph(
        tuple(node(i, p) for i, p in enumerate(g.node)),
        tuple(str(vi.name) for vi in g.output),
        {t.name: array(t, t.name, "initializer") for t in g.initializer},
    )


def attr(a: Any) -> AttrValue | Unreadable:
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
    if t == A.GRAPH:
        return graph(a.g)
    return Unreadable(f"{A.AttributeType.Name(t)} attribute")
