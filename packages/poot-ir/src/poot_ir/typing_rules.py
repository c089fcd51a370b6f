"""Type rules: the result type of every primitive, and validation of whole programs.

One function per primitive family. Each raises ``TypeCheckError`` naming the equation, the
primitive and the offending shapes, dtypes or parameters; nothing else escapes.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence

from poot_ir.core import (
    COMPARISONS,
    FLOAT_ONLY,
    PARAMS_OF,
    Atom,
    BroadcastParams,
    ConcatParams,
    ConvertParams,
    ConvParams,
    GatherParams,
    IotaParams,
    Literal,
    Params,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    Storage,
    TransposeParams,
    Var,
)
from poot_ir.dtypes import DType, TensorType
from poot_ir.errors import TypeCheckError
from poot_ir.window import conv_shape, reduce_window_shape

__all__ = ["DTYPES_OF", "infer_type", "validate"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


_ALL = frozenset(DType)
_NUMERIC = frozenset(d for d in DType if d.is_numeric)
_FLOAT = frozenset(d for d in DType if d.is_float)

#: The operand dtypes each primitive is defined on (what its type rule accepts); the ``cpu``
#: target admits exactly these.
DTYPES_OF: dict[Prim, frozenset[DType]] = {
    **{p: (_FLOAT if p in FLOAT_ONLY else _NUMERIC) for p in Prim if p.is_unary},
    **{p: _NUMERIC for p in Prim if p.is_binary},
    Prim.EQ: _ALL,
    Prim.REDUCE_SUM: _NUMERIC,
    Prim.REDUCE_MAX: _NUMERIC,
    Prim.MATMUL: _NUMERIC,
    Prim.CONV: _FLOAT,
    Prim.REDUCE_WINDOW_SUM: _FLOAT,
    Prim.REDUCE_WINDOW_MAX: _FLOAT,
    Prim.IOTA: _NUMERIC,
    **{p: _ALL for p in Prim if p.is_movement or p in (Prim.SELECT, Prim.CONVERT)},
}


def infer_type(
    prim: Prim, inputs: Sequence[Atom], params: Params, eqn: int | None = None
) -> TensorType:
    """The type of ``prim(*inputs, params)``, or a ``TypeCheckError`` saying what is wrong.

    A literal operand must hold a bit pattern of its dtype's width."""
    try:
        return _infer_type(prim, inputs, params, eqn)
    except ValueError:
        # str() refuses integers of more than sys.get_int_max_str_digits() digits, which a
        # message naming a huge parameter or shape would print.
        raise TypeCheckError(
            "a parameter or shape is too large to print (or to be a shape)", eqn, prim.value
        ) from None


