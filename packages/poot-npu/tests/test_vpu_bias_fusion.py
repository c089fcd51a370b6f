"""A convolution and its bias add are one DPU task on the Intel NPU, rounded once
(``poot_planner.fp16.fusion``: npu_compiler's ``ConvertAddToScaleShift`` and
``FuseConvAndBias``), and the vpu-cpu stand-in rounds them so; marked ``npu_intel``, the same
cases on the NPU (skipped with "hardware unavailable" without one) say whether its compiler
fuses what the lowering hands it.

The inputs are chosen where one rounding and two differ: a convolution of exactly
1 + 2^-11 (a tie between two FP16 values, which rounds to 1) plus a bias of 2^-12 is
1 + 2^-10 rounded once and 1 rounded twice; a convolution of 65536 (past FP16's range, which
the DPU would clamp to 65504) plus a bias of -16384 is 49152 rounded once and 49120 after a
clamp. The expected values are numpy's: float64 sums rounded to float16."""

from __future__ import annotations

import numpy as np
import pytest
from poot_codegen.intel.graph import lower
from poot_engine import Engine
from poot_ir import (
    Builder,
    DType,
    NarrowingRangeIntermediate,
    NarrowingRangeResult,
    Program,
)
from poot_planner import plan
from poot_planner.fp16.fusion import bias_fusions
from poot_planner.fp16.narrowing import intermediate_guards

F32 = DType.F32
TIE = 2.0**-11  # 1 + TIE is halfway between FP16's 1 and 1 + 2^-10


def _conv_bias(
    *, bias_slot: bool = False, conv_read_twice: bool = False, scaled: bool = False
) -> Program:
    """``conv(x, w) + b`` over two input channels and one output channel, as the ONNX
    importer writes a Conv with a bias; ``b`` a weight (or a per-step slot). ``scaled``: the
    output is the sum times 0.75, so the sum is an intermediate the in-graph guard checks."""
    b = Builder("conv_bias")
    x = b.slot("x", F32, (1, 2, 2, 2))
    w = b.weight("w", F32, (1, 2, 1, 1))
    bias = (b.slot if bias_slot else b.weight)("b", F32, (1,))
    y = b.conv(x, w)
    total = b.add(y, b.broadcast_in_dim(bias, (1, 1, 2, 2), (1,)))
    b.output("y", b.mul(total, 0.75) if scaled else total)
    if conv_read_twice:
        b.output("conv", b.mul(y, 0.75))
    return b.build()


def _inputs(first: float, second: float) -> np.ndarray:
    x = np.empty((1, 2, 2, 2), np.float32)
    x[0, 0], x[0, 1] = first, second
    return x


_W = {"w": np.ones((1, 2, 1, 1), np.float32)}


def _once(x: np.ndarray, bias: float) -> np.ndarray:
    total = x.astype(np.float64).sum(axis=1, keepdims=True) + bias
    return total.astype(np.float16).astype(np.float32)


def test_the_convolution_and_its_bias_round_once(vpu_engine: Engine) -> None:
    entry = vpu_engine.add_entry(
        _conv_bias(), vpu_engine.load_weights({**_W, "b": np.float32([TIE / 2])})
    )
    x = _inputs(1.0, TIE)
    got = vpu_engine.step(entry, {"x": x})["y"]
    np.testing.assert_array_equal(got, _once(x, TIE / 2))
    assert got[0, 0, 0, 0] == 1.0 + 2 * TIE  # twice: round(1 + 2^-11) = 1, then 1 + 2^-12 = 1


def test_a_convolution_past_fp16s_range_is_not_clamped_before_its_bias(vpu_engine: Engine) -> None:
    weights = vpu_engine.load_weights({**_W, "b": np.float32([-16384.0])})
    entry = vpu_engine.add_entry(_conv_bias(), weights)
    x = _inputs(32768.0, 32768.0)  # 65536: the DPU would clamp it to 65504 alone
    got = vpu_engine.step(entry, {"x": x})["y"]
    np.testing.assert_array_equal(got, _once(x, -16384.0))
    assert got[0, 0, 0, 0] == 49152.0


@pytest.mark.parametrize("scaled", [True, False], ids=["intermediate", "result"])
def test_an_overflow_of_the_fused_sum_is_refused(vpu_engine: Engine, scaled: bool) -> None:
    """81920 clamped to 65504: the in-graph guard names the add; as the program's result,
    the host's result check refuses it."""
    weights = vpu_engine.load_weights({**_W, "b": np.float32([16384.0])})
    entry = vpu_engine.add_entry(_conv_bias(scaled=scaled), weights)
    refusal = NarrowingRangeIntermediate if scaled else NarrowingRangeResult
    with pytest.raises(refusal, match="add" if scaled else "result 'y'"):
        vpu_engine.step(entry, {"x": _inputs(32768.0, 32768.0)})


@pytest.mark.parametrize("kind", ["conv_read_twice", "bias_slot"])
def test_an_unfused_convolution_rounds_before_its_bias(vpu_engine: Engine, kind: str) -> None:
    """The compiler fuses only a convolution read by its bias add alone, with a constant
    bias: otherwise the convolution's FP16 value exists, rounded, and the add rounds again."""
    if kind == "bias_slot":
        program = _conv_bias(bias_slot=True)
        entry, feed = vpu_engine.add_entry(program, vpu_engine.load_weights(_W)), {"b": [TIE / 2]}
    else:
        program = _conv_bias(conv_read_twice=True)
        weights = vpu_engine.load_weights({**_W, "b": np.float32([TIE / 2])})
        entry, feed = vpu_engine.add_entry(program, weights), {}
    x = _inputs(1.0, TIE)
    got = vpu_engine.step(entry, {"x": x, **{k: np.float32(v) for k, v in feed.items()}})["y"]
    conv = x.astype(np.float64).sum(axis=1, keepdims=True).astype(np.float16)
    twice = (conv.astype(np.float64) + TIE / 2).astype(np.float16)
    np.testing.assert_array_equal(got, twice.astype(np.float32))
    assert got[0, 0, 0, 0] == 1.0


def test_the_npu_graph_keeps_the_pattern_its_compiler_fuses() -> None:
    """In the graph handed to the NPU compiler the bias is a [1, C, 1, 1] value and the
    convolution's result has one reader, the add, though the graph has a guard (the sum is an
    intermediate, checked): the guard does not read the convolution."""
    weights = {**_W, "b": np.float32([0.5])}
    planned = plan(_conv_bias(scaled=True), "intel-npu4", constants=weights)
    assert [f.source for f in bias_fusions(planned.program, weights)] == ["b"]
    assert planned.narrowing is not None
    guards = intermediate_guards(planned.legalized, planned.narrowing, planned.score_bound)
    assert guards
    model = lower(planned.program, guards=guards, constants=weights)
    (conv,) = [op for op in model.get_ops() if op.get_type_name() == "Convolution"]
    (reader,) = conv.output(0).get_target_inputs()
    add = reader.get_node()
    assert add.get_type_name() == "Add"
    bias = add.input_value(1 - reader.get_index())
    assert list(bias.get_shape()) == [1, 1, 1, 1]
