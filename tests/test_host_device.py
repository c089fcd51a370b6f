"""The compiled host device (``poot_npu.host.HostDevice``, target ``host-cpu``): whole programs
on it, a partition's host spans on it (xdna-host and vpu-cpu), the oracle kept for them on
request, and the oracle the judge of every step. Its capability rows are the conformance
suite's (``tests/conformance``: every device of the registry)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_engine.run import run_program
from poot_ir import (
    Builder,
    DomainFlagged,
    DType,
    EngineError,
    Program,
    compare,
    evaluate,
    parse_program,
)
from poot_ir.numerics import BitExact
from poot_npu.registry import device_info
from poot_planner import plan
from poot_planner.targets import get_target

from poot.cli import EXAMPLES, main

F32 = DType.F32
#: the examples each stand-in refuses in part, so a partitioned run has host spans (the test
#: asserts the plan refuses a part: an example a target comes to admit whole leaves this list)
PARTITIONED = [
    *[("xdna-host", e) for e in ("attention", "layernorm", "log_state", "fp16_boundary")],
    ("vpu-cpu", "log_state"),
]


def _open(name: str):  # type: ignore[no-untyped-def]
    return open_device(device_info(name))


@pytest.mark.parametrize(("stand_in", "example"), PARTITIONED)
def test_host_spans_run_compiled_within_contract(
    stand_in: str, example: str, tmp_path: Path
) -> None:
    program = parse_program((EXAMPLES / f"{example}.poot").read_text())
    assert not plan(program, device_info(stand_in).target).admitted
    kwargs = {"steps": 2, "cache_dir": tmp_path, "partition": True}
    compiled = run_program(program, _open(stand_in), stand_in, host=_open("host"), **kwargs)
    oracle = run_program(program, _open(stand_in), stand_in, **kwargs)
    assert compiled.ok and oracle.ok, (compiled.steps, oracle.steps)
    host_spans = [k for k, s in enumerate(compiled.spans) if not s.device]
    assert host_spans
    assert [(s.device, s.eqns) for s in compiled.spans] == [
        (s.device, s.eqns) for s in oracle.spans
    ]
    # the compiled run put each host span its target admits on the host device (an F16 span
    # stays on the oracle), the oracle run every one on the oracle
    admitted = [not s.device and plan(s.program, "host-cpu").admitted for s in compiled.spans]
    assert [h is not None for h in compiled.hosts] == admitted
    assert all(h is None for h in oracle.hosts)
    # and the program's results agree with the oracle's whole run under the published class
    # of each host plan: checked span by span already; here the ends, independently
    for k, got in enumerate(compiled.outputs):
        want = oracle.outputs[k]
        for name in want:
            assert got[name].shape == want[name].shape
            assert np.allclose(got[name], want[name], rtol=1e-3, atol=1e-4, equal_nan=True), name


def _softmax_matmul() -> Program:
    """A matmul then ``|h|`` as a compare and a select (refused on xdna2) between
    exponentials: the host span is the select, the matmul and the exponentials on the device."""
    b = Builder("mm_between")
    x = b.slot("x", F32, (4, 16))
    w = b.weight("w", F32, (16, 8))
    h = b.matmul(b.exp(b.neg(x)), w)
    h = b.select(b.gt(h, b.neg(h)), h, b.neg(h))
    b.output("y", b.exp(b.neg(h)))
    return b.build()


def test_engine_host_spans_oracle_keeps_the_oracle(tmp_path: Path) -> None:
    program = _softmax_matmul()
    rng = np.random.default_rng(0)
    w = rng.uniform(-0.5, 0.5, (16, 8)).astype(np.float32)
    x = rng.uniform(-1, 1, (4, 16)).astype(np.float32)
    want = evaluate(program, {"x": x, "w": w})["y"]
    with Engine(_open("xdna-host"), cache_dir=tmp_path, host=_open("host")) as engine:
        weights = engine.load_weights({"w": w})
        compiled = engine.add_partitioned(program, weights)
        kept = engine.add_partitioned(program, weights, host_spans="oracle")
        with pytest.raises(EngineError, match="host_spans"):
            engine.add_partitioned(program, weights, host_spans="numpy")  # type: ignore[arg-type]
        a = engine.partitioned(compiled)
        o = engine.partitioned(kept)
        assert a is not None and o is not None
        assert [h is not None for h in a.hosts] == [not s.device for s in a.spans]
        assert all(h is None for h in o.hosts)
        got = engine.step(compiled, {"x": x})["y"]
        oracle = engine.step(kept, {"x": x})["y"]
    # the same device spans either way, and gt, neg and select are bit exact on the host
    # device (its table):
    # the compiled host span gives the oracle's bits
    assert compare(got, oracle, BitExact()).ok
    # against the whole oracle: the device's matmul rounds its operands to bf16 (2^-8 each)
    assert np.allclose(got, want, rtol=2e-2, atol=1e-6)


def test_poot_run_device_host_and_host_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cache = ["--cache-dir", str(tmp_path)]
    for path in sorted(EXAMPLES.glob("*.poot")):
        p = parse_program(path.read_text())
        code = main([*cache, "run", str(path), "--device", "host", "--steps", "1"])
        admitted = plan(p, "host-cpu").admitted
        assert code == (0 if admitted else 1), (path.name, capsys.readouterr().out)
    capsys.readouterr()
    layernorm = str(EXAMPLES / "layernorm.poot")
    run = [*cache, "run", layernorm, "--device", "xdna-host", "--partition", "--steps", "1"]
    assert main(run) == 0
    assert "host device equations" in capsys.readouterr().out
    assert main([*run, "--host", "oracle"]) == 0
    out = capsys.readouterr().out
    assert "oracle equations" in out and "host device equations" not in out


def test_host_cpu_refuses_f16_and_i32_sums_typed() -> None:
    t = get_target("host-cpu")
    assert t.capability(_prim("add"), DType.F16) is None
    assert t.capability(_prim("reduce_sum"), DType.I32) is None
    b = Builder("half")
    b.output("y", b.add(b.slot("x", DType.F16, (4,)), b.slot("z", DType.F16, (4,))))
    p = plan(b.build(), "host-cpu")
    assert not p.admitted and p.refusals


def _prim(name: str):  # type: ignore[no-untyped-def]
    from poot_ir import Prim

    return Prim(name)


_EDGE = np.array(
    [0.0, -0.0, 1.0, -1.0, 3.0, 7.0, 1e-38, -1e-38, 8e-40, 1e-45, 3e38, -3e38, 0.1, 2.0**126],
    np.float32,
)


@settings(derandomize=True, max_examples=25, deadline=None, database=None)
@given(st.integers(0, 2**32 - 1))
def test_divide_is_ieee_at_the_edges(seed: int) -> None:
    # fails before the divides were marked nonconvertible: OpenVINO's x * (1 / y) is infinite
    # for a subnormal divisor (4.4e-27 / 8e-40) and a rounding off elsewhere
    rng = np.random.default_rng(seed)
    shape = (64,)
    pick = rng.random(shape) < 0.5
    x = np.where(pick, rng.choice(_EDGE, shape), rng.uniform(-1e3, 1e3, shape)).astype(np.float32)
    y = np.where(rng.random(shape) < 0.5, rng.choice(_EDGE, shape), rng.uniform(-9, 9, shape))
    y = np.where(y == 0, 1.0, y).astype(np.float32)
    _run_against_oracle("div", x, y)


def _run_against_oracle(prim: str, x: np.ndarray, y: np.ndarray) -> None:
    b = Builder(prim)
    a, c = b.slot("x", F32, x.shape), b.slot("y", F32, y.shape)
    b.output("out", getattr(b, prim)(a, c))
    program = b.build()
    with Engine(_DEVICE.get(), verify="always") as engine:
        got = engine.step(engine.add_entry(program), {"x": x, "y": y})["out"]
    want = evaluate(program, {"x": x, "y": y})["out"]
    assert compare(got, want, BitExact()).ok


class _Shared:
    """One host device for the fuzz's examples, closed by nothing (each engine lends it)."""

    def get(self):  # type: ignore[no-untyped-def]
        from conformance.devices import Lent

        if not hasattr(self, "_device"):
            self._device = _open("host")
        return Lent(self._device)