def _infer_type(prim: Prim, inputs: Sequence[Atom], params: Params, eqn: int | None) -> TensorType:
    def fail(message: str) -> TypeCheckError:
        return TypeCheckError(message, eqn, prim.value)

    if not isinstance(params, PARAMS_OF[prim]):
        raise fail(f"takes {PARAMS_OF[prim].__name__}, got {type(params).__name__}")
    for i, atom in enumerate(inputs):
        if isinstance(atom, Literal) and not _fits(atom):
            raise fail(
                f"literal operand {i}: bit pattern {_bits(atom)} does not fit {atom.dtype.value}"
            )
    types = [a.type for a in inputs]

    def arity(n: int) -> None:
        if len(inputs) != n:
            raise fail(f"takes {n} operand(s), got {len(inputs)}")

    def var_operand(i: int) -> Var:
        a = inputs[i]
        if not isinstance(a, Var):
            raise fail(f"operand {i} must be a tensor, not a literal")
        return a

    if prim.is_unary:
        arity(1)
        t = var_operand(0).type
        if not t.dtype.is_numeric or (prim in FLOAT_ONLY and not t.dtype.is_float):
            raise fail(f"is not defined on {t.dtype.value} (operand {t})")
        return t

    if prim.is_binary:
        arity(2)
        if all(isinstance(a, Literal) for a in inputs):
            raise fail("needs at least one tensor operand; both are literals")
        a, b = types
        if a.dtype != b.dtype:
            raise fail(f"operand dtypes differ: {a} and {b}")
        if not (a.dtype.is_numeric or prim is Prim.EQ):
            raise fail(f"is not defined on {a.dtype.value}")
        shape = _binary_shape(inputs)
        if shape is None:
            raise fail(f"operand shapes differ: {a} and {b} (broadcast one with broadcast_in_dim)")
        return TensorType(shape, DType.BOOL if prim in COMPARISONS else a.dtype)

    match params:
        case ConvertParams(dtype=dtype):
            arity(1)
            return var_operand(0).type.with_dtype(dtype)
        case ReduceParams(axes=axes):
            arity(1)
            t = var_operand(0).type
            if not t.dtype.is_numeric:
                raise fail(f"is not defined on {t.dtype.value}")
            if list(axes) != sorted(set(axes)) or any(not 0 <= ax < t.rank for ax in axes):
                raise fail(f"axes {axes} must be sorted, distinct and within rank {t.rank} of {t}")
            return TensorType(tuple(d for i, d in enumerate(t.shape) if i not in axes), t.dtype)
        case GatherParams(axis=axis):
            arity(2)
            t = var_operand(0).type
            idx = var_operand(1).type
            if idx.dtype is not DType.I32:
                raise fail(f"indices must be i32, got {idx}")
            if not 0 <= axis < t.rank:
                raise fail(f"axis {axis} is outside rank {t.rank} of {t}")
            return TensorType(t.shape[:axis] + idx.shape + t.shape[axis + 1 :], t.dtype)
        case TransposeParams(perm=perm):
            arity(1)
            t = var_operand(0).type
            if sorted(perm) != list(range(t.rank)):
                raise fail(f"perm {perm} is not a permutation of the {t.rank} axes of {t}")
            return TensorType(tuple(t.shape[p] for p in perm), t.dtype)
        case ReshapeParams(shape=shape):
            arity(1)
            t = var_operand(0).type
            _check_shape(shape, fail)
            if math.prod(shape) != t.size:
                raise fail(
                    f"cannot reshape {t} ({t.size} elements) to {shape} ({math.prod(shape)} elements)"
                )
            return TensorType(shape, t.dtype)
        case BroadcastParams(shape=shape, dims=dims):
            arity(1)
            t = var_operand(0).type
            _check_shape(shape, fail)
            if len(dims) != t.rank or any(not 0 <= d < len(shape) for d in dims):
                raise fail(
                    f"dims {dims} must map each of the {t.rank} axes of {t} into rank {len(shape)}"
                )
            if any(b <= a for a, b in itertools.pairwise(dims)):
                raise fail(f"dims {dims} must be strictly increasing")
            for i, d in enumerate(dims):
                if t.shape[i] not in (1, shape[d]):
                    raise fail(
                        f"axis {i} of {t} (size {t.shape[i]}) cannot broadcast to size {shape[d]}"
                    )
            return TensorType(shape, t.dtype)
        case SliceParams(start=start, limit=limit, strides=strides):
            arity(1)
            t = var_operand(0).type
            if not len(start) == len(limit) == len(strides) == t.rank:
                raise fail(f"start, limit and strides must each have {t.rank} entries for {t}")
            for i, (s, lim, st, d) in enumerate(zip(start, limit, strides, t.shape, strict=True)):
                if not 0 <= s <= lim <= d or st < 1:
                    raise fail(
                        f"axis {i}: need 0 <= start {s} <= limit {lim} <= size {d} and stride {st} >= 1"
                    )
            out = tuple(
                -(-(lim - s) // st) for s, lim, st in zip(start, limit, strides, strict=True)
            )
            return TensorType(out, t.dtype)
        case ConcatParams(axis=axis):
            if not inputs:
                raise fail("takes at least one operand")
            ts = [var_operand(i).type for i in range(len(inputs))]
            first = ts[0]
            if not 0 <= axis < first.rank:
                raise fail(f"axis {axis} is outside rank {first.rank} of {first}")
            for t in ts[1:]:
                same = t.rank == first.rank and all(
                    x == y
                    for i, (x, y) in enumerate(zip(t.shape, first.shape, strict=True))
                    if i != axis
                )
                if t.dtype != first.dtype or not same:
                    raise fail(f"operands {first} and {t} differ outside axis {axis}")
            total = sum(t.shape[axis] for t in ts)
            return TensorType(first.shape[:axis] + (total,) + first.shape[axis + 1 :], first.dtype)
        case IotaParams(shape=shape, dtype=dtype, axis=axis):
            arity(0)
            _check_shape(shape, fail)
            if not dtype.is_numeric or not 0 <= axis < len(shape):
                raise fail(
                    f"needs a numeric dtype and an axis within {shape}, got {dtype.value}, axis {axis}"
                )
            return TensorType(shape, dtype)
        case ConvParams():
            arity(2)
            x, w = var_operand(0).type, var_operand(1).type
            if x.dtype != w.dtype or not x.dtype.is_float:
                raise fail(f"operands must share a floating dtype: {x} and {w}")
            conv = conv_shape(x.shape, w.shape, params)
            if isinstance(conv, str):
                raise fail(f"{conv} (x {x}, w {w})")
            return TensorType(conv, x.dtype)
        case ReduceWindowParams():
            arity(1)
            t = var_operand(0).type
            if not t.dtype.is_float:
                raise fail(f"is not defined on {t.dtype.value}")
            pooled = reduce_window_shape(t.shape, params)
            if isinstance(pooled, str):
                raise fail(f"{pooled} (operand {t})")
            return TensorType(pooled, t.dtype)
        case _:
            pass

    if prim is Prim.SELECT:
        arity(3)
        pred = var_operand(0).type
        if pred.dtype is not DType.BOOL:
            raise fail(f"predicate must be bool, got {pred}")
        a, b = types[1], types[2]
        if a.dtype != b.dtype:
            raise fail(f"branch dtypes differ: {a} and {b}")
        for i in (1, 2):
            if isinstance(inputs[i], Var) and types[i].shape != pred.shape:
                raise fail(f"branch {types[i]} does not match predicate {pred}")
        return TensorType(pred.shape, a.dtype)

    if prim is Prim.DYNAMIC_UPDATE_SLICE:
        if len(inputs) < 2:
            raise fail("takes an operand, an update and one start per axis")
        t = var_operand(0).type
        u = var_operand(1).type
        starts = inputs[2:]
        if (
            u.dtype != t.dtype
            or u.rank != t.rank
            or any(x > y for x, y in zip(u.shape, t.shape, strict=True))
        ):
            raise fail(f"update {u} does not fit operand {t}")
        if len(starts) != t.rank:
            raise fail(f"needs {t.rank} start indices, got {len(starts)}")
        for ax, st_atom in enumerate(starts):
            if st_atom.type != TensorType((), DType.I32):
                raise fail(f"start {ax} must be an i32 scalar, got {st_atom.type}")
            if isinstance(st_atom, Literal):
                v = st_atom.as_int()
                if not 0 <= v <= t.shape[ax] - u.shape[ax]:
                    raise fail(f"literal start {v} on axis {ax} places {u} outside {t}")
        return t

    if prim is Prim.MATMUL:
        arity(2)
        a, b = var_operand(0).type, var_operand(1).type
        if a.dtype != b.dtype or not a.dtype.is_numeric:
            raise fail(f"operands must share a numeric dtype: {a} and {b}")
        if (
            a.rank < 2
            or a.rank != b.rank
            or a.shape[:-2] != b.shape[:-2]
            or a.shape[-1] != b.shape[-2]
        ):
            raise fail(f"cannot contract {a} with {b} (equal batch axes, a[-1] == b[-2])")
        return TensorType(a.shape[:-1] + (b.shape[-1],), a.dtype)

    raise fail("has no type rule")  # unreachable while every Prim has a rule above


def _binary_shape(inputs: Sequence[Atom]) -> tuple[int, ...] | None:
    shapes = {a.type.shape for a in inputs if isinstance(a, Var)}
    return shapes.pop() if len(shapes) == 1 else None


def _fits(lit: Literal) -> bool:
    bits = lit.bits
    if lit.dtype is DType.BOOL:  # a bool byte other than 0 or 1 would leak through select
        return bits in (0, 1)
    return isinstance(bits, int) and 0 <= bits < 1 << (8 * lit.dtype.itemsize)


def _bits(lit: Literal) -> str:
    # hex, because str() of a huge integer raises
    return f"{lit.bits:#x}" if isinstance(lit.bits, int) else repr(lit.bits)


def _show(value: object, show: Callable[[object], str] = str) -> str:
    """``show(value)``, or a placeholder when it holds an integer too long for str()."""
    try:
        return show(value)
    except ValueError:
        return "(too large to print)"


def _check_shape(shape: tuple[int, ...], fail: Callable[[str], TypeCheckError]) -> None:
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise fail(f"shape {shape} must be non-negative integers")


def validate(program: Program) -> Program:
    """Check a whole program: names, SSA order, every equation's type, results and state
    updates. Returns the program unchanged, or raises ``TypeCheckError``."""
    defined: dict[int, Var] = {}
    names: set[str] = set()

    def define(v: Var, where: str, eqn: int | None = None, prim: str | None = None) -> None:
        if v.id in defined:
            raise TypeCheckError(f"{where}: %{v.id} is defined twice", eqn, prim)
        defined[v.id] = v

    def use(a: Atom, where: str, eqn: int | None = None, prim: str | None = None) -> None:
        if isinstance(a, Var) and defined.get(a.id) != a:
            raise TypeCheckError(
                f"{where}: %{a.id} is used before it is defined (or with another type)", eqn, prim
            )

    for arg in program.args:
        if not _NAME.match(arg.name):
            raise TypeCheckError(f"argument name {arg.name!r} is not an identifier")
        if arg.name in names:
            raise TypeCheckError(f"argument {arg.name!r} is declared twice")
        names.add(arg.name)
        where = f"argument {arg.name!r}"
        if not all(isinstance(d, int) and d >= 0 for d in arg.var.type.shape):
            raise TypeCheckError(
                f"{where}: shape {_show(arg.var.type.shape)} must be non-negative integers"
            )
        if arg.wide and (arg.storage is not Storage.SLOT or arg.var.dtype is not DType.I32):
            raise TypeCheckError(f"{where}: only an i32 slot takes int64 values")
        define(arg.var, where)
    for i, e in enumerate(program.eqns):
        for a in e.inputs:
            use(a, "operand", i, e.prim.value)
        if len(e.outputs) != 1:
            raise TypeCheckError(
                f"has {len(e.outputs)} outputs; every primitive has one", i, e.prim.value
            )
        expect = infer_type(e.prim, e.inputs, e.params, i)
        if e.out.type != expect:
            raise TypeCheckError(
                f"declares result {_show(e.out.type)}, but its type is {_show(expect)}",
                i,
                e.prim.value,
            )
        define(e.out, "result", i, e.prim.value)
    result_names: set[str] = set()
    for o in program.outputs:
        if not _NAME.match(o.name) or o.name in result_names:
            raise TypeCheckError(f"output name {o.name!r} is not a fresh identifier")
        result_names.add(o.name)
        use(o.var, f"output {o.name!r}")
    states = {a.name: a for a in program.args if a.storage is Storage.STATE}
    updated: set[str] = set()
    for u in program.updates:
        state_arg = states.get(u.state)
        if state_arg is None:
            raise TypeCheckError(f"update of {u.state!r}, which is not a state argument")
        if u.state in updated or u.state in result_names:
            raise TypeCheckError(
                f"state {u.state!r} is updated twice or shares its name with an output"
            )
        updated.add(u.state)
        use(u.var, f"update of {u.state!r}")
        if u.var.type != state_arg.var.type:
            raise TypeCheckError(
                f"state {u.state!r} is {_show(state_arg.var.type)} but its update is {_show(u.var.type)}"
            )
    missing = sorted(set(states) - updated)
    if missing:
        raise TypeCheckError(f"state argument(s) {missing} have no update")
    return program
