"""Values known when planning, checked against an FP16 device's range when planning.

A weight bound at import (an ONNX initializer, or a constant the importer folded, such as a
transformers decoder's causal mask of ``finfo(float32).min``) is known before the run; the
device refuses one beyond its narrowing range at upload (``NarrowingRangeUpload``). Found only
then, the plan admitted what the run refuses, and ``--partition`` could not route around a
weight. ``constant_refusals`` finds it when planning instead (``CONSTANT_RULE``):

Each F32 constant with an element beyond the contract's largest magnitude (65504), infinite or
NaN, is *out of range*. Every equation that reads an out-of-range value is refused
(``NARROWING_RANGE``, naming the constant, its first such element and its value), so a partition
runs it on the host, and its result is out of range in turn unless it provably returns into
FP16's range there. That is followed with the sentinel rule's sides (``fp16.checks``: the sign of
a value beyond the range): data movement, a gather, a convert and ``reduce_max`` keep the side;
``neg`` flips it; an add or subtract of an in-range value keeps it (the device's values are
within 65504, the constant's are beyond it); a ``select`` keeps its branches' side, and so does
a select legalized for a target without one (``x m + y (1 - m)``: each product of a branch and
its 0/1 mask keeps the branch's side, and their sum follows the add rule: Flax's
``where(mask, scores, finfo.min)`` with the minimum a folded constant); ``max`` follows
``fp16.checks``; the softmax shift
``x - max(x)`` over the last axis is at most 0 (side -); ``exp`` of a value on the - side is in
[0, 1] and back in range; a comparison's boolean is in range. Any other reader's result is
out of range, side unknown. A constant no equation reads is refused for the whole program
(the device is handed every weight of its program; a partition's spans take only those they
read). An additive mask of ``-inf`` or ``finfo.min`` is thus refused with the
softmax that reads it (the add, the row maximum, the shift and the exponent), and the rest of the
layer stays on the device; without ``--partition`` the plan is refused, as the run would be.

A mask sentinel (``fp16.checks``: an F32 literal beyond 65504, which the device saturates) is
the same once its equation is refused for any reason: the host computes that equation exactly
and hands the device a value beyond its range, which the device's input check would refuse at
run time. So a refused equation that reads a float value and such a literal (``Where(keep,
scores, finfo.min)``, GPT-2's and T5's masking by selection, on a target with no select) starts
a value out of range like a constant, on the literal's side, and its readers are refused the
same way until it is back in range (the softmax's shift and exponent): the partition keeps them
on the host instead of handing the device what it must refuse. The prelude's
``select(p, 0, -inf)`` reads no float and is not one of them: ``fp16.prelude`` rewrites its mask
or leaves it to the input check.

The prelude's ``-2^15`` mask (``fp16.prelude``) is not applied to a constant mask: it needs the
scores it is added to proven or checked within a bound, which a constant mask's partition does
not set up; the host runs those few equations exactly instead.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import numpy as np
from poot_ir import DType, Eqn, Literal, Prim, Program, Var
from poot_ir.core import COMPARISONS, REARRANGEMENT

from poot_planner.fp16.checks import _CARRY
from poot_planner.refusal import Refusal, RefusalKind

__all__ = ["CONSTANT_RULE", "constant_refusals", "out_of_range"]

CONSTANT_RULE = (
    "A weight bound when planning (an initializer or a folded constant) with an F32 element "
    "beyond 65504, infinite or NaN is refused when planning, with every equation its values "
    "reach until they provably return into FP16's range (data movement, max, neg, adds of "
    "in-range values and selects keep them out, a select legalized as x m + y (1 - m) too; "
    "the softmax shift x - max(x) and then exp bring a - side "
    "back): an additive causal or padding mask of -inf or finfo.min runs on the host with its "
    "softmax's add, maximum, shift and exponent under --partition, never refused at upload. "
    "A refused equation reading a float value and a mask sentinel (an F32 literal beyond "
    "65504: Where(keep, scores, finfo.min)) is followed the same way: the host keeps the "
    "sentinel's exact value, which the device's input check would refuse."
)


def out_of_range(value: np.ndarray, limit: float) -> tuple[tuple[int, ...], float, int] | None:
    """The first element of ``value`` beyond ``limit``, infinite or NaN, its value and the
    side of every such element (-1 or +1 when they all share a sign, 0 when not or for a
    NaN); None when every element is within the range."""
    arr = np.asarray(value, dtype=np.float64)
    bad = ~(np.abs(arr) <= limit)  # NaN too
    if not bad.any():
        return None
    flat = int(np.flatnonzero(bad)[0])
    where = tuple(int(k) for k in np.unravel_index(flat, arr.shape))
    vals = arr[bad]
    side = 0 if np.isnan(vals).any() else (-1 if (vals < 0).all() else 1 if (vals > 0).all() else 0)
    return where, float(arr.reshape(-1)[flat]), side


def constant_refusals(
    program: Program,
    constants: Mapping[str, np.ndarray],
    limit: float,
    refused: Collection[int] = (),
    masked: Collection[int] = (),
) -> list[Refusal]:
    """The refusals of ``CONSTANT_RULE`` for the F32 arguments of ``program`` whose values
    ``constants`` holds (by argument name; others are unknown until the run), and for the mask
    sentinels of the equations ``refused`` already (by index; see the module). ``masked``:
    the equations (by index) that multiply a select's branch by its 0/1 mask, where
    legalization rewrote the select as ``x m + y (1 - m)``: a branch's side is kept there."""
    side: dict[int, int] = {}  # var id -> side of an out-of-range value (0: unknown)
    origin: dict[int, tuple[tuple[str, str | int | float], ...]] = {}
    for a in program.args:
        if a.var.dtype is not DType.F32 or a.name not in constants:
            continue
        found = out_of_range(constants[a.name], limit)
        if found is not None:
            where, value, s = found
            side[a.var.id] = s
            origin[a.var.id] = (("constant", a.name), ("element", str(where)), ("value", value))
    if not side and not refused:
        return []
    made: dict[int, Eqn] = {e.out.id: e for e in program.eqns}
    refusals: list[Refusal] = []
    read = {a.id for e in program.eqns for a in e.inputs if isinstance(a, Var)}
    for vid in sorted(side.keys() - read):  # the device holds every weight of its program
        facts = origin[vid] + (("limit", limit), ("use", "unread, but uploaded whole"))
        refusals.append(Refusal(RefusalKind.NARROWING_RANGE, -1, "", facts))
    on_host = set(refused)
    for i, e in enumerate(program.eqns):
        bad = [a for a in e.inputs if isinstance(a, Var) and a.id in side]
        if not bad:
            held = _host_sentinel(e, limit) if i in on_host else None
            if held is not None:
                side[e.out.id], origin[e.out.id] = held[0], (("equation", i), *held[1])
            continue
        on_host.add(i)
        facts = origin[bad[0].id] + (("limit", limit), ("use", "runs on the host (--partition)"))
        refusals.append(Refusal(RefusalKind.NARROWING_RANGE, i, e.prim.value, facts))
        out = _side(e, side, made, i in masked)
        if out is not None:
            side[e.out.id] = out
            origin[e.out.id] = origin[bad[0].id]
    return refusals


