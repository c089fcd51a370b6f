"""Which values of a run left their equation's domain, on the oracle: what the conformance
suites hold a device's domain guards to, both ways.

- A step that returned must have read no operand outside a device-computed equation's domain
  (a result computed there is promised nothing, so it must never come back).
- A typed domain refusal must be real: a ``DomainError`` (a host guard) names an equation the
  oracle's values put outside its domain, and a ``DomainFlagged`` (a device's flag word) one of
  the equations its region guards. A guard that fires on an in-domain value fails.

The values are the oracle's (``evaluate``) on the plan's program, independent of the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from poot_ir import (
    DomainError,
    DomainFlagged,
    DType,
    Eqn,
    GatherParams,
    Output,
    PootError,
    Prim,
    Program,
    Storage,
    Var,
    evaluate,
)
from poot_ir.numerics import AnyInput, FiniteInputs, FiniteNormalResult
from poot_planner import Plan
from poot_planner.guards import RESULT, Site, equation_contract

__all__ = ["DEVICE_FLAGS", "Outside", "feeds", "outside", "unjustified"]

#: Targets whose devices read a flag of their own for values computed on them (``DEVICE``
#: guards). Intel's in-graph flag (FP16 overflow) is not in this branch: a value computed
#: outside its domain there is counted and reported, not failed, until it is.
DEVICE_FLAGS = frozenset({"xdna2", "cpu"})


@dataclass(frozen=True, slots=True)
class Outside:
    """Equation ``eqn`` read an operand (or made a result) outside its domain."""

    eqn: int
    what: str
    site: Site


def _everything(program: Program) -> Program:
    outs = tuple(Output(f"v{e.out.id}", e.out) for e in program.eqns)
    return Program(program.name, program.args, program.eqns, outs, ())


def _live(program: Program) -> set[int]:
    need = {v.id for _, v in program.results()}
    for e in reversed(program.eqns):
        if e.out.id in need:
            need.update(a.id for a in e.inputs if isinstance(a, Var))
    return need


def outside(p: Plan, feed: dict[str, np.ndarray], *, live: bool = True) -> list[Outside]:
    """The equations with a contract (only those a result depends on, with ``live``) that read an operand (or, for
    ``FiniteNormalResult``, made a result) outside their domain on ``feed``, with the site of
    the guard that checks each (``DEVICE`` where no guard names it)."""
    prog = p.program
    values = {**feed, **evaluate(_everything(prog), feed)}
    names = {a.var.id: a.name for a in prog.args} | {e.out.id: f"v{e.out.id}" for e in prog.eqns}
    sites = {(g.eqn, g.operand): g.site for g in p.guards}
    # a result guard (the XDNA2 kernels' count of a non-finite row sum): a sum of finite
    # operands that overflows F32 is flagged there
    results = {g.eqn: g.site for g in p.guards if g.operand == RESULT}
    needed = _live(prog) if live else {e.out.id for e in prog.eqns}
    found = []
    for i, e in enumerate(prog.eqns):
        c = equation_contract(p, i, e)
        if c is None or isinstance(c.domain, AnyInput) or e.out.id not in needed:
            continue
        y = values[names[e.out.id]]
        for k, a in enumerate(e.inputs):
            op = values[names[a.id]] if isinstance(a, Var) else np.asarray(a.value)
            d = FiniteInputs() if isinstance(c.domain, FiniteNormalResult) else c.domain
            if not d.inside([op], y).all():
                site = sites.get((i, k), Site.DEVICE)
                what = f"eqn {i} {e.prim.value}: operand {k} outside {c.domain}"
                found.append(Outside(i, what, site))
        if isinstance(c.domain, FiniteNormalResult) and not (
            c.domain.inside([], y).all() and _exact_inside(e, values, names)
        ):
            what = f"eqn {i} {e.prim.value}: a result outside {c.domain}"
            found.append(Outside(i, what, Site.DEVICE))
        if i in results and not np.isfinite(y).all():
            what = f"eqn {i} {e.prim.value}: a non-finite result, which its result guard counts"
            found.append(Outside(i, what, results[i]))
    return found


_EXACT = {
    Prim.ADD: np.add,
    Prim.SUB: np.subtract,
    Prim.MUL: np.multiply,
    Prim.DIV: np.divide,
    Prim.RECIP: np.reciprocal,
}


def _exact_inside(e: Eqn, values: dict[str, np.ndarray], names: dict[int, str]) -> bool:
    """An arithmetic step's result at float64 (exact for add, sub and mul of F32 values; a
    quotient or reciprocal near enough) is finite and normal in F32, or exactly zero: the
    oracle's F32 rounding hides a product, quotient or reciprocal that underflowed to 0
    (2^-126 x 2^-126, 1 / 3e38), which the domain excludes and the device's guard flags."""
    if e.prim not in _EXACT or e.out.dtype is not DType.F32:
        return True
    ops = [
        (values[names[a.id]] if isinstance(a, Var) else np.asarray(a.value)).astype(np.float64)
        for a in e.inputs
    ]
    with np.errstate(all="ignore"):
        y = np.abs(_EXACT[e.prim](*ops))
    ok = ~np.isfinite(y) | (y == 0) | (y >= 2.0**-126)  # infinities: the F32 check's
    return bool(np.all(ok))


