"""The check of a device step against the oracle: one implementation for the engine's verified
steps (``Engine(device, verify=...)``), ``poot run`` and the tests.

A step's device results are compared with the oracle evaluating the plan's *source* program on
the same inputs, the states included (the states the device held before the step), so one
comparison measures one step, never accumulated drift. The comparison uses the plan's published
numerics class:

- ``Exact``: bit for bit (a zero's sign too, unless the class says otherwise);
- ``Bounded`` and ``NarrowStorage``: elementwise under the bound ``poot_planner.error_bounds`` derives for the step's
  very inputs (a running error analysis: a chain of approximate steps compounds their errors,
  and an element outside a step's domain is promised nothing and not compared). The analysis's
  values and the reference come out of one oracle evaluation (``poot_planner.reference``).
  For a narrowed (FP16) plan the analysis includes the FP16 rounding of every F32 input and
  literal and each equation's FP16 lowering (``poot_planner.fp16.contract``); the class's
  normwise figure is the specification's design figure ``poot acceptance`` measures, not the
  step's contract.

A partitioned run is checked span by span (``check_spans``), each device span on the inputs it
really had, under its own plan; an oracle span and every program result bit for bit.

``Verifier`` is the engine's side: which steps to verify (``"off"``, ``"always"``, or a fraction
drawn at random per step), the check itself before the step commits (a breach raises
``ContractViolation`` and no state changes), the poisoned entries, and the counters ``Stats``
reports.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from poot_ir import (
    BitExact,
    Comparison,
    ContractViolation,
    EngineError,
    EntryPoisoned,
    Program,
    compare,
    evaluate,
)
from poot_ir.numerics import Bounded, Derived, NarrowStorage
from poot_planner import Plan, Span
from poot_planner.error_bounds import legalized_values, result_bounds
from poot_planner.partition import value_names
from poot_planner.reference import Joint, joint_program, joint_values

__all__ = ["StepCheck", "Verifier", "VerifyMode", "check_results", "check_spans", "step_joint"]

#: ``"off"``, ``"always"``, or the fraction of steps (in ``(0, 1]``) verified at random.
VerifyMode = str | float

Checks = tuple[tuple[str, Comparison], ...]


@dataclass(frozen=True, slots=True)
class StepCheck:
    """One step: the comparison of each result, by name."""

    step: int
    results: Checks

    @property
    def ok(self) -> bool:
        return all(c.ok for _, c in self.results)

    @property
    def worst(self) -> tuple[str, Comparison] | None:
        if not self.results:
            return None
        return max(self.results, key=lambda r: (not r[1].ok, r[1].error_ratio))


def check_results(
    p: Plan,
    feed: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray],
    want: Mapping[str, np.ndarray] | None = None,
    joint: Joint | None = None,
) -> Checks:
    """Each result of ``p.source`` on ``feed`` under the plan's class (see the module).
    ``want`` is the oracle's results, evaluated here when not given: once per step. A
    ``Bounded`` or ``NarrowStorage`` plan's analysis needs every value of the legalized program besides, so both
    come out of one evaluation of the plan's joint program (``poot_planner.reference``:
    the legalized and source programs merged), built here when ``joint`` (``joint_program(p)``,
    which a caller checking many steps keeps) is not given or is another plan's."""
    if _derived(p):
        if want is None:
            mine = joint if joint is not None and joint.plan is p else joint_program(p)
            values, want = joint_values(mine, feed)
        else:
            values = legalized_values(p, feed)
        origins: dict[str, tuple[int, str]] = {}
        bounds = result_bounds(p, feed, values, origins)
        return tuple(
            (
                n,
                _unbounded(
                    compare(got[n], want[n], Derived(), scale=bounds[n]), bounds[n], origins.get(n)
                ),
            )
            for n in want
        )
    if want is None:
        want = evaluate(p.source, feed)
    return tuple((n, compare(got[n], want[n], p.numerics.bound)) for n in want)


def _unbounded(c: Comparison, bound: np.ndarray, origin: tuple[int, str] | None) -> Comparison:
    """``c`` saying how many elements were promised nothing and which equation made it so (an
    infinite derived bound is no check: the report must not read as one)."""
    skipped = int(np.size(bound) - np.count_nonzero(np.isfinite(bound)))
    if skipped == 0 or origin is None:
        return c
    why = (
        f"{skipped} element(s) promised nothing: unbounded by equation {origin[0]} "
        f"({origin[1]}) of the legalized program on these inputs"
    )
    return replace(c, reason=f"{c.reason}; {why}" if c.reason else why)


def step_joint(p: Plan) -> Joint | None:
    """What ``check_results`` of many steps of ``p`` keeps: the joint program of a ``Bounded``
    or ``NarrowStorage`` plan (None for another class, whose check evaluates the source alone)."""
    return joint_program(p) if _derived(p) else None


def _derived(p: Plan) -> bool:
    """Whether ``p``'s results are checked under the bound derived for each step's inputs."""
    return isinstance(p.numerics, Bounded | NarrowStorage)


