"""The derived FP16 contract of a narrowed plan: what each equation's FP16 lowering adds to the
running error analysis (``poot_planner.error_bounds``), and which results it can bound at all.

A narrowed plan (``fp16.narrowing``) is checked against the F32 oracle of its source. No fixed
figure holds for every program there (cancellation amplifies an input's rounding, a steep
function a step's), so the contract is derived for the inputs at hand, element by element:

- **storage**: every F32 argument, weight, state and literal is rounded to FP16 first, as the
  device does (``stored``): its error is ``|fp16(x) - x|``, exactly, flushes included;
- **each equation's own rounding**, as the NPU compiler lowers it (``F16Lowering``):

  * ``ROUNDED``: one FP16 rounding of the result (a SHAVE kernel or an Eltwise):
    ``u |y| + 2^-25`` (``u = 2^-11``, half an FP16 ulp relative; ``2^-25`` half the smallest
    subnormal);
  * ``ACCUMULATED``: a matmul, a convolution, a window sum and a reduce_sum over the channel
    axis run on the DPU with FP32 accumulation rounded once: the rounding plus
    ``n 2^-24 sum |a||b|`` (FP32 accumulation of the ``n`` terms really summed, padding
    excluded: ``poot_ir.numerics.accumulated``);
  * ``POOLED``: a reduce_sum over another axis is AvgPool then Multiply by N
    (npu_compiler ``convert_reduce_to_pooling.cpp``; ``fp16.saturation.pooled_summands``): the
    mean rounds (``u |s| / N + 2^-25``, times N) and so does the product, ``2u |s| +
    (N + 1) 2^-25`` plus the accumulation;
  * ``EXACT``: data movement, choosing, signs, comparisons: nothing;

  each operand's error raising the value the rounding applies to (``|y| + carried``), and the
  F32 oracle's own rounding (``2^-23 |y|``) besides, since the check compares with it, not with
  the exact value;
- **saturation is overflow**: an element that may reach 65504 is promised nothing (the DPU
  saturates there, a SHAVE kernel gives infinity; the in-graph guard and the host check refuse
  it as an overflow), so its bound is infinite, unless the device checks it
  (``overflow_checked``): a value the in-graph guard checks on every element (an
  intermediate) is finite and within +-65504 on every step the device returns (else the
  step is refused, and no bound is checked), so its rounding is at most
  65504's and its bound at most the reach of that range from the oracle's value, whatever
  its operands' bounds (a quotient by a difference its inputs' rounding may move by its whole
  value; a deep stack whose first-order carry passes 65504). The bound is stated for the
  steps the device returns, which is where it is checked.

Where no finite bound can come out for any input, the plan says so per result
(``unbounded_results``): a saturated mask sentinel (a literal beyond FP16's range, carried as
+-65504, ``fp16.narrowing``) differs from the F32 literal by more than any figure, so every
value it reaches is promised nothing by the analysis (the sentinel rule of ``fp16.checks``
still refuses such a result unless the sentinel dominates it).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, assert_never

import numpy as np
from poot_ir import (
    DType,
    Eqn,
    Literal,
    Prim,
    Program,
    Var,
)
from poot_ir.core import COMPARISONS, EXACT_ARITHMETIC, MOVEMENT
from poot_ir.numerics import NarrowStorage, Unbounded, UnboundedBy, accumulated, summands

from poot_planner.fp16.checks import GuardKind, analyse
from poot_planner.fp16.saturation import pooled_summands

__all__ = [
    "DERIVED_RULE",
    "F32_ORACLE",
    "HALF_TINY",
    "LIMIT",
    "UNIT",
    "F16Lowering",
    "contract_form",
    "lowering",
    "overflow_checked",
    "own_rounding",
    "stored",
    "stored_literal",
    "unbounded_results",
    "zero_operand",
]

Array = np.ndarray
#: FP16's unit roundoff: half an ulp of 1 (a rounded normal value is within ``UNIT`` of it,
#: relatively)
UNIT = 2.0**-11
#: half FP16's smallest subnormal: a rounded subnormal is within this of the value
HALF_TINY = 2.0**-25
#: FP16's largest finite value: a value reaching it may be a saturated overflow
LIMIT = 65504.0
#: the F32 oracle's own rounding of a step (its kernels compute at float64 and round once),
#: with a little room for an F32 transcendental's extra half ulp
F32_ORACLE = 2.0**-23
#: FP32 accumulation: ``n`` terms add at most ``n 2^-24`` of their magnitudes' sum (first order)
_F32_ACCUMULATION = 2.0**-24


DERIVED_RULE = (
    "Each step of a narrowed plan is checked (Engine(verify=...), poot run, poot acceptance) "
    "against the F32 oracle within a bound derived for that step's inputs by the running error "
    "analysis: the FP16 rounding of every F32 input, weight, state and literal, then each "
    "equation's own FP16 rounding as the NPU compiler lowers it (rounded once; FP32 "
    "accumulation rounded once for matmul, conv, window sums and channel reductions; AvgPool "
    "then x N, two roundings, for other reductions), an element that may reach 65504 promised "
    "nothing (overflow) unless the in-graph guard checks it: such an intermediate is within "
    "+-65504 on every step the device returns, its bound at most that range's reach from the "
    "oracle's value (a clamp or softmax after it bounds it again). An element the analysis cannot bound is promised nothing and the "
    "check names the equation that made it so; a result a saturated sentinel reaches is named "
    "in the plan. The normwise figure above is the design figure poot acceptance measures on "
    "hardware, not a step's contract."
)


class F16Lowering(Enum):
    """How the NPU compiler lowers an equation computing an FP16 value (see the module)."""

    EXACT = "exact"
    ROUNDED = "rounded once"
    ACCUMULATED = "FP32 accumulation rounded once"
    POOLED = "AvgPool then x N: two roundings"


def lowering(e: Eqn) -> F16Lowering:
    """The lowering of equation ``e`` of an F32 program narrowed to FP16."""
    if e.prim in MOVEMENT or e.prim in EXACT_ARITHMETIC or e.prim in COMPARISONS:
        return F16Lowering.EXACT
    if zero_operand(e) is not None:  # x + 0, x - 0, 0 - x: an FP16 value or its negation
        return F16Lowering.EXACT
    match e.prim:
        case Prim.IOTA | Prim.REDUCE_WINDOW_MAX | Prim.REDUCE_MAX | Prim.SELECT:
            return F16Lowering.EXACT
        case Prim.MATMUL | Prim.CONV | Prim.REDUCE_WINDOW_SUM:
            return F16Lowering.ACCUMULATED
        case Prim.REDUCE_SUM:
            n = pooled_summands(e)
            return F16Lowering.POOLED if n is not None and n > 1 else F16Lowering.ACCUMULATED
        case Prim.CONVERT:
            return F16Lowering.ROUNDED if e.out.dtype.is_float else F16Lowering.EXACT
        case _:
            return F16Lowering.ROUNDED


def zero_operand(e: Eqn) -> int | None:
    """For an add or a subtraction with a literal zero operand (of either sign), which operand
    is the zero: its FP16 result is the other operand's value (``0 - x``: negated), exactly
    but for the sign of a zero result, so it rounds nothing. None for every other equation."""
    if e.prim not in (Prim.ADD, Prim.SUB):
        return None
    return next(
        (k for k, a in enumerate(e.inputs) if isinstance(a, Literal) and a.as_float() == 0.0),
        None,
    )


def stored(x: Any) -> Array:
    """``|fp16(x) - x|`` elementwise at float64: the error of the device's first rounding of an
    F32 value (a flush to zero included; inf where FP16 overflows, NaN-free: a NaN stays NaN
    and is matched as one, so it carries no error)."""
    x64 = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        held = np.asarray(x).astype(np.float16).astype(np.float64)
        err = np.abs(held - x64)
    return np.where(np.isnan(x64), 0.0, np.where(np.isnan(err), np.inf, err))


def stored_literal(a: Literal) -> float:
    """The error of the F16 literal a narrowed program holds for F32 literal ``a``: its FP16
    rounding, or for a mask sentinel (beyond 65504, carried as +-65504) the distance to it."""
    v = a.as_float()
    if math.isnan(v):
        return 0.0
    if math.isinf(v):
        return math.inf
    if abs(v) > LIMIT:
        return abs(v) - LIMIT
    return abs(float(np.float16(v)) - v)


def _accumulation(e: Eqn, ops: list[Array]) -> Array:
    """FP32 accumulation's error at each result element: ``n 2^-24 sum |terms|`` to first
    order (``numerics.accumulated``: ``n`` the terms really summed, padding excluded), doubled:
    ``gamma_n = n u / (1 - n u) <= 2 n u`` while ``n u <= 1/2`` (``n`` up to 2^23 terms), the
    second-order terms included."""
    return 2.0 * _F32_ACCUMULATION * accumulated(e, ops)


def own_rounding(
    e: Eqn, ops: list[Array], y: Array, carried: Array, checked: bool = False
) -> Array:
    """The error equation ``e``'s FP16 lowering adds (see the module) at the oracle's result
    ``y``, given its operands' errors carried to the result (``carried``); inf where the result
    may reach 65504 (an overflow, promised nothing), unless ``checked``: a step the device
    returns holds this equation's value finite (``overflow_checked``), so its rounding is at
    most that of 65504."""
    if not e.out.dtype.is_float:
        return np.zeros(np.shape(y))
    y64 = np.abs(np.asarray(y, np.float64))
    with np.errstate(all="ignore"):
        held = y64 + carried
        if checked:  # the device's value is at most 65504 in magnitude (an inf carry too)
            held = np.fmin(held, LIMIT)
        oracle = F32_ORACLE * y64
        match lowering(e):
            case F16Lowering.EXACT:
                return np.where(np.isfinite(held) | np.isnan(y64), oracle, np.inf)
            case F16Lowering.ROUNDED:
                own = UNIT * held + HALF_TINY
            case F16Lowering.ACCUMULATED:
                own = UNIT * held + HALF_TINY + _accumulation(e, ops)
            case F16Lowering.POOLED:
                n = summands(ops[0], y)
                own = 2.0 * UNIT * (1.0 + UNIT) * held + (n + 2) * HALF_TINY
                own = own + _accumulation(e, ops)
            case other:
                assert_never(other)
        own = own + oracle
        over = ~(held + own < LIMIT)  # NaN (undefined) and past the range alike
        if checked:
            over = np.zeros(np.shape(over), bool)
    return np.where(over & ~np.isnan(y64), np.inf, np.where(np.isnan(y64), 0.0, own))


def overflow_checked(
    program: Program, limit: float, scores: frozenset[int] = frozenset()
) -> frozenset[int]:
    """The equations of ``program`` (the legalized program of a narrowed plan, as the device
    lowers it) whose value a step the device returns holds finite, within +-``limit``: those the
    in-graph guard checks for overflow on every element (``fp16.checks``, not ``fresh``: an
    infinity or NaN there refuses the step). ``scores``: the plan's ``score_bound``, which the
    device's guards are analysed with. An F32 result is range-checked on the host too, but a
    result bounded only by that range is promised nothing (the equation that made it so is
    named), not a figure as large as the range."""
    found = analyse(program, limit, scores).guards
    return frozenset(g.eqn for g in found if g.kind is GuardKind.OVERFLOW and not g.fresh)


def unbounded_results(program: Program) -> tuple[Unbounded, ...]:
    """Each result of F32 ``program`` (the source a plan narrows) the analysis cannot bound,
    with the first equation that makes it so (see the module)."""
    origin: dict[int, tuple[int, str]] = {}
    for i, e in enumerate(program.eqns):
        found = next(
            (origin[a.id] for a in e.inputs if isinstance(a, Var) and a.id in origin), None
        )
        if found is None and any(
            isinstance(a, Literal)
            and a.dtype is DType.F32
            and not math.isnan(a.as_float())
            and abs(a.as_float()) > LIMIT
            for a in e.inputs
        ):
            found = (i, e.prim.value)
        if found is not None:
            origin[e.out.id] = found
    return tuple(
        Unbounded(name, *origin[v.id], UnboundedBy.SENTINEL)
        for name, v in program.results()
        if v.id in origin
    )


def contract_form(program: Program, cls: NarrowStorage) -> str:
    """The derived contract's form, as ``poot plan`` shows it: what the bound is made of, how
    many equations of ``program`` (the F32 program the plan narrows) lower each way, the results
    it cannot bound (each with the equation that makes it so), and the specification's figure
    ``poot acceptance`` measures on hardware."""
    counts: dict[F16Lowering, int] = {}
    for e in program.eqns:
        if e.out.dtype is DType.F32:
            kind = lowering(e)
            counts[kind] = counts.get(kind, 0) + 1
    kinds = ", ".join(f"{k.value} x{counts[k]}" for k in F16Lowering if k in counts)
    out = (
        "derived per result on each step's inputs (FP16): |y - F32 oracle| <= the FP16 "
        "rounding of every F32 input and literal, carried with each equation's own "
        f"({kinds or 'none'}); an element that may reach 65504 is promised nothing (overflow)"
    )
    if cls.unbounded:
        out += "; unbounded: " + "; ".join(str(u) for u in cls.unbounded)
    return out + f"; design figure normwise {cls.normwise_rel:.3g} (poot acceptance, on hardware)"
