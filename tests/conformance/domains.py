"""Inputs drawn from a contract's domain, reaching its edges.

Each domain gets a mixture: a moderate bulk, the domain's limits, zeros of both signs, and the
extreme finite values of the dtype where the domain allows them: ``poot_ir.edges``, which
``poot acceptance`` shares. An argument that indexes (a gather index, a dynamic_update_slice
start) is drawn from its valid range instead. Where a target promises bit-exactness only on
integer-valued inputs (the Intel NPU's FP16 arithmetic), the inputs are whole numbers (ties
and small values), with the domain's edges planted among them where the result is a
comparison's boolean or the device computes in F32 as the oracle does (the host's graph ops:
NaN, infinities, subnormals and the largest values, where ``bit exact`` holds too).
"""

from __future__ import annotations

import numpy as np
from poot_ir import DType, Prim, Program, TensorType
from poot_ir.edges import edge_sample
from poot_ir.numerics import BitExact
from poot_ir.sampling import index_ranges
from poot_planner import Capability, KernelClass

# sampled integer-valued and small, where their contracts are exact (inside +-65504: a DPU
# convolution's or matmul's sum of edge values would leave the range its contract states)
_ARITHMETIC = (
    Prim.REDUCE_SUM,
    Prim.REDUCE_MAX,
    Prim.MATMUL,
    Prim.CONV,
    Prim.REDUCE_WINDOW_SUM,
    Prim.REDUCE_WINDOW_MAX,
)


def _floats(cap: Capability, t: TensorType, rng: np.random.Generator, narrowed: bool) -> np.ndarray:
    arithmetic = cap.prim.is_unary or cap.prim.is_binary or cap.prim in _ARITHMETIC
    if (
        cap.kernel is KernelClass.GRAPH_OP
        and arithmetic
        and isinstance(cap.contract.bound, BitExact)
    ):
        x = rng.integers(-64, 65, size=t.shape).astype(t.dtype.numpy)  # integer-valued
        if cap.prim.is_comparison or not narrowed:  # exact whatever the operands: edges too
            edges = edge_sample(cap.contract.domain, t.dtype, t.shape, rng)
            planted = rng.random(t.shape) < 0.5
            x = np.where(planted, edges, x)
        return x
    return edge_sample(cap.contract.domain, t.dtype, t.shape, rng)


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
    narrowed = limit is not None or t.dtype is DType.F16
    x = _sample(cap, t, rng, program, name, narrowed)
    if limit is not None and t.dtype is DType.F32:
        x = np.nan_to_num(np.clip(x, -limit, limit), nan=0.0).astype(np.float32)
    return x


def _sample(
    cap: Capability,
    t: TensorType,
    rng: np.random.Generator,
    program: Program,
    name: str | None,
    narrowed: bool,
) -> np.ndarray:
    ranges = index_ranges(program)
    arg = next(
        (a for a in program.args if a.var.type == t and (name is None or a.name == name)), None
    )
    if arg is not None and arg.var.id in ranges:
        lo, hi = ranges[arg.var.id]
        return rng.integers(lo, hi + 1, size=t.shape).astype(np.int32)
    if t.dtype.is_float:
        return _floats(cap, t, rng, narrowed)
    if t.dtype is DType.BOOL:
        return rng.integers(0, 2, size=t.shape).astype(np.bool_)
    info = np.iinfo(np.int32)
    x = rng.integers(-1000, 1000, size=t.shape).astype(np.int32)
    if x.size:
        x.reshape(-1)[0] = info.min
    return x
