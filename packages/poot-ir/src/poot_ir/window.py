"""Convolution and window reductions: their parameters, their result shapes, and their float64
reference arithmetic (the oracle's rules for ``conv``, ``reduce_window_sum`` and
``reduce_window_max`` call the functions here).

The semantics are ``jax.lax.conv_general_dilated`` and ``jax.lax.reduce_window`` with one fixed
layout, the one ONNX uses:

- ``conv(x, w)``: ``x`` is ``[N, C, *S]`` (NCHW-style: batch, input features, 1 to 3 spatial
  axes) and ``w`` is ``[O, C / groups, *K]`` (OIHW-style). The input is first dilated
  (``lhs_dilation - 1`` zeros between neighbours: an axis of ``n`` becomes ``ld*(n-1)+1``, or 0
  when ``n`` is 0), then padded by ``(lo, hi)`` zeros per spatial axis (a negative pad crops).
  ``y[b, m, p] = sum_{c, t} xpad[b, g*C/G + c, p*s + t*d] * w[m, c, t]`` with
  ``g = m // (O/G)``; ``feature_group_count`` ``G`` divides ``C`` and ``O`` (depthwise is
  ``G == C``). Output extent per spatial axis: ``floor((dilated + lo + hi - ((k-1)*d+1)) / s) + 1``,
  or 0 when the padded axis is shorter than the dilated kernel.
- ``reduce_window_{sum,max}(x)``: windows over every axis of ``x`` (full rank, like lax; a pool
  over NCHW has window ``(1, 1, kh, kw)``), padding filled with the reduction's identity
  (0 for sum, -inf for max), window dilation ``d``; the same extent formula with ``ld = 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["ConvParams", "ReduceWindowParams", "conv64", "conv_shape", "window_extent"]

Array = np.ndarray[Any, np.dtype[Any]]


@dataclass(frozen=True, slots=True)
class ConvParams:
    """``conv``'s parameters, one entry per spatial axis (see the module docstring). Padding
    is two tuples, ``padding_lo`` and ``padding_hi`` (the text format writes integer tuples);
    ``padding`` pairs them."""

    strides: tuple[int, ...]
    padding_lo: tuple[int, ...]
    padding_hi: tuple[int, ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    groups: int

    @property
    def padding(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.padding_lo, self.padding_hi, strict=True))


@dataclass(frozen=True, slots=True)
class ReduceWindowParams:
    """A window reduction's parameters, one entry per axis of the operand (full rank)."""

    window: tuple[int, ...]
    strides: tuple[int, ...]
    padding_lo: tuple[int, ...]
    padding_hi: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def padding(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.padding_lo, self.padding_hi, strict=True))


def _dilated(n: int, ld: int) -> int:
    return 0 if n == 0 else ld * (n - 1) + 1


def window_extent(n: int, k: int, s: int, lo: int, hi: int, d: int = 1, ld: int = 1) -> int:
    """The number of windows along one axis (JAX's formula), 0 when none fits."""
    room = _dilated(n, ld) + lo + hi - ((k - 1) * d + 1)
    return 0 if room < 0 else room // s + 1


def _axis_problem(
    i: int, n: int, k: int, s: int, lo: int, hi: int, d: int, ld: int = 1
) -> str | None:
    if k < 1 or s < 1 or d < 1 or ld < 1:
        return f"axis {i}: window {k}, stride {s} and dilations {d}, {ld} must be >= 1"
    full = _dilated(n, ld)
    if lo < -full or hi < -full or full + lo + hi < 0:
        return f"axis {i}: padding ({lo}, {hi}) crops more than the {full} elements there"
    return None


def conv_shape(x: tuple[int, ...], w: tuple[int, ...], p: ConvParams) -> tuple[int, ...] | str:
    """The result shape of ``conv`` on operands of shapes ``x`` and ``w``, or what is wrong."""
    k = len(x) - 2
    if not 1 <= k <= 3 or len(w) != len(x):
        return f"needs x [N, C, *S] and w [O, C/groups, *K] of equal rank 3 to 5, got {x} and {w}"
    fields = (p.strides, p.padding_lo, p.padding_hi, p.lhs_dilation, p.rhs_dilation)
    if any(len(f) != k for f in fields):
        return f"strides, padding_lo, padding_hi and dilations need {k} entries each"
    g = p.groups
    if g < 1 or x[1] % g or w[0] % g or w[1] * g != x[1]:
        return f"groups {g} must divide C {x[1]} and O {w[0]}, with w's axis 1 {w[1]} = C/groups"
    out = []
    for i in range(k):
        args = (x[2 + i], w[2 + i], p.strides[i], p.padding_lo[i], p.padding_hi[i])
        problem = _axis_problem(2 + i, *args, p.rhs_dilation[i], p.lhs_dilation[i])
        if problem:
            return problem
        out.append(window_extent(*args, p.rhs_dilation[i], p.lhs_dilation[i]))
    return (x[0], w[0], *out)


