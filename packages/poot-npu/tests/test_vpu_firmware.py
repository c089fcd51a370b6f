"""The Intel NPU firmware the kernel reports (debugfs, the kernel log) and the probe's advice
when the first inference fails with the firmware mismatch (linux-npu-driver docs/overview.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from poot_npu import vpu_firmware, vpu_identity
from poot_npu.vpu_firmware import KernelFirmware
from test_vpu_identity import NPU_PROPS, FakeCore

# the boot line ivpu_fw_parse prints (ivpu_fw.c: "Firmware: %s, version: %s"), as dmesg shows it
BOOT = (
    "[    3.141592] intel_vpu 0000:00:0b.0: [drm] Firmware: intel/vpu/vpu_40xx_v0.0.bin, "
    "version: 20240611*MTL_CLIENT_SILICON-deployment*1830*ci_tag_ud202424_vpu_rc_20240611_0003"
)
OLD = "20240611*MTL_CLIENT_SILICON-deployment*1830*ci_tag_ud202424_vpu_rc_20240611_0003"
NEW = "20260828*MTL_CLIENT_SILICON-release*0001*ci_tag_ud202638_vpu_rc"
FAILED = (
    "Exception from src/inference/src/cpp/core.cpp: ERROR! MAPPED_INFERENCE_VERSION is NOT "
    "compatible with the ELF Expected: 6.1.0 vs received: 7.0.0"
)
ENV = {
    "POOT_NPU_RELEASE": "1.38.0",
    "POOT_NPU_FIRMWARE": "/nix/store/x-firmware/lib/firmware/intel/vpu",
}


def _debugfs(root: Path, name: str, version: str | None) -> Path:
    d = root / "dri" / "128"
    d.mkdir(parents=True)
    (d / "name").write_text(f"{name} dev=0000:00:0b.0 unique=0000:00:0b.0\n")
    if version is not None:
        (d / "fw_version").write_text(version + "\n")
        (d / "fw_name").write_text("intel/vpu/vpu_40xx_v1.bin\n")
    return root / "dri"


def test_debugfs_is_read_first(tmp_path: Path) -> None:
    got = vpu_firmware.kernel_firmware(_debugfs(tmp_path, "intel_vpu", NEW), lambda: BOOT)
    assert got == KernelFirmware(
        "intel/vpu/vpu_40xx_v1.bin", NEW, str(tmp_path / "dri" / "128" / "fw_version")
    )


def test_the_kernel_log_when_debugfs_is_not_the_npus_or_not_readable(tmp_path: Path) -> None:
    other = _debugfs(tmp_path, "i915", NEW)  # a GPU's DRM device: not the NPU
    got = vpu_firmware.kernel_firmware(other, lambda: f"noise\n{BOOT}\nmore noise")
    assert got == KernelFirmware("intel/vpu/vpu_40xx_v0.0.bin", OLD, "the kernel log (dmesg)")
    assert vpu_firmware.kernel_firmware(tmp_path / "absent", lambda: "") is None


def test_the_last_npu_boot_in_the_log_wins() -> None:
    later = BOOT.replace(OLD, NEW).replace("3.141592", "99.0")
    got = vpu_firmware.parse_kernel_log(f"{BOOT}\n{later}\n")
    assert got is not None and got.version == NEW


def test_the_mismatch_names_the_release_its_firmware_and_linux_firmware() -> None:
    fw = KernelFirmware("intel/vpu/vpu_40xx_v0.0.bin", OLD, "the kernel log (dmesg)")
    said = vpu_firmware.advice(FAILED, fw, ENV)
    assert said is not None
    assert OLD in said and "linux-npu-driver 1.38.0" in said
    assert ENV["POOT_NPU_FIRMWARE"] in said and "/lib/firmware/updates/intel/vpu" in said
    assert "linux-firmware" in said and "hardware.firmware" in said
    assert vpu_firmware.advice("ZE_RESULT_ERROR_UNSUPPORTED_FEATURE", fw, ENV) is None
    unread = vpu_firmware.advice(FAILED, None, {})
    assert unread is not None and "sudo dmesg" in unread and "intel-fw-npu" in unread


def test_the_probe_says_which_firmware_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vpu_identity, "_probed", set())
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    fw = KernelFirmware("intel/vpu/vpu_40xx_v0.0.bin", OLD, "the kernel log (dmesg)")
    monkeypatch.setattr(vpu_firmware, "kernel_firmware", lambda: fw)
    why = vpu_identity.probe(FakeCore(["NPU"], NPU_PROPS, RuntimeError(FAILED)), "NPU", {})
    assert why is not None
    assert "does not compile and run on the NPU" in why and "NPU firmware is older" in why
    assert OLD in why and "linux-npu-driver 1.38.0" in why
    other = vpu_identity.probe(FakeCore(["NPU"], NPU_PROPS, RuntimeError("ZE_RESULT_X")), "NPU", {})
    assert other is not None and f"kernel loaded NPU firmware {OLD}" in other
