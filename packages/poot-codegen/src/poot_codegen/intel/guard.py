"""The overflow guard of a narrowed Intel graph: one extra result of flags the graph computes.

``poot_planner.fp16.checks`` decides which equations are checked and how; this builds the check
from each guarded value as the graph holds it (FP16 on the NPU; on the stand-in the f32 value
already rounded to FP16 by ``intel.f16``, so infinities appear where the NPU's would):

- ``OVERFLOW``: set when an element is not within +-65504 (infinite or NaN); for a DPU task
  (``poot_planner.fp16.saturation``: an equal-shape add or subtract, a matmul, a reduce_sum)
  also at +-65504 itself (``abs(v) <= 65472``, the largest FP16 value below it), which is what
  the NPU's DPU gives for an overflow, its PPE clamping FP16 outputs (an exact value in
  [65488, 65520) is refused with it), unless an operand of an add or subtract is at +-65504
  there already (a sentinel carried); with ``fresh``, only where every operand element is finite (an
  elementwise equation), or when every operand is finite everywhere (a reduce_sum or matmul).
- ``SENTINEL``: set when an element is not at or beyond 65504 on the sentinel's side.
- ``SCORE``: set when an element is not within +-``SCORE_BOUND`` (beyond it, or NaN): the
  precondition of the prelude's -2^15 mask (``poot_planner.fp16.prelude``).

Every order test is a LessEqual or Less (``65504 <= |x|``, not ``|x| >= 65504``): the CPU
plugin's Greater and GreaterEqual are true where an operand is NaN, its Less and LessEqual
false as IEEE has it, so a NaN is never taken for a value at FP16's edge.

Each flag is reduced to one boolean, the flags are concatenated into one ``boolean[n]`` result,
appended after the program's results and named ``poot:guard:<label>,<label>,...`` (each
``RangeCheck.label``), so the device that loads the blob knows which equation each flag names. Every
op used is in ``compiler_ops.ACCEPTED`` (Abs, LessEqual, LogicalNot,
LogicalOr, LogicalAnd, ReduceLogicalAnd, Reshape, Concat); the compiled host device's domain
flags (``domain_flags``, in no NPU graph) also use Subtract, Sqrt, Add, ReduceSum and NotEqual,
and so do the vpu-cpu stand-in's checks (``_nan_flag``: the same flags, each check summed where
its value lies, with Select and Less; in no NPU graph either). A guard also gives each guarded
divisor a second use, which keeps the NPU compiler from inserting its epsilon clamp in front of
a divide whose divisor has one use (npu_compiler ``convert_precision_to_fp16.cpp``,
``insertEpsilonClamp``: it clamps the divisor to [0.0001, 65504]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final, TypeAlias

import numpy as np
from poot_ir import CodegenError, DType, Eqn, Prim, Program, Var
from poot_ir.domains import DomainBounds
from poot_planner.fp16.checks import GuardKind, RangeCheck
from poot_planner.fp16.prelude import SCORE_BOUND
from poot_planner.fp16.saturation import saturates

from poot_codegen.intel.f16 import Scalars
from poot_codegen.intel.quiet import opset16 as ops
from poot_codegen.intel.quiet import ov

__all__ = ["GUARD_PREFIX", "domain_flags", "guard_labels", "guard_result"]

Node: TypeAlias = Any

GUARD_PREFIX: Final = "poot:guard:"
_FP16_MAX: Final = 65504.0
#: the largest FP16 value below 65504: a checked value must be at most this (``OVERFLOW``)
_BELOW_SATURATION: Final = 65472.0
#: for each bound, the largest f32 magnitude that rounds to an FP16 value within it
#: (``_nan_flag``: 65488 is the tie of 65472 and 65504, which goes to 65472; every f32 value
#: below 65520 rounds to 65504 or less)
_ROUNDS_WITHIN: Final = {
    _BELOW_SATURATION: 65488.0,
    _FP16_MAX: float(np.nextafter(np.float32(65520.0), np.float32(0.0))),
}


def clamped_divisors(program: Program) -> list[tuple[str, Var]]:
    """The values the NPU compiler would clamp in front of a divide, each with its keep label.

    npu_compiler ``convert_precision_to_fp16.cpp`` ``insertEpsilonClamp`` puts a Clamp to
    [0.0001, 65504] (``nearest_non_zero_positive_value``, ``vpux/utils/core/type/float16.hpp``)
    after a divisor's producer (after the producer of a
    sqrt's operand, for a divisor that is a sqrt) when that producer has one use, is not a
    constant, its first operand is not a constant and its result is FP16: a negative divisor
    would become 0.0001, and so would a zero or one below 0.0001. Giving such a value a second use (a
    ``keep`` flag) keeps the compiler from inserting the clamp, so the NPU divides as the
    oracle does. A parameter or a literal divisor has no producer and is never clamped."""
    made = {e.out.id: e for e in program.eqns}
    found: list[tuple[str, Var]] = []
    for i, e in enumerate(program.eqns):
        if e.prim not in (Prim.DIV, Prim.RECIP):
            continue
        d = e.inputs[-1]
        if isinstance(d, Var) and d.id in made and made[d.id].prim is Prim.SQRT:
            d = made[d.id].inputs[0]
        if isinstance(d, Var) and d.id in made and d.dtype is DType.F16:
            found.append((f"{i}.{e.prim.value}.keep", d))
    return found


def guard_labels(tensor_names: set[str] | frozenset[str]) -> tuple[str, ...] | None:
    """The labels a guard result's tensor name carries, or None for any other port."""
    for n in tensor_names:
        if n.startswith(GUARD_PREFIX):
            return tuple(n[len(GUARD_PREFIX) :].split(","))
    return None


