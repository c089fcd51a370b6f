"""The ONNX frontend (package ``poot-onnx``): ``import_model`` turns a model into a poot
``Program`` and the values of its weights; ``check_model`` lists every blocker of a model at once.

It builds through ``poot_ir`` only (``import poot_ir`` does not import onnx; this package does),
and only the command line imports it: the planner and everything after take programs. Modules:
``reading`` (the file, opset, types and nodes), ``context`` (the import context, ``Lowering``),
``folding`` (nodes known at import, by onnx's reference evaluator), ``table`` (the op table and
the loop over nodes) and the rules by family (``compute``, ``layout``, ``logic``, ``nn``,
``norms``, ...; ``ml`` for the ``ai.onnx.ml`` operators skl2onnx emits for linear models,
scalers, normalizers and MLPs, see ``SUPPORTED_ML_OPS``).

- Graph inputs become slots, initializers become weights named after them, graph outputs become
  outputs; every name is made an identifier (``identifier``: characters outside
  ``[A-Za-z0-9_.]`` become ``_``) and de-duplicated with ``_1``, ``_2``, ... in graph order.
  ``Imported.inputs`` and ``Imported.outputs`` map the ONNX names to the program's.
- Dynamic dims are fixed with ``shapes=``: by input name (the whole shape) or by the symbol of a
  dim (``{"batch": 8}``); a symbol named in several inputs is bound once. An unbound dynamic dim
  is refused, naming the input and the axis.
- Element types: float32, float16, bfloat16, int32 and bool, and int64: an int64 input is an I32
  slot that checks every value fits at every step (``Arg.wide``), an int64 value known at
  import is computed in int64 and narrowed where it is used after a range check, and int64
  arithmetic at run time is refused. Any other type (float64, int8, strings, ...) is refused.
- Anything poot cannot express raises ``UnsupportedOnnx`` naming the node (name, op type), the
  kind of refusal and the facts, and how many more blockers the model has.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
from poot_ir.builder import Builder
from poot_ir.core import Program, Storage, Var
from poot_ir.errors import UnsupportedOnnx
from poot_ir.typing_rules import validate

from poot_onnx import reading
from poot_onnx.context import Const, Lowering, identifier
from poot_onnx.table import ML_OPS, OPS, STATIC_INPUTS, lower

__all__ = [
    "STATIC_INPUTS",
    "SUPPORTED_ML_OPS",
    "SUPPORTED_OPS",
    "Blocker",
    "Imported",
    "check_model",
    "identifier",
    "import_model",
]

#: The ONNX op types (default domain) the importer lowers.
SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(OPS))
#: The ``ai.onnx.ml`` op types the importer lowers (``poot_onnx.ml``).
SUPPORTED_ML_OPS: tuple[str, ...] = tuple(sorted(ML_OPS))

Model = onnx.ModelProto | str | os.PathLike[str]
Shapes = Mapping[str, Sequence[int] | int]


@dataclass(frozen=True, slots=True)
class Blocker:
    """One reason a model does not import, and every node it affects ("name (OpType)")."""

    kind: str
    op_type: str
    detail: str
    nodes: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.nodes[:5]) + (", ..." if len(self.nodes) > 5 else "")
        return f"{self.kind}: {self.detail} [{len(self.nodes)} node(s): {shown}]"


@dataclass(frozen=True, slots=True)
class Imported:
    """An imported model: the program, the value of each of its weights by argument name, the
    ONNX names of its slots and outputs (ONNX name -> program name), the ONNX node each
    equation came from (by equation index: its name and op type), the ONNX outputs that are
    int64 (the program computes them as I32), and each graph input bound by ``constants=``
    with its value as the model declares it (its ONNX element type)."""

    program: Program
    weights: dict[str, np.ndarray]
    inputs: dict[str, str]
    outputs: dict[str, str]
    origins: dict[int, tuple[str, str]]
    int64_outputs: frozenset[str] = frozenset()
    bound: dict[str, np.ndarray] = field(default_factory=dict)

    def origin(self, eqn: int) -> str:
        """Where equation ``eqn`` came from: "ONNX node 'name' (OpType)", or "" if unknown."""
        found = self.origins.get(eqn)
        return f"ONNX node {found[0]!r} ({found[1]})" if found else ""

    def results(self, got: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A step's results by ONNX output name, the int64 ones widened back to int64."""
        return {
            k: got[v].astype(np.int64) if k in self.int64_outputs else got[v]
            for k, v in self.outputs.items()
        }


