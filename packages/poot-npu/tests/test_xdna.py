"""XdnaDevice: against a fake ``pyxrt`` (``fake_pyxrt``: the reference's surface, each kernel
call run by the host stand-in's executor over the buffer objects' device memory) and a fake
Peano/aiecc, through the real ``Engine``; and, marked ``xdna``, on a real XDNA2 NPU.

The fake proves the device's use of XRT: the exact call sequence (one ``hw_context`` per
region, opcode 3, the instruction word count, ``cacheable`` instructions in group 1,
``host_only`` arenas in groups 3 and up, the sync directions), results equal to the oracle's
under the xdna2 contracts (which a missing sync would break), the timeout and failure paths,
refusals that touch no XRT, and the context limit. It proves nothing about XRT, the driver,
the toolchain or the silicon: the ``xdna`` tests do, and skip with "hardware unavailable" here.
"""

from __future__ import annotations

import gc
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import fake_pyxrt
import numpy as np
import pytest
import xdna_cases as cases
from poot_codegen.xdna import ArenaRole, design_program, render_program
from poot_codegen.xdna import link as xlink
from poot_engine import Engine, signature_of
from poot_ir import (
    BlobRefused,
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    DeviceUnavailable,
    DispatchRefused,
    DType,
    LargerOperandUlps,
    Prim,
    Program,
    Relative,
    TensorType,
    ToolchainUnavailable,
    compare,
    evaluate,
)
from poot_ir.numerics import Comparison
from poot_npu import xdna as xdna_module
from poot_npu import xdna_contexts
from poot_npu.xdna import XdnaDevice
from poot_npu.xdna_artifact import frame, unframe
from poot_planner import plan

F32 = DType.F32
Results = Mapping[str, cases.Array]
COMPLETED = fake_pyxrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
TIMEOUT = fake_pyxrt.ert_cmd_state.ERT_CMD_STATE_TIMEOUT
ERROR = fake_pyxrt.ert_cmd_state.ERT_CMD_STATE_ERROR
TO, FROM = "XCL_BO_SYNC_BO_TO_DEVICE", "XCL_BO_SYNC_BO_FROM_DEVICE"
G = fake_pyxrt.GROUP_BASE


@pytest.fixture
def toolchain(tmp_path: Path) -> dict[str, str]:
    return fake_pyxrt.fake_toolchain(tmp_path / "tools")


