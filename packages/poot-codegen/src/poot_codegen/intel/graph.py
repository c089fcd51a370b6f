"""Intel NPU4: a whole poot program as one OpenVINO model (``openvino.opset16``), as IR bytes.

``lower`` builds the model: its parameters are the program's arguments in order (named, typed
and shaped as declared; the argument's name is the parameter's friendly name and its only tensor
name), its results are ``program.results()`` in order (outputs, then state updates), each named
``out:<name>`` (friendly name and only tensor name; ``result_tensor_name``). Every value
the program's own equations read stays inside the graph. Each equation becomes the one opset16
op with the same semantics (table below); helper nodes are constants (axes, shapes, literals)
and, for ``dynamic_update_slice``, the clamped index grid. Nothing is recognized as a composite.
Every node is named from its equation index and role (``e7:add``, ``e7:lit1``, ``e7:f16.t``;
arguments and results by their own names, which cannot contain ``:``), so ``serialize`` of the
same program gives the same bytes in any process with the same OpenVINO.

=====================  ===================================================================
poot                   OpenVINO opset16
=====================  ===================================================================
neg exp log tanh       negative exp log tanh erf sqrt abs
erf sqrt abs
recip                  divide(1, x)
add sub mul div        add subtract multiply divide (I32 divide truncates: m_pythondiv off)
max min ge gt eq       maximum minimum less_equal(y, x) less(y, x) equal
select convert         select convert
reduce_sum/max         reduce_sum/reduce_max, keep_dims False (no axes: an identity convert,
                       the CPU plugin rejects an empty axes list)
gather                 gather(axis), batch_dims 0 (negative indices count from the end); a
                       gather from an axis of size 0 into a non-empty result (every index
                       outside it) has no lowering (``NoLowering``)
transpose reshape      transpose, reshape (special_zero False)
broadcast_in_dim       broadcast EXPLICIT, axes_mapping = dims
slice                  strided_slice (opset1: begin, end, stride over every axis, no masks)
concat matmul          concat, matmul (no transposes)
conv                   convolution (opset1) for one group, else group_convolution (opset1) of
                       the kernel reshaped to [G, O/G, C/G, *K]; explicit pads
reduce_window_max      max_pool (opset1), floor rounding, explicit pads over the spatial axes
reduce_window_sum      group_convolution (opset1) by a constant of ones [C, 1, 1, *window]
                       (a depthwise convolution: what the NPU compiler makes of AvgPool too)
iota                   a Constant range along the axis, broadcast EXPLICIT to the shape
dynamic_update_slice   scatter_nd_update (opset4, v3) with a full index grid whose start is clamped to
                       [0, dim - update_dim] as XLA does (a Constant grid for literal starts)
a scalar Literal       a Constant of its dtype and exact bit pattern (NaN payload, -0 kept)
an empty result        an empty Constant, whatever the primitive (``_empty``: OpenVINO's CPU
                       gather and broadcast of an empty tensor die of SIGFPE, issue 26)
=====================  ===================================================================

Versions: every op emitted without emulation is one the NPU compiler's frontend imports
(``compiler_ops.ACCEPTED``, read from its source; ``op_census`` lists a model's).

A result whose value is an argument, or is already another result, goes through an identity
convert (``out:<name>:pass``): the CPU plugin merges the tensor names of results that share a
producer, and a parameter's tensor name would be overwritten by the result's.

F16 emulation (``emulate_f16=True``) is for the CPU stand-in only. It models what the NPU
compiler does to F32 as well (``ConvertPrecisionToFP16``, see ``poot_planner.fp16.narrowing``): an
F32 parameter is rounded to FP16 on entry, every F32 value an equation computes is rounded to
FP16, and an F32 literal is its FP16 value (one FP16 cannot hold, an infinity too, clamped to
+-65504, as the compiler clamps splat constants of 32 bits or more; ``_fp16_splat``); a narrowed program has no F32 inside, so this matters only
for a graph lowered from an un-narrowed plan, which then differs on the stand-in as it would on
the NPU. And every F16 value is carried as f32 inside the graph (an F16 parameter converted to f32 on entry, an F16 result back to f16
on exit, F16 literals and iotas as f32 constants holding the FP16 value), and each equation that
computes a new F16 value is rounded to FP16 in the graph by ``intel.f16``, whose docstring
says how, what that proves and what it does not.

Result names. OpenVINO's IR reader renames a tensor whose name another tensor already has to
``<name>_1``; a state update is named by its state, so naming results by the program's names
made every state update (and any output named like an argument) come back from ``deserialize``
(and from the NPU, which reads the IR) as ``<name>_1``, which is itself a valid poot name. So
result tensors live in their own namespace: ``out:<name>``. A poot name is an identifier and
cannot contain ``:``, and no other tensor of the graph is named, so every tensor name is unique
and survives serialize, deserialize, compile, export and import unchanged (tested through that
whole round trip). ``model_signature`` maps ``out:<name>`` back to ``<name>``
(``program_result_name``) and reports any other output name exactly as OpenVINO has it; a
result renamed anyway (``out:acc_1``) would come back as ``acc_1``, never as the program's
``acc``. Nothing is matched by position or by guessing a suffix. Input names are the arguments'
own.

Compile the stand-in with ``CPU_STANDIN_CONFIG`` on the explicit ``"CPU"`` device (never
``AUTO``, which falls back silently), so a CPU with bf16 units does not narrow f32 itself.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypeAlias, cast

import numpy as np
from poot_ir.core import (
    BroadcastParams,
    ConcatParams,
    ConvertParams,
    ConvParams,
    Eqn,
    GatherParams,
    IotaParams,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    TransposeParams,
    Var,
)
from poot_ir.core import Literal as PootLiteral
from poot_ir.domains import DomainBounds
from poot_ir.dtypes import DType
from poot_ir.errors import NoLowering, WeightMismatch
from poot_planner.fp16.checks import RangeCheck
from poot_planner.fp16.fusion import bias_fusions
from poot_planner.guards import RESULT, DomainGuard

from poot_codegen.intel import f16 as intel_f16
from poot_codegen.intel import guard as intel_guard
from poot_codegen.intel.quiet import opset1, opset4, ov
from poot_codegen.intel.quiet import opset16 as ops

__all__ = [
    "CPU_STANDIN_CONFIG",
    "RESULT_PREFIX",
    "ArgSignature",
    "Direction",
    "deserialize",
    "lower",
    "model_signature",
    "op_census",
    "program_result_name",
    "result_tensor_name",
    "serialize",
    "signature",
]

Node: TypeAlias = Any
"""An OpenVINO node or output port: openvino has no type stubs, so ``Any`` stays here."""

TARGET: Final = "openvino"

CPU_STANDIN_CONFIG: Final[dict[str, str]] = {
    "INFERENCE_PRECISION_HINT": "f32",
    "EXECUTION_MODE_HINT": "ACCURACY",
}
"""Compile options for the CPU stand-in: keep f32 as f32 (no bf16 or f16 inference)."""

_OV_TYPE: Final = {
    DType.F32: ov.Type.f32,
    DType.F16: ov.Type.f16,
    DType.BF16: ov.Type.bf16,
    DType.I32: ov.Type.i32,
    DType.BOOL: ov.Type.boolean,
}
_POOT_TYPE: Final = {t.get_type_name(): d for d, t in _OV_TYPE.items()}
_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # a poot argument or result name

Direction: TypeAlias = Literal["in", "out"]

RESULT_PREFIX: Final = "out:"
"""The namespace of result tensor names (see "Result names" in the module docstring)."""


def result_tensor_name(name: str) -> str:
    """The tensor (and friendly) name of the program result ``name`` in a lowered model."""
    return RESULT_PREFIX + name


def program_result_name(tensor_names: set[str] | frozenset[str]) -> str | None:
    """The program result an output port carries: ``<name>`` when exactly one of the port's
    tensor names is ``out:<name>`` for a poot name, else None."""
    found = [
        n[len(RESULT_PREFIX) :]
        for n in tensor_names
        if n.startswith(RESULT_PREFIX) and _IDENT.fullmatch(n[len(RESULT_PREFIX) :])
    ]
    return found[0] if len(found) == 1 else None


class ArgSignature(NamedTuple):
    """One argument or result as the device sees it. ``dtype`` is the OpenVINO type name when
    poot has no such type, and ``shape`` the partial shape's text when it is not static, so such
    an entry never equals a program's."""

    name: str
    direction: Direction
    dtype: DType | str
    shape: tuple[int, ...] | str


