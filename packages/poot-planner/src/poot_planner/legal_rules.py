"""Legalization rules as data: a primitive a target refuses, rewritten into steps it admits.

Each ``Rule`` names the primitive, the target, the decomposition (as text for people and as an
expander that emits the equations) and its numerics:

- ``IDENTITY``: the decomposition equals the primitive in the dtype the target computes in; its
  bound is its steps' contracts (exact when every step is exact; a single approximate step, the
  last one, passes its own contract on). The argument for each identity is in its comment.
- ``APPROXIMATION``: a published formula whose error in exact arithmetic is ``approximation``;
  the planner adds the floating-point error of its steps, derived from the steps' contracts and
  the device dtype's rounding over the formula's domain (``poot_planner.legal_bounds``).
- ``SENTINEL``: the specification's mask-sentinel rule carried to a product: a mask value too
  large for FP16 saturates to the sentinel (+-65504), which is all an additive mask needs.

The step functions need an F16 operand: ``x - y`` of two distinct FP16 values (with subnormals,
which the NPU's contracts promise) is at least 2^-24 in magnitude, so ``x - y >= 2^-24`` is
``x > y`` exactly, and amplifying ``max(d, 0)`` by 2^24 (two exact power-of-two steps, clamped)
gives exactly 1 for ``d > 0`` and 0 otherwise. These rules are on a target that narrows F32 to
F16 (intel-npu4), so they run on F16 operands; on F32 they are exact unless ``0 < |x - y| <
2^-24``, values FP16 cannot tell apart anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from poot_ir import BroadcastParams, ConvertParams, Eqn, Literal, Prim, Var

from poot_planner.legal_emit import Emit

__all__ = ["RULES", "Numerics", "Rule", "RuleContext", "rules_for"]


class Numerics(Enum):
    IDENTITY = "exact identity"
    APPROXIMATION = "approximation"
    SENTINEL = "saturated sentinel"


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule may look at beyond its equation: who makes and who reads each value, which
    values are results, and the narrowing contract's largest magnitude (None: no narrowing)."""

    producer: dict[int, Eqn] = field(default_factory=dict)
    consumers: dict[int, tuple[Eqn, ...]] = field(default_factory=dict)
    results: frozenset[int] = frozenset()
    max_magnitude: float | None = None


#: Emits the decomposition of the equation (its last step writing the equation's output) and
#: returns True, or returns False when the rule does not apply to this equation.
Expander = Callable[[Emit, Eqn, RuleContext], bool]


@dataclass(frozen=True, slots=True)
class Rule:
    prim: Prim
    target: str
    name: str
    decomposition: str
    numerics: Numerics
    expand: Expander
    #: error of the formula in exact arithmetic over its whole domain (APPROXIMATION only)
    approximation: float = 0.0
    source: str = ""


TINY_F16 = 2.0**-24  # FP16's smallest subnormal
_AMP = 4096.0  # 2^12: two clamped steps amplify by 2^24, exactly (powers of two)


def _step(em: Emit, d: Var) -> Var:
    """1 where ``d > 0``, else 0, exactly for an F16 ``d`` (module docstring)."""
    g = em.max(d, 0.0)
    g = em.min(em.mul(g, _AMP), 1.0)
    return em.min(em.mul(g, _AMP), 1.0)


def _sign(em: Emit, x: Var) -> Var:
    """-1, 0 or 1 by the sign of ``x``, exactly for an F16 ``x`` (|x| >= 2^-24 when nonzero)."""
    s = em.clamp(em.mul(x, _AMP), -1.0, 1.0)
    return em.clamp(em.mul(s, _AMP), -1.0, 1.0)


def _float_operands(e: Eqn, em: Emit) -> bool:
    return all(a.dtype is em.dtype for a in e.inputs) and em.dtype.is_float


def _mask_of(em: Emit, pred: Var, ctx: RuleContext) -> Var | None:
    """The 0/1 value (in ``em.dtype``) of a predicate made by a comparison of values of that
    dtype (possibly broadcast), or None when the predicate comes from anywhere else."""
    e = ctx.producer.get(pred.id)
    if e is None:
        return None
    if e.prim is Prim.BROADCAST_IN_DIM and isinstance(e.params, BroadcastParams):
        inner = e.inputs[0]
        m = _mask_of(em, inner, ctx) if isinstance(inner, Var) else None
        return None if m is None else em.op(Prim.BROADCAST_IN_DIM, m, params=e.params)
    if e.prim not in (Prim.GE, Prim.GT, Prim.EQ) or not _float_operands(e, em):
        return None
    a, b = e.inputs
    if isinstance(a, Literal) and isinstance(b, Literal):
        return None
    match e.prim:
        case Prim.GT:  # a > b  <=>  a - b > 0
            return _step(em, em.sub(a, b))
        case Prim.GE:  # a >= b  <=>  not (b - a > 0)
            return em.sub(1.0, _step(em, em.sub(b, a)))
        case _:  # a == b  <=>  not (|a - b| > 0)
            return em.sub(1.0, _step(em, em.abs(em.sub(a, b))))