@pytest.fixture
def engine(fake: ModuleType, toolchain: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with Engine(XdnaDevice(toolchain), tmp_path / "blobs") as e:
        yield e


def _xdna(engine: Engine) -> XdnaDevice:
    assert isinstance(engine.device, XdnaDevice)
    return engine.device


def _install(program: Program, tmp_path: Path) -> Program:
    """Let the fake XRT run ``program``'s xclbins (their designs and host-built kernels)."""
    fake_pyxrt.install(plan(program, "xdna2").check(), tmp_path / "kernels")
    return program


def _key(mlir: str) -> str:
    import hashlib

    return hashlib.sha256(mlir.encode()).hexdigest()[:12]


# -- results through XRT ----------------------------------------------------------------------


def _steps(engine: Engine, program: Program, tmp_path: Path, steps: int = 3) -> None:
    _install(program, tmp_path)
    cases.run_steps(
        engine, program, partial(cases.uniform_inputs, program), cases.by_maker(program), steps
    )


@pytest.mark.parametrize("prim", [Prim.EXP, Prim.ADD, Prim.MAX], ids=lambda p: p.value)
def test_pointwise_through_xrt(engine: Engine, tmp_path: Path, prim: Prim) -> None:
    _steps(engine, cases.pointwise(prim, (24, 300)), tmp_path)


def test_rows_gather_and_a_carried_state_through_xrt(engine: Engine, tmp_path: Path) -> None:
    for program in (cases.row(Prim.REDUCE_SUM), cases.gather(1, F32)):
        _steps(engine, program, tmp_path)
    _steps(engine, cases.running_sum(), tmp_path, steps=8)
    program = _install(cases.rmsnorm(), tmp_path)
    (tile,) = [t for t in plan(program, "xdna2").tiles if t.bound is not None]
    inputs = cases.uniform_inputs(program, 3)
    entry = engine.add_entry(program, engine.load_weights({"w": inputs["w"]}))
    got = engine.step(entry, {"x": inputs["x"]})["y"]
    assert tile.bound is not None
    assert compare(got, evaluate(program, inputs)["y"], Relative(tile.bound)).ok


def test_two_regions_hand_off_through_the_scratch_arena(engine: Engine, tmp_path: Path) -> None:
    program = _install(cases.sums(17), tmp_path)
    inputs = cases.uniform_inputs(program, 4)
    entry = engine.add_entry(program)
    got = engine.step(entry, inputs)["s"]
    acc = inputs["x0"]
    for i in range(1, 17):
        acc = acc + inputs[f"x{i}"]
    assert got.tobytes() == acc.tobytes()
    assert fake_pyxrt.STATE.executed == 2


# -- the call sequence ------------------------------------------------------------------------


def test_the_exact_xrt_call_sequence(engine: Engine, tmp_path: Path) -> None:
    program = _install(cases.sums(17), tmp_path)
    design = design_program(plan(program, "xdna2"))
    keys = [_key(m) for m in render_program(design)]
    # what the fake aiecc wrote: the module's digest (8 words), then a region-specific tail
    words = [8 + 4 + len(m.encode()) % 7 for m in render_program(design)]
    log = fake_pyxrt.STATE.log
    assert log == [("device", 0)]
    entry = engine.add_entry(program)
    loaded = list(log[1:])
    expect: list[tuple[Any, ...]] = []
    bo = 0
    for key, n in zip(keys, words, strict=True):
        bo += 1
        expect += [
            ("xclbin", key),
            ("register_xclbin", key),
            ("hw_context", key),
            ("kernel", key, "MLIR_AIE"),
            ("bo", bo, 4 * n, "cacheable", G + 1),
            ("write", bo, 4 * n, 0),
            ("sync", bo, TO),
        ]
    layout = design.layout
    arena_bo = {}
    for a in layout.arenas:
        bo += 1
        arena_bo[a.index] = bo
        expect.append(("bo", bo, a.nbytes, "host_only", G + 3 + a.index))
    assert loaded == expect
    assert [e[0] for e in loaded].count("hw_context") == len(design.regions) == 2

    del log[:]
    inputs = cases.uniform_inputs(program, 0)
    engine.step(entry, inputs)
    inputs_arena = layout.arena(ArenaRole.INPUTS)
    results_arena = layout.arena(ArenaRole.RESULTS)
    assert inputs_arena is not None and results_arena is not None
    arenas = tuple(arena_bo[a.index] for a in layout.arenas)
    expect = [
        ("write", arena_bo[inputs_arena.index], 128, layout.argument(f"x{i}").offset)
        for i in range(17)
    ]
    expect.append(("sync", arena_bo[inputs_arena.index], TO))
    for i, (key, n) in enumerate(zip(keys, words, strict=True)):
        expect.append(("call", key, 3, i + 1, n, arenas))
        expect.append(("wait", "ms", COMPLETED.name))
    flags_arena = layout.arena(ArenaRole.FLAGS)
    assert flags_arena is not None and flags_arena.index == len(layout.arenas) - 1
    expect.append(("sync", arena_bo[results_arena.index], FROM))
    expect.append(("sync", arena_bo[flags_arena.index], FROM))
    # one flag word per region, read with the results and before them
    expect.append(("read", arena_bo[flags_arena.index], 4 * len(design.regions), 0))
    expect.append(("read", arena_bo[results_arena.index], 128, layout.result("s").offset))
    waits = [e[1] for e in log if e[0] == "wait"]
    assert all(9000 < ms <= 10000 for ms in waits)  # what is left of the 10 s deadline
    assert [("wait", "ms", e[2]) if e[0] == "wait" else e for e in log] == expect


# -- failure paths ----------------------------------------------------------------------------


def test_a_timeout_poisons_and_keeps_the_buffers_until_close(
    engine: Engine, tmp_path: Path
) -> None:
    program = _install(cases.pointwise(Prim.NEG, (4, 8)), tmp_path)
    entry = engine.add_entry(program)
    x = np.ones((4, 8), np.float32)
    engine.step(entry, {"x": x})
    fake_pyxrt.STATE.script = [TIMEOUT]
    with pytest.raises(DeadlineExceeded):
        engine.step(entry, {"x": x})
    device = _xdna(engine)
    for call in (
        lambda: engine.step(entry, {"x": x}),
        lambda: device.allocate(TensorType((1,), F32)),
        lambda: device.load(b""),
    ):
        with pytest.raises(DevicePoisoned):
            call()
    gc.collect()
    # insts, inputs, results, flags
    assert len(device._failed) == 1 and len(fake_pyxrt.STATE.bos) == 4
    engine.close()  # the run is over by then (the fake's next wait completes): freed
    gc.collect()
    assert len(fake_pyxrt.STATE.bos) == 0 and xdna_module._abandoned == []


@pytest.mark.parametrize("deadline_s", [math.inf, 30 * 86400.0])
def test_any_positive_deadline_waits_in_slices_xrt_takes(
    fake: ModuleType, toolchain: dict[str, str], tmp_path: Path, deadline_s: float
) -> None:
    program = _install(cases.pointwise(Prim.NEG, (4, 8)), tmp_path)
    with Engine(XdnaDevice(toolchain), tmp_path / "blobs", deadline_s=deadline_s) as engine:
        entry = engine.add_entry(program)
        fake_pyxrt.STATE.script = [TIMEOUT]  # the first slice times out; the run goes on
        x = np.ones((4, 8), np.float32)
        assert np.array_equal(engine.step(entry, {"x": x})["z"], -x)
    waits = [e[1] for e in fake_pyxrt.STATE.log if e[0] == "wait"]
    assert len(waits) == 2 and all(0 < ms <= 2**31 - 1 for ms in waits)


def test_a_run_still_going_at_close_is_kept_alive(engine: Engine, tmp_path: Path) -> None:
    program = _install(cases.pointwise(Prim.NEG, (4, 8)), tmp_path)
    entry = engine.add_entry(program)
    fake_pyxrt.STATE.script = [TIMEOUT, TIMEOUT]  # the step's wait and close's grace wait
    with pytest.raises(DeadlineExceeded):
        engine.step(entry, {"x": np.ones((4, 8), np.float32)})
    engine.close()
    gc.collect()
    assert len(xdna_module._abandoned) == 1 and len(fake_pyxrt.STATE.bos) == 4


def test_a_failed_run_is_device_failed_naming_its_state(engine: Engine, tmp_path: Path) -> None:
    program = _install(cases.pointwise(Prim.NEG, (4, 8)), tmp_path)
    entry = engine.add_entry(program)
    x = np.ones((4, 8), np.float32)
    fake_pyxrt.STATE.script = [ERROR]
    with pytest.raises(DeviceFailed, match="ERT_CMD_STATE_ERROR"):
        engine.step(entry, {"x": x})
    assert np.array_equal(engine.step(entry, {"x": x})["z"], -x)  # not poisoned


def test_dispatch_refusals_touch_no_xrt(engine: Engine, tmp_path: Path) -> None:
    device = _xdna(engine)
    program = _install(cases.pointwise(Prim.ADD, (4, 8)), tmp_path)
    artifact = device.load(device.compile(device.lower(plan(program, "xdna2"))))
    t = TensorType((4, 8), F32)
    x, y, z = (device.allocate(t) for _ in range(3))
    wrong = device.allocate(TensorType((4, 8), DType.I32))
    before = len(fake_pyxrt.STATE.log)
    for bufs in ((x, y), (x, y, z, z), (x, wrong, z)):
        with pytest.raises(DispatchRefused):
            device.dispatch(artifact, bufs, 1.0)
    device.unload(artifact)
    with pytest.raises(DispatchRefused):
        device.dispatch(artifact, (x, y, z), 1.0)
    assert len(fake_pyxrt.STATE.log) == before and device.runs == 0


def test_more_contexts_than_the_npu_has_is_a_typed_error(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, "16")  # the hardware limit, not #3654's default
    program = _install(cases.sums(17), tmp_path)  # two regions: two contexts per entry
    entries = [engine.add_entry(program) for _ in range(8)]  # 16 contexts
    contexts = sum(1 for e in fake_pyxrt.STATE.log if e[0] == "hw_context")
    with pytest.raises(DeviceFailed, match="hardware contexts: needs 2, available 0"):
        engine.add_entry(program)
    assert sum(1 for e in fake_pyxrt.STATE.log if e[0] == "hw_context") == contexts == 16
    engine.remove_entry(entries[0])
    gc.collect()
    engine.step(engine.add_entry(program), cases.uniform_inputs(program, 0))


def test_a_blob_xrt_or_the_frame_refuses_is_blob_refused(
    fake: ModuleType, toolchain: dict[str, str], tmp_path: Path
) -> None:
    device = XdnaDevice(toolchain)
    program = cases.pointwise(Prim.NEG, (4, 8))
    blob = device.compile(device.lower(plan(program, "xdna2")))
    with pytest.raises(BlobRefused):
        device.load(blob[:-3])
    design, _xclbin, insts = unframe("xdna2 xrt blob", blob)
    with pytest.raises(BlobRefused, match="XRT refused"):
        device.load(frame("xdna2 xrt blob", [design, b"not an xclbin", insts]))
    with pytest.raises(BlobRefused, match="whole-word"):
        device.load(frame("xdna2 xrt blob", [design, _xclbin, insts[:-1]]))
    assert device.load(blob).signature == signature_of(program)


def test_a_second_engine_on_the_same_cache_never_links(
    fake: ModuleType, toolchain: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = _install(cases.pointwise(Prim.EXP, (4, 8)), tmp_path)
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    with Engine(XdnaDevice(toolchain), tmp_path / "blobs") as e:
        first = e.step(e.add_entry(program), {"x": x})["z"]

    def no_link(*args: object, **kw: object) -> None:
        raise AssertionError("the toolchain ran")

    monkeypatch.setattr(xlink, "link", no_link)
    with Engine(XdnaDevice(toolchain), tmp_path / "blobs") as e:
        second = e.step(e.add_entry(program), {"x": x})["z"]
        assert (e.stats().compiles, e.stats().cache_hits) == (0, 1)
    assert first.tobytes() == second.tobytes()


def test_no_toolchain_is_unavailable_naming_what_is_missing(
    fake: ModuleType, tmp_path: Path
) -> None:
    with (
        Engine(XdnaDevice({"PATH": str(tmp_path)}), tmp_path / "blobs") as e,
        pytest.raises(ToolchainUnavailable) as err,
    ):
        e.add_entry(cases.pointwise(Prim.NEG, (4, 8)))
    assert err.value.tool == "clang++, aiecc, xclbinutil, bootgen, python modules"
    assert "PEANO_INSTALL_DIR is not set" in err.value.detail


# -- probe and import -------------------------------------------------------------------------


def test_probe_says_why(fake: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert XdnaDevice.probe() is None
    fake_pyxrt.STATE.absent = True
    why = XdnaDevice.probe()
    assert why is not None and why.startswith("pyxrt.device(0) does not open")
    with pytest.raises(DeviceUnavailable, match="does not open"):
        XdnaDevice()
    monkeypatch.setitem(sys.modules, "pyxrt", None)  # import fails
    why = XdnaDevice.probe()
    assert why is not None and "'pyxrt' does not import" in why
    with pytest.raises(DeviceUnavailable, match="pyxrt"):
        XdnaDevice()


def test_importing_the_devices_does_not_import_pyxrt() -> None:
    code = (
        "import sys, poot_npu, poot_npu.registry, poot_npu.xdna, poot_npu.xdna_host\n"
        "assert 'pyxrt' not in sys.modules, 'pyxrt was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- real hardware ----------------------------------------------------------------------------


@pytest.fixture
def hardware(tmp_path: Path) -> Iterator[Engine]:
    why = XdnaDevice.probe()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    with Engine(XdnaDevice(), tmp_path / "blobs") as e:
        yield e


@pytest.mark.xdna
@pytest.mark.parametrize("prim", cases.UNARY + cases.BINARY, ids=lambda p: p.value)
def test_pointwise_on_the_npu(hardware: Engine, prim: Prim) -> None:
    program = cases.pointwise(prim)
    names = [a.name for a in program.args]

    def inputs(step: int) -> dict[str, cases.Array]:
        rng = np.random.default_rng(100 + step)
        return {n: cases.sample(prim, cases.POINTWISE_SHAPE, rng) for n in names}

    cases.run_steps(hardware, program, inputs, cases.by_maker(program))


def _chain_check(name: str, got: Results, want: Results, feed: Results) -> Comparison:
    """A chain of bit-exact negs, or a sum of n slots whose every add is within 2 units of
    its larger operand: within 2 x n x 2^-23 x the sum of the magnitudes."""
    n = len(feed)
    scale = sum(np.abs(v.astype(np.float64)) for v in feed.values())
    return compare(got[name], want[name], LargerOperandUlps(2 * n), scale=scale)


@pytest.mark.xdna
def test_regions_and_state_on_the_npu(hardware: Engine) -> None:
    for chain in (cases.sums(17), cases.negs(33)):
        cases.run_steps(hardware, chain, partial(cases.uniform_inputs, chain), _chain_check)
    for program in (cases.gather(2, F32), cases.running_sum()):
        cases.run_steps(
            hardware, program, partial(cases.uniform_inputs, program), cases.by_maker(program)
        )
    twenty = cases.twenty()
    positive = {
        a.name: np.linspace(0.1, 2.0, a.var.type.size, dtype=np.float32).reshape(a.var.shape)
        for a in twenty.args
    }
    cases.run_steps(hardware, twenty, lambda s: positive, cases.twenty_check(twenty))


def test_the_link_step_reports_progress(
    fake: ModuleType, toolchain: dict[str, str], tmp_path: Path
) -> None:
    program = _install(cases.pointwise(Prim.EXP, (4, 8)), tmp_path)
    seen: list[tuple[str, int, int]] = []
    device = XdnaDevice(
        toolchain, progress=lambda stage, done, total: seen.append((stage, done, total))
    )
    with Engine(device, tmp_path / "blobs") as e:
        e.add_entry(program)
    assert seen and seen[-1][0] == "done" and seen[-1][1] == seen[-1][2]
    assert [done for _, done, _ in seen] == sorted(done for _, done, _ in seen)
