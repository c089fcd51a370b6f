"""The bound of a legalized equation, derived from the contracts of the steps it became.

An ``IDENTITY`` rule is its steps' contracts: exact when every step is bit exact, else the one
approximate step's contract when it is the last step (nothing after it to amplify it); any
other chain has no derived bound and is not rewritten.

An ``APPROXIMATION`` rule gets an absolute bound over its domain by interval analysis of its
steps, as the XDNA2 RMSNorm bound is derived in ``poot_planner.rowfusion``, but absolute:

    each value: an interval holding its exact value, and a bound on the device's error in it
    literal: its rounding into the device dtype;  operand: exact, anywhere the step's contract
    takes it (on a narrowing target, FP16's finite range)
    add, sub  e_a + e_b                       mul  |a| e_b + |b| e_a + e_a e_b
    div       (e_a + |y| e_b) / (min|b| - e_b) exp  max(y) (exp(e_a) - 1)
    neg, max  e_a (max: the larger)
    + own     the step's contract at the largest result, plus one rounding (unit roundoff of
              the device dtype) for an arithmetic step: the contracts compare the device with
              the oracle in the device dtype, and that oracle rounds

and the bound is the formula's published error plus the last step's error. A step outside its
contract's domain on the interval, a division whose divisor may reach zero, or a value past the
device dtype's range leaves the rule without a bound (the reason says which step).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from poot_ir import DType, Eqn, Literal, Prim, ReduceParams, Var
from poot_ir.numerics import (
    AbsRel,
    AnyInput,
    BitExact,
    Bound,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    LargerOperandUlps,
    NotNaN,
    PositiveNormal,
    Relative,
)

from poot_planner.legal_rules import Numerics, Rule
from poot_planner.target import Target

__all__ = ["Derivation", "derive"]

_UNIT = {DType.F16: 2.0**-11, DType.F32: 2.0**-24}
_ROUNDS = frozenset({Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.EXP})


@dataclass(frozen=True, slots=True)
class Derivation:
    """A rule's bound on one target (``bound``), or why it has none (``reason``)."""

    bound: Bound | None
    reason: str = ""

    def describe(self) -> str:
        match self.bound:
            case None:
                return f"no bound: {self.reason}"
            case BitExact():
                return "exact"
            case AbsRel(abs=a, rel=r):
                return f"abs {a:.3g}" + (f" + rel {r:.3g}" if r else "")
            case other:
                return repr(other)


_MEMO: dict[tuple[Rule, Target, DType], Derivation] = {}


@dataclass(frozen=True, slots=True)
class _Val:
    lo: float
    hi: float
    err: float

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


def derive(rule: Rule, eqns: list[Eqn], target: Target, dtype: DType) -> Derivation:
    """The bound of ``rule``'s decomposition ``eqns`` on ``target``, computing in ``dtype``."""
    device = dtype
    if dtype is DType.F32 and target.narrowing is not None:
        device = target.narrowing.device_dtype
    match rule.numerics:
        case Numerics.IDENTITY:
            return _identity(eqns, target)
        case Numerics.SENTINEL:
            return Derivation(BitExact(signed_zero=False))  # exact where FP16 holds the value
        case Numerics.SCALED_SUM:
            return _scaled_sum(eqns, target, device)
        case Numerics.APPROXIMATION:
            # the chain of an approximation does not depend on the shape it runs at, so its
            # analysis (some thousands of interval steps) is made once per rule and target
            key = (rule, target, device)
            if key not in _MEMO:
                _MEMO[key] = _approximation(rule, eqns, target, device)
            return _MEMO[key]


def _identity(eqns: list[Eqn], target: Target) -> Derivation:
    approx: list[tuple[int, Bound]] = []
    for k, e in enumerate(eqns):
        cap = target.capability(e.prim, _operand_dtype(e, target))
        if cap is None:
            return Derivation(None, f"{e.prim.value} has no contract")
        if not isinstance(cap.contract.bound, BitExact):
            approx.append((k, cap.contract.bound))
    if not approx:
        return Derivation(BitExact(signed_zero=False))
    if len(approx) == 1 and approx[0][0] == len(eqns) - 1:
        return Derivation(approx[0][1])
    return Derivation(None, "more than one approximate step, or one not last")


