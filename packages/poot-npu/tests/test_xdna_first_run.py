"""What the first XDNA2 hardware run shows for the first time, as ``xdna`` tests that skip with
"hardware unavailable" here, each with its hardware-free twin through the host stand-in and the
fake XRT (so the program and its checks are proven before the NPU runs them):

- four regions in one process, each region's own result checked against the oracle: mlir-aie
  #3654 reports that a third hardware context can return wrong data while reporting COMPLETED;
- every linked core's program memory, measured with the toolchain's size tool, against the
  target table's (unmeasured) estimate and the 16 KiB each core has.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

import fake_pyxrt
import pytest
import xdna_cases as cases
from poot_codegen.xdna import link as xlink
from poot_codegen.xdna import lower_program
from poot_engine import Engine
from poot_ir import BitExact, Builder, DType, Program, ToolchainUnavailable, compare
from poot_ir.numerics import Comparison
from poot_npu import xdna as xdna_module
from poot_npu import xdna_contexts
from poot_npu.xdna import XdnaDevice
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import TARGETS, Plan, plan

F32 = DType.F32
Results = Mapping[str, cases.Array]
REGIONS = 4
PER_REGION = 32  # compute tiles per region


def four_regions() -> Program:
    """Four regions of 32 tiles (31 negs, then a multiply by ``k + 2``): each region ends in a
    result of its own, ``y_k = -(k + 2) y_(k-1)``, so a region returning stale or foreign data
    shows. The factors differ, so the four are four artifacts (identical regions would share
    one context: ``poot_codegen.xdna.reuse``) and the run holds four hardware contexts."""
    b = Builder("four_regions")
    x = b.slot("x", F32, (4, 16))
    for k in range(REGIONS):
        for _ in range(PER_REGION - 1):
            x = b.neg(x)
        x = b.mul(x, float(k + 2))
        b.output(f"y{k}", x)
    return b.build()


def _exact(name: str, got: Results, want: Results, feed: Results) -> Comparison:
    return compare(got[name], want[name], BitExact())


def test_the_program_has_four_regions_each_ending_in_its_own_result() -> None:
    p = plan(four_regions(), "xdna2").check()
    assert len(p.regions) == REGIONS
    results = dict(four_regions().results())
    for k, region in enumerate(p.regions):
        assert len(region.tiles) == PER_REGION
        assert results[f"y{k}"].id in {v.id for v in region.host_out}


def _four(engine: Engine) -> None:
    program = four_regions()
    cases.run_steps(engine, program, partial(cases.uniform_inputs, program), _exact)


def test_four_regions_on_the_host_stand_in(tmp_path: Path) -> None:
    with Engine(XdnaHostDevice(tmp_path / "kernels"), tmp_path / "blobs") as e:
        _four(e)


def test_four_regions_through_xrt_four_contexts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_pyxrt.reset()
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt)
    monkeypatch.setattr(xdna_module, "_abandoned", [])
    fake_pyxrt.install(plan(four_regions(), "xdna2").check(), tmp_path / "kernels")
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, str(REGIONS))  # past the #3654 default
    env = fake_pyxrt.fake_toolchain(tmp_path / "tools")
    with Engine(XdnaDevice(env), tmp_path / "blobs") as e:
        _four(e)
    assert sum(1 for entry in fake_pyxrt.STATE.log if entry[0] == "hw_context") == REGIONS


# -- real hardware ----------------------------------------------------------------------------


@pytest.fixture
def hardware(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    why = XdnaDevice.probe()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    # this test measures mlir-aie #3654, every result against the oracle: allowed past the
    # default of two contexts (poot_npu.xdna_contexts)
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, str(REGIONS))
    with Engine(XdnaDevice(), tmp_path / "blobs") as e:
        yield e


@pytest.mark.xdna
def test_four_regions_on_the_npu(hardware: Engine) -> None:
    """mlir-aie #3654: four distinct xclbins, four hardware contexts, each region's result
    against the oracle, three steps (the first records, the rest replay)."""
    _four(hardware)


def _section_bytes(size_tool: Path, elf: Path, pattern: str) -> int:
    """Bytes of the sections of ``elf`` whose name matches ``pattern`` (``llvm-size -A``: name,
    size, address)."""
    done = subprocess.run(
        [str(size_tool), "-A", str(elf)], capture_output=True, text=True, check=True
    )
    rows = [line.split() for line in done.stdout.splitlines()]
    return sum(int(r[1]) for r in rows if len(r) >= 3 and re.fullmatch(pattern, r[0]))


def _text_bytes(size_tool: Path, elf: Path) -> int:
    """Bytes of the executable sections of ``elf``."""
    return _section_bytes(size_tool, elf, r"\.text(\..*)?")


def _data_bytes(size_tool: Path, elf: Path) -> int:
    """Bytes the link put in the core's data region after its buffers (aiecc's linker script:
    ``.data`` with ``.rodata``, then ``.bss``)."""
    return _section_bytes(size_tool, elf, r"\.(data|rodata|bss)(\..*)?")


def _measured(p: Plan, work: Path, size_tool: Path) -> list[tuple[int, int, int]]:
    """(tile, measured bytes, estimated bytes) of every linked core of ``p``; the data sections
    of each are held to the planner's reserve for them (``RegionLimits.link_data_bytes``)."""
    limits = TARGETS["xdna2"].region_limits
    assert limits is not None
    lowered = lower_program(p)
    xlink.link(lowered, work)
    estimate = {t.index: t.code_bytes for t in p.tiles}
    out = []
    for region in lowered.design.regions:
        for core in region.cores:
            found = sorted(
                (work / f"region{region.index}").rglob(f"*core_{core.column}_{core.row}.elf")
            )
            assert found, f"region {region.index}: no linked ELF for core {core.column},{core.row}"
            data = _data_bytes(size_tool, found[0])
            print(f"core {core.column},{core.row}: {data} B of .data/.rodata/.bss")
            assert data <= limits.link_data_bytes, (core.tile, data, limits.link_data_bytes)
            out.append((core.tile, _text_bytes(size_tool, found[0]), estimate[core.tile]))
    return out


@pytest.mark.xdna
def test_every_linked_core_fits_program_memory_and_its_estimate(tmp_path: Path) -> None:
    """The toolchain's size tool on every core ELF aiecc links: each fits the 16 KiB of program
    memory and is at most the target table's estimate, and its data sections fit the reserve
    the planner keeps for them (the figures are printed, to be
    recorded in the table, which is marked unmeasured until then)."""
    why = XdnaDevice.probe()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    try:
        xlink.find_toolchain()
    except ToolchainUnavailable as err:
        pytest.skip(f"hardware unavailable: {err}")
    size_tool = Path(os.environ["PEANO_INSTALL_DIR"]) / "bin" / "llvm-size"
    code = TARGETS["xdna2"].code_size
    assert code is not None
    programs = [cases.twenty(), cases.rmsnorm(), cases.gather(1, F32), four_regions()]
    for program in programs:
        p = plan(program, "xdna2").check()
        for tile, measured, estimated in _measured(p, tmp_path / program.name, size_tool):
            kind = p.tiles[tile].kind.value
            print(
                f"{program.name} tile {tile} ({kind}): {measured} B measured, {estimated} B estimated"
            )
            assert measured <= code.program_bytes, (program.name, tile, measured)
            assert measured <= estimated, (program.name, tile, measured, estimated)
