"""The program-wide host layout: at most five arenas, every host tensor at a fixed offset.

A kernel call takes at most five host buffers, so the host tensors of every region share a
few arenas, by role: weights (arena of ``ArenaRole.WEIGHTS``), per-step inputs (slots and
states), results (outputs and state updates) and scratch (values one region writes to the
host and a later region reads). Only non-empty arenas exist, numbered in that order, then, when the program has a region, the
flags arena: one ``FLAG_WORD`` per region, region ``r``'s at ``FLAG_WORD * r``
(``design.FlagPath``), so five buffers at most, the bound of a kernel call. Within an
arena, slots follow the program's order (arguments, results, then regions' hand-offs), each at
the next multiple of ``ARENA_ALIGN`` bytes. A value that only its own region's tiles read moves
tile to tile and has no slot.

A host relayout's output (``design.Relayout``) is a host value too: a copy's in the results
arena when the program returns it, else in scratch; a reshape's is an alias, a slot sharing its
input's bytes (``Slot.root``: the same arena, offset and bytes, read with its own shape), so it
takes no bytes of its own.
"""

from __future__ import annotations

from poot_ir import Storage, Var
from poot_planner import HostRelayout, Plan, Region
from poot_planner.xdna2.regions import in_step_order

from poot_codegen.xdna.design import (
    ARENA_ALIGN,
    FLAG_WORD,
    Arena,
    ArenaRole,
    Binding,
    DesignError,
    HostLayout,
    Slot,
    words,
)

__all__ = ["build_layout"]

_ORDER = (ArenaRole.WEIGHTS, ArenaRole.INPUTS, ArenaRole.RESULTS, ArenaRole.SCRATCH)


def _align(n: int) -> int:
    return -(-n // ARENA_ALIGN) * ARENA_ALIGN


def build_layout(plan: Plan) -> HostLayout:
    """The host layout of ``plan``'s program and regions."""
    program = plan.program
    placed: dict[int, tuple[ArenaRole, Var]] = {}
    # a reshape's output -> the value whose bytes it reads (the root of a chain of reshapes)
    root: dict[int, int] = {}
    aliases: list[Var] = []

    def put(v: Var, role: ArenaRole) -> None:
        if v.id not in root:
            placed.setdefault(v.id, (role, v))

    for h in plan.relayouts:
        if h.alias:
            root[h.output.id] = root.get(h.inputs[0].id, h.inputs[0].id)
    for a in program.args:
        put(a.var, ArenaRole.WEIGHTS if a.storage is Storage.WEIGHT else ArenaRole.INPUTS)
    results = {v.id for _, v in program.results()}
    for _, v in program.results():
        put(v, ArenaRole.RESULTS)
        if v.id in root:  # a returned alias: its root's bytes in the results arena
            put(_var(program, plan.relayouts, root[v.id]), ArenaRole.RESULTS)
    for stage in _stages(plan):
        if isinstance(stage, HostRelayout):
            for v in stage.inputs:
                known = v.id in placed or v.id in root
                if not known and v.type.size:
                    raise DesignError(
                        f"relayout at equation {stage.eqn} reads %{v.id} from the host, "
                        "where no one put it"
                    )
                put(v, ArenaRole.SCRATCH)  # an empty value no tile made: an empty slot
            if stage.alias:
                aliases.append(stage.output)
            else:
                out = stage.output
                put(out, ArenaRole.RESULTS if out.id in results else ArenaRole.SCRATCH)
            continue
        for v in stage.host_in:
            if v.id not in placed and v.id not in root:
                raise DesignError(
                    f"region {stage.index} reads %{v.id} from the host, where no one put it"
                )
        for v in stage.host_out:
            put(v, ArenaRole.SCRATCH)
    sizes = dict.fromkeys(_ORDER, 0)
    spans: list[tuple[ArenaRole, int, Var]] = []
    for role, v in placed.values():
        offset = sizes[role]
        spans.append((role, offset, v))
        sizes[role] = _align(offset + words(v.type.nbytes))
    used = [role for role in _ORDER if any(r is role for r, _ in placed.values())]
    index = {role: i for i, role in enumerate(used)}
    # an arena holding only empty tensors still gets one aligned block: no zero-size buffers
    arenas = [Arena(i, role, max(sizes[role], ARENA_ALIGN)) for i, role in enumerate(used)]
    if plan.regions:
        arenas.append(Arena(len(arenas), ArenaRole.FLAGS, _align(FLAG_WORD * len(plan.regions))))
    slots = [
        Slot(v.id, v.dtype, v.shape, index[role], offset, v.type.nbytes, words(v.type.nbytes))
        for role, offset, v in spans
    ]
    by_value = {s.value: s for s in slots}
    for v in aliases:
        r = by_value[root[v.id]]
        slots.append(Slot(v.id, v.dtype, v.shape, r.arena, r.offset, r.nbytes, r.span, r.value))
    return HostLayout(
        alignment=ARENA_ALIGN,
        arenas=tuple(arenas),
        slots=tuple(slots),
        arguments=tuple(Binding(a.name, a.var.id) for a in program.args),
        results=tuple(Binding(name, v.id) for name, v in program.results()),
    )


def _stages(plan: Plan) -> list[Region | HostRelayout]:
    """``plan``'s regions and host relayouts in the order a step runs them."""
    return in_step_order(plan.regions, plan.relayouts)


def _var(program: object, relayouts: tuple[HostRelayout, ...], value: int) -> Var:
    """The ``Var`` of id ``value`` among the relayouts' inputs (where every root is)."""
    for h in relayouts:
        for v in h.inputs:
            if v.id == value:
                return v
    raise DesignError(f"an alias of %{value}, which no relayout reads")
