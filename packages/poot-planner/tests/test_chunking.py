"""Chunking searches chunk sizes bounded by tile memory, never the divisors of a dimension:
the same answer as the exhaustive divisor search on small dims, and a plan at once for dims up
to the kernel ABI's element count (past it: a typed limit, before any search)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import Builder, DType, Program
from poot_ir.budget import DimsTooLarge
from poot_planner import TARGETS, KernelClass, RefusalKind, TileOp, plan
from poot_planner.xdna2.chunking import Chunking, chunk_calls
from poot_planner.xdna2.tiles import stream_k, tile_for_eqn

F32 = DType.F32
LIMIT = 64512
TARGETS_XDNA2 = TARGETS["xdna2"]
ELEMENTS = 2**31 - 1


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _exhaustive(tiles: list[TileOp], limit: int) -> dict[int, int] | None:
    """The fewest calls per group over every divisor of its gcd (the definition)."""
    c = Chunking(tiles)
    calls: dict[int, int] = {}
    for group in c.groups():
        g = 1 if c.forced_single(group) else math.gcd(*(t.units for t in group))
        for n in _divisors(g):
            sizes = [c.tile_bytes(t, n) for t in group]
            if all(s is not None and s <= limit for s in sizes):
                calls.update((t.index, n) for t in group)
                break
        else:
            return None
    return calls


def _chain(rows: int, cols: int, reduce: bool) -> list[TileOp]:
    b = Builder("c")
    x = b.slot("x", F32, (rows, cols))
    y = b.exp(b.neg(x))
    b.output("y", b.reduce_sum(y, -1) if reduce else y)
    p = plan(b.build(), "xdna2").check()
    return [t for r in p.regions for t in r.tiles]


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    rows=st.integers(1, 400),
    cols=st.integers(1, 300),
    reduce=st.booleans(),
    limit=st.sampled_from([64, 100, 1000, 4096, 20000, LIMIT]),
)
def test_the_bounded_search_finds_what_the_divisor_search_finds(
    rows: int, cols: int, reduce: bool, limit: int
) -> None:
    tiles = _chain(rows, cols, reduce)
    want = _exhaustive(tiles, limit)
    got = chunk_calls(tiles, limit)
    if want is None:
        assert isinstance(got, int) and got > limit
    else:
        assert not isinstance(got, int) and got[1] == want


def _pointwise(n: int) -> tuple[int, ...]:
    b = Builder("big")
    b.output("y", b.exp(b.slot("x", F32, (n,))))
    p = plan(b.build(), "xdna2")
    if p.refusals:
        (r,) = p.refusals
        assert r.kind is RefusalKind.REGION_LIMIT and r.fact("limit") == "tensor_elements"
        assert (r.fact("needed"), r.fact("available")) == (n, ELEMENTS)
        return ()
    (t,) = p.tiles
    return t.chunk, t.n_chunks


def test_dims_up_to_the_abi_limit_plan_and_past_it_are_refused() -> None:
    # 2^31 - 1 is prime: one element per call is its only chunking that fits
    assert _pointwise(ELEMENTS) == (1, ELEMENTS)
    # 2 x (4 + 4) bytes x q <= 64512: q <= 4032, and the largest power of two below is 2048
    assert _pointwise(2**30) == (2048, 2**19)
    # past the ABI, up to the 1 TiB no target holds (2^38 f32): the planner's typed limit
    for n in (ELEMENTS + 1, 2**38):
        assert _pointwise(n) == ()
    # past what any target holds: refused where the type is written, before any planning
    for n in (10**15, 10**20):
        with pytest.raises(DimsTooLarge):
            _pointwise(n)


@st.composite
def _dags(draw: st.DrawFn) -> Program:
    """Pointwise DAGs over many slots whose values are read far from where they are made,
    some of them results: stream counts that rise and fall as tiles join a region."""
    b = Builder("dag")
    values = [b.slot(f"x{i}", F32, (2, 4)) for i in range(draw(st.integers(1, 20)))]
    for k in range(draw(st.integers(1, 80))):
        a, c = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        values.append(b.add(a, c) if k % 2 else b.neg(a))
        if draw(st.integers(0, 9)) == 0:
            b.output(f"r{k}", values[-1])
    b.output("y", values[-1])
    return b.build()


@settings(max_examples=60, derandomize=True, deadline=None)
@given(_dags())
def test_regions_are_maximal_under_the_recounted_streams(program: Program) -> None:
    """Each region is within its bounds and the next tile would break one, with the streams
    recounted from scratch (``regions._streams``) rather than as the former kept them; a region
    leaves one host stream out to its flag word (``data_streams_out``)."""
    from poot_planner.xdna2.regions import _streams

    p = plan(program, "xdna2")
    lim = TARGETS_XDNA2.region_limits
    assert lim is not None
    readers: dict[int, set[int]] = {}
    for t in p.tiles:
        for op in t.inputs:
            readers.setdefault(op.var.id, set()).add(t.index)
    results = {v.id for _, v in program.results()}
    for k, r in enumerate(p.regions):
        h_in, h_out, _ = _streams(list(r.tiles), readers, results)
        assert (len(h_in), len(h_out)) == (len(r.host_in), len(r.host_out))
        assert len(r.tiles) <= lim.compute_tiles
        assert len(h_in) <= lim.host_streams_in and len(h_out) <= lim.data_streams_out
        if k + 1 < len(p.regions):
            more = [*r.tiles, p.regions[k + 1].tiles[0]]
            m_in, m_out, _ = _streams(more, readers, results)
            assert (
                len(more) > lim.compute_tiles
                or len(m_in) > lim.host_streams_in
                or len(m_out) > lim.data_streams_out
            )


def test_a_k_streamed_operand_takes_two_pieces_at_any_chunking() -> None:
    """``stream_k``: the right operand's two objects of one piece each, whatever the calls; the
    rows of the left operand and the output double buffered by the call; the search takes the
    fewest calls that fit, and refuses more calls than the shim's repeat bound."""
    m, k, n, pieces = 96, 256, 256, 32
    b = Builder("dense")
    b.output("y", b.matmul(b.slot("a", F32, (m, k)), b.slot("w", F32, (k, n))))
    program = b.build()
    job = stream_k(tile_for_eqn(0, 0, program.eqns[0], KernelClass.MATMUL), pieces)
    assert job is not None and job.pieces == pieces
    piece = 4 * (k // pieces) * n
    for calls in (1, 2, 3, 96):
        rows = m // calls
        want = 2 * piece + 2 * 4 * rows * k + 2 * 4 * rows * n
        assert Chunking([job]).tile_bytes(job, calls) == want
    got = chunk_calls([job], LIMIT)
    assert not isinstance(got, int)
    fewest = got[1][0]
    fits = [c for c in _divisors(m) if 2 * piece + 8 * (m // c) * (k + n) <= LIMIT]
    assert fewest == fits[0]
    assert isinstance(chunk_calls([job], LIMIT, repeats=fewest - 1), int)
    # a batched right operand has no pieces: each call would need its own batch's
    batched = Builder("batched")
    batched.output(
        "y", batched.matmul(batched.slot("a", F32, (2, 4, k)), batched.slot("w", F32, (2, k, n)))
    )
    e = batched.build().eqns[0]
    assert stream_k(tile_for_eqn(0, 0, e, KernelClass.MATMUL), pieces) is None