def _host_sentinel(
    e: Eqn, limit: float
) -> tuple[int, tuple[tuple[str, str | int | float], ...]] | None:
    """For an equation run on the host that reads a float value and an F32 literal beyond
    ``limit`` (a mask sentinel), the side of its result's out-of-range elements (0: unknown)
    and the facts naming the literal; None when it reads none, reads no float value (the
    prelude's masks), or its result is back in range (``max`` with a - sentinel, ``min`` with
    a + one, a comparison's boolean)."""
    if not e.out.dtype.is_float or not any(
        isinstance(a, Var) and a.dtype.is_float for a in e.inputs
    ):
        return None
    for k, a in enumerate(e.inputs):
        if not (isinstance(a, Literal) and a.dtype is DType.F32):
            continue
        v = a.as_float()
        if abs(v) <= limit or math.isnan(v):  # NaN: refused by the literal rule already
            continue
        sign = 1 if v > 0 else -1
        if (e.prim is Prim.MAX and sign < 0) or (e.prim is Prim.MIN and sign > 0):
            return None  # the in-range operand wins
        if e.prim is Prim.SUB and k == 1:
            sign = -sign
        kept = e.prim in (Prim.SELECT, Prim.ADD, Prim.SUB, Prim.MAX, Prim.MIN)
        return (sign if kept else 0), (("literal", repr(v)), ("use", "a sentinel the host keeps"))
    return None


