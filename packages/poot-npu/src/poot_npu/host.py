"""``HostDevice``: the compiled host device. A program (or a partition's host span) as one
OpenVINO graph, compiled by OpenVINO's CPU plugin and run on the host CPU in F32.

It is the worker for the equations an NPU refuses; the oracle stays the judge (every check of
``verify``, ``poot run`` and ``poot acceptance`` compares with ``poot_ir.evaluate``). Its
target is ``host-cpu`` (``poot_planner.targets.host_cpu``: the rows and their measured
contracts). The graph is ``poot_codegen.intel.graph.lower`` of the plan's program without FP16
emulation or narrowing: F32 stays F32 (compiled with ``INFERENCE_PRECISION_HINT`` f32 and
``EXECUTION_MODE_HINT`` ACCURACY, so a processor with bf16 or f16 units does not narrow it),
integers and booleans are carried as they are, and no guard result is added (the target
admits no F16, so no divisor the NPU compiler would clamp).

Everything else, the artifact (framed IR, compiled blob, the blob cache), buffers bound once
to the request, deadlines and record/replay, is ``OpenVinoDevice`` (``poot_npu.openvino_device``),
which ``VpuDevice`` shares. The identity is the CPU plugin's, with the libraries' digests
(``vpu_identity``), named as the host device so its blobs never meet the stand-in's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from poot_codegen.intel import graph as intel_graph
from poot_codegen.intel.quiet import opset1, ov
from poot_codegen.intel.quiet import opset16 as ops
from poot_engine.device import ArtifactSource, DeviceTraits
from poot_ir import DeviceUnavailable, DType, UnsupportedDevice
from poot_ir.domains import Interval, NotNaN
from poot_planner.guards import RESULT, Site

from poot_npu import vpu_identity
from poot_npu.openvino_device import OpenVinoDevice, split_guard

if TYPE_CHECKING:
    from poot_planner import Plan

__all__ = ["HOST_CONFIG", "TARGET", "HostDevice"]

_NONCONVERTIBLE_DIVIDE: Final = "nonconvertable_divide_0"  # sic: OpenVINO's spelling
_PREPARE: Final = (
    "divides nonconvertible but a mean's; implicit broadcasts; f32 maxima keep -inf; "
    "booleans selected; no product, sum with a zero or sum of an exp by a one-element constant "
    "(zeros keep their sign, no softplus fused), -0 - x negated"
)

TARGET: Final = "host-cpu"

HOST_CONFIG: Final[dict[str, str]] = {
    **intel_graph.CPU_STANDIN_CONFIG,
    "SNIPPETS_MODE": "DISABLE",
    "ENABLE_CPU_PINNING": "NO",
}
"""Compile options: F32 kept as F32 (no bf16 or f16 inference), accuracy over speed-ups that
change precision, and the plugin's snippets (its JIT fusion of op chains) off: with them,
OpenVINO 2026.4's ``compile_model`` dies of SIGSEGV on ``reshape(matmul(a[1,3], b[3,1]), ())``
(the ONNX case ``test_matmul_1d_1d``) and rejects a BERT-class encoder's graph
(``[TokenizeSnippets] ... Topological order is required``); the eltwise and oneDNN kernels
still fuse, and measured within noise of the snippets on the suite's models. Threads are
the plugin's default (its latency hint: one stream, a thread per core), not pinned to cores:
on a machine whose cores other processes share, a pinned worker waits for its own core while
another is free (ONNX Runtime pins none). Measured on the two shared cores here (load 3 to
4.5, the host graph in turns with ONNX Runtime, wall time per step): mobilenet_v3_small
pinned / unpinned 1.10, 1.25, 0.83; magika 1.07; the encoder 1.17; one thread 1.40, 2.14."""


class HostDevice(OpenVinoDevice):
    """The compiled host device (module docstring). ``threads``: the plugin's
    ``INFERENCE_NUM_THREADS`` (None: the plugin's default); a blob compiled for one count
    keys apart from another's."""

    def __init__(self, *, threads: int | None = None) -> None:
        config = dict(HOST_CONFIG)
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        super().__init__("HostDevice(CPU)", "CPU", config, ov.Core())
        why = vpu_identity.probe(self._core, "CPU", self._config)
        if why is not None:
            raise DeviceUnavailable(self._name, why)
        ident = vpu_identity.identity(self._core, "CPU", self._config, False)
        cpu = vpu_identity.prop(self._core, "CPU", "FULL_DEVICE_NAME") or "an unnamed CPU"
        # what ``_prepare`` does to a graph before it compiles is part of what a blob is
        options = (*ident.options, ("prepare", _PREPARE))
        self._identity = replace(
            ident, part=f"{cpu}, OpenVINO's CPU plugin in F32 (host-cpu)", options=options
        )

    @staticmethod
    def probe() -> str | None:
        """None when OpenVINO lists its CPU device, else the reason it is unavailable."""
        return vpu_identity.probe(ov.Core(), "CPU", dict(HOST_CONFIG))

    @property
    def target(self) -> str:
        return TARGET

    def describe(self) -> str:
        return (
            f"{self._name}: the compiled host device: one OpenVINO {ov.get_version()} graph in "
            f"F32 on the CPU plugin of {self._identity.part.split(',')[0]}; checked against the oracle"
        )

    def _prepare(self, model: Any) -> None:
        """Every Divide marked nonconvertible: else the common transformations rewrite
        ``x / y`` as ``x * y^-1`` (openvino src/common/transformations/src/transformations/
        op_conversions/convert_divide.cpp, which skips a node ``divide_is_nonconvertible``:
        rt_info/nonconvertible_divide.hpp, key ``nonconvertable_divide_0``), a rounding more
        than the oracle's and infinite for a subnormal divisor. The IR does not carry the
        mark, so it is set on the model read back, before every compile.

        Except a divide of a reduction by a constant (a mean) whose reciprocal is normal: the
        plugin fuses a marked Divide into the Reduce as a post-op, and OpenVINO 2026.4 gets
        that wrong for some shapes (``reduce_sum(x[3,2,2], 2) / 3`` is off by 0.66; unmarked,
        or by a non-constant divisor, it is right). That one stays ``x * (1 / c)``, within the
        host target's divide row (two ulps).

        And an explicit broadcast read only by elementwise ops whose other operand already has
        the broadcast's shape becomes a reshape with unit axes (``_implicit_broadcasts``): the
        op broadcasts it itself. The plugin runs an explicit Broadcast with its reference
        kernel, materializing the whole tensor (ocr_cls: 82 of them, most of its step);
        broadcasting moves values, so the results are the same bits.

        And every F32 ReduceMax and MaxPool keeps -inf (``_maxima_keep_minus_inf``).

        And a boolean converted to F32 is selected instead (``_selected_booleans``).

        And no product, no sum with a zero and no sum of an Exp has a one-element constant, so
        a negation and a product keep a zero's sign and no softplus written out in ops is fused
        into a kernel outside the contract (``_one_element_constants``)."""
        _implicit_broadcasts(model)
        _maxima_keep_minus_inf(model)
        _selected_booleans(model)
        _one_element_constants(model)
        for op in model.get_ops():
            if op.get_type_name() == "Divide" and not _mean(op):
                op.get_rt_info()[_NONCONVERTIBLE_DIVIDE] = ""

    @property
    def traits(self) -> DeviceTraits:
        """It bakes an entry's weights into the graph as constants (``lower_baked``), as
        ``VpuDevice`` does: the CPU plugin then lays a convolution's or a matmul's weights out
        once at compile rather than at every run, and folds what only weights feed (measured
        through this device, one thread: ocr_cls's step 1.8x faster; the encoder, magika and
        silero_vad within the noise of a shared machine). A weight whose bits a constant would
        not keep stays a parameter (``poot_codegen.intel.graph._bakeable``)."""
        return DeviceTraits(bakes_weights=True)

    def lower(self, plan: Plan) -> ArtifactSource:
        return self._lower(plan, None)

    def lower_baked(self, plan: Plan, weights: Mapping[str, np.ndarray]) -> ArtifactSource:
        """``lower`` with ``weights`` as constants of the graph: the IR, and so the blob-cache
        key, holds their values."""
        return self._lower(plan, weights)

    def _lower(self, plan: Plan, weights: Mapping[str, np.ndarray] | None) -> ArtifactSource:
        self._usable()
        if plan.target.name != TARGET:
            raise UnsupportedDevice(self._name, f"it runs {TARGET} plans, not {plan.target.name}")
        # the plan's device-site guards of an explicit interval computed in the graph: this
        # device has no flag word, and past such a row's domain the plugin's result is not the
        # oracle's (exp overflows from 88, below F32's 88.72; a sum past 2^50, a convert past
        # I32 are unmeasured), so a computed operand outside is refused, not returned. A row
        # whose domain only leaves out infinities or a negative (finite operands, positive) is
        # not guarded on computed values: the plugin carries infinities and NaNs as IEEE does,
        # the oracle too (a NaN's payload aside, which no row promises). One that leaves out
        # NaN is (max, min, reduce_max, reduce_window_max: the plugin's Maximum and Minimum
        # return their second operand where either is NaN, its TopK and MaxPool drop one;
        # measured on 2026.4.1), on an F32 operand the plan does not prove free of NaN
        # (an operand's: a result guard is the XDNA2 kernels' count of a non-finite row sum;
        # the host's accumulation bound holds on operands inside, whatever the sum's size)
        eqns = plan.program.eqns
        device_guards = [
            d
            for d in plan.guards
            if d.site is Site.DEVICE
            and d.operand != RESULT
            and (
                isinstance(d.domain, Interval)
                or (
                    isinstance(d.domain, NotNaN)
                    and eqns[d.eqn].inputs[d.operand].dtype is DType.F32
                )
            )
        ]
        model = intel_graph.lower(
            plan.program, emulate_f16=False, domain_guards=device_guards, constants=weights
        )
        _, guard = split_guard(model)
        if guard is not None and any(".domain" not in label for label in guard[1]):
            raise UnsupportedDevice(self._name, "a graph with an FP16 guard")  # no F16 admitted
        return self._source(model)


def _mean(divide: Any) -> bool:
    """A Divide of a Reduce* output by a Constant whose every value is a normal number with a
    normal reciprocal (``HostDevice._prepare``)."""
    num = divide.input_value(0).get_node()
    den = divide.input_value(1).get_node()
    if not num.get_type_name().startswith("Reduce") or den.get_type_name() != "Constant":
        return False
    c = np.abs(np.asarray(den.get_data(), np.float64))
    return bool(c.size and np.all((c >= 2.0**-126) & (c <= 2.0**126)))


#: elementwise ops of numpy-style broadcasting (their ``auto_broadcast`` is the default)
_ELEMENTWISE: Final = frozenset(
    {"Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Greater", "GreaterEqual"}
    | {"Equal", "Select"}
)


def _implicit_broadcasts(model: Any) -> None:
    """Each explicit Broadcast with increasing axes whose every reader is an elementwise op
    (``_ELEMENTWISE``, numpy broadcasting) whose other operands all have the broadcast's
    shape, replaced by a Reshape of its operand to that rank with unit axes."""
    for op in list(model.get_ordered_ops()):
        if op.get_type_name() != "Broadcast" or op.get_attributes().get("mode") != "explicit":
            continue
        out = op.output(0)
        if not out.get_partial_shape().is_static:
            continue
        shape = [int(d) for d in out.get_shape()]
        dims_node = op.input_value(2).get_node()
        if dims_node.get_type_name() != "Constant":
            continue
        dims = [int(d) for d in np.asarray(dims_node.get_data()).ravel()]
        if dims != sorted(set(dims)):
            continue
        readers = list(out.get_target_inputs())
        if not readers or not all(_takes_full(r, shape) for r in readers):
            continue
        src = [int(d) for d in op.input_value(0).get_shape()]
        unit = [1] * len(shape)
        for k, d in enumerate(dims):
            unit[d] = src[k]
        flat = ops.reshape(op.input_value(0), ops.constant(np.array(unit, np.int64)), False)
        for r in readers:
            r.replace_source_output(flat.output(0))


def _takes_full(reader: Any, shape: list[int]) -> bool:
    """Whether ``reader`` is an input of an elementwise op whose other inputs have ``shape``."""
    node = reader.get_node()
    if node.get_type_name() not in _ELEMENTWISE:
        return False
    if node.get_type_name() == "Select" and reader.get_index() == 0:
        return False  # the condition: keep it explicit
    others = [node.input_value(i) for i in range(node.get_input_size()) if i != reader.get_index()]
    return all(
        o.get_partial_shape().is_static and [int(d) for d in o.get_shape()] == shape for o in others
    )


_MINUS_INF: Final = np.float32(-np.inf)


def _maxima_keep_minus_inf(model: Any) -> None:
    """Each ReduceMax computed as TopK, and each F32 MaxPool so that a window of -infs (or of
    padding only) gives -inf, the oracle's.

    The CPU plugin starts a float maximum at the lowest finite value, not at -inf (openvino
    src/plugins/intel_cpu/src/nodes/reduce.cpp, ``init_dst_data``: ReduceMax's output filled
    with ``std::numeric_limits<float>::lowest()``; its MaxPool does the same, measured), so
    the maximum of a row of -infs is -3.4028235e38. A fully masked softmax row (the mask's -inf
    added to every score) then compares unequal to -inf, and the ONNX attention's
    ``where(max == -inf, 0, softmax)`` returned its NaNs where the oracle gives 0.

    And a Reduce node takes the elementwise op that reads it as a post-op
    (``GraphOptimizer::FuseReduceAndSimpleOperation``), which OpenVINO 2026.4 computes wrong for
    I32 (``7 - reduce_max(x[4,1,6] i32, 2)``: the first row right, the rest 0; ONNX's ArgMax
    over a middle axis) over any axes, the last too.

    So a ReduceMax, F32 or I32, over any axes becomes TopK with k = 1 over each axis in turn
    (the last first), which starts from the data and is no Reduce node: the same element, the
    oracle's maximum (+0 and -0 tie either way, as the row promises; the maximum of maxima is
    the maximum). Measured with ``Engine.step``, one thread, against no rewrite: a lone softmax
    of 32 x 128 x 128 1.12x, the benchmarks' encoder layer 1.01x. Each MaxPool is followed by a
    select of -inf where no element of its window is above -inf (a MaxPool of ``x != -inf`` as
    0 and 1, positive where one element is; ``_selected_booleans`` then selects it). Everywhere
    else the plugin's maximum is the oracle's, so the select only puts -inf back."""
    for op in list(model.get_ordered_ops()):
        kind = op.get_type_name()
        if kind == "ReduceMax":
            axes = _constant(op.input_value(1))
            if axes is None:
                continue  # the lowering's axes are constants (poot_codegen.intel.graph)
            x, readers = op.input_value(0), list(op.output(0).get_target_inputs())
            keep = bool(op.get_attributes()["keep_dims"])
            rank = len(x.get_partial_shape())
            for axis in sorted({int(a) % rank for a in axes.ravel()}, reverse=True):
                x = ops.topk(x, ops.constant(np.int64(1)), axis, "max", "none").output(0)
                if not keep:
                    x = ops.squeeze(x, ops.constant(np.array([axis], np.int64))).output(0)
            _replace(op.output(0), readers, x)
            continue
        if kind != "MaxPool" or op.get_output_element_type(0) != ov.Type.f32:
            continue
        x, readers = op.input_value(0), list(op.output(0).get_target_inputs())
        finite = ops.not_equal(x, ops.constant(_MINUS_INF))
        a = op.get_attributes()
        pooled = opset1.max_pool(
            ops.convert(finite, ov.Type.f32),
            a["strides"],
            a["pads_begin"],
            a["pads_end"],
            a["kernel"],
            a["rounding_type"],
            a["auto_pad"],
        )
        some = ops.greater(pooled, ops.constant(np.float32(0)))
        kept = ops.select(some, op.output(0), ops.constant(_MINUS_INF))
        _replace(op.output(0), readers, kept.output(0))


def _selected_booleans(model: Any) -> None:
    """Each Convert of a boolean to F32 becomes ``select(b, 1.0, 0.0)``: the same values (true
    is 1, false 0), and the plugin runs its boolean Convert with a reference kernel (magika's
    one-hot, ``convert(x == iota)``: 2% of its step) where Select is vectorized."""
    for op in list(model.get_ordered_ops()):
        if op.get_type_name() != "Convert" or op.get_output_element_type(0) != ov.Type.f32:
            continue
        x = op.input_value(0)
        if x.get_element_type() != ov.Type.boolean:
            continue
        name = op.get_friendly_name()
        one = ops.constant(np.float32(1), name=f"{name}:one")
        zero = ops.constant(np.float32(0), name=f"{name}:zero")
        picked = ops.select(x, one, zero, name=f"{name}:select")
        _replace(op.output(0), list(op.output(0).get_target_inputs()), picked.output(0))


#: the producers after which the CPU plugin leaves a multiply by a constant alone (it fuses it
#: into them as a post-op instead): ``isConvertableToPowerStatic`` in openvino src/plugins/
#: intel_cpu/src/transformations/cpu_opset/common/pass/convert_to_power_static.cpp
_NOT_POWER_STATIC: Final = frozenset(
    {"Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData"}
    | {"MatMul", "NormalizeL2", "Interpolate", "MVN"}
)


_SCALAR_OPS: Final = frozenset({"Multiply", "Negative", "Add", "Subtract"})


def _one_element_constants(model: Any) -> None:
    """Each F32 multiply by a one-element constant that the CPU plugin would make its
    PowerStatic node, each sum with a one-element +0 (a difference with -0) or of an Exp and a
    one-element constant (below), and each F32 Negative (which the plugin first makes a
    multiply by -1) take a constant of more than one element instead (``_row``; a value of
    one element: ``_pair``), which the plugin leaves an ordinary elementwise op: the IEEE
    result, a zero's sign included, op by op.

    A product: PowerStatic computes ``x * scale + shift`` as one fused multiply-add (openvino
    src/plugins/intel_cpu/src/transformations/cpu_opset/common/pass/convert_to_power_static.cpp,
    which takes an op whose constant has one element; ``jit_power_static_emitter``). A
    multiply's shift is +0, and ``-0 + 0`` is +0: every product that is -0 came back +0
    (``convert(false) * -2``, ``0 * -0.5``, an underflow to -0, ``neg(0)``).

    A sum with +0 (a difference with -0) has scale 1 and shift 0, which the emitter skips:
    ``-0 + 0`` came back -0. Otherwise the shift is exact to add, and ``x * 1 + c`` and
    ``x * -1 + c`` are the IEEE sum and difference (and ``x + -0``, ``x - 0``, which are ``x``,
    and ``0 - x``, which the plugin's ``-x + 0`` is).

    A sum of an Exp and a one-element constant: the common transformations fuse
    ``log(exp(x) + 1)`` into their SoftPlus kernel (common_optimizations/softplus_fusion.cpp,
    which takes a constant of one element only), which is outside the contract the ops
    compose: measured on 2026.4, -1.9e-6 where the ops give 0 (x about -20), 4x the bound. The hard-swish and hard-sigmoid they fuse from
    ``x + 3`` (hswish_fusion.cpp, hsigmoid_fusion.cpp) stay fused: their kernels round
    otherwise than the ops (9.4e-4 relative off the oracle near -3, where ``x + 3`` is exact
    and the kernel's ``x / 6 + 1 / 2`` is not), but within host-cpu's rows, where a sum is
    bounded by its larger operand (at most 0.29 of the bound measured), and MobileNetV3-small's
    host step is 1.4x faster with them fused than with ``x + 3`` kept apart.

    And ``-0 - x`` by a constant of -0s of any size (a literal, a baked weight), which the
    plugin computes as ``-x + 0`` (+0 for ``x = 0``), becomes ``x * -1`` as a Negative does:
    ``-0 - x`` is ``-x`` for every ``x``."""
    for op in list(model.get_ordered_ops()):
        kind = op.get_type_name()
        if kind not in _SCALAR_OPS or op.get_output_element_type(0) != ov.Type.f32:
            continue
        out = op.output(0)
        shape, name = [int(d) for d in out.get_shape()], op.get_friendly_name()
        if 0 in shape:
            continue  # nothing to compute; a row added to an empty value aborts the compile
        if kind == "Negative":
            x = op.input_value(0)
            _replace(out, list(out.get_target_inputs()), _scaled(x, np.float32(-1), shape, name))
            continue
        values = [_constant(op.input_value(i)) for i in (0, 1)]
        if values[0] is not None and values[1] is not None:
            continue  # folded when compiling, by the IEEE reference
        at = 0 if values[0] is not None else 1
        const, x = values[at], op.input_value(1 - at)
        if kind == "Subtract" and at == 0 and const is not None and _minus_zeros(const):
            if [int(d) for d in x.get_shape()] == shape:  # -0 - x is -x, exactly
                _replace(
                    out, list(out.get_target_inputs()), _scaled(x, np.float32(-1), shape, name)
                )
            continue
        if const is None or const.size != 1 or x.get_node().get_type_name() in _NOT_POWER_STATIC:
            continue
        c = np.float32(const.ravel()[0])
        if kind == "Multiply" and c == 1:
            continue  # x * 1 + 0 is skipped as x, which it is (a rewrite the plugin undoes)
        plus_zero = kind != "Multiply" and c == 0 and np.signbit(c) == (kind == "Subtract")
        softplus = kind != "Multiply" and x.get_node().get_type_name() == "Exp"
        if kind != "Multiply" and not (plus_zero or softplus):
            continue  # x * 1 + c, x * -1 + c: the IEEE sum or difference; x + -0 and x - 0: x
        row = _row(c, shape, name)
        if row is None and plus_zero:  # x + 0 of one element: +0 where x is a zero, else x
            zero = ops.constant(np.float32(0), name=f"{name}:zero")
            picked = ops.select(ops.equal(x, zero), zero, x, name=name).output(0)
            _replace(out, list(out.get_target_inputs()), picked)
        elif row is None:  # a value of one element
            _replace(out, list(out.get_target_inputs()), _pair(x, at, c, kind, shape, name))
        else:
            op.input(at).replace_source_output(row)


def _minus_zeros(values: np.ndarray) -> bool:
    """Whether every element of a float constant is -0."""
    v = np.asarray(values)
    return v.dtype.kind == "f" and v.size > 0 and bool(np.all((v == 0) & np.signbit(v)))


def _row(c: np.float32, shape: list[int], name: str) -> Any:
    """``c`` repeated along the last axis of ``shape`` longer than 1 (numpy broadcasting
    along the rest), or None when ``shape`` has one element."""
    longer = [k for k, d in enumerate(shape) if d > 1]
    if not longer:
        return None
    k = longer[-1]
    values = np.full([shape[k]] + [1] * (len(shape) - k - 1), c, np.float32)
    return ops.constant(values, name=f"{name}:row").output(0)


def _scaled(x: Any, c: np.float32, shape: list[int], name: str) -> Any:
    """``x * c`` of ``shape`` (``x``'s) by a constant of more than one element."""
    row = _row(c, shape, name)
    if row is None:
        return _pair(x, 1, c, "Multiply", shape, name)
    return ops.multiply(x, row, name=name).output(0)


def _pair(x: Any, at: int, c: np.float32, kind: str, shape: list[int], name: str) -> Any:
    """The ``kind`` (Multiply, Add, Subtract) of a one-element ``x`` and ``c`` (at operand
    ``at``), of ``shape``: two copies of ``x`` with two of ``c``, the first kept."""
    flat = ops.reshape(x, ops.constant(np.array([1], np.int64)), False, name=f"{name}:flat")
    pair = ops.concat([flat, flat], 0, name=f"{name}:pair").output(0)
    cs = ops.constant(np.full([2], c, np.float32), name=f"{name}:consts").output(0)
    combine = {"Multiply": ops.multiply, "Add": ops.add, "Subtract": ops.subtract}[kind]
    both = combine(cs, pair) if at == 0 else combine(pair, cs)
    first = ops.gather(both, ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0)))
    return ops.reshape(first, ops.constant(np.array(shape, np.int64)), False, name=name).output(0)


def _constant(value: Any) -> np.ndarray | None:
    """The data of ``value``'s node if it is a Constant, else None."""
    node = value.get_node()
    return np.asarray(node.get_data()) if node.get_type_name() == "Constant" else None


def _replace(out: Any, readers: list[Any], value: Any) -> None:
    """Each of ``readers`` (of ``out``, taken before ``value`` was made of it) reads ``value``
    instead, and ``out``'s names go with it: a result's port is found by them."""
    for r in readers:
        r.replace_source_output(value)
    value.get_tensor().set_names(set(out.get_names()))
    out.get_tensor().set_names(set())