def signature(program: Program) -> tuple[ArgSignature, ...]:
    """The program's arguments (``"in"``) then its results (``"out"``), in order."""
    ins = tuple(ArgSignature(a.name, "in", a.var.dtype, a.var.shape) for a in program.args)
    outs = tuple(ArgSignature(n, "out", v.dtype, v.shape) for n, v in program.results())
    return ins + outs


def model_signature(model: Any) -> tuple[ArgSignature, ...]:
    """The same for an ``ov.Model`` or ``ov.CompiledModel`` (from ``.inputs``, ``.outputs``, in
    port order). An input is named by its tensor name; an output by ``program_result_name``, or,
    when it carries no single ``out:<name>``, by OpenVINO's own name for it, unaltered."""

    def entry(port: Node, direction: Direction) -> ArgSignature:
        type_name = str(port.get_element_type().get_type_name())
        ps = port.get_partial_shape()
        shape: tuple[int, ...] | str = (
            tuple(int(d) for d in ps.to_shape()) if ps.is_static else str(ps.to_string())
        )
        name = str(port.get_any_name())
        if direction == "out":
            name = program_result_name({str(n) for n in port.get_names()}) or name
        return ArgSignature(name, direction, _POOT_TYPE.get(type_name, type_name), shape)

    return tuple(entry(p, "in") for p in model.inputs) + tuple(
        entry(p, "out") for p in model.outputs
    )


