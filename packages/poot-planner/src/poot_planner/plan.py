"""``plan(program, target)``: admit every equation or refuse it, and publish how it will run.

``plan`` never raises for a program a target cannot run: it returns a ``Plan`` whose
``refusals`` say why, every one of them (``Plan.check()`` raises ``PlanRefused`` carrying them
for a caller that needs the program to run). The steps:

0. Legalization (``legalize``): each refused equation a rule of the target rewrites into
   admitted equations with a derived bound is replaced by them (``Plan.rewrites``); the steps
   below run on the legalized program. Refusals name source equations; admissions and tiles
   index the legalized program (``Plan.legalized``).
1. The target's layout claims what it plans itself (``Target.layout``; xdna2: its row kernels
   with derived bounds, ``poot_planner.xdna2.layout``); admission of each other equation by the
   target's capability table (``admission``), plus the Intel literal rules (``narrowing``).
2. The target's passes on an admitted program: ``narrow_to_device_precision`` first for a
   target with a narrowing contract and a program with F32 data (``needs_narrowing``).
3. The target's layout of the admitted program (xdna2: one tile job per admitted equation or
   row kernel, regions under the measured bounds, host relayouts between them).
4. The published numerics class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from poot_ir import DType, Literal, PlanRefused, Program, ReduceParams, TypeCheckError, Var
from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Bounded,
    Contract,
    Exact,
    LargerOperandUlps,
    NarrowStorage,
    NumericsClass,
    ProductSum,
    Relative,
    RoundedTwice,
    ScaledSum,
    looser,
)

from poot_planner.admission import PlanMemo
from poot_planner.fp16.constants import constant_refusals
from poot_planner.fp16.contract import unbounded_results
from poot_planner.fp16.narrowing import (
    narrow_to_device_precision,
    needs_narrowing,
    splat_refusals,
)
from poot_planner.guards import (
    DomainGuard,
    Site,
    constant_domain_refusals,
    place_guards,
    score_checks,
)
from poot_planner.legalize.rewrite import Legalized, Rewrite, legalize, select_products
from poot_planner.refusal import Refusal, RefusalKind, limit_refusal
from poot_planner.target import KernelClass, LaidOut, NarrowingContract, Target
from poot_planner.targets import get_target
from poot_planner.xdna2.regions import HostRelayout, Region, artifacts, share_artifacts
from poot_planner.xdna2.tiles import TileOp

__all__ = ["Admission", "Plan", "plan", "with_score_bound"]


@dataclass(frozen=True, slots=True)
class Admission:
    """An admitted equation of the source program: how it runs and what is promised.
    ``contract`` is None for a step of a row kernel (the kernel's derived bound covers it);
    ``tile`` is the XDNA2 tile job that computes it (None for dead code, which no tile
    computes)."""

    eqn: int
    kernel: KernelClass
    contract: Contract | None
    tile: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """How ``target`` runs ``source``. ``program`` is what the device runs (after the target's
    passes; same argument and result names, order and types). ``narrowing`` is the contract
    when the narrowing pass ran, else None."""

    target: Target
    source: Program
    program: Program
    admissions: tuple[Admission, ...]
    refusals: tuple[Refusal, ...]
    numerics: NumericsClass
    narrowing: NarrowingContract | None = None
    tiles: tuple[TileOp, ...] = ()
    regions: tuple[Region, ...] = ()
    #: XDNA2: the relayouts run on the host between regions, in the order they run
    relayouts: tuple[HostRelayout, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()
    legal: Program | None = None  # the legalized program when a rewrite was made
    #: for each equation of ``legal``, the source equation it comes from (empty: no rewrite)
    origin: tuple[int, ...] = ()
    #: var ids of ``legalized`` values the device must check against the attention-mask
    #: rewrite's score bound (``poot_planner.fp16.prelude``; set by ``partition`` only)
    score_bound: frozenset[int] = frozenset()
    #: where each equation's domain is enforced (``poot_planner.guards``), placed once here
    guards: tuple[DomainGuard, ...] = ()

    @property
    def legalized(self) -> Program:
        """The program admission ran on: ``source`` with its rewrites made."""
        return self.source if self.legal is None else self.legal

    def source_eqn(self, k: int) -> int:
        """The source equation that equation ``k`` of ``legalized`` comes from."""
        return self.origin[k] if self.origin else k

    @property
    def admitted(self) -> bool:
        return not self.refusals

    @property
    def contexts(self) -> int:
        """Hardware contexts the program needs (XDNA2): one per distinct artifact, regions
        reused across identical layers sharing one (``Region.artifact``)."""
        return len(artifacts(self.regions))

    @property
    def contexts_before_reuse(self) -> int:
        """Hardware contexts the program would need with one artifact per region."""
        return len(self.regions)

    def check(self) -> Plan:
        """This plan, or ``PlanRefused`` listing every refusal."""
        if self.refusals:
            lines = "\n  ".join(str(r) for r in self.refusals)
            raise PlanRefused(
                f"{self.target.name} refuses {len(self.refusals)} equation(s) of "
                f"{self.source.name!r}:\n  {lines}",
                self.refusals,
            )
        return self


def plan(
    program: Program,
    target: str | Target,
    *,
    legalization: bool = True,
    constants: Mapping[str, np.ndarray] | None = None,
) -> Plan:
    """Plan ``program`` for ``target`` (a name in ``poot_planner.TARGETS`` or a Target);
    ``legalization=False`` plans it as written (what the target refuses before any rewrite).
    ``constants``: the values of arguments known when planning (weights bound at import, by
    argument name), checked against the target's range (``fp16.constants``) and domains
    (``guards.constant_domain_refusals``) now rather than refused at upload."""
    if not isinstance(program, Program):
        raise TypeCheckError(f"plan: expected a Program, got a {type(program).__name__}")
    t = get_target(target)
    memo = PlanMemo()  # this plan's alone: legalization and admission ask it the same questions
    source = program
    legal = legalize(source, t, memo) if legalization else Legalized(source, (), ())
    program = legal.program
    claim = t.layout.claim(program, t) if t.layout is not None else None
    refusals = list(claim.refusals) if claim is not None else []
    admissions: dict[int, Admission] = {}
    for i, got in enumerate(memo.admit_all(program, t)):
        if claim is not None and i in claim.eqns:
            continue
        if isinstance(got, Refusal):
            refusals.append(got)
        else:
            admissions[i] = Admission(i, got.kernel, got.contract)
    if t.tensor_bytes is not None:
        refusals.extend(_tensor_byte_refusals(program, t, t.tensor_bytes))
    if t.flushes_subnormal_constants:
        refusals.extend(_subnormal_literal_refusals(program))
    narrowing = None
    if t.narrowing is not None:  # an FP16 device: infinite F16 literals, as its compiler takes them
        refusals.extend(splat_refusals(program))
    if t.narrowing is not None and needs_narrowing(program):
        refusals.extend(memo.literal_refusals(program, t.narrowing))
        narrowing = t.narrowing
    if t.narrowing is not None:  # known weights, and the sentinels the host will keep
        refused = {r.eqn for r in refusals}
        limit = t.narrowing.max_magnitude
        # a select legalized as x m + y (1 - m): its products keep their branch's side
        masked = select_products(legal)
        refusals.extend(constant_refusals(program, constants or {}, limit, refused, masked))

    laid = LaidOut()
    if claim is not None:
        laid = claim.lay_out({i: a.kernel for i, a in admissions.items()})
        refusals.extend(laid.refusals)
        for i, kernel, tile in laid.placed:
            contract = admissions[i].contract if i in admissions else None
            admissions[i] = Admission(i, kernel, contract, tile)
    tiles = laid.tiles

    if constants:  # known weights against the domains of the equations that read them
        probe = Plan(
            target=t,
            source=program,
            program=program,
            admissions=tuple(admissions[i] for i in sorted(admissions)),
            refusals=(),
            numerics=Exact(),
            narrowing=narrowing,
        )
        refusals.extend(constant_domain_refusals(place_guards(probe), constants))

    run = program
    if narrowing is not None and not refusals:
        run = narrow_to_device_precision(program, narrowing)
    if legal.rewrites:
        refusals = [_to_source(r, legal.origin, source) for r in refusals]
    refusals.sort(key=lambda r: (r.eqn, r.kind.value))
    made = Plan(
        target=t,
        source=source,
        program=run,
        admissions=tuple(admissions[i] for i in sorted(admissions)),
        refusals=tuple(refusals),
        numerics=_with_rewrites(_numerics(program, admissions, tiles, narrowing), legal.rewrites),
        narrowing=narrowing,
        tiles=tiles,
        regions=laid.regions,
        relayouts=laid.relayouts,
        rewrites=legal.rewrites,
        legal=program if legal.rewrites else None,
        origin=legal.origin if legal.rewrites else (),
    )
    made = replace(made, guards=place_guards(made))
    return _shared(made) if made.regions else made


def with_score_bound(p: Plan, scores: frozenset[int]) -> Plan:
    """``p`` whose device checks ``scores`` against the mask rewrite's bound
    (``Plan.score_bound``, set by ``partition``). A check is code in a kernel, so on XDNA2 the
    regions' artifacts are shared again with it."""
    made = replace(p, score_bound=scores)
    return _shared(made) if made.regions else made


def _shared(p: Plan) -> Plan:
    """``p`` with its regions' artifacts shared across identical layers
    (``poot_planner.xdna2.regions.share_artifacts``, which needs the device guards: they are
    code in the kernels), and refused with ``CONTEXT_LIMIT`` when its distinct artifacts
    outnumber the target's hardware contexts."""
    device: dict[int, list[tuple[int, str]]] = {}
    for g in p.guards:
        if g.site is Site.DEVICE:
            device.setdefault(g.eqn, []).append((g.operand, repr(g.domain)))
    for i, k in score_checks(p.program, p.score_bound):
        device.setdefault(i, []).append((k, "score bound"))
    guards = {i: tuple(sorted(gs)) for i, gs in device.items()}
    shared = replace(p, regions=share_artifacts(p.program, p.regions, guards))
    limits = p.target.region_limits
    if limits is None or shared.contexts <= limits.contexts:
        return shared
    facts = (
        ("limit", "contexts"),
        ("needed", shared.contexts),
        ("available", limits.contexts),
        ("regions", len(shared.regions)),
    )
    refusals = sorted(
        (*p.refusals, Refusal(RefusalKind.CONTEXT_LIMIT, -1, "", facts)),
        key=lambda r: (r.eqn, r.kind.value),
    )
    return replace(shared, refusals=tuple(refusals))


def _with_rewrites(cls: NumericsClass, rewrites: tuple[Rewrite, ...]) -> NumericsClass:
    """The class loosened by each approximate rewrite's derived absolute bound (a narrowed
    program's class is the narrowing contract's, which the rewrites' tests hold it to)."""
    if isinstance(cls, NarrowStorage):
        return cls
    for rw in rewrites:
        if isinstance(rw.derivation.bound, AbsRel):
            cls = looser(cls, Bounded(rw.derivation.bound.abs, rw.derivation.bound.rel))
    return cls


def _to_source(r: Refusal, origin: tuple[int, ...], source: Program) -> Refusal:
    """A refusal of a legalized equation, naming the source equation it comes from (and the
    step of a rewrite it is)."""
    if r.eqn < 0:
        return r
    i = origin[r.eqn]
    prim = source.eqns[i].prim.value
    facts = r.facts if prim == r.primitive else (("step", r.primitive), *r.facts)
    return replace(r, eqn=i, primitive=prim, facts=facts)


_F32_TINY = 2.0**-126  # F32's smallest normal magnitude


def _subnormal_literal_refusals(program: Program) -> list[Refusal]:
    """Each equation with a subnormal F32 literal operand, refused (``DOMAIN``: a value known
    when planning that the device cannot hold) on a target that flushes a subnormal constant
    to zero (``Target.flushes_subnormal_constants``): it would compute with 0 instead."""
    out = []
    for i, e in enumerate(program.eqns):
        for k, a in enumerate(e.inputs):
            if (
                isinstance(a, Literal)
                and a.dtype is DType.F32
                and 0 < abs(a.as_float()) < _F32_TINY
            ):
                facts = (("operand", k), ("literal", a.as_float()), ("flushed to", 0.0))
                out.append(Refusal(RefusalKind.DOMAIN, i, e.prim.value, facts))
    return out


def _tensor_byte_refusals(program: Program, t: Target, limit: int) -> list[Refusal]:
    """Each equation with a tensor over ``limit`` bytes as the device stores it (a narrowed
    F32 in the narrowing contract's device dtype), refused with ``tensor_bytes``; decided from
    the shapes alone, so a huge tensor is refused at once."""
    stored = {d: d.itemsize for d in DType}
    if t.narrowing is not None:
        stored[DType.F32] = t.narrowing.device_dtype.itemsize
    out = []
    for i, e in enumerate(program.eqns):
        vars_ = [a for a in e.inputs if isinstance(a, Var)] + list(e.outputs)
        largest = max(v.type.size * stored[v.type.dtype] for v in vars_)
        if largest > limit:
            out.append(limit_refusal(i, e.prim.value, "tensor_bytes", largest, limit))
    return out


def _numerics(
    program: Program,
    admissions: dict[int, Admission],
    tiles: tuple[TileOp, ...],
    narrowing: NarrowingContract | None,
) -> NumericsClass:
    """The published class: the loosest of the steps' (an ordering for publishing, not an
    error-propagation rule: the conformance suite checks each step under its own contract).

    Operand-scaled bounds (an add's two units of the larger operand, a sum's bound over the
    row's magnitudes) are published as the same figures relative to the result, which is what
    they are when nothing cancels."""
    if narrowing is not None:  # derived per step (``fp16.contract``); where it cannot be, said
        return NarrowStorage(narrowing.normwise, narrowing.floor, unbounded_results(program))
    out: NumericsClass = Exact()
    for a in admissions.values():
        if a.contract is None:
            continue
        match a.contract.bound:
            case BitExact(signed_zero=signed):
                cls: NumericsClass = Exact(signed_zero=signed)
            case AbsRel(abs=ab, rel=rel):
                cls = Bounded(ab, rel)
            case Relative(rel=rel):
                cls = Bounded(0.0, rel)
            case LargerOperandUlps(ulps=u, unit=unit):
                cls = Bounded(0.0, u * unit)
            case ScaledSum(ulps_per_term=u, unit=unit):
                e = program.eqns[a.eqn]
                shape = e.inputs[0].type.shape
                axes = e.params.axes if isinstance(e.params, ReduceParams) else (len(shape) - 1,)
                cls = Bounded(0.0, u * unit * math.prod(shape[x] for x in axes))
            case ProductSum() as ps:  # relative to the magnitudes' sum, as ScaledSum
                cls = Bounded(0.0, ps.factor(program.eqns[a.eqn].inputs[0].type.shape[-1]))
            case RoundedTwice(rel=rel, floor=floor):
                e = program.eqns[a.eqn]
                n = e.inputs[0].type.size / max(e.out.type.size, 1)
                cls = Bounded(floor * (n + 2.0), rel)
            case _:
                cls = Exact()
        out = looser(out, cls)
    for t in tiles:
        if t.bound is not None:
            out = looser(out, Bounded(0.0, t.bound))
    return out
