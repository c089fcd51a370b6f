"""log and ONNX's Softplus, LogSoftmax and Mish legalized on intel-npu4, on the vpu-cpu stand-in
(OpenVINO's CPU plugin with in-graph FP16 rounding), verified by the engine (``verify="always"``):
log on every positive FP16 value and softplus at its edges within their derived relative bounds
against the exact function, and an input off the domain refused in the graph
(``NarrowingRangeIntermediate``), never answered with a finite value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from poot_engine import Engine
from poot_ir import AbsRel, NarrowingRangeIntermediate, Program, evaluate
from poot_npu.registry import make_device
from poot_onnx import import_model
from poot_planner import TARGETS, plan
from poot_planner.legalize.logarithm import SOFTPLUS_TOP

INTEL = TARGETS["intel-npu4"]
POSITIVE = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
EDGES = np.array(
    [-65472.0, -1000.0, -100.0, -17.0, -16.0, -9.7, -8.0, -1.0, -(2**-24), 0.0, 2**-24,
     2**-14, 0.5, 1.0, 11.0, 11.1, 12.0, 50.0, SOFTPLUS_TOP],
    dtype=np.float16,
).astype(np.float32)  # fmt: skip
# (-65472, not -65504: logsoftmax's subtract of two same-shape values there is exactly -65504,
# which the NPU's DPU also gives for a saturated overflow: refused, issue 24 item 4)


def _model(n: int) -> Program:
    """One graph: Log of ``p``; Softplus, Mish and LogSoftmax (rows of 8) of ``x``."""
    nodes = [
        helper.make_node("Log", ["p"], ["log"]),
        helper.make_node("Softplus", ["x"], ["softplus"]),
        helper.make_node("Mish", ["x"], ["mish"]),
        helper.make_node("Reshape", ["x", "rows"], ["xr"]),
        helper.make_node("LogSoftmax", ["xr"], ["logsoftmax"], axis=-1),
    ]
    rows = helper.make_tensor("rows", TensorProto.INT64, [2], [n // 8, 8])
    graph = helper.make_graph(
        nodes,
        "logs",
        [
            helper.make_tensor_value_info("p", TensorProto.FLOAT, [POSITIVE.size]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [n]),
        ],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in
         ("log", "softplus", "mish", "logsoftmax")],
        initializer=[rows],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return import_model(model).program


def _x() -> np.ndarray:
    rng = np.random.default_rng(11)
    x = np.concatenate([EDGES, -EDGES[np.abs(EDGES) <= SOFTPLUS_TOP], rng.normal(0, 6, 256)])
    x = x[: x.size // 8 * 8]
    return x.astype(np.float16).astype(np.float32)


def _ratio(got: np.ndarray, exact: np.ndarray, bound: object) -> float:
    assert isinstance(bound, AbsRel)
    return float(np.max(np.abs(got - exact) / (bound.abs + bound.rel * np.abs(exact))))


@pytest.mark.slow  # one graph of 459 equations: its CPU-plugin compile takes 10-20 s
def test_log_softplus_mish_logsoftmax_on_vpu_cpu(tmp_path: Path) -> None:
    x = _x()
    program = _model(x.size)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    bounds = {rw.rule.carried: rw.derivation.bound for rw in p.rewrites if rw.rule.carried}
    inputs = {"p": POSITIVE, "x": x}
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(p, engine.load_weights({}))
        got = {k: v.astype(np.float64) for k, v in engine.step(entry, inputs).items()}
        # off the domain: refused in the graph, before any result is returned
        for name, bad in (("p", 0.0), ("p", -1.0), ("x", 88.75), ("x", 65504.0)):
            worse = {k: v.copy() for k, v in inputs.items()}
            worse[name][3] = bad
            with pytest.raises(NarrowingRangeIntermediate):
                engine.step(entry, worse)
    assert _ratio(got["log"], np.log(POSITIVE.astype(np.float64)), bounds["log"]) <= 1.0
    exact = np.logaddexp(0.0, x.astype(np.float64))
    assert _ratio(got["softplus"], exact, bounds["softplus"]) <= 1.0
    want = evaluate(program, inputs)
    assert INTEL.narrowing is not None
    for name in ("mish", "logsoftmax"):
        w = want[name].astype(np.float64)
        assert np.linalg.norm(got[name] - w) <= INTEL.narrowing.normwise * np.linalg.norm(w)
