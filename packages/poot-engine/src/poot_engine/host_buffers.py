"""Device buffers that are host numpy arrays, and the one source of handle ids.

Every device here keeps its buffers in host memory (the oracle does; both NPUs address host
memory), so a buffer is a numpy array of exactly its type, and this is the one implementation
of allocate, free, write, read and copy (``HostBuffers``), of a step bound over them
(``HostStep``) and of the device base that puts both together (``HostMemory``, the kit's). Every device takes its artifact and buffer ids from
``next_id``, so a handle one device issued is never mistaken for another's.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from time import perf_counter
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
    Device,
    DeviceIdentity,
    DeviceTraits,
    StepCommands,
)
from poot_engine.lifecycle import Lifecycle

if TYPE_CHECKING:
    from poot_planner import Plan

    from poot_engine.blob_cache import BlobCache

__all__ = ["HostBuffers", "HostMemory", "HostStep", "next_id"]

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

    def lower_baked(self, plan: Plan, weights: Mapping[str, np.ndarray]) -> ArtifactSource:
        """No weights baked (``traits`` says so): as ``lower``."""
        return self.lower(plan)

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
