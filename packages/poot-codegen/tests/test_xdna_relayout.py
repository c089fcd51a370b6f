"""XDNA2 host relayouts (reshape, transpose, slice, concat between regions): the planner's
stages, the host layout (an alias shares its root's bytes), validation, and each program run
over numpy arenas by the design executor against the oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_codegen.xdna.arenas import build_layout
from poot_codegen.xdna.design import ArenaRole, DesignError, RelayoutKind
from poot_codegen.xdna.designer import build_design, design_program
from poot_codegen.xdna.execute import load_region_libraries, run_design, stages
from poot_codegen.xdna.validate import validate
from poot_engine.blob_cache import BlobCache
from poot_ir import Builder, DType, Program, Var, evaluate
from poot_planner import KernelClass, Plan, partition, plan

F32, I32 = DType.F32, DType.I32
Array = np.ndarray[Any, np.dtype[Any]]
Body = Callable[[Builder], None]


def build(name: str, body: Body) -> Program:
    b = Builder(name)
    body(b)
    return b.build()


def inputs_for(p: Program, seed: int = 0) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    out: dict[str, Array] = {}
    for a in p.args:
        t = a.var.type
        if t.dtype is I32:
            out[a.name] = rng.integers(-1000, 1000, t.shape).astype(np.int32)
        else:  # with the edges: signed zeros, the largest and smallest normals
            x = rng.uniform(-4, 4, t.shape).astype(np.float32)
            edges = np.array([0.0, -0.0, 3e38, -1.1754944e-38, 1.0], np.float32)
            flat = x.reshape(-1)
            flat[: min(flat.size, edges.size)] = edges[: flat.size]
            out[a.name] = x
    return out


def run_and_compare(pl: Plan, cache: Path, seed: int = 0) -> None:
    """The design run over numpy arenas, each result against the oracle: the relayouts are bit
    exact and the tile jobs here (neg, mul by 2) too, so the results must be identical."""
    design = design_program(pl)
    inputs = inputs_for(pl.program, seed)
    got = run_design(design, load_region_libraries(pl, BlobCache(cache)), inputs)
    ref = evaluate(pl.program, inputs)
    assert set(got) == set(ref)
    for name, expected in ref.items():
        assert got[name].shape == expected.shape, name
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name, strict=True)
        # bit for bit: -0.0 stays -0.0
        assert got[name].tobytes() == np.ascontiguousarray(expected).tobytes(), name


def admitted(p: Program) -> Plan:
    pl = plan(p, "xdna2")
    assert pl.admitted, pl.refusals
    relayouts = {h.eqn for h in pl.relayouts}
    for a in pl.admissions:
        prim = pl.program.eqns[a.eqn].prim.value
        is_relayout = prim in ("reshape", "transpose", "slice", "concat")
        assert (a.kernel is KernelClass.HOST_RELAYOUT) == is_relayout
        if is_relayout:
            assert a.tile is None and (
                a.eqn in relayouts or not pl.program.eqns[a.eqn].out.type.size
            )
    return pl


def _between(b: Builder) -> None:
    x = b.slot("x", F32, (6, 8))
    y = b.neg(x)
    r = b.reshape(y, (4, 12))
    b.output("z", b.mul(r, 2.0))


def _before(b: Builder) -> None:
    x = b.slot("x", F32, (6, 8))
    b.output("z", b.neg(b.transpose(x, (1, 0))))


def _after(b: Builder) -> None:
    x = b.slot("x", F32, (6, 8))
    b.output("z", b.transpose(b.neg(x), (1, 0)))
    b.output("r", b.reshape(b.neg(x), (48,)))


def _two_in_a_row(b: Builder) -> None:
    x = b.slot("x", F32, (2, 3, 4))
    y = b.neg(x)
    t = b.transpose(b.reshape(y, (6, 4)), (1, 0))
    s = b.slice(b.reshape(t, (4, 3, 2)), (1, 0, 0), (4, 3, 2), (2, 1, 1))
    b.output("z", b.mul(s, 2.0))


def _two_readers(b: Builder) -> None:
    x = b.slot("x", F32, (8, 8))
    t = b.transpose(b.neg(x), (1, 0))
    u = b.neg(t)
    v = b.mul(b.reshape(u, (64,)), 2.0)  # a second region
    w = b.neg(b.reshape(t, (64,)))  # t read again after it
    b.output("v", v)
    b.output("w", w)


def _concat(b: Builder) -> None:
    x = b.slot("x", F32, (3, 5))
    y = b.slot("y", F32, (2, 5))
    c = b.concat([b.neg(x), y, b.neg(x)], 0)
    b.output("z", b.neg(c))
    b.output("i", b.concat([b.slot("i", I32, (2, 2)), b.slot("j", I32, (2, 1))], 1))


def _argument_to_result(b: Builder) -> None:
    x = b.slot("x", F32, (3, 4))
    b.output("z", b.reshape(x, (12,)))
    b.output("t", b.transpose(x, (1, 0)))
    b.output("s", b.slice(x, (0, 1), (3, 4), (1, 2)))


def _edges(b: Builder) -> None:
    x = b.slot("x", F32, (1, 1))
    b.output("one", b.neg(b.reshape(b.neg(x), (1,))))
    e = b.slot("e", F32, (0, 4))
    b.output("empty", b.transpose(b.reshape(e, (4, 0)), (1, 0)))
    b.output("cut", b.slice(b.neg(b.slot("w", F32, (3, 4))), (1, 1), (1, 4), (1, 1)))


PROGRAMS: dict[str, Body] = {
    "between": _between,
    "before": _before,
    "after": _after,
    "two_in_a_row": _two_in_a_row,
    "two_readers": _two_readers,
    "concat": _concat,
    "argument_to_result": _argument_to_result,
    "edges": _edges,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_relayout_programs_run_bit_exact_against_the_oracle(name: str, tmp_path: Path) -> None:
    run_and_compare(admitted(build(name, PROGRAMS[name])), tmp_path)


def test_a_reshape_is_an_alias_of_its_input_bytes() -> None:
    pl = admitted(build("between", _between))
    design = design_program(pl)
    (h,) = design.relayouts
    assert h.kind is RelayoutKind.ALIAS
    layout = design.layout
    src, out = layout.slot(h.sources[0]), layout.slot(h.target)
    assert out.root == src.value and (out.arena, out.offset) == (src.arena, src.offset)
    assert out.shape == (4, 12) and src.shape == (6, 8)
    # the second region reads the alias's slot: the first region's output bytes
    (r0, r1) = design.regions
    (t_out,) = [t for t in r0.transfers if t.direction.value == "from device"]
    (t_in,) = [t for t in r1.transfers if t.direction.value == "to device"]
    assert (t_in.arena, t_in.offset) == (t_out.arena, t_out.offset)


def test_a_relayout_closes_the_region_that_makes_its_operand_and_takes_no_context() -> None:
    pl = admitted(build("two_readers", _two_readers))
    # neg | transpose | neg | reshape | mul, reshape, neg: each relayout of a value the open
    # region makes closes it; the last reshape reads t, which region 1 does not make, so it
    # runs before region 2 without closing it
    assert [h.prim.value for h in pl.relayouts] == ["transpose", "reshape", "reshape"]
    assert [h.after for h in pl.relayouts] == [1, 2, 2]
    assert len(pl.regions) == 3
    order = stages(design_program(pl))
    assert [type(s).__name__ for s in order] == [
        "RegionDesign",
        "Relayout",
        "RegionDesign",
        "Relayout",
        "Relayout",
        "RegionDesign",
    ]
    # the value the relayout reads is streamed out by the region that makes it
    t = pl.relayouts[0]
    assert t.inputs[0].id in {v.id for v in pl.regions[0].host_out}


def test_a_relayout_of_an_argument_runs_before_the_region_and_closes_nothing() -> None:
    def body(b: Builder) -> None:
        x = b.slot("x", F32, (4, 4))
        y = b.neg(x)
        t = b.transpose(x, (1, 0))  # reads an argument: runs before region 0
        b.output("z", b.add(y, t))

    pl = admitted(build("arg", body))
    assert len(pl.regions) == 1 and [h.after for h in pl.relayouts] == [0]


def test_relayouts_take_no_context_but_distinct_regions_are_still_limited_to_16() -> None:
    def chain(n: int, same: bool) -> Program:
        def body(b: Builder) -> None:
            v: Var = b.slot("x", F32, (4, 4))
            for k in range(n):
                # each closes its region; a factor of its own makes each region's kernel its own
                y = b.neg(v) if same else b.mul(v, float(k + 2))
                v = b.transpose(y, (1, 0))
            b.output("z", v)

        return build(f"chain{n}", body)

    pl = plan(chain(16, same=False), "xdna2")
    assert pl.admitted and pl.contexts == 16 and len(pl.relayouts) == 16
    refused = plan(chain(17, same=False), "xdna2")
    (r,) = refused.refusals
    assert r.kind.value == "context limit" and r.fact("needed") == 17
    # seventeen identical regions (one reads the argument, the rest scratch): one artifact
    same = plan(chain(17, same=True), "xdna2")
    assert same.admitted and same.contexts == 1 and same.contexts_before_reuse == 17


def test_partition_keeps_a_relayout_program_as_one_device_span() -> None:
    p = build("two_in_a_row", _two_in_a_row)
    spans = partition(p, "xdna2")
    assert len(spans) == 1 and spans[0].device
    before = plan(p, "xdna2")
    assert before.admitted


def test_an_alias_slot_off_its_root_is_refused() -> None:
    import dataclasses

    pl = admitted(build("between", _between))
    design = build_design(pl)
    layout = design.layout
    bad = tuple(
        dataclasses.replace(s, offset=s.offset + 64) if s.root is not None else s
        for s in layout.slots
    )
    with pytest.raises(DesignError, match="alias slot"):
        validate(dataclasses.replace(design, layout=dataclasses.replace(layout, slots=bad)))
    wrong = dataclasses.replace(design.relayouts[0], after=len(design.regions) + 1)
    with pytest.raises(DesignError, match="step order"):
        validate(dataclasses.replace(design, relayouts=(wrong,)))


def test_a_returned_alias_keeps_its_bytes_in_the_results_arena() -> None:
    pl = admitted(build("after", _after))
    layout = build_layout(pl)
    s = layout.result("r")
    assert s.root is not None
    assert layout.arenas[s.arena].role is ArenaRole.RESULTS


_PERMS = {2: [(1, 0), (0, 1)], 3: [(2, 0, 1), (1, 2, 0), (0, 2, 1)]}


@st.composite
def chains(draw: st.DrawFn) -> Program:
    """A random chain of relayouts and pointwise tile jobs over a small 3-d tensor."""
    dims = tuple(draw(st.integers(1, 4)) for _ in range(3))
    steps = draw(
        st.lists(
            st.sampled_from(["neg", "reshape", "transpose", "slice", "concat"]),
            min_size=1,
            max_size=7,
        )
    )

    def body(b: Builder) -> None:
        v: Var = b.slot("x", F32, dims)
        for s in steps:
            shape = v.type.shape
            if s == "neg":
                v = b.neg(v)
            elif s == "reshape":
                n = int(np.prod(shape))
                v = b.reshape(v, draw(st.sampled_from([(n,), (1, n), (n, 1)])) if n else (0,))
            elif s == "transpose" and len(shape) in _PERMS:
                v = b.transpose(v, draw(st.sampled_from(_PERMS[len(shape)])))
            elif s == "slice":
                start = tuple(draw(st.integers(0, d)) for d in shape)
                limit = tuple(draw(st.integers(a, d)) for a, d in zip(start, shape, strict=True))
                strides = tuple(draw(st.integers(1, 2)) for _ in shape)
                v = b.slice(v, start, limit, strides)
            elif s == "concat":
                v = b.concat([v, b.neg(v)], draw(st.integers(0, len(shape) - 1)))
        b.output("z", b.neg(v))

    return build("chain", body)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chains())
def test_random_relayout_chains_match_the_oracle(tmp_path: Path, p: Program) -> None:
    pl = plan(p, "xdna2")
    if not pl.admitted:  # an empty tensor a tile would stream: refused with its reason
        assert {r.fact("limit") for r in pl.refusals} <= {"stream_bytes"}, pl.refusals
        return
    run_and_compare(pl, tmp_path)
