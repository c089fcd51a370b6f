"""XDNA2 tiles and regions: each bound (32 compute tiles, 16 host streams in, 16 out, 2 streams
per tile, 64512 tile-local bytes, 16 contexts) is met exactly by one program and broken by the
next: a region splits, or an equation that fits no region is refused with the limit it broke.

Tile bytes are counted as in ``poot_planner.xdna2.tiles``: resident tensors once, plus two buffers
(an object FIFO of depth 2) of one chunk of every streamed input and of the output, plus the
flag path's word in and word out and what the link adds after the buffers: the core's own
guard count, the ``uint32_t poot_guard_word`` every kernel object defines, and a reserve for
the objects' other data (``FLAG``). The flag word also takes one host stream out per
region, so 15 values go out beside it.
"""

from __future__ import annotations

import pytest
from poot_ir import Builder, DType, Program, ops
from poot_planner import TARGETS, KernelClass, Plan, RefusalKind, plan
from poot_planner.xdna2 import probes
from poot_planner.xdna2.regions import artifact_key, form_regions, tile_period

F32, I32 = DType.F32, DType.I32
LIMIT = 64512  # 64 KiB of data memory less the 1 KiB stack
FLAG = 8 + 256  # on every tile: the flag path's 32-bit word in and out, and the link's data
# sections after the buffers (the guard count and a reserve: RegionLimits.link_data_bytes)


def xdna2(source: Program) -> Plan:
    return plan(source, "xdna2")


def neg_chain(n: int, shape: tuple[int, ...] = (4, 64)) -> Program:
    return probes.neg_chain(n, shape)


def region_sizes(p: Plan) -> list[int]:
    return [len(r.tiles) for r in p.regions]


# -- compute tiles ---------------------------------------------------------------------------


def test_32_tiles_are_one_region() -> None:
    source = neg_chain(32)
    p = xdna2(source)
    assert p.admitted and region_sizes(p) == [32] and p.contexts == 1
    (r,) = p.regions
    assert [v.name for v in r.host_in] == ["x"]
    assert r.host_out == (source.outputs[0].var,)
    assert len(r.internal) == 31
    assert str(r) == (
        "region 0: eqns 0..31, 32 tiles, 1 streams in, 1 out, 31 tile-to-tile, max 4360 B/tile"
    )
    assert [t.index for t in r.tiles] == list(range(32))
    assert all(t.kind is KernelClass.POINTWISE and t.streams_in == 1 for t in r.tiles)


def test_33_tiles_are_two_regions_and_the_value_between_them_goes_out() -> None:
    source = neg_chain(33)
    p = xdna2(source)
    assert p.admitted and region_sizes(p) == [32, 1] and p.contexts == 2
    first, second = p.regions
    crossing = source.eqns[31].out  # made by the last tile of the first region
    assert first.host_out == (crossing,)
    assert second.host_in == (crossing,)
    assert crossing not in first.internal and len(first.internal) == 31
    assert second.eqns == (32,)


# -- host streams in -------------------------------------------------------------------------


def add_chain(slots: int) -> Program:
    """``x0 + x1 + ... + x{slots-1}`` in order: ``slots - 1`` tiles, ``slots`` host streams."""
    return probes.add_chain(slots, (4, 64))


def test_16_host_streams_in_are_one_region() -> None:
    p = xdna2(add_chain(16))
    assert p.admitted and region_sizes(p) == [15]
    assert len(p.regions[0].host_in) == 16 and len(p.regions[0].host_out) == 1


def test_17_host_streams_in_split_the_region() -> None:
    source = add_chain(17)
    p = xdna2(source)
    assert p.admitted and region_sizes(p) == [15, 1]
    first, second = p.regions
    assert len(first.host_in) == 16
    # the second region reads the partial sum back from host memory, and the last slot
    assert second.host_in == (source.eqns[14].out, source.args[16].var)
    assert first.host_out == (source.eqns[14].out,)


def pairs(n: int, distinct_shapes: bool = False) -> Program:
    """``n`` independent adds of two slots each (each pair its own shape if asked)."""
    b = Builder(f"pairs{n}")
    for i in range(n):
        shape = (i + 1, 3) if distinct_shapes else (4, 64)
        b.output(f"y{i}", b.add(b.slot(f"a{i}", F32, shape), b.slot(f"b{i}", F32, shape)))
    return b.build()


def test_tiles_reading_two_streams_each_fill_16_streams_with_8_tiles() -> None:
    p = xdna2(pairs(8))
    assert p.admitted and region_sizes(p) == [8]
    assert all(t.streams_in == 2 for t in p.tiles)
    assert len(p.regions[0].host_in) == 16 and len(p.regions[0].host_out) == 8
    assert region_sizes(xdna2(pairs(9))) == [8, 1]
    three = xdna2(pairs(3))
    assert region_sizes(three) == [3] and len(three.regions[0].host_in) == 6


