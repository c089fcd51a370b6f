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
- ``HostStep`` (``poot_engine.host_buffers``, beside the buffers it binds): for a device whose
  buffers are host memory (``HostMemory``, whose ``bind_step`` it is): writes, reads and copies
  on the buffers' arrays directly, each dispatch through ``Device.dispatch``.
- a device's own ``HostStep`` subclass (``CpuDevice``, ``VpuDevice``) that also binds its
  dispatch.

Which one a device returns is its own ``bind_step``'s choice, stated in its class; nothing here
inspects a device's class. A binding holds its buffers' memory; once the device frees a buffer
or unloads an artifact (``HostBuffers.epoch``), running it is ``DispatchRefused``.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter

import numpy as np

from poot_engine.device import Device, StepCommands

__all__ = ["ProtocolStep"]


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
