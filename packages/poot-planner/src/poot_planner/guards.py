"""Domain guards: where each equation's domain is enforced, or why it need not be.

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
from dataclasses import dataclass
from enum import Enum
from typing import assert_never

from poot_ir import DType, Eqn, Literal, Prim, Program, Var
from poot_ir.core import MOVEMENT
from poot_ir.numerics import (
    AnyInput,
    Contract,
    Domain,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    NotNaN,
    PositiveNormal,
)

from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.plan import Plan
from poot_planner.xdna2.facts import SMALLEST_NORMAL_F32

__all__ = ["Guard", "Site", "describe_domain", "device_guards", "equation_contract", "guards"]

_MAX = 3.4028234663852886e38
RESULT = -1  # the operand index of a result guard


class Site(Enum):
    HOST = "host"  # an argument: checked before the run
    DEVICE = "device"  # computed on the device: counted there, the results refused
    PROVEN = "proven"  # a literal or a value proven inside the domain: no guard


@dataclass(frozen=True, slots=True)
class Guard:
    """Operand ``operand`` (``RESULT``: the result) of equation ``eqn`` against ``domain``.
    ``argument`` names the argument of a ``HOST`` guard; ``why`` says how a ``PROVEN`` one is."""

    eqn: int
    primitive: Prim
    operand: int
    domain: Domain
    site: Site
    argument: str | None = None
    why: str = ""


def equation_contract(plan: Plan, i: int, e: Eqn) -> Contract | None:
    """The contract of equation ``i`` of ``plan.program``: its admission's, or the target's
    per-primitive row (a step of a row kernel); None for one with no row (data movement)."""
    if plan.program is plan.source:
        for a in plan.admissions:
            if a.eqn == i and a.contract is not None:
                return a.contract
    cap = plan.target.capability(e.prim, operating_dtype(e))
    return None if cap is None else cap.contract


def describe_domain(d: Domain) -> str:
    match d:
        case Interval(lo=lo, hi=hi):
            return f"[{lo:g}, {hi:g}]"
        case FiniteNormalResult():
            return "finite operands, finite normal result"
        case PositiveNormal():
            return "positive normal"
        case FiniteInputs():
            return "finite"
        case NotNaN():
            return "not NaN"
        case AnyInput():
            return "anything"
        case _ as unreachable:
            assert_never(unreachable)


@dataclass(frozen=True, slots=True)
class _Range:
    lo: float = -math.inf
    hi: float = math.inf
    nan: bool = True

    def inside(self, d: Domain) -> bool:
        match d:
            case AnyInput():
                return True
            case NotNaN():
                return not self.nan
            case FiniteInputs() | FiniteNormalResult():
                return not self.nan and self.lo >= -_MAX and self.hi <= _MAX
            case Interval(lo=lo, hi=hi):
                return not self.nan and self.lo >= lo and self.hi <= hi
            case PositiveNormal():
                return not self.nan and self.lo >= SMALLEST_NORMAL_F32 and self.hi <= _MAX
            case _ as unreachable:
                assert_never(unreachable)

    def within(self, d: Domain) -> _Range:
        """This range once a guard has passed (the operand is inside ``d``)."""
        match d:
            case AnyInput():
                return self
            case NotNaN():
                return _Range(self.lo, self.hi, False)
            case FiniteInputs() | FiniteNormalResult():
                return _Range(max(self.lo, -_MAX), min(self.hi, _MAX), False)
            case Interval(lo=lo, hi=hi):
                return _Range(max(self.lo, lo), min(self.hi, hi), False)
            case PositiveNormal():
                return _Range(max(self.lo, SMALLEST_NORMAL_F32), min(self.hi, _MAX), False)
            case _ as unreachable:
                assert_never(unreachable)


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
    guarded_result = contract is not None and isinstance(contract.domain, FiniteNormalResult)
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
#: gather's table): a guard on the operands is a guard on the result.
#: (Not a dynamic update: its start indices are operands too, and only a gather's are left
#: out below.)
_MOVES = MOVEMENT - {Prim.DYNAMIC_UPDATE_SLICE}
#: Domains a narrowing cast F32 -> device dtype keeps (on values the range check let through,
#: |x| <= the device's largest magnitude, a finite value stays finite and NaN stays NaN).
_CAST_KEEPS = (FiniteInputs, FiniteNormalResult, NotNaN, AnyInput)


def _sources(plan: Plan) -> dict[int, tuple[str, ...]]:
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


def guards(plan: Plan) -> tuple[Guard, ...]:
    """Every guard of ``plan.program``, in equation and operand order (see the module). An
    operand moved from arguments (a transpose of an input, a narrowing cast of one) is guarded
    on the host, on each argument it comes from: every element it holds is theirs."""
    program: Program = plan.program
    arg_of = {a.var.id: a.name for a in program.args}
    sources = _sources(plan)
    casts = {e.out.id for e in program.eqns if e.prim is Prim.CONVERT}
    ranges: dict[int, _Range] = {}
    found: list[Guard] = []
    for i, e in enumerate(program.eqns):
        contract = equation_contract(plan, i, e)
        domain = None if contract is None else contract.domain
        ops: list[_Range] = []
        for k, a in enumerate(e.inputs):
            if isinstance(a, Literal):
                v = a.as_float()
                r = _Range(v, v, math.isnan(v)) if a.dtype.is_float else _UNKNOWN
            else:
                r = ranges.get(a.id, _UNKNOWN)
            if domain is not None and not isinstance(domain, AnyInput) and a.dtype.is_float:
                if isinstance(a, Var) and a.id in arg_of:
                    found.append(Guard(i, e.prim, k, domain, Site.HOST, arg_of[a.id]))
                elif (
                    isinstance(a, Var)
                    and a.id in sources
                    and (a.id not in casts or isinstance(domain, _CAST_KEEPS))
                ):
                    for name in sources[a.id]:
                        found.append(Guard(i, e.prim, k, domain, Site.HOST, name, "moved"))
                elif r.inside(domain):
                    why = "a literal inside" if isinstance(a, Literal) else "proven inside"
                    found.append(Guard(i, e.prim, k, domain, Site.PROVEN, why=why))
                else:
                    found.append(Guard(i, e.prim, k, domain, Site.DEVICE))
                r = r.within(domain)
            ops.append(r)
        sums = e.prim is Prim.REDUCE_SUM and domain is not None and not isinstance(domain, AnyInput)
        on_result = isinstance(domain, FiniteNormalResult) or sums
        if domain is not None and on_result and e.out.dtype is DType.F32:
            found.append(Guard(i, e.prim, RESULT, domain, Site.DEVICE))
        ranges[e.out.id] = _output(e, ops, contract)
    return tuple(found)


def device_guards(plan: Plan) -> frozenset[tuple[int, int]]:
    """The ``(eqn, operand)`` pairs a device must guard (``RESULT`` for a result guard)."""
    return frozenset((g.eqn, g.operand) for g in guards(plan) if g.site is Site.DEVICE)
