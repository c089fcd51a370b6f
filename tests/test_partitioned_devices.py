"""Partitioned runs through the hardware-free stand-ins and ``poot run --partition``: device
spans on the device, refused spans on the oracle, every span checked on its own inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conformance.devices import open_device
from poot_ir import parse_program
from poot_npu.registry import device_info

from poot.cli import EXAMPLES, main
from poot.runner import run_program

LOG = (EXAMPLES / "log_state.poot").read_text()


def test_log_program_on_vpu_cpu(tmp_path: Path) -> None:
    report = run_program(
        parse_program(LOG),
        open_device(device_info("vpu-cpu")),
        "vpu-cpu",
        steps=3,
        cache_dir=tmp_path,
        partition=True,
    )
    assert [(s.device, s.first, s.last) for s in report.spans] == [
        (True, 0, 1),
        (False, 2, 3),
        (True, 4, 6),
    ]
    assert len(report.steps) == 3 and report.ok, report.steps


def test_fp16_boundary_on_xdna_host(tmp_path: Path) -> None:
    program = parse_program((EXAMPLES / "fp16_boundary.poot").read_text())
    report = run_program(
        program,
        open_device(device_info("xdna-host")),
        "xdna-host",
        steps=3,
        cache_dir=tmp_path,
        partition=True,
    )
    assert [(s.device, s.first, s.last) for s in report.spans] == [(False, 0, 4), (True, 5, 5)]
    assert len(report.steps) == 3 and report.ok, report.steps


def test_poot_run_partition(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "log.poot"
    path.write_text(LOG)
    argv = ["--cache-dir", str(tmp_path), "run", str(path), "--target", "intel-npu4"]
    assert main([*argv, "--device", "vpu-cpu"]) == 1  # refused as a whole, as before
    capsys.readouterr()
    assert main([*argv, "--device", "vpu-cpu", "--partition"]) == 0
    out = capsys.readouterr().out
    assert "span 0: device equations 0..1" in out
    assert "span 1: oracle equations 2..3" in out
    assert "span 2: device equations 4..6" in out
    assert "FAILED" not in out
