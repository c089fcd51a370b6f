"""Which convolutions the Intel NPU compiler gives their bias: one DPU task, rounded once.

The compiler folds a per-channel bias add into the convolution before it. An Add of a
constant of shape [1, C, 1, 1] becomes a ScaleShift with biases (npu_compiler
``src/vpux_compiler/src/dialect/IE/transforms/passes/convert_to_scale_shift.cpp``,
``ConvertAddToScaleShift``), and a ScaleShift with constant biases of shape [1, C, 1, 1] whose
input is a convolution's result with no other use becomes that convolution's bias
(``src/vpux_compiler/src/dialect/IE/utils/convolution_utils.cpp``, ``FuseConvAndBias``: "ScaleShift
is not the only user of its operand" refuses it otherwise). The DPU adds the bias to the
FP32 accumulator and the PPE then rounds and clamps once: the pair's FP16 result is the
rounding of ``conv + bias``, and the convolution's own FP16 value never exists on the device.
NPU40XX's IE pipeline runs the first (``src/vpux_compiler/src/NPU40XX/dialect/IE/transforms/
pipelines.cpp``), the second is a canonicalization of ScaleShift. Read in npu_compiler as of
December 2024 (a fetched snapshot) and at a 2025 commit (``0ccf9bf``), which agree; the
compiler of the pinned driver (1.38.0) is a prebuilt package whose source is not here, so the
``npu_intel`` tests (``test_vpu_bias_fusion.py``) are what settles it.

``bias_fusions`` finds each such pair in a narrowed program as the ONNX importer writes a
Conv with a bias (``add(conv(x, w), broadcast_in_dim(convert(b), dims=(1,)))``), where ``b``
is an argument baked into the graph. Both the Intel lowering and its CPU stand-in act on it
(``poot_codegen.intel.graph``): the NPU graph keeps the pattern the compiler fuses (the bias
as a [1, C, 1, 1] constant, the convolution's result read by the add alone, so no guard reads
it), and the stand-in rounds the pair once, saturating. A derived contract
(``fp16.contract``) counts a rounding for each of the two equations; one rounding fewer keeps
the result within it.

Like ``saturation``, this takes every convolution for a DPU task (a convolution whose kernel
the NCE cannot run goes to SHAVE, where ``FuseConvAndBias`` leaves its bias add apart); a
transposed convolution (an input dilation) is not taken, since the compiler fuses it only
where it runs it as an SEP (storage-element-pointer) convolution
(``VPU::isSupportedSEPTransposedConv``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from poot_ir import Atom, BroadcastParams, ConvParams, DType, Eqn, Prim, Program, Var

__all__ = ["BiasFusion", "bias_fusions"]


@dataclass(frozen=True)
class BiasFusion:
    """A convolution (equation ``conv``) and the add of its bias (equation ``add``, whose
    operand ``operand`` is the convolution's result and whose other operand ``bias`` is the
    bias spread by equation ``broadcast`` from the baked argument named ``source``)."""

    conv: int
    add: int
    operand: int
    broadcast: int
    source: str

    @property
    def bias(self) -> int:
        return 1 - self.operand


def bias_fusions(program: Program, baked: Collection[str]) -> tuple[BiasFusion, ...]:
    """Each convolution of ``program`` that the NPU compiler fuses with its bias add (module
    docstring); ``baked``: the names of the arguments lowered as constants of the graph."""
    made = {e.out.id: i for i, e in enumerate(program.eqns)}
    reads: dict[int, int] = {}
    for e in program.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                reads[a.id] = reads.get(a.id, 0) + 1
    for _, v in program.results():
        reads[v.id] = reads.get(v.id, 0) + 1
    args = {a.var.id: a.name for a in program.args}
    found = []
    for j, e in enumerate(program.eqns):
        if e.prim is not Prim.ADD:
            continue
        for k, a in enumerate(e.inputs):
            if not isinstance(a, Var) or a.id not in made or reads[a.id] != 1:
                continue
            i = made[a.id]
            if not _fusable_conv(program.eqns[i]):
                continue
            bias = _channel_bias(program, made, args, e.inputs[1 - k], a.type.shape)
            if bias is not None and bias[1] in baked:
                found.append(BiasFusion(i, j, k, *bias))
                break
    return tuple(found)


def _fusable_conv(e: Eqn) -> bool:
    """A 2-D convolution of FP16 values (NCHW, the compiler's 4-D ScaleShift), not transposed."""
    if e.prim is not Prim.CONV or not isinstance(e.params, ConvParams):
        return False
    plain = all(d == 1 for d in e.params.lhs_dilation)
    return plain and e.out.dtype is DType.F16 and len(e.out.type.shape) == 4


def _channel_bias(
    program: Program,
    made: dict[int, int],
    args: dict[int, str],
    a: Atom,
    shape: tuple[int, ...],
) -> tuple[int, str] | None:
    """The broadcast that spreads ``a`` over the channel axis of a ``shape`` value from a
    [C] value (along axis 1, through converts), and the argument that value comes from."""
    if not isinstance(a, Var) or a.id not in made:
        return None
    at = made[a.id]
    e = program.eqns[at]
    p = e.params
    if e.prim is not Prim.BROADCAST_IN_DIM or not isinstance(p, BroadcastParams):
        return None
    if tuple(p.dims) != (1,) or tuple(p.shape) != shape:
        return None
    x = e.inputs[0]
    while isinstance(x, Var) and x.id in made and program.eqns[made[x.id]].prim is Prim.CONVERT:
        x = program.eqns[made[x.id]].inputs[0]
    source = args.get(x.id) if isinstance(x, Var) else None
    return None if source is None else (at, source)
