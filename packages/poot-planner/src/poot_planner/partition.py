"""``partition(program, target)``: a refused program cut into spans the target runs and spans
the CPU oracle runs (ARCHITECTURE section 4: the partitioned plan a caller may ask for).

The rules:

- A span is a maximal contiguous run of equations in program order; the spans cover every
  equation once, in order. A program with no equations has no spans.
- Except the host prelude (``poot_planner.fp16.prelude``): the refused equations that read no
  float (an exported attention mask made from the integer ``attention_mask``), with the
  integer and boolean equations they depend on, run first as one oracle span, and the rest
  is cut as above in program order without them (so a device span may skip the prelude's
  indices). They read only arguments and each other, so no value changes; on a narrowing
  target their additive ``-inf`` mask becomes a value FP16 scores can be added to there,
  where the device spans prove the scores it is added to bounded (the precondition and its
  proof: ``poot_planner.fp16.prelude``) or, for a device that checks it (``score_guard``), where a
  device span makes those scores and its graph checks them at run time (``Plan.score_bound``).
  On an F32 target, for a device that checks them (xdna2's kernels), it becomes ``-2^64`` where
  device spans add it to scores they check against 2^62 at run time; elsewhere it stays
  ``-inf``.
- A fully admitted program is one device span.
- Otherwise the equations the whole program's plan refuses are oracle equations, and each run
  of the others is a candidate device span. A candidate's sub-program is re-planned for the
  target (its own facts, row kernels, narrowing and regions). If that plan refuses some of its
  equations, those become oracle equations and the rest of the run is tried again, piece by
  piece (an XDNA2 row kernel split by a refused equation in the middle is refused here); if it
  is refused as a whole (a context limit: a run of convolutions on XDNA2 needs more regions
  than it has contexts), it is cut before each of its regions that would take a piece past
  its share of the contexts (its plan lays the regions out in program order, so each piece's
  own plan has the same ones), and each piece is tried the same way.
- A group the target runs whole (``Claim.wholes``: an XDNA2 row kernel) is never cut: one
  refused equation of it sends all of it to the oracle. A softmax refused as a row kernel (its
  exp has no derived bound there) then runs its exp and its divide in one oracle span; cut, the
  oracle's exp made subnormals that the device's divide flagged as an underflow, so ``poot run``
  refused what ``poot plan`` admitted.
- The device spans together use at most the target's hardware contexts (XDNA2: 16, one per
  region): of the candidate spans, those kept on the device are the ones with the most
  arithmetic together that fit the budget (``arithmetic``: a knapsack over their contexts,
  ties to the earlier spans); the others go to the oracle. Kept in program order instead, the
  first spans took the budget, whatever they did. How finely a run past the budget is cut
  decides which of its regions can be kept, so it is cut two ways: into pieces of at most
  the whole budget, and into pieces of one context each (the budget then keeps the regions
  doing the most work, wherever they are: MobileNetV3-small's share rose from 0.32 to 0.61);
  the way whose kept pieces do the most work wins (ties to the coarser, whose pieces keep
  identical layers sharing one context together). The candidates are not merged before the
  choice (merged, the first pieces took the budget again); the kept ones merge after, where
  adjacent and their union's plan is admitted within the same contexts.
- On XDNA2 a device span with no region (only host relayouts: no work for the NPU) goes to
  the oracle, which does the same relayout on the host without a dispatch of its own; a whole
  admitted program stays one device span whatever it holds.
- Adjacent oracle runs merge into one oracle span; adjacent device spans merge when the plan
  of their union is admitted (one graph, one compile and one host round trip instead of two).
- The plan legalizes each span as it does a whole program (``poot_planner.legalize.rewrite``), so the
  equations a rule rewrites are device equations, and spans are cut in the source program.
- Every device span's plan is admitted and carried by the span (``Span.plan``), so a caller
  loads it without planning again; oracle spans are never planned. Each candidate sub-program
  is planned once, and a caller that has the whole program's plan passes it (``whole``).

A span's sub-program (``<program>_e<first>_<last>``) has:

- arguments: the values its equations read that are defined outside it, original arguments in
  program order first, then intermediates by id. An original weight stays a weight; every other
  input (an original slot or state, a value an earlier span made) is a slot.
- outputs: the values it defines that a later span or the program's results read, by id.
- no state updates: a partitioned entry carries the program's states itself.

Names are global to the program and deterministic: an original argument keeps its name, every
other value is ``v<id>`` (with ``_`` appended while that clashes with an argument's name), so a
value has the same name in the span that makes it and in every span that reads it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from poot_ir import (
    Arg,
    Eqn,
    Output,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    Storage,
    Var,
    validate,
)

from poot_planner.fp16.prelude import (
    MaskRewrite,
    f32_mask_sentinels,
    host_prelude,
    mask_sentinels,
)
from poot_planner.plan import Plan, plan, with_score_bound
from poot_planner.target import Target
from poot_planner.targets import get_target

__all__ = ["PartitionSummary", "Span", "arithmetic", "partition", "summarize", "value_names"]


@dataclass(frozen=True, slots=True)
class Span:
    """A run of ``eqns`` (source equation indices, ascending; contiguous but for the host
    prelude's, which run first) run by the target (``device``) or by the CPU oracle, as the
    sub-program ``program``."""

    device: bool
    eqns: tuple[int, ...]
    program: Program
    plan: Plan | None = None  # a device span's admitted plan (None on an oracle span)

    @property
    def first(self) -> int:
        return self.eqns[0]

    @property
    def last(self) -> int:
        return self.eqns[-1]


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """What one step of a partitioned program costs in device work: ``graphs`` (artifacts:
    one per device span, or per region on XDNA2), each compiled once (``compiles``, before
    the blob cache), and each a dispatch whose outputs return to the host
    (``round_trips``)."""

    spans: int
    device_spans: int
    oracle_spans: int
    graphs: int
    compiles: int
    round_trips: int

    def describe(self) -> str:
        return (
            f"{self.spans} spans ({self.device_spans} device, {self.oracle_spans} oracle); "
            f"per step: {self.graphs} graphs, {self.compiles} compiles, "
            f"{self.round_trips} host round trips"
        )


def summarize(spans: tuple[Span, ...], target: str | Target) -> PartitionSummary:
    t = get_target(target)
    graphs = sum(
        max(1, (s.plan if s.plan is not None else plan(s.program, t)).contexts)
        for s in spans
        if s.device
    )
    device = sum(1 for s in spans if s.device)
    return PartitionSummary(len(spans), device, len(spans) - device, graphs, graphs, graphs)


def value_names(program: Program) -> dict[int, str]:
    """The name of every value of ``program`` by var id (see the module docstring)."""
    names = {a.var.id: a.name for a in program.args}
    taken = set(names.values())
    for e in program.eqns:
        for v in e.outputs:
            name = f"v{v.id}"
            while name in taken:
                name += "_"
            taken.add(name)
            names[v.id] = name
    return names


def partition(
    program: Program,
    target: str | Target,
    whole: Plan | None = None,
    *,
    legalization: bool = True,
    score_guard: bool = False,
) -> tuple[Span, ...]:
    """Cut ``program`` into device and oracle spans for ``target`` (rules: module docstring);
    ``legalization=False`` cuts it as the target refuses it before any rewrite. ``whole`` is
    ``program``'s plan for ``target`` when the caller already has it. ``score_guard``: the
    device checks a plan's ``score_bound`` (``VpuDevice`` with its FP16 guard), so the mask
    rewrite is made where its scores are made in a device span, unproven, and that span's plan
    names them (``Plan.score_bound``); without it, only where they are proven bounded."""
    t = get_target(target)
    n = len(program.eqns)
    if n == 0:
        return ()
    names = value_names(program)
    plans: dict[tuple[int, ...], Plan] = {}

    def plan_run(run: tuple[int, ...]) -> Plan:
        """The plan of ``run``'s sub-program, made once however often it is asked for."""
        if run not in plans:
            plans[run] = plan(_sub_program(program, run, names), t, legalization=legalization)
        return plans[run]

    reuse = whole is not None and legalization and whole.source is program
    if whole is None or not reuse or not (whole.target is t or whole.target == t):
        whole = plan(program, t, legalization=legalization)
    if whole.admitted:
        every = tuple(range(n))
        return (Span(True, every, plan_run(every).source, plan_run(every)),)
    refused = _whole_groups(program, t, {r.eqn for r in whole.refusals if r.eqn >= 0})
    prelude = host_prelude(program, refused)
    hoisted = set(prelude)
    runs = _runs(tuple(i for i in range(n) if i not in hoisted), refused)
    budget = t.region_limits.contexts if t.region_limits is not None else None

    def cut(most: int) -> tuple[list[tuple[bool, tuple[int, ...]]], int]:
        """The pieces, a run refused as a whole cut into pieces of at most ``most`` contexts,
        the ones the budget keeps on the device, and the arithmetic they do."""
        pieces: list[tuple[bool, tuple[int, ...]]] = [(False, prelude)] if prelude else []
        for device, run in runs:
            pieces.extend(_device_pieces(run, plan_run, most) if device else [(False, run)])
        if budget is None:
            return _merge_devices(pieces, plan_run), 0
        # the pieces as cut, for the budget to choose among; the kept ones merge after
        costs = {k: plan_run(run).contexts for k, (d, run) in enumerate(pieces) if d}
        work = {k: sum(arithmetic(program.eqns[i]) for i in pieces[k][1]) for k in costs}
        kept = _fitting(costs, work, budget)
        chosen = [(d and k in kept, run) for k, (d, run) in enumerate(pieces)]
        joined = _merge_devices(chosen, plan_run)
        if sum(plan_run(run).contexts for d, run in joined if d) > budget:
            joined = chosen  # a union's regions formed otherwise, past the budget: kept apart
        return joined, sum(work[k] for k in kept)

    # the module docstring: cut two ways, the one doing the most work on the device kept (with
    # no context budget no run is refused for its contexts, so there is nothing to cut by)
    sizes = dict.fromkeys((budget, 1) if budget else (1,))
    pieces = max((cut(most) for most in sizes), key=lambda c: c[1])[0]
    merged: list[tuple[bool, tuple[int, ...]]] = []
    for device, run in pieces:
        if not device and merged and not merged[-1][0]:
            # ascending is program order: a prelude equation reads nothing made after it
            merged[-1] = (False, tuple(sorted(merged[-1][1] + run)))
        else:
            merged.append((device, run))
    # a narrowing target's mask literals past FP16 are replaced where the scores they are added
    # to are proven bounded in the device spans (poot_planner.fp16.prelude); an F32 target's
    # -inf mask where a device that checks them adds it to its scores (xdna2's kernels);
    # elsewhere none: the device's domain guards refuse the -inf mask, typed
    devices = [(run, plan_run(run)) for d, run in merged if d]
    rewrite = MaskRewrite({}, {})
    if prelude and t.narrowing is not None:
        limit = t.narrowing.max_magnitude
        rewrite = mask_sentinels(program, prelude, limit, devices, checked=score_guard)
    elif prelude and score_guard:
        rewrite = f32_mask_sentinels(program, prelude, devices)
    out: list[Span] = []
    k = 0  # the device spans made so far: the index the mask rewrite's scores are kept by
    for d, run in merged:
        if not d:
            out.append(Span(False, run, _sub_program(program, run, names, rewrite.replaced)))
            continue
        p = plan_run(run)
        if k in rewrite.scores:  # the graph checks the unproven mask rewrite's scores
            p = with_score_bound(p, rewrite.scores[k])
        out.append(Span(True, run, p.source, p))
        k += 1
    return tuple(out)


def arithmetic(e: Eqn) -> int:
    """The operations equation ``e`` does, as the partition weighs a span: a multiply-add per
    term of a matmul or a convolution (``K`` per output element; the group's input channels
    times the kernel's taps), a step per element of each window or reduced row, and one per
    element of any other result (data movement too: a relayout is work the host would do)."""
    p = e.params
    if e.prim is Prim.MATMUL:
        return e.out.type.size * e.inputs[0].type.shape[-1]
    if e.prim is Prim.CONV:
        return e.out.type.size * math.prod(e.inputs[1].type.shape[1:])
    if isinstance(p, ReduceWindowParams):
        return e.out.type.size * math.prod(p.window)
    if isinstance(p, ReduceParams):
        return e.inputs[0].type.size
    return e.out.type.size


def _fitting(costs: dict[int, int], values: dict[int, int], budget: int) -> set[int]:
    """The pieces (by index) with the most value together whose costs sum to at most
    ``budget``: a 0/1 knapsack over the contexts each takes (a budget of 16, a few dozen
    pieces), ties to the earlier pieces. A piece that takes no context (no NPU work) is never
    kept."""
    # best[c]: (value, the pieces) using at most c contexts; pieces in program order, so an
    # equal value keeps the choice made of earlier pieces
    best: list[tuple[int, tuple[int, ...]]] = [(0, ())] * (budget + 1)
    for k in sorted(costs):
        cost = costs[k]
        if cost == 0 or cost > budget:
            continue
        for c in range(budget, cost - 1, -1):
            value, chosen = best[c - cost]
            if value + values[k] > best[c][0]:
                best[c] = (value + values[k], (*chosen, k))
    return set(best[budget][1])


def _whole_groups(program: Program, t: Target, refused: set[int]) -> set[int]:
    """``refused`` with every group the target runs whole (``Claim.wholes``: an XDNA2 row
    kernel) that holds a refused equation: the group goes to the host with it. Groups are
    found in the source program, whose indices the refusals name."""
    if t.layout is None:
        return refused
    out = set(refused)
    for g in t.layout.claim(program, t).wholes:
        if g & refused:
            out |= g
    return out


def _merge_devices(
    pieces: list[tuple[bool, tuple[int, ...]]], plan_run: Callable[[tuple[int, ...]], Plan]
) -> list[tuple[bool, tuple[int, ...]]]:
    """Adjacent device pieces joined wherever the union's own plan is admitted."""
    out: list[tuple[bool, tuple[int, ...]]] = []
    for device, run in pieces:
        if device and out and out[-1][0]:
            union = out[-1][1] + run
            if plan_run(union).admitted:
                out[-1] = (True, union)
                continue
        out.append((device, run))
    return out


def _runs(eqns: tuple[int, ...], refused: set[int]) -> list[tuple[bool, tuple[int, ...]]]:
    """``eqns`` as maximal runs of not-refused (True) and refused (False) equations."""
    runs: list[tuple[bool, tuple[int, ...]]] = []
    for i in eqns:
        ok = i not in refused
        if runs and runs[-1][0] == ok:
            runs[-1] = (ok, runs[-1][1] + (i,))
        else:
            runs.append((ok, (i,)))
    return runs


def _device_pieces(
    run: tuple[int, ...], plan_run: Callable[[tuple[int, ...]], Plan], most: int
) -> list[tuple[bool, tuple[int, ...]]]:
    """``run`` as device pieces whose own plans are admitted, and oracle pieces."""
    p = plan_run(run)
    if p.admitted:
        return [(True, run)]
    refused = {run[r.eqn] for r in p.refusals if r.eqn >= 0}
    if not refused:  # refused as a whole (a context limit): cut into pieces of ``most``
        cuts = _cuts(p, most, len(run))
        if not cuts:  # no regions to cut between: the oracle runs it
            return [(False, run)]
        ends = (0, *cuts, len(run))  # each piece planned again (and cut again if need be)
        pieces = [run[a:b] for a, b in itertools.pairwise(ends)]
        return [x for piece in pieces for x in _device_pieces(piece, plan_run, most)]
    out: list[tuple[bool, tuple[int, ...]]] = []
    for device, piece in _runs(run, refused):
        out.extend(_device_pieces(piece, plan_run, most) if device else [(False, piece)])
    return out


def _cuts(p: Plan, most: int, n: int) -> tuple[int, ...]:
    """Where to cut the ``n`` source equations of ``p`` (a plan refused for its contexts) so
    that each piece's regions take at most ``most`` hardware contexts: before each region that
    would take one more (regions form in program order, so a piece's own plan lays out the
    same ones). Empty when ``p`` laid out no regions."""
    cuts: list[int] = []
    seen: set[int] = set()
    for region in p.regions:
        if region.runs not in seen and len(seen) == most and region.eqns:
            at = p.source_eqn(region.eqns[0])
            if 0 < at < n and (not cuts or at > cuts[-1]):
                cuts.append(at)
                seen = set()
        seen.add(region.runs)
    return tuple(cuts)


def _sub_program(
    program: Program,
    run: tuple[int, ...],
    names: dict[int, str],
    replaced: dict[int, tuple[Eqn, ...]] | None = None,
) -> Program:
    """``run``'s equations (``replaced``: the prelude's mask selects, as what they become) as a
    program."""
    swap = replaced or {}
    eqns = tuple(x for i in run for x in swap.get(i, (program.eqns[i],)))
    defined = {v.id for e in eqns for v in e.outputs}
    read: dict[int, Var] = {}
    for e in eqns:
        for a in e.inputs:
            if isinstance(a, Var) and a.id not in defined:
                read[a.id] = a
    storage = {a.var.id: a.storage for a in program.args}
    order = {a.var.id: k for k, a in enumerate(program.args)}
    ids = sorted(read, key=lambda i: (i not in order, order.get(i, 0), i))
    wide = {a.var.id for a in program.args if a.wide}  # an int64-taking slot stays one
    args = tuple(
        Arg(
            names[i],
            read[i],
            Storage.WEIGHT if storage.get(i) is Storage.WEIGHT else Storage.SLOT,
            i in wide,
        )
        for i in ids
    )
    later: dict[int, Var] = {v.id: v for _, v in program.results() if v.id in defined}
    inside = set(run)
    for j in range(run[0] + 1, len(program.eqns)):  # a reader comes after the value's maker
        if j in inside:
            continue
        for a in program.eqns[j].inputs:
            if isinstance(a, Var) and a.id in defined:
                later[a.id] = a
    outputs = tuple(Output(names[i], later[i]) for i in sorted(later))
    name = f"{program.name}_e{run[0]}_{run[-1]}"
    return validate(Program(name, args, eqns, outputs))
