"""The bound of a legalized equation, derived from the contracts of the steps it became.

An ``IDENTITY`` rule is its steps' contracts: exact when every step is bit exact, else the one
approximate step's contract when it is the last step (nothing after it to amplify it); any
other chain has no derived bound and is not rewritten.

An ``APPROXIMATION`` rule gets an absolute bound over its domain by interval analysis of its
steps, as the XDNA2 RMSNorm bound is derived in ``poot_planner.xdna2.rowfusion``, but absolute:

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
from poot_ir import DType, Eqn, Literal, Prim, ReduceParams, TensorType, Var
from poot_ir.core import COMPUTING
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

from poot_planner.emit import Emit
from poot_planner.legalize import logarithm
from poot_planner.legalize.rules import Numerics, Rule
from poot_planner.target import Target

__all__ = ["Derivation", "derive"]

_UNIT = {DType.F16: 2.0**-11, DType.F32: 2.0**-24}


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
        case Numerics.REDUCED:
            key = (rule, target, device)
            if key not in _MEMO:
                _MEMO[key] = _reduced(rule, target, device)
            return _MEMO[key]
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
    if rule.relative:
        return _relative(rule, eqns, target, device, unit, limit)
    edges = [-_EDGE + 2 * _EDGE * k / _SLICES for k in range(_SLICES + 1)]
    pieces = [(-limit, -_EDGE), *itertools.pairwise(edges), (_EDGE, limit)]
    if rule.domain is not None:  # the bound holds on the rule's domain (beyond it: refused)
        # in slices of 1/8 all along it: an exp over a long piece has an absolute error its
        # small end cannot carry
        first, last = rule.domain
        n = math.ceil((last - first) * 8)
        pieces = list(itertools.pairwise([first + (last - first) * q / n for q in range(n + 1)]))
    worst = 0.0
    for lo, hi in pieces:
        got = _analyse(eqns, target, device, unit, limit, _Val(lo, hi, 0.0))
        if isinstance(got, str):
            return Derivation(None, got)
        worst = max(worst, got)
    return Derivation(AbsRel(rule.approximation + worst, 0.0))


#: A relative bound's pieces: slices of 1/8 from -16 to 16 (FP16's exp(-16) is below its
#: smallest subnormal), binades beyond (a rounding there is relative to the binade), and the
#: rest of each tail. A piece whose value may be below FP16's smallest normal 2^-14 (where only
#: an absolute bound can hold) goes to the absolute part.
_REL_EDGE, _NORMAL_F16 = 16.0, 2.0**-14


def _relative_pieces(limit: float) -> list[tuple[float, float]]:
    slices = [-_REL_EDGE + k / 8 for k in range(int(2 * _REL_EDGE * 8) + 1)]
    binades = [2.0**j for j in range(4, 16)] + [limit]
    above = list(itertools.pairwise(binades))
    below = [(-b, -a) for a, b in reversed(above)]
    return [(-limit, -limit), *below, *itertools.pairwise(slices), *above]


def _relative(
    rule: Rule, eqns: list[Eqn], target: Target, device: DType, unit: float, limit: float
) -> Derivation:
    """``AbsRel(abs, rel)``: ``rel`` the largest error over the smallest magnitude of the exact
    function on a piece (the formula's interval shrunk by its relative remainder), ``abs`` the
    largest error of a piece whose value may be below FP16's smallest normal. Each piece's
    error is the device's (the interval analysis) plus the remainder at its largest value."""
    rel, at_tiny = 0.0, 0.0
    first, last = rule.domain if rule.domain is not None else (-limit, limit)
    for lo, hi in _relative_pieces(limit):
        lo, hi = max(lo, first), min(hi, last)
        if lo > hi:
            continue
        got = _analyse_val(eqns, target, device, unit, limit, _Val(lo, hi, 0.0))
        if isinstance(got, str):
            return Derivation(None, got)
        err = got.err + rule.approximation * got.mag
        smallest = 0.0 if got.lo <= 0.0 <= got.hi else min(abs(got.lo), abs(got.hi))
        smallest /= 1.0 + rule.approximation
        if smallest >= _NORMAL_F16:
            rel = max(rel, err / smallest)
        else:
            at_tiny = max(at_tiny, err)
    return Derivation(AbsRel(at_tiny, rel))


def _analyse(
    eqns: list[Eqn], target: Target, device: DType, unit: float, limit: float, operand: _Val
) -> float | str:
    """The error of the last step with every operand of the chain in ``operand``."""
    got = _analyse_val(eqns, target, device, unit, limit, operand)
    return got if isinstance(got, str) else got.err


def _analyse_val(
    eqns: list[Eqn],
    target: Target,
    device: DType,
    unit: float,
    limit: float,
    operand: _Val | dict[int, _Val],
) -> _Val | str:
    """The last step's value (interval and error) with every operand of the chain in
    ``operand`` (or each in its own interval, by id)."""
    env: dict[int, _Val] = {}
    made = {e.out.id for e in eqns}

    def val(a: object) -> _Val:
        if isinstance(a, Literal):
            x = a.as_float()
            d = _device_value(x, device)
            return _Val(d, d, abs(d - x))
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
        kept = _absorbed(e.prim, ins, device) if own == 0.0 else None
        if kept is not None:  # the device's sum is the larger operand itself, in range
            env[e.out.id] = _Val(got.lo, got.hi, kept)
            continue
        exact = _exact_scaling(e) or _exact_point(got, ins, device) or _adds_zero(e.prim, ins)
        if e.prim in COMPUTING and not exact:  # the rest of ``_step``'s moves or chooses
            own += unit * (got.mag + got.err)
        y = _Val(got.lo, got.hi, got.err + own)
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


def _exact_point(y: _Val, ins: list[_Val], device: DType) -> bool:
    """Exact operands of one value each whose exact result the device dtype holds: the oracle's
    rounding (what the contracts compare with) leaves it as it is (``k 11/16`` of an integer
    ``k``, ``0 + v``'s zero)."""
    if any(v.err != 0.0 or v.lo != v.hi for v in ins):
        return False
    return y.lo == y.hi and _device_value(y.lo, device) == y.lo


def _absorbed(prim: Prim, ins: list[_Val], device: DType) -> float | None:
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
        held = _device_value(a.lo, device) == a.lo and _device_value(a.hi, device) == a.hi
        if b.mag + b.err < ulp / 4 and math.isfinite(a.mag) and held:
            return b.mag
    return None


def _adds_zero(prim: Prim, ins: list[_Val]) -> bool:
    """An add (or subtract) of an exact zero: the other operand, unrounded."""
    zero = [v.lo == v.hi == 0.0 and v.err == 0.0 for v in ins]
    return (prim is Prim.ADD and any(zero)) or (prim is Prim.SUB and zero[1])


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


# -- a range-reduced approximation: log -----------------------------------------------------


def _reduced(rule: Rule, target: Target, device: DType) -> Derivation:
    """``log``'s bound on ``target`` (``poot_planner.legalize.logarithm``): the reduction to ``(m, k)``
    is exact, so the tail is analysed alone, ``k`` each integer of ``K_RANGE`` and ``m`` in
    pieces of ``[M_LO, M_HI)`` on FP16's grid, narrowing geometrically towards 1 so that each
    piece but ``m = 1`` keeps ``log x`` away from zero. Each piece's error against the exact
    ``log x`` is the device's (the interval analysis) plus the series' remainder; the bound is
    relative (``rel``: the largest error over ``|log x|`` of a piece away from zero) plus the
    absolute error where ``log x`` is zero (``x = 1``)."""
    if rule.prim is not Prim.LOG:
        return Derivation(None, f"no range-reduced analysis of {rule.prim.value}")
    unit = _UNIT.get(device)
    if unit is None or device is not DType.F16:
        return Derivation(None, f"the reduction is exact on FP16 only, not {device.value}")
    limit = target.narrowing.max_magnitude if target.narrowing is not None else 65504.0
    em = Emit(2, device)
    m_var, k_var = Var(0, TensorType((), device)), Var(1, TensorType((), device))
    logarithm.tail(em, m_var, k_var)
    for e in em.eqns:  # every step of the tail has a row on the target
        if target.capability(e.prim, device) is None:
            return Derivation(None, f"{e.prim.value} has no contract on {device.value}")
    rel, at_zero = 0.0, 0.0
    for k in range(logarithm.K_RANGE[0], logarithm.K_RANGE[1] + 1):
        for lo, hi in _m_pieces(fine=k == 0):
            got = _analyse_val(
                em.eqns,
                target,
                device,
                unit,
                limit,
                {0: _Val(lo, hi, 0.0), 1: _Val(float(k), float(k), 0.0)},
            )
            if isinstance(got, str):
                return Derivation(None, got)
            err = got.err + _series_remainder(lo, hi)
            exact = (math.log(lo) + k * math.log(2.0), math.log(hi) + k * math.log(2.0))
            smallest = 0.0 if exact[0] <= 0.0 <= exact[1] else min(map(abs, exact))
            if smallest > 0.0:
                rel = max(rel, err / smallest)
            else:
                at_zero = max(at_zero, err)
    return Derivation(AbsRel(at_zero, rel))


def _series_remainder(lo: float, hi: float) -> float:
    """``|2 atanh(u) - 2u (1 + u^2/3 + u^4/5)| <= 2|u|^7 / (7 (1 - u^2))`` over ``m`` in the
    piece (the dropped terms ``2u^(2j+1)/(2j+1)``, j >= 3, below a geometric series)."""
    u = max(abs((lo - 1.0) / (lo + 1.0)), abs((hi - 1.0) / (hi + 1.0)))
    return 2.0 * u**7 / (7.0 * (1.0 - u * u))


def _m_pieces(fine: bool) -> list[tuple[float, float]]:
    """Pieces covering every FP16 ``m`` in ``[M_LO, M_HI)``. ``fine`` (for k = 0, where
    ``log x`` crosses zero): below 1 ending at 1 - 2^-j, above it starting at 1 + 2^-j (FP16's
    neighbours of 1 are 1 - 2^-11 and 1 + 2^-10), each split in four, and ``m = 1`` alone;
    otherwise ``log x`` is at least ln2/2 away from zero and sixteen even pieces do."""
    top = float(np.nextafter(np.float16(logarithm.M_HI), np.float16(0.0)))
    if not fine:
        cuts = [logarithm.M_LO + (top - logarithm.M_LO) * q / 16 for q in range(17)]
        return list(itertools.pairwise(cuts))
    below = [logarithm.M_LO] + [1.0 - 2.0**-j for j in range(2, 12)]
    above = [1.0 + 2.0**-j for j in range(10, 1, -1)] + [top]
    out: list[tuple[float, float]] = [(1.0, 1.0)]
    for edges in (below, above):
        for a, b in itertools.pairwise(edges):
            cuts = [a + (b - a) * q / 4 for q in range(5)]
            out.extend(itertools.pairwise(cuts))
    return out
