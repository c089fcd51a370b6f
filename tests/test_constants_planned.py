"""Values known when planning (weights bound at import, folded constants) are checked against
the FP16 device's range when planning (``poot_planner.fp16.constants``), so what ``poot plan``
admits ``poot run`` runs: a GPT-2-style decoder's causal mask folded to ``finfo(float32).min``
(or ``-inf``) is refused with the softmax it reaches, and ``--partition`` runs those equations
on the host; it was admitted, then refused at upload (``NarrowingRangeUpload``). A padded
MaxPool imports as ``reduce_window_max`` with its ``-inf`` padding a parameter, no weight."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from poot_engine.run import RunReport, run_program
from poot_ir import Builder, DType, NarrowingRangeUpload, Prim, Program, ops
from poot_npu.registry import make_device
from poot_onnx import import_model
from poot_planner import RefusalKind, plan

F32, S, D, H = DType.F32, 8, 16, 2
MIN = float(np.finfo(np.float32).min)


def _decoder(layers: int = 2) -> Program:
    """GPT-2's shape of attention: q, k, v from one input, scores plus a constant causal mask
    (a weight, as the importer binds a folded constant), softmax, a residual."""
    b = Builder("decoder")
    x = b.slot("x", F32, (H, S, D))
    mask = b.weight("causal_mask", F32, (1, S, S))
    wq = b.weight("wq", F32, (D, D))
    m = b.broadcast_in_dim(mask, (H, S, S), (0, 1, 2))
    for _ in range(layers):
        q = b.matmul(x, b.broadcast_in_dim(wq, (H, D, D), (1, 2)))
        x = b.add(x, ops.attention(b, q, x, x, m))
    b.output("y", x)
    return b.build()


def _weights(fill: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    causal = np.triu(np.full((S, S), fill, np.float32), k=1)[None]  # 0 on and below the diagonal
    return {"causal_mask": causal, "wq": (rng.standard_normal((D, D)) / 4).astype(np.float32)}


def _inputs(fill: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.uniform(-1, 1, (H, S, D)).astype(np.float32), **_weights(fill)}


@pytest.mark.parametrize("fill", [MIN, float("-inf")], ids=["finfo.min", "-inf"])
def test_a_constant_causal_mask_is_refused_when_planning_with_its_softmax(fill: float) -> None:
    program = _decoder()
    assert plan(program, "intel-npu4").admitted  # its values unknown: nothing to see
    p = plan(program, "intel-npu4", constants=_weights(fill))
    kinds = {r.kind for r in p.refusals}  # -inf is outside the add's domain (finite) too
    assert RefusalKind.NARROWING_RANGE in kinds <= {RefusalKind.NARROWING_RANGE, RefusalKind.DOMAIN}
    assert {r.fact("constant") for r in p.refusals} == {"causal_mask"}
    refused = sorted({program.eqns[r.eqn].prim for r in p.refusals}, key=str)
    # the mask's broadcast, the add, the row maximum (and its broadcast), the shift and exp:
    # exp of the shift is in [0, 1], so the softmax's sum and division stay on the device
    assert set(refused) == {Prim.BROADCAST_IN_DIM, Prim.ADD, Prim.REDUCE_MAX, Prim.SUB, Prim.EXP}
    # xdna2 computes F32: no narrowing range; an infinite mask is outside its add's domain
    # (finite operands), which the engine refused at bind and the plan refuses now
    before = set(plan(program, "xdna2").refusals)
    added = set(plan(program, "xdna2", constants=_weights(fill)).refusals) - before
    assert {r.kind for r in added} == (set() if fill == MIN else {RefusalKind.DOMAIN})


def test_a_mask_within_the_range_is_admitted() -> None:
    assert plan(_decoder(), "intel-npu4", constants=_weights(-1e4)).admitted


@pytest.mark.parametrize("fill", [MIN, float("-inf"), -1e4], ids=["finfo.min", "-inf", "in-range"])
def test_plan_and_run_agree_on_vpu_cpu(fill: float, tmp_path: Path) -> None:
    """Admitted when planning => the run is not refused at upload; refused => the partitioned
    run routes around it and passes its check against the oracle."""
    program = _decoder(layers=1)  # one layer: the device graph compiles in seconds
    p = plan(program, "intel-npu4", constants=_weights(fill))
    dev = make_device("vpu-cpu")
    try:
        report = run_program(
            program, dev, "vpu-cpu", inputs=[_inputs(fill)], partition=not p.admitted,
            cache_dir=tmp_path,
        )  # fmt: skip
    finally:
        dev.close()
    assert report.plan.admitted == p.admitted
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"
    if not p.admitted:
        assert any(not s.device for s in report.spans) and any(s.device for s in report.spans)


def test_unpartitioned_the_plan_refuses_what_the_upload_would(tmp_path: Path) -> None:
    from poot_engine import Engine

    program = _decoder()
    dev = make_device("vpu-cpu")
    try:
        report = run_program(program, dev, "vpu-cpu", inputs=[_inputs(MIN)], cache_dir=tmp_path)
        assert not report.plan.admitted and not report.steps  # refused when planning
        engine = Engine(dev, cache_dir=tmp_path)  # the upload it was refused at
        with pytest.raises(NarrowingRangeUpload, match="causal_mask"):
            engine.load_weights(_weights(MIN))
        engine.close()
    finally:
        dev.close()


def _selected(scale: float = 1.0) -> Program:
    """GPT-2's and T5's masking by selection: ``select(keep, scores, finfo.min)`` (the minimum a
    literal), then the softmax and a matmul; ``keep`` a cast to bool, which an FP16 device
    cannot make, so the host runs the select."""
    b = Builder("selected")
    x = b.slot("x", F32, (H, S, S))
    keep = b.convert(b.slot("mask", F32, (H, S, S)), DType.BOOL)  # ONNX's Cast to bool
    probs = ops.softmax(b, b.select(keep, b.mul(x, scale), MIN), axis=-1)
    b.output("y", b.matmul(probs, x))
    return b.build()


def test_a_sentinel_the_host_keeps_is_refused_with_the_softmax_it_reaches(tmp_path: Path) -> None:
    # the select runs on the host (no select on the NPU), exactly: its finfo.min would reach
    # the device span and be refused at run time by its input check; planned, the softmax's
    # maximum, shift and exponent are refused with it, and the matmul after stays on the device
    program = _selected()
    p = plan(program, "intel-npu4")
    hosted = {program.eqns[r.eqn].prim for r in p.refusals}
    assert {Prim.SELECT, Prim.REDUCE_MAX, Prim.SUB, Prim.EXP} <= hosted
    assert Prim.MATMUL not in hosted
    sentinel = [r for r in p.refusals if r.fact("use") == "a sentinel the host keeps"]
    assert sentinel and all(r.kind is RefusalKind.NARROWING_RANGE for r in sentinel)
    rng = np.random.default_rng(2)
    inputs = {
        "x": rng.uniform(-4, 4, (H, S, S)).astype(np.float32),
        "mask": (rng.uniform(0, 1, (H, S, S)) < 0.7).astype(np.float32),  # a masked key or more
    }
    inputs["mask"][:, :, 0] = 1.0  # every row keeps one key
    report = _on_vpu_cpu(program, inputs, tmp_path, partition=True)
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"
    assert any(s.device for s in report.spans)


def test_a_comparison_with_a_sentinel_hands_on_nothing_out_of_range() -> None:
    from poot_planner.fp16.constants import constant_refusals

    b = Builder("compared")
    x = b.slot("x", F32, (4,))
    big = b.ge(x, 1e30)  # refused (a literal FP16 cannot hold), run on the host: a boolean
    b.output("y", b.select(big, x, b.neg(x)))
    program = b.build()
    assert constant_refusals(program, {}, 65504.0, refused={0}) == []
    sentinel = b.select(big, x, MIN)  # a float: beyond the range where chosen
    b.output("z", b.exp(sentinel))
    program = b.build()
    refused = constant_refusals(program, {}, 65504.0, refused={0, 3})
    assert [r.eqn for r in refused] == [4]  # the exp reading it, on the host too


def test_a_softmax_shift_by_a_maximum_with_an_initial_value_brings_the_mask_back() -> None:
    # JAX's softmax takes its row maximum with initial=-inf: max(-inf, reduce_max(x)), which
    # only raises the maximum, so x minus it is still at most 0 and its exp back in range
    from poot_planner.fp16.constants import constant_refusals

    b = Builder("jax_softmax")
    x = b.slot("x", F32, (S, S))
    scores = b.add(x, b.weight("causal_mask", F32, (S, S)))
    top = b.max(float("-inf"), b.reduce_max(scores, 1))
    e = b.exp(b.sub(scores, b.broadcast_in_dim(top, (S, S), (0,))))
    total = b.broadcast_in_dim(b.reduce_sum(e, 1), (S, S), (0,))
    b.output("y", b.matmul(b.div(e, total), x))
    program = b.build()
    mask = np.triu(np.full((S, S), MIN, np.float32), k=1)
    refused = {
        program.eqns[r.eqn].prim for r in constant_refusals(program, {"causal_mask": mask}, 65504.0)
    }
    assert Prim.EXP in refused  # it reads the shifted scores, still out of range
    assert not refused & {Prim.REDUCE_SUM, Prim.DIV, Prim.MATMUL}  # back in range after it


def _flax_masked() -> Program:
    """Flax's attention masking: ``where(mask > 0, scores, big_neg)`` with ``big_neg`` the
    folded constant ``finfo(float32).min`` (a weight) broadcast, the predicate a comparison,
    so on a target with no select legalization writes ``x m + y (1 - m)``; then JAX's softmax
    and a matmul."""
    b = Builder("flax_masked")
    x = b.slot("x", F32, (H, S, S))
    keep = b.gt(b.slot("mask", F32, (H, S, S)), 0.0)
    big_neg = b.broadcast_in_dim(b.weight("big_neg", F32, ()), (H, S, S), ())
    scores = b.select(keep, x, big_neg)
    top = b.max(float("-inf"), b.reduce_max(scores, 2))
    e = b.exp(b.sub(scores, b.broadcast_in_dim(top, (H, S, S), (0, 1))))
    total = b.broadcast_in_dim(b.reduce_sum(e, 2), (H, S, S), (0, 1))
    b.output("y", b.matmul(b.div(e, total), x))
    return b.build()


def test_a_select_of_a_constant_sentinel_legalized_keeps_its_side(tmp_path: Path) -> None:
    """The legalized select's products (a branch times its 0/1 mask) keep the constant's
    side, so the shift and exp bring it back and the rest of the layer stays on the device:
    before, every equation after the select was refused (a Flax decoder block ran as 26
    spans on vpu-cpu, 5 now)."""
    program = _flax_masked()
    weights = {"big_neg": np.float32(MIN)}
    p = plan(program, "intel-npu4", constants=weights)
    hosted = {program.eqns[r.eqn].prim for r in p.refusals}
    assert {Prim.SELECT, Prim.REDUCE_MAX, Prim.SUB, Prim.EXP} <= hosted
    assert not hosted & {Prim.REDUCE_SUM, Prim.DIV, Prim.MATMUL}
    rng = np.random.default_rng(3)
    inputs = {
        "x": rng.uniform(-4, 4, (H, S, S)).astype(np.float32),
        "mask": rng.uniform(-1, 1, (H, S, S)).astype(np.float32),
        **weights,
    }
    inputs["mask"][:, :, 0] = 1.0  # every row keeps one key
    report = _on_vpu_cpu(program, inputs, tmp_path, partition=True)
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"
    assert any(
        s.device and any(program.eqns[i].prim is Prim.MATMUL for i in s.eqns) for s in report.spans
    )


def _maxpool_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 9, 9))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1])  # fmt: skip
    graph = helper.make_graph([node], "pool", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _on_vpu_cpu(
    program: Program, inputs: dict[str, np.ndarray], tmp: Path, partition: bool = False
) -> RunReport:
    """One checked step of ``program`` on the FP16 stand-in (``partition``: its refused
    equations on the host)."""
    dev = make_device("vpu-cpu")
    try:
        return run_program(
            program, dev, "vpu-cpu", inputs=[inputs], partition=partition, cache_dir=tmp
        )
    finally:
        dev.close()


def test_a_padded_maxpool_has_no_infinite_weight(tmp_path: Path) -> None:
    imp = import_model(_maxpool_model(), shapes={"x": (1, 2, 9, 9)})
    assert not imp.weights  # the -inf padding is reduce_window_max's, not a materialised fill
    assert [e.prim for e in imp.program.eqns] == [Prim.REDUCE_WINDOW_MAX]
    assert plan(imp.program, "intel-npu4", constants=imp.weights).admitted
    x = np.random.default_rng(2).uniform(-3, -1, (1, 2, 9, 9)).astype(np.float32)  # all < 0
    report = _on_vpu_cpu(imp.program, {imp.inputs["x"]: x}, tmp_path)
    assert report.ok and np.isfinite(report.outputs[0][imp.outputs["y"]]).all()


def _exp_of_a_weight() -> Program:
    b = Builder("exp_w")
    x = b.slot("x", F32, (4, 8))
    w = b.weight("w", F32, (4, 8))
    b.output("y", b.add(b.exp(w), x))
    return b.build()


def test_a_weight_outside_a_domain_is_refused_when_planning(tmp_path: Path) -> None:
    # xdna2's exp holds its contract on [-inf, 88]: a weight of 88.5 was admitted when planning
    # and refused when the entry bound it (DomainError); now the plan refuses the exp, and the
    # partitioned run computes it on the host
    program = _exp_of_a_weight()
    w = np.full((4, 8), 88.5, np.float32)
    w[0, :4] = 1.0
    assert plan(program, "xdna2", constants={"w": np.ones((4, 8), np.float32)}).admitted
    p = plan(program, "xdna2", constants={"w": w})
    ((r,),) = [p.refusals]
    assert (r.kind, r.eqn, r.fact("constant"), r.fact("element")) == (
        RefusalKind.DOMAIN, 0, "w", "(0, 4)"
    )  # fmt: skip
    x = np.ones((4, 8), np.float32)
    dev = make_device("xdna-host")
    try:
        report = run_program(
            program, dev, "xdna-host", inputs=[{"x": x, "w": w}], partition=True,
            cache_dir=tmp_path,
        )  # fmt: skip
    finally:
        dev.close()
    assert report.ok and np.allclose(report.outputs[0]["y"], np.exp(w.astype(np.float64)) + 1)


def test_a_weight_left_to_the_host_is_refused_when_a_device_entry_binds_it(
    tmp_path: Path,
) -> None:
    # load_weights(host_only=...) skips the upload's range check for the host spans' weights; an
    # entry that would run on the device with one is refused as it binds it (planned without
    # the weights' values, the whole decoder is admitted and would read the mask)
    from poot_engine import Engine

    program = _decoder()
    dev = make_device("vpu-cpu")
    engine = Engine(dev, cache_dir=tmp_path)
    try:
        handle = engine.load_weights(_weights(MIN), host_only={"causal_mask"})
        with pytest.raises(NarrowingRangeUpload, match="causal_mask"):
            engine.add_entry(plan(program, "intel-npu4"), handle)
    finally:
        engine.close()
        dev.close()


def test_an_unread_weight_beyond_the_range_is_refused_for_the_program() -> None:
    # the device is handed every weight of the program, read or not: refused at upload before
    b = Builder("unread")
    x = b.slot("x", F32, (4,))
    b.weight("spare", F32, (4,))
    b.output("y", b.neg(x))
    program = b.build()
    p = plan(program, "intel-npu4", constants={"spare": np.full(4, -np.inf, np.float32)})
    ((r,),) = [p.refusals]
    assert (r.eqn, r.fact("constant"), r.kind) == (-1, "spare", RefusalKind.NARROWING_RANGE)


def _masked_scores() -> Program:
    """GPT-2's masked scores as torch exports them: ``q @ k * 1/4`` plus its folded causal mask
    of ``finfo(float32).min`` (a weight), the masked scores a result of their own."""
    b = Builder("masked_scores")
    q = b.slot("q", F32, (1, H, S, D))
    k = b.slot("k", F32, (1, H, D, S))
    mask = b.weight("causal_mask", F32, (1, 1, S, S))
    scores = b.mul(b.matmul(q, k), 0.25)
    b.output("y", b.add(scores, b.broadcast_in_dim(mask, (1, H, S, S), (0, 1, 2, 3))))
    return b.build()


def test_a_finfo_min_mask_is_admitted_on_xdna2_and_its_add_runs_on_the_device(
    tmp_path: Path,
) -> None:
    # xdna2's add holds its contract for finite operands and a finite, normal result; a score
    # plus -FLT_MAX rounds to -FLT_MAX (the exact sum is within half a spacing of it), which the
    # kernel's result guard flags only when both operands are at least 2^103 in magnitude (the
    # only way a sum reaches the largest magnitude by overflowing): known when planning, the
    # mask needs no refusal, and the run is not refused either (poot plan and poot run agree)
    program = _masked_scores()
    mask = np.triu(np.full((S, S), MIN, np.float32), k=1)[None, None]
    p = plan(program, "xdna2", constants={"causal_mask": mask})
    assert p.admitted, [str(r) for r in p.refusals]
    rng = np.random.default_rng(3)
    q = rng.uniform(-4, 4, (1, H, S, D)).astype(np.float32)
    k = rng.uniform(-4, 4, (1, H, D, S)).astype(np.float32)
    feed = {"q": q, "k": k, "causal_mask": mask}
    dev = make_device("xdna-host")
    try:
        report = run_program(program, dev, "xdna-host", inputs=[feed], cache_dir=tmp_path)
    finally:
        dev.close()
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"
    got = report.outputs[0]["y"]
    masked = np.broadcast_to(mask, got.shape) != 0
    # the independent reference: float64 scores, far below the 2^103 that would move a
    # -FLT_MAX sum, so the masked elements are exactly -FLT_MAX; the others within the bf16
    # operands' rounding (2^-8 relative each, products and sums in F32) of the magnitudes'
    # sum, and the add's rounding
    assert np.all(got[masked] == MIN)
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    want = np.matmul(q64, k64) * 0.25
    bound = (2.0**-7 + 2.0**-16 + D * 2.0**-23) * np.matmul(np.abs(q64), np.abs(k64)) * 0.25
    assert np.all(
        np.abs(got[~masked] - want[~masked]) <= bound[~masked] + 2.0**-22 * np.abs(want[~masked])
    )


def test_two_operands_at_the_largest_magnitude_are_refused_on_xdna2_when_they_overflow(
    tmp_path: Path,
) -> None:
    # the guard's other side: a mask added to scores that are themselves -FLT_MAX where masked
    # (an export that masks with a select and adds the mask again) overflows to -inf, outside
    # the add's domain; the scores are computed, so the device flags it, typed, at run time
    from poot_ir import DomainFlagged

    b = Builder("twice")
    s = b.slot("s", F32, (S, S))
    mask = b.weight("causal_mask", F32, (S, S))
    b.output("y", b.add(b.neg(s), mask))
    program = b.build()
    mask2 = np.triu(np.full((S, S), MIN, np.float32), k=1)
    assert plan(program, "xdna2", constants={"causal_mask": mask2}).admitted  # s unknown
    dev = make_device("xdna-host")
    try:
        with pytest.raises(DomainFlagged):
            run_program(
                program, dev, "xdna-host", inputs=[{"s": -mask2, "causal_mask": mask2}],
                cache_dir=tmp_path,
            )  # fmt: skip
    finally:
        dev.close()


def _anchor_model() -> onnx.ModelProto:
    """YOLOv8's anchor grid over a dynamic width: ``Range(0, W, 1) + 0.5``, added to ``x``."""
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "three"], ["w"], axis=0),
        helper.make_node("Cast", ["w"], ["wf"], to=f32),
        helper.make_node("Range", ["zero", "wf", "one"], ["k"]),
        helper.make_node("Add", ["k", "half"], ["anchor"]),
        helper.make_node("Add", ["x", "anchor"], ["y"]),
    ]
    inits = [
        helper.make_tensor("three", i64, [], [3]),
        helper.make_tensor("zero", f32, [], [0.0]),
        helper.make_tensor("one", f32, [], [1.0]),
        helper.make_tensor("half", f32, [], [0.5]),
    ]
    graph = helper.make_graph(
        nodes,
        "anchors",
        [helper.make_tensor_value_info("x", f32, [1, 2, 4, "W"])],
        [helper.make_tensor_value_info("y", f32, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("width", [40, 2049])
def test_a_range_over_fixed_shapes_runs_on_the_fp16_device(width: int, tmp_path: Path) -> None:
    # the counter is F32 in the model and FP16 on the device, exact to 2048: admitted whole (a
    # detector's head was cut into four device graphs around it), and the step matches ONNX's
    # reference under the derived contract; one count past 2048 is refused, typed
    imp = import_model(_anchor_model(), shapes={"W": width})
    assert plan(imp.program, "intel-npu4").admitted
    x = np.random.default_rng(3).integers(-8, 9, (1, 2, 4, width)).astype(np.float32)
    report = _on_vpu_cpu(imp.program, {imp.inputs["x"]: x}, tmp_path)
    assert report.ok
    # ONNX's own reference evaluator (ONNX Runtime is in the models group only: importorskip
    # made this comparison skip in the default run)
    (want,) = ReferenceEvaluator(_anchor_model()).run(None, {"x": x})
    # whole numbers and halves: FP16 holds every one below 1024 (above, its step is 1), so
    # where the anchor and the sum are below it the device is exact; beyond, the derived
    # contract (report.ok) holds it. The counter itself is exact to 2048 (test_narrowing)
    got = report.outputs[0][imp.outputs["y"]]
    exact = (np.arange(width) + 0.5 < 1024) & (np.abs(want) < 1024)
    np.testing.assert_array_equal(got[exact], want[exact])
    (r,) = plan(import_model(_anchor_model(), shapes={"W": 2050}).program, "intel-npu4").refusals
    assert (r.kind, r.primitive) == (RefusalKind.NARROWING_RANGE, "iota")
