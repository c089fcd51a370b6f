"""The ONNX frontend's lowering context: ONNX values as program values or constants.

Nothing here imports onnx. ``poot_onnx`` decodes a model into ``Node`` records and numpy
arrays; the rules in ``poot_onnx.compute`` and ``poot_onnx.layout`` (run by
``poot_onnx.table.lower``) lower one node each through a ``Lowering``, with the helpers at the
end of this module.

An ONNX value is either a ``Var`` of the program being built or a ``Const``: an initializer, a
``Constant`` node, a graph input bound by the caller, or a result computed at import time. A
constant costs nothing until an equation needs it: then it becomes a weight named after its ONNX
value (a uniform one becomes a one-element weight and a ``broadcast_in_dim``), or, when it is
uniform, does not widen the broadcast and is not an initializer (or an initializer of one
element: a scalar constant), an inline literal. Integer
constants of dtypes poot lacks (int64 shapes, axes and indices) are read where a static value
is needed, computed at import by onnx's reference evaluator when every input of a node is
constant (``poot_onnx.folding``), and narrowed to i32 only where they index (``gather``),
after a range check.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from poot_ir.builder import Builder
from poot_ir.core import Atom, Literal, Var
from poot_ir.dtypes import DType
from poot_ir.errors import UnsupportedOnnx

__all__ = [
    "FLOATS",
    "NUMERIC",
    "Array",
    "AttrValue",
    "Blocked",
    "Const",
    "ElemTypes",
    "Graph",
    "Handler",
    "Kind",
    "Lowering",
    "LoweringRule",
    "Node",
    "Unreadable",
    "Value",
    "bcast",
    "check_dtype",
    "identifier",
    "norm_axes",
    "norm_axis",
    "reshape",
]

Array = np.ndarray[Any, np.dtype[Any]]
Kind = typing.Literal["op", "attribute", "dtype", "dynamic", "value", "model"]
#: An ONNX element type code's name and numpy dtype (None when numpy has none).
ElemTypes = Mapping[int, tuple[str, "np.dtype[Any] | None"]]

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_.]")


def identifier(name: str) -> str:
    """``name`` as a poot identifier: every other character becomes ``_``, and a name that does
    not start with a letter or ``_`` gets a leading ``_``."""
    s = _NOT_IDENT.sub("_", name)
    return s if s[:1].isascii() and (s[:1].isalpha() or s[:1] == "_") else "_" + s


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An attribute the importer does not decode (a graph, a sparse tensor, a type)."""

    what: str


@dataclass(frozen=True, slots=True)
class Graph:
    """A subgraph attribute (an ``If`` branch), decoded: its nodes, outputs and initializers."""

    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    initializers: Mapping[str, Array]


AttrValue = (
    int | float | str | Array | Graph | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]
)


class Blocked(Exception):
    """A node reads a value an earlier blocker left undefined: it is skipped, not blamed."""


@dataclass(frozen=True, slots=True)
class Node:
    """One ONNX node, decoded. An omitted optional input or output is ``""``."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, AttrValue | Unreadable]
    #: The NodeProto, for evaluating the node at import (``poot_onnx.folding``).
    proto: Any = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        """The node's name, or its index and first output when it has none."""
        if self.name:
            return self.name
        return f"#{self.index} -> {self.outputs[0]}" if self.outputs else f"#{self.index}"


@dataclass(frozen=True, slots=True, eq=False)
class Const:
    """A value known at import time. ``initializer`` constants become named weights (a
    one-element one may be a literal, ``Lowering.literal``) and are not folded through data
    movement (so their names survive)."""

    name: str
    value: Array
    initializer: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.value.shape)

    @property
    def dtype(self) -> DType | None:
        return DType.from_numpy(self.value.dtype)


Value = Var | Const


