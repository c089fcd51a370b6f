"""The derived FP16 contract fuzzed on the vpu-cpu stand-in (issue 24, done-when): random F32
programs at FP16's edges, narrowed for intel-npu4 and run with verify off, each result within the
bound ``poot_planner.error_bounds.result_bounds`` derives for the step's inputs (the FP16
rounding of every input and literal, each equation's FP16 lowering, ``poot_planner.fp16.contract``).

The judge is independent of poot's oracle and of the analysis: a float64 evaluation written
here (numpy, ``math.erf``) of the program on the inputs as given. The device must be within the
derived bound of it, up to F32's own half ulp; and the derived bound must cover what the FP16
rounding of the inputs alone does (the same float64 evaluation of the FP16-rounded inputs), so
``1000.1 - 1000`` (0 in FP16) is promised only what the input's rounding leaves, not 2^-8.

Edges drawn: values FP16 flushes (3e-8, 1e-9), resolution near 1 (1 +- 2^-11, 1.0001),
cancellation (1000.1 - 1000), sums and products that reach 65504 exactly or overflow (32752 +
32752, 40000 + 40000), literals FP16 flushes (1e-30: refused when planning), every legalized
rule near zero (erf, tanh, log, recip, min, abs from 1e-6), a reduce_sum over the channel axis
and over the other (AvgPool x N on the NPU: two roundings), an F32 counter (an FP16 one on the
device). Every refusal must be justified: a plan refusal names a literal FP16 flushes, moves
under a comparison or cannot hold; a run refusal (typed: an FP16 overflow, a value crossing a
domain edge) must be real on the float64 evaluation (an intermediate at or beyond 65504, or a
NaN / infinity)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_ir import Builder, DType, PootError, Program, Var
from poot_npu.registry import make_device
from poot_planner import Plan, plan
from poot_planner.error_bounds import result_bounds
from poot_planner.refusal import RefusalKind

SHAPE = (4, 8)
#: the edges, by regime (each example draws its inputs from one or two of them)
REGIMES = {
    "flush": [0.0, -0.0, 3e-8, -3e-8, 1e-9, 2**-24, 2**-14, 1e-6, -1e-6, 1e-4, -1e-4],
    "small": [1e-6, -1e-6, 1e-4, -1e-4, 1e-3, 0.01, -0.01, 0.1, -0.1],
    "near one": [0.5, 1.0, -1.0, 1.0 + 2**-11, 1.0 - 2**-12, 1.0001, 0.9999, 2.0],
    "ordinary": [3.5, -3.5, 9.5, -0.75, 100.0, -7.25, 0.3],
    "cancellation": [1000.0, 1000.1, -1000.1, 999.9, 1000.05],
    "overflow": [32752.0, 40000.0, 65504.0, -65504.0, 30000.0],
}
LITERALS = (0.5, 2.0, 1000.0, 0.1, 1e-30, 3e-4, -1000.1, 0.0, -0.0)
UNARY = ("exp", "sqrt", "log", "tanh", "erf", "recip", "abs", "neg")
BINARY = ("add", "sub", "mul", "div", "max", "min")
OTHER = ("sum_rows", "sum_channels", "matmul", "lit_add", "lit_sub", "lit_mul", "select", "counter")
STEPS = UNARY + BINARY + OTHER

Array = np.ndarray
#: a derandomized fuzz drawing around the module's one engine (a fixture per test, not per
#: example: every example adds and removes its entry)
ENGINE_FUZZ = settings(
    derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _f64(step: str, y: Array, z: Array, w: Array, lit: float) -> Array:
    """One step in float64, as the mathematics says (the independent judge)."""
    with np.errstate(all="ignore"):
        match step:
            case "exp" | "sqrt" | "log" | "tanh" | "abs":
                return np.asarray(getattr(np, step)(y))
            case "erf":
                return np.asarray(_erf(y))
            case "recip":
                return 1.0 / y
            case "neg":
                return -y
            case "add":
                return y + z
            case "sub":
                return y - z
            case "mul":
                return y * z
            case "div":
                return y / z
            case "max":
                return np.maximum(y, z)
            case "min":
                return np.minimum(y, z)
            case "sum_rows":  # over axis 0: AvgPool x N on the NPU
                return np.broadcast_to(np.sum(y, axis=0, keepdims=True), y.shape)
            case "sum_channels":  # over axis 1: the channel axis, one rounding
                return np.broadcast_to(np.sum(y, axis=1, keepdims=True), y.shape)
            case "matmul":
                return y @ w
            case "lit_add":
                return y + lit
            case "lit_sub":  # the literal first: 0 - y is -y, exactly
                return lit - y
            case "lit_mul":
                return y * lit
            case "select":
                return np.where(y >= z, y, z * 0.5)
            case "counter":
                return y + np.arange(SHAPE[1])
            case _:
                raise AssertionError(step)


def _emit(b: Builder, step: str, y: Var, z: Var, w: Var, lit: float) -> Var:
    match step:
        case "sum_rows":
            return b.broadcast_in_dim(b.reduce_sum(y, 0), SHAPE, (1,))
        case "sum_channels":
            return b.broadcast_in_dim(b.reduce_sum(y, 1), SHAPE, (0,))
        case "matmul":
            return b.matmul(y, w)
        case "lit_add":
            return b.add(y, lit)
        case "lit_sub":
            return b.sub(lit, y)
        case "lit_mul":
            return b.mul(y, lit)
        case "select":
            return b.select(b.ge(y, z), y, b.mul(z, 0.5))
        case "counter":  # an F32 iota (ONNX's Range): an FP16 counter on the device
            return b.add(y, b.iota(SHAPE, DType.F32, 1))
        case _ if step in UNARY:
            fn: Callable[[Var], Var] = getattr(b, step)
            return fn(y)
        case _:
            return getattr(b, step)(y, z)  # type: ignore[no-any-return]


def _program(steps: list[str], lit: float) -> Program:
    b = Builder("fp16_fuzz")
    x, z = b.slot("x", DType.F32, SHAPE), b.slot("z", DType.F32, SHAPE)
    w = b.weight("w", DType.F32, (SHAPE[1], SHAPE[1]))
    y = x
    for s in steps:
        y = _emit(b, s, y, z, w, lit)
    b.output("y", y)
    return b.build()


def _judge(steps: list[str], feed: dict[str, Array], lit: float) -> tuple[Array, list[Array]]:
    """The float64 result and every intermediate of ``steps`` on ``feed``."""
    y = np.asarray(feed["x"], np.float64)
    z, w = np.asarray(feed["z"], np.float64), np.asarray(feed["w"], np.float64)
    seen = [y]
    for s in steps:
        y = _f64(s, y, z, w, lit)
        seen.append(y)
    return y, seen


def _fp16(feed: dict[str, Array]) -> dict[str, Array]:
    with np.errstate(over="ignore"):
        return {k: v.astype(np.float16).astype(np.float32) for k, v in feed.items()}


def _plan_refusal_justified(r: object, lit: float) -> bool:
    """A narrowing refusal names a literal FP16 flushes, cannot hold, or moves under a
    comparison."""
    kind = getattr(r, "kind", None)
    if kind is not RefusalKind.NARROWING_RANGE:
        return False
    held = float(np.float16(lit))
    return (lit != 0 and held == 0.0) or abs(lit) > 65504 or held != lit


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path_factory.mktemp("fp16")) as e:
        yield e


def _one_step(engine: Engine, p: Plan, feed: dict[str, Array]) -> dict[str, Array]:
    """One step of the admitted plan ``p`` on vpu-cpu (no weights), as float64."""
    assert p.admitted, [str(r) for r in p.refusals]
    entry = engine.add_entry(p, engine.load_weights({}))
    try:
        return {k: v.astype(np.float64) for k, v in engine.step(entry, feed).items()}
    finally:
        engine.remove_entry(entry)


def _r16(v: Array) -> Array:
    """``v`` as FP16 holds it, in float64 (overflows infinite)."""
    with np.errstate(all="ignore"):
        return np.asarray(v, np.float64).astype(np.float16).astype(np.float64)


def _within(bound: Array, want: Array, what: object, **values: Array) -> None:
    """Each of ``values`` (the device's, or a float64 evaluation of the FP16-rounded inputs: a
    legal device) within ``bound`` of ``want``, a float64 evaluation of the inputs as given,
    with the F32 oracle's last rounding as slack."""
    slack = 2.0**-24 * np.abs(want)
    for name, v in values.items():
        err = np.abs(np.asarray(v, np.float64) - want)
        assert np.all(err <= bound + slack), (what, name, err, bound)