def op_census(model: Any) -> set[tuple[str, str]]:
    """Every (op type, op version) in ``model``, as the IR's ``type`` and ``version`` say."""
    return {
        (str(n.get_type_info().name), str(n.get_type_info().version_id))
        for n in model.get_ordered_ops()
    }


def serialize(model: Any) -> tuple[bytes, bytes]:
    """The IR of ``model`` as (xml, bin); weights keep their types (no f16 compression)."""
    with tempfile.TemporaryDirectory(prefix="poot-ov-") as tmp:
        xml = Path(tmp) / "model.xml"
        ov.save_model(model, str(xml), compress_to_fp16=False)
        return xml.read_bytes(), xml.with_suffix(".bin").read_bytes()


def deserialize(xml: bytes, weights: bytes) -> Any:
    """The ``ov.Model`` that ``serialize`` wrote as (xml, bin)."""
    with tempfile.TemporaryDirectory(prefix="poot-ov-") as tmp:
        path = Path(tmp) / "model.xml"
        path.write_bytes(xml)
        path.with_suffix(".bin").write_bytes(weights)
        # ENABLE_MMAP off: the constants are read into memory, so the files can go.
        return ov.Core().read_model(str(path), config={"ENABLE_MMAP": False})


def lower(
    program: Program,
    *,
    emulate_f16: bool = False,
    guards: Sequence[tuple[int, RangeCheck]] = (),
    domain_guards: Sequence[DomainGuard] = (),
    constants: Mapping[str, np.ndarray[Any, Any]] | None = None,
) -> Any:
    """``program`` as one ``ov.Model`` (see the module docstring). ``guards`` (from
    ``poot_planner.fp16.narrowing.intermediate_guards``, by equation of ``program``) add the guard
    result after the program's (``intel.guard``); so do ``domain_guards``, the plan's
    device-site domain guards (``Plan.guards``, ``Site.DEVICE``: a computed operand or result
    against its equation's domain), each a flag set when an element is outside (the compiled
    host device, which has no flag word of its own). Raises ``NoLowering`` for an equation
    this generator has no rule for. ``constants``: values of arguments known when compiling
    (an entry's bound weights), each lowered as a Constant of its value (``_baked``); the
    argument stays a parameter of the model, unread, so the ABI is the program's."""
    g = _Graph(emulate_f16)
    guarded: dict[int, list[RangeCheck]] = {}  # an equation may have two (a score's: fp16.checks)
    for at, guard in guards:
        guarded.setdefault(at, []).append(guard)
    by_eqn: dict[int, list[DomainGuard]] = {}
    for dg in domain_guards:
        by_eqn.setdefault(dg.eqn, []).append(dg)
    domain_flags: list[tuple[str, Node, DomainBounds]] = []
    checks: list[tuple[RangeCheck, Eqn, Node, list[Node | None]]] = []
    params = []
    baked: set[str] = set()
    for a in program.args:
        p = ops.parameter(list(a.var.shape), _OV_TYPE[a.var.dtype], name=a.name)
        p.output(0).get_tensor().set_names({a.name})
        params.append(p)
        node = p.output(0)
        if constants is not None and a.name in constants and _bakeable(g, a.var, constants[a.name]):
            g.env[a.var.id] = _baked(g, a.var, constants[a.name], f"in:{a.name}:const")
            baked.add(a.name)
            continue
        if g.emulated(a.var.dtype):
            node = ops.convert(p, ov.Type.f32, name=f"in:{a.name}:f32").output(0)
        elif g.npu_f32(a.var.dtype):  # the NPU's F32 -> FP16 convert on entry
            node = intel_f16.round_to_f16(node, f"in:{a.name}:f16", scalars=g.scalars).output(0)
        g.env[a.var.id] = node
    # a convolution and its bias add, one DPU task on the NPU (fp16.fusion): the convolution's
    # FP16 value never exists there, so it is neither rounded nor checked; the add is, once
    fusions = bias_fusions(program, baked)
    unrounded = {f.conv for f in fusions}
    fused_adds = {f.add: f for f in fusions}
    for i, e in enumerate(program.eqns):
        rule = _RULES.get(e.prim)
        if rule is None:
            raise NoLowering(TARGET, i, e.prim.value, "no opset16 rule")
        if e.prim is Prim.GATHER and e.out.type.size and not e.inputs[0].type.size:
            # every index is outside an empty table (the oracle raises IndexOutOfRange), and
            # OpenVINO's CPU gather divides by the table's axis: refused, never run
            raise NoLowering(TARGET, i, e.prim.value, "a gather from an empty table")
        name = f"e{i}:{e.prim.value}"
        xs = [g.atom(a, f"{name}:lit{k}") for k, a in enumerate(e.inputs)]
        if g.spread and e.prim in _BROADCASTING and e.out.type.size > 0:
            xs = g.implicit(e, xs)
        fused = fused_adds.get(i)
        if fused is not None:
            xs[fused.bias] = g.channel_bias(program.eqns[fused.broadcast], f"{name}:bias")
        out = _empty(g, e, name) if e.out.type.size == 0 else rule(g, e, xs, name)
        if (g.emulated(e.out.dtype) or g.npu_f32(e.out.dtype)) and i not in unrounded:
            out = intel_f16.round_result(
                e, xs, out, name, f32_is_fp16=g.emulate_f16, scalars=g.scalars
            )
        g.env[e.out.id] = out.output(0) if hasattr(out, "output") else out
        # the fused convolution's value is not the device's: no check reads it (a second use
        # would also keep the compiler from fusing), nor excuses the add by it
        operands: list[Node | None] = list(xs)
        if fused is not None:
            operands[fused.operand] = None
        for guard in () if i in unrounded else guarded.get(i, ()):
            checks.append((guard, e, g.env[e.out.id], operands))
        for dg in by_eqn.get(i, ()):
            held = e.out if dg.operand == RESULT else e.inputs[dg.operand]
            if not isinstance(held, Var):
                continue  # a literal: proven when planning
            label = f"{i}.{e.prim.value}.domain{dg.operand}"
            bounds = dg.domain.bounds(held.dtype)
            domain_flags.append((label, g.env[held.id], bounds))
    results = []
    # the values whose tensors have a name already (an argument's, a result's): a result that
    # is one gets a copy of its own. By value, not by Var: an identity convert (``_convert``)
    # gives two Vars one value
    claimed = {g.env[a.var.id] for a in program.args}
    for rname, var in program.results():
        node = value = g.env[var.id]
        if g.emulated(var.dtype):
            node = ops.convert(node, ov.Type.f16, name=f"out:{rname}:f16")
        elif value in claimed:
            node = ops.convert(node, _OV_TYPE[var.dtype], name=f"out:{rname}:pass")
        claimed.add(value)
        tensor = result_tensor_name(rname)
        r = ops.result(node, name=tensor)
        r.output(0).get_tensor().set_names({tensor})
        results.append(r)
    # on the NPU, a second use for every divisor its compiler would clamp (intel.guard)
    keep = [] if emulate_f16 else intel_guard.clamped_divisors(program)
    if checks or keep or domain_flags:
        carrier = np.float32 if emulate_f16 else np.float16
        nodes = [(label, g.env[v.id]) for label, v in keep]
        results.append(intel_guard.guard_result(checks, carrier, nodes, domain_flags, g.scalars))
    return ov.Model(results, params, program.name)


