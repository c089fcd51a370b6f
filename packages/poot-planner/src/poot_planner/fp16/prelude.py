"""The host prelude of a partition: the integer side of a program, run once ahead of it.

An exported transformer builds its attention mask from integer and boolean values alone
(``attention_mask != 0``, gathered and and-ed into a boolean mask, then ``select(mask, 0,
-inf)`` once per layer), interleaved with the layers in program order. An FP16 device cannot
make a float of a boolean or an integer (``IntegerToFloat``), so those equations run on the
host; left in place, each cuts the device chain, and the encoder runs as one graph per layer.

They read no floating-point value, so they depend on the program's arguments alone and can
run before everything else without changing any value: ``host_prelude`` is the refused
equations that read no float (every variable they read an integer or boolean argument, or the
integer or boolean output of another such equation), with the equations of that kind they
depend on. ``poot_planner.partition`` runs them as one oracle span first.

Their float outputs are mask values, and on a narrowing target the exported ``-inf`` would stop
the run at the device's input range check (``NarrowingRangeInput``). The specification's
sentinel, -65504, does not serve a mask that is added to scores on the device: any score below
-16 makes the FP16 sum infinite, and the graph's overflow guard refuses it (as it must). So
``mask_sentinels`` makes the prelude's additive mask ``select(p, 0, -inf)`` (read only by adds
and subtracts, through data movement, that feed a maximum over its last axis: a softmax) give
``MASK = -2^15`` instead, where its row holds an unmasked entry, and keep ``-inf`` where the
whole row is masked:

    v = select(p, 0, -inf);  out = max(v, broadcast(reduce_max(v, last)) + MASK)

A masked entry of a row with an unmasked one is then MASK (the row's maximum is 0); a fully
masked row stays ``-inf``, which the device's input check refuses with a typed error (the
oracle's softmax of that row is NaN, the exported NaN guard's case: no finite mask gives it).

Why the same probabilities, and the precondition that needs. Where ``-inf`` masks an entry its
probability is exactly 0; with MASK it is ``exp(s_m + MASK - max)`` over the row's sum, where
``max`` is at least the row's best unmasked score ``s_u``. That is exactly 0 (and the unmasked
entries, ``s_u + 0``, keep their values) when the exponent is below -17.33 (-25 ln 2: half
FP16's least subnormal; F32's is -103.3), i.e. ``s_m - s_u < 32768 - 17.4``, and when
``s + MASK`` stays finite. Nothing at run time checks that: scores ``s_m = 20000``, ``s_u =
-20000`` would put the row's probability on the padded key, a silent wrong result. So the
rewrite is made only where the partition PROVES |s| <= ``SCORE_BOUND`` for every score the mask
is added to, or the device span checks it at run time, else the mask stays ``-inf`` (refused at
the device's input check, typed):

    SCORE_BOUND = (32768 - 17.4 - 16) / 2 = 16367.3

(the 16: ``s + MASK`` lies in [2^14, 2^16) where FP16 rounds it by up to half its spacing of 32;
then the masked exponent is at most 2 B + 16 - 32768 <= -17.4, and |s + MASK| <= 49135 is
finite; a device that keeps exp in F32 gives each masked entry at most e^-17.4 = 2.8e-8 of the
row, far inside NarrowStorage). Where the partition cannot prove it, the device may check it:
see "Checked at run time" below. The proof (``_Proof``): the mask is read by ``add(s, mask)`` or ``sub(mask, s)``
(``s - mask`` would add an infinity: not rewritten) through data movement, where ``s`` is, through
data movement, ``mul(y, c)`` or ``div(y, d)`` with a literal scale such that 65504 |c| (or
65504 / |d|), grown by the FP16 rounding of the literal and of the product, is within the bound,
and ``y`` (through movement) is checked for FP16 overflow by the device span that runs that
whole chain: either made in it by an equation with a plain overflow guard
(``fp16.checks.analyse`` on the span plan's legalized program, what ``poot_npu.vpu`` checks:
the graph refuses the step when it is infinite or NaN, so |y| <= 65504; an equation the ordering
exemption skips, or a ``fresh`` guard that passes inherited infinities, proves nothing) or read
by it from outside (the engine's input range check, ``NarrowingRangeInput``). A real encoder's
``matmul(q, k^T) * d^-1/2`` with d >= 17 is covered (d = 32: B = 65504 / sqrt(32) = 11580); a
scale of 1/4 is not (2 * 16376 + 17.4 > 32768).

Checked at run time. Scores made by a matmul of already scaled operands (HF's all-MiniLM export
scales q and k by d^-1/4 each) are not proven: the matmul's output is only checked for |s| <=
65504, and no literal bounds a contraction. For a device that checks the precondition itself
(``partition(..., score_guard=True)``, which the engine passes for ``VpuDevice`` with its FP16
guard on: ``DeviceTraits.checks_score_bound``), the rewrite is made anyway where each unproven score (through
movement, which keeps its values) is made by an equation of a narrowed device span whose
legalized program still makes it (``_Proof.checkable``), and that span's plan names those
scores (``Plan.score_bound``, var ids, which survive legalization where equation indices do
not). Its graph then flags every element with |s| > ``SCORE_BOUND`` or NaN
(``fp16.checks.GuardKind.SCORE``, lowered by ``poot_codegen.intel.guard``) and the step is
refused, ``NarrowingRangeIntermediate`` naming the score's equation (check ``score``), before
any state changes: never a silent wrong result. The check is on every score, unmasked ones too,
so it may refuse a row the -2^15 mask would still have got right (only ``s_m - s_u`` matters):
conservative, and typed. A score that is a span's input (not made in it) is not checked: the
mask stays ``-inf`` there. Every other device (``CpuDevice`` running an intel-npu4 plan,
``VpuDevice(overflow_guard=False)``) gets the partition without the unproven rewrite, and the
engine refuses a plan naming such scores on it (``UnsupportedDevice``).

An F32 target (xdna2) gets the same rewrite with an F32 sentinel (``f32_mask_sentinels``), only
for a device that checks the scores (``score_guard``: xdna2's kernels, whose guards count each
checked score outside the bound into the region's flag word, so the step is refused typed,
``poot_codegen.xdna.guards``). There exp underflows to exactly 0 below -87.3 (the kernel flushes
a result below FLT_MIN to +0; F32's own exp rounds to 0 below -103.97), and the sum ``s +
F32_MASK`` is finite for every finite |s| <= 2^127. So

    F32_MASK = -2^64,  F32_SCORE_BOUND = 2^62

gives a masked exponent of at most 2 B + F32_MASK (+ its rounding, 2^-24 relative) = -2^63:
exactly 0, as the oracle's ``-inf`` gives, and an unmasked entry is ``s + 0 = s``, exact. The
check is at each add (or ``mask - s``) that reads the mask in a device span, on its score
operand (``Plan.score_bound`` names the operands' var ids; ``poot_planner.guards.score_checks``
finds the checked operands): |s| <= 2^62 or NaN-free is all it asks, so a real encoder's
scores (|s| < 100) never trip it. A read of the mask in an oracle span, or a device that does not
check, keeps ``-inf``: the device's domain guard refuses it there, typed.

On xdna2 exp's domain goes down to -inf (the kernel flushes a result below FLT_MIN to +0, inside
its absolute bound), so a masked softmax's exponent (the -2^15 mask, ``finfo(float32).min``, or
any large negative score) runs and weighs exactly 0; a ``-inf`` score is still refused, by the
subtraction before it (finite operands: the specification)
(``packages/poot-npu/tests/test_xdna_softmax_domain.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poot_ir import (
    BroadcastParams,
    Eqn,
    Literal,
    Prim,
    Program,
    ReduceParams,
    TransposeParams,
    Var,
)
from poot_ir.core import REARRANGEMENT

from poot_planner.emit import Emit, RuleContext, readers_through_movement
from poot_planner.fp16.checks import GuardKind, analyse

if TYPE_CHECKING:
    from poot_planner.plan import Plan

__all__ = [
    "F32_MASK",
    "F32_SCORE_BOUND",
    "MASK",
    "SCORE_BOUND",
    "MaskRewrite",
    "f32_mask_sentinels",
    "host_prelude",
    "mask_sentinels",
]


def host_prelude(program: Program, refused: set[int]) -> tuple[int, ...]:
    """The prelude's equations (ascending), or () when no refused equation reads no float."""
    integral = {a.var.id for a in program.args if not a.var.dtype.is_float}
    maker: dict[int, int] = {}  # an integral value's producer, for the ancestors below
    side: set[int] = set()
    for i, e in enumerate(program.eqns):
        reads = [a for a in e.inputs if isinstance(a, Var)]
        if not reads or any(a.id not in integral for a in reads):
            continue  # reads a float (or nothing: a constant the device makes itself)
        side.add(i)
        for v in e.outputs:
            if not v.dtype.is_float:
                integral.add(v.id)
                maker[v.id] = i
    wanted = sorted(side & refused)
    out: set[int] = set()
    while wanted:
        i = wanted.pop()
        if i in out:
            continue
        out.add(i)
        reads = [a for a in program.eqns[i].inputs if isinstance(a, Var)]
        wanted.extend(maker[a.id] for a in reads if a.id in maker)
    return tuple(sorted(out))


