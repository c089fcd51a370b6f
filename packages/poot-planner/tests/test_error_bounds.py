"""The running error analysis: sound against an adversarial device, and what lets a chain of
approximate steps be checked at all.

A simulated device runs each step on its own (perturbed) operands, rounds like the oracle, and
then adds a random share, up to the whole, of the error its contract allows; the derived bound
must cover the result it reaches.
"""

from __future__ import annotations

import numpy as np
import pytest
from poot_ir import Builder, ConvParams, DType, Program, ReduceWindowParams, Var, evaluate, ops
from poot_ir.numerics import Derived, compare
from poot_ir.window import conv64, windows_of
from poot_planner import plan
from poot_planner.error_bounds import result_bounds

F32 = DType.F32


def _chain(seed: int) -> Program:
    """Every approximate step reads a value that already carries error."""
    b = Builder(f"chain{seed}")
    x = b.slot("x", F32, (64,))
    y = b.slot("y", F32, (64,))
    v = b.tanh(x)
    v = b.exp(b.mul(v, 3.0))  # within [-87, 88]; carries tanh's error, amplified
    v = b.sub(v, y)  # cancels where exp(3 tanh x) ~ y
    v = b.mul(v, v)
    v = b.sqrt(b.add(v, 0.25))
    v = b.div(v, b.add(b.mul(x, x), 1.0))
    v = b.log(v)
    b.output("z", b.erf(v))
    return b.build()


def _simulate(
    program: Program, inputs: dict[str, np.ndarray], rng: np.random.Generator
) -> np.ndarray:
    """An adversarial device: each step on its own operands, plus up to its contract's error."""
    p = plan(program, "xdna2").check()
    val: dict[int, np.ndarray] = {a.var.id: inputs[a.name] for a in program.args}
    for i, e in enumerate(program.eqns):
        operands = [val[a.id] if isinstance(a, Var) else np.asarray(a.value) for a in e.inputs]
        one = Builder("step")
        args = [one.slot(f"a{k}", F32, o.shape) for k, o in enumerate(operands)]
        one.output("r", getattr(one, e.prim.value)(*args))
        exact = evaluate(
            one.build(), {f"a{k}": o.astype(np.float32) for k, o in enumerate(operands)}
        )["r"]
        contract = next(a.contract for a in p.admissions if a.eqn == i)
        assert contract is not None
        allowed = _allowed(contract.bound, operands, exact)
        noise = rng.choice([-1.0, 1.0], exact.shape) * allowed  # the whole allowance, either sign
        moved = (exact.astype(np.float64) + noise).astype(np.float32)
        over = np.abs(moved.astype(np.float64) - exact) > allowed  # rounding left the allowance
        val[e.out.id] = np.where(over, np.nextafter(moved, exact), moved)  # a legal device
    ((_, out),) = program.results()
    return val[out.id]


