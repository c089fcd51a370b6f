"""A rewrite carried as one step rather than step by step: a range-reduced function by its
derived bound and its operand's error through the source primitive (``_whole``), a select on
a comparison's mask held to either branch (``_blend``), a scale moved into a sum
(``_scaled_sums``), and a variance by squares as one function of its operand
(``_variance_carry``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from poot_ir import Atom, DType, Eqn, Literal, Prim, Program, Var
from poot_ir.erf import erf64
from poot_ir.numerics import AbsRel

from poot_planner.emit import RuleContext
from poot_planner.error_bounds.ranges import _DeviceRange
from poot_planner.error_bounds.steps import _propagated
from poot_planner.fp16.contract import stored_literal
from poot_planner.legalize.logarithm import operand_of_softplus
from poot_planner.legalize.rewrite import Rewrite
from poot_planner.legalize.rules import Numerics
from poot_planner.legalize.steps import sigmoid_operand
from poot_planner.plan import Plan
from poot_planner.row_ranges import SquaresVariance, squares_variance

Array = np.ndarray


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