def check_spans(
    program: Program,
    spans: tuple[Span, ...],
    trace: Mapping[str, np.ndarray],
    got: Mapping[str, np.ndarray],
    hosts: Sequence[Plan | None] = (),
) -> Checks:
    """A partitioned step, span by span on its own inputs (``trace``: the weights and every
    boundary value of the step), then each program result against the span value it is.
    ``hosts[k]``: the plan host span ``k`` ran on the host device by (``PartitionedEntry.
    hosts``), checked under it like a device span's; a host span without one ran on the
    oracle and must match it bit for bit."""
    checks: list[tuple[str, Comparison]] = []
    for k, span in enumerate(spans):
        host = hosts[k] if k < len(hosts) else None
        p = span.plan or host
        feed = {a.name: trace[a.name] for a in span.program.args}
        mine = {n: trace[n] for n in span.program.result_names}
        kind = "device" if span.plan else "host" if host else "oracle"
        where = f"{kind} {span.first}..{span.last}"
        if p is not None:
            found = check_results(p, feed, mine)  # the oracle evaluated once, there
        else:
            want = evaluate(span.program, feed)
            found = tuple((n, compare(mine[n], want[n], BitExact())) for n in want)
        checks.extend((f"{n} ({where})", c) for n, c in found)
    names = value_names(program)
    for name, var in program.results():
        checks.append((name, compare(got[name], trace[names[var.id]], BitExact())))
    return tuple(checks)


def _fraction(mode: VerifyMode) -> float:
    if mode == "off":
        return 0.0
    if mode == "always":
        return 1.0
    if isinstance(mode, int | float) and not isinstance(mode, bool) and 0.0 < mode <= 1.0:
        return float(mode)
    raise EngineError(f"verify must be 'off', 'always' or a fraction in (0, 1], got {mode!r}")


class Verifier:
    """The engine's verified steps: see the module docstring. Entries are keyed by identity
    (the engine's own entry record), held here while poisoned, and with their joint program
    (``step_joint``: built at an entry's first verified step, so every step evaluates one
    compiled program) until the engine forgets them."""

    __slots__ = ("_joints", "_poisoned", "_rng", "fraction", "idle", "steps", "worst_ratio")

    def __init__(self, mode: VerifyMode, seed: int | None = None) -> None:
        self.fraction = _fraction(mode)
        self._rng = random.Random(seed)
        self._poisoned: dict[int, tuple[object, ContractViolation]] = {}
        #: each verified entry's ``step_joint``, built at its first verified step
        self._joints: dict[int, tuple[object, Plan, Joint | None]] = {}
        self.steps = 0
        self.worst_ratio = 0.0
        #: No step is verified and no entry poisoned: ``wants`` is False for every entry (the
        #: engine's step reads this one attribute instead of calling ``wants``).
        self.idle = self.fraction == 0.0

    def wants(self, entry: object) -> bool:
        """Whether this step of ``entry`` is verified; ``EntryPoisoned`` for a poisoned one."""
        if self.fraction == 0.0 and not self._poisoned:  # the common case, first
            return False
        hit = self._poisoned.get(id(entry))
        if hit is not None and hit[0] is entry:
            raise EntryPoisoned(f"this entry breached its contract earlier: {hit[1]}")
        if self.fraction == 0.0:
            return False
        return self.fraction == 1.0 or self._rng.random() < self.fraction

    def check(
        self,
        entry: object,
        p: Plan,
        feed: Mapping[str, np.ndarray],
        got: Mapping[str, np.ndarray],
    ) -> None:
        """Compare one step (before it commits); a breach poisons ``entry`` and raises."""
        checks = check_results(p, feed, got, joint=self._joint(entry, p))
        self.steps += 1
        worst = StepCheck(0, checks).worst
        if worst is None:
            return
        name, c = worst
        self.worst_ratio = max(self.worst_ratio, c.error_ratio)
        if not c.ok:
            err = ContractViolation(name, c.index, c.error, c.allowed, str(c))
            self._poisoned[id(entry)] = (entry, err)
            self.idle = False
            raise err

    def _joint(self, entry: object, p: Plan) -> Joint | None:
        hit = self._joints.get(id(entry))
        if hit is not None and hit[0] is entry and hit[1] is p:
            return hit[2]
        joint = step_joint(p)
        self._joints[id(entry)] = (entry, p, joint)
        return joint

    def step_check(
        self, entry: object, p: Plan | None, feed: Callable[[], Mapping[str, np.ndarray]]
    ) -> Callable[[Mapping[str, np.ndarray]], None]:
        """The verified step's check of ``entry``'s results under ``p`` (none without a plan),
        which the step runs after the results are read and before the commit, when every input
        buffer (``feed``) still holds what this step read."""

        def check(results: Mapping[str, np.ndarray]) -> None:
            if p is not None:
                self.check(entry, p, feed(), results)

        return check

    def forget(self, entry: object) -> None:
        """``entry`` was removed: drop its poison and its joint program."""
        self._poisoned.pop(id(entry), None)
        self._joints.pop(id(entry), None)
        self.idle = self.fraction == 0.0 and not self._poisoned