#: the prelude's additive mask value (module docstring): half FP16's range, a power of two
MASK = -(2.0**15)
#: exp(x) rounds to 0 in FP16 below -25 ln 2 = -17.33 (half the least subnormal, 2^-25)
EXP_ZERO = 17.4
#: half FP16's spacing (32) on [2^15, 2^16), where ``s + MASK`` lies: its rounding error
SUM_ROUNDING = 16.0
#: the largest |s| the rewrite admits for a score s the mask is added to (module docstring)
SCORE_BOUND = (-MASK - EXP_ZERO - SUM_ROUNDING) / 2
#: FP16's largest finite value: a guarded or range-checked value's bound
FP16_MAX = 65504.0
#: the F32 sentinel and the score bound checked with it (module docstring)
F32_MASK = -(2.0**64)
F32_SCORE_BOUND = 2.0**62
_F32_MAX = 3.4028234663852886e38
#: a scale literal's FP16 rounding and the product's (each at most 2^-11 relative)
_ROUNDING = (1.0 + 2.0**-10) ** 2


@dataclass(frozen=True, slots=True)
class MaskRewrite:
    """What ``mask_sentinels`` decided: ``replaced`` holds each rewritten mask select (by
    source index) as the equations that replace it (the last writes the select's own output);
    ``scores`` holds, per device span (its index in ``devices``), the var ids of the scores the
    span's graph must check against ``SCORE_BOUND`` (``Plan.score_bound``)."""

    replaced: dict[int, tuple[Eqn, ...]]
    scores: dict[int, frozenset[int]]


