"""XDNA2 regions: contiguous runs of tile jobs that load as one artifact and run once per step.

A region is one xclbin and instruction stream, so it takes one of the NPU's hardware contexts.
Inside it, a value that only the region's own tiles read moves tile to tile through an object
FIFO and never reaches host memory; every other tensor it reads or writes is a host stream
through a shim DMA channel, at a fixed offset in a host arena.

Regions are formed greedily in program order: a region closes where adding the next tile job
would break a bound (``RegionLimits``): compute tiles, host streams in, host streams out, or
tile-local bytes once the tiles that share a FIFO share its object size
(``poot_planner.xdna2.chunking``). The region's flag path (its domain-guard word, chained core to core
and drained to the host) is counted too: ``RegionLimits.reserved_bytes`` on every tile (the words
in and out, and what the link adds after the buffers: the core's own guard count and a reserve) and
``flag_streams_out`` host stream out per region. The streams of a candidate region are counted exactly: a value
produced inside it goes out to the host only if a tile outside it (earlier or later) or the
program's results read it. The tiles of a formed region carry the chunking they run. A program
needing more regions than the device has contexts is refused with ``CONTEXT_LIMIT``.

Host relayouts (``HostRelayout``: a reshape, transpose, slice or concat the host arenas absorb)
run between regions: no tile, no context, no stream of their own. Each reads host values (an
argument, a value a region wrote out, another relayout's output) and writes one: a value a
relayout reads counts as read outside every region, so its producing region streams it out
(counted in that region's bounds). A relayout whose operand the region being formed makes
closes that region (it runs after it); any other runs before the region being formed, so a
relayout of an argument or of an earlier region's value costs no context.

Regions reused across identical layers (``share_artifacts``): regions whose designs are equal up
to where their host tensors live (the arena offsets of their streams and of their flag word)
run one artifact, so one hardware context; each use keeps its own runtime sequence. Equality is
decided on ``artifact_key``, the region with every value, tile and equation renamed by its place
in the region (``poot_codegen.xdna.reuse`` checks that equal keys render the same device body and
kernels). The context limit counts distinct artifacts.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import numpy as np
from poot_ir import Atom, Prim, Program, Var

from poot_planner.capability import RegionLimits
from poot_planner.xdna2.chunking import chunk_calls, chunk_region, unchunked_bytes
from poot_planner.xdna2.tiles import TileOp

__all__ = [
    "HostRelayout",
    "Region",
    "artifact_key",
    "artifacts",
    "form_regions",
    "form_reusable_regions",
    "in_step_order",
    "share_artifacts",
]


class _Placed(Protocol):
    @property
    def after(self) -> int: ...  # how many regions run before it


_R = TypeVar("_R")
_H = TypeVar("_H", bound=_Placed)


def in_step_order(regions: Sequence[_R], relayouts: Sequence[_H]) -> list[_R | _H]:
    """The regions and host relayouts in the order one step runs them: for each region, the
    relayouts placed before it (``after``), then the region; then those after the last. The
    plan's and the design's (``poot_codegen.xdna``) stages are ordered by this one rule."""
    out: list[_R | _H] = []
    for k in range(len(regions) + 1):
        out += [h for h in relayouts if h.after == k]
        if k < len(regions):
            out.append(regions[k])
    return out


@dataclass(frozen=True, slots=True)
class Region:
    """One kernel call per step: its tiles (in order), the host values it reads (one stream
    each), the values it writes to host memory (one stream each), and the values that stay on
    tiles. ``artifact``: the index of the region whose artifact (and hardware context) it runs,
    with its own runtime sequence (``share_artifacts``); None before that is decided, or when
    it is its own."""

    index: int
    tiles: tuple[TileOp, ...]
    host_in: tuple[Var, ...]
    host_out: tuple[Var, ...]
    internal: tuple[Var, ...]
    artifact: int | None = None

    @property
    def runs(self) -> int:
        """The index of the region whose artifact this one runs (its own, or an earlier one's)."""
        return self.index if self.artifact is None else self.artifact

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
        shared = f", runs region {self.runs}'s artifact" if self.runs != self.index else ""
        return (
            f"region {self.index}: {span}, {len(self.tiles)} tiles, {len(self.host_in)} streams in, "
            f"{len(self.host_out)} out, {len(self.internal)} tile-to-tile, max {self.tile_bytes} B/tile"
            f"{shared}"
        )


@dataclass(frozen=True, slots=True)
class HostRelayout:
    """One relayout run on the host between regions: equation ``eqn`` (``prim``) of the planned
    program, from the host values ``inputs`` to the host value ``output``. ``alias``: the output
    is the input's bytes read with another shape (a reshape: row-major, zero copies); else one
    host copy. ``after``: how many regions run before it (it runs before region ``after``)."""

    eqn: int
    prim: Prim
    inputs: tuple[Var, ...]
    output: Var
    alias: bool
    after: int = 0

    def __str__(self) -> str:
        how = "alias" if self.alias else "host copy"
        return (
            f"host relayout: eqn {self.eqn} ({self.prim.value}, {how}) after {self.after} region(s)"
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


class _Candidate:
    """The region being formed, with its stream counts kept as tiles join (so trying the next
    tile costs what that tile reads and writes, not the whole region: program order means a
    tile's inputs are made by earlier tiles, so a host input never becomes internal, and a
    value made here stops going out when its last reader outside joins)."""

    def __init__(self, readers: dict[int, set[int]], results: set[int]) -> None:
        self.readers, self.results = readers, results
        self.tiles: list[TileOp] = []
        self.host_in: set[int] = set()
        self.outside: dict[int, int] = {}  # value made here -> its readers not (yet) here
        self.n_out = 0  # values made here that go to the host
        self.whole_fits = True  # every tile fits unchunked (one call per run)
        self.own: set[int] = set()  # K-streamed and batch-held operands of its tiles

    def shares_own(self, t: TileOp) -> bool:
        """``t`` would share a FIFO with a K-streamed or batch-held operand
        (``TileOperand.own``): its objects follow one tile's calls, so that operand must be a
        host input no other tile of the region reads."""
        mine = {op.var.id for op in t.inputs if op.own}
        rest = {op.var.id for op in t.inputs if not op.own}
        return bool(mine & (self.host_in | self.outside.keys()) or rest & self.own)

    def _goes_out(self, v: int, outside: int) -> bool:
        return v in self.results or outside > 0

    def delta(self, t: TileOp) -> tuple[int, int, dict[int, int]]:
        """(host streams in, host streams out, the updated outside counts) with ``t`` added."""
        ins = {op.var.id for op in t.inputs}
        new_in = len(self.host_in | {v for v in ins if v not in self.outside})
        counts = {v: self.outside[v] - 1 for v in ins if v in self.outside}
        n_out = self.n_out
        for v, c in counts.items():
            n_out -= self._goes_out(v, c + 1) and not self._goes_out(v, c)
        out = t.output.id
        counts[out] = len(self.readers.get(out, set()) - {t.index})
        n_out += self._goes_out(out, counts[out])
        return new_in, n_out, counts

    def add(self, t: TileOp, delta: tuple[int, int, dict[int, int]], whole: bool) -> None:
        _, self.n_out, counts = delta
        self.host_in.update(op.var.id for op in t.inputs if op.var.id not in self.outside)
        self.outside.update(counts)
        self.whole_fits = self.whole_fits and whole
        self.own.update(op.var.id for op in t.inputs if op.own)
        self.tiles.append(t)


def form_regions(
    program: Program,
    tiles: tuple[TileOp, ...],
    limits: RegionLimits,
    relayouts: tuple[HostRelayout, ...] = (),
    tile_cap: int | None = None,
) -> tuple[tuple[Region, ...], tuple[HostRelayout, ...]]:
    """Greedy regions over ``tiles`` (in program order), and ``relayouts`` (in program order)
    with the place each runs at (``HostRelayout.after``). Each tile alone must already fit a
    region (the planner refuses those that do not before calling this). ``tile_cap``: at most
    that many tiles to a region (default, and at most, ``limits.compute_tiles``)."""
    cap = limits.compute_tiles if tile_cap is None else min(tile_cap, limits.compute_tiles)
    readers: dict[int, set[int]] = {}
    for t in tiles:
        for op in t.inputs:
            readers.setdefault(op.var.id, set()).add(t.index)
    for k, r in enumerate(relayouts):  # a relayout reads on the host: outside every region
        for v in r.inputs:
            readers.setdefault(v.id, set()).add(-1 - k)
    results = {v.id for _, v in program.results()}
    # tiles and relayouts in program order: a tile at the equation that makes its output
    made_at = {e.out.id: i for i, e in enumerate(program.eqns)}
    order: list[tuple[int, int, TileOp | HostRelayout]] = [
        (made_at[t.output.id], 0, t) for t in tiles
    ]
    order += [(r.eqn, 1, r) for r in relayouts]
    order.sort(key=lambda x: (x[0], x[1]))
    placed: list[HostRelayout] = []

    regions: list[Region] = []
    current = _Candidate(readers, results)

    def close() -> None:
        group = current.tiles
        h_in, h_out, internal = _streams(group, readers, results)
        chunked = chunk_region(
            group, limits.data_tile_bytes, limits.reserved_bytes, limits.transfer_repeats
        )
        tiles_ = tuple(chunked[0]) if not isinstance(chunked, int) else tuple(group)
        regions.append(Region(len(regions), tiles_, tuple(h_in), tuple(h_out), tuple(internal)))

    for _, _, item in order:
        if isinstance(item, HostRelayout):
            # its operand is made by the region being formed: that region runs first
            if current.tiles and any(v.id in current.outside for v in item.inputs):
                close()
                current = _Candidate(readers, results)
            placed.append(replace(item, after=len(regions)))
            continue
        t = item
        delta = current.delta(t)
        whole = unchunked_bytes(t) <= limits.data_tile_bytes
        if current.tiles and not (
            len(current.tiles) < cap
            and delta[0] <= limits.host_streams_in
            and delta[1] <= limits.data_streams_out  # the flag word takes one
            and not current.shares_own(t)
            # one call per run fits whatever the region shares: no need to work out groups
            and (
                (current.whole_fits and whole)
                or not isinstance(
                    chunk_calls(
                        [*current.tiles, t], limits.data_tile_bytes, limits.transfer_repeats
                    ),
                    int,
                )
            )
        ):
            close()
            current = _Candidate(readers, results)
            delta = current.delta(t)
        current.add(t, delta, whole)
    if current.tiles:
        close()
    return tuple(regions), tuple(placed)


# -- regions reused across identical layers ---------------------------------------------------


def form_reusable_regions(
    program: Program,
    tiles: tuple[TileOp, ...],
    limits: RegionLimits,
    relayouts: tuple[HostRelayout, ...] = (),
) -> tuple[tuple[Region, ...], tuple[HostRelayout, ...]]:
    """``form_regions``, or the same with fewer tiles to a region when that makes fewer
    distinct artifacts. Greedy regions of a chain of identical layers repeat only when a
    layer's tiles divide the region's: 64 layers of 5 tiles make 10 regions of 5 designs at 32
    tiles to a region, and 11 of 2 at 30. So the tiles' period is found (``tile_period``: the
    layer's tile count) and regions of the most whole layers that fit (or, for a layer past a
    region, of its largest divisor that fits) are tried once; they replace the greedy ones only
    when they make strictly fewer distinct artifacts (by ``artifact_key`` without guards,
    which the plan adds when it shares: a heuristic for the choice only), since every extra
    region costs a kernel call and host traffic."""
    best = form_regions(program, tiles, limits, relayouts)
    period = tile_period(program, tiles, limits.compute_tiles)
    if len(best[0]) < 3 or period is None:  # nothing to share, or no pattern to align to
        return best
    limit = limits.compute_tiles
    if period <= limit:
        cap = limit // period * period
    else:
        cap = max(d for d in range(1, limit + 1) if period % d == 0)
    if cap == limit:
        return best
    other = form_regions(program, tiles, limits, relayouts, cap)

    def distinct(regions: tuple[Region, ...]) -> int:
        return len({artifact_key(program, r, {}) for r in regions})

    return other if distinct(other[0]) < distinct(best[0]) else best


def tile_period(program: Program, tiles: tuple[TileOp, ...], longest: int) -> int | None:
    """The period of ``tiles`` as a sequence of kernels (kind, primitives, types), the tile
    count of a repeated layer: of ``p`` up to ``4 * longest`` (and a quarter of the tiles), the
    one with the fewest tiles that differ from the one ``p`` before (then the smallest), if at
    most a tenth of the tiles do (a prologue and an epilogue may differ); else None. Fewest,
    not the first under the tenth: a layer of one ``mul``, 38 negations and a ``max`` differs
    from itself shifted by one tile in only two places per layer."""
    kinds: dict[Hashable, int] = {}
    sig = np.array(
        [
            kinds.setdefault(
                (
                    t.kind,
                    tuple(program.eqns[i].prim for i in t.eqns),
                    t.output.type,
                    tuple(op.var.type for op in t.inputs),
                ),
                len(kinds),
            )
            for t in tiles
        ],
        dtype=np.int64,
    )
    n = len(sig)
    top = min(n // 4, 4 * longest)
    misses = {p: int(np.count_nonzero(sig[:-p] != sig[p:])) for p in range(1, top + 1)}
    if not misses:
        return None
    p = min(misses, key=lambda q: (misses[q], q))
    return p if misses[p] * 10 <= n else None


#: Per equation, the operands its kernel guards on the device (``poot_planner.guards``, site
#: ``DEVICE``): ``(operand, domain)`` pairs, ``-1`` for the result. A guard is code in the kernel,
#: so two regions are one artifact only if their kernels guard the same operands.
DeviceGuards = Mapping[int, tuple[tuple[int, Hashable], ...]]


def artifact_key(program: Program, region: Region, guards: DeviceGuards) -> Hashable:
    """What a region's artifact is made of, with nothing that says where in the program or in
    the host arenas it sits: every value named by its first appearance (the region's host
    inputs first, in stream order), tiles by their place, equations by their place in their
    tile. Two regions with equal keys have the same cores, FIFOs, chunking, kernels and guards,
    and differ only in the slots their streams and flag word use: one artifact serves both."""
    names: dict[int, int] = {}

    def name(v: Var) -> int:
        return names.setdefault(v.id, len(names))

    def atom(a: Atom) -> Hashable:
        if isinstance(a, Var):
            return ("var", name(a), a.type)
        return ("literal", a.bits, a.dtype)

    ins = tuple((name(v), v.type) for v in region.host_in)
    tiles = []
    for t in region.tiles:
        eqns = tuple(
            (
                program.eqns[i].prim,
                repr(program.eqns[i].params),
                tuple(atom(a) for a in program.eqns[i].inputs),
                tuple((name(o), o.type) for o in program.eqns[i].outputs),
                guards.get(i, ()),
            )
            for i in t.eqns
        )
        operands = tuple(
            (name(op.var), op.unit, op.resident, op.pieces, op.by_batch) for op in t.inputs
        )
        tiles.append(
            (
                t.kind,
                eqns,
                operands,
                name(t.output),
                t.out_unit,
                t.units,
                t.chunk,
                t.tile_bytes,
                t.bound,
                t.index_guard,
                t.code_bytes,
            )
        )
    outs = tuple(name(v) for v in region.host_out)
    return (ins, tuple(tiles), outs)


def share_artifacts(
    program: Program, regions: tuple[Region, ...], guards: DeviceGuards
) -> tuple[Region, ...]:
    """``regions`` with ``Region.artifact`` set: the first region with the same
    ``artifact_key`` (itself when it is the first)."""
    first: dict[Hashable, int] = {}
    out = []
    for r in regions:
        k = first.setdefault(artifact_key(program, r, guards), r.index)
        out.append(replace(r, artifact=None if k == r.index else k))
    return tuple(out)


def artifacts(regions: Sequence[Region]) -> tuple[int, ...]:
    """The regions whose artifacts are loaded (each distinct artifact once), in order: one
    hardware context each."""
    return tuple(r.index for r in regions if r.runs == r.index)
