"""Host-side domain guards: every value the host sees before a run, against the domain of each
equation that reads it.

``poot_planner.guards`` decides where each operand's domain is enforced; the ``HOST`` guards are
this module's: an argument (an input, a weight or a state) an equation reads directly. Weights
are checked once, when an entry binds them; the initial states when the entry is made and when
it is reset; inputs before every step; a state before every step too, from the host's copy of
the value the last committed step left (the engine read it as a result). A value outside raises
``DomainError`` naming the argument, the first element outside, the equation and the domain,
before anything runs. A gather's indices that are an argument are checked against the axis the
same way (the device does not check them).

On a narrowing target (intel-npu4) an F32 argument that ``sqrt`` or ``log`` reads directly is
also checked for an element whose FP16 rounding crosses that function's domain edge at 0 (an
``edge`` guard): a tiny negative before sqrt (the oracle's NaN; FP16 makes it -0, whose root is
-0) or a tiny positive before log (the oracle's finite log; FP16 makes it 0, whose log is
-inf). Such an input, weight or state is refused before the run (``DomainError`` naming the
element and what FP16 makes of it), rather than answered for the rounded input.

Each check is one vectorized pass over the array per (argument, domain) pair; an argument read
by several equations under the same domain is checked once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from poot_ir import DomainError, DType, GatherParams, Prim, Storage, Var
from poot_ir.numerics import Domain, FiniteInputs
from poot_planner import KernelClass, Plan
from poot_planner.guards import Site

from poot_engine.checks import within

__all__ = ["EntryDomains", "HostGuard", "entry_domains"]

#: the largest magnitude FP16 rounds to zero (2^-25: half the smallest subnormal, a tie to the
#: even zero)
_FLUSHED = 2.0**-25


@dataclass(frozen=True, slots=True)
class HostGuard:
    """``argument`` against ``domain`` (or, for gather indices, against ``[-size, size)``), for
    equation ``eqn`` (``primitive``): the first equation that needs it."""

    argument: str
    eqn: int
    primitive: str
    domain: Domain | None = None
    size: int = 0
    #: the function (sqrt or log) whose domain edge at 0 FP16's rounding must not cross
    edge: Prim | None = None

    def check(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        if self.edge is not None:
            self._check_edge(x)
            return
        if self._fast_inside(x):
            return
        if self.domain is None:
            bad = (x < -self.size) | (x >= self.size)
            what = f"an index in [{-self.size}, {self.size})"
        else:
            # an argument is an operand: a domain's constraint on a result is not its own
            d = FiniteInputs() if self.domain.on_result else self.domain
            bad = ~d.inside((x,), x)
            what = self.domain.describe()
        if bad.any():
            flat = int(np.argmax(bad))
            at = tuple(int(i) for i in np.unravel_index(flat, x.shape))
            value = x.reshape(-1)[flat]
            raise DomainError(self.argument, at, float(value), self.eqn, self.primitive, what)

    def _check_edge(self, x: np.ndarray) -> None:
        """Refuse an element FP16 rounds to zero from the side of 0 where the function is other
        than at zero: a negative before sqrt, a positive before log (``_FLUSHED`` and below)."""
        with np.errstate(over="ignore"):
            tiny = (x != 0) & (np.abs(x) <= _FLUSHED)
        if not tiny.any():
            return
        crosses = tiny & ((x < 0) if self.edge is Prim.SQRT else (x > 0))
        if not crosses.any():
            return
        flat = int(np.argmax(crosses))
        at = tuple(int(i) for i in np.unravel_index(flat, x.shape))
        value = float(x.reshape(-1)[flat])
        side = "x >= 0" if self.edge is Prim.SQRT else "x > 0"
        what = (
            f"{side}: FP16 rounds {value!r} to {float(np.float16(value))!r}, across the edge at 0"
        )
        raise DomainError(self.argument, at, value, self.eqn, self.primitive, what)

    def implied_by_range(self, limit: float) -> bool:
        """Whether an F32 value that passed the narrowing range check (every element within
        ``limit`` in magnitude, no NaN) is inside this guard's domain without looking again."""
        if self.domain is None:  # gather indices and FP16 edges: not implied
            return False
        b = self.domain.bounds(DType.F32)
        return b.lo <= -limit and limit <= b.hi

    def _fast_inside(self, x: np.ndarray) -> bool:
        """Every domain is a closed interval, NaN inside or not (``Domain.bounds``): two
        reductions decide it (a NaN makes the minimum NaN, and a comparison with NaN is
        false). Only a refusal pays for ``Domain.inside`` and finding the element (as does a
        float type numpy has no limits for)."""
        if self.domain is None:
            return within(x, -self.size, self.size - 1)
        if x.dtype.kind != "f":
            return False
        b = self.domain.bounds(x.dtype)
        if b.anything:
            return True
        if x.dtype == np.float16:
            # numpy's half reductions are scalar loops: the magnitude bits, as integers, are
            # ordered as the magnitudes are (0x7c00 is infinity, above it NaN)
            top = int(np.bitwise_and(x.view(np.uint16), 0x7FFF, dtype=np.uint16).max())
            if b.finite:
                return top < 0x7C00
            return b.not_nan and top <= 0x7C00
        return within(x, b.lo, b.hi)