def _uniform(arr: Array, dtype: DType) -> bool:
    """Every element has the same bit pattern (so -0 and +0, or two NaNs, differ)."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    if flat.size == 0:
        return False
    bits = flat.view(dtype.bits_dtype)
    return bool(np.all(bits == bits[0]))


class Lowering:
    """The state of one import: the builder, the ONNX value table, the weights so far, and the
    node being lowered (for errors)."""

    def __init__(
        self, builder: Builder, opset: int, elem_types: ElemTypes, collect: bool = False
    ) -> None:
        self.b = builder
        self.opset = opset
        self.elem_types = elem_types
        self.env: dict[str, Value] = {}
        #: Keep going past a refusal (``collect``): each is recorded with the node it blames
        #: and its outputs are ``poisoned``, so nodes that read them are skipped.
        self.collect = collect
        self.blockers: list[UnsupportedOnnx] = []
        self.poisoned: set[str] = set()
        #: Ids of the I32 vars that hold ONNX int64 values (checked to fit at every step).
        self.wide: set[int] = set()
        #: The ONNX node each equation came from, by the equation's index.
        self.origins: dict[int, tuple[str, str]] = {}
        #: ONNX names of the int64 constants narrowed into the program (weights or literals).
        self.narrowed_names: set[str] = set()
        #: How many function bodies were inlined (``poot_onnx.functions``): their prefix.
        self.expansions = 0
        self.weights: dict[str, Array] = {}
        #: Values a constant ``Pad`` made by adding +0 around another value, by var id: that
        #: value and each axis's (before, after) widths, so a convolution can take the zeros
        #: into its own padding (``nn``) and the pad's equations go unread.
        self.zero_padded: dict[int, tuple[Var, tuple[tuple[int, int], ...]]] = {}
        #: Bytes of every value folded so far (``poot_onnx.folding``), held until the end.
        self.folded_bytes = 0
        self._materialized: dict[str, Var] = {}
        self._arg_names: set[str] = set()
        self.where: tuple[str, str] = ("", "model")
        self._node: Node | None = None

    # -- context and errors -----------------------------------------------------------------

    @property
    def node(self) -> Node:
        if self._node is None:
            raise self.fail("model", "no node is being lowered")
        return self._node

    def enter(self, node: Node | None, where: tuple[str, str] | None = None) -> None:
        self._node = node
        self.where = (node.label, node.op_type) if node is not None else where or ("", "model")

    def fail(self, kind: Kind, detail: str) -> UnsupportedOnnx:
        return UnsupportedOnnx(self.where[0], self.where[1], kind, detail)

    # -- arguments --------------------------------------------------------------------------

    def arg_name(self, onnx_name: str) -> str:
        """A fresh argument name for ``onnx_name``, deterministic in the order of requests."""
        base = identifier(onnx_name)
        name, k = base, 0
        while name in self._arg_names:
            k += 1
            name = f"{base}_{k}"
        self._arg_names.add(name)
        return name

    def slot(
        self, onnx_name: str, dtype: DType, shape: Sequence[int], wide: bool = False
    ) -> tuple[str, Var]:
        """A fresh slot argument for ``onnx_name``: its name and its value. A ``wide`` slot
        holds an ONNX int64 input as I32 and range-checks it at every step."""
        name = self.arg_name(onnx_name)
        v = self.b.slot(name, dtype, shape, wide=wide)
        if wide:
            self.wide.add(v.id)
        return name, v

    def weight(self, onnx_name: str, value: Array) -> Var:
        dtype = DType.from_numpy(value.dtype)
        if dtype is None:
            raise self.fail("dtype", f"{onnx_name!r} is {value.dtype}, which poot has no type for")
        name = self.arg_name(onnx_name)
        self.weights[name] = np.array(value, dtype=dtype.numpy, order="C", copy=True)
        return self.b.weight(name, dtype, value.shape)

    # -- attributes -------------------------------------------------------------------------

    def attr(self, name: str) -> AttrValue | None:
        v = self.node.attrs.get(name)
        if isinstance(v, Unreadable):
            raise self.fail("attribute", f"{name!r} is a {v.what}")
        return v

    def attr_int(self, name: str, default: int) -> int:
        v = self.attr(name)
        if v is None:
            return default
        if not isinstance(v, int):
            raise self.fail("attribute", f"{name!r} must be an int, got {v!r}")
        return v

    def attr_float(self, name: str, default: float) -> float:
        v = self.attr(name)
        if v is None:
            return default
        if not isinstance(v, float | int):
            raise self.fail("attribute", f"{name!r} must be a float, got {v!r}")
        return float(v)

    def attr_ints(self, name: str) -> tuple[int, ...] | None:
        v = self.attr(name)
        if v is None:
            return None
        if not isinstance(v, tuple) or not all(isinstance(x, int) for x in v):
            raise self.fail("attribute", f"{name!r} must be a list of ints, got {v!r}")
        return tuple(int(x) for x in v)

    def attr_tensor(self, name: str) -> Array | None:
        v = self.attr(name)
        if v is None:
            return None
        if not isinstance(v, np.ndarray):
            raise self.fail("attribute", f"{name!r} must be a tensor, got {v!r}")
        return v

    # -- inputs -----------------------------------------------------------------------------

    def has(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] != ""

    def value(self, i: int) -> Value:
        if not self.has(i):
            raise self.fail("model", f"input {i} is missing")
        name = self.node.inputs[i]
        v = self.env.get(name)
        if v is None and name in self.poisoned:
            raise Blocked(name)
        if v is None:
            raise self.fail("model", f"input {i} ({name!r}) is not defined before this node")
        return v

    def shape(self, i: int) -> tuple[int, ...]:
        return self.value(i).shape

    def const(self, i: int, what: str) -> Array:
        """The value of input ``i``, which must be known at import time."""
        v = self.value(i)
        if not isinstance(v, Const):
            raise self.fail(
                "dynamic",
                f"input {i} ({what}, {self.node.inputs[i]!r}) is computed at run time; poot needs "
                "a constant here (an initializer, a Constant node, or bind it with constants=)",
            )
        return v.value

    def ints(self, i: int, what: str) -> tuple[int, ...]:
        """Input ``i`` as a constant integer scalar or 1-D list."""
        arr = self.const(i, what)
        if arr.dtype.kind not in "iu" or arr.ndim > 1:
            raise self.fail("value", f"{what} must be integers of rank 0 or 1, got {arr.dtype}")
        return tuple(int(x) for x in arr.reshape(-1).tolist())

    def var(self, i: int) -> Var:
        """Input ``i`` as a program value (a constant becomes a weight)."""
        v = self.value(i)
        return v if isinstance(v, Var) else self.materialize(v)

    def materialize(self, c: Const) -> Var:
        hit = self._materialized.get(c.name)
        if hit is not None:
            return hit
        value, dtype = self.narrowed(c)
        if not c.initializer and value.size > 1 and _uniform(value, dtype):
            one = self.weight(c.name, value.reshape(-1)[:1].reshape(()))
            v = self.b.broadcast_in_dim(one, c.shape, ())
        else:
            v = self.weight(c.name, value)
        if value is not c.value:
            self.wide.add(v.id)
        self._materialized[c.name] = v
        return v

    def narrowed(self, c: Const) -> tuple[Array, DType]:
        """``c``'s value in a poot dtype: as it is, or an int64 constant as I32 after checking
        that every element fits (computed in int64 at import, narrowed where it is used)."""
        dtype = c.dtype
        if dtype is not None:
            return c.value, dtype
        if c.value.dtype != np.int64:
            raise self.fail("dtype", f"{c.name!r} is {c.value.dtype}, which poot has no type for")
        info = np.iinfo(np.int32)
        bad = (c.value < info.min) | (c.value > info.max)
        if np.any(bad):
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise self.fail(
                "value",
                f"int64 constant {c.name!r} holds {int(c.value[where])} at element {where}, "
                "beyond i32",
            )
        self.narrowed_names.add(c.name)
        return c.value.astype(np.int32), DType.I32

    def literal(self, c: Const) -> Literal | None:
        """``c`` as an inline scalar, when it is uniform and not an initializer, or when it is
        an initializer of one element.

        A one-element initializer is a scalar constant of the graph (an epsilon, GELU's 0.5, a
        reduction's ``-inf`` start), not a tensor of trained parameters, and real converters
        treat it as one (OpenVINO's ONNX frontend makes it a scalar ``Constant`` the graph
        compiler folds into the op). As a literal, the specification's literal rules apply to it
        (the FP16 range and mask-sentinel rules of ``poot_planner.fp16.narrowing``), which a weight
        escapes only to be refused at upload (``NarrowingRangeUpload``). A larger initializer,
        uniform or not, stays a weight under its own name."""
        if c.initializer and c.value.size != 1:
            return None
        if c.dtype is None and c.value.dtype != np.int64:
            return None
        value, dtype = self.narrowed(c)
        if not _uniform(value, dtype):
            return None
        return Literal.of(value.reshape(-1)[0], dtype)

    def index_var(self, i: int, size: int) -> Var:
        """Input ``i`` as i32 indices into an axis of ``size``: an i32 value, or a constant
        integer tensor (int64 too) whose entries lie in ``[-size, size)``."""
        v = self.value(i)
        if isinstance(v, Var):
            if v.dtype is not DType.I32:
                raise self.fail("dtype", f"indices must be i32 (or constant), got {v.type}")
            return v
        if v.value.dtype.kind not in "iu":
            raise self.fail("value", f"indices {v.name!r} are {v.value.dtype}, not integers")
        hit = self._materialized.get(v.name)
        if hit is not None:
            return hit
        self.check_indices(v.value, size, v.name)
        w = self.weight(v.name, v.value.astype(np.int32))
        self._materialized[v.name] = w
        return w

    def index_weight(self, name: str, indices: Sequence[int]) -> Var:
        """A new i32 weight of constant indices (computed by the importer)."""
        return self.weight(name, np.asarray(indices, dtype=np.int32).reshape(len(indices)))

    def check_indices(self, idx: Array, size: int, name: str) -> None:
        bad = (idx < -size) | (idx >= size)
        if np.any(bad):
            first = idx[bad].reshape(-1)[0]
            raise self.fail("value", f"index {first} in {name!r} is outside an axis of size {size}")

    def atoms(self, idxs: Sequence[int], extra: tuple[int, ...] | None = None) -> list[Atom]:
        """Inputs ``idxs`` as operands of a broadcasting primitive: values stay values, and a
        constant becomes a literal when it may (see ``literal``) and every constant together
        does not widen the broadcast of the values (and of the shape ``extra``, if given)."""
        vals = [self.value(i) for i in idxs]
        if extra is None and not any(isinstance(v, Var) for v in vals):
            vals[0] = self.var(idxs[0])
        var_shapes = [v.shape for v in vals if isinstance(v, Var)]
        if extra is not None:
            var_shapes.append(extra)
        target = np.broadcast_shapes(*var_shapes, *(v.shape for v in vals))
        inline = np.broadcast_shapes(*var_shapes) == target
        out: list[Atom] = []
        for i, v in zip(idxs, vals, strict=True):
            if isinstance(v, Var):
                out.append(v)
                continue
            lit = self.literal(v) if inline else None
            out.append(lit if lit is not None else self.var(i))
        return out

    # -- outputs ----------------------------------------------------------------------------

    def set(self, k: int, value: Value | Array | np.generic) -> None:
        """Define output ``k`` (an omitted output is dropped)."""
        outs = self.node.outputs
        if k >= len(outs) or not outs[k]:
            return
        if not isinstance(value, Var | Const):
            value = Const(outs[k], np.asarray(value))  # numpy may hand back a scalar
        self.env[outs[k]] = value

    def wants(self, k: int) -> bool:
        outs = self.node.outputs
        return k < len(outs) and outs[k] != ""


# -- what every rule shares -----------------------------------------------------------------

Handler = Callable[[Lowering, Node], None]


@dataclass(frozen=True, slots=True)
class LoweringRule:
    """How one op type lowers: ``handler``, and the attributes it reads (others are refused)."""

    handler: Handler
    attrs: frozenset[str] = frozenset()


def norm_axis(lo: Lowering, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise lo.fail("attribute", f"{what} {axis} is outside rank {rank}")
    return axis % rank


def norm_axes(lo: Lowering, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    norm = [norm_axis(lo, a, rank, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        raise lo.fail("attribute", f"axes {tuple(axes)} repeat an axis")
    return tuple(sorted(norm))


def bcast(b: Builder, v: Var, shape: tuple[int, ...]) -> Var:
    """numpy-style broadcast of ``v`` to ``shape`` (trailing axes aligned)."""
    if v.shape == shape:
        return v
    offset = len(shape) - v.type.rank
    return b.broadcast_in_dim(v, shape, tuple(range(offset, len(shape))))


def reshape(b: Builder, v: Var, shape: Sequence[int]) -> Var:
    shape = tuple(shape)
    return v if v.shape == shape else b.reshape(v, shape)


def check_dtype(lo: Lowering, v: Var, allowed: Sequence[DType], what: str) -> None:
    if v.dtype not in allowed:
        raise lo.fail(
            "dtype", f"{what} is {v.type}; poot lowers it for {[d.value for d in allowed]}"
        )


FLOATS = (DType.F32, DType.F16, DType.BF16)
#: The most steps a rule unrolls (a recurrence's sequence, TopK's k rounds). Each step is a few
#: equations; past a few thousand the program takes minutes to plan and, at a sequence length
#: from a model's static shape (10^7), memory runs out before any typed error could come.
MAX_UNROLLED = 4096


def check_unrolled(lo: Lowering, what: str, steps: int) -> None:
    """Refuse unrolling ``steps`` (naming ``what``) past ``MAX_UNROLLED``, before any is made."""
    if steps > MAX_UNROLLED:
        raise lo.fail("value", f"{what} {steps} would unroll past {MAX_UNROLLED} steps")


NUMERIC = (*FLOATS, DType.I32)
