"""``Engine.read_state`` / ``write_state`` and ``poot_engine.handoff`` on ``CpuDevice`` (the
oracle) and ``CpuDevice("intel-npu4")`` (the narrowed program on the oracle: an ideal FP16
device with the Intel target's range checks). Every refusal is checked to leave every state on
both sides as it was; values are checked against ``evaluate`` of the same program."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from engine_support import CpuDevice, SlowDevice, affine_program, running_sum_program
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_engine import BoundStep, Engine, Entry, ProtocolStep, StepCommands, handoff
from poot_engine.device import Artifact, Buffer
from poot_ir import (
    Builder,
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    DType,
    NarrowingRangeState,
    Program,
    StateError,
    UnknownEntry,
    WindowOutOfRange,
    evaluate,
    parse_program,
)
from poot_ir.numerics import Exact, NarrowStorage

F32, I32 = DType.F32, DType.I32
LOG_STATE = parse_program(
    (Path(__file__).resolve().parents[3] / "src/poot/examples/log_state.poot").read_text()
)


def _cursor_program() -> Program:
    """A cache written at a position carried as an I32 state (the host checks that window)."""
    b = Builder("cursor")
    cache = b.state("cache", F32, (6,))
    pos = b.state("pos", I32, ())
    row = b.slot("row", F32, (2,))
    b.update(cache, b.dynamic_update_slice(cache, row, [pos]))
    b.update(pos, b.add(pos, 2))
    b.output("head", b.slice(cache, (0,), (2,)))
    return b.build()


def _sum_program(n: int, dtype: DType = F32) -> Program:
    b = Builder("running_sum")
    x = b.slot("x", dtype, (n,))
    total = b.state("total", dtype, (n,))
    new = b.add(total, x)
    b.output("twice", b.mul(new, 2.0))
    b.update(total, new)
    return b.build()


@pytest.fixture
def cpu(tmp_path: Path) -> Engine:
    return Engine(CpuDevice(), cache_dir=tmp_path)


@pytest.fixture
def npu(tmp_path: Path) -> Engine:
    return Engine(CpuDevice("intel-npu4"), cache_dir=tmp_path)


def _states(engine: Engine, entry: Entry) -> dict[str, np.ndarray]:
    prog = engine.program(entry)
    return {
        a.name: engine.read_state(entry, a.name) for a in prog.args if a.storage.value == "state"
    }


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[n], b[n], equal_nan=True) for n in a)


def test_read_state_is_what_the_last_step_left_and_a_fresh_copy(cpu: Engine) -> None:
    prog = running_sum_program(3)
    e = cpu.add_entry(prog)
    xs = [np.array([1.0, -2.0, 0.5], np.float32), np.array([3.0, 4.0, -1.5], np.float32)]
    total = np.zeros(3, np.float32)
    for x in xs:
        out = cpu.step(e, {"x": x})
        total = evaluate(prog, {"x": x, "total": total})["total"]
        np.testing.assert_array_equal(out["total"], total)
    got = cpu.read_state(e, "total")
    np.testing.assert_array_equal(got, total)
    got[:] = 99.0  # the caller's copy: the engine's state is untouched
    np.testing.assert_array_equal(cpu.read_state(e, "total"), total)


def test_a_written_state_is_what_the_next_step_reads(cpu: Engine) -> None:
    prog = affine_program(4)
    w = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
    e = cpu.add_entry(prog, cpu.load_weights({"w": w}))
    acc = np.array([10.0, -1.0, 2.5, 7.0], np.float32)
    cpu.write_state(e, "acc", acc)
    x = np.array([0.25, 1.0, 2.0, -4.0], np.float32)
    out = cpu.step(e, {"x": x})
    want = evaluate(prog, {"w": w, "x": x, "acc": acc})
    np.testing.assert_array_equal(out["acc"], want["acc"])
    cpu.reset_state(e)  # reset restores the initial value, not the written one
    np.testing.assert_array_equal(cpu.read_state(e, "acc"), np.zeros(4, np.float32))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (np.zeros(3, np.float64), "dtype float64"),
        (np.zeros(3, np.float16), "dtype float16"),
        (np.zeros((1, 3), np.float32), "shape (1, 3)"),
        (np.zeros(4, np.float32), "shape (4,)"),
        ([0.0, 0.0, 0.0], "got list"),
    ],
)
def test_write_state_refuses_another_dtype_or_shape(cpu: Engine, value: object, why: str) -> None:
    e = cpu.add_entry(running_sum_program(3))
    cpu.step(e, {"x": np.ones(3, np.float32)})
    before = _states(cpu, e)
    with pytest.raises(StateError, match=re.escape(why)) as err:
        cpu.write_state(e, "total", value)  # type: ignore[arg-type]
    assert err.value.state == "total"
    assert _same(_states(cpu, e), before)


def test_names_that_are_no_state_are_refused_by_name(cpu: Engine) -> None:
    e = cpu.add_entry(affine_program(4), cpu.load_weights({"w": np.ones(4, np.float32)}))
    for name, what in (("x", "slot argument"), ("w", "weight argument"), ("y", "no argument")):
        with pytest.raises(StateError, match=what) as err:
            cpu.read_state(e, name)
        assert err.value.state == name
        with pytest.raises(StateError, match=what):
            cpu.write_state(e, name, np.zeros(4, np.float32))


def test_states_of_a_closed_engine_or_a_foreign_entry_are_refused(tmp_path: Path) -> None:
    a, b = Engine(CpuDevice(), cache_dir=tmp_path), Engine(CpuDevice(), cache_dir=tmp_path)
    ea = a.add_entry(running_sum_program(3))
    with pytest.raises(UnknownEntry):
        b.read_state(ea, "total")
    a.close()
    with pytest.raises(DeviceFailed, match="closed"):
        a.read_state(ea, "total")
    with pytest.raises(DeviceFailed, match="closed"):
        a.write_state(ea, "total", np.zeros(3, np.float32))
    b.close()


class _Reentrant(CpuDevice):
    """Calls back into its engine from inside a dispatch (as a progress callback might)."""

    engine: Engine | None = None
    entry: Entry | None = None
    seen: list[type[BaseException]]

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        assert self.engine is not None and self.entry is not None
        for call in (
            lambda: self.engine.read_state(self.entry, "total"),  # type: ignore[union-attr]
            lambda: self.engine.write_state(  # type: ignore[union-attr]
                self.entry,  # type: ignore[arg-type]
                "total",
                np.full(3, 5.0, np.float32),
            ),
        ):
            try:
                call()
            except StateError as err:
                self.seen.append(type(err))
                assert "a step of this engine is running" in str(err)
        super().dispatch(artifact, buffers, deadline_s)

    def bind_step(self, commands: StepCommands) -> BoundStep:
        return ProtocolStep(self, commands)  # each replay's dispatch is the one above


def test_no_state_moves_while_a_step_is_running(tmp_path: Path) -> None:
    dev = _Reentrant()
    dev.seen = []
    engine = Engine(dev, cache_dir=tmp_path)
    dev.engine, dev.entry = engine, engine.add_entry(running_sum_program(3))
    out = engine.step(dev.entry, {"x": np.ones(3, np.float32)})
    assert dev.seen == [StateError, StateError]
    np.testing.assert_array_equal(out["total"], np.ones(3, np.float32))  # not the refused 5.0
    np.testing.assert_array_equal(engine.read_state(dev.entry, "total"), out["total"])


def test_stats_count_reads_writes_and_bytes(cpu: Engine) -> None:
    e = cpu.add_entry(running_sum_program(3))
    cpu.read_state(e, "total")
    cpu.write_state(e, "total", np.ones(3, np.float32))
    cpu.write_state(e, "total", np.ones(3, np.float32))
    s = cpu.stats()
    assert (s.state_reads, s.state_writes) == (1, 2)
    assert (s.state_bytes_read, s.state_bytes_written) == (12, 24)
    with pytest.raises(StateError):
        cpu.write_state(e, "total", np.ones(2, np.float32))
    assert cpu.stats().state_writes == 2  # a refused write is not counted


def test_a_window_start_written_as_a_state_is_checked_before_the_next_step(cpu: Engine) -> None:
    e = cpu.add_entry(_cursor_program())
    row = np.array([1.0, 2.0], np.float32)
    cpu.write_state(e, "pos", np.array(4, np.int32))
    out = cpu.step(e, {"row": row})
    np.testing.assert_array_equal(out["cache"], [0, 0, 0, 0, 1, 2])
    cpu.write_state(e, "pos", np.array(5, np.int32))  # a window [5, 7) that does not fit
    before = _states(cpu, e)
    with pytest.raises(WindowOutOfRange):
        cpu.step(e, {"row": row})
    assert _same(_states(cpu, e), before)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.lists(
        st.one_of(
            st.floats(-70000.0, 70000.0, width=32),
            st.sampled_from([65504.0, -65504.0, 65505.0, float("nan"), float("inf")]),
        ),
        min_size=3,
        max_size=3,
    )
)
def test_a_narrowing_device_range_checks_a_written_state_like_an_upload(
    tmp_path_factory: pytest.TempPathFactory, values: list[float]
) -> None:
    npu = Engine(CpuDevice("intel-npu4"), cache_dir=tmp_path_factory.mktemp("c"))
    e = npu.add_entry(running_sum_program(3))
    arr = np.array(values, np.float32)
    outside = [i for i, v in enumerate(arr) if not abs(float(v)) <= 65504.0]
    before = _states(npu, e)
    if outside:
        with pytest.raises(NarrowingRangeState) as err:
            npu.write_state(e, "total", arr)
        assert err.value.argument == "total" and err.value.element == (outside[0],)
        assert _same(_states(npu, e), before)
    else:
        npu.write_state(e, "total", arr)
        np.testing.assert_array_equal(npu.read_state(e, "total"), arr)
    npu.close()


def test_partitioned_entries_read_and_write_their_host_states(npu: Engine) -> None:
    w = np.full((4, 8), 0.5, np.float32)
    e = npu.add_partitioned(LOG_STATE, npu.load_weights({"w": w}))
    assert npu.partitioned(e) is not None
    s = np.linspace(-2.0, 2.0, 32, dtype=np.float32).reshape(4, 8)
    npu.write_state(e, "s", s)
    np.testing.assert_array_equal(npu.read_state(e, "s"), s)
    x = np.full((4, 8), 0.25, np.float32)
    out = npu.step(e, {"x": x})
    want = evaluate(LOG_STATE, {"x": x, "w": w, "s": s})["s"]
    assert np.max(np.abs(out["s"] - want)) <= 2.0**-8 * np.max(np.abs(want))  # one FP16 graph
    np.testing.assert_array_equal(npu.read_state(e, "s"), out["s"])


def test_handoff_between_engines_moves_every_state_and_only_them(
    cpu: Engine, tmp_path: Path
) -> None:
    other = Engine(CpuDevice(), cache_dir=tmp_path)
    prog = affine_program(4)
    w = np.array([1.0, -1.0, 2.0, 0.0], np.float32)
    src = cpu.add_entry(prog, cpu.load_weights({"w": w}))
    dst = other.add_entry(prog, other.load_weights({"w": w}))
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    for _ in range(3):
        cpu.step(src, {"x": x})
    moved = handoff(cpu, src, other, dst)
    assert moved.names == ("acc",) and moved.bytes_moved == moved.state_bytes == 16
    np.testing.assert_array_equal(other.read_state(dst, "acc"), cpu.read_state(src, "acc"))
    # the destination continues exactly where the source stopped
    np.testing.assert_array_equal(other.step(dst, {"x": x})["acc"], cpu.step(src, {"x": x})["acc"])
    assert other.stats().state_bytes_written == 16
    assert other.numerics(dst) == Exact()
    other.close()


def test_handoff_within_one_engine_between_two_entries(cpu: Engine) -> None:
    a, b = cpu.add_entry(running_sum_program(3)), cpu.add_entry(running_sum_program(3))
    cpu.step(a, {"x": np.array([1.0, 2.0, 3.0], np.float32)})
    handoff(cpu, a, cpu, b, names=["total"])
    out = cpu.step(b, {"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out["total"], [2.0, 3.0, 4.0])


def test_a_state_narrowed_on_the_source_says_so_in_the_destination_numerics(
    cpu: Engine, npu: Engine
) -> None:
    src, dst = npu.add_entry(running_sum_program(3)), cpu.add_entry(running_sum_program(3))
    npu.step(src, {"x": np.array([0.1, 0.2, 0.3], np.float32)})
    assert cpu.numerics(dst) == Exact()
    moved = handoff(npu, src, cpu, dst)
    assert isinstance(moved.numerics, NarrowStorage)
    assert cpu.numerics(dst) == moved.numerics == npu.numerics(src)
    # the narrowing is in the values: FP16 sums of the F32 inputs, not the F32 oracle's
    got = cpu.read_state(dst, "total")
    np.testing.assert_array_equal(got, np.array([0.1, 0.2, 0.3], np.float16).astype(np.float32))
    cpu.reset_state(dst)
    assert cpu.numerics(dst) == Exact()


def _refused(
    src: Engine, se: Entry, dst: Engine, de: Entry, error: type[Exception], **kw: object
) -> BaseException:
    before = (_states(src, se), _states(dst, de))
    with pytest.raises(error) as err:
        handoff(src, se, dst, de, **kw)  # type: ignore[arg-type]
    assert _same(_states(src, se), before[0]) and _same(_states(dst, de), before[1])
    return err.value


def test_bad_handoffs_are_refused_and_change_nothing(cpu: Engine, npu: Engine) -> None:
    src = cpu.add_entry(running_sum_program(3))
    cpu.step(src, {"x": np.array([1.0, 2.0, 3.0], np.float32)})
    dst = npu.add_entry(running_sum_program(3))
    npu.step(dst, {"x": np.array([-1.0, -1.0, -1.0], np.float32)})
    wide = npu.add_entry(_sum_program(4))
    half = npu.add_entry(_sum_program(3, DType.F16))
    err = _refused(cpu, src, npu, wide, StateError)
    assert isinstance(err, StateError) and err.state == "total" and "f32[4]" in str(err)
    err = _refused(cpu, src, npu, half, StateError)
    assert "f16[3]" in str(err)
    _refused(cpu, src, npu, dst, StateError, names=["x"])  # a slot, not a state
    _refused(cpu, src, npu, dst, StateError, names=["nope"])
    _refused(cpu, src, npu, dst, StateError, names=["total", "total"])
    _refused(cpu, src, npu, dst, StateError, names=[])
    cpu.write_state(src, "total", np.array([1.0, 7e4, 2.0], np.float32))  # fine on the CPU
    err = _refused(cpu, src, npu, dst, NarrowingRangeState)
    assert isinstance(err, NarrowingRangeState) and err.element == (1,)
    assert npu.stats().state_writes == 0
    # a refused handoff from the FP16 device leaves an exact destination exact
    wide_cpu = cpu.add_entry(_sum_program(4))
    _refused(npu, dst, cpu, wide_cpu, StateError)
    assert cpu.numerics(wide_cpu) == Exact()


def test_a_closed_source_engine_is_refused(tmp_path: Path, npu: Engine) -> None:
    src_engine = Engine(CpuDevice(), cache_dir=tmp_path / "src")
    src = src_engine.add_entry(running_sum_program(3))
    src_engine.step(src, {"x": np.ones(3, np.float32)})
    dst = npu.add_entry(running_sum_program(3))
    before = _states(npu, dst)
    src_engine.close()
    with pytest.raises(DeviceFailed, match="closed"):
        handoff(src_engine, src, npu, dst)
    assert _same(_states(npu, dst), before)
    with pytest.raises(DeviceFailed, match="closed"):  # and as a destination
        handoff(npu, dst, src_engine, src)


def test_a_poisoned_source_is_refused_and_the_destination_keeps_its_states(
    tmp_path: Path, cpu: Engine
) -> None:
    slow = Engine(SlowDevice(delay_s=0.3), cache_dir=tmp_path / "slow", deadline_s=0.05)
    src = slow.add_entry(running_sum_program(3))
    with pytest.raises(DeadlineExceeded):
        slow.step(src, {"x": np.ones(3, np.float32)})
    dst = cpu.add_entry(running_sum_program(3))
    cpu.write_state(dst, "total", np.array([1.0, 2.0, 3.0], np.float32))
    with pytest.raises(DevicePoisoned):
        handoff(slow, src, cpu, dst)
    np.testing.assert_array_equal(cpu.read_state(dst, "total"), [1.0, 2.0, 3.0])
    slow.close()


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    st.lists(
        st.sampled_from([0.0, -0.0, 1e-8, 6e-8, 65504.0, -65504.0, 65505.0, 1e5, float("nan")])
        | st.floats(-1e5, 1e5, width=32),
        min_size=3,
        max_size=3,
    )
)
def test_handoff_to_an_fp16_device_moves_exactly_what_it_can_hold(
    tmp_path_factory: pytest.TempPathFactory, values: list[float]
) -> None:
    """From the exact CPU to the ideal FP16 device: a value beyond 65504 or a NaN is refused
    naming its element, with both sides as they were; anything else arrives bit for bit (the
    narrowing happens inside the destination's graph, not in the handoff)."""
    root = tmp_path_factory.mktemp("h")
    cpu, npu = Engine(CpuDevice(), cache_dir=root), Engine(CpuDevice("intel-npu4"), cache_dir=root)
    src, dst = cpu.add_entry(running_sum_program(3)), npu.add_entry(running_sum_program(3))
    arr = np.array(values, np.float32)
    cpu.write_state(src, "total", arr)
    outside = [i for i, v in enumerate(values) if not abs(np.float32(v)) <= 65504.0]
    if outside:
        err = _refused(cpu, src, npu, dst, NarrowingRangeState)
        assert isinstance(err, NarrowingRangeState) and err.element == (outside[0],)
        assert npu.stats().state_writes == 0
    else:
        handoff(cpu, src, npu, dst)
        got = npu.read_state(dst, "total")
        assert got.tobytes() == arr.tobytes()
    cpu.close()
    npu.close()