def _readers(program: Program) -> tuple[dict[int, int], RuleContext]:
    """Which equation makes each value of ``program``, and the rule context of its readers (the
    equations reading each value, and its results), which both mask rewrites walk."""
    consumers: dict[int, list[Eqn]] = {}
    maker: dict[int, int] = {}
    for i, e in enumerate(program.eqns):
        for v in e.outputs:
            maker[v.id] = i
        for a in e.inputs:
            if isinstance(a, Var):
                consumers.setdefault(a.id, []).append(e)
    ctx = RuleContext(
        consumers={k: tuple(v) for k, v in consumers.items()},
        results=frozenset(v.id for _, v in program.results()),
    )
    return maker, ctx


def mask_sentinels(
    program: Program,
    eqns: tuple[int, ...],
    limit: float,
    devices: Sequence[tuple[tuple[int, ...], Plan]],
    *,
    checked: bool = False,
) -> MaskRewrite:
    """The prelude's additive mask selects (module docstring) to rewrite, and the scores to
    check. ``devices`` are the partition's device spans (source equations and admitted plan): a
    mask is rewritten only where every score it is added to is proven bounded by
    ``SCORE_BOUND`` in them (``_Proof``) or, when ``checked`` (the device checks a plan's
    ``score_bound``), is made by a narrowed device span that then checks it at run time."""
    maker, ctx = _readers(program)
    proof = _Proof(program, maker, devices)
    next_id = program.next_var_id()
    out: dict[int, tuple[Eqn, ...]] = {}
    scores: dict[int, set[int]] = {}
    for i in eqns:
        e = program.eqns[i]
        if not (_additive_mask(e, limit) and _feeds_a_row_maximum(e, ctx)):
            continue
        admitted = True
        wanted: list[tuple[int, int]] = []  # (device span, score id) to check at run time
        for r, moved in _mask_reads(e, ctx):
            if proof.bounded_score(r, moved):
                continue
            at = proof.checkable(r, moved) if checked else None
            if at is None:
                admitted = False
                break
            wanted.append(at)
        if not admitted:
            continue  # kept -inf: the device's input check refuses it, typed
        for k, sid in wanted:
            scores.setdefault(k, set()).add(sid)
        out[i], next_id = _rewritten(e, next_id, MASK)
    return MaskRewrite(out, {k: frozenset(v) for k, v in scores.items()})


