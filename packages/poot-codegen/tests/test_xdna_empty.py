"""Zero-size programs on XDNA2: the planner admits what the designer can build, or refuses it
with a typed limit; the designer never refuses an admitted plan. An admitted empty program runs
(nothing to do) on the host executor and matches the oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_codegen.xdna import design_program, render_program
from poot_codegen.xdna.execute import load_region_libraries, run_design
from poot_engine.blob_cache import BlobCache
from poot_ir import Builder, DType, Program, Var, evaluate
from poot_planner import RefusalKind, plan

F32, I32 = DType.F32, DType.I32
DIM = st.sampled_from([0, 0, 1, 2, 3])


@st.composite
def programs(draw: st.DrawFn) -> Program:
    """A few equations over shapes with zero dims: pointwise, last-axis reductions, gathers."""
    shape = tuple(draw(st.lists(DIM, min_size=1, max_size=3)))
    b = Builder("empty")
    x = b.slot("x", F32, shape)
    values: list[Var] = [x]
    for k in range(draw(st.integers(1, 4))):
        v = draw(st.sampled_from(values))
        match draw(st.sampled_from(["neg", "add", "exp", "sum", "max", "gather"])):
            case "neg":
                values.append(b.neg(v))
            case "exp":
                values.append(b.exp(b.mul(v, 0.5)))
            case "add":
                same = [w for w in values if w.shape == v.shape]
                values.append(b.add(v, draw(st.sampled_from(same))))
            case "sum" if v.type.rank:
                values.append(b.reduce_sum(v, -1))
            case "max" if v.type.rank:
                values.append(b.reduce_max(v, -1))
            case "gather" if v.type.rank:
                idx = b.slot(f"i{k}", I32, tuple(draw(st.lists(DIM, max_size=2))))
                values.append(b.gather(v, idx, axis=0))
            case _:
                values.append(b.neg(v))
    b.output("y", values[-1])
    if draw(st.booleans()):
        b.output("z", draw(st.sampled_from(values)))
    return b.build()


@settings(max_examples=150, derandomize=True, deadline=None)
@given(programs())
def test_the_designer_never_refuses_an_admitted_plan(program: Program) -> None:
    p = plan(program, "xdna2")
    if not p.admitted:
        for r in p.refusals:  # a typed limit naming the figure, or an ordinary refusal
            assert r.kind is not RefusalKind.REGION_LIMIT or r.fact("limit") in (
                "stream_bytes",
                "tensor_elements",
                "tile_bytes",
                "streams_per_tile",
            )
        return
    design = design_program(p)
    assert len(render_program(design)) == len(p.regions)
    for region in p.regions:
        for t in region.tiles:
            tensors = [op.var for op in t.inputs] + [t.output]
            assert all(v.type.size for v in tensors)  # no empty stream reaches the DMA


def _inputs(program: Program) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for a in program.args:
        t = a.var.type
        out[a.name] = (
            np.zeros(t.shape, np.int32)
            if t.dtype is I32
            else rng.uniform(-2, 2, t.shape).astype(np.float32)
        )
    return out


def _rows(shape: tuple[int, ...]) -> Program:
    b = Builder("rows")
    x = b.slot("x", F32, shape)
    b.output("s", b.reduce_sum(x, -1))
    b.output("m", b.reduce_max(x, -1))
    b.output("n", b.neg(x))
    return b.build()


@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 4), (2, 0, 3)], ids=str)
def test_empty_programs_run_and_match_the_oracle(shape: tuple[int, ...], tmp_path: Path) -> None:
    program = _rows(shape)
    p = plan(program, "xdna2").check()
    inputs = _inputs(program)
    got = run_design(design_program(p), load_region_libraries(p, BlobCache(tmp_path)), inputs)
    want = evaluate(program, inputs)
    for name, w in want.items():
        assert got[name].shape == w.shape and np.array_equal(got[name], w), name
