"""The host prelude (``poot_planner.fp16.prelude``) on a model of an exported encoder's mask: the
integer ``attention_mask`` made a boolean mask, ``select(mask, 0, -inf)`` per layer between the
layers' float work, and the exported ``isnan`` guard after each softmax. On intel-npu4 the
integer side runs first on the host and every float equation in one device span; the spans
composed on the oracle are the whole program bit for bit (a row with an unmasked key), a fully
masked row keeps ``-inf`` (refused at the device's input check), and the vpu-cpu stand-in runs
it within NarrowStorage. The mask is rewritten only where the scores it is added to are proven
bounded (``SCORE_BOUND``: a literal scale of a value the device checks for FP16 overflow); an
unscaled score keeps ``-inf`` and is refused, typed, never a silent wrong result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import (
    Builder,
    DType,
    NarrowingRangeInput,
    Prim,
    Program,
    Var,
    evaluate,
    ops,
)
from poot_npu.registry import make_device
from poot_planner import Span, partition, plan
from poot_planner.fp16.prelude import MASK, SCORE_BOUND, host_prelude
from poot_planner.partition import value_names

F32, I32, BOOL = DType.F32, DType.I32, DType.BOOL
B, L, D, LAYERS = 2, 8, 16, 3


def _encoder(layers: int = LAYERS, scale: float | None = 1.0 / np.sqrt(32)) -> Program:
    b = Builder("masked")
    x = b.slot("x", F32, (B, L, D))
    am = b.slot("attention_mask", I32, (B, L))
    keep = b.convert(am, BOOL)  # attention_mask != 0, as the exporter casts it
    keys = b.broadcast_in_dim(keep, (B, L, L), (0, 2))
    w = b.weight("w", F32, (B, D, D))
    for _ in range(layers):
        q = b.matmul(x, w)
        s = b.matmul(q, b.transpose(x, (0, 2, 1)))
        if scale is not None:  # minilm's 1/sqrt(32): what bounds the scores
            s = b.mul(s, b.literal(float(scale), F32))
        s = b.add(
            s, b.select(keys, b.literal(0.0, F32), b.literal(float("-inf"), F32))
        )  # the additive mask, per layer
        p = ops.softmax(b, s)
        isnan = b.eq(b.eq(p, p), b.literal(False, BOOL))
        p = b.select(isnan, b.literal(0.0, F32), p)
        x = b.add(x, b.matmul(p, x))
    b.output("y", x)
    return b.build()


def _inputs(mask: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.normal(0, 1, (B, L, D)).astype(np.float32),
        "attention_mask": mask.astype(np.int32),
        "w": rng.normal(0, 0.5, (B, D, D)).astype(np.float32),
    }


PADDED = np.array([[1] * L, [1, 1, 1] + [0] * (L - 3)])


def _compose(program: Program, spans: tuple[Span, ...], inputs: dict[str, np.ndarray]) -> dict:
    env = dict(inputs)
    for s in spans:
        env.update(evaluate(s.program, {a.name: env[a.name] for a in s.program.args}))
    names = value_names(program)
    return {n: env[names[v.id]] for n, v in program.results()}


def test_the_integer_side_is_the_prelude_and_the_rest_one_device_span() -> None:
    program = _encoder()
    spans = partition(program, "intel-npu4")
    assert [s.device for s in spans] == [False, True]
    host = spans[0].eqns
    refused = {r.eqn for r in plan(program, "intel-npu4").refusals}
    assert host == host_prelude(program, refused)
    prims = [program.eqns[i].prim for i in host]
    assert prims.count(Prim.SELECT) == LAYERS and Prim.CONVERT in prims
    for i in host:  # nothing on the host reads a float
        assert not any(a.dtype.is_float for a in program.eqns[i].inputs if isinstance(a, Var))
    assert set(spans[1].eqns) == set(range(len(program.eqns))) - set(host)
    # the same program cut before legalization, and without the prelude, is many graphs
    assert sum(s.device for s in partition(program, "intel-npu4", legalization=False)) > 2


def test_a_program_with_no_integer_side_has_no_prelude() -> None:
    b = Builder("plain")
    x = b.slot("x", F32, (4, 4))
    b.output("y", b.log(b.exp(x)))
    program = b.build()
    assert host_prelude(program, {1}) == ()
    # log is legalized on intel-npu4 (legalize.logarithm), so the whole program is one device span
    assert [(s.device, s.eqns) for s in partition(program, "intel-npu4")] == [(True, (0, 1))]


@pytest.mark.parametrize("target", ["intel-npu4", "xdna2"])
def test_the_spans_compose_to_the_oracle_bit_for_bit(target: str) -> None:
    program = _encoder()
    inputs = _inputs(PADDED)
    spans = partition(program, target)
    got = _compose(program, spans, inputs)["y"]
    want = evaluate(program, inputs)["y"]
    assert np.isfinite(want).all() and got.tobytes() == want.tobytes()


def test_the_prelude_mask_value_and_a_fully_masked_row() -> None:
    program = _encoder(1)
    host = partition(program, "intel-npu4")[0]
    mask = PADDED.copy()
    mask[1] = 0  # the second sequence all padding: every key of its rows masked
    out = evaluate(host.program, {a.name: _inputs(mask)[a.name] for a in host.program.args})
    (value,) = (v for v in out.values() if v.dtype == np.float32)
    assert set(np.unique(value[0])) == {0.0}
    assert np.all(value[1] == -np.inf)  # kept infinite: the device's input check refuses it
    ok = evaluate(host.program, {a.name: _inputs(PADDED)[a.name] for a in host.program.args})
    (value,) = (v for v in ok.values() if v.dtype == np.float32)
    assert set(np.unique(value[1])) == {0.0, MASK}
    assert np.array_equal(value[1] == 0.0, np.broadcast_to(PADDED[1] == 1, (L, L)))


def test_on_the_intel_stand_in_within_narrow_storage(tmp_path: Path) -> None:
    program = _encoder()
    inputs = _inputs(PADDED)
    want = evaluate(program, inputs)["y"].astype(np.float64)
    slots = {k: v for k, v in inputs.items() if k != "w"}
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(
            plan(program, "intel-npu4"), engine.load_weights({"w": inputs["w"]})
        )
        got = engine.step(entry, slots)["y"].astype(np.float64)
        assert np.linalg.norm(got - want) <= 2.0**-8 * np.linalg.norm(want)
        mask = PADDED.copy()
        mask[1] = 0
        with pytest.raises(NarrowingRangeInput):
            engine.step(entry, {**slots, "attention_mask": mask.astype(np.int32)})


def test_on_xdna2_no_bound_is_proven_and_the_mask_stays_infinite(tmp_path: Path) -> None:
    # xdna2 computes F32: no in-graph overflow guard bounds its scores, so no finite mask is
    # proven to give the -inf mask's probabilities there and the mask stays as exported (its
    # add runs on the oracle: xdna2 refuses it, and the run matches the oracle)
    program = _encoder(1)
    inputs = _inputs(PADDED)
    want = evaluate(program, inputs)["y"].astype(np.float64)
    spans = partition(program, "xdna2")
    assert not spans[0].device and MASK not in _literals(spans[0].program)
    assert float("-inf") in _literals(spans[0].program)
    slots = {k: v for k, v in inputs.items() if k != "w"}
    with Engine(make_device("xdna-host"), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_partitioned(
            plan(program, "xdna2"), engine.load_weights({"w": inputs["w"]})
        )
        # verified span by span under the derived bounds (matmuls on tiles: bf16 operands)
        got = engine.step(entry, slots)["y"].astype(np.float64)
        assert engine.stats().verified_steps >= 1
    assert np.linalg.norm(got - want) <= 2.0**-6 * np.linalg.norm(want)


def _literals(program: Program) -> set[float]:
    return {a.as_float() for e in program.eqns for a in e.inputs if not isinstance(a, Var)}


# -- the rewrite's precondition: scores proven bounded (prelude.SCORE_BOUND) -------------------

ROWS = 3


def _scores(scale: float | None) -> Program:
    """softmax(x * scale + select(mask != 0, 0, -inf)) over raw scores ``x`` (a slot: the
    engine's input check bounds it by 65504 on intel-npu4)."""
    b = Builder("scores")
    x = b.slot("x", F32, (ROWS, L))
    am = b.slot("attention_mask", I32, (ROWS, L))
    keep = b.convert(am, BOOL)
    s = x if scale is None else b.mul(x, b.literal(scale, F32))
    s = b.add(s, b.select(keep, b.literal(0.0, F32), b.literal(float("-inf"), F32)))
    b.output("p", ops.softmax(b, s))
    return b.build()


#: a row's keys: the first unmasked, the rest padding
_ONE_KEY = np.array([[1] + [0] * (L - 1)] * ROWS, np.int32)


def _host_literals(program: Program) -> set[float]:
    spans = partition(program, "intel-npu4")
    assert [s.device for s in spans] == [False, True]
    return _literals(spans[0].program)


def test_the_bound_at_its_edge() -> None:
    # 65504 * c after FP16 rounding within SCORE_BOUND; 1/4 (D = 16's 1/sqrt(d)) is past it:
    # 2 * 16376 + 17.4 > 32768, a masked score 16376 over an unmasked -16376 would not vanish
    assert 65504 * 0.2493 * (1 + 2.0**-10) ** 2 <= SCORE_BOUND < 65504 * 0.25
    assert MASK in _host_literals(_scores(0.2493))
    assert MASK in _host_literals(_scores(-0.2493))
    for scale in (0.25, 1.0, None):
        lits = _host_literals(_scores(scale))
        assert MASK not in lits and float("-inf") in lits, scale


def test_a_division_by_a_literal_and_the_subtraction_sides() -> None:
    def program(prim: Prim, mask_first: bool, d: float) -> Program:
        b = Builder("scores")
        x = b.slot("x", F32, (ROWS, L))
        keep = b.convert(b.slot("attention_mask", I32, (ROWS, L)), BOOL)
        s = b.div(x, b.literal(d, F32))
        m = b.select(keep, b.literal(0.0, F32), b.literal(float("-inf"), F32))
        t = b.add(m, s) if prim is Prim.ADD else b.sub(m, s) if mask_first else b.sub(s, m)
        b.output("p", ops.softmax(b, t))
        return b.build()

    assert MASK in _host_literals(program(Prim.ADD, True, 4.02))
    assert MASK in _host_literals(program(Prim.SUB, True, 4.02))  # mask - s
    assert MASK not in _host_literals(program(Prim.ADD, True, 4.0))  # past the bound
    # s - mask adds an infinity where the mask is -inf: no finite mask stands for that
    assert MASK not in _host_literals(program(Prim.SUB, False, 4.02))


def test_unbounded_scores_keep_the_mask_and_are_refused_typed(tmp_path: Path) -> None:
    # the brief's counterexample: a masked score 20000 over an unmasked -20000. A -2^15 mask
    # would give the padded key all the probability (the oracle shows it); the kept -inf is
    # refused at the device's input check instead of that silent wrong result
    program = _scores(None)
    x = np.full((ROWS, L), -5.0, np.float32)
    x[:, 0], x[:, 1] = -20000.0, 20000.0
    rewritten = x + np.where(_ONE_KEY != 0, 0.0, MASK).astype(np.float32)
    wrong = np.exp(rewritten - rewritten.max(axis=1, keepdims=True))
    assert wrong[0, 1] / wrong[0].sum() == 1.0  # what the unguarded rewrite would compute
    want = evaluate(program, {"x": x, "attention_mask": _ONE_KEY})["p"]
    assert np.array_equal(want[:, 0], np.ones(ROWS, np.float32))
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(program, "intel-npu4"))
        with pytest.raises(NarrowingRangeInput):
            engine.step(entry, {"x": x, "attention_mask": _ONE_KEY})


