"""The engine's own claims for ``poot acceptance``: the blob cache across processes and its
repair of a damaged entry, a missed deadline poisoning the device, and a contract violation
poisoning its entry (a device made to return one wrong element)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from poot_engine import (
    Artifact,
    ArtifactSource,
    BlobCache,
    BoundStep,
    Buffer,
    CompileProgress,
    Device,
    DeviceIdentity,
    DeviceTraits,
    Engine,
    ProtocolStep,
    StepCommands,
)
from poot_ir import (
    ContractViolation,
    DeadlineExceeded,
    DevicePoisoned,
    EntryPoisoned,
    TensorType,
)
from poot_npu.registry import DeviceInfo
from poot_planner import Plan
from poot_planner.xdna2.probes import neg_chain

__all__ = ["Check", "cache_checks", "poisoning_checks"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    passed: bool
    figure: float | None = None
    unit: str = ""
    detail: str = ""


_SECOND = """
import sys
from pathlib import Path
from poot_engine import Engine
from poot_npu.registry import device_info
from poot_planner.xdna2.probes import neg_chain
with Engine(device_info(sys.argv[1]).make(), cache_dir=Path(sys.argv[2])) as e:
    e.add_entry(neg_chain(3))
    s = e.stats()
    print(s.compiles, s.cache_hits)
"""


def cache_checks(info: DeviceInfo, make: Callable[[], Device], root: Path) -> Iterator[Check]:
    cache = root / "cache-check"  # its own: the entry damaged is the one this check made
    with Engine(make(), cache_dir=cache) as e:
        e.add_entry(neg_chain(3))
    done = subprocess.run(
        [sys.executable, "-c", _SECOND, info.name, str(cache)],
        capture_output=True,
        text=True,
        check=False,
    )
    figures = done.stdout.split()
    ok = done.returncode == 0 and figures[:1] == ["0"]
    yield Check(
        "cache: a second process compiles nothing",
        ok,
        float(figures[0]) if figures else None,
        "compiles",
        done.stderr.strip()[-200:],
    )
    blobs = sorted(cache.glob("*.blob"))
    if blobs:
        data = bytearray(blobs[0].read_bytes())
        data[len(data) // 2] ^= 0xFF
        blobs[0].write_bytes(bytes(data))
    with Engine(make(), cache_dir=cache, verify="always") as e:
        entry = e.add_entry(neg_chain(3))
        e.step(entry, {"x": np.ones((2, 8), np.float32)})
        repairs = e.stats().cache_repairs
    yield Check("cache: a damaged entry is repaired", repairs == 1, repairs, "repairs")


class _Wrong:
    """A device whose results are off by one in element 0: a contract violation to catch.
    Every other member is the wrapped device's, forwarded by name (no attribute lookup)."""

    def __init__(self, device: Device) -> None:
        self._d = device

    @property
    def target(self) -> str:
        return self._d.target

    @property
    def identity(self) -> DeviceIdentity:
        return self._d.identity

    @property
    def traits(self) -> DeviceTraits:
        return self._d.traits

    def use_cache(self, cache: BlobCache) -> None:
        self._d.use_cache(cache)

    def report_progress(self, progress: CompileProgress | None) -> None:
        self._d.report_progress(progress)

    def lower(self, plan: Plan) -> ArtifactSource:
        return self._d.lower(plan)

    def lower_baked(self, plan: Plan, weights: Mapping[str, np.ndarray]) -> ArtifactSource:
        return self._d.lower_baked(plan, weights)

    def compile(self, source: ArtifactSource) -> bytes:
        return self._d.compile(source)

    def load(self, blob: bytes) -> Artifact:
        return self._d.load(blob)

    def unload(self, artifact: Artifact) -> None:
        self._d.unload(artifact)

    def allocate(self, type: TensorType) -> Buffer:
        return self._d.allocate(type)

    def free(self, buffer: Buffer) -> None:
        self._d.free(buffer)

    def write(self, buffer: Buffer, data: np.ndarray) -> None:
        self._d.write(buffer, data)

    def read(self, buffer: Buffer) -> np.ndarray:
        return self._d.read(buffer)

    def copy(self, src: Buffer, dst: Buffer) -> None:
        self._d.copy(src, dst)

    def bind_step(self, commands: StepCommands) -> BoundStep:
        # every dispatch through ``dispatch`` below (the wrapped device's binding would skip it)
        return ProtocolStep(self, commands)

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._d.dispatch(artifact, buffers, deadline_s)
        out = self._d.read(buffers[-1])  # the last buffer is the artifact's output
        out.reshape(-1)[0] += 1
        self._d.write(buffers[-1], out)

    def close(self) -> None:
        self._d.close()


def poisoning_checks(make: Callable[[], Device], root: Path) -> Iterator[Check]:
    with Engine(_Wrong(make()), cache_dir=root / "cache", verify="always") as e:
        entry = e.add_entry(neg_chain(3))
        try:
            e.step(entry, {"x": np.ones((2, 8), np.float32)})
            caught = "returned"
        except ContractViolation:
            try:
                e.step(entry, {"x": np.ones((2, 8), np.float32)})
                caught = "violation, then the entry ran again"
            except EntryPoisoned:
                caught = "violation, then the entry poisoned"
    yield Check(
        "a contract violation poisons its entry", caught.endswith("poisoned"), detail=caught
    )
    # a device waits in whole milliseconds (``poot_engine.deadline``), and a fast one runs a
    # small chain within one: the chain grows until a step misses 1 us (or none ever does)
    what = "never missed"
    for shape in ((512, 1024), (1024, 2048), (2048, 4096)):
        with Engine(make(), cache_dir=root / "cache", deadline_s=1e-6) as e:
            entry = e.add_entry(neg_chain(3, shape))
            x = np.ones(shape, np.float32)
            try:
                for _ in range(20):
                    e.step(entry, {"x": x})
                continue
            except DeadlineExceeded:
                try:
                    e.step(entry, {"x": x})
                    what = "missed, then ran again"
                except DevicePoisoned:
                    what = "missed, then poisoned"
        break
    yield Check("a missed deadline poisons the device", what.endswith("poisoned"), 1e-6, "s", what)