def test_twenty_equations_with_twenty_distinct_shapes_take_three_contexts() -> None:
    """The seed: "a graph of twenty equations with twenty distinct shapes runs in three
    hardware contexts"."""
    source = pairs(20, distinct_shapes=True)
    assert len(source.eqns) == 20
    assert len({e.out.shape for e in source.eqns}) == 20
    p = xdna2(source)
    assert p.admitted and p.contexts == 3
    assert region_sizes(p) == [8, 8, 4]
    assert [len(r.host_in) for r in p.regions] == [16, 16, 8]


def test_a_literal_takes_no_stream_and_a_shared_value_one() -> None:
    b = Builder("shared")
    v = b.slot("x", F32, (4, 64))
    b.output("a", b.add(v, 1.0))
    b.output("m", b.mul(v, v))
    b.output("d", b.max(v, -2.0))
    p = xdna2(b.build())
    assert [t.streams_in for t in p.tiles] == [1, 1, 1]
    (r,) = p.regions
    assert [v.name for v in r.host_in] == ["x"] and len(r.host_out) == 3


# -- host streams out ------------------------------------------------------------------------


def fan_out(n: int) -> Program:
    b = Builder(f"fan{n}")
    v = b.slot("x", F32, (4, 64))
    for i in range(n):
        b.output(f"y{i}", b.neg(v))
    return b.build()


def test_15_host_streams_out_and_the_flag_word_are_one_region() -> None:
    p = xdna2(fan_out(15))
    assert p.admitted and region_sizes(p) == [15]
    assert len(p.regions[0].host_out) == 15 and len(p.regions[0].host_in) == 1


def test_16_host_streams_out_split_the_region() -> None:
    """16 values and the flag word would need 17 of the 16 shim channels out."""
    p = xdna2(fan_out(16))
    assert p.admitted and region_sizes(p) == [15, 1]
    assert [len(r.host_out) for r in p.regions] == [15, 1]


# -- internal values -------------------------------------------------------------------------


def test_values_read_only_inside_stay_on_tiles_and_results_go_out() -> None:
    b = Builder("internal")
    v = b.slot("x", F32, (4, 64))
    a = b.exp(v)  # read only by the next tile: internal
    c = b.mul(a, 2.0)  # read by the next tile and returned: out
    d = b.add(c, 1.0)  # returned: out
    b.output("c", c)
    b.output("d", d)
    p = xdna2(b.build())
    (r,) = p.regions
    assert r.internal == (a,)
    assert r.host_out == (c, d)
    assert [v.name for v in r.host_in] == ["x"]


def test_a_value_read_inside_and_by_a_later_region_goes_out() -> None:
    b = Builder("later")
    v = b.slot("x", F32, (4, 64))
    first = b.neg(v)
    w = first
    for _ in range(31):
        w = b.neg(w)  # tiles 1..31: the first region is full
    b.output("y", b.add(w, first))  # tile 32, in the second region, reads `first` again
    p = xdna2(b.build())
    assert region_sizes(p) == [32, 1]
    assert first in p.regions[0].host_out and first not in p.regions[0].internal
    assert first in p.regions[1].host_in


# -- tile-local bytes ------------------------------------------------------------------------


@pytest.mark.parametrize(("cols", "fits"), [(8030, True), (8031, False), (9000, False)])
def test_a_row_sum_at_the_tile_byte_limit(cols: int, fits: bool) -> None:
    """A one-row chunk of a last-axis sum: two buffers of (cols input + 1 output) f32. Its
    bytes step by 8 and the limit less FLAG is a multiple of 8: the widest row that fits
    meets the limit exactly."""
    b = Builder("rowsum")
    b.output("y", b.reduce_sum(b.slot("x", F32, (1, cols)), -1))
    p = xdna2(b.build())
    needed = 2 * (4 * cols + 4) + FLAG
    if fits:
        assert needed == LIMIT
        assert p.admitted and p.tiles[0].tile_bytes == needed and p.tiles[0].chunk == 1
    else:
        (r,) = p.refusals
        assert r.kind is RefusalKind.REGION_LIMIT
        assert (r.eqn, r.primitive) == (0, "reduce_sum")
        assert r.facts == (("limit", "tile_bytes"), ("needed", needed), ("available", LIMIT))
        assert p.tiles == () and p.regions == ()


