"""Bound steps: a recording's commands bound to its device once, so a replay is one call.

The engine records a step's commands once (``poot_engine.recording``) and has the device bind
them (``Device.bind_step``). Every replay is then ``run`` (write the inputs, dispatch, read the
results) and, after the engine's checks of the results, ``commit`` (the state copies); nothing
is looked up, checked or allocated again that could be at binding, which is what keeps a step's
host cost near the runtime's own.

Three bindings, each the same commands with the same effects:

- ``ProtocolStep``: every command a call of the ``Device`` protocol. Any device can return it;
  a device (a test's counting subclass, a wrapper) that changes what ``write``, ``read``,
  ``copy`` or ``dispatch`` do must, since the faster bindings skip those calls.
- ``HostStep``: for a device whose buffers are host memory (``HostMemory``, whose
  ``bind_step`` it is): writes, reads and copies on the buffers' arrays directly, each dispatch
  through ``Device.dispatch``.
- a device's own ``HostStep`` subclass (``CpuDevice``, ``VpuDevice``) that also binds its
  dispatch.

Which one a device returns is its own ``bind_step``'s choice, stated in its class; nothing here
inspects a device's class. A binding holds its buffers' memory; once the device frees a buffer
or unloads an artifact (``HostBuffers.epoch``), running it is ``DispatchRefused``.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import TYPE_CHECKING

import numpy as np
from poot_ir import DispatchRefused

from poot_engine.device import Device, StepCommands
from poot_engine.lifecycle import Lifecycle

if TYPE_CHECKING:
    from poot_engine.host_buffers import HostBuffers

__all__ = ["HostStep", "ProtocolStep"]


class ProtocolStep:
    """Every command a ``Device`` protocol call, in the recorded order."""

    __slots__ = ("_commands", "_device")

    def __init__(self, device: Device, commands: StepCommands) -> None:
        self._device, self._commands = device, commands

    def run(
        self, inputs: Sequence[np.ndarray], deadline_s: float
    ) -> tuple[tuple[np.ndarray, ...], float]:
        device, c = self._device, self._commands
        for buf, x in zip(c.writes, inputs, strict=True):
            device.write(buf, x)
        device_s = 0.0
        for artifact, buffers in c.dispatches:
            t0 = perf_counter()
            device.dispatch(artifact, buffers, deadline_s)
            device_s += perf_counter() - t0
        return tuple(device.read(b) for b in c.reads), device_s

    def commit(self) -> None:
        for src, dst in self._commands.copies:
            self._device.copy(src, dst)


class HostStep:
    """Host-memory buffers bound as arrays: a write or a copy is one ``np.copyto``, a read one
    ``ndarray.copy``; dispatches go through ``device.dispatch`` (which binds its own command
    once: a replay passes the same buffer tuple every step)."""

    __slots__ = (
        "_copies",
        "_device",
        "_dispatches",
        "_epoch",
        "_held",
        "_life",
        "_memory",
        "_reads",
        "_writes",
    )

    def __init__(
        self, device: Device, life: Lifecycle, memory: HostBuffers, commands: StepCommands
    ) -> None:
        # ``get`` refuses a buffer not allocated here, now, before any step runs
        self._device, self._life, self._memory = device, life, memory
        self._epoch = memory.epoch
        self._writes = tuple(memory.get(b) for b in commands.writes)
        self._dispatches = commands.dispatches
        self._reads = tuple(memory.get(b) for b in commands.reads)
        self._copies = tuple((memory.get(s), memory.get(d)) for s, d in commands.copies)
        for (s, d), (ms, md) in zip(commands.copies, self._copies, strict=True):
            if s.type != d.type or ms.shape != md.shape:
                raise DispatchRefused(f"{memory.name}: copy from {s.type} into {d.type}")
        every = [
            *commands.writes,
            *commands.reads,
            *(b for _, bs in commands.dispatches for b in bs),
        ]
        every += [b for pair in commands.copies for b in pair]
        self._held = tuple({b.id: (b.id, memory.get(b)) for b in every}.values())

    def check(self) -> None:
        """After the device freed a buffer or unloaded an artifact (any: ``HostBuffers.epoch``),
        the step's own buffers and artifacts are looked at again: ``DispatchRefused`` if one of
        them is gone, else the binding stands."""
        if self._memory.epoch == self._epoch:
            return
        memory = self._memory.memory
        if any(memory.get(i) is not arr for i, arr in self._held) or not self.loaded():
            raise DispatchRefused(
                f"{self._memory.name}: a buffer or artifact of this step was released"
            )
        self._epoch = self._memory.epoch

    def loaded(self) -> bool:
        """Whether every artifact the step dispatches is still loaded (``HostStep``: each
        dispatch goes through ``Device.dispatch``, which refuses one that is not)."""
        return True

    def write_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        # Item assignment, not ``np.copyto`` (a third of its cost on a small array): every
        # input was checked to be exactly its buffer's dtype and shape, so nothing casts or
        # broadcasts.
        for mem, x in zip(self._writes, inputs, strict=True):
            mem[...] = x

    def run(
        self, inputs: Sequence[np.ndarray], deadline_s: float
    ) -> tuple[tuple[np.ndarray, ...], float]:
        if not self._life.usable:
            self._life.check()
        self.check()
        self.write_inputs(inputs)
        device_s = 0.0
        for artifact, buffers in self._dispatches:
            t0 = perf_counter()
            self._device.dispatch(artifact, buffers, deadline_s)
            device_s += perf_counter() - t0
        return tuple(m.copy() for m in self._reads), device_s

    def commit(self) -> None:
        for src, dst in self._copies:  # checked at binding: the same dtype and shape
            dst[...] = src
