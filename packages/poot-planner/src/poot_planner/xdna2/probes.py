"""Programs sized to meet one XDNA2 region bound exactly, for ``poot acceptance`` (each bound at
and one past its limit, ``poot.acceptance.regions``) and the device tests
(``packages/poot-npu/tests/xdna_cases.py``): one copy, so both count as the planner counts.

- ``neg_chain(n)``: ``n`` equations in a chain, so ``n`` compute tiles; one stream in, one out;
- ``add_chain(n)``: the sum of ``n`` slots, so ``n`` host streams in;
- ``fan_out(n)``: ``n`` results of one slot (``neg`` and ``exp`` in turn, so each result is
  checked under its own contract), so ``n`` data streams out (the flag word takes one more);
- ``marked_chain(n, tiles)``: ``n`` products in a chain, each by a factor of its own, so that no
  two regions are one artifact however the chain is cut (identical regions share one:
  ``poot_planner.xdna2.regions.share_artifacts``) and ``n / tiles`` regions need as many
  hardware contexts.

Every value is F32 of ``shape``.
"""

from __future__ import annotations

from poot_ir import Builder, DType, Program

__all__ = ["add_chain", "chain_factor", "fan_out", "marked_chain", "neg_chain"]

F32 = DType.F32


def neg_chain(n: int, shape: tuple[int, ...] = (2, 8)) -> Program:
    """``y = -(...(-x))``, ``n`` negations (bit exact at any ``n``)."""
    b = Builder(f"neg_chain{n}")
    v = b.slot("x", F32, shape)
    for _ in range(n):
        v = b.neg(v)
    b.output("y", v)
    return b.build()


def add_chain(n: int, shape: tuple[int, ...] = (2, 8)) -> Program:
    """``s = x0 + x1 + ... + x(n-1)``, added in order."""
    b = Builder(f"add_chain{n}")
    acc = b.slot("x0", F32, shape)
    for i in range(1, n):
        acc = b.add(acc, b.slot(f"x{i}", F32, shape))
    b.output("s", acc)
    return b.build()


def fan_out(n: int, shape: tuple[int, ...] = (2, 8)) -> Program:
    """``y0 = -x``, ``y1 = exp(x)``, ``y2 = -x``, ...: ``n`` results of one slot."""
    b = Builder(f"fan_out{n}")
    x = b.slot("x", F32, shape)
    for i in range(n):
        b.output(f"y{i}", b.exp(x) if i % 2 else b.neg(x))
    return b.build()


def marked_chain(n: int, tiles: int, shape: tuple[int, ...] = (2, 8)) -> Program:
    """``n`` products in a chain, each by a factor of its own (``chain_factor``: products are
    bit exact), so that no two tiles, hence no two regions however the chain is cut, are one
    artifact; ``tiles`` names the region's compute tiles (``n / tiles`` regions)."""
    b = Builder(f"marked_chain{n}_{tiles}")
    v = b.slot("x", F32, shape)
    for j in range(n):
        v = b.mul(v, chain_factor(j))
    b.output("y", v)
    return b.build()


def chain_factor(j: int) -> float:
    """The factor of product ``j`` of ``marked_chain``: ``1 + k/2048`` for even ``j``, its
    reciprocal (rounded) for the odd one after, so the chain's product stays near 1; distinct
    for every ``j`` below 4096."""
    k = j // 2 + 1
    return 1.0 + k / 2048 if j % 2 == 0 else 1.0 / (1.0 + k / 2048)
