"""poot_npu: the NPU devices and the registry of every device poot knows.

``make_device(name)`` opens one by name (``"cpu"``, ``"xdna-host"``, ``"vpu-cpu"``; ``"xdna"``
and ``"vpu"`` on hardware). The device classes are ``XdnaDevice`` (XRT), ``XdnaHostDevice``
(the host C stand-in) and ``VpuDevice`` (OpenVINO), imported on first use so that importing
``poot_npu`` loads neither OpenVINO nor XRT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poot_ir.lazy import lazy_exports

from poot_npu.registry import (
    DEVICES,
    DeviceInfo,
    DeviceKind,
    available_devices,
    device_info,
    make_device,
)

if TYPE_CHECKING:
    from poot_npu.vpu import VpuDevice
    from poot_npu.xdna import XdnaDevice
    from poot_npu.xdna_host import RunStats, XdnaHostDevice

__all__ = [
    "DEVICES",
    "DeviceInfo",
    "DeviceKind",
    "RunStats",
    "VpuDevice",
    "XdnaDevice",
    "XdnaHostDevice",
    "available_devices",
    "device_info",
    "make_device",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "VpuDevice": ("poot_npu.vpu", "VpuDevice"),
        "XdnaDevice": ("poot_npu.xdna", "XdnaDevice"),
        "XdnaHostDevice": ("poot_npu.xdna_host", "XdnaHostDevice"),
        "RunStats": ("poot_npu.xdna_host", "RunStats"),
    },
)