class EntryDomains:
    """An entry's host guards and its host copies of the guarded states."""

    __slots__ = ("_boxes", "_slots", "_states", "mirrors")

    def __init__(self, by_arg: Mapping[str, tuple[HostGuard, ...]], states: set[str]) -> None:
        self._slots = {n: g for n, g in by_arg.items() if n not in states}
        self._states = {n: g for n, g in by_arg.items() if n in states}
        self.mirrors: dict[str, np.ndarray] = {}
        # per (input, dtype): the interval every guard of the input holds it to (``_box``)
        self._boxes: dict[tuple[str, np.dtype], tuple[float, float] | None] = {}

    def drop_implied(self, ranged: Mapping[str, float]) -> None:
        """Drop the guards of the slots in ``ranged`` (each range-checked against its limit
        before every step, and before this check) that the range check implies."""
        for name, limit in ranged.items():
            kept = tuple(g for g in self._slots.get(name, ()) if not g.implied_by_range(limit))
            if kept:
                self._slots[name] = kept
            else:
                self._slots.pop(name, None)

    @property
    def active(self) -> bool:
        """Whether anything is left to check or mirror."""
        return bool(self._slots or self._states)

    def check(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Before a step: the guarded inputs among ``inputs`` and the guarded states. An input
        that several guards read is first held to the intersection of their intervals, one
        pass (what every step of a tiny model paid three times over); only an input outside
        it goes through each guard, which finds and names the element."""
        for name, gs in self._slots.items():
            x = inputs.get(name)
            if x is None or x.size == 0:
                continue
            key = (name, x.dtype)
            box = (
                self._boxes[key]
                if key in self._boxes
                else self._boxes.setdefault(key, _box(gs, x.dtype))
            )
            if box is not None and within(x, *box):
                continue
            for g in gs:
                g.check(x)
        for name, gs in self._states.items():
            for g in gs:
                g.check(self.mirrors[name])

    def reset(self, initial: Mapping[str, np.ndarray]) -> None:
        """The states start (again) at ``initial``: checked now, mirrored for later steps."""
        for name, gs in self._states.items():
            for g in gs:
                g.check(initial[name])
        self.mirrors = {n: initial[n].copy() for n in self._states}

    def write(self, name: str, value: np.ndarray) -> None:
        """The state ``name`` is about to be written (``Engine.write_state``): checked first."""
        for g in self._states.get(name, ()):
            g.check(value)
        if name in self._states:
            self.mirrors[name] = value.copy()

    def committed(self, results: Mapping[str, np.ndarray]) -> None:
        """A step committed: its state updates are the states the next step reads."""
        for name in self._states:
            self.mirrors[name] = results[name].copy()


def _box(guards: tuple[HostGuard, ...], dtype: np.dtype) -> tuple[float, float] | None:
    """The interval inside every one of ``guards``' domains at ``dtype`` (each domain is a
    closed interval there: ``HostGuard._fast_inside``), or None when some guard needs its own
    look: gather indices, an FP16 edge, F16 values (numpy's half reductions are scalar loops)
    or integer ones. A NaN is never within it, so a domain that admits NaN sees it itself."""
    if dtype.kind != "f" or dtype == np.float16:
        return None
    lo, hi = -np.inf, np.inf
    for g in guards:
        if g.domain is None or g.edge is not None:
            return None
        b = g.domain.bounds(dtype)
        if not b.anything:
            lo, hi = max(lo, b.lo), min(hi, b.hi)
    return float(lo), float(hi)


def _host_guards(plan: Plan) -> dict[str, tuple[HostGuard, ...]]:
    found: dict[str, dict[object, HostGuard]] = {}
    for g in plan.guards:
        if g.site is Site.HOST and g.argument is not None:
            found.setdefault(g.argument, {}).setdefault(
                g.domain, HostGuard(g.argument, g.eqn, g.primitive.value, g.domain)
            )
    args = {a.var.id: a.name for a in plan.program.args}
    for i, e in enumerate(plan.program.eqns):
        if e.prim is not Prim.GATHER or not isinstance(e.params, GatherParams):
            continue
        idx = e.inputs[1]
        cap = plan.target.capability(e.prim, e.inputs[0].dtype)
        # the oracle checks its own indices, and the XDNA2 design its host-passed ones
        # (``poot_codegen.xdna.execute.check_indices``, the oracle's IndexOutOfRange)
        if cap is None or cap.kernel in (KernelClass.ORACLE, KernelClass.GATHER):
            continue
        if isinstance(idx, Var) and idx.id in args:
            size = e.inputs[0].type.shape[e.params.axis]
            name = args[idx.id]
            found.setdefault(name, {}).setdefault(
                ("index", size), HostGuard(name, i, "gather", None, size)
            )
    if plan.narrowing is not None:  # FP16's rounding across sqrt's and log's edge at 0
        source_args = {a.var.id: a.name for a in plan.source.args if a.var.dtype is DType.F32}
        for i, e in enumerate(plan.source.eqns):
            x = e.inputs[0] if e.inputs else None
            if e.prim in (Prim.SQRT, Prim.LOG) and isinstance(x, Var) and x.id in source_args:
                name = source_args[x.id]
                found.setdefault(name, {}).setdefault(
                    ("edge", e.prim), HostGuard(name, i, e.prim.value, edge=e.prim)
                )
    return {n: tuple(gs.values()) for n, gs in found.items()}


def entry_domains(
    plan: Plan, weight: Callable[[str], np.ndarray], initial: Mapping[str, np.ndarray]
) -> EntryDomains | None:
    """The host guards of ``plan``'s program, its weights (read with ``weight``) and initial
    states checked now; None when it has none (every domain is ``AnyInput``, as on the CPU)."""
    by_arg = _host_guards(plan)
    if not by_arg:
        return None
    storage = {a.name: a.storage for a in plan.program.args}
    for name, gs in by_arg.items():
        if storage[name] is Storage.WEIGHT:
            value = weight(name)
            for g in gs:
                g.check(value)
    states = {n for n in by_arg if storage[n] is Storage.STATE}
    domains = EntryDomains(
        {n: g for n, g in by_arg.items() if storage[n] is not Storage.WEIGHT}, states
    )
    domains.reset(initial)
    return domains
