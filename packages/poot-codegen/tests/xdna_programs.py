"""Example programs for the XDNA2 code generator's tests (golden designs and end to end)."""

from __future__ import annotations

from poot_ir import Builder, DType, Program, ops

__all__ = [
    "EXAMPLES",
    "batch_held",
    "chain",
    "gather",
    "k_streamed",
    "rmsnorm_weight",
    "two_regions",
]


def chain() -> Program:
    """A pointwise chain whose intermediate values move tile to tile."""
    b = Builder("chain")
    x = b.slot("x", DType.F32, (16, 32))
    y = b.slot("y", DType.F32, (16, 32))
    t = b.add(x, y)
    u = b.exp(b.mul(t, 0.5))
    b.output("u", b.max(u, t))
    return b.build()


def rmsnorm_weight() -> Program:
    """An RMSNorm with a weight over 64 columns: one fused norm tile."""
    b = Builder("rmsnorm")
    x = b.slot("x", DType.F32, (8, 64))
    w = b.weight("w", DType.F32, (64,))
    b.output("y", ops.rmsnorm(b, x, w))
    return b.build()


def gather() -> Program:
    """A gather along a middle axis with 2-D indices."""
    b = Builder("gather")
    table = b.weight("table", DType.F32, (10, 4, 3))
    idx = b.slot("idx", DType.I32, (2, 3))
    b.output("g", b.gather(table, idx, axis=1))
    return b.build()


def two_regions(n: int = 17) -> Program:
    """A sum of ``n`` slots: more host streams in than one region has, so two regions, the
    first handing its partial sum to the second through the scratch arena."""
    b = Builder("two_regions")
    xs = [b.slot(f"x{i}", DType.F32, (4, 8)) for i in range(n)]
    acc = xs[0]
    for x in xs[1:]:
        acc = b.add(acc, x)
    b.output("s", acc)
    return b.build()


def k_streamed() -> Program:
    """A dense layer whose weight (256 KiB) no tile holds: it streams in pieces of K rows,
    passed once per call, its output handed tile to tile to a ReLU."""
    b = Builder("k_streamed")
    x = b.slot("x", DType.F32, (32, 256))
    w = b.weight("w", DType.F32, (256, 256))
    b.output("y", b.max(b.matmul(x, w), 0.0))
    return b.build()


def batch_held() -> Program:
    """Attention's scores: per head ``[48, 64] @ [64, 100]``, 3 heads. The keys (75 KiB) are
    past a tile, one head's (25 KiB) is not: held one head at a time, each across the calls of
    that head's rows."""
    b = Builder("batch_held")
    q = b.slot("q", DType.F32, (3, 48, 64))
    k = b.slot("k", DType.F32, (3, 64, 100))
    b.output("s", b.matmul(q, k))
    return b.build()


EXAMPLES = {
    "chain": chain,
    "rmsnorm_weight": rmsnorm_weight,
    "gather": gather,
    "two_regions": two_regions,
    "k_streamed": k_streamed,
    "batch_held": batch_held,
}
