"""The oracle's two documented numerical promises that a vectorised evaluation changes:
``erf`` (``poot_ir.erf.erf64``) against the platform's ``math.erf``, and ``matmul`` (float64
accumulation, one rounding) against the exact dot product in rational arithmetic."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import Builder, DType, evaluate
from poot_ir.erf import erf64, truncation_bound
from poot_ir.errors import EvaluationError

F32, F16, BF16 = DType.F32, DType.F16, DType.BF16


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.maximum(np.abs(want), 2.0**-1022))


def _edges() -> np.ndarray:
    centers = np.arange(0, 6 * 256 + 1) / 256.0
    half = 1.0 / 512.0
    # every center, both ends of its interval and their float neighbours (where j switches)
    around = np.concatenate([centers, centers + half, centers - half])
    around = np.concatenate([around, np.nextafter(around, 10.0), np.nextafter(around, -10.0)])
    special = [0.0, 5e-324, 1e-310, 2.0**-1022, 1e-300, 1e-8, 0.5, 1.0, 5.9, 5.92, 6.0]
    special += [6.0 + half, np.nextafter(6.0 + half, 10.0), np.nextafter(6.0, 0.0), 6.5, 27.0]
    special += [1e300, float(np.finfo(np.float64).max)]
    pos = np.concatenate([around[around >= 0], special])
    return np.concatenate([pos, -pos])


def test_erf64_is_within_3_ulps_of_math_erf_at_every_edge() -> None:
    x = np.concatenate([_edges(), np.linspace(-7.0, 7.0, 20_001)])
    want = np.array([math.erf(v) for v in x.tolist()])
    got = erf64(x)
    # math.erf is itself within 1 ulp of the truth; erf64 promises 2
    assert _ulps(got, want).max() <= 3
    # rounded once to F32 (what the oracle returns for F32) they agree everywhere here
    assert np.array_equal(got.astype(np.float32), want.astype(np.float32))


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_erf64_agrees_with_math_erf(v: float) -> None:
    got = float(erf64(np.array([v]))[0])
    want = math.erf(v)
    assert got == want or abs(got - want) <= 3 * math.ulp(want)
    assert math.copysign(1.0, got) == math.copysign(1.0, v)  # odd, the sign of zero kept


def test_erf64_special_values_and_shapes() -> None:
    x = np.array([[np.inf, -np.inf, np.nan], [-0.0, 0.0, -1e-320]])
    got = erf64(x)
    assert got.shape == (2, 3)
    assert got[0, 0] == 1.0 and got[0, 1] == -1.0 and np.isnan(got[0, 2])
    assert got[1, 0] == 0 and np.signbit(got[1, 0]) and not np.signbit(got[1, 1])
    assert got[1, 2] < 0
    assert erf64(np.zeros((0, 4))).shape == (0, 4)
    big = np.linspace(-3, 3, 200_001)  # more than one chunk
    assert np.array_equal(erf64(big), -erf64(-big))


def _erf_series(c: Decimal) -> Decimal:
    """erf(c), c >= 0, by the all-positive series 2/sqrt(pi) e^(-c^2) sum (2c^2)^n c/(2n+1)!!
    (independent of the table's Taylor walk)."""
    pi = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")
    c2 = c * c
    term = total = c
    n = 0
    while term > total * Decimal(10) ** -45:
        n += 1
        term = term * 2 * c2 / (2 * n + 1)
        total += term
    return 2 / pi.sqrt() * (-c2).exp() * total


@pytest.mark.parametrize("c", ["0.00390625", "0.5", "1", "2.5", "3.99609375", "5.5", "6"])
def test_erf64_at_a_center_is_the_true_erf_rounded_once(c: str) -> None:
    # at a center d = 0, so the result is the table's erf(c): the Taylor walk's value, which
    # must round to the independently computed series'
    with localcontext() as ctx:
        ctx.prec = 50
        want = float(_erf_series(Decimal(c)))
    assert float(erf64(np.array([float(c)]))[0]) == want


def test_erf64_truncation_is_far_below_an_ulp() -> None:
    # the economised degree-5 polynomials differ from erf by at most this before rounding;
    # 2^-62 is 1/512 of the smallest ulp of a result >= 2^-9 (erf at the first center)
    assert 0 < truncation_bound() < 2.0**-62


@pytest.mark.parametrize("narrow", [np.float32, np.float16])
def test_erf64_narrow_input_and_output_round_once(narrow: type) -> None:
    x = np.concatenate([np.linspace(-6.5, 6.5, 70_001), [np.inf, -np.inf, np.nan, -0.0]])
    x = x.astype(narrow)
    wide = erf64(x.astype(np.float64))
    assert np.array_equal(erf64(x), wide, equal_nan=True)  # widening is exact
    out = np.empty(x.shape, narrow)
    assert erf64(x, out=out) is out
    assert np.array_equal(out, wide.astype(narrow), equal_nan=True)
    assert np.signbit(out[-1]) and np.isnan(out[-2])


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_erf64_in_place_equals_out_of_place(dtype: type) -> None:
    # out= the input itself: the sign is read from the input after the accumulator is written,
    # so a float64 result sharing the input's memory once lost every negative sign
    x = np.array([-0.5, 0.3, -2.0, -0.0, 7.0, -7.0, np.nan, -np.inf], dtype)
    want = erf64(x, out=np.empty_like(x))
    got = x.copy()
    erf64(got, out=got)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_erf64_chunks_match_one_by_one() -> None:
    # the last chunk is shorter than the working buffers
    x = np.random.default_rng(5).standard_normal(3 * 2**15 + 17) * 3
    got = erf64(x)
    assert np.array_equal(got[-40:], np.array([erf64(np.array([v]))[0] for v in x[-40:]]))
    assert np.array_equal(got[: 2**15 + 3][-5:], erf64(x[2**15 - 2 : 2**15 + 3]))


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_oracle_erf_rounds_the_float64_erf_once(dtype: DType) -> None:
    b = Builder("erf")
    x = b.slot("x", dtype, (4001,))
    b.output("y", b.erf(x))
    xs = np.linspace(-4, 4, 4001).astype(dtype.numpy)
    got = evaluate(b.build(), {"x": xs})["y"]
    want = np.array([math.erf(float(v)) for v in xs.astype(np.float64)])
    if dtype is BF16:  # float64 -> bfloat16 directly (no float32 step): compare the same way
        assert np.array_equal(got.astype(np.float64), want.astype(dtype.numpy).astype(np.float64))
    else:
        assert np.array_equal(got, want.astype(dtype.numpy))


# -- matmul: float64 accumulation, rounded once --------------------------------------------


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> list[list[Fraction]]:
    fa = [[Fraction(float(v)) for v in row] for row in a]
    fb = [[Fraction(float(v)) for v in row] for row in b]
    return [
        [sum((fa[i][k] * fb[k][j] for k in range(len(fb))), Fraction(0)) for j in range(b.shape[1])]
        for i in range(a.shape[0])
    ]


def _check_matmul(a: np.ndarray, b: np.ndarray, dtype: DType) -> None:
    bld = Builder("mm")
    x = bld.slot("a", dtype, a.shape)
    y = bld.slot("b", dtype, b.shape)
    bld.output("c", bld.matmul(x, y))
    got = evaluate(bld.build(), {"a": a, "b": b})["c"].astype(np.float64)
    exact = _exact_matmul(a, b)
    k = a.shape[1]
    absab = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            e = exact[i][j]
            nearest = float(np.asarray(float(e)).astype(dtype.numpy))  # the exact value rounded
            g = float(got[i, j])
            if g == nearest:
                continue
            # the promise: off the nearest only within K 2^-53 sum|ab| of a rounding boundary
            ulp = float(np.spacing(np.asarray(abs(nearest), dtype.numpy)))
            slack = k * 2.0**-53 * float(absab[i, j])
            assert abs(Fraction(g) - e) <= Fraction(ulp) / 2 + Fraction(slack), (i, j)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 64]))
