"""``partition``: span structure, crossing values, names, and that the spans composed on the
oracle are the whole program's oracle bit for bit."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from poot_ir import Program, Storage, Var, evaluate, parse_program, sample_inputs
from poot_planner import Span, partition, plan
from poot_planner.partition import value_names

EXAMPLES = Path(__file__).resolve().parents[3] / "src" / "poot" / "examples"

LOG_STATE = (EXAMPLES / "log_state.poot").read_text()  # shared with the engine and device tests


def _example(name: str) -> Program:
    return parse_program((EXAMPLES / f"{name}.poot").read_text())


def _compose(
    program: Program, spans: tuple[Span, ...], inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    env = dict(inputs)
    for s in spans:
        env.update(evaluate(s.program, {a.name: env[a.name] for a in s.program.args}))
    names = value_names(program)
    return {n: env[names[v.id]] for n, v in program.results()}


def _check_structure(program: Program, spans: tuple[Span, ...], target: str) -> None:
    names = value_names(program)
    assert [i for s in spans for i in s.eqns] == list(range(len(program.eqns)))
    for a, b in itertools.pairwise(spans):
        assert a.device or b.device, "adjacent oracle spans merge"
    storage = {a.var.id: a.storage for a in program.args}
    for k, s in enumerate(spans):
        assert s.eqns == tuple(range(s.first, s.last + 1))
        assert not s.program.updates
        defined = {program.eqns[i].out.id for i in s.eqns}
        read = {
            a.id
            for i in s.eqns
            for a in program.eqns[i].inputs
            if isinstance(a, Var) and a.id not in defined
        }
        assert {a.var.id for a in s.program.args} == read
        for a in s.program.args:
            assert a.name == names[a.var.id]
            want = Storage.WEIGHT if storage.get(a.var.id) is Storage.WEIGHT else Storage.SLOT
            assert a.storage is want
        later = {
            a.id
            for t in spans[k + 1 :]
            for i in t.eqns
            for a in program.eqns[i].inputs
            if isinstance(a, Var)
        } | {v.id for _, v in program.results()}
        assert {o.var.id for o in s.program.outputs} == defined & later
        assert all(o.name == names[o.var.id] for o in s.program.outputs)
        if s.device:
            assert plan(s.program, target).admitted


@pytest.mark.parametrize(
    ("program", "target"),
    [
        (_example("attention"), "xdna2"),
        (parse_program(LOG_STATE), "intel-npu4"),
        (_example("fp16_boundary"), "xdna2"),  # pointwise is admitted on intel: tanh is legalized
    ],
    ids=["attention-xdna2", "log-intel", "fp16-boundary-xdna2"],
)
def test_refused_programs_split_and_compose_bit_for_bit(program: Program, target: str) -> None:
    assert not plan(program, target).admitted
    spans = partition(program, target)
    assert any(s.device for s in spans) and any(not s.device for s in spans)
    _check_structure(program, spans, target)
    for seed in range(3):
        inputs = sample_inputs(program, seed)
        got = _compose(program, spans, inputs)
        want = evaluate(program, inputs)
        for n in want:
            assert got[n].tobytes() == want[n].tobytes(), n


def test_a_refused_row_kernel_is_not_cut() -> None:
    # LayerNorm is one row kernel on xdna2, refused (its subtraction has no bound): all of it
    # runs on the host, where before its sums ran on the device between host pieces
    program = _example("layernorm")
    assert not plan(program, "xdna2").admitted
    spans = partition(program, "xdna2")
    assert [(s.device, s.eqns) for s in spans] == [(False, tuple(range(len(program.eqns))))]


def test_log_on_intel_goes_to_the_oracle_alone() -> None:
    # the example's i32 round trip (it was a log, which intel-npu4 now legalizes)
    spans = partition(parse_program(LOG_STATE), "intel-npu4")
    assert [(s.device, s.eqns) for s in spans] == [
        (True, (0, 1)),
        (False, (2, 3)),
        (True, (4, 5, 6)),
    ]
    last = spans[2].program
    assert [(a.name, a.storage) for a in last.args] == [
        ("w", Storage.WEIGHT),
        ("s", Storage.SLOT),
        ("v9", Storage.SLOT),
    ]
    assert [o.name for o in last.outputs] == ["v7", "v8"]


def test_partition_is_deterministic() -> None:
    p = _example("layernorm")
    assert partition(p, "xdna2") == partition(p, "xdna2")


def test_an_admitted_program_is_one_device_span() -> None:
    p = _example("rmsnorm_step")
    spans = partition(p, "xdna2")
    assert len(spans) == 1 and spans[0].device
    assert spans[0].eqns == tuple(range(len(p.eqns)))
    assert partition(_example("layernorm"), "cpu")[0].device


def test_intermediate_names_avoid_argument_names() -> None:
    p = parse_program(
        """
program clash
  slot v2 %0: f32[4]
  %1: f32[4] = log %0
  %2: f32[4] = mul %1 2.0:f32
  output y = %2
