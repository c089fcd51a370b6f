"""The ``host-cpu`` target: the host CPU running one compiled OpenVINO graph in F32
(``poot_npu.host.HostDevice``), the worker for what an NPU refuses; the oracle stays the judge.

The graph is the same opset16 lowering the Intel path uses (``poot_codegen.intel.graph``),
without narrowing or FP16 emulation, compiled by OpenVINO's CPU plugin with
``INFERENCE_PRECISION_HINT`` f32 (no bf16 or f16 on a processor that has them). F32, I32 and
BOOL are carried as they are; F16 and BF16 are refused (the plugin computes them in f32, so
they round differently from the oracle) and such a span stays on the oracle.

Each row's contract is the one the conformance suite measures against the oracle on this
device at the domain edges (``tests/conformance``: the capability cases, the random programs,
the edge fuzz): IEEE divide (but a mean's), square root, compare and conversion are bit exact (the plugin
rounds them correctly; it does not flush subnormal operands, but it does flush a subnormal
constant: an equation with a subnormal literal is refused, and goes to the oracle), and so is negation, a zero's sign included (a
product by a one-element constant and a Negative are kept from the plugin's PowerStatic node,
``x * c + 0``, by ``poot_npu.host``), and so are add, subtract and multiply alone, but the
plugin fuses a multiply into the add that reads it (one rounding where the oracle has two) and
regroups sums and products with constants (``(x + b) * c`` as ``x * c + b * c``), so a sum's row
is in units of its larger operand and a product's is an ulp; exp, log, tanh and
erf are the plugin's vectorized approximations, within a few F32 ulps (``_SMOOTH``, an abs+rel
bound above the largest error measured); a sum, a matmul, a convolution and a window sum add
in the plugin's own order and with fused multiply-adds, so they are bounded by the classic
accumulation bound (``ScaledSum``: one F32 unit per term of the sum of the terms' magnitudes,
``poot_ir.numerics.accumulated``), which ``poot_planner.error_bounds`` carries through a
program. Data movement is bit exact in every dtype it carries. A NaN's payload is not promised
(the oracle's are canonical, the plugin's are the processor's), so float rows that could make
one hold on ``FiniteInputs`` or tighter and compare NaN to NaN there.
"""

from __future__ import annotations

import math

from poot_ir import DType, Prim
from poot_ir.numerics import (
    AbsRel,
    AnyInput,
    BitExact,
    Contract,
    FiniteInputs,
    Interval,
    LargerOperandUlps,
    NotNaN,
    PositiveNormal,
    ScaledSum,
)

from poot_planner.target import Capability, KernelClass, Target

F32 = frozenset({DType.F32})
I32 = frozenset({DType.I32})
NUMBERS = frozenset({DType.F32, DType.I32})
CARRIED = frozenset({DType.F32, DType.I32, DType.BOOL})
_G = KernelClass.GRAPH_OP
#: The plugin contracts a multiply and the add or subtract that reads it into one fused
#: multiply-add (its eltwise and snippet kernels): the product is not rounded on its own, the
#: sum once. And it regroups a chain of sums and products with constants: ``(x + b) * c + d``
#: comes back as ``x * c + (b * c + d)``, bit for bit (measured on 2026.4: a conv's bias then a
#: folded batch norm's scale and shift, in ocr_det), as OpenVINO's lin_op_sequence_fusion.cpp
#: rewrites, which also make ``(x * a) * b`` into ``x * (a * b)``. So a
#: constant's share of a sum is rounded on its own, at its own magnitude: a sum is within
#: units of its larger operand, not of its result, which is far smaller where the two cancel
#: (three units: ``(x + b) * c + d`` regrouped rounds ``x * c``, ``b * c`` and ``b * c + d``
#: where the oracle rounds ``x + b``, its product and its sum; at most 1.7 units measured over
#: chains of up to seven steps at cancellation), and a product within two halves of its
#: result (a constant product rounded, then the product by it). Alone, each is bit exact
#: (measured). I32 wraps, exactly.
_PRODUCT = AbsRel(2.0**-149, 2.0**-23)
_SUM = LargerOperandUlps(3)
_MUL_NOTE = "bit exact alone; fused into a sum, regrouped with constants; i32 wraps"
_SUM_NOTE = "bit exact alone; regrouped with constants: of its larger operand; i32 wraps"
#: log and tanh: at most 1 F32 ulp measured (relative 2^-23), promised 2 ulps, with an absolute
#: floor at F32's smallest normal (the plugin flushes a subnormal result to zero)
_SMOOTH = AbsRel(2.0**-126, 2.0**-22)
#: exp: at most 5 ulps measured on [-87, 88] (relative 4.3e-7 < 2^-21), promised 2^-20
_EXP = AbsRel(2.0**-126, 2.0**-20)
#: erf: the plugin's erf is absolute near zero (erf(8e-13) is 0, erf(-1.8e-7) is -4.2e-7): at
#: most 5.1e-7 absolute measured over every F32 value, promised 2^-20 (9.5e-7) plus 2 ulps
_ERF = AbsRel(2.0**-20, 2.0**-22)
#: x / y is the plugin's x * (1 / y) unless the divide is marked nonconvertible, which
#: ``poot_npu.host`` does for every divide but a reduction's by a constant (a mean: the plugin
#: fuses a marked one into the reduction wrong): IEEE division, bit exact (measured); a mean's
#: x * (1 / c) is within an ulp and a half of the oracle's x / c, promised two
_DIV = AbsRel(2.0**-149, 2.0**-22)
#: exp overflows early in the plugin (exp(88.39) is inf, the oracle's 2.4e38): operands up to
#: 88; below -87 the result is subnormal or 0, within the absolute floor, down to -inf (exactly
#: 0: a masked softmax's keys); NaN is out (the plugin's exp(NaN) is inf). A computed operand
#: is checked in the graph (``poot_npu.host``: the device-site guards of an interval)
_EXP_DOMAIN = Interval(-math.inf, 88.0)
#: a sum, matmul, convolution or window sum in the plugin's order: one F32 unit per term
#: (measured well inside it), on operands of magnitude at most 2^50, where no product or
#: partial sum of up to 2^27 terms overflows (past it the plugin's order overflows where the
#: oracle's float64 sum does not, or to the other infinity)
_ACCUMULATED = ScaledSum(1)
_SUMMABLE = Interval(-(2.0**50), 2.0**50)
#: a conversion's operands, within +-2147483520 (the largest F32 below 2^31): F32 to I32 past
#: I32's range is -2^31 on x86 where the oracle saturates, and I32's -2^31 converts to False
#: (the plugin goes through F32)
_CONVERTIBLE = Interval(-2147483520.0, 2147483520.0)


