"""An ordinary entry as the engine holds it, and one step of it: the engine's step path.

``make_entry`` builds an entry from a checked plan (lower, load, bind the weights, allocate
every other buffer, write the initial states). ``LiveEntry.step`` is one step:

1. the inputs against the slots, in one pass (``SlotCheck``; ``StepInputError``);
2. on the first step, the recording (``poot_engine.recording``), bound to the device once
   (``Device.bind_step``), with its range checks resolved to positions;
3. the host-side checks before anything runs: F32 inputs against the narrowing range, windows,
   domains;
4. the bound step's run (writes, dispatches, reads), then the results against the range and the
   verified step's check, and only then the commit (the state copies) and the host mirrors.

Nothing of step 2 is redone on a later step: a replay looks nothing up by name that it could
have resolved when it recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from poot_ir import (
    DType,
    NarrowingRangeInput,
    NarrowingRangeResult,
    NarrowingRangeUpload,
    Program,
    Storage,
    TensorType,
    WeightMismatch,
)
from poot_planner import Plan
from poot_planner.fp16.saturation import saturated_results

from poot_engine.checks import (
    RangeCheck,
    WindowCheck,
    bind_weights,
    check_range,
    check_ranges,
    check_signature,
    check_step_inputs,
    check_windows,
    initial_states,
    range_checks,
    saturation_limit,
    window_checks,
)
from poot_engine.counters import Counters
from poot_engine.device import Artifact, ArtifactSource, BoundStep, Buffer, Device, signature_of
from poot_engine.domain import EntryDomains, entry_domains
from poot_engine.recording import Read, Recording, record

__all__ = ["LiveEntry", "SlotCheck", "free_all", "make_entry", "upload_weights"]

Results = dict[str, np.ndarray]
#: A verified step's check of the results, before the commit.
Verification = Callable[[Mapping[str, np.ndarray]], None]

#: The dtypes of a result a DPU task's clamp may have made (``saturated_results``).
_SATURATING = frozenset({DType.F32, DType.F16})


class SlotCheck:
    """A step's inputs against the slot arguments: exactly the slots, each an ndarray of exactly
    its dtype and shape, checked in one pass without a lookup per slot; anything else (a
    missing, extra or mistyped input, a wide int64 slot) goes to ``check_step_inputs``, which
    converts what may be converted or raises the typed error naming the input."""

    __slots__ = ("_fast", "_program", "_slots")

    def __init__(self, program: Program, slots: tuple[tuple[str, TensorType], ...]) -> None:
        self._program, self._slots = program, slots
        self._fast = tuple((n, np.dtype(t.dtype.numpy), t.shape) for n, t in slots)

    def __call__(self, inputs: Mapping[str, object]) -> tuple[np.ndarray, ...]:
        if len(inputs) == len(self._fast):
            arrays = []
            for name, dtype, shape in self._fast:
                x = inputs.get(name)
                if type(x) is not np.ndarray or x.dtype != dtype or x.shape != shape:
                    break
                arrays.append(x)
            else:
                return tuple(arrays)
        return check_step_inputs(self._program, self._slots, inputs)


@dataclass(slots=True)
class LiveEntry:
    """An ordinary entry: its program (as the target runs it), artifact, buffers and checks."""

    program: Program
    artifact: Artifact
    slots: tuple[tuple[str, TensorType], ...]
    buffers: dict[str, Buffer]  # every input argument (weights bound, slots, states)
    outputs: dict[str, Buffer]  # every result
    initial: dict[str, np.ndarray]  # each state's initial value
    windows: tuple[WindowCheck, ...]
    check_slots: SlotCheck
    plan: Plan | None = None  # what a verified step compares under
    domains: EntryDomains | None = None  # the host-side domain guards (``domain``)
    mirrors: dict[str, np.ndarray] = field(default_factory=dict)  # states a window reads
    recording: Recording | None = None
    # bound when the recording is made
    bound: BoundStep | None = None
    result_names: tuple[str, ...] = ()
    input_checks: tuple[RangeCheck, ...] = ()  # the F32 slots, by position
    result_checks: tuple[RangeCheck, ...] = ()  # the F32 results, by position

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.slots)

    def step(
        self,
        device: Device,
        inputs: Mapping[str, np.ndarray],
        deadline_s: float,
        limit: float | None,
        verify: Verification | None,
        counts: Counters,
    ) -> tuple[Results, float]:
        """One step (the module docstring): the results by name and the dispatch seconds. A
        replay pays only what its recording left: every check's positions, and whether a step
        has windows, domains or mirrors at all, were resolved when it recorded."""
        bound = self.bound
        if bound is None:
            return self._first_step(device, inputs, deadline_s, limit, verify, counts)
        arrays = self.check_slots(inputs)
        if self.input_checks:
            check_ranges(NarrowingRangeInput, self.input_checks, arrays)
        if self.windows or self.domains is not None:
            self._check_host(arrays)
        counts.replays += 1
        return self._run(bound, arrays, deadline_s, verify)

    def _run(
        self,
        bound: BoundStep,
        arrays: tuple[np.ndarray, ...],
        deadline_s: float,
        verify: Verification | None,
    ) -> tuple[Results, float]:
        """The checked step's run: the results against the range and the verified step's
        check, and only then the commit."""
        outs, device_s = bound.run(arrays, deadline_s)
        results = dict(zip(self.result_names, outs, strict=True))
        if self.result_checks:
            check_ranges(NarrowingRangeResult, self.result_checks, outs)
        if verify is not None:
            verify(results)
        bound.commit()
        if self.mirrors or self.domains is not None:
            self._committed(results)
        return results, device_s

    def _first_step(
        self,
        device: Device,
        inputs: Mapping[str, np.ndarray],
        deadline_s: float,
        limit: float | None,
        verify: Verification | None,
        counts: Counters,
    ) -> tuple[Results, float]:
        """The first step: its checks, then the recording kept and bound (only once they
        passed), then the step as every replay runs it."""
        arrays = self.check_slots(inputs)
        rec = self._record(limit)
        if self.input_checks:
            check_ranges(NarrowingRangeInput, self.input_checks, arrays)
        if self.windows or self.domains is not None:
            self._check_host(arrays)
        self.recording, self.bound = rec, device.bind_step(rec.step_commands())
        counts.recordings += 1
        return self._run(self.bound, arrays, deadline_s, verify)

    def _check_host(self, arrays: tuple[np.ndarray, ...]) -> None:
        """The windows an argument places and the domain guards, on the host, before the run."""
        named = dict(zip(self.slot_names, arrays, strict=True))
        if self.windows:
            check_windows(self.windows, {**self.mirrors, **named})
        if self.domains is not None:
            self.domains.check(named)

    def _committed(self, results: Results) -> None:
        """After the commit: the host mirrors a window check reads, and the domain guards'."""
        for name in self.mirrors:
            self.mirrors[name] = results[name].copy()
        if self.domains is not None:
            self.domains.committed(results)

    def _record(self, limit: float | None) -> Recording:
        """The first step's recording, with its range checks resolved to positions (none
        without a narrowing limit, none for an empty array) and refused, ``DispatchRefused``,
        for buffers that are not the artifact's ABI."""
        updates = tuple(u.state for u in self.program.updates)
        names = self.slot_names
        rec = record(self.artifact, self.buffers, self.outputs, names, updates)
        reads = tuple(c.result for c in rec.run if isinstance(c, Read))
        self.result_names = reads
        slot_types = dict(self.slots)
        result_types = {n: v.type for n, v in self.program.results()}
        self.input_checks = range_checks(limit, names, rec.input_checks, slot_types)
        # a result a DPU task made at +-65504 is an overflow the NPU saturated
        # (``saturation_limit``); other results may be 65504 (an input moved, a product)
        # (F16 results too: a program written in F16 meets the same clamp, and its oracle's
        # overflow is an infinity)
        saturated = saturated_results(self.program) if limit is not None else frozenset()
        strict = tuple(n for n in reads if n in saturated)
        rest = tuple(n for n in rec.result_checks if n not in saturated)
        self.result_checks = range_checks(limit, reads, rest, result_types) + range_checks(
            saturation_limit(limit), reads, strict, result_types, _SATURATING
        )
        if self.domains is not None:
            if limit is not None:  # a range-checked input needs no finite check as well
                self.domains.drop_implied({n: limit for n in rec.input_checks})
            if not self.domains.active:
                self.domains = None
        return rec

    def write_state(self, device: Device, name: str, value: np.ndarray) -> None:
        """Make the checked ``value`` the state ``name`` (``Engine.write_state``): its domain
        guards first, then the buffer and the host mirror a window check reads."""
        if self.domains is not None:
            self.domains.write(name, value)
        device.write(self.buffers[name], value)
        if name in self.mirrors:
            self.mirrors[name] = value.copy()

    def read_inputs(self, device: Device) -> dict[str, np.ndarray]:
        """Every input buffer (weights, slots, states) read back: a verified step's feed."""
        return {n: device.read(b) for n, b in self.buffers.items()}

    def release(self, device: Device) -> None:
        """Free every buffer the entry owns (not the weights it bound) and unload it."""
        weights = {a.name for a in self.program.args if a.storage is Storage.WEIGHT}
        owned = [b for n, b in self.buffers.items() if n not in weights]
        free_all(device, [*owned, *self.outputs.values()])
        device.unload(self.artifact)

    def write_states(self, device: Device) -> None:
        """Every state back to its initial value (and the host mirrors with it)."""
        for name, value in self.initial.items():
            device.write(self.buffers[name], value)
        if self.domains is not None:
            self.domains.reset(self.initial)
        window_args = {a for w in self.windows for a in w.arguments}
        self.mirrors = {n: v.copy() for n, v in self.initial.items() if n in window_args}


