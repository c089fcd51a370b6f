"""Weights an FP16 device could not hold, handled as converters handle them at import: a
BatchNormalization's statistics folded into one scale and shift per channel, and one-element
initializers as literals (so the literal and sentinel rules of the specification apply), with
``max(x, -inf)`` and ``min(x, +inf)`` exact identities. Expected values come from onnx's
reference evaluator running the original model, never from the importer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from poot_ir import Literal, Prim, UnsupportedOnnx
from poot_onnx import import_model
from test_onnx import F16, init, model, prims, run, vi

FP16_MAX = 65504.0
EPS32 = float(np.finfo(np.float32).eps)


def _reference(m: Any, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    names = [o.name for o in m.graph.output]
    with np.errstate(all="ignore"):  # inf - inf and the like are the point here
        got = ReferenceEvaluator(m).run(None, inputs)
    return dict(zip(names, got, strict=True))


# -- BatchNormalization ---------------------------------------------------------------------

#: Per channel: variances at and beyond FP16's largest value (PaddleOCR's detector has 1.05e7),
#: a zero variance (only epsilon keeps it finite), a tiny one, and scales of both signs and 0.
_VAR = np.array([65504.0, 1.05e7, 0.0, 1e-3, 3.0e38], np.float32)
_SCALE = np.array([1.5, -2.0, 0.25, 0.0, 7.0], np.float32)
_BIAS = np.array([0.5, -1.0, 3.0, 2.0, -0.125], np.float32)
_MEAN = np.array([100.0, -3000.0, 0.5, 1e4, 2.0], np.float32)


def _bn_model(
    stats_as_inputs: bool,
    eps: float = 1e-5,
    shape: tuple[int, ...] = (2, 5, 3, 4),
    opset: int = 18,
) -> Any:
    names = ["scale", "bias", "mean", "var"]
    node = helper.make_node("BatchNormalization", ["x", *names], ["y"], epsilon=eps, name="bn")
    c = shape[1]
    if stats_as_inputs:
        return model([node], [vi("x", list(shape)), *(vi(n, [c]) for n in names)], ["y"])
    vals = (_SCALE, _BIAS, _MEAN, _VAR)
    inits = [init(n, v[:c]) for n, v in zip(names, vals, strict=True)]
    return model([node], [vi("x", list(shape))], ["y"], inits, opset=opset)


def _bn_input(shape: tuple[int, ...]) -> np.ndarray:
    """Values around each channel's mean and far from it, signed zeros included."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32) * 1e3
    x = x + _MEAN[: shape[1]].reshape(1, -1, *(1,) * (len(shape) - 2))
    x.reshape(-1)[:4] = [0.0, -0.0, 65504.0, -1e6]
    return x


# A model of opset 14 too (the fold graph has its own opset). Not opset 9: onnx's reference
# BatchNormalization_9 applies its default momentum to the batch's own statistics, which is
# not the inference the one-output node asks for, so it is no reference there.
@pytest.mark.parametrize(
    ("shape", "opset"), [((2, 5, 3, 4), 18), ((3, 5), 18), ((1, 4, 7), 18), ((2, 5, 3, 4), 14)]
)
def test_batchnorm_with_known_statistics_is_a_scale_and_shift_within_range(
    shape: tuple[int, ...], opset: int
) -> None:
    m = _bn_model(stats_as_inputs=False, shape=shape, opset=opset)
    imp = import_model(m)
    # the statistics are not in the program: one multiply and one add per element, and every
    # weight is a folded scale or shift (named after the node's output), none a variance
    assert Prim.SQRT not in prims(imp) and Prim.RECIP not in prims(imp)
    assert sorted(imp.weights) == ["y.scale", "y.shift"]
    c = shape[1]
    # those FP16 can hold: the largest scale is 7 / sqrt(3e38) ... 0.25 / sqrt(1e-5), the
    # largest shift |bias - mean * scale| is 2 + 1e4 * 0 and 1 + 3000 * 2 / sqrt(1.05e7)
    for w in imp.weights.values():
        assert np.all(np.isfinite(w)) and float(np.abs(w).max()) <= FP16_MAX
    x = _bn_input(shape)
    got, want = run(imp, x=x)["y"], _reference(m, x=x)["y"]
    # x * a + b against (x - mean) / sqrt(var + eps) * scale + bias: a few float32 roundings of
    # the terms' magnitudes (|x a|, |mean a|, |bias|: the fused form cancels the first two)
    bshape = (1, c, *(1,) * (len(shape) - 2))
    a = (_SCALE[:c] / np.sqrt(_VAR[:c].astype(np.float64) + 1e-5)).reshape(bshape)
    mag = np.abs(x * a) + np.abs(_MEAN[:c].reshape(bshape) * a) + np.abs(_BIAS[:c].reshape(bshape))
    assert np.all(np.abs(got.astype(np.float64) - want) <= 8 * EPS32 * mag + 1e-30)


def test_batchnorm_of_f16_folds_in_f16() -> None:
    # a variance FP16 can hold at its edge, and one whose epsilon is most of it
    var = np.array([65504.0, 0.0, 2.0], np.float16)
    vals = {"s": [1.0, -2.0, 0.5], "b": [0.25, 3.0, -1.0], "m": [10.0, -0.5, 100.0], "v": var}
    node = helper.make_node("BatchNormalization", ["x", *vals], ["y"], epsilon=1e-3)
    inits = [init(k, v, np.float16) for k, v in vals.items()]
    m = model([node], [vi("x", [2, 3, 4], F16)], ["y"], inits)
    imp = import_model(m)
    assert sorted(imp.weights) == ["y.scale", "y.shift"]
    assert all(w.dtype == np.float16 for w in imp.weights.values())
    x = (np.random.default_rng(3).standard_normal((2, 3, 4)) * 50).astype(np.float16)
    got, want = run(imp, x=x)["y"], _reference(m, x=x)["y"]
    # FP16 roundings of the same terms as above (eps 2^-10)
    a = np.array(vals["s"]) / np.sqrt(var.astype(np.float64) + 1e-3)
    mag = np.abs(x * a[None, :, None]) + np.abs(np.array(vals["m"]) * a)[None, :, None] + 4
    assert np.all(np.abs(got.astype(np.float64) - want) <= 8 * 2.0**-10 * mag)


