"""erf and tanh as two pieces: an odd series below a threshold, the formula above it.

The formulas (erf: Abramowitz and Stegun 7.1.26, ``1 - t P(t) exp(-x^2)``; tanh:
``(1 - exp(-2|x|)) / (1 + exp(-2|x|))``) cancel near zero: in FP16 their absolute error stays
near the formula's size at 0 (a few units of 2^-11) while the function goes to zero, so erf(0.001)
came out -0.00098 and tanh returned 0 for x from 1e-5 to 1e-4. Below the threshold ``T`` the
rule computes the function's Taylor series ``a (c0 + c1 a^2 + ...)`` of ``a = min(|x|, T)``
instead, whose error is relative to the function (each step rounds relative to its value, the
first coefficient dominates), and above it the formula, whose value there is far from zero.

The piece is chosen by an exact 0/1 mask ``m = [|x| > T]`` (``steps.step`` of ``|x| - T``: the
difference of two FP16 values is zero only when they are equal, and its sign is exact), so the
device's magnitude is ``formula m + series (1 - m)``: exactly one branch (the other, finite,
times 0 is 0, and adding 0 is exact; the series runs on ``min(|x|, T)``, so it stays finite
for every ``x``). The result is ``sign(x)`` (exact, ``steps.sign``) times that magnitude: odd,
and of ``x``'s sign wherever the magnitude is nonzero.

The bound (``poot_planner.legalize.bounds``, ``Numerics.PIECEWISE``) is derived on each branch
alone over the magnitudes it serves: the series on ``[0, T]`` in quarter binades down to FP16's
smallest subnormal (plus the series' remainder), the formula on ``(T, top]`` in slices of 1/8
(plus the formula's published error), the clamp beyond ``top`` (plus ``1 - f(top)``). It is
``AbsRel(abs, rel)``: ``rel`` the largest error over the smallest exact value of a piece whose
value is FP16-normal, ``abs`` the largest error of a piece that may be subnormal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from poot_ir import Eqn, Var

from poot_planner.emit import Emit, RuleContext
from poot_planner.legalize.steps import sign, step

__all__ = ["ERF", "TANH", "OddFunction", "expand_erf", "expand_tanh"]


@dataclass(frozen=True, slots=True)
class OddFunction:
    """An odd function computed as ``sign(x)`` times a magnitude: ``series`` below
    ``threshold``, ``formula`` above it, ``|x|`` clamped at ``top``."""

    name: str
    #: the exact function (float64), for the derivation's pieces
    exact: Callable[[float], float]
    #: Taylor coefficients of ``f(a) / a`` in powers of ``a^2``
    coefficients: tuple[float, ...]
    threshold: float
    top: float
    #: the formula's magnitude chain on ``a = |x|`` (emitted), its error in exact arithmetic
    formula: Callable[[Emit, Var], Var]
    formula_error: float
    #: the series' remainder for ``a`` in ``[0, hi]``
    remainder: Callable[[float], float]

    def series(self, em: Emit, a: Var) -> Var:
        """``s (c0 + c1 s^2 + ...)``, ``s = min(a, threshold)`` (finite for every ``a``)."""
        s = em.min(a, self.threshold)
        s2 = em.mul(s, s)
        poly: Var | float = self.coefficients[-1]
        for c in reversed(self.coefficients[:-1]):
            poly = em.add(em.mul(s2, poly), c)
        assert isinstance(poly, Var)
        return em.mul(s, poly)

    def magnitude(self, em: Emit, a: Var) -> Var:
        """The branch ``a`` selects, exactly: ``formula m + series (1 - m)``, ``m = [a > T]``."""
        m = step(em, em.sub(a, self.threshold))
        big = self.formula(em, a)
        small = self.series(em, a)
        return em.add(em.mul(big, m), em.mul(small, em.sub(1.0, m)))

    def expand(self, em: Emit, e: Eqn, ctx: RuleContext) -> bool:
        (x,) = e.inputs
        if not isinstance(x, Var) or not em.dtype.is_float:
            return False
        c = em.clamp(x, -self.top, self.top)
        em.mul(sign(em, c), self.magnitude(em, em.abs(c)), out=e.out)
        return True


# Abramowitz and Stegun, Handbook of Mathematical Functions (1964), 7.1.26: for x >= 0,
# erf(x) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-x^2) + eps, t = 1 / (1 + p x),
# |eps| <= 1.5e-7.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf_formula(em: Emit, a: Var) -> Var:
    t = em.div(1.0, em.add(em.mul(a, _AS_P), 1.0))
    poly: Var = em.mul(t, _AS_A[-1])
    for k in reversed(_AS_A[:-1]):
        poly = em.mul(em.add(poly, k), t)
    g = em.exp(em.neg(em.mul(a, a)))
    return em.sub(1.0, em.mul(poly, g))


def _tanh_formula(em: Emit, a: Var) -> Var:
    g = em.exp(em.mul(a, -2.0))
    return em.div(em.sub(1.0, g), em.add(1.0, g))


_ERF_TERMS = 10
_TWO_OVER_ROOT_PI = 2.0 / math.sqrt(math.pi)


def _erf_remainder(hi: float) -> float:
    # erf(a) = 2/sqrt(pi) sum (-1)^n a^(2n+1) / (n! (2n+1)): alternating with decreasing terms
    # for a < 1, so the remainder is at most the first term left out
    n = _ERF_TERMS
    return _TWO_OVER_ROOT_PI * hi ** (2 * n + 1) / (math.factorial(n) * (2 * n + 1))


# tanh(a) = a - a^3/3 + 2a^5/15 - 17a^7/315 + ... (coefficients 2^2n (2^2n - 1) B_2n / (2n)!, B
# the Bernoulli numbers); the ratio of
# consecutive coefficients' magnitudes rises to 4/pi^2 = 0.40528 from below (0.333, 0.4, 0.4048,
# 0.40519, ...), so the tail from the first term left out is below that term over
# (1 - 0.4053 a^2)
_TANH_COEFFICIENTS = (
    1.0,
    -1 / 3,
    2 / 15,
    -17 / 315,
    62 / 2835,
    -1382 / 155925,
    21844 / 6081075,
    -929569 / 638512875,
    6404582 / 10854718875,
    -443861162 / 1856156927625,
)
_TANH_NEXT = 18888466084 / 194896477400625


def _tanh_remainder(hi: float) -> float:
    n = len(_TANH_COEFFICIENTS)
    return _TANH_NEXT * hi ** (2 * n + 1) / (1.0 - 0.4053 * hi * hi)


ERF = OddFunction(
    name="erf",
    exact=math.erf,
    coefficients=tuple(
        _TWO_OVER_ROOT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(_ERF_TERMS)
    ),
    threshold=1.0,
    top=4.0,  # 1 - erf(4) = 1.5e-8
    formula=_erf_formula,
    formula_error=1.5e-7,
    remainder=_erf_remainder,
)

TANH = OddFunction(
    name="tanh",
    exact=math.tanh,
    coefficients=_TANH_COEFFICIENTS,
    threshold=0.75,
    top=9.0,  # tanh(9) rounds to 1 in F32, and -2 * 9 keeps exp in range
    formula=_tanh_formula,
    formula_error=0.0,  # an identity
    remainder=_tanh_remainder,
)


def expand_erf(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    return ERF.expand(em, e, ctx)


def expand_tanh(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    return TANH.expand(em, e, ctx)