_DEVICE = _Shared()


def test_a_dot_product_to_a_scalar_compiles(tmp_path: Path) -> None:
    # OpenVINO's snippets die of SIGSEGV compiling this graph (ONNX test_matmul_1d_1d): the
    # host device compiles with them off
    b = Builder("dot")
    a, c = b.slot("a", F32, (1, 3)), b.slot("c", F32, (3, 1))
    b.output("y", b.reshape(b.matmul(a, c), ()))
    program = b.build()
    feed = {"a": np.array([[1, 2, 3]], np.float32), "c": np.array([[4], [5], [6]], np.float32)}
    with Engine(_open("host"), cache_dir=tmp_path, verify="always") as engine:
        got = engine.step(engine.add_entry(program), feed)["y"]
    assert got.shape == () and float(got) == 32.0


#: every set of axes of a rank-3 operand, and one with a unit axis (the plugin's fused post-op
#: got (4, 1, 6) wrong over its last axis too)
_REDUCED = [
    (shape, axes)
    for shape in ((3, 4, 5), (4, 1, 6))
    for axes in ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2))
]


@pytest.mark.parametrize(("shape", "axes"), _REDUCED)
def test_a_reduction_over_any_axes_with_an_op_after_it_is_the_oracles(
    shape: tuple[int, ...], axes: tuple[int, ...], tmp_path: Path
) -> None:
    # fails before HostDevice made every ReduceMax a TopK: the plugin fuses the op after a
    # Reduce into it and computes it wrong for I32 (7 - reduce_max(x[3,4,5] i32, 1): the first
    # row right, the rest 0; ONNX's ArgMax over a middle axis is that); a mean (a sum's divide
    # by a constant) stays within the divide row's two ulps, the rest bit exact
    b = Builder("reductions")
    x, k = b.slot("x", F32, shape), b.slot("k", DType.I32, shape)
    b.output("mean", b.div(b.reduce_sum(x, axes=axes), 3.0))
    b.output("top", b.sub(7.0, b.reduce_max(x, axes=axes)))
    b.output("arg", b.sub(7, b.reduce_max(k, axes=axes)))
    program = b.build()
    assert plan(program, "host-cpu").admitted
    rng = np.random.default_rng(3)
    feed = {
        "x": rng.integers(-50, 50, shape).astype(np.float32),  # sums exact in F32
        "k": rng.integers(-50, 50, shape).astype(np.int32),
    }
    want = evaluate(program, feed)
    with Engine(_open("host"), cache_dir=tmp_path, verify="off") as engine:
        got = engine.step(engine.add_entry(program), feed)
    assert np.allclose(got["mean"], want["mean"], rtol=2.0**-22, atol=0), got["mean"]
    for name in ("top", "arg"):
        assert np.array_equal(got[name], want[name]), (name, got[name], want[name])


