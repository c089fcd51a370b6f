"""Partitioned entries on ``CpuDevice("intel-npu4")`` (the narrowed program of the Intel
target, on the oracle): device spans as sub-entries, oracle spans on the host, states carried
across spans, and every boundary check of an ordinary step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from poot_engine import CpuDevice, Engine, Entry
from poot_ir import (
    Normwise,
    PlanRefused,
    StepInputError,
    UnknownEntry,
    compare,
    evaluate,
    parse_program,
    sample_inputs,
)

# the example program shipped with the CLI (the planner and device tests use it too)
LOG_STATE = parse_program(
    (Path(__file__).resolve().parents[3] / "src/poot/examples/log_state.poot").read_text()
)
LOOSE = Normwise(rel=2.0**-8, floor=2.0**-24)  # the Intel narrowing contract, for a few steps


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine(CpuDevice("intel-npu4"), cache_dir=tmp_path)


def _load(engine: Engine) -> tuple[Entry, dict[str, np.ndarray], np.ndarray]:
    inputs = sample_inputs(LOG_STATE, 0)
    w = engine.load_weights({"w": inputs["w"]})
    s0 = inputs["s"]
    return engine.add_partitioned(LOG_STATE, w, {"s": s0}), inputs, s0


def test_without_partition_it_is_refused_as_today(engine: Engine) -> None:
    w = engine.load_weights({"w": sample_inputs(LOG_STATE, 0)["w"]})
    with pytest.raises(PlanRefused):
        engine.add_entry(LOG_STATE, w)


def test_steps_match_the_oracle_with_a_state_crossing_spans(engine: Engine) -> None:
    entry, inputs, s0 = _load(engine)
    part = engine.partitioned(entry)
    assert part is not None
    assert [(s.device, s.eqns) for s in part.spans] == [
        (True, (0, 1)),
        (False, (2, 3)),
        (True, (4, 5, 6)),
    ]
    state = s0
    for k in range(4):
        x = sample_inputs(LOG_STATE, 10 + k)["x"]
        got = engine.step(entry, {"x": x})
        want = evaluate(LOG_STATE, {"x": x, "w": inputs["w"], "s": state})
        assert set(got) == {"y", "s"}
        for n in want:
            assert compare(got[n], want[n], LOOSE).ok, n
        state = got["s"]
    stats = engine.stats()
    assert stats.steps == 4
    assert stats.recordings == 2 and stats.replays == 6  # two device spans
    engine.reset_state(entry)
    x = sample_inputs(LOG_STATE, 10)["x"]
    again = engine.step(entry, {"x": x})
    want = evaluate(LOG_STATE, {"x": x, "w": inputs["w"], "s": s0})
    assert compare(again["s"], want["s"], LOOSE).ok


def test_typed_input_errors_name_the_argument(engine: Engine) -> None:
    entry, inputs, _ = _load(engine)
    x = inputs["x"]
    cases = [
        ({}, "x"),
        ({"x": x.astype(np.float64)}, "x"),
        ({"x": x[:2]}, "x"),
        ({"x": x, "s": inputs["s"]}, "s"),
        ({"x": x, "w": inputs["w"]}, "w"),
    ]
    for feed, name in cases:
        with pytest.raises(StepInputError) as err:
            engine.step(entry, feed)
        assert err.value.argument == name


def test_remove_entry_frees_the_sub_entries(engine: Engine) -> None:
    entry, _, _ = _load(engine)
    part = engine.partitioned(entry)
    assert part is not None
    subs = [s for s in part.subs if s is not None]
    assert len(subs) == 2
    engine.remove_entry(entry)
    assert engine.partitioned(entry) is None
    for sub in subs:
        with pytest.raises(UnknownEntry):
            engine.step(sub, {})
    with pytest.raises(UnknownEntry):
        engine.step(entry, {"x": np.zeros((4, 8), np.float32)})


def test_an_admitted_program_gets_the_ordinary_entry(tmp_path: Path) -> None:
    engine = Engine(CpuDevice(), cache_dir=tmp_path)
    inputs = sample_inputs(LOG_STATE, 0)
    w = engine.load_weights({"w": inputs["w"]})
    entry = engine.add_partitioned(LOG_STATE, w)
    assert engine.partitioned(entry) is None
    got = engine.step(entry, {"x": inputs["x"]})
    want = evaluate(LOG_STATE, {**inputs, "s": np.zeros((4, 8), np.float32)})
    assert all(got[n].tobytes() == want[n].tobytes() for n in want)