@pytest.mark.parametrize("scale", [0.2493, -0.2493])
def test_adversarial_scores_at_the_edges_match_the_oracle(scale: float, tmp_path: Path) -> None:
    # the largest scores the input check lets through, masked ones high and unmasked ones low
    # (and the reverse, and mixed): the composed spans on the oracle give the -inf mask's
    # probabilities bit for bit, vpu-cpu within NarrowStorage; past 65504 a typed refusal
    program = _scores(scale)
    mask = np.array([[1, 1] + [0] * (L - 2), [1] + [0] * (L - 1), [0] * (L - 1) + [1]], np.int32)
    big = np.float32(65504.0)
    x = np.where(mask != 0, -big, big).astype(np.float32) * np.sign(np.float32(scale))
    x[1] = np.where(mask[1] != 0, big, -big) * np.sign(np.float32(scale))
    x[2, :4] = [-big, big, 0.5, -3.0]
    inputs = {"x": x, "attention_mask": mask}
    want = evaluate(program, inputs)["p"]
    assert np.isfinite(want).all() and np.array_equal(
        want[mask == 0], np.zeros(int((mask == 0).sum()), np.float32)
    )
    spans = partition(program, "intel-npu4")
    assert MASK in _literals(spans[0].program)
    got = _compose(program, spans, inputs)["p"]
    assert got.tobytes() == want.tobytes()
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(program, "intel-npu4"))
        dev = engine.step(entry, inputs)["p"].astype(np.float64)
        err = np.linalg.norm(dev - want) / np.linalg.norm(want)
        assert err <= 2.0**-8, err
        assert np.all(dev[mask == 0] == 0.0)  # no probability on a padded key
        over = x.copy()
        over[0, 0] = np.nextafter(big, np.float32(np.inf))
        with pytest.raises(NarrowingRangeInput):
            engine.step(entry, {"x": over, "attention_mask": mask})


