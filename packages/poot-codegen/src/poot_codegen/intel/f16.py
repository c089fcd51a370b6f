"""FP16 emulation on OpenVINO's CPU plugin: the stand-in for the Intel NPU's FP16 arithmetic.

Emulation (``intel_graph.lower(..., emulate_f16=True)``) is for the CPU stand-in only.
OpenVINO's CPU plugin computes f16 in f32 and deletes convert pairs, so a plain F16 graph on it
shows no FP16 rounding at all. In emulation every F16 value is carried as f32 inside the graph:
an F16 parameter is converted to f32 on entry (exact), an F16 result back to f16 on exit (exact,
the value is already an FP16 value), F16 literals and iotas are f32 constants holding the FP16
value (all of that is ``intel.graph``'s), and after every equation that computes a new F16 value
(add, sub, mul, div, recip, sqrt, exp, log, tanh, erf, reduce_sum, matmul, a convert to F16;
``computes_f16``) the f32 result is rounded to FP16 in the graph (``round_to_f16``) exactly as
``numpy.astype(np.float16)`` rounds: to nearest even, 65504 < |x| < 65520 to 65504 and
|x| >= 65520 to infinity, subnormals to multiples of 2^-24, signs of zeros kept, NaN stays NaN
(its payload is not promised). The tests prove this rounding bit for bit on the compiled CPU
graph over 2^20 random f32 bit patterns and every FP16 boundary, tie and neighbour, and the
saturating one (below) clamped to +-65504, NaN kept, over the same edges. Exact F16
equations (neg, abs, max, min, select, comparisons, reduce_max, data movement, and an add or a
subtraction of a literal zero: ``x``, ``-x``) are not rounded.

What emulation proves: for add, sub, mul, div and sqrt of FP16 operands, the f32 result rounded
once equals the correctly rounded FP16 result (f32 has at least 2 * 11 + 2 bits), so those
equations match an ideal per-op FP16 device (the oracle) bit for bit. The CPU plugin divides
f32 as ``x * (1 / y)`` (not correctly rounded, within 1 ulp); for FP16 operands that only
misrounds a quotient exactly halfway between two FP16 subnormals, which emulation detects
exactly and corrects (``fix_subnormal_ties``; tested over every pair of significands). exp, log,
tanh and erf are the CPU's f32 functions rounded to FP16, within an FP16 ulp or so of the oracle.
What it does not prove: anything about the NPU's own FP16 units (their rounding, subnormal
handling, NaN and zero signs), or its accumulation order and width in reduce_sum and matmul;
emulation accumulates those in f32 and rounds once at the end, the NPU may round partial sums
to FP16.

Where the NPU compiler puts an equation on the DPU (``poot_planner.fp16.saturation``: an add or subtract of two
same-shape values, NCE Eltwise; a matmul, a convolution; a reduce_sum), its FP16 output goes
through the PPE with the clamp on (npu_compiler NPU40XX ``expand_dpu_config_invariant_ppe.cpp``:
``clampMode = PPEFpConvClampMode::ON`` for an F16 output): an overflow is +-65504, not an
infinity, and so is an infinite result (an infinite operand). Emulation does the same. A
reduce_sum over an axis other than the channel axis (``pooled``) is lowered by the compiler as
AvgPool then Multiply by N (``convert_reduce_to_pooling.cpp``): emulation rounds the mean to
FP16 (saturating, a DPU task) and then the product by N (a SHAVE Multiply: infinite on
overflow), two roundings. Which axis the compiler takes for the channel is assumed here to be
axis 1 of a value of rank 2 or more (NCHW's C; a rank-1 value is all channel), to be settled by the
``npu_intel`` measurement of both axes (``packages/poot-npu/tests/test_vpu_saturation.py``).

A convolution the NPU compiler fuses with its bias add (``poot_planner.fp16.fusion``) is one
DPU task there: ``intel.graph`` leaves the convolution's f32 result unrounded and rounds the
add's once, saturating, as the PPE does after adding the bias to the FP32 accumulator.

Every node added here is named ``<equation>:f16.<role>`` (``e7:f16.t``, ``e7:f16.tie.mid``),
but the scalar constants, which a graph makes once and shares (``Scalars``: ``f16:k``).
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import numpy as np
from poot_ir.core import EXACT_ARITHMETIC, MOVEMENT, Eqn, Prim
from poot_ir.dtypes import DType
from poot_planner.fp16.contract import zero_operand
from poot_planner.fp16.saturation import pooled_summands, saturates

from poot_codegen.intel.quiet import opset16 as ops

__all__ = [
    "Scalars",
    "computes_f16",
    "fix_subnormal_ties",
    "pooled",
    "round_result",
    "round_to_f16",
]

Node: TypeAlias = Any
"""An OpenVINO node or output port: openvino has no type stubs, so ``Any`` stays here."""

#: What never rounds in FP16: data movement, choosing and signs, and ``iota``'s counter.
_EXACT_F16: Final = MOVEMENT | EXACT_ARITHMETIC | {Prim.IOTA}


def computes_f16(e: Eqn, f32_is_fp16: bool = False) -> bool:
    """Whether an equation with an F16 result can produce a value FP16 does not hold. With
    ``f32_is_fp16`` (every F32 value already holds an FP16 value, as on the NPU) a convert
    between F32 and F16 is exact too."""
    if e.prim is Prim.CONVERT:
        exact = (DType.F16, DType.F32) if f32_is_fp16 else (DType.F16,)
        return e.inputs[0].dtype not in exact
    if zero_operand(e) is not None:  # x + 0, x - 0, 0 - x of an FP16 value: one already
        return False
    return e.prim not in _EXACT_F16


def pooled(e: Eqn) -> int | None:
    """For a reduce_sum the compiler lowers as AvgPool then Multiply, the number of summands N
    (``poot_planner.fp16.saturation.pooled_summands``, which the derived contract reads too);
    None otherwise."""
    return pooled_summands(e)


class Scalars:
    """The f32 scalar constants of one graph's FP16 emulation and of its stand-in guard (and
    their int64 axes and shapes), each made once (named ``f16:<role>``) and shared by every
    rounding and check. A constant per rounding made the emulated graph a third constants, and
    a guard's per check a sixth of MobileNetV3-small's, each one more node for every pass of
    the CPU plugin's compile."""

    def __init__(self) -> None:
        self._made: dict[str, tuple[float, Node]] = {}
        self._vectors: dict[str, Node] = {}
        #: each value ``round_to_f16`` made: the magnitude of the f32 value it rounded and
        #: whether it saturated, which the stand-in guard's overflow check reads (``intel.guard``)
        self.magnitudes: dict[Node, tuple[Node, bool]] = {}

    def __call__(self, value: float, role: str) -> Node:
        made = self._made.get(role)
        if made is None:
            made = (value, _f32(value, f"f16:{role}"))
            self._made[role] = made
        # one role, one value: a role reused for another value would share the wrong constant
        assert made[0] == value or (np.isnan(made[0]) and np.isnan(value)), role
        return made[1]

    def i64(self, values: tuple[int, ...], role: str) -> Node:
        """An int64 vector of ``values`` (axes, a shape), made once per graph like a scalar."""
        key = f"{role}{values}"
        made = self._vectors.get(key)
        if made is None:
            made = ops.constant(np.array(values, np.int64).reshape(-1), name=f"f16:{key}")
            self._vectors[key] = made
        return made