def f32_mask_sentinels(
    program: Program, eqns: tuple[int, ...], devices: Sequence[tuple[tuple[int, ...], Plan]]
) -> MaskRewrite:
    """The prelude's ``-inf`` mask selects to rewrite with ``F32_MASK`` for a device that checks
    the scores (module docstring): each one whose every read (an add, or ``mask - s``) is an
    equation of a device span; ``scores`` names, per span, the score operands it must check
    against ``F32_SCORE_BOUND``."""
    maker, ctx = _readers(program)
    span = {i: k for k, (run, _) in enumerate(devices) for i in run}
    next_id = program.next_var_id()
    out: dict[int, tuple[Eqn, ...]] = {}
    scores: dict[int, set[int]] = {}
    for i in eqns:
        e = program.eqns[i]
        if not (_additive_mask(e, _F32_MAX) and _feeds_a_row_maximum(e, ctx)):
            continue
        wanted = [(span.get(maker[r.out.id]), _score(r, moved)) for r, moved in _mask_reads(e, ctx)]
        if not wanted or any(k is None or s is None for k, s in wanted):
            continue  # kept -inf: read on the host, or not as a score
        for k, s in wanted:
            assert k is not None and s is not None
            scores.setdefault(k, set()).add(s.id)
        out[i], next_id = _rewritten(e, next_id, F32_MASK)
    return MaskRewrite(out, {k: frozenset(v) for k, v in scores.items()})


def _rewritten(e: Eqn, next_id: int, mask: float) -> tuple[tuple[Eqn, ...], int]:
    """``e = select(p, 0, -inf)`` as ``max(v, broadcast(reduce_max(v, last)) + mask)``, ``v``
    the select: ``mask`` where its row has an unmasked entry, ``-inf`` where none."""
    em = Emit(next_id, e.out.dtype)
    rank = e.out.type.rank
    v = em.op(Prim.SELECT, *e.inputs, params=e.params)
    rows = em.op(Prim.REDUCE_MAX, v, params=ReduceParams((rank - 1,)))
    rows = em.op(
        Prim.BROADCAST_IN_DIM,
        rows,
        params=BroadcastParams(e.out.type.shape, tuple(range(rank - 1))),
    )
    em.max(v, em.add(rows, mask), out=e.out)
    return tuple(em.eqns), em.next_id


def _mask_reads(e: Eqn, ctx: RuleContext) -> list[tuple[Eqn, frozenset[int]]]:
    """Each add or subtract reading the mask ``e`` makes (through movement), with the ids of
    the mask's moved copies (so the score operand is the other one)."""
    moved = {e.out.id}
    stack = [e.out.id]
    reads: list[Eqn] = []
    while stack:
        for r in ctx.consumers.get(stack.pop(), ()):
            if r.prim in REARRANGEMENT:
                moved.add(r.out.id)
                stack.append(r.out.id)
            elif r not in reads:
                reads.append(r)
    frozen = frozenset(moved)
    return [(r, frozen) for r in reads]


