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

Inputs and literals are exact (E = 0). Outside a step's domain nothing is promised (E = inf,
and the comparison skips the element); a comparison or a select whose outcome an operand's
error could flip is promised nothing either. Steps of an XDNA2 row kernel are analysed one by
one under the same per-primitive contracts the kernel's static bound is derived from
(``poot_planner.xdna2.rowfusion``), so the running bound never exceeds what the derivation allows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Contract,
    Derived,
    LargerOperandUlps,
    Normwise,
    Relative,
    ScaledSum,
)
from poot_ir.window import conv64, windows_of

from poot_planner.emit import RuleContext
from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.legalize.logarithm import operand_of_softplus
from poot_planner.legalize.rewrite import Rewrite
from poot_planner.legalize.rules import Numerics
from poot_planner.plan import Plan

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
            x = np.abs(ops[0].astype(np.float64))
            own = u * unit * x.shape[-1] * np.sum(x, axis=-1) if x.ndim else zero
    inside = c.domain.inside(ops, y)
    return np.where(inside, own, np.inf)


def _flip(a: Array, b: Array, ea: Array, eb: Array) -> Array:
    """Elements of a comparison that the operands' errors could flip: promised nothing."""
    gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return np.where(gap <= ea + eb, np.inf, 0.0)


def _propagated(e: Eqn, vals: list[Array], errs: list[Array], y: Array) -> Array:
    """The operands' errors carried through the step (an upper bound, elementwise)."""
    with np.errstate(all="ignore"):
        out = np.asarray(_carry(e, vals, errs, y), dtype=np.float64)
    return np.where(np.isnan(out), np.inf, out)  # an undefined carry promises nothing


def _scale(magnitude: Array, err: Array) -> Array:
    """``magnitude * err``, where an exact operand carries nothing even from an infinite value."""
    return np.where(err == 0, 0.0, magnitude * err)


