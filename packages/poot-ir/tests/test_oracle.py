"""The oracle against hand-computed values and IEEE edge cases, every typed error, and strictness."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import (
    ArgumentError,
    Builder,
    DType,
    IndexOutOfRange,
    IntegerDivisionByZero,
    PootError,
    Var,
    WindowOutOfRange,
    evaluate,
)

F32, F16, BF16, I32, BOOL = DType.F32, DType.F16, DType.BF16, DType.I32, DType.BOOL
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
NAN_PAYLOAD = np.uint32(0x7FA0_1234)  # a signalling NaN with a payload
NEG_QNAN = np.uint32(0xFFC0_0BAD)


def f32bits(*bits: int) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


def bits(x: np.ndarray) -> np.ndarray:
    return x.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[x.dtype.itemsize])


def run1(
    dtype: DType, shape: tuple[int, ...], f: Callable[[Builder, Var], Var], x: object
) -> np.ndarray:
    b = Builder("t")
    v = b.slot("x", dtype, shape)
    b.output("y", f(b, v))
    return evaluate(b.build(), {"x": np.asarray(x, dtype.numpy)})["y"]


def run2(
    dtype: DType,
    shape: tuple[int, ...],
    f: Callable[[Builder, Var, Var], Var],
    x: object,
    y: object,
) -> np.ndarray:
    b = Builder("t")
    u, v = b.slot("x", dtype, shape), b.slot("y", dtype, shape)
    b.output("r", f(b, u, v))
    return evaluate(b.build(), {"x": np.asarray(x, dtype.numpy), "y": np.asarray(y, dtype.numpy)})[
        "r"
    ]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.all(bits(a) == bits(b)))


# -- elementwise arithmetic ---------------------------------------------------------------------


def test_f32_arithmetic_hand_values() -> None:
    x, y = [1.5, -2.0, 0.1, 3.0], [0.25, 0.5, 0.2, -0.0]
    assert run2(F32, (4,), lambda b, u, v: b.add(u, v), x, y).tolist() == [
        1.75,
        -1.5,
        np.float32(0.1) + np.float32(0.2),
        3.0,
    ]
    assert run2(F32, (4,), lambda b, u, v: b.sub(u, v), x, y).tolist()[:2] == [1.25, -2.5]
    assert run2(F32, (4,), lambda b, u, v: b.mul(u, v), x, y).tolist()[:2] == [0.375, -1.0]
    d = run2(F32, (4,), lambda b, u, v: b.div(u, v), x, y)
    assert d.tolist()[:2] == [6.0, -4.0] and d[3] == -np.inf
    # 1/3 correctly rounded: 0x3eaaaaab
    assert bits(run1(F32, (), lambda b, v: b.recip(v), 3.0)) == 0x3EAAAAAB
    assert run1(F32, (2,), lambda b, v: b.sqrt(v), [4.0, 2.0]).tolist() == [
        2.0,
        float(np.float32(math.sqrt(2))),
    ]


def test_signed_zero_nan_inf() -> None:
    neg = run1(F32, (2,), lambda b, v: b.neg(v), [0.0, -0.0])
    assert np.signbit(neg).tolist() == [True, False]
    assert run1(F32, (2,), lambda b, v: b.recip(v), [0.0, -0.0]).tolist() == [np.inf, -np.inf]
    lg = run1(F32, (4,), lambda b, v: b.log(v), [0.0, -0.0, -1.0, np.inf])
    assert lg[0] == -np.inf and lg[1] == -np.inf and np.isnan(lg[2]) and lg[3] == np.inf
    sq = run1(F32, (2,), lambda b, v: b.sqrt(v), [-0.0, -1.0])
    assert sq[0] == 0 and np.signbit(sq[0]) and np.isnan(sq[1])
    ab = run1(F32, (2,), lambda b, v: b.abs(v), [-0.0, -np.inf])
    assert not np.signbit(ab[0]) and ab[1] == np.inf
    e = run1(F32, (4,), lambda b, v: b.exp(v), [-np.inf, np.inf, 89.0, np.nan])
    assert e[0] == 0 and e[1] == np.inf and e[2] == np.inf and np.isnan(e[3])
    t = run1(F32, (3,), lambda b, v: b.tanh(v), [np.inf, -np.inf, -0.0])
    assert t.tolist() == [1.0, -1.0, 0.0] and np.signbit(t[2])
    r = run1(F32, (3,), lambda b, v: b.erf(v), [np.inf, -np.inf, 0.5])
    assert r[0] == 1 and r[1] == -1 and r[2] == np.float32(math.erf(0.5))


def test_max_min_ieee() -> None:
    x = [-0.0, 0.0, -0.0, np.nan, 1.0, -np.inf]
    y = [0.0, -0.0, -0.0, 1.0, np.nan, 2.0]
    for dt in (F32, F16, BF16):
        mx = run2(dt, (6,), lambda b, u, v: b.max(u, v), x, y).astype(np.float32)
        mn = run2(dt, (6,), lambda b, u, v: b.min(u, v), x, y).astype(np.float32)
        assert np.signbit(mx[:3]).tolist() == [False, False, True]
        assert np.signbit(mn[:3]).tolist() == [True, True, True]
        assert np.isnan(mx[3]) and np.isnan(mx[4]) and np.isnan(mn[3]) and np.isnan(mn[4])
        assert mx[5] == 2.0 and mn[5] == -np.inf
    relu = run1(F32, (3,), lambda b, v: b.max(v, 0.0), [-0.0, -3.0, np.nan])
    assert relu[0] == 0 and not np.signbit(relu[0]) and relu[1] == 0 and np.isnan(relu[2])
    assert np.signbit(run1(F32, (1,), lambda b, v: b.min(v, -0.0), [0.0])[0])
    assert run1(F32, (2,), lambda b, v: b.max(v, 1.0), [0.5, 3.0]).tolist() == [1.0, 3.0]


def test_comparisons_nan_false() -> None:
    x, y = [1.0, np.nan, 2.0, -0.0], [1.0, np.nan, 1.0, 0.0]
    assert run2(F32, (4,), lambda b, u, v: b.ge(u, v), x, y).tolist() == [True, False, True, True]
    assert run2(F32, (4,), lambda b, u, v: b.gt(u, v), x, y).tolist() == [False, False, True, False]
    assert run2(F32, (4,), lambda b, u, v: b.eq(u, v), x, y).tolist() == [True, False, False, True]
    assert run2(BOOL, (2,), lambda b, u, v: b.eq(u, v), [True, False], [True, True]).tolist() == [
        True,
        False,
    ]


def test_subnormals_and_largest_finite() -> None:
    tiny = np.float32(2.0**-149)
    assert run1(F32, (1,), lambda b, v: b.add(v, v), [tiny])[0] == np.float32(2.0**-148)
    big = np.finfo(np.float32).max
    assert run1(F32, (1,), lambda b, v: b.add(v, v), [big])[0] == np.inf
    assert run1(F32, (1,), lambda b, v: b.mul(v, 0.5), [tiny])[0] == 0  # rounds to even: zero
    h = run1(F16, (2,), lambda b, v: b.add(v, v), [65504.0, 2.0**-24])
    assert h[0] == np.inf and h[1] == np.float16(2.0**-23)
    bb = run1(
        BF16, (1,), lambda b, v: b.mul(v, 2.0), [float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)]
    )
    assert bb[0] == np.inf


# -- F16 / BF16 rounding against exact rationals ------------------------------------------------


def round_exact(q: Fraction, mant_bits: int, min_exp: int) -> Fraction:
    """Round a rational to nearest even with ``mant_bits`` significand bits (no overflow)."""
    if q == 0:
        return q
    e = math.floor(math.log2(abs(q)))
    while Fraction(2) ** e > abs(q):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    ulp = Fraction(2) ** (max(e, min_exp) - (mant_bits - 1))
    n = q / ulp
    fl = math.floor(n)
    rem = n - fl
    k = fl + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2) else 0)
    return k * ulp


@pytest.mark.parametrize(("dt", "mant", "min_exp"), [(F16, 11, -14), (BF16, 8, -126)])
def test_half_rounding_per_primitive(dt: DType, mant: int, min_exp: int) -> None:
    xs = [1.0, 3.0, 0.1, 1000.0, 1.0 + 2.0**-7, 7.0]
    ys = [3.0, 7.0, 0.3, 0.7, 2.0**-9, 1.0 + 2.0**-6]
    x = np.array(xs, np.float64).astype(dt.numpy)
    y = np.array(ys, np.float64).astype(dt.numpy)
    ops: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
    }
    for name, exact in ops.items():
        got = run2(dt, (6,), lambda b, u, v, n=name: getattr(b, n)(u, v), x, y)  # type: ignore[misc]
        for i in range(6):
            want = round_exact(exact(Fraction(float(x[i])), Fraction(float(y[i]))), mant, min_exp)
            assert Fraction(float(got[i])) == want, (name, i)


def test_bf16_from_float64_rounds_once() -> None:
    # 1 + 2^-8 + 2^-30 is just above the halfway point: float64 -> float32 -> bf16 would tie to 1.
    x = np.array([1 + 2.0**-8 + 2.0**-30], np.float64)
    b = Builder("t")
    v = b.slot("x", I32, (1,))
    b.output("y", b.convert(v, BF16))
    # i32 -> bf16: 2^24 + 2^16 + 1 is above the tie between 2^24 and 2^24 + 2^17
    got = evaluate(b.build(), {"x": np.array([2**24 + 2**16 + 1], np.int32)})["y"]
    assert float(got[0]) == 2**24 + 2**17
    e = run1(BF16, (1,), lambda b, v: b.exp(v), [0.0])
    assert float(e[0]) == 1.0
    assert float(x[0]) > 1  # the tie case exists


# -- I32 ------------------------------------------------------------------------------------------


def test_i32_wraparound() -> None:
    x, y = [INT_MAX, INT_MIN, 65536, INT_MIN], [1, -1, 65536, 0]
    assert run2(I32, (4,), lambda b, u, v: b.add(u, v), x, y).tolist() == [
        INT_MIN,
        INT_MAX,
        131072,
        INT_MIN,
    ]
    assert run2(I32, (4,), lambda b, u, v: b.mul(u, v), x, y).tolist() == [INT_MAX, INT_MIN, 0, 0]
    assert run1(I32, (2,), lambda b, v: b.neg(v), [INT_MIN, 5]).tolist() == [INT_MIN, -5]
    assert run1(I32, (2,), lambda b, v: b.abs(v), [INT_MIN, -5]).tolist() == [INT_MIN, 5]
    assert (
        run1(I32, (), lambda b, v: b.reduce_sum(b.broadcast_in_dim(v, (2,), ()), 0), INT_MAX) == -2
    )
    assert run2(I32, (2,), lambda b, u, v: b.div(u, v), [INT_MIN, -7], [-1, 2]).tolist() == [
        INT_MIN,
        -3,
    ]


@settings(max_examples=60, deadline=None)
@given(st.integers(INT_MIN, INT_MAX), st.integers(INT_MIN, INT_MAX).filter(lambda v: v != 0))
def test_i32_div_truncates(a: int, d: int) -> None:
    q = abs(a) // abs(d) * (1 if (a < 0) == (d < 0) else -1)
    want = (q + 2**31) % 2**32 - 2**31
    assert run2(I32, (), lambda b, u, v: b.div(u, v), a, d) == want


def test_i32_div_by_zero_names_element() -> None:
    b = Builder("t")
    u, v = b.slot("x", I32, (2, 2)), b.slot("y", I32, (2, 2))
    b.output("a", b.add(u, 1))
    b.output("q", b.div(u, v))
    with pytest.raises(IntegerDivisionByZero) as err:
        evaluate(
            b.build(), {"x": np.ones((2, 2), np.int32), "y": np.array([[1, 1], [0, 1]], np.int32)}
        )
    assert err.value.eqn == 1 and err.value.element == (1, 0)


# -- converts -------------------------------------------------------------------------------------


def test_converts() -> None:
    x = [2.7, -2.7, np.nan, 3e9, -3e9, -0.0, np.inf]
    assert run1(F32, (7,), lambda b, v: b.convert(v, I32), x).tolist() == [
        2,
        -2,
        0,
        INT_MAX,
        INT_MIN,
        0,
        INT_MAX,
    ]
    assert run1(F32, (4,), lambda b, v: b.convert(v, BOOL), [0.0, -0.0, np.nan, 0.5]).tolist() == [
        False,
        False,
        True,
        True,
    ]
    assert run1(BOOL, (2,), lambda b, v: b.convert(v, F32), [True, False]).tolist() == [1.0, 0.0]
    assert run1(BOOL, (2,), lambda b, v: b.convert(v, I32), [True, False]).tolist() == [1, 0]
    h = run1(F32, (3,), lambda b, v: b.convert(v, F16), [65520.0, 65519.0, 1 + 2.0**-11])
    assert h[0] == np.inf and h[1] == 65504 and h[2] == 1.0  # ties to even
    assert run1(I32, (1,), lambda b, v: b.convert(v, F32), [2**24 + 1])[0] == 2**24
    assert run1(I32, (2,), lambda b, v: b.convert(v, BOOL), [0, -3]).tolist() == [False, True]


# -- reductions -----------------------------------------------------------------------------------


def test_reductions() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert run1(F32, (2, 3), lambda b, v: b.reduce_sum(v, 1), x).tolist() == [3.0, 12.0]
    assert run1(F32, (2, 3), lambda b, v: b.reduce_sum(v, (0, 1)), x) == 15.0
    assert run1(F32, (2, 3), lambda b, v: b.reduce_max(v, 0), x).tolist() == [3.0, 4.0, 5.0]
    empty = run1(F32, (2, 0), lambda b, v: b.reduce_sum(v, 1), np.zeros((2, 0)))
    assert empty.tolist() == [0.0, 0.0] and not np.signbit(empty).any()
    assert (
        run1(F32, (2, 0), lambda b, v: b.reduce_max(v, 1), np.zeros((2, 0))).tolist()
        == [-np.inf] * 2
    )
    assert run1(I32, (0,), lambda b, v: b.reduce_max(v, 0), np.zeros(0)) == INT_MIN
    assert run1(F32, (3,), lambda b, v: b.reduce_max(v, 0), [1.0, np.nan, 2.0]).item() != 2.0
    z = run1(F32, (2,), lambda b, v: b.reduce_max(v, 0), [-0.0, 0.0])
    assert z == 0 and not np.signbit(z)
    one = run1(F32, (1, 4), lambda b, v: b.reduce_max(v, 0), [[1, 2, 3, 4]])
    assert one.tolist() == [1, 2, 3, 4]
    h = run1(F16, (3,), lambda b, v: b.reduce_sum(v, 0), [2048.0, 1.0, 1.0])
    assert h == 2050.0  # accumulated wide, rounded once


# -- data movement moves bits ---------------------------------------------------------------------


def payload_array() -> np.ndarray:
    return f32bits(
        int(NAN_PAYLOAD), 0x8000_0000, int(NEG_QNAN), 0x0000_0001, 0x7F7F_FFFF, 0x3F80_0000
    )


def test_data_movement_moves_bits() -> None:
    x = payload_array().reshape(2, 3)
    assert same_bits(run1(F32, (2, 3), lambda b, v: b.transpose(v, (1, 0)), x), x.T.copy())
    assert same_bits(run1(F32, (2, 3), lambda b, v: b.reshape(v, (3, 2)), x), x.reshape(3, 2))
    assert same_bits(
        run1(F32, (2, 3), lambda b, v: b.slice(v, (0, 0), (2, 3), (1, 2)), x), x[:, ::2].copy()
    )
    assert same_bits(run1(F32, (2, 3), lambda b, v: b.concat([v, v], 0), x), np.concatenate([x, x]))
    bc = run1(F32, (2, 3), lambda b, v: b.broadcast_in_dim(v, (4, 2, 3), (1, 2)), x)
    assert same_bits(bc, np.broadcast_to(x, (4, 2, 3)).copy())
    b = Builder("t")
    v, i = b.slot("x", F32, (2, 3)), b.slot("i", I32, (4,))
    b.output("g", b.gather(v, i, 1))
    b.output("s", b.select(b.eq(i, i), i, 0))
    b.output(
        "w", b.select(b.broadcast_in_dim(b.ge(b.slice(i, (0,), (3,)), -5), (2, 3), (1,)), v, 0.0)
    )
    out = evaluate(b.build(), {"x": x, "i": np.array([2, -3, 0, -1], np.int32)})
    assert same_bits(out["g"], x[:, [2, 0, 0, 2]])
    assert same_bits(out["w"], x)


def test_dynamic_update_slice_and_iota() -> None:
    b = Builder("t")
    v, u, s = b.slot("x", F32, (3, 4)), b.slot("u", F32, (2, 2)), b.slot("s", I32, ())
    b.output("y", b.dynamic_update_slice(v, u, [s, 2]))
    b.output("io", b.iota((2, 3), I32, 1))
    b.output("iof", b.iota((3,), F32, 0))
    p = b.build()
    x = np.zeros((3, 4), np.float32)
    upd = f32bits(int(NAN_PAYLOAD), 0x8000_0000, 1, 2).reshape(2, 2)
    out = evaluate(p, {"x": x, "u": upd, "s": np.int32(1)})
    want = x.copy()
    want[1:3, 2:4] = upd
    assert same_bits(out["y"], want) and not x.any()
    assert out["io"].tolist() == [[0, 1, 2], [0, 1, 2]] and out["iof"].tolist() == [0, 1, 2]
    for bad in (2, -1):
        with pytest.raises(WindowOutOfRange) as err:
            evaluate(p, {"x": x, "u": upd, "s": np.int32(bad)})
        assert err.value.starts == (bad, 2) and err.value.eqn == 0


def test_gather_out_of_range() -> None:
    b = Builder("t")
    v, i = b.slot("x", F32, (3,)), b.slot("i", I32, (2, 2))
    b.output("g", b.gather(v, i, 0))
    p = b.build()
    for bad in (3, -4):
        with pytest.raises(IndexOutOfRange) as err:
            evaluate(p, {"x": np.zeros(3, np.float32), "i": np.array([[0, 1], [bad, 0]], np.int32)})
        assert (err.value.index, err.value.element, err.value.size) == (bad, (1, 0), 3)


def test_matmul() -> None:
    a = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    c = np.arange(6, dtype=np.float32).reshape(2, 3, 1)
    b = Builder("t")
    u, v = b.slot("a", F32, (2, 2, 3)), b.slot("b", F32, (2, 3, 1))
    b.output("m", b.matmul(u, v))
    m = evaluate(b.build(), {"a": a, "b": c})["m"]
    assert m[:, :, 0].tolist() == [[5, 14], [86, 122]]
    i = run2(I32, (1, 1), lambda b, u, v: b.matmul(u, v), [[INT_MAX]], [[2]])
    assert i.tolist() == [[-2]]
    e = run2(
        F32,
        (2, 0),
        lambda b, u, v: b.matmul(u, b.transpose(v, (1, 0))),
        np.zeros((2, 0)),
        np.zeros((2, 0)),
    )
    assert e.tolist() == [[0, 0], [0, 0]]


# -- strictness -------------------------------------------------------------------------------------


def strict_program() -> Builder:
    b = Builder("t")
    x = b.slot("x", F32, (2,))
    s = b.state("s", F32, ())
    b.output("y", x)
    b.update(s, b.add(s, 1.0))
    return b


@pytest.mark.parametrize(
    ("inputs", "arg", "needle"),
    [
        ({"s": np.float32(0)}, "x", "missing"),
        (
            {"x": np.zeros(2, np.float32), "s": np.float32(0), "z": np.zeros(1)},
            "z",
            "not an argument",
        ),
        ({"x": np.zeros(3, np.float32), "s": np.float32(0)}, "x", "shape"),
        ({"x": np.zeros(2, np.float64), "s": np.float32(0)}, "x", "dtype"),
        ({"x": [0.0, 0.0], "s": np.float32(0)}, "x", "list"),
        ({"x": np.zeros(2, np.float32), "s": 0.0}, "s", "float"),
        ({"x": np.zeros(2, np.float32), "s": np.float64(0)}, "s", "dtype"),
        ({"x": np.float32(0), "s": np.float32(0)}, "x", "float32"),
    ],
)
def test_argument_errors(inputs: dict[str, object], arg: str, needle: str) -> None:
    with pytest.raises(ArgumentError) as err:
        evaluate(strict_program().build(), inputs)  # type: ignore[arg-type]
    assert err.value.argument == arg and needle in str(err.value)


def test_results_fresh_and_ordered() -> None:
    p = strict_program().build()
    x = np.array([1.0, 2.0], np.float32)
    out = evaluate(p, {"x": x, "s": np.array(1.0, np.float32)})
    assert list(out) == list(p.result_names) == ["y", "s"]
    assert not np.shares_memory(out["y"], x) and out["s"].shape == () and out["s"] == 2.0
    out["y"][0] = 5
    assert x[0] == 1.0 and evaluate(p, {"x": x, "s": np.float32(0)})["y"][0] == 1.0


def test_random_programs_evaluate() -> None:
    strategies = pytest.importorskip("strategies")

    @settings(max_examples=40, deadline=None)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        program = data.draw(strategies.programs())
        inputs = data.draw(strategies.inputs_for(program))
        try:
            out = evaluate(program, inputs)
        except PootError:
            return
        for name, v in program.results():
            assert out[name].dtype == v.dtype.numpy and out[name].shape == v.shape

    check()


# -- reduce_sum: the documented accumulator (float64, rounded once; exact near overflow) -------


def _exact_sum_f32(row: list[float]) -> float:
    """The exact sum of ``row`` rounded once to F32 (an independent reference: fractions)."""
    exact = sum((Fraction(v) for v in row), Fraction(0))
    limit = Fraction(2**128 - 2**103)  # the smallest magnitude that rounds to infinity
    if abs(exact) >= limit:
        return math.copysign(math.inf, exact)
    if abs(float(exact)) >= limit:  # within a float64 rounding below the threshold
        return math.copysign(float(np.finfo(np.float32).max), exact)
    return float(np.float32(float(exact)))  # float(exact) is correctly rounded; no tie here


def test_reduce_sum_does_not_overflow_in_one_order_when_the_exact_sum_is_finite() -> None:
    # each row overflows float32 accumulated left to right or right to left, not both
    rows = [[-3e38, -3e38, 3e38, 1e38], [3e38, -3e38, -3e38, 1e38], [1e38, 3e38, -3e38, -3e38]]
    x = np.array(rows, np.float32)
    for order in (x, x[:, ::-1]):
        forward = [np.float32(0)] * len(rows)
        with np.errstate(over="ignore"):
            for i, r in enumerate(order):
                for v in r:
                    forward[i] = np.float32(forward[i] + v)
        assert any(np.isinf(f) for f in forward)  # the rows are built to overflow this order
    got = run1(F32, (3, 4), lambda b, v: b.reduce_sum(v, 1), x)
    want = [_exact_sum_f32([float(v) for v in r]) for r in x]
    assert got.tolist() == want and all(math.isfinite(w) for w in want)
    assert abs(got[0] - np.float32(-2e38)) <= np.spacing(np.float32(2e38))
    # and over every axis at once, and the other axis
    assert run1(F32, (3, 4), lambda b, v: b.reduce_sum(v, (0, 1)), x) == np.float32(
        _exact_sum_f32([float(v) for v in x.ravel()])
    )
    cols = run1(F32, (4, 3), lambda b, v: b.reduce_sum(v, 0), x.T.copy())
    assert cols.tolist() == want


def test_reduce_sum_rounds_the_exact_sum_at_the_overflow_threshold() -> None:
    big = float(np.finfo(np.float32).max)  # 2^128 - 2^104
    # exactly at the threshold: rounds to infinity (ties to even); just below it: the maximum
    at = [big, 2.0**102, 2.0**102]
    below = [big, 2.0**102, 2.0**102 - 2.0**78, 1e30, -1e30]
    got = run1(F32, (2, 5), lambda b, v: b.reduce_sum(v, 1), [[*at, 0.0, 0.0], below])
    assert got[0] == np.inf and _exact_sum_f32(at) == math.inf
    assert got[1] == np.float32(big) and _exact_sum_f32(below) == big


@pytest.mark.parametrize("other", [np.nan, np.inf, 1.0, -3.4e38])
def test_reduce_sum_screen_does_not_hide_a_row_near_overflow(other: float) -> None:
    # the screen (n max|x| below the threshold) must not skip the exact sum of a row that
    # needs it, whatever the other rows hold: a NaN or an infinity elsewhere, a small or a
    # huge value (the huge one is what makes the screen fail on its own row)
    big = float(np.finfo(np.float32).max)
    # the exact sum is 2^-149 below the threshold, so it rounds to big; the float64 sum loses
    # the 2^-149 and rounds to infinity: only the exact path gets this row right
    near = [big, 2.0**103, -(2.0**-149), 0.0, 0.0]
    x = np.array([near, [other, 0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    got = run1(F32, (3, 5), lambda b, v: b.reduce_sum(v, 1), x)
    assert got[0] == np.float32(big) and _exact_sum_f32(near) == big
    assert got[2] == 15.0
    assert np.array_equal(got[1:2], np.float32([other]), equal_nan=True)


def test_reduce_sum_screened_rows_match_the_exact_sum() -> None:
    # far from overflow the screen passes and the float64 sum, rounded once, is returned:
    # for these rows (no cancellation) it is the exact sum rounded once
    rng = np.random.default_rng(11)
    x = (rng.random((6, 300)) * 2.0 ** rng.integers(-20, 100, (6, 1))).astype(np.float32)
    got = run1(F32, (6, 300), lambda b, v: b.reduce_sum(v, 1), x)
    assert got.tolist() == [_exact_sum_f32([float(v) for v in r]) for r in x]


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("name", ["exp", "log", "tanh"])
def test_float64_functions_round_once_across_chunks(dtype: DType, name: str) -> None:
    # more elements than one float64 chunk (2^15), the last chunk short: every element is
    # numpy's float64 function of the exactly widened value, rounded once to the dtype
    x = np.linspace(-12.0, 12.0, 2**16 + 77).astype(dtype.numpy)
    fn = getattr(np, name)
    got = run1(dtype, x.shape, lambda b, v: getattr(b, name)(v), x)
    with np.errstate(all="ignore"):
        wide = fn(x.astype(np.float64))
        if dtype is BF16:  # float64 to bfloat16 directly, as the oracle's _round does
            want = wide.astype(ml_dtypes.bfloat16)
        else:
            want = wide.astype(dtype.numpy)
    ubits = np.uint16 if dtype is not F32 else np.uint32
    # log of a negative is a computed NaN: the positive quiet one with no payload (numpy's
    # own sign for it depends on the SIMD loop it picks)
    quiet = {F32: 0x7FC0_0000, F16: 0x7E00, BF16: 0x7FC0}[dtype]
    want_bits = np.where(np.isnan(want), ubits(quiet), want.view(ubits))
    assert np.array_equal(got.view(ubits), want_bits)


@settings(max_examples=60)
@given(
    st.lists(
        st.sampled_from([3.4e38, -3.4e38, 3e38, -3e38, 1e38, -1e38, 1.5, -(2.0**-149), 0.0]),
        min_size=1,
        max_size=9,
    )
)
def test_reduce_sum_is_the_exact_sum_rounded_once_near_the_edges(row: list[float]) -> None:
    x = np.array(row, np.float32)
    got = run1(F32, (len(row),), lambda b, v: b.reduce_sum(v, 0), x)
    want = _exact_sum_f32([float(v) for v in x])
    # the documented accumulator: float64, so within n * 2^-53 * sum|x| of the exact sum before
    # the one rounding to F32 (a row that cancels loses what float64 cannot hold), and finite
    # exactly when the exact sum is
    assert math.isinf(want) == math.isinf(float(got))
    if math.isinf(want):
        assert float(got) == want
    else:
        slack = len(row) * 2.0**-53 * sum(abs(float(v)) for v in x)
        assert abs(float(got) - want) <= slack + float(np.spacing(np.float32(abs(want))))
