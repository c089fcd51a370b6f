"""Domain guards: where each equation's domain is enforced, or why it need not be.

``plan()`` places them once (``place_guards``, one pass over the equations) and carries them
as ``Plan.guards``; ``poot plan``, the engine's host checks and the XDNA2 kernels read that.
What a domain is (its wording, bounds and membership) is the domain's own
(``poot_ir.numerics``).

A contract holds on its domain and promises nothing outside it, so a value outside the domain
must not come back as a result. For every equation of a plan's program whose contract has a
domain narrower than ``AnyInput``, each operand is guarded where its value is visible:

- ``HOST``: the operand is an argument (an input, a weight or a state). The engine checks it on
  the host before the run and raises ``DomainError`` (nothing runs).
- ``DEVICE``: the operand is computed on the device. On XDNA2 the kernel counts its elements
  outside the domain into its region's flag word and the engine refuses the results
  (``DomainFlagged``). A ``FiniteNormalResult`` domain also guards the result itself on the
  device (it depends on the exact result: the kernel flags a non-finite, subnormal or
  largest-magnitude result, and a zero that is not an exact cancellation); a row sum flags a
  non-finite accumulator (the in-order sum overflowed).
- ``PROVEN``: a literal inside the domain, or a computed value the range analysis below proves
  inside it: no guard.

The range analysis is a small sound interval analysis (lower and upper bound, and whether a NaN
is possible) over the planned program. It may assume every guarded equation's operands inside
their domains, because a step where one is not is refused whole; each step's own error is
included from its contract (exp's absolute 2e-6 can make a tiny result 0, so ``log(exp(x))`` is
not proven). An argument is unknown (it is checked per equation on the host).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np
from poot_ir import DType, Eqn, Literal, Prim, Program, Var
from poot_ir.core import MOVEMENT
from poot_ir.numerics import (
    AnyInput,
    Contract,
    Domain,
    DomainBounds,
    FiniteInputs,
    FiniteNormalResult,
    NotNaN,
)

from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.refusal import Refusal, RefusalKind
from poot_planner.target import NarrowingContract, Target

__all__ = [
    "RESULT",
    "DomainGuard",
    "Site",
    "constant_domain_refusals",
    "equation_contract",
    "equation_contracts",
    "place_guards",
    "score_checks",
]

_MAX = 3.4028234663852886e38
RESULT = -1  # the operand index of a result guard


class _Admitted(Protocol):
    @property
    def eqn(self) -> int: ...
    @property
    def contract(self) -> Contract | None: ...


class Planned(Protocol):
    """What guard placement reads of a ``poot_planner.Plan`` (a protocol: ``plan()`` places
    the guards of the plan it makes, so ``poot_planner.plan`` imports this module)."""

    @property
    def target(self) -> Target: ...
    @property
    def source(self) -> Program: ...
    @property
    def program(self) -> Program: ...
    @property
    def admissions(self) -> Sequence[_Admitted]: ...
    @property
    def narrowing(self) -> NarrowingContract | None: ...


class Site(Enum):
    HOST = "host"  # an argument: checked before the run
    DEVICE = "device"  # computed on the device: counted there, the results refused
    PROVEN = "proven"  # a literal or a value proven inside the domain: no guard


@dataclass(frozen=True, slots=True)
class DomainGuard:
    """Operand ``operand`` (``RESULT``: the result) of equation ``eqn`` against ``domain``.
    ``argument`` names the argument of a ``HOST`` guard; ``why`` says how a ``PROVEN`` one is."""

    eqn: int
    primitive: Prim
    operand: int
    domain: Domain
    site: Site
    argument: str | None = None
    why: str = ""


def equation_contract(plan: Planned, i: int, e: Eqn) -> Contract | None:
    """The contract of equation ``i`` of ``plan.program``: its admission's, or the target's
    per-primitive row (a step of a row kernel); None for one with no row (data movement).
    For every equation at once, ``equation_contracts`` (one pass, not one per equation)."""
    if plan.program is plan.source:
        for a in plan.admissions:
            if a.eqn == i and a.contract is not None:
                return a.contract
    return _target_contract(plan, e)


def equation_contracts(plan: Planned) -> tuple[Contract | None, ...]:
    """``equation_contract`` of every equation of ``plan.program``, in order: the admissions
    are read once (a lookup per equation made a plan's guards quadratic in its length)."""
    admitted: dict[int, Contract] = {}
    if plan.program is plan.source:
        for a in plan.admissions:
            if a.contract is not None:
                admitted.setdefault(a.eqn, a.contract)
    return tuple(
        admitted[i] if i in admitted else _target_contract(plan, e)
        for i, e in enumerate(plan.program.eqns)
    )


def _target_contract(plan: Planned, e: Eqn) -> Contract | None:
    cap = plan.target.capability(e.prim, operating_dtype(e))
    return None if cap is None else cap.contract


@dataclass(frozen=True, slots=True)
class _Range:
    lo: float = -math.inf
    hi: float = math.inf
    nan: bool = True

    def inside(self, b: DomainBounds) -> bool:
        """Whether every value of this range is inside a domain's F32 ``bounds``."""
        return (b.nan or not self.nan) and self.lo >= b.lo and self.hi <= b.hi

    def within(self, b: DomainBounds) -> _Range:
        """This range once a guard has passed (the operand is inside a domain's F32
        ``bounds``)."""
        return _Range(max(self.lo, b.lo), min(self.hi, b.hi), self.nan and b.nan)


_UNKNOWN = _Range()
_SMOOTH_ERR = 2e-6 + 1e-5  # exp, log, tanh, erf: AbsRel(2e-6, 1e-5), at magnitude <= 1
_SLACK = 1e-6  # the relative error one F32 step adds (2 ulps are 2.4e-7), generously


def _widen(lo: float, hi: float, nan: bool) -> _Range:
    """``[lo, hi]`` padded by one step's relative error at each end (a correctly rounded or
    ulp-bounded step on operands of one sign moves each end by at most that)."""
    return _Range(lo - _SLACK * abs(lo), hi + _SLACK * abs(hi), nan)


def _widen_all(lo: float, hi: float, nan: bool, scale: float) -> _Range:
    """``[lo, hi]`` padded by an absolute error relative to the operands' ``scale`` (an add
    whose operands may cancel)."""
    pad = _SLACK * scale
    return _Range(lo - pad, hi + pad, nan)


def _finite_result(r: _Range) -> _Range:
    """A guarded result: finite and no NaN (the kernel flagged it otherwise)."""
    return _Range(max(r.lo, -_MAX), min(r.hi, _MAX), False)


def _output(e: Eqn, ops: list[_Range], contract: Contract | None) -> _Range:
    """The range of ``e``'s result, given its operands' ranges inside its domain."""
    if e.out.dtype is not DType.F32:
        return _UNKNOWN
    nan = any(o.nan for o in ops)
    guarded_result = contract is not None and contract.domain.on_result
    p = e.prim
    with_err = _UNKNOWN
    try:
        match p:
            case Prim.EXP:
                a = ops[0]
                hi = math.exp(min(a.hi, 709.0)) * (1 + 1e-5) + 2e-6
                with_err = _Range(math.exp(max(a.lo, -745.0)) * (1 - 1e-5) - 2e-6, hi, a.nan)
            case Prim.TANH | Prim.ERF:
                with_err = _Range(-1 - _SMOOTH_ERR, 1 + _SMOOTH_ERR, ops[0].nan)
            case Prim.SQRT if ops[0].lo >= 0:
                a = ops[0]
                with_err = _Range(math.sqrt(a.lo) * (1 - 4e-7), math.sqrt(a.hi) * (1 + 4e-7), a.nan)
            case Prim.NEG:
                with_err = _Range(-ops[0].hi, -ops[0].lo, ops[0].nan)
            case Prim.ABS:
                a = ops[0]
                low = 0.0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
                with_err = _Range(low, max(abs(a.lo), abs(a.hi)), a.nan)
            case Prim.MAX | Prim.MIN:
                a, b = ops
                pick = max if p is Prim.MAX else min
                with_err = _Range(pick(a.lo, b.lo), pick(a.hi, b.hi), nan)
            case Prim.ADD | Prim.SUB:
                a, b = ops
                if p is Prim.SUB:
                    b = _Range(-b.hi, -b.lo, b.nan)
                lo, hi = a.lo + b.lo, a.hi + b.hi
                if (a.lo >= 0 and b.lo >= 0) or (a.hi <= 0 and b.hi <= 0):
                    with_err = _widen(lo, hi, nan)  # no cancellation
                else:
                    scale = max(abs(a.lo), abs(a.hi), abs(b.lo), abs(b.hi))
                    with_err = _widen_all(lo, hi, nan, scale)
            case Prim.MUL:
                a, b = ops
                x, y = e.inputs
                if isinstance(x, Var) and x == y:  # a square
                    sq = (a.lo * a.lo, a.hi * a.hi)
                    low = 0.0 if a.lo <= 0 <= a.hi else min(sq)
                    with_err = _widen(low, max(sq), nan)
                else:
                    corners = [u * v for u in (a.lo, a.hi) for v in (b.lo, b.hi)]
                    if any(math.isnan(c) for c in corners):
                        raise ArithmeticError
                    with_err = _widen(min(corners), max(corners), nan)
            case Prim.DIV if ops[1].lo > 0 or ops[1].hi < 0:
                a, b = ops
                corners = [u / v for u in (a.lo, a.hi) for v in (b.lo, b.hi)]
                with_err = _widen(min(corners), max(corners), nan)
            case Prim.REDUCE_MAX | Prim.BROADCAST_IN_DIM | Prim.RESHAPE | Prim.TRANSPOSE:
                with_err = ops[0]
            case Prim.SLICE | Prim.GATHER | Prim.CONVERT if ops and e.inputs[0].dtype is DType.F32:
                with_err = ops[0]
            case Prim.REDUCE_SUM:
                n = e.inputs[0].type.size // max(e.out.type.size, 1)
                a = ops[0]
                with_err = _widen(min(n * a.lo, 0.0), max(n * a.hi, 0.0), a.nan)
            case _:
                with_err = _UNKNOWN
    except (ArithmeticError, ValueError):
        with_err = _UNKNOWN
    if math.isnan(with_err.lo) or math.isnan(with_err.hi):
        with_err = _UNKNOWN
    sums = (
        p is Prim.REDUCE_SUM and contract is not None and not isinstance(contract.domain, AnyInput)
    )
    if guarded_result or sums:
        return _finite_result(with_err)  # the kernel flags a non-finite result or row sum
    return with_err


#: Steps whose every result element is an element of an operand (all operands for concat; a
#: gather's table): a guard on the operands is a guard on the result. It checks every element
#: of the operand, read or not: a gather's table or a slice's operand holding -inf is refused
#: before the run for an equation's finite domain even where no index or window reads it (the
#: guard runs on the arguments as given, not on what the device gathers from them).
#: (Not a dynamic update: its start indices are operands too, and only a gather's are left
#: out below.)
_MOVES = MOVEMENT - {Prim.DYNAMIC_UPDATE_SLICE}
#: Domains a narrowing cast F32 -> device dtype keeps (on values the range check let through,
#: |x| <= the device's largest magnitude, a finite value stays finite and NaN stays NaN).
_CAST_KEEPS = (FiniteInputs, FiniteNormalResult, NotNaN, AnyInput)


def _sources(plan: Planned) -> dict[int, tuple[str, ...]]:
    """Each value that is arguments moved (or, on a narrowing target, cast) without being
    computed on: the arguments it comes from, by var id."""
    program = plan.program
    found: dict[int, tuple[str, ...]] = {a.var.id: (a.name,) for a in program.args}
    for e in program.eqns:
        ins = e.inputs[:1] if e.prim is Prim.GATHER else e.inputs
        cast = (
            e.prim is Prim.CONVERT and plan.narrowing is not None and e.inputs[0].dtype is DType.F32
        )
        if (e.prim in _MOVES or cast) and all(isinstance(a, Var) and a.id in found for a in ins):
            found[e.out.id] = tuple(
                dict.fromkeys(n for a in ins if isinstance(a, Var) for n in found[a.id])
            )
    return found


def place_guards(plan: Planned) -> tuple[DomainGuard, ...]:
    """Every guard of ``plan.program``, in equation and operand order (see the module), from
    the plan's other fields: ``plan()`` calls it once and carries the answer as
    ``Plan.guards``, which every reader uses. An operand moved from arguments (a transpose of
    an input, a narrowing cast of one) is guarded on the host, on each argument it comes from:
    every element it holds is theirs. One pass over the equations."""
    program = plan.program
    arg_of = {a.var.id: a.name for a in program.args}
    sources = _sources(plan)
    casts = {e.out.id for e in program.eqns if e.prim is Prim.CONVERT}
    ranges: dict[int, _Range] = {}
    found: list[DomainGuard] = []
    # an equation no result reads needs no guard: its value never comes back (a legalization
    # rule leaves the steps it replaced unread: the importer's sigmoid's ``neg(|x|)`` once
    # xdna2's rule computes it otherwise), and an argument it alone refuses (-inf) must not
    # refuse the run
    live = program.live_equations()
    for i, (e, contract) in enumerate(zip(program.eqns, equation_contracts(plan), strict=True)):
        domain = None if contract is None or i not in live else contract.domain
        bounds = None if domain is None else domain.bounds(DType.F32)
        ops: list[_Range] = []
        for k, a in enumerate(e.inputs):
            if isinstance(a, Literal):
                v = a.as_float()
                r = _Range(v, v, math.isnan(v)) if a.dtype.is_float else _UNKNOWN
            else:
                r = ranges.get(a.id, _UNKNOWN)
            if (
                domain is not None
                and bounds is not None
                and not bounds.anything
                and a.dtype.is_float
            ):
                if isinstance(a, Var) and a.id in arg_of:
                    found.append(DomainGuard(i, e.prim, k, domain, Site.HOST, arg_of[a.id]))
                elif (
                    isinstance(a, Var)
                    and a.id in sources
                    and (a.id not in casts or isinstance(domain, _CAST_KEEPS))
                ):
                    for name in sources[a.id]:
                        found.append(DomainGuard(i, e.prim, k, domain, Site.HOST, name, "moved"))
                elif r.inside(bounds):
                    why = "a literal inside" if isinstance(a, Literal) else "proven inside"
                    found.append(DomainGuard(i, e.prim, k, domain, Site.PROVEN, why=why))
                else:
                    found.append(DomainGuard(i, e.prim, k, domain, Site.DEVICE))
                r = r.within(bounds)
            ops.append(r)
        sums = e.prim is Prim.REDUCE_SUM and bounds is not None and not bounds.anything
        if domain is not None and (domain.on_result or sums) and e.out.dtype is DType.F32:
            found.append(DomainGuard(i, e.prim, RESULT, domain, Site.DEVICE))
        ranges[e.out.id] = _output(e, ops, contract)
    return tuple(found)


def constant_domain_refusals(
    guards: Sequence[DomainGuard], constants: Mapping[str, np.ndarray]
) -> list[Refusal]:
    """A ``DOMAIN`` refusal of each equation with a ``HOST`` guard on an argument whose value is
    known when planning (``constants``, by name) and holds an element outside the guard's
    domain: the engine would refuse it when an entry binds it (``DomainError``); found now, a
    partition runs that equation on the host. The facts name the argument, the first element
    outside and its value, and the domain."""
    out: list[Refusal] = []
    for g in guards:
        name = g.argument
        if g.site is not Site.HOST or name is None or name not in constants:
            continue
        x = np.asarray(constants[name])
        if x.size == 0 or not np.issubdtype(x.dtype, np.floating):
            continue
        # an argument is an operand: a domain's constraint on a result is not its own
        d = FiniteInputs() if g.domain.on_result else g.domain
        bad = ~np.asarray(d.inside((x,), x), dtype=bool)
        if not bad.any():
            continue
        flat = int(np.argmax(bad))
        at = tuple(int(k) for k in np.unravel_index(flat, x.shape))
        facts: tuple[tuple[str, str | int | float], ...] = (
            ("constant", name),
            ("element", str(at)),
            ("value", float(x.reshape(-1)[flat])),
            ("domain", g.domain.describe()),
        )
        out.append(Refusal(RefusalKind.DOMAIN, g.eqn, g.primitive.value, facts))
    return out


def score_checks(program: Program, scores: frozenset[int]) -> tuple[tuple[int, int], ...]:
    """Where an F32 device checks the attention-mask rewrite's scores (``Plan.score_bound``,
    ``poot_planner.fp16.prelude``): ``(equation, operand)`` for each operand of an add or a
    subtraction of ``program`` that is one of ``scores`` (the sums the mask is added in)."""
    if not scores:
        return ()
    return tuple(
        (i, k)
        for i, e in enumerate(program.eqns)
        if e.prim in (Prim.ADD, Prim.SUB)
        for k, a in enumerate(e.inputs)
        if isinstance(a, Var) and a.id in scores
    )