_LOWEST = np.float32(-3.4028235e38)
#: rows at the edges of a maximum: all -inf (a fully masked row), all the lowest finite value
#: (a mask of finfo.min), the two mixed, -inf beside finite values, the largest, zeros of both
#: signs (no +inf: the softmax's subtract admits finite operands only)
_MAX_ROWS = np.array(
    [
        [-np.inf] * 4,
        [_LOWEST] * 4,
        [-np.inf, _LOWEST, -np.inf, -np.inf],
        [-np.inf, -1.5, -np.inf, 2.0],
        [3.4028235e38, -np.inf, 0.0, 1.0],
        [-0.0, 0.0, -np.inf, -0.0],
    ],
    np.float32,
)


def _masked_max() -> Program:
    """The ONNX attention's fully masked row test (``test_attention_23_*fullymasked*``) reduced:
    scores masked with -inf, each row's maximum, compared with -inf (the model then chooses a
    row of zeros over its softmax's NaNs; the softmax of a fully masked row itself reads NaN,
    which host-cpu's exp refuses: its guard is in ``test_a_computed_operand_outside_...``)."""
    b = Builder("masked_max")
    shape = _MAX_ROWS.shape
    x = b.select(b.slot("keep", DType.BOOL, shape), b.slot("x", F32, shape), -np.inf)
    top = b.reduce_max(x, axes=1)
    b.output("top", top)
    b.output("y", b.eq(top, -np.inf))
    return b.build()


def test_a_maximum_of_minus_infinities_is_minus_infinity(tmp_path: Path) -> None:
    # fails before HostDevice kept -inf: the CPU plugin's ReduceMax starts at the lowest finite
    # value, so a row of -infs had the maximum -3.4e38 (not equal to -inf) and the row's NaNs
    # came back where the oracle selects 0 (three ONNX attention cases, verify off)
    program = _masked_max()
    keep = ~np.isneginf(_MAX_ROWS)
    feed = {"keep": keep, "x": np.where(keep, _MAX_ROWS, np.float32(7.0))}
    want = evaluate(program, feed)
    with Engine(_open("host"), cache_dir=tmp_path, verify="off") as engine:
        got = engine.step(engine.add_entry(program), feed)
    assert compare(got["top"], want["top"], BitExact(signed_zero=False)).ok, got["top"]
    assert want["y"][0]  # the fully masked row
    assert np.array_equal(got["y"], want["y"]), got["y"]


def test_a_window_of_minus_infinities_pools_to_minus_infinity(tmp_path: Path) -> None:
    # fails before the fix: MaxPool starts at the lowest finite value too (-3.4e38 for a window
    # of -infs, and for one of padding only, where the oracle's is -inf)
    b = Builder("pool")
    x = b.slot("x", F32, (1, 2, 4, 4))
    pads = [(0, 0), (0, 0), (1, 1), (1, 1)]
    # -inf where ``keep`` is false: MaxPool's operand computed, as a mask makes it
    x = b.select(b.slot("keep", DType.BOOL, (1, 2, 4, 4)), x, -np.inf)
    b.output("y", b.reduce_window_max(x, (1, 1, 2, 2), (1, 1, 2, 2)))
    b.output("z", b.reduce_window_max(x, (1, 1, 2, 2), (1, 1, 2, 2), padding=pads))
    program = b.build()
    xv = np.full((1, 2, 4, 4), -np.inf, np.float32)
    xv[0, 1] = np.resize(_MAX_ROWS.ravel(), (4, 4))
    keep = ~np.isneginf(xv)
    feed = {"keep": keep, "x": np.where(keep, xv, np.float32(7.0))}
    want = evaluate(program, feed)
    with Engine(_open("host"), cache_dir=tmp_path, verify="off") as engine:
        got = engine.step(engine.add_entry(program), feed)
    for name in ("y", "z"):
        assert compare(got[name], want[name], BitExact(signed_zero=False)).ok, got[name]


