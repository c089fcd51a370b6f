"""The intel-npu4 range rule ``reduce_sum(x) * 2^k -> reduce_sum(x * 2^k)`` (k < 0) on the
oracle: the rewritten program at the device's precision (FP16) against the original, at the
edges (sums just under and past 65504, summands in FP16's subnormal range, cancellation, NaN
and infinities), within the derived bound ``n 2^-25`` plus the rounding the running analysis
adds; and where it does not apply (a scale that is not a power of two below 1, a second reader,
the sum a result, another target)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from poot_ir import AbsRel, Builder, DType, Prim, Program, Var, evaluate
from poot_planner import TARGETS, narrow_to_device_precision, plan
from poot_planner.error_bounds import result_bounds
from poot_planner.legalize.rules import Numerics

INTEL = TARGETS["intel-npu4"]
F32 = DType.F32
ROWS, N = 10, 512


def _program(scale: Callable[[Builder, Var], Var], square: bool = True, n: int = N) -> Program:
    """LayerNorm's variance term: the sum over a row (of squares), then scaled."""
    b = Builder("scaled_sum")
    x = b.slot("x", F32, (ROWS, n))
    s = b.reduce_sum(b.mul(x, x) if square else x, axes=(1,))
    b.output("y", scale(b, s))
    return b.build()


SCALES: dict[str, tuple[Callable[[Builder, Var], Var], float]] = {
    "mul 2^-9": (lambda b, s: b.mul(s, 2.0**-9), 2.0**-9),
    "2^-9 mul": (lambda b, s: b.mul(2.0**-9, s), 2.0**-9),
    "div 512": (lambda b, s: b.div(s, 512.0), 2.0**-9),
    "mul -2^-4": (lambda b, s: b.mul(s, -(2.0**-4)), -(2.0**-4)),
    "mul 2^-1": (lambda b, s: b.mul(s, 0.5), 0.5),
}


