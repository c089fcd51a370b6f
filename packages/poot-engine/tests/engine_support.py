"""Programs, stand-in devices and process workers shared by the engine tests.

The stand-ins are ``CpuDevice`` with one behaviour changed, so everything else is the real
device: ``CountingDevice`` counts every protocol call (so it binds its steps as protocol calls,
``ProtocolStep``), ``SlowDevice`` sleeps inside its run (to miss a deadline; ``_bind_run``, so
the whole-step binding keeps it), ``ReorderingDevice`` compiles artifacts whose arguments are
reordered, and ``RetypingDevice`` one whose first input is retyped.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path

import numpy as np
from poot_engine import (
    ArgSpec,
    Artifact,
    ArtifactSource,
    BoundStep,
    Buffer,
    CpuDevice,
    Engine,
    ProtocolStep,
    Signature,
    StepCommands,
)
from poot_engine.cpu import BoundRun
from poot_ir import Builder, DType, Program, TensorType

F32, I32 = DType.F32, DType.I32


def affine_program(n: int = 4) -> Program:
    """y = x * w + 1 and a carried running sum acc += y (weight, slot and state)."""
    b = Builder("affine")
    w = b.weight("w", F32, (n,))
    x = b.slot("x", F32, (n,))
    acc = b.state("acc", F32, (n,))
    y = b.add(b.mul(x, w), 1.0)
    b.output("y", y)
    b.update(acc, b.add(acc, y))
    return b.build()


def add_program(n: int = 4) -> Program:
    """z = x + y over two slots."""
    b = Builder("add2")
    x = b.slot("x", F32, (n,))
    y = b.slot("y", F32, (n,))
    b.output("z", b.add(x, y))
    return b.build()


def running_sum_program(n: int = 3) -> Program:
    """A state only: total += x; out = total * 2."""
    b = Builder("running_sum")
    x = b.slot("x", F32, (n,))
    total = b.state("total", F32, (n,))
    new = b.add(total, x)
    b.output("twice", b.mul(new, 2.0))
    b.update(total, new)
    return b.build()


def scatter_program() -> Program:
    """cache[pos : pos + 2] = row, with pos an I32 slot: the device does not check the window."""
    b = Builder("scatter")
    cache = b.state("cache", F32, (6,))
    row = b.slot("row", F32, (2,))
    pos = b.slot("pos", I32, ())
    new = b.dynamic_update_slice(cache, row, [pos])
    b.output("sum", b.reduce_sum(new, 0))
    b.update(cache, new)
    return b.build()


class CountingDevice(CpuDevice):
    """A CpuDevice that counts every call of the protocol by method name."""

    def __init__(self, target: str = "cpu") -> None:
        super().__init__(target)
        self.calls: collections.Counter[str] = collections.Counter()
        self.written: collections.Counter[int] = collections.Counter()

    def compile(self, source: ArtifactSource) -> bytes:
        self.calls["compile"] += 1
        return super().compile(source)

    def load(self, blob: bytes) -> Artifact:
        self.calls["load"] += 1
        return super().load(blob)

    def allocate(self, type: TensorType) -> Buffer:
        self.calls["allocate"] += 1
        return super().allocate(type)

    def free(self, buffer: Buffer) -> None:
        self.calls["free"] += 1
        super().free(buffer)

    def write(self, buffer: Buffer, data: np.ndarray) -> None:
        self.calls["write"] += 1
        self.written[buffer.id] += 1
        super().write(buffer, data)

    def read(self, buffer: Buffer) -> np.ndarray:
        self.calls["read"] += 1
        return super().read(buffer)

    def copy(self, src: Buffer, dst: Buffer) -> None:
        self.calls["copy"] += 1
        super().copy(src, dst)

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self.calls["dispatch"] += 1
        super().dispatch(artifact, buffers, deadline_s)

    def bind_step(self, commands: StepCommands) -> BoundStep:
        return ProtocolStep(self, commands)  # every command one of the counted calls


class SlowDevice(CpuDevice):
    """Its runs take ``delay_s`` (in the worker thread, where a hung runtime would hang)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def _bind_run(self, program: Program, inputs: dict[str, np.ndarray]) -> BoundRun:
        run = super()._bind_run(program, inputs)

        def slow() -> tuple[np.ndarray, ...]:
            time.sleep(self.delay_s)
            return run()

        return slow

    @property
    def live_buffers(self) -> set[int]:
        return set(self._buffers.memory)


class ReorderingDevice(CpuDevice):
    """A compiler that reverses the order of the artifact's inputs (as loaded)."""

    def load(self, blob: bytes) -> Artifact:
        art = super().load(blob)
        sig = art.signature
        lied = dataclasses.replace(art, signature=Signature(sig.inputs[::-1] + sig.outputs))
        self._artifacts[art.id] = (lied, *self._artifacts[art.id][1:])
        return lied


class RetypingDevice(CpuDevice):
    """A compiler that reports its first input narrowed to F16."""

    def load(self, blob: bytes) -> Artifact:
        art = super().load(blob)
        first = art.signature.args[0]
        retyped = ArgSpec(first.name, first.direction, first.type.with_dtype(DType.F16))
        lied = dataclasses.replace(art, signature=Signature((retyped, *art.signature.args[1:])))
        self._artifacts[art.id] = (lied, *self._artifacts[art.id][1:])
        return lied


def run_affine(cache_dir: str, steps: int = 3) -> tuple[list[list[float]], tuple[int, int, int]]:
    """A whole session in a fresh process: results and (compiles, hits, repairs)."""
    engine = Engine(CpuDevice(), cache_dir=Path(cache_dir))
    try:
        weights = engine.load_weights({"w": np.array([1, 2, 3, 4], np.float32)})
        entry = engine.add_entry(affine_program(), weights)
        outs = []
        for i in range(steps):
            out = engine.step(entry, {"x": np.full(4, i, np.float32)})
            outs.append(out["acc"].tolist())
        s = engine.stats()
        return outs, (s.compiles, s.cache_hits, s.cache_repairs)
    finally:
        engine.close()


RACE_KEY = "ab" * 32


def publish_one_key(cache_dir: str) -> bytes | None:
    """Publish and read back one key many times, racing other processes."""
    from poot_engine.blob_cache import BlobCache, EntryStatus

    cache = BlobCache(cache_dir)
    for _ in range(20):
        cache.put(RACE_KEY, b"the same blob" * 1000)
        got = cache.get(RACE_KEY)
        assert got.status is EntryStatus.OK, got.status
    return cache.get(RACE_KEY).blob
