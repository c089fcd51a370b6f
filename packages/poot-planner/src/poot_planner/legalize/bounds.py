"""The bound of a legalized equation, derived from the contracts of the steps it became.

An ``IDENTITY`` rule is its steps' contracts: exact when every step is bit exact, else the one
approximate step's contract when only data movement follows it (nothing after it to amplify
it); any other chain has no derived bound and is not rewritten.

A ``PIECEWISE`` rule (erf, tanh) is derived on each of its pieces alone (``_piecewise``).

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
from poot_ir.core import MOVEMENT
from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Bound,
    RoundedTwice,
)

from poot_planner.bound_text import render_bound
from poot_planner.emit import Emit
from poot_planner.legalize import logarithm, logistic
from poot_planner.legalize.intervals import Enclosure, chain_error, chain_value, device_value
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
            case other:  # as the feature matrix states it
                return render_bound(other)


#: Derivations by rule, target, device dtype and the chain's structure (``_chain_key``): a rule
#: emits different chains for different operands (a literal, a dtype), and the bound is the
#: chain's, so the structure is part of the key (keyed by the rule alone, the first program
#: planned decided every later one's bound).
_MEMO: dict[tuple[Rule, Target, DType, tuple[object, ...]], Derivation] = {}


def _chain_key(eqns: list[Eqn]) -> tuple[object, ...]:
    """``eqns`` up to the names and shapes of their values: each equation's primitive, params
    and operands and output (a value by dtype and its first use in the chain, a literal by dtype
    and bits)."""
    ids: dict[int, int] = {}

    def ref(x: Var | Literal) -> object:
        if isinstance(x, Literal):
            return (x.dtype, x.bits)
        return (x.type.dtype, ids.setdefault(x.id, len(ids)))

    return tuple((e.prim, e.params, tuple(ref(x) for x in e.inputs), ref(e.out)) for e in eqns)


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
            key: tuple[Rule, Target, DType, tuple[object, ...]] = (rule, target, device, ())
            # the reduced form is the rule's, not the chain's
            if key not in _MEMO:
                _MEMO[key] = _reduced(rule, target, device)
            return _MEMO[key]
        case Numerics.SCALED_SUM:
            return _scaled_sum(eqns, target, device)
        case Numerics.PIECEWISE:
            # the pieces are the rule's (emitted here in F32, so each literal's rounding to the
            # device dtype is counted against its exact value), not the chain's
            key = (rule, target, device, ())
            if key not in _MEMO:
                _MEMO[key] = _piecewise(rule, target, device)
            return _MEMO[key]
        case Numerics.SATURATING:
            key = (rule, target, device, _chain_key(eqns))
            if key not in _MEMO:
                _MEMO[key] = _saturating(eqns, target, device)
            return _MEMO[key]
        case Numerics.APPROXIMATION:
            # the chain of an approximation does not depend on the shape it runs at, so its
            # analysis (some thousands of interval steps) is made once per rule, target and chain
            key = (rule, target, device, _chain_key(eqns))
            if key not in _MEMO:
                _MEMO[key] = _approximation(rule, eqns, target, device)
            return _MEMO[key]


def _saturating(eqns: list[Eqn], target: Target, device: DType) -> Derivation:
    """A clamped formula over the whole line (``poot_planner.legalize.logistic``)."""
    limit = target.narrowing.max_magnitude if target.narrowing is not None else 3.4028234e38
    unit = _UNIT.get(device)
    if unit is None:
        return Derivation(None, f"no unit roundoff known for {device.value}")
    got = logistic.derive_sigmoid(eqns, target, device, unit, limit)
    if isinstance(got, str):
        return Derivation(None, got)
    return Derivation(AbsRel(*got))


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
    # data movement after it moves each element's error with the element, amplifying nothing
    (k, bound), *others = approx
    if not others and all(e.prim in MOVEMENT for e in eqns[k + 1 :]):
        return Derivation(bound)
    return Derivation(None, "more than one approximate step, or one with arithmetic after it")


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
            case RoundedTwice() if e is red:  # the sum's own rounding: the running analysis's
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
        got = chain_error(eqns, target, device, unit, limit, Enclosure(lo, hi, 0.0))
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
        got = chain_value(eqns, target, device, unit, limit, Enclosure(lo, hi, 0.0))
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


# -- a piecewise approximation: erf, tanh -----------------------------------------------------


def _quarter_binades(lo: float, hi: float) -> list[tuple[float, float]]:
    """``[lo, hi]`` cut at ``lo 2^(k/4)``: a piece's largest value is 1.19 times its smallest,
    so an error relative to the largest is nearly relative to every value of the piece."""
    cuts = [lo]
    while cuts[-1] * 2.0**0.25 < hi:
        cuts.append(cuts[-1] * 2.0**0.25)
    cuts.append(hi)
    return list(itertools.pairwise(cuts))


def _piecewise(rule: Rule, target: Target, device: DType) -> Derivation:
    """``AbsRel(abs, rel)`` of an odd function's two pieces (``poot_planner.legalize.odd``),
    each analysed alone on the magnitudes it serves (the mask choosing it is exact, and so is
    the product by the sign): the series on ``{0}`` and quarter binades of ``[2^-24, T]``, the
    formula on slices of 1/8 of ``[T, top]``, the clamp beyond ``top`` as ``top`` plus
    ``1 - f(top)``. Each piece's error against the exact function is the device's (the interval
    analysis) plus the series' remainder or the formula's error; ``rel`` is the largest error
    over the smallest exact value of a piece whose values are FP16-normal, ``abs`` the largest
    error of the pieces below."""
    odd = rule.piecewise
    unit = _UNIT.get(device)
    if odd is None or unit is None:
        return Derivation(None, f"no piecewise analysis of {rule.name} on {device.value}")
    limit = target.narrowing.max_magnitude if target.narrowing is not None else 3.4028234e38
    small, big = Emit(1, DType.F32), Emit(1, DType.F32)
    a = Var(0, TensorType((), DType.F32))
    odd.series(small, a)
    odd.formula(big, a)
    threshold = device_value(odd.threshold, device)
    slices = math.ceil((odd.top - threshold) * 8)
    cuts = [threshold + (odd.top - threshold) * q / slices for q in range(slices + 1)]
    tiny = 2.0**-24 if device is DType.F16 else 2.0**-149
    work: list[tuple[list[Eqn], float, float, float]] = [(small.eqns, 0.0, 0.0, 0.0)]
    work += [
        (small.eqns, lo, hi, odd.remainder(hi)) for lo, hi in _quarter_binades(tiny, threshold)
    ]
    work += [(big.eqns, lo, hi, odd.formula_error) for lo, hi in itertools.pairwise(cuts)]
    rel, at_tiny = 0.0, 0.0
    for eqns, lo, hi, formula in work:
        got = chain_value(eqns, target, device, unit, limit, Enclosure(lo, hi, 0.0))
        if isinstance(got, str):
            return Derivation(None, got)
        err = got.err + formula
        if hi == odd.top:  # past the clamp: the value at top, the function nearer 1
            err += 1.0 - odd.exact(odd.top)
        smallest = odd.exact(lo)
        if smallest >= _NORMAL_F16:
            rel = max(rel, err / smallest)
        else:
            at_tiny = max(at_tiny, err)
    return Derivation(AbsRel(at_tiny, rel))


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
            got = chain_value(
                em.eqns,
                target,
                device,
                unit,
                limit,
                {0: Enclosure(lo, hi, 0.0), 1: Enclosure(float(k), float(k), 0.0)},
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
