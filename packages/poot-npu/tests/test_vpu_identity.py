"""The VpuDevice probe and identity, without an NPU: fake OpenVINO cores and fake libraries.

The identity holds the sha256 of each library that compiles or runs the graph (from the mapped
libraries or the loader's search path) and OpenVINO's build, so changing any one changes the
blob-cache key even when every version OpenVINO reports stays the same. The probe reports the
NPU only when it is listed, its compiler loaded (``NPU_COMPILER_VERSION`` non-zero) and a
one-equation graph compiles and runs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from poot_engine.blob_cache import blob_key
from poot_npu import vpu_identity
from poot_npu.registry import device_info
from poot_npu.vpu import VpuDevice

NPU_LIBS = {
    "libopenvino.so": "libopenvino.so.2641",
    "libopenvino_intel_npu_plugin.so": "libopenvino_intel_npu_plugin.so",
    "libze_loader.so": "libze_loader.so.1.21.9",
    "libze_intel_npu.so": "libze_intel_npu.so.1.32.1",
    "libnpu_driver_compiler.so": "libnpu_driver_compiler.so",
}


class FakeCore:
    """What ``vpu_identity`` asks of ``ov.Core``; the NPU's reported versions never change."""

    def __init__(self, devices: list[str], props: dict[str, Any], run: Any = None) -> None:
        self.available_devices = devices
        self.props = props
        self.run = run

    def get_property(self, device: str, key: str) -> Any:
        value = self.props.get(key)
        if isinstance(value, Exception):
            raise value
        if value is None:
            raise RuntimeError(f"Unsupported configuration key {key}")
        return value

    def get_versions(self, device: str) -> dict[str, Any]:
        class V:
            build_number = "2026.4.1-fake"

        return {device: V()}

    def compile_model(self, model: Any, device: str, config: dict[str, str]) -> Any:
        run = self.run

        class Request:
            def infer(self, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
                if isinstance(run, Exception):
                    raise run
                return {"y": run(inputs[0]) if run else inputs[0] + inputs[0]}

        class Compiled:
            def create_infer_request(self) -> Request:
                return Request()

        return Compiled()


NPU_PROPS = {
    "NPU_COMPILER_TYPE": "DRIVER",
    "NPU_COMPILER_VERSION": (7 << 16) | 4,
    "NPU_DRIVER_VERSION": 315532800,  # SOURCE_DATE_EPOCH under Nix: the same for every build
    "DEVICE_ARCHITECTURE": "4000",
    "FULL_DEVICE_NAME": "Intel(R) AI Boost",
}


def _libs(tmp: Path) -> dict[str, Path]:
    paths = {}
    for stem, name in NPU_LIBS.items():
        p = tmp / name
        p.write_bytes(f"ELF {name} build 1".encode())
        paths[stem] = p
    return paths


def _maps(paths: list[Path]) -> str:
    return (
        "".join(
            f"7f00{i:04x}000-7f00{i:04x}fff r-xp 00000000 08:01 {100 + i} {p}\n"
            for i, p in enumerate(paths)
        )
        + "7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]\n"
    )


def _key(maps: str, search: list[Path], monkeypatch: pytest.MonkeyPatch) -> str:
    real = vpu_identity.library_options
    monkeypatch.setattr(
        vpu_identity, "library_options", lambda d, m=None, s=None: real(d, maps, search)
    )
    i = vpu_identity.identity(FakeCore(["NPU"], NPU_PROPS), "NPU", {}, emulate=False)
    return blob_key(i.part, i.compiler, i.compiler_version, i.options, b"the same IR")


def test_identity_digests_every_library_and_each_change_changes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _libs(tmp_path)
    # the compiler is not mapped yet (the driver dlopens it on first use): found on the path
    mapped = [p for s, p in paths.items() if s != "libnpu_driver_compiler.so"]
    maps, search = _maps(mapped), [tmp_path / "nowhere", tmp_path]
    opts = dict(vpu_identity.library_options("NPU", maps, search))
    for stem, p in paths.items():
        assert (
            opts[f"lib {stem}"] == f"{p.name} sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        )
    keys = {_key(maps, search, monkeypatch)}
    for stem, p in paths.items():
        p.write_bytes(p.read_bytes() + b" rebuilt")  # a new build, same reported versions
        keys.add(_key(maps, search, monkeypatch))
        assert len(keys) == 2 + list(paths).index(stem), f"changing {stem} kept the key"
    monkeypatch.setattr(vpu_identity.ov, "get_version", lambda: "2026.5.0-other-build")
    keys.add(_key(maps, search, monkeypatch))
    assert len(keys) == 2 + len(paths), "OpenVINO's own build is not in the key"


def test_a_missing_compiler_or_driver_is_recorded_as_absent(tmp_path: Path) -> None:
    opts = dict(vpu_identity.library_options("NPU", "", [tmp_path]))
    assert opts["lib libnpu_driver_compiler.so"] == "absent"
    assert opts["lib libze_intel_npu.so"] == "absent"


def test_the_stand_in_identity_digests_the_loaded_openvino() -> None:
    vpu = VpuDevice("CPU")
    opts = dict(vpu.identity.options)
    vpu.close()
    maps = Path("/proc/self/maps").read_text()
    (path,) = {line.split()[-1] for line in maps.splitlines() if "/libopenvino.so." in line}
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert opts["lib libopenvino.so"] == f"{Path(path).name} sha256:{digest}"
    assert opts["lib libopenvino_intel_cpu_plugin.so"].endswith(tuple("0123456789abcdef"))


@pytest.mark.parametrize(
    ("core", "reason"),
    [
        (FakeCore(["CPU"], NPU_PROPS), "OpenVINO sees no NPU"),
        (
            FakeCore(["CPU", "NPU"], {**NPU_PROPS, "NPU_COMPILER_VERSION": RuntimeError("VCL")}),
            "NPU_COMPILER_VERSION cannot be read",
        ),
        (
            FakeCore(["NPU"], {**NPU_PROPS, "NPU_COMPILER_VERSION": 0}),
            "NPU_COMPILER_VERSION is 0.0",
        ),
        (
            FakeCore(["NPU"], NPU_PROPS, RuntimeError("ZE_RESULT_ERROR_UNSUPPORTED_FEATURE")),
            "does not compile and run on the NPU: ZE_RESULT_ERROR_UNSUPPORTED_FEATURE",
        ),
        (FakeCore(["NPU"], NPU_PROPS, lambda x: x * 0), "returns"),
    ],
    ids=["not-listed", "no-compiler", "compiler-0.0", "compile-fails", "wrong-numbers"],
)
def test_the_probe_says_which_step_failed(core: FakeCore, reason: str) -> None:
    why = vpu_identity.probe(core, "NPU", {})
    assert why is not None and reason in why


def test_the_probe_passes_only_a_compiling_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vpu_identity, "_probed", set())
    assert vpu_identity.probe(FakeCore(["NPU.0", "NPU.1"], NPU_PROPS), "NPU", {}) is None


def test_poot_devices_gives_the_reason() -> None:
    why = device_info("vpu").unavailable_reason()
    assert why is not None and "NPU" in why  # here: OpenVINO sees no NPU
