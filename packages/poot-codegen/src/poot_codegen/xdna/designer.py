"""Build the XDNA2 design of a planned program: placement, FIFOs, chunking, shims, sequence.

- Placement: the region's tile jobs in program order, column by column (column ``k // 4``,
  row ``2 + k % 4``), as IRON's ``SequentialPlacer`` places workers.
- FIFOs: one per tile output (producer -> its consumer tiles, plus the shim when the value
  goes to the host: a broadcast), one per host input (shim -> its consumer tiles).
- Chunking: every endpoint of a FIFO must see objects of one size, so the tiles that stream a
  common FIFO (a *chunk group*) make the same number of calls per run. A group takes the
  fewest calls (the largest chunks, as the planner chose them per tile) that divide every
  member's units and fit every member's buffers; a FIFO that some tile holds resident (a
  gather's table or indices, a norm's weight) is one object, so the tiles streaming it make
  one call. A group that fits no chunking is a ``DesignError`` naming the tile bytes.
- Shims: a host input on the shim of its first consumer's column, an output on its producer's
  column; when that shim's two channels are taken, the nearest shim with one free.
"""

from __future__ import annotations

import math

from poot_ir import Var
from poot_planner import Plan, Region, RegionLimits, TileOp

from poot_codegen.xdna.arenas import build_layout
from poot_codegen.xdna.design import (
    COMPUTE_ROWS,
    DEVICE,
    SHIM_CHANNELS,
    SHIM_COLUMNS,
    Core,
    DesignError,
    Direction,
    Fifo,
    HostLayout,
    Port,
    ProgramDesign,
    RegionDesign,
    Transfer,
    words,
)
from poot_codegen.xdna.kernels import kernel_symbol, region_object
from poot_codegen.xdna.validate import validate

__all__ = ["build_design", "design_program", "fifo_name", "place"]


def fifo_name(value: int) -> str:
    """The MLIR symbol of the FIFO that carries value ``%value``."""
    return f"v{value}"


def place(k: int) -> tuple[int, int]:
    """(column, row) of the ``k``-th core of a region: column by column."""
    per_column = len(COMPUTE_ROWS)
    return k // per_column, COMPUTE_ROWS[k % per_column]


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
    regions = tuple(_region(r, layout, limits) for r in plan.regions)
    return ProgramDesign(plan.program.name, DEVICE, limits, layout, regions)


class _Endpoints:
    """Who streams and who holds each value of one region."""

    def __init__(self, region: Region) -> None:
        self.made: dict[int, TileOp] = {t.output.id: t for t in region.tiles}
        self.values: dict[int, Var] = {v.id: v for v in region.host_in}
        self.values.update((t.output.id, t.output) for t in region.tiles)
        self.readers: dict[int, list[tuple[TileOp, bool]]] = {v: [] for v in self.values}
        for t in region.tiles:
            for op in t.inputs:
                self.readers[op.var.id].append((t, op.resident))

    def whole(self, v: int) -> bool:
        """Some tile holds ``v`` resident: it moves as one object."""
        return any(resident for _, resident in self.readers[v])

    def streaming(self, v: int) -> list[TileOp]:
        tiles = [t for t, resident in self.readers[v] if not resident]
        return ([self.made[v]] if v in self.made else []) + tiles


def _chunk_groups(region: Region, ends: _Endpoints) -> list[list[TileOp]]:
    parent = {t.index: t.index for t in region.tiles}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for v in ends.values:
        tiles = ends.streaming(v)
        for t in tiles[1:]:
            parent[find(t.index)] = find(tiles[0].index)
    groups: dict[int, list[TileOp]] = {}
    for t in region.tiles:
        groups.setdefault(find(t.index), []).append(t)
    return list(groups.values())


def _object(v: Var, n: int) -> tuple[int, int]:
    """(elements, bytes) of one object when ``v`` moves as ``n`` objects."""
    elems = v.type.size // n
    return elems, words(elems * v.dtype.itemsize)


def _tile_bytes(t: TileOp, n: int, ends: _Endpoints) -> int | None:
    """FIFO buffer bytes of ``t`` making ``n`` calls per run, or None when a padded BOOL
    object would have to be split."""
    total = 0
    for v in [op.var for op in t.inputs] + [t.output]:
        whole = ends.whole(v.id)
        objects = 1 if whole else n
        elems, nbytes = _object(v, objects)
        if nbytes != elems * v.dtype.itemsize and objects > 1:
            return None
        total += (1 if whole else 2) * nbytes
    return total


