"""Inputs at the edges of a contract's domain, written once for everything that tests a
contract there: ``poot acceptance`` (a receipt's "at its domain's edges" checks), the
conformance suite (``tests/conformance/domains.py``) and the XDNA2 device tests
(``packages/poot-npu/tests/xdna_cases.py``).

For each domain and float dtype, ``domain_edges`` gives values inside the domain reaching its
edges (its limits, zeros of both signs, the dtype's smallest normal and largest finite values
where the domain allows them) and one value just past it; ``edge_sample`` draws an array of
ordinary values from inside the domain with those edge values planted in it.

The values are of the operands. ``FiniteNormalResult`` speaks of the result, so some of its
edge operands give a result outside it (``exp(1e10)``): a comparison masks those out with
``Domain.inside``, as it must for any input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

import ml_dtypes
import numpy as np

from poot_ir.dtypes import DType
from poot_ir.numerics import (
    AnyInput,
    Domain,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    NotNaN,
    PositiveNormal,
)

__all__ = ["Edges", "domain_edges", "edge_sample", "finite_range"]

Array = np.ndarray[Any, np.dtype[Any]]

#: A NaN with a payload: data movement must carry it bit for bit (F32 ``AnyInput`` samples).
PAYLOAD_NAN = 0x7FC0_1234


@dataclass(frozen=True, slots=True)
class Edges:
    """``inside``: values inside the domain reaching its edges (its limits, zeros of both
    signs, the largest finite value where the domain allows it); ``extremes``: further values
    inside it at the ends of the dtype (the smallest normal, subnormal or underflowing
    products, magnitudes whose results overflow); ``past``: one value just past the domain
    (None: nothing is past it, ``AnyInput``). Every value is representable in the dtype: no
    finite value overflows to infinity.

    ``poot acceptance`` runs ``inside`` (every device must meet its contract there); the test
    suites add ``extremes``."""

    inside: tuple[float, ...]
    extremes: tuple[float, ...]
    past: float | None

    @property
    def every(self) -> tuple[float, ...]:
        return self.inside + self.extremes


def finite_range(dtype: DType) -> tuple[float, float]:
    """The smallest positive normal and the largest finite value of a float dtype."""
    fi = ml_dtypes.finfo(dtype.numpy)  # type: ignore[no-untyped-call]
    return float(fi.tiny), float(fi.max)


def _above(hi: float, dtype: DType) -> float:
    """The smallest value of ``dtype`` above ``hi``."""
    v = dtype.numpy.type(hi)
    if float(v) <= hi:
        v = np.nextafter(v, dtype.numpy.type(np.inf))
    return float(v)


def domain_edges(domain: Domain, dtype: DType) -> Edges:
    """The edge values of ``domain`` for the float ``dtype`` (see ``Edges``)."""
    tiny, big = finite_range(dtype)
    match domain:
        case Interval(lo=lo, hi=hi):
            values = [lo, hi, 0.0, -0.0, lo / 2, hi / 2, 1.0]
            inside = [v for v in values if lo <= v <= hi]
            small = [v for v in (1e-30, -1e-30) if lo <= v <= hi]
            return Edges(_fit(inside, big), _fit(small, big), _above(hi, dtype))
        case PositiveNormal():
            return Edges(
                _fit([tiny, 1.0, 2.0, 4.0, tiny * 3, big], big), _fit([2.0**40], big), -1.0
            )
        case FiniteNormalResult():
            return Edges(
                (0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 100.0, -100.0),
                _fit([1e10, 3e38, -3e38, 1e-38], big),
                np.inf,
            )
        case FiniteInputs():
            return Edges(
                _fit([0.0, -0.0, 1.0, -1.0, 4.0, -4.0, 20.0, -20.0, big, -big], big),
                (tiny, 1e-30),
                np.inf,
            )
        case NotNaN():
            return Edges((0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, big, -big), (), np.nan)
        case AnyInput():
            return Edges((0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan), (tiny / 4,), None)
        case _:
            assert_never(domain)


def _fit(values: list[float], big: float) -> tuple[float, ...]:
    """The finite values the dtype holds (no overflow to infinity)."""
    return tuple(v for v in values if abs(v) <= big)


def _bulk(domain: Domain, dtype: DType, n: int, rng: np.random.Generator) -> Array:
    """``n`` ordinary float64 values from inside ``domain``."""
    tiny, big = finite_range(dtype)
    match domain:
        case Interval(lo=lo, hi=hi):
            return rng.uniform(lo, hi, n)
        case PositiveNormal():
            return np.exp2(rng.uniform(np.log2(tiny), np.log2(big) - 1, n))
        case FiniteNormalResult():
            return rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-20, 20, n))
        case FiniteInputs():
            return rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-12, 8, n))
        case NotNaN() | AnyInput():
            return rng.uniform(-100, 100, n)
        case _:
            assert_never(domain)


def edge_sample(
    domain: Domain, dtype: DType, shape: tuple[int, ...], rng: np.random.Generator
) -> Array:
    """An array of ``dtype`` and ``shape``: ordinary values from inside ``domain``, with its
    edge values planted at distinct places (as many as fit in a quarter of the elements, one
    at least). An F32 ``AnyInput`` sample's first element is a NaN with a payload."""
    n = int(np.prod(shape, dtype=np.int64))
    x = _bulk(domain, dtype, n, rng)
    edges = domain_edges(domain, dtype).every
    if n:
        k = min(len(edges), max(1, n // 4))
        x[rng.choice(n, size=k, replace=False)] = edges[:k]
    with np.errstate(over="ignore"):
        out = x.astype(dtype.numpy).reshape(shape)
    if n and dtype is DType.F32 and isinstance(domain, AnyInput):
        out.reshape(-1).view(np.uint32)[0] = PAYLOAD_NAN
    return out
