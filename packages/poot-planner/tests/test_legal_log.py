"""log and ONNX's Softplus legalized on intel-npu4 (``poot_planner.legalize.logarithm``) on the oracle:
the reduction exact on every positive FP16 value, the rewrites within their derived relative
bounds against the exact function (float64) on every positive FP16 value (log) and at the
edges (softplus), the running error analysis holding against the original program, and an
input off the domain made NaN (refused in the graph), never a finite value."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from poot_ir import AbsRel, Builder, DType, Output, Program, evaluate, validate
from poot_onnx import import_model
from poot_planner import TARGETS, narrow_to_device_precision, plan
from poot_planner.emit import Emit
from poot_planner.error_bounds import result_bounds
from poot_planner.legalize.logarithm import K_RANGE, M_HI, M_LO, SOFTPLUS_TOP, reduce
from poot_planner.legalize.rules import Numerics

INTEL = TARGETS["intel-npu4"]
F32, F16 = DType.F32, DType.F16
#: every positive finite FP16 value, subnormals included (31,743 of them)
POSITIVE = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
#: softplus' edges: exp(-|v|) below FP16's subnormals, at its normals, near 0, FP16's exp
#: overflow (11.09), the rule's top (F32's exp overflow) and just past it
SOFTPLUS_EDGES = np.array(
    [-65504.0, -1000.0, -100.0, -17.0, -16.6, -16.0, -9.7, -8.0, -4.0, -1.0, -2**-10,
     -(2**-24), 0.0, -0.0, 2**-24, 2**-14, 0.5, 1.0, 4.0, 11.0, 11.1, 12.0, 50.0, 88.0,
     SOFTPLUS_TOP],
    dtype=np.float16,
).astype(np.float32)  # fmt: skip


def _log(n: int) -> Program:
    b = Builder("log")
    b.output("y", b.log(b.slot("x", F32, (n,))))
    return b.build()


def _onnx(op: str, shape: list[int], **attrs: object) -> Program:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return import_model(model).program


def _within(got: np.ndarray, exact: np.ndarray, bound: AbsRel) -> np.ndarray:
    """Each element's error over its bound (<= 1 inside)."""
    return np.abs(got - exact) / (bound.abs + bound.rel * np.abs(exact))


def test_the_reduction_is_exact_on_every_positive_fp16() -> None:
    b = Builder("reduce")
    x = b.slot("x", F16, (POSITIVE.size,))
    b.output("y", b.neg(x))
    base = b.build()
    em = Emit(1 + max(e.out.id for e in base.eqns), F16)
    m, k = reduce(em, x)
    program = validate(
        Program("reduce", base.args, tuple(em.eqns), (Output("m", m), Output("k", k)))
    )
    got = evaluate(program, {"x": POSITIVE.astype(np.float16)})
    mm, kk = got["m"].astype(np.float64), got["k"].astype(np.float64)
    assert np.array_equal(kk, np.round(kk)) and K_RANGE[0] <= kk.min() <= kk.max() <= K_RANGE[1]
    assert mm.min() >= M_LO and mm.max() < M_HI
    assert np.array_equal(mm * 2.0**kk, POSITIVE.astype(np.float64))


def test_log_within_its_derived_relative_bound_on_every_positive_fp16() -> None:
    program = _log(POSITIVE.size)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = p.rewrites
    assert rw.rule.numerics is Numerics.REDUCED
    bound = rw.derivation.bound
    # relative, as log's own error: an absolute floor below FP16's subnormal spacing's order
    assert isinstance(bound, AbsRel) and bound.abs < 1e-6 and 0 < bound.rel < 2.0**-7
    got = evaluate(p.program, {"x": POSITIVE})["y"].astype(np.float64)
    exact = np.log(POSITIVE.astype(np.float64))
    ratio = _within(got, exact, bound)
    assert ratio.max() <= 1.0, (POSITIVE[np.argmax(ratio)], ratio.max())
    assert got[POSITIVE == 1.0] == 0.0  # log 1 is exactly 0: k = 0, u = 0


def test_log_off_its_domain_is_nan_and_promised_nothing() -> None:
    x = np.array([0.0, -0.0, -(2.0**-24), -1.0, -65504.0, 2.0**-26, 1.0], np.float32)
    p = plan(_log(x.size), INTEL)
    got = evaluate(p.program, {"x": x})["y"]
    # 2^-26 is 0 once in FP16: NaN as log(0) is -inf; never a finite value off the domain
    assert np.all(np.isnan(got[:-1])) and got[-1] == 0.0
    run = result_bounds(p, {"x": x})["y"]
    assert np.all(np.isinf(run[:-1])) and np.isfinite(run[-1])


