"""``Emit``: the small builder a planner rewrite writes its equations with (a legalization
rule, ``poot_planner.legalize``; the host prelude's mask rewrite, ``poot_planner.fp16.prelude``),
and ``RuleContext``, what it reads of the program around it (who makes and who reads each
value, the results; the readers of a value through rearrangement, ``readers_through_movement``).

A rule replaces one equation by ordinary equations of the same program: fresh value ids after
every id the program uses, literals in the dtype the replaced equation computes in, and the
rule's last equation writes the replaced equation's own output value (``out=``), so nothing
after it changes. A rule may instead fold in the only reader of that output (``absorb``): its
last equation then writes the reader's output, and the reader is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from poot_ir import Atom, DType, Eqn, Literal, NoParams, Params, Prim, Var, infer_type
from poot_ir.core import REARRANGEMENT

__all__ = ["Emit", "RuleContext", "readers_through_movement"]

Value = Atom | float


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule may look at beyond its equation: who makes and who reads each value, which
    values are results, and the narrowing contract's largest magnitude (None: no narrowing)."""

    producer: dict[int, Eqn] = field(default_factory=dict)
    consumers: dict[int, tuple[Eqn, ...]] = field(default_factory=dict)
    results: frozenset[int] = frozenset()
    max_magnitude: float | None = None


class Emit:
    """Emits equations computing in ``dtype`` (the replaced equation's), ids from ``next_id``."""

    def __init__(self, next_id: int, dtype: DType) -> None:
        self.next_id = next_id
        self.dtype = dtype
        self.eqns: list[Eqn] = []
        #: the one reader of the replaced equation's output that the rule folds in (its last
        #: step then writes the reader's output, and the reader is dropped), or None
        self.absorbed: Eqn | None = None

    def absorb(self, reader: Eqn) -> None:
        """Fold ``reader``, the only reader of the replaced equation's output, into the rule."""
        self.absorbed = reader

    def lit(self, value: float) -> Literal:
        return Literal.of(value, self.dtype)

    def _atom(self, v: Value) -> Atom:
        return v if isinstance(v, Var | Literal) else self.lit(v)

    def op(
        self, prim: Prim, *inputs: Value, params: Params | None = None, out: Var | None = None
    ) -> Var:
        ins = tuple(self._atom(a) for a in inputs)
        p = NoParams() if params is None else params
        t = infer_type(prim, ins, p, len(self.eqns))
        if out is None:
            out = Var(self.next_id, t)
            self.next_id += 1
        elif out.type != t:  # a rule that does not rebuild the type it replaces is a bug
            raise ValueError(f"rule result {t} does not match the replaced {out.type}")
        self.eqns.append(Eqn(prim, ins, (out,), p))
        return out

    # the few steps rules use, named as the primitives
    def add(self, a: Value, b: Value, out: Var | None = None) -> Var:
        return self.op(Prim.ADD, a, b, out=out)

    def sub(self, a: Value, b: Value, out: Var | None = None) -> Var:
        return self.op(Prim.SUB, a, b, out=out)

    def mul(self, a: Value, b: Value, out: Var | None = None) -> Var:
        return self.op(Prim.MUL, a, b, out=out)

    def div(self, a: Value, b: Value, out: Var | None = None) -> Var:
        return self.op(Prim.DIV, a, b, out=out)

    def max(self, a: Value, b: Value, out: Var | None = None) -> Var:
        return self.op(Prim.MAX, a, b, out=out)

    def neg(self, a: Value, out: Var | None = None) -> Var:
        return self.op(Prim.NEG, a, out=out)

    def exp(self, a: Value) -> Var:
        return self.op(Prim.EXP, a)

    def ge(self, a: Value, b: Value, out: Var | None = None) -> Var:
        return self.op(Prim.GE, a, b, out=out)

    def min(self, a: Value, b: Value, out: Var | None = None) -> Var:
        """``min(a, b) = -max(-a, -b)``: exact (NaN aside)."""
        return self.neg(self.max(_neg(self, a), _neg(self, b)), out)

    def clamp(self, x: Value, lo: float, hi: float) -> Var:
        return self.min(self.max(x, lo), hi)

    def abs(self, x: Var, out: Var | None = None) -> Var:
        """``|x| = max(x, -x)``: exact (the sign of a zero aside)."""
        return self.max(x, self.neg(x), out)


def _f(v: Value) -> float:
    return v.as_float() if isinstance(v, Literal) else float(v)  # type: ignore[arg-type]


def _neg(em: Emit, v: Value) -> Value:
    return em.neg(v) if isinstance(v, Var) else -_f(v)


def readers_through_movement(vid: int, ctx: RuleContext) -> list[Eqn] | None:
    """The equations that compute with value ``vid``, looking through pure data movement (a
    mask is reshaped and broadcast before it is added); None when a moved copy is a result."""
    out: list[Eqn] = []
    stack = [vid]
    while stack:
        v = stack.pop()
        if v in ctx.results:
            return None
        for r in ctx.consumers.get(v, ()):
            if r.prim in REARRANGEMENT:
                stack.append(r.out.id)
            else:
                out.append(r)
    return out
