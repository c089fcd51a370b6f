"""Build the XDNA2 design of a planned program: placement, FIFOs, chunking, shims, sequence.

- Placement: the region's tile jobs in program order, column by column (column ``k // 4``,
  row ``2 + k % 4``), as IRON's ``SequentialPlacer`` places workers.
- FIFOs: one per tile output (producer -> its consumer tiles, plus the shim when the value
  goes to the host: a broadcast), one per host input (shim -> its consumer tiles).
- Chunking: exactly the planner's (``poot_planner.xdna2.chunking``): the tiles that stream a common
  FIFO make the same number of calls per run, and a FIFO some tile holds resident is one
  object. The design records it; ``validate`` checks every bound again.
- Shims: a host input on the shim of its first consumer's column, an output on its producer's
  column; when that shim's two channels are taken, the nearest shim with one free.
- The flag path (``design.FlagPath``): a chain through every core, column by column, each
  column walked up or down so that consecutive cores are memory neighbours (``flag_order``),
  drained from the last core to the nearest shim with a channel left, after the data outputs.
"""

from __future__ import annotations

from dataclasses import replace

from poot_ir import (
    ConcatParams,
    GatherParams,
    IotaParams,
    Prim,
    Program,
    SliceParams,
    TransposeParams,
    Var,
)
from poot_planner import HostRelayout, KernelClass, Plan, Region, RegionLimits, TileOp
from poot_planner.xdna2.chunking import Chunking, words

from poot_codegen.xdna.arenas import build_layout
from poot_codegen.xdna.design import (
    COMPUTE_ROWS,
    DEVICE,
    FLAG_WORD,
    SHIM_CHANNELS,
    SHIM_COLUMNS,
    ArenaRole,
    Core,
    DesignError,
    Fifo,
    FlagPath,
    HostLayout,
    Port,
    ProgramDesign,
    RegionDesign,
    Relayout,
    RelayoutKind,
    Transfer,
    TransferDirection,
    flag_fifo,
    reserved_bytes,
)
from poot_codegen.xdna.kernels import kernel_symbol, region_object
from poot_codegen.xdna.reuse import share
from poot_codegen.xdna.validate import validate

__all__ = ["build_design", "design_program", "fifo_name", "flag_order", "place"]


def fifo_name(value: int) -> str:
    """The MLIR symbol of the FIFO that carries value ``%value``."""
    return f"v{value}"


def place(k: int) -> tuple[int, int]:
    """(column, row) of the ``k``-th core of a region: column by column."""
    per_column = len(COMPUTE_ROWS)
    return k // per_column, COMPUTE_ROWS[k % per_column]


