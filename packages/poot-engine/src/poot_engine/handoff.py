"""States across entries and engines: read, written, and handed over by name.

::

    cache = engine.read_state(prefill, "k0")            # a fresh host copy
    engine.write_state(decode, "k0", cache)             # checked like an upload
    moved = handoff(npu, prefill, cpu, decode)          # every state of prefill, by name

This is what lets one device prefill a prompt and another decode from the KV cache it wrote.
The rules, for ``Engine.read_state``, ``Engine.write_state`` and ``handoff`` alike:

- only between steps: a call while a step of the same engine is running (from a device
  callback or another thread) is ``StateError``; so is a call on a closed or poisoned engine
  (``DeviceFailed``, ``DevicePoisoned``), or with an entry it did not issue (``UnknownEntry``);
- a name that is no state of the entry is ``StateError`` naming it and what it is instead;
- a written value must be exactly the state's declared dtype and shape (``StateError``;
  nothing is converted), and on a narrowing device every F32 element must be inside the range
  (``NarrowingRangeState`` naming the state and the element), as for an upload;
- a written state is the entry's state until the next step replaces it; ``reset_state`` still
  restores the initial value.

``handoff`` checks everything on both sides before it writes anything: each name must be a
state of both entries with the same declared type, both engines must be usable, and every value
read from the source must pass the destination's checks. A refused handoff changes no state on
either side. The values carry the source entry's numerics class (``Engine.numerics``): a state
computed in FP16 on the source makes the destination entry's class ``NarrowStorage`` until its
states are reset, so whoever compares the destination's results with the oracle knows that
the narrowing of what was handed over is part of them.

Device to device transfers go through host memory (``Device.read`` then ``Device.write``):
no pair of devices poot drives shares memory, and a copy through the host is what the
engine can check. ``Handoff.bytes_moved`` counts the bytes read off the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol

import numpy as np
from poot_ir import NarrowingRangeState, Program, StateError, Storage, TensorType
from poot_ir.numerics import NumericsClass
from poot_ir.oracle import exact_array

from poot_engine.checks import check_range
from poot_engine.device import Device
from poot_engine.handles import Entry


class HandoffEngine(Protocol):
    """What this module needs of ``poot_engine.Engine``: public operations only (a protocol,
    so this module does not import the engine's, which imports this one)."""

    @property
    def device(self) -> Device: ...
    @property
    def limit(self) -> float | None: ...
    def between_steps(self, name: str) -> None: ...
    def program(self, entry: Entry) -> Program: ...
    def numerics(self, entry: Entry) -> NumericsClass: ...
    def read_state(self, entry: Entry, name: str) -> np.ndarray: ...
    def write_state(
        self, entry: Entry, name: str, value: np.ndarray, *, numerics: NumericsClass | None = None
    ) -> None: ...


__all__ = ["Handoff", "check_state", "handoff", "state_type", "state_types"]


@dataclass(frozen=True, slots=True)
class Handoff:
    """What one ``handoff`` moved: the states by name, the bytes read off the source and the
    bytes the states declare (equal: nothing but the states moves), the two targets, the
    numerics class the values carry from the source, and the seconds it took."""

    names: tuple[str, ...]
    bytes_moved: int
    state_bytes: int
    source: str
    destination: str
    numerics: NumericsClass
    seconds: float


def state_types(engine: HandoffEngine, entry: Entry) -> dict[str, TensorType]:
    """The states of ``entry`` by name, each with its declared type."""
    prog = engine.program(entry)
    return {a.name: a.var.type for a in prog.args if a.storage is Storage.STATE}


def state_type(engine: HandoffEngine, entry: Entry, name: str) -> TensorType:
    """The declared type of the state ``name``, after the checks every state call makes."""
    engine.between_steps(name)
    types = state_types(engine, entry)
    if name not in types:
        prog = engine.program(entry)
        arg = prog.arg(name)
        why = f"is a {arg.storage.value} argument" if arg is not None else "is no argument"
        raise StateError(f"{why} of {prog.name!r}, not a state", name)
    return types[name]


def check_state(engine: HandoffEngine, entry: Entry, name: str, value: object) -> np.ndarray:
    """``value`` as a copy ready to be the state ``name`` of ``entry``, or the typed error
    ``Engine.write_state`` would raise. Nothing is written."""
    t = state_type(engine, entry, name)
    arr = exact_array(name, value, t, StateError).copy()
    check_range(NarrowingRangeState, name, arr, engine.limit)
    return arr


def handoff(
    src_engine: HandoffEngine,
    src_entry: Entry,
    dst_engine: HandoffEngine,
    dst_entry: Entry,
    names: Sequence[str] | None = None,
) -> Handoff:
    """Move the states ``names`` (default: every state of ``src_entry``) from ``src_entry`` to
    ``dst_entry``, on the same engine or on two; see the module for the checks and what a
    refusal leaves (nothing changed on either side)."""
    t0 = perf_counter()
    src_types = state_types(src_engine, src_entry)
    chosen = tuple(src_types) if names is None else tuple(names)
    if not chosen:
        raise StateError(f"nothing to hand over from {src_entry.program!r}: no states named")
    twice = next((n for i, n in enumerate(chosen) if n in chosen[:i]), None)
    if twice is not None:
        raise StateError("named twice in one handoff", twice)
    for name in chosen:
        have = state_type(src_engine, src_entry, name)
        want = state_type(dst_engine, dst_entry, name)
        if have != want:
            raise StateError(
                f"is {have} in {src_entry.program!r} but {want} in {dst_entry.program!r}", name
            )
    values = {n: src_engine.read_state(src_entry, n) for n in chosen}
    checked = {n: check_state(dst_engine, dst_entry, n, v) for n, v in values.items()}
    carried = src_engine.numerics(src_entry)
    for name, arr in checked.items():
        dst_engine.write_state(dst_entry, name, arr, numerics=carried)
    return Handoff(
        chosen,
        sum(v.nbytes for v in values.values()),
        sum(src_types[n].nbytes for n in chosen),
        src_engine.device.target,
        dst_engine.device.target,
        carried,
        perf_counter() - t0,
    )
