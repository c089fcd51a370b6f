"""The Intel NPU firmware the kernel loaded, and what to install when the graph compiler needs a
newer one.

The kernel driver (``intel_vpu``, drivers/accel/ivpu) loads the firmware from the host's
``/lib/firmware/intel/vpu``, never from the shell, while the ``.#npu-intel`` shell brings the
user-mode driver and the graph compiler of one linux-npu-driver release (``nix/intel-npu.json``).
A compiler newer than the host's firmware fails the first inference with ``MAPPED_INFERENCE_VERSION
is NOT compatible with the ELF`` (linux-npu-driver ``docs/overview.md``, "Firmware version
mismatch": the firmware must come from the release that matches the compiler).

What the kernel reports (``kernel_firmware``), first found wins:

- debugfs, ``/sys/kernel/debug/dri/<N>/fw_version`` and ``fw_name`` of the DRM device whose
  ``name`` is ``intel_vpu`` (``ivpu_debugfs.c``: ``fw_version_show`` prints ``fw->version``,
  ``fw_name_show`` ``fw->name``); debugfs is root's alone on most systems;
- the kernel log, the line ``ivpu_fw_parse`` prints at every boot of the NPU (``ivpu_fw.c``:
  ``ivpu_info(vdev, "Firmware: %s, version: %s", fw->name, ...)``), read with ``dmesg``, which
  ``kernel.dmesg_restrict`` may also keep from a user.

sysfs holds no firmware version (``ivpu_sysfs.c`` registers only ``npu_busy_time_us``,
``npu_memory_utilization``, ``sched_mode`` and the frequency attributes). Where neither is
readable the advice says how to read it (``sudo dmesg | grep -i 'intel_vpu.*firmware'``).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "FIRMWARE_ENV",
    "MISMATCH",
    "RELEASE_ENV",
    "KernelFirmware",
    "advice",
    "describe",
    "kernel_firmware",
    "parse_kernel_log",
    "remedy",
]

MISMATCH: Final = "MAPPED_INFERENCE_VERSION is NOT compatible"
"""What the user-mode driver says when the compiler's ELF is newer than the firmware."""
RELEASE_ENV: Final = "POOT_NPU_RELEASE"
"""The linux-npu-driver release of the shell's driver and compiler (``nix/shells.nix``)."""
FIRMWARE_ENV: Final = "POOT_NPU_FIRMWARE"
"""The firmware of that release, as the shell builds it (nixpkgs' ``intel-npu-driver.firmware``)."""
DEBUGFS: Final = Path("/sys/kernel/debug/dri")
_LOG_LINE: Final = re.compile(r"intel_vpu .*Firmware: (?P<name>\S+), version: (?P<version>\S.*)$")


@dataclass(frozen=True, slots=True)
class KernelFirmware:
    """The firmware the kernel loaded: its file, its version string, and where it was read."""

    name: str | None
    version: str
    source: str


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def _from_debugfs(root: Path) -> KernelFirmware | None:
    try:
        minors = sorted(root.iterdir())
    except OSError:
        return None
    for d in minors:
        if not (_read(d / "name") or "").startswith("intel_vpu"):
            continue
        version = _read(d / "fw_version")
        if version:
            return KernelFirmware(_read(d / "fw_name"), version, str(d / "fw_version"))
    return None


def parse_kernel_log(text: str) -> KernelFirmware | None:
    """The firmware of the last NPU boot the kernel log ``text`` records, or None."""
    found = None
    for line in text.splitlines():
        m = _LOG_LINE.search(line)
        if m:
            found = KernelFirmware(m["name"], m["version"].strip(), "the kernel log (dmesg)")
    return found


def _dmesg() -> str:
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def kernel_firmware(
    debugfs: Path = DEBUGFS, kernel_log: Callable[[], str] = _dmesg
) -> KernelFirmware | None:
    """The firmware the kernel reports (see the module), or None where nothing is readable."""
    return _from_debugfs(debugfs) or parse_kernel_log(kernel_log())


def describe(firmware: KernelFirmware | None) -> str:
    """One phrase for a reason: the firmware as read, or how to read it."""
    if firmware is None:
        return (
            "the kernel's NPU firmware version is not readable here (debugfs and dmesg need "
            "root: `sudo dmesg | grep -i 'intel_vpu.*firmware'`)"
        )
    name = f" ({firmware.name})" if firmware.name else ""
    return f"the kernel loaded NPU firmware {firmware.version}{name}, read from {firmware.source}"


def remedy(env: Mapping[str, str] | None = None) -> str:
    """What to install: the firmware of the compiler's linux-npu-driver release, from the shell
    (``$POOT_NPU_FIRMWARE``) or its package, or a linux-firmware that carries it."""
    e = os.environ if env is None else env
    release = e.get(RELEASE_ENV)
    which = f"linux-npu-driver {release}" if release else "the graph compiler's linux-npu-driver"
    shipped = e.get(FIRMWARE_ENV)
    from_shell = (
        f"copy the shell's {shipped}/* into /lib/firmware/updates/intel/vpu/"
        if shipped
        else "install that release's intel-fw-npu package (`cmake --install build --component "
        "fw-npu` from its source)"
    )
    return (
        f"the compiler is {which}'s, which needs that release's firmware (linux-npu-driver "
        f"docs/overview.md, 'Firmware version mismatch'): either {from_shell} and reload the "
        "driver (`sudo rmmod intel_vpu && sudo modprobe intel_vpu`); or on NixOS add "
        "`hardware.firmware = [ intel-npu-driver.firmware ]` from this flake's override; or "
        f"upgrade linux-firmware to a release carrying intel/vpu firmware of {which} or newer"
    )


def advice(
    error: str, firmware: KernelFirmware | None, env: Mapping[str, str] | None = None
) -> str | None:
    """What to install when ``error`` is the firmware mismatch, None for any other error."""
    if MISMATCH not in error:
        return None
    return f"the NPU firmware is older than the graph compiler: {describe(firmware)}; {remedy(env)}"
