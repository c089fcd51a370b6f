"""Narrowing F32 programs to a device that computes in FP16 (the Intel NPU4).

A vendor compiler handed an F32 graph narrows it silently; poot makes the narrowing a step of
its own, visible in the program. ``narrow_to_device_precision`` is the first pass for a target
that records a ``NarrowingContract``: each F32 argument is converted to F16 by an explicit
``convert`` on entry, the whole graph computes in F16, and each F32 result is converted back on
exit. Nothing in between is converted op by op, so the contract bounds the graph's error as a
whole, and the program's numerics class becomes ``NarrowStorage``.

The literal rules (``literal_refusals``), exactly as the specification states them:

- an F32 literal FP16 cannot hold (beyond 65504) is refused (``NARROWING_RANGE``), unless it is
  an operand of an add or subtract: then a finite literal saturates to +-65504 (a mask
  sentinel acting as an infinity), under the sentinel rule of ``fp16.checks`` (its result is
  refused unless the sentinel dominates it); a multiplicative use stays refused;
- an infinite literal of an add or subtract is a sentinel like a finite one beyond the range
  (the NPU compiler clamps an infinite splat constant to +-65504 anyway, ``splat_refusals``);
  elsewhere it is refused, and so is a NaN literal;
- a non-zero finite F32 literal FP16 flushes to zero (of magnitude at most half FP16's smallest
  subnormal, 2^-25) is refused (``NARROWING_RANGE``, "flushes to zero"): ``ge x 1e-30`` would
  be ``ge x 0``, true at x = 0; ``x * 1e-30`` would lose x whole. An addend that flushes is not
  refused: ``x + 1e-12`` (LayerNorm's epsilon, added to the variance) is ``x`` on the device,
  an absolute error of at most 2^-25, which the derived contract carries as the literal's
  storage rounding (``fp16.contract.stored_literal``) as it carries an input's; where the sum
  then leaves a domain (a variance of exactly 0 under a square root's reciprocal) the device's
  guard refuses the step, typed;
- a literal a comparison reads that FP16 does not hold exactly is refused (``NARROWING_RANGE``,
  "compared"): the FP16 value it rounds to is indistinguishable from it on the device, so an
  operand equal to that value compares otherwise than in F32 (``ge x 0.1`` at x = 0.0999755859375,
  FP16's 0.1);
- an integer converted to a float is refused (``INTEGER_TO_FLOAT``: FP16 holds integers
  exactly only up to 2048), and a convert through BF16 or to an integer is unsupported;
- an F32 counter (``iota``, as the importer writes ONNX's Range over fixed shapes: a detector's
  anchor grid) becomes an FP16 counter when it counts to at most 2048, every value exact; a
  longer one is refused (``NARROWING_RANGE``, naming its last value), since FP16 would round
  the values past 2048 that F32 holds (admission's, ``poot_planner.admission``).
"""

from __future__ import annotations

import math

import numpy as np
from poot_ir import (
    Arg,
    Atom,
    ConvertParams,
    DType,
    Eqn,
    IotaParams,
    Literal,
    Output,
    Prim,
    Program,
    Update,
    Var,
    infer_type,
    validate,
)
from poot_ir.core import COMPARISONS, MOVEMENT

from poot_planner.capability import NarrowingContract
from poot_planner.fp16.checks import RangeCheck, analyse
from poot_planner.refusal import Refusal, RefusalKind

__all__ = [
    "ARITHMETIC",
    "COUNTER_RULE",
    "EXACT_INTEGERS",
    "F16_SPLATS_CLAMPED",
    "INPUT_EDGE_RULE",
    "LITERAL_EDGE_RULE",
    "intermediate_guards",
    "last_count",
    "literal_refusals",
    "narrow_to_device_precision",
    "needs_narrowing",
    "operating_dtype",
    "splat_refusals",
]

#: FP16 holds every integer of magnitude up to 2048 exactly
EXACT_INTEGERS = 2048


def last_count(p: IotaParams) -> int:
    """The largest value a counter holds (-1 for an empty one): FP16 holds it exactly up to
    ``EXACT_INTEGERS``."""
    return p.shape[p.axis] - 1


COUNTER_RULE = (
    f"An F32 counter (iota: ONNX's Range over fixed shapes) computes in FP16 when it counts to at "
    f"most {EXACT_INTEGERS}, every value exact; a longer one is refused when planning (narrowing "
    "range, naming its last value)."
)

LITERAL_EDGE_RULE = (
    "A non-zero F32 literal FP16 flushes to zero (magnitude at most 2^-25, half its smallest "
    "subnormal), and a literal a comparison reads that FP16 does not hold exactly (an operand "
    "equal to its FP16 rounding would compare otherwise than in F32: ge x 1e-30 is true at "
    "x = 0 in FP16), are refused when planning (narrowing range, naming the literal, its FP16 "
    "value and why). An addend that flushes (LayerNorm's var + 1e-12) is admitted: an "
    "absolute error of at most 2^-25 the derived contract carries as the literal's rounding."
)

