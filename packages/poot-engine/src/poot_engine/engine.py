"""``Engine``: weights, entries, record and replay, the host-side checks, deadlines, the cache.

::

    engine = Engine(CpuDevice())                  # cache_dir defaults to the user cache dir
    weights = engine.load_weights({"w": w})       # uploaded once; range-checked on a narrowing target
    entry = engine.add_entry(program, weights)    # plan, lower, compile or load from cache, load
    part = engine.add_entry(program, weights, partition=True)  # refused spans on the oracle
    out = engine.step(entry, {"x": x})            # first step records, later steps replay
    engine.reset_state(entry); engine.remove_entry(entry); engine.stats(); engine.close()
    engine.read_state(entry, "k"); engine.write_state(entry, "k", k)  # poot_engine.handoff

One engine drives one device and is not thread-safe. After a dispatch misses its deadline the
engine is poisoned: every later call but ``close`` raises ``DevicePoisoned``, and the failed
recording's buffers stay allocated until ``close`` closes the device.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

import numpy as np
from poot_ir import (
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    DType,
    EngineError,
    NarrowingRangeInput,
    NarrowingRangeResult,
    NarrowingRangeUpload,
    Program,
    StepInputError,
    Storage,
    TensorType,
    UnknownEntry,
    WeightMismatch,
)
from poot_ir.numerics import NumericsClass, looser
from poot_ir.oracle import exact_array
from poot_planner import Plan, plan
from poot_planner.targets import get_target

from poot_engine.artifacts import Fetch, artifact_key, load_artifact
from poot_engine.blob_cache import BlobCache
from poot_engine.checks import (
    WindowCheck,
    bind_weights,
    check_range,
    check_signature,
    check_step_inputs,
    check_windows,
    window_checks,
)
from poot_engine.device import Artifact, ArtifactSource, Buffer, Device, signature_of
from poot_engine.handoff import read_state, write_state
from poot_engine.partitioned import PartitionedEntry, load_partitioned
from poot_engine.recording import Recording, record, replay

__all__ = ["DEFAULT_DEADLINE_S", "Engine", "Entry", "Stats", "Weights"]

Results = dict[str, np.ndarray]

DEFAULT_DEADLINE_S = 10.0
_engines = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Weights:
    """A handle to weights uploaded by ``Engine.load_weights``."""

    engine: int
    id: int
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """A handle to a loaded program (``Engine.add_entry``)."""

    engine: int
    id: int
    program: str


@dataclass(frozen=True, slots=True)
class Stats:
    """Counters since the engine was made. ``recordings`` counts first steps (which record and
    run), ``replays`` the later steps; ``host_s_per_step`` is the mean time a step spent in the
    engine outside the device's dispatches, ``device_s_per_step`` inside them (seconds).
    ``state_reads`` / ``state_writes`` count ``read_state`` / ``write_state`` calls (a handoff
    makes one of each per state), with the bytes they moved."""

    compiles: int
    cache_hits: int
    cache_repairs: int
    recordings: int
    replays: int
    steps: int
    host_s_per_step: float
    device_s_per_step: float
    state_reads: int = 0
    state_writes: int = 0
    state_bytes_read: int = 0
    state_bytes_written: int = 0


@dataclass(slots=True)
class _Entry:
    program: Program  # as the target runs it
    artifact: Artifact
    slots: tuple[tuple[str, TensorType], ...]
    buffers: dict[str, Buffer]  # every input argument (weights bound, slots, states)
    outputs: dict[str, Buffer]  # every result
    initial: dict[str, np.ndarray]  # each state's initial value
    windows: tuple[WindowCheck, ...]
    mirrors: dict[str, np.ndarray] = field(default_factory=dict)  # states a window reads
    recording: Recording | None = None


class Engine:
    """Runs programs on ``device``; see the module docstring."""

    def __init__(
        self,
        device: Device,
        cache_dir: Path | str | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        if not isinstance(device, Device):
            raise EngineError(f"device must be a poot Device, got a {type(device).__name__}")
        if isinstance(deadline_s, bool) or not isinstance(deadline_s, int | float):
            raise EngineError(f"deadline_s must be a number of seconds, got {deadline_s!r}")
        if not deadline_s > 0:
            raise EngineError(
                f"deadline_s must be a positive number of seconds, got {deadline_s!r}"
            )
        self.device = device
        self.deadline_s = deadline_s
        self.cache = BlobCache(cache_dir)
        # a device that keeps files of its own (xdna-host's kernel libraries) keeps them here
        use_cache = getattr(device, "use_cache", None)
        if callable(use_cache):
            use_cache(self.cache)
        narrowing = get_target(device.target).narrowing
        #: The largest F32 magnitude the device's narrowing contract holds for, if it has one.
        self.limit: float | None = None if narrowing is None else narrowing.max_magnitude
        self._id = next(_engines)
        self._ids = itertools.count(1)
        self._weights: dict[int, dict[str, Buffer]] = {}
        self._entries: dict[int, _Entry] = {}
        self._parts: dict[int, PartitionedEntry] = {}
        self._failed: list[tuple[Buffer, ...]] = []  # kept alive after a missed deadline
        self._poisoned = False
        self._closed = False
        self._counts = dict.fromkeys(("compiles", "hits", "repairs", "recordings", "replays"), 0)
        self._states = dict.fromkeys(("reads", "writes", "read", "written"), 0)
        self._stepping = False  # read_state / write_state refuse while a step runs
        self._planned: dict[int, NumericsClass] = {}  # each entry's plan's numerics class
        self._handed: dict[int, NumericsClass] = {}  # the class of states written into it
        self._steps = 0
        self._host_s = 0.0
        self._device_s = 0.0

    # -- weights and entries ------------------------------------------------------------------

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> Weights:
        """Upload ``weights`` once into device buffers. On a narrowing target each F32 weight is
        range-checked first (``NarrowingRangeUpload`` naming the weight and element), and a
        refused upload leaves nothing on the device."""
        self._usable()
        given: object = weights  # callers outside mypy pass a list
        if not isinstance(given, Mapping):
            kind = type(given).__name__
            raise WeightMismatch(f"weights must map names to arrays, got a {kind}", "(all)")
        arrays = {}
        for name, value in weights.items():
            if not isinstance(value, np.ndarray | np.generic):
                raise WeightMismatch(f"expected a numpy array, got {type(value).__name__}", name)
            arr = np.asarray(value)
            check_range(NarrowingRangeUpload, name, arr, self.limit)
            arrays[name] = arr
        bufs: dict[str, Buffer] = {}
        for name, arr in arrays.items():
            dtype = DType.from_numpy(arr.dtype)
            if dtype is None:
                self._free_all(bufs.values())
                raise WeightMismatch(f"dtype {arr.dtype} is no poot dtype", name)
            bufs[name] = buf = self.device.allocate(TensorType(arr.shape, dtype))
            self.device.write(buf, arr)
        handle = Weights(self._id, next(self._ids), tuple(bufs))
        self._weights[handle.id] = bufs
        return handle

    def add_entry(
        self,
        program: Program,
        weights: Weights | None = None,
        initial_state: Mapping[str, np.ndarray] | None = None,
        *,
        partition: bool = False,
        planned: Plan | None = None,
    ) -> Entry:
        """Plan ``program`` for the device's target, lower it, load its blob (from the cache,
        or compiled and cached) and bind ``weights`` to its weight arguments by name. States
        start at zero, or at ``initial_state``. Raises ``PlanRefused`` (every refusal),
        ``WeightMismatch``, ``StepInputError`` (a bad initial state), ``NarrowingRangeInput``
        (an initial state beyond the range) and ``SignatureMismatch``. With ``partition`` a
        program the target refuses in part runs its refused spans on the host oracle
        (``poot_engine.partitioned``); an admitted one gets the ordinary entry. ``planned``: a
        caller's plan of this very program, so that it is planned once."""
        self._usable()
        if planned is None or planned.source is not program:
            planned = plan(program, self.device.target)
        if partition and not planned.admitted:
            handle = Entry(self._id, next(self._ids), program.name)
            self._parts[handle.id] = load_partitioned(self, program, weights, initial_state or {})
            self._planned[handle.id] = planned.numerics
            return handle
        planned.check()
        prog = planned.program
        wbufs = self._weights_of(weights) if weights is not None else {}
        wnames = bind_weights(prog, {n: b.type for n, b in wbufs.items()})
        initial = self._initial_states(prog, initial_state or {})
        expected = signature_of(prog)
        source = self.device.lower(planned)
        check_signature(expected, source.signature, "the lowered artifact")
        artifact = self._load(source)
        buffers = {n: wbufs[n] for n in wnames}
        outputs: dict[str, Buffer] = {}
        try:
            for arg in prog.args:
                if arg.storage is not Storage.WEIGHT:
                    buffers[arg.name] = self.device.allocate(arg.var.type)
            for name, var in prog.results():
                outputs[name] = self.device.allocate(var.type)
        except BaseException:
            self._free_all(b for n, b in buffers.items() if n not in wnames)
            self._free_all(outputs.values())
            self.device.unload(artifact)
            raise
        slots = tuple((a.name, a.var.type) for a in prog.args if a.storage is Storage.SLOT)
        e = _Entry(prog, artifact, slots, buffers, outputs, initial, window_checks(prog))
        self._write_states(e)
        handle = Entry(self._id, next(self._ids), prog.name)
        self._entries[handle.id] = e
        self._planned[handle.id] = planned.numerics
        return handle

    def partitioned(self, entry: Entry) -> PartitionedEntry | None:
        """The spans, sub-entries and last step's boundary values of a partitioned entry."""
        _handle(entry, Entry, "entry")
        return self._parts.get(entry.id) if entry.engine == self._id else None

    def reset_state(self, entry: Entry) -> None:
        """Restore every state of ``entry`` to its initial value."""
        self._usable()
        _handle(entry, Entry, "entry")
        self._handed.pop(entry.id, None)
        if (part := self.partitioned(entry)) is not None:
            return part.reset()
        self._write_states(self._entry(entry))

    def remove_entry(self, entry: Entry) -> None:
        """Unload the entry's artifact and free its buffers (not the weights it bound); a
        partitioned entry removes its sub-entries."""
        self._usable()
        _handle(entry, Entry, "entry")
        part = self._parts.pop(entry.id, None) if entry.engine == self._id else None
        if part is not None:
            self._handed.pop(entry.id, None)
            for sub in part.subs:
                if sub is not None:
                    self.remove_entry(sub)
            return
        e = self._entry(entry)
        del self._entries[entry.id]
        self._handed.pop(entry.id, None)
        weights = {a.name for a in e.program.args if a.storage is Storage.WEIGHT}
        owned = [b for n, b in e.buffers.items() if n not in weights]
        self._free_all([*owned, *e.outputs.values()])
        self.device.unload(e.artifact)

    # -- steps ---------------------------------------------------------------------------------

    def step(self, entry: Entry, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one step: the outputs, then each updated state, by name, as fresh arrays.

        Before anything runs: the inputs against the slot arguments (``StepInputError``), on a
        narrowing target every F32 input against the range (``NarrowingRangeInput``), and each
        window an I32 argument places (``WindowOutOfRange``). After the run, before any state
        changes: every F32 result against the range (``NarrowingRangeResult``). A partitioned
        step is one step (``poot_engine.partitioned``)."""
        t0 = perf_counter()
        self._usable()
        given: object = inputs  # callers outside mypy pass a list or None
        if not isinstance(given, Mapping):
            kind = type(given).__name__
            raise StepInputError(f"step inputs must map slot names to arrays, got a {kind}")
        self._stepping = True
        try:
            if (part := self.partitioned(entry)) is not None:
                results, device_s = part.step(inputs, lambda h, x: self._run(self._entry(h), x))
            else:
                results, device_s = self._run(self._entry(entry), inputs)
        finally:
            self._stepping = False
        self._steps += 1
        self._device_s += device_s
        self._host_s += perf_counter() - t0 - device_s
        return results

    def _run(self, e: _Entry, inputs: Mapping[str, np.ndarray]) -> tuple[Results, float]:
        checked = check_step_inputs(e.program, e.slots, inputs)
        arrays = {name: arr for (name, _), arr in zip(e.slots, checked, strict=True)}
        rec = e.recording
        if rec is None:
            updates = tuple(u.state for u in e.program.updates)
            rec = record(e.artifact, e.buffers, e.outputs, tuple(arrays), updates)
        if self.limit is not None:
            for name in rec.input_checks:
                check_range(NarrowingRangeInput, name, arrays[name], self.limit)
        if e.windows:
            check_windows(e.windows, {**e.mirrors, **arrays})
        if e.recording is None:
            e.recording = rec
            self._counts["recordings"] += 1
        else:
            self._counts["replays"] += 1
        try:
            results, device_s = replay(
                self.device, rec, arrays, self.deadline_s, self._result_checker(rec)
            )
        except (DeadlineExceeded, DevicePoisoned):
            self._poisoned = True
            self._failed.append(rec.buffers)
            raise
        for name in e.mirrors:
            e.mirrors[name] = results[name].copy()
        return results, device_s

    def stats(self) -> Stats:
        steps = max(self._steps, 1)
        c = self._counts
        return Stats(
            compiles=c["compiles"],
            cache_hits=c["hits"],
            cache_repairs=c["repairs"],
            recordings=c["recordings"],
            replays=c["replays"],
            steps=self._steps,
            host_s_per_step=self._host_s / steps,
            device_s_per_step=self._device_s / steps,
            state_reads=self._states["reads"],
            state_writes=self._states["writes"],
            state_bytes_read=self._states["read"],
            state_bytes_written=self._states["written"],
        )

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
        """A fresh host copy of the state ``name`` as the last step (or write) left it."""
        return read_state(self, entry, name)

    def write_state(
        self, entry: Entry, name: str, value: np.ndarray, *, numerics: NumericsClass | None = None
    ) -> None:
        """Make ``value`` the state ``name`` of ``entry``, checked like an upload first.
        ``numerics``: the class the value carries from where it was computed."""
        write_state(self, entry, name, value, numerics)

    def close(self) -> None:
        """Close the device, releasing every buffer (a failed recording's too). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._entries.clear()
        self._parts.clear()
        self._weights.clear()
        self._failed.clear()
        self.device.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _usable(self) -> None:
        if self._closed:
            raise DeviceFailed("the engine is closed")
        if self._poisoned:
            raise DevicePoisoned(
                "a dispatch missed its deadline earlier; the device is poisoned until closed"
            )

    def _entry(self, entry: Entry) -> _Entry:
        _handle(entry, Entry, "entry")
        e = self._entries.get(entry.id) if entry.engine == self._id else None
        if e is None:
            raise UnknownEntry(f"entry {entry.id} ({entry.program!r}) is not live in this engine")
        return e

    def _weights_of(self, weights: Weights) -> dict[str, Buffer]:
        _handle(weights, Weights, "weights")
        w = self._weights.get(weights.id) if weights.engine == self._id else None
        if w is None:
            raise UnknownEntry(f"weights {weights.id} were not loaded by this engine")
        return w

    def _initial_states(
        self, prog: Program, given: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        states = {a.name: a.var.type for a in prog.args if a.storage is Storage.STATE}
        for name in given:
            if name not in states:
                raise StepInputError("initial_state names no state argument", name)
        initial = {}
        for name, t in states.items():
            if name in given:
                arr = exact_array(name, given[name], t, StepInputError).copy()
                check_range(NarrowingRangeInput, name, arr, self.limit)
            else:
                arr = np.zeros(t.shape, dtype=t.dtype.numpy)
            initial[name] = arr
        return initial

    def _write_states(self, e: _Entry) -> None:
        for name, value in e.initial.items():
            self.device.write(e.buffers[name], value)
        window_args = {a for w in e.windows for a in w.arguments}
        e.mirrors = {n: v.copy() for n, v in e.initial.items() if n in window_args}

    def _result_checker(self, rec: Recording) -> Callable[[Mapping[str, np.ndarray]], None]:
        limit = self.limit

        def check(results: Mapping[str, np.ndarray]) -> None:
            if limit is not None:
                for name in rec.result_checks:
                    check_range(NarrowingRangeResult, name, results[name], limit)

        return check

    def _load(self, source: ArtifactSource) -> Artifact:
        artifact, fetch = load_artifact(self.cache, self.device, source)
        self._counts["hits" if fetch is Fetch.HIT else "compiles"] += 1
        if fetch is Fetch.REPAIRED:
            self._counts["repairs"] += 1
        return artifact

    def cache_key(self, source: ArtifactSource) -> str:
        """The blob-cache key of ``source`` on this engine's device."""
        return artifact_key(self.device, source)

    def _free_all(self, buffers: Iterable[Buffer]) -> None:
        for b in buffers:
            self.device.free(b)


def _handle(given: object, kind: type, what: str) -> None:
    """A handle argument is one this API returned (callers outside mypy pass anything)."""
    if not isinstance(given, kind):
        raise UnknownEntry(f"{what} must be a {kind.__name__} handle, got a {type(given).__name__}")
