"""The oracle's NaN bits: the same on every machine, whatever SIMD path numpy takes.

numpy leaves NaN bits to the processor and to the loop it dispatches to (``NPY_DISABLE_CPU_FEATURES``
changes them): ``np.max`` of a row holding ``0xFFC00000`` returned ``0x7FC00000`` on an AMD EPYC
and on AVX2 loops, and ``0 * inf`` is x86's default NaN ``0xFFC00000``. The oracle's rules:

- A primitive that moves or chooses values (data movement, ``select``, ``max``, ``min``,
  ``reduce_max``) returns operand bits exactly. Where ``max``/``min`` see a NaN the result is
  the first NaN operand (operand order), and ``reduce_max`` of a row holding a NaN is the first
  NaN of the row (row-major order over the reduced axes), payload and sign included.
- ``neg`` flips the sign bit and ``abs`` clears it, NaN included (bit operations, not numpy's
  loops).
- Every other floating primitive (arithmetic, ``recip``, ``sqrt``, ``exp``, ``log``, ``tanh``,
  ``erf``, ``reduce_sum``, ``matmul``, a ``convert`` between float types) computes: wherever its
  result is NaN it is ``CANONICAL_NAN`` of the result's dtype, the positive quiet NaN with a
  zero payload (``0x7FC00000``, ``0x7E00``, ``0x7FC0``: the bits of ``np.nan`` cast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from poot_ir.dtypes import DType

__all__ = [
    "CANONICAL_NAN",
    "abs_bits",
    "canonical",
    "first_nan_of_pair",
    "first_nan_of_rows",
    "has_nan",
    "neg_bits",
]

#: The one NaN a computing primitive returns, per float dtype (the bit pattern).
CANONICAL_NAN = {DType.F32: 0x7FC0_0000, DType.F16: 0x7E00, DType.BF16: 0x7FC0}


_SCREENED = (np.dtype(np.float32), np.dtype(np.float16))


def has_nan(x: Any) -> bool:
    """Whether ``x`` holds a NaN. For float32 and float16 one ``min`` (NaN propagates through
    it, by numpy's contract, on every loop), no mask: a tenth of ``isnan(x).any()``'s cost,
    paid after every computing primitive."""
    x = np.asarray(x)
    if x.size == 0:
        return False
    if x.dtype in _SCREENED:
        return bool(np.isnan(x.min()))
    return bool(np.isnan(x).any())


def canonical(fn: Callable[..., Any], dtype: DType) -> Callable[..., Any]:
    """``fn`` with every NaN of its result (of ``dtype``) replaced by ``CANONICAL_NAN``."""
    nan = np.array(CANONICAL_NAN[dtype], dtype.bits_dtype).view(dtype.numpy)[()]

    def kernel(*xs: Any) -> Any:
        r = fn(*xs)
        if not has_nan(r):
            return r
        return np.where(np.isnan(r), nan, r)

    return kernel


def neg_bits(dtype: DType) -> Callable[[Any], Any]:
    sign = dtype.bits_dtype.type(1 << (8 * dtype.itemsize - 1))
    return lambda x: (np.asarray(x, dtype.numpy).view(dtype.bits_dtype) ^ sign).view(dtype.numpy)


def abs_bits(dtype: DType) -> Callable[[Any], Any]:
    magnitude = dtype.bits_dtype.type((1 << (8 * dtype.itemsize - 1)) - 1)
    return lambda x: (np.asarray(x, dtype.numpy).view(dtype.bits_dtype) & magnitude).view(
        dtype.numpy
    )


def first_nan_of_pair(fn: Callable[[Any, Any], Any], dtype: DType) -> Callable[[Any, Any], Any]:
    """``fn`` (a max or min whose non-NaN results are operand bits) with each NaN of its result
    replaced by the first NaN operand's bits: ``a``'s where ``a`` is NaN, else ``b``'s."""
    dt = dtype.numpy

    def kernel(a: Any, b: Any) -> Any:
        r = fn(a, b)
        if not has_nan(r):
            return r
        mask = np.isnan(r)
        a, b = np.asarray(a, dt), np.asarray(b, dt)  # exact: operands are already ``dt``
        return np.where(mask, np.where(np.isnan(a), a, b), r).astype(dt, copy=False)

    return kernel


def first_nan_of_rows(r: Any, x: Any, axes: tuple[int, ...]) -> Any:
    """``r`` (the reduction of ``x`` over ``axes``, of ``x``'s dtype) with each row of ``x``
    that holds a NaN reduced to that row's first NaN, bit for bit."""
    x = np.asarray(x)
    if not has_nan(r):  # a row holding a NaN reduced to a NaN
        return r
    mask = np.isnan(x)
    n = 1
    for a in axes:
        n *= x.shape[a]
    last = tuple(range(-len(axes), 0))
    rows = np.moveaxis(x, axes, last).reshape(*np.shape(r), n)
    at = np.argmax(np.moveaxis(mask, axes, last).reshape(rows.shape), axis=-1)
    first = np.take_along_axis(rows, at[..., None], axis=-1)[..., 0]
    has = np.isnan(first)  # argmax is 0 in a row without a NaN: that element is no NaN
    return np.where(has, first, r).astype(x.dtype, copy=False)