def _allowed(bound: object, operands: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    from poot_ir.numerics import AbsRel, BitExact, LargerOperandUlps, Relative

    y64 = np.abs(y.astype(np.float64))
    match bound:
        case BitExact():
            return np.zeros(y.shape)
        case AbsRel(abs=a, rel=r):
            return a + r * y64
        case Relative(rel=r):
            return r * y64
        case LargerOperandUlps(ulps=u, unit=unit):
            big = np.maximum(
                np.abs(operands[0].astype(np.float64)), np.abs(operands[-1].astype(np.float64))
            )
            return u * unit * np.broadcast_to(big, y.shape)
    raise AssertionError(f"no simulation for {bound}")


@pytest.mark.parametrize("seed", range(6))
def test_the_derived_bound_covers_an_adversarial_device(seed: int) -> None:
    rng = np.random.default_rng(seed)
    program = _chain(seed)
    inputs = {
        "x": rng.uniform(-4, 4, 64).astype(np.float32),
        "y": rng.uniform(0.05, 20, 64).astype(np.float32),
    }
    want = evaluate(program, inputs)["z"]
    bound = result_bounds(plan(program, "xdna2").check(), inputs)["z"]
    for _ in range(20):
        got = _simulate(program, inputs, rng)
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        finite = np.isfinite(bound)
        # first-order rules; the slack covers second-order terms the rules drop (below 1e-3
        # of the bound for errors this small) and the final f32 rounding of the simulation
        slack = 1e-3 * bound + np.spacing(np.abs(want)).astype(np.float64)
        assert np.all(err[finite] <= (bound + slack)[finite])


def test_a_single_step_gets_exactly_its_contract() -> None:
    b = Builder("one")
    x = b.slot("x", F32, (200,))
    b.output("y", b.exp(x))
    program = b.build()
    xs = np.linspace(-100, 100, 200, dtype=np.float32)  # beyond [-inf, 88] too
    bound = result_bounds(plan(program, "xdna2").check(), {"x": xs})["y"]
    with np.errstate(over="ignore"):
        ref = np.exp(xs.astype(np.float64)).astype(np.float32).astype(np.float64)
    inside = xs <= 88  # exp's xdna2 domain goes down to -inf (flushed below FLT_MIN)
    np.testing.assert_allclose(bound[inside], 2e-6 + 1e-5 * np.abs(ref[inside]), rtol=1e-12)
    assert np.all(np.isinf(bound[~inside])), "outside the domain nothing is promised"


def test_a_cancelling_add_after_an_approximate_step_is_bounded_by_the_operands() -> None:
    # acc + y with acc ~ -y: the result is tiny, the inherited error is not; a bound relative
    # to the result alone would reject a device that kept every promise
    b = Builder("acc")
    x = b.slot("x", F32, (8, 64))
    acc = b.state("acc", F32, (8, 64))
    y = ops.rmsnorm(b, x)
    b.output("y", y)
    b.update(acc, b.add(acc, y))
    program = b.build()
    p = plan(program, "xdna2").check()
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((8, 64)).astype(np.float32)
    yv = evaluate(program, {"x": xv, "acc": np.zeros((8, 64), np.float32)})["y"]
    accv = (-yv * (1 + 1e-6)).astype(np.float32)
    bounds = result_bounds(p, {"x": xv, "acc": accv})
    want = evaluate(program, {"x": xv, "acc": accv})["acc"]
    # the norm's own bound (about 8.3e-6 relative) carried into the cancelling sum
    rel_y = p.tiles[0].bound
    assert rel_y is not None
    assert np.all(bounds["acc"] >= 0.5 * rel_y * np.abs(yv))
    assert np.all(bounds["acc"] > 8.5e-6 * np.abs(want))  # far above a result-relative bound
    device = want + 0.9 * bounds["acc"]
    assert compare(device.astype(np.float32), want, Derived(), scale=bounds["acc"]).ok
    beyond = want.astype(np.float64) + 1.5 * bounds["acc"] + np.spacing(np.abs(want))
    assert not compare(beyond.astype(np.float32), want, Derived(), scale=bounds["acc"]).ok


def test_data_movement_moves_errors_with_values() -> None:
    # on intel-npu4 an F16 exp carries FP16 tolerance; transpose and gather move it exactly
    b = Builder("moves")
    x = b.slot("x", DType.F16, (4, 6))
    idx = b.slot("i", DType.I32, (3,))
    e = b.exp(x)
    b.output("e", e)
    b.output("t", b.transpose(e, (1, 0)))
    b.output("g", b.gather(e, idx, axis=0))
    program = b.build()
    inputs = {
        "x": (np.arange(24).reshape(4, 6) / 10).astype(np.float16),
        "i": np.array([3, 0, 2], np.int32),
    }
    bounds = result_bounds(plan(program, "intel-npu4").check(), inputs)
    assert np.all(bounds["e"] > 0)
    np.testing.assert_array_equal(bounds["t"], bounds["e"].T)
    np.testing.assert_array_equal(bounds["g"], bounds["e"][[3, 0, 2]])
    cpu = result_bounds(plan(program, "cpu").check(), inputs)
    assert all(np.all(v == 0) for v in cpu.values()), "the oracle, as a device, is exact"


_TAILS = {
    "exp": lambda b, v: b.exp(b.mul(v, 3.0)),
    "log": lambda b, v: b.log(b.add(v, 1.5)),
    "sqrt": lambda b, v: b.sqrt(b.add(v, 1.5)),
    "tanh": lambda b, v: b.tanh(b.mul(v, 2.0)),
    "erf": lambda b, v: b.erf(v),
    "mul": lambda b, v: b.mul(v, v),
    "div": lambda b, v: b.div(1.0, b.add(v, 1.5)),
    "recip": lambda b, v: b.recip(b.add(v, 1.5)),
    "sub": lambda b, v: b.sub(v, 0.5),
    "neg": lambda b, v: b.neg(v),
    "max": lambda b, v: b.max(v, 0.1),
    "reduce_sum": lambda b, v: b.reduce_sum(v, axes=-1),
}


@pytest.mark.parametrize("tail", sorted(_TAILS))
def test_each_propagation_rule_is_sound_and_tight(tail: str) -> None:
    """The error tanh leaves in its result, carried through ``tail``. Sound: the whole
    program's bound covers the worst a legal tanh error does to the result (the tail's own
    rounding at the moved values included, which its own contract covers). Tight: the carried
    share (the whole bound less the tail's own bound on the same values) is at most twice the
    worst effect plus that own bound, so a rule that over- or under-carries is caught."""
    rng = np.random.default_rng(1)
    xs = rng.uniform(-1.2, 1.2, (4, 64)).astype(np.float32)
    make = _TAILS[tail]
    whole = Builder("whole")
    whole.output("z", make(whole, whole.tanh(whole.slot("x", F32, (4, 64)))))
    part = Builder("part")
    part.output("z", make(part, part.slot("g", F32, (4, 64))))
    p2, p1 = whole.build(), part.build()
    g = evaluate(_tanh_only(), {"x": xs})["g"]
    total = result_bounds(plan(p2, "xdna2").check(), {"x": xs})["z"]
    own = result_bounds(plan(p1, "xdna2").check(), {"g": g})["z"]
    allowed = 2e-6 + 1e-5 * np.abs(g.astype(np.float64))  # tanh's contract on xdna2
    base = evaluate(p1, {"g": g})["z"].astype(np.float64)
    worst = np.zeros(total.shape)
    for sign in (-1.0, 1.0):
        pert = (g.astype(np.float64) + sign * allowed).astype(np.float32)
        over = np.abs(pert.astype(np.float64) - g) > allowed  # rounding left the allowance
        pert = np.where(over, np.nextafter(pert, g), pert)  # a legal tanh stays inside it
        moved = np.abs(evaluate(p1, {"g": pert})["z"].astype(np.float64) - base)
        worst = np.maximum(worst, moved)
    ulp = np.spacing(np.abs(base).astype(np.float32)).astype(np.float64)
    assert np.all(worst <= total * (1 + 1e-3) + 2 * ulp), "unsound"
    carried = total - own
    assert np.any(carried > 0)
    assert np.all(carried <= 2.0 * worst + own + 4 * ulp), "too loose"


def _tanh_only() -> Program:
    b = Builder("g")
    b.output("g", b.tanh(b.slot("x", F32, (4, 64))))
    return b.build()


_F64 = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "erf": np.vectorize(__import__("math").erf),
    "neg": np.negative,
    "abs": np.abs,
    "recip": lambda a: 1.0 / a,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


@pytest.mark.parametrize("prim", sorted(_F64))
def test_each_carry_rule_against_the_worst_perturbation(prim: str) -> None:
    """A rule alone, on errors far above rounding: the carried error covers the worst the
    operands' errors can do (every sign combination at the ends of each error; the functions
    are monotone on each interval) and is at most twice it."""
    from poot_planner.error_bounds.steps import _propagated

    rng = np.random.default_rng(5)
    f = _F64[prim]
    binary = prim in ("add", "sub", "mul", "div", "max", "min")
    low = 0.5 if prim in ("log", "sqrt", "recip", "div") else -3.0
    vals = [rng.uniform(low, 3.0, 200) for _ in range(2 if binary else 1)]
    errs = [1e-3 * np.abs(v) + 1e-4 for v in vals]
    b = Builder("one")
    args = [b.slot(f"a{k}", F32, (200,)) for k in range(len(vals))]
    b.output("y", getattr(b, prim)(*args))
    eqn = b.build().eqns[-1]
    y = f(*vals)
    carried = _propagated(eqn, [v.astype(np.float32) for v in vals], errs, y.astype(np.float32))
    worst = np.zeros(200)
    for signs in np.ndindex(*(2,) * len(vals)):
        moved = f(*(v + (2 * s - 1) * e for v, e, s in zip(vals, errs, signs, strict=True)))
        worst = np.maximum(worst, np.abs(moved - y))
    # the rule sees the f32 operands; the 1e-6 slack covers that rounding
    assert np.all(worst <= carried * (1 + 1e-6) + 1e-12), prim
    assert np.all(carried <= 2.0 * worst + 1e-12), prim


def test_a_sum_carries_the_sum_of_its_terms_errors() -> None:
    from poot_planner.error_bounds.steps import _propagated

    b = Builder("sum")
    b.output("y", b.reduce_sum(b.slot("x", F32, (3, 5)), axes=-1))
    eqn = b.build().eqns[-1]
    x = np.ones((3, 5), np.float32)
    errs = np.arange(15, dtype=np.float64).reshape(3, 5)
    carried = _propagated(eqn, [x], [errs], np.full(3, 5.0, np.float32))
    np.testing.assert_array_equal(carried, [10.0, 35.0, 60.0])


def _exp_then(window: str) -> Program:
    """exp (xdna2: AbsRel 2e-6 + 1e-5 |y|) into a window primitive (whose own contract the
    target has none for: the carried error alone)."""
    b = Builder(f"exp_{window}")
    x = b.slot("x", F32, (1, 4, 6, 6))
    v = b.exp(x)
    if window == "conv":
        v = b.conv(v, b.weight("w", F32, (6, 2, 3, 3)), (1, 2), [(1, 1), (0, 2)], None, (1, 2), 2)
    elif window == "sum":
        v = b.reduce_window_sum(v, (1, 1, 3, 2), (1, 1, 2, 1), [(0, 0), (0, 0), (1, 1), (0, 1)])
    else:
        v = b.reduce_window_max(v, (1, 1, 2, 3), (1, 1, 1, 2), [(0, 0), (0, 0), (1, 0), (1, 1)])
    b.output("y", v)
    return b.build()


@pytest.mark.parametrize("window", ["conv", "sum", "max"])
def test_window_primitives_carry_their_operands_errors(window: str) -> None:
    # a device whose exp is off by its whole allowance, upward (the kernel is positive): the
    # window primitive's result is then off by exactly the carried bound; before these rules
    # the analysis promised nothing (inf) past a conv or a window reduction
    program = _exp_then(window)
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, (1, 4, 6, 6)).astype(np.float32)
    inputs = {"x": x}
    if window == "conv":
        inputs["w"] = rng.uniform(0.1, 1.0, (6, 2, 3, 3)).astype(np.float32)
    # unlegalized, xdna2 refuses the window primitive (a convolution is legalized into its
    # matmul otherwise); the analysis does not need it admitted
    p = plan(program, "xdna2", legalization=False)
    bound = result_bounds(p, inputs)["y"]
    assert np.all(np.isfinite(bound)) and np.all(bound > 0)
    # the oracle's exp (float32, as the bound reads it) and a device's, off by the allowance
    e = np.exp(x).astype(np.float64)
    worst = e + 2e-6 + 1e-5 * e
    (eqn,) = program.eqns[1:]

    def apply(v: np.ndarray) -> np.ndarray:
        if isinstance(eqn.params, ConvParams):
            return conv64(v, inputs["w"].astype(np.float64), eqn.params, bound.shape)
        assert isinstance(eqn.params, ReduceWindowParams)
        win = windows_of(v, eqn.params, 0.0 if window == "sum" else -np.inf)
        axes = tuple(range(-4, 0))
        return np.asarray(win.sum(axis=axes) if window == "sum" else win.max(axis=axes))

    moved = np.abs(apply(worst) - apply(e))
    if window != "max":  # a rounding step reading operands that carry an error: one ulp more
        # (``error_bounds.steps._rerounded``: the two roundings of neighbouring sums can part by it)
        y = evaluate(program, inputs)["y"]
        moved = moved + np.spacing(np.abs(y)).astype(np.float64)
    # tight, not just sound (to the float32 rounding of the oracle's exp the bound reads)
    np.testing.assert_allclose(moved, bound, rtol=1e-6, atol=0)