def import_model(
    model: Model,
    *,
    name: str | None = None,
    constants: Mapping[str, Any] | None = None,
    shapes: Shapes | None = None,
) -> Imported:
    """Import ``model`` (an ``onnx.ModelProto``, or the path of a ``.onnx`` file).

    ``name`` names the program (default: the graph's name, else ``"onnx"``). ``constants``
    binds graph inputs to values known at import time (by ONNX name; each must match the
    input's element type): they become constants, not slots. ``shapes`` fixes dynamic dims
    (see the module).

    Raises ``UnsupportedOnnx`` for anything poot cannot express (the first blocker, saying how
    many more ``check_model`` would list), a file that cannot be read included.
    """
    lo, imported = _import(model, name, constants, shapes)
    if lo.blockers:
        first = lo.blockers[0]
        more = len(lo.blockers) - 1
        if more:
            raise UnsupportedOnnx(
                first.node,
                first.op_type,
                first.kind,
                f"{first.detail} (and {more} more blocker(s): `poot import --check` lists them)",
            )
        raise first
    assert imported is not None  # no blockers means the program was built
    return imported


def check_model(
    model: Model, *, constants: Mapping[str, Any] | None = None, shapes: Shapes | None = None
) -> tuple[Blocker, ...]:
    """Every blocker of ``model`` (empty when it imports): each reason once, with every node it
    affects. A model that cannot be read at all raises ``UnsupportedOnnx``."""
    lo, _ = _import(model, None, constants, shapes)
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for err in lo.blockers:
        detail = err.detail if err.kind != "op" else f"op type {err.op_type!r}: {err.detail}"
        key = (err.kind, err.op_type, detail)
        grouped.setdefault(key, []).append(f"{err.node} ({err.op_type})")
    return tuple(Blocker(k, op, d, tuple(nodes)) for (k, op, d), nodes in grouped.items())


def _import(
    model: Model,
    name: str | None,
    constants: Mapping[str, Any] | None,
    shapes: Shapes | None,
) -> tuple[Lowering, Imported | None]:
    proto = reading.load(model)
    graph = proto.graph
    b = Builder(name or identifier(graph.name or "onnx"))
    lo = Lowering(b, reading.opset(proto), reading.elem_types(), collect=True)
    reading.check_graph(graph)
    bound = dict(_mapping(constants, "constants"))

    inits: dict[str, Any] = {t.name: t for t in graph.initializer}
    for t in graph.sparse_initializer:
        raise UnsupportedOnnx(t.values.name, "initializer", "value", "a sparse initializer")
    declared = [vi for vi in graph.input if vi.name not in inits]  # IR < 4 lists initializers
    for key in bound:
        if key not in {vi.name for vi in declared}:
            raise UnsupportedOnnx(key, "graph input", "model", "constants= binds no graph input")
    given, symbols = _bind_shapes(declared, _mapping(shapes, "shapes"))
    inputs: dict[str, str] = {}
    values: dict[str, np.ndarray] = {}
    for vi in declared:
        if vi.name in bound:
            values[vi.name] = reading.bound(vi, bound[vi.name])
            lo.env[vi.name] = Const(vi.name, values[vi.name])
            continue
        try:
            _, np_dtype, dtype = reading.elem(vi, "graph input")
            dims = reading.dims(vi, "graph input", given.get(vi.name), symbols)
        except UnsupportedOnnx as err:
            lo.blockers.append(err)
            lo.poisoned.add(vi.name)
            continue
        inputs[vi.name], v = lo.slot(vi.name, dtype, dims, wide=np_dtype == np.int64)
        lo.env[vi.name] = v
    for key, t in inits.items():
        lo.env[key] = Const(key, reading.array(t, key, "initializer"), initializer=True)

    lower(lo, [reading.node(i, p) for i, p in enumerate(graph.node)])

    outputs: dict[str, str] = {}
    int64_outputs: set[str] = set()
    taken: set[str] = set()
    for vi in graph.output:
        lo.enter(None, (vi.name, "graph output"))
        value = lo.env.get(vi.name)
        if value is None:
            if vi.name not in lo.poisoned:
                lo.blockers.append(lo.fail("model", "no node computes this graph output"))
            continue
        try:
            var = value if isinstance(value, Var) else lo.materialize(value)
        except UnsupportedOnnx as err:
            lo.blockers.append(err)
            continue
        if var.id in lo.wide:
            int64_outputs.add(vi.name)
        out, k = identifier(vi.name), 0
        while out in taken:
            k += 1
            out = f"{identifier(vi.name)}_{k}"
        taken.add(out)
        b.output(out, var)
        outputs[vi.name] = out
    if lo.blockers:
        return lo, None
    # a zero Pad taken into a convolution's padding (``nn``) leaves its own equations behind,
    # and its fill a weight nothing reads
    program, kept = b.build_live()
    origins = {new: lo.origins[old] for new, old in enumerate(kept) if old in lo.origins}
    program, weights = _read_weights(program, lo.weights)
    imported = Imported(
        program, weights, inputs, outputs, origins, frozenset(int64_outputs), values
    )
    return lo, imported