def _flat(x: Node, name: str) -> Node:
    return ops.reshape(
        x, ops.constant(np.array([-1], np.int64), name=f"{name}.shape"), False, name=name
    )


def _all(x: Node, name: str) -> Node:
    """One boolean: every element of ``x`` is true (an empty ``x`` is)."""
    axis = ops.constant(np.array([0], np.int64), name=f"{name}.axis")
    return ops.reduce_logical_and(_flat(x, f"{name}.flat"), axis, False, name=name)


def _float(x: Node, name: str) -> None:
    # a node or one of its outputs. Only float values are guarded (fp16.checks); a guard on
    # anything else means its equation index names another equation than the one lowered (as
    # when guards of the source were applied to its legalized program): refuse, never guess
    kind = x.get_element_type() if hasattr(x, "get_element_type") else x.get_output_element_type(0)
    if not kind.is_real():
        raise CodegenError(f"openvino guard {name}: a check of a {kind} value, not a float one")


def _finite(x: Node, carrier: type, name: str, top: float = _FP16_MAX) -> Node:
    _float(x, name)
    edge = ops.constant(np.array(top, carrier), name=f"{name}.max")
    return ops.less_equal(ops.abs(x, name=f"{name}.abs"), edge, name=name)


def _flag(
    g: RangeCheck, e: Eqn, out: Node, xs: Sequence[Node | None], carrier: type, name: str
) -> Node:
    """One boolean: the check of ``g`` failed somewhere."""
    if g.kind is GuardKind.SCORE:  # NaN compares false: flagged too
        bound = ops.constant(np.array(SCORE_BOUND, carrier), name=f"{name}.bound")
        ok = ops.less_equal(ops.abs(out, name=f"{name}.abs"), bound, name=f"{name}.bounded")
    elif g.kind is GuardKind.SENTINEL:
        edge = ops.constant(np.array(g.side * _FP16_MAX, carrier), name=f"{name}.edge")
        low, high = (edge, out) if g.side > 0 else (out, edge)
        ok = ops.less_equal(low, high, name=f"{name}.dominated")
    else:
        # from a DPU task, 65504 itself is a saturated overflow (the PPE clamp), unless an
        # operand is already at +-65504 there (a sentinel carried: -65504 + 0); an operand is
        # inherited only where it is infinite or NaN
        strict = saturates(e)
        ok = _finite(out, carrier, f"{name}.finite", _BELOW_SATURATION if strict else _FP16_MAX)
        if strict and e.prim.is_binary:
            edge = ops.constant(np.array(_FP16_MAX, carrier), name=f"{name}.edge")
            for k, x in _held(e, xs):
                held = ops.abs(x, name=f"{name}.held{k}.abs")
                at = ops.less_equal(edge, held, name=f"{name}.held{k}")
                ok = ops.logical_or(ok, at, name=f"{name}.carried{k}")
        if g.fresh:
            # float operands only: a select's predicate is boolean (no infinity to inherit)
            var_ins = [x for k, x in _held(e, xs) if e.inputs[k].type.dtype.is_float]
            finite_ins = [_finite(x, carrier, f"{name}.in{k}") for k, x in enumerate(var_ins)]
            if e.prim.is_unary or e.prim.is_binary:  # elementwise: where operands are finite
                for k, f in enumerate(finite_ins):
                    ok = ops.logical_or(
                        ok, ops.logical_not(f, name=f"{name}.inf{k}"), name=f"{name}.or{k}"
                    )
            else:  # inherited somewhere: the check is off for the whole value
                for k, f in enumerate(finite_ins):
                    inherited = ops.logical_not(_all(f, f"{name}.all{k}"), name=f"{name}.inh{k}")
                    ok = ops.logical_or(ok, inherited, name=f"{name}.or{k}")
    return ops.logical_not(_all(ok, f"{name}.ok"), name=f"{name}.bad")


