"""xdna2's sigmoid rule on the oracle: the importer's select(x >= 0, r, e r) rewritten as
g / (1 + g), g = exp(clamp(x, -104, 88)), with a derived abs + rel bound over the whole finite
line, against numpy float64 at the edges (zeros, tiny values, where float32's sigmoid
saturates, the clamps, the largest magnitudes, -inf); a select of any other shape stays
refused."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import AbsRel, Builder, DType, Program, evaluate
from poot_ir.ops import sigmoid
from poot_planner import TARGETS, RefusalKind, plan
from poot_planner.error_bounds import result_bounds
from poot_planner.legalize import logistic

XDNA2 = TARGETS["xdna2"]
BIG = float(np.finfo(np.float32).max)
EDGES = np.array(
    [-BIG, -1e30, -1e6, -110.0, -104.0, -103.97, -103.0, -90.0, -88.0, -87.5, -87.34, -87.0,
     -86.9, -50.0, -20.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 1e-7, 0.5, 1.0, 16.0, 16.6, 17.0,
     17.33, 17.34, 20.0, 50.0, 86.9, 87.0, 88.0, 88.5, 1e6, 1e30, BIG, -math.inf],
    dtype=np.float32,
)  # fmt: skip


def sigmoid_program(n: int) -> Program:
    b = Builder("sigmoid")
    b.output("y", sigmoid(b, b.slot("x", DType.F32, (n,))))
    return b.build()


def exact(x: np.ndarray) -> np.ndarray:
    """sigmoid in float64, without overflow: exp(-log(1 + e^-x))."""
    return np.exp(-np.logaddexp(0.0, -x.astype(np.float64)))


def inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spread = rng.normal(0, 40, 200) * 10.0 ** rng.integers(0, 4, 200)
    return np.concatenate([EDGES, spread.astype(np.float32)])


def _bound() -> AbsRel:
    p = plan(sigmoid_program(4), XDNA2)
    (rw,) = [rw for rw in p.rewrites if rw.primitive == "select"]
    assert isinstance(rw.derivation.bound, AbsRel)
    return rw.derivation.bound


def test_the_bound_is_absolute_plus_relative_over_the_whole_line() -> None:
    bound = _bound()
    # exp's absolute 2e-6 where sigmoid is small; g's relative 1e-5, twice through the
    # quotient, near 1
    assert 2e-6 <= bound.abs < 2.5e-6 and 1e-5 < bound.rel < 3e-5
    assert "bound abs" in plan(sigmoid_program(4), XDNA2).rewrites[-1].describe()


def test_sigmoid_on_xdna2_within_its_derived_bound() -> None:
    x = inputs(0)
    program = sigmoid_program(x.size)
    assert not plan(program, XDNA2, legalization=False).admitted  # select is refused
    p = plan(program, XDNA2)
    assert p.admitted, [str(r) for r in p.refusals]
    bound = _bound()
    got = evaluate(p.program, {"x": x})["y"].astype(np.float64)
    want = exact(x)
    assert np.all(np.abs(got - want) <= bound.abs + bound.rel * want)
    assert got[x == 0].tolist() == [0.5, 0.5] and np.all((got >= 0) & (got <= 1))
    # the running analysis promises something at every input the device does not refuse,
    # -inf included, and holds against the original program
    run = result_bounds(p, {"x": x})["y"]
    source = evaluate(program, {"x": x})["y"].astype(np.float64)
    assert np.all(np.isfinite(run))
    assert np.all(np.abs(got - source) <= run)


def test_the_chain_saturates_where_float32_sigmoid_does() -> None:
    # on the oracle's exp (no flush): 1 exactly where float32's sigmoid is 1, 0 at -inf and
    # below -104 (exp(-104) is 0 in float32); the device's flush is the xdna-host test's
    x = np.array([17.5, 20.0, 88.0, 1e30, BIG, -104.0, -1e30, -BIG, -math.inf], np.float32)
    got = evaluate(plan(sigmoid_program(x.size), XDNA2).program, {"x": x})["y"]
    assert exact(x).astype(np.float32).tolist() == [1.0] * 5 + [0.0] * 4
    assert got.tolist() == [1.0] * 5 + [0.0] * 4


def test_the_derivation_adds_each_clamp_its_own_error() -> None:
    # past a clamp the chain computes one value; the exact function is within sigmoid(-104)
    # of it below and 1 - sigmoid(88) above, both far inside the bound
    assert logistic.sigmoid(logistic.LOW) < 1e-45 and 1 - logistic.sigmoid(logistic.HIGH) < 1e-38
    assert logistic.sigmoid(-800.0) == 0.0 and logistic.sigmoid(800.0) == 1.0


finite = st.floats(
    min_value=-float(np.finfo(np.float32).max),
    max_value=float(np.finfo(np.float32).max),
    width=32,
    allow_subnormal=False,
)
edges = st.sampled_from([float(v) for v in EDGES])


@given(st.lists(st.one_of(finite, edges), min_size=8, max_size=8))
@settings(derandomize=True, max_examples=60, deadline=None)
def test_fuzz_within_the_bound(values: list[float]) -> None:
    x = np.array(values, np.float32)
    bound = _bound()
    got = evaluate(plan(sigmoid_program(8), XDNA2).program, {"x": x})["y"].astype(np.float64)
    want = exact(x)
    assert np.all(np.abs(got - want) <= bound.abs + bound.rel * want)


def test_a_select_of_another_shape_stays_refused_on_xdna2() -> None:
    # the same branches on a different predicate (x >= 1) are no sigmoid
    b = Builder("not_sigmoid")
    x = b.slot("x", DType.F32, (8,))
    e = b.exp(b.neg(b.abs(x)))
    r = b.recip(b.add(e, 1.0))
    b.output("y", b.select(b.ge(x, 1.0), r, b.mul(e, r)))
    p = plan(b.build(), XDNA2)
    assert [(r.primitive, r.kind) for r in p.refusals] == [
        ("select", RefusalKind.UNSUPPORTED_PRIMITIVE)
    ]
