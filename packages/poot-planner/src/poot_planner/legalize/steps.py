"""The exact steps legalization rules share: FP16 step functions and signs, a comparison's
0/1 mask value, select branches as multiplicands and counters as floats. Why each is exact is
in ``poot_planner.legalize.rules``."""

from __future__ import annotations

import math

from poot_ir import Atom, BroadcastParams, ConvertParams, DType, Eqn, IotaParams, Literal, Prim, Var

from poot_planner.emit import Emit, RuleContext
from poot_planner.fp16.narrowing import EXACT_INTEGERS, last_count

__all__ = [
    "TINY_F16",
    "exact_float",
    "float_operands",
    "mask_of",
    "multiplicand",
    "nan_guarded",
    "predicate_and_literal",
    "sigmoid_operand",
    "sign",
]

TINY_F16 = 2.0**-24  # FP16's smallest subnormal
_AMP = 4096.0  # 2^12: two clamped steps amplify by 2^24, exactly (powers of two)
_LIMIT = 1.0 / _AMP  # the first clamp: every nonzero |d| >= 2^-24 stays >= 2^-24, and d * 2^12 <= 1


def step(em: Emit, d: Var) -> Var:
    """1 where ``d > 0``, else 0, exactly for an F16 ``d`` (``poot_planner.legalize.rules``)."""
    # clamped to 2^-12 before the first amplification, so no step exceeds 4096: an amplified
    # large difference would overflow FP16 to inf, which the device's overflow guard refuses
    g = em.clamp(d, 0.0, _LIMIT)
    g = em.mul(g, _AMP)
    return em.min(em.mul(g, _AMP), 1.0)


def nonzero(em: Emit, d: Var) -> Var:
    """1 where ``d != 0``, else 0, exactly for an F16 ``d``: ``step`` of ``|d|``, the clamp
    taken before the absolute value so that ``d`` itself is only ever clamped."""
    g = em.abs(em.clamp(d, -_LIMIT, _LIMIT))
    g = em.mul(g, _AMP)
    return em.min(em.mul(g, _AMP), 1.0)


def sign(em: Emit, x: Var) -> Var:
    """-1, 0 or 1 by the sign of ``x``, exactly for an F16 ``x`` (|x| >= 2^-24 when nonzero)."""
    s = em.mul(em.clamp(x, -_LIMIT, _LIMIT), _AMP)  # clamped first, as in ``step``
    return em.clamp(em.mul(s, _AMP), -1.0, 1.0)


def float_operands(e: Eqn, em: Emit) -> bool:
    return all(a.dtype is em.dtype for a in e.inputs) and em.dtype.is_float


def mask_of(em: Emit, pred: Var, ctx: RuleContext) -> Var | None:
    """The 0/1 value (in ``em.dtype``) of a predicate made by a comparison of values of that
    dtype (possibly broadcast), or None when the predicate comes from anywhere else."""
    e = ctx.producer.get(pred.id)
    if e is None:
        return None
    if e.prim is Prim.BROADCAST_IN_DIM and isinstance(e.params, BroadcastParams):
        inner = e.inputs[0]
        m = mask_of(em, inner, ctx) if isinstance(inner, Var) else None
        return None if m is None else em.op(Prim.BROADCAST_IN_DIM, m, params=e.params)
    if e.prim not in (Prim.GE, Prim.GT, Prim.EQ):
        return None
    if e.prim is Prim.EQ and all(x.dtype is DType.BOOL for x in e.inputs):
        return _predicate_eq_literal(em, e, ctx)
    a, b = e.inputs
    if isinstance(a, Literal) and isinstance(b, Literal):
        return None
    if all(x.dtype is DType.I32 for x in e.inputs) and em.dtype.is_float:
        fa, fb = exact_float(em, a, ctx), exact_float(em, b, ctx)  # counters, as floats
        if fa is None or fb is None:
            return None
        a, b = fa, fb
    elif not float_operands(e, em):
        return None
    match e.prim:
        case Prim.GT:  # a > b  <=>  a - b > 0
            return step(em, em.sub(a, b))
        case Prim.GE:  # a >= b  <=>  not (b - a > 0)
            return em.sub(1.0, step(em, em.sub(b, a)))
        case _:  # a == b  <=>  not (|a - b| > 0)
            return em.sub(1.0, nonzero(em, em.sub(a, b)))


def predicate_and_literal(e: Eqn) -> tuple[Var, bool] | None:
    """``(p, c)`` of ``p == c``, a boolean predicate compared with a boolean literal (an
    exported ``isnan`` guard is ``(x == x) == False``), else None."""
    a, b = e.inputs
    if isinstance(a, Literal):
        a, b = b, a
    if not (isinstance(a, Var) and isinstance(b, Literal) and a.dtype is DType.BOOL):
        return None
    return a, b.as_float() != 0.0