def _branch(em: Emit, v: Var | Literal, ctx: RuleContext) -> Var | Literal | None:
    """A select branch as a multiplicand: a literal FP16 cannot hold becomes the saturated
    sentinel on a narrowing target (the mask-sentinel rule); a NaN literal stays refused."""
    if not isinstance(v, Literal):
        return v
    x = v.as_float()
    if math.isnan(x):
        return None
    limit = ctx.max_magnitude
    if limit is not None and abs(x) > limit:
        return em.lit(math.copysign(limit, x))
    return None if math.isinf(x) else v


# -- the expanders ---------------------------------------------------------------------------


def _tanh(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # tanh(x) = sign(x) (1 - exp(-2|x|)) / (1 + exp(-2|x|)), |x| clamped at 9 (tanh(9) rounds
    # to 1 in F32, and -2 * 9 keeps exp in range)
    (x,) = e.inputs
    if not isinstance(x, Var) or not em.dtype.is_float:
        return False
    c = em.clamp(x, -9.0, 9.0)
    g = em.exp(em.mul(em.abs(c), -2.0))
    em.mul(_sign(em, c), em.div(em.sub(1.0, g), em.add(1.0, g)), out=e.out)
    return True


# Abramowitz and Stegun, Handbook of Mathematical Functions (1964), 7.1.26: for x >= 0,
# erf(x) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-x^2) + eps, t = 1 / (1 + p x),
# |eps| <= 1.5e-7.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    (x,) = e.inputs
    if not isinstance(x, Var) or not em.dtype.is_float:
        return False
    c = em.clamp(x, -4.0, 4.0)  # 1 - erf(4) = 1.5e-8
    a = em.abs(c)
    t = em.div(1.0, em.add(em.mul(a, _AS_P), 1.0))
    poly: Var = em.mul(t, _AS_A[-1])
    for k in reversed(_AS_A[:-1]):
        poly = em.mul(em.add(poly, k), t)
    g = em.exp(em.neg(em.mul(a, a)))
    magnitude = em.sub(1.0, em.mul(poly, g))
    em.mul(_sign(em, c), magnitude, out=e.out)
    return True


def _recip(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # 1 / x is the correctly rounded quotient either way
    if not em.dtype.is_float:
        return False
    em.div(1.0, e.inputs[0], out=e.out)
    return True


def _min(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    if not em.dtype.is_float:
        return False
    em.min(e.inputs[0], e.inputs[1], out=e.out)
    return True


def _abs(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    x = e.inputs[0]
    if not isinstance(x, Var) or not em.dtype.is_float:
        return False
    em.abs(x, out=e.out)
    return True


def _eq(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # a == b  <=>  -|a - b| >= 0 (a difference of finite floats is zero only when they are equal)
    a, b = e.inputs
    if not _float_operands(e, em):
        return False
    em.ge(em.neg(em.max(em.sub(a, b), em.sub(b, a))), 0.0, out=e.out)
    return True


def _gt(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    a, b = e.inputs
    if not _float_operands(e, em):
        return False
    em.ge(em.sub(a, b), TINY_F16, out=e.out)
    return True


def _select(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # x * m + y * (1 - m) for a 0/1 m: exactly x or y for finite branches (sign of zero aside)
    pred, x, y = e.inputs
    if not isinstance(pred, Var) or not em.dtype.is_float:
        return False
    bx, by = _branch(em, x, ctx), _branch(em, y, ctx)
    if bx is None or by is None:
        return False
    m = _mask_of(em, pred, ctx)
    if m is None:
        return False
    em.add(em.mul(bx, m), em.mul(by, em.sub(1.0, m)), out=e.out)
    return True


def _convert(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # a comparison's predicate as 0.0 / 1.0: its mask value, computed in the target dtype
    p = e.inputs[0]
    if not isinstance(e.params, ConvertParams) or not isinstance(p, Var) or not em.dtype.is_float:
        return False
    m = _mask_of(em, p, ctx)
    if m is None:
        return False
    em.mul(m, 1.0, out=e.out)
    return True


_MOVES = frozenset({Prim.RESHAPE, Prim.BROADCAST_IN_DIM, Prim.TRANSPOSE, Prim.SLICE})


def _readers_through_movement(vid: int, ctx: RuleContext) -> list[Eqn] | None:
    """The equations that compute with value ``vid``, looking through pure data movement (a
    mask is reshaped and broadcast before it is added); None when a moved copy is a result."""
    out: list[Eqn] = []
    stack = [vid]
    while stack:
        v = stack.pop()
        if v in ctx.results:
            return None
        for r in ctx.consumers.get(v, ()):
            if r.prim in _MOVES:
                stack.append(r.out.id)
            else:
                out.append(r)
    return out


def _mask_scale(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # v * L with |L| beyond FP16, read only by adds and subtracts: an additive mask, so L
    # saturates to the sentinel exactly as an additive literal does
    limit = ctx.max_magnitude
    lits = [a for a in e.inputs if isinstance(a, Literal)]
    if limit is None or len(lits) != 1 or e.out.id in ctx.results:
        return False
    v = lits[0].as_float()
    readers = _readers_through_movement(e.out.id, ctx)
    if not (math.isfinite(v) and abs(v) > limit and readers):
        return False
    if any(r.prim not in (Prim.ADD, Prim.SUB) for r in readers):
        return False
    other = next(a for a in e.inputs if not isinstance(a, Literal))
    em.mul(other, math.copysign(limit, v), out=e.out)
    return True


_I, _A, _S = Numerics.IDENTITY, Numerics.APPROXIMATION, Numerics.SENTINEL
INTEL, XDNA = "intel-npu4", "xdna2"

RULES: tuple[Rule, ...] = (
    Rule(
        Prim.TANH,
        INTEL,
        "tanh via exp",
        "sign(x) (1 - exp(-2|x|)) / (1 + exp(-2|x|)), |x| clamped at 9",
        _A,
        _tanh,
        approximation=1e-7,  # 1 - tanh(9) = 3e-8, and sign(x) = x 2^24 below 2^-24: 6e-8
        source="identity; clamp error 1 - tanh(9)",
    ),
    Rule(
        Prim.ERF,
        INTEL,
        "erf via exp (Abramowitz-Stegun 7.1.26)",
        "sign(x) (1 - t P(t) exp(-x^2)), t = 1 / (1 + 0.3275911 |x|), |x| clamped at 4",
        _A,
        _erf,
        approximation=4e-7,  # 1.5e-7 (A&S) + 1.5e-8 (clamp) + 2.2e-7 (sign below 2^-24)
        source="Abramowitz and Stegun 7.1.26, |eps| <= 1.5e-7",
    ),
    Rule(Prim.RECIP, INTEL, "recip as a division", "1 / x", _I, _recip),
    Rule(Prim.MIN, INTEL, "min via max", "-max(-a, -b)", _I, _min),
    Rule(Prim.ABS, INTEL, "abs via max", "max(x, -x)", _I, _abs),
    Rule(Prim.EQ, INTEL, "eq via ge", "-max(a - b, b - a) >= 0", _I, _eq),
    Rule(Prim.GT, INTEL, "gt via ge", "a - b >= 2^-24 (exact on F16)", _I, _gt),
    Rule(
        Prim.SELECT,
        INTEL,
        "select on a comparison's mask",
        "x m + y (1 - m), m the comparison as 0/1 by exact clamped steps",
        _I,
        _select,
    ),
    Rule(
        Prim.CONVERT,
        INTEL,
        "a comparison's predicate to float",
        "m, the comparison as 0/1 by exact clamped steps",
        _I,
        _convert,
    ),
    Rule(
        Prim.MUL,
        INTEL,
        "mask scale saturates",
        "v * L (|L| > 65504, read only additively) as v * sign(L) 65504",
        _S,
        _mask_scale,
    ),
    Rule(Prim.MIN, XDNA, "min via max", "-max(-a, -b)", _I, _min),
    Rule(Prim.ABS, XDNA, "abs via max", "max(x, -x)", _I, _abs),
)


def rules_for(target: str, prim: Prim) -> tuple[Rule, ...]:
    return tuple(r for r in RULES if r.target == target and r.prim is prim)