class _Graph:
    """The values lowered so far, by ``Var.id``, and how F16 is carried."""

    def __init__(self, emulate_f16: bool) -> None:
        self.emulate_f16 = emulate_f16
        self.env: dict[int, Node] = {}
        self.scalars = intel_f16.Scalars()  # the emulation's constants, shared by every rounding
        self.literals: dict[tuple[DType, int], Node] = {}  # each literal's constant (``atom``)
        # in emulation, each broadcast's operand with unit axes, by the broadcast's Var.id: an
        # elementwise equation reads it and broadcasts itself (``implicit``)
        self.spread: dict[int, Node] = {}

    def emulated(self, dtype: DType) -> bool:
        return self.emulate_f16 and dtype is DType.F16

    def npu_f32(self, dtype: DType) -> bool:
        """An F32 value in emulation: the NPU compiler carries it as FP16 (module docstring),
        so the stand-in holds the FP16 value in f32."""
        return self.emulate_f16 and dtype is DType.F32

    def implicit(self, e: Eqn, xs: list[Node]) -> list[Node]:
        """``xs``, each broadcast operand of the elementwise equation ``e`` replaced by its
        operand with unit axes (``spread``) where every other operand is a value of ``e``'s
        shape that stays as it is, so the op's numpy broadcasting gives that shape; a select's
        predicate is kept. The CPU plugin runs an explicit Broadcast with its reference kernel
        or folds a broadcast constant to the whole tensor, which it then lays out again at every
        run (MobileNetV3-small: a reorder of each bias); broadcasting moves values, so the
        equation's result is the same bits (the stand-in only: the NPU's graph is unchanged)."""
        full = e.out.shape
        anchors = {
            k
            for k, a in enumerate(e.inputs)
            if isinstance(a, Var) and a.id not in self.spread and a.shape == full
        }
        out = list(xs)
        for k, a in enumerate(e.inputs):
            if not isinstance(a, Var) or a.id not in self.spread:
                continue
            if e.prim is Prim.SELECT and k == 0:
                continue
            if all(j in anchors for j in range(len(e.inputs)) if j != k):
                out[k] = self.spread[a.id]
        return out

    def channel_bias(self, broadcast: Eqn, name: str) -> Node:
        """A bias add's bias, ``broadcast`` (``fp16.fusion``: of a [C] value along axis 1), as
        a [1, C, 1, 1] value: the shape the NPU compiler folds into a convolution as its bias
        (``ConvertAddToScaleShift``). In emulation, the broadcast's own spread operand."""
        spread = self.spread.get(broadcast.out.id)
        if spread is not None:
            return spread
        unit = [1] * len(broadcast.out.shape)
        unit[1] = broadcast.out.shape[1]
        source = self.atom(broadcast.inputs[0], f"{name}:source")
        return ops.reshape(source, _i64(unit, f"{name}:unit"), False, name=name).output(0)

    def carried(self, dtype: DType) -> DType:
        """The element type a value of ``dtype`` has inside the graph."""
        return DType.F32 if self.emulated(dtype) else dtype

    def atom(self, a: Var | PootLiteral, name: str) -> Node:
        """A value of the graph, or a literal's constant: one per literal (its dtype and bits)
        in the graph, shared by every equation that reads it (MobileNetV3-small reads its
        hard-swish's 0, 3 and 6 about 130 times)."""
        if isinstance(a, Var):
            return self.env[a.id]
        made = self.literals.get((a.dtype, a.bits))
        if made is None:
            if self.emulated(a.dtype) or self.npu_f32(a.dtype):
                made = _const(_fp16_splat(a.as_float(), a.dtype), name)
            else:
                made = _bits_const(a.bits, a.dtype, name)
            self.literals[(a.dtype, a.bits)] = made
        return made

    def array_const(self, values: np.ndarray[Any, Any], dtype: DType, name: str) -> Node:
        """A constant of ``values`` rounded to ``dtype`` as numpy rounds, carried as the graph
        carries ``dtype``."""
        with np.errstate(over="ignore", invalid="ignore"):
            exact = values.astype(dtype.numpy)
            half = exact.astype(np.float16) if self.npu_f32(dtype) else exact  # may overflow
        bits = exact.view(dtype.bits_dtype)
        if self.emulated(dtype):
            return _const(exact.astype(np.float32), name)
        if self.npu_f32(dtype):
            return _const(half.astype(np.float32), name)
        t = ov.Tensor(_OV_TYPE[dtype], list(values.shape))
        t.data.view(dtype.bits_dtype)[...] = bits
        return _named(ov.op.Constant(t), name)


