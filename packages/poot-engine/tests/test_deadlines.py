"""Deadlines and poisoning, and the dispatch refusals that need no hardware."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from engine_support import CountingDevice, SlowDevice, add_program, running_sum_program
from poot_engine import Buffer, Engine
from poot_engine.recording import Dispatch, record
from poot_ir import (
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    DispatchRefused,
    DType,
    EngineError,
    TensorType,
)

ONES = np.ones(3, np.float32)


def test_a_missed_deadline_poisons_the_device(tmp_path: Path) -> None:
    device = SlowDevice(delay_s=0.0)
    engine = Engine(device, cache_dir=tmp_path, deadline_s=0.05)
    entry = engine.add_entry(running_sum_program())
    engine.step(entry, {"x": ONES})  # recorded and run in time
    held = device.live_buffers
    device.delay_s = 0.5
    with pytest.raises(DeadlineExceeded) as err:
        engine.step(entry, {"x": ONES})
    assert err.value.deadline_s == 0.05
    calls: list[Callable[[], object]] = [
        lambda: engine.step(entry, {"x": ONES}),
        lambda: engine.reset_state(entry),
        lambda: engine.remove_entry(entry),
        lambda: engine.add_entry(add_program()),
        lambda: engine.load_weights({}),
    ]
    for call in calls:
        with pytest.raises(DevicePoisoned):
            call()
    # the device refuses on its own too, whoever calls it
    with pytest.raises(DevicePoisoned):
        device.allocate(TensorType((1,), DType.F32))
    # the failed recording's buffers stay allocated until the device is closed
    assert held <= device.live_buffers
    engine.close()
    assert device.live_buffers == set()
    engine.close()  # idempotent
    with pytest.raises(DeviceFailed, match="closed"):
        engine.step(entry, {"x": ONES})


def test_a_deadline_miss_on_the_first_step_keeps_the_recording_alive(tmp_path: Path) -> None:
    device = SlowDevice(delay_s=0.3)
    with Engine(device, cache_dir=tmp_path, deadline_s=0.02) as engine:
        entry = engine.add_entry(add_program())
        x = np.ones(4, np.float32)
        with pytest.raises(DeadlineExceeded):
            engine.step(entry, {"x": x, "y": x})
        with pytest.raises(DevicePoisoned):
            engine.step(entry, {"x": x, "y": x})
        assert engine.stats().recordings == 1 and engine.stats().steps == 0
        assert len(device.live_buffers) == 3


def test_the_default_deadline_is_generous_and_positive(tmp_path: Path) -> None:
    engine = Engine(CountingDevice(), cache_dir=tmp_path)
    assert engine.deadline_s == 10.0
    engine.close()
    with pytest.raises(EngineError, match="deadline_s"):
        Engine(CountingDevice(), cache_dir=tmp_path, deadline_s=0)


def test_dispatch_refusals_touch_nothing(tmp_path: Path) -> None:
    device = CountingDevice()
    with Engine(device, cache_dir=tmp_path) as engine:
        a = engine.add_entry(add_program(4))
        b = engine.add_entry(running_sum_program())
        x = np.ones(4, np.float32)
        engine.step(a, {"x": x, "y": x})
        engine.step(b, {"x": ONES})
        rec_a = engine._entries[a.id].recording
        rec_b = engine._entries[b.id].recording
        assert rec_a is not None and rec_b is not None
        (dispatch_a,) = (c for c in rec_a.commands if isinstance(c, Dispatch))
        (dispatch_b,) = (c for c in rec_b.commands if isinstance(c, Dispatch))
        runs = device.runs
        f16 = device.allocate(TensorType((4,), DType.F16))
        refused = {
            "another entry's artifact": (dispatch_b.artifact, dispatch_a.buffers),
            "a buffer of the wrong dtype": (
                dispatch_a.artifact,
                (f16, *dispatch_a.buffers[1:]),
            ),
            "too few buffers": (dispatch_a.artifact, dispatch_a.buffers[:-1]),
            "a buffer never allocated": (
                dispatch_a.artifact,
                (Buffer(10**9, dispatch_a.buffers[0].type), *dispatch_a.buffers[1:]),
            ),
        }
        for what, (artifact, buffers) in refused.items():
            with pytest.raises(DispatchRefused):
                device.dispatch(artifact, buffers, 1.0)
            assert device.runs == runs, what
        # an unloaded artifact is refused too
        engine.remove_entry(b)
        with pytest.raises(DispatchRefused, match="not loaded"):
            device.dispatch(dispatch_b.artifact, dispatch_b.buffers, 1.0)
        # recording an artifact over buffers that are not its ABI is refused before any run
        entry_a = engine._entries[a.id]
        with pytest.raises(DispatchRefused):
            record(dispatch_b.artifact, entry_a.buffers, entry_a.outputs, ("x", "y"), ())
        # a host copy that is not the buffer's type is refused as well
        with pytest.raises(DispatchRefused):
            device.write(dispatch_a.buffers[0], np.ones(4, np.float64))
        assert device.runs == runs
        assert engine.step(a, {"x": x, "y": x})["z"].tolist() == [2, 2, 2, 2]
