"""Regions reused across identical layers: one artifact, one hardware context, one runtime
sequence per use.

The planner decides which regions share an artifact (``poot_planner.Region.artifact``, from
``artifact_key``); here the design holds it to that. A use (a region that runs an earlier
region's artifact) must be that region's design with its tiles, values and equations renamed:
the same cores on the same tiles with the same kernels, the same FIFOs, chunking, shims,
channels and buffer descriptors, the same flag chain. What may differ is where its streams and
its flag word live in the host arenas: which arena and at which offset. ``shape`` is a region
with all of that left out and every name replaced by its place; ``share`` checks a use against
its artifact's region on it (``DesignError`` otherwise: the planner's key and the design
disagree) and gives the use the artifact's kernel symbols and object file, so the artifact's
one kernel object serves every use.

How a use runs (``on_artifact``): the artifact's device body (cores, FIFOs, routes: the
xclbin, so the hardware context) with the use's own runtime sequence. In mlir-aie the
runtime sequence is lowered apart from the device body: each ``npu.dma_memcpy_nd`` becomes a
buffer-descriptor write and an address patch (``NpuAddressPatchOp``: runtime-sequence argument
``arg_idx`` plus a byte offset, patched with that argument's buffer address at every run;
lib/Conversion/AIEDmaToNpu.cpp at 19cce64c), so the arena offsets live only in the instruction
stream, never in the xclbin. The kernel call takes the instruction stream as an argument
(``kernel(opcode, bo_instr, n_words, bo0..bo4)``), so one ``xrt::kernel`` on one
``xrt::hw_context`` runs each use with its own instruction buffer: what
test/npu-xrt/add_one_two_txn/test.cpp in Xilinx/mlir-aie does (``run0`` and ``run1`` of one
``kernel0`` on one context, each with its own ``bo_instr`` and its own data buffers). The
arenas are the same buffer objects for every use (five at most: the ABI's ``bo0..bo4``,
``emit_design_kernel_json`` in python/compiler/aiecc/main.py), each use's sequence reading and
writing its own slots in them.

Why not one runtime-sequence argument per stream (each use passing sub-buffers of the arenas):
a region has up to 16 streams in and 16 out and the kernel takes five buffers, so the slots a
use reads cannot each be an argument; the offsets go in the instruction stream instead.

Why one context does not run several *different* regions: add_one_two_txn does that too, with a
configuration transaction (``aiecc --aie-generate-txn``) run before the second design's
instructions, which rewrites the array's cores, switches and locks. That is shown upstream on a
one-column device (``npu2_1col``) only; poot's regions take the whole array, their cores loop
forever across runs with lock state carried between them (``design``: depth-1 and depth-2
FIFOs), and reloading every core's program before every region of every step would cost a full
reconfiguration per kernel call, which nothing here can measure. Identical regions need none of
it: the array keeps the one configuration, so they share a context and the rest keep one each.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import replace

from poot_codegen.xdna.design import (
    DesignError,
    FlagPath,
    Port,
    ProgramDesign,
    RegionDesign,
    Transfer,
)

__all__ = ["artifact_regions", "canonical_kernels", "on_artifact", "shape", "share"]


def shape(region: RegionDesign) -> Hashable:
    """``region`` without its place in the program or the arenas: every FIFO, core and tile
    named by its place in the region, kernel symbols and arena offsets left out (a name the
    region does not define is None: such a design is refused by ``validate`` in any case)."""
    fifo = {f.name: k for k, f in enumerate(region.fifos)}
    tile = {c.tile: k for k, c in enumerate(region.cores)}

    def port(p: Port) -> Hashable:
        return (fifo.get(p.fifo), p.dtype, p.resident, p.elems, p.nbytes, p.pieces, p.hold)

    def transfer(t: Transfer) -> Hashable:
        return (t.direction, t.shim, t.channel, t.bd, t.nbytes, t.repeats)

    cores = tuple(
        (
            c.column,
            c.row,
            c.kind,
            tuple(port(p) for p in c.inputs),
            port(c.output),
            c.units,
            c.chunk,
            c.n_chunks,
            c.buffer_bytes,
            c.index_guard,
            c.index_axis,
        )
        for c in region.cores
    )
    fifos = tuple(
        (
            f.dtype,
            f.shape,
            f.depth,
            f.elems,
            f.nbytes,
            f.n_objects,
            f.resident,
            f.pieces,
            f.repeats,
            f.by_batch,
            None if f.producer is None else tile.get(f.producer),
            tuple(tile.get(t) for t in f.consumers),
            f.shim,
            f.source is not None,
            f.sink is not None,
        )
        for f in region.fifos
    )
    sequence = tuple((fifo.get(t.fifo), transfer(t)) for t in region.transfers)
    waits = tuple(fifo.get(w) for w in region.waits)
    flag = (tuple(tile.get(t) for t in region.flag.order), transfer(region.flag.transfer))
    return (cores, fifos, sequence, waits, flag)


def share(artifact: RegionDesign, use: RegionDesign) -> RegionDesign:
    """``use`` running ``artifact``'s artifact: its cores call ``artifact``'s kernels, its
    object file is ``artifact``'s (``DesignError`` when ``use`` is not ``artifact`` up to names
    and arena offsets)."""
    if shape(artifact) != shape(use):
        raise DesignError(
            f"runs region {artifact.index}'s artifact, but its design differs in more than its "
            "arena offsets",
            where=f"region {use.index}",
        )
    cores = tuple(
        replace(c, symbol=a.symbol) for a, c in zip(artifact.cores, use.cores, strict=True)
    )
    return replace(use, object_file=artifact.object_file, cores=cores, artifact=artifact.index)


def on_artifact(artifact: RegionDesign, use: RegionDesign) -> RegionDesign:
    """``use``'s runtime sequence on ``artifact``'s device body: ``artifact``'s cores and FIFOs
    (so its symbols), with each transfer, FIFO end and the flag word at ``use``'s arena and
    offset (matched by place: ``share`` has checked the two are one design). What the
    instruction stream of ``use`` is rendered from."""
    if shape(artifact) != shape(use):
        raise DesignError(
            f"not region {artifact.index}'s design up to arena offsets", where=f"region {use.index}"
        )
    fifos = tuple(
        replace(a, source=u.source, sink=u.sink)
        for a, u in zip(artifact.fifos, use.fifos, strict=True)
    )
    transfers = tuple(
        replace(a, arena=u.arena, offset=u.offset)
        for a, u in zip(artifact.transfers, use.transfers, strict=True)
    )
    t = use.flag.transfer
    flag = FlagPath(
        artifact.flag.order, replace(artifact.flag.transfer, arena=t.arena, offset=t.offset)
    )
    return replace(
        artifact,
        index=use.index,
        eqns=use.eqns,
        fifos=fifos,
        transfers=transfers,
        flag=flag,
        artifact=use.artifact,
    )


def artifact_regions(design: ProgramDesign) -> tuple[RegionDesign, ...]:
    """The regions whose artifacts a program loads (one hardware context each), in order."""
    return tuple(r for r in design.regions if r.artifact is None)


_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def canonical_kernels(source: str, symbols: tuple[str, ...]) -> str:
    """A region's kernel C (``kernels.region_source``) without comments, its kernels'
    ``symbols`` renamed by their place: two regions one artifact serves give the same text."""
    text = _COMMENT.sub("", source)
    for k, s in enumerate(symbols):
        text = re.sub(rf"\b{re.escape(s)}\b", f"poot_k{k}@", text)
    return text
