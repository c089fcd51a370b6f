"""Legalization rules as data: a primitive a target refuses, rewritten into steps it admits.

Each ``Rule`` names the primitive, the target, the decomposition (as text for people and as an
expander that emits the equations) and its numerics:

- ``IDENTITY``: the decomposition equals the primitive in the dtype the target computes in; its
  bound is its steps' contracts (exact when every step is exact; a single approximate step, the
  last one, passes its own contract on). The argument for each identity is in its comment.
- ``APPROXIMATION``: a published formula whose error in exact arithmetic is ``approximation``;
  the planner adds the floating-point error of its steps, derived from the steps' contracts and
  the device dtype's rounding over the formula's domain (``poot_planner.legalize.bounds``).
- ``REDUCED``: an exact range reduction, then a short series (``poot_planner.legalize.logarithm``): the
  bound is derived on the series alone, over the reduced argument's pieces, and is relative;
  the running error analysis carries the rewrite as one step under that bound.
- ``SENTINEL``: the specification's mask-sentinel rule carried to a product: a mask value too
  large for FP16 saturates to the sentinel (+-65504), which is all an additive mask needs.
- ``SCALED_SUM``: a range rewrite, made where the equation is admitted too (``admitted_too``):
  ``reduce_sum(x) * 2^k`` (k < 0) as ``reduce_sum(x * 2^k)``, so a sum FP16 cannot hold whose
  scaled value it can (LayerNorm's sum of squares over 512 features, ~1.3e5, times 1/512) stays
  in range. Scaling by a power of two is exact in FP16 unless the product underflows: a scaled
  summand in the subnormal range loses at most half the smallest subnormal (2^-25), so over n
  summands the sum moves by at most n 2^-25 (``poot_planner.legalize.bounds``). A scale that is
  not a power of two (BERT's 1/768) is not moved: each scaled summand would round (2^-11
  relative), which bounds the sum only relative to ``sum |x_i|``, not to the result: fine for a
  sum of squares, unbounded relative to a mean of signed values that cancel, and not an
  absolute bound this table can state.

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
from dataclasses import dataclass
from enum import Enum

from poot_ir import ConvertParams, DType, Eqn, Literal, Prim, Var

from poot_planner.emit import Emit, RuleContext, readers_through_movement
from poot_planner.legalize.logarithm import (
    SOFTPLUS_REMAINDER,
    SOFTPLUS_TOP,
    expand_log,
    expand_softplus,
)
from poot_planner.legalize.steps import (
    TINY_F16,
    exact_float,
    float_operands,
    mask_of,
    multiplicand,
    predicate_and_literal,
    sigmoid_operand,
    sign,
)

__all__ = ["RULES", "Numerics", "Rule", "RuleContext", "rules_for"]


class Numerics(Enum):
    IDENTITY = "exact identity"
    APPROXIMATION = "approximation"
    SENTINEL = "saturated sentinel"
    REDUCED = "range-reduced approximation"
    SCALED_SUM = "power-of-two scale moved into the sum"


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
    #: error of the formula in exact arithmetic over its whole domain (APPROXIMATION only);
    #: relative to the function's value when ``relative``, whose derived bound is then fitted
    #: as absolute plus relative (``poot_planner.legalize.bounds``)
    approximation: float = 0.0
    source: str = ""
    relative: bool = False
    #: the function the running error analysis carries the rewrite as, one step under its
    #: derived bound (``poot_planner.error_bounds``): "log" or "softplus"; "" carries it step
    #: by step
    carried: str = ""
    #: the operand's range the bound is derived on, when narrower than the device dtype's
    #: (beyond it the rewrite is refused in the graph)
    domain: tuple[float, float] | None = None
    #: tried on every matching equation, admitted or not (a range rewrite: the admitted form
    #: may overflow FP16 at run time where the rewritten one does not)
    admitted_too: bool = False


# -- the expanders ---------------------------------------------------------------------------


def _tanh(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # tanh(x) = sign(x) (1 - exp(-2|x|)) / (1 + exp(-2|x|)), |x| clamped at 9 (tanh(9) rounds
    # to 1 in F32, and -2 * 9 keeps exp in range)
    (x,) = e.inputs
    if not isinstance(x, Var) or not em.dtype.is_float:
        return False
    c = em.clamp(x, -9.0, 9.0)
    g = em.exp(em.mul(em.abs(c), -2.0))
    em.mul(sign(em, c), em.div(em.sub(1.0, g), em.add(1.0, g)), out=e.out)
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
    em.mul(sign(em, c), magnitude, out=e.out)
    return True


def _sigmoid_select(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # the importer's sigmoid (``poot_onnx.logic.sigmoid``): select(x >= 0, r, e r) with
    # e = exp(-|x|), r = 1 / (1 + e): both branches are 1 / (1 + exp(-x)), in exact arithmetic
    x = sigmoid_operand(e, ctx)
    if x is None or not em.dtype.is_float:
        return False
    em.div(1.0, em.add(em.exp(em.neg(x)), 1.0), out=e.out)
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
    if not float_operands(e, em):
        return False
    em.ge(em.neg(em.max(em.sub(a, b), em.sub(b, a))), 0.0, out=e.out)
    return True


def _gt(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    a, b = e.inputs
    if not float_operands(e, em):
        return False
    em.ge(em.sub(a, b), TINY_F16, out=e.out)
    return True


def _select(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
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


def _predicate_eq(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
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


def _convert(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # a comparison's predicate as 0.0 / 1.0: its mask value, computed in the target dtype
    p = e.inputs[0]
    if not isinstance(e.params, ConvertParams) or not isinstance(p, Var) or not em.dtype.is_float:
        return False
    m = mask_of(em, p, ctx)
    if m is None:
        return False
    em.mul(m, 1.0, out=e.out)
    return True


def _integer_compare(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
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


def _counter_convert(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    # convert of a counter (iota) FP16 holds exactly: the counter made in the float dtype
    p = e.inputs[0]
    if p.dtype is not DType.I32 or not em.dtype.is_float or not isinstance(p, Var):
        return False
    f = exact_float(em, p, ctx)
    if f is None or not isinstance(f, Var):
        return False
    em.mul(f, 1.0, out=e.out)
    return True


def _mask_scale(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
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


def _scaled_sum(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
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


_I, _A, _S = Numerics.IDENTITY, Numerics.APPROXIMATION, Numerics.SENTINEL
_R = Numerics.REDUCED
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
    Rule(
        Prim.LOG,
        INTEL,
        "softplus as ONNX writes it, stably",
        "log(exp(v) + 1) as max(v, 0) + 2u (1 + u^2/3 + ... + u^8/9), u = g / (g + 2), "
        "g = exp(-|v|); v > 88.6875 (F32's exp overflows: the oracle's +inf) made NaN by an "
        "FP16 overflow, flagged in the graph",
        _A,
        expand_softplus,
        approximation=SOFTPLUS_REMAINDER,
        source="identity log(1 + g) = 2 atanh(g / (2 + g)); remainder <= u^10 / (11 (1 - u^2)) "
        "relative, u <= 1/3",
        relative=True,
        carried="softplus",
        domain=(-math.inf, SOFTPLUS_TOP),
    ),
    Rule(
        Prim.LOG,
        INTEL,
        "log by exact range reduction",
        "x = m 2^k by ten exact 0/1-mask stages (m in [0.707, 1.414)), then "
        "k 11/16 + (k (ln2 - 11/16) + 2u (1 + u^2/3 + u^4/5)), u = (m - 1)/(m + 1); "
        "x <= 0 made NaN by + (sqrt(x) / x) 0, flagged in the graph",
        _R,
        expand_log,
        source="atanh series, remainder <= 2|u|^7 / (7 (1 - u^2)) (3.7e-6 relative)",
        carried="log",
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
        Prim.EQ,
        INTEL,
        "a comparison's predicate against a literal",
        "m >= 1 (p == True) or -m >= 0 (p == False), m the comparison as 0/1 (an isnan guard)",
        _I,
        _predicate_eq,
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
        Prim.CONVERT,
        INTEL,
        "a counter to float",
        "iota in the float dtype (axis <= 2049: FP16's exact integers)",
        _I,
        _counter_convert,
    ),
    *(
        Rule(
            p,
            INTEL,
            f"integer {p.value} of counters",
            "the same integers in F32 (F16 once narrowed); x > y as x - y >= 1",
            _I,
            _integer_compare,
        )
        for p in (Prim.GE, Prim.GT, Prim.EQ)
    ),
    Rule(
        Prim.MUL,
        INTEL,
        "mask scale saturates",
        "v * L (|L| > 65504, read only additively) as v * sign(L) 65504",
        _S,
        _mask_scale,
    ),
    Rule(
        Prim.SELECT,
        XDNA,
        "sigmoid's select through exp and div",
        "select(x >= 0, r, e r), e = exp(-|x|), r = 1 / (1 + e) as 1 / (1 + exp(-x)); "
        "bound on [-88, 87] (past it exp's domain: flagged on the device)",
        _A,
        _sigmoid_select,
        source="identity: both branches are 1 / (1 + exp(-x))",
        domain=(-88.0, 87.0),
    ),
    Rule(
        Prim.REDUCE_SUM,
        INTEL,
        "power-of-two scale into the sum",
        "reduce_sum(x) * 2^k (k < 0, its only reader) as reduce_sum(x * 2^k)",
        Numerics.SCALED_SUM,
        _scaled_sum,
        source="exact scaling; n 2^-25 for summands that underflow",
        admitted_too=True,
    ),
    Rule(Prim.MIN, XDNA, "min via max", "-max(-a, -b)", _I, _min),
    Rule(Prim.ABS, XDNA, "abs via max", "max(x, -x)", _I, _abs),
)


def rules_for(target: str, prim: Prim) -> tuple[Rule, ...]:
    return tuple(r for r in RULES if r.target == target and r.prim is prim)
