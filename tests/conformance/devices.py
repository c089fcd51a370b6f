"""The devices the conformance suite runs on: every device in poot's registry. Hardware devices
carry their marker and skip with "hardware unavailable" where they are absent; a stand-in that
is missing its own prerequisites (openvino, a C compiler) fails, since the default test
environment provides them. ``Opened`` opens each device of a module once and counts what the
module's runs did on it; ``Lent`` lends one open device to a run whose engine closes it."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from poot_engine.device import Artifact, Buffer, Device
from poot_ir import TensorType
from poot_npu.registry import DEVICES, DeviceInfo, DeviceKind

_MARKS = {"xdna": pytest.mark.xdna, "vpu": pytest.mark.npu_intel}

DEVICE_PARAMS: list[Any] = [
    pytest.param(d, id=d.name, marks=(_MARKS[d.name],) if d.name in _MARKS else ()) for d in DEVICES
]


def open_device(info: DeviceInfo) -> Device:
    why = info.unavailable_reason()
    if why is not None:
        if info.kind is DeviceKind.HARDWARE:
            pytest.skip(f"hardware unavailable: {info.name}: {why}")
        pytest.fail(f"the hardware-free device {info.name} is missing: {why}")
    return info.make()


class Opened:
    """A module's devices, each opened once on first use, and what each module's runs did on
    each device (``counts[name]``). A device opens under ``XDG_CACHE_HOME=cache_dir``:
    xdna-host places its kernel cache at creation, so the module's kernels live in its own
    directory and every run measures the cold build."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.open: dict[str, Device] = {}
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def get(self, info: DeviceInfo) -> Device:
        if info.name not in self.open:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("XDG_CACHE_HOME", str(self.cache_dir))
                self.open[info.name] = open_device(info)  # skips absent hardware
        return self.open[info.name]

    def close(self) -> None:
        for device in self.open.values():
            device.close()
        self.open.clear()


def opened(factory: pytest.TempPathFactory, name: str) -> Iterator[Opened]:
    """The body of a module-scoped fixture: an ``Opened`` in a fresh directory, closed after."""
    devices = Opened(factory.mktemp(name))
    try:
        yield devices
    finally:
        devices.close()


class Lent:
    """A device lent to one ``run_program``, whose engine closes its device when it is done:
    closing this releases what the run loaded and allocated, and the device stays open."""

    def __init__(self, device: Device) -> None:
        self._device = device
        self._artifacts: dict[int, Artifact] = {}
        self._buffers: dict[int, Buffer] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def load(self, blob: bytes) -> Artifact:
        artifact = self._device.load(blob)
        self._artifacts[artifact.id] = artifact
        return artifact

    def unload(self, artifact: Artifact) -> None:
        self._artifacts.pop(artifact.id, None)
        self._device.unload(artifact)

    def allocate(self, type: TensorType) -> Buffer:
        buffer = self._device.allocate(type)
        self._buffers[buffer.id] = buffer
        return buffer

    def free(self, buffer: Buffer) -> None:
        self._buffers.pop(buffer.id, None)
        self._device.free(buffer)

    def close(self) -> None:
        for artifact in self._artifacts.values():
            self._device.unload(artifact)
        for buffer in self._buffers.values():
            self._device.free(buffer)
        self._artifacts.clear()
        self._buffers.clear()
