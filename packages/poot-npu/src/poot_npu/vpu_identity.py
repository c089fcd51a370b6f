"""What a VpuDevice is: whether it can compile here (the probe) and what its blobs depend on
(the identity, the blob-cache key's device half).

The probe (``probe``). OpenVINO listing an NPU proves only that the plugin found the driver:
without the graph compiler every compile fails (linux-npu-driver loads
``libnpu_driver_compiler.so`` with ``dlopen``, ``umd/level_zero_driver/source/ext/
vcl_symbols.hpp``, and a graph call without it is ``ZE_RESULT_ERROR_UNSUPPORTED_FEATURE``,
``ext/compiler.cpp``). So the NPU is available only when OpenVINO lists it, its
``NPU_COMPILER_VERSION`` is non-zero (the driver leaves the version at zero when no compiler
loads, ``ext/graph.cpp`` ``getDeviceGraphProperties``) and a one-equation graph compiles and runs
and gives the right numbers; otherwise the reason says which step failed, and, where the graph
does not run, the NPU firmware the kernel loaded and what to install when the driver says
``MAPPED_INFERENCE_VERSION is NOT compatible`` (``vpu_firmware``: the host's firmware is older
than the shell's compiler). A success is remembered for the process.

The identity (``identity``). The versions OpenVINO reports do not follow the compiler:
``NPU_COMPILER_VERSION`` is the compiler's API version (7.4 across driver releases 1.22 to 1.26,
each with a new compiler), ``NPU_DRIVER_VERSION`` the driver's build timestamp (fixed under Nix's
``SOURCE_DATE_EPOCH``) and ``NPU_PLATFORM`` the configured value. So the identity also holds
the sha256 of every library that compiles or runs the graph, found among the process's mapped
libraries (``/proc/self/maps``) and, for one not mapped yet, on the loader's search path
(``LD_LIBRARY_PATH``, the driver's own directory, the system directories), and OpenVINO's own
build (``ov.get_version()`` and the digest of ``libopenvino.so``): a new driver, compiler or
OpenVINO changes the key even when every reported version stays the same.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
from poot_codegen.intel.quiet import opset16 as ops
from poot_codegen.intel.quiet import ov
from poot_engine.device import DeviceIdentity

from poot_npu import vpu_firmware

__all__ = ["LIBRARIES", "identity", "library_options", "probe", "prop"]

#: The libraries whose bytes decide what a device's graph compiles to, by name prefix.
LIBRARIES: Final[dict[str, tuple[str, ...]]] = {
    "CPU": ("libopenvino.so", "libopenvino_intel_cpu_plugin.so"),
    "NPU": (
        "libopenvino.so",
        "libopenvino_intel_npu_plugin.so",
        "libopenvino_intel_npu_compiler",  # a compiler-in-plugin, where one is installed
        "libze_loader.so",
        "libze_intel_npu.so",  # the user-mode driver
        "libnpu_driver_compiler.so",  # the graph compiler the driver dlopens
    ),
}
_REQUIRED: Final = {"libopenvino.so", "libze_intel_npu.so"}
_SYSTEM_DIRS: Final = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib")
_PART_KEYS: Final = ("DEVICE_ARCHITECTURE", "FULL_DEVICE_NAME")
_COMPILER_KEYS: Final = ("NPU_COMPILER_TYPE", "NPU_COMPILER_VERSION", "NPU_DRIVER_VERSION")
_digests: dict[tuple[str, int, int], str] = {}
_probed: set[str] = set()


def prop(core: Any, device: str, key: str) -> str | None:
    """A device property as text, or None where it cannot be read (without an NPU, every NPU
    property but the compiler type raises ``RuntimeError``)."""
    try:
        value = core.get_property(device, key)
    except RuntimeError:
        return None
    if key == "NPU_COMPILER_VERSION" and isinstance(value, int):
        return f"{value >> 16}.{value & 0xFFFF}"
    return str(getattr(value, "name", value))


def probe(core: Any, device: str, config: dict[str, str]) -> str | None:
    """None when ``device`` is here and compiles, else the reason it is unavailable."""
    try:
        available = [str(d) for d in core.available_devices]
    except RuntimeError as err:
        return f"OpenVINO could not list its devices: {err}"
    if not any(d == device or d.startswith(device + ".") for d in available):
        return f"OpenVINO sees no {device}: available devices {available}"
    if device != "NPU" or device in _probed:
        return None
    version = prop(core, device, "NPU_COMPILER_VERSION")
    if version is None:
        return "OpenVINO lists an NPU but NPU_COMPILER_VERSION cannot be read: no graph compiler"
    if version == "0.0":
        return (
            "OpenVINO lists an NPU but NPU_COMPILER_VERSION is 0.0: the driver loaded no graph "
            "compiler (libnpu_driver_compiler.so; enter `nix develop .#npu-intel`)"
        )
    why = _one_equation(core, device, config)
    if why is None:
        _probed.add(device)
    return why


def _one_equation(core: Any, device: str, config: dict[str, str]) -> str | None:
    """None when ``y = x + x`` (F16) compiles and runs right on ``device``, else why not."""
    x = ops.parameter([4], np.float16, name="x")
    model = ov.Model([ops.result(ops.add(x, x, name="y"), name="out:y")], [x], "poot_probe")
    value = np.array([1.0, -2.5, 0.0, 1024.0], np.float16)
    try:
        got = core.compile_model(model, device, config).create_infer_request().infer([value])
        out = np.asarray(next(iter(got.values())))
    except (RuntimeError, StopIteration) as err:
        return f"a one-equation graph does not compile and run on the NPU: {err}; " + _firmware(
            str(err)
        )
    if out.shape != (4,) or not np.array_equal(out.astype(np.float16), value + value):
        return f"a one-equation graph runs on the NPU but returns {out!r}, not {value + value!r}"
    return None


def _firmware(error: str) -> str:
    """The firmware part of a failed first inference's reason (``vpu_firmware``): what to install
    when the driver says the firmware is too old, else the firmware the kernel loaded and what to
    install should the driver's log say so."""
    firmware = vpu_firmware.kernel_firmware()
    said = vpu_firmware.advice(error, firmware)
    if said is not None:
        return said
    return (
        f"{vpu_firmware.describe(firmware)}; if the driver's log says "
        f"'{vpu_firmware.MISMATCH}', {vpu_firmware.remedy()}"
    )


