"""The ``xdna2`` target: AMD XDNA2 (Strix, Strix Halo; aie2p), exactly the verified list.

Every figure is the seed's, measured on a Strix Halo NPU: each contract holds on its domain and
nothing is promised outside it. Every other (primitive, dtype, axis) is refused. Steps of a
recognized row kernel (the fused RMSNorm) are admitted only inside it, where the planner derives
the kernel's bound from theirs (``poot_planner.xdna2.rowfusion``). Reshape, transpose, slice and
concat are host relayouts (``KernelClass.HOST_RELAYOUT``): bytes the host arenas move between
region runs, bit exact, on no tile and no context (``poot_planner.xdna2.regions.HostRelayout``).
"""

from __future__ import annotations

import math

from poot_ir import DType, Prim
from poot_ir.numerics import (
    AbsRel,
    AnyInput,
    Bf16Contraction,
    BitExact,
    Contract,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    LargerOperandUlps,
    NotNaN,
    PositiveNormal,
    ProductSum,
    Relative,
    ScaledSum,
)

from poot_planner.target import (
    AxisRule,
    Capability,
    CodeSize,
    KernelClass,
    RegionLimits,
    Target,
)
from poot_planner.xdna2.layout import REGIONS

F32 = frozenset({DType.F32})
#: What the host arenas hold and a relayout moves: the dtypes the tile jobs compute in.
_MOVED = frozenset({DType.F32, DType.I32})
_P = KernelClass.POINTWISE
_SMOOTH = AbsRel(2e-6, 1e-5)  # exp, log, tanh and erf: absolute 2e-6 plus relative 1e-5


# Program memory (aie2p): 16 KiB per core, enforced by aie-rt when the design is loaded
# (``Aie2PCoreMod.ProgMemSize = 16 * 1024``; "Overflow of program memory"). UNMEASURED
# estimates: the routine sizes are a third-party aie2p symbol breakdown (__addsf3 1424 B,
# __mulsf3 1168 B, __divsf3 1440 B, compares about 1000 B, conversions 464 B); on aie2p every
# scalar f32 add, sub, mul, div, compare and int/float conversion is such a library call
# (llvm-aie AIE2PLegalizerInfo.cpp: libcallFor). The bodies are guesses from the size of the
# generated C; the ``xdna`` hardware test measures each linked core and these get replaced.
_A, _M, _D, _C, _V, _I = "addsf3", "mulsf3", "divsf3", "cmpsf2", "fixsfsi+floatsisf", "divsi3"
_SMOOTH_CALLS = (_A, _M, _D, _C, _V)
CODE_SIZE = CodeSize(
    program_bytes=16 * 1024,
    base=1536,
    routines=((_A, 1424), (_M, 1168), (_D, 1440), (_C, 1000), (_V, 464), (_I, 400)),
    bodies=(
        # add and sub call the compare too: their result guard tests whether the operands
        # cancel exactly (poot_codegen.xdna.guards.result_guard, a float `!=`)
        (Prim.ADD, (_A, _C), 96),
        (Prim.SUB, (_A, _C), 96),
        (Prim.MUL, (_M,), 96),
        (Prim.DIV, (_D,), 96),
        (Prim.NEG, (), 64),
        (Prim.RECIP, (_D,), 96),
        (Prim.GE, (_C,), 128),
        (Prim.MAX, (_C,), 128),
        (Prim.EXP, (_A, _M, _C, _V), 900),
        (Prim.LOG, _SMOOTH_CALLS, 1100),
        (Prim.TANH, _SMOOTH_CALLS, 1300),
        (Prim.ERF, _SMOOTH_CALLS, 1400),
        (Prim.SQRT, (_A, _M, _D, _C), 700),
        (Prim.REDUCE_SUM, (_A,), 160),
        (Prim.REDUCE_MAX, (_C,), 160),
        (Prim.GATHER, (_I,), 320),
        # a broadcast tile finds each element's source by divides by constants (multiplies
        # and shifts, no library call), then copies a word; a fused norm's step costs less
        (Prim.BROADCAST_IN_DIM, (), 160),
        # the matmul kernel: bf16 rounding of the operands is integer work, then one float
        # multiply and add per term (poot_codegen.xdna.matmul); its operand guard compares
        # with bf16's range (float compares)
        (Prim.MATMUL, (_A, _M, _C), 480),
    ),
    measured=False,
    source="estimate: routine sizes from a third-party aie2p symbol breakdown, bodies guessed",
)


#: The matmul arithmetic, decided from upstream (mlir-aie @19cce64c ``aie_kernels/aie2p/mm.cc``,
#: ``matmul_vectorized_2x2_mmul`` over ``aie::mmul<4, 8, 8, bfloat16, bfloat16, accauto>``, which
#: aie_api @2a408059 ``detail/aie2p/emulated_mmul_intrinsics.hpp`` builds from chained
#: ``mac_elem_32``: bf16 x bf16 products, exact in FP32, added in order of k into an FP32
#: accumulator, C kept as f32 between K chunks). That is what IRON's and iree-amd-aie's
#: designs compute on npu2; F32 x F32 has no aie2p mmul at that pin and scalar F32 is
#: software floating point (llvm-aie AIE2PLegalizerInfo.cpp: libcallFor). So the operands are
#: *narrowed* to bf16 (RNE) inside the kernel: the contract is the narrowing's and the FP32
#: accumulation's (``ProductSum``: 2^-8 per operand, 2^-23 per add), the domain every operand
#: within bf16's finite range (checked on the host for arguments, counted into the flag word
#: by the kernel otherwise). The rounding mode of the hardware accumulate is not established
#: (xdna2-matmul.md): 2^-23 bounds it either way; the host stand-in adds with RNE.
MATMUL_CONTRACT = Contract(Prim.MATMUL, ProductSum(operand_unit=2.0**-8), Bf16Contraction())


