"""Run a program on a device through the ordinary pipeline and check every step against the
oracle: what ``poot run``, ``poot demo`` and the conformance suite share.

The check is ``poot_engine.verify`` (``check_results``, ``check_spans``): the same code an
``Engine(device, verify="always")`` runs before each step commits, so ``poot run`` and a verified
engine judge a step alike. The reference for step ``k`` reads the state the device carried out
of step ``k - 1``, so a comparison measures one step, never accumulated drift. Here a breach is
reported (``StepCheck``), not raised, so the run shows every step. A partitioned run
(``partition=True`` and a plan that refuses something) is the engine's partitioned entry
(``Engine.add_partitioned``: the engine cuts the plan, once), checked span by span on the
boundary values the engine fed each span (``Engine.partitioned(entry)``: its spans and trace).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from poot_ir import Program, Storage, sample_inputs
from poot_ir.budget import check_alloc, nbytes
from poot_ir.sampling import sample_bytes, value_bytes
from poot_planner import Plan, Span, plan

from poot_engine.device import Device
from poot_engine.engine import DEFAULT_DEADLINE_S, Engine
from poot_engine.verify import StepCheck, check_results, check_spans, step_joint

__all__ = ["RunReport", "StepCheck", "host_only_weights", "run_program"]


@dataclass(slots=True)
class RunReport:
    """What running ``program`` on a device did: the plan, every step's check, engine stats.
    ``spans`` is the partition a partitioned run used (empty for an ordinary run), ``hosts``
    the plans its host spans ran by on the host device."""

    program: Program
    device: str
    plan: Plan
    steps: list[StepCheck] = field(default_factory=list)
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    compiles: int = 0
    cache_hits: int = 0
    spans: tuple[Span, ...] = ()
    #: each span's plan on the host device (None: a device span, or a host span the oracle ran)
    hosts: tuple[Plan | None, ...] = ()

    @property
    def ok(self) -> bool:
        return (self.plan.admitted or bool(self.spans)) and all(s.ok for s in self.steps)


def host_only_weights(p: Plan) -> set[str]:
    """The weights ``p`` refused for their value (a constant the device cannot hold): a
    partitioned entry loads them for its host spans alone (``Engine.load_weights``)."""
    return {str(n) for r in p.refusals if (n := r.fact("constant")) is not None}


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
    host: Device | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> RunReport:
    """Plan ``program`` for ``device``'s target; if it is admitted (or ``partition`` asks for a
    partitioned entry), run ``steps`` steps through an ``Engine`` and check each one. Inputs
    are ``inputs[k]`` (every argument: weights are read from step 0 only, states from step 0 as
    initial values) or deterministic samples. ``host``: the device a partition's host spans
    run on where its target admits them (``Engine(host=...)``; None: the oracle).
    ``deadline_s``: each dispatch's (``Engine(deadline_s=...)``; a stand-in running a whole
    model's kernels in C on a shared machine may need more than the default)."""
    storage = {a.name: a.storage for a in program.args}
    # the weights are known before the run: planned with them, so a weight the device cannot
    # hold is refused here (and partitioned around), as `poot plan` refuses it, not at upload
    known = {n: v for n, v in (inputs or [{}])[0].items() if storage.get(n) is Storage.WEIGHT}
    # the one plan: the engine loads it (and its spans') as is
    p = plan(program, device.target, constants=known)
    report = RunReport(program, device_name, p)
    if not p.admitted and not partition:
        return report
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
    engine = Engine(device, cache_dir=cache_dir, host=host, deadline_s=deadline_s)
    host_only = host_only_weights(p)
    try:
        handle = engine.load_weights(weights, host_only=host_only if partition else ())
        add = engine.add_partitioned if partition else engine.add_entry
        entry = add(p, handle, states)
        part = engine.partitioned(entry)
        report.spans = part.spans if part is not None else ()
        report.hosts = part.hosts if part is not None else ()
        joint = step_joint(p) if part is None else None  # built once: one evaluation a step
        for k, sample in enumerate(per_step):
            slots = {n: v for n, v in sample.items() if storage[n] is Storage.SLOT}
            got = engine.step(entry, slots)
            if part is not None:
                trace = {**weights, **part.trace}  # a device span's weights stay on the device
                checks = check_spans(program, part.spans, trace, got, part.hosts)
                report.steps.append(StepCheck(k, checks))
            else:
                feed = {**weights, **states, **slots}
                checks = check_results(p, feed, got, joint=joint)
                report.steps.append(StepCheck(k, checks))
            report.outputs.append(got)
            states = {n: got[n] for n in states}
        stats = engine.stats()
        report.compiles, report.cache_hits = stats.compiles, stats.cache_hits
    finally:
        engine.close()
    return report