def test_the_running_bound_of_log_holds_against_the_fp16_oracle() -> None:
    p = plan(_log(POSITIVE.size), INTEL)
    assert INTEL.narrowing is not None
    run = result_bounds(p, {"x": POSITIVE})["y"]
    assert np.all(np.isfinite(run))
    got = evaluate(p.program, {"x": POSITIVE})["y"].astype(np.float64)
    narrowed = narrow_to_device_precision(p.source, INTEL.narrowing)
    want = evaluate(narrowed, {"x": POSITIVE})["y"].astype(np.float64)
    assert np.all(np.abs(got - want) <= run)
    # and it carries an operand's error: log of a rewritten recip's value adds recip's error
    b = Builder("log_recip")
    b.output("y", b.log(b.recip(b.slot("x", F32, (POSITIVE.size,)))))
    q = plan(b.build(), INTEL)
    wider = result_bounds(q, {"x": POSITIVE})["y"]
    finite = np.isfinite(wider)
    assert finite.mean() > 0.5 and np.all(wider[finite] > run[finite])


def test_softplus_as_onnx_writes_it_within_its_relative_bound() -> None:
    x = np.concatenate([SOFTPLUS_EDGES, -SOFTPLUS_EDGES, np.linspace(-20, 20, 401)])
    x = x.astype(np.float16).astype(np.float32)
    x = x[x <= SOFTPLUS_TOP]
    program = _onnx("Softplus", [x.size])
    assert [e.prim.value for e in program.eqns] == ["exp", "add", "log"]  # onnx's function body
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = p.rewrites
    assert rw.rule.carried == "softplus"
    bound = rw.derivation.bound
    assert isinstance(bound, AbsRel) and bound.abs < 1e-6 and bound.rel < 2.0**-6
    got = evaluate(p.program, {"x": x})["y"].astype(np.float64)
    exact = np.logaddexp(0.0, x.astype(np.float64))
    ratio = _within(got, exact, bound)
    assert ratio.max() <= 1.0, (x[np.argmax(ratio)], ratio.max())
    # against the original on the oracle in F32 (whose own 1 + exp(v) rounds: 2^-24 at most)
    original = evaluate(program, {"x": x})["y"].astype(np.float64)
    assert np.all(np.abs(got - original) <= bound.abs + bound.rel * np.abs(exact) + 2.0**-23)
    # the running analysis: within it, against the exact value as well
    run = result_bounds(p, {"x": x})["y"]
    assert np.all(np.isfinite(run)) and np.all(np.abs(got - exact) <= run)


@pytest.mark.parametrize("v", [88.75, 100.0, 65504.0])
def test_softplus_past_f32s_exp_overflow_is_nan_not_finite(v: float) -> None:
    # the original is +inf there on the oracle (F32's exp overflows): never a finite answer
    x = np.array([v, 1.0], np.float32)
    program = _onnx("Softplus", [2])
    assert np.isposinf(evaluate(program, {"x": x})["y"][0])
    p = plan(program, INTEL)
    got = evaluate(p.program, {"x": x})["y"]
    assert np.isnan(got[0]) and np.isfinite(got[1])
    assert np.isinf(result_bounds(p, {"x": x})["y"][0])


@pytest.mark.parametrize(("op", "attrs"), [("Log", {}), ("LogSoftmax", {"axis": -1}), ("Mish", {})])
def test_onnx_ops_through_log_are_admitted_within_the_narrowing_contract(
    op: str, attrs: dict[str, object]
) -> None:
    rng = np.random.default_rng(7)
    edges = SOFTPLUS_EDGES[np.abs(SOFTPLUS_EDGES) <= 88]
    x = np.concatenate([edges, rng.normal(0, 4, 256 - edges.size)])
    x = x.astype(np.float16).astype(np.float32).reshape(8, -1)
    if op == "Log":
        x = np.abs(x) + np.float32(2.0**-24)
    program = _onnx(op, list(x.shape), **attrs)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    assert "log" in {rw.primitive for rw in p.rewrites}
    got = evaluate(p.program, {"x": x})["y"].astype(np.float64)
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    assert INTEL.narrowing is not None
    assert np.linalg.norm(got - want) <= INTEL.narrowing.normwise * np.linalg.norm(want)
    run = result_bounds(p, {"x": x})["y"]
    assert np.all(np.isfinite(run))
    if op == "Log":  # elementwise and carried whole: the running bound, against the F32 oracle
        assert np.all(np.abs(got - want) <= run)
