"""The (op type, version) pairs the Intel NPU compiler's frontend imports, read from its source.

The NPU compiler (openvinotoolkit/npu_compiler, the library the driver loads as
``libnpu_driver_compiler.so``) imports an OpenVINO model op by op through one dispatch map,
``NGraphImporter::getParser`` in ``src/vpux_compiler/src/frontend/IE.cpp`` (read at commits
e6abb2304c79b15d4cee027a5401d8c734c06021 and 0ccf9bf3faf8106f5575a905d665feab44e59b6f; the later
one adds ``opset15::STFT`` and ``v16::Identity``, poot uses neither). The map is keyed by
``NodeTypeInfo`` (type name and version id), so ``ScatterNDUpdate`` of opset15 is a different key
from ``opset4::ScatterNDUpdate``: an op missing from the map is "[NOT IMPLEMENTED] Unsupported
operation ..." in the older tree and an unrecognized custom op in the newer. OpenVINO's own
downgrade passes (``ConvertScatterNDUpdate15ToScatterNDUpdate3`` and the like) run in the CPU and
GPU plugins' pipelines, not before this import, so only what the map lists is safe to emit.

``ACCEPTED`` is every ``MAP_ENTRY(ov::opsetN::Name)`` of that map (plus Parameter and Result),
as ``(Name, "opsetN")``: the IR's ``type`` and ``version`` attributes, since an op class's
version id is the opset that introduced it and each entry names its class by that opset (the
test checks it for every pair poot emits by building the op). ``Slice`` (opset8) is not in the
map (the compiler's own ``ConvertSliceToStridedSlice`` pass rewrites it before import), so the
lowering emits ``StridedSlice`` (opset1) directly rather than lean on that pass.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ACCEPTED", "SOURCE", "outside_table"]

SOURCE: Final = "openvinotoolkit/npu_compiler src/vpux_compiler/src/frontend/IE.cpp"

# One line per opset, in the map's order where it matters little; transcribed from SOURCE.
_MAP: Final = """
opset1 Parameter Result Constant Convert ConvertLike Tile Split Power Multiply Relu Convolution
opset1 GroupConvolution ConvolutionBackpropData GroupConvolutionBackpropData AvgPool MaxPool
opset1 ShuffleChannels GatherTree OneHot Clamp Elu Reshape Squeeze Sigmoid LRN ReduceMax
opset1 ReduceMean ReduceLogicalOr ReduceLogicalAnd ReduceProd ReduceSum ReduceMin Unsqueeze
opset1 Minimum Maximum Add Divide SquaredDifference FloorMod Mod Reverse FakeQuantize MatMul Tan
opset1 Tanh Sin Cos Sqrt Sinh Cosh Log Selu Exp Floor Erf Transpose TopK RegionYolo
opset1 DetectionOutput NormalizeL2 Concat PSROIPooling StridedSlice PRelu GRN Negative Sign
opset1 CTCGreedyDecoder Pad LSTMCell Subtract LogicalAnd Ceiling Equal Select DepthToSpace
opset1 ReverseSequence Less LessEqual NotEqual Greater GreaterEqual LogicalNot LogicalOr
opset1 LogicalXor SpaceToDepth Abs Atan Asin Acos HardSigmoid DeformablePSROIPooling
opset1 TensorIterator ShapeOf VariadicSplit
opset2 Gelu ReorgYolo ROIPooling BatchToSpace SpaceToBatch
opset3 ScatterUpdate ScatterElementsUpdate Broadcast Bucketize TopK CumSum ExtractImagePatches
opset3 EmbeddingBagOffsetsSum EmbeddingSegmentsSum EmbeddingBagPackedSum Assign ReadValue GRUCell
opset3 NonZero
opset4 ScatterNDUpdate ReduceL1 ReduceL2 Proposal Asinh Acosh Atanh HSwish Mish Interpolate
opset4 Swish SoftPlus LSTMCell Range
opset5 LogSoftmax BatchNormInference Round LSTMSequence HSigmoid GRUSequence Loop
opset6 GatherElements MVN CTCGreedyDecoderSeqLen ExperimentalDetectronROIFeatureExtractor Assign
opset6 ReadValue
opset7 Roll DFT IDFT
opset8 Softmax MaxPool AdaptiveAvgPool AdaptiveMaxPool Gather GatherND NV12toRGB NV12toBGR
opset8 I420toRGB I420toBGR RandomUniform If DeformableConvolution
opset9 GridSample Eye ROIAlign RDFT IRDFT NonMaxSuppression
opset12 GroupNormalization ScatterElementsUpdate
opset13 FakeConvert BitwiseAnd BitwiseOr BitwiseXor BitwiseNot ScaledDotProductAttention
opset14 MaxPool Inverse
opset16 AvgPool
"""

ACCEPTED: Final[frozenset[tuple[str, str]]] = frozenset(
    (name, words[0])
    for line in _MAP.strip().splitlines()
    for words in [line.split()]
    for name in words[1:]
)
"""(IR op type, IR op version) pairs the pinned NPU compiler's frontend imports."""


def outside_table(ops: set[tuple[str, str]] | frozenset[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs of ``ops`` the NPU compiler's frontend has no parser for, sorted."""
    return sorted(ops - ACCEPTED)
