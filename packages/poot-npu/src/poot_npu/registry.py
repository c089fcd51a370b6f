"""Every device poot knows, and whether it is on this machine.

One line per device. A device that is missing is *unavailable* (a reason says what is missing),
which is never *unsupported*: the same programs run where the hardware exists. Stand-ins say
what they prove and what they do not.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from poot_engine import CpuDevice, Device, HostSpans
from poot_ir import DeviceUnavailable

__all__ = [
    "DEVICES",
    "DeviceInfo",
    "DeviceKind",
    "available_devices",
    "device_info",
    "host_device",
    "make_device",
]


class DeviceKind(Enum):
    ORACLE = "oracle"
    HOST = "compiled host"
    STAND_IN = "hardware-free stand-in"
    HARDWARE = "hardware"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A device: its name, the planner target it runs, what kind it is, what it proves, and a
    probe that returns None when it is here or the reason it is not. ``checks_score_bound``
    is what the device ``make`` opens says in its ``traits`` (a test holds the two together),
    known here without opening it, so that ``poot plan`` partitions as ``poot run`` does."""

    name: str
    target: str
    kind: DeviceKind
    proves: str
    probe: Callable[[], str | None]
    make: Callable[[], Device]
    checks_score_bound: bool = False

    def unavailable_reason(self) -> str | None:
        return self.probe()


def _module(name: str) -> str | None:
    return (
        None
        if importlib.util.find_spec(name) is not None
        else f"python module {name!r} is not installed"
    )


def _openvino_has(device: str) -> str | None:
    missing = _module("openvino") or _module("poot_npu.vpu")
    if missing:
        return missing
    from poot_npu.vpu import VpuDevice

    return VpuDevice.probe(device)


def _xdna() -> str | None:
    missing = _module("pyxrt")
    if missing:
        return missing + " (XRT's Python bindings: enter `nix develop .#npu`)"
    missing = _module("poot_npu.xdna")
    if missing:
        return missing
    from poot_npu.xdna import XdnaDevice

    return XdnaDevice.probe()


def _host_cc() -> str | None:
    missing = _module("poot_npu.xdna_host")
    if missing:
        return missing
    if shutil.which("cc") or shutil.which("gcc"):
        return None
    return "no host C compiler (cc or gcc) on PATH"


def _make_vpu(device: str) -> Callable[[], Device]:
    def make() -> Device:
        from poot_npu.vpu import VpuDevice

        return VpuDevice(device)

    return make


def _host() -> str | None:
    missing = _module("openvino") or _module("poot_npu.host")
    if missing:
        return missing
    from poot_npu.host import HostDevice

    return HostDevice.probe()


def _make_host() -> Device:
    from poot_npu.host import HostDevice

    return HostDevice()


def _make_xdna() -> Device:
    from poot_npu.xdna import XdnaDevice

    return XdnaDevice()


def _make_xdna_host() -> Device:
    from poot_npu.xdna_host import XdnaHostDevice

    return XdnaHostDevice()


DEVICES: tuple[DeviceInfo, ...] = (
    DeviceInfo(
        "cpu",
        "cpu",
        DeviceKind.ORACLE,
        "the reference semantics itself",
        lambda: None,
        CpuDevice,
    ),
    DeviceInfo(
        "host",
        "host-cpu",
        DeviceKind.HOST,
        "the host CPU: one compiled OpenVINO graph in F32, checked against the oracle",
        _host,
        _make_host,
    ),
    DeviceInfo(
        "vpu",
        "intel-npu4",
        DeviceKind.HARDWARE,
        "the whole Intel path: the driver's graph compiler and Level Zero on a Lunar Lake NPU",
        lambda: _openvino_has("NPU"),
        _make_vpu("NPU"),
        checks_score_bound=True,
    ),
    DeviceInfo(
        "vpu-cpu",
        "intel-npu4",
        DeviceKind.STAND_IN,
        "the same OpenVINO IR on OpenVINO's CPU plugin with in-graph FP16 rounding; "
        "not the NPU's compiler or its FP16 units",
        lambda: _openvino_has("CPU"),
        _make_vpu("CPU"),
        checks_score_bound=True,
    ),
    DeviceInfo(
        "xdna",
        "xdna2",
        DeviceKind.HARDWARE,
        "the whole AMD path: Peano, aiecc, XRT and an XDNA2 NPU",
        _xdna,
        _make_xdna,
        checks_score_bound=True,
    ),
    DeviceInfo(
        "xdna-host",
        "xdna2",
        DeviceKind.STAND_IN,
        "the generated C kernels, region layout, arena offsets and chunking, run by the host C "
        "compiler; not the NPU toolchain or silicon",
        _host_cc,
        _make_xdna_host,
        checks_score_bound=True,
    ),
)


def device_info(name: str) -> DeviceInfo:
    for d in DEVICES:
        if d.name == name:
            return d
    raise DeviceUnavailable(name, f"no such device; known: {', '.join(d.name for d in DEVICES)}")


def make_device(name: str) -> Device:
    """Open the device ``name``, or raise ``DeviceUnavailable`` saying what is missing."""
    info = device_info(name)
    why = info.unavailable_reason()
    if why is not None:
        raise DeviceUnavailable(name, why)
    return info.make()


def host_device(target: str, spans: HostSpans) -> Device | None:
    """Where a partition's host spans run for an engine on a device of ``target``
    (``Engine(host=...)``): the compiled host device (``spans`` "compiled", the default of
    ``poot run --host``, ``poot generate --host``, ``InferenceSession(host=)`` and
    ``poot_jax.Runner(host=)``), or None, the oracle (``spans`` "oracle"; or ``target`` the
    oracle's or the host device's own, whose refused spans the host device refuses too).
    ``DeviceUnavailable`` when the host device is not here."""
    if spans == "oracle" or target in ("cpu", "host-cpu"):
        return None
    return make_device("host")


def available_devices() -> list[DeviceInfo]:
    return [d for d in DEVICES if d.unavailable_reason() is None]
