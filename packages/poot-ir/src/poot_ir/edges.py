"""Samples at the edges of a contract's domain, for everything that tests a contract there:
``poot acceptance``, the conformance suite (``tests/conformance/domains.py``) and the XDNA2
device tests (``packages/poot-npu/tests/xdna_cases.py``). The edge values themselves are each
domain's own (``Domain.edges``, ``poot_ir.numerics``); ``edge_sample`` draws ordinary values from
inside the domain (``Domain.ordinary``) and plants those edge values in them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poot_ir.dtypes import DType
from poot_ir.numerics import AnyInput, Domain

__all__ = ["PAYLOAD_NAN", "edge_sample"]

Array = np.ndarray[Any, np.dtype[Any]]

#: A NaN with a payload: data movement must carry it bit for bit (F32 ``AnyInput`` samples).
PAYLOAD_NAN = 0x7FC0_1234


def edge_sample(
    domain: Domain, dtype: DType, shape: tuple[int, ...], rng: np.random.Generator
) -> Array:
    """An array of ``dtype`` and ``shape``: ordinary values from inside ``domain``, with its
    edge values planted at distinct places (as many as fit in a quarter of the elements, one
    at least). An F32 ``AnyInput`` sample's first element is a NaN with a payload."""
    n = int(np.prod(shape, dtype=np.int64))
    x = domain.ordinary(dtype, n, rng)
    edges = domain.edges(dtype).every
    if n:
        k = min(len(edges), max(1, n // 4))
        x[rng.choice(n, size=k, replace=False)] = edges[:k]
    with np.errstate(over="ignore"):
        out = x.astype(dtype.numpy).reshape(shape)
    if n and dtype is DType.F32 and isinstance(domain, AnyInput):
        out.reshape(-1).view(np.uint32)[0] = PAYLOAD_NAN
    return out