@pytest.mark.parametrize(("axes", "keep"), [((2,), True), ((2,), False), ((1, 2), False)])
def test_every_float_reduce_max_keeps_minus_infinity(axes: tuple[int, ...], keep: bool) -> None:
    # the graph rewrite itself, on ReduceMax forms poot's lowering does not emit (kept dims)
    # and two axes (a TopK per axis), against numpy's maximum
    import openvino.opset16 as ops
    from poot_codegen.intel.quiet import ov
    from poot_npu.host import HOST_CONFIG, _maxima_keep_minus_inf

    x = np.full((3, 2, 4), -np.inf, np.float32)
    x[1, 0] = _MAX_ROWS[3]
    x[2] = _MAX_ROWS[1:3]
    p = ops.parameter(x.shape, np.float32)
    r = ops.reduce_max(p, ops.constant(np.int64(axes)), keep)
    r.output(0).get_tensor().set_names({"top"})
    model = ov.Model([r], [p])
    _maxima_keep_minus_inf(model)
    compiled = ov.Core().compile_model(model, "CPU", HOST_CONFIG)
    got = compiled.create_infer_request().infer([x])[compiled.output("top")]
    want = np.max(x, axis=axes, keepdims=keep)
    assert got.shape == want.shape and np.array_equal(got, want), got


