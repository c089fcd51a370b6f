"""Engine on CpuDevice: record and replay against the oracle, carried state, weights uploaded
once, and every input, weight and signature check (a refused call runs nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from engine_support import (
    CountingDevice,
    ReorderingDevice,
    RetypingDevice,
    add_program,
    affine_program,
    running_sum_program,
    scatter_program,
)
from poot_engine import CpuDevice, Device, Engine
from poot_ir import (
    DType,
    SignatureMismatch,
    StepInputError,
    UnknownEntry,
    WeightMismatch,
    WindowOutOfRange,
    evaluate,
)

W = np.array([1.5, -2.0, 0.25, 3.0], np.float32)


@pytest.fixture
def device() -> CountingDevice:
    return CountingDevice()


@pytest.fixture
def engine(device: CountingDevice, tmp_path: Path) -> Iterator[Engine]:
    e = Engine(device, cache_dir=tmp_path / "cache")
    yield e
    e.close()


def test_cpu_device_is_a_device() -> None:
    assert isinstance(CpuDevice(), Device)


def test_record_then_replay_matches_the_oracle(engine: Engine, device: CountingDevice) -> None:
    program = affine_program()
    entry = engine.add_entry(program, engine.load_weights({"w": W}))
    rng = np.random.default_rng(0)
    acc = np.zeros(4, np.float32)
    for i in range(12):
        x = rng.standard_normal(4).astype(np.float32)
        out = engine.step(entry, {"x": x})
        want = evaluate(program, {"w": W, "x": x, "acc": acc})
        assert out.keys() == want.keys() == {"y", "acc"}
        for name in want:
            np.testing.assert_array_equal(out[name], want[name], err_msg=f"step {i} {name}")
        acc = want["acc"]
    s = engine.stats()
    assert (s.recordings, s.replays, s.steps) == (1, 11, 12)
    assert device.calls["dispatch"] == 12
    assert s.host_s_per_step > 0 and s.device_s_per_step > 0


def test_results_are_fresh_arrays(engine: Engine) -> None:
    entry = engine.add_entry(running_sum_program())
    first = engine.step(entry, {"x": np.ones(3, np.float32)})
    first["total"][:] = 100  # the caller owns what it got back
    second = engine.step(entry, {"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(second["total"], [2, 2, 2])
    assert second["twice"] is not first["twice"]


def test_running_sum_state_over_many_steps(engine: Engine) -> None:
    entry = engine.add_entry(running_sum_program())
    total = np.zeros(3, np.float32)
    for i in range(200):
        x = np.array([i, -i, 0.5], np.float32)
        total = total + x
        out = engine.step(entry, {"x": x})
        np.testing.assert_array_equal(out["total"], total)
        np.testing.assert_array_equal(out["twice"], total * 2)
    engine.reset_state(entry)
    out = engine.step(entry, {"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out["total"], [1, 1, 1])


def test_initial_state_and_reset(engine: Engine) -> None:
    start = np.array([10, 20, 30], np.float32)
    entry = engine.add_entry(running_sum_program(), initial_state={"total": start})
    start[:] = 0  # the engine copied it
    assert engine.step(entry, {"x": np.ones(3, np.float32)})["total"].tolist() == [11, 21, 31]
    engine.reset_state(entry)
    assert engine.step(entry, {"x": np.ones(3, np.float32)})["total"].tolist() == [11, 21, 31]
    with pytest.raises(StepInputError, match="'nope'"):
        engine.add_entry(running_sum_program(), initial_state={"nope": start})
    with pytest.raises(StepInputError, match="float64"):
        engine.add_entry(running_sum_program(), initial_state={"total": start.astype(np.float64)})


def test_weights_are_uploaded_once_and_slots_rewritten_in_place(
    engine: Engine, device: CountingDevice
) -> None:
    weights = engine.load_weights({"w": W})
    assert device.calls["write"] == 1
    (wbuf,) = (b for b, n in device.written.items() if n == 1)
    entry = engine.add_entry(affine_program(), weights)
    allocated = device.calls["allocate"]
    for i in range(5):
        engine.step(entry, {"x": np.full(4, i, np.float32)})
    assert device.written[wbuf] == 1  # never written again
    assert device.calls["allocate"] == allocated  # the same buffers every step
    # each step writes the one slot; the state buffer is written at add_entry, then copied into
    assert device.calls["copy"] == 5
    second = engine.add_entry(affine_program(), weights)  # weights shared, not re-uploaded
    engine.step(second, {"x": np.ones(4, np.float32)})
    assert device.written[wbuf] == 1


def test_weight_binding_errors_name_the_weight(engine: Engine, device: CountingDevice) -> None:
    program = affine_program()
    cases = {
        "missing": ({}, "w"),
        "extra": ({"w": W, "v": W}, "v"),
        "dtype": ({"w": W.astype(np.float16)}, "w"),
        "shape": ({"w": np.zeros(5, np.float32)}, "w"),
        "a slot": ({"w": W, "x": W}, "x"),
    }
    for what, (given, name) in cases.items():
        assert isinstance(given, dict)
        weights = engine.load_weights(given)
        with pytest.raises(WeightMismatch) as err:
            engine.add_entry(program, weights)
        assert err.value.argument == name, what
    with pytest.raises(WeightMismatch, match="float64"):
        engine.load_weights({"w": W.astype(np.float64)})
    with pytest.raises(WeightMismatch, match="numpy array"):
        engine.load_weights({"w": [1.0, 2.0]})  # type: ignore[dict-item]
    assert device.calls["dispatch"] == 0


def test_step_inputs_are_checked_before_anything_runs(
    engine: Engine, device: CountingDevice
) -> None:
    entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
    x = np.zeros(4, np.float32)
    bad = {
        "missing": ({}, "x"),
        "extra": ({"x": x, "q": x}, "q"),
        "a weight": ({"x": x, "w": W}, "w"),
        "a state": ({"x": x, "acc": x}, "acc"),
        "a result": ({"x": x, "y": x}, "y"),
        "float64": ({"x": x.astype(np.float64)}, "x"),
        "float16": ({"x": x.astype(np.float16)}, "x"),
        "shape": ({"x": np.zeros((4, 1), np.float32)}, "x"),
        "a list": ({"x": [0.0, 0.0, 0.0, 0.0]}, "x"),
    }
    for what, (inputs, name) in bad.items():
        with pytest.raises(StepInputError) as err:
            engine.step(entry, inputs)  # type: ignore[arg-type]
        assert err.value.argument == name, what
    assert device.calls["dispatch"] == device.calls["read"] == 0
    assert engine.stats().steps == 0
    engine.step(entry, {"x": x})  # and the entry still works
    assert device.calls["dispatch"] == 1


def test_a_window_out_of_range_is_refused_before_the_run(
    engine: Engine, device: CountingDevice
) -> None:
    program = scatter_program()
    entry = engine.add_entry(program)
    row = np.array([1, 2], np.float32)
    out = engine.step(entry, {"row": row, "pos": np.array(4, np.int32)})
    np.testing.assert_array_equal(out["cache"], [0, 0, 0, 0, 1, 2])
    for pos in (5, -1, 2**31 - 1):
        with pytest.raises(WindowOutOfRange) as err:
            engine.step(entry, {"row": row, "pos": np.array(pos, np.int32)})
        assert err.value.starts == (pos,)
    assert device.calls["dispatch"] == 1
    with pytest.raises(WindowOutOfRange):  # the oracle agrees
        evaluate(program, {"cache": out["cache"], "row": row, "pos": np.array(5, np.int32)})
    scalar: dict[str, object] = {"row": row, "pos": np.int32(0)}  # a numpy scalar for ()
    assert engine.step(entry, scalar)["sum"] == 6  # type: ignore[arg-type]


@pytest.mark.parametrize("device_type", [ReorderingDevice, RetypingDevice])
def test_a_compiled_signature_that_differs_is_refused(
    tmp_path: Path, device_type: type[CpuDevice]
) -> None:
    with Engine(device_type(), cache_dir=tmp_path) as engine:
        with pytest.raises(SignatureMismatch) as err:
            engine.add_entry(add_program())
        assert "argument 0" in str(err.value)


def test_handles_from_elsewhere_are_unknown(engine: Engine, tmp_path: Path) -> None:
    entry = engine.add_entry(running_sum_program())
    weights = engine.load_weights({"w": W})
    with Engine(CpuDevice(), cache_dir=tmp_path / "other") as other:
        with pytest.raises(UnknownEntry):
            other.step(entry, {"x": np.zeros(3, np.float32)})
        with pytest.raises(UnknownEntry):
            other.add_entry(affine_program(), weights)
    engine.remove_entry(entry)
    with pytest.raises(UnknownEntry):
        engine.step(entry, {"x": np.zeros(3, np.float32)})
    with pytest.raises(UnknownEntry):
        engine.reset_state(entry)


def test_remove_entry_frees_its_buffers_not_the_weights(
    engine: Engine, device: CountingDevice
) -> None:
    weights = engine.load_weights({"w": W})
    entry = engine.add_entry(affine_program(), weights)
    engine.step(entry, {"x": np.ones(4, np.float32)})
    engine.remove_entry(entry)
    assert device.calls["free"] == 4  # x, acc, y, acc update
    again = engine.add_entry(affine_program(), weights)
    assert engine.step(again, {"x": np.ones(4, np.float32)})["y"].tolist() == (W + 1).tolist()


def test_mixed_dtypes_and_scalars(engine: Engine) -> None:
    from poot_ir import Builder

    b = Builder("mixed")
    i = b.slot("i", DType.I32, ())
    t = b.weight("t", DType.F16, (5,))
    b.output("g", b.gather(t, b.reshape(i, (1,)), 0))
    program = b.build()
    table = np.arange(5, dtype=np.float16) / 4
    entry = engine.add_entry(program, engine.load_weights({"t": table}))
    for k in range(5):
        out = engine.step(entry, {"i": np.array(k, np.int32)})
        assert out["g"].dtype == np.float16 and out["g"].tolist() == [table[k]]


def test_a_carried_position_state_is_window_checked(engine: Engine, device: CountingDevice) -> None:
    from poot_ir import Builder

    b = Builder("kv")
    cache = b.state("cache", DType.F32, (6,))
    pos = b.state("pos", DType.I32, ())
    row = b.slot("row", DType.F32, (2,))
    b.update(cache, b.dynamic_update_slice(cache, row, [pos]))
    b.update(pos, b.add(pos, 2))
    b.output("n", b.add(pos, 0))
    entry = engine.add_entry(b.build())
    for i in range(3):
        out = engine.step(entry, {"row": np.full(2, i + 1, np.float32)})
    assert out["cache"].tolist() == [1, 1, 2, 2, 3, 3] and out["pos"] == 6
    with pytest.raises(WindowOutOfRange) as err:  # pos 6 is checked from the engine's copy
        engine.step(entry, {"row": np.zeros(2, np.float32)})
    assert err.value.starts == (6,)
    assert device.runs == 3
    engine.reset_state(entry)
    assert engine.step(entry, {"row": np.zeros(2, np.float32)})["pos"] == 2
