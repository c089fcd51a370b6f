"""Partitioned entries: a program its target refuses in part, run span by span.

``Engine.add_partitioned(program, weights, initial_state)`` makes one when the plan
refuses something (an admitted program gets the ordinary entry). ``poot_planner.partition``
cuts the program into spans (each device span carrying its plan); here:

- a device span is an ordinary sub-entry on the engine's device, made by the engine from the
  span's plan (its sub-program's weights bound by name from the caller's handle; its own
  recording and replay, host-side checks, range checks on a narrowing target, deadline and
  blob cache). This module never sees the engine: it is handed the operations it needs
  (add and remove a sub-entry, read a weight, run a sub-entry's step);
- a host span (a span the target refused) runs on the engine's host device when it has one
  and the span's plan for that device's target is admitted (``add_host``: a sub-entry there,
  ``hosts[k]`` its plan; ``poot_npu.host.HostDevice``, one compiled graph in F32), else on
  the oracle, ``poot_ir.evaluate`` (the weights it reads are read back from their device
  buffers once, when the entry is made). A host sub-entry that refuses a step before anything
  ran (``DomainError``: a boundary value outside one of its domains) is answered by the oracle
  for that step (``oracle_steps`` counts them): the oracle is exact where the host device
  promises nothing;
- the entry carries the program's states on the host (zeros or ``initial_state``;
  ``reset_state`` restores them): a sub-program has no states, it reads them as slots.

A step checks its inputs exactly as an ordinary step does (``check_step_inputs``: the
program's slot arguments, exact dtypes and shapes, errors naming the argument), then feeds
values span to span by their global names (``poot_planner.partition.value_names``: each
value is one array, handed to the next span as it is, copied only into a sub-entry's bound
buffers), and only
when every span has run replaces the states: a failing span leaves them as they were. The
values that crossed span boundaries in the last step stay readable (``trace``), so a caller can
check each span against the oracle on the inputs it really had.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from poot_ir import DomainError, DomainFlagged, Program, Storage, TensorType, evaluate
from poot_planner import Plan
from poot_planner.partition import Span, value_names

from poot_engine.checks import check_step_inputs
from poot_engine.handles import Entry

__all__ = ["AddHost", "PartitionedEntry", "RunSub"]

#: Runs one step of a device sub-entry: its results by name and the seconds spent on the device.
RunSub = Callable[[Entry, Mapping[str, np.ndarray]], tuple[dict[str, np.ndarray], float]]
#: Loads a host span on the host device: its sub-entry and plan, or None (the oracle runs it).
AddHost = Callable[[Span, Mapping[str, np.ndarray]], tuple[Entry, Plan] | None]


@dataclass(slots=True)
class PartitionedEntry:
    """One loaded partitioned program. ``subs[k]`` is span ``k``'s sub-entry on the device
    (None: a host span); ``host_subs[k]`` a host span's sub-entry on the host device and
    ``hosts[k]`` its plan (None: the oracle runs it)."""

    program: Program
    spans: tuple[Span, ...]
    subs: tuple[Entry | None, ...]
    host_weights: dict[str, np.ndarray]  # the weights a host span reads
    initial: dict[str, np.ndarray]
    names: dict[int, str] = field(default_factory=dict)
    states: dict[str, np.ndarray] = field(default_factory=dict)
    trace: dict[str, np.ndarray] = field(default_factory=dict)
    host_subs: tuple[Entry | None, ...] = ()
    hosts: tuple[Plan | None, ...] = ()
    oracle_steps: int = 0  # host spans the oracle answered for a host sub-entry's refusal

    @staticmethod
    def build(
        program: Program,
        spans: tuple[Span, ...],
        read_weight: Callable[[str], np.ndarray],
        initial: dict[str, np.ndarray],
        add_sub: Callable[[Span], Entry],
        remove_sub: Callable[[Entry], None],
        add_host: AddHost | None = None,
    ) -> PartitionedEntry:
        """Load every device span as a sub-entry (``add_sub``: the engine's, which binds the
        span's weights and loads the plan the span carries); on any failure the sub-entries
        made so far are removed again (``remove_sub``) and the error propagates. This module
        uses the engine only through these operations and ``RunSub``. ``add_host`` loads a
        host span on the engine's host device (None: every host span on the oracle)."""
        wanted = {
            a.name
            for s in spans
            if not s.device
            for a in s.program.args
            if a.storage is Storage.WEIGHT
        }
        host = {n: read_weight(n) for n in sorted(wanted)}
        subs: list[Entry | None] = []
        hosted: list[tuple[Entry, Plan] | None] = []
        try:
            for s in spans:
                subs.append(add_sub(s) if s.device else None)
            for s in spans:
                hosted.append(None if s.device or add_host is None else add_host(s, host))
        except BaseException:
            for sub in subs:
                if sub is not None:
                    remove_sub(sub)
            raise
        e = PartitionedEntry(program, spans, tuple(subs), host, initial, value_names(program))
        e.host_subs = tuple(h[0] if h is not None else None for h in hosted)
        e.hosts = tuple(h[1] if h is not None else None for h in hosted)
        e.slots = tuple((a.name, a.var.type) for a in program.args if a.storage is Storage.SLOT)
        e.reset()
        return e

    slots: tuple[tuple[str, TensorType], ...] = ()  # the program's slot arguments, made once

    def reset(self) -> None:
        self.states = {n: v.copy() for n, v in self.initial.items()}

    def step(
        self, inputs: Mapping[str, np.ndarray], run: RunSub, run_host: RunSub | None = None
    ) -> tuple[dict[str, np.ndarray], float]:
        """The program's outputs and updated states by name, and the seconds on the device
        (``run_host`` runs a host span's sub-entry; its seconds are host time)."""
        slots = self.slots
        checked = check_step_inputs(self.program, slots, inputs)
        env: dict[str, np.ndarray] = {**self.host_weights, **self.states}
        env.update((name, arr.copy()) for (name, _), arr in zip(slots, checked, strict=True))
        device_s = 0.0
        host_subs = self.host_subs or (None,) * len(self.spans)
        for span, sub, hsub in zip(self.spans, self.subs, host_subs, strict=True):
            p = span.program
            if sub is None and hsub is not None and run_host is not None:
                feed = {a.name: env[a.name] for a in p.args if a.storage is Storage.SLOT}
                try:
                    out, _ = run_host(hsub, feed)
                except DomainError:  # nothing ran: the oracle answers (module docstring)
                    self.oracle_steps += 1
                    out = evaluate(p, {a.name: env[a.name] for a in p.args})
            elif sub is None:
                out = evaluate(p, {a.name: env[a.name] for a in p.args})
            else:
                feed = {a.name: env[a.name] for a in p.args if a.storage is Storage.SLOT}
                try:
                    out, seconds = run(sub, feed)
                except DomainFlagged as err:
                    # the device knows only its own program: "region 0, equations [0, 1, 2]"
                    # of a layer's softmax read as the first span's, so say which span it was
                    raise DomainFlagged(
                        err.region, err.count, err.eqns, span=_span_name(span, self.program)
                    ) from err
                device_s += seconds
            env.update(out)
        results = {name: env[self.names[v.id]].copy() for name, v in self.program.results()}
        self.trace = env
        for u in self.program.updates:
            self.states[u.state] = results[u.state].copy()
        return results, device_s


def _span_name(span: Span, program: Program) -> str:
    """``span``'s program and the equations of ``program`` it holds (a range when contiguous)."""
    eqns = span.eqns
    contiguous = eqns == tuple(range(eqns[0], eqns[-1] + 1)) if eqns else True
    held = f"{eqns[0]}..{eqns[-1]}" if eqns and contiguous and len(eqns) > 1 else str(list(eqns))
    return f"{span.program.name!r} (equations {held} of {program.name!r})"