def make_entry(
    device: Device,
    planned: Plan,
    wbufs: Mapping[str, Buffer],
    initial_state: Mapping[str, np.ndarray],
    limit: float | None,
    load: Callable[[ArtifactSource], Artifact],
) -> LiveEntry:
    """The ordinary entry of a checked plan, bound to exactly the weight buffers ``wbufs``;
    ``load`` loads a lowered artifact (from the blob cache, or compiled)."""
    planned.check()
    prog = planned.program
    wnames = bind_weights(prog, {n: b.type for n, b in wbufs.items()})
    initial = initial_states(prog, initial_state, limit)
    domains = entry_domains(planned, lambda n: device.read(wbufs[n]), initial)
    expected = signature_of(prog)
    if device.traits.bakes_weights:  # the weights' values into the source (and the cache key)
        source = device.lower_baked(planned, {n: device.read(wbufs[n]) for n in wnames})
    else:
        source = device.lower(planned)
    check_signature(expected, source.signature, "the lowered artifact")
    artifact = load(source)
    buffers = {n: wbufs[n] for n in wnames}
    outputs: dict[str, Buffer] = {}
    try:
        for arg in prog.args:
            if arg.storage is not Storage.WEIGHT:
                buffers[arg.name] = device.allocate(arg.var.type)
        for name, var in prog.results():
            outputs[name] = device.allocate(var.type)
    except BaseException:
        free_all(device, (b for n, b in buffers.items() if n not in wnames))
        free_all(device, outputs.values())
        device.unload(artifact)
        raise
    slots = tuple((a.name, a.var.type) for a in prog.args if a.storage is Storage.SLOT)
    e = LiveEntry(
        prog,
        artifact,
        slots,
        buffers,
        outputs,
        initial,
        window_checks(prog),
        SlotCheck(prog, slots),
    )
    e.plan, e.domains = planned, domains
    e.write_states(device)
    return e


