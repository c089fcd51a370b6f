"""A running error analysis: how far each device result may be from the oracle's, for given
inputs, derived from the target's per-step contracts.

A contract bounds one step given exact operands. A program chains steps, so a device's error
in one step reaches the next: an add after an approximate step can cancel, and then the error
is large relative to the result while every step kept its promise. The planner's published
numerics class states the loosest step; this module states what the whole program promises
for the inputs at hand, element by element:

    E[v] = own error of the step that makes v (its contract, on the oracle's operand values)
         + the operands' errors propagated through the step (first-order, with the
           magnitudes of the oracle's values, and the second-order product where it matters)

Inputs and literals are exact (E = 0), except in a narrowed plan: there the device rounds each
F32 argument and literal to FP16 first, and each equation adds its FP16 lowering's rounding
(``poot_planner.fp16.contract``: the derived FP16 contract). Outside a step's domain nothing is promised (E = inf,
and the comparison skips the element); a comparison whose outcome an operand's error could flip
is promised nothing either, and a select it drives is held to either branch (the other one's
bound plus its distance from the chosen one).

Beside each bound the analysis keeps the range the device's value lies in (``_DeviceRange``): a clamp
(``max(x, 0)``, relu6, a hard sigmoid) holds the device's value between its literals however
large the operand's error, so the error of a clamped value is at most the range's reach from
the oracle's (``min(E, max(hi - y, y - lo))``), and a divisor, a square root's or a log's
operand held away from zero by it (``max(var, 0) + eps``) keeps the room the division needs even
where its error exceeds its value. Ranges follow exact steps (max, min, neg, data movement) and
monotone rounded ones (add, sub, sqrt, exp) endpoint by endpoint, each rounding widening an endpoint
by the rounding at that endpoint; elsewhere the range is ``y -+ E``. An infinite bound is never
narrowed (the operand may be NaN there). Steps of an XDNA2 row kernel are analysed one by
one under the same per-primitive contracts the kernel's static bound is derived from
(``poot_planner.xdna2.rowfusion``), so the running bound never exceeds what the derivation allows.
Where first-order carrying loses a normalization (the errors reaching a LayerNorm exceed its
row's spread, so the variance's bound exceeds the variance), the device's normalized row (and
a max-subtracted softmax) still lies in a range its steps' contracts give whatever its operands
(``poot_planner.row_ranges``): the bound there is the distance to the range's far end, when
that is smaller.

On a narrowed (FP16) device the ranges go further, each resting on what the device's steps
are, not on the operands' bounds: a product's range is its operands' intervals' product, a
quotient's by a positive divisor's range likewise; ``max(x, -x)`` is at least 0 (a legalized
abs: a sigmoid's ``exp(-|x|)`` is at most 1); a softmax's shift ``x - max(x)`` is at most 0,
and exactly 0 at an element whose low end clears the others' high ends (it is the maximum on
the device too), so its exp is at most 1 and its denominator at least the maximum's own
``exp(0)``; an exact step (max, min, neg) widens its range by its contract alone, not by the
F32 oracle's rounding (which is not the device's). Where the first-order carry overflows
(exp of an operand whose bound passes 11) but the operands are finite and the range lies
inside FP16's, the range holds the device's value: the bound is its reach. A variance by
squares (``E[x^2] - E[x]^2``) is carried as one function of its ``x`` (``_variance_carry``):
step by step both terms move with ``x``'s errors at the scale of the mean, as one function at
the scale of the spread. A value the device checks for overflow (``fp16.contract.
overflow_checked``: the in-graph guard's intermediates) is within +-65504 on every step the
device returns, a range like the others (``_held_finite``): its bound is finite wherever the
oracle's value is, however far the first-order carry grew (a deep convolution stack, a quotient
by a difference the inputs' rounding may cancel), and a clamp or a softmax after it bounds it
again by its own range. A normalized row (``d / sqrt(c sum d^2 + eps)``) keeps its range on a
narrowed device too, from its steps' FP16 lowering (``_fp16_figures``): about ``sqrt(n)``
whatever the errors reaching it (gpt2_tiny's LayerNorms, whose divisor's bound passes its value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from poot_ir import (
    Atom,
    BroadcastParams,
    ConcatParams,
    ConvParams,
    DType,
    Eqn,
    GatherParams,
    Literal,
    Output,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    TransposeParams,
    Var,
    evaluate,
)
from poot_ir.erf import erf64
from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Contract,
    Derived,
    LargerOperandUlps,
    Normwise,
    ProductSum,
    Relative,
    RoundedTwice,
    ScaledSum,
    accumulated,
    product_magnitudes,
    row_magnitudes,
)
from poot_ir.window import conv64, windows_of

from poot_planner.emit import RuleContext
from poot_planner.fp16.contract import (
    HALF_TINY,
    LIMIT,
    UNIT,
    F16Lowering,
    lowering,
    overflow_checked,
    own_rounding,
    stored,
    stored_literal,
    zero_operand,
)
from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.legalize.expanders import expand_select
from poot_planner.legalize.logarithm import operand_of_softplus
from poot_planner.legalize.rewrite import Rewrite
from poot_planner.legalize.rules import Numerics
from poot_planner.legalize.steps import TINY_F16, sigmoid_operand
from poot_planner.plan import Plan
from poot_planner.row_ranges import (
    FiguresOf,
    SquaresVariance,
    contract_figures,
    max_shift_axes,
    row_range,
    squares_variance,
)

__all__ = ["legalized_values", "result_bounds"]

Array = np.ndarray
_ERF_SLOPE = 2.0 / np.sqrt(np.pi)  # the largest derivative of erf


def _everything(program: Program) -> Program:
    """``program`` with every value it computes as an output, so the oracle returns them."""
    outs = tuple(Output(f"v{e.out.id}", e.out) for e in program.eqns)
    return Program(program.name, program.args, program.eqns, outs, ())


def _contract(plan: Plan, i: int, e: Eqn) -> Contract | None:
    """The contract of equation ``i``: its admission's, or for a step of a row kernel, the
    target's per-primitive row (None: exact data movement with no row of its own)."""
    for a in plan.admissions:
        if a.eqn == i and a.contract is not None:
            return a.contract
    cap = plan.target.capability(e.prim, operating_dtype(e))
    return None if cap is None else cap.contract


