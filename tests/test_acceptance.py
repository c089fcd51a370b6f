"""``poot acceptance``: the checks on the oracle's device, the receipt, ``--compare``, and the
exit codes (3 for a device that is not here, 2 for bad usage or a bad receipt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_errors import check_error_lines
from poot_npu.registry import DEVICES, DeviceKind

from poot.cli import main


def test_acceptance_on_cpu_passes_and_writes_a_stand_in_receipt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "receipt.json"
    assert main(["acceptance", "--device", "cpu", "-o", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["passed"] is True and r["device"]["kind"] == "stand-in"
    assert r["device"]["name"] == "cpu" and r["poot"]["version"]
    assert r["device"]["driver"] == "none (a stand-in)" and r["device"]["kernel"]
    names = [c["name"] for c in r["checks"]]
    assert "exp f32 at its domain's edges" in names
    assert "cache: a second process compiles nothing" in names
    assert "cache: a damaged entry is repaired" in names
    assert "a missed deadline poisons the device" in names
    assert "a contract violation poisons its entry" in names
    assert all(c["passed"] for c in r["checks"])
    assert any(f.get("primitive") == "exp" for f in r["contract_figures"])
    # side by side with itself, and with a damaged copy
    assert main(["acceptance", "--compare", str(out), str(out)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    capsys.readouterr()
    assert main(["acceptance", "--compare", str(out), str(bad)]) == 2
    err = capsys.readouterr().err
    assert check_error_lines(err) == ["InputError"] and f"receipt {bad}" in err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vpu-cpu", "xdna-host"])
def test_acceptance_on_each_npu_stand_in_passes_every_check(name: str, tmp_path: Path) -> None:
    """Every check the hardware run makes passes on the stand-in that reproduces its target:
    each capability at its domain's edges (broadcast_in_dim too; an F32 row of the narrowing
    target inside FP16's range, the rest refused on the way in; an add's result of 65504 left
    out, a saturated overflow the device refuses), and a missed deadline on a device fast
    enough to run a small chain within the millisecond it waits in."""
    out = tmp_path / "receipt.json"
    assert main(["acceptance", "--device", name, "-o", str(out)]) == 0
    r = json.loads(out.read_text())
    failed = [(c["name"], c["detail"]) for c in r["checks"] if not c["passed"]]
    assert failed == [] and r["passed"] is True
    names = {c["name"] for c in r["checks"]}
    assert {"broadcast_in_dim f32 at its domain's edges", "add f16 at its domain's edges"} & names


@pytest.mark.parametrize(
    "name", [d.name for d in DEVICES if d.kind is DeviceKind.HARDWARE], ids=str
)
def test_an_absent_device_exits_3_with_the_reason(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    info = next(d for d in DEVICES if d.name == name)
    if info.unavailable_reason() is None:
        pytest.skip(f"{name} is here: its acceptance run is the hardware session's")
    assert main(["acceptance", "--device", name]) == 3
    assert "hardware unavailable" in capsys.readouterr().err


def test_bad_usage_exits_2() -> None:
    with pytest.raises(SystemExit) as err:
        main(["acceptance"])
    assert err.value.code == 2


def test_a_failed_check_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import poot.acceptance.checks as acceptance

    def failing(*args: object) -> object:
        yield acceptance.Check("a check that failed", False, 2.0, "error/bound")

    for name in ("_capabilities", "region_checks", "cache_checks", "poisoning_checks"):
        monkeypatch.setattr(acceptance, name, failing)
    out = tmp_path / "r.json"
    assert main(["acceptance", "--device", "cpu", "-o", str(out)]) == 1
    assert json.loads(out.read_text())["passed"] is False


@pytest.mark.slow
def test_every_xdna2_region_bound_at_and_one_past_its_limit_on_xdna_host(tmp_path: Path) -> None:
    """Each limit of the xdna2 region table has an "at" and a "one past" check, and all pass
    on the stand-in: the at-limit programs run verified, the one-past ones split or are refused
    with the typed limit; the flag word refuses exp(100) computed inside a region."""
    from poot_engine import Engine
    from poot_npu.xdna_host import XdnaHostDevice
    from poot_planner import get_target

    from poot.acceptance.regions import region_checks

    limits = get_target("xdna2").region_limits
    assert limits is not None
    with Engine(XdnaHostDevice(tmp_path / "k"), tmp_path / "c", verify="always") as engine:
        checks = list(region_checks(engine, "xdna2"))
    failed = [(c.name, c.detail) for c in checks if not c.passed]
    assert not failed
    names = [c.name for c in checks]
    table = {
        "compute tiles": limits.compute_tiles,
        "host streams in": limits.host_streams_in,
        "host streams out": limits.host_streams_out,
        "streams into a tile": limits.streams_per_tile,
        "tile-local bytes": limits.tile_bytes,
        "contexts": limits.contexts,
        "host buffers per kernel call": limits.host_buffers,
        "elements per tensor": limits.tensor_elements,
    }
    for what, limit in table.items():
        assert f"{what}: {limit} (at the limit of {limit})" in names, what
        assert any(n.startswith(f"{what}: ") and "one past" in n for n in names), what
    by = {c.name: c for c in checks}
    at = by[f"tile-local bytes: {limits.tile_bytes} (at the limit of {limits.tile_bytes})"]
    assert at.figure == limits.tile_bytes and "verified" in at.detail
    (past,) = [c for c in checks if c.name.startswith("tile-local bytes") and "one past" in c.name]
    assert past.figure is not None and past.figure > limits.tile_bytes
    assert "limit=tile_bytes" in past.detail
    (flag,) = [c for c in checks if c.name.startswith("flag word")]
    assert flag.passed and "region 0 flagged" in flag.detail


def test_the_legalized_xdna2_rules_on_xdna_host(tmp_path: Path) -> None:
    """Each rule's probe near zero and at the finite line's edges, then sigmoid and SiLU over
    the whole finite line and a masked softmax's exponent: all pass on the stand-in, each
    figure within its bound."""
    from poot_engine import Engine
    from poot_npu.xdna_host import XdnaHostDevice

    from poot.acceptance.legalized import legalized_checks

    with Engine(XdnaHostDevice(tmp_path / "k"), tmp_path / "c", verify="always") as engine:
        checks = list(legalized_checks(engine, "xdna2"))
    probed = [c for c in checks if c.name.startswith("legalized near zero")]
    assert [c.name for c in probed] == [
        "legalized near zero and at the edges: abs via max, sigmoid's select through exp and div",
        "legalized near zero and at the edges: abs via max",
        "legalized near zero and at the edges: min via max",
        "legalized near zero and at the edges: a NaN guard on a value the device proves not NaN",
        "legalized near zero and at the edges: a convolution as a matmul of its windows",
        "legalized near zero and at the edges: a window sum as a sum of its windows",
        "legalized near zero and at the edges: a window maximum as a maximum of its windows",
    ]
    assert all(c.passed and c.figure is not None and c.figure <= 1.0 for c in probed), [
        c.detail for c in probed
    ]
    assert [(c.name, c.passed) for c in checks[len(probed) :]] == [
        ("sigmoid (legalized) over the finite line", True),
        ("SiLU (legalized) over the finite line", True),
        ("masked softmax exponent (finfo(float32).min keys)", True),
    ], [c.detail for c in checks]
    sig, silu, masked = checks[len(probed) :]
    assert sig.figure is not None and 0.0 <= sig.figure <= 1.0
    assert "saturates exactly" in sig.detail and "NaN refused" in sig.detail
    assert silu.figure is not None and silu.figure <= 1.0 and masked.figure == 20 + 23 + 28


@pytest.mark.slow
def test_every_legalized_intel_rule_near_zero_and_at_the_edges_on_vpu_cpu(tmp_path: Path) -> None:
    """Issue 24 item 3: every intel-npu4 rule measured on the FP16 stand-in from 1e-6 to 1e-1
    and at FP16's edges, verified against the running bound; erf and tanh keep the sign of x."""
    from poot_engine import Engine
    from poot_npu.vpu import VpuDevice
    from poot_planner.legalize.rules import RULES

    from poot.acceptance.legalized import legalized_checks

    with Engine(VpuDevice("CPU"), tmp_path / "c", verify="always") as engine:
        checks = list(legalized_checks(engine, "intel-npu4"))
    failed = [(c.name, c.detail) for c in checks if not c.passed]
    assert not failed
    named = " ".join(c.name for c in checks)
    assert all(r.name in named for r in RULES if r.target == "intel-npu4")
    odd = [c for c in checks if "erf" in c.name or "tanh" in c.name]
    assert len(odd) == 2 and all("the sign of x kept" in c.detail for c in odd)


@pytest.mark.xdna
def test_the_legalized_xdna2_rules_on_the_npu(tmp_path: Path) -> None:
    from poot_engine import Engine
    from poot_npu.xdna import XdnaDevice

    from poot.acceptance.legalized import legalized_checks

    why = XdnaDevice.probe()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    with Engine(XdnaDevice(), tmp_path / "c", verify="always") as engine:
        failed = [(c.name, c.detail) for c in legalized_checks(engine, "xdna2") if not c.passed]
    assert not failed
