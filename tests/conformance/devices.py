"""The devices the conformance suite runs on: every device in poot's registry. Hardware devices
carry their marker and skip with "hardware unavailable" where they are absent; a stand-in that
is missing its own prerequisites (openvino, a C compiler) fails, since the default test
environment provides them."""

from __future__ import annotations

from typing import Any

import pytest
from poot_engine.device import Device
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
