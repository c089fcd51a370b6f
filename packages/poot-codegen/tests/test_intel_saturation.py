"""The FP16 emulation of the vpu-cpu stand-in does what the NPU's DPU does (issue 24 item 4):
an overflow of an equal-shape add or subtract, a matmul or a reduce_sum saturates to +-65504
(the PPE clamp of npu_compiler NPU40XX ``expand_dpu_config_invariant_ppe.cpp``) where a SHAVE
multiply still overflows to infinity, and a reduce_sum over a non-channel axis rounds twice
(AvgPool then Multiply by N, ``convert_reduce_to_pooling.cpp``). The expected values are
computed here in numpy (float64 then float16), not read from the emulation."""

from __future__ import annotations

import numpy as np
from poot_codegen.intel.graph import CPU_STANDIN_CONFIG, lower, program_result_name
from poot_ir import Builder, DType, Program, evaluate
from test_intel_graph import CORE  # the one OpenVINO core of the codegen tests

F16 = DType.F16


def _run(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import openvino as ov

    cm = CORE.compile_model(lower(program, emulate_f16=True), "CPU", CPU_STANDIN_CONFIG)
    req = cm.create_infer_request()
    for i, port in enumerate(cm.inputs):
        req.set_input_tensor(i, ov.Tensor(np.array(inputs[port.get_any_name()], order="C")))
    req.infer()
    out = {}
    for i, port in enumerate(cm.outputs):
        name = program_result_name(set(port.get_names()))
        assert name is not None
        out[name] = req.get_output_tensor(i).data.copy()
    return out


def test_dpu_class_overflow_saturates_and_a_multiply_does_not() -> None:
    b = Builder("saturation")
    a, c = b.slot("a", F16, (2, 4)), b.slot("c", F16, (2, 4))
    m = b.slot("m", F16, (4, 3))
    b.output("add", b.add(a, c))
    b.output("sub", b.sub(a, b.neg(c)))
    b.output("mul", b.mul(a, c))
    b.output("matmul", b.matmul(a, m))
    b.output("row_sum", b.reduce_sum(a, 1))
    program = b.build()
    big = np.full((2, 4), 40000.0, np.float16)
    big[1] = -40000.0
    ins = {"a": big, "c": big, "m": np.full((4, 3), 2.0, np.float16)}
    got = _run(program, ins)
    want = evaluate(program, ins)  # the oracle: infinite, as an ideal FP16 unit
    for name in ("add", "sub", "matmul", "row_sum"):
        assert np.all(np.isinf(want[name])), name
        sat = np.where(want[name] > 0, 65504.0, -65504.0).astype(np.float16)
        assert np.array_equal(got[name], sat), (name, got[name])
    assert np.array_equal(got["mul"], want["mul"])  # SHAVE: +inf, as the oracle


def test_a_reduce_sum_over_a_non_channel_axis_rounds_twice() -> None:
    b = Builder("pooled")
    x = b.slot("x", F16, (3, 2))
    b.output("col_sum", b.reduce_sum(x, 0))  # AvgPool then Multiply by 3
    b.output("row_sum", b.reduce_sum(x, 1))  # the channel axis: one rounding
    program = b.build()
    xs = np.array([[1656.0, 1.0], [1515.0, 2.0], [1387.0, 3.0]], np.float16)
    got = _run(program, {"x": xs})
    sums = xs.astype(np.float64).sum(axis=0)
    twice = (sums / 3).astype(np.float16).astype(np.float64) * 3
    assert np.array_equal(got["col_sum"], twice.astype(np.float16))
    assert float(got["col_sum"][0]) == 4556.0 != float(np.float16(4558.0))  # 4560 once
    assert np.array_equal(got["row_sum"], xs.astype(np.float64).sum(axis=1).astype(np.float16))
