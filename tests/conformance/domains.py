"""Inputs drawn from a contract's domain, reaching its edges.

Each domain gets a mixture: a moderate bulk, the domain's limits, zeros of both signs, and the
extreme finite values of the dtype where the domain allows them. An argument that indexes (a
gather index, a dynamic_update_slice start) is drawn from its valid range instead. Where a
target promises bit-exactness only on integer-valued inputs (the Intel NPU's FP16 arithmetic),
the inputs are whole numbers.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from poot_ir import DType, Prim, Program, TensorType
from poot_ir.numerics import (
    AnyInput,
    BitExact,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    NotNaN,
    PositiveNormal,
)
from poot_ir.sampling import index_ranges
from poot_planner import Capability, KernelClass

_ARITHMETIC = (Prim.REDUCE_SUM, Prim.REDUCE_MAX, Prim.MATMUL)


def _finfo(dtype: DType) -> tuple[float, float]:
    fi = ml_dtypes.finfo(dtype.numpy)
    return float(fi.tiny), float(fi.max)


def _edges(values: np.ndarray, edges: list[float], rng: np.random.Generator) -> np.ndarray:
    flat = values.reshape(-1)
    if flat.size:
        k = min(len(edges), max(1, flat.size // 4))
        at = rng.choice(flat.size, size=k, replace=False)
        flat[at] = np.asarray(edges[:k], dtype=np.float64)
    return flat.reshape(values.shape)


def _floats(cap: Capability, t: TensorType, rng: np.random.Generator) -> np.ndarray:
    tiny, big = _finfo(t.dtype)
    n = t.shape
    arithmetic = cap.prim.is_unary or cap.prim.is_binary or cap.prim in _ARITHMETIC
    if (
        cap.kernel is KernelClass.GRAPH_OP
        and arithmetic
        and isinstance(cap.contract.bound, BitExact)
    ):
        return rng.integers(-64, 65, size=n).astype(t.dtype.numpy)  # integer-valued (see module)
    match cap.contract.domain:
        case Interval(lo=lo, hi=hi):
            x = rng.uniform(lo, hi, size=n)
            x = _edges(x, [lo, hi, 0.0, -0.0, 1e-30, -1e-30, lo / 2, hi / 2], rng)
        case PositiveNormal():
            lo_e, hi_e = np.log2(tiny), np.log2(big) - 1
            x = np.exp2(rng.uniform(lo_e, hi_e, size=n))
            x = _edges(x, [tiny, big, 1.0, 4.0, 2.0**40, tiny * 3], rng)
        case FiniteNormalResult():
            x = rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(-20, 20, size=n))
            x = _edges(x, [0.0, -0.0, 1.0, -1.0, 3.0, 1e10], rng)
        case FiniteInputs():
            x = rng.choice([-1.0, 1.0], size=n) * np.exp2(rng.uniform(-12, 8, size=n))
            x = _edges(x, [0.0, -0.0, big, -big, tiny, 20.0, -20.0, 1e-30], rng)
        case NotNaN():
            x = rng.uniform(-100, 100, size=n)
            x = _edges(x, [0.0, -0.0, np.inf, -np.inf, big, -big], rng)
        case AnyInput():
            x = rng.uniform(-100, 100, size=n)
            x = _edges(x, [0.0, -0.0, np.inf, -np.inf, np.nan, tiny / 4], rng)
            out = x.astype(t.dtype.numpy)
            if out.size and t.dtype is DType.F32:  # a NaN with a payload moves bit for bit
                out.reshape(-1).view(np.uint32)[0] = 0x7FC0_1234
            return out
        case _:
            x = rng.uniform(-2, 2, size=n)
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(t.dtype.numpy)


def sample_domain(
    cap: Capability,
    t: TensorType,
    rng: np.random.Generator,
    program: Program,
    name: str | None = None,
    limit: float | None = None,
) -> np.ndarray:
    """An input of type ``t`` for a program exercising ``cap``. ``limit``: the largest F32
    magnitude a narrowing device accepts (it refuses NaN and anything beyond, as it must), so
    F32 values are kept within it."""
    x = _sample(cap, t, rng, program, name)
    if limit is not None and t.dtype is DType.F32:
        x = np.nan_to_num(np.clip(x, -limit, limit), nan=0.0).astype(np.float32)
    return x


def _sample(
    cap: Capability, t: TensorType, rng: np.random.Generator, program: Program, name: str | None
) -> np.ndarray:
    ranges = index_ranges(program)
    arg = next(
        (a for a in program.args if a.var.type == t and (name is None or a.name == name)), None
    )
    if arg is not None and arg.var.id in ranges:
        lo, hi = ranges[arg.var.id]
        return rng.integers(lo, hi + 1, size=t.shape).astype(np.int32)
    if t.dtype.is_float:
        return _floats(cap, t, rng)
    if t.dtype is DType.BOOL:
        return rng.integers(0, 2, size=t.shape).astype(np.bool_)
    info = np.iinfo(np.int32)
    x = rng.integers(-1000, 1000, size=t.shape).astype(np.int32)
    if x.size:
        x.reshape(-1)[0] = info.min
    return x
