"""Verified steps: ``Engine(device, verify=...)`` compares a step with the oracle before it
commits. A device that returns a wrong value (as mlir-aie #3654's third context did, reporting
COMPLETED) is refused with ``ContractViolation``; the entry is poisoned and no state changes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import poot_engine.verify
import poot_planner.error_bounds
import poot_planner.reference
import pytest
from engine_support import affine_program
from poot_engine import CpuDevice, Engine
from poot_engine.cpu import BoundRun
from poot_engine.run import run_program
from poot_ir import (
    Builder,
    ContractViolation,
    DType,
    EngineError,
    EntryPoisoned,
    Program,
    evaluate,
)
from poot_ir.numerics import Bounded
from poot_planner import Plan, plan
from poot_planner.reference import Joint, joint_program


class GarbageDevice(CpuDevice):
    """A CpuDevice that adds ``delta`` to element 2 of ``y`` when ``x[0]`` is ``bad_x``."""

    def __init__(self, bad_x: float, delta: float = 1.0, target: str = "cpu") -> None:
        super().__init__(target)
        self.bad_x, self.delta = bad_x, delta

    def _bind_run(self, program: Program, inputs: dict[str, np.ndarray]) -> BoundRun:
        run, y = super()._bind_run(program, inputs), program.result_names.index("y")

        def garbage() -> tuple[np.ndarray, ...]:
            out = list(run())
            if inputs["x"][0] == self.bad_x:
                out[y] = out[y].copy()
                out[y][2] += np.float32(self.delta)
            return tuple(out)

        return garbage


def _feed(k: int) -> dict[str, np.ndarray]:
    return {"x": np.arange(4, dtype=np.float32) + k}


F32 = DType.F32
W = np.array([1.0, -2.0, 0.5, 3.0], np.float32)


def test_verified_steps_of_a_correct_device_pass_and_are_counted(tmp_path: Path) -> None:
    with Engine(CpuDevice(), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
        for k in range(4):
            engine.step(entry, _feed(k))
        stats = engine.stats()
    assert stats.verified_steps == 4 and stats.worst_error_ratio == 0.0


def test_a_wrong_result_is_a_contract_violation_that_poisons_the_entry(tmp_path: Path) -> None:
    device = GarbageDevice(bad_x=2.0)
    with Engine(device, cache_dir=tmp_path, verify="always") as engine:
        weights = engine.load_weights({"w": W})
        entry = engine.add_entry(affine_program(), weights)
        acc = np.zeros(4, np.float32)
        for k in range(2):
            out = engine.step(entry, _feed(k))
            acc = evaluate(affine_program(), {"w": W, "acc": acc, **_feed(k)})["acc"]
            assert np.array_equal(out["acc"], acc)
        with pytest.raises(ContractViolation) as err:
            engine.step(entry, _feed(2))
        e = err.value
        assert e.result == "y" and e.element == (2,) and e.error == 1.0 and e.bound == 0.0
        # nothing committed: the state buffer still holds the state of step 1
        held = engine.device.read(engine._entries[entry.id].buffers["acc"])
        assert np.array_equal(held, acc)
        with pytest.raises(EntryPoisoned):
            engine.step(entry, _feed(2))
        # the poison is the entry's, not the engine's: a new entry runs and verifies
        other = engine.add_entry(affine_program(), weights)
        engine.step(other, _feed(0))
        assert engine.stats().verified_steps == 4


def test_an_unverified_engine_returns_the_wrong_result(tmp_path: Path) -> None:
    # the failure the verified step exists for: without it, nothing notices
    with Engine(GarbageDevice(bad_x=0.0), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
        out = engine.step(entry, _feed(0))
        want = evaluate(affine_program(), {"w": W, "acc": np.zeros(4, np.float32), **_feed(0)})
        assert out["y"][2] != want["y"][2] and engine.stats().verified_steps == 0


def test_a_fraction_verifies_some_steps_at_random(tmp_path: Path) -> None:
    with Engine(CpuDevice(), cache_dir=tmp_path, verify=0.5) as engine:
        entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
        for k in range(60):
            engine.step(entry, _feed(k))
        verified = engine.stats().verified_steps
    assert 0 < verified < 60  # P(0 or 60 of 60) = 2^-59


@pytest.mark.parametrize("mode", ["sometimes", 0.0, 1.5, -0.1, True])
def test_a_bad_verify_mode_is_refused(tmp_path: Path, mode: object) -> None:
    with pytest.raises(EngineError, match="verify must be"):
        Engine(CpuDevice(), cache_dir=tmp_path, verify=mode)  # type: ignore[arg-type]


# -- the oracle, once per verified step --------------------------------------------------------


def _count_oracle(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every oracle evaluation a step's check makes (``poot_engine.verify`` and what it calls:
    the error analysis, ``poot_planner.error_bounds``, and the joint program,
    ``poot_planner.reference``), by program name. The device's own run
    (``CpuDevice``: ``bind_evaluation``) is not counted."""
    seen: list[str] = []

    def counted(program: Program, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        seen.append(program.name)
        return evaluate(program, inputs)

    monkeypatch.setattr(poot_engine.verify, "evaluate", counted)
    monkeypatch.setattr(poot_planner.error_bounds, "evaluate", counted)
    monkeypatch.setattr(poot_planner.reference, "evaluate", counted)
    return seen


def test_a_verified_step_of_a_bounded_plan_evaluates_the_oracle_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = plan(affine_program(), "xdna2")
    assert isinstance(p.numerics, Bounded) and p.legal is None  # the case: no rewrite
    seen = _count_oracle(monkeypatch)
    with Engine(CpuDevice("xdna2"), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(p, engine.load_weights({"w": W}))
        for k in range(3):
            engine.step(entry, _feed(k))
        assert engine.stats().verified_steps == 3
    assert len(seen) == 3, seen


def test_run_program_checks_a_bounded_step_with_one_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _count_oracle(monkeypatch)
    report = run_program(affine_program(), CpuDevice("xdna2"), "cpu", steps=2, cache_dir=tmp_path)
    assert report.ok and len(report.steps) == 2
    assert isinstance(report.plan.numerics, Bounded)
    assert len(seen) == 2, seen


def _rewritten() -> Program:
    """abs and min, rewritten on xdna2 (max-based), among approximate steps: a Bounded plan
    whose legalized program is not its source."""
    b = Builder("rewritten")
    x, z = b.slot("x", F32, (4,)), b.slot("z", F32, (4,))
    a = b.abs(x)
    b.output("y", b.exp(b.mul(b.tanh(b.min(a, z)), a)))
    return b.build()


def _rewritten_feed(k: int) -> dict[str, np.ndarray]:
    return {"x": np.arange(4, dtype=np.float32) - k, "z": np.full(4, 0.5 * k, np.float32)}


def test_a_verified_step_of_a_rewritten_bounded_plan_evaluates_the_oracle_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before the joint program: twice (the legalized program for the analysis, the source for
    # the reference)
    p = plan(_rewritten(), "xdna2")
    assert isinstance(p.numerics, Bounded) and p.legal is not None and p.rewrites
    seen = _count_oracle(monkeypatch)
    built: list[Plan] = []

    def counted(p: Plan) -> Joint:
        built.append(p)
        return joint_program(p)

    monkeypatch.setattr(poot_engine.verify, "joint_program", counted)
    with Engine(CpuDevice("xdna2"), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(p, engine.load_weights({}))
        for k in range(3):
            engine.step(entry, _rewritten_feed(k))
        assert engine.stats().verified_steps == 3 and engine.stats().worst_error_ratio <= 1.0
    assert len(seen) == 3, seen
    assert built == [p]  # the joint program is the entry's, built at its first verified step


def test_run_program_checks_a_rewritten_bounded_step_with_one_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _count_oracle(monkeypatch)
    report = run_program(_rewritten(), CpuDevice("xdna2"), "cpu", steps=2, cache_dir=tmp_path)
    assert report.ok and len(report.steps) == 2 and report.plan.legal is not None
    assert isinstance(report.plan.numerics, Bounded)
    assert len(seen) == 2, seen


class WrongDevice(CpuDevice):
    """A CpuDevice whose result ``y`` is off by ``delta`` at element 1."""

    def __init__(self, delta: float) -> None:
        super().__init__("xdna2")
        self.delta = delta

    def _bind_run(self, program: Program, inputs: dict[str, np.ndarray]) -> BoundRun:
        run, y = super()._bind_run(program, inputs), program.result_names.index("y")

        def wrong() -> tuple[np.ndarray, ...]:
            out = list(run())
            out[y] = out[y].copy()
            out[y][1] += np.float32(self.delta)
            return tuple(out)

        return wrong


def test_the_joint_reference_of_a_rewritten_plan_catches_a_wrong_result(tmp_path: Path) -> None:
    with Engine(WrongDevice(0.25), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(plan(_rewritten(), "xdna2"), engine.load_weights({}))
        with pytest.raises(ContractViolation) as err:
            engine.step(entry, _rewritten_feed(1))
    assert err.value.result == "y" and err.value.element == (1,)


def test_the_once_evaluated_reference_still_catches_a_wrong_result(tmp_path: Path) -> None:
    # the reference read from the analysis's values is the oracle's: a wrong element breaches
    with Engine(GarbageDevice(bad_x=1.0, target="xdna2"), tmp_path, verify="always") as engine:
        entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
        engine.step(entry, _feed(0))
        with pytest.raises(ContractViolation) as err:
            engine.step(entry, _feed(1))
    assert err.value.result == "y" and err.value.element == (2,)
