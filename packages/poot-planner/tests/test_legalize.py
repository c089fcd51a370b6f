"""Legalization rules on the oracle: each rewritten program against the original equation at
the edges of its domain (FP16's: zeros, subnormals, the clamps, the range's ends), exactly for
an identity, within the derived bound for an approximation; and what is not rewritten."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import AbsRel, BitExact, Builder, DType, Prim, Program, evaluate, ops
from poot_ir.numerics import Contract, Interval
from poot_planner import (
    TARGETS,
    RefusalKind,
    narrow_to_device_precision,
    partition,
    plan,
    summarize,
)
from poot_planner.error_bounds import result_bounds
from poot_planner.legalize.probes import counters
from poot_planner.legalize.rules import RULES, Numerics

INTEL, XDNA2 = TARGETS["intel-npu4"], TARGETS["xdna2"]
F32, F16 = DType.F32, DType.F16
N = 64

#: FP16 values at the edges of every rule's domain (all exactly FP16, stored as F32).
EDGES = np.array(
    [0.0, -0.0, 2**-24, -(2**-24), 3 * 2**-24, 2**-14, -(2**-14), 2**-10, 0.1, 0.5, 1.0, -1.0,
     1.5, 2.0, 3.99, 4.0, 4.004, -4.0, 5.5, 8.99, 9.0, 9.01, -9.0, 11.0, 100.0, -100.0,
     1000.0, 65504.0, -65504.0, 65472.0],
    dtype=np.float16,
).astype(np.float32)  # fmt: skip


def _f16_values(seed: int, n: int = 256) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([EDGES, rng.normal(0, 3, n).astype(np.float32)])
    return x.astype(np.float16).astype(np.float32)


def unary(prim: str, n: int) -> Program:
    b = Builder(prim)
    x = b.slot("x", F32, (n,))
    b.output("y", getattr(b, prim)(x))
    return b.build()


def binary(prim: str, n: int) -> Program:
    b = Builder(prim)
    x, z = b.slot("x", F32, (n,)), b.slot("z", F32, (n,))
    b.output("y", getattr(b, prim)(x, z))
    return b.build()


def _narrowed_original(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    assert INTEL.narrowing is not None
    return evaluate(narrow_to_device_precision(program, INTEL.narrowing), inputs)


@pytest.mark.parametrize("prim", ["erf", "tanh"])
def test_approximations_within_their_derived_bound_at_the_edges(prim: str) -> None:
    x = _f16_values(0)
    program = unary(prim, x.size)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = p.rewrites
    assert rw.rule.numerics is Numerics.PIECEWISE and rw.primitive == prim
    bound = rw.derivation.bound
    # relative where the value is FP16-normal, a few half-subnormals below
    assert isinstance(bound, AbsRel) and 0 < bound.abs < 2e-7 and 0 < bound.rel < 0.01
    assert all(e.prim is not Prim[prim.upper()] for e in p.program.eqns)
    got = evaluate(p.program, {"x": x})["y"].astype(np.float64)
    fn = math.erf if prim == "erf" else math.tanh
    want = np.array([fn(float(v)) for v in x])  # float64, of the FP16 inputs
    err = np.abs(got - want)
    allowed = bound.abs + bound.rel * np.abs(want)
    assert np.all(err <= allowed), (x[np.argmax(err / allowed)], err.max(), bound)
    # odd, saturating exactly, and zero at zero, as the primitive
    assert np.array_equal(got[x >= 9.0], np.ones(int((x >= 9.0).sum())))
    assert got[0] == 0.0 and got[1] == 0.0
    # the rewrite in F32: within its absolute figure (the running analysis adds it), and that
    # figure covers the derived bound at the function's largest magnitude, 1
    xdna_like = evaluate(p.legalized, {"x": x})["y"].astype(np.float64)
    assert np.max(np.abs(xdna_like - want)) <= rw.rule.approximation + 1e-6
    assert bound.abs + bound.rel <= rw.rule.approximation


@given(seed=st.integers(0, 2**16))
@settings(max_examples=10, deadline=None)
def test_gelu_through_erf_stays_within_the_narrowing_contract(seed: int) -> None:
    x = _f16_values(seed, 512)
    b = Builder("gelu")
    b.output("y", ops.gelu(b, b.slot("x", F32, (x.size,))))
    program = b.build()
    p = plan(program, INTEL)
    assert p.admitted and [rw.primitive for rw in p.rewrites] == ["erf"]
    got = evaluate(p.program, {"x": x})["y"].astype(np.float64)
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    assert INTEL.narrowing is not None
    assert np.linalg.norm(got - want) <= INTEL.narrowing.normwise * np.linalg.norm(want)


IDENTITIES: dict[str, Callable[[int], Program]] = {
    "recip": lambda n: unary("recip", n),
    "abs": lambda n: unary("abs", n),
    "min": lambda n: binary("min", n),
    "eq": lambda n: binary("eq", n),
    "gt": lambda n: binary("gt", n),
}


def _pairs() -> dict[str, np.ndarray]:
    """Every pair of edge values, and each value against its FP16 neighbours."""
    e16 = EDGES.astype(np.float16)
    with np.errstate(over="ignore"):  # past 65504 is infinite: filtered out below
        up = np.nextafter(e16, np.float16(np.inf))
        down = np.nextafter(e16, np.float16(-np.inf))
    xs, zs = np.meshgrid(EDGES, EDGES)
    x = np.concatenate([xs.ravel(), EDGES, EDGES, EDGES])
    z = np.concatenate([zs.ravel(), EDGES, up.astype(np.float32), down.astype(np.float32)])
    finite = np.isfinite(x) & np.isfinite(z)
    return {"x": x[finite], "z": z[finite]}


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_identities_are_bit_exact_on_fp16(name: str) -> None:
    pairs = _pairs()
    program = IDENTITIES[name](pairs["x"].size)
    inputs = {a.name: pairs[a.name] for a in program.args}
    if name == "recip":  # 1/x of 0 is infinite: outside the division's finite domain
        inputs["x"] = np.where(inputs["x"] == 0, np.float32(1.0), inputs["x"])
    p = plan(program, INTEL)
    assert p.admitted and len(p.rewrites) == 1
    got = evaluate(p.program, inputs)["y"]
    want = _narrowed_original(program, inputs)["y"]
    # bit for bit, but for the sign of a zero (the NPU does not promise it)
    assert np.array_equal(got, want), (got[got != want][:4], want[got != want][:4])


@pytest.mark.parametrize("name", ["abs", "min"])
def test_xdna2_identities_are_bit_exact_in_f32(name: str) -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([EDGES, [3.4e38, -3.4e38, 1e-38, -1e-45], rng.normal(0, 1e3, 64)])
    x = x.astype(np.float32)
    program = IDENTITIES[name](x.size)
    inputs = {"x": x, "z": x[::-1].copy()}
    inputs = {a.name: inputs[a.name] for a in program.args}
    p = plan(program, XDNA2)
    assert p.admitted and p.rewrites[0].derivation.bound == BitExact(signed_zero=False)
    got, want = evaluate(p.program, inputs)["y"], evaluate(program, inputs)["y"]
    assert np.array_equal(got, want)


def _select_program(n: int, cmp: str, other: float | None) -> Program:
    b = Builder("select")
    x, z = b.slot("x", F32, (n,)), b.slot("z", F32, (n,))
    pred = getattr(b, cmp)(x, z)
    b.output("y", b.select(pred, x, z if other is None else other))
    b.output("m", b.convert(getattr(b, cmp)(z, x), F32))
    return b.build()


@pytest.mark.parametrize("cmp", ["ge", "gt", "eq"])
@pytest.mark.parametrize("other", [None, -1000.0, -1e30, float("-inf")])
def test_select_and_mask_values_of_comparisons(cmp: str, other: float | None) -> None:
    pairs = _pairs()
    program = _select_program(pairs["x"].size, cmp, other)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    got = evaluate(p.program, pairs)
    want = _narrowed_original(program, pairs)
    fires = getattr(np, {"ge": "greater_equal", "gt": "greater", "eq": "equal"}[cmp])
    expect_m = fires(pairs["z"], pairs["x"]).astype(np.float32)
    assert np.array_equal(got["m"], expect_m)
    if other is None or abs(other) <= 65504:
        assert np.array_equal(got["y"], want["y"])
    else:  # a literal FP16 cannot hold: the saturated sentinel where the select takes it
        taken = fires(pairs["x"], pairs["z"])
        assert np.array_equal(got["y"][taken], pairs["x"][taken])
        assert np.all(got["y"][~taken] == -65504.0)


def test_select_on_an_argument_mask_stays_refused() -> None:
    b = Builder("s")
    m, x = b.slot("m", DType.BOOL, (4,)), b.slot("x", F32, (4,))
    b.output("y", b.select(m, x, 0.0))
    p = plan(b.build(), INTEL)
    assert [(r.kind, r.primitive) for r in p.refusals] == [
        (RefusalKind.UNSUPPORTED_PRIMITIVE, "select")
    ]
    assert p.rewrites == ()


def test_no_rewrite_without_a_derivable_bound() -> None:
    # a select on an argument's mask has no rule (its 0/1 value is not known); a mask scale
    # read by a product is no additive mask: both stay refused
    b = Builder("r")
    x = b.slot("x", F32, (4,))
    m = b.slot("m", DType.BOOL, (4,))
    y = b.mul(b.sub(1.0, x), -3.4e38)
    b.output("y", b.mul(y, x))
    b.output("l", b.select(m, x, 0.0))
    p = plan(b.build(), INTEL)
    assert p.rewrites == ()
    assert {r.kind for r in p.refusals} == {
        RefusalKind.NARROWING_RANGE,
        RefusalKind.UNSUPPORTED_PRIMITIVE,
    }


def test_legalizing_twice_changes_nothing_and_refusals_name_source_equations() -> None:
    b = Builder("mixed")
    x = b.slot("x", F32, (8,))
    m = b.slot("m", DType.BOOL, (8,))
    # tanh legalized (22 equations), then a select on an argument's mask refused
    b.output("y", b.select(m, b.tanh(x), 0.0))
    p = plan(b.build(), INTEL)
    assert [(r.eqn, r.primitive) for r in p.refusals] == [(1, "select")]
    again = plan(p.legalized, INTEL)
    assert again.rewrites == () and again.legalized == p.legalized


@pytest.mark.parametrize("prim", [Prim.REDUCE_WINDOW_MAX, Prim.REDUCE_WINDOW_SUM])
def test_a_channels_last_window_is_transposed_to_channels_first_exactly(prim: Prim) -> None:
    # Flax's NHWC pools: a padded, strided 3x3 window over H and W of [N, H, W, C]
    b = Builder("pool")
    x = b.slot("x", F32, (2, 7, 6, 3))
    window = b.reduce_window_max if prim is Prim.REDUCE_WINDOW_MAX else b.reduce_window_sum
    b.output("y", window(x, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (0, 1), (0, 0))))
    program = b.build()
    assert not plan(program, INTEL, legalization=False).admitted  # MaxPool windows NCHW only
    p = plan(program, INTEL)
    assert p.admitted and [rw.rule.name for rw in p.rewrites] == [
        "a channels-last window, transposed to channels-first"
    ]
    rng = np.random.default_rng(5)
    v = rng.choice(EDGES, size=(2, 7, 6, 3)).astype(np.float32)
    v[0, 0, 0] = [np.inf, -np.inf, np.nan]  # the edges of F32 too, where the window reaches
    got = evaluate(p.legalized, {"x": v})["y"]
    want = evaluate(program, {"x": v})["y"]
    assert got.shape == want.shape == (2, 4, 3, 3)
    np.testing.assert_array_equal(got, want)  # the same window: bit for bit, NaN where NaN


def test_every_rule_is_a_row_of_the_tables_and_none_is_duplicated() -> None:
    assert {r.target for r in RULES} <= set(TARGETS)
    keys = [(r.target, r.prim, r.name) for r in RULES]
    assert len(keys) == len(set(keys))
    for r in RULES:
        # a range rule rewrites an admitted primitive by design, and so does one for a form
        # of its parameters the target refuses (a channels-last window)
        assert (
            r.admitted_too
            or not TARGETS[r.target].admits_prim(r.prim)
            or r.prim
            in (
                Prim.MUL,
                Prim.CONVERT,
                Prim.GE,
                Prim.REDUCE_WINDOW_SUM,
                Prim.REDUCE_WINDOW_MAX,
            )
        )


@given(seed=st.integers(0, 2**16))
@settings(max_examples=10, deadline=None)
def test_running_bound_carries_the_rewrite(seed: int) -> None:
    """The running analysis of a legalized plan: finite where the operands are in range, and
    the rule's derived abs + rel bound at the function's value (the odd series' relative bound
    near zero, not an absolute figure) plus the reference's own rounding (half an FP16 ulp and
    F32's 2^-23 relative), no more and no less."""
    x = _f16_values(seed, 64)
    x = x[np.abs(x) < 60000]
    p = plan(unary("erf", x.size), INTEL)
    (rw,) = p.rewrites
    bound = rw.derivation.bound
    assert isinstance(bound, AbsRel)
    run = result_bounds(p, {"x": x})["y"]
    assert np.all(np.isfinite(run))
    exact = np.abs([math.erf(float(v)) for v in x])
    own = bound.abs + bound.rel * exact
    half_ulp = 0.5 * np.spacing(exact.astype(np.float16)).astype(np.float64)
    assert np.all(run >= own) and np.all(run <= own + half_ulp + 2.0**-22 * exact)
    # relative near zero: erf(1e-4) is promised within about 0.4 % of itself
    small = np.abs(x) < 1e-3
    assert np.all(run[small] <= 2 * bound.rel * exact[small] + bound.abs + 2.0**-24)