def upload_weights(
    device: Device,
    weights: Mapping[str, np.ndarray],
    limit: float | None,
    host: Collection[str] = (),
) -> dict[str, Buffer]:
    """``Engine.load_weights``: every weight checked (an array of a poot dtype; in range on a
    narrowing target, ``NarrowingRangeUpload``) before any is allocated and written; a weight
    named in ``host`` is not range-checked here (only host spans read it: the engine checks it
    when a device entry binds it)."""
    given: object = weights  # callers outside mypy pass a list
    if not isinstance(given, Mapping):
        kind = type(given).__name__
        raise WeightMismatch(f"weights must map names to arrays, got a {kind}", "(all)")
    arrays = {}
    for name, value in weights.items():
        if not isinstance(value, np.ndarray | np.generic):
            raise WeightMismatch(f"expected a numpy array, got {type(value).__name__}", name)
        arr = np.asarray(value)
        check_range(NarrowingRangeUpload, name, arr, None if name in host else limit)
        if DType.from_numpy(arr.dtype) is None:
            raise WeightMismatch(f"dtype {arr.dtype} is no poot dtype", name)
        arrays[name] = arr
    bufs: dict[str, Buffer] = {}
    try:
        for name, arr in arrays.items():
            dtype = DType.from_numpy(arr.dtype)
            assert dtype is not None  # checked above
            bufs[name] = buf = device.allocate(TensorType(arr.shape, dtype))
            device.write(buf, arr)
    except BaseException:
        free_all(device, bufs.values())
        raise
    return bufs


def free_all(device: Device, buffers: Iterable[Buffer]) -> None:
    for b in buffers:
        device.free(b)