def _nan_flag(
    g: RangeCheck, e: Eqn, out: Node, xs: Sequence[Node | None], name: str, c: Scalars
) -> Node:
    """``_flag`` on the stand-in (FP16 carried in f32), as one f32 element that is NaN
    exactly when ``_flag`` is set: each element's check a root (``_roots``: the square root of
    a difference that is negative exactly where the element fails, every end at least 1 in
    magnitude), an element the check excuses (an operand at +-65504, an infinite operand) a 0
    by select, and the sum over every axis (``_summed``). A flat boolean reduction per check
    made the CPU plugin lay each checked value out again (a reorder from the convolutions'
    blocked layout) and reduce it with a slow kernel: half of MobileNetV3-small's step.

    An overflow check of a value the emulation has just rounded reads the magnitude the
    rounding took of its operand (``Scalars.magnitudes``) instead of taking the rounded
    value's again: the rounded value is within 65472 exactly when that magnitude is at most
    65488 (the tie between 65472 and 65504 goes to 65472, the even one), and within 65504
    exactly when it is below 65520 (at most 65519.996, the f32 value below it); a NaN stays
    NaN. One op fewer a check, and the same flags."""
    _float(out, name)
    if g.kind is GuardKind.SCORE:
        root = _roots(out, -SCORE_BOUND, SCORE_BOUND, name, c)
    elif g.kind is GuardKind.SENTINEL:
        edge = g.side * _FP16_MAX
        root = (
            _roots(out, edge, math.inf, name, c)
            if g.side > 0
            else _roots(out, -math.inf, edge, name, c)
        )
    else:
        strict = saturates(e)
        top = _BELOW_SATURATION if strict else _FP16_MAX
        before, saturated = c.magnitudes.get(out, (None, False))
        # a saturating rounding is within 65504 wherever its operand is not NaN: only its
        # value tells (a check of 65504 on it is the roots of the value, as with no rounding)
        if before is None or (saturated and top == _FP16_MAX):
            root = _roots(out, -top, top, f"{name}.finite", c)
        else:
            edge = _ROUNDS_WITHIN[top]
            room = ops.subtract(c(edge, f"guard.before{edge!r}"), before, name=f"{name}.room")
            root = ops.sqrt(room, name=f"{name}.root").output(0)
        zero = c(0.0, "guard.zero")
        elementwise = e.prim.is_unary or e.prim.is_binary
        if strict and e.prim.is_binary:  # a sentinel carried (|x| >= 65504): excused
            edge = c(_FP16_MAX, "guard.fp16_max")
            for k, x in _held(e, xs):
                size = ops.abs(x, name=f"{name}.held{k}.abs")
                if g.fresh and e.inputs[k].type.dtype.is_float:
                    # and an infinite or NaN operand too (below): one test, which both
                    # fail, for the two excuses
                    inside = ops.less(size, edge, name=f"{name}.held{k}")
                    root = ops.select(inside, root, zero, name=f"{name}.or{k}").output(0)
                    continue
                at = ops.less_equal(edge, size, name=f"{name}.held{k}")
                root = ops.select(at, zero, root, name=f"{name}.carried{k}").output(0)
        inherited = []
        if g.fresh and not (strict and e.prim.is_binary):
            var_ins = [x for k, x in _held(e, xs) if e.inputs[k].type.dtype.is_float]
            for k, x in enumerate(var_ins):
                if elementwise:  # where operands are finite
                    finite = _finite(x, np.float32, f"{name}.in{k}")
                    root = ops.select(finite, root, zero, name=f"{name}.or{k}").output(0)
                else:  # inherited somewhere: the check is off for the whole value
                    fin = _roots(x, -_FP16_MAX, _FP16_MAX, f"{name}.in{k}", c)
                    inherited.append(_summed(fin, f"{name}.in{k}", c))
        if inherited:
            total = _summed(root, name, c)
            for k, s in enumerate(inherited):
                off = ops.not_equal(s, s, name=f"{name}.inh{k}")
                total = ops.select(off, zero, total, name=f"{name}.or{k}").output(0)
            return total
    return _summed(root, name, c)


