"""The matmul tile in a region design and its MLIR-AIE: the kernel call and its object FIFOs.

The design is upstream's single-core matmul (mlir-aie @19cce64c
``programming_examples/basic/matrix_multiplication/single_core/single_core_placed.py``: A and
B in, C out, one core) with B held resident: A streams as rows, depth 2 (double buffered, as
upstream's FIFOs), B is one object of depth 1 reaching the core once per run, C streams out by
the same rows; the core calls ``poot_t<k>(A chunk, B, C chunk, units, first_unit)`` once per
chunk (upstream's ``matmul(A, B, C)`` per K block, here one block: K whole).
"""

from __future__ import annotations

import re

from poot_codegen.xdna.designer import design_program
from poot_codegen.xdna.kernels import region_source
from poot_codegen.xdna.mlir import render_region
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


def test_a_right_operand_too_large_for_a_tile_is_refused_with_its_limit() -> None:
    b = Builder("big")
    b.output("y", b.matmul(b.slot("a", F32, (4, 256)), b.weight("w", F32, (256, 256))))
    (r,) = plan(b.build(), XDNA2).refusals
    assert r.fact("limit") == "tile_bytes"
