"""``conv``, ``reduce_window_sum`` and ``reduce_window_max`` on the oracle, against references
written here from the definition (nested loops over output positions and taps, in Python
floats; nothing shared with ``poot_ir.window``), at the edges and over drawn shapes and params.

Inputs are small integers (and halves), so every sum is exact in float64 and in the float32
result: the comparisons are bit for bit, -0 and NaN included."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_ir import Builder, DType, Program, TypeCheckError, evaluate, format_program, parse_program

F32 = DType.F32


def _positions(n: int, k: int, s: int, lo: int, hi: int, d: int, ld: int) -> list[list[int | None]]:
    """For each output position along one axis, the input index each tap reads (None: a pad
    or a dilation hole), found by walking the padded, dilated axis."""
    full = 0 if n == 0 else ld * (n - 1) + 1
    rows: list[list[int | None]] = []
    p = 0
    while p * s + (k - 1) * d < full + lo + hi:
        taps: list[int | None] = []
        for t in range(k):
            q = p * s + t * d - lo  # position in the dilated, unpadded axis
            taps.append(q // ld if 0 <= q < full and q % ld == 0 else None)
        rows.append(taps)
        p += 1
    return rows


def ref_conv(
    x: np.ndarray,
    w: np.ndarray,
    strides: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    ld: tuple[int, ...],
    rd: tuple[int, ...],
    groups: int,
) -> np.ndarray:
    n = x.shape[0]
    o, cg = w.shape[:2]
    axes = [
        _positions(x.shape[2 + a], w.shape[2 + a], strides[a], *pads[a], rd[a], ld[a])
        for a in range(x.ndim - 2)
    ]
    y = np.zeros((n, o, *(len(r) for r in axes)), np.float64)
    for b, m in itertools.product(range(n), range(o)):
        g = m // (o // groups)
        for out in itertools.product(*(range(len(r)) for r in axes)):
            acc = 0.0
            for ci in range(cg):
                for t in itertools.product(*(range(k) for k in w.shape[2:])):
                    idx = [axes[a][out[a]][t[a]] for a in range(len(t))]
                    if None not in idx:
                        acc += float(x[(b, g * cg + ci, *idx)]) * float(w[(m, ci, *t)])
            y[(b, m, *out)] = acc
    return y


def ref_window(
    x: np.ndarray,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dil: tuple[int, ...],
    kind: str,
) -> np.ndarray:
    axes = [
        _positions(x.shape[a], window[a], strides[a], *pads[a], dil[a], 1) for a in range(x.ndim)
    ]
    y = np.zeros(tuple(len(r) for r in axes), np.float64)
    for out in itertools.product(*(range(len(r)) for r in axes)):
        acc = 0.0 if kind == "sum" else -math.inf
        for t in itertools.product(*(range(k) for k in window)):
            idx = [axes[a][out[a]][t[a]] for a in range(len(t))]
            v = 0.0 if kind == "sum" else -math.inf  # the padding: the identity
            if None not in idx:
                v = float(x[tuple(idx)])
            if kind == "sum":
                acc += v
            elif math.isnan(v) or math.isnan(acc):
                acc = math.nan
            elif v > acc or (v == acc == 0 and not math.copysign(1, v) < 0):
                acc = v  # IEEE maximum: +0 beats -0
        y[out] = acc
    return y


def run_conv(x: np.ndarray, w: np.ndarray, **kw: object) -> np.ndarray:
    b = Builder("conv")
    xv, wv = b.slot("x", F32, x.shape), b.weight("w", F32, w.shape)
    b.output("y", b.conv(xv, wv, **kw))  # type: ignore[arg-type]
    return evaluate(b.build(), {"x": x.astype(np.float32), "w": w.astype(np.float32)})["y"]


def run_window(x: np.ndarray, kind: str, *args: object) -> np.ndarray:
    b = Builder("pool")
    xv = b.slot("x", F32, x.shape)
    b.output("y", getattr(b, f"reduce_window_{kind}")(xv, *args))
    return evaluate(b.build(), {"x": x.astype(np.float32)})["y"]


def check_conv(x: np.ndarray, w: np.ndarray, s=None, pads=None, ld=None, rd=None, g=1) -> None:  # type: ignore[no-untyped-def]
    k = x.ndim - 2
    s, ld, rd = s or (1,) * k, ld or (1,) * k, rd or (1,) * k
    pads = pads or ((0, 0),) * k
    got = run_conv(x, w, strides=s, padding=pads, lhs_dilation=ld, rhs_dilation=rd, groups=g)
    want = ref_conv(x, w, s, pads, ld, rd, g).astype(np.float32)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def check_window(x: np.ndarray, kind: str, window, strides=None, pads=None, dil=None) -> None:  # type: ignore[no-untyped-def]
    r = x.ndim
    strides, dil = strides or (1,) * r, dil or (1,) * r
    pads = pads or ((0, 0),) * r
    got = run_window(x, kind, window, strides, pads, dil)
    want = ref_window(x, window, strides, pads, dil, kind).astype(np.float32)
    assert got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def ints(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float64) / 2


# -- conv at the edges ------------------------------------------------------------------------


def test_conv_plain_2d() -> None:
    check_conv(ints((2, 3, 5, 4)), ints((4, 3, 3, 2), 1), pads=((1, 1), (0, 1)))


def test_conv_padding_larger_than_the_kernel() -> None:
    check_conv(ints((1, 2, 3, 3)), ints((2, 2, 2, 2), 1), pads=((3, 4), (5, 2)))


def test_conv_stride_larger_than_the_kernel() -> None:
    check_conv(ints((1, 2, 9, 8)), ints((3, 2, 2, 1), 1), s=(4, 3), pads=((1, 0), (0, 2)))


def test_conv_dilations() -> None:
    check_conv(ints((1, 2, 7)), ints((2, 2, 3), 1), s=(2,), rd=(2,), pads=((1, 2),))
    check_conv(ints((2, 1, 4, 3)), ints((2, 1, 2, 2), 1), ld=(2, 3), rd=(1, 2), pads=((1, 1),) * 2)


@pytest.mark.parametrize("mult", [1, 2])
def test_conv_depthwise(mult: int) -> None:
    c = 5
    check_conv(ints((2, c, 6, 5)), ints((c * mult, 1, 3, 3), 1), pads=((1, 1),) * 2, g=c)


def test_conv_grouped_3d() -> None:
    check_conv(ints((1, 4, 3, 4, 3)), ints((6, 2, 2, 2, 1), 1), rd=(1, 2, 1), g=2)


def test_conv_1x1() -> None:
    check_conv(ints((2, 3, 4, 4)), ints((5, 3, 1, 1), 1))


def test_conv_negative_padding_crops() -> None:
    check_conv(ints((1, 1, 6, 6)), ints((1, 1, 2, 2), 1), pads=((-1, 0), (2, -2)))


@pytest.mark.parametrize(
    ("x", "w"),
    [((1, 1, 2, 2), (1, 1, 3, 3)), ((0, 2, 4), (1, 2, 2)), ((1, 0, 4), (3, 0, 2))],
    ids=["window longer than the input", "no batch", "no input channel"],
)
def test_conv_empty(x: tuple[int, ...], w: tuple[int, ...]) -> None:
    check_conv(ints(x), ints(w, 1))


def test_conv_a_zero_sum_is_positive_zero_and_nan_propagates() -> None:
    x = np.full((1, 1, 3), -0.0)
    y = run_conv(x, np.ones((1, 1, 2)))
    assert not np.signbit(y).any()
    x = np.array([[[1, math.nan, 2, 3]]], np.float64)
    y = run_conv(x, np.ones((1, 1, 2)))
    np.testing.assert_array_equal(np.isnan(y), [[[True, True, False]]])


def test_conv_accumulates_past_float32() -> None:
    # 3e38 + 3e38 - 3e38 overflows a float32 accumulator; at float64 it is 3e38.
    x = np.array([[[3e38, 3e38, -3e38]]], np.float64)
    assert run_conv(x, np.ones((1, 1, 3)))[0, 0, 0] == np.float32(3e38)


# -- window reductions at the edges -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_pool_2d_padded(kind: str) -> None:
    check_window(
        ints((1, 2, 5, 6)), kind, (1, 1, 3, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (0, 1))
    )


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_pool_padding_larger_than_the_window(kind: str) -> None:
    # windows wholly in the padding: the identity (0, or -inf for max)
    check_window(ints((1, 1, 3)), kind, (1, 1, 2), None, ((0, 0), (0, 0), (3, 4)))


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_pool_stride_past_window_and_dilation(kind: str) -> None:
    check_window(ints((2, 9, 7)), kind, (1, 2, 2), (1, 4, 3), ((0, 1), (1, 0), (0, 0)), (1, 2, 3))


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_pool_empty(kind: str) -> None:
    check_window(ints((1, 2, 2)), kind, (1, 1, 3))
    check_window(ints((0, 3)), kind, (1, 2))


def test_max_nan_and_infinities() -> None:
    x = np.array(
        [[math.nan, 1, -math.inf], [math.inf, -2, 0], [3, -math.inf, -math.inf]], np.float64
    )
    check_window(x, "max", (2, 2))
    check_window(x, "max", (1, 2), (1, 1), ((0, 0), (1, 1)))


def test_max_and_sum_of_signed_zeros() -> None:
    x = np.array([[-0.0, -0.0, 0.0, -0.0]], np.float64)
    check_window(x, "max", (1, 2))  # -0, +0, +0
    got = run_window(x, "max", (1, 2))
    np.testing.assert_array_equal(np.signbit(got), [[True, False, False]])
    # a sum starts at +0, as lax's does: -0 + -0 is +0 here
    assert not np.signbit(run_window(x, "sum", (1, 2))).any()


def test_sum_accumulates_past_float32() -> None:
    x = np.array([[3e38, 3e38, -3e38]], np.float64)
    assert run_window(x, "sum", (1, 3))[0, 0] == np.float32(3e38)


# -- typing and text --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "w", "kw", "words"),
    [
        ((1, 4, 5), (2, 3, 3), {"groups": 2}, "groups 2"),
        ((1, 4, 5), (3, 2, 3), {"groups": 2}, "groups 2"),
        ((4, 5), (2, 4), {}, "rank 3 to 5"),
        ((1, 1, 5), (1, 1, 3), {"padding": [(-6, 0)]}, "crops"),
        ((1, 1, 5), (1, 1, 3), {"strides": (0,)}, ">= 1"),
        ((1, 1, 5), (1, 1, 3), {"strides": (1, 1)}, "1 entries"),
    ],
)
def test_conv_refuses_bad_params_typed(
    x: tuple[int, ...], w: tuple[int, ...], kw: dict[str, object], words: str
) -> None:
    b = Builder("bad")
    xv, wv = b.slot("x", F32, x), b.weight("w", F32, w)
    with pytest.raises(TypeCheckError, match=words):
        b.conv(xv, wv, **kw)  # type: ignore[arg-type]


def test_window_refuses_bad_params_and_integers_typed() -> None:
    b = Builder("bad")
    with pytest.raises(TypeCheckError, match="2 entries"):
        b.reduce_window_max(b.slot("x", F32, (2, 3)), (2,))
    with pytest.raises(TypeCheckError, match="not defined on i32"):
        b.reduce_window_sum(b.slot("i", DType.I32, (2, 3)), (1, 2))


def _pooled_program() -> Program:
    b = Builder("p")
    x = b.slot("x", DType.F16, (1, 2, 5, 5))
    y = b.conv(
        x, b.weight("w", DType.F16, (4, 1, 3, 3)), (2, 1), [(1, -1), (0, 3)], (1, 2), (2, 1), 2
    )
    b.output(
        "m", b.reduce_window_max(y, (1, 1, 2, 2), (1, 1, 1, 2), [(0, 0), (0, 0), (1, 0), (0, 1)])
    )
    b.output("s", b.reduce_window_sum(y, (1, 2, 1, 1), dilation=(1, 2, 1, 1)))
    return b.build()


def test_text_round_trip() -> None:
    program = _pooled_program()
    text = format_program(program)
    assert "padding_lo=(1,0)" in text and "groups=2" in text
    assert parse_program(text) == program
    assert format_program(parse_program(text)) == text


# -- drawn shapes and params ------------------------------------------------------------------


@st.composite
def conv_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    k = draw(st.integers(1, 3))
    g = draw(st.integers(1, 3))
    cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    spatial = [draw(st.integers(1, 5 if k < 3 else 3)) for _ in range(k)]
    kernel = [draw(st.integers(1, 3)) for _ in range(k)]
    x = ints((draw(st.integers(1, 2)), g * cg, *spatial), draw(st.integers(0, 99)))
    w = ints((g * og, cg, *kernel), draw(st.integers(0, 99)))
    kw: dict[str, object] = {
        "s": tuple(draw(st.integers(1, 3)) for _ in range(k)),
        "pads": tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(k)),
        "ld": tuple(draw(st.integers(1, 2)) for _ in range(k)),
        "rd": tuple(draw(st.integers(1, 2)) for _ in range(k)),
        "g": g,
    }
    return x, w, kw


_SETTINGS = settings(
    derandomize=True, max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_SETTINGS
@given(conv_cases())
def test_conv_matches_the_definition(
    case: tuple[np.ndarray, np.ndarray, dict[str, object]],
) -> None:
    x, w, kw = case
    check_conv(x, w, **kw)


@_SETTINGS
@given(st.data())
def test_windows_match_the_definition(data: st.DataObject) -> None:
    r = data.draw(st.integers(1, 3))
    x = ints(tuple(data.draw(st.integers(0, 5)) for _ in range(r)), data.draw(st.integers(0, 99)))
    if data.draw(st.booleans()) and x.size:
        x.flat[data.draw(st.integers(0, x.size - 1))] = data.draw(
            st.sampled_from([math.nan, math.inf, -math.inf, -0.0])
        )
    window = tuple(data.draw(st.integers(1, 3)) for _ in range(r))
    strides = tuple(data.draw(st.integers(1, 3)) for _ in range(r))
    pads = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in range(r))
    dil = tuple(data.draw(st.integers(1, 2)) for _ in range(r))
    kind = data.draw(st.sampled_from(["sum", "max"]))
    check_window(x, kind, window, strides, pads, dil)
