"""Engine overhead on CpuDevice: host time of a step over the device's own run; cached load vs compile.

The program is small on purpose (a weight, a slot and a carried running sum over F32[16], three
equations), so the step's fixed costs show: the input checks, the host copies in and out, the
deadline check after the run and the state copy. The device's own run is ``evaluate`` of the
same program on the same arrays, called directly; the aim is held against it. Timed in the same
alternating rounds, the floor: the program bound to host arrays once
(``poot_ir.oracle.bind_evaluation``, what a CpuDevice step runs), alone, and inside a bare
function doing only what a step must (the slot's type, the copy in, the deadline check, the
state copy). Everything in this thread's CPU time (all of it runs on the calling thread only,
and the shared machine's queue would otherwise dominate).
(Before issue 15 the dispatch was handed to a deadline worker thread and back: 105-267 us.)

The cache figures time ``add_entry`` on a fresh engine over a warm cache (plan, lower, read and
verify the entry, load) against the same call with an empty cache (plan, lower, compile, publish
with fsync, load). CpuDevice's compiler is a copy, so the ratio is the cache's own cost, not a
saving: on an NPU the compiler is what the cache avoids.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from poot_engine import CpuDevice, Engine
from poot_ir import Builder, DType, Program, evaluate
from poot_ir.oracle import bind_evaluation

from benchmarks.harness import Figure, alternating, median_time

N = 16


def _program() -> Program:
    b = Builder("bench_step")
    w = b.weight("w", DType.F32, (N,))
    x = b.slot("x", DType.F32, (N,))
    acc = b.state("acc", DType.F32, (N,))
    y = b.mul(x, w)
    b.output("y", y)
    b.update(acc, b.add(acc, y))
    return b.build()


def run() -> list[Figure]:
    program = _program()
    w = np.linspace(-1, 1, N, dtype=np.float32)
    x = np.linspace(0, 1, N, dtype=np.float32)
    acc = np.zeros(N, np.float32)
    root = Path(tempfile.mkdtemp(prefix="poot-bench-engine-"))
    try:
        engine = Engine(CpuDevice(), cache_dir=root / "steps")
        entry = engine.add_entry(program, engine.load_weights({"w": w}))
        inputs = {"x": x}
        held = {"w": w.copy(), "x": np.zeros(N, np.float32), "acc": np.zeros(N, np.float32)}
        bound = bind_evaluation(program, held)
        f32 = np.dtype(np.float32)

        def floor() -> dict[str, np.ndarray]:
            given = inputs.get("x")
            if type(given) is not np.ndarray or given.dtype != f32 or given.shape != (N,):
                raise TypeError("x")
            held["x"][...] = given
            t0 = time.perf_counter()
            y, total = bound()
            if time.perf_counter() - t0 > 10.0:
                raise TimeoutError
            held["acc"][...] = total
            return {"y": y, "acc": total}

        t = alternating(
            {
                "step": lambda: engine.step(entry, inputs),
                "own": lambda: evaluate(program, {"w": w, "x": x, "acc": acc}),
                "bound": bound,
                "floor": floor,
            },
            rounds=21,
            calls=500,
            clock=time.thread_time,  # both run on this thread only: CPU time, not the queue
        )
        step, direct = t["step"], t["own"]
        engine.close()

        def add(cache: Path, empty: bool) -> None:
            if empty:
                shutil.rmtree(cache, ignore_errors=True)
            with Engine(CpuDevice(), cache_dir=cache) as e:
                e.add_entry(program, e.load_weights({"w": w}))

        warm = root / "warm"
        add(warm, empty=True)
        hit = median_time(lambda: add(warm, empty=False), repeat=7, number=20)
        miss = median_time(lambda: add(root / "cold", empty=True), repeat=7, number=20)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    overhead = step - direct
    return [
        Figure("Engine.step, small program (3 eqns, F32[16])", step * 1e6, "us"),
        Figure("device's own run (evaluate, called directly)", direct * 1e6, "us"),
        Figure(
            "host overhead per step (step - own run)", overhead * 1e6, "us", aim="<= 10 (issue 15)"
        ),
        Figure("step / own run", step / direct, "x"),
        Figure("  floor: the bound run alone (bind_evaluation)", t["bound"] * 1e6, "us"),
        Figure("  floor: a bare function doing only the required work", t["floor"] * 1e6, "us"),
        Figure("  step - floor (the engine's own bookkeeping)", (step - t["floor"]) * 1e6, "us"),
        Figure("add_entry from a warm cache (verify + load)", hit * 1e3, "ms"),
        Figure("add_entry with an empty cache (compile + publish)", miss * 1e3, "ms"),
        Figure("cached / compiled add_entry", hit / miss, "x", note="CpuDevice compile is a copy"),
    ]