def test_a_softmax_shift_floor_holds_for_every_device_row() -> None:
    """``x'_i - max_j x'_j`` over every row ``x'`` with elements in ``[lo, hi]`` (each element at
    either end or between) is at least ``_shift_floor``, and attains it: an element whose low end
    clears every other's high end is its row's maximum (0), a tie at the top is not."""
    from itertools import product

    from poot_planner.error_bounds.ranges import _shift_floor

    rng = np.random.default_rng(7)
    cases = [
        (np.array([[4.0, -1.0, 0.0]]), np.array([[6.0, 1.0, 3.0]])),  # element 0 clears
        (np.array([[0.0, 0.0, -5.0]]), np.array([[2.0, 2.0, -4.0]])),  # a tie at the top
    ]
    for _ in range(20):
        lo = rng.uniform(-4.0, 4.0, (1, 3))
        cases.append((lo, lo + rng.uniform(0.0, 3.0, (1, 3))))
    for lo, hi in cases:
        floor = _shift_floor(lo, hi, (1,))
        least = np.full(3, np.inf)
        for pick in product(*[np.linspace(lo[0, j], hi[0, j], 5) for j in range(3)]):
            row = np.array(pick)
            least = np.minimum(least, row - row.max())
        assert np.all(least >= floor[0] - 1e-12), (lo, hi, least, floor)
        assert np.allclose(least, floor[0]), (lo, hi, least, floor)
    assert _shift_floor(*cases[0], (1,))[0, 0] == 0.0
    assert _shift_floor(*cases[1], (1,))[0, 0] == -2.0


