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

This module runs the analysis over a program (``result_bounds``); each step is ``steps``' (its
own error, its operands' carried), each range ``ranges``', a rewrite carried whole
``rewrites``' (a range-reduced function, a select on a mask, a scaled sum, a variance by
squares), and a normalized row's range ``rows``'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial

import numpy as np
from poot_ir import DType, Output, Prim, Program, Var, evaluate
from poot_ir.numerics import Contract, RoundedTwice

from poot_planner.error_bounds.ranges import (
    _SHIFT,
    _denominator,
    _DeviceRange,
    _forms,
    _held_finite,
    _peak_of,
    _rounded,
    _rules,
)
from poot_planner.error_bounds.rewrites import (
    _blend,
    _function_range,
    _kind,
    _scaled_sums,
    _variance_carry,
    _variances,
    _whole,
)
from poot_planner.error_bounds.rows import _fp16_figures, _within_range
from poot_planner.error_bounds.steps import _ROOMS, _contract, _own, _propagated, _rerounded
from poot_planner.fp16.contract import LIMIT, overflow_checked, own_rounding, stored, stored_literal
from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.legalize.expanders import expand_select
from poot_planner.legalize.rules import Numerics
from poot_planner.plan import Plan

__all__ = ["legalized_values", "result_bounds"]
Array = np.ndarray


def _everything(program: Program) -> Program:
    """``program`` with every value it computes as an output, so the oracle returns them."""
    outs = tuple(Output(f"v{e.out.id}", e.out) for e in program.eqns)
    return Program(program.name, program.args, program.eqns, outs, ())


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