def _read_weights(
    program: Program, weights: dict[str, np.ndarray]
) -> tuple[Program, dict[str, np.ndarray]]:
    """``program`` without the weight arguments no equation or result reads, and ``weights``
    without their values: the device is handed every weight of its program."""
    read = {a.id for e in program.eqns for a in e.inputs if isinstance(a, Var)}
    read |= {v.id for _, v in program.results()}
    unread = {a.name for a in program.args if a.storage is Storage.WEIGHT and a.var.id not in read}
    if not unread:
        return program, dict(weights)
    args = tuple(a for a in program.args if a.name not in unread)
    kept = {k: v for k, v in weights.items() if k not in unread}
    return validate(replace(program, args=args)), kept


def _mapping(given: object, what: str) -> Mapping[str, Any]:
    """``constants=`` or ``shapes=``: None, or a mapping keyed by name (anything else refused)."""
    if given is None:
        return {}
    if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
        raise UnsupportedOnnx(what, "argument", "model", f"{what}= must map names, got {given!r}")
    return given


def _bind_shapes(
    declared: Sequence[Any], shapes: Shapes
) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """``shapes`` split into whole shapes by input name and extents by dim symbol, each symbol
    bound once (from a whole shape or by name) and consistently."""
    names = {vi.name: vi for vi in declared}
    syms = {s for vi in declared for s in reading.symbols(vi) if s}
    given: dict[str, tuple[int, ...]] = {}
    symbols: dict[str, int] = {}

    def bind(sym: str, n: int, why: str) -> None:
        if symbols.setdefault(sym, n) != n:
            raise UnsupportedOnnx(
                sym,
                "graph input",
                "model",
                f"dim {sym!r} is bound to {symbols[sym]} and {n} ({why})",
            )

    for key, value in shapes.items():
        dims = (value,) if isinstance(value, int) else tuple(value) if _listlike(value) else (-1,)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise UnsupportedOnnx(
                key, "graph input", "model", f"shapes= gives {value!r}; extents are ints >= 0"
            )
        if key in names:
            given[key] = dims
            for sym, d in zip(reading.symbols(names[key]), dims, strict=False):
                if sym:
                    bind(sym, d, f"by the shape of {key!r}")
        elif key in syms and len(dims) == 1:
            bind(key, dims[0], "by name")
        else:
            raise UnsupportedOnnx(
                key, "graph input", "model", "shapes= names no graph input and no dim symbol"
            )
    return given, symbols


def _listlike(value: object) -> bool:
    return isinstance(value, tuple | list)
