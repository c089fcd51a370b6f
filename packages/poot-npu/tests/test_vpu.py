"""VpuDevice through the real ``Engine``: the seed's verified Intel NPU4 list, the F32 boundary,
the blob cache, the signature check, dispatch refusals and deadlines.

Every case runs on ``VpuDevice("CPU")``, the hardware-free stand-in (OpenVINO's CPU plugin with
FP16 emulated in the graph), and, marked ``npu_intel``, on ``VpuDevice("NPU")``, which skips with
"hardware unavailable" where OpenVINO sees no NPU. Results are compared with the oracle
evaluating ``plan.program`` (the narrowed program: an ideal FP16 device) under the target's own
contracts: bit for bit (the sign of a zero aside) on integer-valued inputs, within the FP16
tolerance for exp, div and sqrt, and for a narrowed program also within the published
``NarrowStorage`` bound of the F32 oracle of the source program.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from poot_codegen.intel import graph as intel_graph
from poot_engine import ArtifactSource, CpuDevice, Engine, signature_of
from poot_ir import (
    BitExact,
    Builder,
    CompileFailed,
    DeadlineExceeded,
    DevicePoisoned,
    DeviceUnavailable,
    DispatchRefused,
    DType,
    NarrowingRangeInput,
    NarrowingRangeIntermediate,
    NarrowingRangeResult,
    NarrowingRangeUpload,
    NarrowStorage,
    Prim,
    Program,
    SignatureMismatch,
    Storage,
    TensorType,
    UnsupportedDevice,
    Var,
    WindowOutOfRange,
    compare,
    evaluate,
    sample_inputs,
)
from poot_npu.vpu import VpuDevice, frame_ir, unframe_ir
from poot_planner import TARGETS, plan

TARGET = TARGETS["intel-npu4"]
F16 = DType.F16
EXACT = BitExact(signed_zero=False)  # the target's bound for add, sub, mul, max, ge, neg, ...


def _device_param(device: str) -> Any:
    return pytest.param(device, marks=pytest.mark.npu_intel) if device == "NPU" else device


@pytest.fixture(params=[_device_param("CPU"), _device_param("NPU")])
def device(request: pytest.FixtureRequest) -> str:
    why = VpuDevice.probe(request.param)
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    return str(request.param)


@pytest.fixture
def engine(device: str, tmp_path: Path) -> Iterator[Engine]:
    with Engine(VpuDevice(device), tmp_path / "cache") as e:
        yield e


def _vpu(engine: Engine) -> VpuDevice:
    assert isinstance(engine.device, VpuDevice)
    return engine.device


# -- running a program and comparing it with the oracle -----------------------------------


def run_checked(
    engine: Engine,
    program: Program,
    *,
    steps: int = 3,
    integer_valued: bool = True,
    prim: Prim | None = None,
    seed: int = 0,
) -> list[dict[str, np.ndarray]]:
    """Run ``steps`` steps over changing inputs (the first records, the rest replay) and compare
    every result with the oracle of ``plan.program``: under ``prim``'s contract when given
    (exp, div, sqrt), else bit for bit but the sign of a zero. The NPU is promised that only on
    integer-valued inputs; on other inputs it is held to the FP16 tolerance, while the stand-in,
    whose emulation rounds exactly like the oracle, is still held to bit for bit. States are
    carried by both."""
    planned = plan(program, TARGET.name)
    run = planned.program
    first = sample_inputs(run, seed, integer_valued=integer_valued)
    weights = {a.name: first[a.name] for a in run.args if a.storage is Storage.WEIGHT}
    entry = engine.add_entry(program, engine.load_weights(weights) if weights else None)
    state = {
        a.name: np.zeros(a.var.shape, a.var.dtype.numpy)
        for a in run.args
        if a.storage is Storage.STATE
    }
    slots = {a.name: True for a in run.args if a.storage is Storage.SLOT}
    if prim is None and not integer_valued and not _vpu(engine).stand_in:
        prim = Prim.DIV  # the FP16 tolerance
    contract = TARGET.capability(prim, F16).contract if prim else None  # type: ignore[union-attr]
    outs = []
    for s in range(steps):
        ins = sample_inputs(run, seed + s, integer_valued=integer_valued, include=slots)
        got = engine.step(entry, ins)
        want = evaluate(run, {**weights, **ins, **state})
        assert list(got) == list(run.result_names)
        for name in run.result_names:
            if contract is not None and got[name].dtype == np.float16:
                cmp = contract.check(got[name], want[name], [])
            else:
                cmp = compare(got[name], want[name], EXACT)
            assert cmp.ok, f"step {s}, {name}: {cmp}"
        if planned.narrowing is not None:
            assert isinstance(planned.numerics, NarrowStorage)
            source = evaluate(program, {**weights, **ins, **state})
            for name in program.result_names:
                cmp = compare(got[name], source[name], planned.numerics.bound)
                assert cmp.ok, f"step {s}, {name} against the F32 oracle: {cmp}"
        state = {n: want[n] for n in state}
        outs.append(got)
    stats = engine.stats()
    assert (stats.recordings, stats.replays) == (1, steps - 1)
    return outs


def _binary(prim: Prim) -> Program:
    b = Builder(prim.value)
    x, y = b.slot("x", F16, [4, 8]), b.slot("y", F16, [4, 8])
    if prim is Prim.DIV:  # a divisor of at least 1
        b.output("z", b.div(x, b.add(b.mul(y, y), 1.0)))
    elif prim is Prim.SQRT:  # a non-negative operand
        b.output("z", b.sqrt(b.add(b.mul(x, x), b.mul(y, y))))
    elif prim in (Prim.NEG, Prim.EXP):
        b.output("z", getattr(b, prim.value)(x))
    else:
        b.output("z", getattr(b, prim.value)(x, y))
    return b.build()


ELEMENTWISE = [Prim.ADD, Prim.SUB, Prim.MUL, Prim.MAX, Prim.GE, Prim.NEG]
TOLERANT = [Prim.DIV, Prim.SQRT, Prim.EXP]


@pytest.mark.parametrize("prim", ELEMENTWISE, ids=lambda p: p.value)
def test_elementwise_bit_exact(engine: Engine, prim: Prim) -> None:
    run_checked(engine, _binary(prim))


@pytest.mark.parametrize("integer_valued", [True, False], ids=["integers", "reals"])
@pytest.mark.parametrize("prim", TOLERANT, ids=lambda p: p.value)
def test_exp_div_sqrt_within_fp16_tolerance(
    engine: Engine, prim: Prim, integer_valued: bool
) -> None:
    run_checked(engine, _binary(prim), prim=prim, integer_valued=integer_valued)


def _literals() -> Program:
    b = Builder("literals")
    x = b.slot("x", F16, [3, 5])
    b.output("y", b.sub(b.max(b.add(b.mul(x, 0.5), 3.0), -1.0), 2.0))
    b.output("big", b.ge(x, 1.0))
    return b.build()


def _reductions() -> Program:
    b = Builder("reductions")
    x = b.slot("x", F16, [6, 8])
    b.output("row_sum", b.reduce_sum(x, 1))
    b.output("col_sum", b.reduce_sum(x, 0))
    b.output("row_max", b.reduce_max(x, 1))
    b.output("col_max", b.reduce_max(x, 0))
    return b.build()


def _matmul() -> Program:
    b = Builder("matmul")
    b.output("c", b.matmul(b.slot("a", F16, [4, 8]), b.slot("b", F16, [8, 5])))
    return b.build()


def _gather() -> Program:
    b = Builder("gather")
    table = b.slot("table", F16, [10, 4])
    b.output("rows", b.gather(table, b.slot("idx", DType.I32, [6]), 0))
    b.output("cols", b.gather(table, b.slot("cols_idx", DType.I32, [3]), 1))
    b.output("by_iota", b.gather(table, b.iota([4], DType.I32, 0), 0))
    return b.build()


def _movement() -> Program:
    b = Builder("movement")
    x, v = b.slot("x", F16, [4, 6]), b.slot("v", F16, [6])
    b.output("t", b.transpose(x, [1, 0]))
    b.output("r", b.reshape(x, [3, 8]))
    b.output("s", b.slice(x, [1, 0], [3, 6], [1, 2]))
    b.output("c", b.concat([x, x], 0))
    b.output("bcast", b.add(x, b.broadcast_in_dim(v, [4, 6], [1])))
    return b.build()


def _dus(runtime: bool) -> Program:
    b = Builder("dus_runtime" if runtime else "dus_literal")
    x, u = b.slot("x", F16, [8, 4]), b.slot("u", F16, [2, 4])
    pos: Var | int = b.slot("pos", DType.I32, []) if runtime else 3
    b.output("y", b.dynamic_update_slice(x, u, [pos, 0]))
    return b.build()


def _rank4() -> Program:
    b = Builder("rank4")
    x, y = b.slot("x", F16, [2, 3, 4, 5]), b.slot("y", F16, [2, 3, 4, 5])
    s = b.add(x, y)
    b.output("t", b.transpose(s, [0, 2, 1, 3]))
    b.output("sum3", b.reduce_sum(s, 3))
    b.output("max1", b.reduce_max(b.mul(x, y), 1))
    return b.build()


def _f32_boundary() -> Program:
    b = Builder("f32_boundary")
    x, y = b.slot("x", DType.F32, [4, 8]), b.slot("y", DType.F32, [4, 8])
    h = b.mul(b.add(b.convert(x, F16), b.convert(y, F16)), 0.5)
    b.output("z", b.convert(h, DType.F32))
    return b.build()


def _f32_plain() -> Program:
    b = Builder("f32_plain")
    x, y = b.slot("x", DType.F32, [4, 8]), b.slot("y", DType.F32, [4, 8])
    b.output("z", b.sub(b.mul(b.add(x, y), y), 1.5))
    b.output("m", b.reduce_max(x, 1))
    return b.build()


def _slots_and_weights() -> Program:
    b = Builder("activations")
    x = b.slot("x", F16, [3, 8])
    w, bias = b.weight("w", F16, [8, 4]), b.weight("bias", F16, [4])
    b.output("y", b.add(b.matmul(x, w), b.broadcast_in_dim(bias, [3, 4], [1])))
    return b.build()


def _running_sum() -> Program:
    b = Builder("running_sum")
    x, acc = b.slot("x", F16, [2, 4]), b.state("acc", F16, [2, 4])
    total = b.add(acc, x)
    b.output("row_totals", b.reduce_sum(total, 1))
    b.update(acc, total)
    return b.build()


PROGRAMS: dict[str, Callable[[], Program]] = {
    "literals": _literals,
    "reductions": _reductions,
    "matmul": _matmul,
    "gather": _gather,
    "movement": _movement,
    "dus_literal": lambda: _dus(False),
    "dus_runtime": lambda: _dus(True),
    "rank4": _rank4,
    "f32_boundary": _f32_boundary,
    "activations": _slots_and_weights,
    "running_sum": _running_sum,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_verified_programs_bit_exact_on_integers(engine: Engine, name: str) -> None:
    program = PROGRAMS[name]()
    # only f32_boundary has F32 arguments and results, which the NPU carries as FP16
    assert (plan(program, TARGET.name).narrowing is not None) == (name == "f32_boundary")
    run_checked(engine, program, steps=4)


@pytest.mark.parametrize("integer_valued", [True, False], ids=["integers", "reals"])
def test_f32_program_narrowed_by_the_planner(engine: Engine, integer_valued: bool) -> None:
    program = _f32_plain()
    planned = plan(program, TARGET.name)
    assert planned.narrowing is not None and isinstance(planned.numerics, NarrowStorage)
    assert planned.program.eqns[0].prim is Prim.CONVERT  # the cast on entry
    run_checked(engine, program, integer_valued=integer_valued)


def test_running_sum_is_carried_and_reset(engine: Engine) -> None:
    program = _running_sum()
    entry = engine.add_entry(program)
    x = np.arange(8, dtype=np.float16).reshape(2, 4)
    for k in range(1, 4):
        assert np.array_equal(engine.step(entry, {"x": x})["acc"], k * x)
    engine.reset_state(entry)
    assert np.array_equal(engine.step(entry, {"x": x})["acc"], x)


# -- the F32 boundary and the window check --------------------------------------------------


def _f32_add() -> Program:
    b = Builder("f32_add")
    b.output("z", b.add(b.slot("x", DType.F32, [2, 3]), b.slot("y", DType.F32, [2, 3])))
    return b.build()


def test_f32_range_boundary(engine: Engine) -> None:
    vpu = _vpu(engine)
    entry = engine.add_entry(_f32_add())
    x, y = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    x[1, 2] = 65472.0  # the largest FP16 below 65504, which a DPU add's overflow saturates to
    assert engine.step(entry, {"x": x, "y": y})["z"][1, 2] == 65472.0
    runs, steps = vpu.runs, engine.stats().steps
    x[1, 2] = 65520.0
    with pytest.raises(NarrowingRangeInput) as err:
        engine.step(entry, {"x": x, "y": y})
    assert (err.value.argument, err.value.element, err.value.value) == ("x", (1, 2), 65520.0)
    assert (vpu.runs, engine.stats().steps) == (runs, steps)  # nothing ran
    x[1, 2], y[0, 1], x[0, 1] = 1.0, 40000.0, 40000.0
    with pytest.raises(NarrowingRangeResult) as res:
        engine.step(entry, {"x": x, "y": y})
    assert (res.value.argument, res.value.element) == ("z", (0, 1))
    assert vpu.runs == runs + 1  # it ran, and its result was refused


def _f32_gather() -> Program:
    b = Builder("f32_gather")
    table = b.weight("table", DType.F32, [4, 3])
    b.output("rows", b.gather(table, b.slot("idx", DType.I32, [2]), 0))
    b.output("t", b.transpose(b.slot("x", DType.F32, [2, 3]), [1, 0]))
    return b.build()


def test_f32_data_movement_is_fp16_and_range_checked(engine: Engine) -> None:
    """F32 data movement is FP16 on the NPU (ConvertPrecisionToFP16): the plan publishes
    NarrowStorage, values come back FP16-rounded (numpy's rounding, independent of the code),
    65504 runs, and 1e5 is refused on upload and as an input."""
    program = _f32_gather()
    assert isinstance(plan(program, TARGET.name).numerics, NarrowStorage)
    table = np.array([[1.0001, -2.5, 65504.0], [3.14159, 0.1, -65504.0]] * 2, np.float32)
    entry = engine.add_entry(program, engine.load_weights({"table": table}))
    x = np.array([[1e-3, 2049.0, -7.77], [0.0, 1.0 / 3.0, 60000.5]], np.float32)
    got = engine.step(entry, {"idx": np.array([1, 0], np.int32), "x": x})
    fp16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    np.testing.assert_array_equal(got["rows"], fp16(table[[1, 0]]))
    np.testing.assert_array_equal(got["t"], fp16(x.T))
    assert got["rows"][1, 0] == 1.0 and got["t"][1, 0] == 2048.0  # rounded, not carried
    big = table.copy()
    big[2, 1] = 1e5
    with pytest.raises(NarrowingRangeUpload):
        engine.load_weights({"table": big})
    x[1, 2] = 1e5
    with pytest.raises(NarrowingRangeInput) as err:
        engine.step(entry, {"idx": np.array([1, 0], np.int32), "x": x})
    assert (err.value.argument, err.value.element) == ("x", (1, 2))


def _quotient() -> Program:
    b = Builder("quotient")
    x, acc = b.slot("x", DType.F32, [3]), b.state("acc", DType.F32, [3])
    q = b.div(x, b.mul(x, x))
    b.output("q", q)
    b.update(acc, b.add(acc, q))
    return b.build()


def test_an_intermediate_fp16_overflow_is_refused_naming_the_equation(engine: Engine) -> None:
    """x / (x * x) at x = 300: the FP16 square is inf and the quotient 0 (the oracle: 0.0033),
    while every argument and result is in range. The graph's own flag refuses it."""
    program = _quotient()
    entry = engine.add_entry(program)
    x = np.array([2.0, -4.0, 0.5], np.float32)
    got = engine.step(entry, {"x": x})
    np.testing.assert_array_equal(got["q"], np.float32(1.0) / x)
    bad = np.array([2.0, 300.0, 0.5], np.float32)
    with np.errstate(over="ignore"):  # the independent reason: FP16 squares 300 to inf
        assert np.isinf(np.float16(300.0) * np.float16(300.0))
    assert abs(evaluate(program, {"x": bad, "acc": got["acc"]})["q"][1] - 1 / 300) < 1e-6
    with pytest.raises(NarrowingRangeIntermediate) as err:
        engine.step(entry, {"x": bad})
    assert (err.value.eqn, err.value.primitive, err.value.check) == (0, "mul", "overflow")
    # nothing was committed: the state is what the good step left
    again = engine.step(entry, {"x": x})
    np.testing.assert_array_equal(again["acc"], 2 * (np.float32(1.0) / x))


def test_without_the_guard_the_overflow_passes_silently(tmp_path: Path) -> None:
    """The other side: the guard is what refuses it (the stand-in returns 0 like the NPU)."""
    with Engine(VpuDevice("CPU", overflow_guard=False), tmp_path) as engine:
        entry = engine.add_entry(_quotient())
        got = engine.step(entry, {"x": np.array([2.0, 300.0, 0.5], np.float32)})
    assert got["q"][1] == 0.0


def test_a_saturated_sentinel_runs_only_while_it_dominates(engine: Engine) -> None:
    """exp(-(x + 1e5)): the literal saturates to 65504. Where the device's sum stays at or
    beyond 65504 the F32 sum is beyond range too and exp gives the oracle's 0; at x = -40000
    the device's sum is 25504 (F32: 60000), and the step is refused, not returned."""
    b = Builder("sentinel")
    x = b.slot("x", DType.F32, [3])
    b.output("y", b.exp(b.neg(b.add(x, 1e5))))
    program = b.build()
    entry = engine.add_entry(program)
    ok = np.array([0.0, 100.0, 65504.0], np.float32)
    got = engine.step(entry, {"x": ok})
    np.testing.assert_array_equal(got["y"], evaluate(program, {"x": ok})["y"])  # zeros
    bad = np.array([0.0, -40000.0, 1.0], np.float32)
    with pytest.raises(NarrowingRangeIntermediate) as err:
        engine.step(entry, {"x": bad})
    assert (err.value.eqn, err.value.primitive, err.value.check) == (0, "add", "sentinel")


def test_a_computed_negative_divisor_divides_as_the_oracle(engine: Engine) -> None:
    """x / -(y * y + 1): the NPU compiler would clamp a one-use divisor's producer to a positive
    range (insertEpsilonClamp); the lowering's second use keeps it from doing so. On the NPU
    this is the check that it did not."""
    b = Builder("negdiv")
    x, y = b.slot("x", F16, [4, 8]), b.slot("y", F16, [4, 8])
    b.output("z", b.div(x, b.neg(b.add(b.mul(y, y), 1.0))))
    outs = run_checked(engine, b.build(), prim=Prim.DIV)
    assert all((o["z"] <= 0).sum() > 0 for o in outs)


def test_a_graph_the_cpu_snippets_refuse_still_compiles(engine: Engine) -> None:
    """Two divides of one F32 weight by literals: OpenVINO's CPU snippets cannot allocate
    registers for its emulation chain; the stand-in compiles it without snippets."""
    b = Builder("two_divides")
    a = b.weight("a0", DType.F32, [1, 1])
    b.output("out0", b.div(a, 2.0))
    b.output("out1", b.div(a, 0.5))
    w = np.array([[3.0]], np.float32)
    entry = engine.add_entry(b.build(), engine.load_weights({"a0": w}))
    got = engine.step(entry, {})
    assert (got["out0"][0, 0], got["out1"][0, 0]) == (1.5, 6.0)


def test_runtime_window_out_of_range_refused_before_the_replay(engine: Engine) -> None:
    vpu = _vpu(engine)
    entry = engine.add_entry(_dus(True))
    x, u = np.ones((8, 4), np.float16), np.full((2, 4), 7, np.float16)
    got = engine.step(entry, {"x": x, "u": u, "pos": np.array(6, np.int32)})["y"]
    assert np.array_equal(got[6:], u) and np.array_equal(got[:6], x[:6])
    runs = vpu.runs
    for bad in (7, -1):
        with pytest.raises(WindowOutOfRange):
            engine.step(entry, {"x": x, "u": u, "pos": np.array(bad, np.int32)})
    assert vpu.runs == runs


# -- the blob cache -------------------------------------------------------------------------

SECOND_PROCESS = """
import sys
import numpy as np
from poot_engine import Engine
from poot_npu.vpu import VpuDevice
sys.path.insert(0, {here!r})
from test_vpu import _running_sum

def no_compiler(self, source):
    raise AssertionError("the compiler ran")

VpuDevice.compile = no_compiler
with Engine(VpuDevice({device!r}), {cache!r}) as engine:
    entry = engine.add_entry(_running_sum())
    got = engine.step(entry, {{"x": np.ones((2, 4), np.float16)}})
    s = engine.stats()
    print(s.compiles, s.cache_hits, got["row_totals"].tolist())
"""


def test_cache_second_engine_and_second_process_never_compile(device: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    x = {"x": np.ones((2, 4), np.float16)}
    with Engine(VpuDevice(device), cache) as first:
        first.step(first.add_entry(_running_sum()), x)
        assert (first.stats().compiles, first.stats().cache_hits) == (1, 0)
    with Engine(VpuDevice(device), cache) as second:
        second.device.compile = None  # type: ignore[method-assign,assignment]  # never called
        got = second.step(second.add_entry(_running_sum()), x)
        assert (second.stats().compiles, second.stats().cache_hits) == (0, 1)
        assert got["row_totals"].tolist() == [4.0, 4.0]
    script = SECOND_PROCESS.format(here=str(Path(__file__).parent), device=device, cache=str(cache))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "[4.0,", "4.0]"]


def test_weights_are_baked_into_the_blob_and_its_cache_key(device: str, tmp_path: Path) -> None:
    """The device bakes an entry's weights into its graph as constants (``bakes_weights``):
    two weight sets of one program are two blobs, so a cached blob is never run with other
    weights, each result the oracle's for its own weights; the same values again are a cache
    hit. The baked graph keeps the weight's parameter (the ABI) and reads it nowhere."""
    b = Builder("baked")
    x, w = b.slot("x", F16, [2, 4]), b.weight("w", F16, [4, 3])
    b.output("y", b.matmul(x, w))
    program = b.build()
    xs = {"x": np.arange(8, dtype=np.float16).reshape(2, 4)}
    sets = [{"w": (np.arange(12).reshape(4, 3) * s).astype(np.float16)} for s in (1.0, -2.0)]
    with Engine(VpuDevice(device), tmp_path / "cache") as engine:
        assert engine.device.traits.bakes_weights
        for k, ws in enumerate(sets):
            got = engine.step(engine.add_entry(program, engine.load_weights(ws)), xs)
            assert np.array_equal(got["y"], evaluate(program, {**ws, **xs})["y"])
            assert engine.stats().compiles == k + 1
        engine.add_entry(program, engine.load_weights(sets[0]))
        assert (engine.stats().compiles, engine.stats().cache_hits) == (2, 1)
    vpu, planned = VpuDevice(device), plan(program, TARGET.name)
    source = vpu.lower_baked(planned, sets[0])
    assert source.signature == vpu.lower(planned).signature == signature_of(program)
    model = intel_graph.deserialize(*unframe_ir(source.data))
    (param,) = [q for q in model.get_parameters() if q.get_friendly_name() == "w"]
    assert not param.output(0).get_target_inputs()


def _entry_path(engine: Engine, program: Program) -> Path:
    source = engine.device.lower(plan(program, TARGET.name))
    return engine.cache.path(engine.cache_key(source))


def test_damaged_and_refused_cache_entries_are_recompiled(device: str, tmp_path: Path) -> None:
    cache, x = tmp_path / "cache", {"x": np.ones((2, 4), np.float16)}
    with Engine(VpuDevice(device), cache) as e:
        e.step(e.add_entry(_running_sum()), x)
        path = _entry_path(e, _running_sum())
        key = path.name.removesuffix(".blob")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # one flipped bit: the entry's digest catches it
    path.write_bytes(bytes(data))
    with Engine(VpuDevice(device), cache) as e:
        got = e.step(e.add_entry(_running_sum()), x)
        assert (e.stats().compiles, e.stats().cache_repairs) == (1, 1)
        assert got["acc"].tolist() == x["x"].tolist()
        # an intact entry whose blob OpenVINO refuses (BlobRefused): recompiled and replaced
        e.cache.put(key, b"not a compiled model" * 8)
    with Engine(VpuDevice(device), cache) as e:
        e.step(e.add_entry(_running_sum()), x)
        assert (e.stats().compiles, e.stats().cache_repairs, e.stats().cache_hits) == (1, 1, 0)
    with Engine(VpuDevice(device), cache) as e:
        e.step(e.add_entry(_running_sum()), x)
        assert (e.stats().compiles, e.stats().cache_hits) == (0, 1)


# -- the signature check --------------------------------------------------------------------


def _pair(order: str = "xy", x_type: DType = F16, x_shape: tuple[int, ...] = (2, 3)) -> Program:
    b = Builder("pair")
    vs = {}
    for name in order:
        vs[name] = b.slot(name, x_type, x_shape) if name == "x" else b.slot(name, F16, [2, 3])
    x = vs["x"]
    if x_type is not F16:
        x = b.convert(x, F16)
    if x_shape != (2, 3):
        x = b.reshape(x, [2, 3])
    b.output("z", b.add(x, vs["y"]))
    return b.build()


@pytest.mark.parametrize(
    "tampered",
    [_pair(order="yx"), _pair(x_type=DType.F32), _pair(x_shape=(3, 2))],
    ids=["reordered", "retyped", "reshaped"],
)
def test_a_compiler_that_changed_an_argument_is_refused(
    engine: Engine, tampered: Program, monkeypatch: pytest.MonkeyPatch
) -> None:
    vpu = _vpu(engine)
    real = VpuDevice.compile
    forged = vpu.lower(plan(tampered, TARGET.name))
    monkeypatch.setattr(vpu, "compile", lambda source: real(vpu, forged))
    with pytest.raises(SignatureMismatch):
        engine.add_entry(_pair())
    # the forged blob is now cached under the program's key: a later engine loads it, sees
    # the wrong signature, and compiles the real one instead
    monkeypatch.undo()
    with Engine(VpuDevice(_device_of(vpu)), engine.cache.root) as e:
        entry = e.add_entry(_pair())
        assert (e.stats().compiles, e.stats().cache_repairs) == (1, 1)
        x, y = np.ones((2, 3), np.float16), np.full((2, 3), 2, np.float16)
        assert e.step(entry, {"x": x, "y": y})["z"].tolist() == [[3.0] * 3] * 2


def _device_of(vpu: VpuDevice) -> str:
    return "CPU" if vpu.stand_in else "NPU"


def test_load_reads_the_signature_back_from_the_blob(engine: Engine) -> None:
    vpu = _vpu(engine)
    program = _running_sum()
    planned = plan(program, TARGET.name)
    source = vpu.lower(planned)
    assert source.signature == signature_of(planned.program)
    blob = vpu.compile(source)
    # the first load takes the model the blob was exported from; the second imports the blob,
    # as a cache hit does: the state update is "acc" after the IR round trip and after
    # export/import, not "acc_1"
    for artifact in (vpu.load(blob), vpu.load(blob)):
        assert artifact.signature == signature_of(planned.program)
        assert [a.name for a in artifact.signature.outputs] == ["row_totals", "acc"]
        vpu.unload(artifact)


def test_a_blob_loads_as_its_compiled_model_once_then_from_its_bytes(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    vpu = _vpu(engine)
    source = vpu.lower(plan(_f32_add(), TARGET.name))
    blob = vpu.compile(source)
    imports: list[bytes] = []
    real = vpu._core.import_model
    monkeypatch.setattr(vpu._core, "import_model", lambda b, *a: imports.append(b) or real(b, *a))
    first = vpu.load(blob)
    assert imports == []  # compile just exported it: no second import of the same bits
    second = vpu.load(blob)
    assert imports == [blob]
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
    for artifact in (first, second):  # each a model that runs: FP16 values add exactly
        outputs = vpu.compiled_model(artifact).create_infer_request().infer([x, y])
        np.testing.assert_array_equal(next(iter(outputs.values())), x + y)
        vpu.unload(artifact)


def test_a_source_compiles_from_its_model_once_then_from_its_ir(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compile`` of the source ``lower`` just made takes the model it serialized instead of
    reading the IR back; any other source (the same bytes, copied) is read from its IR. Both
    compile to the same ports and the same results."""
    from poot_npu import openvino_device

    vpu = _vpu(engine)
    source = vpu.lower(plan(_running_sum(), TARGET.name))
    reads: list[str] = []
    real = openvino_device.intel_graph.deserialize
    monkeypatch.setattr(
        openvino_device.intel_graph, "deserialize", lambda x, w: reads.append(x) or real(x, w)
    )
    kept = vpu.load(vpu.compile(source))
    assert reads == []
    again = vpu.load(vpu.compile(ArtifactSource(bytes(bytearray(source.data)), source.signature)))
    assert len(reads) == 1
    x, acc = np.arange(8, dtype=np.float16).reshape(2, 4), np.full((2, 4), 0.5, np.float16)
    results = []
    for artifact in (kept, again):
        assert artifact.signature == source.signature
        request = vpu.compiled_model(artifact).create_infer_request()
        results.append([np.array(v) for v in request.infer([x, acc]).values()])
        vpu.unload(artifact)
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_layer_the_compiler_rejects_is_compile_failed(engine: Engine) -> None:
    vpu = _vpu(engine)
    xml, weights = intel_graph.serialize(intel_graph.lower(_f32_add()))
    bogus = xml.replace(b'type="Add"', b'type="NoSuchLayer"')
    sig = signature_of(_f32_add())
    with pytest.raises(CompileFailed) as err:
        vpu.compile(ArtifactSource(frame_ir(bogus, weights), sig))
    assert "NoSuchLayer" in err.value.log
    if vpu.stand_in:  # the CPU plugin rejects a reduction over no axes
        x = ov.opset16.parameter([2, 3], np.float32, name="x")
        axes = ov.opset16.constant(np.array([], np.int64), name="axes")
        r = ov.opset16.result(ov.opset16.reduce_sum(x, axes, name="e0:reduce_sum"), name="out:y")
        model = ov.Model([r], [x], "empty_axes")
        with pytest.raises(CompileFailed) as err:
            vpu.compile(ArtifactSource(frame_ir(*intel_graph.serialize(model)), sig))
        assert "ReduceSum" in err.value.log


# -- dispatch refusals, deadlines, availability ---------------------------------------------


def test_dispatch_refusals_touch_no_runtime(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    vpu = _vpu(engine)
    planned = plan(_f32_add(), TARGET.name)
    artifact = vpu.load(vpu.compile(vpu.lower(planned)))
    f32 = TensorType((2, 3), DType.F32)
    good = tuple(vpu.allocate(f32) for _ in range(3))
    vpu.dispatch(artifact, good, 10.0)
    runs = vpu.runs

    def touched(*args: object) -> None:
        raise AssertionError("OpenVINO was touched")

    monkeypatch.setattr(ov.InferRequest, "start_async", touched)
    monkeypatch.setattr(ov.InferRequest, "set_input_tensor", touched)
    wrong_dtype = vpu.allocate(TensorType((2, 3), F16))
    wrong_shape = vpu.allocate(TensorType((3, 2), DType.F32))
    freed = vpu.allocate(f32)
    vpu.free(freed)
    cpu = CpuDevice("intel-npu4")
    foreign = cpu.load(cpu.compile(cpu.lower(planned)))
    bad = [
        (artifact, good[:2]),
        (artifact, (*good, good[0])),
        (artifact, (wrong_dtype, *good[1:])),
        (artifact, (good[0], wrong_shape, good[2])),
        (artifact, (good[0], good[1], freed)),
        (foreign, good),
    ]
    for art, bufs in bad:
        with pytest.raises(DispatchRefused):
            vpu.dispatch(art, bufs, 10.0)
    vpu.unload(artifact)
    with pytest.raises(DispatchRefused):
        vpu.dispatch(artifact, good, 10.0)
    assert vpu.runs == runs


def _big_matmuls(n: int) -> Program:
    b = Builder("big")
    x = b.slot("x", F16, [n, n])
    v = x
    for _ in range(6):
        v = b.matmul(v, x)
    b.output("y", v)
    return b.build()


def _check_poisoned(engine: Engine, entry: Any, inputs: dict[str, np.ndarray]) -> None:
    vpu = _vpu(engine)
    with pytest.raises(DevicePoisoned):
        engine.step(entry, inputs)
    with pytest.raises(DevicePoisoned):
        engine.add_entry(_f32_add())
    with pytest.raises(DevicePoisoned):
        vpu.allocate(TensorType((2,), F16))
    assert vpu._failed  # the failed request and its buffers stay referenced until close
    engine.close()
    assert not vpu._failed


def test_a_tiny_deadline_on_a_big_graph_poisons(device: str, tmp_path: Path) -> None:
    # six chained matmuls: ~13 GFLOP on the CPU stand-in, ~100 GFLOP on the NPU (>= 4 ms at
    # its FP16 peak), against a deadline of 0.1 ms (waited for as 1 ms). On the CPU the run
    # must outlast any pause of the waiting thread on a loaded machine (0.35 GFLOP finished
    # before a descheduled wait began, and the step returned in time)
    n = 1024 if device == "CPU" else 2048
    engine = Engine(VpuDevice(device), tmp_path / "cache", deadline_s=1e-4)
    entry = engine.add_entry(_big_matmuls(n))
    x = {"x": np.full((n, n), 0.01, np.float16)}
    with pytest.raises(DeadlineExceeded):
        engine.step(entry, x)
    _check_poisoned(engine, entry, x)


def test_a_missed_wait_poisons(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = engine.add_entry(_f32_add())
    ins = {"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)}
    engine.step(entry, ins)
    monkeypatch.setattr(ov.InferRequest, "wait_for", lambda self, ms: False)
    with pytest.raises(DeadlineExceeded):
        engine.step(entry, ins)
    _check_poisoned(engine, entry, ins)


@pytest.mark.parametrize(
    ("deadline_s", "second"),
    [(math.inf, 2**31 - 1), (30 * 86400.0, 30 * 86_400_000 - (2**31 - 1))],
)
def test_any_positive_deadline_waits_in_slices_the_runtime_takes(
    device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deadline_s: float, second: int
) -> None:
    # a deadline past 2^31 - 1 ms (inf: none) is waited for in slices wait_for can take;
    # here the first slice "times out", so the run is waited for again, not missed
    waits: list[int] = []
    real = ov.InferRequest.wait_for

    def wait_for(self: Any, ms: int) -> bool:
        waits.append(ms)
        return len(waits) > 1 and bool(real(self, ms))

    with Engine(VpuDevice(device), tmp_path / "cache", deadline_s=deadline_s) as engine:
        entry = engine.add_entry(_f32_add())
        ins = {"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)}
        monkeypatch.setattr(ov.InferRequest, "wait_for", wait_for)
        assert engine.step(entry, ins)["z"].tolist() == [[2.0] * 3] * 2
    assert waits == [2**31 - 1, second]


def test_identity_and_description(device: str) -> None:
    vpu = VpuDevice(device)
    ident = vpu.identity
    assert vpu.target == "intel-npu4" and ident.compiler == "openvino"
    assert ident.compiler_version.startswith(ov.get_version())
    assert list(ident.options) == sorted(ident.options)
    assert ("emulate_f16", "true" if vpu.stand_in else "false") in ident.options
    assert vpu.stand_in == (device == "CPU")
    assert ("stand-in" in vpu.describe()) == vpu.stand_in
    if vpu.stand_in:
        assert ("INFERENCE_PRECISION_HINT", "f32") in ident.options
    vpu.close()
    vpu.close()  # idempotent


def test_probe_says_why_and_an_absent_npu_is_unavailable() -> None:
    assert VpuDevice.probe("CPU") is None
    assert "'AUTO'" in (VpuDevice.probe("AUTO") or "")
    with pytest.raises(UnsupportedDevice):
        VpuDevice("AUTO")  # never AUTO: it falls back to CPU silently
    why = VpuDevice.probe("NPU")
    if why is None:  # an NPU is here: it opens
        VpuDevice("NPU").close()
        return
    assert why.startswith("OpenVINO sees no NPU: available devices [")
    with pytest.raises(DeviceUnavailable) as err:
        VpuDevice("NPU")
    assert err.value.why == why and "hardware unavailable" in str(err.value)


def test_ir_frame_round_trips_and_refuses_anything_else() -> None:
    framed = frame_ir(b"<xml/>", b"\x00\x01")
    assert unframe_ir(framed) == (b"<xml/>", b"\x00\x01")
    for bad in (b"", framed[:-1], framed + b"\x00", b"x" + framed[1:]):
        with pytest.raises(ValueError):
            unframe_ir(bad)


def test_poot_npu_imports_without_loading_openvino() -> None:
    code = "import sys, poot_npu; assert 'openvino' not in sys.modules, 'openvino loaded'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.npu_intel
def test_identity_digests_the_loaded_npu_driver_and_compiler() -> None:
    """On the NPU: the identity's library digests are those of the driver and compiler the
    process actually mapped (after the probe's compile the driver has dlopened its compiler)."""
    why = VpuDevice.probe("NPU")
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    vpu = VpuDevice("NPU")
    opts = dict(vpu.identity.options)
    vpu.close()
    maps = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()}
    for stem in ("libze_intel_npu.so", "libnpu_driver_compiler.so", "libopenvino.so"):
        (path,) = {p for p in maps if Path(p).name.startswith(stem)}
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        assert opts[f"lib {stem}"] == f"{Path(path).name} sha256:{digest}"
