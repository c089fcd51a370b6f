"""XDNA2 region designs: the host layout, chunking, FIFOs, validation against every bound, and
end-to-end execution of a design (host-built kernels over numpy arenas) against the oracle."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xdna_programs
from poot_codegen.xdna.arenas import build_layout
from poot_codegen.xdna.design import (
    ARENA_ALIGN,
    FLAG_WORD,
    GUARD_WORD,
    LINK_DATA_BYTES,
    Arena,
    ArenaRole,
    DesignError,
    ProgramDesign,
    TransferDirection,
)
from poot_codegen.xdna.designer import build_design, design_program
from poot_codegen.xdna.execute import load_region_libraries, run_design
from poot_codegen.xdna.hostbuild import CSRC_DIR
from poot_codegen.xdna.kernels import region_source
from poot_codegen.xdna.validate import validate
from poot_engine.blob_cache import BlobCache
from poot_ir import Builder, DType, PlanRefused, Program, compare, evaluate, ops
from poot_planner import TARGETS, Plan, Target, plan

XDNA2 = TARGETS["xdna2"]
Array = np.ndarray[Any, np.dtype[Any]]


def relaxed(**limits: int) -> Target:
    """xdna2 with some region limits raised: to build a design past the real bounds."""
    assert XDNA2.region_limits is not None
    return dataclasses.replace(
        XDNA2, region_limits=dataclasses.replace(XDNA2.region_limits, **limits)
    )


def inputs_for(p: Program, seed: int = 0) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    out: dict[str, Array] = {}
    for a in p.args:
        t = a.var.type
        if t.dtype is DType.I32:  # gather indices: inside the axis, negatives included
            out[a.name] = rng.integers(-3, 3, t.shape).astype(np.int32)
        else:
            out[a.name] = rng.uniform(-2, 2, t.shape).astype(np.float32)
    return out


def run_and_compare(pl: Plan, cache: Path, inputs: dict[str, Array]) -> ProgramDesign:
    design = design_program(pl)
    got = run_design(design, load_region_libraries(pl, BlobCache(cache)), inputs)
    ref = evaluate(pl.program, inputs)
    assert set(got) == set(ref)
    for name, expected in ref.items():
        cmp = compare(got[name], expected, pl.numerics.bound)
        assert cmp.ok, f"{name}: {cmp}"
    return design


# -- the host layout --------------------------------------------------------------------------


def test_layout_offsets_are_fixed_aligned_and_disjoint() -> None:
    pl = plan(xdna2_two_regions(), "xdna2").check()
    layout = build_layout(pl)
    assert layout == build_layout(plan(xdna2_two_regions(), "xdna2"))  # fixed: same every time
    assert len(layout.arenas) <= 5
    roles = [a.role for a in layout.arenas]
    assert roles == [ArenaRole.INPUTS, ArenaRole.RESULTS, ArenaRole.SCRATCH, ArenaRole.FLAGS]
    # one flag word per region, in the last arena
    assert layout.arenas[-1].nbytes >= 4 * len(pl.regions)
    by_arena: dict[int, list[tuple[int, int]]] = {}
    for s in layout.slots:
        assert s.offset % ARENA_ALIGN == 0 and s.span % 4 == 0 and s.span >= s.nbytes
        assert s.offset + s.span <= layout.arenas[s.arena].nbytes
        by_arena.setdefault(s.arena, []).append((s.offset, s.offset + s.span))
    for spans in by_arena.values():
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    # the first region's partial sum reaches the second through the scratch arena
    handoff = pl.regions[0].host_out[0]
    assert layout.arenas[layout.slot(handoff.id).arena].role is ArenaRole.SCRATCH
    assert [b.name for b in layout.arguments] == [a.name for a in pl.program.args]
    assert [b.name for b in layout.results] == list(pl.program.result_names)


def xdna2_two_regions() -> Program:
    return xdna_programs.two_regions()


def test_weights_inputs_and_results_arenas_and_no_slot_for_internal_values() -> None:
    pl = plan(xdna_programs.chain(), "xdna2").check()
    design = design_program(pl)
    layout = design.layout
    assert [a.role for a in layout.arenas] == [ArenaRole.INPUTS, ArenaRole.RESULTS, ArenaRole.FLAGS]
    region = pl.regions[0]
    assert region.internal  # add -> mul -> exp move tile to tile
    for v in region.internal:
        assert not layout.has_slot(v.id)
        f = design.regions[0].fifo(f"v{v.id}")
        assert f.source is None and f.sink is None and f.shim is None and f.producer is not None
        with pytest.raises(DesignError, match="no host slot"):
            layout.slot(v.id)  # a typed error naming the value, not a bare KeyError
    with pytest.raises(DesignError, match="no FIFO"):
        design.regions[0].fifo("v999999")
    norm = plan(xdna_programs.rmsnorm_weight(), "xdna2").check()
    roles = [a.role for a in build_layout(norm).arenas]
    assert roles == [ArenaRole.WEIGHTS, ArenaRole.INPUTS, ArenaRole.RESULTS, ArenaRole.FLAGS]


def test_a_result_that_is_an_argument_shares_its_slot() -> None:
    b = Builder("passthrough")
    x = b.slot("x", DType.F32, (8,))
    b.output("same", x)
    b.output("neg", b.neg(x))
    layout = build_layout(plan(b.build(), "xdna2").check())
    assert layout.result("same") == layout.argument("x")


# -- end to end over numpy arenas -------------------------------------------------------------


@pytest.mark.parametrize("name", list(xdna_programs.EXAMPLES))
def test_example_designs_compute_what_the_oracle_computes(tmp_path: Path, name: str) -> None:
    p = xdna_programs.EXAMPLES[name]()
    inputs = inputs_for(p)
    if name in {"k_streamed", "batch_held"}:
        # a matmul's contract is relative to sum |a||b|, which is |y| only where nothing
        # cancels: nonnegative operands, for the plan's relative bound to be the one to hold
        inputs = {k: np.abs(v) for k, v in inputs.items()}
    run_and_compare(plan(p, "xdna2").check(), tmp_path, inputs)


def test_tiles_sharing_a_fifo_make_the_same_number_of_calls(tmp_path: Path) -> None:
    # alone, the exp tile would take 2 chunks of 3000 and the row sum 1 chunk of 6 rows; one
    # FIFO between them needs one object size, so both make 2 calls
    b = Builder("harmonized")
    x = b.slot("x", DType.F32, (6, 1000))
    b.output("s", b.reduce_sum(b.exp(x), -1))
    pl = plan(b.build(), "xdna2").check()
    assert [t.n_chunks for t in pl.tiles] == [2, 2]  # the planner chunks them as they run
    design = run_and_compare(pl, tmp_path, inputs_for(pl.program))
    exp, row = design.regions[0].cores
    assert exp.n_chunks == row.n_chunks == 2 and row.chunk == 3 and exp.chunk == 3000
    link = design.regions[0].fifo(exp.output.fifo)
    assert (link.elems, link.n_objects, link.depth) == (3000, 2, 2)


def test_tiles_that_fit_alone_but_no_shared_chunking_go_to_two_regions(tmp_path: Path) -> None:
    # one row of 5000: the row sum makes one call, so a shared FIFO would need the exp tile to
    # hold 2 x 20000 bytes in and 2 x 20000 out; the planner closes the region instead, and the
    # value crosses through host memory with each tile chunked on its own
    b = Builder("unchunkable")
    x = b.slot("x", DType.F32, (1, 5000))
    b.output("s", b.reduce_sum(b.exp(x), -1))
    pl = plan(b.build(), "xdna2").check()
    assert len(pl.regions) == 2
    assert all(t.tile_bytes <= 64512 for t in pl.tiles)
    design = run_and_compare(pl, tmp_path, inputs_for(pl.program))
    assert len(design.regions) == 2


def test_a_resident_fifo_is_one_object_and_its_producer_makes_one_call(tmp_path: Path) -> None:
    b = Builder("gather2")
    inner = b.gather(b.weight("perm", DType.I32, (12,)), b.slot("i", DType.I32, (12,)), 0)
    b.output("g", b.gather(b.weight("t", DType.F32, (12, 5)), inner, 0))
    pl = plan(b.build(), "xdna2").check()
    inputs = {
        "perm": np.arange(12, dtype=np.int32)[::-1].copy(),
        "i": np.array([0, -1, 5, 3, 2, -12, 7, 8, 9, 10, 11, 1], np.int32),
        "t": np.random.default_rng(1).standard_normal((12, 5)).astype(np.float32),
    }
    design = run_and_compare(pl, tmp_path, inputs)
    first, second = design.regions[0].cores
    f = design.regions[0].fifo(first.output.fifo)
    assert f.resident and f.depth == 1 and f.n_objects == 1 and first.n_chunks == 1
    assert second.inputs[1].resident


def test_a_bool_output_is_padded_to_whole_words(tmp_path: Path) -> None:
    b = Builder("bools")
    x = b.slot("x", DType.F32, (7,))
    b.output("q", b.ge(x, 0.0))
    pl = plan(b.build(), "xdna2").check()
    design = run_and_compare(pl, tmp_path, {"x": np.linspace(-3, 3, 7).astype(np.float32)})
    f = design.regions[0].fifo(design.regions[0].cores[0].output.fifo)
    assert (f.elems, f.nbytes, f.n_objects) == (7, 8, 1)
    slot = design.layout.result("q")
    assert (slot.nbytes, slot.span) == (7, 8)


def test_dead_code_designs_and_runs(tmp_path: Path) -> None:
    """Regression: a dead equation's tile made a FIFO nobody reads, which validation refused."""
    b = Builder("dead")
    x, w = b.slot("x", DType.F32, (2, 8)), b.slot("w", DType.F32, (2, 8))
    b.exp(x)  # nothing reads it
    b.output("y", b.recip(w))
    pl = plan(b.build(), "xdna2").check()
    inputs = {"x": np.zeros((2, 8), np.float32), "w": np.full((2, 8), 2.0, np.float32)}
    design = run_and_compare(pl, tmp_path, inputs)
    assert [c.eqns for r in design.regions for c in r.cores] == [(1,)]