def _held(e: Eqn, xs: Sequence[Node | None]) -> list[tuple[int, Node]]:
    """The operands of ``e`` that can excuse its check, with their positions: a value the
    device holds (not a literal; not a value fused into ``e``, None in ``xs``: a convolution
    whose bias add ``e`` is, ``poot_planner.fp16.fusion``, which the check must not read)
    that may be at or beyond 65504 or NaN. A baked constant (a bias) whose every element is
    inside excuses nothing, so its test would be a select that always keeps the check."""
    return [
        (k, x)
        for k, (a, x) in enumerate(zip(e.inputs, xs, strict=True))
        if isinstance(a, Var) and x is not None and not _inside_constant(x)
    ]


def _inside_constant(x: Node) -> bool:
    """Whether ``x`` is a Constant (through reshapes, as a spread bias is) whose every element
    is finite and below 65504 in magnitude."""
    node = x.get_node() if hasattr(x, "get_node") else x
    while node.get_type_name() == "Reshape":
        node = node.input_value(0).get_node()
    if node.get_type_name() != "Constant":
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(node.get_data().astype(np.float32)) < _FP16_MAX))


def guard_result(
    checks: Sequence[tuple[RangeCheck, Eqn, Node, Sequence[Node | None]]],
    carrier: type,
    keep: Sequence[tuple[str, Node]] = (),
    domains: Sequence[tuple[str, Node, DomainBounds]] = (),
    scalars: Scalars | None = None,
) -> Node:
    """The guard result: ``checks`` holds each guard with the narrowed equation it checks, the
    equation's value and its operands as the graph holds them; ``carrier`` is the numpy type
    the graph carries FP16 in (float16 on the NPU, float32 on the stand-in). Each of ``keep``
    (a label ``<eqn>.<prim>.keep`` and a value) adds a flag the device ignores, computed from
    the value only to give it one more use (``clamped_divisors``). Each of ``domains`` (a label
    ``<eqn>.<prim>.domain<operand>``, the F32 value and its domain's bounds) is a device-site
    domain guard (``domain_flags``). ``scalars``: the graph's shared constants (None: the
    guard's own), which the stand-in's checks take theirs from."""
    c = scalars if scalars is not None else Scalars()
    flags: list[Node] = []
    labels: list[str] = []
    if checks and carrier is np.float32:  # the stand-in: one NaN test of every check's sum
        # a zero-size value has nothing to check (and a sum over it crashed the CPU plugin's
        # compile: memory corruption, ONNX's reduce_log_sum_exp_empty_set)
        sums = [
            _nan_flag(g, e, out, xs, f"guard.{g.label}", c)
            if e.out.type.size > 0
            else ops.constant(np.zeros(1, np.float32), name=f"guard.{g.label}.empty")
            for g, e, out, xs in checks
        ]
        total = _vector(sums, "guard.sums", c)
        flags.append(ops.not_equal(total, total, name="guard.checks"))
        labels.extend(g.label for g, _, _, _ in checks)
        checks = ()
    for g, e, out, xs in checks:
        name = f"guard.{g.label}"
        one = ops.constant(np.array([1], np.int64), name=f"{name}.one")
        flags.append(ops.reshape(_flag(g, e, out, xs, carrier, name), one, False, name=name))
        labels.append(g.label)
    for label, node in keep:
        name = f"guard.{label}"
        one = ops.constant(np.array([1], np.int64), name=f"{name}.one")
        finite = _all(_finite(node, carrier, f"{name}.finite"), f"{name}.all")
        used = ops.logical_not(finite, name=f"{name}.used")  # false as a rule: no work on the host
        flags.append(ops.reshape(used, one, False, name=name))
        labels.append(label)
    for named, flag in domain_flags(domains, c):
        flags.append(flag)
        labels.extend(named)
    tensor = GUARD_PREFIX + ",".join(labels)
    # one vector already (the host device's domain guards): no concat, which the CPU plugin
    # runs in F32 and converts back to boolean with a reference kernel
    flag = flags[0] if len(flags) == 1 else ops.concat(flags, 0, name="guard.flags")
    r = ops.result(flag, name=tensor)
    r.output(0).get_tensor().set_names({tensor})
    return r


