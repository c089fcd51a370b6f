"""Legalization: before admission, each equation a target refuses that a rule of that target
(``poot_planner.legalize.rules``) decomposes into equations it admits, with a derived bound
(``poot_planner.legalize.bounds``), is replaced by them.

The rewrite is ordinary equations in the program (``Plan.legalized``; the narrowed program is
built from it), each rewrite recorded with its rule and bound (``Plan.rewrites``, shown by
``poot plan`` as "legalized: erf -> ..., bound ..."). A rewrite is made only when every one of
its equations is admitted on its own (and narrowing can carry its literals) and its bound is
derived; otherwise the equation stays as it was and keeps its typed refusal. The rewritten
equation's output value stays the same value (its last step writes it), so nothing else in the
program changes, and legalizing a legal program changes nothing, except for a range rule
(``Rule.admitted_too``): it is tried on admitted equations too, and it may fold in the only
reader of the equation's output (its last step then writes the reader's value; the reader's
source index is ``Rewrite.absorbed``, and it has no equation of its own in the result). A
refused equation that only a rewritten equation read (through other such equations) is dropped
with it (``Rewrite.unread``): its value is observed nowhere once the rewrite no longer reads it
(the comparisons of a NaN guard the device writes as ``max(x, x)``), so it needs no admission.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from poot_ir import (
    ConvertParams,
    DType,
    Eqn,
    PootError,
    Prim,
    Program,
    Var,
    validate,
)

from poot_planner.admission import PlanMemo, admit
from poot_planner.emit import Emit
from poot_planner.fp16.narrowing import literal_refusals, needs_narrowing, operating_dtype
from poot_planner.legalize.bounds import Derivation, derive
from poot_planner.legalize.expanders import expand_select
from poot_planner.legalize.rules import Rule, RuleContext, rules_for
from poot_planner.refusal import Refusal
from poot_planner.target import Target

__all__ = ["Legalized", "Rewrite", "legalize", "select_products"]


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Source equation ``eqn`` became equations ``first..last`` of the legalized program."""

    eqn: int
    primitive: str
    rule: Rule
    first: int
    last: int
    derivation: Derivation
    #: the source equation folded in with it (the only reader of its output), if any
    absorbed: int | None = None
    #: refused source equations only this rewrite read (module docstring), dropped with it
    unread: tuple[int, ...] = ()

    def describe(self) -> str:
        folded = "" if self.absorbed is None else f" and {self.absorbed}"
        if self.unread:
            folded += f", dropping unread {', '.join(map(str, self.unread))}"
        return (
            f"{self.primitive} -> {self.rule.decomposition}, bound "
            f"{self.derivation.describe()} (equation {self.eqn}{folded}: "
            f"{self.last - self.first + 1} equations)"
        )


@dataclass(frozen=True, slots=True)
class Legalized:
    """The legalized program, its rewrites, and for each of its equations the index of the
    source equation it comes from."""

    program: Program
    rewrites: tuple[Rewrite, ...]
    origin: tuple[int, ...]


def select_products(legal: Legalized) -> frozenset[int]:
    """The equations of ``legal``'s program that multiply a select's branch by its 0/1
    mask: ``expand_select``'s two products (``x m`` and ``y (1 - m)``, the branch first), read
    by the add that ends its rewrite. Each element of one is the branch's or a zero, which
    ``fp16.constants`` relies on to follow an out-of-range branch through the select."""
    program = legal.program
    made = {e.out.id: i for i, e in enumerate(program.eqns)}
    found: set[int] = set()
    for rw in legal.rewrites:
        if rw.rule.expand is not expand_select:
            continue
        for a in program.eqns[rw.last].inputs:
            i = made.get(a.id) if isinstance(a, Var) else None
            if i is not None and rw.first <= i <= rw.last and program.eqns[i].prim is Prim.MUL:
                found.add(i)
    return frozenset(found)


def _dtype(e: Eqn) -> DType:
    if e.prim is Prim.CONVERT and isinstance(e.params, ConvertParams):
        return e.params.dtype
    return operating_dtype(e)


def _refused(program: Program, t: Target, memo: PlanMemo) -> set[int]:
    out = {i for i, got in enumerate(memo.admit_all(program, t)) if isinstance(got, Refusal)}
    if t.narrowing is not None and needs_narrowing(program):
        out |= {r.eqn for r in memo.literal_refusals(program, t.narrowing)}
    return out


def _legal(eqns: list[Eqn], t: Target) -> bool:
    if any(isinstance(admit(k, e, t), Refusal) for k, e in enumerate(eqns)):
        return False
    if t.narrowing is None:
        return True
    return not literal_refusals(Program("rule", (), tuple(eqns), ()), t.narrowing)


