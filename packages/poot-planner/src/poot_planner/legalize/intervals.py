"""The interval analysis a legalized chain's bound is derived by (``poot_planner.legalize.
bounds``): each value an ``Enclosure``, an interval holding its exact value and a bound on the
device's error in it, step by step through the chain (the rules per step are in that module's
docstring), each step held to its contract on the target: inside its domain, plus its own
error and one rounding of the device dtype where it computes (``COMPUTING``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from poot_ir import DType, Eqn, Literal, Prim, Var
from poot_ir.core import COMPUTING
from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Bound,
    Domain,
    LargerOperandUlps,
    Relative,
)

from poot_planner.target import Target

__all__ = ["Enclosure", "chain_error", "chain_value", "device_value"]

#: half the smallest subnormal: the most one rounding moves a value below the normal range
_HALF_TINY = {DType.F16: 2.0**-25, DType.BF16: 2.0**-134, DType.F32: 2.0**-150}


@dataclass(frozen=True, slots=True)
class Enclosure:
    """A value of a chain: ``[lo, hi]`` holds its exact value, ``err`` bounds the device's
    error in it."""

    lo: float
    hi: float
    err: float

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


def device_value(x: float, device: DType) -> float:
    with np.errstate(over="ignore"):
        return float(np.array(x, dtype=device.numpy))


def chain_error(
    eqns: list[Eqn], target: Target, device: DType, unit: float, limit: float, operand: Enclosure
) -> float | str:
    """The error of the last step with every operand of the chain in ``operand``."""
    got = chain_value(eqns, target, device, unit, limit, operand)
    return got if isinstance(got, str) else got.err


def chain_value(
    eqns: list[Eqn],
    target: Target,
    device: DType,
    unit: float,
    limit: float,
    operand: Enclosure | dict[int, Enclosure],
) -> Enclosure | str:
    """The last step's value (interval and error) with every operand of the chain in
    ``operand`` (or each in its own interval, by id)."""
    env: dict[int, Enclosure] = {}
    made = {e.out.id for e in eqns}

    def val(a: object) -> Enclosure:
        if isinstance(a, Literal):
            x = a.as_float()
            d = device_value(x, device)
            return Enclosure(d, d, abs(d - x))
        assert isinstance(a, Var)
        if a.id in made:
            return env[a.id]
        return operand[a.id] if isinstance(operand, dict) else operand

    negated: dict[int, int] = {}  # neg's output id -> its operand's id, so max(x, -x) is |x|
    for e in eqns:
        ins = [val(a) for a in e.inputs]
        got = _step(e.prim, ins)
        if e.prim is Prim.NEG and isinstance(e.inputs[0], Var):
            negated[e.out.id] = e.inputs[0].id
        if e.prim is Prim.MAX and isinstance(got, Enclosure) and _is_abs(e, negated):
            x = ins[0]
            low = 0.0 if x.lo <= 0.0 <= x.hi else min(abs(x.lo), abs(x.hi))
            got = Enclosure(low, x.mag, x.err)
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
        kept = _absorbed(e.prim, ins, device) if own == 0.0 else None
        if kept is not None:  # the device's sum is the larger operand itself, in range
            env[e.out.id] = Enclosure(got.lo, got.hi, kept)
            continue
        exact = _exact_scaling(e) or _exact_point(got, ins, device) or _adds_zero(e.prim, ins)
        if e.prim in COMPUTING and not exact:  # the rest of ``_step``'s moves or chooses
            # one rounding: relative in the normal range, at most half the smallest subnormal
            # below it (where the spacing is that subnormal's, whatever the value)
            own += max(unit * (got.mag + got.err), _HALF_TINY.get(device, 0.0))
        y = Enclosure(got.lo, got.hi, got.err + own)
        if not y.mag + y.err <= limit:
            return f"{e.prim.value}: a value past {limit:g}"
        env[e.out.id] = y
    return env[eqns[-1].out.id]


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


def _exact_point(y: Enclosure, ins: list[Enclosure], device: DType) -> bool:
    """Exact operands of one value each whose exact result the device dtype holds: the oracle's
    rounding (what the contracts compare with) leaves it as it is (``k 11/16`` of an integer
    ``k``, ``0 + v``'s zero)."""
    if any(v.err != 0.0 or v.lo != v.hi for v in ins):
        return False
    return y.lo == y.hi and device_value(y.lo, device) == y.lo


def _absorbed(prim: Prim, ins: list[Enclosure], device: DType) -> float | None:
    """An add of an exact operand ``a`` (its value held by the device dtype, one sign) and a
    ``b`` whose device value is below a quarter of ``a``'s ulp (half the spacing below a power
    of two): round to nearest gives ``a`` itself, so the error is ``b``'s exact magnitude, and
    the device's value is ``a``'s (in range whenever ``a`` is). None when that is not so."""
    if prim is not Prim.ADD:
        return None
    for a, b in (ins, ins[::-1]):
        if a.err != 0.0 or a.lo <= 0.0 <= a.hi:
            continue
        low = min(abs(a.lo), abs(a.hi))
        ulp = float(np.spacing(np.array(low, dtype=device.numpy)))
        held = device_value(a.lo, device) == a.lo and device_value(a.hi, device) == a.hi
        if b.mag + b.err < ulp / 4 and math.isfinite(a.mag) and held:
            return b.mag
    return None


def _adds_zero(prim: Prim, ins: list[Enclosure]) -> bool:
    """An add (or subtract) of an exact zero: the other operand, unrounded."""
    zero = [v.lo == v.hi == 0.0 and v.err == 0.0 for v in ins]
    return (prim is Prim.ADD and any(zero)) or (prim is Prim.SUB and zero[1])


def _step(prim: Prim, v: list[Enclosure]) -> Enclosure | str:
    match prim:
        case Prim.ADD:
            return Enclosure(v[0].lo + v[1].lo, v[0].hi + v[1].hi, v[0].err + v[1].err)
        case Prim.SUB:
            return Enclosure(v[0].lo - v[1].hi, v[0].hi - v[1].lo, v[0].err + v[1].err)
        case Prim.MUL:
            a, b = v
            ends = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            err = a.mag * b.err + b.mag * a.err + a.err * b.err
            return Enclosure(min(ends), max(ends), err)
        case Prim.DIV:
            a, b = v
            if b.lo - b.err <= 0 <= b.hi + b.err:
                return "the divisor may be zero"
            ends = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
            low = min(abs(b.lo), abs(b.hi)) - b.err
            y = Enclosure(min(ends), max(ends), 0.0)
            return Enclosure(y.lo, y.hi, (a.err + y.mag * b.err) / low)
        case Prim.EXP:
            if v[0].hi > 700:
                return "exp overflows"
            hi = math.exp(v[0].hi)
            return Enclosure(math.exp(v[0].lo), hi, hi * math.expm1(v[0].err))
        case Prim.NEG:
            return Enclosure(-v[0].hi, -v[0].lo, v[0].err)
        case Prim.MAX:
            return Enclosure(max(v[0].lo, v[1].lo), max(v[0].hi, v[1].hi), max(v[0].err, v[1].err))
        case _:
            return "no interval rule"


def _inside(domain: Domain, ins: list[Enclosure]) -> bool:
    """Whether every operand, with its error, is inside ``domain`` at F32 (a NaN is not among
    the values: an ``Enclosure`` is a finite interval)."""
    b = domain.bounds(DType.F32)
    return all(b.lo <= v.lo - v.err and v.hi + v.err <= b.hi for v in ins)


def _own(bound: Bound, y: Enclosure, ins: list[Enclosure]) -> float | None:
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