def test_partition_after_legalization_merges_and_reports() -> None:
    b = Builder("chain")
    x = b.slot("x", F32, (8,))
    m = b.slot("m", DType.BOOL, (8,))
    y = b.tanh(b.exp(b.select(m, b.erf(b.mul(x, 0.5)), 0.0)))
    b.output("y", y)
    program = b.build()
    before = summarize(partition(program, INTEL, legalization=False), INTEL)
    spans = partition(program, INTEL)
    after = summarize(spans, INTEL)
    # before: mul | erf | select | exp | tanh  ->  device, oracle (erf, select), device, oracle
    assert (before.device_spans, before.oracle_spans) == (2, 2)
    # after: mul, erf (legalized) | select on an argument's mask | exp, tanh (legalized)
    assert [(s.device, s.eqns) for s in spans] == [(True, (0, 1)), (False, (2,)), (True, (3, 4))]
    assert (after.graphs, after.compiles, after.round_trips) == (2, 2, 2)
    assert "3 spans (2 device, 1 oracle)" in after.describe()


def test_adjacent_device_pieces_merge_when_their_union_is_admitted() -> None:
    from poot_planner.partition import _merge_devices, _sub_program, value_names

    def merge(program: Program, pieces: list[tuple[bool, tuple[int, ...]]]) -> object:
        names = value_names(program)
        return _merge_devices(pieces, lambda run: plan(_sub_program(program, run, names), INTEL))

    b = Builder("two")
    x = b.slot("x", F32, (8,))
    b.output("y", b.add(b.exp(x), 1.0))
    program = b.build()
    assert merge(program, [(True, (0,)), (True, (1,))]) == [(True, (0, 1))]
    # a union the target refuses stays apart (a select on an argument's mask, refused on intel)
    b = Builder("three")
    x = b.slot("x", F32, (8,))
    m = b.slot("m", DType.BOOL, (8,))
    b.output("y", b.select(m, b.exp(x), 0.0))
    program = b.build()
    assert merge(program, [(True, (0,)), (True, (1,))]) == [
        (True, (0,)),
        (True, (1,)),
    ]