def _op(
    prim: Prim, dtypes: frozenset[DType], bound: object, domain: object, note: str = ""
) -> Capability:
    return Capability(prim, dtypes, _G, Contract(prim, bound, domain), note=note)  # type: ignore[arg-type]


#: Reductions over any axes: OpenVINO 2026.4's CPU plugin fuses the elementwise op that reads a
#: Reduce into it as a post-op and gets some wrong (an I32 one over any axes; a Divide marked
#: IEEE, by a constant), which ``poot_npu.host`` keeps from happening: every ReduceMax is TopK
#: there (no Reduce node), and a sum's divide by a constant stays unmarked (the divide row's
#: mean); the capability cases over leading and several axes and the ONNX node cases
#: (ArgMax over a middle axis, ReduceMean, GroupNormalization) measure them right
_ANY_AXES = "any axes"


def _move(prim: Prim, note: str = "") -> Capability:
    return _op(prim, CARRIED, BitExact(), AnyInput(), note)


TARGET = Target(
    name="host-cpu",
    description="The host CPU: one compiled OpenVINO graph in F32 on OpenVINO's CPU plugin",
    capabilities=(
        _op(Prim.NEG, NUMBERS, BitExact(), FiniteInputs(), "a multiply by -1, not PowerStatic"),
        _op(Prim.ABS, NUMBERS, BitExact(), FiniteInputs()),
        _op(Prim.ADD, NUMBERS, _SUM, FiniteInputs(), _SUM_NOTE),
        _op(Prim.SUB, NUMBERS, _SUM, FiniteInputs(), _SUM_NOTE),
        _op(Prim.MUL, NUMBERS, _PRODUCT, FiniteInputs(), _MUL_NOTE),
        _op(Prim.DIV, F32, _DIV, FiniteInputs(), "IEEE, but a mean's: x * (1 / c)"),
        _op(Prim.RECIP, F32, BitExact(), FiniteInputs()),
        _op(Prim.SQRT, F32, BitExact(), PositiveNormal()),
        _op(Prim.EXP, F32, _EXP, _EXP_DOMAIN, "overflows early past 88: refused there"),
        _op(Prim.LOG, F32, _SMOOTH, PositiveNormal()),
        _op(Prim.TANH, F32, _SMOOTH, FiniteInputs()),
        _op(Prim.ERF, F32, _ERF, FiniteInputs(), "absolute near zero"),
        _op(Prim.MAX, NUMBERS, BitExact(signed_zero=False), NotNaN(), "+0 and -0 tie"),
        _op(Prim.MIN, NUMBERS, BitExact(signed_zero=False), NotNaN(), "+0 and -0 tie"),
        _op(Prim.GE, NUMBERS, BitExact(), AnyInput()),
        _op(Prim.GT, NUMBERS, BitExact(), AnyInput()),
        _op(Prim.EQ, CARRIED, BitExact(), AnyInput()),
        _op(Prim.SELECT, CARRIED, BitExact(), AnyInput()),
        _op(Prim.CONVERT, CARRIED, BitExact(), _CONVERTIBLE, "to i32: truncates"),
        _op(Prim.REDUCE_SUM, F32, _ACCUMULATED, _SUMMABLE, f"the plugin's order; {_ANY_AXES}"),
        _op(Prim.REDUCE_MAX, NUMBERS, BitExact(signed_zero=False), NotNaN(), f"TopK; {_ANY_AXES}"),
        _op(Prim.MATMUL, F32, _ACCUMULATED, _SUMMABLE, "the plugin's order, with FMA"),
        _op(Prim.CONV, F32, _ACCUMULATED, _SUMMABLE, "(Group)Convolution-1"),
        _op(Prim.REDUCE_WINDOW_SUM, F32, _ACCUMULATED, _SUMMABLE, "a depthwise convolution"),
        _op(Prim.REDUCE_WINDOW_MAX, F32, BitExact(signed_zero=False), NotNaN(), "MaxPool-1"),
        _op(Prim.GATHER, CARRIED, BitExact(), AnyInput(), "an index outside the axis: refused"),
        _move(Prim.TRANSPOSE),
        _move(Prim.RESHAPE),
        _move(Prim.BROADCAST_IN_DIM),
        _move(Prim.SLICE),
        _move(Prim.CONCAT),
        _move(Prim.DYNAMIC_UPDATE_SLICE, "start clamped as XLA does"),
        _op(Prim.IOTA, NUMBERS, BitExact(), AnyInput(), "a constant range"),
    ),
    flushes_subnormal_constants=True,
)
