"""One step of the running error analysis (see the package): its own error under its
contract, on the oracle's operand values (``_own``), the ulp two roundings of neighbouring
values can part by (``_rerounded``), and its operands' errors carried through it
(``_propagated``: first order with the oracle's magnitudes, the second-order product where it
matters, a divisor's or a log's room from its range's floor)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from poot_ir import (
    BroadcastParams,
    ConcatParams,
    ConvParams,
    Eqn,
    GatherParams,
    Prim,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    TransposeParams,
)
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

from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.plan import Plan

Array = np.ndarray


_ERF_SLOPE = 2.0 / np.sqrt(np.pi)  # the largest derivative of erf


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


#: the steps whose carry reads a floor of an operand's magnitude (``_room``)
_ROOMS = frozenset({Prim.DIV, Prim.RECIP, Prim.LOG, Prim.SQRT})
