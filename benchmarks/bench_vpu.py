"""VpuDevice: Engine.step replay overhead against a raw bound-tensor infer(), and the blob cache.

Runs on the best VpuDevice here: the NPU when OpenVINO sees one, else the CPU-plugin stand-in
(the figures say which). The program is a 1,000-element F32 ``z = x * y + x`` that the planner
narrows to FP16 (casts on entry and exit), so a step carries every check the engine makes on
a narrowing target: the step's inputs against the slots, both F32 inputs against the range, and
the F32 result after the run.

Replay: ``Engine.step`` (first step recorded before timing) against the same compiled model
driven directly: one more infer request on the artifact's own ``ov.CompiledModel``, its input
and output tensors bound once over host arrays (shared memory, as the device binds its
buffers), each call writing both inputs in place, running and copying the result out (a fresh
array, as a step returns): once with ``infer()``, once with ``start_async`` and ``wait_for`` (how
the device runs, for its deadline). The three are timed in alternating rounds of the same run,
with the floor (a bare function doing only the checks the contract requires around the same raw
run), and again in the calling thread's CPU time (what the host work costs, whatever the
scheduling of OpenVINO's worker thread). Then where the step's time goes: the engine's own
``Stats`` split (host work outside the dispatch, the dispatch itself), the device's dispatch
path without the engine (``start_async`` and ``wait_for``), and each host-side piece.

Cache: the compile (``compile_model`` and ``export_model``) against the load (``import_model``)
of the same program's blob, and a second process on the same cache directory that loads the
blob and runs the program without the compiler (``Stats.compiles`` must be 0).
"""

from __future__ import annotations

import gc
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import openvino as ov
from poot_engine import Artifact, Engine
from poot_engine.checks import check_range, check_step_inputs
from poot_ir import Builder, DType, NarrowingRangeInput, NarrowingRangeResult, Program
from poot_npu.vpu import VpuDevice
from poot_planner import plan

from benchmarks.harness import Figure, alternating, median_time

N = 1000
ROUNDS, CALLS = 15, 400


def program() -> Program:
    b = Builder("bench_vpu")
    x, y = b.slot("x", DType.F32, [N]), b.slot("y", DType.F32, [N])
    b.output("z", b.add(b.mul(x, y), x))
    return b.build()


SECOND_PROCESS = """
import sys, time
import numpy as np
from poot_engine import Engine
from poot_npu.vpu import VpuDevice
sys.path.insert(0, {root!r})
from benchmarks.bench_vpu import program, N

def no_compiler(self, source):
    raise AssertionError("the compiler ran")

VpuDevice.compile = no_compiler
with Engine(VpuDevice({device!r}), {cache!r}) as engine:
    t0 = time.perf_counter()
    entry = engine.add_entry(program())
    t1 = time.perf_counter()
    x = np.linspace(-2, 2, N, dtype=np.float32)
    z = engine.step(entry, {{"x": x, "y": x}})["z"]
    s = engine.stats()
    print(s.compiles, s.cache_hits, t1 - t0, float(np.abs(z - (x * x + x)).max()))
"""


def _device() -> str:
    return "NPU" if VpuDevice.probe("NPU") is None else "CPU"


