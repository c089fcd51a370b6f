"""A normalized row's range (``poot_planner.row_ranges``) as a bound: the distance from the
oracle's value to the range's far end where that is smaller (``_within_range``), with an FP16
device's figures for its steps' lowering (``_fp16_figures``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from poot_ir import Literal, Prim, Program, Var
from poot_ir.numerics import Contract, RoundedTwice

from poot_planner.error_bounds.steps import _contract
from poot_planner.fp16.contract import HALF_TINY, UNIT, F16Lowering, lowering
from poot_planner.legalize.steps import TINY_F16
from poot_planner.plan import Plan
from poot_planner.row_ranges import FiguresOf, contract_figures, row_range

Array = np.ndarray


def _within_range(
    program: Program,
    i: int,
    index: Mapping[int, int],
    contract_of: Callable[[int], Contract | None],
    magnitude: Callable[[Var], float],
    unpromised: set[int],
    y: Array,
    err: Mapping[int, Array],
    narrowed: FiguresOf | None = None,
    checked: bool = False,
) -> Array:
    """Equation ``i``'s bound, or where smaller, the distance from the oracle's value to the
    far end of the range the device's value lies in (``row_ranges``: a normalized row, a
    softmax), when every step that range rests on is kept. ``narrowed``: an FP16 device's
    figures (``_fp16_figures``), a normalized row only; ``checked``: the device refuses a step
    where this quotient is not finite (``fp16.contract.overflow_checked``), so on a returned
    step its divisor is a positive FP16 value, at least 2^-24 (``row_range``'s ``floor``)."""
    bound = err[program.eqns[i].out.id]
    if narrowed is None:
        rng = row_range(program, i, index, contract_of, magnitude)
    else:
        floor = TINY_F16 if checked else 0.0
        rng = row_range(program, i, index, contract_of, None, (narrowed, _held_literal), floor)
    if rng is None or any(k in unpromised for k in rng.steps):
        return bound
    y64 = np.asarray(y, np.float64)
    far = np.maximum(rng.hi - y64, y64 - rng.lo)
    return np.where(np.isfinite(y64) & (far < bound), far, bound)


def _held_literal(a: Literal) -> float:
    """The value an FP16 device holds for literal ``a`` (a normalized row's scale and eps)."""
    with np.errstate(over="ignore"):
        return float(np.float16(a.as_float()))


def _fp16_figures(plan: Plan, checked: frozenset[int]) -> FiguresOf:
    """Each step's figures against exact arithmetic on an FP16 device (``row_ranges``): its
    contract's (as ``row_ranges.contract_figures`` states them) and its FP16 lowering's
    (``fp16.contract``: one rounding, ``u`` relative and half the smallest subnormal; FP32
    accumulation of ``n`` terms, ``2 n 2^-24`` more; a pooled sum, two roundings and ``n + 2``
    halves of the smallest subnormal). A product or a sum must be one the device checks for
    overflow (``checked``): on a returned step it neither saturated nor overflowed, so the sum
    of squares is at least each square."""
    program = plan.legalized

    def figures(k: int, prim: Prim, terms: int = 1) -> tuple[float, float] | None:
        e = program.eqns[k]
        if prim in (Prim.MUL, Prim.REDUCE_SUM) and k not in checked:
            return None
        c = _contract(plan, k, e)
        base = (
            (0.0, 0.0)
            if c is not None and isinstance(c.bound, RoundedTwice)  # the lowering's, below
            else contract_figures(c, prim, terms)
        )
        if base is None:
            return None
        acc = 2.0 * 2.0**-24 * terms
        match lowering(e):
            case F16Lowering.EXACT:
                r, a = 0.0, 0.0
            case F16Lowering.ROUNDED:
                r, a = UNIT, HALF_TINY
            case F16Lowering.ACCUMULATED:
                r, a = UNIT + acc * (1.0 + UNIT), HALF_TINY
            case F16Lowering.POOLED:
                r, a = 2.0 * UNIT * (1.0 + UNIT) + acc * (1.0 + 2.0 * UNIT), (terms + 2) * HALF_TINY
        rho = base[0] + r + base[0] * r
        return (rho, base[1] + a) if rho < 1.0 else None

    return figures
