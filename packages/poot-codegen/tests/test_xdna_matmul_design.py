"""The matmul tile in a region design and its MLIR-AIE: the kernel call and its object FIFOs.

The design is upstream's single-core matmul (mlir-aie @19cce64c
``programming_examples/basic/matrix_multiplication/single_core/single_core_placed.py``: A and
B in, C out, one core) with B held resident: A streams as rows, depth 2 (double buffered, as
upstream's FIFOs), B is one object of depth 1 reaching the core once per run, C streams out by
the same rows; the core calls ``poot_t<k>(A chunk, B, C chunk, units, first_unit)`` once per
chunk (upstream's ``matmul(A, B, C)`` per K block, here one block: K whole).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from poot_codegen.xdna.design import DesignError
from poot_codegen.xdna.designer import design_program
from poot_codegen.xdna.kernels import region_source
from poot_codegen.xdna.mlir import render_region
from poot_codegen.xdna.validate import validate
from poot_ir import Builder, DType, Prim
from poot_planner import TARGETS, KernelClass, plan

F32 = DType.F32
XDNA2 = TARGETS["xdna2"]


def _planned(m: int, k: int, n: int, batch: tuple[int, ...] = ()) -> object:
    b = Builder("mm")
    a, w = b.slot("a", F32, (*batch, m, k)), b.weight("w", F32, (*batch, k, n))
    b.output("y", b.matmul(a, w))
    return plan(b.build(), XDNA2).check()


def test_the_core_calls_the_kernel_over_its_fifos() -> None:
    p = _planned(200, 40, 8, (3,))
    (tile,) = p.tiles  # type: ignore[attr-defined]
    assert tile.kind is KernelClass.MATMUL and tile.n_chunks > 1
    text = render_region(design_program(p), 0)  # type: ignore[arg-type]
    a, c = tile.chunk * 40, tile.chunk * 8
    call = re.search(
        r"func\.call @poot_t0\((%\w+), (%\w+), (%\w+), %units, %first\) : "
        r"\(memref<(\d+)xf32>, memref<(\d+)xf32>, memref<(\d+)xf32>, i32, i32\)",
        text,
    )
    assert call is not None, text
    assert [int(call.group(i)) for i in (4, 5, 6)] == [a, 3 * 40 * 8, c]
    # A double buffered, B one resident object, C double buffered
    assert re.search(rf"objectfifo @v0\(.*2 : i32\) : !aie.objectfifo<memref<{a}xf32>>", text)
    assert re.search(r"objectfifo @v1\(.*1 : i32\) : !aie.objectfifo<memref<960xf32>>", text)
    assert re.search(rf"objectfifo @v2\(.*2 : i32\) : !aie.objectfifo<memref<{c}xf32>>", text)


def test_the_kernel_rounds_operands_and_adds_in_order_of_k() -> None:
    p = _planned(4, 16, 3)
    src = region_source(p, 0)  # type: ignore[arg-type]
    assert '#include "poot_bf16.h"' in src
    assert "acc = acc + poot_bf16f(a[k]) * poot_bf16f(b[k * 3 + j]);" in src
    assert "for (int32_t k = 0; k < 16; k++)" in src


def test_program_memory_estimate_covers_the_kernel() -> None:
    (tile,) = _planned(4, 16, 3).tiles  # type: ignore[attr-defined]
    sizes = XDNA2.code_size
    assert sizes is not None
    routines = dict(sizes.routines)
    body = {p: n for p, _, n in sizes.bodies}[Prim.MATMUL]
    calls = routines["addsf3"] + routines["mulsf3"] + routines["cmpsf2"]  # the guard compares
    assert tile.code_bytes == sizes.base + calls + body
    assert tile.code_bytes <= sizes.program_bytes


def test_a_right_operand_past_a_tile_streams_in_pieces_of_k() -> None:
    p = _planned(6, 256, 256)  # b is 256 KiB: no tile holds it
    (tile,) = p.tiles  # type: ignore[attr-defined]
    b_op = tile.inputs[1]
    assert b_op.pieces > 1 and not b_op.resident and 256 % b_op.pieces == 0
    design = design_program(p)  # type: ignore[arg-type]
    (core,) = design.regions[0].cores
    w = design.regions[0].fifo(core.inputs[1].fifo)
    rows = 256 // b_op.pieces
    # two objects of one piece each, the tensor passed once per call
    assert (w.depth, w.elems, w.pieces, w.repeats) == (2, rows * 256, b_op.pieces, core.n_chunks)
    assert w.n_objects == w.pieces * w.repeats
    assert core.buffer_bytes <= design.limits.tile_bytes
    (sent,) = [t for t in design.regions[0].transfers if t.fifo == w.name]
    assert (sent.nbytes, sent.repeats) == (256 * 256 * 4, core.n_chunks)
    text = render_region(design, 0)
    assert f"[{core.n_chunks}, 1, 1, {256 * 256 * 4}][0, 0, 0, 1]) {{id = " in text
    assert f"%pieces = arith.constant {b_op.pieces} : index" in text
    assert re.search(r"func\.call @poot_t0\(%\w+, %\w+, %\w+, %units, %first, %piece\)", text)
    src = region_source(p, 0)  # type: ignore[arg-type]
    assert "int32_t first_unit, int32_t piece)" in src
    assert "float acc = piece == 0 ? 0.0f : y[j];" in src
    assert f"const float* a = in0 + u * 256 + piece * {rows};" in src


def test_a_batched_right_operand_past_a_tile_is_held_one_batch_at_a_time() -> None:
    p = _planned(48, 64, 100, (3,))  # 75 KiB in all, 25 KiB a batch
    (tile,) = p.tiles  # type: ignore[attr-defined]
    assert tile.by_batch and tile.pieces == 1
    design = design_program(p)  # type: ignore[arg-type]
    (core,) = design.regions[0].cores
    held = core.inputs[1]
    w = design.regions[0].fifo(held.fifo)
    # one object per batch, depth 1, each held across the calls of its batch's 48 rows
    assert (w.depth, w.n_objects, w.elems, w.by_batch) == (1, 3, 64 * 100, True)
    assert held.hold * w.n_objects == core.n_chunks and core.chunk * held.hold == 48
    text = render_region(design, 0)
    assert "%held = arith.constant 3 : index" in text
    assert f"%calls = arith.constant {held.hold} : index" in text
    src = region_source(p, 0)  # type: ignore[arg-type]
    assert "const float* b = in1;" in src
    # a call whose rows would cross a batch: refused
    odd = dataclasses.replace(core, chunk=core.chunk * 2, n_chunks=core.n_chunks // 2)
    region = dataclasses.replace(design.regions[0], cores=(odd,))
    with pytest.raises(DesignError):
        validate(dataclasses.replace(design, regions=(region,)))


@pytest.mark.parametrize(
    ("a", "b", "limit"),
    [
        # a batch of right operands, one batch past a tile: each call would need its own
        # batch's pieces
        ((3, 4, 256), (3, 256, 256), "tile_bytes"),
        # one output row double buffered is already past the tile
        ((2, 4), (4, 8192), "tile_bytes"),
        # fits one row a call, in more calls than the shim passes the operand (its repeat size)
        ((128, 3072), (3072, 768), "transfer_repeats"),
    ],
)
def test_what_still_cannot_fit_is_refused_with_its_limit(
    a: tuple[int, ...], b: tuple[int, ...], limit: str
) -> None:
    bl = Builder("big")
    bl.output("y", bl.matmul(bl.slot("a", F32, a), bl.weight("w", F32, b)))
    (r,) = plan(bl.build(), XDNA2).refusals
    assert r.fact("limit") == limit


def test_validation_holds_a_k_streamed_operand_to_its_bounds() -> None:
    design = design_program(_planned(6, 256, 256))  # type: ignore[arg-type]
    region = design.regions[0]
    (core,) = region.cores
    # a shim that passes a tensor fewer times than the core makes calls
    fewer = dataclasses.replace(design.limits, transfer_repeats=core.n_chunks - 1)
    with pytest.raises(DesignError) as e:
        validate(dataclasses.replace(design, limits=fewer))
    assert (e.value.bound, e.value.needed) == ("transfer repeats", core.n_chunks)
    # a port that does not take the FIFO's pieces
    port = dataclasses.replace(core.inputs[1], pieces=1)
    odd = dataclasses.replace(core, inputs=(core.inputs[0], port))
    with pytest.raises(DesignError):
        validate(dataclasses.replace(design, regions=(dataclasses.replace(region, cores=(odd,)),)))
