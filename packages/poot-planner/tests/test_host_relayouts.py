"""XDNA2 host relayouts in the planner: reshape, transpose, slice, concat and iota (a counter
written from nothing) admitted from the
capability table as ``KernelClass.HOST_RELAYOUT``, placed between regions (no tile, no
context), their operands streamed out by the regions that make them (counted in the bounds),
and partitioning keeping such programs as one device span."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from poot_ir import Builder, DType, Program, Var
from poot_ir.numerics import AnyInput, BitExact, Exact
from poot_planner import KernelClass, RefusalKind, partition, plan, summarize

F32, F16, I32, BOOL = DType.F32, DType.F16, DType.I32, DType.BOOL
Relayout = Callable[[Builder, Var], Var]

RELAYOUTS: dict[str, Relayout] = {
    "reshape": lambda b, v: b.reshape(v, (8, 3)),
    "transpose": lambda b, v: b.transpose(v, (1, 0)),
    "slice": lambda b, v: b.slice(v, (1, 0), (4, 6), (2, 3)),
    "concat": lambda b, v: b.concat([v, v], 1),
}


def _one(name: str, dtype: DType) -> Program:
    b = Builder(f"{name}_{dtype.value}")
    b.output("y", RELAYOUTS[name](b, b.slot("x", dtype, (4, 6))))
    return b.build()


@pytest.mark.parametrize("dtype", [F32, I32], ids=lambda d: d.value)
def test_a_counter_is_a_host_relayout_of_nothing(dtype: DType) -> None:
    b = Builder("counter")
    b.output("y", b.iota((4, 6), dtype, 1))
    p = plan(b.build(), "xdna2")
    assert p.admitted, p.refusals
    (a,) = p.admissions
    assert a.kernel is KernelClass.HOST_RELAYOUT and p.contexts == 0
    (h,) = p.relayouts
    assert (h.eqn, h.prim.value, h.inputs, h.alias) == (0, "iota", (), False)


def test_a_counter_of_a_dtype_no_tile_computes_is_refused() -> None:
    b = Builder("counter")
    b.output("y", b.iota((4, 6), F16, 1))
    (r,) = plan(b.build(), "xdna2").refusals
    assert r.kind is RefusalKind.UNSUPPORTED_DTYPE


@pytest.mark.parametrize("name", sorted(RELAYOUTS))
@pytest.mark.parametrize("dtype", [F32, I32], ids=lambda d: d.value)
def test_each_relayout_is_admitted_as_a_host_relayout(name: str, dtype: DType) -> None:
    p = plan(_one(name, dtype), "xdna2")
    assert p.admitted, p.refusals
    (a,) = p.admissions
    assert a.kernel is KernelClass.HOST_RELAYOUT and a.tile is None
    assert a.contract is not None
    assert (a.contract.bound, a.contract.domain) == (BitExact(), AnyInput())
    assert p.tiles == () and p.regions == () and p.contexts == 0
    (h,) = p.relayouts
    assert (h.eqn, h.prim.value, h.alias, h.after) == (0, name, name == "reshape", 0)
    assert p.numerics == Exact()
    # table data, not a rewrite: admitted without legalization too
    assert plan(_one(name, dtype), "xdna2", legalization=False).admitted


@pytest.mark.parametrize("name", sorted(RELAYOUTS))
@pytest.mark.parametrize("dtype", [F16, BOOL], ids=lambda d: d.value)
def test_a_relayout_of_a_dtype_no_tile_computes_is_refused(name: str, dtype: DType) -> None:
    p = plan(_one(name, dtype), "xdna2")
    (r,) = p.refusals
    assert r.kind is RefusalKind.UNSUPPORTED_DTYPE
    assert r.facts == (("dtype", dtype.value), ("admitted", "f32 i32"))


def test_the_operands_relayouts_read_count_as_streams_out_of_their_region() -> None:
    """20 negations, then a reshape of each: every negation's value leaves its region for the
    host (15 data streams out, the flag word the 16th), so the tiles split 15 + 5; a reshape of
    a value region 0 made runs before region 1, one of region 1's closes it."""
    b = Builder("fan")
    x = b.slot("x", F32, (4, 4))
    negs = [b.neg(x) for _ in range(20)]
    for k, v in enumerate(negs):
        b.output(f"r{k}", b.reshape(v, (16,)))
    p = plan(b.build(), "xdna2")
    assert p.admitted, p.refusals
    assert [len(r.tiles) for r in p.regions] == [15, 5]
    for r in p.regions:
        assert {v.id for v in r.host_out} == {t.output.id for t in r.tiles}
        assert r.internal == ()
    assert [h.after for h in p.relayouts] == [1] * 15 + [2] * 5
    assert p.contexts == 2


