"""The device checks the attention-mask rewrite's precondition (``poot_planner.fp16.prelude``): where
the scores the prelude's mask is added to are not proven within ``SCORE_BOUND`` but are made in
a narrowed device span, a device that checks it (``VpuDevice`` with its FP16 guard) gets the
``-2^15`` mask anyway and its graph flags any score beyond the bound or NaN
(``GuardKind.SCORE``), refused as ``NarrowingRangeIntermediate`` naming the equation. Every
other device (``CpuDevice`` running an intel-npu4 plan, ``VpuDevice`` without its guard, xdna2
where the softmax runs on the host) keeps ``-inf`` and never runs a plan that names such
scores (xdna2's own F32 rewrite, where its kernels add the mask: ``test_xdna2_score_guard``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from poot_codegen.intel import graph as intel_graph
from poot_codegen.intel import guard as intel_guard
from poot_engine import CpuDevice, Engine
from poot_ir import (
    Builder,
    CodegenError,
    DType,
    NarrowingRangeInput,
    NarrowingRangeIntermediate,
    Prim,
    Program,
    UnsupportedDevice,
    Var,
    evaluate,
    ops,
)
from poot_npu.registry import make_device
from poot_npu.vpu import VpuDevice
from poot_planner import Span, partition, plan
from poot_planner.fp16.checks import GuardKind, analyse
from poot_planner.fp16.narrowing import intermediate_guards
from poot_planner.fp16.prelude import MASK, SCORE_BOUND

F32, I32, BOOL = DType.F32, DType.I32, DType.BOOL
ROWS, L, D = 3, 8, 4
INTEL = "intel-npu4"


def _literals(span: Span) -> set[float]:
    return {a.as_float() for e in span.program.eqns for a in e.inputs if not isinstance(a, Var)}


def _mask(b: Builder, shape: tuple[int, ...]) -> Var:
    keep = b.convert(b.slot("attention_mask", I32, shape), BOOL)
    return b.select(keep, b.literal(0.0, F32), b.literal(float("-inf"), F32))


def _matmul_scores(layers: int = 2) -> Program:
    """minilm's shape: q and k each scaled by d^-1/4 before their matmul (no literal bounds a
    contraction), a tanh first (legalized into steps on intel-npu4: the indices move)."""
    b = Builder("mm")
    x = b.tanh(b.slot("x", F32, (ROWS, D)))
    k = b.slot("k", F32, (L, D))
    m = _mask(b, (ROWS, L))
    for _ in range(layers):
        q = b.mul(x, b.literal(D**-0.25, F32))
        kt = b.transpose(b.mul(k, b.literal(D**-0.25, F32)), (1, 0))
        p = ops.softmax(b, b.add(b.matmul(q, kt), m))
        x = b.add(x, b.matmul(p, k))
    b.output("y", x)
    return b.build()


def _scaled_scores(scale: float) -> Program:
    """softmax(x * scale + mask): with scale 0.5 the scores reach 32752, past the bound."""
    b = Builder("scores")
    x = b.slot("x", F32, (ROWS, L))
    s = b.mul(x, b.literal(scale, F32))
    b.output("p", ops.softmax(b, b.add(s, _mask(b, (ROWS, L)))))
    return b.build()


def _device_score_ids(program: Program) -> set[int]:
    """Independently: the ids of the matmul outputs the mask is added to (through movement)."""
    made = {v.id: e for e in program.eqns for v in e.outputs}
    return {
        a.id
        for e in program.eqns
        if e.prim is Prim.ADD
        for a in e.inputs
        if isinstance(a, Var)
        and a.id in made
        and made[a.id].prim is Prim.MATMUL
        and any(made.get(o.id, e).prim is Prim.SELECT for o in e.inputs if isinstance(o, Var))
    }


def test_the_guard_is_placed_on_exactly_the_score_equations() -> None:
    program = _matmul_scores()
    want = _device_score_ids(program)
    assert len(want) == 2  # one score matmul per layer
    spans = partition(program, INTEL, score_guard=True)
    assert [s.device for s in spans] == [False, True]
    assert MASK in _literals(spans[0]) and float("-inf") in _literals(spans[0])
    p = spans[1].plan
    assert p is not None and p.narrowing is not None and p.rewrites  # legalized (the tanh)
    assert p.score_bound == want
    found = intermediate_guards(p.legalized, p.narrowing, p.score_bound)
    scores = [(at, g) for at, g in found if g.kind is GuardKind.SCORE]
    # the indices name the legalized program's score equations, and survive the narrowing
    assert {p.legalized.eqns[g.eqn].out.id for _, g in scores} == want
    for at, g in scores:
        assert g.primitive == "matmul" == p.program.eqns[at].prim.value
        assert p.program.eqns[at].out.dtype.is_float
    # the source's indices are not the legalized ones (the tanh's steps come first)
    src = {i for i, e in enumerate(p.source.eqns) if e.out.id in want}
    assert src != {g.eqn for _, g in scores}
    model = intel_graph.lower(p.program, emulate_f16=True, guards=found)
    labels = [intel_guard.guard_labels({str(n) for n in o.get_names()}) for o in model.outputs]
    (carried,) = [x for x in labels if x is not None]
    assert [g.label for _, g in scores] == [x for x in carried if x.endswith(".score")]


def test_without_a_checking_device_the_mask_stays_infinite() -> None:
    program = _matmul_scores()
    for target, guard in ((INTEL, False), ("xdna2", True)):
        spans = partition(program, target, score_guard=guard)
        host = next(s for s in spans if not s.device)
        assert MASK not in _literals(host) and float("-inf") in _literals(host), target
        assert all(s.plan is None or not s.plan.score_bound for s in spans), target


def _padded() -> tuple[np.ndarray, np.ndarray]:
    mask = np.array([[1, 1] + [0] * (L - 2), [1] + [0] * (L - 1), [1] * L], np.int32)
    return mask, np.zeros((ROWS, L), np.float32)


def test_scores_inside_the_bound_run_within_narrow_storage(tmp_path: Path) -> None:
    # scale 0.5 is past the static proof (65504 / 2 > SCORE_BOUND); scores +-16360, just inside
    # the bound: masked ones high, unmasked ones low (the case a -2^15 mask is weakest at)
    program = _scaled_scores(0.5)
    mask, x = _padded()
    x[:] = np.where(mask != 0, -32720.0, 32720.0)
    x[2, :3] = [-32720.0, 32720.0, 1.0]
    assert np.abs(x * 0.5).max() == 16360.0 < SCORE_BOUND
    inputs = {"x": x, "attention_mask": mask}
    want = evaluate(program, inputs)["p"]
    assert np.isfinite(want).all() and (want[mask == 0] == 0).all()
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(program, INTEL))
        spans = engine.partitioned(entry)
        assert spans is not None and MASK in _literals(spans.spans[0])
        got = engine.step(entry, inputs)["p"].astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err <= 2.0**-8, err
    assert np.all(got[mask == 0] == 0.0)  # the padded keys' probabilities are exactly 0


@pytest.mark.parametrize("masked", [True, False])
def test_scores_past_the_bound_are_refused_typed(masked: bool, tmp_path: Path) -> None:
    # 16400 on a masked key over -16400 unmasked: exp(32800 - 32768) would give the padded key
    # the row's probability (a silent wrong answer); the graph's score guard refuses it
    program = _scaled_scores(0.5)
    mask, x = _padded()
    x[:] = np.where(mask != 0, -1.0, 1.0)
    col = 1 if masked else 0
    x[0, col] = 32800.0
    if masked:
        x[0, 0] = -32800.0
        rewritten = x[0] * 0.5 + np.where(mask[0] != 0, 0.0, MASK)
        assert np.argmax(rewritten) == col  # the unguarded rewrite's answer: the padded key
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(program, INTEL))
        with pytest.raises(NarrowingRangeIntermediate, match="score bound") as err:
            engine.step(entry, {"x": x, "attention_mask": mask})
    assert err.value.check == "score" and err.value.primitive == "mul"


def test_a_nan_score_sets_the_score_flag() -> None:
    # a NaN cannot pass the input check, and the overflow guard flags one too: the score flag
    # on its own, lowered alone and run by OpenVINO's CPU plugin (the stand-in's runtime)
    program = _scaled_scores(0.5)
    host, span = partition(program, INTEL, score_guard=True)
    p = span.plan
    assert p is not None and p.narrowing is not None and len(p.score_bound) == 1
    found = intermediate_guards(p.legalized, p.narrowing, p.score_bound)
    only = tuple((at, g) for at, g in found if g.kind is GuardKind.SCORE)
    model = intel_graph.lower(p.program, emulate_f16=True, guards=only)
    compiled = ov.Core().compile_model(model, "CPU")
    mask, x = _padded()
    # 32720 / 2 = 16360 is inside; 32752 (FP16, as the stand-in rounds the input) / 2 = 16376
    for value, flagged in ((1.0, False), (32720.0, False), (32752.0, True), (np.nan, True)):
        xs = x.copy()
        xs[1, 3] = value
        env = {"x": xs, "attention_mask": mask}
        env.update(evaluate(host.program, {a.name: env[a.name] for a in host.program.args}))
        res = compiled([np.asarray(env[a.name], np.float32) for a in p.program.args])
        (flag,) = [
            v for o, v in res.items() if intel_guard.guard_labels({str(n) for n in o.get_names()})
        ]
        assert bool(np.asarray(flag).any()) is flagged, value


def test_devices_that_do_not_check_keep_infinity_and_refuse_a_checked_plan(
    tmp_path: Path,
) -> None:
    program = _scaled_scores(0.5)
    mask, x = _padded()
    x[:] = 1.0
    inputs = {"x": x, "attention_mask": mask}
    checked = partition(program, INTEL, score_guard=True)
    (bound_plan,) = (s.plan for s in checked if s.plan is not None and s.plan.score_bound)
    for device in (CpuDevice(INTEL), VpuDevice("CPU", overflow_guard=False)):
        with Engine(device, cache_dir=tmp_path) as engine:
            entry = engine.add_partitioned(plan(program, INTEL))
            part = engine.partitioned(entry)
            assert part is not None
            assert MASK not in _literals(part.spans[0])  # -inf kept, as before
            if isinstance(device, VpuDevice):  # the input check refuses the -inf mask
                with pytest.raises(NarrowingRangeInput):
                    engine.step(entry, inputs)
            # a span's plan that carries the bound (cut for a device that checks it) is
            # refused by one that does not
            with pytest.raises(UnsupportedDevice, match="score-bound"):
                engine.add_entry(bound_plan)


def _matmul_inputs(seed: int) -> dict[str, np.ndarray]:
    """Inputs of ``_matmul_scores`` with the padded mask."""
    rng = np.random.default_rng(seed)
    mask, _ = _padded()
    return {
        "x": rng.normal(0, 2, (ROWS, D)).astype(np.float32),
        "k": rng.normal(0, 2, (L, D)).astype(np.float32),
        "attention_mask": mask,
    }


def test_the_matmul_scores_run_within_narrow_storage(tmp_path: Path) -> None:
    # the minilm shape end to end on vpu-cpu: q and k pre-scaled, the mask -2^15 on the host,
    # the score matmuls checked in the graph
    program = _matmul_scores()
    inputs = _matmul_inputs(3)
    want = evaluate(program, inputs)["y"].astype(np.float64)
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(program, INTEL))
        part = engine.partitioned(entry)
        assert part is not None and MASK in _literals(part.spans[0])
        assert any(s.plan is not None and s.plan.score_bound for s in part.spans)
        got = engine.step(entry, inputs)["y"].astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert err <= 2.0**-8, err


def test_a_score_guard_the_program_cannot_carry_is_refused() -> None:
    program = _scaled_scores(0.5)
    _, span = partition(program, INTEL, score_guard=True)
    p = span.plan
    assert p is not None and p.narrowing is not None and p.score_bound
    limit = p.narrowing.max_magnitude
    made = {e.out.id for e in p.legalized.eqns}
    with pytest.raises(CodegenError, match="no equation makes"):  # lost by a rewrite
        analyse(p.legalized, limit, frozenset({max(made) + 1}))
    b = Builder("select")
    x = b.slot("x", F32, (L,))
    b.output("z", b.select(b.gt(x, b.literal(1.0, F32)), x, b.mul(x, 3.0)))
    chosen = b.build()
    boolean = next(e.out.id for e in chosen.eqns if not e.out.dtype.is_float)
    with pytest.raises(CodegenError, match="not a float value"):
        analyse(chosen, limit, frozenset({boolean}))
    # a VpuDevice without its FP16 guard cannot check it: never lowered unchecked
    with pytest.raises(UnsupportedDevice, match="score-bound"):
        VpuDevice("CPU", overflow_guard=False).lower(p)


def test_poot_run_cuts_as_the_engine_does_for_a_checking_device(tmp_path: Path) -> None:
    # `poot run` runs the engine's partitioned entry: the engine cuts by the device's traits
    # (checks_score_bound), or a padded encoder keeps -inf and is refused on vpu-cpu
    from poot_engine.run import run_program

    program = _matmul_scores()
    inputs = _matmul_inputs(4)
    report = run_program(
        program,
        make_device("vpu-cpu"),
        "vpu-cpu",
        steps=1,
        inputs=[inputs],
        cache_dir=tmp_path,
        partition=True,
    )
    assert any(MASK in _literals(s) for s in report.spans)
    assert report.ok, report
    # an oracle device on the same target does not check the bound: its partition keeps -inf,
    # which its input check refuses, typed, naming the mask value
    with pytest.raises(NarrowingRangeInput, match="-inf"):
        run_program(
            program,
            CpuDevice(INTEL),
            "cpu",
            steps=1,
            inputs=[inputs],
            cache_dir=tmp_path,
            partition=True,
        )
