"""Partitioned run: host bytes copied between host and device per step, against the minimum.

The program is the ``log_state`` example on the Intel stand-in (``VpuDevice("CPU")``): intel-npu4
refuses its round trip through ``i32``, so a partitioned entry runs device span, oracle span, device span. Every byte
the engine hands the device (``write``) or takes back (``read``) in a step is counted by a
device that wraps the real one. The minimum is each device span's inputs written once and its
outputs read once (a weight stays on the device and is not counted). Alongside it, the bytes
the partitioned entry copies on the host itself (its step inputs, the boundary values it keeps
for ``trace``, the results it returns and the states it carries) are reported, against the
results the step must return.

Plans and lowerings for the entry are reported too (``Stats``): one plan of the program (the
spans' own plans come with the partition), one lowering per device span.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from poot_engine import BoundStep, Buffer, Engine, ProtocolStep, StepCommands
from poot_ir import Storage, parse_program
from poot_npu.vpu import VpuDevice
from poot_planner import partition

from benchmarks.harness import Figure

EXAMPLE = Path(__file__).resolve().parent.parent / "src/poot/examples/log_state.poot"
STEPS = 20


class _Counting(VpuDevice):
    def __init__(self) -> None:
        super().__init__("CPU")
        self.written = 0
        self.read_back = 0

    def write(self, buffer: Buffer, data: np.ndarray) -> None:
        self.written += data.nbytes
        super().write(buffer, data)

    def read(self, buffer: Buffer) -> np.ndarray:
        out = super().read(buffer)
        self.read_back += out.nbytes
        return out

    def bind_step(self, commands: StepCommands) -> BoundStep:
        return ProtocolStep(self, commands)  # every write and read one of the counted calls


def run() -> list[Figure]:
    program = parse_program(EXAMPLE.read_text())
    spans = partition(program, "intel-npu4")
    minimum = 0
    for s in spans:
        if s.device:
            p = s.program
            minimum += sum(a.var.type.nbytes for a in p.args if a.storage is not Storage.WEIGHT)
            minimum += sum(v.type.nbytes for _, v in p.results())
    rng = np.random.default_rng(0)
    shape = (4, 8)
    with tempfile.TemporaryDirectory(prefix="poot-bench-part-") as tmp:
        device = _Counting()
        with Engine(device, Path(tmp) / "cache") as engine:
            w = engine.load_weights({"w": rng.uniform(0.5, 1.5, shape).astype(np.float32)})
            entry = engine.add_partitioned(program, w)
            stats = engine.stats()
            engine.step(entry, {"x": rng.uniform(-1, 1, shape).astype(np.float32)})
            before = device.written + device.read_back
            for _ in range(STEPS):
                engine.step(entry, {"x": rng.uniform(-1, 1, shape).astype(np.float32)})
            moved = (device.written + device.read_back - before) / STEPS
    results = sum(v.type.nbytes for _, v in program.results())
    n_in = sum(a.var.type.nbytes for a in program.args if a.storage is Storage.SLOT)
    # the entry's own host copies per step (partitioned.py): the step's slot inputs, every
    # returned result, and each updated state it carries to the next step
    states = {u.state for u in program.updates}
    carried = sum(v.type.nbytes for n, v in program.results() if n in states)
    host_copies = n_in + results + carried
    return [
        Figure(
            "partitioned log_state (vpu-cpu): host<->device bytes per step / minimum",
            moved / minimum,
            "x",
            aim="1.0 (issue 15)",
            note=f"{moved:.0f} B moved, {minimum} B minimum, {sum(s.device for s in spans)} device spans",
        ),
        Figure(
            "  the entry's own host copies per step / the results it returns",
            host_copies / results,
            "x",
            note=f"{host_copies} B: step inputs, results, carried states",
        ),
        Figure(
            "  plans made by add_entry (spans' plans come with the partition)",
            stats.plans,
            "",
            aim="1",
        ),
        Figure(
            "  lowerings by add_entry (one per device span)",
            stats.lowerings,
            "",
            aim=str(sum(s.device for s in spans)),
        ),
    ]