end
"""
    )
    spans = partition(p, "intel-npu4")
    assert value_names(p)[2] == "v2_"
    assert [o.name for o in spans[-1].program.outputs] == ["v2_"]


def test_a_wide_slot_stays_wide_in_its_spans() -> None:
    """An imported model's int64 input (an I32 slot that takes int64, ``Arg.wide``) keeps
    taking int64 in every span that reads it."""
    from poot_ir import Builder, DType

    b = Builder("wide")
    ids = b.slot("ids", DType.I32, (4,), wide=True)
    table = b.weight("t", DType.F32, (8, 2))
    # a round trip through i32: refused on intel-npu4
    y = b.convert(b.convert(b.add(b.gather(table, ids, axis=0), 2.0), DType.I32), DType.F32)
    b.output("y", b.add(y, 1.0))
    spans = partition(b.build(), "intel-npu4")
    assert [s.device for s in spans] == [True, False, True]
    first = spans[0].program
    assert [(a.name, a.wide) for a in first.args] == [("ids", True), ("t", False)]


def test_the_context_budget_keeps_the_spans_with_the_most_work() -> None:
    from poot_planner.partition import _fitting

    # in program order the first span (10 contexts, little work) took the budget of 16
    assert _fitting({0: 10, 2: 8, 4: 8}, {0: 5, 2: 100, 4: 100}, 16) == {2, 4}
    assert _fitting({0: 10, 2: 8, 4: 8}, {0: 500, 2: 100, 4: 100}, 16) == {0}
    assert _fitting({0: 1, 2: 1}, {0: 7, 2: 7}, 1) == {0}  # a tie: the earlier span
    # a span with no NPU work (no context) or past the whole budget is never kept
    assert _fitting({0: 0, 1: 17, 2: 3}, {0: 9, 1: 9, 2: 1}, 16) == {2}


def test_the_work_of_an_equation_counts_its_multiply_adds() -> None:
    from poot_ir import Builder, DType
    from poot_planner.partition import arithmetic

    b = Builder("work")
    a, w = b.slot("a", DType.F32, (6, 5)), b.slot("w", DType.F32, (5, 7))
    x, k = b.slot("x", DType.F32, (2, 4, 9, 9)), b.slot("k", DType.F32, (8, 2, 3, 3))
    b.output("m", b.matmul(a, w))  # 6 x 7 outputs of 5 terms
    b.output("c", b.conv(x, k, groups=2))  # 2 x 8 x 7 x 7 outputs of 2 x 3 x 3 terms
    b.output("p", b.reduce_window_max(x, (1, 1, 2, 2), (1, 1, 2, 2)))  # 2x4x4x4 windows of 4
    b.output("s", b.reduce_sum(x, (3,)))  # every element read once
    b.output("e", b.exp(x))
    m, c, p, s, e = b.build().eqns
    assert [arithmetic(q) for q in (m, c, p, s, e)] == [
        6 * 7 * 5,
        2 * 8 * 7 * 7 * 2 * 9,
        2 * 4 * 4 * 4 * 4,
        2 * 4 * 9 * 9,
        2 * 4 * 9 * 9,
    ]


def test_a_run_past_the_context_budget_is_halved_until_its_pieces_fit() -> None:
    """40 regions in one run, none refused alone: the whole plan is refused (a context limit),
    so the run is halved until each piece fits, and the budget keeps the pieces doing the most
    work. Sent to the oracle whole, a run of convolutions legalized on xdna2 took everything."""
    from poot_ir import Builder, DType

    b = Builder("chain40")
    v: Var = b.slot("x", DType.F32, (4, 4))
    for k in range(40):  # a factor of its own in each region: identical ones would share one
        v = b.transpose(b.mul(v, float(k + 2)), (1, 0))
    b.output("y", v)
    program = b.build()
    (r,) = plan(program, "xdna2").refusals
    assert (r.fact("needed"), r.fact("available")) == (40, 16)
    spans = partition(program, "xdna2")
    _check_structure(program, spans, "xdna2")
    device = [s for s in spans if s.device]
    assert device and all(s.plan is not None and s.plan.admitted for s in device)
    assert sum(s.plan.contexts for s in device if s.plan is not None) == 16
    x = np.random.default_rng(3).normal(size=(4, 4)).astype(np.float32)
    got, want = _compose(program, spans, {"x": x}), evaluate(program, {"x": x})
    assert got["y"].tobytes() == want["y"].tobytes()


def test_the_budget_keeps_the_heaviest_regions_wherever_they_are() -> None:
    """40 regions, every fourth a matmul (the most work): cut one context a piece, the budget
    keeps all ten matmuls and six others; cut into pieces of the whole budget it kept 16
    neighbouring regions, four of the matmuls."""
    from poot_ir import Builder, DType

    b = Builder("scattered")
    v: Var = b.slot("x", DType.F32, (4, 4))
    w = b.weight("w", DType.F32, (4, 4))
    for k in range(40):
        v = b.matmul(v, w) if k % 4 == 3 else b.mul(v, float(k + 2))
        v = b.transpose(v, (1, 0))  # a relayout closes each region
    b.output("y", v)
    program = b.build()
    spans = partition(program, "xdna2")
    _check_structure(program, spans, "xdna2")
    on_device = {i for s in spans if s.device for i in s.eqns}
    matmuls = [i for i, e in enumerate(program.eqns) if e.prim.value == "matmul"]
    assert len(matmuls) == 10 and set(matmuls) <= on_device
    assert sum(s.plan.contexts for s in spans if s.device and s.plan is not None) <= 16
    x = np.random.default_rng(5).normal(size=(4, 4)).astype(np.float32)
    inputs = {"x": x, "w": np.eye(4, dtype=np.float32) * 0.5}
    got, want = _compose(program, spans, inputs), evaluate(program, inputs)
    assert got["y"].tobytes() == want["y"].tobytes()
