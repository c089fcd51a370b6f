"""xdna2's sigmoid rule on the oracle: the importer's select(x >= 0, r, e r) rewritten as
1 / (1 + exp(-x)) with a derived absolute bound on [-88, 87], against the original equation at
the edges (zeros, tiny values, the domain's ends); a select of any other shape stays refused."""

from __future__ import annotations

import numpy as np
from poot_ir import AbsRel, Builder, DType, Program, evaluate
from poot_onnx.logic import sigmoid
from poot_planner import TARGETS, RefusalKind, plan
from poot_planner.error_bounds import result_bounds

XDNA2 = TARGETS["xdna2"]
EDGES = np.array(
    [-88.0, -87.5, -87.0, -86.9, -50.0, -20.0, -1.0, -1e-30, -0.0, 0.0, 1e-38, 1e-30, 1e-7,
     0.5, 1.0, 16.0, 17.0, 20.0, 50.0, 86.9, 87.0],
    dtype=np.float32,
)  # fmt: skip


def sigmoid_program(n: int) -> Program:
    b = Builder("sigmoid")
    b.output("y", sigmoid(b, b.slot("x", DType.F32, (n,))))
    return b.build()


def inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([EDGES, rng.normal(0, 12, 235).astype(np.float32).clip(-88, 87)])


def test_sigmoid_on_xdna2_within_its_derived_bound() -> None:
    x = inputs(0)
    program = sigmoid_program(x.size)
    assert not plan(program, XDNA2, legalization=False).admitted  # select is refused
    p = plan(program, XDNA2)
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = [rw for rw in p.rewrites if rw.primitive == "select"]
    bound = rw.derivation.bound
    assert isinstance(bound, AbsRel) and 0 < bound.abs < 1e-5 and bound.rel == 0
    got = evaluate(p.program, {"x": x})["y"].astype(np.float64)
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    exact = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert np.max(np.abs(got - want)) <= bound.abs
    assert np.max(np.abs(got - exact)) <= bound.abs
    assert got[x == 0].tolist() == [0.5, 0.5] and np.all((got >= 0) & (got <= 1))
    run = result_bounds(p, {"x": x})["y"]
    # nothing promised where a step leaves its domain: a subnormal quotient (x < -87.34) or
    # neg of the F32 subnormal 1e-38 (the device flags both); within it elsewhere
    promised = np.isfinite(run)
    assert x[~promised].tolist() == [-88.0, -87.5, np.float32(1e-38)]
    assert np.all(np.abs(got - want)[promised] <= run[promised])


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
