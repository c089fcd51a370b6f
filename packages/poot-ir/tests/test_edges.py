"""The values at a domain's edges (``Domain.edges``) that ``poot acceptance`` and the test suites
share, and the samples ``poot_ir.edges`` plants them in. Each is judged by the domain's own membership test (``Domain.inside``), not by the
module that chose it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from poot_ir import DType
from poot_ir.edges import PAYLOAD_NAN, edge_sample
from poot_ir.numerics import (
    AnyInput,
    Domain,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    NotNaN,
    PositiveNormal,
)

DOMAINS: list[Domain] = [
    Interval(-87.0, 88.0),
    Interval(0.5, 2.0),
    PositiveNormal(),
    FiniteNormalResult(),
    FiniteInputs(),
    NotNaN(),
    AnyInput(),
]
DTYPES = [DType.F32, DType.F16]


def finite_range(dtype: DType) -> tuple[float, float]:
    """The smallest positive normal and the largest finite value, from ml_dtypes."""
    fi = ml_dtypes.finfo(dtype.numpy)
    return float(fi.smallest_normal), float(fi.max)


def _as(values: tuple[float, ...] | list[float], dtype: DType) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.array(values, np.float64).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("domain", DOMAINS, ids=repr)
def test_edge_values_are_inside_and_the_past_one_is_not(domain: Domain, dtype: DType) -> None:
    edges = domain.edges(dtype)
    x = _as(edges.every, dtype)
    # representable: a finite value does not become infinite in the dtype
    assert np.array_equal(np.isfinite(x), np.isfinite(np.array(edges.every)))
    # inside, as operands: of an identity, or (a result domain) of a zero result
    result = np.zeros_like(x) if isinstance(domain, FiniteNormalResult) else x
    mask = domain.inside([x], result)
    assert mask.all(), [v for v, ok in zip(edges.every, mask, strict=True) if not ok]
    if not edges.past:
        assert isinstance(domain, AnyInput)
    past = _as(edges.past, dtype)
    assert not domain.inside([past], past).any(), edges.past


def test_the_edges_reach_the_domains_limits() -> None:
    tiny, big = finite_range(DType.F32)
    assert {-87.0, 88.0} <= set(Interval(-87.0, 88.0).edges(DType.F32).inside)
    assert float(np.nextafter(np.float32(88.0), np.float32(np.inf))) in (
        Interval(-87.0, 88.0).edges(DType.F32).past
    )
    assert {tiny, big} <= set(PositiveNormal().edges(DType.F32).inside)
    assert {big, -big} <= set(FiniteInputs().edges(DType.F32).inside)
    tiny16, big16 = finite_range(DType.F16)
    assert (tiny16, big16) == (2.0**-14, 65504.0)
    assert big16 in PositiveNormal().edges(DType.F16).inside


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("domain", DOMAINS, ids=repr)
def test_a_sample_holds_the_edges_inside_the_domain(domain: Domain, dtype: DType) -> None:
    rng = np.random.default_rng(7)
    x = edge_sample(domain, dtype, (16, 33), rng)
    assert x.dtype == dtype.numpy and x.shape == (16, 33)
    if not isinstance(domain, FiniteNormalResult):  # a result domain: operands are free
        assert domain.inside([x], x).all()
    planted = _as(domain.edges(dtype).every, dtype)
    flat = x.reshape(-1)
    for v in planted:
        assert np.isnan(flat).any() if np.isnan(v) else (flat == v).any(), v


def test_an_any_input_sample_carries_a_nan_payload() -> None:
    x = edge_sample(AnyInput(), DType.F32, (4,), np.random.default_rng(0))
    assert x.view(np.uint32)[0] == PAYLOAD_NAN


def test_a_tiny_sample_takes_one_edge_and_an_empty_one_none() -> None:
    assert edge_sample(FiniteInputs(), DType.F32, (1,), np.random.default_rng(0))[0] == 0.0
    assert edge_sample(FiniteInputs(), DType.F32, (0, 3), np.random.default_rng(0)).shape == (0, 3)
