"""Device buffers that are host numpy arrays, and the one source of handle ids.

Every device here keeps its buffers in host memory (the oracle does; both NPUs address host
memory), so a buffer is a numpy array of exactly its type, and this is the one implementation
of allocate, free, write, read and copy, and of a step bound over them (``bind_step``):
``HostMemory``, the kit's device base. Every device takes its artifact and buffer ids from
``next_id``, so a handle one device issued is never mistaken for another's.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Final

import numpy as np
from poot_ir import DispatchRefused, TensorType
from poot_ir.budget import check_array

from poot_engine.device import (
    Artifact,
    ArtifactSource,
    BoundStep,
    Buffer,
    CompileProgress,
    DeviceIdentity,
    DeviceTraits,
    StepCommands,
)
from poot_engine.lifecycle import Lifecycle
from poot_engine.steps import HostStep

if TYPE_CHECKING:
    from poot_planner import Plan

    from poot_engine.blob_cache import BlobCache

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


class HostMemory(ABC):
    """The kit's device base: everything of the ``Device`` protocol but what is the device's
    own, for a device whose buffers are host memory (every device here: the oracle's arrays,
    and both NPUs address host memory).

    ``__init__(name)`` makes the device's ``Lifecycle`` (``self._life``) and its
    ``HostBuffers`` (``self._buffers``). Given here: the five buffer methods, each checking the
    lifecycle first (``_usable``); ``bind_step`` (a ``HostStep``); ``traits`` (none);
    ``use_cache`` and ``report_progress`` (nothing to keep, nothing to report); and ``close``
    (the lifecycle, ``_release``, the buffers). A subclass writes the abstract members:
    ``target``, ``identity``, ``lower``, ``compile``, ``load``, ``unload`` and ``dispatch``,
    and overrides the rest where it does more (``tests/test_null_device.py`` is the smallest
    such device)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._life = Lifecycle(name)
        self._buffers = HostBuffers(name)

    # -- what each device writes -----------------------------------------------------------

    @property
    @abstractmethod
    def target(self) -> str: ...

    @property
    @abstractmethod
    def identity(self) -> DeviceIdentity: ...

    @abstractmethod
    def lower(self, plan: Plan) -> ArtifactSource: ...

    @abstractmethod
    def compile(self, source: ArtifactSource) -> bytes: ...

    @abstractmethod
    def load(self, blob: bytes) -> Artifact: ...

    @abstractmethod
    def unload(self, artifact: Artifact) -> None: ...

    @abstractmethod
    def dispatch(
        self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float
    ) -> None: ...

    # -- given -----------------------------------------------------------------------------

    @property
    def traits(self) -> DeviceTraits:
        return DeviceTraits()

    def use_cache(self, cache: BlobCache) -> None:
        """Nothing of its own to keep."""
        return None

    def report_progress(self, progress: CompileProgress | None) -> None:
        """No compile long enough to report."""
        return None

    def _usable(self) -> None:
        life = self._life
        if not life.usable:
            life.check()

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
        """``poot_engine.steps``: the buffers' arrays bound once (``HostStep``: writes, reads
        and copies on the arrays, each dispatch a ``dispatch`` call). A subclass that changes
        ``write``, ``read`` or ``copy`` returns ``ProtocolStep(self, commands)`` instead."""
        self._usable()
        return HostStep(self, self._life, self._buffers, commands)

    def close(self) -> None:
        """Idempotent: the first call marks the device closed, releases what ``_release``
        releases, then every buffer."""
        if self._life.close():
            self._release()
            self._buffers.clear()

    def _release(self) -> None:
        """What the device holds besides its buffers (loaded artifacts, runtime objects)."""
        return None