def _mapped(maps_text: str) -> list[Path]:
    """The files a ``/proc/self/maps`` text maps, in order, each once."""
    seen: dict[str, Path] = {}
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            seen.setdefault(parts[5], Path(parts[5]))
    return list(seen.values())


def _digest(path: Path) -> str:
    """The sha256 of a file, remembered by (real path, size, mtime) for the process."""
    real = path.resolve()
    st = real.stat()
    key = (str(real), st.st_size, st.st_mtime_ns)
    if key not in _digests:
        with real.open("rb") as f:
            _digests[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _digests[key]


def _search(stem: str, dirs: Iterable[Path]) -> Path | None:
    for d in dirs:
        try:
            found = sorted(p for p in d.iterdir() if p.name.startswith(stem))
        except OSError:
            continue
        if found:
            return found[0]
    return None


def library_options(
    device: str, maps_text: str | None = None, search: Sequence[Path] | None = None
) -> tuple[tuple[str, str], ...]:
    """``("lib <prefix>", "<file name> sha256:<hex>")`` for each library of ``device``
    (``LIBRARIES``): the mapped one (from ``maps_text``, by default this process's
    ``/proc/self/maps``), else the first on ``search`` (by default the loader's path), else
    ``absent`` for a library that must be there or is not found."""
    if maps_text is None:
        try:
            maps_text = Path("/proc/self/maps").read_text()
        except OSError:
            maps_text = ""
    mapped = _mapped(maps_text)
    if search is None:
        env = os.environ.get("LD_LIBRARY_PATH", "")
        driver = [p.parent for p in mapped if p.name.startswith("libze_intel_npu.so")]
        search = [Path(d) for d in env.split(":") if d] + driver + [Path(d) for d in _SYSTEM_DIRS]
    out = []
    for stem in LIBRARIES[device]:
        path = next((p for p in mapped if p.name.startswith(stem)), None)
        if path is None and device == "NPU":
            path = _search(stem, search)
        if path is not None and path.is_file():
            out.append((f"lib {stem}", f"{path.name} sha256:{_digest(path)}"))
        elif stem in _REQUIRED or stem == "libnpu_driver_compiler.so":
            out.append((f"lib {stem}", "absent"))
    return tuple(out)


def identity(
    core: Any, device: str, config: dict[str, str], emulate: bool, maps_text: str | None = None
) -> DeviceIdentity:
    """The device's identity (module docstring)."""
    try:
        plugin = str(core.get_versions(device)[device].build_number)
    except (RuntimeError, KeyError):
        plugin = "unknown"
    version = f"{ov.get_version()}; {device} plugin {plugin}"
    if device == "CPU":
        cpu = prop(core, "CPU", "FULL_DEVICE_NAME") or "an unnamed CPU"
        arch = prop(core, "CPU", "DEVICE_ARCHITECTURE") or "unknown"
        part = f"{cpu} ({arch}), OpenVINO's CPU plugin standing in for an Intel NPU4"
    else:
        found = [(k, prop(core, device, k)) for k in _PART_KEYS]
        part = "NPU " + ", ".join(f"{k}={v}" for k, v in found if v is not None)
        compilers = [(k, prop(core, device, k)) for k in _COMPILER_KEYS]
        version += "".join(f"; {k}={v}" for k, v in compilers if v is not None)
    options = (
        *config.items(),
        ("emulate_f16", "true" if emulate else "false"),
        *library_options(device, maps_text),
    )
    return DeviceIdentity(part, "openvino", version, tuple(sorted(options)))
