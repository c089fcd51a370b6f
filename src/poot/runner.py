"""Run a program on a device through the ordinary pipeline and check every step against the
oracle: what ``poot run``, ``poot demo`` and the conformance suite share.

Each step's device results are compared with the oracle evaluating the *source* program on the
same inputs, the states included: the reference for step ``k`` reads the state the device
carried out of step ``k - 1``, so a comparison measures one step, never accumulated drift. The
comparison uses the plan's published numerics class (``NarrowStorage``: normwise against the
F32 oracle; ``Bounded``: elementwise under the bound ``poot_planner.error_bounds`` derives for
the step's inputs; ``Exact``: bit for bit).

A partitioned run (``partition=True`` and a plan that refuses something) is checked span by
span, each on the inputs it really had in that step (the boundary values the engine fed it,
``Engine.partitioned(entry).trace``): a device span's outputs against the oracle evaluating its
sub-program on those inputs, under the class of the span's own plan exactly as above (a running
bound from that span's inputs, or normwise when narrowed); an oracle span's outputs bit for bit;
and each program result bit for bit against the span value it is. So every device span is
measured alone, never with the error a later oracle span may amplify, and every value on the
way to the results is accounted for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_engine.device import Device
from poot_ir import BitExact, Comparison, Program, Storage, compare, evaluate, sample_inputs
from poot_ir.budget import check_alloc, nbytes
from poot_ir.numerics import Bounded, Derived
from poot_ir.sampling import sample_bytes, value_bytes
from poot_planner import Plan, Span, partition, plan
from poot_planner.error_bounds import result_bounds
from poot_planner.partition import value_names

__all__ = ["RunReport", "StepCheck", "run_program"]


@dataclass(frozen=True, slots=True)
class StepCheck:
    """One step: the comparison of each result, by name."""

    step: int
    results: tuple[tuple[str, Comparison], ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for _, c in self.results)

    @property
    def worst(self) -> tuple[str, Comparison] | None:
        if not self.results:
            return None
        return max(self.results, key=lambda r: (not r[1].ok, r[1].error_ratio))


@dataclass(slots=True)
class RunReport:
    """What running ``program`` on a device did: the plan, every step's check, engine stats.
    ``spans`` is the partition a partitioned run used (empty for an ordinary run)."""

    program: Program
    device: str
    plan: Plan
    steps: list[StepCheck] = field(default_factory=list)
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    compiles: int = 0
    cache_hits: int = 0
    spans: tuple[Span, ...] = ()

    @property
    def ok(self) -> bool:
        return (self.plan.admitted or bool(self.spans)) and all(s.ok for s in self.steps)


def _check(
    p: Plan,
    feed: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray],
    want: Mapping[str, np.ndarray],
) -> tuple[tuple[str, Comparison], ...]:
    """Each result under the plan's class: bit for bit when exact, normwise when narrowed, and
    when bounded, under the bound a running error analysis derives for these very inputs from
    the target's per-step contracts (a chain of approximate steps compounds their errors)."""
    if isinstance(p.numerics, Bounded):
        bounds = result_bounds(p, feed)
        return tuple((n, compare(got[n], want[n], Derived(), scale=bounds[n])) for n in want)
    return tuple((n, compare(got[n], want[n], p.numerics.bound)) for n in want)


def _check_spans(
    program: Program,
    spans: tuple[tuple[Span, Plan | None], ...],
    trace: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray],
) -> tuple[tuple[str, Comparison], ...]:
    """A partitioned step, span by span on its own inputs (see the module docstring)."""
    checks: list[tuple[str, Comparison]] = []
    for span, p in spans:
        feed = {a.name: trace[a.name] for a in span.program.args}
        want = evaluate(span.program, feed)
        mine = {n: trace[n] for n in want}
        where = f"{'device' if p else 'oracle'} {span.first}..{span.last}"
        if p is not None:
            found = _check(p, feed, mine, want)
        else:
            found = tuple((n, compare(mine[n], want[n], BitExact())) for n in want)
        checks.extend((f"{n} ({where})", c) for n, c in found)
    names = value_names(program)
    for name, var in program.results():
        checks.append((name, compare(got[name], trace[names[var.id]], BitExact())))
    return tuple(checks)


def run_program(
    program: Program,
    device: Device,
    device_name: str,
    *,
    steps: int = 3,
    seed: int = 0,
    cache_dir: Path | None = None,
    inputs: list[dict[str, np.ndarray]] | None = None,
    integer_valued: bool = False,
    partition: bool = False,
) -> RunReport:
    """Plan ``program`` for ``device``'s target; if it is admitted (or ``partition`` asks for a
    partitioned entry), run ``steps`` steps through an ``Engine`` and check each one. Inputs
    are ``inputs[k]`` (every argument: weights are read from step 0 only, states from step 0 as
    initial values) or deterministic samples."""
    p = plan(program, device.target)
    parted = partition_of(program, device.target) if partition and not p.admitted else ()
    report = RunReport(program, device_name, p, spans=tuple(s for s, _ in parted))
    if not p.admitted and not parted:
        return report
    storage = {a.name: a.storage for a in program.args}
    if inputs is None:
        # every step's samples and results are kept for the report: all of them must fit
        kept = sample_bytes(program) + sum(
            nbytes(v.type.shape, v.type.dtype.itemsize) for _, v in program.results()
        )
        check_alloc(f"{steps} steps of program {program.name!r}", steps * kept)
    # each step's check against the oracle holds every value of the program at once
    check_alloc(f"the oracle's values of program {program.name!r}", value_bytes(program))
    per_step = inputs or [
        sample_inputs(program, seed + k, integer_valued=integer_valued) for k in range(steps)
    ]
    first = per_step[0]
    weights = {n: v for n, v in first.items() if storage[n] is Storage.WEIGHT}
    states = {n: v for n, v in first.items() if storage[n] is Storage.STATE}
    engine = Engine(device, cache_dir=cache_dir)
    try:
        handle = engine.load_weights(weights)
        entry = engine.add_entry(
            program, handle, initial_state=states, partition=bool(parted), planned=p
        )
        for k, sample in enumerate(per_step):
            slots = {n: v for n, v in sample.items() if storage[n] is Storage.SLOT}
            got = engine.step(entry, slots)
            feed = {**weights, **states, **slots}
            part = engine.partitioned(entry)
            if part is not None:
                trace = {**weights, **part.trace}  # a device span's weights stay on the device
                report.steps.append(StepCheck(k, _check_spans(program, parted, trace, got)))
            else:
                want = evaluate(program, feed)
                report.steps.append(StepCheck(k, _check(p, feed, got, want)))
            report.outputs.append(got)
            states = {n: got[n] for n in states}
        stats = engine.stats()
        report.compiles, report.cache_hits = stats.compiles, stats.cache_hits
    finally:
        engine.close()
    return report


def partition_of(program: Program, target: str) -> tuple[tuple[Span, Plan | None], ...]:
    """``program``'s spans for ``target``, each device span with its own (admitted) plan."""
    return tuple(
        (s, plan(s.program, target) if s.device else None) for s in partition(program, target)
    )