def _bakeable(g: _Graph, var: Var, value: np.ndarray[Any, Any]) -> bool:
    """Whether the CPU plugin keeps ``value``'s bits as a constant: not a BF16 one (it turned a
    baked bf16 -0.0 into +0.0, a gather's table with infinities and NaNs beside it) and not an
    F32 one carried as F32 holding a subnormal (it flushes a subnormal constant to zero, where
    a parameter's subnormal survives; in emulation F32 rounds to FP16 first, whose values are
    all normal in f32). Such a value stays a parameter, as it was before baking."""
    if var.dtype is DType.BF16:
        return False
    if var.dtype is DType.F32 and not g.npu_f32(var.dtype):
        a = np.abs(np.asarray(value, dtype=np.float32))
        return not bool(np.any((a > 0) & (a < np.finfo(np.float32).tiny)))
    return True


def _baked(g: _Graph, var: Var, value: np.ndarray[Any, Any], name: str) -> Node:
    """A known argument as a Constant, carried as the graph carries its dtype: in emulation an
    F32 value is rounded to FP16 here, once, as ``round_to_f16`` rounds a parameter on entry
    (``array_const``: numpy's ``astype(np.float16)``, which that rounding equals bit for bit).
    The NPU compiler bakes weights into its blob the same way; a constant the CPU plugin can
    fold and lay out once is what makes the stand-in's convolutions fast. ``WeightMismatch``
    when the value is not the argument's type."""
    arr = np.asarray(value)
    if arr.shape != var.shape or DType.from_numpy(arr.dtype) is not var.dtype:
        raise WeightMismatch(
            f"a constant of {arr.dtype} {arr.shape} for an argument of {var.type}", name
        )
    return g.array_const(arr, var.dtype, name).output(0)


def _fp16_splat(value: float, dtype: DType) -> np.ndarray[Any, Any]:
    """A scalar literal as the pinned NPU compiler carries it, in f32: its FP16 value, except
    that an F32 literal whose FP16 value is infinite (a finite one beyond FP16's range, or an
    infinity) is clamped to +-65504 (npu_compiler ``convert_precision_to_fp.cpp``,
    ``clampF16Splat``: "Splat floating-point constants must be clamped, not converted", applied
    to splats of 32 bits or more). An F16 splat is not clamped at the pinned version, so an
    infinite F16 literal stays infinite (``poot_planner.fp16.narrowing.F16_SPLATS_CLAMPED``)."""
    with np.errstate(over="ignore"):
        half = np.float16(value)
    if np.isinf(half) and dtype is DType.F32:
        half = np.float16(math.copysign(65504.0, value))
    return np.asarray(half.astype(np.float32))


def _named(node: Node, name: str) -> Node:
    node.set_friendly_name(name)
    return node