@given(
    steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=3),
    lit=st.sampled_from(LITERALS),
    data=st.data(),
)
@settings(ENGINE_FUZZ, max_examples=24)
def test_fp16_programs_on_vpu_cpu_within_their_derived_contract(
    engine: Engine, steps: list[str], lit: float, data: st.DataObject
) -> None:
    _within_derived_contract(engine, steps, lit, data)


@given(
    around=st.lists(st.sampled_from(STEPS), min_size=2, max_size=2),
    zero=st.sampled_from(["lit_add", "lit_sub"]),
    lit=st.sampled_from([0.0, -0.0]),
    data=st.data(),
)
@settings(ENGINE_FUZZ, max_examples=12)
def test_an_add_or_subtraction_of_a_literal_zero_within_its_derived_contract(
    engine: Engine, around: list[str], zero: str, lit: float, data: st.DataObject
) -> None:
    """``x + 0``, ``0 - x`` (either zero) between two random steps: lowered exact, neither
    rounded nor its range widened (``fp16.contract.zero_operand``), at every regime's edges."""
    _within_derived_contract(engine, [around[0], zero, around[1]], lit, data)


def _within_derived_contract(
    engine: Engine, steps: list[str], lit: float, data: st.DataObject
) -> None:
    """One step of ``steps`` on vpu-cpu, on inputs drawn from one or two regimes: within the
    derived bound of the float64 judge (and of the judge on the FP16-rounded inputs), or a
    refusal the judge justifies."""
    names = data.draw(st.lists(st.sampled_from(sorted(REGIMES)), min_size=1, max_size=2))
    edges = [float(v) for n in names for v in REGIMES[n]]
    pick = st.lists(st.sampled_from(edges), min_size=32, max_size=32)
    feed = {n: np.array(data.draw(pick), np.float32).reshape(SHAPE) for n in ("x", "z")}
    w = st.lists(st.sampled_from(REGIMES["ordinary"] + REGIMES["small"]), min_size=64, max_size=64)
    feed["w"] = np.array(data.draw(w), np.float32).reshape(SHAPE[1], SHAPE[1])
    p = plan(_program(steps, lit), "intel-npu4")
    if not p.admitted:
        assert all(_plan_refusal_justified(r, lit) for r in p.refusals), [
            str(r) for r in p.refusals
        ]
        return
    want, seen = _judge(steps, feed, lit)
    entry = engine.add_entry(p, engine.load_weights({"w": feed["w"]}))
    try:
        got = engine.step(entry, {"x": feed["x"], "z": feed["z"]})["y"].astype(np.float64)
    except PootError as err:
        # a typed refusal: real on the float64 evaluation of the inputs as the device holds
        # them (a value at or past 65504, or one off a function's domain)
        _, held = _judge(steps, _fp16(feed), lit)
        wild = any(bool(np.any(~np.isfinite(v) | (np.abs(v) >= 65504.0))) for v in [*seen, *held])
        assert wild, f"{type(err).__name__} unjustified: {err}"
        return
    finally:
        engine.remove_entry(entry)
    bound = result_bounds(p, feed)["y"]
    ideal, _ = _judge(steps, _fp16(feed), lit)
    promised = np.isfinite(bound) & np.isfinite(want)
    err = np.abs(got - want)
    slack = 2.0**-24 * np.abs(want)  # the F32 oracle's half ulp the bound is stated against
    assert np.all(err[promised] <= bound[promised] + slack[promised]), (
        steps,
        lit,
        np.max((err - bound)[promised]),
    )
    # the bound covers the rounding of the inputs to FP16 (cancellation amplifies it)
    moved = np.abs(ideal - want)
    both = promised & np.isfinite(ideal)
    assert np.all(moved[both] <= bound[both] + slack[both])
    # where the judge is finite and the bound infinite, only an edge explains it: a value
    # reaching 65504, a comparison the errors could flip, a NaN or infinity on the way


def test_a_cancellation_is_bounded_by_the_input_rounding_not_a_figure(engine: Engine) -> None:
    """``1000.1 - 1000``: FP16 holds 1000.1 as 1000.0, so the device returns 0 where F32 gives
    0.1; the derived bound is the input's rounding (0.1), so the result is inside it, and a
    wrong device value beyond it is not."""
    b = Builder("cancel")
    x, z = b.slot("x", DType.F32, (2,)), b.slot("z", DType.F32, (2,))
    b.output("y", b.sub(x, z))
    p = plan(b.build(), "intel-npu4")
    feed = {"x": np.array([1000.1, 3.0], np.float32), "z": np.array([1000.0, 1.0], np.float32)}
    bound = result_bounds(p, feed)["y"]
    assert 0.09 < bound[0] < 0.2  # the rounding of 1000.1 (0.1 away) plus FP16's own
    assert bound[1] < 2.0**-9  # exact inputs: one rounding of 2
    entry = engine.add_entry(p, engine.load_weights({}))
    got = engine.step(entry, feed)["y"]
    assert got[0] == 0.0 and got[1] == 2.0
    assert np.all(np.abs(got.astype(np.float64) - [0.1, 2.0]) <= bound + 1e-7)