def test_a_computed_operand_outside_its_domain_is_refused_not_returned(tmp_path: Path) -> None:
    """The host device has no flag word: its device-site domain guards are computed in the
    graph. ``exp(x + 80)`` at x = 8.5 reads 88.5, past host-cpu exp's domain (the plugin's
    exp overflows from 88, below F32's 88.72): it returned inf where the oracle gives 2.72e38,
    with no error, before the guard."""
    b = Builder("exp_of_a_sum")
    x = b.slot("x", F32, (4,))
    b.output("y", b.exp(b.add(x, b.literal(80.0, F32))))
    program = b.build()
    p = plan(program, "host-cpu")
    assert [g.eqn for g in p.guards if g.site.value == "device"] == [1]
    inside = np.array([1.0, 7.99, -3.0, np.float32(-1e30)], np.float32)
    past = np.array([1.0, 8.5, -3.0, 0.0], np.float32)
    with Engine(_open("host"), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(p, engine.load_weights({}))
        got = engine.step(entry, {"x": inside})["y"]
        want = evaluate(program, {"x": inside})["y"]
        assert compare(got, want, p.admissions[1].contract.bound).ok  # type: ignore[union-attr]
        with pytest.raises(DomainFlagged) as err:
            engine.step(entry, {"x": past})
        assert err.value.eqns == (1,)
        # nothing of the refused step reached a result: the next step is the inside one's
        assert np.array_equal(engine.step(entry, {"x": inside})["y"], got)


def _nans_computed() -> Program:
    """``x / x`` (NaN where x is 0, an operand the host checks only for finiteness) into each
    maximum and minimum there is: elementwise against a literal and against another NaN
    carrier, over a row, and over a window."""
    b = Builder("nan_extrema")
    x, w = b.slot("x", F32, (1, 2, 4, 4)), b.slot("w", F32, (1, 2, 4, 4))
    u, v = b.div(x, x), b.div(w, w)
    b.output("relu", b.max(u, 0.0))
    b.output("cap", b.min(6.0, u))
    b.output("both", b.max(v, u))
    b.output("low", b.min(u, v))
    b.output("row", b.reduce_max(u, (3,)))
    b.output("pool", b.reduce_window_max(u, (1, 1, 2, 2), (1, 1, 2, 2)))
    return b.build()


@pytest.mark.parametrize(
    ("x_zeros", "w_zeros"), [((), ()), (((0, 0, 0, 3),), ()), ((), ((0, 1, 2, 0), (0, 0, 3, 3)))]
)
def test_a_computed_nan_into_a_maximum_is_refused_not_returned(
    x_zeros: tuple[tuple[int, ...], ...], w_zeros: tuple[tuple[int, ...], ...], tmp_path: Path
) -> None:
    """The CPU plugin's Maximum and Minimum return their second operand where either is NaN,
    and its ReduceMax (TopK) and MaxPool drop a NaN: a ReLU of 0 / 0 came back 0, a pooled
    window 1, where the oracle gives NaN, with no error (their rows' ``operands not NaN`` was
    not guarded on computed values here). Now an operand the plan does not prove free of NaN
    is checked in the graph, and a NaN refuses the step, naming each equation that read one;
    without a NaN the step is the oracle's."""
    program = _nans_computed()
    p = plan(program, "host-cpu")
    made = {e.out.id: i for i, e in enumerate(p.program.eqns)}
    at = {name: made[v.id] for name, v in p.program.results()}
    reads = {  # the extrema reading x / x, and w / w
        "x": {at[n] for n in ("relu", "cap", "both", "low", "row", "pool")},
        "w": {at["both"], at["low"]},
    }
    rng = np.random.default_rng(len(x_zeros) + 2 * len(w_zeros))
    feed = {k: rng.integers(1, 9, (1, 2, 4, 4)).astype(np.float32) for k in ("x", "w")}
    for where in x_zeros:
        feed["x"][where] = 0.0
    for where in w_zeros:
        feed["w"][where] = 0.0
    with Engine(_open("host"), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(p, engine.load_weights({}))
        if not x_zeros and not w_zeros:
            got, want = engine.step(entry, feed), evaluate(program, feed)
            for name in want:
                assert compare(got[name], want[name], BitExact(signed_zero=False)).ok, name
            return
        with pytest.raises(DomainFlagged) as err:
            engine.step(entry, feed)
    flagged = (reads["x"] if x_zeros else set()) | (reads["w"] if w_zeros else set())
    assert flagged and set(err.value.eqns) == flagged, (err.value.eqns, reads)


def test_the_host_device_bakes_weights_into_the_blob_and_its_cache_key(tmp_path: Path) -> None:
    """As vpu-cpu: an entry's weights are constants of its graph, so two weight sets of one
    program are two blobs (a cached blob is never run with other weights), each result within
    the host contract of the oracle's for its own weights; the same values again are a hit."""
    from poot_npu.host import HostDevice

    b = Builder("baked")
    x, w = b.slot("x", DType.F32, [2, 4]), b.weight("w", DType.F32, [4, 3])
    b.output("y", b.matmul(x, w))
    program = b.build()
    xs = {"x": np.arange(8, dtype=np.float32).reshape(2, 4) - 3.5}
    sets = [{"w": (np.arange(12).reshape(4, 3) * s).astype(np.float32)} for s in (1.0, -2.5)]
    with Engine(HostDevice(), tmp_path / "cache") as engine:
        assert engine.device.traits.bakes_weights
        for k, ws in enumerate(sets):
            got = engine.step(engine.add_entry(program, engine.load_weights(ws)), xs)
            # small integers and halves: every product and sum exact in F32, in any order
            assert np.array_equal(got["y"], evaluate(program, {**ws, **xs})["y"])
            assert engine.stats().compiles == k + 1
        engine.add_entry(program, engine.load_weights(sets[0]))
        assert (engine.stats().compiles, engine.stats().cache_hits) == (2, 1)


def test_domain_flags_in_the_graph_decide_every_element_as_numpy_does() -> None:
    """The host device's device-site domain guards (``poot_codegen.intel.guard.domain_flags``)
    flag a value exactly when numpy finds an element outside: at the ends (inclusive), one F32
    step past them, NaN, infinities of either sign, a whole value of -inf under ``(-inf, 88]``
    and an end near F32's largest. The value is a depthwise convolution's result, so the
    guard runs on the plugin's blocked layout; a NaN-admitting domain and one with an end
    below 1 take the per-element compare. Compiled as the host device compiles."""
    from dataclasses import replace

    from poot_codegen.intel.guard import domain_flags
    from poot_codegen.intel.quiet import opset1, ov
    from poot_codegen.intel.quiet import opset16 as ops
    from poot_ir.domains import Interval
    from poot_npu.host import HOST_CONFIG, _maxima_keep_minus_inf

    shape = (1, 32, 5, 7)
    summable = Interval(-(2.0**50), 2.0**50).bounds(F32)
    domains = {
        "summable": summable,
        "exp": Interval(-np.inf, 88.0).bounds(F32),
        "nan_in": replace(summable, nan=True),
        "wide": Interval(-1e38, 1e38).bounds(F32),
        "small": Interval(0.0, 0.5).bounds(F32),
    }
    p = ops.parameter(list(shape), np.float32)
    ones = ops.constant(np.ones((32, 1, 1, 1, 1), np.float32))
    y = opset1.group_convolution(p, ones, [1, 1], [0, 0], [0, 0], [1, 1]).output(0)
    flags = domain_flags([(k, y, b) for k, b in domains.items()])
    order = [label for labels, _ in flags for label in labels]
    r = ops.result(ops.concat([f for _, f in flags], 0))
    model = ov.Model([r], [p])
    _maxima_keep_minus_inf(model)
    request = ov.Core().compile_model(model, "CPU", HOST_CONFIG).create_infer_request()

    past = float(np.nextafter(np.float32(2.0**50), np.float32(np.inf)))
    cases: list[tuple[int, float]] = [
        (0, 2.0**50),
        (-1, -(2.0**50)),
        (5, past),
        (-1, -past),
        (0, np.nan),
        (600, np.nan),
        (-1, np.nan),
        (3, np.inf),
        (700, -np.inf),
        (9, 88.0),
        (9, float(np.nextafter(np.float32(88.0), np.float32(np.inf)))),
        (1, 2e38),
        (1, -1e38),
    ]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(shape).astype(np.float32) * 3]
    for at, v in cases:
        x = arrays[0].copy().ravel()
        x[at] = v
        arrays.append(x.reshape(shape))
    arrays.append(np.full(shape, -np.inf, np.float32))
    mixed = np.full(shape, -np.inf, np.float32)
    mixed.flat[::3] = np.inf
    arrays.append(mixed)
    for x in arrays:
        got = request.infer([x])[0]
        for k, label in enumerate(order):
            b = domains[label]
            inside = ((x >= b.lo) & (x <= b.hi)) | (b.nan & np.isnan(x))
            assert bool(got[k]) == (not inside.all()), (label, x.ravel()[:4])


def test_a_boolean_converted_to_f32_on_the_host_is_one_or_zero(tmp_path: Path) -> None:
    """The host device selects 1.0 or 0.0 where the graph converts a boolean to F32 (a
    one-hot's ``convert(x == iota)``; ``poot_npu.host._selected_booleans``): the oracle's
    values, bit for bit, for a computed boolean and for a boolean slot."""
    b = Builder("one_hot")
    x = b.slot("x", DType.I32, (5, 1))
    p = b.slot("p", DType.BOOL, (5, 4))
    hot = b.convert(b.eq(x, b.iota((5, 4), DType.I32, axis=1)), F32)
    b.output("hot", hot)
    b.output("p", b.convert(p, F32))
    program = b.build()
    ins = {
        "x": np.array([[0], [3], [9], [-1], [2]], np.int32),
        "p": np.array([[True, False, True, True]] * 5, np.bool_),
    }
    with Engine(_open("host"), cache_dir=tmp_path) as engine:
        got = engine.step(engine.add_entry(program, engine.load_weights({})), ins)
    want = evaluate(program, ins)
    for name in ("hot", "p"):
        assert got[name].tobytes() == want[name].tobytes(), name


def _signs() -> Program:
    """Products whose result is a zero of either sign: a boolean slot and a computed boolean
    converted to F32 and scaled by -2 (false is 0, false * -2 is -0), F32 values by negative
    and positive literals (zeros, values that underflow to a zero), by a literal -0 and by
    another value, and negated; the same on a one-element value."""
    b = Builder("signs")
    p = b.slot("p", DType.BOOL, (2, 4))
    x = b.slot("x", F32, (2, 4))
    s = b.slot("s", F32, ())
    b.output("slot", b.mul(b.convert(p, F32), -2.0))
    b.output("computed", b.mul(b.convert(b.gt(x, 0.5), F32), -2.0))
    b.output("twice", b.mul(-2.0, b.convert(p, F32)))
    b.output("neg_lit", b.mul(x, -0.5))
    b.output("pos_lit", b.mul(x, 0.5))
    b.output("zero_lit", b.mul(x, -0.0))
    b.output("by_value", b.mul(x, b.neg(x)))
    b.output("neg", b.neg(x))
    b.output("one_neg", b.mul(s, -3.0))
    b.output("one_negated", b.neg(s))
    return b.build()


@pytest.mark.parametrize("s", [0.0, -0.0, 1e-45])
def test_a_product_or_negation_keeps_a_zeros_sign(s: float, tmp_path: Path) -> None:
    """Fails before: the CPU plugin makes a multiply by a one-element constant its
    PowerStatic node (a Negative first a multiply by -1), ``x * c + 0`` in one fused
    multiply-add, so every product that is -0 came back +0: ``convert(false) * -2``, ``0 *
    -0.5``, ``neg(0)``, an underflow to -0. The oracle's bits, a zero's sign included, for
    true and false elements, zeros of both signs and values that underflow."""
    program = _signs()
    x = np.array([[0.0, -0.0, 1.0, -1.0], [1e-45, -1e-45, 3.0, -2.5]], np.float32)
    feed = {
        "p": np.array([[True, False, False, True], [False, True, False, False]]),
        "x": x,
        "s": np.array(s, np.float32),
    }
    want = evaluate(program, feed)
    assert any(np.signbit(v[v == 0]).any() for v in want.values())  # a -0 to keep
    with Engine(_open("host"), cache_dir=tmp_path, verify="off") as engine:
        got = engine.step(engine.add_entry(program), feed)
    for name, w in want.items():
        assert got[name].tobytes() == w.tobytes(), (name, got[name], w)


#: literal operands: zeros of both signs, units, F32's smallest normal, values that scale to an
#: underflow or an overflow (a subnormal literal: ``test_a_subnormal_literal_...``)
_LITERALS = [0.0, -0.0, 1.0, -1.0, -2.0, 0.5, -0.5, 3.0, 1e-30, -1e30, 2.0**-126]
_SIGNED_ZERO_FREE = {"max", "min"}  # +0 and -0 tie (their rows)


@settings(derandomize=True, max_examples=40, deadline=None, database=None)
@given(
    st.sampled_from(["mul", "add", "sub", "div", "max", "min"]),
    st.sampled_from(_LITERALS),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_one_step_with_a_literal_operand_is_the_oracles_bits(
    prim: str, literal: float, first: bool, seed: int
) -> None:
    """One F32 step with a literal operand (a scalar constant of the graph, which the CPU
    plugin may fold into a node of its own), on either side, over zeros of both signs,
    subnormals, values a literal underflows or overflows: the oracle's bits, a zero's sign
    included (but for max and min, whose rows let +0 and -0 tie). A divide by a
    literal zero is left out (0 / 0 is a NaN, whose bits no row promises)."""
    assume(not (prim == "div" and literal == 0.0))
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(64) < 0.6, rng.choice(_EDGE, 64), rng.uniform(-1e3, 1e3, 64)).astype(
        np.float32
    )
    b = Builder(prim)
    v = b.slot("x", F32, (64,))
    c = b.literal(literal, F32)
    b.output("out", getattr(b, prim)(v, c) if first else getattr(b, prim)(c, v))
    program = b.build()
    with Engine(_DEVICE.get(), verify="off") as engine:
        got = engine.step(engine.add_entry(program), {"x": x})["out"]
    want = evaluate(program, {"x": x})["out"]
    bound = BitExact(signed_zero=prim not in _SIGNED_ZERO_FREE)
    assert compare(got, want, bound).ok, (prim, literal, first, got[got != want], want[got != want])


def test_a_subnormal_literal_is_refused_on_the_host_and_runs_on_the_oracle(
    tmp_path: Path,
) -> None:
    """The CPU plugin flushes every F32 constant's subnormals to zero when it loads the graph
    (openvino intel_cpu ``Input::cloneBlobIfRequired``, unless DAZ is on, which would flush
    operands too): ``x * -1e-45`` was ``x * -0`` on the host device, silently. A weight holding
    one stays a parameter (``poot_codegen.intel.graph._bakeable``); a literal has no parameter
    to stay, so host-cpu refuses its equation (``DOMAIN``, naming the literal) and a
    partitioned run takes it to the oracle: the oracle's bits (fails before: admitted, the
    products zeros). A normal literal beside it stays on the host."""
    b = Builder("tiny")
    x = b.slot("x", F32, (4,))
    b.output("y", b.mul(b.mul(x, b.literal(-1e-45, F32)), 2.0**100))
    program = b.build()
    p = plan(program, "host-cpu")
    assert [(r.eqn, r.kind.value, r.fact("literal")) for r in p.refusals] == [
        (0, "domain", float(np.float32(-1e-45)))
    ]
    feed = {"x": np.array([1.0, -1.0, 3.0, 2.0**20], np.float32)}
    report = run_program(
        program, _open("host"), "host", steps=1, inputs=[feed], cache_dir=tmp_path, partition=True
    )
    got = report.outputs[0]["y"]
    assert got.tobytes() == evaluate(program, feed)["y"].tobytes(), got


_ZERO_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 3.0, -2.5], np.float32)


