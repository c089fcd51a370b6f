"""Check an XDNA2 design against every bound and against itself, before anything is rendered.

The bounds (``RegionLimits``, measured on Strix Halo): 32 compute tiles on 8 columns x rows
2..5; 16 host streams in and 16 out, spread over the 8 shims, 2 channels each way per shim
(and 16 buffer descriptors per shim); at most 2 streams into and out of a compute tile; at
most 64512 bytes per tile (64 KiB less the 1 KiB stack) of FIFO buffers, flag words and the
link's data sections after them (``design.reserved_bytes``); at most 5 host
buffers per kernel call. The consistency rules are the execution contract of ``design``:
every FIFO object has one size all its endpoints agree on, every streaming endpoint makes as
many calls as the FIFO has objects, every transfer covers its slot's whole tensor.

Host relayouts (``design.Relayout``) read and write only slots, in step order (``after``
ascending, within the regions' count); an alias slot is its root's bytes exactly, and a copy's
output has bytes of its own, sized as its relayout makes it.

The flag path (``design.FlagPath``) is counted with them: its words in each core's bytes, its
drain among the host streams out, the shim's channels and buffer descriptors, and beside the
last core's data output (two streams out of a tile at most); its chain visits every core once,
each step between memory neighbours (which is what lets mlir-aie make the link shared memory:
no DMA channel), and its word lands at the region's place in the flags arena.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter

from poot_planner import IndexGuard, KernelClass, RegionLimits

from poot_codegen.xdna.design import (
    COMPUTE_ROWS,
    FLAG_WORD,
    SHIM_BDS,
    SHIM_CHANNELS,
    SHIM_COLUMNS,
    ArenaRole,
    Core,
    DesignError,
    Fifo,
    HostLayout,
    ProgramDesign,
    RegionDesign,
    Relayout,
    RelayoutKind,
    TransferDirection,
    flag_fifo,
    reserved_bytes,
    words,
)
from poot_codegen.xdna.reuse import shape

__all__ = ["validate", "validate_layout", "validate_region"]

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def validate(design: ProgramDesign) -> ProgramDesign:
    """``design``, or ``DesignError`` for the first bound or rule it breaks."""
    validate_layout(design.layout, design.limits)
    flags = design.layout.arena(ArenaRole.FLAGS)
    if design.regions:
        need = FLAG_WORD * len(design.regions)
        have = 0 if flags is None else flags.nbytes
        _check(have >= need, "flags arena bytes", "host layout", need, have)
    for r in design.regions:
        validate_region(r, design.layout, design.limits)
        if r.artifact is not None:
            _validate_use(design, r)
    validate_relayouts(design)
    return design


def _validate_use(design: ProgramDesign, use: RegionDesign) -> None:
    """A region running an earlier region's artifact (``reuse``) is that region's design up to
    names and arena offsets, and calls its kernels from its object."""
    where = f"region {use.index}"
    a = use.artifact
    _check(a is not None and 0 <= a < use.index, "an artifact of a later region", where)
    assert a is not None
    of = design.regions[a]
    _check(of.artifact is None, "an artifact of a region that runs another's", where)
    _check(shape(of) == shape(use), f"a design other than region {a}'s, its artifact", where)
    same = of.object_file == use.object_file and all(
        x.symbol == y.symbol for x, y in zip(of.cores, use.cores, strict=True)
    )
    _check(same, f"kernels other than region {a}'s, its artifact", where)


def validate_relayouts(design: ProgramDesign) -> None:
    """Each host relayout between slots, in step order, its output's shape its relayout's."""
    layout, n = design.layout, len(design.regions)
    after = -1
    for h in design.relayouts:
        where = f"relayout at equation {h.eqn}"
        _check(after <= h.after <= n, "a relayout out of step order", where, h.after, n)
        after = h.after
        counter = h.kind is RelayoutKind.COUNTER  # the one relayout written from nothing
        _check(bool(h.sources) != counter, f"a {h.kind.value} of {len(h.sources)} operands", where)
        _check(
            h.kind is RelayoutKind.CONCAT or len(h.sources) <= 1,
            f"a {h.kind.value} of {len(h.sources)} operands (one expected)",
            where,
        )
        for v in (*h.sources, h.target):
            _check(layout.has_slot(v), f"%{v} has no host slot", where)
        src = [layout.slot(v) for v in h.sources]
        out = layout.slot(h.target)
        dtypes = [s.dtype for s in src] if src else [h.dtype]
        _check(all(d is out.dtype for d in dtypes), "a relayout that changes the dtype", where)
        shape = _relayout_shape(h, [s.shape for s in src], where)
        alias = h.kind is RelayoutKind.ALIAS
        if alias:  # the same elements, row-major, read with another shape
            shape = out.shape if math.prod(shape) == math.prod(out.shape) else shape
            _check(out.root == _root(layout, h.sources[0]), "an alias of another's bytes", where)
        _check(shape == out.shape, "a relayout output not shaped as its relayout makes it", where)
        _check(
            (out.root is not None) == alias, "an alias without a root (or a copy with one)", where
        )


def _root(layout: HostLayout, value: int) -> int:
    s = layout.slot(value)
    return s.value if s.root is None else s.root


def _relayout_shape(h: Relayout, shapes: list[tuple[int, ...]], where: str) -> tuple[int, ...]:
    """The shape ``h`` makes of its sources' ``shapes`` (``DesignError`` when its parameters
    do not fit them)."""
    if h.kind is RelayoutKind.COUNTER:
        _check(0 <= h.axis < len(h.shape), "a counter's axis", where)
        return h.shape
    first = shapes[0]
    match h.kind:
        case RelayoutKind.ALIAS:
            return first  # checked by bytes: an alias reads its root's bytes, any shape
        case RelayoutKind.TRANSPOSE:
            _check(sorted(h.perm) == list(range(len(first))), "a transpose's permutation", where)
            return tuple(first[p] for p in h.perm)
        case RelayoutKind.SLICE:
            rank = len(first)
            ok = len(h.start) == len(h.limit) == len(h.strides) == rank and all(
                0 <= a <= b <= d and s >= 1
                for a, b, s, d in zip(h.start, h.limit, h.strides, first, strict=True)
            )
            _check(ok, "a slice's bounds", where)
            return tuple(
                -(-(b - a) // s) for a, b, s in zip(h.start, h.limit, h.strides, strict=True)
            )
        case RelayoutKind.CONCAT:
            ok = 0 <= h.axis < len(first) and all(
                len(s) == len(first)
                and all(
                    x == y for i, (x, y) in enumerate(zip(s, first, strict=True)) if i != h.axis
                )
                for s in shapes
            )
            _check(ok, "a concat's operand shapes", where)
            return (*first[: h.axis], sum(s[h.axis] for s in shapes), *first[h.axis + 1 :])
    raise DesignError(f"an unknown relayout kind {h.kind!r}", where=where)


def _check(
    ok: bool, bound: str, where: str, needed: int | None = None, avail: int | None = None
) -> None:
    if not ok:
        raise DesignError(bound, needed, avail, where)


def validate_layout(layout: HostLayout, limits: RegionLimits) -> None:
    where = "host layout"
    n = len(layout.arenas)
    _check(n <= limits.host_buffers, "host buffers per kernel call", where, n, limits.host_buffers)
    for i, a in enumerate(layout.arenas):
        _check(a.index == i, f"arena {i} is numbered {a.index}", where)
        _check(a.nbytes % layout.alignment == 0, f"arena {i} size is not aligned", where)
    _check(len({a.role for a in layout.arenas}) == n, "two arenas with one role", where)
    _check(
        len({s.value for s in layout.slots}) == len(layout.slots), "a value with two slots", where
    )
    ends: dict[int, list[tuple[int, int, int]]] = {}
    for s in layout.slots:
        w = f"{where}, slot of %{s.value}"
        if s.root is not None:  # an alias: its root's bytes exactly, read with its own shape
            ok = layout.has_slot(s.root) and s.root != s.value
            r = layout.slot(s.root) if ok else s
            _check(
                ok
                and r.root is None
                and (r.arena, r.offset, r.nbytes, r.span, r.dtype)
                == (s.arena, s.offset, s.nbytes, s.span, s.dtype)
                and s.nbytes == math.prod(s.shape) * s.dtype.itemsize,
                "an alias slot that is not its root's bytes",
                w,
            )
            continue
        _check(0 <= s.arena < n, "a slot in no arena", w)
        _check(s.offset % layout.alignment == 0, "slot offset alignment", w, s.offset)
        itemsize = s.dtype.itemsize
        _check(s.nbytes == math.prod(s.shape) * itemsize, "slot bytes are not its tensor's", w)
        _check(s.span == words(s.nbytes), "slot span is not its tensor's words", w)
        arena = layout.arenas[s.arena].nbytes
        _check(
            s.offset + s.span <= arena,
            "slot past the end of its arena",
            w,
            s.offset + s.span,
            arena,
        )
        ends.setdefault(s.arena, []).append((s.offset, s.offset + s.span, s.value))
    for spans in ends.values():
        spans.sort()
        for (_, end, x), (start, _, y) in itertools.pairwise(spans):
            _check(end <= start, f"slots of %{x} and %{y} overlap", where)
    for bound in (*layout.arguments, *layout.results):
        _check(layout.has_slot(bound.value), f"{bound.name!r} is bound to no slot", where)


def validate_region(region: RegionDesign, layout: HostLayout, limits: RegionLimits) -> None:
    where = f"region {region.index}"
    n = len(region.cores)
    _check(n <= limits.compute_tiles, "compute tiles", where, n, limits.compute_tiles)
    streams_in = sum(1 for f in region.fifos if f.source is not None)
    streams_out = sum(1 for f in region.fifos if f.sink is not None) + 1  # and the flag word
    _check(
        streams_in <= limits.host_streams_in,
        "host streams in",
        where,
        streams_in,
        limits.host_streams_in,
    )
    _check(
        streams_out <= limits.host_streams_out,
        "host streams out",
        where,
        streams_out,
        limits.host_streams_out,
    )
    per_shim = Counter((t.shim, t.direction) for t in (*region.transfers, region.flag.transfer))
    for (shim, d), used in sorted(per_shim.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
        _check(used <= SHIM_CHANNELS, f"shim {shim} channels {d.value}", where, used, SHIM_CHANNELS)
    _check(len({c.tile for c in region.cores}) == n, "a tile job placed twice", where)
    places = Counter((c.column, c.row) for c in region.cores)
    _check(max(places.values(), default=1) == 1, "two cores on one compute tile", where)
    fifos = {f.name: f for f in region.fifos}
    _check(len(fifos) == len(region.fifos), "two FIFOs with one name", where)
    cores = {c.tile: c for c in region.cores}
    _validate_chain(region, where)
    first = region.flag.order[0]
    drains = region.flag.order[-1]
    for c in region.cores:
        w = f"{where}, core {c.symbol}"
        _validate_core(c, fifos, limits, reserved_bytes(c.tile == first), w)
        # its data output and, on the chain's last core, the flag drain: DMA channels out
        out = 1 + (c.tile == drains)
        _check(
            out <= limits.streams_per_tile, "streams out of a tile", w, out, limits.streams_per_tile
        )
        _validate_guard(c, layout, f"{where}, core {c.symbol}")
    for f in region.fifos:
        _validate_fifo(f, cores, layout, f"{where}, FIFO {f.name}")
        _check(
            f.repeats <= limits.transfer_repeats,
            "transfer repeats",
            f"{where}, FIFO {f.name}",
            f.repeats,
            limits.transfer_repeats,
        )
    _validate_sequence(region, fifos, layout, where)


def _validate_guard(c: Core, layout: HostLayout, where: str) -> None:
    """A gather core keeps its indices in its axis (``IndexGuard``): the host checks an
    argument, the kernel clamps anything else; no other core has a guard."""
    gather = c.kind is KernelClass.GATHER
    _check(gather == (c.index_guard is not None), "an index guard on a non-gather core", where)
    _check(gather == (c.index_axis > 0), "a gather of an empty axis", where, c.index_axis, 1)
    if c.index_guard is IndexGuard.HOST_CHECKED:
        index = c.inputs[1].value if len(c.inputs) == 2 else -1
        _check(
            any(b.value == index for b in layout.arguments),
            "host-checked indices that are no argument",
            where,
        )


def _validate_chain(region: RegionDesign, where: str) -> None:
    """The flag chain visits every core once, each step to a memory neighbour: same column and
    the next row, or same row and the next column (mlir-aie's AIE2 memory affinity,
    lib/Dialect/AIE/IR/AIETargetModel.cpp ``isLegalMemAffinity``: own, west, north and south
    memory; a link between such tiles with one consumer is shared memory, no DMA:
    lib/Dialect/AIE/Transforms/AIEObjectFifoStatefulTransform.cpp ``requiresDMAs``)."""
    order = region.flag.order
    tiles = [c.tile for c in region.cores]
    _check(
        sorted(order) == sorted(tiles) and bool(order),
        "a flag chain that is not every core once",
        where,
    )
    at = {c.tile: (c.column, c.row) for c in region.cores}
    for a, b in itertools.pairwise(order):
        (ca, ra), (cb, rb) = at[a], at[b]
        _check(
            abs(ca - cb) + abs(ra - rb) == 1,
            f"flag link from tile {a} to tile {b} between tiles that share no memory",
            where,
        )


def _validate_core(
    c: Core, fifos: dict[str, Fifo], limits: RegionLimits, reserved: int, where: str
) -> None:
    _check(0 <= c.column < SHIM_COLUMNS, "compute tile column", where, c.column, SHIM_COLUMNS - 1)
    _check(c.row in COMPUTE_ROWS, "compute tile row", where, c.row, COMPUTE_ROWS[-1])
    n_in = len(c.inputs)
    _check(
        n_in <= limits.streams_per_tile, "streams into a tile", where, n_in, limits.streams_per_tile
    )
    _check(
        c.chunk > 0 and c.chunk * c.n_chunks == c.units, "chunks that do not cover the units", where
    )
    ports = (*c.inputs, c.output)
    for port in ports:
        _check(port.fifo in fifos, f"port on a FIFO {port.fifo!r} the region lacks", where)
    total = sum(fifos[p.fifo].depth * fifos[p.fifo].nbytes for p in ports) + reserved
    _check(total <= limits.tile_bytes, "tile-local bytes", where, total, limits.tile_bytes)
    _check(total == c.buffer_bytes, "buffer bytes are not its FIFOs'", where, total, c.buffer_bytes)
    for port in ports:
        f = fifos[port.fifo]
        _check(
            (port.value, port.dtype, port.resident, port.elems, port.nbytes)
            == (f.value, f.dtype, f.resident, f.elems, f.nbytes),
            f"port on FIFO {f.name} disagrees with it",
            where,
        )
        _check(port.pieces == f.pieces, f"port on FIFO {f.name} disagrees with it", where)
        _check(
            port.hold >= 1 and (port.hold == 1 or f.by_batch),
            "an object held by a port that holds none",
            where,
        )
        if not port.resident:
            _check(
                f.n_objects * port.hold == c.n_chunks * port.pieces,
                f"calls per run vs objects of FIFO {f.name}",
                where,
                c.n_chunks * port.pieces,
                f.n_objects * port.hold,
            )
    # a batch-held input: a matmul's right operand, each object held across the calls of
    # exactly one batch's rows
    held = [i for i, p in enumerate(c.inputs) if fifos[p.fifo].by_batch]
    if held:
        port, out = c.inputs[held[0]], fifos[c.output.fifo]
        _check(
            c.kind is KernelClass.MATMUL and held == [1] and c.pieces == 1,
            "a batch-held operand that is no matmul's right operand",
            where,
        )
        _check(
            len(out.shape) >= 2 and c.chunk * port.hold == out.shape[-2],
            "calls holding a batch that are not its rows",
            where,
            out.shape[-2] if len(out.shape) >= 2 else None,
            c.chunk * port.hold,
        )
    # a K-streamed input: a matmul's right operand, its pieces whole rows of K, passed once
    # per call (``Core.pieces``)
    streamed = [i for i, p in enumerate(c.inputs) if p.pieces > 1]
    if streamed:
        f = fifos[c.inputs[streamed[0]].fifo]
        _check(
            c.kind is KernelClass.MATMUL and streamed == [1],
            "a K-streamed operand that is no matmul's right operand",
            where,
        )
        _check(
            len(f.shape) >= 2 and f.shape[-2] % f.pieces == 0,
            "pieces that are not rows of K",
            where,
        )
        _check(
            f.repeats == c.n_chunks,
            "passes of a K-streamed operand vs calls",
            where,
            c.n_chunks,
            f.repeats,
        )


def _validate_fifo(f: Fifo, cores: dict[int, Core], layout: HostLayout, where: str) -> None:
    _check(_SYMBOL.match(f.name) is not None, "a FIFO name that is no MLIR symbol", where)
    _check(
        (f.producer is None) == (f.source is not None),
        "neither or both of producer and source",
        where,
    )
    _check(f.source is None or f.shim is not None, "a host input with no shim", where)
    _check(f.sink is None or f.shim is not None, "a drain with no shim", where)
    _check(
        f.shim is None or 0 <= f.shim < SHIM_COLUMNS, "shim column", where, f.shim, SHIM_COLUMNS - 1
    )
    _check(bool(f.consumers) or f.sink is not None, "a FIFO nobody reads", where)
    _check(len(set(f.consumers)) == len(f.consumers), "a consumer listed twice", where)
    size = math.prod(f.shape)
    _check(f.pieces >= 1 and f.repeats >= 1, "pieces and passes at least one", where)
    _check(not (f.by_batch and (f.pieces > 1 or f.resident)), "a batch-held FIFO in pieces", where)
    if f.by_batch:
        _check(
            len(f.shape) >= 2 and f.elems == f.shape[-2] * f.shape[-1],
            "a batch-held object that is not one batch",
            where,
        )
    if f.pieces > 1 or f.repeats > 1 or f.by_batch:  # its one core's host input
        _check(
            f.source is not None and f.sink is None and len(f.consumers) == 1,
            "a K-streamed or batch-held tensor that is not one core's host input",
            where,
        )
        _check(
            f.by_batch or f.n_objects == f.pieces * f.repeats,
            "objects of a K-streamed tensor",
            where,
            f.pieces * f.repeats,
            f.n_objects,
        )
    _check(f.elems * f.n_objects == size * f.repeats, "objects that do not cover the tensor", where)
    _check(f.nbytes == words(f.elems * f.dtype.itemsize), "object bytes are not whole words", where)
    if f.nbytes != f.elems * f.dtype.itemsize:
        _check(
            f.n_objects == 1, "a padded object that is not the whole tensor", where, f.n_objects, 1
        )
    _check(
        f.depth == (1 if f.resident or f.by_batch else 2),
        "depth (2 streamed, 1 resident or batch-held)",
        where,
        f.depth,
    )
    _check(not f.resident or f.n_objects == 1, "a resident FIFO of several objects", where)
    if f.producer is not None:
        p = cores.get(f.producer)
        _check(
            p is not None and p.output.fifo == f.name, "a producer that does not write it", where
        )
    for t in f.consumers:
        c = cores.get(t)
        _check(
            c is not None and any(i.fifo == f.name for i in c.inputs),
            f"consumer tile {t} does not read it",
            where,
        )
    for slot in (f.source, f.sink):
        if slot is not None:
            _check(
                layout.has_slot(slot.value) and layout.slot(slot.value) == slot,
                "a slot not in the layout",
                where,
            )
            _check(slot.value == f.value, "a slot of another value", where)
            _check(
                f.n_objects // f.repeats * f.nbytes <= slot.span,
                "objects past the slot",
                where,
                f.n_objects // f.repeats * f.nbytes,
                slot.span,
            )


def _validate_sequence(
    region: RegionDesign, fifos: dict[str, Fifo], layout: HostLayout, where: str
) -> None:
    seen_channels: set[tuple[int, TransferDirection, int]] = set()
    bds: set[tuple[int, int]] = set()
    covered: set[tuple[str, TransferDirection]] = set()
    for t in region.transfers:
        w = f"{where}, transfer of {t.fifo}"
        f = fifos.get(t.fifo)
        if f is None:
            raise DesignError("a transfer of no FIFO", where=w)
        slot = f.source if t.direction is TransferDirection.TO_DEVICE else f.sink
        if slot is None:
            raise DesignError(f"a {t.direction.value} transfer of a FIFO without that end", where=w)
        _check(
            (t.shim, t.arena, t.offset, t.nbytes, t.repeats)
            == (f.shim, slot.arena, slot.offset, f.n_objects // f.repeats * f.nbytes, f.repeats),
            "a transfer that is not its FIFO's whole tensor",
            w,
        )
        _check(0 <= t.arena < len(layout.arenas), "a transfer to no arena", w)
        _check(0 <= t.channel < SHIM_CHANNELS, "shim channel", w, t.channel, SHIM_CHANNELS - 1)
        _check(
            (t.shim, t.direction, t.channel) not in seen_channels, "a shim channel used twice", w
        )
        seen_channels.add((t.shim, t.direction, t.channel))
        _check(
            0 <= t.bd < SHIM_BDS and (t.shim, t.bd) not in bds, "shim buffer descriptor", w, t.bd
        )
        bds.add((t.shim, t.bd))
        _check((t.fifo, t.direction) not in covered, "a tensor transferred twice", w)
        covered.add((t.fifo, t.direction))
    for f in region.fifos:
        if f.source is not None:
            _check(
                (f.name, TransferDirection.TO_DEVICE) in covered,
                f"host input {f.name} never sent",
                where,
            )
        if f.sink is not None:
            _check(
                (f.name, TransferDirection.FROM_DEVICE) in covered,
                f"host output {f.name} never drained",
                where,
            )
            _check(f.name in region.waits, f"host output {f.name} not waited on", where)
    for w in region.waits:
        _check(w in fifos and fifos[w].sink is not None, f"a wait on {w}, which is no drain", where)
    t = region.flag.transfer
    w = f"{where}, flag drain"
    flags = layout.arena(ArenaRole.FLAGS)
    _check(t.fifo == flag_fifo(region.flag.order[-1]), "a flag drain not from the chain's end", w)
    _check(t.fifo not in fifos, "a flag FIFO named as a data FIFO", w)
    _check(t.direction is TransferDirection.FROM_DEVICE, "a flag drain to the device", w)
    _check(
        flags is not None
        and (t.arena, t.offset, t.nbytes) == (flags.index, FLAG_WORD * region.index, FLAG_WORD)
        and t.offset + t.nbytes <= flags.nbytes,
        "a flag word not at its region's place in the flags arena",
        w,
    )
    _check(0 <= t.shim < SHIM_COLUMNS, "shim column", w, t.shim, SHIM_COLUMNS - 1)
    _check(0 <= t.channel < SHIM_CHANNELS, "shim channel", w, t.channel, SHIM_CHANNELS - 1)
    _check((t.shim, t.direction, t.channel) not in seen_channels, "a shim channel used twice", w)
    _check(0 <= t.bd < SHIM_BDS and (t.shim, t.bd) not in bds, "shim buffer descriptor", w, t.bd)