def test_an_infinite_f16_literal_runs_as_the_oracle_has_it(engine: Engine) -> None:
    """At the pinned npu_compiler an infinite F16 splat is not clamped (issue 24 item 5): the
    plan admits ``x + -inf`` in F16 and the stand-in returns -inf, as the oracle does."""
    b = Builder("f16_inf")
    b.output("y", b.add(b.slot("x", DType.F16, (3,)), -math.inf))
    p = plan(b.build(), "intel-npu4")
    assert p.admitted, [str(r) for r in p.refusals]
    x = np.array([1.0, -2.0, 65504.0], np.float16)
    entry = engine.add_entry(p, engine.load_weights({}))
    got = engine.step(entry, {"x": x})["y"]
    assert got.dtype == np.float16 and np.all(np.isneginf(got.astype(np.float32)))


def test_an_unbounded_result_names_the_equation_that_makes_it_so() -> None:
    """``1 / (x - z)`` at x = 1000.1, z = 1000: FP16 holds x as 1000, so the difference's bound
    (0.1) is its whole value and the quotient is promised nothing; the analysis names the div,
    and the step's check says so instead of reading as a check."""
    from poot_engine.verify import check_results

    b = Builder("unbounded")
    x, z = b.slot("x", DType.F32, (2,)), b.slot("z", DType.F32, (2,))
    b.output("y", b.div(1.0, b.sub(x, z)))
    p = plan(b.build(), "intel-npu4")
    feed = {"x": np.array([1000.1, 3.0], np.float32), "z": np.array([1000.0, 1.0], np.float32)}
    origins: dict[str, tuple[int, str]] = {}
    bound = result_bounds(p, feed, None, origins)["y"]
    assert np.isinf(bound[0]) and np.isfinite(bound[1])
    assert origins == {"y": (len(p.legalized.eqns) - 1, "div")}
    got = {"y": np.array([np.inf, 0.5], np.float32)}  # what FP16 gives: 1 / 0
    ((_, c),) = check_results(p, feed, got)
    assert c.ok and "1 element(s) promised nothing: unbounded by equation" in c.reason
    assert "(div)" in c.reason


def test_a_pooled_reduce_sum_is_held_to_its_two_roundings(engine: Engine) -> None:
    """reduce_sum over a non-channel axis is AvgPool then x N on the NPU (and the stand-in):
    four ones and seven zeros is 4/11 rounded to FP16 (0.36353), times 11, rounded again:
    3.998, not 4.
    The F16 contract is ``RoundedTwice`` (before: bit exact, which this result breaks)."""
    from poot_ir import BitExact, Prim, compare, evaluate
    from poot_ir.numerics import RoundedTwice

    b = Builder("pooled")
    b.output("y", b.reduce_sum(b.slot("x", DType.F16, (11, 2)), 0))
    p = plan(b.build(), "intel-npu4")
    x = np.array([[1, 2]] * 4 + [[0, 2]] * 7, np.float16)
    entry = engine.add_entry(p, engine.load_weights({}))
    got = engine.step(entry, {"x": x})["y"]
    want = evaluate(p.program, {"x": x})["y"]
    assert float(got[0]) == 3.998046875 and float(want[0]) == 4.0
    assert float(got[1]) == float(want[1]) == 22.0
    cap = p.target.capability(Prim.REDUCE_SUM, DType.F16)
    assert cap is not None and isinstance(cap.contract.bound, RoundedTwice)
    assert cap.contract.check(got, want, [x]).ok
    assert not compare(got, want, BitExact(signed_zero=False)).ok