def test_a_rule_whose_bound_cannot_be_derived_is_not_applied() -> None:
    """On a copy of intel-npu4 whose exp is promised only on [-1, 1], erf's exp(-x^2) (x up
    to 4) leaves its contract's domain: no bound, so erf stays refused with its typed reason,
    while tanh, whose exp(-2|x|) the copy does not cover either, stays refused too."""
    caps = tuple(
        dataclasses.replace(c, contract=Contract(c.prim, c.contract.bound, Interval(-1.0, 1.0)))
        if c.prim is Prim.EXP
        else c
        for c in INTEL.capabilities
    )
    narrow_exp = dataclasses.replace(INTEL, capabilities=caps)
    for prim in ("erf", "tanh"):
        p = plan(unary(prim, 4), narrow_exp)
        assert p.rewrites == ()
        assert [(r.kind, r.primitive) for r in p.refusals] == [
            (RefusalKind.UNSUPPORTED_PRIMITIVE, prim)
        ]
    assert plan(unary("recip", 4), narrow_exp).rewrites != ()  # no exp in it


def _counters(n: int) -> Program:
    """A causal mask and a position ramp from counters (the acceptance probe's program)."""
    return counters(n)


@pytest.mark.parametrize("n", [1, 5, 2049])
def test_integer_compares_and_converts_of_counters(n: int) -> None:
    program = _counters(n)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    assert {rw.primitive for rw in p.rewrites} >= {"ge", "gt", "eq", "convert"}
    rng = np.random.default_rng(n)
    x = rng.normal(0, 2, (n, n)).astype(np.float16).astype(np.float32)
    got = evaluate(p.program, {"x": x})
    want = _narrowed_original(program, {"x": x}) if n <= 5 else evaluate(program, {"x": x})
    for name in ("ge", "gt", "eq"):
        assert np.array_equal(got[name], evaluate(program, {"x": x})[name]), name
    if n <= 5:
        assert np.array_equal(got["pos"], want["pos"])