@pytest.mark.parametrize("prim", ["add", "sub", "mul"])
@pytest.mark.parametrize("c", [0.0, -0.0, 1.0, -2.0])
@pytest.mark.parametrize("shape", [(8,), (1,)])
def test_a_constant_of_either_zero_on_either_side_keeps_a_zeros_sign(
    prim: str, c: float, shape: tuple[int, ...], tmp_path: Path
) -> None:
    """``x op c`` and ``c op x`` with ``c`` a literal and a baked weight (a constant of the
    graph either way), over zeros of both signs and subnormals: the oracle's bits. Fails
    before: the plugin computed ``-0 - x`` as ``-x + 0`` (+0 at ``x = 0``, a literal or a
    weight of -0s alike), ``x + 0`` as ``x`` and ``x * c`` as ``x * c + 0``."""
    b = Builder(prim)
    v = b.slot("x", F32, shape)
    w = b.weight("w", F32, shape)
    lit = b.literal(c, F32)
    op = getattr(b, prim)
    for name, y in (("xl", op(v, lit)), ("lx", op(lit, v)), ("xw", op(v, w)), ("wx", op(w, v))):
        b.output(name, y)
    program = b.build()
    w = np.full(shape, c, np.float32)
    # a value of one element is each edge in turn, zeros of both signs among them
    feeds = [_ZERO_EDGES[k : k + shape[0]] for k in range(0, len(_ZERO_EDGES), shape[0])]
    with Engine(_open("host"), cache_dir=tmp_path, verify="off") as engine:
        entry = engine.add_entry(program, engine.load_weights({"w": w}))
        for x in feeds:
            got = engine.step(entry, {"x": x})
            for name, y in evaluate(program, {"x": x, "w": w}).items():
                assert got[name].tobytes() == y.tobytes(), (name, x, got[name], y)