def _rows(square: bool) -> np.ndarray:
    """Rows at the edges, every value exactly FP16 (so narrowing the input is exact)."""
    rng = np.random.default_rng(7)
    under = np.sqrt(65472.0 / N) if square else 65472.0 / N  # the sum just under 65504
    past = np.sqrt(65536.0 / N) if square else 65536.0 / N  # just past (65520 rounds to inf)
    rows = [
        np.full(N, under),
        np.full(N, past),
        rng.normal(0.0, 16.0, N),  # magika's LayerNorm_1: a sum of squares ~1.3e5
        np.full(N, 2.0**-24),  # the smallest subnormal: every scaled summand underflows
        rng.integers(1, 64, N) * 2.0**-24,  # subnormals, some lost in the scaling
        np.concatenate([np.full(N // 2, 2.0**-14), np.full(N // 2, -(2.0**-14))]),
        np.concatenate([np.full(N // 2, 200.0), np.full(N // 2, -200.0)]),  # cancels
        rng.normal(0.0, 1.0, N),
        np.where(np.arange(N) % 3 == 0, 200.0, 2.0**-20),  # large and tiny together
        rng.uniform(-60.0, 60.0, N),
    ]
    return np.stack(rows).astype(np.float16).astype(np.float32)


def _device(program: Program, x: np.ndarray) -> np.ndarray:
    assert INTEL.narrowing is not None
    narrowed = narrow_to_device_precision(program, INTEL.narrowing)
    with np.errstate(all="ignore"):
        return evaluate(narrowed, {"x": x})["y"].astype(np.float64)


def _rounding(y: np.ndarray) -> np.ndarray:
    """One FP16 ulp of the result and half the smallest subnormal: what the two roundings of
    values the derived bound keeps apart can add (``error_bounds.rewrites._scaled_sums``)."""
    with np.errstate(all="ignore"):
        return np.spacing(np.abs(y).astype(np.float16)).astype(np.float64) + 2.0**-25


@pytest.mark.parametrize("square", [True, False], ids=["squares", "values"])
@pytest.mark.parametrize("name", list(SCALES))
def test_scaled_sum_against_the_original_at_the_edges(name: str, square: bool) -> None:
    make, c = SCALES[name]
    program = _program(make, square)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = p.rewrites
    assert rw.rule.numerics is Numerics.SCALED_SUM and rw.primitive == "reduce_sum"
    assert rw.absorbed == rw.eqn + 1  # the scaling's own equation is folded in
    assert [e.prim for e in p.legalized.eqns[rw.first : rw.last + 1]] == [
        Prim.MUL,
        Prim.REDUCE_SUM,
    ]
    bound = rw.derivation.bound
    assert isinstance(bound, AbsRel) and bound.abs == N * 2.0**-25 and bound.rel == 0.0

    x = _rows(square)
    got = _device(p.legalized, x)
    before = _device(program, x)  # the original at device precision
    terms = (x.astype(np.float64) ** 2 if square else x.astype(np.float64)).astype(np.float16)
    exact = np.sum(terms.astype(np.float64), axis=1) * c  # the summands as FP16 carries them
    slack = bound.abs + _rounding(exact)
    holds = np.abs(exact) <= 65504.0  # else the scaled sum itself is past FP16: inf, refused
    assert np.all(np.abs(got - exact)[holds] <= slack[holds]), np.abs(got - exact) - slack
    assert not np.any(np.isfinite(got[~holds]))
    fine = np.isfinite(before)
    assert np.all(np.isfinite(got[fine]))  # never a new overflow
    with np.errstate(invalid="ignore"):  # inf - inf on the rows both overflow
        moved = np.abs(got - before)
    assert np.all(moved[fine] <= slack[fine])
    # the running analysis carries at least that much where the original is finite in FP16
    run = result_bounds(p, {"x": x})["y"]
    assert np.all(moved[fine] <= run[fine])
    if square and c == 2.0**-9:
        # the original overflows FP16 on the rows past 65504 (the refusal magika met); the
        # rewritten sum holds them, and scaling made no difference below the overflow
        assert {1, 2} <= set(np.flatnonzero(~fine).tolist())
        assert np.all(np.isfinite(got))
        assert got[0] == before[0]
    # a scaled summand below the smallest subnormal is lost: a row of 2^-24 scales to zeros
    if not square and abs(c) <= 2.0**-2:
        assert got[3] == 0.0 and before[3] != 0.0


@pytest.mark.parametrize("name", list(SCALES))
def test_nan_and_infinities_keep_their_semantics(name: str) -> None:
    make, _ = SCALES[name]
    program = _program(make, square=False, n=4)
    p = plan(program, INTEL)
    assert p.rewrites
    x = np.array(
        [
            [np.inf, 1.0, 2.0, 3.0],
            [-np.inf, 1.0, 2.0, 3.0],
            [np.inf, -np.inf, 0.0, 0.0],
            [np.nan, 1.0, 2.0, 3.0],
            [65504.0, 65504.0, -65504.0, -65504.0],  # FP16's edge: finite through either
            [0.0, -0.0, 0.0, -0.0],
            [1.0, 2.0, 3.0, 4.0],
            [2.0**-24, 0.0, 0.0, 0.0],
            [-1.0, -1.0, -1.0, -1.0],
            [np.nan, np.inf, 1.0, 1.0],
        ],
        dtype=np.float32,
    )
    with np.errstate(all="ignore"):
        want = evaluate(program, {"x": x})["y"]  # the original, F32
        got = evaluate(p.legalized, {"x": x})["y"]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isposinf(got), np.isposinf(want))
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    # at device precision too, for the non-finite rows (the range guards see the same values)
    dev, orig = _device(p.legalized, x), _device(program, x)
    for k in (0, 1, 2, 3, 9):
        assert np.isnan(dev[k]) == np.isnan(orig[k]) and np.isinf(dev[k]) == np.isinf(orig[k])


NOT_REWRITTEN: dict[str, Callable[[Builder, Var], Var]] = {
    "1/768": lambda b, s: b.mul(s, 1.0 / 768.0),  # not a power of two
    "mul 2": lambda b, s: b.mul(s, 2.0),  # >= 1: would only move an overflow earlier
    "mul 1": lambda b, s: b.mul(s, 1.0),
    "div 2^-3": lambda b, s: b.div(s, 0.125),
    "2^-9 div": lambda b, s: b.div(2.0**-9, s),  # the sum divides, it is not scaled
    "two readers": lambda b, s: b.add(b.mul(s, 2.0**-9), s),
    "add": lambda b, s: b.add(s, 2.0**-9),
}


@pytest.mark.parametrize("name", list(NOT_REWRITTEN))
def test_not_rewritten(name: str) -> None:
    program = _program(NOT_REWRITTEN[name], n=8)
    p = plan(program, INTEL)
    assert p.rewrites == () and p.legalized == program


def test_not_rewritten_when_the_sum_is_a_result_or_on_other_targets() -> None:
    b = Builder("sum_result")
    x = b.slot("x", F32, (ROWS, 8))
    s = b.reduce_sum(x, axes=(1,))
    b.output("s", s)
    b.output("y", b.mul(s, 2.0**-3))
    assert plan(b.build(), INTEL).rewrites == ()
    program = _program(SCALES["mul 2^-9"][0])
    for t in ("xdna2", "cpu"):
        assert plan(program, t).rewrites == ()


def test_legalizing_twice_changes_nothing() -> None:
    p = plan(_program(SCALES["div 512"][0]), INTEL)
    again = plan(p.legalized, INTEL)
    assert again.rewrites == () and again.legalized == p.legalized