def test_batchnorm_with_statistics_at_run_time_keeps_them_as_values() -> None:
    m = _bn_model(stats_as_inputs=True)
    imp = import_model(m)
    assert Prim.SQRT in prims(imp) and imp.weights == {}
    x = _bn_input((2, 5, 3, 4))
    stats = {"scale": _SCALE, "bias": _BIAS, "mean": _MEAN, "var": _VAR}
    got, want = run(imp, x=x, **stats)["y"], _reference(m, x=x, **stats)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batchnorm_of_f16_with_f32_statistics_is_a_typed_refusal() -> None:
    # opset 15 lets the statistics' type differ from the input's; only statistics of x's type
    # fold (the scale and shift multiply x), and the unfused path refuses the mix, typed
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")
    inits = [init(n, v[:2]) for n, v in zip("sbmv", (_SCALE, _BIAS, _MEAN, _VAR), strict=True)]
    m = model([node], [vi("x", [1, 2, 3], F16)], ["y"], inits)
    with pytest.raises(UnsupportedOnnx) as err:
        import_model(m)
    assert err.value.node == "bn"


# -- one-element initializers as literals ---------------------------------------------------

_EDGES = np.array(
    [[-np.inf, np.inf, np.nan, -0.0], [0.0, FP16_MAX, -1e30, 1.5]], np.float32
)  # fmt: skip


def _binary(op: str, value: float, shape: tuple[int, ...] = ()) -> Any:
    node = helper.make_node(op, ["x", "c"], ["y"], name="n")
    return model([node], [vi("x", [2, 4])], ["y"], [init("c", np.full(shape, value))])


def _literals(imp: Any) -> list[float]:
    return [a.as_float() for e in imp.program.eqns for a in e.inputs if isinstance(a, Literal)]


def _same(got: np.ndarray, want: np.ndarray, signs: bool = True) -> None:
    """Equal elementwise, NaN where NaN, and (with ``signs``) the sign of every number, zeros
    included. Not of a NaN: ``inf - inf`` computed by the reference evaluator's numpy has the
    sign its SIMD loop gives it (x86's default NaN is negative; issue 26), the oracle's is
    canonical (``poot_ir.nan_bits``)."""
    np.testing.assert_array_equal(got, want)
    number = ~np.isnan(want)
    assert not signs or np.array_equal(np.signbit(got)[number], np.signbit(want)[number])


@pytest.mark.parametrize("value", [-np.inf, np.inf, np.nan, 1e-6, 1e30, -0.0])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_a_one_element_initializer_is_a_literal(
    op: str, value: float, shape: tuple[int, ...]
) -> None:
    m = _binary(op, value, shape)
    imp = import_model(m)
    assert imp.weights == {}  # no weight: the constant is inline
    identity = (op, value) in (("Max", -np.inf), ("Min", np.inf))
    lits = _literals(imp)
    if identity:  # y is x itself: no equation at all
        assert imp.program.eqns == () and lits == []
    else:
        want = float(np.float32(value))
        assert len(lits) == 1
        assert lits[0] == want or (np.isnan(want) and np.isnan(lits[0]))
    got, want = run(imp, x=_EDGES)["y"], _reference(m, x=_EDGES)["y"]
    # the evaluator's np.maximum leaves the sign of a tied zero to numpy; the oracle's max is
    # IEEE 754-2019's (max(-0, +0) = +0, ``poot_ir.oracle``)
    _same(got, want, signs=not (op in ("Max", "Min") and value == 0))


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_of_minus_inf_and_min_of_inf_are_dropped_exactly(op: str) -> None:
    value = -np.inf if op == "Max" else np.inf
    node = helper.make_node(op, ["x", "c", "z"], ["y"])
    m = model([node], [vi("x", [2, 4]), vi("z", [4])], ["y"], [init("c", value)])
    imp = import_model(m)
    assert value not in _literals(imp)
    assert prims(imp).count(Prim.MAX if op == "Max" else Prim.MIN) == 1  # of x and z only
    z = np.array([np.nan, -np.inf, 0.0, -0.0], np.float32)
    got, want = run(imp, x=_EDGES, z=z)["y"], _reference(m, x=_EDGES, z=z)["y"]
    _same(got, want)


def test_max_with_a_finite_or_opposite_infinite_literal_stays() -> None:
    for value in (np.inf, -FP16_MAX, 0.0):
        imp = import_model(_binary("Max", value))
        assert Prim.MAX in prims(imp) and _literals(imp) == [value]


def test_an_initializer_that_widens_the_broadcast_stays_a_weight() -> None:
    # (1, 1, 1) against x's (2, 4): a literal would lose the rank, so it is a weight
    m = _binary("Add", -np.inf, (1, 1, 1))
    imp = import_model(m)
    assert list(imp.weights) == ["c"]
    _same(run(imp, x=_EDGES)["y"], _reference(m, x=_EDGES)["y"])


def test_a_larger_uniform_initializer_stays_a_weight_under_its_name() -> None:
    m = _binary("Add", 2.0, (4,))
    imp = import_model(m)
    assert list(imp.weights) == ["c"] and imp.weights["c"].shape == (4,)
    _same(run(imp, x=_EDGES)["y"], _reference(m, x=_EDGES)["y"])