def _context(program: Program, t: Target) -> RuleContext:
    producer: dict[int, Eqn] = {}
    consumers: dict[int, list[Eqn]] = {}
    for e in program.eqns:
        producer[e.out.id] = e
        for a in e.inputs:
            if isinstance(a, Var):
                consumers.setdefault(a.id, []).append(e)
    return RuleContext(
        producer,
        {k: tuple(v) for k, v in consumers.items()},
        frozenset(v.id for _, v in program.results()),
        t.narrowing.max_magnitude if t.narrowing is not None else None,
    )


def _try(rule: Rule, e: Eqn, ctx: RuleContext, t: Target, next_id: int) -> Emit | None:
    em = Emit(next_id, _dtype(e))
    try:
        applies = rule.expand(em, e, ctx)
    except (PootError, ValueError):  # a shape or dtype the rule does not handle
        return None
    written = e.out if em.absorbed is None else em.absorbed.out
    if not applies or not em.eqns or em.eqns[-1].out is not written:
        return None
    return em if _legal(em.eqns, t) else None


def legalize(program: Program, t: Target, memo: PlanMemo | None = None) -> Legalized:
    """``program`` with every refused equation a rule of ``t`` legalizes rewritten (module).
    ``memo``: the plan's (``PlanMemo``), which remembers what admission and the narrowing
    answered of ``program`` for the plan to ask again."""
    refused = _refused(program, t, PlanMemo() if memo is None else memo)
    n = len(program.eqns)

    def candidates(i: int) -> tuple[Rule, ...]:
        rules = rules_for(t.name, program.eqns[i].prim)
        return rules if i in refused else tuple(r for r in rules if r.admitted_too)

    if not any(candidates(i) for i in range(n)):
        return Legalized(program, (), tuple(range(n)))
    index = {e.out.id: i for i, e in enumerate(program.eqns)}
    ctx = _context(program, t)
    next_id = program.next_var_id()
    eqns: list[Eqn] = []
    origin: list[int] = []
    rewrites: list[Rewrite] = []
    dropped: set[int] = set()  # readers a rewrite folded in
    for i, e in enumerate(program.eqns):
        if i in dropped:
            continue
        done = False
        for rule in candidates(i):
            em = _try(rule, e, ctx, t, next_id)
            if em is None:
                continue
            derivation = derive(rule, em.eqns, t, _dtype(e))
            if derivation.bound is None:
                continue
            absorbed = None if em.absorbed is None else index[em.absorbed.out.id]
            if absorbed is not None:
                dropped.add(absorbed)
            first = len(eqns)
            eqns.extend(em.eqns)
            origin.extend([i] * len(em.eqns))
            next_id = em.next_id
            rewrites.append(
                Rewrite(i, e.prim.value, rule, first, len(eqns) - 1, derivation, absorbed)
            )
            done = True
            break
        if not done:
            eqns.append(e)
            origin.append(i)
    if not rewrites:
        return Legalized(program, (), tuple(range(n)))
    eqns, origin, rewrites = _drop_unread(program, eqns, origin, rewrites, refused)
    out = Program(program.name, program.args, tuple(eqns), program.outputs, program.updates)
    return Legalized(validate(out), tuple(rewrites), tuple(origin))


def _drop_unread(
    program: Program,
    eqns: list[Eqn],
    origin: list[int],
    rewrites: list[Rewrite],
    refused: set[int],
) -> tuple[list[Eqn], list[int], list[Rewrite]]:
    """``eqns`` without the refused source equations that only rewritten ones read, through
    other such equations (module docstring), each named by the rewrite it fed. Backwards, so a
    reader is decided before its producers."""
    maker = {e.out.id: i for i, e in enumerate(program.eqns)}
    by_source = {rw.eqn: k for k, rw in enumerate(rewrites)}
    fed: dict[int, int] = {}  # source equation -> the rewrite (index) one of its readers is
    for rw in rewrites:
        for a in program.eqns[rw.eqn].inputs:
            if isinstance(a, Var) and a.id in maker:
                fed.setdefault(maker[a.id], by_source[rw.eqn])
    live = {v.id for _, v in program.results()}
    kept: list[int] = []
    dropped: dict[int, list[int]] = {}
    for k in reversed(range(len(eqns))):
        e, src = eqns[k], origin[k]
        if (
            src in refused
            and src not in by_source
            and src in fed
            and not any(v.id in live for v in e.outputs)
        ):
            dropped.setdefault(fed[src], []).append(src)
            for a in e.inputs:
                if isinstance(a, Var) and a.id in maker:
                    fed.setdefault(maker[a.id], fed[src])
            continue
        live.update(a.id for a in e.inputs if isinstance(a, Var))
        kept.append(k)
    if not dropped:
        return eqns, origin, rewrites
    kept.reverse()
    at = {old: new for new, old in enumerate(kept)}
    rewrites = [
        replace(
            rw,
            first=at[rw.first],
            last=at[rw.last],
            unread=tuple(sorted(dropped.get(j, ()))),
        )
        for j, rw in enumerate(rewrites)
    ]
    return [eqns[k] for k in kept], [origin[k] for k in kept], rewrites
