"""Chunking searches chunk sizes bounded by tile memory, never the divisors of a dimension:
the same answer as the exhaustive divisor search on small dims, and a plan at once for dims up
to the kernel ABI's element count (past it: a typed limit, before any search)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import Builder, DType
from poot_ir.budget import DimsTooLarge
from poot_planner import RefusalKind, TileOp, plan
from poot_planner.chunking import Chunking, chunk_calls

F32 = DType.F32
LIMIT = 64512
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
