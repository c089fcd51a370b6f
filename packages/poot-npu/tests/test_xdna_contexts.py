"""Hardware contexts on the fake XRT (``poot_npu.xdna_contexts``): a third context in the process
is refused by default (mlir-aie #3654) and allowed after a recorded acceptance result or by the
owner's variable; the count is the device's, shared by every ``XdnaDevice`` in the process.

The conftest gives each test an empty registry and an acceptance record path of its own."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import fake_pyxrt
import numpy as np
import pytest
import xdna_cases as cases
from poot_engine import Engine
from poot_ir import BlobRefused, DeviceFailed, evaluate
from poot_npu import xdna as xdna_module
from poot_npu import xdna_contexts
from poot_npu.xdna import NODE, XdnaDevice
from poot_npu.xdna_contexts import ContextLimit
from poot_planner import plan

THREE = cases.marked(65)  # 65 tiles: three regions of at most 32 tiles, three artifacts
TWO = cases.sums(17)  # 17 host streams in: two regions


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One host-built kernel cache for the module: each test installs the same three programs,
    and building their kernels (a C compile each) is most of a test's time."""
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, kernels: Path) -> Iterator[ModuleType]:
    fake_pyxrt.reset()
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt)
    monkeypatch.setattr(xdna_module, "_abandoned", [])
    from poot.acceptance.regions import marked_chain  # the acceptance check's own program

    for program in (THREE, TWO, marked_chain(65, 32)):
        fake_pyxrt.install(plan(program, "xdna2").check(), kernels)
    yield fake_pyxrt


def _engine(tmp_path: Path, name: str) -> Engine:
    tools = fake_pyxrt.fake_toolchain(tmp_path / f"tools-{name}")
    return Engine(XdnaDevice(tools), tmp_path / "blobs", verify="always")


def _contexts_made() -> int:
    return sum(1 for e in fake_pyxrt.STATE.log if e[0] == "hw_context")


def _runs_right(engine: Engine) -> None:
    x = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(4, 16)
    entry = engine.add_entry(THREE)
    got = engine.step(entry, {"x": x})
    want = evaluate(THREE, {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])  # negations and max(v, v): exact


def test_three_regions_are_refused_by_default_naming_3654(fake: ModuleType, tmp_path: Path) -> None:
    assert len(plan(THREE, "xdna2").check().regions) == 3
    with _engine(tmp_path, "a") as engine, pytest.raises(ContextLimit) as err:
        engine.add_entry(THREE)
    text = str(err.value)
    assert "#3654" in text and xdna_contexts.ALLOW_ENV in text and "poot acceptance" in text
    assert _contexts_made() == 0  # refused before XRT made any
    assert xdna_contexts.held(NODE) == 0


def test_two_regions_run_by_default(fake: ModuleType, tmp_path: Path) -> None:
    with _engine(tmp_path, "a") as engine:
        engine.step(engine.add_entry(TWO), cases.uniform_inputs(TWO, 0))
        assert xdna_contexts.held(NODE) == 2
    assert xdna_contexts.held(NODE) == 0  # given back at close


def test_a_recorded_acceptance_result_allows_three(fake: ModuleType, tmp_path: Path) -> None:
    path = xdna_contexts.write_record(3, "three regions verified")
    assert path.is_file()
    assert xdna_contexts.allowance(NODE).contexts == 3
    with _engine(tmp_path, "a") as engine:
        _runs_right(engine)
    assert _contexts_made() == 3


def test_a_record_of_two_or_garbage_allows_nothing_more(fake: ModuleType, tmp_path: Path) -> None:
    path = xdna_contexts.write_record(2, "only two")
    assert xdna_contexts.allowance(NODE).contexts == xdna_contexts.SAFE
    path.write_text("not json", encoding="utf-8")
    assert xdna_contexts.allowance(NODE).contexts == xdna_contexts.SAFE


def test_the_acceptance_lift_allows_while_it_measures(fake: ModuleType, tmp_path: Path) -> None:
    with xdna_contexts.lift(NODE, 16), _engine(tmp_path, "a") as engine:
        _runs_right(engine)
    assert xdna_contexts.allowance(NODE).contexts == xdna_contexts.SAFE