def test_counters_past_fp16s_exact_integers_stay_refused() -> None:
    p = plan(_counters(2050), INTEL)
    assert {(r.primitive, r.kind) for r in p.refusals} >= {
        ("convert", RefusalKind.INTEGER_TO_FLOAT)
    }


def test_a_rules_bound_does_not_depend_on_what_was_planned_before() -> None:
    """A rule's chain differs with its operand (an F16 value against an F32 one narrowed on
    entry): the memo of derivations keys what the bound is derived on, so planning one program
    first cannot hand its bound to the other (it did: the erf of an F32 slot was published with
    the F16 chain's 0.0199 after a conformance test planned that first). erf is now piecewise:
    its pieces are derived in F32 whatever the operand (each coefficient's rounding to FP16
    counted against its exact value), so both operands get that one bound."""
    from poot_planner.legalize import bounds

    def erf_bound(dtype: DType) -> str:
        b = Builder(f"erf_{dtype.value}")
        b.output("y", b.erf(b.slot("x", dtype, (4, 8))))
        p = plan(b.build(), "intel-npu4")
        (rewrite,) = p.rewrites
        return rewrite.derivation.describe()

    bounds._MEMO.clear()
    f32_first = erf_bound(DType.F32)
    f16_after = erf_bound(DType.F16)
    bounds._MEMO.clear()
    f16_first = erf_bound(DType.F16)
    f32_after = erf_bound(DType.F32)
    assert (f32_first, f16_first) == (f32_after, f16_after)
    assert f32_first == f16_first
