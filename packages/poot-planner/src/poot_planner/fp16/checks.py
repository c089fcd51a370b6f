"""What a narrowed graph must check inside itself: FP16 overflow of an intermediate, and
saturated additive sentinels that stopped dominating.

The engine's range checks see the F32 boundary only. Inside a narrowed graph an intermediate can
leave FP16's range while the F32 result still looks fine (``x / (x * x)`` at x = 300: the FP16
square is inf and the quotient 0, the oracle says 0.0033). So the graph computes one flag per
guarded equation and returns them as one extra result, which the device checks after every run
and refuses with ``NarrowingRangeIntermediate`` naming the equation (``poot_codegen`` builds the
flags, ``poot_npu.vpu`` checks them). ``analyse`` decides, on the source program, which
equations are guarded and how:

- ``OVERFLOW``: an equation that computes new values (add, sub, mul, div, sqrt, exp, ...,
  reduce_sum, matmul) on narrowed data, unless its value is only ever a program result (the
  result range check sees that), and only where a result depends on it. The flag is set when an element is infinite or NaN; where an
  operand may itself carry an infinity (from an infinite literal or a sentinel), only where every
  operand element is finite (``fresh``), since an inherited infinity is the F32 program's own.
  An add, subtract or multiply of finite operands whose value is only ordered (``neg``,
  ``max``, ``min``) until it is clamped between literals inside FP16's range or compared with
  one (how the legalized comparisons read a difference) is not guarded: its FP16 overflow is an
  infinity (or 65504, on a saturating NPU) on the side of the exact value, which is beyond 65504
  there too, so the clamp or the comparison gives what the exact value gives. Those three
  cannot make a NaN from finite operands.
- ``SENTINEL``: the sentinel rule below.
- ``SCORE``: the attention-mask rewrite's precondition (``poot_planner.fp16.prelude``): a score the
  prelude's ``-2^15`` mask is added to, where the partition could not prove it bounded, is
  flagged where an element is beyond ``SCORE_BOUND`` or NaN. Only the values named by the plan
  (``Plan.score_bound``, var ids of the legalized program) get it, each besides its overflow
  guard.

The sentinel rule (``SENTINEL_RULE``, published in docs/features.md). The specification saturates
an F32 literal beyond 65504 to +-65504 when it is an operand of an add or subtract, a mask
sentinel standing for an infinity. That is sound only while the sentinel dominates: if the
device's result of the add is at or beyond 65504 on the sentinel's side, the F32 result is beyond
FP16's range on that side too (the true sentinel is farther out than 65504), so the device holds
"beyond range, this side" correctly; if not (``x + 100000`` at x = -40000 gives 25504, the F32
result is 60000), the result is refused. A dominated value is such a "beyond range" value, and
its uses are admitted only where every value beyond range on that side gives the same answer:
data movement and converts, max (it wins on the + side, loses against any in-range value on the
- side), exp on the - side (0), neg (the side flips) and another add or subtract (checked for
dominance again); any other use, a comparison, an add of two opposite sides, or a program
result is refused when planning (``NARROWING_RANGE``, facts naming the sentinel's equation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from poot_ir import CodegenError, DType, Eqn, Literal, Prim, Program, Var
from poot_ir.core import COMPUTING, REARRANGEMENT

from poot_planner.refusal import Refusal, RefusalKind

__all__ = [
    "OVERFLOW_RULE",
    "SCORE_RULE",
    "SENTINEL_RULE",
    "GuardKind",
    "Guards",
    "RangeCheck",
    "analyse",
]

SENTINEL_RULE = (
    "An F32 literal beyond 65504 (an infinite one too: the NPU compiler clamps infinite splat "
    "constants to 65504) used by an add or subtract saturates to +-65504 (a mask sentinel); an "
    "infinite literal anywhere else is refused. The sentinel's result is refused at run time unless the sentinel dominates it (the "
    "device's sum is at or beyond 65504 on the sentinel's side, so the F32 sum is beyond FP16's "
    "range there too); a dominated value may only flow into data movement, converts, max, neg, "
    "exp on the - side and further adds or subtracts (checked again), never into another "
    "operation, a comparison or a program result (refused when planning)."
)

OVERFLOW_RULE = (
    "Every narrowed equation that computes new values and feeds another equation returns, "
    "inside the graph, a flag set when its FP16 value is infinite or NaN (where its operands "
    "are finite), and for an equal-shape add or subtract, a matmul or a reduce_sum also at "
    "magnitude 65504 (the NPU's DPU saturates their overflow to +-65504), unless an add's "
    "operand is at 65504 already (a sentinel carried); a narrowed F32 result such an equation "
    "made is held below 65504 on the host for the same reason (unless it adds a sentinel's "
    "product); the device checks the flags after every run and refuses the step "
    "(NarrowingRangeIntermediate, naming the equation) before any state changes. An add, "
    "subtract or multiply of finite operands that is only ordered (neg, max, min) until it is "
    "clamped between literals inside FP16's range or compared with one is not flagged: its "
    "overflow gives the answer the exact value gives."
)

SCORE_RULE = (
    "Where a partition's host prelude gives an attention mask -2^15 in place of -inf but the "
    "scores it is added to are not proven within 16367.3 (a matmul of pre-scaled q and k), "
    "the device span that makes those scores flags, inside the graph, any element beyond that "
    "bound or NaN; the step is refused (NarrowingRangeIntermediate, check score, naming the "
    "equation). Only a device that checks it (the Intel graph with its FP16 guard) gets that "
    "rewrite; elsewhere the mask stays -inf."
)


class GuardKind(Enum):
    OVERFLOW = "overflow"
    SENTINEL = "sentinel"
    SCORE = "score"


@dataclass(frozen=True, slots=True)
class RangeCheck:
    """One in-graph check of source equation ``eqn``: ``side`` is the sentinel's sign (+1, -1)
    for ``SENTINEL``, 0 for ``OVERFLOW``; ``fresh`` for an overflow check that ignores elements
    whose operands are already infinite."""

    eqn: int
    primitive: str
    kind: GuardKind
    side: int = 0
    fresh: bool = False

    @property
    def label(self) -> str:
        """``<eqn>.<primitive>.<kind>``: how the graph names the check (no ``,`` or ``:``)."""
        return f"{self.eqn}.{self.primitive}.{self.kind.value}"


@dataclass(frozen=True, slots=True)
class Guards:
    guards: tuple[RangeCheck, ...]
    refusals: tuple[Refusal, ...]


#: Uses through which a dominated value keeps its side (its value is carried, not computed on):
#: a concat and a dynamic update carry it only when their data operands agree (below).
_CARRY = REARRANGEMENT | {Prim.GATHER, Prim.CONVERT, Prim.REDUCE_MAX}


def _saturated(a: object, limit: float) -> int:
    """The sign of ``a`` when it is an F32 literal beyond ``limit`` (infinite ones included:
    the NPU compiler clamps those to 65504 too), else 0."""
    if isinstance(a, Literal) and a.dtype is DType.F32:
        v = a.as_float()
        if not math.isnan(v) and abs(v) > limit:
            return 1 if v > 0 else -1
    return 0


def analyse(program: Program, limit: float, scores: frozenset[int] = frozenset()) -> Guards:
    """The in-graph guards of ``program`` (a source program to be narrowed) and the refusals of
    the sentinel rule (module docstring); ``scores`` are the var ids of the values that get a
    ``SCORE`` guard too (float equation outputs of ``program``, else ``CodegenError``: the
    check would be silently missing)."""
    side: dict[int, int] = {}  # var id -> side of a dominated value it may hold
    inf: set[int] = set()  # var ids that may hold an inherited infinity
    refusals: list[Refusal] = []
    guards: list[RangeCheck] = []
    checked: list[RangeCheck] = []  # the SCORE guards, each after its equation's other guard
    results = {v.id for _, v in program.results()}
    live = set(results)  # values a result depends on: a dead equation's overflow changes none
    for e in reversed(program.eqns):
        if e.out.id in live:
            live.update(a.id for a in e.inputs if isinstance(a, Var))
    uses: dict[int, int] = {}
    readers: dict[int, list[Eqn]] = {}
    for e in program.eqns:
        if e.out.id not in live:
            continue
        for a in e.inputs:
            if isinstance(a, Var):
                uses[a.id] = uses.get(a.id, 0) + 1
                readers.setdefault(a.id, []).append(e)

    def literal_bound(e: Eqn) -> bool:
        """``e`` takes one finite literal inside FP16's range (the other operand a value)."""
        lits = [a for a in e.inputs if isinstance(a, Literal)]
        return len(lits) == 1 and math.isfinite(v := lits[0].as_float()) and abs(v) <= limit

    def only_clamped(vid: int) -> bool:
        """Every path from ``vid`` only orders it until it is clamped on both sides by literals
        inside FP16's range, or compared with such a literal. Ordering steps (``neg``, which
        swaps the sides; ``max``/``min``, bounding a side when the other operand is such a
        literal) keep a value beyond 65504 and its FP16 infinity on the same side, so the clamp
        or the comparison gives the same answer for both (a legalized ``min`` is
        ``-max(-a, -b)``; a legalized ``a == b`` is ``-max(a - b, b - a) >= 0``). A worklist,
        not recursion: an ordering chain may be longer than Python's recursion limit."""
        todo = [(vid, False, False)]  # a value, and whether each side of it is bounded yet
        seen: set[tuple[int, bool, bool]] = set()
        while todo:
            state = todo.pop()
            v, below, above = state
            if (below and above) or state in seen:
                continue
            seen.add(state)
            if v in results or not readers.get(v):
                return False
            for r in readers[v]:
                lit = literal_bound(r)
                if r.prim is Prim.NEG:
                    todo.append((r.out.id, above, below))
                elif r.prim in (Prim.GE, Prim.GT, Prim.EQ):
                    if not lit:  # beyond 65504 and infinite: the same side of a literal
                        return False
                elif r.prim is Prim.MAX:
                    todo.append((r.out.id, below or lit, above))
                elif r.prim is Prim.MIN:
                    todo.append((r.out.id, below, above or lit))
                else:
                    return False
        return True

    def refuse(i: int, prim: str, use: str) -> None:
        facts = (("sentinel", "a saturated additive literal's value"), ("use", use))
        refusals.append(Refusal(RefusalKind.NARROWING_RANGE, i, prim, facts))

    for i, e in enumerate(program.eqns):
        prim = e.prim.value
        if e.out.id in scores:  # before the other checks, any of which may end this one
            if not e.out.dtype.is_float:
                raise CodegenError(f"score guard on equation {i} ({prim}): not a float value")
            checked.append(RangeCheck(i, prim, GuardKind.SCORE))
        sides = [side.get(a.id, 0) if isinstance(a, Var) else 0 for a in e.inputs]
        lits = [_saturated(a, limit) for a in e.inputs]
        if e.prim is Prim.SUB:  # x - s is x + (-s): the second operand's side flips
            sides[1], lits[1] = -sides[1], -lits[1]
        carried = [s + t for s, t in zip(sides, lits, strict=True)]  # at most one is non-zero
        tainted = {s for s in carried if s}
        inherits = any(
            (isinstance(a, Var) and (a.id in inf or a.id in side))
            or (isinstance(a, Literal) and a.dtype.is_float and math.isinf(a.as_float()))
            for a in e.inputs
        )
        out = e.out.id
        if inherits:
            inf.add(out)
        if e.prim in (Prim.ADD, Prim.SUB) and tainted:
            if len(tainted) > 1:
                refuse(i, prim, "an add of values dominated on opposite sides")
                continue
            (s,) = tainted
            side[out] = s
            guards.append(RangeCheck(i, prim, GuardKind.SENTINEL, s))
            continue
        if any(sides):
            s = next(x for x in sides if x)
            data = sides[:2] if e.prim is Prim.DYNAMIC_UPDATE_SLICE else sides
            if e.prim in _CARRY:
                side[out] = s
            elif e.prim is Prim.MAX:  # + wins; - loses against anything in range
                if 1 in sides or all(x == -1 for x in sides):
                    side[out] = 1 if 1 in sides else -1
            elif e.prim is Prim.NEG:
                side[out] = -s
            elif e.prim is Prim.EXP and s < 0:
                inf.discard(out)  # exp of any value beyond -65504 is 0, on FP16 and F32 alike
            elif e.prim in (Prim.CONCAT, Prim.DYNAMIC_UPDATE_SLICE) and all(x == s for x in data):
                side[out] = s
            else:
                refuse(i, prim, f"a dominated value into {prim}")
            continue
        # F16 arithmetic of the source is the oracle's own FP16: only narrowed F32 is guarded
        infinite_literal = any(
            isinstance(a, Literal) and a.dtype.is_float and math.isinf(a.as_float())
            for a in e.inputs
        )  # every element inherits the literal's infinity: nothing fresh to see
        if (
            e.prim in COMPUTING
            and e.out.dtype is DType.F32
            and uses.get(out, 0) > 0
            and not infinite_literal
            and not (
                e.prim in (Prim.ADD, Prim.SUB, Prim.MUL) and not inherits and only_clamped(out)
            )
        ):
            guards.append(RangeCheck(i, prim, GuardKind.OVERFLOW, fresh=inherits))
    missing = scores - {e.out.id for e in program.eqns}
    if missing:  # a rewrite the device was to check lost its score: never run it unchecked
        raise CodegenError(f"score guards on values no equation makes: {sorted(missing)}")
    for name, v in program.results():
        if v.id in side:
            refusals.append(
                Refusal(
                    RefusalKind.NARROWING_RANGE,
                    -1,
                    "",
                    (("sentinel", "a saturated additive literal's value"), ("result", name)),
                )
            )
    # stable: an equation's overflow guard first, so a NaN or infinity is named as overflow
    return Guards(tuple(sorted(guards + checked, key=lambda g: g.eqn)), tuple(refusals))
