"""The windowed primitives as their windows (im2col by data movement), the rules xdna2 runs them
by: its tiles have a matmul (bf16 operands, FP32 accumulation) and row reductions, and no
convolution or pooling.

The windows: each tap of a window reads, for every output position, one strided slice of the
padded input (``_tap_slices``), so the windows are those slices side by side.

- A convolution (``expand_conv_as_matmul``): output pixel ``p`` of group ``g`` sums
  ``x[n, g Cg + c, p s + t d - lo] w[g Og + o, c, t]`` over the input features ``c < Cg`` of
  its group and the kernel taps ``t``, so it is ``(N P, T Cg)`` window rows times the
  ``(T Cg, Og)`` kernel matrix, per group (a batched matmul over the groups; a depthwise
  convolution is ``Cg = Og = 1``). The terms are the convolution's and so is their count,
  ``K = T Cg`` (a padding zero makes a term of exactly 0, as in the convolution).
- A window sum or maximum (``expand_window_reduction``): the windows stacked on a new last
  axis, reduced over it (``reduce_sum``, ``reduce_max``): the same elements, so the same terms
  for the sum. An axis the window covers whole (a global pool) is reduced as it is. A maximum's ``-inf`` padding is the edge element repeated instead (no counter
  makes ``-inf``): a window of unit dilation that reaches past an edge holds that edge's
  element, so repeating it changes no maximum; windows with a dilated tap, or wholly in the
  padding, stay refused.

Everything around the one matmul or reduction moves bits (zeros counted from nothing,
concatenations, slices, transposes, reshapes): each rewrite is the identity up to that step's
own contract (``legalize.bounds``). What is not covered: a convolution's input dilation (a
transposed convolution's zeros between pixels) and negative padding (a crop). A window's ``T``
taps make the windows ``T`` times the input, moved on the host between region runs on xdna2
(``HOST_RELAYOUT``).

And one rule for the OpenVINO graph targets (intel-npu4, host-cpu), whose MaxPool and AvgPool
window the trailing axes of an ``[N, C, spatial...]`` value (``expand_window_channels_first``):
a window reduction of a channels-last value (Flax pools NHWC) is transposed so its two
unwindowed axes lead, reduced with the same window, and transposed back. Transposes move bits,
so the rewrite is exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from poot_ir import (
    ConcatParams,
    Eqn,
    IotaParams,
    Prim,
    ReduceParams,
    ReshapeParams,
    SliceParams,
    TransposeParams,
    Var,
)
from poot_ir.window import ConvParams, ReduceWindowParams

from poot_planner.emit import Emit, RuleContext

__all__ = ["expand_conv_as_matmul", "expand_window_channels_first", "expand_window_reduction"]


def expand_conv_as_matmul(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    x, w = e.inputs
    p = e.params
    if not (isinstance(x, Var) and isinstance(w, Var) and isinstance(p, ConvParams)):
        return False
    if (
        not em.dtype.is_float
        or any(d != 1 for d in p.lhs_dilation)
        or min(p.padding_lo + p.padding_hi, default=0) < 0
    ):
        return False
    n, c = x.type.shape[:2]
    o, kernel = w.type.shape[0], w.type.shape[2:]
    space = e.out.type.shape[2:]
    g, taps, pixels = p.groups, math.prod(kernel), math.prod(space)
    cg, og = c // g, o // g
    batch = (g,) if g > 1 else ()  # one group: a plain matmul
    # the taps over the spatial axes only, every batch and feature taken whole
    padded = _padded(em, x, ((0, 0), (0, 0), *p.padding), _zeros)
    slices = _tap_slices(
        em, padded, (1, 1, *kernel), (1, 1, *p.strides), (1, 1, *p.rhs_dilation), (n, c, *space)
    )
    windows = _side_by_side(em, slices, 1)  # [N, T C, *S]: tap-major
    rows = em.op(Prim.RESHAPE, windows, params=ReshapeParams((n, taps, g, cg, pixels)))
    rows = em.op(Prim.TRANSPOSE, rows, params=TransposeParams((2, 0, 4, 1, 3)))  # [G, N, P, T, Cg]
    rows = em.op(Prim.RESHAPE, rows, params=ReshapeParams((*batch, n * pixels, taps * cg)))
    matrix = em.op(Prim.RESHAPE, w, params=ReshapeParams((g, og, cg, taps)))
    matrix = em.op(Prim.TRANSPOSE, matrix, params=TransposeParams((0, 3, 2, 1)))  # [G, T, Cg, Og]
    matrix = em.op(Prim.RESHAPE, matrix, params=ReshapeParams((*batch, taps * cg, og)))
    y = em.op(Prim.MATMUL, rows, matrix)  # [G, N P, Og]
    y = em.op(Prim.RESHAPE, y, params=ReshapeParams((g, n, pixels, og)))
    y = em.op(Prim.TRANSPOSE, y, params=TransposeParams((1, 0, 3, 2)))  # [N, G, Og, P]
    em.op(Prim.RESHAPE, y, params=ReshapeParams(e.out.type.shape), out=e.out)
    return True


def expand_window_reduction(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    (x,) = e.inputs
    p = e.params
    if not (isinstance(x, Var) and isinstance(p, ReduceWindowParams)) or not em.dtype.is_float:
        return False
    if min(p.padding_lo + p.padding_hi, default=0) < 0:
        return False
    if e.prim is Prim.REDUCE_WINDOW_MAX:
        if not _edges_in_every_window(x.type.shape, p):
            return False
        padded = _padded(em, x, p.padding, _edges)
        reduce = Prim.REDUCE_MAX
    else:
        padded = _padded(em, x, p.padding, _zeros)
        reduce = Prim.REDUCE_SUM
    # an axis the window covers whole (a global pool) is reduced as it is, without taps; the
    # taps are stacked last, so each output's elements are one contiguous row (the row
    # reduction chunks by rows; reduced across leading axes, it needs the whole operand)
    shape = x.type.shape
    whole = tuple(
        a
        for a, (n, k, (lo, hi)) in enumerate(zip(shape, p.window, p.padding, strict=True))
        if k == n > 1 and not (lo or hi)
    )
    window = tuple(1 if a in whole else k for a, k in enumerate(p.window))
    out = tuple(shape[a] if a in whole else n for a, n in enumerate(e.out.type.shape))
    slices = _tap_slices(em, padded, window, p.strides, p.dilation, out)
    if len(slices) == 1:  # no taps: the whole axes alone
        reduced = em.op(reduce, slices[0], params=ReduceParams(whole))
    else:
        column = ReshapeParams((*out, 1))
        taps = [em.op(Prim.RESHAPE, v, params=column) for v in slices]
        stacked = em.op(Prim.CONCAT, *taps, params=ConcatParams(len(out)))  # [*out, T]
        reduced = em.op(reduce, stacked, params=ReduceParams((*whole, len(out))))
    em.op(Prim.RESHAPE, reduced, params=ReshapeParams(e.out.type.shape), out=e.out)
    return True


def expand_window_channels_first(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    """A window reduction whose two axes the window leaves alone (window, stride and dilation
    1, no padding) are not its first two (a channels-last value): those two moved first, in
    their order, the reduction over the result, and its result moved back. Not applied when
    the first two are already such axes: a refusal for another reason stays one."""
    (x,) = e.inputs
    p = e.params
    if not (isinstance(x, Var) and isinstance(p, ReduceWindowParams)):
        return False
    rank = len(p.window)
    idle = [
        a
        for a in range(rank)
        if p.window[a] == p.strides[a] == p.dilation[a] == 1
        and p.padding_lo[a] == p.padding_hi[a] == 0
    ]
    if len(idle) < 2 or idle[:2] == [0, 1]:
        return False
    perm = (*idle[:2], *(a for a in range(rank) if a not in idle[:2]))

    def moved(t: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(t[a] for a in perm)

    q = ReduceWindowParams(
        moved(p.window), moved(p.strides), moved(p.padding_lo), moved(p.padding_hi),
        moved(p.dilation),
    )  # fmt: skip
    first = em.op(Prim.TRANSPOSE, x, params=TransposeParams(perm))
    reduced = em.op(e.prim, first, params=q)
    back = tuple(perm.index(a) for a in range(rank))
    em.op(Prim.TRANSPOSE, reduced, params=TransposeParams(back), out=e.out)
    return True


def _tap_slices(
    em: Emit,
    x: Var,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    dilation: tuple[int, ...],
    out: tuple[int, ...],
) -> list[Var]:
    """For each tap of ``window`` (full rank, row-major), the strided slice of the (padded)
    ``x`` that tap reads for every one of the ``out`` positions (``x`` itself where that is
    all of it)."""
    slices = []
    for tap in itertools.product(*(range(k) for k in window)):
        start = tuple(t * d for t, d in zip(tap, dilation, strict=True))
        limit = tuple(a + (n - 1) * s + 1 for a, n, s in zip(start, out, strides, strict=True))
        if not any(start) and limit == x.type.shape and set(strides) <= {1}:
            slices.append(x)
            continue
        slices.append(em.op(Prim.SLICE, x, params=SliceParams(start, limit, strides)))
    return slices


def _side_by_side(em: Emit, parts: list[Var], axis: int) -> Var:
    return parts[0] if len(parts) == 1 else em.op(Prim.CONCAT, *parts, params=ConcatParams(axis))


def _padded(
    em: Emit,
    x: Var,
    padding: tuple[tuple[int, int], ...],
    fill: Callable[[Emit, Var, int, int, bool], list[Var]],
) -> Var:
    """``x`` with each axis padded on each side by what ``fill`` makes."""
    for axis, (lo, hi) in enumerate(padding):
        if lo or hi:
            sides = (*fill(em, x, axis, lo, False), x, *fill(em, x, axis, hi, True))
            x = _side_by_side(em, list(sides), axis)
    return x


def _zeros(em: Emit, x: Var, axis: int, width: int, high: bool) -> list[Var]:
    """Zeros shaped as ``x`` but ``width`` wide on ``axis`` (none when ``width`` is 0): the
    count along a new axis of one element, which is 0 everywhere (a literal has no shape to
    broadcast from, and a counter moves no operand: on xdna2 the host writes it)."""
    if not width:
        return []
    shape = x.type.shape[:axis] + (width,) + x.type.shape[axis + 1 :]
    count = em.op(Prim.IOTA, params=IotaParams((1, *shape), x.type.dtype, 0))
    return [em.op(Prim.RESHAPE, count, params=ReshapeParams(shape))]


def _edges(em: Emit, x: Var, axis: int, width: int, high: bool) -> list[Var]:
    """``x``'s first (or, ``high``, last) slice on ``axis``, ``width`` times: the padding a
    maximum can take instead of ``-inf`` (see the module)."""
    if not width:
        return []
    shape = x.type.shape
    at = shape[axis] - 1 if high else 0
    start = tuple(at if a == axis else 0 for a in range(len(shape)))
    limit = tuple(at + 1 if a == axis else n for a, n in enumerate(shape))
    edge = em.op(Prim.SLICE, x, params=SliceParams(start, limit, (1,) * len(shape)))
    return [edge] * width


def _edges_in_every_window(shape: tuple[int, ...], p: ReduceWindowParams) -> bool:
    """Whether every window of unit dilation holds an element of ``x`` next to each padding
    it reaches: the first window reaches the first element, and the last starts inside."""
    for n, k, s, d, (lo, hi) in zip(shape, p.window, p.strides, p.dilation, p.padding, strict=True):
        if not (lo or hi):
            continue
        if d != 1 or n == 0 or lo > k - 1:
            return False
        last = (n + lo + hi - k) // s * s - lo  # the last window's first element
        if last > n - 1:
            return False
    return True
