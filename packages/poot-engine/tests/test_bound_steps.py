"""Bound steps (``poot_engine.steps``): a recording bound to its device once, and the
allocation-free extremes check (``checks.within``) every range and domain check uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engine_support import CountingDevice, SlowDevice, affine_program, running_sum_program
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from poot_engine import BoundStep, CpuDevice, Engine, StepCommands
from poot_engine.checks import _SMALL, check_ranges, range_checks, within
from poot_engine.domain import HostGuard
from poot_engine.host_buffers import HostStep
from poot_engine.steps import ProtocolStep
from poot_ir import (
    DeadlineExceeded,
    DevicePoisoned,
    DispatchRefused,
    DType,
    NarrowingRangeInput,
    TensorType,
    evaluate,
)
from poot_ir.numerics import FiniteInputs, Interval, NotNaN, PositiveNormal

W = np.array([1.5, -2.0, 0.25, 3.0], np.float32)


def _steps(engine: Engine, n: int = 4) -> list[dict[str, np.ndarray]]:
    entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
    return [engine.step(entry, {"x": np.full(4, k - 1.5, np.float32)}) for k in range(n)]


def _oracle_steps(n: int = 4) -> list[dict[str, np.ndarray]]:
    acc, out = np.zeros(4, np.float32), []
    for k in range(n):
        r = evaluate(affine_program(), {"w": W, "x": np.full(4, k - 1.5, np.float32), "acc": acc})
        acc = r["acc"]
        out.append(r)
    return out


class _Forwarding:
    """A wrapper that forwards every attribute but ``dispatch``, which it counts (as
    acceptance's wrong device changes it), and so binds its steps as protocol calls."""

    def __init__(self, device: CpuDevice) -> None:
        self._d = device
        self.dispatches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._d, name)

    def dispatch(self, artifact: Any, buffers: tuple[Any, ...], deadline_s: float) -> None:
        self.dispatches += 1
        self._d.dispatch(artifact, buffers, deadline_s)

    def bind_step(self, commands: StepCommands) -> BoundStep:
        return ProtocolStep(self, commands)


def test_each_binding_replays_what_the_oracle_computes(tmp_path: Path) -> None:
    want = _oracle_steps()
    for device in (CpuDevice(), CountingDevice()):  # whole-step binding, protocol calls
        with Engine(device, cache_dir=tmp_path) as engine:
            got = _steps(engine)
            bound = next(iter(engine._entries.values())).bound
        expected = "ProtocolStep" if isinstance(device, CountingDevice) else "_CpuStep"
        assert type(bound).__name__ == expected
        for g, w in zip(got, want, strict=True):
            assert g.keys() == w.keys()
            for name in w:
                assert np.array_equal(g[name], w[name]), name


def test_a_wrapper_that_binds_protocol_calls_sees_every_dispatch(tmp_path: Path) -> None:
    wrapped = _Forwarding(CpuDevice())
    with Engine(wrapped, cache_dir=tmp_path) as engine:  # type: ignore[arg-type]
        got = _steps(engine)
        assert isinstance(next(iter(engine._entries.values())).bound, ProtocolStep)
    assert wrapped.dispatches == len(got)
    for g, w in zip(got, _oracle_steps(), strict=True):
        assert all(np.array_equal(g[n], w[n]) for n in w)


