"""XDNA2 kernels of the matmul tile and the broadcast tile (``KernelClass.MATMUL``,
``KernelClass.BROADCAST``), in the ABI of ``poot_codegen.xdna.kernels``.

MATMUL computes ``[..., M, K] @ [..., K, N]``: ``in0`` is this call's rows of ``a`` (``units``
rows of K), ``in1`` the whole of ``b`` (resident), ``out`` the call's rows of N; the batch of
row ``first_unit + u`` is its index over M. The arithmetic is upstream's aie2p one, decided in
``poot_planner.targets.xdna2.MATMUL_CONTRACT`` (mlir-aie @19cce64c ``aie_kernels/aie2p/mm.cc``:
``zero_`` then ``matmul`` over K, ``aie::mmul<4, 8, 8>`` on bf16, whose aie_api @2a408059
lowering ``mac_4x8_8x8_bf16`` is a dependent chain of ``mac_elem_32`` in order of k): each
operand rounded to bf16 (RNE, ``poot_bf16.h``), each product exact in f32, added in order of k
from +0 into an f32 accumulator. Written as scalar C, the host compiler computes exactly that,
so the ``xdna-host`` stand-in is bit for bit the arithmetic the contract is derived from; the
vectorized ``aie::mmul`` body with the memtile's tiling (whole_array.py's
``dimensionsToStream``) computes the same sums in the same order, and is the kernel's
hardware form still to come (the scalar one compiles with Peano as it is).

A right operand past a tile's memory is streamed in pieces of K rows (``TileOp.pieces`` > 1,
``poot_planner.xdna2.tiles.stream_k``): the kernel is called once per piece ``piece`` of each
chunk, ``in1`` that piece's ``[K/pieces, N]`` rows, and each output element's accumulator
lives in ``out`` between the calls, in f32: it starts from +0 at piece 0 and adds the piece's
terms in order of k. Storing and reloading an f32 is exact, so each element's sum is the same
dependent chain over k = 0..K-1 as unchunked, bit for bit (upstream's ``matmul`` does the same
with C read-modify-written per K chunk), and the contract is unchanged.

A batched right operand no tile holds whole is held one batch at a time
(``TileOp.by_batch``, ``poot_planner.xdna2.tiles.hold_batches``): ``in1`` is the batch of the
call's rows, all of which lie in one batch.

BROADCAST copies its resident operand's words to each output element's place (bit for bit).
"""

from __future__ import annotations

import math

from poot_ir import BroadcastParams, DType, Eqn, NoLowering, Var
from poot_planner import TileOp

from poot_codegen.xdna.cexpr import TARGET
from poot_codegen.xdna.guards import LOCAL, KernelGuards

__all__ = ["BF16_INCLUDE", "broadcast_body", "matmul_body"]

#: What a matmul kernel's translation unit includes before it (guarded: once per unit).
BF16_INCLUDE = '#include "poot_bf16.h"\n'


def matmul_body(tile: TileOp, e: Eqn, index: int, guards: KernelGuards) -> str:
    """The body of a matmul tile's kernel (see the module)."""
    a, b = e.inputs
    if (
        not isinstance(a, Var)
        or not isinstance(b, Var)
        or a.dtype is not DType.F32
        or b.dtype is not DType.F32
    ):
        raise NoLowering(TARGET, index, e.prim.value, "matmul of f32 tensors")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if k == 0:  # empty sums: +0 (no operand is streamed)
        return (
            "    (void)first_unit;\n    for (int32_t i = 0; i < units * "
            + f"{n}; i++) out[i] = 0.0f;\n"
        )
    guard = guards.line(index, e, ["a[k]", f"b[k * {n} + j]"], "acc")
    pieces = tile.pieces
    if pieces > 1:  # a K-streamed b: this call adds the terms of piece ``piece`` only
        kp = k // pieces
        setup = [
            "    (void)first_unit;\n",
            "    for (int32_t u = 0; u < units; u++) {\n",
            f"        const float* a = in0 + u * {k} + piece * {kp};\n",
            "        const float* b = in1;\n",
        ]
        # the f32 accumulator held in ``out`` between pieces: +0 at the first (upstream's zero_)
        start = "            float acc = piece == 0 ? 0.0f : y[j];\n"
        # overflow is judged on the whole sum, after the last piece
        check = f"            if (piece == {pieces - 1}) {LOCAL} += poot_g_nonfinite(acc);\n"
    else:
        kp = k
        # a batch-held b is this call's batch (all its rows are in one): else, the whole b
        batch = "" if tile.by_batch else f" + ((first_unit + u) / {m}) * {k * n}"
        setup = [
            *(["    (void)first_unit;\n"] if tile.by_batch else []),
            "    for (int32_t u = 0; u < units; u++) {\n",
            f"        const float* a = in0 + u * {k};\n",
            f"        const float* b = in1{batch};\n",
        ]
        start = "            float acc = 0.0f; /* upstream's zero_ */\n"
        check = f"            {LOCAL} += poot_g_nonfinite(acc);\n"
    lines = [
        *setup,
        f"        float* y = out + u * {n};\n",
        f"        for (int32_t j = 0; j < {n}; j++) {{\n",
        start,
        f"            for (int32_t k = 0; k < {kp}; k++) {{\n",
        "                /* bf16 x bf16 is exact in f32: only the add rounds */\n",
        f"                acc = acc + poot_bf16f(a[k]) * poot_bf16f(b[k * {n} + j]);\n",
        *([f"                {guard}\n"] if guard is not None else []),
        "            }\n",
        # an operand outside the domain is counted above; an accumulator that overflowed
        # from operands inside it is counted here (past F32's range nothing is promised)
        *([check] if guard is not None else []),
        "            y[j] = acc;\n",
        "        }\n",
        "    }\n",
    ]
    return "".join(lines)


def broadcast_body(tile: TileOp, e: Eqn, index: int) -> str:
    """The body of a broadcast tile's kernel: each output element's source found by integer
    divides over the output's axes, copied as a 32-bit word."""
    x, p = e.inputs[0], e.params
    if not isinstance(x, Var) or not isinstance(p, BroadcastParams) or x.dtype.itemsize != 4:
        raise NoLowering(TARGET, index, e.prim.value, "broadcast of a 32-bit tensor")
    in_strides = [math.prod(x.shape[i + 1 :]) for i in range(x.type.rank)]
    source = {d: i for i, d in enumerate(p.dims)}
    lines = [
        "    const uint32_t* src = (const uint32_t*)(const void*)in0;\n",
        "    uint32_t* dst = (uint32_t*)(void*)out;\n",
        "    for (int32_t u = 0; u < units; u++) {\n",
        "        int32_t rest = first_unit + u, at = 0;\n",
    ]
    for d in reversed(range(len(p.shape))):
        size = p.shape[d]
        i = source.get(d)
        if i is not None and x.shape[i] == size and size > 1:
            lines.append(f"        at += (rest % {size}) * {in_strides[i]};\n")
        if d > 0 and size != 1:
            lines.append(f"        rest /= {size};\n")
    lines += ["        dst[u] = src[at];\n", "    }\n"]
    return "".join(lines)
