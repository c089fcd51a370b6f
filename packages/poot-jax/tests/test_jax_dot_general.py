"""``dot_general`` with drawn batch, contracting and free axes in drawn operand orders, against
``jax.jit`` on XLA:CPU (tolerance in ``jax_cases``)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from jax import lax  # noqa: E402
from jax_cases import check  # noqa: E402


@st.composite
def dot_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, tuple[object, ...]]:
    counts = [draw(st.integers(0, 2)) for _ in range(4)]  # batch, contracting, lhs/rhs free
    size = st.integers(1, 4)
    batch = [draw(size) for _ in range(counts[0])]
    contract = [draw(size) for _ in range(counts[1])]
    lfree = [draw(size) for _ in range(counts[2])]
    rfree = [draw(size) for _ in range(counts[3])]
    # axis roles in a drawn order per operand: ("b", i), ("c", i), ("f", i)
    lroles = draw(
        st.permutations(
            [("b", i) for i in range(len(batch))]
            + [("c", i) for i in range(len(contract))]
            + [("f", i) for i in range(len(lfree))]
        )
    )
    rroles = draw(
        st.permutations(
            [("b", i) for i in range(len(batch))]
            + [("c", i) for i in range(len(contract))]
            + [("f", i) for i in range(len(rfree))]
        )
    )
    sizes = {"b": batch, "c": contract}

    def shape(roles: list[tuple[str, int]], free: list[int]) -> tuple[int, ...]:
        return tuple(free[i] if r == "f" else sizes[r][i] for r, i in roles)

    def axes(roles: list[tuple[str, int]], role: str, n: int) -> tuple[int, ...]:
        return tuple(roles.index((role, i)) for i in range(n))

    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    lhs = rng.standard_normal(shape(lroles, lfree)).astype(np.float32)
    rhs = rng.standard_normal(shape(rroles, rfree)).astype(np.float32)
    dims = (
        (axes(lroles, "c", len(contract)), axes(rroles, "c", len(contract))),
        (axes(lroles, "b", len(batch)), axes(rroles, "b", len(batch))),
    )
    return lhs, rhs, dims


@settings(derandomize=True, max_examples=40, deadline=None)
@given(dot_cases())
def test_dot_general_any_dimension_numbers(case: tuple[np.ndarray, np.ndarray, object]) -> None:
    lhs, rhs, dims = case
    check(lambda a, b: lax.dot_general(a, b, dims), lhs, rhs)  # type: ignore[arg-type]
