"""The F32 range checks on a target with a narrowing contract (intel-npu4: 65504), on a
CpuDevice that runs the narrowed program (an ideal FP16 device) and counts its runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from engine_support import CountingDevice, add_program, affine_program, running_sum_program
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_engine.checks import RangeCheck, check_range
from poot_ir import (
    Builder,
    DType,
    NarrowingRangeError,
    NarrowingRangeInput,
    NarrowingRangeResult,
    NarrowingRangeUpload,
    evaluate,
)
from poot_planner import plan

MAX = 65504.0


@pytest.fixture
def device() -> CountingDevice:
    return CountingDevice("intel-npu4")


@pytest.fixture
def engine(device: CountingDevice, tmp_path: Path) -> Iterator[Engine]:
    e = Engine(device, cache_dir=tmp_path)
    yield e
    e.close()


def test_the_limit_comes_from_the_target(engine: Engine, tmp_path: Path) -> None:
    assert engine.limit == MAX
    with Engine(CountingDevice("cpu"), cache_dir=tmp_path) as cpu:
        assert cpu.limit is None
        entry = cpu.add_entry(add_program())
        big = np.full(4, 1e30, np.float32)
        assert cpu.step(entry, {"x": big, "y": big})["z"][0] == np.float32(2e30)


def test_an_input_of_65504_runs_and_65520_is_refused(
    engine: Engine, device: CountingDevice
) -> None:
    program = add_program()
    entry = engine.add_entry(program)
    x = np.array([1, MAX, -MAX, 0], np.float32)
    y = np.zeros(4, np.float32)
    # the add of two same-shape values is a DPU task on the NPU, whose overflow saturates to
    # +-65504: a result of that magnitude is taken for one and refused after the run
    with pytest.raises(NarrowingRangeResult) as saturated:
        engine.step(entry, {"x": x, "y": y})
    assert (saturated.value.argument, saturated.value.element) == ("z", (1,))
    assert device.runs == 1
    x[1:3] = [65472.0, -65472.0]  # the largest FP16 magnitude below it
    out = engine.step(entry, {"x": x, "y": y})
    narrowed = plan(program, "intel-npu4").program
    np.testing.assert_array_equal(out["z"], evaluate(narrowed, {"x": x, "y": y})["z"])
    np.testing.assert_array_equal(out["z"], x)
    assert device.runs == 2
    x[1] = MAX  # an input of 65504 is in range (its sum is refused, above)
    y[2] = 65520.0  # FP16 rounds this to infinity
    with pytest.raises(NarrowingRangeInput) as err:
        engine.step(entry, {"x": x, "y": y})
    assert (err.value.argument, err.value.element, err.value.value) == ("y", (2,), 65520.0)
    assert err.value.limit == MAX and "'y'" in str(err.value) and "(2,)" in str(err.value)
    y[2] = np.nan
    with pytest.raises(NarrowingRangeInput) as err:
        engine.step(entry, {"x": x, "y": y})
    assert err.value.element == (2,)
    assert device.runs == 2  # nothing ran
    assert device.calls["write"] == 4  # not even the copies in


def test_a_sum_beyond_the_range_is_refused_as_a_result(
    engine: Engine, device: CountingDevice
) -> None:
    entry = engine.add_entry(add_program())
    x = np.array([40000, 1, 2, 3], np.float32)
    with pytest.raises(NarrowingRangeResult) as err:
        engine.step(entry, {"x": x, "y": x})
    assert (err.value.argument, err.value.element) == ("z", (0,))
    assert device.runs == 1  # it ran, and its result is refused


def test_a_weight_is_checked_once_at_upload(engine: Engine, device: CountingDevice) -> None:
    w = np.array([1, 2, 70000, 4], np.float32)
    with pytest.raises(NarrowingRangeUpload) as err:
        engine.load_weights({"w": w})
    assert (err.value.argument, err.value.element, err.value.value) == ("w", (2,), 70000.0)
    assert device.calls["allocate"] == device.calls["write"] == 0  # nothing reached the device
    w2 = np.full((2, 3), np.nan, np.float32)
    with pytest.raises(NarrowingRangeUpload) as err:
        engine.load_weights({"ok": np.ones(2, np.float32), "w2": w2})
    assert err.value.element == (0, 0)
    assert device.calls["allocate"] == 0
    # I32 and F16 weights are not F32: not range-checked
    engine.load_weights({"i": np.array([2**30], np.int32)})


def test_weights_and_carried_states_are_not_rechecked_per_replay(
    engine: Engine, device: CountingDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = engine.add_entry(affine_program(), engine.load_weights({"w": np.ones(4, np.float32)}))
    import poot_engine.live as live_module

    seen: list[tuple[str, str]] = []
    real = live_module.check_ranges

    def spy(
        error: type[NarrowingRangeError],
        checks: tuple[RangeCheck, ...],
        arrays: tuple[np.ndarray, ...],
    ) -> None:
        seen.extend((error.__name__, name) for _, name, _, _ in checks)
        real(error, checks, arrays)

    monkeypatch.setattr(live_module, "check_ranges", spy)  # the step path: inputs and results
    for i in range(3):
        engine.step(entry, {"x": np.full(4, i, np.float32)})
    # per step: the slot before, the two F32 results after; never the weight or the state
    assert (
        seen
        == [
            ("NarrowingRangeInput", "x"),
            ("NarrowingRangeResult", "y"),
            ("NarrowingRangeResult", "acc"),
        ]
        * 3
    )


def test_a_refused_result_leaves_the_state_as_it_was(
    engine: Engine, device: CountingDevice
) -> None:
    entry = engine.add_entry(running_sum_program())
    engine.step(entry, {"x": np.full(3, 30000, np.float32)})  # total 30000, twice 60000
    with pytest.raises(NarrowingRangeResult) as err:
        engine.step(entry, {"x": np.full(3, 10000, np.float32)})  # twice would be 80000
    assert err.value.argument == "twice"
    out = engine.step(entry, {"x": np.full(3, 32, np.float32)})  # FP16 holds 30032 exactly
    np.testing.assert_array_equal(out["total"], np.full(3, 30032, np.float32))
    assert device.runs == 3


def test_an_initial_state_beyond_the_range_is_refused(engine: Engine) -> None:
    with pytest.raises(NarrowingRangeInput) as err:
        engine.add_entry(
            running_sum_program(), initial_state={"total": np.array([0, -1e6, 0], np.float32)}
        )
    assert (err.value.argument, err.value.element) == ("total", (1,))


def test_checks_cover_every_element_of_a_larger_tensor(engine: Engine) -> None:
    b = Builder("big")
    x = b.slot("x", DType.F32, (8, 16))
    b.output("y", b.neg(x))
    entry = engine.add_entry(b.build())
    x_ok = np.linspace(-MAX, MAX, 128, dtype=np.float32).reshape(8, 16)
    want = -x_ok.astype(np.float16).astype(np.float32)  # narrowed on entry
    np.testing.assert_array_equal(engine.step(entry, {"x": x_ok})["y"], want)
    x_bad = x_ok.copy()
    x_bad[5, 7] = -np.inf
    with pytest.raises(NarrowingRangeInput) as err:
        engine.step(entry, {"x": x_bad})
    assert err.value.element == (5, 7)


_EDGES = [0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65505.0, -65505.0, np.inf, -np.inf, np.nan]


@settings(max_examples=150)
@given(
    st.lists(st.sampled_from(_EDGES) | st.floats(width=32), min_size=0, max_size=12),
    st.sampled_from([1.0, 65504.0, 3.0e38]),
)
def test_check_range_agrees_with_an_elementwise_reference(
    values: list[float], limit: float
) -> None:
    x = np.array(values, np.float32)
    # the reference, element by element in Python: the first beyond the limit or NaN
    bad = [i for i, v in enumerate(x.tolist()) if not abs(v) <= limit]
    if not bad:
        check_range(NarrowingRangeInput, "x", x, limit)
        return
    with pytest.raises(NarrowingRangeInput) as err:
        check_range(NarrowingRangeInput, "x", x, limit)
    assert err.value.element == (bad[0],)
    assert np.array_equal(np.float32(err.value.value), x[bad[0]], equal_nan=True)
    # 2-D: the index names both axes
    with pytest.raises(NarrowingRangeInput) as err2:
        check_range(NarrowingRangeInput, "x", np.stack([np.zeros_like(x), x]), limit)
    assert err2.value.element == (1, bad[0])


def test_a_refused_first_step_keeps_no_recording_and_the_next_step_records(
    engine: Engine, device: CountingDevice
) -> None:
    """The first step's checks run before its recording is kept (and bound): a refused one
    counts nothing and runs nothing, and the step after it records, runs and carries the state
    from zero as the oracle does."""
    program = affine_program()
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    entry = engine.add_entry(program, engine.load_weights({"w": w}))
    bad = np.array([0, 0, np.nan, 0], np.float32)
    with pytest.raises(NarrowingRangeInput) as err:
        engine.step(entry, {"x": bad})
    assert (err.value.argument, err.value.element) == ("x", (2,))
    s = engine.stats()
    assert (s.recordings, s.replays, s.steps, device.runs) == (0, 0, 0, 0)
    narrowed = plan(program, "intel-npu4").program
    acc = np.zeros(4, np.float32)
    for k in range(3):
        x = np.full(4, MAX if k == 1 else k - 0.5, np.float32) / np.float32(8)
        got = engine.step(entry, {"x": x})
        want = evaluate(narrowed, {"w": w, "x": x, "acc": acc})
        acc = want["acc"]
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    s = engine.stats()
    assert (s.recordings, s.replays, s.steps, device.runs) == (1, 2, 3, 3)