INPUT_EDGE_RULE = (
    "An F32 input, weight or state that sqrt or log reads, with an element whose FP16 rounding "
    "crosses the function's domain edge at 0 (a negative of magnitude at most 2^-25 before "
    "sqrt: NaN in F32, -0 in FP16; a positive of magnitude at most 2^-25 before log: finite in "
    "F32, -inf in FP16), is refused before the run (DomainError naming the element and what "
    "FP16 rounds it to); the contract is not restated for the rounded input. Weights are "
    "checked when bound, states when set and after every step, inputs before every step."
)

#: Primitives that compute values (everything but data movement, converts and ``iota``).
ARITHMETIC = frozenset(Prim) - MOVEMENT - {Prim.CONVERT, Prim.IOTA}

_ADDITIVE = (Prim.ADD, Prim.SUB)


def operating_dtype(e: Eqn) -> DType:
    """The dtype an equation computes in: its operands' for comparisons, select's branches',
    the table's for gather, the source's for convert, else its result's."""
    if e.prim in COMPARISONS or e.prim in (Prim.CONVERT, Prim.GATHER, Prim.DYNAMIC_UPDATE_SLICE):
        return e.inputs[0].dtype
    if e.prim is Prim.SELECT:
        return e.inputs[1].dtype
    return e.out.dtype


def needs_narrowing(program: Program) -> bool:
    """True when the program has an F32 argument or result, or does F32 arithmetic.

    Data movement counts: the NPU compiler converts every F32 tensor of the graph to FP16
    (openvinotoolkit/npu_compiler ``src/vpux_compiler/src/dialect/IE/transforms/passes/
    convert_precision_to_fp16.cpp``: F32, F64 and signless i8 become f16, on by default through
    ``enableConvertPrecisionToFP16``), so an F32 gather, transpose, slice or concat returns FP16
    values; I32 and BF16 keep their width there (BOOL, an i8, round-trips through FP16)."""
    wide = DType.F32
    if any(a.var.dtype is wide for a in program.args):
        return True
    if any(v.dtype is wide for _, v in program.results()):
        return True
    return any(e.prim in ARITHMETIC and operating_dtype(e) is wide for e in program.eqns)


def literal_refusals(program: Program, contract: NarrowingContract) -> list[Refusal]:
    """Refusals of the literals narrowing cannot carry (see the module). The convert rules are
    admission's (``poot_planner.admission``), since they hold with or without a contract."""
    out: list[Refusal] = []
    limit = contract.max_magnitude
    for i, e in enumerate(program.eqns):
        for a in e.inputs:
            if not (isinstance(a, Literal) and a.dtype is DType.F32):
                continue
            v = a.as_float()
            if math.isnan(v):
                out.append(
                    Refusal(
                        RefusalKind.NARROWING_RANGE,
                        i,
                        e.prim.value,
                        (("literal", "nan"), ("limit", limit)),
                    )
                )
            elif math.isinf(v) and e.prim not in _ADDITIVE:
                out.append(_infinite_literal(i, e.prim.value, v))
            elif (moved := _moved_literal(e.prim, v, limit)) is not None:
                out.append(Refusal(RefusalKind.NARROWING_RANGE, i, e.prim.value, moved))
            elif math.isfinite(v) and abs(v) > limit and e.prim not in _ADDITIVE:
                out.append(
                    Refusal(
                        RefusalKind.NARROWING_RANGE,
                        i,
                        e.prim.value,
                        (
                            ("literal", repr(v)),
                            ("limit", limit),
                            ("use", "multiplicative or other"),
                        ),
                    )
                )
    out.extend(analyse(program, limit).refusals)  # the sentinel rule (fp16.checks)
    return out


def _moved_literal(
    prim: Prim, v: float, limit: float
) -> tuple[tuple[str, str | int | float], ...] | None:
    """The facts refusing a finite literal within range that FP16 flushes to zero, or that a
    comparison reads and FP16 moves; None for a literal FP16 carries."""
    if not math.isfinite(v) or abs(v) > limit:
        return None
    held = float(np.float16(v))
    if v != 0.0 and held == 0.0 and prim not in _ADDITIVE:
        return (("literal", repr(v)), ("fp16", 0.0), ("use", "flushes to zero in FP16"))
    if prim in COMPARISONS and held != v:
        use = "compared: indistinguishable in FP16 from its rounding"
        return (("literal", repr(v)), ("fp16", held), ("use", use))
    return None


def _infinite_literal(i: int, prim: str, v: float) -> Refusal:
    facts = (
        ("literal", repr(v)),
        ("use", "the NPU compiler clamps a splat constant's infinity to 65504"),
    )
    return Refusal(RefusalKind.NARROWING_RANGE, i, prim, facts)