def test_sequence_sends_every_input_then_drains_and_waits_on_every_output() -> None:
    design = design_program(plan(xdna_programs.two_regions(), "xdna2").check())
    first = design.regions[0]
    ins = [t for t in first.transfers if t.direction is TransferDirection.TO_DEVICE]
    outs = [t for t in first.transfers if t.direction is TransferDirection.FROM_DEVICE]
    assert first.transfers == (*ins, *outs) and len(ins) == 16 and len(outs) == 1
    assert sorted({t.shim for t in ins}) == list(range(8))  # 2 channels on each of 8 shims
    assert first.waits == tuple(t.fifo for t in outs)


# -- validation: a design past each bound -----------------------------------------------------


def _past(program: Program, **limits: int) -> ProgramDesign:
    """A design of ``program`` built under raised limits, carrying the real ones."""
    design = build_design(plan(program, relaxed(**limits)).check())
    assert XDNA2.region_limits is not None
    return dataclasses.replace(design, limits=XDNA2.region_limits)


def _negs(n: int) -> Program:
    b = Builder("negs")
    x = b.slot("x", DType.F32, (4,))
    for _ in range(n):
        x = b.neg(x)
    b.output("y", x)
    return b.build()


def _fanout(n: int) -> Program:
    b = Builder("fanout")
    x = b.slot("x", DType.F32, (4,))
    for i in range(n):
        b.output(f"y{i}", b.neg(x))
    return b.build()