def _relayout(prim: Prim, note: str) -> Capability:
    """A relayout the host arenas absorb between regions: it moves bytes, so bit exact."""
    return Capability(
        prim, _MOVED, KernelClass.HOST_RELAYOUT, Contract(prim, BitExact(), AnyInput()), note=note
    )


def _pw(prim: Prim, bound: object, domain: object, note: str = "") -> Capability:
    return Capability(prim, F32, _P, Contract(prim, bound, domain), note=note)  # type: ignore[arg-type]


TARGET = Target(
    name="xdna2",
    description="AMD XDNA2 NPU (Strix / Strix Halo, aie2p) through MLIR-AIE regions and XRT",
    capabilities=(
        _pw(Prim.ADD, LargerOperandUlps(2), FiniteNormalResult(), "the core's adder is not RNE"),
        _pw(
            Prim.SUB,
            LargerOperandUlps(2),
            FiniteNormalResult(),
            "a small cancelled result is exact",
        ),
        _pw(Prim.MUL, BitExact(), FiniteNormalResult()),
        _pw(Prim.DIV, BitExact(), FiniteNormalResult()),
        _pw(Prim.NEG, BitExact(), FiniteNormalResult()),
        _pw(Prim.RECIP, BitExact(), FiniteNormalResult()),
        _pw(Prim.GE, BitExact(), FiniteNormalResult()),
        # down to -inf: a result below FLT_MIN is flushed to +0 (csrc/poot_math.h), inside
        # the absolute part there, and exp(-inf) is exactly 0 (a masked softmax's -inf scores)
        _pw(Prim.EXP, _SMOOTH, Interval(-math.inf, 88.0), "saturates past 88; 0 below -87.3"),
        _pw(Prim.LOG, _SMOOTH, PositiveNormal()),
        _pw(Prim.TANH, _SMOOTH, FiniteInputs(), "saturates exactly"),
        _pw(Prim.ERF, _SMOOTH, FiniteInputs(), "saturates exactly"),
        _pw(Prim.SQRT, Relative(4e-7), PositiveNormal(), "bit-halving estimate, 4 Newton steps"),
        _pw(Prim.MAX, BitExact(signed_zero=False), NotNaN(), "compare and select: +0 and -0 tie"),
        Capability(
            Prim.REDUCE_SUM,
            F32,
            KernelClass.ROW,
            Contract(Prim.REDUCE_SUM, ScaledSum(2), FiniteInputs()),
            AxisRule.ANY,
            "adds in order (row-major over the reduced axes); no relative bound when it cancels",
        ),
        Capability(
            Prim.REDUCE_MAX,
            F32,
            KernelClass.ROW,
            Contract(Prim.REDUCE_MAX, BitExact(signed_zero=False), NotNaN()),
            AxisRule.ANY,
        ),
        Capability(
            Prim.GATHER,
            frozenset({DType.F32, DType.I32}),
            KernelClass.GATHER,
            Contract(Prim.GATHER, BitExact(), AnyInput()),
            AxisRule.ANY,
            "i32 indices; one outside the axis: refused before the run when the host passes it, "
            "clamped, counted in the flag word and refused when a region computes it",
        ),
        Capability(
            Prim.MATMUL,
            F32,
            KernelClass.MATMUL,
            MATMUL_CONTRACT,
            note="operands narrowed to bf16 (RNE), products exact, summed in order in FP32; a "
            "right operand past a tile's memory streamed in pieces of K, once per call of rows "
            "(the same order, bit for bit), or, batched, held one batch at a time",
        ),
        Capability(
            Prim.BROADCAST_IN_DIM,
            _MOVED,
            KernelClass.BROADCAST,
            Contract(Prim.BROADCAST_IN_DIM, BitExact(), AnyInput()),
            note="a copy on a tile, its operand resident: on chip when its consumer is beside it",
        ),
        _relayout(Prim.RESHAPE, "an alias: the same arena bytes read with the new shape"),
        _relayout(Prim.TRANSPOSE, "one host copy, arena to arena, between region runs"),
        _relayout(Prim.SLICE, "one host copy, arena to arena, between region runs"),
        _relayout(Prim.CONCAT, "one host copy of each operand, arena to arena"),
        _relayout(Prim.IOTA, "the host writes the counter into its arena slot"),
    ),
    region_limits=RegionLimits(
        compute_tiles=32,
        host_streams_in=16,
        host_streams_out=16,
        streams_per_tile=2,
        tile_bytes=64512,
        contexts=16,
        host_buffers=5,
    ),
    code_size=CODE_SIZE,
    layout=REGIONS,
    fused_steps=frozenset(
        {
            Prim.MUL,
            Prim.DIV,
            Prim.ADD,
            Prim.SQRT,
            Prim.NEG,
            Prim.MAX,
            Prim.REDUCE_SUM,
            Prim.REDUCE_MAX,
            Prim.BROADCAST_IN_DIM,
        }
    ),
)