#: half the smallest subnormal: the most a product by a power of two below 1 loses when it
#: lands in the subnormal range (the rounding is to the nearest multiple of the smallest
#: subnormal; above it the product is exact)
_UNDERFLOW = {DType.F16: 2.0**-25, DType.BF16: 2.0**-134, DType.F32: 2.0**-150}


def _scaled_sum(eqns: list[Eqn], target: Target, device: DType) -> Derivation:
    """``reduce_sum(x * 2^k)`` against ``reduce_sum(x) * 2^k`` in exact arithmetic over the same
    device values: each of the n summands is exact or loses at most ``_UNDERFLOW`` in the
    scaling, so the sum moves by at most n of them; the two steps' own contracts add theirs (an
    absolute one as is; a relative one at the rescaled sum's magnitude is not static, so it
    leaves no bound). The final rounding of the sum to the device dtype is the reduction's, as
    for any reduce_sum on the target (the running analysis adds it, ``error_bounds``)."""
    half = _UNDERFLOW.get(device)
    if half is None or len(eqns) != 2 or [e.prim for e in eqns] != [Prim.MUL, Prim.REDUCE_SUM]:
        return Derivation(None, "not a scaled sum of one product and one reduction")
    mul, red = eqns
    if not isinstance(red.params, ReduceParams):
        return Derivation(None, "reduce_sum without its axes")
    shape: tuple[int, ...] = red.inputs[0].type.shape
    n = math.prod(shape[a] for a in red.params.axes)
    total = n * half
    for e in eqns:
        cap = target.capability(e.prim, device)
        if cap is None:
            return Derivation(None, f"{e.prim.value} has no contract on {device.value}")
        match cap.contract.bound:
            case BitExact():
                pass
            case AbsRel(abs=a, rel=0.0):
                total += a * (n if e is mul else 1)
            case _:
                return Derivation(None, f"{e.prim.value}: its contract gives no absolute bound")
    return Derivation(AbsRel(total, 0.0))


def _operand_dtype(e: Eqn, target: Target) -> DType:
    """The dtype the step computes in on ``target`` (F32 narrowed where the target narrows)."""
    d = e.inputs[0].dtype if e.inputs else e.out.dtype
    if e.prim is Prim.SELECT:
        d = e.inputs[1].dtype
    if d is DType.F32 and target.narrowing is not None:
        return target.narrowing.device_dtype
    return d


def _device_value(x: float, device: DType) -> float:
    with np.errstate(over="ignore"):
        return float(np.array(x, dtype=device.numpy))


#: The operand's range is analysed in pieces (intervals lose the correlation of a value with
#: itself, so a narrower piece gives a tighter bound): the two tails beyond +-8 and slices of
#: 1/8 in between. The bound is the largest piece's.
_EDGE, _SLICES = 8.0, 128


def _approximation(rule: Rule, eqns: list[Eqn], target: Target, device: DType) -> Derivation:
    limit = target.narrowing.max_magnitude if target.narrowing is not None else 3.4028234e38
    unit = _UNIT.get(device)
    if unit is None:
        return Derivation(None, f"no unit roundoff known for {device.value}")
    edges = [-_EDGE + 2 * _EDGE * k / _SLICES for k in range(_SLICES + 1)]
    pieces = [(-limit, -_EDGE), *itertools.pairwise(edges), (_EDGE, limit)]
    worst = 0.0
    for lo, hi in pieces:
        got = _analyse(eqns, target, device, unit, limit, _Val(lo, hi, 0.0))
        if isinstance(got, str):
            return Derivation(None, got)
        worst = max(worst, got)
    return Derivation(AbsRel(rule.approximation + worst, 0.0))


