"""``plan(program, target)``: admit every equation or refuse it, and publish how it will run.

``plan`` never raises for a program a target cannot run: it returns a ``Plan`` whose
``refusals`` say why, every one of them (``Plan.check()`` raises ``PlanRefused`` carrying them
for a caller that needs the program to run). The steps:

0. Legalization (``legalize``): each refused equation a rule of the target rewrites into
   admitted equations with a derived bound is replaced by them (``Plan.rewrites``); the steps
   below run on the legalized program. Refusals name source equations; admissions and tiles
   index the legalized program (``Plan.legalized``).
1. Admission of each equation by the target's capability table (``admission``), plus the
   target's own rules: XDNA2 row kernels with derived bounds (``rowfusion``), Intel literal
   rules (``narrowing``).
2. The target's passes on an admitted program: ``narrow_to_device_precision`` first for a
   target with a narrowing contract and a program with F32 data (``needs_narrowing``).
3. XDNA2: one tile job per admitted equation or row kernel (``tiles``), grouped into regions
   under the measured bounds (``regions``), at most one per hardware context; each admitted
   relayout (``KernelClass.HOST_RELAYOUT``) a host stage between regions (``relayouts``).
4. The published numerics class.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from poot_ir import DType, PlanRefused, Prim, Program, TypeCheckError, Var
from poot_ir.numerics import (
    AbsRel,
    BitExact,
    Bounded,
    Contract,
    Exact,
    LargerOperandUlps,
    NarrowStorage,
    NumericsClass,
    Relative,
    ScaledSum,
    looser,
)

from poot_planner import admission
from poot_planner.admission import admit_all
from poot_planner.fp16 import narrowing as narrowing_rules
from poot_planner.fp16.narrowing import (
    literal_refusals,
    narrow_to_device_precision,
    needs_narrowing,
    operating_dtype,
    splat_refusals,
)
from poot_planner.guards import DomainGuard, place_guards
from poot_planner.legalize.rewrite import Legalized, Rewrite, legalize
from poot_planner.refusal import Refusal, RefusalKind
from poot_planner.target import CodeSize, KernelClass, NarrowingContract, RegionLimits, Target
from poot_planner.targets import get_target
from poot_planner.xdna2.chunking import chunk_region, unchunked_bytes
from poot_planner.xdna2.regions import HostRelayout, Region, form_regions
from poot_planner.xdna2.rowfusion import RowGroup, find_row_groups
from poot_planner.xdna2.tiles import TileOp, tile_for_eqn, tile_for_group

__all__ = ["Admission", "Plan", "plan"]


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
    #: var ids of ``legalized`` values the device must check against the attention-mask
    #: rewrite's score bound (``poot_planner.fp16.prelude``; set by ``partition`` only)
    score_bound: frozenset[int] = frozenset()
    #: where each equation's domain is enforced (``poot_planner.guards``), placed once here
    guards: tuple[DomainGuard, ...] = ()

    @property
    def legalized(self) -> Program:
        """The program admission ran on: ``source`` with its rewrites made."""
        return self.source if self.legal is None else self.legal

    @property
    def admitted(self) -> bool:
        return not self.refusals

    @property
    def contexts(self) -> int:
        """Hardware contexts the program needs: one per region (XDNA2)."""
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


def plan(program: Program, target: str | Target, *, legalization: bool = True) -> Plan:
    """Plan ``program`` for ``target`` (a name in ``poot_planner.TARGETS`` or a Target);
    ``legalization=False`` plans it as written (what the target refuses before any rewrite)."""
    # admission and the literal analysis remember their last answer so one plan asks each
    # once (legalization and the plan ask of the same program); no answer outlives the plan,
    # so each plan (and each benchmark repeat) does the whole work once
    admission.forget()
    narrowing_rules.forget()
    try:
        return _plan(program, target, legalization)
    finally:
        admission.forget()
        narrowing_rules.forget()


def _plan(program: Program, target: str | Target, legalization: bool) -> Plan:
    if not isinstance(program, Program):
        raise TypeCheckError(f"plan: expected a Program, got a {type(program).__name__}")
    t = get_target(target)
    source = program
    legal = legalize(source, t) if legalization else Legalized(source, (), ())
    program = legal.program
    grouped, kernels, refusals = _row_kernels(program, t)
    admissions: dict[int, Admission] = {}
    for i, got in enumerate(admit_all(program, t)):
        if i in grouped:
            continue
        if isinstance(got, Refusal):
            refusals.append(got)
        else:
            admissions[i] = Admission(i, got.kernel, got.contract)
    if t.tensor_bytes is not None:
        refusals.extend(_tensor_byte_refusals(program, t, t.tensor_bytes))
    narrowing = None
    if t.narrowing is not None:  # an FP16 device: its compiler clamps infinite F16 literals
        refusals.extend(splat_refusals(program))
    if t.narrowing is not None and needs_narrowing(program):
        refusals.extend(literal_refusals(program, t.narrowing))
        narrowing = t.narrowing

    tiles: tuple[TileOp, ...] = ()
    regions: tuple[Region, ...] = ()
    relayouts: tuple[HostRelayout, ...] = ()
    if t.region_limits is not None:
        tiles, regions, relayouts, more = _xdna2_layout(
            program, t, t.region_limits, admissions, kernels
        )
        refusals.extend(more)

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
        regions=regions,
        relayouts=relayouts,
        rewrites=legal.rewrites,
        legal=program if legal.rewrites else None,
    )
    return replace(made, guards=place_guards(made))


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


def _limit(i: int, prim: str, limit: str, needed: int, available: int) -> Refusal:
    facts = (("limit", limit), ("needed", needed), ("available", available))
    return Refusal(RefusalKind.REGION_LIMIT, i, prim, facts)


def _row_kernels(program: Program, t: Target) -> tuple[set[int], list[RowGroup], list[Refusal]]:
    """XDNA2 row kernels: the equations they cover, the clean ones (a tile job each), and the
    refusals of the others (a step with no bound, a dtype the row kernels do not take, more
    than one output)."""
    if t.region_limits is None:
        return set(), [], []
    # a row kernel computes in the dtypes the target's row kernels admit (xdna2: F32 only)
    row_dtypes = {d for c in t.capabilities if c.kernel is KernelClass.ROW for d in c.dtypes}
    admitted = " ".join(sorted(d.value for d in row_dtypes))
    grouped: set[int] = set()
    kernels: list[RowGroup] = []
    refusals: list[Refusal] = []
    for g in find_row_groups(program):
        grouped.update(g.eqns)
        wrong = [i for i in g.eqns if operating_dtype(program.eqns[i]) not in row_dtypes]
        for i in wrong:
            e = program.eqns[i]
            facts = (("dtype", operating_dtype(e).value), ("admitted", admitted))
            refusals.append(Refusal(RefusalKind.UNSUPPORTED_DTYPE, i, e.prim.value, facts))
        for f in g.failures:
            facts_ = (("step", f.reason),)
            refusals.append(Refusal(RefusalKind.MISSING_BOUND, f.eqn, f.primitive, facts_))
        last = g.eqns[-1]
        if len(g.outputs) != 1 and not g.failures:
            prim = program.eqns[last].prim.value
            refusals.append(_limit(last, prim, "row kernel outputs", len(g.outputs), 1))
        if not wrong and not g.failures and len(g.outputs) == 1:
            kernels.append(g)
    return grouped, kernels, refusals


def _xdna2_layout(
    program: Program,
    target: Target,
    limits: RegionLimits,
    admissions: dict[int, Admission],
    kernels: list[RowGroup],
) -> tuple[tuple[TileOp, ...], tuple[Region, ...], tuple[HostRelayout, ...], list[Refusal]]:
    """Tile jobs for the admitted equations and the clean row kernels, host relayouts for the
    admitted relayouts, then regions."""
    refusals: list[Refusal] = []
    jobs: list[tuple[int, TileOp]] = []  # (the equation that makes its output, job)
    arguments = frozenset(a.var.id for a in program.args)
    estimates: dict[tuple[Prim, ...], int] = {}
    live = _live(program)
    relayouts: list[HostRelayout] = []
    for i, a in admissions.items():
        e = program.eqns[i]
        if a.kernel is KernelClass.HOST_RELAYOUT:
            if e.out.id not in live:
                continue  # dead: its value is never observed, so nothing moves
            ins = tuple(v for v in e.inputs if isinstance(v, Var))
            if len(ins) != len(e.inputs):  # a literal operand has no arena slot to read
                refusals.append(_limit(i, e.prim.value, "host relayout of a literal", 1, 0))
                continue
            relayouts.append(HostRelayout(i, e.prim, ins, e.out, e.prim is Prim.RESHAPE))
            continue
        jobs.append((i, tile_for_eqn(0, i, e, a.kernel, arguments)))
    for g in kernels:
        # ordered by the equation that makes its output: a step after it is dead code, and a
        # later key would put the kernel after a tile that reads its output
        made_at = next(i for i in g.eqns if program.eqns[i].out.id == g.outputs[0].id)
        jobs.append((made_at, tile_for_group(0, g.eqns, g.inputs, g.outputs[0], g.cols, g.bound)))
    # a job whose output nothing reads (dead code) gets no tile: its value is never observed,
    # and a tile whose output no tile and no host stream reads is no valid design
    jobs = [j for j in jobs if j[1].output.id in live]
    jobs.sort(key=lambda j: j[0])
    tiles: list[TileOp] = []
    for at, job in jobs:
        prim = program.eqns[at].prim.value
        refused = _tensor_refusal(at, prim, job, limits)
        if refused is not None:
            refusals.append(refused)
            continue
        if job.output.type.size == 0:
            continue  # an empty result: nothing to compute, so no tile (its slot is empty)
        code = _code_bytes(program, job, target.code_size, estimates)
        if target.code_size is not None and code > target.code_size.program_bytes:
            refusals.append(_limit(at, prim, "program_bytes", code, target.code_size.program_bytes))
            continue
        # whole and double-buffered fits: one call is a chunking, so no search (the region
        # chunks its tiles again in any case)
        if unchunked_bytes(job) > limits.data_tile_bytes:  # the flag path takes the rest
            alone = chunk_region([job], limits.data_tile_bytes, limits.reserved_bytes)
            if isinstance(alone, int):
                refusals.append(_limit(at, prim, "tile_bytes", alone, limits.tile_bytes))
                continue
            job = alone[0][0]
        if job.streams_in > limits.streams_per_tile:
            refusals.append(
                _limit(at, prim, "streams_per_tile", job.streams_in, limits.streams_per_tile)
            )
            continue
        index = len(tiles)
        tiles.append(job.placed(index=index, code_bytes=code))
        for i in job.eqns:
            contract = admissions[i].contract if i in admissions else None
            admissions[i] = Admission(i, job.kind, contract, index)
    relayouts.sort(key=lambda r: r.eqn)
    regions, placed = form_regions(program, tuple(tiles), limits, tuple(relayouts))
    chunked = tuple(t for r in regions for t in r.tiles)  # as each region chunks its tiles
    if len(regions) > limits.contexts:  # host relayouts take no context
        facts = (("limit", "contexts"), ("needed", len(regions)), ("available", limits.contexts))
        refusals.append(Refusal(RefusalKind.CONTEXT_LIMIT, -1, "", facts))
    return chunked, regions, placed, refusals


def _code_bytes(
    program: Program, job: TileOp, sizes: CodeSize | None, seen: dict[tuple[Prim, ...], int]
) -> int:
    """The target's estimate of the program memory of ``job``'s core (0 without a table);
    ``seen`` holds the estimates made so far (a program has few distinct kernels)."""
    if sizes is None:
        return 0
    prims = tuple(program.eqns[i].prim for i in job.eqns)
    if prims not in seen:
        seen[prims] = sizes.estimate(prims)
    return seen[prims]


def _tensor_refusal(at: int, prim: str, job: TileOp, limits: RegionLimits) -> Refusal | None:
    """A job no region can hold whatever its chunking, decided from its tensors' sizes alone
    (so before any chunking search): a tensor past the kernel ABI's element count, or an
    empty tensor the job must stream to make a non-empty output (a DMA moves at least one
    32-bit word; a job whose output is empty needs no tile at all)."""
    tensors = [op.var for op in job.inputs] + [job.output]
    largest = max(v.type.size for v in tensors)
    if largest > limits.tensor_elements:
        return _limit(at, prim, "tensor_elements", largest, limits.tensor_elements)
    if job.output.type.size and any(v.type.size == 0 for v in tensors):
        return _limit(at, prim, "stream_bytes", 0, 4)
    return None


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
            out.append(_limit(i, e.prim.value, "tensor_bytes", largest, limit))
    return out


def _live(program: Program) -> set[int]:
    """The ids of the values the program's results depend on (results included)."""
    live = {v.id for _, v in program.results()}
    for e in reversed(program.eqns):
        if any(o.id in live for o in e.outputs):
            live.update(a.id for a in e.inputs if isinstance(a, Var))
    return live


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
    if narrowing is not None:
        return NarrowStorage(narrowing.normwise, narrowing.floor)
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
                cls = Bounded(0.0, u * unit * program.eqns[a.eqn].inputs[0].type.shape[-1])
            case _:
                cls = Exact()
        out = looser(out, cls)
    for t in tiles:
        if t.bound is not None:
            out = looser(out, Bounded(0.0, t.bound))
    return out
