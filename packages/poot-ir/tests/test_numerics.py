"""Contracts, domains and compare on crafted arrays: bounds met exactly, missed by one ulp."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from poot_ir import (
    AbsRel,
    AnyInput,
    BitExact,
    Bounded,
    Contract,
    DType,
    Exact,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    LargerOperandUlps,
    NarrowStorage,
    Normwise,
    NotNaN,
    PositiveNormal,
    Prim,
    Relative,
    ScaledSum,
    compare,
)
from poot_ir.numerics import Domain, larger_operand, looser, row_magnitudes

f32 = np.float32


def up(x: float) -> np.float32:
    return np.nextafter(f32(x), f32(np.inf))


def test_bit_exact() -> None:
    a = np.array([1.0, -0.0, np.nan], f32)
    assert compare(a, a.copy(), BitExact()).ok
    c = compare(np.array([1.0, 0.0, np.nan], f32), a, BitExact())
    assert not c.ok and c.index == (1,) and c.reason == "bits differ"
    assert compare(np.array([1.0, 0.0, np.nan], f32), a, BitExact(signed_zero=False)).ok
    other_nan = np.array([1.0, -0.0, np.nan], f32)
    other_nan.view(np.uint32)[2] |= 1
    assert not compare(other_nan, a, BitExact()).ok  # payloads must match
    c = compare(np.array([up(1.0), -0.0, np.nan], f32), a, BitExact())
    assert not c.ok and c.index == (0,) and c.error_ratio == float("inf")


def test_larger_operand_ulps() -> None:
    a, b = np.array([4.0, 1.0], f32), np.array([4.0, -1.0 + 2**-20], f32)
    ref = a + b
    scale = larger_operand(a, b)
    allowed = 2 * 2.0**-23 * 4.0  # one ulp of 8
    y = np.array([ref[0] + f32(allowed), ref[1]], f32)  # exactly at the bound
    c = compare(y, ref, LargerOperandUlps(2), scale=scale)
    assert c.ok and c.index == (0,) and c.error_ratio == 1.0
    y[0] = up(float(y[0]))
    c = compare(y, ref, LargerOperandUlps(2), scale=scale)
    assert not c.ok and c.index == (0,) and c.allowed == allowed
    contract = Contract(Prim.ADD, LargerOperandUlps(2), FiniteNormalResult())
    assert not contract.check(y, ref, (a, b)).ok


def test_abs_rel_and_relative() -> None:
    ref = np.array([0.0, 100.0], np.float64).astype(f32)
    bound = AbsRel(2e-6, 1e-5)
    y = np.array([2e-6, 100.0], f32)
    c = compare(y, ref, bound)
    assert c.ok == (float(f32(2e-6)) <= 2e-6)
    y = np.array([0.0, 100.0 + 1e-3 + 2e-6], np.float64).astype(f32)
    exact_err = float(y[1]) - 100.0
    assert compare(y, ref, bound).ok == (exact_err <= 2e-6 + 1e-3)
    y[1] = up(float(y[1]))
    c = compare(y, ref, bound)
    assert not c.ok and c.index == (1,) and c.expected == 100.0
    r = np.array([4.0], f32)
    assert compare(np.array([4.0 + 2.0**-21], f32), r, Relative(2.0**-23)).ok
    assert not compare(np.array([up(4.0 + 2.0**-21)], f32), r, Relative(2.0**-23)).ok


def test_nan_and_inf_rules() -> None:
    ref = np.array([1.0, np.nan, np.inf], f32)
    loose = AbsRel(1e30, 1e30)
    assert compare(np.array([1.0, np.nan, np.inf], f32), ref, loose).ok
    c = compare(np.array([np.nan, np.nan, np.inf], f32), ref, loose)
    assert not c.ok and c.index == (0,) and "NaN" in c.reason
    assert not compare(np.array([np.inf, np.nan, np.inf], f32), ref, loose).ok
    assert not compare(np.array([1.0, 2.0, np.inf], f32), ref, loose).ok
    assert not compare(np.array([1.0, np.nan, -np.inf], f32), ref, loose).ok
    assert not compare(np.array([1.0, np.nan, f32(3e38)], f32), ref, loose).ok


def test_shape_and_dtype_mismatch() -> None:
    c = compare(np.zeros(3, f32), np.zeros(2, f32), BitExact())
    assert not c.ok and "expected float32[2]" in c.reason and c.index is None
    assert not compare(np.zeros(2, np.float16), np.zeros(2, f32), AbsRel(1, 1)).ok
    assert "FAILED" in str(c)


def test_integers_compare_exactly() -> None:
    a = np.array([1, 2], np.int32)
    assert compare(a, a.copy(), AbsRel(10, 10)).ok
    assert not compare(a + 1, a, AbsRel(10, 10)).ok


def test_scaled_sum() -> None:
    x = np.array([[1.0, -1.0, 2.0, 4.0]], f32)
    ref = x.sum(axis=-1)
    scale = row_magnitudes(x)
    assert scale.tolist() == [32.0]
    allowed = 2 * 2.0**-23 * 32.0
    assert compare(ref + f32(allowed), ref, ScaledSum(2), scale=scale).ok
    assert not compare(
        up(float(ref[0] + f32(allowed))).reshape(1), ref, ScaledSum(2), scale=scale
    ).ok


def test_normwise() -> None:
    ref = np.array([3.0, 4.0], f32)  # ||ref|| = 5
    y = np.array([3.0, 4.5], f32)  # ||diff|| = 0.5
    assert compare(y, ref, Normwise(0.1)).ok
    c = compare(y, ref, Normwise(0.099))
    assert not c.ok and c.index == (1,) and c.error == 0.5
    assert not compare(np.array([3.0, np.inf], f32), ref, Normwise(1.0)).ok


def test_domains() -> None:
    x = np.array([-88.0, -87.0, 88.0, 88.5, np.nan, np.inf, 1e-39, 2.0**-126], f32)
    assert Interval(-87, 88).inside((x,), x).tolist() == [
        False,
        True,
        True,
        False,
        False,
        False,
        True,
        True,
    ]
    assert PositiveNormal().inside((x,), x).tolist() == [False, False, True, True] + [False] * 3 + [
        True
    ]
    assert FiniteInputs().inside((x,), x).tolist() == [True] * 4 + [False, False, True, True]
    assert NotNaN().inside((x,), x).tolist() == [True] * 4 + [False] + [True] * 3
    assert AnyInput().inside((x,), x).all()
    a = np.array([1.0, 1.0, f32(3e38), 2.0**-126], f32)
    b = np.array([-1.0, np.inf, f32(3e38), -(2.0**-127)], f32)
    with np.errstate(over="ignore"):
        r = a + b
    assert FiniteNormalResult().inside((a, b), r).tolist() == [True, False, False, False]
    # a literal operand broadcasts
    assert Interval(0, 1).inside((x[:2], np.float32(0.5)), x[:2]).shape == (2,)


def test_contract_masks_outside_domain() -> None:
    contract = Contract(Prim.EXP, AbsRel(2e-6, 1e-5), Interval(-87, 88))
    x = np.array([0.0, 100.0], f32)
    ref = np.array([1.0, np.inf], f32)
    assert contract.check(np.array([1.0, 0.0], f32), ref, (x,)).ok  # 100 is outside: unpromised
    assert contract.check(np.array([1.0, 0.0], f32), ref, (x,)).compared == 1
    c = Contract(Prim.MAX, BitExact(), NotNaN()).check(
        np.array([2.0], f32), np.array([1.0], f32), (x[:1],)
    )
    assert not c.ok and "actual 2.0" in str(c)


def test_numerics_classes() -> None:
    assert Exact().bound == BitExact()
    assert Bounded(1e-6, 1e-5).bound == AbsRel(1e-6, 1e-5)
    assert NarrowStorage(1e-3).bound == Normwise(1e-3)
    assert looser(Exact(), Bounded(1, 2)) == Bounded(1, 2)
    assert looser(Bounded(1, 3), Bounded(2, 2)) == Bounded(2, 3)
    assert looser(Bounded(1, 3), NarrowStorage(1e-3)) == NarrowStorage(1e-3)
    assert looser(NarrowStorage(1e-2), Exact()) == NarrowStorage(1e-2)


def test_comparison_line() -> None:
    ref = np.array([1.0, 2.0], f32)
    c = compare(np.array([1.0, 2.5], f32), ref, AbsRel(0.1, 0.0))
    line = str(c)
    assert "\n" not in line and line.startswith("FAILED") and "(1,)" in line and "2.5" in line
    assert c.error_ratio == 5.0
    ok = compare(ref, ref, BitExact())
    assert str(ok).startswith("ok") and ok.error_ratio == 0.0
    empty = compare(ref, ref, AbsRel(0, 0), mask=np.zeros(2, bool))
    assert empty.ok and empty.compared == 0


def test_a_normwise_floor_admits_what_the_narrow_type_cannot_hold() -> None:
    # FP16 flushes 4.2e-33 to zero: no relative bound holds, the absolute floor does
    want = np.array([4.2e-33, 0.0], np.float32)
    got = np.zeros(2, np.float32)
    assert not compare(got, want, Normwise(2.0**-8)).ok
    assert compare(got, want, Normwise(2.0**-8, 2.0**-24)).ok
    # the floor is per element: it does not excuse an error above FP16's resolution
    assert not compare(np.array([1e-6, 0.0], np.float32), want, Normwise(2.0**-8, 2.0**-24)).ok


DOMAINS = (
    Interval(-87.0, 88.0),
    PositiveNormal(),
    FiniteInputs(),
    FiniteNormalResult(),
    NotNaN(),
    AnyInput(),
)


def _reference(d: Domain, x: np.ndarray) -> np.ndarray:
    """Membership of operands written independently of the domains' own (numpy's finfo)."""
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        if isinstance(d, Interval):
            return (x64 >= d.lo) & (x64 <= d.hi)
        if isinstance(d, PositiveNormal):
            return np.isfinite(x64) & (x64 >= float(ml_dtypes.finfo(x.dtype).smallest_normal))
        if isinstance(d, FiniteInputs | FiniteNormalResult):
            return np.isfinite(x64)
        if isinstance(d, NotNaN):
            return ~np.isnan(x64)
        return np.ones(x.shape, bool)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F16, DType.BF16])
@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: type(d).__name__)
def test_a_domains_bounds_are_its_membership(domain: Domain, dtype: DType) -> None:
    fi = ml_dtypes.finfo(dtype.numpy)
    tiny, big = float(fi.smallest_normal), float(fi.max)
    probe = [0.0, -0.0, 1.0, -1.0, tiny, tiny / 2, -tiny, big, -big, np.inf, -np.inf, np.nan]
    probe += [-87.0, 88.0, -88.0, 89.0, 1e-30, 3.0]
    x = np.array(probe, np.float64).astype(dtype.numpy)
    b = domain.bounds(dtype)
    want = _reference(domain, x)
    assert b.contains(x.astype(np.float64)).tolist() == want.tolist()
    assert domain.inside((x,), np.ones(x.shape, dtype.numpy)).tolist() == want.tolist()
    assert (b.largest, b.smallest_normal) == (big, tiny)
    # exactly one fact names a domain that is not an explicit interval
    facts = [b.anything, b.not_nan, b.finite, b.positive_normal]
    assert sum(facts) == (0 if isinstance(domain, Interval) else 1)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F16])
@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: type(d).__name__)
def test_edge_values_are_inside_and_just_past(domain: Domain, dtype: DType) -> None:
    edges = domain.edges(dtype)
    inside = np.array(edges.inside, np.float64).astype(dtype.numpy)
    assert np.array_equal(inside.astype(np.float64), np.array(edges.inside), equal_nan=True)
    assert _reference(domain, inside).all()
    past = np.array(edges.past, np.float64).astype(dtype.numpy)
    assert not _reference(domain, past).any()
    assert (len(edges.past) == 0) == isinstance(domain, AnyInput)


def test_each_domain_has_its_own_wording() -> None:
    words = [d.describe() for d in DOMAINS]
    assert len(set(words)) == len(words)
    assert Interval(-87.0, 88.0).describe() == "[-87, 88]"


@pytest.mark.parametrize(
    ("strides", "padding", "lhs", "rhs", "groups"),
    [((1, 1), ((1, 1), (2, 0)), (1, 1), (1, 1), 1), ((2, 1), ((2, 1), (0, 3)), (2, 1), (1, 2), 2)],
)
def test_accumulated_counts_the_terms_a_convolution_really_sums(
    strides: tuple[int, int],
    padding: tuple[tuple[int, int], ...],
    lhs: tuple[int, int],
    rhs: tuple[int, int],
    groups: int,
) -> None:
    """``accumulated`` of a padded, dilated, grouped convolution: at each output, the terms
    whose input lies inside the (undilated) input times the sum of their magnitudes, against a
    loop over the window written here (padding and the dilation's inserted zeros not counted)."""
    from poot_ir import Builder
    from poot_ir.numerics import accumulated

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6)).astype(f32)
    w = rng.standard_normal((4, 4 // groups, 3, 2)).astype(f32)
    b = Builder("conv")
    xv, wv = b.slot("x", DType.F32, x.shape), b.weight("w", DType.F32, w.shape)
    b.output("y", b.conv(xv, wv, strides, padding, lhs, rhs, groups))
    (eqn,) = b.build().eqns
    got = accumulated(eqn, [x, w])
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    want = np.zeros(eqn.out.type.shape)
    for n, o, i, j in np.ndindex(*want.shape):
        count, mag = 0, 0.0
        for c, p, q in np.ndindex(cg, *w.shape[2:]):
            # the position in the dilated, padded input, back to the input's own index
            r = i * strides[0] + p * rhs[0] - padding[0][0]
            s = j * strides[1] + q * rhs[1] - padding[1][0]
            if r % lhs[0] or s % lhs[1]:
                continue
            r, s = r // lhs[0], s // lhs[1]
            if 0 <= r < x.shape[2] and 0 <= s < x.shape[3]:
                count += 1
                mag += abs(float(x[n, (o // og) * cg + c, r, s]) * float(w[o, c, p, q]))
        want[n, o, i, j] = count * mag
    np.testing.assert_allclose(got, want, rtol=1e-12)
