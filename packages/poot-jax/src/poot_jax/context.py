"""The lowering context: the builder, the weights made so far, and the helpers every rule uses.

A rule sees the operands of one JAX equation as ``Value``s (a poot ``Var``, or a poot
``Literal`` for a JAX scalar literal), its params as JAX gives them and the avals of its results,
and returns one ``Var`` per result. A rule that cannot express an equation raises ``Refuse``;
the loop (``table``) turns it into an ``UnsupportedJax`` naming the primitive and the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from poot_ir.builder import Builder
from poot_ir.core import Literal as PootLiteral
from poot_ir.core import Var
from poot_ir.dtypes import DType

__all__ = ["Ctx", "Refuse", "Value", "poot_dtype"]

Value = Var | PootLiteral

_DTYPES: dict[np.dtype[Any], DType] = {d.numpy: d for d in DType}


class Refuse(Exception):
    """Raised by a rule: poot cannot express this equation (``kind`` and ``detail`` as in
    ``UnsupportedJax``). Internal: the loop re-raises it as ``UnsupportedJax``."""

    def __init__(self, kind: Literal["primitive", "params", "dtype", "value"], detail: str):
        super().__init__(detail)
        self.kind: Literal["primitive", "params", "dtype", "value"] = kind
        self.detail = detail


def poot_dtype(dtype: Any) -> DType:
    """The poot dtype of a JAX/numpy dtype, or ``Refuse`` ("dtype")."""
    found = _DTYPES.get(np.dtype(dtype))
    if found is None:
        raise Refuse("dtype", f"{np.dtype(dtype)} has no poot type (f32, f16, bf16, i32, bool)")
    return found


@dataclass(slots=True)
class Ctx:
    """What the rules build into: the builder and the weights (name -> value) made so far."""

    b: Builder
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    _count: int = 0

    def const(self, value: np.ndarray, dtype: DType) -> Var:
        """A weight holding ``value`` (a captured array, or a value a rule needs as a tensor)."""
        value = np.asarray(value).astype(dtype.numpy)
        while f"const{self._count}" in self.weights:
            self._count += 1
        name = f"const{self._count}"
        self.weights[name] = value
        return self.b.weight(name, dtype, value.shape)

    def var(self, x: Value) -> Var:
        """``x`` as a tensor: a literal becomes a scalar weight, except a NaN or an infinity,
        which is computed (``0 * iota + x``) so that it stays a literal of the program: the
        planner sees it (a narrowing target refuses it, and a partitioned run leaves it to the
        host) where a weight would be refused only at upload (``jnp.var``'s NaN for an empty
        reduction, ``-inf`` paddings)."""
        if isinstance(x, Var):
            return x
        value = np.asarray(x.value)
        if value.dtype.kind == "f" and not np.isfinite(value):
            zero = self.b.mul(self.b.iota((1,), x.dtype, 0), self.lit(0.0, x.dtype))
            return self.b.reshape(self.b.add(zero, x), ())
        return self.const(value, x.dtype)

    def full(self, value: float | int | bool, shape: Sequence[int], dtype: DType) -> Var:
        """A tensor of ``shape`` filled with ``value`` (a scalar weight, broadcast)."""
        one = self.const(np.asarray(value), dtype)
        return self.b.broadcast_in_dim(one, tuple(shape), ()) if tuple(shape) else one

    def lit(self, value: float | int | bool, dtype: DType) -> PootLiteral:
        return self.b.literal(value, dtype)

    def logical_not(self, x: Value) -> Var:
        return self.b.eq(self.var(x), self.lit(False, DType.BOOL))

    def logical_or(self, x: Value, y: Value) -> Var:
        return self.b.select(self.var(x), self.lit(True, DType.BOOL), y)

    def logical_and(self, x: Value, y: Value) -> Var:
        return self.b.select(self.var(x), y, self.lit(False, DType.BOOL))

    def to_i32(self, x: Value) -> Value:
        """A bool value as 0/1 i32 (a literal stays a literal)."""
        if isinstance(x, PootLiteral):
            return self.lit(int(bool(x.value)), DType.I32)
        return self.b.convert(x, DType.I32)


def dtype_of(x: Value) -> DType:
    return x.dtype


def shape_of(x: Value) -> tuple[int, ...]:
    return x.shape if isinstance(x, Var) else ()