def test_the_owners_variable_allows_and_a_bad_one_is_typed(
    fake: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, "3")
    with _engine(tmp_path, "a") as engine:
        _runs_right(engine)
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, "many")
    with pytest.raises(ContextLimit, match="not an integer"):
        xdna_contexts.allowance(NODE)


def test_two_engines_share_the_default(fake: ModuleType, tmp_path: Path) -> None:
    """Engine A holds two contexts; engine B's first region would be the process's third."""
    with _engine(tmp_path, "a") as a, _engine(tmp_path, "b") as b:
        a.add_entry(TWO)
        with pytest.raises(ContextLimit, match="#3654"):
            b.add_entry(TWO)
        assert xdna_contexts.held(NODE) == 2


def test_two_engines_share_the_devices_limit(
    fake: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every context allowed, engine A holds all 16; engine B gets the typed limit naming
    the device's bound, not XRT's refusal (``BlobRefused``), and runs once A lets go."""
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, "16")
    with _engine(tmp_path, "a") as a, _engine(tmp_path, "b") as b:
        held = [a.add_entry(TWO) for _ in range(8)]
        made = _contexts_made()
        try:
            b.add_entry(TWO)
        except ContextLimit as err:
            assert "needs 2, available 0 (of 16" in str(err)
        except BlobRefused as err:  # before the count was the device's
            pytest.fail(f"XRT's refusal, not the typed limit: {err}")
        else:
            pytest.fail("a 17th context was admitted")
        assert _contexts_made() == made == 16
        a.remove_entry(held[0])
        b.step(b.add_entry(TWO), cases.uniform_inputs(TWO, 0))


def test_contexts_another_process_holds_are_device_failed_not_blob_refused(
    fake: ModuleType, tmp_path: Path
) -> None:
    """The driver's limit is the device's (amd/xdna-driver ``hwctx_limit``): another process
    holding 15 of the 16 leaves one, so XRT refuses this process's second context although the
    process's own count admitted it. That is the device failing, not the blob (a
    ``BlobRefused`` would have the engine recompile the artifact for nothing), and the
    reservation is given back."""
    fake_pyxrt.STATE.contexts = fake_pyxrt.CONTEXT_LIMIT - 1  # another process's contexts
    device = XdnaDevice(fake_pyxrt.fake_toolchain(tmp_path / "tools"))
    blob = device.compile(device.lower(plan(TWO, "xdna2").check()))
    with pytest.raises(DeviceFailed, match="hardware context") as err:
        device.load(blob)
    assert not isinstance(err.value, BlobRefused)
    assert _contexts_made() == 1
    assert xdna_contexts.held(NODE) == 0


def test_the_registry_never_overbooks_under_threads() -> None:
    node, admitted, lock = "test-node", [], threading.Lock()

    def grab() -> None:
        try:
            xdna_contexts.reserve(node, 1, 16, "t", {xdna_contexts.ALLOW_ENV: "16"})
        except ContextLimit:
            return
        with lock:
            admitted.append(1)

    threads = [threading.Thread(target=grab) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == xdna_contexts.held(node) == 16
    xdna_contexts.release(node, 16)
    assert xdna_contexts.held(node) == 0


def test_the_acceptance_check_lifts_measures_and_records(fake: ModuleType, tmp_path: Path) -> None:
    """The acceptance's own check runs three contexts under its lift, verified; its pass is
    recorded, and a new device in a fresh process state is allowed three without the lift."""
    from poot.acceptance.regions import _three_contexts, record_contexts

    with _engine(tmp_path, "a") as engine, xdna_contexts.lift(NODE, 16):
        checks = list(_three_contexts(engine, "xdna2", 32))
    assert [c.passed for c in checks] == [True], checks
    recorded = list(record_contexts(checks, 16))
    assert [c.figure for c in recorded] == [3]  # the at-limit check did not run here
    assert xdna_contexts.allowance(NODE).contexts == 3
    with _engine(tmp_path, "b") as engine:
        _runs_right(engine)


def test_a_failed_acceptance_check_records_nothing(fake: ModuleType) -> None:
    from poot.acceptance.engine import Check
    from poot.acceptance.regions import record_contexts

    failed = Check("hardware contexts in one process (mlir-aie #3654): x", False, 3, "contexts", "")
    assert list(record_contexts([failed], 16)) == []
    assert xdna_contexts.allowance(NODE).contexts == xdna_contexts.SAFE
