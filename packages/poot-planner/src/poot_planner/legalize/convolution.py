"""A convolution as a matmul of its windows (im2col by data movement), the rule xdna2 runs a
convolution by: its tiles have a matmul (bf16 operands, FP32 accumulation) and no convolution.

Output pixel ``p`` of group ``g`` sums ``x[n, g Cg + c, p s + t d - lo] w[g Og + o, c, t]``
over the input features ``c < Cg`` of its group and the kernel taps ``t`` (positions past the
input read the padding's zeros). Each tap's pixels for every output position are one strided
slice of the zero-padded input, so the windows are those slices side by side, and the
convolution is ``(N P, T Cg)`` window rows times the ``(T Cg, Og)`` kernel matrix, per group
(a batched matmul over the groups; a depthwise convolution is ``Cg = Og = 1``). The terms are
the convolution's and so is their count, ``K = T Cg`` (a padding zero makes a term of exactly
0, as in the convolution), and everything around the matmul moves bits (counted zeros,
concatenations, slices, transposes, reshapes): the rewrite is the identity up to the matmul's
own contract (``legalize.bounds``).

What it does not cover: input dilation (a transposed convolution's zeros between pixels) and
negative padding (a crop), which stay refused. A window's ``T`` taps make the windows ``T``
times the input, moved on the host between region runs on xdna2 (``HOST_RELAYOUT``).
"""

from __future__ import annotations

import itertools
import math

from poot_ir import (
    ConcatParams,
    Eqn,
    IotaParams,
    Prim,
    ReshapeParams,
    SliceParams,
    TransposeParams,
    Var,
)
from poot_ir.window import ConvParams

from poot_planner.emit import Emit, RuleContext

__all__ = ["expand_conv_as_matmul"]


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
    windows = _windows(em, _padded(em, x, p), kernel, space, p)  # [N, T C, *S]: tap-major
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


def _padded(em: Emit, x: Var, p: ConvParams) -> Var:
    """``x`` with each spatial axis padded by zeros concatenated on each side."""
    for axis, (lo, hi) in enumerate(p.padding, start=2):
        if lo or hi:
            sides = (_zeros(em, x, axis, lo), x, _zeros(em, x, axis, hi))
            x = em.op(Prim.CONCAT, *(v for v in sides if v is not None), params=ConcatParams(axis))
    return x


def _zeros(em: Emit, x: Var, axis: int, width: int) -> Var | None:
    """Zeros shaped as ``x`` but ``width`` wide on ``axis`` (None when ``width`` is 0): the
    count along a new axis of one element, which is 0 everywhere (a literal has no shape to
    broadcast from, and a counter moves no operand: on xdna2 the host writes it)."""
    if not width:
        return None
    shape = x.type.shape[:axis] + (width,) + x.type.shape[axis + 1 :]
    count = em.op(Prim.IOTA, params=IotaParams((1, *shape), x.type.dtype, 0))
    return em.op(Prim.RESHAPE, count, params=ReshapeParams(shape))


def _windows(
    em: Emit, x: Var, kernel: tuple[int, ...], space: tuple[int, ...], p: ConvParams
) -> Var:
    """Every tap's pixels, one strided slice of the padded input each, side by side on the
    feature axis in the kernel's row-major order of taps: ``[N, T C, *S]``."""
    full = x.type.shape
    slices = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        start = tuple(t * d for t, d in zip(tap, p.rhs_dilation, strict=True))
        limit = tuple(
            a + (s - 1) * st + 1 for a, s, st in zip(start, space, p.strides, strict=True)
        )
        if start == (0,) * len(space) and limit == full[2:] and set(p.strides) <= {1}:
            slices.append(x)  # the whole input: a 1x1 window at stride 1
            continue
        params = SliceParams((0, 0, *start), (*full[:2], *limit), (1, 1, *p.strides))
        slices.append(em.op(Prim.SLICE, x, params=params))
    if len(slices) == 1:
        return slices[0]
    return em.op(Prim.CONCAT, *slices, params=ConcatParams(1))