def _const(values: np.ndarray[Any, Any] | np.generic, name: str) -> Node:
    return ops.constant(np.asarray(values), name=name)


def _bits_const(bits: int, dtype: DType, name: str) -> Node:
    """A scalar constant holding exactly ``bits`` (bf16 has no numpy type OpenVINO reads)."""
    t = ov.Tensor(_OV_TYPE[dtype], [])
    t.data.view(dtype.bits_dtype)[...] = bits
    return _named(ov.op.Constant(t), name)


def _i64(values: Sequence[int], name: str) -> Node:
    return ops.constant(np.array(values, np.int64).reshape(len(values)), name=name)


# -- the rules: one per primitive ------------------------------------------------------------

Rule: TypeAlias = Callable[[_Graph, Eqn, list[Node], str], Node]
"""A rule lowers one equation of a validated program, so its params are ``PARAMS_OF[e.prim]``
(the type rules check that); a rule's ``cast`` only names that type."""

_UNARY: Final[dict[Prim, Callable[..., Node]]] = {
    Prim.NEG: ops.negative,
    Prim.EXP: ops.exp,
    Prim.LOG: ops.log,
    Prim.TANH: ops.tanh,
    Prim.ERF: ops.erf,
    Prim.SQRT: ops.sqrt,
    Prim.ABS: ops.abs,
}
_BINARY: Final[dict[Prim, Callable[..., Node]]] = {
    Prim.ADD: ops.add,
    Prim.SUB: ops.subtract,
    Prim.MUL: ops.multiply,
    Prim.DIV: ops.divide,
    Prim.MAX: ops.maximum,
    Prim.MIN: ops.minimum,
    # x >= y as y <= x and x > y as y < x: the CPU plugin's GreaterEqual and Greater are true
    # where an operand is NaN, its LessEqual and Less false, as IEEE and the oracle have it
    Prim.GE: lambda x, y, name: ops.less_equal(y, x, name=name),
    Prim.GT: lambda x, y, name: ops.less(y, x, name=name),
    Prim.EQ: ops.equal,
}