def domain_flags(
    domains: Sequence[tuple[str, Node, DomainBounds]], scalars: Scalars | None = None
) -> list[tuple[tuple[str, ...], Node]]:
    """Device-site domain guards computed in the graph, for the compiled host device, which
    counts nothing of its own while it runs: for each (label, F32 value, bounds), a flag set
    when an element of the value is outside the bounds (inside: ``lo <= x <= hi``, or NaN
    when ``bounds.nan``). The bounds are F32 values already (a domain's ends at F32), so every
    compare is exact. Returned as boolean vectors, each with the labels of its flags in order.

    Where it is exact (``_by_roots``), each value becomes one F32 elementwise chain that is NaN
    exactly where an element is outside (``_roots``) and one sum of it, which is NaN exactly
    when one is; the guards' sums are tested together, as one vector. Measured on ocr_cls (65
    guards), the step's CPU time was 3.2x ONNX Runtime's with two compares, their AND and a
    boolean reduction of a plain copy per guard, 2.1x with three reductions per guard (sum,
    maximum, minimum), 1.0x with no guard at all. Elsewhere each element is compared.
    ``scalars``: the graph's shared constants (None: their own)."""
    c = scalars if scalars is not None else Scalars()
    for label, v, _ in domains:
        _check_f32(v, f"a domain guard {label}")
    found: list[tuple[tuple[str, ...], Node]] = [
        ((label,), _compared(v, b, label)) for label, v, b in domains if not _by_roots(b)
    ]
    fast = [(label, v, b) for label, v, b in domains if _by_roots(b)]
    if not fast:
        return found
    name = "guard.domain"
    sums = [_root_sum(v, b, f"guard.{label}", c) for label, v, b in fast]
    total = _vector(sums, f"{name}.sums", c)
    flags = ops.not_equal(total, total, name=name)
    found.append((tuple(label for label, _, _ in fast), flags))
    return found


def _by_roots(bounds: DomainBounds) -> bool:
    """Whether ``_roots`` is exact for ``bounds``: NaN outside, an end at least finite, and
    every finite end at least 1 in magnitude. Then ``hi - x`` (and ``x - lo``) is negative
    exactly when ``x`` is past the end, however rounded: a rounded difference of two F32
    values has the exact difference's sign and is zero only when they are equal, and near an
    end of magnitude 1 or more it is a normal number, which no flush of subnormals to zero
    (the plugin's, should it set one) turns into 0."""
    ends = [e for e in (bounds.lo, bounds.hi) if not math.isinf(e)]
    return not bounds.nan and bool(ends) and all(abs(e) >= 1.0 for e in ends)


def _root_sum(value: Node, bounds: DomainBounds, name: str, c: Scalars) -> Node:
    """The sum of ``_roots(value)`` over every axis, one element (``_summed``)."""
    return _summed(_roots(value, bounds.lo, bounds.hi, name, c), name, c)