def _side(e: Eqn, side: dict[int, int], made: dict[int, Eqn], masked: bool = False) -> int | None:
    """The side of ``e``'s result, an equation reading an out-of-range value; None when its
    result is back in FP16's range (module docstring). ``SHIFTED`` marks the softmax shift,
    at most 0, which ``exp`` takes into [0, 1]. ``masked``: ``e`` is a legalized select's
    product of a branch and its mask."""
    sides = [side.get(a.id) if isinstance(a, Var) else None for a in e.inputs]
    known = [s for s in sides if s is not None]
    if e.prim in COMPARISONS or not e.out.dtype.is_float:
        return None
    if e.prim in _CARRY:
        return known[0]
    if e.prim is Prim.NEG:
        return -known[0] if known[0] != SHIFTED else 0
    if e.prim is Prim.EXP:
        return None if known[0] == SHIFTED else 0
    if e.prim is Prim.SELECT:  # each element one branch's: in range or on its side
        branches = {_sign(s) for s in sides[1:] if s is not None}
        return branches.pop() if len(branches) == 1 else 0
    if e.prim is Prim.MUL and masked and sides[0] is not None and sides[1] is None:
        # a select's branch times its 0/1 mask (``legalize``: ``x m + y (1 - m)`` on a target
        # with no select): each element the branch's or a zero
        return sides[0]
    if e.prim in (Prim.ADD, Prim.SUB):
        if e.prim is Prim.SUB and known[0] == -1 and _softmax_shift(e, made):
            return SHIFTED
        if any(isinstance(a, Literal) and not abs(a.as_float()) <= _F32_MAX for a in e.inputs):
            return 0
        signed = [_sign(s) for s in sides]
        if e.prim is Prim.SUB and signed[1] is not None:
            signed[1] = -signed[1]
        out = {s for s in signed if s is not None}
        return out.pop() if len(out) == 1 else 0  # opposite sides: NaN or anything
    if e.prim is Prim.MAX:
        signs = [_sign(s) for s in sides]
        if 1 in signs:
            return 1  # beyond +65504 wins
        if 0 in signs:
            return 0
        return -1 if None not in signs else None  # an in-range operand beats -65504 and below
    return 0


#: the side of ``x - max(x)``: out-of-range elements on the - side, and none above 0
SHIFTED = -2
_F32_MAX = 3.4028234663852886e38


def _sign(s: int | None) -> int | None:
    return -1 if s == SHIFTED else s


def _softmax_shift(e: Eqn, made: dict[int, Eqn]) -> bool:
    """``e`` is ``sub(x, m)`` with ``m`` the maximum of ``x`` over its last axis (through data
    movement, and through a ``max`` with a literal, which only raises it: JAX's softmax takes
    its maximum with ``initial=-inf``): every element is at most 0, or NaN where ``x`` is
    infinite throughout a row."""
    x, m = e.inputs
    if not (isinstance(x, Var) and isinstance(m, Var)):
        return False
    src = made.get(m.id)
    while src is not None and (
        src.prim in REARRANGEMENT
        or (src.prim is Prim.MAX and any(isinstance(a, Literal) for a in src.inputs))
    ):
        first = next((a for a in src.inputs if isinstance(a, Var)), None)
        src = made.get(first.id) if first is not None else None
    if src is None or src.prim is not Prim.REDUCE_MAX:
        return False
    (inp,) = src.inputs
    axes = getattr(src.params, "axes", ())
    return isinstance(inp, Var) and inp.id == x.id and tuple(axes) == (x.type.rank - 1,)