def _unary(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    return _UNARY[e.prim](xs[0], name=name)


def _binary(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    node = _BINARY[e.prim](xs[0], xs[1], name=name)
    if e.prim is Prim.DIV and e.out.dtype is DType.I32:
        node.set_attribute("m_pythondiv", False)  # truncate, as the runtime does (pitfall 3)
    return node


def _recip(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    one = g.array_const(np.array(1.0), e.out.dtype, f"{name}:one")
    return ops.divide(one, xs[0], name=name)


def _select(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    return ops.select(xs[0], xs[1], xs[2], name=name)


def _convert(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    """A Convert, or the value itself where the graph carries both dtypes alike (F32 and F16
    in emulation, each already an FP16 value in f32: a narrowed program's every weight is
    converted so). The CPU plugin would drop such a Convert anyway, after carrying it through
    the IR and its first passes: MobileNetV3-small had 110 of them."""
    p = cast(ConvertParams, e.params)
    if g.carried(p.dtype) is g.carried(e.inputs[0].dtype):
        return xs[0]
    return ops.convert(xs[0], _OV_TYPE[g.carried(p.dtype)], name=name)


def _reduce(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(ReduceParams, e.params)
    if not p.axes:
        return ops.convert(xs[0], _OV_TYPE[g.carried(e.out.dtype)], name=name)
    shape = e.inputs[0].type.shape
    if e.prim is Prim.REDUCE_MAX and any(shape[a] == 0 for a in p.axes):
        # the max of nothing is -inf (INT_MIN for i32), as the oracle says; OpenVINO's
        # ReduceMax gives the lowest finite value instead, so it is a constant here
        dtype = g.carried(e.out.dtype)
        lowest = -np.inf if dtype.is_float else np.iinfo(np.int32).min
        return _const(np.full(e.out.shape, lowest, dtype=dtype.numpy), name)
    fn = ops.reduce_sum if e.prim is Prim.REDUCE_SUM else ops.reduce_max
    return fn(xs[0], _i64(p.axes, f"{name}:axes"), keep_dims=False, name=name)


def _empty(g: _Graph, e: Eqn, name: str) -> Node:
    """An equation with an empty result is an empty constant: there is nothing to compute,
    and OpenVINO's CPU plugin must not see the op (its gather and broadcast of an empty
    tensor divide by zero: the process died of SIGFPE, issue 26)."""
    return g.array_const(np.zeros(e.out.shape), e.out.dtype, name)


def _gather(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(GatherParams, e.params)
    axis = _const(np.int64(p.axis), f"{name}:axis")
    return ops.gather(xs[0], xs[1], axis, batch_dims=0, name=name)


def _transpose(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(TransposeParams, e.params)
    return ops.transpose(xs[0], _i64(p.perm, f"{name}:perm"), name=name)


def _reshape(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(ReshapeParams, e.params)
    return ops.reshape(xs[0], _i64(p.shape, f"{name}:shape"), False, name=name)


def _broadcast(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(BroadcastParams, e.params)
    if g.emulate_f16 and list(p.dims) == sorted(set(p.dims)):  # order kept: a reshape spreads it
        unit = [1] * len(p.shape)
        for k, d in enumerate(p.dims):
            unit[d] = e.inputs[0].type.shape[k]
        g.spread[e.out.id] = ops.reshape(
            xs[0], _i64(unit, f"{name}:unit"), False, name=f"{name}:spread"
        ).output(0)
    shape = _i64(p.shape, f"{name}:shape")
    dims = _i64(p.dims, f"{name}:dims")
    return ops.broadcast(xs[0], shape, dims, "EXPLICIT", name=name)


def _slice(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    # StridedSlice-1, not Slice-8: the NPU compiler's frontend has no Slice parser
    # (intel.compiler_ops). No masks: begin, end and stride are given for every axis.
    p = cast(SliceParams, e.params)
    no_mask = [0] * len(p.start)
    return opset1.strided_slice(
        xs[0],
        _i64(p.start, f"{name}:start"),
        _i64(p.limit, f"{name}:stop"),
        _i64(p.strides, f"{name}:step"),
        no_mask,
        no_mask,
        name=name,
    )


def _concat(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(ConcatParams, e.params)
    return ops.concat(xs, p.axis, name=name)


def _iota(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    p = cast(IotaParams, e.params)
    if len(p.shape) == 1:
        return g.array_const(np.arange(p.shape[0]), p.dtype, name)
    line = g.array_const(np.arange(p.shape[p.axis]), p.dtype, f"{name}:range")
    return ops.broadcast(
        line, _i64(p.shape, f"{name}:shape"), _i64([p.axis], f"{name}:dims"), "EXPLICIT", name=name
    )


def _matmul(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    return ops.matmul(xs[0], xs[1], False, False, name=name)


def _dynamic_update_slice(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    """scatter_nd_update at ``clamp(start, 0, dim - update_dim) + offset`` for every element
    of the update (slice_scatter with a runtime start is wrong on the CPU plugin)."""
    operand, update = e.inputs[0].type, e.inputs[1].type
    highs = [d - u for d, u in zip(operand.shape, update.shape, strict=True)]
    if not highs:  # a scalar operand: the update replaces it
        return ops.convert(xs[1], _OV_TYPE[g.carried(e.out.dtype)], name=name)
    grid = np.moveaxis(np.indices(update.shape, np.int32), 0, -1)
    starts = e.inputs[2:]
    literal_starts = [s for s in starts if isinstance(s, PootLiteral)]  # i32, by the type rules
    if len(literal_starts) == len(starts):
        lit = [min(max(s.as_int(), 0), h) for s, h in zip(literal_starts, highs, strict=True)]
        index = _const((grid + np.array(lit, np.int32)).astype(np.int32), f"{name}:index")
    else:
        cols = []
        for d, (s, h) in enumerate(zip(xs[2:], highs, strict=True)):
            clamped = ops.clamp(s, 0, h, name=f"{name}:clamp{d}")
            cols.append(
                ops.reshape(clamped, _i64([1], f"{name}:one{d}"), False, name=f"{name}:start{d}")
            )
        start = ops.concat(cols, 0, name=f"{name}:start")
        index = ops.add(_const(grid, f"{name}:grid"), start, name=f"{name}:index")
    # ScatterNDUpdate-3 (opset4), the only version the NPU compiler's frontend imports
    # (intel.compiler_ops); for reduction none it gives what opset15's does.
    return opset4.scatter_nd_update(xs[0], index, xs[1], name=name)


def _conv(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    # Convolution-1 and GroupConvolution-1, the versions the NPU compiler imports; it never
    # reads auto_pad, so pads are explicit (admission refused negative pads, and an input
    # dilation other than a transposed convolution's, lowered below)
    p = cast(ConvParams, e.params)
    if any(d != 1 for d in p.lhs_dilation):
        return _conv_transposed(e, xs, name)
    pads = (list(p.padding_lo), list(p.padding_hi))
    if p.groups == 1:
        return opset1.convolution(
            xs[0], xs[1], list(p.strides), *pads, list(p.rhs_dilation), "explicit", name=name
        )
    o, cg, *k = e.inputs[1].type.shape
    shape = _i64((p.groups, o // p.groups, cg, *k), f"{name}:kshape")
    kernel = ops.reshape(xs[1], shape, False, name=f"{name}:kernel")
    return opset1.group_convolution(
        xs[0], kernel, list(p.strides), *pads, list(p.rhs_dilation), "explicit", name=name
    )


def _conv_transposed(e: Eqn, xs: list[Node], name: str) -> Node:
    """A ``conv`` with input dilation ``s`` and unit window strides is the transposed
    convolution of stride ``s`` (ONNX ConvTranspose as the importer writes it): lowered to
    ConvolutionBackpropData-1 / GroupConvolutionBackpropData-1, which the NPU compiler imports
    (``compiler_ops``; IE.Deconvolution there) and runs as a DPU convolution with FP32
    accumulation, as for ``conv``. That op takes the kernel as ``[C_in, C_out, *K]`` (per group)
    unflipped, and pads measured from the transposed output: the kernel is flipped back and
    its in and out axes swapped, ``pads_begin`` is the lead ``d (K - 1)`` less the conv's low
    padding, and the high side's is split into ``pads_end`` (a crop) and ``output_padding``
    (what the conv's high padding adds past the lead). Admission guarantees the rest
    (``poot_planner.admission``: unit strides, low padding at most the lead)."""
    p = cast(ConvParams, e.params)
    o, cg, *k = e.inputs[1].type.shape
    rank = len(k)
    lead = [d * (kk - 1) for d, kk in zip(p.rhs_dilation, k, strict=True)]
    begin = [lead[a] - p.padding_lo[a] for a in range(rank)]
    rest = [lead[a] - p.padding_hi[a] for a in range(rank)]
    end, extra = [max(r, 0) for r in rest], [max(-r, 0) for r in rest]
    kernel = xs[1]
    for a in range(rank):  # the conv's kernel is the transposed one flipped along each axis
        rev = _i64(list(range(k[a] - 1, -1, -1)), f"{name}:flip{a}")
        axis = ops.constant(np.int64(2 + a), name=f"{name}:flip{a}:axis")
        kernel = ops.gather(kernel, rev, axis, batch_dims=0, name=f"{name}:flip{a}:gather")
    spatial = list(range(2, 2 + rank))
    strides, dil = list(p.lhs_dilation), list(p.rhs_dilation)
    if p.groups == 1:  # [O, C, *K] -> [C, O, *K]
        perm = _i64([1, 0, *spatial], f"{name}:kperm")
        kernel = ops.transpose(kernel, perm, name=f"{name}:kernel")
        return opset1.convolution_backprop_data(
            xs[0], kernel, strides, None, begin, end, dil, "explicit", extra, name=name
        )
    mg = o // p.groups  # [g * M/g, C/g, *K] -> [g, M/g, C/g, *K] -> [g, C/g, M/g, *K]
    shape = _i64((p.groups, mg, cg, *k), f"{name}:kshape")
    kernel = ops.reshape(kernel, shape, False, name=f"{name}:kgroups")
    perm = _i64([0, 2, 1, *(a + 1 for a in spatial)], f"{name}:kperm")
    kernel = ops.transpose(kernel, perm, name=f"{name}:kernel")
    return opset1.group_convolution_backprop_data(
        xs[0], kernel, strides, None, begin, end, dil, "explicit", extra, name=name
    )


def _reduce_window_max(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    # MaxPool-1: one output, floor rounding, explicit pads (which it ignores as -inf would)
    p = cast(ReduceWindowParams, e.params)
    return opset1.max_pool(
        xs[0],
        list(p.strides[2:]),
        list(p.padding_lo[2:]),
        list(p.padding_hi[2:]),
        list(p.window[2:]),
        "floor",
        "explicit",
        name=name,
    )


def _reduce_window_sum(g: _Graph, e: Eqn, xs: list[Node], name: str) -> Node:
    # a depthwise convolution of ones: exact taps, the accumulation the convolution's (an
    # AvgPool would divide by the area and need a multiply back, two roundings)
    p = cast(ReduceWindowParams, e.params)
    channels = e.inputs[0].type.shape[1]
    ones = g.array_const(np.ones((channels, 1, 1, *p.window[2:])), e.out.dtype, f"{name}:ones")
    return opset1.group_convolution(
        xs[0],
        ones,
        list(p.strides[2:]),
        list(p.padding_lo[2:]),
        list(p.padding_hi[2:]),
        list(p.dilation[2:]),
        "explicit",
        name=name,
    )


#: elementwise primitives of numpy-style broadcasting in their lowering (``_Graph.implicit``)
_BROADCASTING: Final = frozenset(_BINARY) | {Prim.SELECT}

_RULES: Final[dict[Prim, Rule]] = {
    **{p: _unary for p in _UNARY},
    **{p: _binary for p in _BINARY},
    Prim.RECIP: _recip,
    Prim.SELECT: _select,
    Prim.CONVERT: _convert,
    Prim.REDUCE_SUM: _reduce,
    Prim.REDUCE_MAX: _reduce,
    Prim.GATHER: _gather,
    Prim.TRANSPOSE: _transpose,
    Prim.RESHAPE: _reshape,
    Prim.BROADCAST_IN_DIM: _broadcast,
    Prim.SLICE: _slice,
    Prim.CONCAT: _concat,
    Prim.IOTA: _iota,
    Prim.MATMUL: _matmul,
    Prim.CONV: _conv,
    Prim.REDUCE_WINDOW_MAX: _reduce_window_max,
    Prim.REDUCE_WINDOW_SUM: _reduce_window_sum,
    Prim.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
}