ROWS, WIDTH = 4, 8
#: a LayerNorm's rows at the edges: constant and nearly so (the variance 0, or below what FP16
#: resolves: 50.01 is 50 there), flushed, ordinary, large (the squares' sums near FP16's range)
NORM_ROWS = {
    "constant": [50.0] * WIDTH,
    "near constant": [50.0, 50.01] * (WIDTH // 2),
    "flush": [3e-8, -3e-8, 1e-9, 0.0, 2**-24, -(2**-24), 1e-6, -1e-6],
    "ordinary": [0.5, -1.25, 3.5, 0.0, -0.75, 2.0, 1.0, -3.0],
    "large": [60.0, -40.0, 20.0, 50.0, -30.0, 10.0, 0.0, 24.0],
}


def _layer_norm(variance_by_squares: bool) -> Program:
    """``(x - mean) / sqrt(var + eps)`` over the channel axis, the variance as the mean square
    of the difference, or as ``max(E[x^2] - E[x]^2, 0)`` (magika's form)."""
    b = Builder("layer_norm")
    x = b.slot("x", DType.F32, (ROWS, WIDTH))

    def mean(v: Var) -> Var:
        return b.broadcast_in_dim(b.mul(b.reduce_sum(v, 1), 1.0 / WIDTH), (ROWS, WIDTH), (0,))

    m = mean(x)
    d = b.sub(x, m)
    if variance_by_squares:
        var = b.max(b.sub(mean(b.mul(x, x)), b.mul(m, m)), 0.0)
    else:
        var = mean(b.mul(d, d))
    b.output("y", b.div(d, b.sqrt(b.add(var, 1e-5))))
    return b.build()


def _layer_norm64(x: Array, variance_by_squares: bool) -> Array:
    m = np.mean(x, axis=1, keepdims=True)
    if variance_by_squares:
        var = np.maximum(np.mean(x * x, axis=1, keepdims=True) - m * m, 0.0)
    else:
        var = np.mean((x - m) ** 2, axis=1, keepdims=True)
    return np.asarray((x - m) / np.sqrt(var + 1e-5))


@given(
    rows=st.lists(st.sampled_from(sorted(NORM_ROWS)), min_size=ROWS, max_size=ROWS),
    by_squares=st.booleans(),
)
@settings(derandomize=True, max_examples=8, deadline=None)
def test_a_layer_norm_at_its_edges_is_within_its_derived_contract(
    engine: Engine, rows: list[str], by_squares: bool
) -> None:
    """A LayerNorm on rows at the edges (constant, nearly so, flushed): the device within the
    derived bound of a float64 evaluation written here. With the variance clamped at 0 and eps
    added (``max(E[x^2] - E[x]^2, 0) + eps``) the divisor is at least sqrt(eps) whatever its
    error, so every element is promised a finite bound."""
    x = np.array([NORM_ROWS[r] for r in rows], np.float32)
    p = plan(_layer_norm(by_squares), "intel-npu4")
    assert p.admitted, [str(r) for r in p.refusals]
    entry = engine.add_entry(p, engine.load_weights({}))
    try:
        got = engine.step(entry, {"x": x})["y"].astype(np.float64)
    finally:
        engine.remove_entry(entry)
    want = _layer_norm64(x.astype(np.float64), by_squares)
    bound = result_bounds(p, {"x": x})["y"]
    promised = np.isfinite(bound)
    if by_squares:
        assert promised.all(), (rows, bound)
    slack = 2.0**-24 * np.abs(want)
    assert np.all(np.abs(got - want)[promised] <= (bound + slack)[promised]), (rows, bound)


CHANNELS, SIDE, LAYERS = 2, 5, 6


def _conv64(x: Array, w: Array) -> Array:
    """A 3x3 convolution, padding 1, at float64: a loop over the taps (the judge)."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], SIDE, SIDE))
    for i, j in np.ndindex(3, 3):
        out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + SIDE, j : j + SIDE], w[:, :, i, j])
    return out


def _deep_conv(scale: float) -> Program:
    """``LAYERS`` times: a 3x3 convolution, a per-tensor scale (a folded batch norm), relu6
    (``min(max(., 0), 6)``)."""
    b = Builder("deep_conv")
    y = b.slot("x", DType.F32, (1, CHANNELS, SIDE, SIDE))
    for k in range(LAYERS):
        w = b.weight(f"w{k}", DType.F32, (CHANNELS, CHANNELS, 3, 3))
        y = b.min(b.max(b.mul(b.conv(y, w, padding=((1, 1), (1, 1))), scale), 0.0), 6.0)
    b.output("y", y)
    return b.build()


@given(
    regime=st.sampled_from(["small", "near one", "ordinary", "overflow"]),
    scale=st.sampled_from([1.0, 3.0, 1000.0]),
    data=st.data(),
)
@settings(ENGINE_FUZZ, max_examples=8)
def test_a_deep_clamped_conv_stack_is_within_its_derived_contract(
    engine: Engine, regime: str, scale: float, data: st.DataObject
) -> None:
    """Six convolutions, each scaled and clamped by relu6, inputs and weights at the edges (a
    scale of 1000 and inputs near 65504 push the sums past FP16's range): the device within
    the derived bound of a float64 evaluation written here, and every element promised: the
    clamp holds the device's value in [0, 6] whatever the error before it, so the bound stays
    at most 6 instead of growing layer by layer into an assumed overflow."""
    size = CHANNELS * SIDE * SIDE
    x = np.array(
        data.draw(st.lists(st.sampled_from(REGIMES[regime]), min_size=size, max_size=size))
    )
    feed = {"x": x.astype(np.float32).reshape(1, CHANNELS, SIDE, SIDE)}
    taps = st.lists(
        st.sampled_from(REGIMES["ordinary"] + REGIMES["small"]), min_size=36, max_size=36
    )
    for k in range(LAYERS):
        feed[f"w{k}"] = np.array(data.draw(taps), np.float32).reshape(CHANNELS, CHANNELS, 3, 3)
    p = plan(_deep_conv(scale), "intel-npu4")
    assert p.admitted, [str(r) for r in p.refusals]
    weights = {n: v for n, v in feed.items() if n != "x"}
    y, peak = feed["x"].astype(np.float64), 0.0
    for k in range(LAYERS):
        y = _conv64(y, feed[f"w{k}"].astype(np.float64)) * scale
        peak = max(peak, float(np.max(np.abs(y))))
        y = np.clip(y, 0.0, 6.0)
    entry = engine.add_entry(p, engine.load_weights(weights))
    try:
        got = engine.step(entry, {"x": feed["x"]})["y"].astype(np.float64)
    except PootError as err:
        # a typed refusal (an FP16 overflow the in-graph guard saw): real on float64
        assert peak >= 65504.0 / 2, f"{type(err).__name__} unjustified: {err}"
        return
    finally:
        engine.remove_entry(entry)
    bound = result_bounds(p, feed)["y"]
    promised = np.isfinite(bound)
    if peak < 65504.0 / 2:  # no sum near FP16's range: nothing may be assumed to overflow
        assert promised.all(), (regime, scale)
    assert np.all(bound[promised] <= 6.0 + 2.0**-8), float(np.max(bound[promised]))
    slack = 2.0**-24 * np.abs(y)
    assert np.all(np.abs(got - y)[promised] <= (bound + slack)[promised])


def test_a_leaky_relu_at_its_kink_is_held_to_either_branch(engine: Engine) -> None:
    """``select(d >= 0, d, 0.01 d)`` at ``d = 1000.1 - 1000``: FP16 holds the difference as 0,
    so the predicate may flip; the device picks one of the branches either way, so the bound is
    finite (the other branch's bound plus the branches' distance), and the device within it."""
    b = Builder("leaky")
    x, z = b.slot("x", DType.F32, (2,)), b.slot("z", DType.F32, (2,))
    d = b.sub(x, z)
    b.output("y", b.select(b.ge(d, 0.0), d, b.mul(d, 0.01)))
    p = plan(b.build(), "intel-npu4")
    feed = {"x": np.array([1000.1, 3.0], np.float32), "z": np.array([1000.0, 1.0], np.float32)}
    bound = result_bounds(p, feed)["y"]
    assert np.all(np.isfinite(bound)), bound
    want = np.asarray(feed["x"], np.float64) - np.asarray(feed["z"], np.float64)
    entry = engine.add_entry(p, engine.load_weights({}))
    try:
        got = engine.step(entry, feed)["y"].astype(np.float64)
    finally:
        engine.remove_entry(entry)
    assert np.all(np.abs(got - want) <= bound + 2.0**-24 * np.abs(want))


#: softmax rows at the edges: differences of values FP16 rounds by up to 16 (its spacing is 32
#: past 32768), so each difference's bound passes 16 and exp's first-order carry passes 65504;
#: a row whose maximum clears the others, a tie, ordinary values, exact small ones
SOFTMAX_ROWS = {
    "rounded": ([40016.0, 40000.0, 39984.0, 40048.0], [40000.0, 40016.0, 40000.0, 40000.0]),
    "clear": ([40016.0, 41000.0, 39984.0, 40048.0], [40000.0, 40016.0, 40000.0, 40000.0]),
    "tie": ([40016.0, 40016.0, 39984.0, 39984.0], [40000.0, 40000.0, 40000.0, 40000.0]),
    "ordinary": ([0.5, -1.25, 3.5, 2.0], [0.0, 0.0, 0.0, 0.0]),
    "small": ([1e-4, -1e-4, 3e-8, 0.0], [0.0, 0.0, 0.0, 0.0]),
}


def _softmax_and_sigmoid_tail() -> Program:
    """``softmax(x - z)`` over the last axis (max-subtracted) and ``exp(-max(d, -d))`` (a
    legalized sigmoid's ``exp(-|d|)``), ``d = x - z``."""
    b = Builder("softmax")
    x, z = b.slot("x", DType.F32, (ROWS, 4)), b.slot("z", DType.F32, (ROWS, 4))
    d = b.sub(x, z)
    shifted = b.sub(d, b.broadcast_in_dim(b.reduce_max(d, 1), (ROWS, 4), (0,)))
    e = b.exp(shifted)
    b.output("p", b.div(e, b.broadcast_in_dim(b.reduce_sum(e, 1), (ROWS, 4), (0,))))
    b.output("s", b.exp(b.neg(b.max(d, b.neg(d)))))
    return b.build()


def _softmax_and_sigmoid_tail64(x: Array, z: Array) -> dict[str, Array]:
    d = x - z
    e = np.exp(d - np.max(d, axis=1, keepdims=True))
    return {"p": e / np.sum(e, axis=1, keepdims=True), "s": np.exp(-np.abs(d))}


@given(rows=st.lists(st.sampled_from(sorted(SOFTMAX_ROWS)), min_size=ROWS, max_size=ROWS))
@settings(derandomize=True, max_examples=8, deadline=None)
def test_a_softmax_and_an_exp_of_minus_abs_are_bounded_by_their_ranges(
    engine: Engine, rows: list[str]
) -> None:
    """Where the inputs' FP16 rounding alone moves a difference by 16 or more, the first-order
    carry through exp passes 65504 (before: promised nothing). The device's values still lie
    in ranges the program's shape gives: ``x' - max(x') <= 0`` (its exp at most 1, the row's
    maximum exactly 0 where it clears the others' reach), a denominator at least about 1 (the
    maximum's own exp(0)), ``max(d', -d') >= 0``. Every element is promised a finite bound, and
    the device is within it of a float64 evaluation written here, as are the FP16-rounded
    inputs' exact results (a legal device: no rounding after the inputs')."""
    x = np.array([SOFTMAX_ROWS[r][0] for r in rows], np.float32)
    z = np.array([SOFTMAX_ROWS[r][1] for r in rows], np.float32)
    p = plan(_softmax_and_sigmoid_tail(), "intel-npu4")
    got = _one_step(engine, p, {"x": x, "z": z})
    want = _softmax_and_sigmoid_tail64(x.astype(np.float64), z.astype(np.float64))
    held = _softmax_and_sigmoid_tail64(_r16(x), _r16(z))
    bounds = result_bounds(p, {"x": x, "z": z})
    for name, bound in bounds.items():
        assert np.all(np.isfinite(bound)), (name, rows, bound)
        assert np.all(bound <= 1.0 + 2.0**-7), (name, rows, bound)  # within the ranges' reach
        _within(bound, want[name], (name, rows), device=got[name], held=held[name])


def _stable_sigmoid() -> Program:
    """``sigmoid(d)``, ``d = x - z``, as an importer writes it stably: ``select(d >= 0, 1 / (1 +
    g), g / (1 + g))``, ``g = exp(-|d|)`` (``|d|`` as ``max(d, -d)``); the plan legalizes the
    select as a sum of products with a mask ``clamp(d * 2^24, 0, 1)`` and the abs."""
    b = Builder("sigmoid")
    x, z = b.slot("x", DType.F32, (ROWS, 4)), b.slot("z", DType.F32, (ROWS, 4))
    d = b.sub(x, z)
    g = b.exp(b.neg(b.max(d, b.neg(d))))
    one_g = b.add(g, 1.0)
    b.output("s", b.select(b.ge(d, 0.0), b.div(1.0, one_g), b.div(g, one_g)))
    return b.build()


@given(rows=st.lists(st.sampled_from(sorted(SOFTMAX_ROWS)), min_size=ROWS, max_size=ROWS))
@settings(derandomize=True, max_examples=6, deadline=None)
def test_a_legalized_stable_sigmoid_keeps_its_steps_ranges(engine: Engine, rows: list[str]) -> None:
    """The steps of a legalized select (a mask clamped to [0, 1], products of values in [0, 1])
    and of a legalized abs hold the device's sigmoid in about [0, 1] however far the inputs'
    FP16 rounding moves ``d`` (before: a range passed through a mask scaled by 2^24 grew by the
    F32 oracle's rounding, 2^-23 |d|, at each exact step, and a rewrite's last step kept none:
    bounds in the hundreds). Every element promised at most about 2 (the two products in [0,
    1] each: their ranges do not know the masks sum to 1), the device and the FP16-rounded
    inputs' exact sigmoid within it of a float64 evaluation written here."""
    x = np.array([SOFTMAX_ROWS[r][0] for r in rows], np.float32)
    z = np.array([SOFTMAX_ROWS[r][1] for r in rows], np.float32)
    p = plan(_stable_sigmoid(), "intel-npu4")
    got = _one_step(engine, p, {"x": x, "z": z})["s"]

    def sigmoid64(a: Array, b: Array) -> Array:
        return np.asarray(1.0 / (1.0 + np.exp(-(a - b))))

    want = sigmoid64(x.astype(np.float64), z.astype(np.float64))
    bound = result_bounds(p, {"x": x, "z": z})["s"]
    assert np.all(bound <= 2.0 + 2.0**-5), (rows, bound)
    _within(bound, want, rows, device=got, held=sigmoid64(_r16(x), _r16(z)))


def _offset_layer_norm() -> Program:
    """A LayerNorm by squares (``max(E[x^2] - E[x]^2, 0)``, magika's form) of ``x = a - z``:
    the difference carries the FP16 rounding of ``a`` (near 1000: up to 2^-5) into every
    element, and the rows' means are larger than their spread."""
    b = Builder("offset_norm")
    a, z = b.slot("a", DType.F32, (3, WIDTH)), b.slot("z", DType.F32, (3, WIDTH))
    x = b.sub(a, z)

    def mean(v: Var) -> Var:
        return b.broadcast_in_dim(b.mul(b.reduce_sum(v, 1), 1.0 / WIDTH), (3, WIDTH), (0,))

    m = mean(x)
    var = b.max(b.sub(mean(b.mul(x, x)), b.mul(m, m)), 0.0)
    b.output("var", var)
    b.output("y", b.div(b.sub(x, m), b.sqrt(b.add(var, 1e-5))))
    return b.build()


def test_a_variance_by_squares_is_carried_as_one_function(engine: Engine) -> None:
    """``E[x^2] - E[x]^2`` with errors in ``x``: carried step by step, both terms move with
    ``x``'s errors at the scale of the mean (the bound passes the variance itself where the
    mean is larger than the spread: before, 2.3 to 4.0 against 3.5 to 14); carried as one
    function of ``x`` (``2c sum |x_i - m| E_i + ...``) at the scale of the spread: under half
    the variance on every row. The device, and the exact result of the FP16-rounded inputs,
    within the bound of a float64 evaluation written here."""
    row = np.array([0.5, -1.25, 3.5, 0.0, -0.75, 2.0, 1.0, -3.0])
    # the first row on FP16's grid near 1006 (spacing 0.5) plus 0.2 away from its mean: the
    # inputs' rounding pulls every element 0.2 towards the mean, the variance's largest move
    grid = np.array([0.5, -1.5, 3.5, 0.0, -1.0, 2.0, 1.0, -3.0])
    aligned = 1006.0 + grid + 0.2 * np.sign(grid - grid.mean())
    a = np.array([aligned, 1000.1 + row - 5.0, 1000.1 + 2 * row - 9.0], np.float32)
    z = np.full((3, WIDTH), 1000.0, np.float32)
    p = plan(_offset_layer_norm(), "intel-npu4")
    got = _one_step(engine, p, {"a": a, "z": z})

    def norm64(a64: Array, z64: Array) -> dict[str, Array]:
        x = a64 - z64
        m = np.mean(x, axis=1, keepdims=True)
        var = np.maximum(np.mean(x * x, axis=1, keepdims=True) - m * m, 0.0)
        return {"var": np.broadcast_to(var, x.shape), "y": (x - m) / np.sqrt(var + 1e-5)}

    want = norm64(a.astype(np.float64), z.astype(np.float64))
    held = norm64(_r16(a), _r16(z))
    bounds = result_bounds(p, {"a": a, "z": z})
    assert np.all(bounds["var"] < want["var"] / 2), (bounds["var"][:, 0], want["var"][:, 0])
    for name, bound in bounds.items():
        assert np.all(np.isfinite(bound)), name
        _within(bound, want[name], name, device=got[name], held=held[name])


def test_a_carried_tanh_and_erf_stay_in_their_range(engine: Engine) -> None:
    """tanh and erf, legalized and carried as one step each, of a difference the inputs' FP16
    rounding moves by 16 or more: the device's value is within [-1, 1] and the rule's derived
    bound whatever its operand, so the bound is at most about 2 (before: the operand's error,
    16 to 18); the device and the FP16-rounded inputs' exact function within it of a float64
    evaluation written here."""
    b = Builder("bounded")
    x, z = b.slot("x", DType.F32, (2, 4)), b.slot("z", DType.F32, (2, 4))
    d = b.sub(x, z)
    b.output("t", b.tanh(d))
    b.output("e", b.erf(d))
    p = plan(b.build(), "intel-npu4")
    feed = {
        "x": np.array([SOFTMAX_ROWS["rounded"][0], [1e-4, -0.5, 3.0, -2.0]], np.float32),
        "z": np.array([SOFTMAX_ROWS["rounded"][1], [0.0, 0.0, 0.0, 0.0]], np.float32),
    }
    got = _one_step(engine, p, feed)
    d64 = feed["x"].astype(np.float64) - feed["z"].astype(np.float64)
    d16 = _r16(feed["x"]) - _r16(feed["z"])
    bounds = result_bounds(p, feed)
    for name, fn in (("t", np.tanh), ("e", _erf)):
        want, bound = fn(d64), bounds[name]
        assert np.all(bound <= 2.0 + 2.0**-6), (name, bound)
        _within(bound, want, name, device=got[name], held=fn(d16))


def _past_the_first_order() -> Program:
    """``clamp(1 / (x - z), -6, 6)`` and ``(a * 300) * 0.5``: a quotient by a difference the
    inputs' FP16 rounding may move by its whole value, and a product whose value plus its
    carried error passes 65504, each read by a further step (so the in-graph guard checks it
    for an overflow)."""
    b = Builder("checked")
    x, z, a = (b.slot(n, DType.F32, (3,)) for n in ("x", "z", "a"))
    b.output("y", b.min(b.max(b.div(1.0, b.sub(x, z)), -6.0), 6.0))
    b.output("r", b.mul(b.mul(a, 300.0), 0.5))
    return b.build()


def _past_the_first_order16(feed: dict[str, Array]) -> dict[str, Array]:
    """``_past_the_first_order`` in float64 on the inputs FP16 holds, each step's result
    rounded to FP16 (a device with no error but its roundings)."""

    x, z, a = (_r16(feed[n]) for n in ("x", "z", "a"))
    with np.errstate(divide="ignore"):
        q = _r16(1.0 / _r16(x - z))
    return {"y": np.clip(q, -6.0, 6.0), "r": _r16(_r16(a * 300.0) * 0.5)}


def test_a_value_the_guard_checks_is_bounded_by_its_range(engine: Engine) -> None:
    """Where the first-order carry promises nothing (a divisor whose bound reaches its value:
    1000.24 - 1000.49 is -0.25, FP16 holds -0.5; a product within its bound of 65504: 218.3 *
    300), the value is still one the in-graph guard checks: a step the device returns holds it
    finite, within +-65504, so the clamp after the quotient bounds it by its reach and the
    product's rounding is at most 65504's (before: promised nothing). The device, and a
    float64 evaluation of the FP16-rounded program written here, within the bound of the
    float64 result of the inputs as given; where the device's quotient is infinite (FP16 holds
    1000.2 - 1000.1 as 0) the step is refused, which is what the bound rests on."""
    p = plan(_past_the_first_order(), "intel-npu4")
    assert p.admitted, [str(r) for r in p.refusals]
    feed = {
        "x": np.array([1000.24, 3.0, 1e-3], np.float32),
        "z": np.array([1000.49, 1.0, 0.0], np.float32),
        "a": np.array([218.3, 1.5, -218.3], np.float32),
    }
    x64, z64, a64 = (feed[n].astype(np.float64) for n in ("x", "z", "a"))
    want = {"y": np.clip(1.0 / (x64 - z64), -6.0, 6.0), "r": a64 * 300.0 * 0.5}
    held = _past_the_first_order16(feed)
    entry = engine.add_entry(p, engine.load_weights({}))
    try:
        got = engine.step(entry, feed)
        with pytest.raises(PootError, match="overflow"):
            same = np.array([1000.2, 3.0, 1.0], np.float32)  # FP16 holds 1000.2 and 1000.1 as 1000
            engine.step(entry, {**feed, "x": same, "z": np.array([1000.1, 1.0, 0.0], np.float32)})
    finally:
        engine.remove_entry(entry)
    bounds = result_bounds(p, feed)
    assert np.all(np.isfinite(bounds["y"])) and np.all(np.isfinite(bounds["r"])), bounds
    assert np.all(bounds["y"] <= 12.0 + 2.0**-6), bounds["y"]  # the clamp's reach from y
    assert np.all(bounds["r"] <= 64.0), bounds["r"]  # 15 carried, 65504's roundings
    assert abs(float(got["y"][0]) - want["y"][0]) >= 1.0  # the device really moved
    for name in ("y", "r"):
        _within(bounds[name], want[name], name, device=got[name], held=held[name])


def test_a_normalized_row_keeps_its_range_where_its_divisor_is_lost(engine: Engine) -> None:
    """``(x - m) / sqrt(mean((x - m)^2) + eps)`` over rows whose spread (0.1 to 0.3 near 1000)
    is below what FP16 holds there (its spacing 0.5): the inputs' rounding moves every element by
    up to 0.25, so the divisor's bound passes its value and the first-order carry promises
    nothing (before: inf). Whatever the device's row, one term of its sum of squares bounds its
    own element's square: ``|o_i| <= sqrt(n)`` within the steps' FP16 roundings, so the bound is
    at most that range's reach. The device, and a float64 evaluation of the FP16-rounded
    program written here, within it of the float64 result of the inputs as given."""
    b = Builder("row_norm")  # the reduced divisor broadcast once, as an exporter writes it
    xv = b.slot("x", DType.F32, (ROWS, WIDTH))
    d = b.sub(xv, b.broadcast_in_dim(b.mul(b.reduce_sum(xv, 1), 1.0 / WIDTH), (ROWS, WIDTH), (0,)))
    var = b.mul(b.reduce_sum(b.mul(d, d), 1), 1.0 / WIDTH)
    b.output("y", b.div(d, b.broadcast_in_dim(b.sqrt(b.add(var, 1e-5)), (ROWS, WIDTH), (0,))))
    p = plan(b.build(), "intel-npu4")
    base = np.array([0.1, 0.3, 0.2, 0.0, 0.25, 0.05, 0.15, 0.3])
    x = np.array([1000.0 + base, 1000.0 - base, 999.9 + base[::-1], 1000.0 + 2 * base], np.float32)
    got = _one_step(engine, p, {"x": x})["y"]
    r16 = _r16
    want = _layer_norm64(x.astype(np.float64), False)
    x16 = r16(x)
    m16 = r16(r16(np.sum(x16, axis=1, keepdims=True)) * r16(1.0 / WIDTH))
    d16 = r16(x16 - m16)
    var16 = r16(r16(np.sum(r16(d16 * d16), axis=1, keepdims=True)) * r16(1.0 / WIDTH))
    held = r16(d16 / r16(np.sqrt(r16(var16 + r16(1e-5)))))
    bound = result_bounds(p, {"x": x})["y"]
    assert np.all(np.isfinite(bound)), bound
    reach = math.sqrt(WIDTH) * (1.0 + 2.0**-6)  # the row's range, its roundings with room
    assert np.all(bound <= reach + np.abs(want)), (bound, want)
    _within(bound, want, "y", device=got, held=held)


def test_a_normalized_row_whose_eps_flushes_keeps_its_range(engine: Engine) -> None:
    """MiniLM's LayerNorm: ``d / sqrt(sum(d * d) / n + 1e-12)``, whose eps FP16 flushes to 0,
    scaled by 0.5 (read by a further step, so the in-graph guard checks the quotient).
    The range rule resting on eps had nothing to rest on, so the bound was the in-graph
    guard's reach (about 65504, before). The device refuses a step whose quotient is not
    finite, so on a step it returns the divisor is a positive FP16 value, at least 2^-24, and
    one term of the sum of squares, the element's own, bounds the rest: ``|o| <= sqrt(n (1 +
    A 2^24))`` with ``A`` the steps' absolute parts, each half the smallest subnormal: here
    11 of them (the mean's power-of-two scale is moved into the sum, so each of the 8 scaled
    squares rounds on its own; the square, the sum and the add once), ``A`` about 5.5 2^-24:
    ``|o|`` under ``2.6 sqrt(n)``, ``|y|`` under ``1.3 sqrt(n)`` (1.5 with room).
    Rows of ordinary values, of values whose squares are FP16 subnormals (near the floor) and
    of one dominant element; the device, and a float64 evaluation of the FP16-rounded program
    written here, within the bound of the float64 result of the inputs as given."""
    b = Builder("row_norm_flushed_eps")
    xv = b.slot("x", DType.F32, (ROWS, WIDTH))
    mean = b.div(b.reduce_sum(xv, 1), float(WIDTH))
    d = b.sub(xv, b.broadcast_in_dim(mean, (ROWS, WIDTH), (0,)))
    var = b.div(b.reduce_sum(b.mul(d, d), 1), float(WIDTH))
    o = b.div(d, b.broadcast_in_dim(b.sqrt(b.add(var, 1e-12)), (ROWS, WIDTH), (0,)))
    b.output("y", b.mul(o, 0.5))  # read by a further step, as a LayerNorm's scale: checked
    p = plan(b.build(), "intel-npu4")
    base = np.array([0.5, -1.25, 3.5, 0.0, -0.75, 2.0, 1.0, -3.0])
    x = np.array(
        [base, base * 5e-4, np.eye(1, WIDTH, 3)[0] * 7.0 - 1.0, base[::-1] * 3e-4 + 0.25],
        np.float32,
    )
    got = _one_step(engine, p, {"x": x})["y"]
    x64 = x.astype(np.float64)
    d64 = x64 - x64.mean(axis=1, keepdims=True)
    want = 0.5 * d64 / np.sqrt((d64 * d64).mean(axis=1, keepdims=True) + 1e-12)
    x16 = _r16(x)
    d16 = _r16(x16 - _r16(_r16(np.sum(x16, axis=1, keepdims=True)) / WIDTH))
    var16 = _r16(_r16(np.sum(_r16(d16 * d16), axis=1, keepdims=True)) / WIDTH)
    assert _r16(1e-12) == 0.0  # FP16 holds the eps as 0
    held = _r16(0.5 * _r16(d16 / _r16(np.sqrt(var16))))
    bound = result_bounds(p, {"x": x})["y"]
    assert np.all(np.isfinite(bound)), bound
    assert np.all(bound <= 1.5 * math.sqrt(WIDTH) + np.abs(want)), (bound, want)
    _within(bound, want, "y", device=got, held=held)


def test_a_select_on_a_mask_that_may_flip_is_held_to_either_branch(engine: Engine) -> None:
    """``select(d >= 0, 100 + d, 100 - d)`` (``100 + |d|``) with ``d = a - b`` a cancellation
    of inputs near 1000, where FP16's input rounding (a spacing of 0.5) may flip the sign
    test. intel-npu4 legalizes the select as ``x m + y (1 - m)`` on a 0/1 mask, whose steps
    first-order carrying bounds by ``|x| + |y|`` (about 200) wherever the mask may flip. The
    device's mask is 0 or 1 exactly, so its value is one branch, each within its bound and
    apart from the other by ``2|d|`` there: a bound of a few of ``d``'s, which the device and
    a float64 evaluation of the FP16-rounded program keep (before: 200 and more)."""
    b = Builder("select_may_flip")
    a, c = b.slot("a", DType.F32, (8,)), b.slot("b", DType.F32, (8,))
    d = b.sub(a, c)
    b.output("y", b.select(b.ge(d, 0.0), b.add(d, 100.0), b.sub(100.0, d)))
    p = plan(b.build(), "intel-npu4")
    assert any(rw.rule.name == "select on a comparison's mask" for rw in p.rewrites)
    av = np.array([1000.0, 1000.2, 999.9, 1000.3, 1024.0, -1000.1, 0.0, 2.0**-20], np.float32)
    bv = np.array([1000.1, 1000.0, 1000.0, 1000.4, 1023.9, -1000.0, 0.0, -(2.0**-20)], np.float32)
    got = _one_step(engine, p, {"a": av, "b": bv})["y"]
    d64 = av.astype(np.float64) - bv.astype(np.float64)
    want = 100.0 + np.abs(d64)
    d16 = _r16(_r16(av) - _r16(bv))
    held = np.where(d16 >= 0, _r16(d16 + 100.0), _r16(100.0 - d16))
    bound = result_bounds(p, {"a": av, "b": bv})["y"]
    assert np.all(np.isfinite(bound)), bound
    assert np.all(bound <= 4.0), bound  # d's bound is at most 0.75 (two roundings near 1024)
    _within(bound, want, "y", device=got, held=held)


def test_a_sign_test_of_a_value_the_guard_holds_near_65504_is_bounded(engine: Engine) -> None:
    """``select(x >= 0, x 0 + 2, -2)``, ``x = a c`` near 65504: the product's bound passes
    FP16's range, so the in-graph guard's check holds it (within +-65504 on every step the
    device returns). The sign test is legalized on ``0 - x``; analysed as a rounded step its
    range passed FP16's edge, so the mask was promised nothing and the select held to either
    branch (4 here; ddddocr's LSTM gates, every element). As the exact step it is on FP16
    (``fp16.contract.zero_operand``: ``-x``) the range follows: the sign is sure wherever
    ``|x|`` passes its bound, and at ``x = 0`` (the product's absolute floor, 2^-25, reaches
    past it) either branch is held."""
    b = Builder("sign_near_65504")
    a, c = b.slot("a", DType.F32, (4,)), b.slot("c", DType.F32, (4,))
    x = b.mul(a, c)
    b.output("y", b.select(b.ge(x, 0.0), b.add(b.mul(x, 0.0), 2.0), -2.0))
    p = plan(b.build(), "intel-npu4")
    av = np.array([255.5, -255.5, 1.0, 0.0], np.float32)
    cv = np.array([256.25, 256.25, 1.0, 5.0], np.float32)
    got = _one_step(engine, p, {"a": av, "c": cv})["y"]
    want = np.where(av.astype(np.float64) * cv >= 0, 2.0, -2.0)
    bound = result_bounds(p, {"a": av, "c": cv})["y"]
    assert np.all(np.isfinite(bound)), bound
    assert np.all(bound[:3] <= 2.0**-7) and bound[3] <= 4.0 + 2.0**-7, bound
    _within(bound, want, "y", device=got)


def test_a_subtraction_from_a_literal_zero_is_exact_in_fp16(engine: Engine) -> None:
    """``0 - x`` of an FP16 value is ``-x`` exactly (so are ``x - 0`` and ``x + 0``): it
    rounds nothing, and its range is ``x``'s negated, not widened past FP16's edge by a
    rounding. ``x = a c = 65471.875`` (both FP16 values) holds 65472 (half an ulp, 32, is its
    bound), so ``z = (0 - x) 0.5`` is within 32 (its own rounding 16 and ``x``'s 16, halved);
    with ``0 - x`` rounded it was 48. And ``0 - x >= 0`` at ``x = 0`` (its absolute floor
    reaches past zero) is held to either branch, 2 apart: it was 4."""
    b = Builder("zero_minus_x")
    a, c = b.slot("a", DType.F32, (3,)), b.slot("c", DType.F32, (3,))
    x = b.mul(a, c)
    nx = b.sub(0.0, x)
    b.output("z", b.mul(nx, 0.5))
    b.output("y", b.select(b.ge(nx, 0.0), b.add(b.mul(x, 0.0), 2.0), -2.0))
    p = plan(b.build(), "intel-npu4")
    feed = {
        "a": np.array([255.5, -255.5, 0.0], np.float32),
        "c": np.array([256.25, 256.25, 5.0], np.float32),
    }
    got = _one_step(engine, p, feed)
    x64 = feed["a"].astype(np.float64) * feed["c"]
    bound = result_bounds(p, feed)
    assert np.all(bound["z"][:2] <= 32.0 + 2.0**-7), bound["z"]
    assert bound["y"][2] <= 2.0 + 2.0**-7, bound["y"]
    _within(bound["z"], -x64 * 0.5, "z", device=got["z"])
    _within(bound["y"], np.where(-x64 >= 0, 2.0, -2.0), "y", device=got["y"])
