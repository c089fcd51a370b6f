"""Intel NPU4 narrowing: ``narrow_to_device_precision`` is the first pass for an F32 program
doing arithmetic (a cast to F16 on entry, F16 inside, a cast back on exit), it is an ordinary
program the oracle evaluates, and the literal rules refuse, saturate or keep each literal."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
from poot_ir import (
    Builder,
    DType,
    Exact,
    Literal,
    NarrowStorage,
    Normwise,
    Prim,
    Program,
    Var,
    compare,
    evaluate,
)
from poot_planner import TARGETS, Plan, RefusalKind, narrow_to_device_precision, plan
from poot_planner.fp16.narrowing import F16_SPLATS_CLAMPED

F32, F16, I32 = DType.F32, DType.F16, DType.I32
INTEL = TARGETS["intel-npu4"]
assert INTEL.narrowing is not None
CONTRACT = INTEL.narrowing
f16 = np.float16

Body = Callable[[Builder, Var], Var]


def intel(source: Program) -> Plan:
    return plan(source, INTEL)


def unary_program(body: Body, shape: tuple[int, ...] = (4, 8)) -> Program:
    b = Builder("p")
    b.output("y", body(b, b.slot("x", F32, shape)))
    return b.build()


def formula_program() -> Program:
    """``y = max(x * w + 0.5, 0.25) / 2 - x`` and ``s' = s + y`` (a carried state)."""
    b = Builder("formula")
    x = b.slot("x", F32, (4, 8))
    w = b.weight("w", F32, (4, 8))
    s = b.state("s", F32, (4, 8))
    y = b.sub(b.div(b.max(b.add(b.mul(x, w), 0.5), 0.25), 2.0), x)
    b.output("y", y)
    b.update(s, b.add(s, y))
    return b.build()