def _hard_swish(b: Builder, x):  # type: ignore[no-untyped-def]
    """PyTorch's export of ``nn.Hardswish``, as ocr_det and MobileNetV3 hold it."""
    return b.div(b.mul(x, b.min(b.max(b.add(x, 3.0), 0.0), 6.0)), 6.0)


#: activations written out in ops that OpenVINO's common transformations fuse into one kernel
#: of their own (``poot_npu.host._one_element_constants``), by the patterns' forms
_WRITTEN_OUT = {
    "hard_swish": _hard_swish,
    "hard_swish_by_a_sixth": lambda b, x: b.mul(
        b.mul(x, b.min(b.max(b.add(x, 3.0), 0.0), 6.0)), 1 / 6
    ),
    "hard_sigmoid": lambda b, x: b.div(b.min(b.max(b.add(x, 3.0), 0.0), 6.0), 6.0),
    "softplus": lambda b, x: b.log(b.add(b.exp(x), 1.0)),
    "mish": lambda b, x: b.mul(x, b.tanh(b.log(b.add(b.exp(x), 1.0)))),
    "minus_three_off": lambda b, x: b.div(b.mul(x, b.min(b.max(b.sub(x, -3.0), 0.0), 6.0)), 6.0),
}
#: where the fused kernels and the ops part: around -3 (``x + 3`` exact, ``x / 6 + 1 / 2``
#: not), the clamps' ends, large negatives (``exp(x) + 1`` is 1), zeros of both signs
_ACTIVATION_EDGES = np.array([-3.0, -2.99585, 3.0, -6.0, 6.0, -30.0, -87.0, 0.0, -0.0, 20.0])


