"""Deadlines and poisoning, and the dispatch refusals that need no hardware."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from engine_support import CountingDevice, SlowDevice, add_program, running_sum_program
from poot_engine import Buffer, Engine
from poot_engine.cpu import BoundRun
from poot_engine.deadline import MAX_WAIT_MS, DeadlineRunner, wait_slices_ms, wait_timeout_s
from poot_engine.lifecycle import Lifecycle
from poot_engine.recording import Dispatch, record
from poot_ir import (
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    DispatchRefused,
    DType,
    EngineError,
    Program,
    TensorType,
)

ONES = np.ones(3, np.float32)


def test_a_missed_deadline_poisons_the_device(tmp_path: Path) -> None:
    device = SlowDevice(delay_s=0.0)
    engine = Engine(device, cache_dir=tmp_path, deadline_s=0.05)
    entry = engine.add_entry(running_sum_program())
    engine.step(entry, {"x": ONES})  # recorded and run in time
    held = device.live_buffers
    device.delay_s = 0.15
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
    device = SlowDevice(delay_s=0.1)
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


# -- any positive deadline, inf meaning none (issue 10 point 10) ------------------------------

DAY_MS = 24 * 3600 * 1000


def test_wait_slices_cover_any_deadline_in_waits_a_runtime_takes() -> None:
    assert MAX_WAIT_MS == 2_147_483_647  # a signed 32-bit millisecond count: 24.855 days
    assert list(wait_slices_ms(1e-6)) == [1]  # never 0, which XRT reads as "forever"
    assert list(wait_slices_ms(0.0101)) == [11]  # rounded up
    assert list(wait_slices_ms(10.0)) == [10_000]
    assert list(wait_slices_ms(30 * 86400.0)) == [MAX_WAIT_MS, 30 * DAY_MS - MAX_WAIT_MS]
    huge = list(wait_slices_ms(1e12))
    assert sum(huge) == 10**15 and max(huge) == MAX_WAIT_MS and min(huge) > 0
    endless = itertools.islice(wait_slices_ms(math.inf), 1000)
    assert list(endless) == [MAX_WAIT_MS] * 1000
    assert wait_timeout_s(math.inf) is None and wait_timeout_s(1e300) is None
    assert wait_timeout_s(0.5) == 0.5


@pytest.mark.parametrize("deadline_s", [math.inf, 30 * 86400.0, 1e300, 1e6])
def test_any_positive_deadline_steps_on_the_cpu_device(tmp_path: Path, deadline_s: float) -> None:
    with Engine(CountingDevice(), cache_dir=tmp_path, deadline_s=deadline_s) as engine:
        entry = engine.add_entry(running_sum_program())
        for k in range(1, 4):
            assert engine.step(entry, {"x": ONES})["twice"].tolist() == [2.0 * k] * 3


@pytest.mark.parametrize("deadline_s", [math.inf, 30 * 86400.0])
def test_the_deadline_runner_takes_any_positive_deadline(deadline_s: float) -> None:
    runner = DeadlineRunner(Lifecycle("test"))
    try:
        assert runner.run(lambda: 42, deadline_s) == 42
    finally:
        runner.close()


def test_a_runner_that_misses_poisons_its_devices_lifecycle() -> None:
    life = Lifecycle("the runner's device")
    runner = DeadlineRunner(life)
    release = threading.Event()
    try:
        with pytest.raises(DeadlineExceeded):
            runner.run(release.wait, 0.01)
        assert life.poisoned and not life.usable
        with pytest.raises(DevicePoisoned, match="the runner's device"):
            runner.run(lambda: 1, 1.0)
        with pytest.raises(DevicePoisoned):
            life.check()
        assert life.close() and not life.close()  # only the first close releases
        with pytest.raises(DeviceFailed, match="closed"):
            runner.run(lambda: 1, 1.0)
    finally:
        release.set()
        runner.close()


@pytest.mark.parametrize("bad", [0.0, -1.0, -math.inf, math.nan, "10", None, True])
def test_a_deadline_that_is_not_a_positive_number_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(EngineError, match="deadline_s"):
        Engine(CountingDevice(), cache_dir=tmp_path, deadline_s=bad)  # type: ignore[arg-type]


# -- the CpuDevice's deadline: checked after the run, on the caller's thread -----------------


def test_the_cpu_device_runs_on_the_callers_thread(tmp_path: Path) -> None:
    seen: list[int] = []

    class Watching(CountingDevice):
        def _bind_run(self, program: Program, inputs: dict[str, np.ndarray]) -> BoundRun:
            run = super()._bind_run(program, inputs)

            def watched() -> tuple[np.ndarray, ...]:
                seen.append(threading.get_ident())
                return run()

            return watched

    threads = threading.active_count()
    with Engine(Watching(), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(running_sum_program())
        for _ in range(3):
            engine.step(entry, {"x": ONES})
        assert threading.active_count() == threads  # no worker was started
    assert seen == [threading.get_ident()] * 3


def test_an_overrun_changes_no_output_and_no_state(tmp_path: Path) -> None:
    device = SlowDevice(delay_s=0.0)
    engine = Engine(device, cache_dir=tmp_path, deadline_s=0.02)
    entry = engine.add_entry(running_sum_program())
    engine.step(entry, {"x": ONES})
    before = {k: v.copy() for k, v in device._buffers.memory.items()}
    device.delay_s = 0.05
    with pytest.raises(DeadlineExceeded) as err:
        engine.step(entry, {"x": 5 * ONES})
    assert err.value.deadline_s == 0.02
    after = device._buffers.memory
    # only the slot buffer took the step's input; every output and the state are untouched
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert len(changed) == 1 and np.array_equal(after[changed[0]], 5 * ONES)
    assert device.runs == 1
    with pytest.raises(DevicePoisoned):
        engine.step(entry, {"x": ONES})
    engine.close()


def test_a_run_just_within_its_deadline_is_not_a_miss(tmp_path: Path) -> None:
    device = SlowDevice(delay_s=0.01)
    with Engine(device, cache_dir=tmp_path, deadline_s=0.5) as engine:
        entry = engine.add_entry(running_sum_program())
        for _ in range(3):
            engine.step(entry, {"x": ONES})
        assert device.runs == 3
