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
"""

from __future__ import annotations

from poot_ir import Storage, Var
from poot_planner import Plan

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

    def put(v: Var, role: ArenaRole) -> None:
        placed.setdefault(v.id, (role, v))

    for a in program.args:
        put(a.var, ArenaRole.WEIGHTS if a.storage is Storage.WEIGHT else ArenaRole.INPUTS)
    for _, v in program.results():
        put(v, ArenaRole.RESULTS)
    for r in plan.regions:
        for v in r.host_in:
            if v.id not in placed:
                raise DesignError(
                    f"region {r.index} reads %{v.id} from the host, where no one put it"
                )
        for v in r.host_out:
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
    return HostLayout(
        alignment=ARENA_ALIGN,
        arenas=tuple(arenas),
        slots=tuple(slots),
        arguments=tuple(Binding(a.name, a.var.id) for a in program.args),
        results=tuple(Binding(name, v.id) for name, v in program.results()),
    )