def _analyse(
    eqns: list[Eqn], target: Target, device: DType, unit: float, limit: float, operand: _Val
) -> float | str:
    """The error of the last step with every operand of the chain in ``operand``."""
    env: dict[int, _Val] = {}
    made = {e.out.id for e in eqns}

    def val(a: object) -> _Val:
        if isinstance(a, Literal):
            x = a.as_float()
            d = _device_value(x, device)
            return _Val(d, d, abs(d - x))
        assert isinstance(a, Var)
        return env[a.id] if a.id in made else operand

    negated: dict[int, int] = {}  # neg's output id -> its operand's id, so max(x, -x) is |x|
    for e in eqns:
        ins = [val(a) for a in e.inputs]
        got = _step(e.prim, ins)
        if e.prim is Prim.NEG and isinstance(e.inputs[0], Var):
            negated[e.out.id] = e.inputs[0].id
        if e.prim is Prim.MAX and isinstance(got, _Val) and _is_abs(e, negated):
            x = ins[0]
            low = 0.0 if x.lo <= 0.0 <= x.hi else min(abs(x.lo), abs(x.hi))
            got = _Val(low, x.mag, x.err)
        if isinstance(got, str):
            return f"{e.prim.value}: {got}"
        cap = target.capability(e.prim, device)
        if cap is None:
            return f"{e.prim.value} has no contract on {device.value}"
        if not _inside(cap.contract.domain, ins):
            return f"{e.prim.value}: operands outside its contract's domain"
        own = _own(cap.contract.bound, got, ins)
        if own is None:
            return f"{e.prim.value}: its contract gives no absolute bound"
        if e.prim in _ROUNDS and not _exact_scaling(e):
            own += unit * (got.mag + got.err)
        y = _Val(got.lo, got.hi, got.err + own)
        if not y.mag + y.err <= limit:
            return f"{e.prim.value}: a value past {limit:g}"
        env[e.out.id] = y
    return env[eqns[-1].out.id].err


def _is_abs(e: Eqn, negated: dict[int, int]) -> bool:
    a, b = e.inputs
    if not (isinstance(a, Var) and isinstance(b, Var)):
        return False
    return negated.get(b.id) == a.id or negated.get(a.id) == b.id


def _exact_scaling(e: Eqn) -> bool:
    """A product by a literal power of two of magnitude >= 1: exact short of overflow (which
    the range check excludes), subnormal operands included."""
    if e.prim is not Prim.MUL:
        return False
    for a in e.inputs:
        if isinstance(a, Literal):
            m, _ = math.frexp(abs(a.as_float()))
            return m == 0.5 and abs(a.as_float()) >= 1.0
    return False


def _step(prim: Prim, v: list[_Val]) -> _Val | str:
    match prim:
        case Prim.ADD:
            return _Val(v[0].lo + v[1].lo, v[0].hi + v[1].hi, v[0].err + v[1].err)
        case Prim.SUB:
            return _Val(v[0].lo - v[1].hi, v[0].hi - v[1].lo, v[0].err + v[1].err)
        case Prim.MUL:
            a, b = v
            ends = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            err = a.mag * b.err + b.mag * a.err + a.err * b.err
            return _Val(min(ends), max(ends), err)
        case Prim.DIV:
            a, b = v
            if b.lo - b.err <= 0 <= b.hi + b.err:
                return "the divisor may be zero"
            ends = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
            low = min(abs(b.lo), abs(b.hi)) - b.err
            y = _Val(min(ends), max(ends), 0.0)
            return _Val(y.lo, y.hi, (a.err + y.mag * b.err) / low)
        case Prim.EXP:
            if v[0].hi > 700:
                return "exp overflows"
            hi = math.exp(v[0].hi)
            return _Val(math.exp(v[0].lo), hi, hi * math.expm1(v[0].err))
        case Prim.NEG:
            return _Val(-v[0].hi, -v[0].lo, v[0].err)
        case Prim.MAX:
            return _Val(max(v[0].lo, v[1].lo), max(v[0].hi, v[1].hi), max(v[0].err, v[1].err))
        case _:
            return "no interval rule"


def _inside(domain: object, ins: list[_Val]) -> bool:
    match domain:
        case AnyInput() | NotNaN():
            return True
        case FiniteInputs() | FiniteNormalResult():
            return all(math.isfinite(v.mag + v.err) for v in ins)
        case Interval(lo=lo, hi=hi):
            return all(lo <= v.lo - v.err and v.hi + v.err <= hi for v in ins)
        case PositiveNormal():
            return all(v.lo - v.err > 0 for v in ins)
        case _:
            return False


def _own(bound: Bound, y: _Val, ins: list[_Val]) -> float | None:
    m = y.mag + y.err
    match bound:
        case BitExact():
            return 0.0
        case AbsRel(abs=a, rel=r):
            return a + r * m
        case Relative(rel=r):
            return r * m
        case LargerOperandUlps(ulps=u, unit=unit):
            return u * unit * max(v.mag + v.err for v in ins)
        case _:
            return None
