"""A vectorised float64 ``erf`` for the oracle, deterministic on every machine.

Python's ``math.erf`` (the platform's libm) is accurate but runs element by element, and libms
differ in the last bit; numpy's ``exp`` differs between its SIMD and scalar loops too. So this
is a piecewise polynomial evaluated with IEEE float64 ``+``, ``-``, ``*`` only (correctly
rounded, one rounding each; numpy does not contract them), and its table is computed in
decimal arithmetic (the same digits on every machine):

- ``|x|`` is clamped to ``[0, 6]`` and rounded to the nearest center ``c = j / 256``
  (``j = 0 .. 1536``); the offset ``d = |x| - c`` (``|d| <= 2^-9``) is exact (Sterbenz). The
  rounding is done by adding ``2^52`` (the sum's low bits are ``j``), so no float-to-integer
  conversion or ``where`` is needed, and a NaN's garbage index is clipped by ``take``.
  Horner runs on ``256 d`` with the table holding ``a_k 256^-k``: scaling by a power of two
  is exact (nothing in the table is subnormal), so that is the same bits as in ``d``, one
  multiply pass fewer.
- On each interval ``erf(c + d) = sum_k a_k d^k`` for ``k = 0 .. 5``, by Horner's rule. The
  ``a_k`` are the degree-13 Taylor polynomial at ``c`` (``a_k = erf^(k)(c) / k!``, from the
  physicists' Hermite polynomials), economised to degree 5 on ``[-2^-9, 2^-9]`` in Chebyshev
  form (dropping ``T_6 .. T_13``, each at most 1 in magnitude there). The dropped terms and
  the Taylor remainder are below 2^-62 everywhere (``truncation_bound``, tested), so the
  error is the float64 evaluation's: ``a_0`` rounded, then a correction below 2^-8.8 of the
  result, about 1 ulp in all; the promise is within 2 float64 ulps of the true ``erf``
  (tested against ``math.erf`` at every interval's edges). Six coefficients a center instead
  of the Taylor series' ten of the earlier 1/64 grid: ``take`` gathers are most of the cost.
- ``erf(c)`` at the centers is stepped from ``erf(0) = 0`` by the degree-24 Taylor series at
  the previous center, in 40-digit decimal (each step's error is below 10^-40, so 1,536
  steps stay far below a float64 ulp; tested against an independent series at some centers);
  ``e^(-c^2)`` is ``Decimal.exp``, correctly rounded.
- ``|x| >= 6`` gives ``±1`` (``erf(6) = 1 - 2.2e-17`` already rounds to 1); ``erf`` is odd
  (the result takes the sign of ``x``: ``erf(-0) = -0``), ``erf(±inf) = ±1``, NaN stays NaN.

``erf64`` takes float16, float32 or float64 input (widening to float64 is exact) and writes
float64, or float32 / float16 rounded once per element (``out=``), a chunk at a time, so the
oracle's F32 ``erf`` makes no full-size float64 copies.
"""

from __future__ import annotations

import functools
import math
import operator
from decimal import Decimal, localcontext
from fractions import Fraction
from math import comb
from typing import Any, Final

import numpy as np

from poot_ir.errors import EvaluationError

__all__ = ["erf64", "truncation_bound"]

_STEP: Final = 256  # centers per unit
_LAST: Final = 6 * _STEP
_DEGREE: Final = 5  # the evaluated polynomial
_TAYLOR: Final = 13  # the Taylor polynomial it is economised from
_WALK: Final = 24  # Taylor terms used to step erf(c) to the next center
_EDGE: Final = 6.0  # at and beyond it erf is ±1 in float64
_HALF: Final = Fraction(1, 2 * _STEP)  # the largest |d|
_MAGIC: Final = 2.0**52  # adding it rounds a value in [0, 2^51) to an integer
_MAGIC_BITS: Final = int(np.float64(_MAGIC).view(np.int64))
_PI: Final = Decimal("3.141592653589793238462643383279502884197169399375105820974944592")
_OUT_DTYPES: Final = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))
_CHUNK: Final = 1 << 15  # elements per pass: the working arrays stay in L2


