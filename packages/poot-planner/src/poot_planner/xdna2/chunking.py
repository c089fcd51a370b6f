"""How many calls each tile of a region makes per run: the chunking the NPU actually runs.

Every endpoint of an object FIFO sees objects of one size, so the tiles that *stream* a common
FIFO (its producer and its streaming readers: a *chunk group*) make the same number of calls
per run. A FIFO that some tile holds resident (a gather's table or indices, a norm's weight) is
one object, so a tile that streams it makes one call. A group takes the fewest calls (the
largest chunks) that divide every member's units and fit every member's buffers:

    bytes of a tile = sum over its tensors of (1 if the tensor is one object else 2) x
                      (its object bytes, rounded up to whole 32-bit words)

A matmul's right operand streamed in pieces of K (``tiles.stream_k``) is neither: it is sent
whole once per call, ``pieces`` objects of one piece each, so it takes 2 x its piece's bytes
whatever the chunking, and every call of its tile is one pass of it through the shim (at most
``repeats`` passes per run, the shim's repeat bound). A batched right operand held one batch at
a time (``tiles.hold_batches``) takes one batch's bytes (depth 1), and its tile's calls must
each lie in one batch. Either FIFO is its tile's alone (the region former keeps it so), so it
joins no chunk group.

A BOOL tensor whose object is not a whole number of words moves as one object. This is the one
place the rule lives: the region former asks it whether a candidate region can be chunked, and
the XDNA2 designer lays out exactly the chunks it returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from poot_ir import Var

from poot_planner.xdna2.tiles import TileOp

__all__ = ["Chunking", "chunk_calls", "chunk_region", "unchunked_bytes", "words"]


def words(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 32-bit words (DMA moves words)."""
    return -(-nbytes // 4) * 4


class Chunking:
    """Who streams and who holds each value of one candidate region."""

    def __init__(self, tiles: Sequence[TileOp]) -> None:
        self.tiles = list(tiles)
        self.made: dict[int, TileOp] = {t.output.id: t for t in tiles}
        # host inputs first, then the tiles' outputs, each in program order
        self.values: dict[int, Var] = {
            op.var.id: op.var for t in tiles for op in t.inputs if op.var.id not in self.made
        }
        self.values.update((t.output.id, t.output) for t in tiles)
        self.readers: dict[int, list[tuple[TileOp, bool]]] = {v: [] for v in self.values}
        for t in tiles:
            for op in t.inputs:
                self.readers[op.var.id].append((t, op.resident))

        self._whole = {v for v, rs in self.readers.items() if any(res for _, res in rs)}
        # a K-streamed or batch-held operand (value -> its tile bytes): its tile's alone
        self._own = {op.var.id: op.held_bytes for t in tiles for op in t.inputs if op.own}
        # (elements, bytes per element) of each value: asked for at every candidate chunking
        self._sizes = {v: (x.type.size, x.dtype.itemsize) for v, x in self.values.items()}

    def whole(self, v: int) -> bool:
        """Some tile holds ``v`` resident: it moves as one object."""
        return v in self._whole

    def own(self, v: int) -> bool:
        """``v`` is one tile's own operand: K-streamed (whole once per call, in pieces:
        ``tiles.stream_k``) or held one batch at a time (``tiles.hold_batches``)."""
        return v in self._own

    def own_bytes(self, v: int) -> int:
        """Tile bytes own operand ``v`` takes at any chunking (0: ``v`` is not one)."""
        return self._own.get(v, 0)

    def streaming(self, v: int) -> list[TileOp]:
        """The tiles that stream ``v``: its producer (if in the region) and non-resident readers
        (none for a K-streamed operand, whose objects do not follow the units)."""
        if v in self._own:
            return []
        readers = [t for t, resident in self.readers[v] if not resident]
        return ([self.made[v]] if v in self.made else []) + readers

    def groups(self) -> list[list[TileOp]]:
        parent = {t.index: t.index for t in self.tiles}

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for v in self.values:
            tiles = self.streaming(v)
            for t in tiles[1:]:
                parent[find(t.index)] = find(tiles[0].index)
        out: dict[int, list[TileOp]] = {}
        for t in self.tiles:
            out.setdefault(find(t.index), []).append(t)
        return list(out.values())

    def tile_bytes(self, t: TileOp, n: int) -> int | None:
        """Buffer bytes of ``t`` making ``n`` calls per run (None: a padded BOOL object would
        have to be split)."""
        total = 0
        for vid in [op.var.id for op in t.inputs] + [t.output.id]:
            if vid in self._own:  # two pieces, or one batch, at any chunking
                total += self._own[vid]
                continue
            size, itemsize = self._sizes[vid]
            whole = vid in self._whole
            objects = 1 if whole else n
            raw = size // objects * itemsize
            nbytes = -(-raw // 4) * 4  # words(raw), inlined: this is the search's inner loop
            if nbytes != raw and objects > 1:
                return None
            total += (1 if whole else 2) * nbytes
        return total

    def forced_single(self, group: list[TileOp]) -> bool:
        """A member streams a value some tile holds resident: the group makes one call."""
        members = {t.index for t in group}
        return any(
            self.whole(v) and any(t.index in members for t in self.streaming(v))
            for v in self.values
        )


def unchunked_bytes(t: TileOp) -> int:
    """An upper bound on ``t``'s buffer bytes when it makes one call per run, in any region:
    every tensor whole and double-buffered (a region can only make a tensor resident, which
    halves it). When it fits, one call per run is a chunking that fits. A K-streamed operand
    takes its two pieces' objects, a batch-held one its batch's."""
    own = sum(op.held_bytes for op in t.inputs)
    rest = [op.var for op in t.inputs if not op.own] + [t.output]
    return own + sum(2 * words(v.type.nbytes) for v in rest)


def _fewest_calls(
    c: Chunking, group: list[TileOp], g: int, limit: int, repeats: int | None
) -> int | None:
    """The fewest calls ``n`` (a divisor of ``g``, the gcd of the group's units) at which every
    member fits ``limit``, or None. A member with a K-streamed operand passes it once per call:
    ``n`` at most ``repeats`` then (None: no bound).

    Searched by the units of ``g`` per call, ``q = g // n``, from the largest ``q`` the bytes
    allow downwards: a member streams at least its output, so ``q`` is below ``limit`` whatever
    the tensors' sizes, and the search takes at most ``limit`` steps however large a dimension
    is (the divisors of a dimension near 2^31 are never enumerated)."""
    q_max = g
    for t in group:
        streamed = resident = 0
        for v in [op.var for op in t.inputs] + [t.output]:
            if c.own(v.id):
                resident += c.own_bytes(v.id)
            elif c.whole(v.id):
                resident += words(v.type.nbytes)
            else:
                streamed += 2 * v.type.nbytes  # per g units; words() only rounds up
        if streamed:
            # 2 * size * q / g bytes per streamed tensor at q units of g per call
            q_max = min(q_max, max(limit - resident, 0) * g // streamed)
    for q in range(min(q_max, g), 0, -1):
        if g % q:
            continue
        n = g // q
        # a batch-held operand: each call's rows in one batch (of M rows)
        if any(t.by_batch and t.output.shape[-2] % (t.units // n) for t in group):
            continue
        if all((s := c.tile_bytes(t, n)) is not None and s <= limit for t in group):
            # fewer calls fit no member, and more calls are more passes of the K-streamed operand
            if repeats is not None and n > repeats and any(t.pieces > 1 for t in group):
                return None
            return n
    return None


def chunk_calls(
    tiles: Sequence[TileOp], limit: int, repeats: int | None = None
) -> tuple[Chunking, dict[int, int]] | int:
    """Calls per run of every tile (by index), or, when some chunk group fits no chunking,
    the bytes its largest tile would need at the finest chunking (one unit of the group's
    gcd per call; a resident-bound group: its one call). ``repeats``: the most calls of a tile
    with a K-streamed operand (``RegionLimits.transfer_repeats``; None: no bound)."""
    c = Chunking(tiles)
    calls: dict[int, int] = {}
    for group in c.groups():
        if any(t.units == 0 for t in group):
            calls.update((t.index, 0) for t in group)  # an empty tensor: no call at all
            continue
        single = c.forced_single(group)
        g = 1 if single else math.gcd(*(t.units for t in group))
        n = _fewest_calls(c, group, g, limit, repeats)
        if n is None:
            sizes = [c.tile_bytes(t, g) for t in group]
            return max([s for s in sizes if s is not None] + [0])
        calls.update((t.index, n) for t in group)
    return c, calls


def chunk_region(
    tiles: Sequence[TileOp], limit: int, reserved: int = 0, repeats: int | None = None
) -> tuple[list[TileOp], int] | int:
    """The region's tiles with the chunking they run (``TileOp.chunk`` and ``tile_bytes``
    updated) and the region's largest tile bytes, or what ``chunk_calls`` says is needed.
    ``limit`` is what the data FIFOs may take; ``reserved`` the bytes every tile holds besides
    (the flag path and the link's data sections, ``RegionLimits.reserved_bytes``): counted in ``tile_bytes``
    and in the need; ``repeats`` as ``chunk_calls``."""
    got = chunk_calls(tiles, limit, repeats)
    if isinstance(got, int):
        return got + reserved
    c, calls = got
    out = []
    for t in tiles:
        n = calls[t.index]
        nbytes = (c.tile_bytes(t, max(n, 1)) or 0) + reserved
        out.append(t.placed(chunk=t.units // n if n else 1, tile_bytes=nbytes))
    return out, max((t.tile_bytes for t in out), default=0)