def test_results_are_fresh_arrays_and_the_state_carries(tmp_path: Path) -> None:
    with Engine(CpuDevice(), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(running_sum_program())
        first = engine.step(entry, {"x": np.ones(3, np.float32)})
        first["twice"][:] = -1  # a caller's edit reaches no buffer
        second = engine.step(entry, {"x": np.ones(3, np.float32)})
        assert second["twice"].tolist() == [4.0, 4.0, 4.0]
        assert engine.read_state(entry, "total").tolist() == [2.0, 2.0, 2.0]


def test_a_bound_step_survives_other_frees_and_refuses_its_own(tmp_path: Path) -> None:
    device = CpuDevice()
    with Engine(device, cache_dir=tmp_path) as engine:
        entry = engine.add_entry(running_sum_program())
        other = engine.add_entry(running_sum_program())
        engine.step(entry, {"x": np.ones(3, np.float32)})
        engine.step(other, {"x": np.ones(3, np.float32)})
        engine.remove_entry(other)  # frees its buffers and unloads its artifact
        assert engine.step(entry, {"x": np.ones(3, np.float32)})["twice"].tolist() == [4.0] * 3
        live = engine._entries[entry.id]
        bound = live.bound
        assert bound is not None
        device.free(live.buffers["x"])  # one of this step's own buffers
        with pytest.raises(DispatchRefused, match="released"):
            bound.run((np.ones(3, np.float32),), 1.0)


def test_the_whole_step_binding_keeps_the_deadline(tmp_path: Path) -> None:
    device = SlowDevice(delay_s=0.05)  # slows the oracle's run only: still bound whole
    with Engine(device, cache_dir=tmp_path, deadline_s=0.5) as engine:
        entry = engine.add_entry(running_sum_program())
        engine.step(entry, {"x": np.ones(3, np.float32)})
        assert type(engine._entries[entry.id].bound).__name__ == "_CpuStep"
        assert isinstance(engine._entries[entry.id].bound, HostStep)
        engine.deadline_s = 0.01
        with pytest.raises(DeadlineExceeded):
            engine.step(entry, {"x": np.ones(3, np.float32)})
        with pytest.raises(DevicePoisoned):
            engine.step(entry, {"x": np.ones(3, np.float32)})
    assert device.runs == 1


# -- within: the extremes of an array against [lo, hi] -----------------------------------------

F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("n", [1, 7, _SMALL, _SMALL + 1])
def test_within_at_the_edges_of_the_interval_and_of_the_sizes(n: int) -> None:
    lim = 65504.0
    base = np.zeros(n, np.float32)
    for at in (0, n - 1):
        for value, inside in (
            (lim, True),
            (-lim, True),
            (np.nextafter(np.float32(lim), np.float32(np.inf)), False),
            (-np.nextafter(np.float32(lim), np.float32(np.inf)), False),
            (np.nan, False),
            (np.inf, False),
            (-np.inf, False),
        ):
            x = base.copy()
            x[at] = value
            assert within(x, -lim, lim) is inside, (n, at, value)


@settings(max_examples=60)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(max_dims=3, max_side=6),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    )
)
def test_within_agrees_with_an_elementwise_comparison(x: np.ndarray) -> None:
    for lim in (1.0, 65504.0, F32_MAX):
        want = bool(np.all((x >= -lim) & (x <= lim)))
        assert within(x, -lim, lim) is want


def test_which_domain_guards_the_range_check_implies() -> None:
    def guard(domain: object) -> HostGuard:
        return HostGuard("x", 0, "p", domain)  # type: ignore[arg-type]

    assert guard(FiniteInputs()).implied_by_range(65504.0)
    assert guard(NotNaN()).implied_by_range(65504.0)
    assert guard(Interval(-1e5, 1e5)).implied_by_range(65504.0)
    assert not guard(Interval(-87.0, 88.0)).implied_by_range(65504.0)  # exp's: still checked
    assert not guard(PositiveNormal()).implied_by_range(65504.0)
    assert not guard(None).implied_by_range(65504.0)  # gather indices


# -- check_ranges: a step's range checks, resolved when it records -----------------------------


def _first_bad(x: np.ndarray, lim: float) -> tuple[int, ...] | None:
    """The reference: the first element (C order) that is NaN or beyond ``lim`` in magnitude."""
    bad = np.argwhere(~((x >= -lim) & (x <= lim)))
    return None if len(bad) == 0 else tuple(int(i) for i in bad[0])


@pytest.mark.parametrize("n", [1, 7, _SMALL, _SMALL + 1])
def test_check_ranges_at_the_edges_names_the_array_and_its_first_bad_element(n: int) -> None:
    lim = 65504.0
    above = float(np.nextafter(np.float32(lim), np.float32(np.inf)))
    types = {"a": TensorType((n,), DType.F32), "b": TensorType((n,), DType.F32)}
    checks = range_checks(lim, ("a", "b"), ("a", "b"), types)
    assert [c[:3] for c in checks] == [(0, "a", lim), (1, "b", lim)]
    good = np.full(n, -lim, np.float32)
    good[-1] = lim
    for at in (0, n - 1):
        for value in (above, -above, np.nan, np.inf, -np.inf, lim, -lim):
            bad = np.zeros(n, np.float32)
            bad[at] = value
            want = _first_bad(bad, lim)
            if want is None:
                check_ranges(NarrowingRangeInput, checks, (good, bad))
                continue
            with pytest.raises(NarrowingRangeInput) as err:
                check_ranges(NarrowingRangeInput, checks, (good, bad))
            assert (err.value.argument, err.value.element) == ("b", want), (n, at, value)
            got = err.value.value
            assert got == float(bad[want]) or (np.isnan(got) and np.isnan(bad[want]))


def test_range_checks_leave_out_what_cannot_fail_and_everything_without_a_limit() -> None:
    types = {
        "f": TensorType((3,), DType.F32),
        "empty": TensorType((0, 4), DType.F32),
        "i": TensorType((3,), DType.I32),
        "h": TensorType((3,), DType.F16),
    }
    names = ("i", "f", "empty", "h")
    assert range_checks(65504.0, names, names, types) == ((1, "f", 65504.0, True),)
    assert range_checks(None, names, names, types) == ()
