"""The devices the conformance suite runs on: every device in poot's registry. Hardware devices
carry their marker and skip with "hardware unavailable" where they are absent; a stand-in that
is missing its own prerequisites (openvino, a C compiler) fails, since the default test
environment provides them. ``Lent`` lends one open device to a run whose engine closes it."""

from __future__ import annotations

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