class _Proof:
    """Whether a score the mask is added to is bounded by ``SCORE_BOUND`` (module docstring):
    ``s = mul(y, c)`` or ``div(y, d)`` with a literal scale, through movement, where ``y``
    (through movement) is a value the device span holding the whole chain checks for FP16
    overflow: an equation of the span with a plain overflow guard (``fp16.checks``: the graph
    refuses the step when it is infinite or NaN) or an input of the span (the engine's input
    range check), so |y| <= 65504 or the step is refused."""

    def __init__(
        self,
        program: Program,
        maker: dict[int, int],
        devices: Sequence[tuple[tuple[int, ...], Plan]],
    ) -> None:
        self.program = program
        self.maker = maker
        self.span = {i: k for k, (run, _) in enumerate(devices) for i in run}
        self.devices = devices
        self._guarded: dict[int, frozenset[int]] = {}

    def guarded(self, k: int) -> frozenset[int]:
        """The value ids device span ``k``'s graph guards for overflow (every element, not
        only fresh ones: an inherited infinity would pass a fresh guard)."""
        if k not in self._guarded:
            p = self.devices[k][1]
            got: frozenset[int] = frozenset()
            if p.narrowing is not None:  # only a narrowed graph carries the flags (vpu.py)
                prog = p.legalized
                found = analyse(prog, p.narrowing.max_magnitude).guards
                got = frozenset(
                    prog.eqns[g.eqn].out.id
                    for g in found
                    if g.kind is GuardKind.OVERFLOW and not g.fresh
                )
            self._guarded[k] = got
        return self._guarded[k]

    def back(self, v: Var, chain: list[int]) -> Var:
        """``v`` before the data movement that made it, the movement's equations in ``chain``."""
        while v.id in self.maker:
            e = self.program.eqns[self.maker[v.id]]
            if e.prim not in REARRANGEMENT or not isinstance(e.inputs[0], Var):
                break
            chain.append(self.maker[v.id])
            v = e.inputs[0]
        return v

    def checkable(self, r: Eqn, moved: frozenset[int]) -> tuple[int, int] | None:
        """(device span, score id) when the score ``r`` adds the mask to is made, through
        movement (which keeps its values), by an equation of a narrowed device span whose
        legalized program still makes it as a float: that span's graph can check it against
        ``SCORE_BOUND`` (``fp16.checks.GuardKind.SCORE``); else None."""
        score = _score(r, moved)
        if score is None:
            return None
        s = self.back(score, [])
        k = self.span.get(self.maker.get(s.id, -1))
        if k is None or not s.dtype.is_float:
            return None
        p = self.devices[k][1]
        if p.narrowing is None:
            return None  # only a narrowed graph carries the flags (vpu.py)
        made = {e.out.id: e for e in p.legalized.eqns}
        if s.id not in made or not made[s.id].out.dtype.is_float:
            return None
        return k, s.id

    def bounded_score(self, r: Eqn, moved: frozenset[int]) -> bool:
        score = _score(r, moved)
        if score is None:
            return False
        chain = [self.maker[r.out.id]]
        s = self.back(score, chain)
        if s.id not in self.maker:
            return False
        chain.append(self.maker[s.id])
        y = _scaled(self.program.eqns[self.maker[s.id]])
        if y is None:
            return False
        y = self.back(y, chain)
        spans = {self.span.get(i) for i in chain}
        if len(spans) != 1:
            return False  # the chain must run in one device span, where y is checked
        k = next(iter(spans))
        if k is None:
            return False
        run = set(self.devices[k][0])
        inside = y.id in self.maker and self.maker[y.id] in run
        return not inside or y.id in self.guarded(k)