def test_a_softmax_denominator_is_at_least_the_maximums_own_term() -> None:
    """Terms in ``[lo, hi]`` with one per row at least ``peak`` (the maximum's exp(0)): the range
    ``_denominator`` gives holds every device sum of them (exact sum within the FP16 lowering's
    rounding), its floor near the peak even where the terms' ranges reach 0."""
    from poot_planner.error_bounds.ranges import _denominator, _DeviceRange

    b = Builder("den")
    b.output("s", b.reduce_sum(b.slot("e", F32, (2, 4)), 1))
    e = b.build().eqns[0]
    lo = np.array([[0.0, 0.0, 0.0, 0.0], [0.2, 0.0, -1e-7, 0.1]])
    hi = np.array([[1.003, 1.003, 0.5, 0.02], [1.003, 0.3, 0.001, 0.4]])
    peak = 0.997
    held = _denominator(e, _DeviceRange(lo, hi), peak, None)
    assert held is not None
    assert 0.99 < held.lo[0] < peak and 0.99 < held.lo[1] < peak + 0.2
    rng = np.random.default_rng(3)
    for _ in range(200):
        terms = rng.uniform(lo, hi)
        for row in range(2):  # the maximum's own term, at least the peak, where it can be
            k = rng.choice(np.flatnonzero(hi[row] >= peak))
            terms[row, k] = rng.uniform(peak, hi[row, k])
        s = np.sum(terms, axis=1)
        for rounded in (s * (1 - 2.0**-10), s * (1 + 2.0**-10)):  # two FP16 roundings
            assert np.all(held.lo <= rounded) and np.all(rounded <= held.hi), (terms, held)