def flag_order(n: int) -> tuple[int, ...]:
    """The chain order of a region's ``n`` cores (by their place ``k``, as ``place`` places
    them) for its flag path: every column but the last is full, so walking the last one up
    from row 2 and alternating the direction of those before it (the one before the last:
    down) makes each step one row (same column) or one column (same row, at row 2 or 5), the
    neighbours whose memory mlir-aie shares."""
    per_column = len(COMPUTE_ROWS)
    columns = -(-n // per_column)
    order: list[int] = []
    for j in range(columns):
        ks = list(range(j * per_column, min(n, (j + 1) * per_column)))
        down = j < columns - 1 and (columns - 1 - j) % 2 == 1
        order += reversed(ks) if down else ks
    return tuple(order)


def design_program(plan: Plan) -> ProgramDesign:
    """The validated design of an admitted XDNA2 plan (``PlanRefused`` if it has refusals,
    ``DesignError`` naming the bound it breaks)."""
    return validate(build_design(plan))


def build_design(plan: Plan) -> ProgramDesign:
    """The design of an admitted XDNA2 plan, not yet validated (``validate`` checks it)."""
    plan.check()
    limits = plan.target.region_limits
    if limits is None:
        raise DesignError(f"target {plan.target.name!r} has no region limits: not an XDNA2 plan")
    layout = build_layout(plan)
    regions: list[RegionDesign] = []
    for r in plan.regions:
        d = _region(r, layout, limits, plan.program)
        # a region reused across identical layers runs its artifact's kernels (reuse.share)
        regions.append(d if r.runs == r.index else share(regions[r.runs], d))
    relayouts = tuple(_relayout(h, plan.program) for h in plan.relayouts)
    return ProgramDesign(plan.program.name, DEVICE, limits, layout, tuple(regions), relayouts)


_KINDS = {
    Prim.RESHAPE: RelayoutKind.ALIAS,
    Prim.TRANSPOSE: RelayoutKind.TRANSPOSE,
    Prim.SLICE: RelayoutKind.SLICE,
    Prim.CONCAT: RelayoutKind.CONCAT,
    Prim.IOTA: RelayoutKind.COUNTER,
}


def _relayout(h: HostRelayout, program: Program) -> Relayout:
    """The host stage of the planner's relayout ``h``, with its equation's parameters."""
    kind = _KINDS.get(h.prim)
    if kind is None:  # the planner admits only these as host relayouts: a table bug
        raise DesignError(f"no host relayout for {h.prim.value}", where=f"equation {h.eqn}")
    p = program.eqns[h.eqn].params
    ids = tuple(v.id for v in h.inputs)
    r = Relayout(h.eqn, kind, ids, h.output.id, h.after)
    match p:
        case TransposeParams(perm=perm):
            return replace(r, perm=perm)
        case SliceParams(start=start, limit=limit, strides=strides):
            return replace(r, start=start, limit=limit, strides=strides)
        case ConcatParams(axis=axis):
            return replace(r, axis=axis)
        case IotaParams(shape=shape, dtype=dtype, axis=axis):
            return replace(r, shape=shape, dtype=dtype, axis=axis)
    return r


def _object(v: Var, n: int) -> tuple[int, int]:
    """(elements, bytes) of one object when ``v`` moves as ``n`` objects."""
    elems = v.type.size // n
    return elems, words(elems * v.dtype.itemsize)


def _region(
    region: Region, layout: HostLayout, limits: RegionLimits, program: Program
) -> RegionDesign:
    ends = Chunking(region.tiles)
    calls = {t.index: t.n_chunks for t in region.tiles}  # the planner's chunking, as it ran
    placed = {t.index: place(k) for k, t in enumerate(region.tiles)}
    host_out = {v.id for v in region.host_out}
    shims = _Shims()
    fifos: dict[int, Fifo] = {}
    for v in ends.values.values():
        whole = ends.whole(v.id)
        producer = ends.made.get(v.id)
        streaming = ends.streaming(v.id)
        n = 1 if whole or not streaming else max(calls[streaming[0].index], 1)
        elems, nbytes = _object(v, n)
        consumers = tuple(sorted({t.index for t, _ in ends.readers[v.id]}))
        pieces = repeats = 1
        by_batch = any(
            op.by_batch for t, _ in ends.readers[v.id] for op in t.inputs if op.var.id == v.id
        )
        if by_batch:  # held one batch at a time by its one reader: an object per batch
            n = v.type.size // (v.shape[-2] * v.shape[-1])
            elems, nbytes = _object(v, n)
        elif ends.own(v.id):  # K-streamed: its one reader takes it whole once per call
            pieces = next(
                op.pieces for t, _ in ends.readers[v.id] for op in t.inputs if op.var.id == v.id
            )
            repeats = max(calls[consumers[0]], 1)
            elems, nbytes = _object(v, pieces)
            n = pieces * repeats
        is_in, is_out = producer is None, v.id in host_out
        shim = None
        if is_in or is_out:
            home = placed[producer.index if producer is not None else consumers[0]][0]
            shim = shims.take(
                home, TransferDirection.TO_DEVICE if is_in else TransferDirection.FROM_DEVICE
            )
        fifos[v.id] = Fifo(
            name=fifo_name(v.id),
            value=v.id,
            dtype=v.dtype,
            shape=v.shape,
            depth=1 if whole or by_batch else 2,
            elems=elems,
            nbytes=nbytes,
            n_objects=n,
            resident=whole,
            producer=None if producer is None else producer.index,
            consumers=consumers,
            shim=shim,
            source=layout.slot(v.id) if is_in else None,
            sink=layout.slot(v.id) if is_out else None,
            pieces=pieces,
            repeats=repeats,
            by_batch=by_batch,
        )
    chain = tuple(region.tiles[k].index for k in flag_order(len(region.tiles)))
    first = chain[0] if chain else -1
    cores = tuple(
        _core(t, placed[t.index], calls[t.index], fifos, _index_axis(t, program), t.index == first)
        for t in region.tiles
    )
    transfers = _sequence(region, fifos, shims)
    waits = tuple(fifo_name(v.id) for v in region.host_out)
    return RegionDesign(
        region.index,
        region.eqns,
        region_object(region.index),
        cores,
        tuple(fifos.values()),
        transfers,
        waits,
        _flag_path(region.index, chain, placed, shims, transfers, layout),
    )


def _flag_path(
    index: int,
    chain: tuple[int, ...],
    placed: dict[int, tuple[int, int]],
    shims: _Shims,
    transfers: tuple[Transfer, ...],
    layout: HostLayout,
) -> FlagPath:
    """The flag path along ``chain``, drained after the region's data outputs (so it takes a
    shim channel only they leave)."""
    flags = layout.arena(ArenaRole.FLAGS)
    if flags is None or not chain:  # build_layout makes it for a plan with regions: a bug
        raise DesignError("a region with no flags arena or no core", where=f"region {index}")
    last = chain[-1]
    shim = shims.take(placed[last][0], TransferDirection.FROM_DEVICE)
    channel = sum(
        1 for t in transfers if t.shim == shim and t.direction is TransferDirection.FROM_DEVICE
    )
    drain = Transfer(
        flag_fifo(last),
        TransferDirection.FROM_DEVICE,
        shim,
        channel,
        shims.bd(shim),
        flags.index,
        FLAG_WORD * index,
        FLAG_WORD,
    )
    return FlagPath(chain, drain)


def _port(f: Fifo, calls: int = 1) -> Port:
    """The port of a core making ``calls`` calls per run on ``f``."""
    hold = max(calls, 1) // f.n_objects if f.by_batch else 1
    return Port(f.name, f.value, f.dtype, f.resident, f.elems, f.nbytes, f.pieces, hold)


def _index_axis(t: TileOp, program: Program) -> int:
    """The size of the axis a gather tile indexes (0 for any other tile)."""
    if t.kind is not KernelClass.GATHER:
        return 0
    e = program.eqns[t.eqns[0]]
    axis = e.params.axis if isinstance(e.params, GatherParams) else 0
    return t.inputs[0].var.shape[axis]


def _core(
    t: TileOp, at: tuple[int, int], n: int, fifos: dict[int, Fifo], index_axis: int, first: bool
) -> Core:
    ins = tuple(_port(fifos[op.var.id], n) for op in t.inputs)
    out = _port(fifos[t.output.id])
    used = [fifos[op.var.id] for op in t.inputs] + [fifos[t.output.id]]
    return Core(
        tile=t.index,
        column=at[0],
        row=at[1],
        kind=t.kind,
        eqns=t.eqns,
        symbol=kernel_symbol(t),
        inputs=ins,
        output=out,
        units=t.units,
        chunk=t.chunk,
        n_chunks=n,
        # the flag word it makes, but for the chain's first core the one it takes, and its count
        buffer_bytes=sum(f.depth * f.nbytes for f in used) + reserved_bytes(first),
        index_guard=t.index_guard,
        index_axis=index_axis,
    )


class _Shims:
    """Shim channels and buffer descriptors handed out so far."""

    def __init__(self) -> None:
        self.used: dict[tuple[int, TransferDirection], int] = {}
        self.channel_of: dict[tuple[int, TransferDirection], list[int]] = {}
        self.bds: dict[int, int] = {}

    def take(self, home: int, d: TransferDirection) -> int:
        for col in sorted(range(SHIM_COLUMNS), key=lambda c: (abs(c - home), c)):
            n = self.used.get((col, d), 0)
            if n < SHIM_CHANNELS:
                self.used[(col, d)] = n + 1
                return col
        # every shim is full: keep counting on the home shim and let validation name the bound
        self.used[(home, d)] = self.used.get((home, d), 0) + 1
        return home

    def bd(self, shim: int) -> int:
        n = self.bds.get(shim, 0)
        self.bds[shim] = n + 1
        return n


def _sequence(region: Region, fifos: dict[int, Fifo], shims: _Shims) -> tuple[Transfer, ...]:
    out: list[Transfer] = []
    channel: dict[tuple[int, TransferDirection], int] = {}
    plan = [(v, TransferDirection.TO_DEVICE) for v in region.host_in]
    plan += [(v, TransferDirection.FROM_DEVICE) for v in region.host_out]
    for v, d in plan:
        f = fifos[v.id]
        slot = f.source if d is TransferDirection.TO_DEVICE else f.sink
        if slot is None or f.shim is None:  # a host value always gets both: a designer bug
            where = f"region {region.index}, transfer of {f.name}"
            raise DesignError(f"a {d.value} transfer of a FIFO without that end", where=where)
        ch = channel.get((f.shim, d), 0)
        channel[(f.shim, d)] = ch + 1
        out.append(
            Transfer(
                f.name,
                d,
                f.shim,
                ch,
                shims.bd(f.shim),
                slot.arena,
                slot.offset,
                f.n_objects // f.repeats * f.nbytes,  # one pass of the tensor
                f.repeats,
            )
        )
    return tuple(out)