def test_the_chunk_is_the_largest_divisor_that_fits() -> None:
    def rowsum(rows: int, cols: int) -> Plan:
        b = Builder("rowsum")
        b.output("y", b.reduce_sum(b.slot("x", F32, (rows, cols)), -1))
        return xdna2(b.build())

    two = rowsum(2, 4014)  # two rows at once: 2 * 2 * (4 * 4014 + 4) + FLAG = 64504
    assert (two.tiles[0].chunk, two.tiles[0].tile_bytes, two.tiles[0].n_chunks) == (2, 64504, 1)
    one = rowsum(2, 4015)  # two rows would need 64520: one row at a time
    assert (one.tiles[0].chunk, one.tiles[0].tile_bytes, one.tiles[0].n_chunks) == (1, 32392, 2)
    many = rowsum(6, 8030)
    assert (many.tiles[0].chunk, many.tiles[0].tile_bytes) == (1, LIMIT)
    # a pointwise op chunks elements: 2 * chunk * (4 + 4) + FLAG <= 64512 (chunk <= 4015),
    # chunk divides 100000
    (tile,) = xdna2(neg_chain(1, (1, 100_000))).tiles
    assert (tile.chunk, tile.tile_bytes, tile.n_chunks) == (4000, 64000 + FLAG, 25)


@pytest.mark.parametrize(("cols", "weight", "fits"), [
    (4015, False, True),  # 2 * (4 * 4015 + 4 * 4015) + FLAG = 64504
    (4016, False, False),  # 64520
    (3212, True, True),  # 4 * 3212 resident + 2 * (4 * 3212 + 4 * 3212) + FLAG = 64504
    (3213, True, False),  # 64524
])  # fmt: skip
def test_a_fused_norm_at_the_tile_byte_limit(cols: int, weight: bool, fits: bool) -> None:
    b = Builder("rms")
    w = b.weight("w", F32, (cols,)) if weight else None
    b.output("y", ops.rmsnorm(b, b.slot("x", F32, (1, cols)), w))
    source = b.build()
    p = xdna2(source)
    needed = (4 * cols if weight else 0) + 2 * (4 * cols + 4 * cols) + FLAG
    if fits:
        assert p.admitted and p.tiles[0].tile_bytes == needed <= LIMIT
    else:
        (r,) = p.refusals
        assert r.kind is RefusalKind.REGION_LIMIT
        assert r.eqn == len(source.eqns) - 1  # the equation that makes the kernel's output
        assert r.facts == (("limit", "tile_bytes"), ("needed", needed), ("available", LIMIT))


@pytest.mark.parametrize(("rows", "fits"), [(16059, True), (16060, False)])
def test_a_gather_table_is_resident(rows: int, fits: bool) -> None:
    """Table and indices whole, once; the gathered slices stream out two at a time."""
    b = Builder("gather")
    table = b.weight("t", F32, (rows, 1))
    b.output("y", b.gather(table, b.slot("i", I32, (1,))))
    p = xdna2(b.build())
    needed = 4 * rows + 4 + 2 * 4 + FLAG
    if fits:
        assert needed == LIMIT and p.admitted and p.tiles[0].tile_bytes == LIMIT
        assert all(op.resident for op in p.tiles[0].inputs)
    else:
        (r,) = p.refusals
        assert r.facts == (("limit", "tile_bytes"), ("needed", needed), ("available", LIMIT))


# -- streams per tile ------------------------------------------------------------------------


def test_a_tile_reads_at_most_two_streams() -> None:
    """Two (an add of two slots; a norm and its weight) fit; a norm with two weights needs
    three and fits no tile."""
    assert xdna2(pairs(1)).tiles[0].streams_in == 2
    b = Builder("two-weights")
    w1, w2 = b.weight("w1", F32, (64,)), b.weight("w2", F32, (64,))
    b.output("y", b.mul(ops.rmsnorm(b, b.slot("x", F32, (4, 64)), w1), w2))
    source = b.build()
    p = xdna2(source)
    (r,) = p.refusals
    assert r.kind is RefusalKind.REGION_LIMIT
    assert (r.eqn, r.primitive) == (len(source.eqns) - 1, "mul")
    assert r.facts == (("limit", "streams_per_tile"), ("needed", 3), ("available", 2))


# -- contexts --------------------------------------------------------------------------------


def test_16_distinct_regions_are_admitted() -> None:
    p = xdna2(probes.marked_chain(16 * 32, 32, (4, 64)))
    assert p.admitted and p.contexts == p.contexts_before_reuse == 16
    assert set(region_sizes(p)) == {32}


def test_17_distinct_regions_are_a_context_limit() -> None:
    p = xdna2(probes.marked_chain(16 * 32 + 1, 32, (4, 64)))
    (r,) = p.refusals
    assert r.kind is RefusalKind.CONTEXT_LIMIT
    assert (r.eqn, r.primitive) == (-1, "")
    assert r.facts == (("limit", "contexts"), ("needed", 17), ("available", 16), ("regions", 17))
    assert r.fact("needed") == 17 and r.fact("available") == 16
    assert p.contexts == 17


