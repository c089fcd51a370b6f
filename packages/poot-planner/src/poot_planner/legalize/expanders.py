"""The expanders of the legalization rules (``poot_planner.legalize.rules``, which holds the
table and why each rewrite is exact or how its bound is derived): each emits the equations that
replace one equation, or returns False where the rule does not apply to it.
"""

from __future__ import annotations

import math

from poot_ir import ConvertParams, DType, Eqn, Literal, Prim, Var

from poot_planner.emit import Emit, RuleContext, readers_through_movement
from poot_planner.legalize.steps import (
    TINY_F16,
    exact_float,
    float_operands,
    mask_of,
    multiplicand,
    nan_guarded,
    predicate_and_literal,
)

__all__ = [
    "expand_abs",
    "expand_convert",
    "expand_counter_convert",
    "expand_eq",
    "expand_gt",
    "expand_integer_compare",
    "expand_mask_scale",
    "expand_min",
    "expand_nan_guard",
    "expand_predicate_eq",
    "expand_recip",
    "expand_scaled_sum",
    "expand_select",
]


def expand_recip(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # 1 / x is the correctly rounded quotient either way
    if not em.dtype.is_float:
        return False
    em.div(1.0, e.inputs[0], out=e.out)
    return True


def expand_min(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    if not em.dtype.is_float:
        return False
    em.min(e.inputs[0], e.inputs[1], out=e.out)
    return True


def expand_abs(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    x = e.inputs[0]
    if not isinstance(x, Var) or not em.dtype.is_float:
        return False
    em.abs(x, out=e.out)
    return True


def expand_eq(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # a == b  <=>  -|a - b| >= 0 (a difference of finite floats is zero only when they are equal)
    a, b = e.inputs
    if not float_operands(e, em):
        return False
    em.ge(em.neg(em.max(em.sub(a, b), em.sub(b, a))), 0.0, out=e.out)
    return True


def expand_gt(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    a, b = e.inputs
    if not float_operands(e, em):
        return False
    em.ge(em.sub(a, b), TINY_F16, out=e.out)
    return True


def expand_select(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # x * m + y * (1 - m) for a 0/1 m: exactly x or y for finite branches (sign of zero aside)
    pred, x, y = e.inputs
    if not isinstance(pred, Var) or not em.dtype.is_float:
        return False
    bx, by = multiplicand(em, x, ctx), multiplicand(em, y, ctx)
    if bx is None or by is None:
        return False
    m = mask_of(em, pred, ctx)
    if m is None:
        return False
    em.add(em.mul(bx, m), em.mul(by, em.sub(1.0, m)), out=e.out)
    return True


def expand_nan_guard(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # select(isnan(x), c, x) is x wherever x is not NaN, and max(x, x) is x exactly there (a
    # zero keeps its sign: both operands are the same value); max's domain on the device is
    # "not NaN", so its guard refuses the one x the literal branch would have answered
    x = nan_guarded(e, ctx)
    if x is None or not em.dtype.is_float:
        return False
    em.max(x, x, out=e.out)
    return True


def expand_predicate_eq(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # p == c for a predicate p made by a comparison of floats and a boolean literal c: the
    # comparison's exact 0/1 value m, then m >= 1 (p == True) or -m >= 0 (p == False)
    got = predicate_and_literal(e)
    if got is None:
        return False
    em.dtype = DType.F32  # the comparison's operands' dtype (F16 once narrowed)
    m = mask_of(em, got[0], ctx)
    if m is None:
        return False
    if got[1]:
        em.ge(m, 1.0, out=e.out)
    else:
        em.ge(em.neg(m), 0.0, out=e.out)
    return True


def expand_convert(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # a comparison's predicate as 0.0 / 1.0: its mask value, computed in the target dtype
    p = e.inputs[0]
    if not isinstance(e.params, ConvertParams) or not isinstance(p, Var) or not em.dtype.is_float:
        return False
    m = mask_of(em, p, ctx)
    if m is None:
        return False
    em.mul(m, 1.0, out=e.out)
    return True


def expand_integer_compare(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # a comparison of counters and small literals (a causal or position mask): the same
    # integers in F32 (F16 once narrowed) compare the same; x > y is x - y >= 1 on integers
    if any(a.dtype is not DType.I32 for a in e.inputs):
        return False
    em.dtype = DType.F32
    fa, fb = (exact_float(em, a, ctx) for a in e.inputs)
    if fa is None or fb is None:
        return False
    match e.prim:
        case Prim.GE:
            em.ge(fa, fb, out=e.out)
        case Prim.GT:
            em.ge(em.sub(fa, fb), 1.0, out=e.out)
        case _:
            em.ge(em.neg(em.max(em.sub(fa, fb), em.sub(fb, fa))), 0.0, out=e.out)
    return True


def expand_counter_convert(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # convert of a counter (iota) FP16 holds exactly: the counter made in the float dtype
    p = e.inputs[0]
    if p.dtype is not DType.I32 or not em.dtype.is_float or not isinstance(p, Var):
        return False
    f = exact_float(em, p, ctx)
    if f is None or not isinstance(f, Var):
        return False
    em.mul(f, 1.0, out=e.out)
    return True


def expand_mask_scale(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # v * L with |L| beyond FP16, read only by adds and subtracts: an additive mask, so L
    # saturates to the sentinel exactly as an additive literal does
    limit = ctx.max_magnitude
    lits = [a for a in e.inputs if isinstance(a, Literal)]
    if limit is None or len(lits) != 1 or e.out.id in ctx.results:
        return False
    v = lits[0].as_float()
    readers = readers_through_movement(e.out.id, ctx)
    if not (math.isfinite(v) and abs(v) > limit and readers):
        return False
    if any(r.prim not in (Prim.ADD, Prim.SUB) for r in readers):
        return False
    other = next(a for a in e.inputs if not isinstance(a, Literal))
    em.mul(other, math.copysign(limit, v), out=e.out)
    return True


def _downscale(reader: Eqn, s: Var) -> float | None:
    """The literal power of two ``2^k``, k < 0, that ``reader`` multiplies ``s`` by (``s * c``,
    ``c * s`` or ``s / 2^-k``), or None. A scale of magnitude >= 1 is not moved: it could only
    move an overflow earlier (a summand past FP16 where the sum is not), never remove one."""
    if len(reader.inputs) != 2:
        return None
    a, b = reader.inputs
    sa, sb = (isinstance(v, Var) and v.id == s.id for v in (a, b))
    match reader.prim:
        case Prim.MUL if sa and isinstance(b, Literal):
            c = b.as_float()
        case Prim.MUL if sb and isinstance(a, Literal):
            c = a.as_float()
        case Prim.DIV if sa and isinstance(b, Literal):
            d = b.as_float()
            c = 1.0 / d if math.isfinite(d) and d != 0.0 else math.nan
        case _:
            return None
    if not math.isfinite(c) or c == 0.0 or abs(c) >= 1.0:
        return None
    m, _ = math.frexp(abs(c))
    return c if m == 0.5 else None


def expand_scaled_sum(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # reduce_sum(x) read only by "* 2^k" (k < 0): reduce_sum(x * 2^k), writing the product's
    # value. NaN and infinities go through unchanged (inf * 2^k = inf, NaN stays NaN, and
    # inf - inf in the sum is NaN in both), so the range guards see what they saw before.
    (x,) = e.inputs
    if not isinstance(x, Var) or not em.dtype.is_float or e.out.id in ctx.results:
        return False
    readers = ctx.consumers.get(e.out.id, ())
    if len(readers) != 1:
        return False
    c = _downscale(readers[0], e.out)
    if c is None:
        return False
    em.absorb(readers[0])
    em.op(Prim.REDUCE_SUM, em.mul(x, c), params=e.params, out=readers[0].out)
    return True
