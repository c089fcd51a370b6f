"""The ``intel-npu4`` target: Intel NPU4 (Lunar Lake), exactly the verified list.

The NPU computes in FP16, so arithmetic is admitted on F16 only; an F32 program runs when the
target records a narrowing contract, through ``narrow_to_device_precision`` (casts to F16 on
entry, back to F32 on exit). Contracts compare the device with the oracle's own F16 evaluation:
bit for bit on integer-valued inputs (``IntegerValued``), within FP16 tolerance for exp, div
and sqrt, and a reduce_sum within three half ulps (``POOLED_SUM``, ``RoundedTwice``). The bit-for-bit rows hold where the result is inside +-65504 only: an FP16 overflow of
a DPU task (an add or subtract of two same-shape values, a matmul, a reduce_sum) is +-65504 on
the NPU (the PPE clamp, npu_compiler NPU40XX ``expand_dpu_config_invariant_ppe.cpp``), where
the oracle's is infinite; a narrowed program refuses it (a value of magnitude 65504 counts as
overflow in the in-graph guard and the host result check). A reduce_sum over an axis other than
the channel axis is AvgPool then Multiply by N on the NPU (``convert_reduce_to_pooling.cpp``):
two roundings, so its contract is ``RoundedTwice``, not bit for bit (the vpu-cpu stand-in rounds
twice too; ``npu_intel`` measures both axes). The sign of a
zero is not promised (the NPU's neg of +0 is +0). Data movement is bit
exact in every width the device carries: F16, BF16, I32 and BOOL. The NPU compiler carries F32
as FP16 (``ConvertPrecisionToFP16``), so a program with any F32 argument or result, data
movement alone included, is narrowed and published as ``NarrowStorage`` with the range checks
(``poot_planner.fp16.narrowing``): each result within the bound the running error analysis
derives for its inputs (``poot_planner.fp16.contract``); an F32 row below is bit exact on the
FP16 values it carries.
"""

from __future__ import annotations

from poot_ir import DType, Prim
from poot_ir.numerics import AbsRel, AnyInput, BitExact, Contract, FiniteInputs, RoundedTwice

from poot_planner.target import Capability, KernelClass, NarrowingContract, Target

F16 = frozenset({DType.F16})
MOVABLE = frozenset({DType.F32, DType.F16, DType.BF16, DType.I32, DType.BOOL})
_G = KernelClass.GRAPH_OP
_NO_ZERO_SIGN = BitExact(signed_zero=False)
#: FP16 tolerance for the transcendental and divided results: a few FP16 ulps (2^-10 relative),
#: plus an absolute floor at the smallest FP16 subnormal.
FP16_TOLERANCE = AbsRel(2.0**-24, 2.0**-9)
#: a reduce_sum against the oracle's sum rounded once: over a non-channel axis the NPU rounds
#: the mean (N of its half ulps) and the product by N (one more), three half ulps relative in
#: the normal range (room to 2^-9 for the cross terms) and N + 2 halves of the smallest
#: subnormal where the mean is subnormal, an absolute floor doubled for the same cross terms;
#: over the channel axis (one rounding) the same bound holds with room
POOLED_SUM = RoundedTwice(2.0**-9, 2.0**-24)
#: the bit-for-bit rows of a DPU task hold inside FP16's range only (past it: +-65504)
_IN_RANGE = " inside +-65504 (a DPU overflow saturates)"


def _op(prim: Prim, dtypes: frozenset[DType], bound: object, note: str = "") -> Capability:
    return Capability(prim, dtypes, _G, Contract(prim, bound, FiniteInputs()), note=note)  # type: ignore[arg-type]


def _move(prim: Prim) -> Capability:
    note = "f32 is carried as FP16 (narrowed)"
    return Capability(prim, MOVABLE, _G, Contract(prim, BitExact(), AnyInput()), note=note)