def test_f32_matmul_is_the_exact_dot_rounded_once(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    scale = np.float32(2.0) ** rng.integers(-20, 20, size=(3, k)).astype(np.float32)
    a = (rng.standard_normal((3, k)).astype(np.float32) * scale).astype(np.float32)
    b = rng.standard_normal((k, 2)).astype(np.float32)
    _check_matmul(a, b, F32)


def test_matmul_edges_cancellation_and_f16() -> None:
    # products that cancel exactly at float64 (an F32 accumulation would lose the 1.0)
    a = np.array([[2.0**24, 1.0, -(2.0**24)]], np.float32)
    b = np.ones((3, 1), np.float32)
    _check_matmul(a, b, F32)
    bld = Builder("mm")
    bld.output("c", bld.matmul(bld.slot("a", F32, (1, 3)), bld.slot("b", F32, (3, 1))))
    assert evaluate(bld.build(), {"a": a, "b": b})["c"][0, 0] == 1.0
    rng = np.random.default_rng(3)
    _check_matmul(
        rng.standard_normal((4, 33)).astype(np.float16),
        rng.standard_normal((33, 3)).astype(np.float16),
        F16,
    )


def test_erf64_refuses_an_out_it_cannot_fill() -> None:
    x = np.linspace(-2, 2, 12)
    for bad in (np.empty(12, np.int32), np.empty(11), np.empty((12, 2))[:, 0]):
        with pytest.raises(EvaluationError, match="out="):
            erf64(x, out=bad)
    out = np.empty(12)
    assert erf64(x, out=out) is out and np.array_equal(out, erf64(x))
