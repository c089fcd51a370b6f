"""The host prelude of a partition: the integer side of a program, run once ahead of it.

An exported transformer builds its attention mask from integer and boolean values alone
(``attention_mask != 0``, gathered and and-ed into a boolean mask, then ``select(mask, 0,
-inf)`` once per layer), interleaved with the layers in program order. An FP16 device cannot
make a float of a boolean or an integer (``IntegerToFloat``), so those equations run on the
host; left in place, each cuts the device chain, and the encoder runs as one graph per layer.

They read no floating-point value, so they depend on the program's arguments alone and can
run before everything else without changing any value: ``host_prelude`` is the refused
equations that read no float (every variable they read an integer or boolean argument, or the
integer or boolean output of another such equation), with the equations of that kind they
depend on. ``poot_planner.partition`` runs them as one oracle span first.

Their float outputs are mask values, and on a narrowing target the exported ``-inf`` would stop
the run at the device's input range check (``NarrowingRangeInput``). The specification's
sentinel, -65504, does not serve a mask that is added to scores on the device: any score below
-16 makes the FP16 sum infinite, and the graph's overflow guard refuses it (as it must). So
``mask_sentinels`` makes the prelude's additive mask ``select(p, 0, -inf)`` (read only by adds
and subtracts, through data movement, that feed a maximum over its last axis: a softmax) give
``MASK = -2^15`` instead, where its row holds an unmasked entry, and keep ``-inf`` where the
whole row is masked:

    v = select(p, 0, -inf);  out = max(v, broadcast(reduce_max(v, last)) + MASK)

A masked entry of a row with an unmasked one is then MASK (the row's maximum is 0); a fully
masked row stays ``-inf``, which the device's input check refuses with a typed error (the
oracle's softmax of that row is NaN, the exported NaN guard's case: no finite mask gives it).
Other targets (xdna2: its kernels' domain is finite operands) get the same value for an
infinite mask literal; a finite one (``-10000``) stays as it is there. Why the same
probabilities: a score s plus MASK stays finite in FP16 for |s| <= 32736 (beyond,
the overflow guard refuses), and a masked entry's exponent ``s_m + MASK - max`` is below -104
(where exp is 0 in F32, and -17.4 in FP16) whenever the row's maximum is an unmasked score
within 32,600 of ``s_m``: the masked probability is exactly the 0 the infinite mask gives.

On xdna2 that exponent is outside exp's domain there, [-87, 88] (the specification), so a
device span holding the softmax's exp counts every masked key in its flag word and a padded
batch is refused at run time (``DomainFlagged``; all-MiniLM-L6-v2 in the models suite: 27,264
masked keys in layer 0, and one unmasked score 90.2 below its row's maximum). The refusal is
true and depends on the mask, an input, so the plan cannot make it
(``packages/poot-npu/tests/test_xdna_softmax_domain.py``).
"""

from __future__ import annotations

from poot_ir import BroadcastParams, Eqn, Literal, Prim, Program, ReduceParams, Var

from poot_planner.legal_emit import Emit, RuleContext
from poot_planner.legal_steps import readers_through_movement

__all__ = ["MASK", "host_prelude", "mask_sentinels"]


def host_prelude(program: Program, refused: set[int]) -> tuple[int, ...]:
    """The prelude's equations (ascending), or () when no refused equation reads no float."""
    integral = {a.var.id for a in program.args if not a.var.dtype.is_float}
    maker: dict[int, int] = {}  # an integral value's producer, for the ancestors below
    side: set[int] = set()
    for i, e in enumerate(program.eqns):
        reads = [a for a in e.inputs if isinstance(a, Var)]
        if not reads or any(a.id not in integral for a in reads):
            continue  # reads a float (or nothing: a constant the device makes itself)
        side.add(i)
        for v in e.outputs:
            if not v.dtype.is_float:
                integral.add(v.id)
                maker[v.id] = i
    wanted = sorted(side & refused)
    out: set[int] = set()
    while wanted:
        i = wanted.pop()
        if i in out:
            continue
        out.add(i)
        reads = [a for a in program.eqns[i].inputs if isinstance(a, Var)]
        wanted.extend(maker[a.id] for a in reads if a.id in maker)
    return tuple(sorted(out))


#: the prelude's additive mask value (module docstring): half FP16's range, a power of two
MASK = -(2.0**15)


def mask_sentinels(
    program: Program, eqns: tuple[int, ...], limit: float
) -> dict[int, tuple[Eqn, ...]]:
    """The prelude's additive mask selects (module docstring), by index, as the equations that
    replace each (the last writes the select's own output)."""
    consumers: dict[int, list[Eqn]] = {}
    for e in program.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                consumers.setdefault(a.id, []).append(e)
    ctx = RuleContext(
        consumers={k: tuple(v) for k, v in consumers.items()},
        results=frozenset(v.id for _, v in program.results()),
    )
    next_id = 1 + max([a.var.id for a in program.args] + [e.out.id for e in program.eqns])
    out: dict[int, tuple[Eqn, ...]] = {}
    for i in eqns:
        e = program.eqns[i]
        if not (_additive_mask(e, limit) and _feeds_a_row_maximum(e, ctx)):
            continue
        em = Emit(next_id, e.out.dtype)
        rank = e.out.type.rank
        v = em.op(Prim.SELECT, *e.inputs, params=e.params)
        rows = em.op(Prim.REDUCE_MAX, v, params=ReduceParams((rank - 1,)))
        rows = em.op(
            Prim.BROADCAST_IN_DIM,
            rows,
            params=BroadcastParams(e.out.type.shape, tuple(range(rank - 1))),
        )
        em.max(v, em.add(rows, MASK), out=e.out)
        out[i] = tuple(em.eqns)
        next_id = em.next_id
    return out


def _additive_mask(e: Eqn, limit: float) -> bool:
    """``select(p, 0, -L)`` with L past FP16's range (``-inf`` included), into a float."""
    if e.prim is not Prim.SELECT or not e.out.dtype.is_float or e.out.type.rank == 0:
        return False
    a, b = e.inputs[1:]
    if not (isinstance(a, Literal) and isinstance(b, Literal)):
        return False
    return a.as_float() == 0.0 and b.as_float() < -limit


def _feeds_a_row_maximum(e: Eqn, ctx: RuleContext) -> bool:
    """Read only by adds and subtracts (through movement), each read by a maximum over its
    last axis, the mask's last axis carried there (the softmax of masked scores)."""
    readers = readers_through_movement(e.out.id, ctx)
    if not readers or any(r.prim not in (Prim.ADD, Prim.SUB) for r in readers):
        return False
    for r in readers:
        rank = r.out.type.rank
        uses = ctx.consumers.get(r.out.id, ())
        last = (rank - 1,)
        if not any(
            u.prim is Prim.REDUCE_MAX
            and isinstance(u.params, ReduceParams)
            and u.params.axes == last
            for u in uses
        ):
            return False
        if r.out.type.shape[-1] != e.out.type.shape[-1]:
            return False
    return True