def _score(r: Eqn, moved: frozenset[int]) -> Var | None:
    """The score ``r`` adds the mask to (``moved``: the ids of the mask's moved copies), when
    ``r`` is ``add(s, mask)`` or ``sub(mask, s)`` (``s - mask`` would add an infinity)."""
    ins = r.inputs
    if r.prim is Prim.ADD:
        scores = [a for a in ins if not (isinstance(a, Var) and a.id in moved)]
    elif r.prim is Prim.SUB and isinstance(ins[0], Var) and ins[0].id in moved:
        scores = [ins[1]]
    else:
        return None
    if len(scores) != 1 or not isinstance(scores[0], Var):
        return None
    return scores[0]


def _scaled(e: Eqn) -> Var | None:
    """``y`` when ``e`` is ``y * c`` (or ``c * y``) or ``y / d`` with a literal scale that takes
    |y| <= 65504 to |e| <= ``SCORE_BOUND`` after FP16 rounding, else None."""
    a = e.inputs
    if e.prim is Prim.MUL:
        pairs = [(a[0], a[1]), (a[1], a[0])]
        for y, c in pairs:
            if isinstance(y, Var) and isinstance(c, Literal) and y.dtype.is_float:
                scale = abs(c.as_float())
                if math.isfinite(scale) and FP16_MAX * scale * _ROUNDING <= SCORE_BOUND:
                    return y
        return None
    if e.prim is Prim.DIV and isinstance(a[0], Var) and isinstance(a[1], Literal):
        d = abs(a[1].as_float())
        if a[0].dtype.is_float and d > 0 and FP16_MAX / d * _ROUNDING <= SCORE_BOUND:
            return a[0]
    return None


def _additive_mask(e: Eqn, limit: float) -> bool:
    """``select(p, 0, -L)`` with L past FP16's range (``-inf`` included), into a float."""
    if e.prim is not Prim.SELECT or not e.out.dtype.is_float or e.out.type.rank == 0:
        return False
    a, b = e.inputs[1:]
    if not (isinstance(a, Literal) and isinstance(b, Literal)):
        return False
    return a.as_float() == 0.0 and b.as_float() < -limit


def _feeds_a_row_maximum(e: Eqn, ctx: RuleContext) -> bool:
    """Read only by adds and subtracts (through movement), each read by a maximum over its
    last axis, the mask's last axis carried there (the softmax of masked scores)."""
    readers = readers_through_movement(e.out.id, ctx)
    if not readers or any(r.prim not in (Prim.ADD, Prim.SUB) for r in readers):
        return False
    if not _rows_kept(e, ctx):
        return False
    for r in readers:
        rank = r.out.type.rank
        uses = ctx.consumers.get(r.out.id, ())
        last = (rank - 1,)
        if not any(
            u.prim is Prim.REDUCE_MAX
            and isinstance(u.params, ReduceParams)
            and u.params.axes == last
            for u in uses
        ):
            return False
        if r.out.type.shape[-1] != e.out.type.shape[-1]:
            return False
    return True


def _rows_kept(e: Eqn, ctx: RuleContext) -> bool:
    """Every movement between the mask ``e`` and its readers keeps its last axis last, whole:
    each row the adds see is a row of the mask, so the row maximum the rewrite takes over the
    mask's last axis is the one the softmax takes. (A transpose of a square mask, or a
    broadcast placing its last axis elsewhere, keeps the extent and not the rows: a fully
    masked row would then get MASK, not ``-inf``, and a finite wrong softmax.)"""
    stack = [e.out.id]
    while stack:
        for r in ctx.consumers.get(stack.pop(), ()):
            if r.prim not in REARRANGEMENT:
                continue
            src, dst = r.inputs[0].type, r.out.type
            if src.rank == 0 or dst.rank == 0 or src.shape[-1] != dst.shape[-1]:
                return False
            match r.params:
                case TransposeParams(perm=perm) if perm[-1] != src.rank - 1:
                    return False
                case BroadcastParams(dims=dims) if dims[-1] != dst.rank - 1:
                    return False
            stack.append(r.out.id)
    return True