def _summed(roots: Node, name: str, c: Scalars) -> Node:
    """The sum of ``roots`` over every axis, one element with the rank kept (a scalar's as a
    vector of one): NaN exactly when a root is (a sum of values at or above 0, infinities
    among them, is never NaN otherwise). ``_vector`` puts the sums of a graph in one vector."""
    rank = _rank(roots)
    if rank == 0:
        return ops.reshape(roots, c.i64((1,), "guard.shape"), False, name=f"{name}.rank1")
    axes = c.i64(tuple(range(rank)), "guard.axes")
    return ops.reduce_sum(roots, axes, True, name=f"{name}.sum")


def _rank(x: Node) -> int:
    shape = x.get_partial_shape() if hasattr(x, "get_partial_shape") else None
    return len(shape if shape is not None else x.get_output_partial_shape(0))


def _vector(sums: Sequence[Node], name: str, c: Scalars) -> Node:
    """One-element values (``_summed``), in order, as one vector: each run of one rank joined
    and then flattened, so a graph of rank-4 checks has one reshape, not one per check."""
    runs: list[list[Node]] = []
    for s in sums:
        if runs and _rank(runs[-1][0]) == _rank(s):
            runs[-1].append(s)
        else:
            runs.append([s])
    flat = []
    for k, run in enumerate(runs):
        joined = run[0] if len(run) == 1 else ops.concat(run, 0, name=f"{name}.run{k}")
        if _rank(run[0]) != 1:
            joined = ops.reshape(joined, c.i64((-1,), "guard.flat"), False, name=f"{name}.flat{k}")
        flat.append(joined)
    return flat[0] if len(flat) == 1 else ops.concat(flat, 0, name=name)


def _roots(value: Node, lo: float, hi: float, name: str, c: Scalars) -> Node:
    """``sqrt(hi - x) + sqrt(x - lo)`` over each finite end (``sqrt(hi - |x|)`` for ``[-hi,
    hi]``): NaN exactly where ``x`` is outside (``_by_roots``): the square root of a negative
    difference is NaN, a NaN ``x`` stays NaN, and an infinity past a finite end gives an
    infinite negative difference; inside, every term is at or above 0 (+inf for an infinity
    at an infinite end: ``hi - (-inf)``). Pure F32 arithmetic, which the CPU plugin runs as one
    fused elementwise kernel on the value's own layout."""
    if lo == -hi:
        top = c(hi, f"guard.end{hi!r}")
        size = ops.abs(value, name=f"{name}.abs")
        return ops.sqrt(ops.subtract(top, size, name=f"{name}.room"), name=f"{name}.root").output(0)
    terms = []
    if not math.isinf(hi):
        top = c(hi, f"guard.end{hi!r}")
        room = ops.subtract(top, value, name=f"{name}.room_hi")
        terms.append(ops.sqrt(room, name=f"{name}.root_hi"))
    if not math.isinf(lo):
        bottom = c(lo, f"guard.end{lo!r}")
        room = ops.subtract(value, bottom, name=f"{name}.room_lo")
        terms.append(ops.sqrt(room, name=f"{name}.root_lo"))
    if len(terms) == 1:
        return terms[0].output(0)
    return ops.add(terms[0], terms[1], name=f"{name}.roots").output(0)


def _check_f32(value: Node, what: str) -> None:
    kind = (
        value.get_element_type()
        if hasattr(value, "get_element_type")
        else value.get_output_element_type(0)
    )
    if kind != ov.Type.f32:
        raise CodegenError(f"{what} on {kind} (only f32 values are guarded)")


def _compared(value: Node, bounds: DomainBounds, label: str) -> Node:
    """The flag of one domain guard as a vector of one, from every element compared."""
    name = f"guard.{label}"
    lo = ops.constant(np.array([bounds.lo], np.float32), name=f"{name}.lo")
    hi = ops.constant(np.array([bounds.hi], np.float32), name=f"{name}.hi")
    ge = ops.less_equal(lo, value, name=f"{name}.ge")
    inside = ops.logical_and(ge, ops.less_equal(value, hi, name=f"{name}.le"), name=f"{name}.in")
    if bounds.nan:
        nan = ops.not_equal(value, value, name=f"{name}.nan")
        inside = ops.logical_or(inside, nan, name=f"{name}.in_or_nan")
    every = _all(inside, f"{name}.all")
    one = ops.constant(np.array([1], np.int64), name=f"{name}.one")
    return ops.reshape(ops.logical_not(every, name=f"{name}.flag"), one, False, name=name)