def feeds(program: Program, steps: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Each step's whole feed as ``run_program`` and the engine give it (weights and initial
    states from step 0, each later state the oracle's result of the step before)."""
    kinds = {a.name: a.storage for a in program.args}
    weights = {n: v for n, v in steps[0].items() if kinds[n] is Storage.WEIGHT}
    state = {n: v for n, v in steps[0].items() if kinds[n] is Storage.STATE}
    out = []
    for s in steps:
        feed = {**weights, **state, **{n: v for n, v in s.items() if kinds[n] is Storage.SLOT}}
        out.append(feed)
        if state:
            got = evaluate(program, feed)
            state = {n: got[n] for n in state}
    return out


def _host_refusal_real(err: DomainError, p: Plan, feed: dict[str, np.ndarray]) -> bool:
    """The argument, element and value a ``DomainError`` names are in ``feed``, the equation it
    names reads that argument, and the value is outside that equation's domain."""
    prog = p.program
    arg = next((a for a in prog.args if a.name == err.argument), None)
    if arg is None or err.argument not in feed or not 0 <= err.eqn < len(prog.eqns):
        return False
    e = prog.eqns[err.eqn]
    c = equation_contract(p, err.eqn, e)
    reads = any(isinstance(x, Var) and x.id == arg.var.id for x in e.inputs)
    # the domain of the host guard on that argument (an index's: a gather's axis range), else
    # the equation's contract's
    named = [g.domain for g in p.guards if g.eqn == err.eqn and g.argument == err.argument]
    domain = named[0] if named else (c.domain if c is not None else None)
    if domain is None:
        return False
    value = np.asarray(feed[err.argument])[err.element]
    if not (value == err.value or (np.isnan(value) and np.isnan(err.value))):
        return False
    if not reads:  # a host guard traced through data movement (a gather's table, a
        # relayout): real when the oracle's values put the equation's operand outside, or
        # when the oracle refuses the step itself (an index out of range)
        try:
            with np.errstate(all="ignore"):
                if any(o.eqn == err.eqn for o in outside(p, feed, live=False)):
                    return True
        except PootError:
            return True
        # else the guard checks every element of the argument the value moves from, read or
        # not (``poot_planner.guards``: a gather's whole table, a slice's whole operand)
    index = e.inputs[1] if e.prim is Prim.GATHER and isinstance(e.params, GatherParams) else None
    if isinstance(index, Var) and index.id == arg.var.id:  # an index: its axis's range
        size = e.inputs[0].type.shape[e.params.axis]
        return not -size <= int(value) < size
    d = FiniteInputs() if isinstance(domain, FiniteNormalResult) else domain
    with np.errstate(all="ignore"):
        return not bool(d.inside([np.asarray(value)], np.asarray(value)).all())


def unjustified(
    err: DomainError | DomainFlagged, p: Plan, feeds: list[dict[str, np.ndarray]]
) -> str | None:
    """None when the refusal is real on one of ``feeds`` (the steps that may have refused: the
    refusing one among them), else why not. A ``DomainError`` (a host guard, before anything
    ran) names an argument's element: it must be there and outside the domain of the equation
    named, which reads it. A ``DomainFlagged`` (a device's flag word) must cover an equation
    the oracle's values put outside its domain; a guard checks every equation, a dead one too."""
    match err:
        case DomainError():
            if any(_host_refusal_real(err, p, feed) for feed in feeds):
                return None
            return f"{type(err).__name__} ({err}): not so in the inputs"
        case DomainFlagged():
            with np.errstate(all="ignore"):  # the values of a refused step may be anything
                found = [o for feed in feeds for o in outside(p, feed, live=False)]
            if any(o.eqn in err.eqns for o in found):
                return None
            seen = [o.what for o in found]
            return f"{type(err).__name__} ({err}) on values the oracle puts inside: {seen}"