def _three_streams() -> Program:
    b = Builder("three")
    x = b.slot("x", DType.F32, (4, 64))
    y = ops.rmsnorm(b, x, b.weight("w", DType.F32, (64,)))
    b.output("y", b.mul(y, b.weight("w2", DType.F32, (64,))))
    return b.build()


def _big() -> Program:
    b = Builder("big")
    b.output("y", b.exp(b.slot("x", DType.F32, (40000,))))
    return b.build()


@pytest.mark.parametrize(
    ("program", "limits", "bound", "needed", "available"),
    [
        (_negs(33), {"compute_tiles": 64}, "compute tiles", 33, 32),
        (xdna_programs.two_regions(17), {"host_streams_in": 32}, "host streams in", 17, 16),
        # 17 values and the flag word
        (_fanout(17), {"host_streams_out": 32}, "host streams out", 18, 16),
        (_three_streams(), {"streams_per_tile": 3}, "streams into a tile", 3, 2),
        # the tensor in and out, double buffered, the one core's flag word and the link's data
        (_big(), {"tile_bytes": 1 << 20}, "tile-local bytes", 640260, 64512),
    ],
)
def test_validation_refuses_a_design_past_each_bound(
    program: Program, limits: dict[str, int], bound: str, needed: int, available: int
) -> None:
    with pytest.raises(DesignError) as err:
        validate(_past(program, **limits))
    assert (err.value.bound, err.value.needed, err.value.available) == (bound, needed, available)


