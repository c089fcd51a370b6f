"""The rules added for the harness aim, at the edges JAX's harnesses do not draw: floor, ceil,
round (both methods) and pow at signed zeros, halves, NaN, infinities and magnitudes past the
mantissa; the doubling scans (reverse too) and the halving product; window reductions on i32
and bool, with an init value, a base dilation; a gradient's batch-grouped convolution. Each
against ``jax.jit`` on XLA:CPU (``jax_cases.check``)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax_cases import check  # noqa: E402

EDGES = np.array(
    [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1.0, -1.0, 3.7, -3.7]
    + [2.0**23, -(2.0**23), 2.0**23 + 1, 2.0**24 + 2, 1e30, -1e30, np.inf, -np.inf, np.nan]
    + [8388607.5, -8388607.5, 2.0**31, -(2.0**31) - 256],
    np.float32,
)


@pytest.mark.parametrize(
    "fn",
    [
        jnp.floor,
        jnp.ceil,
        jnp.round,
        lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    ],
)
def test_rounding_at_the_edges(fn: object) -> None:
    imp = check(fn, EDGES)  # type: ignore[arg-type]
    assert imp.weights == {}


def test_rounding_keeps_the_sign_of_zero() -> None:
    x = np.array([-0.0, -0.3, 0.3, -0.7], np.float32)
    imp = check(lambda x: (jnp.floor(x), jnp.ceil(x), jnp.round(x)), x)
    from jax_cases import run_imported

    floor, ceil, rnd = run_imported(imp, x)
    assert np.signbit(floor[0]) and np.signbit(ceil[1]) and np.signbit(rnd[1])
    assert not np.signbit(rnd[2])


def test_pow_at_the_edges() -> None:
    x = np.array(
        [-2.0, -2.0, -2.0, 0.0, -0.0, -0.0, 0.0, 1.0, np.nan, -8.0, 2.0, np.inf], np.float32
    )
    y = np.array(
        [3.0, 2.0, 0.5, -1.0, 3.0, -3.0, 0.0, np.nan, 0.0, 1 / 3, -np.inf, -2.0], np.float32
    )
    check(jnp.power, x, y)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("op", [lax.cummax, lax.cummin, lax.cumprod])
def test_scans(op: object, reverse: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (3, 7)).astype(np.float32)
    x[1, 3] = np.nan
    i = rng.integers(-(2**31), 2**31 - 1, (3, 7), dtype=np.int64).astype(np.int32)
    i[0, 0] = np.iinfo(np.int32).min
    for a in (x, i):
        check(lambda a: op(a, axis=1, reverse=reverse), a)  # type: ignore[operator]


def test_reduce_prod_halves() -> None:
    x = np.random.default_rng(1).uniform(0.5, 1.5, (5, 3, 7)).astype(np.float32)
    check(lambda x: jnp.prod(x, axis=(0, 2)), x)
    check(lambda x: jnp.prod(x, axis=1), (x * 10).astype(np.int32))


#: (dtype, reducer, init): a bool window only by max or min, with its identity.
WINDOWS = [
    (d, r, i)
    for d in (np.float32, np.int32, np.bool_)
    for r in (lax.max, lax.min, lax.add)
    for i in ("identity", 3)
    if d is not np.bool_ or (r is not lax.add and i == "identity")
]


@pytest.mark.parametrize(("dtype", "reducer", "init"), WINDOWS)
def test_window_reductions(dtype: type, reducer: object, init: object) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(-9, 9, (2, 5, 6)).astype(dtype)
    ident = {lax.max: -np.inf, lax.min: np.inf, lax.add: 0}[reducer]  # type: ignore[index]
    if dtype is np.int32:
        ident = {lax.max: -(2**31), lax.min: 2**31 - 1, lax.add: 0}[reducer]  # type: ignore[index]
    if dtype is np.bool_:
        ident = reducer is lax.min
    v = np.asarray(ident if init == "identity" else init).astype(dtype)

    def f(x: jax.Array) -> jax.Array:
        return lax.reduce_window(x, v, reducer, (1, 2, 3), (1, 1, 2), ((0, 0), (1, 0), (1, 2)))

    check(f, x)


def test_base_dilation_and_window_dilation() -> None:
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    for reducer, init in ((lax.add, 0.0), (lax.add, 1.5), (lax.max, -np.inf), (lax.min, 0.25)):
        check(
            lambda x, r=reducer, v=init: lax.reduce_window(
                x, np.float32(v), r, (2, 2), (1, 2), ((1, 0), (0, 1)), (2, 1), (1, 2)
            ),
            x,
        )


def test_batch_grouped_convolution() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 9, 10)).astype(np.float32)
    w = rng.standard_normal((6, 3, 4, 5)).astype(np.float32)
    check(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", batch_group_count=2), x, w)
    xi = rng.integers(-5, 5, (2, 3, 6, 6)).astype(np.int32)
    wi = rng.integers(-5, 5, (4, 3, 2, 2)).astype(np.int32)
    check(
        lambda x, w: lax.conv_general_dilated(
            x, w, (1, 1), "SAME", preferred_element_type=jnp.float32
        ),
        xi,
        wi,
    )
