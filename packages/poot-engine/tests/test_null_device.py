"""The null device: the smallest whole ``Device``, built from the kit ``poot_engine`` exports, and
driven by the ``Engine`` through everything an engine does with a device. A new device starts
as a copy of ``NullDevice``: keep the kit's parts, replace ``lower``/``compile``/``load`` with a
codegen and compiler, and ``_execute`` with the runtime's call.

Its "runtime" is the oracle run on a ``DeadlineRunner`` worker (a run that could hang: a
ctypes call, a driver's wait), so the results are checkable against ``poot_ir.evaluate`` and a
slow run misses its deadline the way a hung one would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from engine_support import affine_program, running_sum_program
from poot_engine import (
    Artifact,
    ArtifactSource,
    Buffer,
    CpuDevice,
    DeadlineRunner,
    Device,
    DeviceIdentity,
    Engine,
    HostMemory,
    HostStep,
    check_dispatch,
    handoff,
    next_id,
    signature_of,
)
from poot_ir import (
    BlobRefused,
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    EngineError,
    IRError,
    Program,
    Storage,
    evaluate,
    format_program,
    parse_program,
)
from poot_planner import Plan

W = np.array([1.5, -2.0, 0.25, 3.0], np.float32)


class NullDevice(HostMemory):
    """The kit's device: ``HostMemory`` gives the buffers, the lifecycle, ``bind_step``,
    ``traits``, ``use_cache``, ``report_progress`` and ``close``; this class writes the seven
    members that are a device's own. ``delay_s`` slows every run (to miss a deadline)."""

    def __init__(self) -> None:
        super().__init__("NullDevice")
        self._loaded: dict[int, tuple[Artifact, Program]] = {}
        self._runner = DeadlineRunner(self._life)  # a miss poisons this device
        self.delay_s = 0.0
        self.runs = 0

    @property
    def target(self) -> str:
        return "cpu"

    @property
    def identity(self) -> DeviceIdentity:
        return DeviceIdentity("null", "poot-ir text format", "1")

    def lower(self, plan: Plan) -> ArtifactSource:
        self._usable()
        text = format_program(plan.program).encode()
        return ArtifactSource(text, signature_of(plan.program))

    def compile(self, source: ArtifactSource) -> bytes:
        self._usable()
        return source.data

    def load(self, blob: bytes) -> Artifact:
        self._usable()
        try:
            program = parse_program(blob.decode())
        except (UnicodeDecodeError, IRError) as err:
            raise BlobRefused(self._name, str(err)) from None
        artifact = Artifact(next_id(), signature_of(program))
        self._loaded[artifact.id] = (artifact, program)
        return artifact

    def unload(self, artifact: Artifact) -> None:
        self._usable()
        self._buffers.epoch += 1  # a bound step of this artifact is stale
        self._loaded.pop(artifact.id, None)

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._usable()
        memory = self._buffers.memory
        _, program = check_dispatch(
            artifact, buffers, self._loaded, lambda e: e[0], memory, self._name
        )
        n_in = len(program.args)
        inputs = {a.name: memory[b.id] for a, b in zip(program.args, buffers[:n_in], strict=True)}
        what = f"{self._name} run of artifact {artifact.id}"
        results = self._runner.run(lambda: self._execute(program, inputs), deadline_s, what)
        for (_, var), b in zip(program.results(), buffers[n_in:], strict=True):
            memory[b.id][...] = results[var.id]
        self.runs += 1

    def _execute(self, program: Program, inputs: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        """The runtime's call (in the worker thread): each result by var id."""
        time.sleep(self.delay_s)
        out = evaluate(program, inputs)
        return {var.id: out[name] for name, var in program.results()}

    def _release(self) -> None:
        self._runner.close()
        self._loaded.clear()


def _oracle_steps(
    program: Program, feeds: list[dict[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    """Each step on the oracle, the states carried from step to step."""
    states = {
        a.name: np.zeros(a.var.shape, a.var.dtype.numpy)
        for a in program.args
        if a.storage is Storage.STATE
    }
    out = []
    for feed in feeds:
        r = evaluate(program, {"w": W, **states, **feed})
        states = {u.state: r[u.state] for u in program.updates}
        out.append(r)
    return out


def _feeds(n: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.linspace(-1, 1, 4, dtype=np.float32) * (k + 1)} for k in range(n)]


def test_the_null_device_is_a_whole_device() -> None:
    device: Device = NullDevice()  # mypy checks the protocol here; isinstance at run time
    assert isinstance(device, Device)
    assert device.traits.checks_score_bound is False
    device.close()
    device.close()  # idempotent


def test_weights_entries_record_and_replay_match_the_oracle(tmp_path: Path) -> None:
    device = NullDevice()
    feeds = _feeds(4)
    with Engine(device, cache_dir=tmp_path) as engine:
        entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
        got = [engine.step(entry, f) for f in feeds]
        bound = engine._entries[entry.id].bound
        assert type(bound) is HostStep  # the kit's binding: arrays written, dispatch a call
        assert engine.stats().compiles == 1
    assert device.runs == len(feeds)
    for g, w in zip(got, _oracle_steps(affine_program(), feeds), strict=True):
        assert g.keys() == w.keys()
        for name in w:
            assert np.array_equal(g[name], w[name]), name


def test_a_second_engine_loads_the_blob_from_the_cache(tmp_path: Path) -> None:
    for compiles, hits in ((1, 0), (0, 1)):
        with Engine(NullDevice(), cache_dir=tmp_path) as engine:
            engine.add_entry(running_sum_program())
            s = engine.stats()
            assert (s.compiles, s.cache_hits) == (compiles, hits)


def test_states_read_written_reset_and_handed_to_another_device(tmp_path: Path) -> None:
    ones = np.ones(3, np.float32)
    with Engine(NullDevice(), cache_dir=tmp_path) as null, Engine(CpuDevice(), tmp_path) as cpu:
        src = null.add_entry(running_sum_program())
        dst = cpu.add_entry(running_sum_program())
        null.step(src, {"x": ones})
        null.write_state(src, "total", np.full(3, 5.0, np.float32))
        assert null.step(src, {"x": ones})["total"].tolist() == [6.0] * 3
        handoff(null, src, cpu, dst)
        assert cpu.step(dst, {"x": ones})["total"].tolist() == [7.0] * 3
        null.reset_state(src)
        assert null.read_state(src, "total").tolist() == [0.0] * 3


def test_verified_steps_on_the_null_device(tmp_path: Path) -> None:
    with Engine(NullDevice(), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(affine_program(), engine.load_weights({"w": W}))
        for f in _feeds(3):
            engine.step(entry, f)
        assert engine.stats().verified_steps == 3


def test_a_missed_deadline_poisons_the_device_and_the_engine_until_close(tmp_path: Path) -> None:
    device = NullDevice()
    engine = Engine(device, cache_dir=tmp_path, deadline_s=0.5)
    entry = engine.add_entry(running_sum_program())
    ones = np.ones(3, np.float32)
    engine.step(entry, {"x": ones})  # recorded and run in time
    before = engine.read_state(entry, "total")
    device.delay_s, engine.deadline_s = 0.3, 0.05
    threads = threading.active_count()
    with pytest.raises(DeadlineExceeded):
        engine.step(entry, {"x": ones})
    for call in (
        lambda: engine.step(entry, {"x": ones}),
        lambda: engine.read_state(entry, "total"),
        lambda: device.allocate(engine.program(entry).args[0].var.type),
    ):
        with pytest.raises(DevicePoisoned):
            call()
    assert device._buffers.memory  # the missed run's buffers are kept until close
    engine.close()
    assert not device._buffers.memory
    with pytest.raises(DeviceFailed, match="closed"):
        engine.step(entry, {"x": ones})
    with pytest.raises(DeviceFailed, match="NullDevice is closed"):
        device.read(Buffer(1, running_sum_program().args[0].var.type))
    time.sleep(0.4)  # the abandoned run ends; its worker then exits
    assert threading.active_count() <= threads
    np.testing.assert_array_equal(before, [1.0] * 3)


def test_an_incomplete_device_is_refused() -> None:
    class Missing(HostMemory):
        """Writes none of the seven members that are a device's own."""

    with pytest.raises(TypeError, match="abstract"):
        Missing("missing")  # type: ignore[abstract]
    with pytest.raises(EngineError, match="poot Device"):
        Engine(object())  # type: ignore[arg-type]
