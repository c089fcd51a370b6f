"""A verified step's oracle values in one evaluation: the legalized program's every value (what
``error_bounds.result_bounds`` runs over) and the source program's results (the reference).

A plan with legalization rewrites has two programs: the analysis needs the legalized one's
values, while the reference is the source's exact function, not the rewrite's steps. They
share most of their equations (a rewrite replaces a few), so ``joint_program`` merges them:
the legalized program's equations, in its order and with its vars, then each source equation
that is not identical to one already there (same primitive, params, result type and operands
after merging: common-subexpression merging, the source's operands renamed to the values they
merged with). Its outputs are every legalized value and each source result that is not one.

Why merging changes no bit: the oracle evaluates equation by equation, each kernel a pure
function of its primitive, params, result type and operand values (``poot_ir.oracle``); two
identical equations on identical operands have the same value bit for bit, so the source's
results out of the joint program are exactly what ``evaluate(plan.source, inputs)`` returns.
An equation's index in an ``EvaluationError`` names the joint program's equation: the
legalized program's own index for its equations (they come first, in order).

Build the joint program once per plan (the engine's verifier keeps it per entry, ``poot run``
per run): the oracle compiles a program once per object, so the same object each step is also
what spares the compile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from poot_ir import (
    Atom,
    Eqn,
    Output,
    Params,
    Prim,
    Program,
    Storage,
    TensorType,
    Var,
    evaluate,
    validate,
)

from poot_planner.plan import Plan

__all__ = ["Joint", "joint_program", "joint_values"]

Array = np.ndarray
_Key = tuple[Prim, Params, TensorType, tuple[Atom, ...]]


@dataclass(frozen=True, slots=True)
class Joint:
    """The joint program of ``plan`` (see the module) and where its outputs go: ``values``
    names the output of each legalized equation's var id, ``reference`` the output of each
    source result (by result name, in ``plan.source.result_names`` order)."""

    plan: Plan
    program: Program
    values: tuple[tuple[int, str], ...]
    reference: tuple[tuple[str, str], ...]


def joint_program(plan: Plan) -> Joint:
    """The legalized and source programs of ``plan`` merged into one (see the module)."""
    legal, source = plan.legalized, plan.source
    merged: dict[_Key, Var] = {}
    for e in legal.eqns:  # its vars are its own: their keys need no renaming
        merged.setdefault((e.prim, e.params, e.out.type, e.inputs), e.out)
    by_name = {a.name: a.var for a in legal.args}
    rename: dict[int, Var] = {a.var.id: by_name[a.name] for a in source.args}
    fresh = 1 + max((v.id for v in _vars(legal) + _vars(source)), default=-1)
    extra: list[Eqn] = []
    for e in source.eqns:
        inputs = tuple(rename[a.id] if isinstance(a, Var) else a for a in e.inputs)
        key = (e.prim, e.params, e.out.type, inputs)
        hit = merged.get(key)
        if hit is None:
            hit = Var(fresh, e.out.type, e.out.name)
            fresh += 1
            extra.append(Eqn(e.prim, inputs, (hit,), e.params))
            merged[key] = hit
        rename[e.out.id] = hit
    outputs = [Output(f"v{e.out.id}", e.out) for e in legal.eqns]
    named = {o.var.id: o.name for o in outputs}
    reference: list[tuple[str, str]] = []
    for name, v in source.results():
        var = rename[v.id]
        if var.id not in named:  # a source-only value, or an argument (returned as a copy)
            named[var.id] = f"r{len(reference)}"
            outputs.append(Output(named[var.id], var))
        reference.append((name, named[var.id]))
    # a state is read as any argument; as a slot it needs no update (the joint has none)
    args = tuple(replace(a, storage=Storage.SLOT) for a in legal.args)
    program = Program(source.name, args, legal.eqns + tuple(extra), tuple(outputs), ())
    return Joint(
        plan,
        validate(program),
        tuple((e.out.id, f"v{e.out.id}") for e in legal.eqns),
        tuple(reference),
    )


def _vars(program: Program) -> tuple[Var, ...]:
    return tuple(a.var for a in program.args) + tuple(e.out for e in program.eqns)


def joint_values(
    joint: Joint, inputs: Mapping[str, np.ndarray]
) -> tuple[dict[int, Array], dict[str, Array]]:
    """One oracle evaluation of ``joint.program`` on ``inputs``: the value of every argument
    and equation of ``plan.legalized`` by var id (``error_bounds.legalized_values``), and the
    source's results by name (``evaluate(plan.source, inputs)``, bit for bit)."""
    out = evaluate(joint.program, inputs)
    values: dict[int, Array] = {
        a.var.id: np.asarray(inputs[a.name]) for a in joint.plan.legalized.args
    }
    values.update((i, out[name]) for i, name in joint.values)
    return values, {name: out[o] for name, o in joint.reference}
