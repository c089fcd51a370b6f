"""The numpy oracle: the reference semantics of every primitive, and ``evaluate``.

One rule per primitive, in the table ``_RULES`` keyed by ``Prim``. A rule sees an equation once,
when its program is first evaluated, and returns a kernel (a function of the operand values);
``evaluate`` then runs the program's kernels in order. Compiled programs are cached by identity.

Semantics, where IEEE 754 or the type rules leave a choice:

- Floating point is IEEE 754 with round to nearest even. F32 ``add``, ``sub``, ``mul``, ``div``
  and ``sqrt`` are numpy's float32 operations (correctly rounded). ``exp``, ``log``, ``tanh``
  are numpy's float64 functions and ``erf`` is ``poot_ir.erf.erf64`` (vectorised, the same
  bits on every machine, within 2 float64 ulps), each rounded once to the dtype.
  F16 and BF16 round after every primitive: operands are widened exactly to float32, the
  operation is done there and the result rounded (double rounding is harmless, float32 has more
  than 2p+2 bits for both), or at float64 and rounded once (never float64 to float32 to BF16).
- NaN propagates through arithmetic, ``max``, ``min`` and ``reduce_max`` (OpenVINO's maximum
  drops NaN; the oracle is the specification). NaN bits are the same on every machine
  (``poot_ir.nan_bits``): data movement (gather, transpose, reshape, broadcast_in_dim, slice,
  concat, select, dynamic_update_slice) moves bits exactly, payloads and signs included;
  ``max``, ``min`` and ``reduce_max`` return the first NaN operand (the first NaN of the row)
  bit for bit; ``neg`` and ``abs`` change the sign bit only; every other floating primitive
  returns the canonical NaN (``nan_bits.CANONICAL_NAN``, positive, quiet, zero payload).
- ``max`` and ``min`` are IEEE 754-2019 maximum and minimum: -0 < +0, so max(-0, +0) = +0 and
  min(-0, +0) = -0 in either order. ``reduce_max`` agrees.
- ``ge``, ``gt``, ``eq`` are IEEE: NaN compares false. ``neg`` flips the sign bit (of zero and
  NaN too), ``recip(±0) = ±inf``, ``log(0) = -inf``, ``log(x < 0) = NaN``, ``sqrt(-0) = -0``.
- I32 ``add``, ``sub``, ``mul``, ``neg``, ``abs``, ``reduce_sum`` and ``matmul`` wrap modulo
  2^32 (``abs(INT_MIN) = INT_MIN``). ``div`` truncates toward zero (C), ``INT_MIN / -1`` wraps to
  ``INT_MIN``, and a division by zero raises ``IntegerDivisionByZero``.
- ``convert``: float to I32 truncates toward zero and saturates (XLA): NaN becomes 0, values
  beyond the range become INT_MIN or INT_MAX. Anything to BOOL is ``x != 0`` (so NaN is true,
  -0 false). BOOL to a number is 0 or 1. Every other conversion rounds to nearest even, with
  overflow to infinity; a converted NaN is a NaN.
- ``reduce_sum`` of an empty axis is +0 (0 for I32); ``reduce_max`` of an empty axis is -inf
  (INT_MIN for I32). Floating sums (F32, F16, BF16) accumulate at float64, in numpy's pairwise
  order over the reduced axes, and round once to the dtype: float64 holds any sum of F32 terms
  without overflow, and its error (at most ``n * 2^-53 * sum|x|`` for ``n`` terms) is far below
  an F32 half ulp unless the row cancels. Where that error could decide an overflow (the
  float64 sum within it of the dtype's overflow threshold, every term finite) the row is summed
  exactly (in rationals) and rounded once, so a sum whose exact value is finite in the dtype
  is finite and one whose exact value overflows is an infinity. A float32 accumulator would
  not do: ``[3e38, -3e38, -3e38, 1e38]`` overflows added right to left though its sum is
  -2e38. A device is compared with the oracle under its contract, not bit for bit, so the
  device's own order is not part of any promise.
- ``matmul`` on floats is computed at float64 (numpy's BLAS ``dgemm``) and rounded once to the
  dtype. Products of F32, F16 or BF16 values are exact at float64, so the only error before
  the final rounding is the float64 sum's: at most ``K * 2^-53 * sum |a_ik b_kj|`` (``K`` the
  contraction length) whatever order the BLAS adds in. That is the promise: the result is the
  exact dot product rounded once to the dtype, but for a dot product within that bound of a
  rounding boundary of the dtype, where the BLAS's order (its kernel, its threads, the
  machine) may pick either neighbour. Float64 accumulation, not F32 BLAS, because a device is
  compared with the oracle under a bound, and an F32-accumulated reference would spend part
  of that bound on its own error, and its result would differ between machines (kernels and
  thread splits) by far more than a float64 sum rounded once does. The price is speed: float64
  GEMM is 2-3x float32 GEMM on AVX2 (issue 15: with ``erf``, the floor against ONNX Runtime
  on a matmul-bound encoder).
- ``conv`` (floats; ``poot_ir.window``) is computed like ``matmul``: operands widened exactly
  to float64, each output the float64 sum of its exact products (a tap loop for one input
  channel per group, an einsum over a strided window view otherwise: no Python loop over groups
  or output elements), rounded once to the dtype; the same promise and the same caveat as
  ``matmul``. An exact zero result is +0 (the accumulator starts at +0, as lax's does).
- ``reduce_window_sum`` pads with +0 and sums each window as ``reduce_sum`` does (float64, the
  overflow threshold exact), a zero result +0; ``reduce_window_max`` pads with -inf, is IEEE
  maximum over each window (+0 beats -0, an all-padding window is -inf), and a window holding a
  NaN gives the canonical NaN (the window reductions compute, they do not move bits).
- ``gather`` takes indices in ``[-size, size)`` (negative counts from the end, as numpy and
  OpenVINO); any other index raises ``IndexOutOfRange``. A ``dynamic_update_slice`` start whose
  window does not fit raises ``WindowOutOfRange``; nothing is clamped.

Inputs are strict (``ArgumentError``), and every result is a fresh array of the exact dtype and
shape. An error raised during evaluation returns nothing.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final, cast

import numpy as np

from poot_ir.core import (
    BroadcastParams,
    ConcatParams,
    ConvertParams,
    ConvParams,
    Eqn,
    GatherParams,
    IotaParams,
    Literal,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    TransposeParams,
    Var,
)
from poot_ir.dtypes import DType, TensorType
from poot_ir.erf import erf64
from poot_ir.errors import (
    ArgumentError,
    EvaluationError,
    IndexOutOfRange,
    IntegerDivisionByZero,
    PootError,
    WindowOutOfRange,
)
from poot_ir.nan_bits import abs_bits, canonical, first_nan_of_pair, first_nan_of_rows, neg_bits
from poot_ir.window import conv64, windows_of

__all__ = [
    "BoundEvaluation",
    "bind_evaluation",
    "check_gather_indices",
    "evaluate",
    "exact_array",
    "iota_values",
]

Array = np.ndarray[Any, np.dtype[Any]]
#: A kernel computes one equation from its operand values (arrays, or numpy scalars).
Kernel = Callable[..., Any]
#: A rule turns one equation (and its index, for errors) into its kernel. The equation is of a
#: validated program, so its params are ``PARAMS_OF[eqn.prim]`` (the type rules check that) and
#: a rule's ``cast`` only names that type.
Rule = Callable[[Eqn, int], Kernel]
Step = Callable[[list[Any]], None]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_U32 = np.dtype(np.uint32)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_MISSING: Any = object()


# -- rounding ---------------------------------------------------------------------------------


def _round(x: Any, dtype: DType) -> Any:
    """Round float32 or float64 values once to ``dtype`` (nearest even, overflow to inf)."""
    x = np.asarray(x)
    if dtype is DType.BF16 and x.dtype == _F64:
        # float64 -> float32 -> bfloat16 would round twice; rounding to odd at float32 first
        # keeps the second rounding correct (float32 has more than p + 2 bits of bfloat16).
        t = x.astype(_F32)
        wide = t.astype(_F64)
        inexact = (wide != x) & ~np.isnan(x)
        bits = t.view(_U32)
        bits = np.where(inexact & (np.abs(wide) > np.abs(x)), bits - np.uint32(1), bits)
        x = (bits | inexact.astype(_U32)).view(_F32)
    return x.astype(dtype.numpy)


def _in_f32(dtype: DType, fn: Callable[..., Any]) -> Kernel:
    """``fn`` on float32 (F32 directly; F16 and BF16 widened exactly, the result rounded)."""
    if dtype is DType.F32:
        return fn
    dt = dtype.numpy

    def kernel(*xs: Any) -> Any:
        return fn(*(np.asarray(x, _F32) for x in xs)).astype(dt)

    return kernel


#: Elements per pass of a float64 function on narrower values: the float64 buffer stays in L2.
_CHUNK = 1 << 15


def _in_f64(dtype: DType, fn: Callable[..., Any]) -> Kernel:
    """``fn`` (a float64 ufunc) rounded once to ``dtype``. F32 and F16 go a chunk at a time
    through one float64 buffer into the result (float64 to float32 or float16 is one
    rounding, as ``_round``), so no full-size float64 copy is made; BF16 needs ``_round``."""
    if dtype is DType.BF16:
        return lambda x: _round(fn(np.asarray(x, _F64)), dtype)
    dt = dtype.numpy

    def kernel(x: Any) -> Any:
        x = np.asarray(x)
        out = np.empty(x.shape, dt)
        flat, dest = x.reshape(-1), out.reshape(-1)
        buf = np.empty(min(flat.size, _CHUNK), _F64)
        for start in range(0, flat.size, _CHUNK):
            part = flat[start : start + _CHUNK]
            b = buf[: part.size]
            b[...] = part  # widened exactly; then the function's float64 loop, in place
            fn(b, out=b)
            dest[start : start + part.size] = b
        return out

    return kernel


# -- elementwise ------------------------------------------------------------------------------


def _dtype(eqn: Eqn, i: int = 0) -> DType:
    return eqn.inputs[i].dtype


def _unary(eqn: Eqn, _: int) -> Kernel:
    dt = _dtype(eqn)
    match eqn.prim:
        case Prim.NEG:
            return neg_bits(dt) if dt.is_float else np.negative
        case Prim.ABS:
            return abs_bits(dt) if dt.is_float else np.abs
        case Prim.RECIP:
            return _in_f32(dt, lambda x: np.divide(np.float32(1), x))
        case Prim.SQRT:
            return _in_f32(dt, np.sqrt)
        case Prim.EXP:
            return _in_f64(dt, np.exp)
        case Prim.LOG:
            return _in_f64(dt, np.log)
        case Prim.TANH:
            return _in_f64(dt, np.tanh)
        case Prim.ERF:
            if dt is DType.BF16:  # float64 to bfloat16 needs _round's single rounding
                return lambda x: _round(erf64(x), dt)
            ndt = dt.numpy  # float32 and float16: erf64 rounds each chunk once into out

            def erf(x: Any) -> Any:
                x = np.asarray(x)
                return erf64(x, out=np.empty(x.shape, ndt))

            return erf
        case _:
            raise AssertionError(f"{eqn.prim} is not unary")


_ARITH = {Prim.ADD: np.add, Prim.SUB: np.subtract, Prim.MUL: np.multiply}
_COMPARE = {Prim.GE: np.greater_equal, Prim.GT: np.greater, Prim.EQ: np.equal}


def _binary(eqn: Eqn, index: int) -> Kernel:
    dt = _dtype(eqn)
    prim = eqn.prim
    if prim in _ARITH:
        uf = _ARITH[prim]
        return uf if dt is DType.I32 else _in_f32(dt, uf)
    if prim in _COMPARE:
        uf = _COMPARE[prim]
        return uf if not dt.is_float else _in_f32(dt, uf)
    if prim is Prim.DIV:
        return _int_div(eqn, index) if dt is DType.I32 else _in_f32(dt, np.divide)
    if prim in (Prim.MAX, Prim.MIN):
        is_max = prim is Prim.MAX
        uf = np.maximum if is_max else np.minimum
        if not dt.is_float:
            return uf
        lits = [a for a in eqn.inputs if isinstance(a, Literal)]
        if lits and lits[0].as_float() != 0:
            # Ties with a nonzero literal are between identical bit patterns: no sign to fix.
            return first_nan_of_pair(_in_f32(dt, uf), dt)
        return first_nan_of_pair(_in_f32(dt, _ieee_max if is_max else _ieee_min), dt)
    raise AssertionError(f"{prim} is not binary")


_SIGN = np.uint32(0x8000_0000)
_MAGNITUDE = np.uint32(0x7FFF_FFFF)


def _ieee_max(a: Any, b: Any) -> Any:
    # np.maximum leaves the sign of a tied zero to the implementation (and it differs between
    # float16 and float32); IEEE 754-2019 wants -0 < +0. Both orders give one operand each, and
    # the sign of the maximum is the AND of their signs; magnitudes and NaN bits are kept.
    r = np.maximum(a, b).view(_U32)
    s = np.maximum(b, a).view(_U32)
    return (r & (s | _MAGNITUDE)).view(_F32)


def _ieee_min(a: Any, b: Any) -> Any:
    r = np.minimum(a, b).view(_U32)
    s = np.minimum(b, a).view(_U32)
    return (r | (s & _SIGN)).view(_F32)


def _int_div(eqn: Eqn, index: int) -> Kernel:
    shape = eqn.out.shape

    def kernel(a: Any, b: Any) -> Any:
        zero = np.broadcast_to(np.equal(b, 0), shape)
        if zero.any():
            raise IntegerDivisionByZero(index, _first(zero))
        a64, b64 = np.asarray(a, _I64), np.asarray(b, _I64)
        q = np.abs(a64) // np.abs(b64)
        return np.where((a64 < 0) != (b64 < 0), -q, q).astype(np.int32)  # INT_MIN/-1 wraps

    return kernel


def _first(mask: Array) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _select(eqn: Eqn, _: int) -> Kernel:
    return np.where


def _convert(eqn: Eqn, _: int) -> Kernel:
    src = _dtype(eqn)
    dst = cast(ConvertParams, eqn.params).dtype
    if dst is DType.BOOL:
        return lambda x: np.not_equal(x, 0)
    if src is DType.BOOL or src is dst:
        return lambda x: np.asarray(x).astype(dst.numpy)
    if dst is DType.I32:

        def to_int(x: Any) -> Any:
            t = np.trunc(np.asarray(x, _F64))
            return np.where(np.isnan(t), 0, np.clip(t, _INT_MIN, _INT_MAX)).astype(np.int32)

        return to_int
    if src is DType.I32:
        return lambda x: _round(np.asarray(x, _F64), dst)
    return lambda x: _round(np.asarray(x, _F32), dst)  # widening to float32 is exact


# -- reductions -------------------------------------------------------------------------------


#: The smallest magnitude that rounds to infinity (the largest finite value plus half its ulp).
_OVERFLOW = {DType.F32: 2.0**128 - 2.0**103, DType.F16: 65520.0, DType.BF16: 2.0**128 - 2.0**119}


def _reduce_sum(eqn: Eqn, _: int) -> Kernel:
    axes, dt = cast(ReduceParams, eqn.params).axes, _dtype(eqn)
    if dt is DType.I32:
        return lambda x: np.sum(x, axis=axes, dtype=dt.numpy)
    return lambda x: _float_sum(np.asarray(x, _F64), axes, dt)


def _float_sum(x: Array, axes: tuple[int, ...], dt: DType) -> Any:
    """The sum over ``axes`` at float64, rounded once; rows near the overflow threshold exactly
    (see the module docstring)."""
    s = np.sum(x, axis=axes)
    n = math.prod(x.shape[a] for a in axes)
    if n == 0 or x.size == 0:  # no terms, or no rows (``axes`` may be empty)
        return _round(s, dt)
    # The screen, two passes where the test below takes four: |s| + slack <= sum|x| (1 +
    # n 2^-53) <= n max|x| (1 + n 2^-53), so below the threshold no row is near it. A NaN or
    # an infinity fails the comparison and takes the full test.
    top = max(-float(np.min(x)), float(np.max(x)))
    if top * n * (1 + n * 2.0**-53) < _OVERFLOW[dt]:
        return _round(s, dt)
    slack = n * 2.0**-53 * np.sum(np.abs(x), axis=axes)
    near = (np.abs(np.abs(s) - _OVERFLOW[dt]) <= slack) & np.all(np.isfinite(x), axis=axes)
    if near.any():
        rows = np.moveaxis(x, axes, tuple(range(-len(axes), 0))).reshape(*np.shape(s), n)
        s = np.array(s, copy=True)
        for at in np.argwhere(near):
            s[tuple(at)] = _exact_near_overflow(rows[tuple(at)].tolist(), dt)
    return _round(s, dt)


#: The largest finite value of each floating dtype.
_LARGEST = {DType.F32: 2.0**128 - 2.0**104, DType.F16: 65504.0, DType.BF16: 2.0**128 - 2.0**120}


def _exact_near_overflow(row: list[float], dt: DType) -> float:
    """The exact sum of ``row`` (finite values) as a float64 that rounds to the dtype on the
    right side of its overflow threshold. ``math.fsum`` alone rounds the exact sum to float64
    first: a sum 2^-149 below the F32 threshold became the threshold, then infinity."""
    exact = sum((Fraction(v) for v in row), Fraction(0))
    if abs(exact) >= _OVERFLOW[dt]:
        return math.copysign(math.inf, exact)
    v = float(exact)  # correctly rounded; only at the threshold can it land on the wrong side
    return math.copysign(_LARGEST[dt], v) if abs(v) >= _OVERFLOW[dt] else v


def _reduce_max(eqn: Eqn, _: int) -> Kernel:
    axes, dt = cast(ReduceParams, eqn.params).axes, _dtype(eqn)
    if dt is DType.I32:
        return lambda x: np.max(x, axis=axes, initial=_INT_MIN)

    def kernel(x: Any) -> Any:
        x32 = np.asarray(x, _F32)
        r = np.max(x32, axis=axes, initial=-np.inf)
        # IEEE: a +0 anywhere beats -0.
        pos_zero = np.any((x32 == 0) & ~np.signbit(x32), axis=axes)
        r = np.where((r == 0) & pos_zero, np.float32(0), r)
        return first_nan_of_rows(np.asarray(r, _F32).astype(dt.numpy), x, axes)

    return kernel


# -- data movement ----------------------------------------------------------------------------


def _gather(eqn: Eqn, index: int) -> Kernel:
    axis = cast(GatherParams, eqn.params).axis
    size = eqn.inputs[0].type.shape[axis]

    def kernel(x: Any, idx: Any) -> Any:
        check_gather_indices(idx, size, index)
        return np.take(x, idx, axis=axis)

    return kernel


def check_gather_indices(idx: Any, size: int, eqn: int, argument: str | None = None) -> None:
    """``IndexOutOfRange`` for the first index of ``idx`` outside ``[-size, size)`` (the
    gather at equation ``eqn``; ``argument``: the program argument holding ``idx``, when a
    device checks it before a run). One rule for the oracle and the devices."""
    bad = (idx < -size) | (idx >= size)
    if np.any(bad):
        at = _first(np.asarray(bad))
        raise IndexOutOfRange(eqn, int(np.asarray(idx)[at]), size, at, argument)


def _transpose(eqn: Eqn, _: int) -> Kernel:
    perm = cast(TransposeParams, eqn.params).perm
    return lambda x: np.transpose(x, perm)


def _reshape(eqn: Eqn, _: int) -> Kernel:
    shape = cast(ReshapeParams, eqn.params).shape
    return lambda x: np.reshape(x, shape)


def _broadcast_in_dim(eqn: Eqn, _: int) -> Kernel:
    p = cast(BroadcastParams, eqn.params)
    shape, dims = p.shape, p.dims
    expanded = [1] * len(shape)
    for i, d in enumerate(dims):
        expanded[d] = eqn.inputs[0].type.shape[i]
    return lambda x: np.broadcast_to(np.reshape(x, expanded), shape)


def _slice(eqn: Eqn, _: int) -> Kernel:
    p = cast(SliceParams, eqn.params)
    window = tuple(slice(*t) for t in zip(p.start, p.limit, p.strides, strict=True))
    return lambda x: np.asarray(x)[window]


def _concat(eqn: Eqn, _: int) -> Kernel:
    axis = cast(ConcatParams, eqn.params).axis
    return lambda *xs: np.concatenate(xs, axis=axis)


def _dynamic_update_slice(eqn: Eqn, index: int) -> Kernel:
    operand, update = eqn.inputs[0].type.shape, eqn.inputs[1].type.shape

    def kernel(x: Any, u: Any, *starts: Any) -> Any:
        st = tuple(int(s) for s in starts)
        if any(not 0 <= s <= d - n for s, d, n in zip(st, operand, update, strict=True)):
            raise WindowOutOfRange(index, st, operand, update)
        out = np.array(x, copy=True)
        out[tuple(slice(s, s + n) for s, n in zip(st, update, strict=True))] = u
        return out

    return kernel


def iota_values(p: IotaParams) -> Array:
    """``iota``'s value: the count along ``p.axis`` at every element, in ``p.dtype`` (a float
    count rounded to it once, as every float result; a read-only broadcast view). What a host
    stage that writes a counter writes too (``poot_codegen.xdna``'s counter relayout)."""
    expanded = [1] * len(p.shape)
    expanded[p.axis] = p.shape[p.axis]
    counts = np.arange(p.shape[p.axis], dtype=_I64).reshape(expanded)
    if p.dtype is DType.I32:
        values = counts.astype(np.int32)
    else:
        values = _round(counts.astype(_F64), p.dtype)
    return np.broadcast_to(values, p.shape)


def _iota(eqn: Eqn, _: int) -> Kernel:
    full = iota_values(cast(IotaParams, eqn.params))
    return lambda: full


# -- contraction ------------------------------------------------------------------------------


def _matmul(eqn: Eqn, _: int) -> Kernel:
    dt = _dtype(eqn)
    if dt is DType.I32:  # int64 wraps modulo 2^64, so the int32 cast is the product mod 2^32
        return lambda a, b: np.matmul(np.asarray(a, _I64), np.asarray(b, _I64)).astype(np.int32)
    return lambda a, b: _round(np.matmul(np.asarray(a, _F64), np.asarray(b, _F64)), dt)


def _conv(eqn: Eqn, _: int) -> Kernel:
    p, dt, shape = cast(ConvParams, eqn.params), _dtype(eqn), eqn.out.type.shape

    def kernel(x: Any, w: Any) -> Any:
        y = conv64(np.asarray(x), np.asarray(w), p, shape)
        return _round(np.add(y, 0.0, out=y), dt)  # -0 + +0 = +0: a zero sum is +0

    return kernel


# -- window reductions ------------------------------------------------------------------------


def _reduce_window_sum(eqn: Eqn, _: int) -> Kernel:
    p, dt, shape = cast(ReduceWindowParams, eqn.params), _dtype(eqn), eqn.out.type.shape
    axes = tuple(range(len(shape), 2 * len(shape)))

    def kernel(x: Any) -> Any:
        if 0 in shape:
            return np.zeros(shape, dt.numpy)
        total = _float_sum(windows_of(np.asarray(x, _F64), p, 0.0), axes, dt)
        return np.asarray(total + np.zeros((), dt.numpy))  # -0 + +0 = +0 (exact otherwise)

    return kernel


def _reduce_window_max(eqn: Eqn, _: int) -> Kernel:
    p, dt, shape = cast(ReduceWindowParams, eqn.params), _dtype(eqn), eqn.out.type.shape
    axes = tuple(range(len(shape), 2 * len(shape)))

    def kernel(x: Any) -> Any:
        if 0 in shape:
            return np.full(shape, -np.inf, dt.numpy)
        win = windows_of(np.asarray(x, _F32), p, -np.inf)
        r = np.max(win, axis=axes)
        pos_zero = np.any((win == 0) & ~np.signbit(win), axis=axes)  # IEEE: +0 beats -0
        return np.where((r == 0) & pos_zero, np.float32(0), r).astype(dt.numpy)

    return kernel


#: The reference rule of every primitive, defined once.
_RULES: dict[Prim, Rule] = {
    **{p: _unary for p in (Prim.NEG, Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF)},
    Prim.SQRT: _unary,
    Prim.ABS: _unary,
    **{
        p: _binary
        for p in (Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.MAX, Prim.MIN, Prim.GE, Prim.GT)
    },
    Prim.EQ: _binary,
    Prim.SELECT: _select,
    Prim.CONVERT: _convert,
    Prim.REDUCE_SUM: _reduce_sum,
    Prim.REDUCE_MAX: _reduce_max,
    Prim.GATHER: _gather,
    Prim.TRANSPOSE: _transpose,
    Prim.RESHAPE: _reshape,
    Prim.BROADCAST_IN_DIM: _broadcast_in_dim,
    Prim.SLICE: _slice,
    Prim.CONCAT: _concat,
    Prim.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Prim.IOTA: _iota,
    Prim.MATMUL: _matmul,
    Prim.CONV: _conv,
    Prim.REDUCE_WINDOW_SUM: _reduce_window_sum,
    Prim.REDUCE_WINDOW_MAX: _reduce_window_max,
}
#: The floating primitives that compute their values (rather than move or choose operands'):
#: their NaNs are made canonical, whatever bits numpy's loop on this processor produced.
_COMPUTES = frozenset(
    {Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.RECIP, Prim.SQRT, Prim.EXP, Prim.LOG}
    | {Prim.TANH, Prim.ERF, Prim.REDUCE_SUM, Prim.MATMUL, Prim.CONVERT, Prim.CONV}
    | {Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX}
)


def _kernel(eqn: Eqn, index: int) -> Kernel:
    """The equation's kernel under its rule, computed NaNs made canonical (a ``convert`` to
    its own dtype moves bits)."""
    kernel = _RULES[eqn.prim](eqn, index)
    dt = eqn.out.type.dtype
    computes = eqn.prim in _COMPUTES and dt.is_float
    if eqn.prim is Prim.CONVERT:
        computes = computes and eqn.inputs[0].dtype is not dt
    return canonical(kernel, dt) if computes else kernel


if set(_RULES) != set(Prim):  # a primitive added without its reference rule: found at import
    raise EvaluationError(
        f"the oracle has no rule for {sorted(p.value for p in set(Prim) - set(_RULES))}"
    )


# -- compiling and running a program ----------------------------------------------------------


class _Compiled:
    __slots__ = ("args", "dtypes", "nslots", "results", "steps", "wide")

    def __init__(
        self,
        args: tuple[tuple[str, int, TensorType], ...],
        steps: tuple[Step, ...],
        results: tuple[tuple[str, int, TensorType], ...],
        nslots: int,
    ) -> None:
        self.args, self.steps, self.results, self.nslots = args, steps, results, nslots
        self.wide: frozenset[str] = frozenset()
        # numpy dtypes of the arguments, then the results, looked up once (per call they cost
        # an enum hash each)
        self.dtypes = tuple(t.dtype.numpy for _, _, t in args + results)


def _step(kernel: Kernel, ins: list[int | Literal], out: int) -> Step:
    """One equation as a closure over environment slots: the loop's only per-equation cost."""
    consts = [a.value if isinstance(a, Literal) else None for a in ins]
    match ins:
        case [int(i)]:

            def step1(env: list[Any]) -> None:
                env[out] = kernel(env[i])

            return step1
        case [int(i), int(j)]:

            def step2(env: list[Any]) -> None:
                env[out] = kernel(env[i], env[j])

            return step2
        case [int(i), Literal()]:
            c = consts[1]

            def step_vc(env: list[Any]) -> None:
                env[out] = kernel(env[i], c)

            return step_vc
        case [Literal(), int(j)]:
            c = consts[0]

            def step_cv(env: list[Any]) -> None:
                env[out] = kernel(c, env[j])

            return step_cv
        case _:

            def step_n(env: list[Any]) -> None:
                env[out] = kernel(
                    *[env[a] if isinstance(a, int) else c for a, c in zip(ins, consts, strict=True)]
                )

            return step_n


def _compile(program: Program) -> _Compiled:
    # Slots are reused once their value is dead, so a long chain holds a few arrays, not one
    # per equation (1,000 live intermediates would miss every cache numpy's allocator has).
    end = len(program.eqns)
    last_use: dict[int, int] = {}
    for index, eqn in enumerate(program.eqns):
        for a in eqn.inputs:
            if isinstance(a, Var):
                last_use[a.id] = index
    for _, v in program.results():
        last_use[v.id] = end
    slots: dict[int, int] = {}
    free: list[int] = []
    count = 0

    def alloc(v: Var) -> int:
        nonlocal count
        if free:
            slots[v.id] = free.pop()
        else:
            slots[v.id], count = count, count + 1
        return slots[v.id]

    args = tuple((a.name, alloc(a.var), a.var.type) for a in program.args)
    free.extend(slots[a.var.id] for a in program.args if a.var.id not in last_use)
    steps = []
    for index, eqn in enumerate(program.eqns):
        kernel = _kernel(eqn, index)
        ins: list[int | Literal] = [
            a if isinstance(a, Literal) else slots[a.id] for a in eqn.inputs
        ]
        dying = {a.id for a in eqn.inputs if isinstance(a, Var) and last_use[a.id] == index}
        free.extend(slots[i] for i in dying)
        out = alloc(eqn.out)
        if eqn.out.id not in last_use:
            free.append(out)
        steps.append(_step(kernel, ins, out))
    results = tuple((name, slots[v.id], v.type) for name, v in program.results())
    compiled = _Compiled(args, tuple(steps), results, count)
    compiled.wide = frozenset(a.name for a in program.args if a.wide)
    return compiled


# Programs are frozen and slotted (no weak references) and hashing a large one costs about as
# much as evaluating it, so the cache is keyed by identity and holds the program itself, which
# keeps its id from being reused while the entry lives.
_CACHE: OrderedDict[int, tuple[Program, _Compiled]] = OrderedDict()
_CACHE_SIZE = 64
_LOCK = threading.Lock()


def _compiled(program: Program) -> _Compiled:
    with _LOCK:
        hit = _CACHE.get(id(program))
        if hit is not None and hit[0] is program:
            _CACHE.move_to_end(id(program))
            return hit[1]
    compiled = _compile(program)
    with _LOCK:
        _CACHE[id(program)] = (program, compiled)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return compiled


_I32_MIN: Final = int(np.iinfo(np.int32).min)
_I32_MAX: Final = int(np.iinfo(np.int32).max)


def exact_array(
    name: str,
    value: object,
    t: TensorType,
    error: Callable[[str, str], PootError] = ArgumentError,
    wide: bool = False,
) -> np.ndarray:
    """``value`` as an array of exactly ``t``, or ``error(message, name)`` saying what it is
    instead. A numpy scalar of the exact dtype is accepted for a shape of ``()``; nothing is
    ever converted, except for a ``wide`` argument (``Arg.wide``): an int64 array is narrowed
    to I32 after checking every value fits. The oracle checks its arguments with it, the
    engine a step's inputs."""
    want = t.dtype.numpy
    if type(value) is np.ndarray and value.dtype == want and value.shape == t.shape:
        return value  # the common case, first: no message is built for a value that passes
    if isinstance(value, np.generic) and t.shape == ():
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise error(f"expected an array of {t}, got {type(value).__name__}", name)
    if wide and value.dtype == np.int64 and value.shape == t.shape:
        # the extremes first, which allocate nothing (a step's token ids pass every time)
        if value.size and not (value.min() >= _I32_MIN and value.max() <= _I32_MAX):
            bad = (value < _I32_MIN) | (value > _I32_MAX)
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise error(f"int64 value {int(value[at])} at element {at} does not fit i32", name)
        return value.astype(np.int32)
    if value.dtype != want:
        raise error(
            f"expected an array of {t}, got dtype {value.dtype} (no conversion is made)", name
        )
    if value.shape != t.shape:
        raise error(f"expected an array of {t}, got shape {value.shape}", name)
    return value


def evaluate(program: Program, inputs: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Run ``program`` on ``inputs`` (one array per argument, by name, of exactly its type).

    Returns the outputs, then each updated state, by name (``program.result_names``), as fresh
    arrays. Raises ``ArgumentError`` before computing anything when an argument is missing,
    extra, or not an ndarray of exactly its shape and dtype (a numpy scalar is accepted for a
    shape of ``()``), and the other ``EvaluationError``s for undefined input (see the module).
    """
    compiled = _compiled(program)
    env: list[Any] = [None] * compiled.nslots
    n_args = len(compiled.args)
    for (name, s, t), dt in zip(compiled.args, compiled.dtypes, strict=False):
        value = inputs.get(name, _MISSING)
        if type(value) is np.ndarray and value.dtype == dt and value.shape == t.shape:
            env[s] = value  # exactly its type: what exact_array returns, without the call
            continue
        if value is _MISSING:
            raise ArgumentError(f"missing; expected an array of {t}", name)
        env[s] = exact_array(name, value, t, wide=name in compiled.wide)
    if len(inputs) != n_args:  # every argument is there, so something else is too
        extra = sorted(set(inputs) - {name for name, _, _ in compiled.args})
        raise ArgumentError(f"is not an argument of {program.name!r}", extra[0])
    with np.errstate(all="ignore"):
        for step in compiled.steps:
            step(env)
    return {
        name: np.array(env[s], dtype=dt, order="C", copy=True)
        for (name, s, _), dt in zip(compiled.results, compiled.dtypes[n_args:], strict=True)
    }


class BoundEvaluation:
    """``evaluate`` of one program over the same argument arrays on every call
    (``bind_evaluation``): what a device whose buffers are host arrays runs per step.

    The arguments were checked once, when bound; a call reads whatever the bound arrays hold
    then (their memory, written in place between calls) and returns the results in
    ``program.result_names`` order, fresh arrays exactly as ``evaluate`` returns them, with the
    same errors during evaluation. What it skips per call is only what binding established:
    the program's compiled form looked up, and each argument's type checked."""

    __slots__ = ("_env", "_results", "_steps", "names")

    def __init__(self, program: Program, arrays: Mapping[str, np.ndarray]) -> None:
        compiled = _compiled(program)
        if len(arrays) != len(compiled.args):
            extra = sorted(set(arrays) - {name for name, _, _ in compiled.args})
            missing = sorted({name for name, _, _ in compiled.args} - set(arrays))
            what = (missing or extra)[0]
            why = "missing" if missing else f"is not an argument of {program.name!r}"
            raise ArgumentError(why, what)
        env: list[Any] = [None] * compiled.nslots
        for name, s, t in compiled.args:
            value = arrays.get(name, _MISSING)
            if value is _MISSING:
                raise ArgumentError(f"missing; expected an array of {t}", name)
            checked = exact_array(name, value, t)
            if checked is not value:  # a bound array is read in place: never a converted copy
                raise ArgumentError(f"expected an array of exactly {t}", name)
            env[s] = checked
        self._env, self._steps = env, compiled.steps
        n_args = len(compiled.args)
        self._results = tuple(
            (s, dt)
            for (_, s, _), dt in zip(compiled.results, compiled.dtypes[n_args:], strict=True)
        )
        self.names = tuple(name for name, _, _ in compiled.results)

    def __call__(self) -> tuple[np.ndarray, ...]:
        env = self._env.copy()  # the arguments' slots; an intermediate never outlives a call
        with np.errstate(all="ignore"):
            for step in self._steps:
                step(env)
        return tuple([np.array(env[s], dtype=dt, order="C", copy=True) for s, dt in self._results])


def bind_evaluation(program: Program, arrays: Mapping[str, np.ndarray]) -> BoundEvaluation:
    """``program`` bound to ``arrays`` (one ndarray per argument, by name, of exactly its type:
    ``ArgumentError`` otherwise): a callable that evaluates it over their current contents."""
    return BoundEvaluation(program, arrays)