def _own(c: Contract | None, e: Eqn, ops: list[Array], y: Array) -> Array:
    """The step's own error, given exact operands, on the oracle's values."""
    zero = np.zeros(y.shape)
    if c is None:
        return zero
    y64 = np.abs(y.astype(np.float64)) if y.dtype.kind == "f" else zero
    match c.bound:
        case BitExact() | Derived() | Normwise():
            own = zero
        case AbsRel(abs=a, rel=r):
            own = a + r * y64
        case Relative(rel=r):
            own = r * y64
        case LargerOperandUlps(ulps=u, unit=unit):
            larger = np.maximum(
                np.abs(ops[0].astype(np.float64)), np.abs(ops[-1].astype(np.float64))
            )
            own = u * unit * np.broadcast_to(larger, y.shape)
        case ScaledSum(ulps_per_term=u, unit=unit):
            # an accumulation: its terms' count times their magnitudes (``accumulated``: any
            # reduce_sum, matmul, convolution or window sum); a row kernel's step, its last axis
            if not ops[0].ndim:
                own = zero
            elif e.prim in _ACCUMULATIONS:
                own = u * unit * accumulated(e, ops)
            else:
                own = u * unit * row_magnitudes(ops[0])
        case ProductSum():
            # a contraction: its operands' narrowing and its accumulation, over the row of a
            # and the column of b (numerics.ProductSum); inf where a partial sum may overflow
            own = product_magnitudes(c.bound, ops[0], ops[1])
            return np.where(c.domain.inside(ops, y), own, np.inf)
        case RoundedTwice(rel=r, floor=f):
            own = r * y64 + f * (np.size(ops[0]) / max(y.size, 1) + 2.0)
    inside = c.domain.inside(ops, y)
    return np.where(inside, own, np.inf)


#: the steps that round a value they compute (data movement and choosing steps round nothing)
_ROUNDED = frozenset(
    {Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.RECIP, Prim.SQRT, Prim.EXP, Prim.LOG}
    | {Prim.TANH, Prim.ERF, Prim.REDUCE_SUM, Prim.MATMUL, Prim.CONV, Prim.REDUCE_WINDOW_SUM}
)


#: the steps ``numerics.accumulated`` scales a ``ScaledSum`` of
_ACCUMULATIONS = frozenset({Prim.REDUCE_SUM, Prim.MATMUL, Prim.CONV, Prim.REDUCE_WINDOW_SUM})


def _rerounded(e: Eqn, y: Array, prop: Array, ops: list[Array] | None = None) -> Array:
    """One ulp of the result where a rounding step reads operands that carry an error: the
    oracle rounds ``f(x)``, the device rounds (within its contract) ``f(x + d)``, and the two
    roundings of those neighbouring values can part by an ulp beyond ``|f(x + d) - f(x)|``
    (the first-order carry). Zero where the operands are exact (the contract covers it).

    At the largest finite magnitude the ulp above is infinite (the next rounding overflows),
    unless the exact value is known to sit far enough below the overflow threshold: for an
    add, a subtraction or a product (float64 holds the exact value to 2^-52) whose exact
    value plus the carry stays below ``largest + half its ulp`` (where round to nearest
    overflows), the neighbouring rounding is at most the ulp below (an additive mask of
    ``finfo.min`` on a score)."""
    if e.prim not in _ROUNDED or y.dtype.kind != "f":
        return np.zeros(y.shape)
    with np.errstate(all="ignore"):
        ulp = np.abs(np.spacing(np.abs(y))).astype(np.float64)
    top = np.isinf(ulp) & np.isfinite(y)
    if ops is not None and top.any() and e.prim in _EXACT64 and len(ops) == 2:
        largest = float(np.finfo(y.dtype).max)
        below = float(np.spacing(np.nextafter(y.dtype.type(largest), y.dtype.type(0))))
        a, b = (np.asarray(o, np.float64) for o in ops)
        with np.errstate(all="ignore"):
            exact = np.abs(_EXACT64[e.prim](a, b)) * (1.0 + 2.0**-52)
            clear = exact + prop < largest + below / 2
        ulp = np.where(top & clear, below, ulp)
    return np.where(prop > 0, np.where(np.isfinite(ulp), ulp, np.inf), 0.0)


#: the steps float64 computes within 2^-52 of exact on F32 operands (``_rerounded``)
_EXACT64: dict[Prim, Callable[[Array, Array], Array]] = {
    Prim.ADD: np.add,
    Prim.SUB: np.subtract,
    Prim.MUL: np.multiply,
}


def _flip(a: Array, b: Array, ea: Array, eb: Array) -> Array:
    """Elements of a comparison that the operands' errors could flip: promised nothing."""
    gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return np.where(gap <= ea + eb, np.inf, 0.0)


def _propagated(
    e: Eqn,
    vals: list[Array],
    errs: list[Array],
    y: Array,
    lows: list[Array | None] | None = None,
) -> Array:
    """The operands' errors carried through the step (an upper bound, elementwise). ``lows``:
    for each operand, a floor of the device's value's magnitude beyond ``|x| - E``
    (``_DeviceRange.floor``: a divisor or a root's operand held away from zero), or None."""
    if lows is None:
        lows = [None] * len(vals)
    with np.errstate(all="ignore"):
        out = np.asarray(_carry(e, vals, errs, y, lows), dtype=np.float64)
    return np.where(np.isnan(out), np.inf, out)  # an undefined carry promises nothing


