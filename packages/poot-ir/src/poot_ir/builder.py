"""``Builder``: build a program one typed equation at a time.

Every primitive has a method of the same name. Each equation is type-checked as it is added, so
a mistake is reported at the line that made it, naming the equation index. Binary methods take
Python scalars (they become inline literals of the other operand's dtype) and broadcast
numpy-style by inserting ``broadcast_in_dim`` equations.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from numbers import Integral
from typing import Any, TypeVar

import numpy as np

from poot_ir.budget import check_dims
from poot_ir.core import (
    Arg,
    Atom,
    BroadcastParams,
    ConcatParams,
    ConvertParams,
    ConvParams,
    Eqn,
    GatherParams,
    IotaParams,
    Literal,
    NoParams,
    Output,
    Params,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    Storage,
    TransposeParams,
    Update,
    Var,
)
from poot_ir.dtypes import DType, TensorType
from poot_ir.errors import PootError, TypeCheckError
from poot_ir.typing_rules import _show, infer_type, validate

__all__ = ["Builder", "Operand"]

#: What a binary method accepts as an operand.
Operand = Var | Literal | float | int | bool


class Builder:
    """Builds one ``Program``. Not thread-safe; ``build()`` may be called more than once."""

    def __init__(self, name: str) -> None:
        _check_name(name, "Builder: the program name")
        self.name = name
        self._args: list[Arg] = []
        self._eqns: list[Eqn] = []
        self._outputs: list[Output] = []
        self._updates: list[Update] = []
        self._vars: dict[int, Var] = {}

    # -- arguments and results --------------------------------------------------------------

    def weight(self, name: str, dtype: DType, shape: Sequence[int]) -> Var:
        """An argument uploaded once and constant across steps."""
        return self._arg(name, dtype, shape, Storage.WEIGHT)

    def slot(self, name: str, dtype: DType, shape: Sequence[int], *, wide: bool = False) -> Var:
        """A per-step input (an activation), rewritten in place before each step. A ``wide``
        I32 slot also takes int64 arrays whose every value fits I32 (``Arg.wide``)."""
        return self._arg(name, dtype, shape, Storage.SLOT, wide)

    @property
    def eqn_count(self) -> int:
        """How many equations so far (the ONNX importer maps each back to its node)."""
        return len(self._eqns)

    def state(self, name: str, dtype: DType, shape: Sequence[int]) -> Var:
        """A value carried across steps; give its next value with ``update``."""
        return self._arg(name, dtype, shape, Storage.STATE)

    def output(self, name: str, value: Var) -> None:
        _check_name(name, "output name")
        self._check_own(value, f"output {name!r}")
        if name in self._result_names():
            raise TypeCheckError(f"output {name!r}: the name is already a result of {self.name!r}")
        self._outputs.append(Output(name, value))

    def update(self, state: Var, value: Var) -> None:
        """``value`` replaces the state argument ``state`` after each step."""
        arg = next((a for a in self._args if a.var is state and a.storage is Storage.STATE), None)
        if arg is None:
            raise TypeCheckError(f"update: {state!r} is not a state argument of {self.name!r}")
        where = f"update of {arg.name!r}"
        self._check_own(value, where)
        if arg.name in self._result_names():
            raise TypeCheckError(f"{where}: {arg.name!r} is already a result of {self.name!r}")
        if value.type != state.type:
            raise TypeCheckError(
                f"{where}: the state is {state.type} but its update is {value.type}"
            )
        self._updates.append(Update(arg.name, value))

    def build(self) -> Program:
        return validate(
            Program(
                self.name,
                tuple(self._args),
                tuple(self._eqns),
                tuple(self._outputs),
                tuple(self._updates),
            )
        )

    def build_live(self) -> tuple[Program, tuple[int, ...]]:
        """``build`` without the equations no result or state update reads
        (``Program.live_equations``), and, for each kept one, its index in the order emitted:
        a frontend renumbers what it recorded by equation index (an ONNX node, a JAX equation)
        with it. A frontend leaves such equations behind when it decides something at import
        (a ``where`` on a known mask, a zero ``Pad`` taken into a convolution's padding)."""
        program = self.build()
        kept = tuple(sorted(program.live_equations()))
        if len(kept) == len(program.eqns):
            return program, kept
        return validate(replace(program, eqns=tuple(program.eqns[i] for i in kept))), kept

    def literal(self, value: float | int | bool, dtype: DType) -> Literal:
        if not isinstance(dtype, DType):
            raise TypeCheckError(f"literal: dtype {_show(dtype, repr)} is not a DType")
        try:
            return Literal.of(value, dtype)
        except (ValueError, TypeError, OverflowError) as err:
            raise TypeCheckError(f"literal {_show(value, repr)}: {_show(err)}") from None

    # -- elementwise ------------------------------------------------------------------------

    def neg(self, x: Var) -> Var:
        return self._emit(Prim.NEG, (x,))

    def recip(self, x: Var) -> Var:
        return self._emit(Prim.RECIP, (x,))

    def exp(self, x: Var) -> Var:
        return self._emit(Prim.EXP, (x,))

    def log(self, x: Var) -> Var:
        return self._emit(Prim.LOG, (x,))

    def tanh(self, x: Var) -> Var:
        return self._emit(Prim.TANH, (x,))

    def erf(self, x: Var) -> Var:
        return self._emit(Prim.ERF, (x,))

    def sqrt(self, x: Var) -> Var:
        return self._emit(Prim.SQRT, (x,))

    def abs(self, x: Var) -> Var:
        return self._emit(Prim.ABS, (x,))

    def add(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.ADD, a, b)

    def sub(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.SUB, a, b)

    def mul(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.MUL, a, b)

    def div(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.DIV, a, b)

    def max(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.MAX, a, b)

    def min(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.MIN, a, b)

    def ge(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.GE, a, b)

    def gt(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.GT, a, b)

    def eq(self, a: Operand, b: Operand) -> Var:
        return self._binary(Prim.EQ, a, b)

    def select(self, pred: Var, a: Operand, b: Operand) -> Var:
        """``a`` where ``pred`` is true, else ``b``; the predicate and the branches broadcast
        numpy-style."""
        index, prim = len(self._eqns), Prim.SELECT
        self._check_own(pred, "predicate", index, prim)
        dtype = self._dtype_of(a, b, prim)
        operands = [pred, *(self._atom(v, dtype, prim) for v in (a, b))]
        shape = self._broadcast_shape(operands, prim)
        operands = [self._broadcast_to(v, shape, prim) for v in operands]
        return self._emit(prim, tuple(operands))

    def convert(self, x: Var, dtype: DType) -> Var:
        return self._emit(Prim.CONVERT, (x,), ConvertParams(dtype))

    # -- reductions -------------------------------------------------------------------------

    def reduce_sum(self, x: Var, axes: int | Sequence[int]) -> Var:
        """Sum over ``axes`` (negative axes count from the end); they leave the shape."""
        axes = self._axes(x, axes, Prim.REDUCE_SUM)
        return self._emit(Prim.REDUCE_SUM, (x,), ReduceParams(axes))

    def reduce_max(self, x: Var, axes: int | Sequence[int]) -> Var:
        axes = self._axes(x, axes, Prim.REDUCE_MAX)
        return self._emit(Prim.REDUCE_MAX, (x,), ReduceParams(axes))

    # -- data movement ----------------------------------------------------------------------

    def gather(self, table: Var, indices: Var, axis: int = 0) -> Var:
        """``numpy.take(table, indices, axis)`` with i32 indices."""
        axis = self._axis(table, axis, Prim.GATHER)
        return self._emit(Prim.GATHER, (table, indices), GatherParams(axis))

    def transpose(self, x: Var, perm: Sequence[int]) -> Var:
        """Result axis ``i`` is operand axis ``perm[i]`` (negative entries count from the end)."""
        perm = tuple(self._axis(x, p, Prim.TRANSPOSE) for p in perm)
        return self._emit(Prim.TRANSPOSE, (x,), TransposeParams(perm))

    def reshape(self, x: Var, shape: Sequence[int]) -> Var:
        return self._emit(Prim.RESHAPE, (x,), ReshapeParams(_ints(shape)))

    def broadcast_in_dim(self, x: Var, shape: Sequence[int], dims: Sequence[int]) -> Var:
        params = BroadcastParams(_ints(shape), _ints(dims))
        return self._emit(Prim.BROADCAST_IN_DIM, (x,), params)

    def slice(
        self,
        x: Var,
        start: Sequence[int],
        limit: Sequence[int],
        strides: Sequence[int] | None = None,
    ) -> Var:
        st = _ints(strides) if strides is not None else (1,) * len(tuple(start))
        return self._emit(Prim.SLICE, (x,), SliceParams(_ints(start), _ints(limit), st))

    def concat(self, xs: Sequence[Var], axis: int) -> Var:
        if not xs:
            raise TypeCheckError("takes at least one operand", len(self._eqns), Prim.CONCAT.value)
        axis = self._axis(xs[0], axis, Prim.CONCAT)
        return self._emit(Prim.CONCAT, tuple(xs), ConcatParams(axis))

    def dynamic_update_slice(self, operand: Var, update: Var, starts: Sequence[Var | int]) -> Var:
        """``operand`` with ``update`` written at ``starts`` (i32 scalars or Python ints)."""
        st = tuple(s if isinstance(s, Var) else self._int_literal(s) for s in starts)
        return self._emit(Prim.DYNAMIC_UPDATE_SLICE, (operand, update, *st))

    def iota(self, shape: Sequence[int], dtype: DType, axis: int) -> Var:
        """Counts 0, 1, 2, ... along ``axis`` of ``shape`` (a negative axis counts from the end)."""
        shape, axis = _ints(shape), _int(axis)
        axis = axis + len(shape) if -len(shape) <= axis < 0 else axis
        return self._emit(Prim.IOTA, (), IotaParams(shape, dtype, axis))

    # -- contraction ------------------------------------------------------------------------

    def matmul(self, a: Var, b: Var) -> Var:
        """Batched matrix product over the last two axes; batch axes must be equal."""
        return self._emit(Prim.MATMUL, (a, b))

    def conv(
        self,
        x: Var,
        w: Var,
        strides: Sequence[int] | None = None,
        padding: Sequence[tuple[int, int]] | None = None,
        lhs_dilation: Sequence[int] | None = None,
        rhs_dilation: Sequence[int] | None = None,
        groups: int = 1,
    ) -> Var:
        """``conv_general_dilated`` of ``x [N, C, *S]`` by ``w [O, C/groups, *K]`` (the ONNX
        layout; ``poot_ir.window``). Each per-spatial-axis argument defaults to 1s (padding to
        0s)."""
        k = max(len(x.shape) - 2, 0)
        pads = _pairs(padding, k)
        params = ConvParams(
            _ints(strides or (1,) * k),
            tuple(lo for lo, _ in pads),
            tuple(hi for _, hi in pads),
            _ints(lhs_dilation or (1,) * k),
            _ints(rhs_dilation or (1,) * k),
            _int(groups),
        )
        return self._emit(Prim.CONV, (x, w), params)

    # -- window reductions ------------------------------------------------------------------

    def reduce_window_sum(
        self,
        x: Var,
        window: Sequence[int],
        strides: Sequence[int] | None = None,
        padding: Sequence[tuple[int, int]] | None = None,
        dilation: Sequence[int] | None = None,
    ) -> Var:
        """Sums over windows of every axis of ``x`` (full rank, like lax), padding with 0."""
        return self._window(Prim.REDUCE_WINDOW_SUM, x, window, strides, padding, dilation)

    def reduce_window_max(
        self,
        x: Var,
        window: Sequence[int],
        strides: Sequence[int] | None = None,
        padding: Sequence[tuple[int, int]] | None = None,
        dilation: Sequence[int] | None = None,
    ) -> Var:
        """Maxima over windows of every axis of ``x`` (full rank), padding with -inf."""
        return self._window(Prim.REDUCE_WINDOW_MAX, x, window, strides, padding, dilation)

    # -- internals --------------------------------------------------------------------------

    def _window(
        self,
        prim: Prim,
        x: Var,
        window: Sequence[int],
        strides: Sequence[int] | None,
        padding: Sequence[tuple[int, int]] | None,
        dilation: Sequence[int] | None,
    ) -> Var:
        r = len(x.shape)
        pads = _pairs(padding, r)
        params = ReduceWindowParams(
            _ints(window),
            _ints(strides or (1,) * r),
            tuple(lo for lo, _ in pads),
            tuple(hi for _, hi in pads),
            _ints(dilation or (1,) * r),
        )
        return self._emit(prim, (x,), params)

    def _arg(
        self, name: str, dtype: DType, shape: Sequence[int], storage: Storage, wide: bool = False
    ) -> Var:
        _check_name(name, "argument name")
        if any(a.name == name for a in self._args):
            raise TypeCheckError(f"argument {name!r} is declared twice")
        if not isinstance(dtype, DType):
            raise TypeCheckError(
                f"argument {name!r}: dtype {_show(dtype, repr)} is not a DType (e.g. DType.F32)"
            )
        if not isinstance(shape, Sequence) or isinstance(shape, str | bytes):
            raise TypeCheckError(f"argument {name!r}: shape {_show(shape, repr)} is not a sequence")
        shape = _ints(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise TypeCheckError(
                f"argument {name!r}: shape {_show(shape)} must be non-negative integers"
            )
        v = self._fresh(TensorType(shape, dtype), name)
        self._args.append(Arg(name, v, storage, wide))
        return v

    def _fresh(self, t: TensorType, name: str | None = None) -> Var:
        what = f"argument {name!r}" if name is not None else f"equation {len(self._eqns)}"
        check_dims(t.shape, what, t.dtype.itemsize)
        v = Var(len(self._vars), t, name)
        self._vars[v.id] = v
        return v

    def _check_own(
        self, v: object, where: str, eqn: int | None = None, prim: Prim | None = None
    ) -> None:
        # identity, not equality: another Builder's var may have the same id and type
        if not isinstance(v, Var) or self._vars.get(v.id) is not v:
            raise TypeCheckError(
                f"{where}: {_show(v, repr)} is not a value of program {self.name!r}",
                eqn,
                None if prim is None else prim.value,
            )

    def _result_names(self) -> set[str]:
        return {o.name for o in self._outputs} | {u.state for u in self._updates}

    def _emit(self, prim: Prim, inputs: tuple[Atom, ...], params: Params | None = None) -> Var:
        params = NoParams() if params is None else params
        index = len(self._eqns)
        for a in inputs:
            if isinstance(a, Var):
                self._check_own(a, "operand", index, prim)
            elif not isinstance(a, Literal):
                raise TypeCheckError(
                    f"operand {a!r} is neither a value nor a literal", index, prim.value
                )
        out = self._fresh(infer_type(prim, inputs, params, index))
        self._eqns.append(Eqn(prim, inputs, (out,), params))
        return out

    def _dtype_of(self, a: Operand, b: Operand, prim: Prim) -> DType:
        for v in (a, b):
            if isinstance(v, Var | Literal):
                return v.dtype
        raise TypeCheckError("needs at least one tensor operand", len(self._eqns), prim.value)

    def _atom(self, v: Operand, dtype: DType, prim: Prim) -> Atom:
        if isinstance(v, Var | Literal):
            return v
        try:
            return Literal.of(v, dtype)
        except (ValueError, TypeError, OverflowError) as err:
            raise TypeCheckError(
                f"literal {_show(v, repr)} of {dtype.value}: {_show(err)}",
                len(self._eqns),
                prim.value,
            ) from None

    def _broadcast_shape(self, operands: Sequence[Atom], prim: Prim) -> tuple[int, ...]:
        """The numpy broadcast of the operands' shapes, after checking that the equation
        type-checks at that shape (so a failed call emits no broadcast_in_dim)."""
        index = len(self._eqns)
        for v in operands:
            if isinstance(v, Var):
                self._check_own(v, "operand", index, prim)
        shapes = [v.shape for v in operands if isinstance(v, Var)]
        try:
            shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        except ValueError:
            raise TypeCheckError(
                f"shapes {' and '.join(map(str, shapes))} do not broadcast", index, prim.value
            ) from None
        probe = [Var(-1, TensorType(shape, v.dtype)) if isinstance(v, Var) else v for v in operands]
        infer_type(prim, probe, NoParams(), index)
        return shape

    def _binary(self, prim: Prim, a: Operand, b: Operand) -> Var:
        dtype = self._dtype_of(a, b, prim)
        operands = [self._atom(a, dtype, prim), self._atom(b, dtype, prim)]
        shape = self._broadcast_shape(operands, prim)
        x, y = (self._broadcast_to(v, shape, prim) for v in operands)
        return self._emit(prim, (x, y))

    def _broadcast_to(self, v: Atom, shape: tuple[int, ...], prim: Prim) -> Atom:
        """numpy-style: align trailing axes, then broadcast_in_dim when anything changes."""
        if isinstance(v, Literal) or v.shape == shape:
            return v
        offset = len(shape) - v.type.rank
        if offset < 0:
            raise TypeCheckError(
                f"cannot broadcast {v.type} to {shape}", len(self._eqns), prim.value
            )
        return self.broadcast_in_dim(v, shape, tuple(range(offset, len(shape))))

    def _axis(self, x: Atom, axis: int, prim: Prim) -> int:
        """``axis`` of ``x``, a negative one counted from the end (one out of range is left
        for the type rule to report)."""
        index = len(self._eqns)
        self._check_own(x, "operand", index, prim)
        rank, axis = x.type.rank, _int(axis)
        return axis + rank if -rank <= axis < 0 else axis

    def _axes(self, x: Var, axes: int | Sequence[int], prim: Prim) -> tuple[int, ...]:
        seq = tuple(axes) if isinstance(axes, Sequence) else (axes,)  # any integer type
        return tuple(sorted(self._axis(x, a, prim) for a in seq))

    def _int_literal(self, value: int) -> Literal:
        try:
            return Literal.of(value, DType.I32)
        except (ValueError, TypeError, OverflowError) as err:
            raise TypeCheckError(
                f"start {_show(value, repr)}: {_show(err)}",
                len(self._eqns),
                Prim.DYNAMIC_UPDATE_SLICE.value,
            ) from None


def _int(d: object) -> Any:
    """``d`` as a Python int when it is an integer of any type (``numbers.Integral``, a numpy
    integer: ``operator.index``) and not a bool; otherwise ``d`` itself, for the type rules
    to reject with their message."""
    if isinstance(d, bool | np.bool_) or not isinstance(d, Integral | np.integer):
        return d
    return operator.index(d)


def _ints(ds: Iterable[object]) -> tuple[Any, ...]:
    """Each of ``ds`` through ``_int``: dims, axes, starts of any integer type."""
    return tuple(_int(d) for d in ds)


def _pairs(padding: Sequence[tuple[int, int]] | None, n: int) -> tuple[tuple[Any, Any], ...]:
    """``padding`` as (lo, hi) integer pairs, ``n`` pairs of zeros when None."""
    if padding is None:
        return ((0, 0),) * n
    return tuple((_int(lo), _int(hi)) for lo, hi in padding)


def _check_name(name: object, what: str) -> None:
    """A name is a str that encodes as UTF-8 (a lone surrogate does not; OpenVINO's bindings
    raise a bare ``TypeError`` on one)."""
    if not isinstance(name, str):
        raise TypeCheckError(f"{what} must be a str, got {_show(name, repr)}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise TypeCheckError(f"{what} {name!r} holds a lone surrogate, which is not text") from None


_F = TypeVar("_F", bound=Callable[..., Any])


def _typed(method: _F) -> _F:
    """A public Builder method whose ill-typed argument surfaces as a built-in exception from
    deep inside (a shape of strings, axes that are not ints) raises ``TypeCheckError`` naming
    the method instead; poot's own typed errors pass through unchanged."""

    @functools.wraps(method)
    def checked(self: Builder, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except PootError:
            raise
        except (TypeError, ValueError, AttributeError, IndexError, KeyError, OverflowError) as e:
            where = f"Builder.{method.__name__}"
            raise TypeCheckError(f"{where}: bad argument: {_show(e)}", len(self._eqns)) from None

    return checked  # type: ignore[return-value]


for _name, _method in list(vars(Builder).items()):
    if callable(_method) and not _name.startswith("_"):
        setattr(Builder, _name, _typed(_method))