TARGET = Target(
    name="intel-npu4",
    description="Intel NPU4 (Lunar Lake) through one OpenVINO IR graph and the driver's compiler",
    capabilities=(
        _op(Prim.ADD, F16, _NO_ZERO_SIGN, f"bit for bit on integer-valued inputs{_IN_RANGE}"),
        _op(Prim.SUB, F16, _NO_ZERO_SIGN, f"bit for bit on integer-valued inputs{_IN_RANGE}"),
        _op(Prim.MUL, F16, _NO_ZERO_SIGN, "bit for bit on integer-valued inputs"),
        _op(Prim.MAX, F16, _NO_ZERO_SIGN),
        _op(Prim.GE, F16, _NO_ZERO_SIGN),
        _op(Prim.NEG, F16, _NO_ZERO_SIGN, "the sign of a zero is not promised"),
        _op(Prim.DIV, F16, FP16_TOLERANCE),
        _op(Prim.SQRT, F16, FP16_TOLERANCE),
        _op(Prim.EXP, F16, FP16_TOLERANCE),
        _op(
            Prim.REDUCE_SUM,
            F16,
            POOLED_SUM,
            f"rows and columns, FP32 accumulation{_IN_RANGE}; over a non-channel axis AvgPool "
            "then x N (two roundings)",
        ),
        _op(Prim.REDUCE_MAX, F16, _NO_ZERO_SIGN, "rows and columns"),
        _op(Prim.MATMUL, F16, _NO_ZERO_SIGN, f"exact on small integer-valued inputs{_IN_RANGE}"),
        _op(
            Prim.CONV,
            F16,
            _NO_ZERO_SIGN,
            f"(Group)Convolution-1, FP32 accumulation rounded once{_IN_RANGE}; no cropping; "
            "lhs dilation only as a transposed convolution ((Group)ConvolutionBackpropData-1: "
            "unit strides)",
        ),
        _op(
            Prim.REDUCE_WINDOW_MAX,
            F16,
            _NO_ZERO_SIGN,
            "MaxPool-1 over the spatial axes of rank 3-5; no window dilation",
        ),
        _op(
            Prim.REDUCE_WINDOW_SUM,
            F16,
            _NO_ZERO_SIGN,
            f"GroupConvolution-1 of ones (depthwise: FP32 accumulation rounded once){_IN_RANGE}",
        ),
        _op(Prim.CONVERT, frozenset({DType.F32, DType.F16}), BitExact(), "F32 <-> F16 only"),
        _move(Prim.GATHER),
        _move(Prim.TRANSPOSE),
        _move(Prim.RESHAPE),
        _move(Prim.BROADCAST_IN_DIM),
        _move(Prim.SLICE),
        _move(Prim.CONCAT),
        _move(Prim.DYNAMIC_UPDATE_SLICE),
        Capability(
            Prim.IOTA,
            frozenset({DType.I32, DType.F16}),
            _G,
            Contract(Prim.IOTA, BitExact(), AnyInput()),
            note="a constant range",
        ),
    ),
    narrowing=NarrowingContract(
        device_dtype=DType.F16,
        # The design figure of an ideal FP16 device over a short graph (a few FP16 units of
        # 2^-11), to be replaced by the figure measured on a Lunar Lake NPU by `nox -s npu_intel`.
        normwise=2.0**-8,
        max_magnitude=65504.0,
        floor=2.0**-24,  # FP16's smallest subnormal: below it, a value is zero
        measured_on="design figure (ideal FP16); not yet measured on a Lunar Lake NPU here",
    ),
    # One tensor is one Level Zero allocation (the NPU plugin allocates each input, output and
    # intermediate buffer whole), and the driver caps an allocation at maxMemAllocSize:
    # intel/linux-npu-driver umd/vpu_driver/source/device/hw_info.hpp sets
    # `uint64_t maxMemAllocSize = 0x100000000;` (4 GiB), which vpu_40xx/vpu_hw_40xx.cpp's
    # vpuHwInfo40xx (Lunar Lake) keeps, and level_zero_driver/core/source/device/device.cpp
    # reports as ze_device_properties_t::maxMemAllocSize.
    tensor_bytes=2**32,
)