def test_a_relayout_of_a_value_the_open_region_makes_closes_it() -> None:
    b = Builder("close")
    v: Var = b.slot("x", F32, (4, 4))
    v = b.neg(b.neg(v))  # two tiles, one region
    t = b.transpose(v, (1, 0))
    b.output("y", b.neg(b.neg(t)))
    p = plan(b.build(), "xdna2")
    assert [r.eqns for r in p.regions] == [(0, 1), (3, 4)]
    (h,) = p.relayouts
    assert h.after == 1 and h.inputs[0].id in {v.id for v in p.regions[0].host_out}
    # the transposed value enters region 1 as a host stream
    assert h.output.id in {v.id for v in p.regions[1].host_in}


def test_a_dead_relayout_moves_nothing() -> None:
    b = Builder("dead")
    x = b.slot("x", F32, (4, 4))
    b.transpose(x, (1, 0))  # read by nothing
    b.output("y", b.neg(x))
    p = plan(b.build(), "xdna2")
    assert p.admitted and p.relayouts == () and len(p.regions) == 1


def test_relayouts_take_no_context_and_the_limit_still_holds() -> None:
    def chain(n: int) -> Program:
        # a factor of its own in each region: identical regions would share one context
        b = Builder(f"chain{n}")
        v: Var = b.slot("x", F32, (4, 4))
        for k in range(n):
            v = b.reshape(b.transpose(b.mul(v, float(k + 2)), (1, 0)), (4, 4))
        b.output("y", v)
        return b.build()

    p = plan(chain(16), "xdna2")
    assert p.admitted and p.contexts == 16 and len(p.relayouts) == 32
    (r,) = plan(chain(17), "xdna2").refusals
    assert r.kind is RefusalKind.CONTEXT_LIMIT
    assert (r.fact("needed"), r.fact("available")) == (17, 16)


def test_partition_keeps_relayouts_inside_one_device_span() -> None:
    """Elementwise work with relayouts between, then a select xdna2 refuses: one device span
    (every relayout inside it) and one oracle span, where the relayouts used to cut it."""
    b = Builder("encoder_like")
    x = b.slot("x", F32, (2, 3, 4))
    v = b.exp(b.neg(x))
    v = b.transpose(b.reshape(v, (6, 4)), (1, 0))  # (4, 6)
    v = b.concat([b.slice(v, (0, 0), (4, 3), (1, 1)), b.neg(b.slice(v, (0, 3), (4, 6), (1, 1)))], 0)
    b.output("y", b.select(b.slot("p", DType.BOOL, (8, 3)), v, 0.0))
    spans = partition(b.build(), "xdna2")
    assert [s.device for s in spans] == [True, False]
    assert spans[0].eqns == tuple(range(8))
    s = summarize(spans, "xdna2")
    assert (s.device_spans, s.oracle_spans) == (1, 1)


def test_a_span_of_relayouts_alone_goes_to_the_oracle() -> None:
    """Between two refused selects, a span of nothing but relayouts is no NPU work: the oracle
    does it on the host, with no dispatch of its own; a span with a region stays on the device."""
    b = Builder("between_matmuls")
    x = b.slot("x", F32, (4, 6))
    pred = b.slot("p", DType.BOOL, (4, 6))
    v = b.select(pred, x, 1.0)  # refused
    v = b.reshape(b.transpose(v, (1, 0)), (4, 6))  # relayouts alone
    v = b.select(pred, v, 2.0)  # refused
    b.output("y", b.neg(b.transpose(v, (1, 0))))  # a relayout and a region
    spans = partition(b.build(), "xdna2")
    assert [(s.device, s.eqns) for s in spans] == [(False, (0, 1, 2, 3)), (True, (4, 5))]
    p = spans[1].plan
    assert p is not None and p.contexts == 1 and len(p.relayouts) == 1
    # a whole program of relayouts is admitted, so it stays one device span
    b = Builder("only")
    b.output("y", b.transpose(b.slot("x", F32, (4, 6)), (1, 0)))
    (s,) = partition(b.build(), "xdna2")
    assert s.device and s.plan is not None and s.plan.contexts == 0