def _predicate_eq_literal(em: Emit, e: Eqn, ctx: RuleContext) -> Var | None:
    # p == True is p, p == False is not p: 1 - m, exact on a 0/1 m
    got = predicate_and_literal(e)
    m = mask_of(em, got[0], ctx) if got is not None else None
    if got is None or m is None:
        return None
    return m if got[1] else em.sub(1.0, m)


def multiplicand(em: Emit, v: Var | Literal, ctx: RuleContext) -> Var | Literal | None:
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


def exact_float(em: Emit, a: Atom, ctx: RuleContext) -> Atom | None:
    """An I32 operand as the same values in ``em.dtype``, when they provably fit FP16's exact
    integers: a literal, or a counter (``iota``, possibly broadcast) along an axis of at most
    2049; None otherwise (a runtime integer's range is not known)."""
    if isinstance(a, Literal):
        v = a.as_int()
        return em.lit(float(v)) if abs(v) <= EXACT_INTEGERS else None
    e = ctx.producer.get(a.id)
    if e is None:
        return None
    if e.prim is Prim.BROADCAST_IN_DIM and isinstance(e.inputs[0], Var):
        inner = exact_float(em, e.inputs[0], ctx)
        return None if inner is None else em.op(Prim.BROADCAST_IN_DIM, inner, params=e.params)
    if e.prim is Prim.IOTA and isinstance(e.params, IotaParams):
        if last_count(e.params) > EXACT_INTEGERS:
            return None
        # made in F16 (the counter the NPU has), then widened to the operating dtype: a
        # convert the narrowing pass removes again
        f16 = em.op(Prim.IOTA, params=IotaParams(e.params.shape, DType.F16, e.params.axis))
        if em.dtype is DType.F16:
            return f16
        return em.op(Prim.CONVERT, f16, params=ConvertParams(em.dtype))
    return None


def _made(ctx: RuleContext, a: Atom, prim: Prim) -> Eqn | None:
    e = ctx.producer.get(a.id) if isinstance(a, Var) else None
    return e if e is not None and e.prim is prim else None


def _is(a: Atom, value: float) -> bool:
    return isinstance(a, Literal) and a.as_float() == value


def sigmoid_operand(e: Eqn, ctx: RuleContext) -> Var | None:
    """``x`` of ``select(x >= 0, r, e r)``, ``e = exp(-|x|)``, ``r = recip(e + 1)`` (how the
    importer writes a sigmoid: ``poot_onnx.logic.sigmoid``), else None."""
    if e.prim is not Prim.SELECT:
        return None
    pred, r, er = e.inputs
    ge = _made(ctx, pred, Prim.GE)
    if ge is None or not _is(ge.inputs[1], 0.0) or not isinstance(ge.inputs[0], Var):
        return None
    x = ge.inputs[0]
    rec, mul = _made(ctx, r, Prim.RECIP), _made(ctx, er, Prim.MUL)
    add = _made(ctx, rec.inputs[0], Prim.ADD) if rec is not None else None
    if add is None or mul is None or r not in mul.inputs:
        return None
    g = next((a for a in add.inputs if not _is(a, 1.0)), None)
    if g is None or not any(_is(a, 1.0) for a in add.inputs) or g not in mul.inputs:
        return None
    ex = _made(ctx, g, Prim.EXP)
    neg = _made(ctx, ex.inputs[0], Prim.NEG) if ex is not None else None
    ab = _made(ctx, neg.inputs[0], Prim.ABS) if neg is not None else None
    return x if ab is not None and ab.inputs[0] == x else None


def nan_guarded(e: Eqn, ctx: RuleContext) -> Var | None:
    """``x`` of an exported NaN guard on ``x``: ``select(isnan(x), c, x)`` with ``isnan(x)``
    written ``(x == x) == False`` (torch's scaled dot-product attention after its softmax), or
    ``select(x == x, x, c)``; ``c`` a literal. Else None."""
    if e.prim is not Prim.SELECT:
        return None
    pred, a, b = e.inputs
    same = _made(ctx, pred, Prim.EQ)
    if same is None:
        return None
    if all(x.dtype is DType.BOOL for x in same.inputs):  # not (x == x): the branches swap
        got = predicate_and_literal(same)
        if got is None or got[1]:
            return None
        same = _made(ctx, got[0], Prim.EQ)
        a, b = b, a
    if same is None or not isinstance(a, Var) or not isinstance(b, Literal):
        return None
    x, y = same.inputs
    ok = isinstance(x, Var) and x == y == a and x.dtype.is_float
    return a if ok else None
