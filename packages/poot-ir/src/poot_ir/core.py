"""The IR's values: primitives, their parameters, variables, literals, equations and programs.

A ``Program`` is a flat, topologically ordered list of primitive equations in SSA form, like a
jaxpr. Every value here is a frozen, slotted dataclass with tuple fields, so programs compare
structurally and transforms return new programs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import cast

import numpy as np

from poot_ir.dtypes import DType, TensorType
from poot_ir.window import ConvParams, ReduceWindowParams

__all__ = [
    "Arg",
    "Atom",
    "BroadcastParams",
    "ConcatParams",
    "ConvParams",
    "ConvertParams",
    "Eqn",
    "GatherParams",
    "IotaParams",
    "Literal",
    "NoParams",
    "Output",
    "Params",
    "Prim",
    "Program",
    "ReduceParams",
    "ReduceWindowParams",
    "ReshapeParams",
    "SliceParams",
    "Storage",
    "TransposeParams",
    "Update",
    "Var",
]


class Prim(Enum):
    """Every primitive the IR knows. The value is the name the text format prints."""

    # elementwise unary
    NEG = "neg"
    RECIP = "recip"
    EXP = "exp"
    LOG = "log"
    TANH = "tanh"
    ERF = "erf"
    SQRT = "sqrt"
    ABS = "abs"
    # elementwise binary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"
    GE = "ge"
    GT = "gt"
    EQ = "eq"
    # other elementwise
    SELECT = "select"
    CONVERT = "convert"
    # reductions
    REDUCE_SUM = "reduce_sum"
    REDUCE_MAX = "reduce_max"
    # window reductions (poot_ir.window)
    REDUCE_WINDOW_SUM = "reduce_window_sum"
    REDUCE_WINDOW_MAX = "reduce_window_max"
    # data movement
    GATHER = "gather"
    TRANSPOSE = "transpose"
    RESHAPE = "reshape"
    BROADCAST_IN_DIM = "broadcast_in_dim"
    SLICE = "slice"
    CONCAT = "concat"
    DYNAMIC_UPDATE_SLICE = "dynamic_update_slice"
    IOTA = "iota"
    # contraction
    MATMUL = "matmul"
    CONV = "conv"

    @property
    def is_unary(self) -> bool:
        return self in UNARY

    @property
    def is_binary(self) -> bool:
        return self in BINARY

    @property
    def is_comparison(self) -> bool:
        return self in COMPARISONS

    @property
    def is_elementwise(self) -> bool:
        return self in UNARY or self in BINARY or self in (Prim.SELECT, Prim.CONVERT)

    @property
    def is_movement(self) -> bool:
        return self in MOVEMENT


UNARY = frozenset(
    {Prim.NEG, Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT, Prim.ABS}
)
BINARY = frozenset(
    {Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.MAX, Prim.MIN, Prim.GE, Prim.GT, Prim.EQ}
)
COMPARISONS = frozenset({Prim.GE, Prim.GT, Prim.EQ})
#: Data movement: each element of the result is an element of an operand (a gather's table, a
#: concat's operands, a dynamic update's operand or update), moved; nothing is computed, so it
#: is exact in every dtype. (``iota`` makes its counter instead: it is no movement.)
MOVEMENT = frozenset(
    {
        Prim.GATHER,
        Prim.TRANSPOSE,
        Prim.RESHAPE,
        Prim.BROADCAST_IN_DIM,
        Prim.SLICE,
        Prim.CONCAT,
        Prim.DYNAMIC_UPDATE_SLICE,
    }
)
#: Movement of one operand alone (no table, no second operand, no indices): each result element
#: is an element of that operand, so whatever holds of every element of the operand (a mask's
#: 0/1 values, a guard, a side of a dominated value) holds of the result too.
REARRANGEMENT = frozenset({Prim.TRANSPOSE, Prim.RESHAPE, Prim.BROADCAST_IN_DIM, Prim.SLICE})
#: Arithmetic whose every result element is an operand's element or its negation: it chooses
#: (max, min, select, reduce_max) or sets a sign (neg, abs), so it never rounds.
EXACT_ARITHMETIC = frozenset({Prim.NEG, Prim.ABS, Prim.MAX, Prim.MIN, Prim.SELECT, Prim.REDUCE_MAX})
#: Arithmetic that computes new values: a float result is rounded and can overflow (``conv``
#: and both window reductions are here: a window max holds its padding's -inf and returns the
#: canonical NaN, so it is no choice among operand elements). The rest
#: moves (``MOVEMENT``), chooses or sets signs (``EXACT_ARITHMETIC``), compares, converts or
#: counts (``iota``).
COMPUTING = frozenset(Prim) - MOVEMENT - EXACT_ARITHMETIC - COMPARISONS - {Prim.CONVERT, Prim.IOTA}
#: Unary primitives defined only on floating types (the others also take I32).
FLOAT_ONLY = frozenset({Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT})


# -- parameters: one frozen dataclass per primitive family, never a dict ---------------------


@dataclass(frozen=True, slots=True)
class NoParams:
    """The parameters of a primitive that has none."""


@dataclass(frozen=True, slots=True)
class ConvertParams:
    dtype: DType


@dataclass(frozen=True, slots=True)
class ReduceParams:
    """Reduce over ``axes`` (sorted, distinct); the reduced axes are removed from the shape."""

    axes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GatherParams:
    """``numpy.take(operand, indices, axis)``: the result's shape is
    ``operand.shape[:axis] + indices.shape + operand.shape[axis + 1:]``."""

    axis: int


@dataclass(frozen=True, slots=True)
class TransposeParams:
    perm: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReshapeParams:
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BroadcastParams:
    """Operand axis ``i`` becomes result axis ``dims[i]`` (which must be 1 or equal in size)."""

    shape: tuple[int, ...]
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SliceParams:
    start: tuple[int, ...]
    limit: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConcatParams:
    axis: int


@dataclass(frozen=True, slots=True)
class IotaParams:
    shape: tuple[int, ...]
    dtype: DType
    axis: int


Params = (
    NoParams
    | ConvertParams
    | ReduceParams
    | GatherParams
    | TransposeParams
    | ReshapeParams
    | BroadcastParams
    | SliceParams
    | ConcatParams
    | IotaParams
    | ConvParams
    | ReduceWindowParams
)

#: The parameter class each primitive takes.
PARAMS_OF: dict[Prim, type[Params]] = {p: NoParams for p in Prim} | {
    Prim.CONVERT: ConvertParams,
    Prim.REDUCE_SUM: ReduceParams,
    Prim.REDUCE_MAX: ReduceParams,
    Prim.GATHER: GatherParams,
    Prim.TRANSPOSE: TransposeParams,
    Prim.RESHAPE: ReshapeParams,
    Prim.BROADCAST_IN_DIM: BroadcastParams,
    Prim.SLICE: SliceParams,
    Prim.CONCAT: ConcatParams,
    Prim.IOTA: IotaParams,
    Prim.CONV: ConvParams,
    Prim.REDUCE_WINDOW_SUM: ReduceWindowParams,
    Prim.REDUCE_WINDOW_MAX: ReduceWindowParams,
}


# -- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Var:
    """An SSA value. ``id`` is unique within its program; ``name`` is optional and only for
    people (arguments are named by their ``Arg``)."""

    id: int
    type: TensorType
    name: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype


@dataclass(frozen=True, slots=True)
class Literal:
    """An inline scalar, stored as its exact bit pattern so that negative zero, NaN payloads
    and subnormals survive every transform and the text format."""

    bits: int
    dtype: DType

    @staticmethod
    def of(value: float | int | bool | np.generic, dtype: DType) -> Literal:
        """The literal of ``dtype`` nearest ``value`` (round to nearest even, as numpy casts).

        An integer outside I32's range, or a non-integral float for I32, is rejected rather than
        wrapped or truncated.
        """
        if dtype is DType.I32:
            if isinstance(value, float | np.floating) and not float(value).is_integer():
                raise ValueError(f"{value!r} is not an integer, so it is no i32 literal")
            iv = int(value)
            if not -(2**31) <= iv < 2**31:
                raise ValueError(f"{value!r} is outside the range of i32")
            arr = np.array(iv, dtype=np.int32)
        elif dtype is DType.BOOL:
            arr = np.array(bool(value), dtype=np.bool_)
        else:
            if isinstance(value, int) and abs(value) >= 2**1024:
                # beyond float64 (float() would raise), so far beyond every float dtype
                value = math.inf if value > 0 else -math.inf
            with np.errstate(over="ignore"):
                arr = np.array(value).astype(dtype.numpy)
        return Literal(int(arr.view(dtype.bits_dtype)), dtype)

    @staticmethod
    def from_bits(bits: int, dtype: DType) -> Literal:
        if not 0 <= bits < 2 ** (8 * dtype.itemsize):
            raise ValueError(f"bit pattern {bits:#x} does not fit {dtype.value}")
        return Literal(bits, dtype)

    @property
    def value(self) -> np.generic:
        """The literal as a numpy scalar of its dtype."""
        arr = np.array(self.bits, dtype=self.dtype.bits_dtype).view(self.dtype.numpy)
        return cast(np.generic, arr[()])

    def as_float(self) -> float:
        return float(self.value.item())

    def as_int(self) -> int:
        return int(self.value.item())

    @property
    def type(self) -> TensorType:
        return TensorType((), self.dtype)

    @property
    def is_nan(self) -> bool:
        return self.dtype.is_float and math.isnan(self.as_float())


Atom = Var | Literal


@dataclass(frozen=True, slots=True)
class Eqn:
    """One primitive application: ``outputs = prim(*inputs, params)``."""

    prim: Prim
    inputs: tuple[Atom, ...]
    outputs: tuple[Var, ...]
    params: Params

    @property
    def out(self) -> Var:
        """The single output (every primitive has exactly one)."""
        return self.outputs[0]


class Storage(Enum):
    """How an argument lives across steps, as in the original poot graph IR."""

    WEIGHT = "weight"  # uploaded once, constant across steps
    SLOT = "slot"  # a per-step input, rewritten in place before each step
    STATE = "state"  # carried across steps, replaced by its update after each step


@dataclass(frozen=True, slots=True)
class Arg:
    name: str
    var: Var
    storage: Storage
    #: An I32 slot that also takes int64 arrays (an imported model's int64 input): every step
    #: checks each value fits I32 and refuses, naming the element, when one does not.
    wide: bool = False


@dataclass(frozen=True, slots=True)
class Output:
    name: str
    var: Var


@dataclass(frozen=True, slots=True)
class Update:
    """The value that replaces the state argument ``state`` after each step."""

    state: str
    var: Var


@dataclass(frozen=True, slots=True)
class Program:
    """A typed, validated program. Build one with ``Builder`` or ``parse_program``; both
    validate it (``poot_ir.validate``)."""

    name: str
    args: tuple[Arg, ...]
    eqns: tuple[Eqn, ...]
    outputs: tuple[Output, ...]
    updates: tuple[Update, ...] = ()

    def arg(self, name: str) -> Arg | None:
        for a in self.args:
            if a.name == name:
                return a
        return None

    @property
    def result_names(self) -> tuple[str, ...]:
        """What one step returns, in order: the outputs, then each updated state."""
        return tuple(o.name for o in self.outputs) + tuple(u.state for u in self.updates)

    def results(self) -> tuple[tuple[str, Var], ...]:
        return tuple((o.name, o.var) for o in self.outputs) + tuple(
            (u.state, u.var) for u in self.updates
        )

    def next_var_id(self) -> int:
        """The first var id no argument or equation output uses: where a rewrite of this
        program numbers the values it adds."""
        ids = [a.var.id for a in self.args] + [o.id for e in self.eqns for o in e.outputs]
        return 1 + max(ids, default=-1)

    def live_equations(self) -> frozenset[int]:
        """The equations a result or a state update reads, directly or through others (one
        reverse scan): another one's value is never observed."""
        needed = {v.id for _, v in self.results()}
        live: set[int] = set()
        for i in range(len(self.eqns) - 1, -1, -1):
            e = self.eqns[i]
            if any(o.id in needed for o in e.outputs):
                live.add(i)
                needed.update(a.id for a in e.inputs if isinstance(a, Var))
        return frozenset(live)