def _scale(magnitude: Array, err: Array) -> Array:
    """``magnitude * err``, where an exact operand carries nothing even from an infinite value."""
    return np.where(err == 0, 0.0, magnitude * err)


def _room(x: Array, err: Array, low: Array | None) -> Array:
    """The least magnitude the device's value of ``x`` can have: ``|x| - E``, or the floor of
    its range when that is higher (negative: it may be 0)."""
    room = np.abs(x) - err
    return np.asarray(room if low is None else np.maximum(room, low))


def _carry(e: Eqn, vals: list[Array], errs: list[Array], y: Array, lows: list[Array | None]) -> Any:
    p = e.prim
    f = [v.astype(np.float64) for v in vals]
    y64 = y.astype(np.float64) if y.dtype.kind in "fi" else np.zeros(y.shape)
    match p:
        case Prim.ADD | Prim.SUB:
            return errs[0] + errs[1]
        case Prim.MUL:
            return _scale(np.abs(f[1]), errs[0]) + _scale(np.abs(f[0]), errs[1]) + errs[0] * errs[1]
        case Prim.DIV:  # |n'/d' - n/d| <= (E_n + |y| E_d) / |d'|, |d'| >= the floor
            room = _room(f[1], errs[1], lows[1])
            carried = errs[0] + _scale(np.abs(y64), errs[1])
            return np.where(carried == 0, 0.0, np.where(room > 0, carried / room, np.inf))
        case Prim.RECIP:
            room = _room(f[0], errs[0], lows[0])
            return np.where(
                errs[0] == 0, 0.0, np.where(room > 0, errs[0] / (np.abs(f[0]) * room), np.inf)
            )
        case Prim.NEG | Prim.ABS:
            return errs[0]
        case Prim.TANH:  # the steepest slope within the error: at the point nearest 0
            near = np.maximum(np.abs(f[0]) - errs[0], 0.0)
            return errs[0] * (1.0 - np.tanh(near) ** 2)
        case Prim.ERF:
            near = np.maximum(np.abs(f[0]) - errs[0], 0.0)
            return errs[0] * _ERF_SLOPE * np.exp(-(near**2))
        case Prim.EXP:
            # exp(x + e) - exp(x) where exp(x) * expm1(e) is not a number: an operand far
            # below exp's range (a masked score near -FLT_MAX) with an error FLT_MAX's ulps
            # make, whose exp is 0 however far the error moves it
            scaled = _scale(np.abs(y64), np.expm1(errs[0]))
            direct = np.exp(f[0] + errs[0]) - np.exp(f[0])
            return np.where(np.isfinite(scaled), scaled, direct)
        case Prim.LOG:  # |log x' - log x| <= log(x / x_min) or log(x_max / x), x_min the floor
            room = _room(f[0], errs[0], lows[0])
            near = np.where(room > 0, np.log(np.abs(f[0]) / np.where(room > 0, room, 1.0)), np.inf)
            return np.where(
                errs[0] == 0,
                0.0,
                np.where(room > 0, np.maximum(near, np.log1p(errs[0] / np.abs(f[0]))), np.inf),
            )
        case Prim.SQRT:  # |sqrt(a + d) - sqrt(a)| <= |d| / (sqrt(a - |d|) + sqrt(a))
            low = np.sqrt(np.maximum(_room(f[0], errs[0], lows[0]), 0.0))
            denom = low + np.sqrt(np.maximum(f[0], 0.0))
            return np.where(
                errs[0] == 0, 0.0, np.where(denom > 0, errs[0] / denom, np.sqrt(errs[0]))
            )
        case Prim.MAX | Prim.MIN:
            # the operand that wins by more than both errors carries its own error alone
            ahead = f[0] - f[1] if p is Prim.MAX else f[1] - f[0]
            clear = errs[0] + errs[1]
            tied = np.maximum(errs[0], errs[1])
            return np.where(ahead > clear, errs[0], np.where(-ahead > clear, errs[1], tied))
        case Prim.GE | Prim.GT | Prim.EQ:
            return _flip(vals[0], vals[1], errs[0], errs[1])
        case Prim.SELECT:
            # a predicate the errors could flip (its bound is not 0) still picks one of the two
            # device values: the oracle's branch within its bound, or the other, within its
            # bound of the other oracle value, whose distance from the chosen one is known
            # (small where the branches meet at the edge, a leaky relu's kink)
            pred = vals[0].astype(bool)
            chosen = np.where(pred, errs[1], errs[2])
            other = np.where(pred, errs[2], errs[1])
            gap = np.abs(f[1] - f[2])
            return np.where(errs[0] > 0, np.maximum(chosen, gap + other), chosen)
        case Prim.CONVERT:
            return errs[0] if y.dtype.kind == "f" else np.where(errs[0] > 0, np.inf, 0.0)
        case Prim.REDUCE_SUM if isinstance(e.params, ReduceParams):
            return np.sum(errs[0], axis=e.params.axes)
        case Prim.REDUCE_MAX if isinstance(e.params, ReduceParams):
            return _max_carry(f[0], errs[0], y64, e.params.axes)
        case Prim.MATMUL:
            n = f[0].shape[-1] if f[0].ndim else 1
            return _bilinear(np.matmul, np.abs(f[0]), np.abs(f[1]), errs[0], errs[1], n, y.shape)
        case Prim.CONV if isinstance(e.params, ConvParams):
            shape, p_ = e.out.type.shape, e.params
            n = int(np.prod(f[1].shape[1:]))

            def conv(x: Array, w: Array) -> Array:
                return conv64(x, w, p_, shape)

            return _bilinear(conv, np.abs(f[0]), np.abs(f[1]), errs[0], errs[1], n, y.shape)
        case Prim.REDUCE_WINDOW_SUM | Prim.REDUCE_WINDOW_MAX if isinstance(
            e.params, ReduceWindowParams
        ):
            win = windows_of(np.asarray(errs[0], np.float64), e.params, 0.0)
            axes = tuple(range(y.ndim, win.ndim))
            return np.sum(win, axis=axes) if p is Prim.REDUCE_WINDOW_SUM else np.max(win, axes)
        case Prim.IOTA:
            return np.zeros(y.shape)
        case _:
            return _moved(e, errs, vals)


