"""Device buffers that are host numpy arrays, and the one source of handle ids.

Every device here keeps its buffers in host memory (the oracle does; both NPUs address host
memory), so a buffer is a numpy array of exactly its type, and this is the one implementation
of allocate, free, write, read and copy, and of a step bound over them (``bind_step``). Every device takes its artifact and buffer ids from
``next_id``, so a handle one device issued is never mistaken for another's.
"""

from __future__ import annotations

import itertools
from typing import Final

import numpy as np
from poot_ir import DispatchRefused, TensorType
from poot_ir.budget import check_array

from poot_engine.device import BoundStep, Buffer, StepCommands
from poot_engine.steps import HostStep, ProtocolStep, overrides

__all__ = ["HostBuffers", "HostMemory", "next_id"]

_ids: Final = itertools.count(1)


def next_id() -> int:
    """A handle id no other device issues."""
    return next(_ids)


class HostBuffers:
    """The buffers one device allocated, by id. ``name`` prefixes every refusal."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.memory: dict[int, np.ndarray] = {}
        #: Bumped whenever a binding over these buffers may have gone stale (a free, a clear, a
        #: device's unload): a bound step compares it with the value it was bound at.
        self.epoch = 0

    def allocate(self, type: TensorType) -> Buffer:
        # sized by the program: refused over the memory budget before numpy is asked
        check_array(f"a {self.name} buffer of {type}", type.shape, type.dtype.itemsize)
        buf = Buffer(next_id(), type)
        self.memory[buf.id] = np.zeros(type.shape, dtype=type.dtype.numpy)
        return buf

    def free(self, buffer: Buffer) -> None:
        self.epoch += 1
        self.memory.pop(buffer.id, None)

    def write(self, buffer: Buffer, data: np.ndarray) -> None:
        mem = self.get(buffer)
        if data.dtype != mem.dtype or data.shape != mem.shape:
            raise DispatchRefused(
                f"{self.name}: a {data.dtype}{list(data.shape)} array is not buffer "
                f"{buffer.id} ({buffer.type})"
            )
        np.copyto(mem, data, casting="no")

    def read(self, buffer: Buffer) -> np.ndarray:
        return self.get(buffer).copy()

    def copy(self, src: Buffer, dst: Buffer) -> None:
        if src.type != dst.type:
            raise DispatchRefused(f"{self.name}: copy from {src.type} into {dst.type}")
        np.copyto(self.get(dst), self.get(src), casting="no")

    def get(self, buffer: Buffer) -> np.ndarray:
        mem = self.memory.get(buffer.id)
        if mem is None or buffer.type.shape != mem.shape:
            raise DispatchRefused(f"{self.name}: buffer {buffer.id} is not allocated here")
        return mem

    def clear(self) -> None:
        self.epoch += 1
        self.memory.clear()


class HostMemory:
    """The five buffer methods of the ``Device`` protocol, for a device whose buffers are host
    memory: it sets ``self._buffers`` and defines ``_usable()`` (raising when it is closed or
    poisoned), and every call checks that first."""

    _buffers: HostBuffers

    def _usable(self) -> None:
        raise NotImplementedError

    def allocate(self, type: TensorType) -> Buffer:
        self._usable()
        return self._buffers.allocate(type)

    def free(self, buffer: Buffer) -> None:
        self._usable()
        self._buffers.free(buffer)

    def write(self, buffer: Buffer, data: np.ndarray) -> None:
        self._usable()
        self._buffers.write(buffer, data)  # in place: a bound runtime tensor shares this memory

    def read(self, buffer: Buffer) -> np.ndarray:
        self._usable()
        return self._buffers.read(buffer)

    def copy(self, src: Buffer, dst: Buffer) -> None:
        self._usable()
        self._buffers.copy(src, dst)

    def bind_step(self, commands: StepCommands) -> BoundStep:
        """``poot_engine.steps``: the buffers' arrays bound once (``HostStep``), unless a
        subclass replaces ``write``, ``read`` or ``copy`` (then every command is its call)."""
        self._usable()
        if overrides(self, HostMemory, ("write", "read", "copy")):
            return ProtocolStep(self, commands)  # type: ignore[arg-type]
        return HostStep(self, self._buffers, commands)
