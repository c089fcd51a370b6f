"""Partitioned runs through the hardware-free stand-ins and ``poot run --partition``: device
spans on the device, refused spans on the oracle, every span checked on its own inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from poot_engine import Engine
from poot_engine.run import run_program
from poot_ir import Builder, DomainFlagged, DType, parse_program
from poot_npu.registry import device_info, make_device
from poot_planner import partition, plan

from poot.cli import EXAMPLES, main

LOG = (EXAMPLES / "log_state.poot").read_text()
F32 = DType.F32


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
    assert "span 1: host device equations 2..3" in out  # compiled on the host (the default)
    assert "span 2: device equations 4..6" in out
    assert "FAILED" not in out
    assert main([*argv, "--device", "vpu-cpu", "--partition", "--host", "oracle"]) == 0
    out = capsys.readouterr().out
    assert "span 1: oracle equations 2..3" in out and "FAILED" not in out


def test_a_flagged_span_is_named_in_the_partitioned_refusal(tmp_path: Path) -> None:
    # device, oracle (a matmul one of whose output rows, double buffered, no tile holds:
    # refused on xdna2 whatever the chunking, its right operand streamed in pieces or not), device:
    # the second device span's exp(100)
    # is flagged by its region 0, equation 1 of its own program; the refusal says which span
    b = Builder("three_spans")
    x = b.slot("x", F32, (4, 8))
    w = b.weight("w", F32, (8, 16384))  # an output row of 64 KiB: past a tile's bytes
    h = b.matmul(b.neg(x), w)
    b.output("y", b.exp(b.add(h, 1.0)))
    program = b.build()
    spans = partition(program, "xdna2")
    assert [(s.device, s.first, s.last) for s in spans] == [
        (True, 0, 0),
        (False, 1, 1),
        (True, 2, 3),
    ]
    xs = np.full((4, 8), 2.0, np.float32)
    xs[1, 2] = 99.0  # y = exp(x + 1) with w = -I: exp(100), outside exp's domain [-87, 88]
    weights = {"w": -np.eye(8, 16384, dtype=np.float32)}
    with Engine(make_device("xdna-host"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(program, "xdna2"), engine.load_weights(weights))
        ok = engine.step(entry, {"x": np.full((4, 8), 2.0, np.float32)})["y"]
        assert np.allclose(ok[:, :8], np.exp(np.float32(3.0)), rtol=1e-5)  # exp(3) inside
        with pytest.raises(DomainFlagged) as err:
            engine.step(entry, {"x": xs})
    e = err.value
    assert (e.region, e.count) == (0, 1) and 1 in e.eqns  # the span's own program: exp is 1
    assert e.span == f"{spans[2].program.name!r} (equations 2..3 of 'three_spans')"
    assert "of span" in str(e) and "equations 2..3" in str(e)