def test_only_a_value_the_span_checks_bounds_the_scores() -> None:
    # y made in the device span counts only with a plain overflow guard: exp is guarded (the
    # graph refuses an infinite one), max computes nothing new and carries none
    def program(make: str) -> Program:
        b = Builder("scores")
        x = b.slot("x", F32, (ROWS, L))
        x2 = b.slot("x2", F32, (ROWS, L))
        keep = b.convert(b.slot("attention_mask", I32, (ROWS, L)), BOOL)
        y = b.exp(x) if make == "exp" else b.max(x, x2)
        s = b.mul(b.transpose(b.transpose(y, (1, 0)), (1, 0)), b.literal(0.125, F32))
        m = b.select(keep, b.literal(0.0, F32), b.literal(float("-inf"), F32))
        b.output("p", ops.softmax(b, b.add(s, m)))
        return b.build()

    assert MASK in _host_literals(program("exp"))
    assert MASK not in _host_literals(program("max"))


def _moved_mask(move: str) -> Program:
    """softmax(x / 8 + m) over a square score matrix, ``m`` the mask moved by ``move``: kept
    rows (``rows``: a rank-1 mask broadcast along the rows) or moved ones (``transpose``, and
    ``columns``: the rank-1 mask broadcast down the columns) -- same extents, other rows."""
    n = 4
    b = Builder("moved")
    x = b.slot("x", F32, (n, n))
    if move == "transpose":
        am = b.slot("attention_mask", I32, (n, n))
    else:
        am = b.slot("attention_mask", I32, (n,))
    m = b.select(b.convert(am, BOOL), b.literal(0.0, F32), b.literal(float("-inf"), F32))
    match move:
        case "transpose":
            m = b.transpose(m, (1, 0))
        case "rows":
            m = b.broadcast_in_dim(m, (n, n), (1,))
        case "columns":
            m = b.broadcast_in_dim(m, (n, n), (0,))
    b.output("p", ops.softmax(b, b.add(b.mul(x, b.literal(0.125, F32)), m)))
    return b.build()


@pytest.mark.parametrize("move", ["transpose", "columns"])
def test_a_movement_that_moves_the_rows_keeps_the_mask(move: str) -> None:
    # the rewrite's row maximum is over the mask's own last axis; after a transpose (or a
    # broadcast down the columns) a fully masked row of the softmax is not a row of the mask:
    # rewritten, that row would come back a finite uniform 0.25 where the oracle gives NaN
    program = _moved_mask(move)
    lits = _host_literals(program)
    assert MASK not in lits and float("-inf") in lits
    mask = np.ones((4, 4) if move == "transpose" else (4,), np.int32)
    mask[..., 0] = 0
    inputs = {"x": np.zeros((4, 4), np.float32), "attention_mask": mask}
    spans = partition(program, "intel-npu4")
    got = _compose(program, spans, inputs)["p"]
    want = evaluate(program, inputs)["p"]
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()


def test_a_movement_that_keeps_the_rows_is_rewritten() -> None:
    assert MASK in _host_literals(_moved_mask("rows"))