#: Whether the NPU compiler the shell pins (nix/intel-npu.json: linux-npu-driver 1.38.0, its
#: 2026 npu_compiler) clamps an F16 splat constant whose value is infinite. It does not: its
#: precision pass (``src/vpux_compiler/src/dialect/IE/transforms/passes/
#: convert_precision_to_fp.cpp``, ``ConvertPrecisionToFPPass::safeRunOnModule``, read at
#: openvinotoolkit/npu_compiler a285f0b5, the newest stored 2026 source) sends a splat to
#: ``clampF16Splat`` only when ``inElemType.getIntOrFloatBitWidth() >= (sizeof(float) * 8)``:
#: F32 and F64 splats. The 2025 ``convert_precision_to_fp16.cpp`` compared the bit width with
#: ``sizeof(float)`` (4: every float type, F16 included), which is what this rule used to follow.
#: An F32 splat whose FP16 value is infinite is still clamped to +-65504 (the stand-in does the
#: same, ``poot_codegen.intel.graph``).
F16_SPLATS_CLAMPED = False


def splat_refusals(program: Program) -> list[Refusal]:
    """An infinite F16 literal on an FP16 device, refused only if the pinned compiler clamped
    it to +-65504 (``F16_SPLATS_CLAMPED``; ``x + -inf`` would be ``x - 65504``). At the pinned
    version it does not, so an infinite F16 literal is carried as the infinity it is and none is
    refused. (An F32 one in a narrowed program is a sentinel instead: ``literal_refusals``.)"""
    if not F16_SPLATS_CLAMPED:
        return []
    return [
        _infinite_literal(i, e.prim.value, a.as_float())
        for i, e in enumerate(program.eqns)
        for a in e.inputs
        if isinstance(a, Literal) and a.dtype is DType.F16 and math.isinf(a.as_float())
    ]


def _narrow_literal(a: Literal, prim: Prim, limit: float) -> Literal:
    v = a.as_float()
    if not math.isnan(v) and abs(v) > limit and prim in _ADDITIVE:
        # a mask sentinel: saturated, as the NPU compiler itself clamps an infinite splat
        v = math.copysign(limit, v)
    return Literal.of(v, DType.F16)


def narrow_to_device_precision(program: Program, contract: NarrowingContract) -> Program:
    """The narrowed program (see the module). Call only on a program ``literal_refusals``
    accepts; the arguments and results keep their names, order and types."""
    return _narrow(program, contract)[0]


def intermediate_guards(
    program: Program, contract: NarrowingContract, scores: frozenset[int] = frozenset()
) -> tuple[tuple[int, RangeCheck], ...]:
    """The in-graph guards of source ``program`` (``fp16.checks``; ``scores``: the values that
    get a ``SCORE`` guard, ``Plan.score_bound``), each with the index of the equation of the
    narrowed program that computes the guarded value."""
    at = _narrow(program, contract)[1]
    found = analyse(program, contract.max_magnitude, scores).guards
    return tuple((at[g.eqn], g) for g in found if g.eqn in at)


def _narrow(program: Program, contract: NarrowingContract) -> tuple[Program, dict[int, int]]:
    """The narrowed program and, for each source equation it keeps, its index there."""
    wide, narrow = DType.F32, contract.device_dtype
    at: dict[int, int] = {}
    next_id = program.next_var_id()
    eqns: list[Eqn] = []
    env: dict[int, Atom] = {}

    def emit(prim: Prim, inputs: tuple[Atom, ...], params: object) -> Var:
        nonlocal next_id
        t = infer_type(prim, inputs, params, len(eqns))  # type: ignore[arg-type]
        v = Var(next_id, t)
        next_id += 1
        eqns.append(Eqn(prim, inputs, (v,), params))  # type: ignore[arg-type]
        return v

    for a in program.args:
        env[a.var.id] = (
            emit(Prim.CONVERT, (a.var,), ConvertParams(narrow)) if a.var.dtype is wide else a.var
        )
    for i, e in enumerate(program.eqns):
        ins = tuple(
            env[a.id]
            if isinstance(a, Var)
            else _narrow_literal(a, e.prim, contract.max_magnitude)
            if a.dtype is wide
            else a
            for a in e.inputs
        )
        params = e.params
        if isinstance(params, ConvertParams):
            dst = narrow if params.dtype is wide else params.dtype
            if ins[0].dtype is dst:  # a cast the boundary already made: nothing to do
                env[e.out.id] = ins[0]
                continue
            params = ConvertParams(dst)
        if isinstance(params, IotaParams) and params.dtype is wide:  # admitted: exact in FP16
            params = IotaParams(params.shape, narrow, params.axis)
        at[i] = len(eqns)
        env[e.out.id] = emit(e.prim, ins, params)

    def exit_value(v: Var) -> Var:
        got = env[v.id]
        if v.dtype is wide and got.dtype is not wide:
            return emit(Prim.CONVERT, (got,), ConvertParams(wide))
        if isinstance(got, Literal):  # cannot happen: results are equation outputs or arguments
            raise ValueError("a result cannot be a literal")
        return got

    outputs = tuple(Output(o.name, exit_value(o.var)) for o in program.outputs)
    updates = tuple(Update(u.state, exit_value(u.var)) for u in program.updates)
    args = tuple(Arg(a.name, a.var, a.storage, a.wide) for a in program.args)
    return validate(Program(program.name, args, tuple(eqns), outputs, updates)), at
