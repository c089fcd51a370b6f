"""Programs, inputs and comparisons shared by the XDNA2 device tests (host stand-in, fake XRT and
hardware): each op is compared with the oracle under the ``xdna2`` target's own contract."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from poot_engine import Engine
from poot_ir import Builder, DType, Prim, Program, Storage, Var, evaluate, ops
from poot_ir.edges import edge_sample
from poot_ir.numerics import Comparison, Contract
from poot_planner import TARGETS
from poot_planner.xdna2.probes import add_chain, fan_out, marked_chain, neg_chain

XDNA2 = TARGETS["xdna2"]
F32, I32 = DType.F32, DType.I32
Array = np.ndarray[Any, np.dtype[Any]]

UNARY = (Prim.NEG, Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT)
BINARY = (Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.GE, Prim.MAX)
POINTWISE_SHAPE = (24, 700)  # 16800 elements: several chunks per tile


def contract(prim: Prim) -> Contract:
    cap = XDNA2.capability(prim, F32)
    assert cap is not None, f"xdna2 admits no {prim.value} on f32"
    return cap.contract


def sample(prim: Prim, shape: tuple[int, ...], rng: np.random.Generator) -> Array:
    """F32 values inside ``prim``'s contract domain, reaching its edges (``poot_ir.edges``, which
    ``poot acceptance`` shares; a few give results outside the domain, which the comparison
    masks out)."""
    return edge_sample(contract(prim).domain, F32, shape, rng)


def pointwise(prim: Prim, shape: tuple[int, ...] = POINTWISE_SHAPE) -> Program:
    b = Builder(f"{prim.value}_f32")
    x = b.slot("x", F32, shape)
    if prim in BINARY:
        y = b.slot("y", F32, shape)
        b.output("z", getattr(b, prim.value)(x, y))
    else:
        b.output("z", getattr(b, prim.value)(x))
    return b.build()


def row(prim: Prim, shape: tuple[int, ...] = (48, 300)) -> Program:
    b = Builder(f"row_{prim.value}")
    b.output("r", getattr(b, prim.value)(b.slot("x", F32, shape), axes=1))
    return b.build()


def rmsnorm(rows: int = 16, cols: int = 64) -> Program:
    b = Builder("rmsnorm")
    x = b.slot("x", F32, (rows, cols))
    b.output("y", ops.rmsnorm(b, x, b.weight("w", F32, (cols,))))
    return b.build()


def gather(axis: int, dtype: DType) -> Program:
    b = Builder(f"gather_{dtype.value}_axis{axis}")
    table = b.weight("table", dtype, (5, 6, 7))
    idx = b.slot("idx", I32, (3, 2))
    b.output("g", b.gather(table, idx, axis=axis))
    return b.build()


def running_sum(shape: tuple[int, ...] = (8, 33)) -> Program:
    """An activation slot, an activation output and a carried running sum."""
    b = Builder("running_sum")
    x = b.slot("x", F32, shape)
    acc = b.state("acc", F32, shape)
    b.output("act", b.tanh(x))
    b.update(acc, b.add(acc, x))
    return b.build()


def twenty() -> Program:
    """Twenty equations, twenty distinct result shapes: ten pointwise jobs over ten slots of
    their own shape, each feeding a row reduction of yet another shape; every value is a
    result (so each reduction is checked over the oracle's own operand)."""
    b = Builder("twenty")
    cycle = (b.exp, b.tanh, b.neg, b.erf, b.sqrt)
    for k in range(10):
        x = b.slot(f"x{k}", F32, (k + 1, 3 + 2 * k))
        y = cycle[k % len(cycle)](x)
        b.output(f"p{k}", y)
        b.output(f"r{k}", b.reduce_sum(y, axes=1) if k % 2 else b.reduce_max(y, axes=1))
    return b.build()


def negs(n: int) -> Program:
    """A chain of ``n`` neg tiles: ``n`` compute tiles, one stream in and out."""
    return neg_chain(n, (4, 16))


def marked(n: int) -> Program:
    """``negs(n)`` with one ``max(v, v)`` in each region of 32 tiles at a place of its own, so
    that every region is an artifact of its own (one hardware context each)."""
    return marked_chain(n, 32, (4, 16))


def sums(n: int) -> Program:
    """The sum of ``n`` slots (result ``s``): ``n`` host streams in."""
    return add_chain(n, (4, 8))


def fanout(n: int) -> Program:
    """``n`` results of one slot: ``n`` host streams out."""
    return fan_out(n, (4, 8))


def uniform_inputs(program: Program, seed: int) -> dict[str, Array]:
    """Moderate inputs for every argument (gather indices inside their axis, negatives too)."""
    rng = np.random.default_rng(seed)
    out: dict[str, Array] = {}
    for a in program.args:
        t = a.var.type
        if t.dtype is I32:
            out[a.name] = rng.integers(-3, 3, t.shape).astype(np.int32)
        else:
            out[a.name] = rng.uniform(-2, 2, t.shape).astype(np.float32)
    return out


Check = Callable[[str, Mapping[str, Array], Mapping[str, Array], Mapping[str, Array]], Comparison]
"""``check(name, device results, oracle results, arguments)``: one result against the oracle."""


def run_steps(
    engine: Engine,
    program: Program,
    inputs: Callable[[int], Mapping[str, Array]],
    check: Check,
    steps: int = 3,
) -> list[Comparison]:
    """Add ``program`` (weights and initial states from ``inputs(0)``), run ``steps`` steps over
    ``inputs(s)``'s slots (the first records, the rest replay) and compare every result of
    every step with the oracle fed the same arguments (states as the device carried them)."""
    first = inputs(0)
    kinds = {a.name: a.storage for a in program.args}
    weights = {n: v for n, v in first.items() if kinds[n] is Storage.WEIGHT}
    state = {n: v for n, v in first.items() if kinds[n] is Storage.STATE}
    entry = engine.add_entry(
        program, engine.load_weights(weights) if weights else None, initial_state=state
    )
    out = []
    for s in range(steps):
        slots = {n: v for n, v in inputs(s).items() if kinds[n] is Storage.SLOT}
        feed = {**weights, **state, **slots}
        got = engine.step(entry, slots)
        want = evaluate(program, feed)
        assert list(got) == list(program.result_names)
        for name in program.result_names:
            cmp = check(name, got, want, feed)
            assert cmp.ok, f"step {s}, {name}: {cmp}"
            out.append(cmp)
        state = {n: got[n] for n in state}
    engine.remove_entry(entry)
    return out


def by_maker(program: Program) -> Check:
    """Each result under the contract of the primitive that makes it, over its operands (every
    one an argument)."""
    makers = {e.out.id: e for e in program.eqns}
    args = {a.var.id: a.name for a in program.args}

    def check(
        name: str, got: Mapping[str, Array], want: Mapping[str, Array], feed: Mapping[str, Array]
    ) -> Comparison:
        e = makers[dict(program.results())[name].id]
        operands = [feed[args[v.id]] for v in e.inputs if isinstance(v, Var)]
        return contract(e.prim).check(got[name], want[name], operands)

    return check


def twenty_check(program: Program) -> Check:
    """``twenty()``'s results: each pointwise one under its contract over its slot, each row
    reduction under its own contract over the device's own operand (the pointwise result)."""
    pointwise = by_maker(program)
    reductions = {f"r{k}": e.prim for k, e in enumerate(program.eqns[1::2])}

    def check(
        name: str, got: Mapping[str, Array], want: Mapping[str, Array], feed: Mapping[str, Array]
    ) -> Comparison:
        if name not in reductions:
            return pointwise(name, got, want, feed)
        p = got["p" + name[1:]]
        reduce = row(reductions[name], p.shape)
        return contract(reductions[name]).check(got[name], evaluate(reduce, {"x": p})["r"], [p])

    return check