def _alternating(fns: Mapping[str, Callable[[], object]]) -> dict[str, float]:
    """The median over ``ROUNDS`` rounds of each function's mean time per call, the functions
    taking turns within each round so drift hits all of them alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(50):
            fn()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    fn()
                times[name].append((time.perf_counter() - t0) / CALLS)
    finally:
        if gc_was:
            gc.enable()
    return {k: statistics.median(v) for k, v in times.items()}


def _floor(
    compiled: object, inputs: dict[str, np.ndarray], limit: float
) -> Callable[[], dict[str, np.ndarray]]:
    """The floor of a checked step: a bare function doing only what the contract requires
    around the same raw ``start_async`` + ``wait_for`` (its own request, every port bound over
    host arrays, the FP16 guard's flags too): each slot's exact type, each F32 input and the
    result against the range (``argmin``/``argmax``, as the engine), the inputs copied in, the
    guard's flags read, the result copied out."""
    req = compiled.create_infer_request()  # type: ignore[attr-defined]
    held = [np.zeros(N, np.float32), np.zeros(N, np.float32)]
    out = np.zeros(N, np.float32)
    for i, arr in enumerate(held):
        req.set_input_tensor(i, ov.Tensor(arr, shared_memory=True))
    req.set_output_tensor(0, ov.Tensor(out, shared_memory=True))
    outputs = compiled.outputs  # type: ignore[attr-defined]
    flags = np.zeros(tuple(outputs[1].get_shape()), np.bool_) if len(outputs) > 1 else None
    if flags is not None:
        req.set_output_tensor(1, ov.Tensor(flags, shared_memory=True))
    f32, shape, names = np.dtype(np.float32), (N,), tuple(inputs)

    def inside(a: np.ndarray) -> bool:
        return bool(-limit <= a.item(a.argmin()) and a.item(a.argmax()) <= limit)

    def floor() -> dict[str, np.ndarray]:
        arrays = [inputs.get(n) for n in names]
        for a in arrays:
            if type(a) is not np.ndarray or a.dtype != f32 or a.shape != shape:
                raise TypeError("a slot")
            if not inside(a):
                raise ValueError("an input out of range")
        for mem, a in zip(held, arrays, strict=True):
            mem[...] = a
        req.start_async()
        if not req.wait_for(10_000):
            raise RuntimeError("the floor's run missed 10 s")
        if flags is not None and flags.item(flags.argmax()):
            raise ValueError("a guard flag")
        z = out.copy()
        if not inside(z):
            raise ValueError("the result out of range")
        return {"z": z}

    return floor


def run() -> list[Figure]:
    device = _device()
    where = "NPU" if device == "NPU" else "CPU-plugin stand-in"
    prog = program()
    rng = np.random.default_rng(0)
    x, y = (rng.uniform(-2, 2, N).astype(np.float32) for _ in range(2))
    inputs = {"x": x, "y": y}
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="poot-bench-vpu-") as tmp:
        cache = Path(tmp) / "cache"
        vpu = VpuDevice(device)
        loaded: list[Artifact] = []
        real_load = vpu.load

        def load(blob: bytes) -> Artifact:
            loaded.append(real_load(blob))
            return loaded[-1]

        vpu.load = load  # type: ignore[method-assign]
        with Engine(vpu, cache) as engine:
            entry = engine.add_entry(prog)
            engine.step(entry, inputs)  # the recording
            compiled = vpu.compiled_model(loaded[-1])

            req = compiled.create_infer_request()
            bound = [np.zeros(N, np.float32), np.zeros(N, np.float32)]
            for i, arr in enumerate(bound):
                req.set_input_tensor(i, ov.Tensor(arr, shared_memory=True))

            out_infer = np.zeros(N, np.float32)
            req.set_output_tensor(0, ov.Tensor(out_infer, shared_memory=True))

            def raw_infer() -> np.ndarray:
                np.copyto(bound[0], x)
                np.copyto(bound[1], y)
                req.infer()
                return out_infer.copy()

            out = np.zeros(N, np.float32)  # the engine binds its output buffer the same way
            req_async = compiled.create_infer_request()
            for i, arr in enumerate(bound):
                req_async.set_input_tensor(i, ov.Tensor(arr, shared_memory=True))
            req_async.set_output_tensor(0, ov.Tensor(out, shared_memory=True))

            def raw_async() -> np.ndarray:
                np.copyto(bound[0], x)
                np.copyto(bound[1], y)
                req_async.start_async()
                if not req_async.wait_for(10_000):
                    raise RuntimeError("the raw run missed 10 s")
                return out.copy()

            limit = engine.limit
            assert limit is not None  # a narrowing target
            floor = _floor(compiled, inputs, limit)

            def step() -> dict[str, np.ndarray]:
                return engine.step(entry, inputs)

            assert np.array_equal(raw_infer(), step()["z"])
            before = engine.stats()
            assert np.array_equal(floor()["z"], step()["z"])
            t = _alternating({"step": step, "infer": raw_infer, "async": raw_async, "floor": floor})
            after = engine.stats()
            # the calling thread's CPU time: what the engine and its checks cost on the host,
            # whatever the OpenVINO worker's scheduling (which the wall-time ratios include)
            cpu = alternating(
                {"step": step, "async": raw_async, "floor": floor},
                rounds=ROUNDS,
                calls=CALLS,
                clock=time.thread_time,
            )
            steps = after.steps - before.steps
            host = (
                after.host_s_per_step * after.steps - before.host_s_per_step * before.steps
            ) / steps
            dev = (
                after.device_s_per_step * after.steps - before.device_s_per_step * before.steps
            ) / steps

            slot_types = tuple((a.name, a.var.type) for a in prog.args)  # all slots
            z = step()["z"]

            def input_ranges() -> None:
                for name, arr in inputs.items():
                    check_range(NarrowingRangeInput, name, arr, limit)

            pieces = {
                "check_step_inputs": lambda: check_step_inputs(prog, slot_types, inputs),
                "range check of both F32 inputs": input_ranges,
                "range check of the F32 result": lambda: check_range(
                    NarrowingRangeResult, "z", z, limit
                ),
            }
            piece_t = {k: median_time(f, repeat=9, number=500) for k, f in pieces.items()}

        us = 1e6
        figures += [
            Figure(
                f"Engine.step, {N}-element narrowed F32 program ({where})", t["step"] * us, "us"
            ),
            Figure(
                "raw infer(): bound tensors, inputs written in place, result copied",
                t["infer"] * us,
                "us",
            ),
            Figure(
                "Engine.step / raw infer()", t["step"] / t["infer"], "x", aim="<= 1.5 (issue 15)"
            ),
            Figure(
                "raw start_async + wait_for (how the device runs), same work", t["async"] * us, "us"
            ),
            Figure(
                "Engine.step / raw start_async + wait_for",
                t["step"] / t["async"],
                "x",
                aim="<= 1.1 (issue 15)",
            ),
            Figure(
                "raw start_async + wait_for / raw infer() (the async hand-off: step / infer floor)",
                t["async"] / t["infer"],
                "x",
            ),
            Figure(
                "floor: raw start_async + wait_for with only the checks the contract requires",
                t["floor"] * us,
                "us",
            ),
            Figure("  floor / raw start_async + wait_for", t["floor"] / t["async"], "x"),
            Figure("  floor / raw infer()", t["floor"] / t["infer"], "x"),
            Figure("  Engine.step / floor", t["step"] / t["floor"], "x"),
            Figure("calling thread's CPU per call: Engine.step", cpu["step"] * us, "us"),
            Figure("  raw start_async + wait_for", cpu["async"] * us, "us"),
            Figure("  floor (the required checks around it)", cpu["floor"] * us, "us"),
            Figure(
                "  Engine.step - floor (host CPU the engine adds)",
                (cpu["step"] - cpu["floor"]) * us,
                "us",
            ),
            Figure("  step: engine host work outside the dispatch (Stats mean)", host * us, "us"),
            Figure("  step: the dispatch (Stats mean: start, wait)", dev * us, "us"),
        ]
        figures += [Figure(f"    host piece: {k}", v * us, "us") for k, v in piece_t.items()]

        # -- the cache: compile against load, and a second process ----------------------------
        planned = plan(prog, "intel-npu4")
        vpu_fresh = VpuDevice(device)
        src = vpu_fresh.lower(planned)
        blob = vpu_fresh.compile(src)
        t_compile = median_time(lambda: vpu_fresh.compile(src), repeat=5)

        def load_once() -> None:
            vpu_fresh.unload(vpu_fresh.load(blob))

        t_load = median_time(load_once, repeat=9)
        vpu_fresh.close()
        root = str(Path(__file__).resolve().parent.parent)
        script = SECOND_PROCESS.format(root=root, device=device, cache=str(cache))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        wall = time.perf_counter() - t0
        compiles, hits, add_s, err = proc.stdout.split()
        assert (compiles, hits) == ("0", "1"), proc.stdout
        figures += [
            Figure(f"compile (compile_model + export_model, {where})", t_compile * 1e3, "ms"),
            Figure("load (import_model + infer request + signature read-back)", t_load * 1e3, "ms"),
            Figure("load / compile", t_load / t_compile, "x", aim="< 1"),
            Figure("second process: compiler runs (Stats.compiles)", int(compiles), "", aim="0"),
            Figure("second process: add_entry from the cached blob", float(add_s) * 1e3, "ms"),
            Figure("second process: wall time, interpreter start included", wall, "s"),
            Figure("second process: max |z - (x*x + x)| (FP16 narrowing)", float(err), ""),
        ]
    return figures + guard_figures(device, where, inputs)


def guard_figures(device: str, where: str, inputs: dict[str, np.ndarray]) -> list[Figure]:
    """Engine.step with the in-graph FP16 guard (the default: one flag for the product, which
    feeds the add) against the same program without it, in alternating rounds of one run."""
    with tempfile.TemporaryDirectory(prefix="poot-bench-guard-") as tmp:
        engines = {
            name: Engine(VpuDevice(device, overflow_guard=on), Path(tmp) / name)
            for name, on in (("guard", True), ("no guard", False))
        }
        try:
            entries = {k: e.add_entry(program()) for k, e in engines.items()}
            steps = {k: (lambda k=k: engines[k].step(entries[k], inputs)) for k in engines}
            a, b = (steps[k]()["z"] for k in ("guard", "no guard"))
            assert np.array_equal(a, b)
            t = _alternating(steps)
        finally:
            for e in engines.values():
                e.close()
    us = 1e6
    return [
        Figure(f"Engine.step with the FP16 overflow guard ({where})", t["guard"] * us, "us"),
        Figure("Engine.step without it (overflow_guard=False)", t["no guard"] * us, "us"),
        Figure("with guard / without", t["guard"] / t["no guard"], "x"),
    ]
