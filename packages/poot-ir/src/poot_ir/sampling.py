"""Deterministic sample inputs for a program: what ``poot run``, ``poot demo`` and the benchmarks
feed a program when the user gives no inputs.

Values are chosen so every argument is valid for the program: an i32 argument that indexes a
gather stays inside its axis, one that starts a ``dynamic_update_slice`` keeps the window inside
the operand, and float values are moderate (uniform in [-2, 2], rounded to the argument's dtype)
so that no contract's domain is left by accident. ``integer_valued=True`` draws whole numbers
instead, for the comparisons that are bit exact only on integer-valued inputs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from poot_ir.budget import check_alloc, check_dims, nbytes
from poot_ir.core import Arg, GatherParams, Prim, Program, Var

__all__ = ["index_ranges", "sample_bytes", "sample_inputs", "value_bytes"]


def index_ranges(program: Program) -> dict[int, tuple[int, int]]:
    """For each var used as a gather index or a dynamic_update_slice start: the inclusive
    range of values that keep it valid, by var id."""
    ranges: dict[int, tuple[int, int]] = {}

    def narrow(v: object, lo: int, hi: int) -> None:
        if isinstance(v, Var):
            old = ranges.get(v.id, (lo, hi))
            ranges[v.id] = (max(old[0], lo), min(old[1], hi))

    for e in program.eqns:
        if e.prim is Prim.GATHER and isinstance(e.params, GatherParams):
            size = e.inputs[0].type.shape[e.params.axis]
            narrow(e.inputs[1], 0, size - 1)
        elif e.prim is Prim.DYNAMIC_UPDATE_SLICE:
            operand, update = e.inputs[0].type, e.inputs[1].type
            for ax, start in enumerate(e.inputs[2:]):
                narrow(start, 0, operand.shape[ax] - update.shape[ax])
    return ranges


def sample_inputs(
    program: Program,
    seed: int = 0,
    *,
    integer_valued: bool = False,
    include: Mapping[str, bool] | None = None,
) -> dict[str, np.ndarray]:
    """One array per argument of ``program`` (``include`` filters by argument name). Refused
    with ``BudgetExceeded`` before anything is drawn when the samples (and the float64 draw
    each is made from) would not fit the memory budget (``poot_ir.budget``)."""
    rng = np.random.default_rng(seed)
    ranges = index_ranges(program)
    chosen = [a for a in program.args if include is None or include.get(a.name, False)]
    check_alloc(f"sample inputs of program {program.name!r}", sample_bytes(program, chosen))
    return {a.name: _sample(a, rng, ranges, integer_valued) for a in chosen}


def sample_bytes(program: Program, args: list[Arg] | None = None) -> int:
    """What ``sample_inputs`` holds at its peak: every sample, plus the largest float64 draw."""
    chosen = list(program.args) if args is None else args
    for a in chosen:
        check_dims(a.var.type.shape, f"argument {a.name!r}", a.var.type.dtype.itemsize)
    sizes = [nbytes(a.var.type.shape, a.var.type.dtype.itemsize) for a in chosen]
    draws = [nbytes(a.var.type.shape, 8) for a in chosen]
    return sum(sizes) + max(draws, default=0)


def value_bytes(program: Program) -> int:
    """The bytes of every value of ``program`` (its arguments and every equation's results):
    what an evaluation that keeps them all holds at once."""
    vars_ = [a.var for a in program.args] + [v for e in program.eqns for v in e.outputs]
    return sum(nbytes(v.type.shape, v.type.dtype.itemsize) for v in vars_)


def _sample(
    a: Arg, rng: np.random.Generator, ranges: dict[int, tuple[int, int]], integer_valued: bool
) -> np.ndarray:
    t = a.var.type
    if t.dtype.is_float:
        if integer_valued:
            raw = rng.integers(-4, 5, size=t.shape).astype(np.float64)
        else:
            raw = rng.uniform(-2.0, 2.0, size=t.shape)
        return np.asarray(raw).astype(t.dtype.numpy)
    if t.dtype.numpy == np.bool_:
        return rng.integers(0, 2, size=t.shape).astype(np.bool_)
    lo, hi = ranges.get(a.var.id, (-8, 8))
    if hi < lo:  # no valid index (an empty axis): any value is as invalid as another
        lo, hi = 0, 0
    return rng.integers(lo, hi + 1, size=t.shape).astype(np.int32)