def _variance_by_squares(whole: bool = True) -> Program:
    """``c sum(t^2) - (c sum t)^2`` over rows, ``t = 3 tanh(x) + y`` (approximate: ``t``
    carries tanh's error, amplified), the mean larger than the spread; ``whole=False``: ``t``
    alone."""
    b = Builder("variance")
    x = b.slot("x", F32, (4, 16))
    y = b.slot("y", F32, (4, 16))
    t = b.add(b.mul(b.tanh(x), 3.0), y)
    if not whole:
        b.output("t", t)
        return b.build()
    mean = b.mul(b.reduce_sum(t, (1,)), 1.0 / 16)
    b.output("z", b.sub(b.mul(b.reduce_sum(b.mul(t, t), (1,)), 1.0 / 16), b.mul(mean, mean)))
    return b.build()


@pytest.mark.parametrize("seed", range(4))
def test_a_variance_by_squares_covers_an_adversarial_device(seed: int) -> None:
    """The variance carried as one function of its operand (``_variance_carry``) still covers
    a device whose ``t`` takes every step's whole allowance, either sign, on every element
    (the simulated device), its variance then computed as the oracle does: the operand's
    errors are any within their bounds, not the oracle's."""
    rng = np.random.default_rng(seed)
    program = _variance_by_squares()
    inputs = {
        "x": rng.uniform(-3, 3, (4, 16)).astype(np.float32),
        "y": rng.uniform(2, 5, (4, 16)).astype(np.float32),
    }
    want = evaluate(program, inputs)["z"].astype(np.float64)
    bound = result_bounds(plan(program, "xdna2").check(), inputs)["z"]
    assert np.all(np.isfinite(bound))
    for _ in range(30):
        t = _simulate(_variance_by_squares(whole=False), inputs, rng).astype(np.float32)
        mean = np.float32(1.0 / 16) * np.sum(t, axis=1, dtype=np.float32)
        got = np.float32(1.0 / 16) * np.sum(t * t, axis=1, dtype=np.float32) - mean * mean
        slack = 1e-3 * bound + 4 * np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
        assert np.all(np.abs(got.astype(np.float64) - want) <= bound + slack)
