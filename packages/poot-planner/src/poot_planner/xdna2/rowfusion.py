"""XDNA2 row kernels: recognizing a norm-like chain and deriving its error bound from its steps.

A *row group* is a chain that reduces each row over its last axis and combines the reduced
value with the row again (``broadcast_in_dim`` back along the last axis). RMSNorm is one; so are
LayerNorm and softmax. A row group runs as ONE row kernel (one lane per row, the row loop
serialized, no workgroup memory and no barrier), so the planner must give the whole kernel a
bound, derived from its steps' contracts and the value facts (``poot_planner.xdna2.facts``):

=================  ===========================================  ===========================
step               admitted when                                relative error after it
=================  ===========================================  ===========================
mul, div           always (bit for bit IEEE: one rounding)      r_a + r_b + u
neg, broadcast     always (exact)                               r_a
max, reduce_max    always (exact)                               max(r_a, r_b)
add                both operands provably non-negative          max(r_a, r_b) + 2 * 2^-23
sqrt               operand provably a positive normal number    r_a / 2 + 4e-7
reduce_sum         every term provably non-negative             r_t + 2 * cols * 2^-23
anything else      never: a typed MISSING_BOUND naming the step
=================  ===========================================  ===========================

``u = 2^-24`` is the unit roundoff of a correctly rounded F32 operation. The add and sum rows
are the XDNA2 contracts (faithful to two units of the larger operand; a sum of non-negative
terms cannot cancel, so its magnitude bound is a relative bound). The rules are first order: the
products of two relative errors, below 1e-10 here, are dropped.

For RMSNorm over 64 columns (``x * x``, sum, ``/ 64``, ``+ eps``, sqrt, ``x / rms``, ``* w``)::

    x*x        u                                  = 5.96e-8
    sum        5.96e-8 + 2 * 64 * 2^-23           = 1.532e-5
    / 64       + u                                = 1.538e-5
    + eps      + 2 * 2^-23                        = 1.562e-5
    sqrt       1.562e-5 / 2 + 4e-7                = 8.21e-6
    x / rms    + u                                = 8.27e-6
    * w        + u                                = 8.33e-6   (about 8.5e-6, as the seed says)

A subtraction (LayerNorm's ``x - mean``, softmax's ``x - max``), an ``exp`` inside the row
kernel (softmax) and a signed sum (LayerNorm's mean) have no bound: each is a refusal naming the
step, so LayerNorm and softmax are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from poot_ir import BroadcastParams, Eqn, Literal, Prim, Program, ReduceParams, Var

from poot_planner.xdna2.facts import Fact, value_facts

__all__ = ["RowGroup", "StepFailure", "derive_bound", "find_row_groups"]

U = 2.0**-24  # unit roundoff of a correctly rounded F32 operation
ADD_ERR = 2 * 2.0**-23  # the core's adder: within two units of the larger operand
SQRT_ERR = 4e-7  # the core's software square root


@dataclass(frozen=True, slots=True)
class StepFailure:
    """A step of a row group with no derived bound: ``reason`` names what is missing."""

    eqn: int
    primitive: str
    reason: str


@dataclass(frozen=True, slots=True)
class RowGroup:
    """A recognized row kernel: its equations (ascending), the values it reads from outside,
    the values it produces for outside, its row length, and its derived relative bound (None
    when a step has none: then ``failures`` says which)."""

    eqns: tuple[int, ...]
    inputs: tuple[Var, ...]
    outputs: tuple[Var, ...]
    cols: int
    bound: float | None
    failures: tuple[StepFailure, ...]


def _is_broadcast_back(e: Eqn) -> bool:
    """``broadcast_in_dim`` of a row-reduced value back along the last axis."""
    p = e.params
    if e.prim is not Prim.BROADCAST_IN_DIM or not isinstance(p, BroadcastParams):
        return False
    rank = len(p.shape)
    return rank >= 1 and p.dims == tuple(range(rank - 1)) and e.inputs[0].type.shape == p.shape[:-1]


def _is_vector_broadcast(e: Eqn) -> bool:
    """``broadcast_in_dim`` of a ``[cols]`` vector (a norm weight) across the rows."""
    p = e.params
    if e.prim is not Prim.BROADCAST_IN_DIM or not isinstance(p, BroadcastParams):
        return False
    rank = len(p.shape)
    return rank >= 2 and p.dims == (rank - 1,)


def _is_row_step(e: Eqn) -> bool:
    """Equations a row group may contain (whether or not they get a bound)."""
    if e.prim.is_unary or e.prim.is_binary:
        return True
    if e.prim in (Prim.REDUCE_SUM, Prim.REDUCE_MAX):
        p = e.params
        rank = e.inputs[0].type.rank
        return isinstance(p, ReduceParams) and p.axes == (rank - 1,)
    return _is_broadcast_back(e) or _is_vector_broadcast(e)


def find_row_groups(program: Program) -> list[RowGroup]:
    """Every row group of ``program``, with its derived bound or its failing steps."""
    eqns = program.eqns
    producer = {e.out.id: i for i, e in enumerate(eqns)}
    consumers: dict[int, list[int]] = {}
    for i, e in enumerate(eqns):
        for a in e.inputs:
            if isinstance(a, Var):
                consumers.setdefault(a.id, []).append(i)

    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    members: set[int] = set()
    for b, e in enumerate(eqns):
        if not _is_broadcast_back(e):
            continue
        # backward: the scalar phase and the reductions that feed the broadcast, then the
        # element-wise steps before each reduction, up to values made outside row steps
        stack = [b]
        while stack:
            i = stack.pop()
            if i in members and i != b:
                union(i, b)
                continue
            members.add(i)
            union(i, b)
            for a in eqns[i].inputs:
                j = producer.get(a.id) if isinstance(a, Var) else None
                if j is None or not _is_row_step(eqns[j]):
                    continue
                if _is_broadcast_back(eqns[j]) or _is_vector_broadcast(eqns[j]):
                    if _is_broadcast_back(eqns[j]):
                        union(j, b)  # another group's broadcast feeds this one: one kernel
                    members.add(j)
                    union(j, b)
                    continue
                stack.append(j)
        # forward: the steps that combine the broadcast value with the row, and the steps
        # after them that still need the row structure (another broadcast operand)
        frontier = list(consumers.get(e.out.id, ()))
        while frontier:
            i = frontier.pop()
            c = eqns[i]
            if i in members or not (c.prim.is_unary or c.prim.is_binary):
                continue
            members.add(i)
            union(i, b)
            for k in consumers.get(c.out.id, ()):
                nxt = eqns[k]
                if nxt.prim.is_binary and any(
                    isinstance(a, Var)
                    and (j := producer.get(a.id)) is not None
                    and (_is_vector_broadcast(eqns[j]) or _is_broadcast_back(eqns[j]))
                    and a.id != c.out.id
                    for a in nxt.inputs
                ):
                    frontier.append(k)
        # the vector broadcasts the members read belong to the kernel too
        for i in list(members):
            for a in eqns[i].inputs:
                j = producer.get(a.id) if isinstance(a, Var) else None
                if j is not None and _is_vector_broadcast(eqns[j]):
                    members.add(j)
                    union(j, b)

    groups: dict[int, list[int]] = {}
    for i in members:
        groups.setdefault(find(i), []).append(i)
    facts = value_facts(program)
    results = {v.id for _, v in program.results()}
    out: list[RowGroup] = []
    for idx in sorted(groups.values(), key=min):
        idx.sort()
        inside = {eqns[i].out.id for i in idx}
        inputs: dict[int, Var] = {}
        for i in idx:
            for a in eqns[i].inputs:
                if isinstance(a, Var) and a.id not in inside:
                    inputs.setdefault(a.id, a)
        outputs = [
            eqns[i].out
            for i in idx
            if eqns[i].out.id in results
            or any(k not in idx for k in consumers.get(eqns[i].out.id, ()))
        ]
        # the row-shaped output (a reduced value is one element per row) sets the row length
        rows = max((o.shape for o in outputs), key=len, default=())
        cols = rows[-1] if rows else 1
        if not _is_row_kernel([eqns[i] for i in idx], list(inputs.values()), rows, cols):
            continue  # not a row kernel: its equations are admitted (or refused) one by one
        bound, failures = derive_bound([eqns[i] for i in idx], idx, facts, outputs)
        out.append(
            RowGroup(tuple(idx), tuple(inputs.values()), tuple(outputs), cols, bound, failures)
        )
    return out


def _is_row_kernel(steps: list[Eqn], inputs: list[Var], rows: tuple[int, ...], cols: int) -> bool:
    """A chain the row kernel can run: it reduces rows, and everything it reads is a whole row
    (the shape ``rows`` of its row-shaped output) or a ``[cols]`` vector it only broadcasts
    across the rows (a norm weight). A broadcast of a value reduced elsewhere (a per-row input)
    is no row kernel."""
    if not any(e.prim in (Prim.REDUCE_SUM, Prim.REDUCE_MAX) for e in steps) or not rows:
        return False
    for v in inputs:
        if v.shape == rows:
            continue
        readers = [e for e in steps if any(isinstance(a, Var) and a.id == v.id for a in e.inputs)]
        if v.shape != (cols,) or not all(_is_vector_broadcast(e) for e in readers):
            return False
    return True


def derive_bound(
    steps: list[Eqn], indices: list[int], facts: dict[int, Fact], outputs: list[Var]
) -> tuple[float | None, tuple[StepFailure, ...]]:
    """The relative bound of a row kernel's ``outputs``, by the table in the module
    docstring, or the steps that have none."""
    rel: dict[int, float] = {}
    failures: list[StepFailure] = []

    def r(a: object) -> float:
        return rel.get(a.id, 0.0) if isinstance(a, Var) else 0.0

    def fact(a: object) -> Fact:
        if isinstance(a, Literal):
            return Fact(a.as_float())
        return facts.get(a.id, Fact()) if isinstance(a, Var) else Fact()

    def fail(i: int, e: Eqn, reason: str) -> float:
        failures.append(StepFailure(i, e.prim.value, reason))
        return 0.0

    for i, e in zip(indices, steps, strict=True):
        ins = e.inputs
        match e.prim:
            case Prim.MUL | Prim.DIV:
                val = r(ins[0]) + r(ins[1]) + U
            case Prim.NEG | Prim.BROADCAST_IN_DIM:
                val = r(ins[0])
            case Prim.MAX | Prim.REDUCE_MAX:
                val = max(r(a) for a in ins)
            case Prim.ADD:
                if all(fact(a).non_negative for a in ins):
                    val = max(r(a) for a in ins) + ADD_ERR
                else:
                    signs = ", ".join(fact(a).describe() for a in ins)
                    val = fail(
                        i, e, f"an add of operands not provably non-negative ({signs}) can cancel"
                    )
            case Prim.SQRT:
                if fact(ins[0]).positive_normal:
                    val = r(ins[0]) / 2 + SQRT_ERR
                else:
                    val = fail(
                        i,
                        e,
                        f"sqrt of an operand not provably positive normal ({fact(ins[0]).describe()})",
                    )
            case Prim.REDUCE_SUM:
                if fact(ins[0]).non_negative:
                    val = r(ins[0]) + 2 * ins[0].type.shape[-1] * 2.0**-23
                else:
                    val = fail(i, e, "a signed sum: its terms are not provably non-negative")
            case Prim.SUB:
                val = fail(i, e, "a subtraction inside a row kernel has no relative bound")
            case _:
                val = fail(i, e, f"{e.prim.value} inside a row kernel has no derived bound")
        rel[e.out.id] = val
    if failures:
        return None, tuple(failures)
    return max((rel[v.id] for v in outputs), default=0.0), ()