def _chebyshev_monomials(n: int) -> list[list[int]]:
    """Row ``m``: the integer monomial coefficients of ``T_m`` (``T_m+1 = 2u T_m - T_m-1``)."""
    rows = [[1] + [0] * n, [0, 1] + [0] * (n - 1)]
    for m in range(1, n):
        nxt = [0] + [2 * v for v in rows[m][:-1]]
        rows.append([a - b for a, b in zip(nxt, rows[m - 1], strict=True)])
    return rows[: n + 1]


@functools.cache
def _economiser() -> tuple[tuple[tuple[Decimal, ...], ...], tuple[tuple[Decimal, ...], ...]]:
    """The linear maps of the degree-``_TAYLOR`` Taylor coefficients (in ``d``, ``|d| <= h``)
    to the coefficients in ``d`` of their Chebyshev economisation to degree ``_DEGREE``
    (``keep``), and to the dropped Chebyshev coefficients (``drop``; the sum of their
    magnitudes bounds the change, since ``|T_m| <= 1`` on the interval). Exact rationals,
    rounded once to 40-digit decimals."""
    n, h = _TAYLOR, _HALF
    # u^k = 2^(1-k) sum_i C(k, i) T_(k-2i) (T_0's weight halved), in u = d / h on [-1, 1]
    cheb = [[Fraction(0)] * (n + 1) for _ in range(n + 1)]  # cheb[m][k]: T_m's share of d^k
    for k in range(n + 1):
        for i in range(k // 2 + 1):
            weight = Fraction(comb(k, i), 2 ** (k - 1)) if k else Fraction(1)
            if k and 2 * i == k:
                weight /= 2
            cheb[k - 2 * i][k] += weight * h**k
    mono = _chebyshev_monomials(n)
    keep = [
        [
            sum((cheb[m][i] * mono[m][k] for m in range(k, _DEGREE + 1)), Fraction(0)) / h**k
            for i in range(n + 1)
        ]
        for k in range(_DEGREE + 1)
    ]

    def dec(f: Fraction) -> Decimal:
        return Decimal(f.numerator) / Decimal(f.denominator)

    with localcontext() as ctx:
        ctx.prec = 40
        return (
            tuple(tuple(dec(v) for v in row) for row in keep),
            tuple(tuple(dec(v) for v in cheb[m]) for m in range(_DEGREE + 1, n + 1)),
        )


@functools.cache
def _build() -> tuple[np.ndarray, float]:
    """Column ``k``: the coefficient ``a_k 256^-k`` at every center; the largest truncation."""
    rows = np.zeros((_LAST + 1, _DEGREE + 1))
    keep, drop = _economiser()
    worst = Decimal(0)
    with localcontext() as ctx:
        ctx.prec = 40
        step = Decimal(1) / _STEP
        two_over_root_pi = 2 / _PI.sqrt()
        value = Decimal(0)  # erf(c), stepped from c = 0
        step_powers = [step**k for k in range(_WALK + 1)]
        # (-1)^(k-1) / k!, the Hermite form of erf's k-th derivative over k!
        signed_inverse_factorials = [
            Decimal((-1) ** (k + 1)) / math.factorial(k) for k in range(_WALK + 1)
        ]
        half_powers = [(step / 2) ** k for k in range(_TAYLOR + 1, _WALK + 1)]
        for j in range(_LAST + 1):
            c = Decimal(j) / _STEP
            slope = two_over_root_pi * (-(c * c)).exp()  # erf'(c)
            coeffs = [value]
            h_prev, h = Decimal(0), Decimal(1)  # H_(k-2), H_(k-1)
            for k in range(1, _WALK + 1):
                coeffs.append(slope * h * signed_inverse_factorials[k])
                h_prev, h = h, 2 * c * h - 2 * (k - 1) * h_prev
            taylor = coeffs[: _TAYLOR + 1]
            kept = [sum(map(operator.mul, row, taylor), Decimal(0)) for row in keep]
            dropped = sum(
                (abs(sum(map(operator.mul, row, taylor), Decimal(0))) for row in drop),
                Decimal(0),
            )
            # the Taylor remainder past degree 13, bounded by the next terms (they shrink
            # faster than geometrically at |d| <= 2^-9)
            rest = sum(map(operator.mul, map(abs, coeffs[_TAYLOR + 1 :]), half_powers))
            worst = max(worst, dropped + 2 * rest)
            # a_k 2^(-8k): Horner then runs on 256 d, and scaling by a power of two is exact
            # (checked below: nothing subnormal), so the result is the same bits as in d
            rows[j] = [float(v) * _STEP**-k for k, v in enumerate(kept)]
            value = sum(map(operator.mul, coeffs, step_powers), Decimal(0))
    if np.any((rows != 0) & (np.abs(rows) < 2.0**-1022)):
        raise EvaluationError("erf table: a scaled coefficient is subnormal")
    if float(rows[_LAST, 0]) != 1.0:  # the clamp at 6 relies on it
        raise EvaluationError("erf table: erf(6) does not round to 1")
    return np.ascontiguousarray(rows.T), float(worst)


def truncation_bound() -> float:
    """The largest change, over every interval, of economising and truncating the Taylor
    series (before float64 rounding of the coefficients)."""
    return _build()[1]


def erf64(x: Any, out: np.ndarray | None = None) -> np.ndarray:
    """``erf`` elementwise (see the module docstring): float64 unless ``out`` (float64, float32
    or float16, the shape of ``x``) is given, which then receives the float64 result rounded
    once to its dtype."""
    arr: np.ndarray = np.asarray(x)
    if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:
        arr = arr.astype(np.float64)
    if out is None:
        out = np.empty(arr.shape, np.float64)
    elif (
        out.shape != arr.shape
        or out.dtype not in _OUT_DTYPES
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):  # reshape(-1) of anything else would be a copy, and the result lost
        raise EvaluationError(
            f"erf64 out= must be a writeable C-contiguous float64, float32 or float16 array"
            f" of shape {arr.shape}, got {out.dtype} {out.shape}"
        )
    columns = _build()[0]
    flat = arr.reshape(-1)
    dest = out.reshape(-1)
    # a float64 result is accumulated in place, unless it is the input's own memory (its
    # sign is read after the accumulator is written): then through the scratch row as well
    wide = dest.dtype == np.float64 and not np.may_share_memory(dest, flat)
    n = min(flat.size, _CHUNK)
    buffers = np.empty((5, n))
    indices = np.empty(n, np.int64)
    for start in range(0, flat.size, _CHUNK):
        xc = flat[start : start + _CHUNK]
        m = xc.size  # the last chunk may be shorter
        a, u, d, acc, term = buffers[:, :m]
        if wide:  # a float64 result is accumulated in place
            acc = dest[start : start + m]
        j = indices[:m]
        np.abs(xc, out=a)  # widened exactly when xc is narrower
        np.minimum(a, _EDGE, out=a)  # NaN stays NaN
        np.multiply(a, _STEP, out=u)  # exact: a power of two
        np.add(u, _MAGIC, out=d)  # rounded to the nearest integer, ties to even
        np.subtract(d.view(np.int64), _MAGIC_BITS, out=j)
        np.subtract(d, _MAGIC, out=d)  # that integer, exactly
        np.subtract(u, d, out=d)  # 256 (|x| - c), exact; the table is scaled to match
        columns[_DEGREE].take(j, out=acc, mode="clip")  # a NaN's index is clipped
        for k in range(_DEGREE - 1, -1, -1):
            acc *= d
            acc += columns[k].take(j, out=term, mode="clip")
        np.copysign(acc, xc, out=acc)
        if not wide:
            dest[start : start + m] = acc  # one rounding to the narrower dtype
    return out
