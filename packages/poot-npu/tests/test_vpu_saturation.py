"""Saturation seen (issue 24 item 4): on the NPU an FP16 overflow of a DPU task (equal-shape add
and subtract, matmul, reduce_sum) is +-65504, the PPE clamp, not infinity; so a value of
magnitude 65504 counts as overflow in the in-graph guard and in the host result check, and
``(a + c) * 0.5`` at a = c = 40000 is refused typed instead of returning 32752.

On vpu-cpu (the stand-in saturates as the DPU does) and, marked ``npu_intel``, on the NPU
itself (skipped with "hardware unavailable" without one): an overflowing add, matmul and
reduce_sum over each axis refused with ``NarrowingRangeIntermediate``; and the reduce_sum over
both axes measured on values where one FP16 rounding and AvgPool-then-Multiply's two differ, so
the first hardware run says which the compiler does on each axis; and a NaN intermediate (0/0)
refused, which on the NPU shows whether its LessEqual kernel flags NaN."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import (
    Builder,
    DType,
    NarrowingRangeIntermediate,
    NarrowingRangeResult,
    Program,
)
from poot_npu import VpuDevice

F32 = DType.F32


def _halved(kind: str) -> Program:
    """``kind``'s overflow, read by a multiply (so the in-graph guard checks it; by 0.75, not
    a power of two, which legalization would move into a sum)."""
    b = Builder(f"halved_{kind}")
    a = b.slot("a", F32, (4, 8))
    match kind:
        case "add":
            y = b.add(a, b.slot("c", F32, (4, 8)))
        case "matmul":
            y = b.matmul(a, b.slot("m", F32, (8, 4)))
        case "rows":
            y = b.reduce_sum(a, 1)
        case _:
            y = b.reduce_sum(a, 0)
    b.output("y", b.mul(y, 0.75))
    return b.build()


_INPUTS = {
    "add": {"a": 40000.0, "c": 40000.0},
    "matmul": {"a": 10000.0, "m": 1.0},
    "rows": {"a": 10000.0},
    "cols": {"a": 20000.0},
}


@pytest.mark.parametrize("kind", list(_INPUTS))
def test_an_overflow_the_dpu_saturates_is_refused(vpu_engine: Engine, kind: str) -> None:
    program = _halved(kind)
    entry = vpu_engine.add_entry(program)
    shapes = {a.name: a.var.shape for a in program.args}
    ins = {k: np.full(shapes[k], v, np.float32) for k, v in _INPUTS[kind].items()}
    with pytest.raises(NarrowingRangeIntermediate):
        vpu_engine.step(entry, ins)


def test_65504_itself_is_taken_for_a_saturated_overflow(vpu_engine: Engine) -> None:
    # an exact 65504 cannot be told from a saturated overflow: refused in the graph (a value
    # another equation reads) and on the host (a result); before, both were returned
    entry = vpu_engine.add_entry(_halved("add"))
    at = {"a": np.full((4, 8), 32752.0, np.float32), "c": np.full((4, 8), 32752.0, np.float32)}
    with pytest.raises(NarrowingRangeIntermediate):
        vpu_engine.step(entry, at)


def test_a_matmul_result_of_65504_is_refused_on_the_host(vpu_engine: Engine) -> None:
    # the host holds a matmul's or reduce_sum's result below 65504 (not an add's: the host
    # cannot tell a saturation from a mask sentinel carried through a select)
    b = Builder("product")
    b.output("y", b.matmul(b.slot("a", F32, (4, 8)), b.slot("m", F32, (8, 4))))
    entry = vpu_engine.add_entry(b.build())
    ones = np.ones((8, 4), np.float32)
    with pytest.raises(NarrowingRangeResult):
        vpu_engine.step(entry, {"a": np.full((4, 8), 8188.0, np.float32), "m": ones})  # 65504
    got = vpu_engine.step(entry, {"a": np.full((4, 8), 8184.0, np.float32), "m": ones})["y"]
    assert np.all(got == 65472.0)  # the largest FP16 below 65504


@pytest.mark.parametrize("axis", [0, 1])
def test_reduce_sum_rounding_on_each_axis(
    vpu_engine: Engine, axis: int, record_property: Any
) -> None:
    """Measured: one FP16 rounding of the sum, or AvgPool's mean rounded then times N rounded
    again. The stand-in assumes axis 1 is the channel (one rounding) and axis 0 pooled (two);
    on the NPU either is accepted and the answer recorded (``rounding``)."""
    b = Builder(f"sum_{axis}")
    x = b.slot("x", DType.F16, (3, 3))
    b.output("y", b.reduce_sum(x, axis))
    entry = vpu_engine.add_entry(b.build())
    col = np.array([1656.0, 1515.0, 1387.0])
    xs = (col[:, None] * np.ones(3) if axis == 0 else col[None, :] * np.ones((3, 1))).astype(
        np.float16
    )
    got = vpu_engine.step(entry, {"x": xs})["y"].astype(np.float64)
    sums = xs.astype(np.float64).sum(axis=axis)
    once = sums.astype(np.float16).astype(np.float64)
    twice = (sums / 3).astype(np.float16).astype(np.float64) * 3
    twice = twice.astype(np.float16).astype(np.float64)
    assert not np.array_equal(once, twice)  # the values tell the two apart
    found = "once" if np.array_equal(got, once) else "twice" if np.array_equal(got, twice) else ""
    assert found, (got, once, twice)
    record_property("rounding", found)
    device = vpu_engine.device
    if isinstance(device, VpuDevice) and device.stand_in:
        assert found == ("twice" if axis == 0 else "once")


@pytest.mark.parametrize("kind", ["add", "conv"])
def test_an_f16_programs_saturated_result_is_refused(vpu_engine: Engine, kind: str) -> None:
    """A program written in F16 meets the same clamp: its DPU result at 65504 (an add of two
    40000s, a convolution whose sum overflows) is refused on the host, typed, where the oracle's
    overflow is an infinity (it came back as 65504, unflagged)."""
    f16 = DType.F16
    b = Builder(f"f16_{kind}")
    a = b.slot("a", f16, (1, 1, 4, 4))
    if kind == "add":
        y = b.add(a, b.slot("c", f16, (1, 1, 4, 4)))
        feed = {"a": np.full((1, 1, 4, 4), 40000, np.float16)}
        feed["c"] = feed["a"].copy()
    else:
        y = b.conv(a, b.slot("k", f16, (1, 1, 2, 2)))
        feed = {
            "a": np.full((1, 1, 4, 4), 30000, np.float16),
            "k": np.ones((1, 1, 2, 2), np.float16),
        }
    b.output("y", y)
    entry = vpu_engine.add_entry(b.build())
    with pytest.raises(NarrowingRangeResult) as err:
        vpu_engine.step(entry, feed)
    assert err.value.argument == "y" and abs(err.value.value) == 65504.0


def test_a_nan_intermediate_is_flagged(vpu_engine: Engine) -> None:
    """The overflow check flags NaN only if ``abs(v) <= limit`` is false for it, which on the
    NPU is the SHAVE ``eltwise_less_equal`` kernel (a prebuilt binary) and the PPE's handling
    of NaN, neither of which upstream documents. ``(a - c) / (a - c)`` at a = c is 0/0 from
    finite operands: NaN, which must be refused, not returned. The divisor has a second use
    (the numerator), so the compiler puts no epsilon clamp in front of it."""
    b = Builder("zero_over_zero")
    z = b.sub(b.slot("a", F32, (4, 8)), b.slot("c", F32, (4, 8)))
    b.output("y", b.mul(b.div(z, z), 0.75))
    entry = vpu_engine.add_entry(b.build())
    same = np.full((4, 8), 3.0, np.float32)
    with pytest.raises(NarrowingRangeIntermediate, match="div"):
        vpu_engine.step(entry, {"a": same, "c": same})
    got = vpu_engine.step(entry, {"a": same * 2, "c": same})["y"]
    np.testing.assert_array_equal(got, np.full((4, 8), 0.75, np.float32))  # 3/3, exact


def test_a_weight_at_65504_excuses_its_sum_and_one_inside_does_not(vpu_engine: Engine) -> None:
    """An add's check is excused where an operand is at 65504 already (a sentinel carried),
    a baked weight too; a weight whose every element is inside excuses nothing, and the graph
    leaves out the test of it. 65504 + 1 is 65504 in FP16: kept; 60000 + 6000 saturates."""
    b = Builder("weight_at_the_edge")
    x, w = b.slot("x", F32, (2,)), b.weight("w", F32, (2,))
    b.output("y", b.mul(b.add(x, w), 0.75))
    program = b.build()
    at_edge = vpu_engine.add_entry(program, vpu_engine.load_weights({"w": np.float32([65504, 1])}))
    got = vpu_engine.step(at_edge, {"x": np.float32([1, 1])})["y"]
    want = (np.float64([65504, 2]) * 0.75).astype(np.float16)  # 49128 is 49120 in FP16
    np.testing.assert_array_equal(got, want.astype(np.float32))
    inside = vpu_engine.add_entry(program, vpu_engine.load_weights({"w": np.float32([60000, 1])}))
    with pytest.raises(NarrowingRangeIntermediate, match="add"):
        vpu_engine.step(inside, {"x": np.float32([6000, 1])})


@pytest.mark.parametrize(
    ("kind", "inside", "past"),
    [
        # an add (DPU): 65488 is the tie of 65472 and 65504 and rounds to 65472, in range;
        # 65488.015625 rounds to 65504, the DPU's clamp: refused
        ("add", ([65472.0], [16.0]), ([65472.0], [16.015625])),
        # a matmul (DPU, f32 sums): one f32 step past the tie, 65488 + 2^-8, is refused
        ("matmul", ([65472.0, 16.0, 0.0], [1.0] * 3), ([65472.0, 16.0, 2.0**-8], [1.0] * 3)),
        # a multiply (SHAVE): 65508.4375 rounds to 65504, in range; 65520 is infinite
        ("mul", ([1.0205078125], [64192.0]), ([4680.0], [14.0])),
    ],
)
def test_an_overflow_check_at_its_edge(
    vpu_engine: Engine, kind: str, inside: tuple[list[float], ...], past: tuple[list[float], ...]
) -> None:
    """The in-graph check of a rounded value at the last f32 values that round inside FP16's
    range and the first that do not (the stand-in's check reads the magnitude its rounding
    took, ``intel.guard``); every operand here is an FP16 value, each result exact in f32."""
    n = len(inside[0])
    b = Builder(f"edge_{kind}")
    x = b.slot("x", F32, (1, n) if kind == "matmul" else (n,))
    y = b.slot("y", F32, (n, 1) if kind == "matmul" else (n,))
    value = {"add": b.add, "mul": b.mul, "matmul": b.matmul}[kind](x, y)
    b.output("out", b.mul(value, 0.75))
    entry = vpu_engine.add_entry(b.build())

    def feed(xs: list[float], ys: list[float]) -> dict[str, np.ndarray]:
        return {"x": np.float32(xs).reshape(x.shape), "y": np.float32(ys).reshape(y.shape)}

    got = vpu_engine.step(entry, feed(*inside))["out"]
    exact = {"add": np.add, "mul": np.multiply}.get(kind, np.dot)(*map(np.float64, inside))
    want = (np.float16(np.sum(exact)).astype(np.float64) * 0.75).astype(np.float16)
    np.testing.assert_array_equal(got.ravel(), np.float32([want]))
    with pytest.raises(NarrowingRangeIntermediate, match=kind):
        vpu_engine.step(entry, feed(*past))