def formula_f16(x: np.ndarray, w: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same formula in numpy float16, each step rounded to float16."""
    x16, w16, s16 = x.astype(f16), w.astype(f16), s.astype(f16)
    y = np.maximum(x16 * w16 + f16(0.5), f16(0.25)) / f16(2.0) - x16
    return y.astype(np.float32), (s16 + y).astype(np.float32)


def literals(p: Program) -> list[Literal]:
    return [a for e in p.eqns for a in e.inputs if isinstance(a, Literal)]


# -- the pass --------------------------------------------------------------------------------


def test_narrowing_is_the_first_pass_and_publishes_narrow_storage() -> None:
    source = formula_program()
    p = intel(source)
    assert p.admitted and p.narrowing == CONTRACT
    assert p.program == narrow_to_device_precision(source, CONTRACT)
    assert p.numerics == NarrowStorage(CONTRACT.normwise, 2.0**-24)
    assert p.program != source


def test_casts_only_on_entry_and_exit() -> None:
    source = formula_program()
    narrowed = intel(source).program
    # the arguments and results keep their names, order, storage and types
    assert [(a.name, a.var, a.storage) for a in narrowed.args] == [
        (a.name, a.var, a.storage) for a in source.args
    ]
    assert [(n, v.type) for n, v in narrowed.results()] == [
        (n, v.type) for n, v in source.results()
    ]
    eqns = narrowed.eqns
    n_in, n_out = len(source.args), len(source.results())
    entry, body, exit_ = eqns[:n_in], eqns[n_in:-n_out], eqns[-n_out:]
    for e, a in zip(entry, source.args, strict=True):
        assert e.prim is Prim.CONVERT and e.inputs == (a.var,) and e.out.dtype is F16
    for e, (_, v) in zip(exit_, narrowed.results(), strict=True):
        assert e.prim is Prim.CONVERT and e.out == v and e.out.dtype is F32
        assert e.inputs[0].dtype is F16
    assert [e.prim for e in body] == [e.prim for e in source.eqns]
    assert all(e.prim is not Prim.CONVERT for e in body)
    assert all(e.out.dtype is F16 for e in body)
    assert all(a.dtype is F16 for e in body for a in e.inputs)
    assert [lit.as_float() for lit in literals(narrowed)] == [0.5, 0.25, 2.0]


def test_the_narrowed_program_runs_on_the_oracle_as_float16() -> None:
    source = formula_program()
    narrowed = intel(source).program
    rng = np.random.default_rng(11)
    for _ in range(4):
        x = rng.uniform(-100, 100, (4, 8)).astype(np.float32)
        w = rng.uniform(-3, 3, (4, 8)).astype(np.float32)
        s = rng.uniform(-50, 50, (4, 8)).astype(np.float32)
        got = evaluate(narrowed, {"x": x, "w": w, "s": s})
        y, s_next = formula_f16(x, w, s)
        np.testing.assert_array_equal(got["y"], y)
        np.testing.assert_array_equal(got["s"], s_next)
        assert got["y"].dtype == np.float32
        # and within the published class of the F32 oracle's result
        wide = evaluate(source, {"x": x, "w": w, "s": s})
        for name in ("y", "s"):
            assert compare(got[name], wide[name], Normwise(CONTRACT.normwise)).ok


def test_integer_and_bool_values_are_not_cast() -> None:
    b = Builder("mixed")
    x = b.slot("x", F32, (6, 4))
    i = b.slot("i", I32, (3,))
    g = b.gather(b.mul(x, 2.0), i)
    b.output("g", g)
    b.output("m", b.ge(g, 1.0))
    source = b.build()
    narrowed = intel(source).program
    converts = [e for e in narrowed.eqns if e.prim is Prim.CONVERT]
    assert [(e.inputs[0].dtype, e.out.dtype) for e in converts] == [(F32, F16), (F16, F32)]
    x_in = np.arange(24, dtype=np.float32).reshape(6, 4) / 4
    got = evaluate(narrowed, {"x": x_in, "i": np.array([5, 0, 2], np.int32)})
    want = (x_in.astype(f16) * f16(2))[[5, 0, 2]]
    np.testing.assert_array_equal(got["g"], want.astype(np.float32))
    np.testing.assert_array_equal(got["m"], want >= f16(1))


def test_a_convert_the_boundary_already_made_disappears() -> None:
    b = Builder("to16")
    b.output("y", b.convert(b.add(b.slot("x", F32, (4,)), 1.0), F16))
    narrowed = intel(b.build()).program
    assert [e.prim for e in narrowed.eqns] == [Prim.CONVERT, Prim.ADD]
    assert narrowed.outputs[0].var.dtype is F16


def test_f32_data_movement_is_narrowed_as_the_npu_compiler_does() -> None:
    """The NPU compiler carries every F32 tensor as FP16 (ConvertPrecisionToFP16), data
    movement included: an F32 program with no arithmetic is narrowed and published as
    NarrowStorage, and its values come back FP16-rounded."""
    b = Builder("moves")
    x = b.slot("x", F32, (4, 8))
    t = b.transpose(x, (1, 0))
    b.output("y", b.concat([b.slice(t, (0, 0), (2, 4)), b.reshape(x, (8, 4))], 0))
    source = b.build()
    p = intel(source)
    assert p.admitted and p.narrowing == CONTRACT
    assert isinstance(p.numerics, NarrowStorage)
    assert p.program.eqns[0].prim is Prim.CONVERT
    assert {e.out.dtype for e in p.program.eqns[1:-1]} == {F16}
    vals = np.array([0.0, -0.0, 1.0001, 65504.0, -3.14159] * 7, np.float32)[:32].reshape(4, 8)
    got = evaluate(p.program, {"x": vals})["y"]
    rounded = vals.astype(np.float16).astype(np.float32)  # numpy's FP16 rounding, independent
    want = np.concatenate([rounded.T[:2], rounded.reshape(8, 4)], 0)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("dtype", [DType.I32, DType.BF16, DType.BOOL], ids=lambda d: d.value)
def test_data_movement_in_widths_the_npu_keeps_is_not_narrowed(dtype: DType) -> None:
    b = Builder("moves")
    b.output("y", b.transpose(b.slot("x", dtype, (4, 8)), (1, 0)))
    p = intel(b.build())
    assert p.admitted and p.narrowing is None and p.program == p.source
    assert isinstance(p.numerics, Exact)


def test_an_f16_program_is_not_narrowed() -> None:
    b = Builder("f16")
    b.output("y", b.add(b.slot("x", F16, (4,)), 1.0))
    p = intel(b.build())
    assert p.admitted and p.narrowing is None and p.program == p.source
    assert not isinstance(p.numerics, NarrowStorage)


def test_a_refused_program_is_not_narrowed() -> None:
    p = intel(unary_program(lambda b, x: b.convert(b.add(x, 1.0), DType.I32)))
    assert not p.admitted and p.program == p.source


# -- literal rules ---------------------------------------------------------------------------


def f16_bits(v: float) -> int:
    return int(np.array(v, f16).view(np.uint16))


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (lambda b, x: b.add(x, -1e9), -65504.0),
        (lambda b, x: b.add(x, 1e30), 65504.0),
        (lambda b, x: b.sub(x, 1e9), 65504.0),
        (lambda b, x: b.sub(x, -3e38), -65504.0),
        (lambda b, x: b.add(x, 65520.0), 65504.0),  # F16 would round this one to infinity
        (lambda b, x: b.add(-70000.0, x), -65504.0),
    ],
)
def test_an_additive_literal_beyond_the_range_saturates(body: Body, value: float) -> None:
    # the sentinel's value may not be a result (fp16.checks): it masks, through max
    probe = unary_program(body).eqns[0]
    flips = probe.prim is Prim.SUB and isinstance(probe.inputs[1], Literal)
    negative = (value < 0) != flips  # the side of the sum: x - 1e9 is far below the range

    def masked(b: Builder, x: Var) -> Var:
        s = body(b, x)
        return b.max(s if negative else b.neg(s), x)

    source = unary_program(masked)
    p = intel(source)
    assert p.admitted
    (lit,) = literals(p.program)
    assert lit.dtype is F16
    assert lit.bits == f16_bits(value) and lit.as_float() == value
    assert math.copysign(1.0, lit.as_float()) == math.copysign(1.0, value)
    x = np.linspace(-8, 8, 32, dtype=np.float32).reshape(4, 8)
    got = evaluate(p.program, {"x": x})["y"]
    prim = source.eqns[0].prim
    xs, lit16 = x.astype(f16), f16(value)
    if isinstance(source.eqns[0].inputs[0], Literal):  # the literal is the left operand
        want = lit16 + xs if prim is Prim.ADD else lit16 - xs
    else:
        want = xs + lit16 if prim is Prim.ADD else xs - lit16
    want = np.maximum(want if negative else -want, xs)
    np.testing.assert_array_equal(got, np.asarray(want).astype(np.float32))
    assert np.isfinite(got).all()


def test_the_largest_magnitude_itself_is_carried() -> None:
    for body in (
        lambda b, x: b.add(x, 65504.0),
        lambda b, x: b.mul(x, 65504.0),
        lambda b, x: b.mul(x, -65504.0),
    ):
        p = intel(unary_program(body))
        assert p.admitted
        (lit,) = literals(p.program)
        assert abs(lit.as_float()) == 65504.0


@pytest.mark.parametrize(
    ("body", "prim", "text"),
    [
        (lambda b, x: b.mul(x, 65505.0), "mul", "65505.0"),
        (lambda b, x: b.mul(x, -1e6), "mul", "-1000000.0"),
        (lambda b, x: b.div(x, 1e5), "div", "100000.0"),
        (lambda b, x: b.max(x, -7e4), "max", "-70000.0"),
        (lambda b, x: b.ge(x, 1e10), "ge", "10000000000.0"),
    ],
)
def test_a_literal_beyond_the_range_elsewhere_is_refused(body: Body, prim: str, text: str) -> None:
    p = intel(unary_program(body))
    (r,) = p.refusals
    assert r.kind is RefusalKind.NARROWING_RANGE
    assert (r.eqn, r.primitive) == (0, prim)
    assert r.facts == (("literal", text), ("limit", 65504.0), ("use", "multiplicative or other"))
    assert p.program == p.source


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_an_infinite_additive_literal_is_a_saturated_sentinel(value: float) -> None:
    """The NPU compiler clamps an infinite splat constant to +-65504 (clampF16Splat), so an
    infinite additive literal is carried exactly like a finite sentinel: saturated, and under
    the sentinel rule (here it masks through max, on its - side)."""
    side = -1.0 if value < 0 else 1.0

    def body(b: Builder, x: Var) -> Var:
        s = b.add(x, value)
        return b.max(s if value < 0 else b.neg(s), x)

    p = intel(unary_program(body))
    assert p.admitted
    (lit,) = literals(p.program)
    assert lit.dtype is F16 and lit.as_float() == side * 65504.0
    assert _guards(p.source) == [(0, "add", "sentinel", int(side))]


@pytest.mark.parametrize("value", [math.inf, -math.inf])
@pytest.mark.parametrize("prim", ["mul", "max", "div"])
def test_an_infinite_literal_elsewhere_is_refused(value: float, prim: str) -> None:
    p = intel(unary_program(lambda b, x: getattr(b, prim)(x, value)))
    (r,) = p.refusals
    assert (r.kind, r.eqn, r.primitive) == (RefusalKind.NARROWING_RANGE, 0, prim)
    assert "65504" in str(r.fact("use"))


@pytest.mark.parametrize("prim", ["add", "max", "mul"])
def test_an_infinite_f16_literal_is_carried_as_the_pinned_compiler_does(prim: str) -> None:
    """The pinned npu_compiler clamps only splats of 32 bits or more (``F16_SPLATS_CLAMPED``),
    so an infinite F16 literal reaches the NPU as the infinity it is: admitted, not refused
    (before: refused, on the 2025 pass that clamped F16 splats too)."""
    assert not F16_SPLATS_CLAMPED
    b = Builder("f16")
    b.output("y", getattr(b, prim)(b.slot("x", F16, (4,)), -math.inf))
    p = intel(b.build())
    assert p.admitted, [str(r) for r in p.refusals]
    (lit,) = literals(p.program)
    assert lit.dtype is F16 and lit.as_float() == -math.inf
    b = Builder("f16")
    b.output("y", getattr(b, prim)(b.slot("x", F16, (4,)), -65504.0))
    assert intel(b.build()).admitted


@pytest.mark.parametrize("prim", ["add", "sub", "mul", "max"])
def test_a_nan_literal_is_refused(prim: str) -> None:
    p = intel(unary_program(lambda b, x: getattr(b, prim)(x, math.nan)))
    (r,) = p.refusals
    assert r.kind is RefusalKind.NARROWING_RANGE
    assert (r.primitive, r.facts) == (prim, (("literal", "nan"), ("limit", 65504.0)))


def test_every_bad_literal_is_reported() -> None:
    def body(b: Builder, x: Var) -> Var:
        return b.mul(b.add(b.max(x, math.nan), -1e9), 1e9)

    p = intel(unary_program(body))
    assert [(r.eqn, r.fact("literal")) for r in p.refusals] == [
        (0, "nan"),
        (2, "1000000000.0"),
        (2, None),  # and the sentinel's value into a mul (fp16.checks)
    ]


def test_literal_rules_need_a_narrowing_program() -> None:
    """Without F32 arithmetic nothing is narrowed, so no literal rule applies; without a
    contract an F32 literal's equation is refused for the contract, not the literal."""
    no_contract = dataclasses.replace(INTEL, narrowing=None)
    (r,) = plan(unary_program(lambda b, x: b.mul(x, 1e9)), no_contract).refusals
    assert r.kind is RefusalKind.MISSING_CONTRACT


def test_integer_to_float_is_refused_in_a_narrowed_program() -> None:
    b = Builder("itof")
    x = b.slot("x", F32, (4,))
    n = b.convert(b.slot("n", I32, (4,)), F32)
    b.output("y", b.add(x, n))
    (r,) = intel(b.build()).refusals
    assert r.kind is RefusalKind.INTEGER_TO_FLOAT
    assert r.facts == (("from", "i32"), ("to", "f32"), ("exact_up_to", 2048))


def _anchors(n: int) -> Program:
    """A detector's anchor grid as the importer writes ONNX's Range: ``(k + 0.5) * 8``."""
    b = Builder("anchors")
    x = b.slot("x", F32, (n,))
    k = b.iota((n,), F32, 0)
    b.output("k", k)
    b.output("y", b.add(b.mul(b.add(k, 0.5), 8.0), x))
    return b.build()


@pytest.mark.parametrize("n", [1, 40, 2049])
def test_an_f32_counter_that_fp16_holds_becomes_an_fp16_counter(n: int) -> None:
    p = intel(_anchors(n))
    assert p.admitted, p.refusals
    (iota,) = [e for e in p.program.eqns if e.prim is Prim.IOTA]
    assert iota.out.dtype is F16
    # every count FP16 holds (the last is 2048): the narrowed program's counter is the source's
    x = {"x": np.zeros(n, np.float32)}
    want = np.arange(n, dtype=np.float64)
    np.testing.assert_array_equal(evaluate(p.program, x)["k"], want)
    np.testing.assert_array_equal(evaluate(p.source, x)["k"], want)


def test_an_f32_counter_past_2048_is_refused_naming_its_last_count() -> None:
    (r,) = intel(_anchors(2050)).refusals
    assert (r.kind, r.eqn, r.primitive) == (RefusalKind.NARROWING_RANGE, 0, "iota")
    assert r.facts == (("counts_to", 2049), ("exact_up_to", 2048))


# -- in-graph guards and the sentinel rule (fp16.checks) -------------------------------------


def _guards(source: Program) -> list[tuple[int, str, str, int]]:
    from poot_planner.fp16.narrowing import intermediate_guards

    return [
        (g.eqn, g.primitive, g.kind.value, g.side) for _, g in intermediate_guards(source, CONTRACT)
    ]


def test_an_intermediate_that_feeds_another_equation_is_guarded() -> None:
    # x / (x * x): the square is guarded; the quotient is a result (checked on the host)
    p = intel(unary_program(lambda b, x: b.div(x, b.mul(x, x))))
    assert p.admitted
    assert _guards(p.source) == [(0, "mul", "overflow", 0)]
    # an F16 program's arithmetic is the oracle's own FP16: nothing to guard, nothing narrowed
    b = Builder("f16")
    x16 = b.slot("x", F16, (4,))
    b.output("y", b.div(x16, b.mul(x16, x16)))
    assert intel(b.build()).narrowing is None


def _two_slots(body: Callable[[Builder, Var, Var], Var]) -> Program:
    b = Builder("p")
    x, z = b.slot("x", F32, (4,)), b.slot("z", F32, (4,))
    b.output("y", body(b, x, z))
    return b.build()


def test_a_difference_read_only_through_a_clamp_is_not_guarded() -> None:
    # (x - z) clamped to [0, 2^-12] then amplified: how a legalized comparison reads it. The
    # difference may overflow to inf in FP16 (60000 - -60000); the clamp gives 2^-12 for inf
    # exactly as for the exact 120000, so guarding it would refuse a right result
    def clamped(b: Builder, x: Var, z: Var) -> Var:
        return b.mul(b.min(b.max(b.sub(x, z), 0.0), 2.0**-12), 4096.0)

    assert _guards(_two_slots(clamped)) == []

    # through min's legalized form -max(-a, -b) too (neg swaps the sides bounded)
    def negated(b: Builder, x: Var, z: Var) -> Var:
        m = b.max(b.sub(x, z), 0.0)
        return b.mul(b.neg(b.max(b.neg(m), -(2.0**-12))), 4096.0)

    assert _guards(_two_slots(negated)) == []

    # x == z legalized: -max(x - z, z - x) >= 0, both differences only ordered, then compared
    def equal(b: Builder, x: Var, z: Var) -> Var:
        return b.convert(b.ge(b.neg(b.max(b.sub(x, z), b.sub(z, x))), 0.0), F32)

    assert _guards(_two_slots(equal)) == []


@pytest.mark.parametrize(
    "body",
    [
        lambda b, x, z: b.mul(b.max(b.sub(x, z), 0.0), 4096.0),  # one side only: inf stays inf
        lambda b, x, z: b.mul(b.min(b.max(b.sub(x, z), 0.0), 1e30), 2.0),  # past FP16's range
        lambda b, x, z: (lambda d: b.add(b.min(b.max(d, 0.0), 1.0), d))(b.sub(x, z)),  # raw
        lambda b, x, z: b.convert(b.ge(b.sub(x, z), x), F32),  # compared with a value
    ],
)
def test_a_difference_read_any_other_way_is_guarded(body: Callable[..., Var]) -> None:
    assert (0, "sub", "overflow", 0) in _guards(_two_slots(body))


def test_a_dead_equation_is_not_guarded() -> None:
    # the product feeds only a value no result depends on: its overflow changes no result
    def body(b: Builder, x: Var, z: Var) -> Var:
        b.exp(b.mul(x, z))
        return b.add(x, z)

    assert _guards(_two_slots(body)) == []


def test_a_dominated_sentinel_may_mask() -> None:
    """exp(-(x + 1e5)) and max(x - 1e9, x): admitted, each sentinel add checked for dominance
    on its side."""
    p = intel(unary_program(lambda b, x: b.exp(b.neg(b.add(x, 1e5)))))
    assert p.admitted and _guards(p.source) == [(0, "add", "sentinel", 1)]
    p = intel(unary_program(lambda b, x: b.max(b.sub(x, 1e9), x)))
    assert p.admitted and _guards(p.source) == [(0, "sub", "sentinel", -1)]


@pytest.mark.parametrize(
    ("body", "eqn", "use"),
    [
        (lambda b, x: b.mul(b.add(x, 1e5), 2.0), 1, "a dominated value into mul"),
        (lambda b, x: b.ge(b.add(x, -1e5), x), 1, "a dominated value into ge"),
        (lambda b, x: b.exp(b.add(x, 1e5)), 1, "a dominated value into exp"),
        (
            lambda b, x: b.sub(b.add(x, 1e5), b.add(x, 1e5)),
            2,
            "an add of values dominated on opposite sides",
        ),
    ],
)
def test_a_dominated_sentinel_elsewhere_is_refused(body: Body, eqn: int, use: str) -> None:
    p = intel(unary_program(body))
    (r,) = p.refusals
    assert (r.kind, r.eqn, r.fact("use")) == (RefusalKind.NARROWING_RANGE, eqn, use)


def test_a_sentinel_value_as_a_result_is_refused() -> None:
    """x + 100000 at x = -40000 would return 25504 (the F32 sum is 60000): as a result the
    sentinel's value is refused when planning, whatever x is."""
    p = intel(unary_program(lambda b, x: b.add(x, 100000.0)))
    (r,) = p.refusals
    assert (r.kind, r.fact("result")) == (RefusalKind.NARROWING_RANGE, "y")
    x = np.array([-40000.0], np.float32)
    assert float(x[0] + np.float32(1e5)) == 60000.0  # what F32 says
    assert float(np.float16(x[0]) + np.float16(65504.0)) == 25504.0  # what FP16 would return


def test_a_long_ordering_chain_is_analysed_without_recursion() -> None:
    # 3,000 negations between a difference and its clamp: longer than Python's recursion limit
    def body(b: Builder, x: Var, z: Var) -> Var:
        v = b.sub(x, z)
        for _ in range(3000):
            v = b.neg(v)
        return b.mul(b.min(b.max(v, 0.0), 2.0**-12), 4096.0)

    assert _guards(_two_slots(body)) == []
