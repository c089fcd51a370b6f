"""Where the device's value lies (``_DeviceRange``, see the package): the range each step's
operands' ranges give it (``_ruled``, endpoint by endpoint), the shapes of a program that bound
a value whatever its operands' errors (``_forms``: a legalized abs, a softmax's shift, and the
denominator its peak keeps from zero), and a value the device checks for overflow held within
+-65504 (``_held_finite``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from poot_ir import Eqn, Prim, ReduceParams, Var
from poot_ir.numerics import BitExact, Contract

from poot_planner.error_bounds.steps import _contract, _moved, _own
from poot_planner.fp16.contract import HALF_TINY, LIMIT, UNIT, own_rounding, zero_operand
from poot_planner.plan import Plan
from poot_planner.row_ranges import max_shift_axes

Array = np.ndarray


@dataclass(frozen=True, slots=True)
class _DeviceRange:
    """Where the device's value lies: ``lo <= v' <= hi`` elementwise (float64; -inf / inf where
    nothing is known). See the package."""

    lo: Array
    hi: Array

    @staticmethod
    def around(y: Any, err: Array) -> _DeviceRange:
        """The range a bound alone gives: ``y -+ E``."""
        y64 = np.asarray(y).astype(np.float64)
        with np.errstate(invalid="ignore"):
            return _DeviceRange(y64 - err, y64 + err)

    def floor(self) -> Array:
        """The least magnitude of the device's value: ``lo`` when positive, ``-hi`` when
        negative, else 0."""
        with np.errstate(invalid="ignore"):
            return np.where(self.lo > 0, self.lo, np.where(self.hi < 0, -self.hi, 0.0))

    @staticmethod
    def of(
        e: Eqn,
        ops: list[_DeviceRange],
        vals: list[Array],
        y: Array,
        err: Array,
        own: Array,
        narrowed: bool,
        contract: Callable[[Array], Array],
        form: tuple[str, tuple[int, ...]] = ("", ()),
    ) -> tuple[_DeviceRange, Array]:
        """The range of step ``e``'s device value and its bound (``err``; ``own`` its own
        error), narrowed by the range where the step follows its operands' ranges (``ops``,
        on the oracle's operand values ``vals``; ``contract``: the step's contract's own error
        at a value). An infinite bound stays infinite: an operand promised nothing has the
        whole line as its range, and so has anything its range reaches."""
        ruled = _ruled(e, ops, vals, own, narrowed, contract, *form)
        held = None
        if narrowed and ruled is not None and e.prim in _FINITE_OF_FINITE:
            with np.errstate(invalid="ignore"):
                finite = np.logical_and.reduce(
                    [np.broadcast_to(np.isfinite(o.hi - o.lo), np.shape(y)) for o in ops]
                )
                held = finite & (ruled.lo > -LIMIT) & (ruled.hi < LIMIT)
        return _DeviceRange.within(ruled, y, err, held)

    @staticmethod
    def within(
        ruled: _DeviceRange | None, y: Array, err: Array, held: Array | None = None
    ) -> tuple[_DeviceRange, Array]:
        """The range ``ruled`` (None: none) met with ``y -+ err``, and the bound it leaves: the
        smaller of ``err`` and the range's reach from ``y``. An infinite ``err`` stays infinite
        (an operand may be NaN there) except where ``held``: the step's operands have finite
        bounds (finite values on the device), it makes no NaN of finite ones, and the range
        lies inside FP16's (no overflow, no saturation), so the device's value is in it (an
        exp whose first-order carry passes 65504 while its range is [0, 1])."""
        y64 = np.asarray(y).astype(np.float64)
        with np.errstate(all="ignore"):
            if ruled is None:
                return _DeviceRange(y64 - err, y64 + err), err
            lo = np.fmax(ruled.lo, y64 - err)
            hi = np.fmin(ruled.hi, y64 + err)
            reach = np.fmax(hi - y64, y64 - lo)
            bounded = np.isfinite(err) if held is None else np.isfinite(err) | held
            keep = bounded & np.isfinite(reach) & ~np.isnan(y64)
            tight = np.where(keep, np.fmin(err, np.maximum(reach, 0.0)), err)
            return _DeviceRange(
                np.where(keep, lo, y64 - tight), np.where(keep, hi, y64 + tight)
            ), tight


def _ruled(
    e: Eqn,
    ops: list[_DeviceRange],
    vals: list[Array],
    own: Array,
    narrowed: bool,
    contract: Callable[[Array], Array],
    form: str = "",
    axes: tuple[int, ...] = (),
) -> _DeviceRange | None:
    """The range of step ``e``'s device value from its operands' ranges, for the steps that
    follow them endpoint by endpoint (see the package), else None. An exact step widens by its
    contract's own error (``own``: 0 for a bit-exact one; the F32 oracle's rounding is not the
    device's); a rounded one (narrowed: one FP16 rounding)
    by the rounding at each endpoint, ``u |end| + 2^-25`` (``u |z| `` grows with ``z``, so the
    rounding of a value past the endpoint cannot reach back past it), and by the step's
    contract there (an FP16 sqrt or exp within 2^-9 of the function). Two shapes narrow it
    further (``form``, ``_forms``): ``max(x, -x)`` is at least 0, and a narrowed softmax's
    shift ``x - max(x)`` at most 0."""
    lo, hi = [r.lo for r in ops], [r.hi for r in ops]
    with np.errstate(all="ignore"):
        match e.prim:
            case Prim.MAX:
                low = np.maximum(lo[0], lo[1]) - own
                if form == _ABS:  # max(x', -x') = |x'| >= 0, whatever x'
                    low = np.maximum(low, 0.0)
                return _DeviceRange(low, np.maximum(hi[0], hi[1]) + own)
            case Prim.MIN:
                return _DeviceRange(np.minimum(lo[0], lo[1]) - own, np.minimum(hi[0], hi[1]) + own)
            case Prim.NEG:
                return _DeviceRange(-hi[0] - own, -lo[0] + own)
            case Prim.ADD | Prim.SUB if narrowed and (z := zero_operand(e)) is not None:
                if e.prim is Prim.SUB and z == 0:  # 0 - x: -x, exactly (``fp16.contract``)
                    return _DeviceRange(-hi[1] - own, -lo[1] + own)
                return _DeviceRange(lo[1 - z] - own, hi[1 - z] + own)
            case Prim.ADD if narrowed:
                return _rounded(lo[0] + lo[1], hi[0] + hi[1], contract)
            case Prim.SUB if narrowed:
                low = lo[0] - hi[1]
                if form == _SHIFT:  # the row's maximum counts x'_i itself (``_shift_floor``)
                    low = np.maximum(low, _shift_floor(lo[0], ops[0].hi, axes))
                out = _rounded(low, hi[0] - lo[1], contract)
                if form == _SHIFT:  # x' - max(x') <= 0, and a correct rounding keeps the sign
                    out = _DeviceRange(out.lo, np.minimum(out.hi, 0.0))
                return out
            case Prim.MUL if narrowed:  # interval multiplication (an undefined end: none)
                ends = [a * b for a in (lo[0], hi[0]) for b in (lo[1], hi[1])]
                low, high = np.minimum.reduce(ends), np.maximum.reduce(ends)
                return _rounded(
                    np.where(np.isnan(low), -np.inf, low),
                    np.where(np.isnan(high), np.inf, high),
                    contract,
                )
            case Prim.DIV if narrowed:  # by a positive divisor: a softmax's denominator
                ends = [n / d for n in (lo[0], hi[0]) for d in (lo[1], hi[1])]
                positive = lo[1] > 0.0
                return _rounded(
                    np.where(positive, np.minimum.reduce(ends), -np.inf),
                    np.where(positive, np.maximum.reduce(ends), np.inf),
                    contract,
                )
            case Prim.SQRT if narrowed:
                low, high = np.sqrt(np.maximum(lo[0], 0.0)), np.sqrt(np.maximum(hi[0], 0.0))
                return _rounded(low, high, contract)
            case Prim.EXP if narrowed:  # at least 0: a sigmoid's 1 + exp(-x) at least 1
                return _rounded(np.exp(lo[0]), np.exp(hi[0]), contract)
            case _ if e.prim in _MOVED:
                return _DeviceRange(_moved(e, lo, vals), _moved(e, hi, vals))
    return None


def _shift_floor(lo: Array, hi: Array, axes: tuple[int, ...]) -> Array:
    """The least ``x'_i - max_j x'_j`` for ``x'`` in ``[lo, hi]``: ``min(0, lo_i - max_{j != i}
    hi_j)``, the row's maximum being at least ``x'_i`` itself (an element far above the others'
    reach is its row's maximum on the device too: 0 there, exactly)."""
    with np.errstate(invalid="ignore"):
        first = np.max(hi, axis=axes, keepdims=True)
        ties = np.sum(hi == first, axis=axes, keepdims=True)
        second = np.max(np.where(hi == first, -np.inf, hi), axis=axes, keepdims=True)
        others = np.where((hi == first) & (ties == 1), second, first)
        return np.asarray(np.minimum(lo - others, 0.0))


#: the narrowed steps that make a finite value of finite operands (not sqrt: of a negative)
_FINITE_OF_FINITE = frozenset(
    {Prim.ADD, Prim.SUB, Prim.MAX, Prim.MIN, Prim.NEG, Prim.EXP, Prim.DIV, Prim.MUL}
)


#: the shapes ``_forms`` finds: ``max(x, neg(x))``, and ``x - broadcast(reduce_max(x))``
_ABS, _SHIFT = "abs", "shift"


def _forms(plan: Plan, index: Mapping[int, int]) -> dict[int, tuple[str, tuple[int, ...]]]:
    """Equations (by index) whose device value a shape of the program bounds whatever their
    operands' errors: ``max(x, neg(x))`` (a legalized abs, a sigmoid's ``-|x|``) is ``|x'| >=
    0``; in a narrowed plan, ``x - broadcast(reduce_max(x))`` over axes ``A`` (a softmax's
    shift, ``row_ranges.max_shift_axes``) is ``x'_j - max(x') <= 0`` when the maximum is exact
    (one of the device's own row values) and the subtraction rounds correctly (BitExact: a
    rounding keeps the sign), with an element exactly 0 in each row (the maximum's own)."""
    program = plan.legalized
    out: dict[int, tuple[str, tuple[int, ...]]] = {}
    for i, e in enumerate(program.eqns):
        if e.prim is Prim.MAX and all(isinstance(a, Var) for a in e.inputs):
            a, b = e.inputs
            for x, n in ((a, b), (b, a)):
                k = index.get(n.id) if isinstance(n, Var) else None
                made = program.eqns[k] if k is not None else None
                neg = made.inputs[0] if made is not None and made.prim is Prim.NEG else None
                if isinstance(neg, Var) and isinstance(x, Var) and neg.id == x.id:
                    out[i] = (_ABS, ())
        if plan.narrowing is None or e.prim is not Prim.SUB:
            continue
        shift = max_shift_axes(program, i, index)
        if shift is None:
            continue
        axes, top = shift
        exact = [_contract(plan, k, program.eqns[k]) for k in (i, top)]
        if all(c is not None and isinstance(c.bound, BitExact) for c in exact):
            out[i] = (_SHIFT, axes)
    return out


def _peak_of(e: Eqn, peaks: Mapping[int, tuple[tuple[int, ...], float]]) -> float | None:
    """A softmax's denominator: a reduce_sum of a narrowed softmax's exp (``peaks``) over its
    shift's axes, each row holding the maximum's own element; its least value there, else
    None."""
    if e.prim is not Prim.REDUCE_SUM:  # an iota has no operand
        return None
    src = e.inputs[0]
    if not isinstance(src, Var) or src.id not in peaks:
        return None
    axes, peak = peaks[src.id]
    p = e.params
    return peak if isinstance(p, ReduceParams) and tuple(sorted(p.axes)) == axes else None


def _denominator(
    e: Eqn, terms: _DeviceRange | None, peak: float, contract: Contract | None
) -> _DeviceRange | None:
    """The range of a narrowed softmax's denominator ``sum_j e'_j``: each term within its
    range, and one term per row (the maximum's own, ``exp(0)``) at least ``peak``, so the
    exact sum of the device's terms is at least ``peak + sum_j min(lo_j, 0)``; the device's
    sum is within its FP16 lowering's rounding (``own_rounding``) and its contract of that, at
    the terms' largest magnitudes (not the oracle's). A divisor held near 1 however far its
    terms' bounds reach: the division after it keeps a finite bound."""
    if terms is None or not isinstance(e.params, ReduceParams):
        return None
    axes = e.params.axes
    with np.errstate(all="ignore"):
        mag = np.maximum(np.abs(terms.lo), np.abs(terms.hi))
        top = np.sum(mag, axis=axes)
        widen = own_rounding(e, [mag], top, np.zeros(top.shape)) + _own(contract, e, [mag], top)
        low = np.maximum(
            np.sum(terms.lo, axis=axes), peak + np.sum(np.minimum(terms.lo, 0.0), axis=axes)
        )
        high = np.sum(terms.hi, axis=axes)
        return _DeviceRange(
            np.where(np.isnan(low), -np.inf, low - widen),
            np.where(np.isnan(high), np.inf, high + widen),
        )


def _rules(prim: Prim, narrowed: bool, ranged: bool) -> bool:
    """Whether step ``prim`` narrows its value's range (``_ruled``): an exact step or, narrowed,
    a monotone rounded one; data movement only where an operand has a narrowed range (else
    its range is its bound's, moved)."""
    if prim in (Prim.MAX, Prim.MIN, Prim.NEG):
        return True
    if prim in (Prim.ADD, Prim.SUB, Prim.SQRT, Prim.EXP):
        return narrowed
    if prim in (Prim.DIV, Prim.MUL):  # an operand's range is known: the result's follows
        return narrowed and ranged
    return ranged and prim in _MOVED


#: data movement: a range moves with its values
_MOVED = frozenset(
    {Prim.TRANSPOSE, Prim.RESHAPE, Prim.BROADCAST_IN_DIM, Prim.SLICE, Prim.CONCAT, Prim.GATHER}
    | {Prim.DYNAMIC_UPDATE_SLICE}
)


def _rounded(lo: Array, hi: Array, contract: Callable[[Array], Array]) -> _DeviceRange:
    """``[lo, hi]`` widened by one FP16 rounding and the step's contract at each endpoint
    (``contract``: its own error at a value; inf outside its domain)."""
    low = lo - (UNIT * np.abs(lo) + HALF_TINY) - contract(lo)
    return _DeviceRange(low, hi + (UNIT * np.abs(hi) + HALF_TINY) + contract(hi))


def _held_finite(
    ranged: _DeviceRange | None, y: Array, err: Array
) -> tuple[_DeviceRange, Array] | None:
    """The range of a value a returned step holds within +-65504 (``fp16.contract.
    overflow_checked``: the device refuses the step otherwise), met with its range so far
    (``ranged``) and ``y -+ err``, and the bound it leaves; None where it narrows nothing (no
    range kept: a range makes its readers' work). Finite even where ``err`` is not: neither
    an infinity nor a NaN passes the check."""
    shape = np.shape(y)
    lo, hi = np.full(shape, -LIMIT), np.full(shape, LIMIT)
    if ranged is not None:
        lo, hi = np.fmax(ranged.lo, lo), np.fmin(ranged.hi, hi)
    out = _DeviceRange.within(_DeviceRange(lo, hi), y, err, np.ones(shape, bool))
    if ranged is None and not np.any(out[1] < err):
        return None
    return out