def _max_carry(x: Array, ex: Array, m: Array, axes: tuple[int, ...]) -> Array:
    """How far the device's row maximum may be from the oracle's ``m``: at least the largest
    ``x_j - e_j`` and at most the largest ``x_j + e_j``, so an element far below the maximum
    (a masked score near ``-FLT_MAX`` whatever its error) moves nothing. Float64's rounding of
    those sums and differences (2^-51 of the larger magnitudes) is added."""
    if not x.size:
        return np.zeros(m.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        lo = np.max(x - ex, axis=axes)  # the device's maximum is at least this
        hi = np.max(x + ex, axis=axes)  # and at most this
        dev = np.maximum(m - lo, hi - m)
        slack = 2.0**-51 * (np.abs(m) + np.maximum(np.abs(lo), np.abs(hi)))
    out = np.where(np.isnan(dev), np.inf, np.maximum(dev, 0.0))
    return np.asarray(np.where(out > 0, out + slack, 0.0))


def _bilinear(
    fn: Callable[[Array, Array], Array],
    a: Array,
    b: Array,
    ea: Array,
    eb: Array,
    n: int,
    shape: tuple[int, ...],
) -> Array:
    """``a * eb + ea * b + ea * eb`` for a bilinear ``fn`` (a matmul, a convolution: sums of
    ``n`` products) on magnitudes ``a``, ``b``, in at most two evaluations: one when an operand
    is exact, else ``fn(a + ea, b + eb) - fn(a, b)``, plus what float64 may lose in that
    difference (``n`` units of 2^-52 of the larger sum of nonnegative terms)."""
    if not np.any(ea):
        return fn(a, eb) if np.any(eb) else np.zeros(shape)
    if not np.any(eb):
        return fn(ea, b)
    full = fn(a + ea, b + eb)
    return np.asarray(np.maximum(full - fn(a, b), 0.0) + n * 2.0**-52 * full)


def _moved(e: Eqn, errs: list[Array], vals: list[Array]) -> Array:
    """Data movement moves the errors with the values."""
    match e.params:
        case TransposeParams(perm=perm):
            return np.transpose(errs[0], perm)
        case ReshapeParams(shape=shape):
            return errs[0].reshape(shape)
        case BroadcastParams(shape=shape, dims=dims):
            expanded = errs[0].reshape(
                [errs[0].shape[dims.index(d)] if d in dims else 1 for d in range(len(shape))]
            )
            return np.broadcast_to(expanded, shape)
        case SliceParams(start=start, limit=limit, strides=strides):
            return errs[0][
                tuple(slice(s, stop, k) for s, stop, k in zip(start, limit, strides, strict=True))
            ]
        case ConcatParams(axis=axis):
            return np.concatenate(errs, axis=axis)
        case GatherParams(axis=axis):
            return np.take(errs[0], vals[1].astype(np.int64), axis=axis)
        case _:
            if e.prim is Prim.DYNAMIC_UPDATE_SLICE:
                out = errs[0].copy()
                starts = [int(v) for v in vals[2:]]
                window = tuple(slice(s, s + n) for s, n in zip(starts, errs[1].shape, strict=True))
                out[window] = errs[1]
                return out
            return np.full(e.out.shape, np.inf)  # no rule: promise nothing


@dataclass(frozen=True, slots=True)
class _DeviceRange:
    """Where the device's value lies: ``lo <= v' <= hi`` elementwise (float64; -inf / inf where
    nothing is known). See the module."""

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
    follow them endpoint by endpoint (see the module), else None. An exact step widens by its
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


def _variances(plan: Plan, index: Mapping[int, int]) -> dict[int, SquaresVariance]:
    """The variances by squares of ``plan.legalized`` (``row_ranges.squares_variance``) whose
    literals the device holds exactly (else it computes another function of its ``x'``)."""
    program, out = plan.legalized, {}
    for i, e in enumerate(program.eqns):
        if e.prim is Prim.SUB and (sv := squares_variance(program, i, index)) is not None:
            lits = [a for k in sv.steps for a in program.eqns[k].inputs if isinstance(a, Literal)]
            if plan.narrowing is None or all(stored_literal(a) == 0.0 for a in lits):
                out[i] = sv
    return out


def _variance_carry(
    sv: SquaresVariance,
    program: Program,
    val: Mapping[int, Array],
    err: Mapping[int, Array],
    owns: Mapping[int, Array],
    own: Array,
    y: Array,
) -> Array:
    """The bound of a variance by squares, ``f(x) = c sum x^2 - (c sum x)^2`` (``row_ranges.
    SquaresVariance``), carried as one function of its ``x`` (first-order carrying through
    each step loses the cancellation: both terms move with ``x``'s errors together, by far more
    than the variance where the mean is large against the spread). With ``x' = x + e``,
    ``|e_i| <= E_i`` and ``m = c sum x``, exactly::

        f(x') - f(x) = 2c sum (x_i - m) e_i + c sum e_i^2 - c^2 (sum e_i)^2
        |f(x') - f(x)| <= 2c sum |x_i - m| E_i + c sum E_i^2 + c^2 (sum E_i)^2

    and the device's value is within the chain's own errors (each step's rounding and the F32
    oracle's, ``owns``) of ``f(x')``, carried through the chain from an exact ``x`` at the
    device's magnitudes (the oracle's plus three times their bounds: a square of the mean
    moves by twice its value's reach). inf where the reduced shape does not map onto ``y``."""
    x = np.asarray(val[sv.x.id], np.float64)
    ex = np.asarray(err[sv.x.id], np.float64)
    axes, c = sv.axes, sv.c
    with np.errstate(all="ignore"):
        m = c * np.sum(x, axis=axes, keepdims=True)
        delta = (
            2.0 * c * np.sum(np.abs(x - m) * ex, axis=axes, keepdims=True)
            + c * np.sum(ex * ex, axis=axes, keepdims=True)
            + c * c * np.sum(ex, axis=axes, keepdims=True) ** 2
        )
        rounding: dict[int, Array] = {sv.x.id: np.zeros(x.shape)}
        for k in sv.steps[:-1]:
            q = program.eqns[k]
            if any(isinstance(a, Var) and a.id not in rounding for a in q.inputs):
                return np.full(np.shape(y), np.inf)
            mags = [
                np.abs(np.asarray(val[a.id], np.float64)) + 3.0 * err[a.id]
                if isinstance(a, Var)
                else np.asarray(a.value)
                for a in q.inputs
            ]
            rs = [rounding[a.id] if isinstance(a, Var) else np.zeros(()) for a in q.inputs]
            rounding[q.out.id] = _propagated(q, mags, rs, val[q.out.id]) + owns[q.out.id]
        # the reduced shape onto the subtraction's: checked on the mean square itself
        a, b = program.eqns[sv.eqn].inputs
        square = c * np.sum(x * x, axis=axes, keepdims=True)
        try:
            if square.size == np.size(y):
                moved, delta = square.reshape(np.shape(y)), delta.reshape(np.shape(y))
            else:
                moved, delta = (
                    np.broadcast_to(square, np.shape(y)),
                    np.broadcast_to(delta, np.shape(y)),
                )
        except ValueError:
            return np.full(np.shape(y), np.inf)
        held = np.asarray(val[a.id], np.float64)  # type: ignore[union-attr]
        if not np.allclose(moved, held, rtol=2.0**-10, atol=1e-30):
            return np.full(np.shape(y), np.inf)
        out = delta + rounding[a.id] + rounding[b.id] + own  # type: ignore[union-attr]
    return np.asarray(np.where(np.isnan(out), np.inf, out))


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
    src = e.inputs[0]
    if e.prim is not Prim.REDUCE_SUM or not isinstance(src, Var) or src.id not in peaks:
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


#: the steps whose carry reads a floor of an operand's magnitude (``_room``)
_ROOMS = frozenset({Prim.DIV, Prim.RECIP, Prim.LOG, Prim.SQRT})


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


def _whole(
    rw: Rewrite,
    source: Eqn,
    producer: dict[int, Eqn],
    val: dict[int, Array],
    err: dict[int, Array],
    y: Array,
    device: DType | None,
) -> tuple[Array, Array]:
    """A rewrite carried as one step (``Rule.carried``): its own error (its derived bound at
    the exact function's value of the operand the device holds, plus the reference's rounding:
    that value rounded once into the device dtype, float32's own error in computing it
    included) and its operand's error carried through the function (log: as the primitive;
    softplus: 1-Lipschitz, its slope is a sigmoid; sigmoid: its slope is at most 1/4)."""
    bound = rw.derivation.bound
    kind = _kind(rw)
    x: Atom | None = source.inputs[0]
    if kind == "softplus":
        x = operand_of_softplus(source, RuleContext(producer=producer))
    if kind == "sigmoid":
        x = sigmoid_operand(source, RuleContext(producer=producer))
    if not isinstance(bound, AbsRel) or not isinstance(x, Var) or kind not in _CARRIED:
        return np.full(y.shape, np.inf), np.zeros(y.shape)
    dtype = (device or source.out.dtype).numpy
    xs, es = val[x.id], err[x.id]
    # on the operand the device holds (an F32 value below FP16's subnormals is 0 there); off
    # log's domain the rewrite is NaN there, flagged in the graph: nothing promised
    with np.errstate(over="ignore"):  # a value FP16 cannot hold is inf there: outside
        held = np.asarray(xs).astype(dtype).astype(np.float64)
    inside = (held > 0) & np.isfinite(held) if kind == "log" else np.isfinite(held)
    if kind == "sigmoid":  # -inf too: the clamp makes it -104, whose exact value is 0's
        inside = held < np.inf
    if rw.rule.domain is not None:  # past it the rewrite is refused in the graph
        inside &= (held >= rw.rule.domain[0]) & (held <= rw.rule.domain[1])
    with np.errstate(all="ignore"):
        exact = _CARRIED[kind](np.where(inside, held, 1.0))
    ref = 0.5 * np.abs(np.spacing(exact.astype(dtype))).astype(np.float64) + 2.0**-23 * np.abs(
        exact
    )
    own = np.where(inside, bound.abs + bound.rel * np.abs(exact) + ref, np.inf)
    if kind in ("log", "erf", "tanh"):
        return own, _propagated(source, [xs], [es], y)
    if kind == "sigmoid":  # its slope is at most 1/4
        return own, 0.25 * np.asarray(es, dtype=np.float64)
    return own, np.asarray(es, dtype=np.float64)


def _function_range(
    rw: Rewrite, source: Eqn, producer: dict[int, Eqn], err: Mapping[int, Array]
) -> tuple[_DeviceRange, Array] | None:
    """A bounded function carried as one step (tanh, erf: [-1, 1]; sigmoid: [0, 1]) holds the
    device's value within its range widened by the rewrite's derived bound there (``|device
    - f(x')| <= abs + rel |f(x')|``, the same bound ``_whole`` carries) and an FP16 rounding
    of 1, whatever its operand's error; with where its operand's bound is finite (a NaN
    operand is not in any range). None for another function."""
    kind, bound = _kind(rw), rw.derivation.bound
    if kind not in ("tanh", "erf", "sigmoid") or not isinstance(bound, AbsRel):
        return None
    x: Atom | None = source.inputs[0]
    if kind == "sigmoid":
        x = sigmoid_operand(source, RuleContext(producer=producer))
    if not isinstance(x, Var) or x.id not in err:
        return None
    w = bound.abs + bound.rel + 2.0**-10
    lo = -w if kind == "sigmoid" else -1.0 - w
    shape = source.out.shape
    ends = _DeviceRange(np.full(shape, lo), np.full(shape, 1.0 + w))
    return ends, np.broadcast_to(np.isfinite(err[x.id]), shape)


def _blend(
    program: Program,
    index: Mapping[int, int],
    i: int,
    val: Mapping[int, Array],
    err: Mapping[int, Array],
    y: Array,
    narrow: bool,
) -> Array | None:
    """The bound of a select legalized on a comparison's mask (``legalize.expanders.
    expand_select``), ``x m + y (1 - m)`` at equation ``i``, as a select: the device's mask
    ``m'`` is 0 or 1 exactly (clamped steps of FP16 values, ``legalize.steps``) wherever it
    is finite, so each product is exact (``x' * 1``, a zero) and so is the sum: the device's
    value is ``x'`` or ``y'``, each within its bound of the oracle's branch. Where the mask is
    sure (bound 0 on a 0 or 1) that is the chosen branch; elsewhere either branch, at its
    bound plus its distance from the oracle's blend ``v``::

        |v' - v| <= max(E_x + |x - v|, E_y + |y - v|)

    First-order carrying gives ``|x| E_m + |y| E_m`` instead, about ``|x| + |y|`` wherever the
    mask may flip, where the branches meet (a sigmoid's two halves at 0). Infinite where a
    branch or the mask is promised nothing (a NaN or infinite branch times 0 is NaN). None
    when equation ``i`` is not of that shape."""
    e = program.eqns[i]
    made = [
        program.eqns[index[a.id]] if isinstance(a, Var) and a.id in index else None
        for a in e.inputs
    ]
    if e.prim is not Prim.ADD or any(p is None or p.prim is not Prim.MUL for p in made):
        return None
    (bx, m), (by, n) = made[0].inputs, made[1].inputs  # type: ignore[union-attr]
    flip = program.eqns[index[n.id]] if isinstance(n, Var) and n.id in index else None
    if not (
        isinstance(m, Var)
        and (narrow or m.dtype is DType.F16)  # the steps' 0/1 rests on FP16 (>= 2^-24 or 0)
        and flip is not None
        and flip.prim is Prim.SUB
        and flip.inputs[1] == m
        and isinstance(flip.inputs[0], Literal)
        and flip.inputs[0].as_float() == 1.0
    ):
        return None

    def branch(a: Atom) -> tuple[Array, Array]:
        if isinstance(a, Var):
            return np.asarray(val[a.id], np.float64), err[a.id]
        held = stored_literal(a) if narrow and a.dtype is DType.F32 else 0.0
        return np.asarray(a.value, np.float64), np.asarray(held)

    (x, ex), (z, ez) = branch(bx), branch(by)
    mv, em = np.asarray(val[m.id], np.float64), err[m.id]
    v = np.asarray(y, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        to_x, to_z = ex + np.abs(x - v), ez + np.abs(z - v)
        sure = (em == 0) & ((mv == 0) | (mv == 1))
        out = np.where(sure, np.where(mv == 1, to_x, to_z), np.maximum(to_x, to_z))
        out = out + 2.0**-52 * (np.abs(x) + np.abs(z) + np.abs(v))  # float64's own
        finite = np.isfinite(em) & np.isfinite(ex) & np.isfinite(ez)
        out = np.where(finite & ~np.isnan(out), out, np.inf)
    return np.asarray(np.broadcast_to(out, np.shape(y)), np.float64)


def _kind(rw: Rewrite) -> str:
    """The function a rewrite is carried as (``_CARRIED``): the rule's ``carried``, or a
    piecewise rule's odd function (erf, tanh), whose derived bound is absolute plus relative
    (``legalize.odd``: relative near zero, where the series serves), "" for neither."""
    if rw.rule.carried:
        return rw.rule.carried
    if rw.rule.numerics is Numerics.PIECEWISE and rw.rule.piecewise is not None:
        return rw.rule.piecewise.name
    return ""


#: the functions a rewrite is carried as, exactly (float64)
_CARRIED: dict[str, Callable[[Array], Array]] = {
    "log": np.log,
    "softplus": lambda x: np.logaddexp(0.0, x),
    "sigmoid": lambda x: np.exp(-np.logaddexp(0.0, -x)),
    "erf": erf64,
    "tanh": np.tanh,
}


def _scaled_sums(plan: Plan) -> dict[int, Callable[[Array], Array]]:
    """For each power-of-two scale moved into a sum (``legalize.rules``), at its reduction: the
    derived bound (n summands' underflow, exact arithmetic) plus what rounding adds against the
    source's ``fl(fl(sum) * 2^k)``: the two exact values differ by at most the bound, so their
    roundings to the device dtype by at most one more ulp of the result, and the source's
    product rounds once more (half the smallest subnormal) where it lands below the normal
    range."""
    out: dict[int, Callable[[Array], Array]] = {}
    for rw in plan.rewrites:
        if rw.rule.numerics is not Numerics.SCALED_SUM or not isinstance(
            rw.derivation.bound, AbsRel
        ):
            continue
        e = plan.legalized.eqns[rw.last]
        device = e.out.dtype
        if plan.narrowing is not None and device is DType.F32:
            device = plan.narrowing.device_dtype
        tiny = float(np.nextafter(np.zeros((), device.numpy), np.ones((), device.numpy)))
        extra = rw.derivation.bound.abs + 0.5 * tiny  # half the smallest subnormal

        def add(y: Array, dt: Any = device.numpy, extra: float = extra) -> Array:
            with np.errstate(all="ignore"):  # past the device's range: inf, promised nothing
                ulp = np.asarray(np.spacing(np.abs(y.astype(np.float64)).astype(dt)), np.float64)
            return np.where(np.isfinite(ulp), ulp, np.inf) + extra

        out[rw.last] = add
    return out


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


def legalized_values(plan: Plan, inputs: Mapping[str, np.ndarray]) -> dict[int, Array]:
    """The oracle's value of every argument and equation of ``plan.legalized`` on ``inputs``,
    by var id: one evaluation. When no rewrite was made (the legalized program is the source)
    the source's results are among them, so a caller checking a step reads its reference here
    instead of evaluating the program again."""
    program = plan.legalized
    values = evaluate(_everything(program), inputs)
    out: dict[int, Array] = {a.var.id: np.asarray(inputs[a.name]) for a in program.args}
    out.update((e.out.id, values[f"v{e.out.id}"]) for e in program.eqns)
    return out


def result_bounds(
    plan: Plan,
    inputs: Mapping[str, np.ndarray],
    values: Mapping[int, Array] | None = None,
    origins: dict[str, tuple[int, str]] | None = None,
    every: dict[int, Array] | None = None,
) -> dict[str, Array]:
    """For each result of ``plan.source`` (by name): the largest error a device running
    ``plan`` may have at each element, for these ``inputs`` (inf: nothing promised). The
    analysis runs over the legalized program (``plan.legalized``, the same results), so each
    rewrite is carried step by step under its steps' contracts. ``values``: the
    ``legalized_values`` of these inputs, when the caller has them (else evaluated here).
    ``origins``, when given, receives for each result with an element promised nothing the
    equation of ``plan.legalized`` (index, primitive) whose bound first became infinite on
    finite operand bounds and reaches it: what makes the result unbounded on these inputs.
    ``every``, when given, receives the bound of every value of ``plan.legalized`` by var id
    (the arguments' and each equation's): where a bound grows, for a diagnosis."""
    program = plan.legalized
    # a rewrite by a published approximation adds the formula's own error at its last step
    approximation = {
        rw.last: rw.rule.approximation
        for rw in plan.rewrites
        if rw.rule.numerics is not Numerics.SCALED_SUM and not _kind(rw)
    }
    scaled = _scaled_sums(plan)
    # a range-reduced rewrite is carried as one step: its derived bound, and its operand's error
    # through the source primitive (its steps' own errors are inside that bound)
    whole = {rw.last: rw for rw in plan.rewrites if _kind(rw)}
    # a select on a comparison's mask is one of its branches on the device (``_blend``)
    blends = {rw.last for rw in plan.rewrites if rw.rule.expand is expand_select}
    producer = {e.out.id: e for e in plan.source.eqns}
    device = plan.narrowing.device_dtype if plan.narrowing is not None else None
    if values is None:
        values = legalized_values(plan, inputs)
    # a narrowed plan: the device rounds every F32 argument and literal to FP16 first, and each
    # equation computing an F32 value rounds as the NPU compiler lowers it (``fp16.contract``)
    narrow = plan.narrowing is not None
    # the equations whose device value a returned step holds within +-65504 (an overflow there
    # refuses the step): their own rounding is at most 65504's, their bound at most the reach
    # of that range from the oracle's value
    checked = (
        overflow_checked(program, plan.narrowing.max_magnitude, plan.score_bound)
        if plan.narrowing is not None
        else frozenset()
    )
    fp16_figures = _fp16_figures(plan, checked) if narrow else None
    first: dict[int, tuple[int, str]] = {}  # where infinite bounds came from (``origins``)
    # a normalized row's range (``row_ranges``) rests on its steps' capability contracts, each
    # kept on these inputs: not a rewrite's step (its bound is the rewrite's), and not a step
    # promised nothing somewhere (outside its domain)
    index = {e.out.id: k for k, e in enumerate(program.eqns)}
    unpromised: set[int] = set(approximation) | set(scaled) | set(whole)

    def contract_of(k: int) -> Contract | None:
        return None if k in unpromised else _contract(plan, k, program.eqns[k])

    def magnitude(v: Var) -> float:
        with np.errstate(invalid="ignore"):
            top = float(np.max(np.abs(val[v.id].astype(np.float64)) + err[v.id], initial=0.0))
        return top if math.isfinite(top) else math.inf

    val: dict[int, Array] = {a.var.id: np.asarray(inputs[a.name]) for a in program.args}
    err: dict[int, Array] = {
        a.var.id: stored(val[a.var.id])
        if narrow and a.var.dtype is DType.F32
        else np.zeros(a.var.shape)
        for a in program.args
    }
    rng: dict[int, _DeviceRange] = {}  # the ranges steps narrowed (``_DeviceRange``)
    forms = _forms(plan, index)
    # a variance by squares is carried as one function (``_variance_carry``): its steps' own
    # errors kept for it
    variances = _variances(plan, index)
    chained = {k for sv in variances.values() for k in sv.steps[:-1]}
    owns: dict[int, Array] = {}
    # a narrowed softmax's exp, by var id: its shift's axes and the least device value at the
    # row maximum's own element, exp(0) (``_denominator``)
    peaks: dict[int, tuple[tuple[int, ...], float]] = {}
    for i, e in enumerate(program.eqns):
        ops = [val[a.id] if isinstance(a, Var) else np.asarray(a.value) for a in e.inputs]
        eops = [
            err[a.id]
            if isinstance(a, Var)
            else np.asarray(stored_literal(a) if narrow and a.dtype is DType.F32 else 0.0)
            for a in e.inputs
        ]
        y = values[e.out.id]
        contract = _contract(plan, i, e)
        narrowed = narrow and DType.F32 in (e.out.dtype, operating_dtype(e))
        # a range is kept only where a step narrowed it: elsewhere it is ``y -+ E``, built
        # when a ruled step reads it
        ranged = [rng.get(a.id) if isinstance(a, Var) else None for a in e.inputs]
        ruled = (
            # a rewrite's last step keeps its steps' range (the device runs them: a legalized
            # abs is max(x', -x') >= 0, a select on a mask a sum of products of ranges); the
            # range's reach is from the legalized oracle, the formula's gap added (``gap``)
            i not in scaled
            and i not in whole
            and _rules(e.prim, narrowed, any(r is not None for r in ranged))
        )
        if narrowed and contract is not None and isinstance(contract.bound, RoundedTwice):
            contract = None  # the FP16 lowering below is the pooled sum's own error
        own = _own(contract, e, ops, y)
        if np.isinf(own).any():  # outside the contract's domain somewhere: no range rests on it
            unpromised.add(i)
        if i in approximation:
            # the formula's own error, and the reference's: the source's exact function value
            # rounded once to the result's dtype, up to half an ulp from the exact value the
            # formula approximates
            with np.errstate(over="ignore"):  # the largest magnitude's spacing: inf
                ref = np.abs(np.spacing(np.asarray(y).astype(e.out.dtype.numpy)))
            ref = ref.astype(np.float64)
            gap = approximation[i] + 0.5 * ref
            own = own + gap
        if i in scaled:
            own = own + scaled[i](np.asarray(y))
        if i in whole:
            source = plan.source.eqns[whole[i].eqn]
            own, prop = _whole(whole[i], source, producer, val, err, y, device)
        else:
            lows = [None if r is None else r.floor() for r in ranged] if e.prim in _ROOMS else None
            prop = _propagated(e, ops, eops, y, lows)
            # narrowed: each equation's FP16 lowering (the F32 oracle's rounding in it); else
            # the one ulp two roundings of neighbouring values can part by
            own = own + (
                own_rounding(e, ops, y, prop, i in checked)
                if narrowed
                else _rerounded(e, y, prop, ops)
            )
        val[e.out.id] = y
        total = np.asarray(own + prop, dtype=np.float64)
        if i in chained:
            owns[e.out.id] = np.asarray(own, np.float64)
        if i in variances:
            whole_f = _variance_carry(variances[i], program, val, err, owns, own, y)
            total = np.minimum(total, whole_f)
        err[e.out.id] = total
        if i in whole and (
            fn := _function_range(whole[i], plan.source.eqns[whole[i].eqn], producer, err)
        ):
            rng[e.out.id], err[e.out.id] = _DeviceRange.within(fn[0], y, total, fn[1])
        if ruled:
            rops = [
                _DeviceRange.around(o, d) if r is None else r
                for r, o, d in zip(ranged, ops, eops, strict=True)
            ]
            form = forms.get(i, ("", ()))
            own_at = partial(_own, contract, e, ops)
            # an exact step's device value is exactly max/min/neg of its operands' within its
            # contract (the F32 oracle's rounding and a rewrite's gap are the oracle's, not the
            # device's): its range widens by the contract alone
            rng[e.out.id], err[e.out.id] = _DeviceRange.of(
                e, rops, ops, y, total, own_at(np.asarray(y)), narrowed, own_at, form
            )
            if i in approximation:
                err[e.out.id] = np.minimum(total, err[e.out.id] + gap)
            shifted = index.get(e.inputs[0].id) if isinstance(e.inputs[0], Var) else None
            if e.prim is Prim.EXP and narrowed and shifted in forms and forms[shifted][0] == _SHIFT:
                at_one = _rounded(np.ones(y.shape), np.ones(y.shape), own_at).lo
                peaks[e.out.id] = (forms[shifted][1], float(np.min(at_one, initial=1.0)))
        elif narrowed and (peak := _peak_of(e, peaks)) is not None:
            src = e.inputs[0]
            assert isinstance(src, Var)
            terms = rng.get(src.id)
            sums = _denominator(e, terms, peak, contract)
            finite = None
            if terms is not None and sums is not None:
                with np.errstate(invalid="ignore"):
                    axes = e.params.axes  # type: ignore[union-attr]
                    ok = np.all(np.isfinite(terms.hi - terms.lo), axis=axes)
                    finite = ok & (sums.lo > -LIMIT) & (sums.hi < LIMIT)
            rng[e.out.id], err[e.out.id] = _DeviceRange.within(sums, y, total, finite)
        if i in blends and (b := _blend(program, index, i, val, err, y, narrow)) is not None:
            if i in approximation:
                b = b + gap
            rng[e.out.id], err[e.out.id] = _DeviceRange.within(
                rng.get(e.out.id), y, np.minimum(err[e.out.id], b)
            )
        if i in checked and y.dtype.kind == "f":
            held = _held_finite(rng.get(e.out.id), y, err[e.out.id])
            if held is not None:
                rng[e.out.id], err[e.out.id] = held
        if e.prim is Prim.DIV:
            # an FP16 device's figures are its steps' lowering, a scale moved into a sum's too
            kept = unpromised - scaled.keys() if narrow else unpromised
            err[e.out.id] = _within_range(
                program, i, index, contract_of, magnitude, kept, y, err, fp16_figures, i in checked
            )
        if origins is not None:
            came = next(
                (first[a.id] for a in e.inputs if isinstance(a, Var) and a.id in first), None
            )
            if came is None and np.isinf(err[e.out.id]).any():
                came = (i, e.prim.value)
            if came is not None:
                first[e.out.id] = came
    if every is not None:
        every.update(err)
    if origins is not None:
        for name, v in program.results():
            if v.id in first and np.isinf(err[v.id]).any():
                origins[name] = first[v.id]
    return {name: err[v.id] for name, v in program.results()}