def _calls(region: Region, ends: _Endpoints, limits: RegionLimits) -> dict[int, int]:
    """Calls per run of every tile job of the region."""
    calls: dict[int, int] = {}
    for group in _chunk_groups(region, ends):
        where = f"region {region.index}, tiles {[t.index for t in group]}"
        if any(t.units == 0 for t in group):
            raise DesignError("a tile job over an empty tensor", where=where)
        forced = any(
            ends.whole(v.id) for t in group for v in [op.var for op in t.inputs] + [t.output]
        )
        g = math.gcd(*(t.units for t in group))
        candidates = [1] if forced else sorted(d for d in range(1, g + 1) if g % d == 0)
        best: int | None = None
        need = 0
        for n in candidates:
            sizes = [_tile_bytes(t, n, ends) for t in group]
            if all(s is not None and s <= limits.tile_bytes for s in sizes):
                best = n
                break
            need = max((s for s in sizes if s is not None), default=need)
        if best is None:  # ``need``: the largest tile's bytes at the finest chunking tried
            raise DesignError("tile-local bytes", need, limits.tile_bytes, where)
        calls.update((t.index, best) for t in group)
    return calls


def _region(region: Region, layout: HostLayout, limits: RegionLimits) -> RegionDesign:
    ends = _Endpoints(region)
    calls = _calls(region, ends, limits)
    placed = {t.index: place(k) for k, t in enumerate(region.tiles)}
    host_out = {v.id for v in region.host_out}
    shims = _Shims()
    fifos: dict[int, Fifo] = {}
    for v in ends.values.values():
        whole = ends.whole(v.id)
        producer = ends.made.get(v.id)
        streaming = ends.streaming(v.id)
        n = 1 if whole or not streaming else calls[streaming[0].index]
        elems, nbytes = _object(v, n)
        consumers = tuple(sorted({t.index for t, _ in ends.readers[v.id]}))
        is_in, is_out = producer is None, v.id in host_out
        shim = None
        if is_in or is_out:
            home = placed[producer.index if producer is not None else consumers[0]][0]
            shim = shims.take(home, Direction.TO_DEVICE if is_in else Direction.FROM_DEVICE)
        fifos[v.id] = Fifo(
            name=fifo_name(v.id),
            value=v.id,
            dtype=v.dtype,
            shape=v.shape,
            depth=1 if whole else 2,
            elems=elems,
            nbytes=nbytes,
            n_objects=n,
            resident=whole,
            producer=None if producer is None else producer.index,
            consumers=consumers,
            shim=shim,
            source=layout.slot(v.id) if is_in else None,
            sink=layout.slot(v.id) if is_out else None,
        )
    cores = tuple(_core(t, placed[t.index], calls[t.index], fifos) for t in region.tiles)
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
    )


def _port(f: Fifo) -> Port:
    return Port(f.name, f.value, f.dtype, f.resident, f.elems, f.nbytes)


def _core(t: TileOp, at: tuple[int, int], n: int, fifos: dict[int, Fifo]) -> Core:
    ins = tuple(_port(fifos[op.var.id]) for op in t.inputs)
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
        chunk=t.units // n,
        n_chunks=n,
        buffer_bytes=sum(f.depth * f.nbytes for f in used),
    )


class _Shims:
    """Shim channels and buffer descriptors handed out so far."""

    def __init__(self) -> None:
        self.used: dict[tuple[int, Direction], int] = {}
        self.channel_of: dict[tuple[int, Direction], list[int]] = {}
        self.bds: dict[int, int] = {}

    def take(self, home: int, d: Direction) -> int:
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
    channel: dict[tuple[int, Direction], int] = {}
    plan = [(v, Direction.TO_DEVICE) for v in region.host_in]
    plan += [(v, Direction.FROM_DEVICE) for v in region.host_out]
    for v, d in plan:
        f = fifos[v.id]
        slot = f.source if d is Direction.TO_DEVICE else f.sink
        assert slot is not None and f.shim is not None
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
                f.n_objects * f.nbytes,
            )
        )
    return tuple(out)
