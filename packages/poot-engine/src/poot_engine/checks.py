"""The engine's host-side checks: what it can see before and after a device runs.

Every check here is on the host, before the device runtime is touched (or, for results, after a
replay and before anything is committed), and vectorized: one pass per array.

- ``check_signature``: a compiled artifact's arguments against the program's.
- ``check_step_inputs``: a step's arrays against the entry's slot arguments (names, direction,
  extents, exact dtype; nothing is converted).
- ``bind_weights``: uploaded weights against a program's weight arguments.
- ``initial_states``: an entry's initial states (given ones exactly typed and in range).
- ``check_range``: an F32 array against a narrowing contract's largest magnitude (and NaN).
- ``window_checks`` / ``check_windows``: the starts of a ``dynamic_update_slice`` that an
  argument feeds directly, which a device does not check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from poot_ir import (
    DType,
    NarrowingRangeError,
    NarrowingRangeInput,
    Prim,
    Program,
    SignatureMismatch,
    StepInputError,
    Storage,
    TensorType,
    Var,
    WeightMismatch,
    WindowOutOfRange,
)
from poot_ir.oracle import exact_array

from poot_engine.device import Signature

_F32 = np.dtype(np.float32)

__all__ = [
    "RangeCheck",
    "WindowCheck",
    "bind_weights",
    "check_range",
    "check_ranges",
    "check_signature",
    "check_step_inputs",
    "check_windows",
    "first_out_of_range",
    "initial_states",
    "range_checks",
    "saturation_limit",
    "window_checks",
    "within",
]

#: Up to this many elements, ``within`` reads the extremes with ``argmin``/``argmax``, whose
#: fixed cost is a fraction of a ufunc reduction's (about 0.5 against 2.5 us here); the
#: reductions are faster per element, so they take over for larger arrays.
_SMALL = 1 << 16


def within(x: np.ndarray, lo: float, hi: float) -> bool:
    """Whether every element of the non-empty ``x`` is in ``[lo, hi]``; a NaN never is. Two
    passes that allocate nothing: the minimum and the maximum (``argmin`` and ``argmax``
    return the first NaN's index, and a reduction propagates it, so a NaN fails both
    comparisons)."""
    if x.size <= _SMALL:
        return bool(lo <= x.item(x.argmin())) and bool(x.item(x.argmax()) <= hi)
    return bool(lo <= x.min()) and bool(x.max() <= hi)


def check_signature(expected: Signature, found: Signature, what: str) -> None:
    """``SignatureMismatch`` naming the first argument that differs (name, order, direction,
    extents or dtype), or a different number of arguments."""
    for i, (e, f) in enumerate(zip(expected.args, found.args, strict=False)):
        if e != f:
            raise SignatureMismatch(f"{what}: argument {i} differs", str(e), str(f))
    if len(expected.args) != len(found.args):
        raise SignatureMismatch(
            f"{what}: {len(found.args)} arguments instead of {len(expected.args)}",
            str(expected),
            str(found),
        )


def check_step_inputs(
    program: Program, slots: tuple[tuple[str, TensorType], ...], inputs: Mapping[str, object]
) -> tuple[np.ndarray, ...]:
    """The step's arrays in slot order, after checking that ``inputs`` holds exactly the slot
    arguments, each exactly its type. A weight, state or result name is refused by name."""
    arrays = []
    for name, type in slots:
        if name not in inputs:
            raise StepInputError(f"missing; expected an array of {type}", name)
        arg = program.arg(name)
        wide = arg is not None and arg.wide  # an int64 input held as I32: range-checked
        arrays.append(exact_array(name, inputs[name], type, StepInputError, wide))
    if len(inputs) != len(slots):
        for name in inputs:
            if not any(name == s for s, _ in slots):
                arg = program.arg(name)
                why = (
                    f"is a {arg.storage.value} argument, not a slot: a step takes slots only"
                    if arg is not None
                    else f"is not an argument of {program.name!r}"
                )
                raise StepInputError(why, name)
    return tuple(arrays)


def bind_weights(program: Program, weights: Mapping[str, TensorType]) -> tuple[str, ...]:
    """The program's weight arguments in order, after checking that ``weights`` (the uploaded
    weights' types by name) holds exactly those, each of exactly its type."""
    names = []
    for arg in program.args:
        if arg.storage is not Storage.WEIGHT:
            continue
        have = weights.get(arg.name)
        if have is None:
            raise WeightMismatch(f"missing; {program.name!r} needs {arg.var.type}", arg.name)
        if have != arg.var.type:
            raise WeightMismatch(f"uploaded as {have}, the program needs {arg.var.type}", arg.name)
        names.append(arg.name)
    for name in weights:
        if name not in names:
            other = program.arg(name)
            why = f"is a {other.storage.value} argument" if other else "is not an argument"
            raise WeightMismatch(f"{why} of {program.name!r}, not a weight", name)
    return tuple(names)


def initial_states(
    program: Program, given: Mapping[str, object], limit: float | None
) -> dict[str, np.ndarray]:
    """Each state argument's initial value: a copy of ``given[name]`` (exactly its type,
    ``StepInputError``; in range on a narrowing target, ``NarrowingRangeInput``), else zeros.
    A name in ``given`` that is no state argument is refused by name."""
    states = {a.name: a.var.type for a in program.args if a.storage is Storage.STATE}
    for name in given:
        if name not in states:
            raise StepInputError("initial_state names no state argument", name)
    initial = {}
    for name, t in states.items():
        if name in given:
            arr = exact_array(name, given[name], t, StepInputError).copy()
            check_range(NarrowingRangeInput, name, arr, limit)
        else:
            arr = np.zeros(t.shape, dtype=t.dtype.numpy)
        initial[name] = arr
    return initial


