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
  sentinel acting as an infinity); a multiplicative use stays refused;
- an infinite literal stays infinite; a NaN literal is refused;
- an integer converted to a float is refused (``INTEGER_TO_FLOAT``: FP16 holds integers
  exactly only up to 2048), and a convert through BF16 or to an integer is unsupported.
"""

from __future__ import annotations

import math

from poot_ir import (
    Arg,
    Atom,
    ConvertParams,
    DType,
    Eqn,
    Literal,
    Output,
    Prim,
    Program,
    Update,
    Var,
    infer_type,
    validate,
)
from poot_ir.core import COMPARISONS

from poot_planner.refusal import Refusal, RefusalKind
from poot_planner.target import NarrowingContract

__all__ = [
    "ARITHMETIC",
    "literal_refusals",
    "narrow_to_device_precision",
    "needs_narrowing",
    "operating_dtype",
]

#: Primitives that compute values (everything but data movement and converts).
ARITHMETIC = frozenset(p for p in Prim if p.is_unary or p.is_binary) | {
    Prim.REDUCE_SUM,
    Prim.REDUCE_MAX,
    Prim.MATMUL,
    Prim.SELECT,
}

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
    """True when the program does F32 arithmetic (data movement alone is carried exactly)."""
    return any(e.prim in ARITHMETIC and operating_dtype(e) is DType.F32 for e in program.eqns)


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
    return out


def _narrow_literal(a: Literal, prim: Prim, limit: float) -> Literal:
    v = a.as_float()
    if math.isfinite(v) and abs(v) > limit and prim in _ADDITIVE:
        v = math.copysign(limit, v)  # a mask sentinel: saturate instead of becoming infinite
    return Literal.of(v, DType.F16)


def narrow_to_device_precision(program: Program, contract: NarrowingContract) -> Program:
    """The narrowed program (see the module). Call only on a program ``literal_refusals``
    accepts; the arguments and results keep their names, order and types."""
    wide, narrow = DType.F32, contract.device_dtype
    next_id = 1 + max([a.var.id for a in program.args] + [e.out.id for e in program.eqns] + [-1])
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
    for e in program.eqns:
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
    return validate(Program(program.name, args, tuple(eqns), outputs, updates))
