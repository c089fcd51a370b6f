"""Programs sized to meet one XDNA2 region bound exactly, for ``poot acceptance`` (each bound at
and one past its limit, ``poot.acceptance.regions``) and the device tests
(``packages/poot-npu/tests/xdna_cases.py``): one copy, so both count as the planner counts.

- ``neg_chain(n)``: ``n`` equations in a chain, so ``n`` compute tiles; one stream in, one out;
- ``add_chain(n)``: the sum of ``n`` slots, so ``n`` host streams in;
- ``fan_out(n)``: ``n`` results of one slot (``neg`` and ``exp`` in turn, so each result is
  checked under its own contract), so ``n`` data streams out (the flag word takes one more);
- ``marked_chain(n, tiles)``: ``neg_chain(n)`` with one ``max(v, v)`` per region of ``tiles``
  tiles, at a different place in each, so that no two regions are one artifact (identical
  regions share one: ``poot_planner.xdna2.regions.share_artifacts``) and ``n / tiles``
  regions need as many hardware contexts.

Every value is F32 of ``shape``.
"""

from __future__ import annotations

from poot_ir import Builder, DType, Program

__all__ = ["add_chain", "fan_out", "marked_chain", "neg_chain"]

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
    """``n`` equations in a chain, ``tiles`` to a region (the region's compute tiles): each a
    negation, but for one ``max(v, v)`` (bit exact: ``v``) at place ``k % tiles`` of region
    ``k``, so every region's kernels differ from every other's."""
    b = Builder(f"marked_chain{n}")
    v = b.slot("x", F32, shape)
    for j in range(n):
        region, place = divmod(j, tiles)
        v = b.max(v, v) if place == region % tiles else b.neg(v)
    b.output("y", v)
    return b.build()