def round_result(
    e: Eqn,
    xs: list[Node],
    out: Node,
    name: str,
    *,
    f32_is_fp16: bool = False,
    scalars: Scalars | None = None,
) -> Node:
    """The f32 result ``out`` of equation ``e`` (named ``name``, inputs ``xs``), whose result is
    F16 (or F32 carried as FP16), as the FP16 value an ideal FP16 device gives: rounded when
    ``computes_f16``, with ``fix_subnormal_ties`` for a div; ``out`` itself for an exact
    equation. ``scalars``: the graph's shared constants (None: constants of its own)."""
    if not computes_f16(e, f32_is_fp16):
        return out
    c = scalars if scalars is not None else Scalars()
    n = pooled(e)
    if n is not None and n > 1:  # AvgPool (a DPU task) then Multiply by N (SHAVE): two roundings
        mean = ops.divide(out, _f32(float(n), f"{name}:f16.n"), name=f"{name}:f16.mean")
        avg = round_to_f16(mean, f"{name}:f16.pool", saturate=True, scalars=c)
        times = ops.multiply(avg, _f32(float(n), f"{name}:f16.times"), name=f"{name}:f16.x_n")
        return round_to_f16(times, f"{name}:f16", scalars=c)
    rounded = round_to_f16(out, f"{name}:f16", saturate=saturates(e), scalars=c)
    if e.prim is Prim.DIV:
        rounded = fix_subnormal_ties(xs[0], xs[1], out, rounded, f"{name}:f16", scalars=c)
    return rounded


def _f32(value: float, name: str) -> Node:
    return ops.constant(np.asarray(np.float32(value)), name=name)