def _carry(e: Eqn, vals: list[Array], errs: list[Array], y: Array) -> Any:
    p = e.prim
    f = [v.astype(np.float64) for v in vals]
    y64 = y.astype(np.float64) if y.dtype.kind in "fi" else np.zeros(y.shape)
    match p:
        case Prim.ADD | Prim.SUB:
            return errs[0] + errs[1]
        case Prim.MUL:
            return _scale(np.abs(f[1]), errs[0]) + _scale(np.abs(f[0]), errs[1]) + errs[0] * errs[1]
        case Prim.DIV:
            room = np.abs(f[1]) - errs[1]
            carried = errs[0] + _scale(np.abs(y64), errs[1])
            return np.where(carried == 0, 0.0, np.where(room > 0, carried / room, np.inf))
        case Prim.RECIP:
            room = np.abs(f[0]) - errs[0]
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
            return _scale(np.abs(y64), np.expm1(errs[0]))
        case Prim.LOG:
            room = np.abs(f[0]) - errs[0]
            return np.where(
                errs[0] == 0, 0.0, np.where(room > 0, -np.log1p(-errs[0] / np.abs(f[0])), np.inf)
            )
        case Prim.SQRT:  # |sqrt(a + d) - sqrt(a)| <= |d| / (sqrt(a - |d|) + sqrt(a))
            low = np.sqrt(np.maximum(f[0] - errs[0], 0.0))
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
            pred = vals[0].astype(bool)
            chosen = np.where(pred, errs[1], errs[2])
            return np.where(errs[0] > 0, np.inf, chosen)
        case Prim.CONVERT:
            return errs[0] if y.dtype.kind == "f" else np.where(errs[0] > 0, np.inf, 0.0)
        case Prim.REDUCE_SUM if isinstance(e.params, ReduceParams):
            return np.sum(errs[0], axis=e.params.axes)
        case Prim.REDUCE_MAX if isinstance(e.params, ReduceParams):
            return np.max(errs[0], axis=e.params.axes, initial=0.0)
        case Prim.MATMUL:
            a, b = np.abs(f[0]), np.abs(f[1])
            return a @ errs[1] + errs[0] @ b + errs[0] @ errs[1]
        case Prim.CONV if isinstance(e.params, ConvParams):
            shape = e.out.type.shape
            a, b = np.abs(f[0]), np.abs(f[1])
            return (
                conv64(a, errs[1], e.params, shape)
                + conv64(errs[0], b, e.params, shape)
                + conv64(errs[0], errs[1], e.params, shape)
            )
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
    softplus: 1-Lipschitz, its slope is a sigmoid)."""
    bound = rw.derivation.bound
    kind = rw.rule.carried
    x: Atom | None = source.inputs[0]
    if kind == "softplus":
        x = operand_of_softplus(source, RuleContext(producer=producer))
    if not isinstance(bound, AbsRel) or not isinstance(x, Var) or kind not in _CARRIED:
        return np.full(y.shape, np.inf), np.zeros(y.shape)
    dtype = (device or source.out.dtype).numpy
    xs, es = val[x.id], err[x.id]
    # on the operand the device holds (an F32 value below FP16's subnormals is 0 there); off
    # log's domain the rewrite is NaN there, flagged in the graph: nothing promised
    with np.errstate(over="ignore"):  # a value FP16 cannot hold is inf there: outside
        held = np.asarray(xs).astype(dtype).astype(np.float64)
    inside = (held > 0) & np.isfinite(held) if kind == "log" else np.isfinite(held)
    if rw.rule.domain is not None:  # past it the rewrite is refused in the graph
        inside &= (held >= rw.rule.domain[0]) & (held <= rw.rule.domain[1])
    with np.errstate(all="ignore"):
        exact = _CARRIED[kind](np.where(inside, held, 1.0))
    ref = 0.5 * np.abs(np.spacing(exact.astype(dtype))).astype(np.float64) + 2.0**-23 * np.abs(
        exact
    )
    own = np.where(inside, bound.abs + bound.rel * np.abs(exact) + ref, np.inf)
    if kind == "log":
        return own, _propagated(source, [xs], [es], y)
    return own, np.asarray(es, dtype=np.float64)


#: the functions a rewrite is carried as, exactly (float64)
_CARRIED: dict[str, Callable[[Array], Array]] = {
    "log": np.log,
    "softplus": lambda x: np.logaddexp(0.0, x),
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
    plan: Plan, inputs: Mapping[str, np.ndarray], values: Mapping[int, Array] | None = None
) -> dict[str, Array]:
    """For each result of ``plan.source`` (by name): the largest error a device running
    ``plan`` may have at each element, for these ``inputs`` (inf: nothing promised). The
    analysis runs over the legalized program (``plan.legalized``, the same results), so each
    rewrite is carried step by step under its steps' contracts. ``values``: the
    ``legalized_values`` of these inputs, when the caller has them (else evaluated here)."""
    program = plan.legalized
    # a rewrite by a published approximation adds the formula's own error at its last step
    approximation = {
        rw.last: rw.rule.approximation
        for rw in plan.rewrites
        if rw.rule.numerics is not Numerics.SCALED_SUM
    }
    scaled = _scaled_sums(plan)
    # a range-reduced rewrite is carried as one step: its derived bound, and its operand's error
    # through the source primitive (its steps' own errors are inside that bound)
    whole = {rw.last: rw for rw in plan.rewrites if rw.rule.carried}
    producer = {e.out.id: e for e in plan.source.eqns}
    device = plan.narrowing.device_dtype if plan.narrowing is not None else None
    if values is None:
        values = legalized_values(plan, inputs)
    val: dict[int, Array] = {a.var.id: np.asarray(inputs[a.name]) for a in program.args}
    err: dict[int, Array] = {a.var.id: np.zeros(a.var.shape) for a in program.args}
    for i, e in enumerate(program.eqns):
        ops = [val[a.id] if isinstance(a, Var) else np.asarray(a.value) for a in e.inputs]
        eops = [err[a.id] if isinstance(a, Var) else np.zeros(()) for a in e.inputs]
        y = values[e.out.id]
        own = _own(_contract(plan, i, e), e, ops, y)
        if i in approximation:
            # the formula's own error, and the reference's: the source's exact function value
            # rounded once to the result's dtype, up to half an ulp from the exact value the
            # formula approximates
            ref = np.abs(np.spacing(np.asarray(y).astype(e.out.dtype.numpy))).astype(np.float64)
            own = own + approximation[i] + 0.5 * ref
        if i in scaled:
            own = own + scaled[i](np.asarray(y))
        if i in whole:
            source = plan.source.eqns[whole[i].eqn]
            own, prop = _whole(whole[i], source, producer, val, err, y, device)
        else:
            prop = _propagated(e, ops, eops, y)
        val[e.out.id] = y
        err[e.out.id] = np.asarray(own + prop, dtype=np.float64)
    return {name: err[v.id] for name, v in program.results()}
