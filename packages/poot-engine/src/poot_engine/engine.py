"""``Engine``: weights, entries, record and replay, the host-side checks, deadlines, the cache.

::

    engine = Engine(CpuDevice())                  # cache_dir defaults to the user cache dir
    weights = engine.load_weights({"w": w})       # uploaded once; range-checked on a narrowing target
    entry = engine.add_entry(plan, weights)       # lower, compile or load from cache, load
    entry = engine.add_entry(program, weights)    # the same, planned for the device's target
    part = engine.add_partitioned(plan, weights)  # refused spans on the host device or oracle
    out = engine.step(entry, {"x": x})            # first step records, later steps replay
    engine.reset_state(entry); engine.remove_entry(entry); engine.stats(); engine.close()
    engine.read_state(entry, "k"); engine.write_state(entry, "k", k)  # poot_engine.handoff
    Engine(device, verify="always")               # or 0.01: steps checked against the oracle
    Engine(device, host=HostDevice())             # a partition's host spans compiled there

A partitioned entry's host spans (the equations the target refuses) run on ``host``, a device
of its own (``poot_npu.host.HostDevice``: one compiled graph in F32 on the host CPU), driven
by an engine of its own made here (the same cache, deadline and verify mode; closed with this
one), wherever that device's target admits the span; else, and when ``host`` is None, on the
oracle (``poot_ir.evaluate``). ``add_partitioned(..., host_spans="oracle")`` keeps one entry's
on the oracle. The oracle stays the judge either way (``verify``, ``poot run``).

Each step's host-visible values are checked against the domains of the equations reading them
(``domain``: ``DomainError``, nothing runs); a verified step is compared with the oracle before
it commits (``verify``: ``ContractViolation`` poisons the entry, ``EntryPoisoned`` after).

One engine drives one device and is not thread-safe. After a dispatch misses its deadline the
engine is poisoned (``poot_engine.lifecycle``, as its device is): every later call but
``close`` raises ``DevicePoisoned``, and the failed recording's buffers stay allocated until
``close`` closes the device.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Literal

import numpy as np
from poot_ir import (
    DeadlineExceeded,
    DevicePoisoned,
    EngineError,
    NarrowingRangeUpload,
    Program,
    StateError,
    StepInputError,
    Storage,
    UnknownEntry,
    UnsupportedDevice,
)
from poot_ir.numerics import NumericsClass, looser
from poot_planner import Plan, Span, plan
from poot_planner import partition as partition_program
from poot_planner.targets import get_target

from poot_engine.artifacts import artifact_key, load_artifact
from poot_engine.blob_cache import BlobCache
from poot_engine.checks import bind_weights, check_range, initial_states
from poot_engine.counters import Counters
from poot_engine.deadline import check_deadline
from poot_engine.device import Artifact, ArtifactSource, Buffer, Device
from poot_engine.handles import Entry, Stats, Weights, check_handle, unknown_entry
from poot_engine.handoff import check_state, state_type
from poot_engine.lifecycle import Lifecycle
from poot_engine.live import LiveEntry, make_entry, upload_weights
from poot_engine.partitioned import PartitionedEntry
from poot_engine.verify import Verifier, VerifyMode

__all__ = ["DEFAULT_DEADLINE_S", "Engine", "Entry", "HostSpans", "Stats", "Weights"]

Results = dict[str, np.ndarray]
#: Where a partitioned entry's host spans run: the engine's host device, or the oracle.
HostSpans = Literal["compiled", "oracle"]

DEFAULT_DEADLINE_S = 10.0
_engines = itertools.count(1)


class Engine:
    """Runs programs on ``device``; see the module docstring."""

    def __init__(
        self,
        device: Device,
        cache_dir: Path | str | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
        verify: VerifyMode = "off",
        host: Device | None = None,
    ) -> None:
        if not isinstance(device, Device):
            raise EngineError(f"device must be a poot Device, got a {type(device).__name__}")
        if host is not None and not isinstance(host, Device):
            raise EngineError(f"host must be a poot Device or None, got a {type(host).__name__}")
        self.device = device
        self.deadline_s = check_deadline(deadline_s)
        self._verify = Verifier(verify)  # before anything is opened: a bad mode raises
        self.cache = BlobCache(cache_dir)
        # a device that keeps files of its own (xdna-host's kernel libraries) keeps them here
        device.use_cache(self.cache)
        narrowing = get_target(device.target).narrowing
        #: The largest F32 magnitude the device's narrowing contract holds for, if it has one.
        self.limit: float | None = None if narrowing is None else narrowing.max_magnitude
        self._id = next(_engines)
        self._ids = itertools.count(1)
        self._weights: dict[int, dict[str, Buffer]] = {}
        self._entries: dict[int, LiveEntry] = {}
        self._parts: dict[int, PartitionedEntry] = {}
        self._failed: list[tuple[Buffer, ...]] = []  # kept alive after a missed deadline
        self._life = Lifecycle("the engine")
        self._count = Counters()
        self._stepping = False  # read_state / write_state refuse while a step runs
        self._planned: dict[int, NumericsClass] = {}  # each entry's plan's numerics class
        self._handed: dict[int, NumericsClass] = {}  # the class of states written into it
        self._host_device = host
        self._host: Engine | None = None  # the host device's engine, made at its first span
        self._verify_mode: VerifyMode = verify
        self._cache_dir = cache_dir
        self._unchecked: set[int] = set()  # ids of weight buffers loaded for the host alone

    # -- weights and entries ------------------------------------------------------------------

    def load_weights(
        self, weights: Mapping[str, np.ndarray], *, host_only: Collection[str] = ()
    ) -> Weights:
        """Upload ``weights`` once into device buffers. On a narrowing target each F32 weight is
        range-checked first (``NarrowingRangeUpload`` naming the weight and element), and a
        refused upload leaves nothing on the device. ``host_only`` names weights a plan refused for
        their range (``poot_planner.fp16.constants``) that only a partition's host spans read:
        those are checked instead when an entry that runs on the device binds them."""
        self._usable()
        bufs = upload_weights(self.device, weights, self.limit, host_only)
        self._unchecked.update(id(bufs[n]) for n in host_only if n in bufs)
        handle = Weights(self._id, next(self._ids), tuple(bufs))
        self._weights[handle.id] = bufs
        return handle

    def add_entry(
        self,
        plan: Plan | Program,
        weights: Weights | None = None,
        initial_state: Mapping[str, np.ndarray] | None = None,
    ) -> Entry:
        """The ordinary entry of ``plan`` (a ``Plan`` for the device's target; a ``Program`` is
        planned for it here, once): lowered, its blob loaded (from the cache, or compiled and
        cached), ``weights`` bound to its weight arguments by name. States start at zero, or at
        ``initial_state``. Raises ``PlanRefused`` (every refusal), ``WeightMismatch``,
        ``StepInputError`` (a bad initial state), ``NarrowingRangeInput`` (an initial state
        beyond the range) and ``SignatureMismatch``."""
        self._usable()
        planned = self._plan(plan)
        wbufs = self._weights_of(weights) if weights is not None else {}
        handle = self._add(planned, wbufs, initial_state or {})
        self._planned[handle.id] = planned.numerics
        return handle

    def add_partitioned(
        self,
        plan: Plan | Program,
        weights: Weights | None = None,
        initial_state: Mapping[str, np.ndarray] | None = None,
        *,
        host_spans: HostSpans = "compiled",
    ) -> Entry:
        """``add_entry``, but a plan that refuses a part runs its refused spans on the host
        (``poot_engine.partitioned``): the engine cuts it into spans once
        (``poot_planner.partition``, with the device's ``traits``), each device span loaded
        from the plan it carries, each host span on the engine's host device where its target
        admits it (``host_spans="compiled"``, the default; ``"oracle"``: every host span on the
        oracle); ``partitioned(entry)`` gives the spans. An admitted plan gets the ordinary
        entry. Raises as ``add_entry`` does."""
        self._usable()
        if host_spans not in ("compiled", "oracle"):
            raise EngineError(f"host_spans is 'compiled' or 'oracle', not {host_spans!r}")
        planned = self._plan(plan)
        if planned.admitted:
            return self.add_entry(planned, weights, initial_state)
        wbufs = self._weights_of(weights) if weights is not None else {}
        on_host = host_spans == "compiled" and self._host_device is not None
        part = self._add_partitioned(planned, wbufs, initial_state or {}, on_host)
        handle = Entry(self._id, next(self._ids), planned.source.name)
        self._parts[handle.id] = part
        self._planned[handle.id] = planned.numerics
        return handle

    def _plan(self, program: Program | Plan) -> Plan:
        if isinstance(program, Plan):
            if program.target.name != self.device.target:
                raise EngineError(
                    f"a plan for {program.target.name!r} given to an engine whose device runs "
                    f"{self.device.target!r}"
                )
            return program
        given: object = program  # callers outside mypy pass text or a dict
        if not isinstance(given, Program):
            kind = type(given).__name__
            raise EngineError(f"an entry is made of a Plan or a Program, got a {kind}")
        self._count.plans += 1
        return plan(program, self.device.target)

    def _add(
        self, planned: Plan, wbufs: Mapping[str, Buffer], initial_state: Mapping[str, np.ndarray]
    ) -> Entry:
        """The ordinary entry of a plan, bound to exactly the weight buffers ``wbufs``."""
        if planned.score_bound and not self.device.traits.checks_score_bound:
            # the prelude's -2^15 mask is right only where the device checks the scores
            raise UnsupportedDevice(
                self.device.identity.part, "a plan whose score-bound guard it does not check"
            )
        planned.check()  # a refused plan says so first, not the weight it refused
        for name, buf in wbufs.items():  # a weight left to the host: never a device's input
            if id(buf) in self._unchecked:
                check_range(NarrowingRangeUpload, name, self.device.read(buf), self.limit)
        e = make_entry(self.device, planned, wbufs, initial_state, self.limit, self._load)
        self._count.lowerings += 1
        handle = Entry(self._id, next(self._ids), e.program.name)
        self._entries[handle.id] = e
        return handle

    def _add_partitioned(
        self,
        planned: Plan,
        wbufs: Mapping[str, Buffer],
        initial_state: Mapping[str, np.ndarray],
        on_host: bool = False,
    ) -> PartitionedEntry:
        """The partitioned entry of a refused plan: each device span an ordinary sub-entry bound
        to the subset of ``wbufs`` it reads, loaded from the plan its span carries; with
        ``on_host``, each host span the host device's target admits a sub-entry there."""

        program = planned.source
        bind_weights(program, {n: b.type for n, b in wbufs.items()})  # exactly the program's
        states = initial_states(program, initial_state, self.limit)
        guard = self.device.traits.checks_score_bound
        spans = partition_program(program, self.device.target, planned, score_guard=guard)

        def add_sub(span: Span) -> Entry:
            names = [a.name for a in span.program.args if a.storage is Storage.WEIGHT]
            sub = span.plan if span.plan is not None else self._plan(span.program)
            return self._add(sub, {n: wbufs[n] for n in names}, {})

        def read(name: str) -> np.ndarray:
            return self.device.read(wbufs[name])

        add_host = self._add_host if on_host else None
        return PartitionedEntry.build(
            program, spans, read, states, add_sub, self.remove_entry, add_host
        )

    def _host_engine(self) -> Engine:
        """The host device's engine, made at the first host span it runs."""
        assert self._host_device is not None
        if self._host is None:
            self._host = Engine(
                self._host_device, self._cache_dir, self.deadline_s, self._verify_mode
            )
        return self._host

    def _add_host(self, span: Span, weights: Mapping[str, np.ndarray]) -> tuple[Entry, Plan] | None:
        """A host span as a sub-entry of the host device's engine, with the weights it reads,
        or None when that device's target refuses any of it (the oracle runs it)."""
        assert self._host_device is not None
        p = plan(span.program, self._host_device.target)
        if not p.admitted:
            return None
        host = self._host_engine()
        names = [a.name for a in span.program.args if a.storage is Storage.WEIGHT]
        handle = host.load_weights({n: weights[n] for n in names})
        return host.add_entry(p, handle), p

    def partitioned(self, entry: Entry) -> PartitionedEntry | None:
        """The spans, sub-entries and last step's boundary values of a partitioned entry."""
        check_handle(entry, Entry, "entry")
        return self._parts.get(entry.id) if entry.engine == self._id else None

    def reset_state(self, entry: Entry) -> None:
        """Restore every state of ``entry`` to its initial value."""
        self._usable()
        check_handle(entry, Entry, "entry")
        self._handed.pop(entry.id, None)
        if (part := self.partitioned(entry)) is not None:
            return part.reset()
        self._entry(entry).write_states(self.device)

    def remove_entry(self, entry: Entry) -> None:
        """Unload the entry's artifact and free its buffers (not the weights it bound); a
        partitioned entry removes its sub-entries."""
        self._usable()
        check_handle(entry, Entry, "entry")
        part = self._parts.pop(entry.id, None) if entry.engine == self._id else None
        if part is not None:
            self._handed.pop(entry.id, None)
            for sub in part.subs:
                if sub is not None:
                    self.remove_entry(sub)
            for sub in part.host_subs:
                if sub is not None and self._host is not None:
                    self._host.remove_entry(sub)
            return
        e = self._entry(entry)
        del self._entries[entry.id]
        self._verify.forget(e)
        self._handed.pop(entry.id, None)
        e.release(self.device)

    # -- steps ---------------------------------------------------------------------------------

    def step(self, entry: Entry, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one step: the outputs, then each updated state, by name, as fresh arrays.

        Before anything runs: the inputs against the slot arguments (``StepInputError``), on a
        narrowing target every F32 input against the range (``NarrowingRangeInput``), and each
        window an I32 argument places (``WindowOutOfRange``). After the run, before any state
        changes: every F32 result against the range (``NarrowingRangeResult``). A partitioned
        step is one step (``poot_engine.partitioned``); an ordinary one is
        ``poot_engine.live``."""
        t0 = perf_counter()
        if not self._life.usable:
            self._life.check()
        given: object = inputs  # callers outside mypy pass a list or None
        if type(given) is not dict and not isinstance(given, Mapping):
            kind = type(given).__name__
            raise StepInputError(f"step inputs must map slot names to arrays, got a {kind}")
        if type(entry) is not Entry:
            check_handle(entry, Entry, "entry")
        e = self._entries.get(entry.id) if entry.engine == self._id else None
        self._stepping = True
        try:
            if e is not None:
                results, device_s = self._run(e, inputs)
            elif (part := self.partitioned(entry)) is not None:
                results, device_s = part.step(
                    inputs, lambda h, x: self._run(self._entry(h), x), self._run_host
                )
            else:
                raise unknown_entry(entry)
        finally:
            self._stepping = False
        c = self._count
        c.steps += 1
        c.device_s += device_s
        c.host_s += perf_counter() - t0 - device_s
        return results

    def _run_host(self, entry: Entry, inputs: Mapping[str, np.ndarray]) -> tuple[Results, float]:
        """One step of a host span's sub-entry on the host device's engine."""
        assert self._host is not None
        host = self._host
        e = host._entry(entry)
        try:
            return host._run(e, inputs)
        except (DeadlineExceeded, DevicePoisoned):
            self._life.poison()  # this engine's step missed its deadline on the host device
            raise

    def _run(self, e: LiveEntry, inputs: Mapping[str, np.ndarray]) -> tuple[Results, float]:
        v = self._verify
        verify = None if v.idle or not v.wants(e) else self._verification(e)
        try:
            return e.step(self.device, inputs, self.deadline_s, self.limit, verify, self._count)
        except (DeadlineExceeded, DevicePoisoned):
            self._poison(e)
            raise

    def _poison(self, e: LiveEntry) -> None:
        """A dispatch of ``e`` missed its deadline: the engine is poisoned, and the buffers of
        the failed step stay alive until ``close``."""
        self._life.poison()
        if e.recording is not None:
            self._failed.append(e.recording.buffers)

    def stats(self) -> Stats:
        return self._count.stats(self._verify.steps, self._verify.worst_ratio)

    # -- states: read, written, handed over (poot_engine.handoff has the rules) ----------------

    def program(self, entry: Entry) -> Program:
        """The program ``entry`` runs (as its target runs it; a partitioned entry's source)."""
        self._usable()
        part = self.partitioned(entry)
        return part.program if part is not None else self._entry(entry).program

    def numerics(self, entry: Entry) -> NumericsClass:
        """The numerics class of the entry's results: its plan's, loosened by the class of any
        state handed into it since it was made or reset (an FP16 source: ``NarrowStorage``)."""
        self.program(entry)
        handed = self._handed.get(entry.id)
        planned = self._planned[entry.id]
        return planned if handed is None else looser(planned, handed)

    def read_state(self, entry: Entry, name: str) -> np.ndarray:
        """A fresh host copy of the state ``name`` as the last step (or write) left it
        (``poot_engine.handoff`` has the rules)."""
        state_type(self, entry, name)
        part = self.partitioned(entry)  # its states live on the host
        if part is not None:
            value = part.states[name].copy()
        else:
            value = self.device.read(self._entry(entry).buffers[name])
        self._count.reads += 1
        self._count.bytes_read += value.nbytes
        return value

    def write_state(
        self, entry: Entry, name: str, value: np.ndarray, *, numerics: NumericsClass | None = None
    ) -> None:
        """Make ``value`` the state ``name`` of ``entry``, checked like an upload first.
        ``numerics``: the class the value carries from where it was computed."""
        arr = check_state(self, entry, name, value)
        if (part := self.partitioned(entry)) is not None:
            part.states[name] = arr
        else:
            self._entry(entry).write_state(self.device, name, arr)
        if numerics is not None:
            had = self._handed.get(entry.id)
            self._handed[entry.id] = numerics if had is None else looser(had, numerics)
        self._count.writes += 1
        self._count.bytes_written += arr.nbytes

    def between_steps(self, name: str) -> None:
        """Raise unless states may move now: ``DeviceFailed`` (closed), ``DevicePoisoned``,
        or ``StateError`` naming the state ``name`` while a step of this engine runs."""
        self._usable()
        if self._stepping:
            raise StateError("a step of this engine is running; states move between steps", name)

    def close(self) -> None:
        """Close the device, releasing every buffer (a failed recording's too). Idempotent."""
        if not self._life.close():
            return
        self._entries.clear()
        self._parts.clear()
        self._weights.clear()
        self._failed.clear()
        if self._host is not None:
            self._host.close()
        elif self._host_device is not None:
            self._host_device.close()
        self.device.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _usable(self) -> None:
        self._life.check()

    def _entry(self, entry: Entry) -> LiveEntry:
        check_handle(entry, Entry, "entry")
        e = self._entries.get(entry.id) if entry.engine == self._id else None
        if e is None:
            raise unknown_entry(entry)
        return e

    def _weights_of(self, weights: Weights) -> dict[str, Buffer]:
        check_handle(weights, Weights, "weights")
        w = self._weights.get(weights.id) if weights.engine == self._id else None
        if w is None:
            raise UnknownEntry(f"weights {weights.id} were not loaded by this engine")
        return w

    def _verification(self, e: LiveEntry) -> Callable[[Mapping[str, np.ndarray]], None]:
        return self._verify.step_check(e, e.plan, partial(e.read_inputs, self.device))

    def _load(self, source: ArtifactSource) -> Artifact:
        artifact, fetch = load_artifact(self.cache, self.device, source)
        self._count.loaded(fetch)
        return artifact

    def cache_key(self, source: ArtifactSource) -> str:
        """The blob-cache key of ``source`` on this engine's device."""
        return artifact_key(self.device, source)