def test_validation_refuses_three_streams_on_one_shim() -> None:
    raised = relaxed(host_streams_in=32)
    design = build_design(plan(xdna_programs.two_regions(17), raised).check())
    with pytest.raises(DesignError) as err:
        validate(design)  # under its own raised limits: the 17th stream finds no free shim
    assert err.value.bound.startswith("shim") and (err.value.needed, err.value.available) == (3, 2)


def test_validation_refuses_more_than_five_host_buffers() -> None:
    design = design_program(plan(xdna_programs.chain(), "xdna2").check())
    arenas = tuple(Arena(i, ArenaRole.SCRATCH, ARENA_ALIGN) for i in range(6))
    bad = dataclasses.replace(design, layout=dataclasses.replace(design.layout, arenas=arenas))
    with pytest.raises(DesignError) as err:
        validate(bad)
    assert (err.value.bound, err.value.needed, err.value.available) == (
        "host buffers per kernel call",
        6,
        5,
    )


def test_validation_refuses_endpoints_that_disagree_on_an_object() -> None:
    design = design_program(plan(xdna_programs.chain(), "xdna2").check())
    region = design.regions[0]
    core = region.cores[0]
    bad_core = dataclasses.replace(core, output=dataclasses.replace(core.output, elems=1))
    bad = dataclasses.replace(region, cores=(bad_core, *region.cores[1:]))
    with pytest.raises(DesignError, match="disagrees"):
        validate(dataclasses.replace(design, regions=(bad,)))
    overlapping = dataclasses.replace(design.layout.slots[1], offset=0)
    slots = (design.layout.slots[0], overlapping, *design.layout.slots[2:])
    layout = dataclasses.replace(design.layout, slots=slots)
    if overlapping.arena == design.layout.slots[0].arena:
        with pytest.raises(DesignError, match="overlap"):
            validate(dataclasses.replace(design, layout=layout))


def test_refused_plans_and_other_targets_have_no_design() -> None:
    b = Builder("softmax")
    x = b.slot("x", DType.F32, (4, 8))
    b.output("y", ops.softmax(b, x))
    with pytest.raises(PlanRefused):
        design_program(plan(b.build(), "xdna2"))
    with pytest.raises(DesignError, match="no region limits"):
        design_program(plan(xdna_programs.chain(), "cpu"))


# -- the flag path's and the guard count's bytes -----------------------------------------------


