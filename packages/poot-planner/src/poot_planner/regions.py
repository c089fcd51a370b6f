"""XDNA2 regions: contiguous runs of tile jobs that load as one artifact and run once per step.

A region is one xclbin and instruction stream, so it takes one of the NPU's hardware contexts.
Inside it, a value that only the region's own tiles read moves tile to tile through an object
FIFO and never reaches host memory; every other tensor it reads or writes is a host stream
through a shim DMA channel, at a fixed offset in a host arena.

Regions are formed greedily in program order: a region closes where adding the next tile job
would break a bound (``RegionLimits``): compute tiles, host streams in, host streams out, or
tile-local bytes once the tiles that share a FIFO share its object size
(``poot_planner.chunking``). The streams of a candidate region are counted exactly: a value
produced inside it goes out to the host only if a tile outside it (earlier or later) or the
program's results read it. The tiles of a formed region carry the chunking they run. A program
needing more regions than the device has contexts is refused with ``CONTEXT_LIMIT``.
"""

from __future__ import annotations

from dataclasses import dataclass

from poot_ir import Program, Var

from poot_planner.chunking import chunk_calls, chunk_region, unchunked_bytes
from poot_planner.target import RegionLimits
from poot_planner.tiles import TileOp

__all__ = ["Region", "form_regions"]


@dataclass(frozen=True, slots=True)
class Region:
    """One artifact: its tiles (in order), the host values it reads (one stream each), the
    values it writes to host memory (one stream each), and the values that stay on tiles."""

    index: int
    tiles: tuple[TileOp, ...]
    host_in: tuple[Var, ...]
    host_out: tuple[Var, ...]
    internal: tuple[Var, ...]

    @property
    def eqns(self) -> tuple[int, ...]:
        return tuple(sorted(i for t in self.tiles for i in t.eqns))

    @property
    def tile_bytes(self) -> int:
        """The largest tile's buffer bytes."""
        return max((t.tile_bytes for t in self.tiles), default=0)

    def __str__(self) -> str:
        eq = self.eqns
        span = f"eqns {eq[0]}..{eq[-1]}" if eq else "no eqns"
        return (
            f"region {self.index}: {span}, {len(self.tiles)} tiles, {len(self.host_in)} streams in, "
            f"{len(self.host_out)} out, {len(self.internal)} tile-to-tile, max {self.tile_bytes} B/tile"
        )


def _streams(
    tiles: list[TileOp], readers: dict[int, set[int]], results: set[int]
) -> tuple[list[Var], list[Var], list[Var]]:
    """(host in, host out, internal) of a candidate region made of ``tiles``."""
    mine = {t.index for t in tiles}
    made = {t.output.id: t.output for t in tiles}
    host_in: dict[int, Var] = {}
    for t in tiles:
        for op in t.inputs:
            if op.var.id not in made:
                host_in.setdefault(op.var.id, op.var)
    out, internal = [], []
    for vid, v in made.items():
        if vid in results or readers.get(vid, set()) - mine:
            out.append(v)
        else:
            internal.append(v)
    return list(host_in.values()), out, internal


def form_regions(
    program: Program, tiles: tuple[TileOp, ...], limits: RegionLimits
) -> tuple[Region, ...]:
    """Greedy regions over ``tiles`` (in program order). Each tile alone must already fit a
    region (the planner refuses those that do not before calling this)."""
    readers: dict[int, set[int]] = {}
    for t in tiles:
        for op in t.inputs:
            readers.setdefault(op.var.id, set()).add(t.index)
    results = {v.id for _, v in program.results()}
    upper = {t.index: unchunked_bytes(t) for t in tiles}

    def fits(group: list[TileOp]) -> bool:
        h_in, h_out, _ = _streams(group, readers, results)
        return (
            len(group) <= limits.compute_tiles
            and len(h_in) <= limits.host_streams_in
            and len(h_out) <= limits.host_streams_out
            # one call per run fits whatever the region shares: no need to work out groups
            and (
                all(upper[t.index] <= limits.tile_bytes for t in group)
                or not isinstance(chunk_calls(group, limits.tile_bytes), int)
            )
        )

    regions: list[Region] = []
    current: list[TileOp] = []

    def close() -> None:
        h_in, h_out, internal = _streams(current, readers, results)
        chunked = chunk_region(current, limits.tile_bytes)
        tiles_ = tuple(chunked[0]) if not isinstance(chunked, int) else tuple(current)
        regions.append(Region(len(regions), tiles_, tuple(h_in), tuple(h_out), tuple(internal)))

    for t in tiles:
        if current and not fits([*current, t]):
            close()
            current = []
        current.append(t)
    if current:
        close()
    return tuple(regions)
