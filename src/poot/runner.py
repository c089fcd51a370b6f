"""Run a program on a device through the ordinary pipeline and check every step against the
oracle: what ``poot run``, ``poot demo`` and the conformance suite share.

Each step's device results are compared with the oracle evaluating the *source* program on the
same inputs, the states included: the reference for step ``k`` reads the state the device
carried out of step ``k - 1``, so a comparison measures one step, never accumulated drift. The
comparison uses the plan's published numerics class (``NarrowStorage``: normwise against the
F32 oracle; ``Bounded``: elementwise under the bound ``poot_planner.error_bounds`` derives for
the step's inputs; ``Exact``: bit for bit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_engine.device import Device
from poot_ir import Comparison, Program, Storage, compare, evaluate, sample_inputs
from poot_ir.numerics import Bounded, Derived
from poot_planner import Plan, plan
from poot_planner.error_bounds import result_bounds

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
    """What running ``program`` on a device did: the plan, every step's check, engine stats."""

    program: Program
    device: str
    plan: Plan
    steps: list[StepCheck] = field(default_factory=list)
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    compiles: int = 0
    cache_hits: int = 0

    @property
    def ok(self) -> bool:
        return self.plan.admitted and all(s.ok for s in self.steps)


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
) -> RunReport:
    """Plan ``program`` for ``device``'s target; if it is admitted, run ``steps`` steps through
    an ``Engine`` and check each one. Inputs are ``inputs[k]`` (every argument: weights are
    read from step 0 only, states from step 0 as initial values) or deterministic samples."""
    p = plan(program, device.target)
    report = RunReport(program, device_name, p)
    if not p.admitted:
        return report
    storage = {a.name: a.storage for a in program.args}
    per_step = inputs or [
        sample_inputs(program, seed + k, integer_valued=integer_valued) for k in range(steps)
    ]
    first = per_step[0]
    weights = {n: v for n, v in first.items() if storage[n] is Storage.WEIGHT}
    states = {n: v for n, v in first.items() if storage[n] is Storage.STATE}
    engine = Engine(device, cache_dir=cache_dir)
    try:
        handle = engine.load_weights(weights)
        entry = engine.add_entry(program, handle, initial_state=states)
        for k, sample in enumerate(per_step):
            slots = {n: v for n, v in sample.items() if storage[n] is Storage.SLOT}
            got = engine.step(entry, slots)
            want = evaluate(program, {**weights, **states, **slots})
            feed = {**weights, **states, **slots}
            report.steps.append(StepCheck(k, _check(p, feed, got, want)))
            report.outputs.append(got)
            states = {n: got[n] for n in states}
        stats = engine.stats()
        report.compiles, report.cache_hits = stats.compiles, stats.cache_hits
    finally:
        engine.close()
    return report