@pytest.mark.parametrize("name", sorted(xdna_programs.EXAMPLES))
def test_the_guard_count_is_the_only_data_a_region_object_defines(
    name: str, tmp_path: Path
) -> None:
    """Every region object defines one ``uint32_t poot_guard_word`` (4 bytes of data memory
    beside the FIFO buffers, ``GUARD_WORD``) and no other global: compiled with the host C
    compiler, its sized data symbols are that one word."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) to list the object's symbols")
    pl = plan(xdna_programs.EXAMPLES[name](), "xdna2").check()
    for r in pl.regions:
        src, obj = tmp_path / f"r{r.index}.c", tmp_path / f"r{r.index}.o"
        src.write_text(region_source(pl, r), encoding="utf-8")
        subprocess.run(
            ["cc", "-c", "-O2", "-std=c11", "-I", str(CSRC_DIR), str(src), "-o", str(obj)],
            check=True,
        )
        listed = subprocess.run(
            [nm, "-S", "--defined-only", str(obj)], capture_output=True, text=True, check=True
        ).stdout
        data = [
            (f[3], f[2], int(f[1], 16))
            for f in (line.split() for line in listed.splitlines())
            if len(f) == 4 and f[2] in "BbDdRrGgSsVv" and not f[3].startswith(".")
        ]
        assert data == [("poot_guard_word", "B", GUARD_WORD)]
    assert GUARD_WORD == 4


def test_each_core_counts_the_flag_words_and_the_links_data() -> None:
    """The chain's first core holds the word it makes; every other core the word it takes too;
    each, past its buffers, the link's data sections (its guard count among them). The planner
    counts the most any core holds on every tile."""
    pl = plan(_negs(3), "xdna2").check()
    (region,) = build_design(pl).regions
    first = region.flag.order[0]
    fifos = {f.name: f for f in region.fifos}
    for core in region.cores:
        fifo_bytes = sum(
            fifos[p.fifo].depth * fifos[p.fifo].nbytes for p in (*core.inputs, core.output)
        )
        words = 4 if core.tile == first else 4 + 4
        assert core.buffer_bytes == fifo_bytes + words + LINK_DATA_BYTES
    limits = XDNA2.region_limits
    assert limits is not None
    assert limits.flag_bytes == 2 * FLAG_WORD == 8
    assert limits.link_data_bytes == LINK_DATA_BYTES >= GUARD_WORD
    assert all(t.tile_bytes == 2 * (16 + 16) + 8 + LINK_DATA_BYTES for t in pl.tiles)


# aiecc's linker script (mlir-aie lib/Targets/AIETargetLdScript.cpp): the stack at the bottom
# of the tile's 64 KiB, then its buffers; the ``data`` region, where ``.data``, ``.rodata`` and
# ``.bss`` go, starts at the end of the highest buffer and runs to the end of the tile.
TILE_MEMORY, STACK = 64 * 1024, 1024


def _link_data_region(buffers: int) -> int:
    """Bytes of the linker script's ``data`` region of a core whose buffers (packed from the
    stack's end, as the basic-sequential allocator does) take ``buffers`` bytes."""
    return TILE_MEMORY - (STACK + buffers)


@pytest.mark.parametrize(("rows", "fits"), [(16059, True), (16060, False)])
def test_a_gather_at_the_tile_byte_limit_designs_validates_and_links(rows: int, fits: bool) -> None:
    """The table (rows x 1 f32) and one index resident, the gathered row double buffered, the
    flag path's words and the link's data: 16059 rows meet 64512 exactly and leave the link's
    data region its reserve (the guard word and 252 bytes more); one more row is refused."""
    b = Builder("gather")
    table = b.weight("t", DType.F32, (rows, 1))
    b.output("y", b.gather(table, b.slot("i", DType.I32, (1,))))
    pl = plan(b.build(), "xdna2")
    fifo_bytes = 4 * rows + 4 + 2 * 4
    needed = fifo_bytes + 2 * FLAG_WORD + LINK_DATA_BYTES
    if not fits:
        assert not pl.admitted and pl.refusals[0].fact("needed") == needed > 64512
        return
    assert needed == 64512 and pl.admitted and pl.tiles[0].tile_bytes == needed
    (region,) = validate(build_design(pl)).regions
    (core,) = region.cores  # the chain's only core: its word out, no word in
    assert core.buffer_bytes == needed - FLAG_WORD <= 64512
    buffers = fifo_bytes + FLAG_WORD  # what the allocator places: the FIFOs and the word out
    assert _link_data_region(buffers) == LINK_DATA_BYTES + FLAG_WORD  # the word in is not there
    assert _link_data_region(buffers) - GUARD_WORD >= 252  # room for the objects' own data