def saturation_limit(limit: float | None) -> float | None:
    """The limit a narrowed result is held to: the largest FP16 magnitude below ``limit``. On
    the Intel NPU an FP16 result of a DPU task (equal-shape add and subtract, matmul, reduce_sum)
    that overflows is clamped by the PPE to +-65504 (npu_compiler NPU40XX
    ``expand_dpu_config_invariant_ppe.cpp``: ``clampMode = PPEFpConvClampMode::ON`` for an FP16
    output), not made infinite, so a result of magnitude exactly ``limit`` is taken for a
    saturated overflow and refused (an exact value in [65488, 65520) is refused with it)."""
    if limit is None:
        return None
    return float(np.nextafter(np.float16(limit), np.float16(0.0)))


def first_out_of_range(x: np.ndarray, limit: float) -> tuple[tuple[int, ...], float] | None:
    """The index and value of the first element beyond ``limit`` in magnitude or NaN."""
    bad = ~(np.abs(x) <= limit)  # NaN compares false, so this one pass also finds NaN
    if not bad.any():
        return None
    flat = int(np.argmax(bad))
    index = tuple(int(i) for i in np.unravel_index(flat, x.shape))
    return index, float(x.reshape(-1)[flat])


def check_range(
    error: type[NarrowingRangeError], name: str, x: np.ndarray, limit: float | None
) -> None:
    """Raise ``error`` (upload, input or result) for an F32 array with an element beyond
    ``limit`` or a NaN. Nothing happens without a limit or for another dtype.

    The check every step pays allocates nothing: the array's minimum and maximum
    (``within``). Only an array that fails is searched again (``first_out_of_range``), to name
    its first bad element. (A float32 dot of the array with itself would be one pass, but it
    raises overflow warnings that cost more to silence than the second pass.)"""
    if limit is None or x.dtype != _F32 or x.size == 0:
        return
    if within(x, -limit, limit):
        return
    found = first_out_of_range(x, limit)
    if found is not None:
        raise error(name, found[0], found[1], limit)


#: One F32 array a step range-checks, resolved when it records: its position among the step's
#: inputs (or results), its name, the limit, and whether it is small enough for ``argmin``.
RangeCheck = tuple[int, str, float, bool]


def range_checks(
    limit: float | None,
    order: tuple[str, ...],
    names: tuple[str, ...],
    types: Mapping[str, TensorType],
    dtypes: frozenset[DType] = frozenset({DType.F32}),
) -> tuple[RangeCheck, ...]:
    """The range checks of the arrays ``names`` of ``dtypes`` (F32 unless said; in ``order``,
    by position): none without a limit, none for an array with no element (``check_range``
    passes those)."""
    if limit is None:
        return ()
    found = []
    for name in names:
        t = types[name]
        if t.dtype in dtypes and t.size > 0:
            found.append((order.index(name), name, limit, t.size <= _SMALL))
    return tuple(found)


def check_ranges(
    error: type[NarrowingRangeError],
    checks: tuple[RangeCheck, ...],
    arrays: tuple[np.ndarray, ...],
) -> None:
    """``check_range`` of each array ``checks`` names, in one loop: ``within`` inlined (these
    run on every step, where two calls per array are a measurable part of its host cost); an
    array that fails is searched again to name its first bad element."""
    for i, name, limit, small in checks:
        x = arrays[i]
        if small:
            if -limit <= x.item(x.argmin()) and x.item(x.argmax()) <= limit:
                continue
        elif -limit <= x.min() and x.max() <= limit:
            continue
        found = first_out_of_range(x, limit)
        if found is not None:
            raise error(name, found[0], found[1], limit)


@dataclass(frozen=True, slots=True)
class WindowCheck:
    """A ``dynamic_update_slice`` (equation ``eqn``) whose non-literal starts are all arguments:
    ``starts`` holds each start as a literal int or the argument's name."""

    eqn: int
    operand: tuple[int, ...]
    update: tuple[int, ...]
    starts: tuple[int | str, ...]

    @property
    def arguments(self) -> tuple[str, ...]:
        return tuple(s for s in self.starts if isinstance(s, str))


def window_checks(program: Program) -> tuple[WindowCheck, ...]:
    """The windows the engine can check on the host: those whose starts are literals or I32
    scalar arguments (slots or states). A start computed inside the program is not visible
    before the run, so its window is not checked (on the oracle it still raises)."""
    by_var: dict[Var, str] = {
        a.var: a.name for a in program.args if a.storage is not Storage.WEIGHT
    }
    found = []
    for i, eqn in enumerate(program.eqns):
        if eqn.prim is not Prim.DYNAMIC_UPDATE_SLICE:
            continue
        starts: list[int | str] = []
        for atom in eqn.inputs[2:]:
            if isinstance(atom, Var):
                if atom not in by_var or atom.dtype is not DType.I32:
                    break
                starts.append(by_var[atom])
            else:
                starts.append(int(atom.value))
        else:
            if any(isinstance(s, str) for s in starts):
                found.append(
                    WindowCheck(
                        i, eqn.inputs[0].type.shape, eqn.inputs[1].type.shape, tuple(starts)
                    )
                )
    return tuple(found)


def check_windows(checks: tuple[WindowCheck, ...], values: Mapping[str, np.ndarray]) -> None:
    """``WindowOutOfRange`` (the oracle's own error) for a window that does not fit."""
    for c in checks:
        st = tuple(int(values[s]) if isinstance(s, str) else s for s in c.starts)
        if any(not 0 <= s <= d - n for s, d, n in zip(st, c.operand, c.update, strict=True)):
            raise WindowOutOfRange(c.eqn, st, c.operand, c.update)