@settings(derandomize=True, max_examples=12, deadline=None, database=None)
@given(
    st.sampled_from(sorted(_WRITTEN_OUT)),
    st.sampled_from([(512,), (1,)]),
    st.integers(0, 2**32 - 1),
)
def test_an_activation_written_out_in_ops_is_within_the_ops_contract(
    name: str, shape: tuple[int, ...], seed: int
) -> None:
    """Fails before: the CPU plugin fused ``log(exp(x) + 1)`` into its SoftPlus kernel (-1.9e-6
    where the ops give 0, for x below about -17: 4x the bound), and under host-cpu's earlier
    rows (a sum within units of its result) ``x * min(max(x + 3, 0), 6) / 6`` into HSwish
    (9.4e-4 relative off the oracle near -3, 1,500x the bound), so a host span ending in one
    (ocr_det's) was refused by its check, and returned unchecked. Every step is checked
    against the oracle under the host plan's contract (``verify``); a one-element value takes
    the pair path."""
    rng = np.random.default_rng(seed)
    parts = [
        rng.uniform(-3.01, -2.99, shape),
        rng.normal(0.0, 4.0, shape),
        rng.uniform(-30.0, -15.0, shape),
        rng.choice(_ACTIVATION_EDGES, shape),
    ]
    x = np.choose(rng.integers(0, len(parts), shape), parts).astype(np.float32)
    b = Builder(name)
    b.output("out", _WRITTEN_OUT[name](b, b.slot("x", F32, shape)))
    program = b.build()
    with Engine(_DEVICE.get(), verify="always") as engine:
        got = engine.step(engine.add_entry(program), {"x": x})["out"]
        assert engine.stats().verified_steps == 1
    assert got.shape == shape


@settings(derandomize=True, max_examples=30, deadline=None, database=None)
@given(st.integers(0, 2**32 - 1))
def test_a_chain_of_constant_sums_and_products_is_within_the_contract(seed: int) -> None:
    """Fails before (14 of 60 such chains): the plugin regroups sums and products with
    constants, ``(x + b) * c + d`` as ``x * c + (b * c + d)`` (a conv's bias then a folded
    batch norm, ocr_det's host span 100..139), so where ``x + b`` cancels the result was off by
    9x the bound the per-result rows composed. A chain of two to seven adds, subtracts and
    multiplies by literals and by per-channel weights (baked into the graph), on either side,
    after an add whose constant half of the inputs cancel; each step checked (``verify``)."""
    rng = np.random.default_rng(seed)
    b = Builder("chain")
    x = b.slot("x", F32, (1, 16, 4, 4))
    c0 = float(np.float32(rng.normal(0, 2)))
    v = b.add(x, b.literal(c0, F32))
    weights = {}
    for k in range(int(rng.integers(1, 7))):
        if rng.random() < 0.4:
            c = b.literal(float(np.float32(rng.normal(0, 2))), F32)
        else:
            weights[f"w{k}"] = rng.normal(0, 2, 16).astype(np.float32)
            c = b.broadcast_in_dim(b.weight(f"w{k}", F32, (16,)), (1, 16, 4, 4), (1,))
        op = getattr(b, str(rng.choice(["add", "sub", "mul"])))
        v = op(v, c) if rng.random() < 0.8 else op(c, v)
    b.output("out", v)
    xs = rng.normal(0, 2, (1, 16, 4, 4))
    near = -c0 * (1 + rng.normal(0, 1e-5, xs.shape))  # x + c0 cancels to a few ulps
    xs = np.where(rng.random(xs.shape) < 0.5, near, xs).astype(np.float32)
    with Engine(_DEVICE.get(), verify="always") as engine:
        entry = engine.add_entry(b.build(), engine.load_weights(weights) if weights else None)
        engine.step(entry, {"x": xs})
        assert engine.stats().verified_steps == 1