def reduce_window_shape(x: tuple[int, ...], p: ReduceWindowParams) -> tuple[int, ...] | str:
    """The result shape of a window reduction of ``x``, or what is wrong."""
    fields = (p.window, p.strides, p.padding_lo, p.padding_hi, p.dilation)
    if any(len(f) != len(x) for f in fields):
        return f"window, strides, padding_lo, padding_hi and dilation need {len(x)} entries each"
    out = []
    for i, n in enumerate(x):
        args = (n, p.window[i], p.strides[i], p.padding_lo[i], p.padding_hi[i], p.dilation[i])
        problem = _axis_problem(i, *args)
        if problem:
            return problem
        out.append(window_extent(*args))
    return tuple(out)


# -- the float64 arithmetic -------------------------------------------------------------------


def _pad(x: Array, pads: Sequence[tuple[int, int]], value: float, first: int) -> Array:
    """``x`` padded with ``value`` (a negative pad crops) on the axes from ``first`` on."""
    if x.ndim == 0:  # np.pad refuses a scalar; a rank-0 operand has one window, itself
        return x
    lead = (slice(None),) * first
    crop = tuple(
        slice(max(-lo, 0), x.shape[first + a] - max(-hi, 0)) for a, (lo, hi) in enumerate(pads)
    )
    widths = [(0, 0)] * first + [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    # an integer array even for a rank-0 operand (np.pad takes an empty list for floats)
    return np.pad(x[lead + crop], np.array(widths, np.intp).reshape(-1, 2), constant_values=value)


def _dilate(x: Array, ld: Sequence[int]) -> Array:
    """lax's lhs_dilation on the spatial axes of ``[N, C, *S]``: ``ld-1`` zeros between."""
    if all(d == 1 for d in ld):
        return x
    shape = x.shape[:2] + tuple(_dilated(n, d) for n, d in zip(x.shape[2:], ld, strict=True))
    out = np.zeros(shape, x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in ld)] = x
    return out


def _windows(
    x: Array, window: Sequence[int], strides: Sequence[int], dil: Sequence[int], first: int
) -> Array:
    """A view ``[*lead, *O, *K]`` of the windows over the axes from ``first`` on (no copy)."""
    axes = tuple(range(first, x.ndim))
    spans = [(k - 1) * d + 1 for k, d in zip(window, dil, strict=True)]
    v = sliding_window_view(x, spans, axis=axes)
    v = v[(Ellipsis,) + tuple(slice(None, None, d) for d in dil)]
    return v[(slice(None),) * first + tuple(slice(None, None, s) for s in strides)]


def conv64(x: Array, w: Array, p: ConvParams, out_shape: tuple[int, ...]) -> Array:
    """``conv`` at float64 (operands widened exactly): no Python loop over groups or output
    elements. Depthwise-like convolutions (one input channel per group) loop over the kernel's
    taps, one output-sized multiply-add each; the rest is one einsum over a strided window
    view per call. Either way each output is a float64 sum of exact float64 products."""
    if 0 in out_shape:
        return np.zeros(out_shape, np.float64)
    k = x.ndim - 2
    xp = _pad(_dilate(np.asarray(x, np.float64), p.lhs_dilation), p.padding, 0.0, 2)
    wf = np.asarray(w, np.float64)
    win = _windows(xp, wf.shape[2:], p.strides, p.rhs_dilation, 2)  # [N, C, *O, *K]
    n, c = xp.shape[:2]
    m, g = wf.shape[0], p.groups
    out = win.shape[2 : 2 + k]
    if c == g:  # one input channel per group: a loop over the taps, no [N, C, *O, *K] copy
        mult = m // g
        wg = wf[:, 0].reshape(g, mult, *wf.shape[2:])
        y = np.zeros((n, g, mult, *out), np.float64)
        for t in np.ndindex(*wf.shape[2:]):
            tap = win[(Ellipsis, *t)][:, :, None]  # [N, G, 1, *O]
            y += tap * wg[(slice(None), slice(None), *t)].reshape(g, mult, *(1,) * k)
        return y.reshape(n, m, *out)
    win = win.reshape(n, g, c // g, *out, *wf.shape[2:])
    wg = wf.reshape(g, m // g, c // g, *wf.shape[2:])
    sp, kk = "hwd"[:k], "pqr"[:k]
    y = np.einsum(f"ngc{sp}{kk},gmc{kk}->ngm{sp}", win, wg, optimize=True)
    return np.asarray(y).reshape(n, m, *out)


def windows_of(x: Array, p: ReduceWindowParams, identity: float) -> Array:
    """The windows of ``x`` padded with ``identity``: a view ``[*O, *window]`` (the pad is the
    only copy)."""
    xp = _pad(x, p.padding, identity, 0)
    return _windows(xp, p.window, p.strides, p.dilation, 0)