def round_to_f16(
    x: Node, name: str, saturate: bool = False, scalars: Scalars | None = None
) -> Node:
    """The f32 value ``x`` rounded to the nearest FP16 value, as ``astype(np.float16)``; with
    ``saturate`` (a DPU output through the PPE clamp) a value past FP16's range, infinities
    included, is +-65504 instead. ``scalars``: the graph's shared constants (None: its own).

    Normal range (|x| >= 2^-14): Veltkamp's split ``t = x * 8193; t - (t - x)`` rounds to 11
    significant bits, ties to even. Subnormal range: ``round_half_even(x * 2^24) * 2^-24``
    (powers of two are exact; Round keeps the sign of a zero). |x| >= 65520 becomes ``x * inf``
    (a signed infinity), or with ``saturate`` ``clamp(x, -65504, 65504)``. A NaN takes the
    normal branch and stays NaN (it is never "big", so the clamp, which makes a NaN -65504
    on the CPU plugin, never chooses it). Twelve ops, every one an elementwise op the CPU
    plugin fuses into one snippet (a Sign op, which it does not fuse, split the snippets and
    put a layout reorder on each side of every saturating rounding).
    """
    c = scalars if scalars is not None else Scalars()
    a = ops.abs(x, name=f"{name}.abs")
    t = ops.multiply(x, c(8193.0, "k"), name=f"{name}.t")
    normal = ops.subtract(t, ops.subtract(t, x, name=f"{name}.tx"), name=f"{name}.normal")
    scaled = ops.multiply(x, c(2.0**24, "up"), name=f"{name}.up")
    rounded = ops.round(scaled, "half_to_even", name=f"{name}.round")
    sub = ops.multiply(rounded, c(2.0**-24, "down"), name=f"{name}.sub")
    tiny = ops.less(a, c(2.0**-14, "min_normal"), name=f"{name}.is_sub")
    r = ops.select(tiny, sub, normal, name=f"{name}.finite")
    # 65520 <= |x|, not |x| >= 65520: the CPU plugin's Greater and GreaterEqual are true
    # where an operand is NaN (its Less and LessEqual false, as IEEE has it), which made a NaN
    # "big" and a saturating rounding of it -65504
    big = ops.less_equal(c(65520.0, "overflow"), a, name=f"{name}.is_inf")
    if saturate:
        inf = ops.clamp(x, -65504.0, 65504.0, name=f"{name}.sat")
    else:
        inf = ops.multiply(x, c(np.inf, "inf"), name=f"{name}.inf")
    out = ops.select(big, inf, r, name=f"{name}.out")
    c.magnitudes[out.output(0)] = (a.output(0), saturate)
    return out


def fix_subnormal_ties(
    x: Node, y: Node, q: Node, rounded: Node, name: str, scalars: Scalars | None = None
) -> Node:
    """Correct ``rounded`` where ``x / y`` is exactly halfway between two FP16 subnormals.

    The CPU plugin divides as ``x * (1 / y)`` (two roundings), so a quotient that is exactly an
    odd multiple of 2^-25 can land a hair off the tie and round the wrong way. For FP16
    operands this is the only case that goes wrong (a normal FP16 quotient is never a tie, and
    a near tie is farther from it than the f32 error). The tie test is exact: ``mid * |y|`` has
    at most 23 bits and its scaling by 2^-24 stays normal, so it equals ``|x|`` only at a tie.
    """

    c = scalars if scalars is not None else Scalars()
    aq = ops.abs(q, name=f"{name}.tie.aq")
    fl = ops.floor(
        ops.multiply(aq, c(2.0**24, "tie.up"), name=f"{name}.tie.units"), name=f"{name}.tie.floor"
    )
    mid = ops.add(fl, c(0.5, "tie.half"), name=f"{name}.tie.mid")
    back = ops.multiply(
        ops.multiply(mid, ops.abs(y, name=f"{name}.tie.ay"), name=f"{name}.tie.my"),
        c(2.0**-24, "tie.down"),
        name=f"{name}.tie.back",
    )
    exact = ops.equal(back, ops.abs(x, name=f"{name}.tie.ax"), name=f"{name}.tie.exact")
    small = ops.less(aq, c(2.0**-14, "tie.min_normal"), name=f"{name}.tie.small")
    tie = ops.logical_and(exact, small, name=f"{name}.tie")
    # the even one of fl and fl + 1: fl + (fl mod 2), with the quotient's sign
    half = ops.floor(
        ops.multiply(fl, c(0.5, "tie.halve"), name=f"{name}.tie.fl2"), name=f"{name}.tie.fl2f"
    )
    odd = ops.subtract(
        fl, ops.multiply(half, c(2.0, "tie.two"), name=f"{name}.tie.even"), name=f"{name}.tie.odd"
    )
    even = ops.multiply(
        ops.add(fl, odd, name=f"{name}.tie.sum"), c(2.0**-24, "tie.scale"), name=f"{name}.tie.mag"
    )
    sign = ops.select(
        ops.less(q, c(0.0, "tie.zero"), name=f"{name}.tie.neg"),
        c(-1.0, "tie.m1"),
        c(1.0, "tie.p1"),
        name=f"{name}.tie.sign",
    )
    fixed = ops.multiply(even, sign, name=f"{name}.tie.fixed")
    return ops.select(tie, fixed, rounded, name=f"{name}.tie.out")
