"""A gather index outside its axis never makes either XDNA2 device read outside a buffer.

An index the host passes in (a slot, a state, a weight) is refused before the run with the
oracle's ``IndexOutOfRange``, naming the argument and the element; an index a region computes
is clamped into the axis by the kernel (the plan's ``IndexGuard`` says which). The clamped
results are checked against numpy's own ``take(mode="clip")`` after negatives are counted
from the end, an independent reference.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fake_pyxrt
import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import Builder, DType, IndexOutOfRange, Program, evaluate, format_program
from poot_npu import xdna as xdna_module
from poot_npu.xdna import XdnaDevice
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import IndexGuard, plan

F32, I32 = DType.F32, DType.I32
ROWS = 10


def host_indexed() -> Program:
    b = Builder("gather_host_index")
    table = b.weight("table", F32, (ROWS, 3))
    b.output("g", b.gather(table, b.slot("idx", I32, (2, 3)), axis=0))
    return b.build()


def computed_index() -> Program:
    """The outer gather's indices come out of the inner gather: computed inside the region."""
    b = Builder("gather_computed_index")
    inner = b.gather(b.weight("perm", I32, (6,)), b.slot("i", I32, (6,)), 0)
    b.output("g", b.gather(b.weight("t", F32, (ROWS, 4)), inner, 0))
    return b.build()


def test_the_plan_says_how_each_gather_keeps_its_indices_in_the_axis() -> None:
    (tile,) = plan(host_indexed(), "xdna2").check().tiles
    assert tile.index_guard is IndexGuard.HOST_CHECKED
    inner, outer = plan(computed_index(), "xdna2").check().tiles
    assert (inner.index_guard, outer.index_guard) == (
        IndexGuard.HOST_CHECKED,
        IndexGuard.KERNEL_CLAMPED,
    )


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Engine]:
    with Engine(XdnaHostDevice(tmp_path / "kernels"), tmp_path / "blobs") as e:
        yield e


@pytest.fixture
def xrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Engine]:
    fake_pyxrt.reset()
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt)
    monkeypatch.setattr(xdna_module, "_abandoned", [])
    env = fake_pyxrt.fake_toolchain(tmp_path / "tools")
    with Engine(XdnaDevice(env), tmp_path / "blobs") as e:
        yield e


def _table() -> np.ndarray:
    return np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)


@pytest.mark.parametrize("device", ["host", "xrt"])
@pytest.mark.parametrize(
    ("bad", "at"),
    [(100000, (0, 1)), (-100000, (1, 2)), (ROWS, (1, 0)), (-ROWS - 1, (0, 0))],
)
def test_a_host_passed_index_outside_the_axis_is_refused_naming_it(
    device: str,
    bad: int,
    at: tuple[int, int],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    engine: Engine = request.getfixturevalue(device)
    program = host_indexed()
    if device == "xrt":
        fake_pyxrt.install(plan(program, "xdna2").check(), tmp_path / "fake-kernels")
    entry = engine.add_entry(program, engine.load_weights({"table": _table()}))
    edges = np.array([[0, ROWS - 1, -1], [-ROWS, 3, -4]], dtype=np.int32)  # all inside
    want = evaluate(program, {"table": _table(), "idx": edges})["g"]
    assert np.array_equal(engine.step(entry, {"idx": edges})["g"], want)
    idx = edges.copy()
    idx[at] = bad
    if device == "xrt":
        calls = len([c for c in fake_pyxrt.STATE.log if c[0] == "call"])
    with pytest.raises(IndexOutOfRange) as err:
        engine.step(entry, {"idx": idx})
    assert (err.value.argument, err.value.element, err.value.index) == ("idx", at, bad)
    assert err.value.size == ROWS and "'idx'" in str(err.value)
    with pytest.raises(IndexOutOfRange):  # the oracle refuses the same input
        evaluate(program, {"table": _table(), "idx": idx})
    if device == "xrt":  # refused before XRT ran anything
        assert len([c for c in fake_pyxrt.STATE.log if c[0] == "call"]) == calls
    assert np.array_equal(engine.step(entry, {"idx": edges})["g"], want)  # still usable


def _clipped(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    k = np.where(idx < 0, idx.astype(np.int64) + table.shape[0], idx)
    return np.take(table, k, axis=0, mode="clip")


def test_a_computed_index_outside_the_axis_is_clamped_by_the_kernel(host: Engine) -> None:
    perm = np.array([0, 100000, -1, -100000, ROWS, 2**31 - 1], dtype=np.int32)
    t = np.arange(ROWS * 4, dtype=np.float32).reshape(ROWS, 4)
    entry = host.add_entry(computed_index(), host.load_weights({"perm": perm, "t": t}))
    i = np.array([5, 4, 3, 2, 1, 0], dtype=np.int32)
    got = host.step(entry, {"i": i})["g"]
    assert np.array_equal(got, _clipped(t, perm[i]))
    assert np.array_equal(got[0], t[ROWS - 1]) and np.array_equal(got[2], t[0])


def test_poot_run_with_an_index_of_100000_is_a_typed_error(tmp_path: Path) -> None:
    src = tmp_path / "g.poot"
    src.write_text(format_program(host_indexed()))
    idx = np.zeros((2, 3), dtype=np.int32)
    idx[1, 1] = 100000
    np.savez(tmp_path / "in.npz", table=_table(), idx=idx)
    argv = ["--cache-dir", str(tmp_path / "cache"), "run", str(src), "--target", "xdna2"]
    argv += ["--device", "xdna-host"]
    argv += ["--inputs", str(tmp_path / "in.npz"), "--steps", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "poot", *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "IndexOutOfRange" in done.stderr and "'idx'" in done.stderr
    assert "100000" in done.stderr and "(1, 1)" in done.stderr