def test_17_identical_regions_need_the_contexts_of_two() -> None:
    """Sixteen regions of 32 negations are one artifact (the first reads the argument, the
    others the scratch arena: only where their streams live differs), the 17th (one tile)
    another: two contexts, where one per region would be past the limit."""
    p = xdna2(neg_chain(16 * 32 + 1))
    assert p.admitted and p.contexts_before_reuse == 17 and p.contexts == 2
    assert [r.runs for r in p.regions] == [0] * 16 + [16]
    assert [r.artifact for r in p.regions] == [None] + [0] * 15 + [None]


def _layers(n: int, tiles: int) -> Program:
    """``n`` layers of ``tiles`` tiles: a product by the layer's weight, negations, a max."""
    b = Builder(f"layers{n}x{tiles}")
    x = b.slot("x", F32, (4, 16))
    for k in range(n):
        v = b.mul(x, b.weight(f"w{k}", F32, (4, 16)))
        for _ in range(tiles - 2):
            v = b.neg(v)
        x = b.max(v, x)
    b.output("y", x)
    return b.build()


def test_regions_of_whole_layers_when_that_makes_fewer_artifacts() -> None:
    """64 layers of 5 tiles (320): greedy regions of 32 repeat every 5 regions (five designs);
    regions of six whole layers (30 tiles) are one design but for the first (its layer reads
    the argument, which is checked on the host, so its kernels differ) and the last (20
    tiles): three contexts. A layer past a region is split at its largest divisor that fits
    (40 tiles: 20, two designs). A chain whose layers divide the region keeps its greedy regions."""
    limits = TARGETS["xdna2"].region_limits
    assert limits is not None
    p = xdna2(_layers(64, 5))
    assert tile_period(p.program, p.tiles, 32) == 5
    assert p.admitted and p.contexts == 3 and region_sizes(p) == [30] * 10 + [20]
    greedy, _ = form_regions(p.program, p.tiles, limits)
    keys = {artifact_key(p.program, r, {}) for r in greedy}
    assert len(greedy) == 10 and len(keys) == 5
    big = xdna2(_layers(8, 40))
    assert set(region_sizes(big)) == {20} and big.contexts == 3  # first, then the two halves
    assert region_sizes(xdna2(_layers(16, 8))) == [32] * 4


# -- order -----------------------------------------------------------------------------------


def test_a_row_kernel_tile_precedes_the_tiles_that_read_it() -> None:
    """Regression: a row kernel's tile was ordered by its last step, which can be a dead step
    after its output; a region split between them then read a value a later region makes."""
    b = Builder("dead-step")
    c = b.slot("c", F32, (4, 64))
    x = b.slot("x", F32, (4, 64))
    for _ in range(31):
        c = b.neg(c)  # 31 tiles
    b.output("c", c)
    rms = b.sqrt(b.add(b.div(b.reduce_sum(b.mul(x, x), -1), 64.0), 1e-6))
    back = b.broadcast_in_dim(rms, (4, 64), (0,))
    y = b.div(x, back)
    z = b.neg(y)  # reads the kernel's output
    b.mul(x, back)  # a dead step of the same kernel, after the reader
    b.output("z", z)
    source = b.build()
    p = xdna2(source)
    assert p.admitted
    made: dict[int, int] = {}
    for r in p.regions:
        for t in r.tiles:
            made[t.output.id] = r.index
    for r in p.regions:
        for v in r.host_in:
            assert made.get(v.id, -1) < r.index, f"region {r.index} reads %{v.id} too early"
    kernel = next(t for t in p.tiles if t.kind is KernelClass.FUSED_NORM)
    reader = next(t for t in p.tiles if y in (op.var for op in t.inputs))
    assert kernel.index < reader.index
    assert region_sizes(p) == [32, 1]


def test_dead_code_gets_no_tile() -> None:
    """Regression: an admitted equation whose value nothing reads got a tile, whose output FIFO
    no tile and no host stream reads: the design's validation refused it (a FIFO nobody reads)
    after the plan had admitted the program."""
    b = Builder("dead")
    x, w = b.slot("x", F32, (2, 8)), b.slot("w", F32, (2, 8))
    dead = b.exp(x)
    b.neg(dead)  # dead too, and reads the dead value
    b.output("y", b.recip(w))
    p = xdna2(b.build())
    assert p.admitted
    assert [t.eqns for t in p.tiles] == [(2,)]
    assert [a.tile for a in p.admissions] == [None, None, 0]
    assert [(len(r.host_in), len(r.host_out), len(r.internal)) for r in p.regions] == [(1, 1, 0)]
