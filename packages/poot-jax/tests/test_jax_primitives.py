"""Each lowered JAX primitive, imported and run on the oracle, against ``jax.jit`` on XLA:CPU
(tolerance in ``jax_cases``)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax_cases import check  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = RNG.standard_normal((3, 4)).astype(np.float32)
POS = (np.abs(X) + 0.1).astype(np.float32)
INTS = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
DIVS = RNG.integers(1, 9, (3, 4)).astype(np.int32)
B = RNG.random((3, 4)) > 0.5
C = RNG.random((3, 4)) > 0.5

UNARY = {
    "neg": lambda x: -x,
    "exp": jnp.exp,
    "tanh": jnp.tanh,
    "abs": jnp.abs,
    "erf": lax.erf,
    "erfc": lax.erfc,
    "logistic": jax.nn.sigmoid,
    "square": jnp.square,
    "pow3": lambda x: x**3,
    "pow_neg2": lambda x: x**-2,
    "pow0": lambda x: lax.integer_pow(x, 0),
    "is_finite": lambda x: jnp.isfinite(x / (x - x[0, 0])),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str) -> None:
    check(UNARY[name], X)


@pytest.mark.parametrize("fn", [jnp.log, jnp.sqrt, lax.rsqrt], ids=["log", "sqrt", "rsqrt"])
def test_unary_positive(fn: object) -> None:
    check(fn, POS)  # type: ignore[arg-type]


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": jnp.maximum,
    "min": jnp.minimum,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "literal": lambda a, b: 2.0 * a + 1.5,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_f32(name: str) -> None:
    check(BINARY[name], X, Y)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "max", "min", "lt", "ge", "eq", "ne"])
def test_binary_i32(name: str) -> None:
    check(BINARY[name], INTS, DIVS)


def test_integer_division_truncates() -> None:
    check(lambda a, b: lax.div(a, b), INTS, DIVS)
    check(lambda a, b: lax.rem(a, b), INTS, DIVS)
    check(lambda a, b: lax.rem(a, -b), INTS, DIVS)


def test_sign() -> None:
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, -3.5, 2.0], np.float32)
    check(jnp.sign, special)
    check(jnp.sign, INTS)


@pytest.mark.parametrize(
    "fn",
    [
        jnp.logical_and,
        jnp.logical_or,
        jnp.logical_xor,
        lambda a, b: ~a,
        jnp.maximum,
        jnp.minimum,
        lambda a, b: a < b,
        lambda a, b: a != b,
    ],
    ids=["and", "or", "xor", "not", "max", "min", "lt", "ne"],
)
def test_bool(fn: object) -> None:
    check(fn, B, C)  # type: ignore[arg-type]


def test_where_select_n() -> None:
    check(lambda c, a, b: jnp.where(c, a, b), B, X, Y)
    check(lambda i, a, b, c: lax.select_n(i, a, b, c), np.abs(INTS) % 3, X, Y, X * 2)


@pytest.mark.parametrize(
    ("src", "to"),
    [
        (X * 40, jnp.int32),
        (X, jnp.float16),
        (X, jnp.bfloat16),
        (X, jnp.bool_),
        (INTS, jnp.float32),
        (B, jnp.float32),
        (B, jnp.int32),
    ],
)
def test_convert(src: np.ndarray, to: object) -> None:
    check(lambda x: x.astype(to), src)


def test_clamp() -> None:
    check(lambda x: jnp.clip(x, -0.5, 0.5), X)
    check(lambda x: lax.clamp(-3, x, 7), INTS)


@pytest.mark.parametrize("axes", [0, 1, (0, 1)])
@pytest.mark.parametrize("reduce", [jnp.sum, jnp.max, jnp.min, jnp.mean])
def test_reductions(reduce: object, axes: object) -> None:
    check(lambda x: reduce(x, axis=axes), X)  # type: ignore[operator]


@pytest.mark.parametrize("reduce", [jnp.sum, jnp.max, jnp.min])
def test_reductions_i32(reduce: object) -> None:
    extreme = INTS.copy()
    extreme[0, 0], extreme[1, 1] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    check(lambda x: reduce(x, axis=1), extreme)  # type: ignore[operator]


def test_any_all() -> None:
    check(lambda x: (jnp.any(x, axis=1), jnp.all(x, axis=0)), B)


@pytest.mark.parametrize("arg", [jnp.argmax, jnp.argmin])
def test_argmax_argmin(arg: object) -> None:
    ties = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [5, -1, 5, -1]], np.float32)
    nans = X.copy()
    nans[1, 2] = np.nan
    for x in (X, ties, nans, INTS, B):
        check(lambda x: arg(x, axis=1), x)  # type: ignore[operator]
        check(lambda x: arg(x, axis=0), x)  # type: ignore[operator]


DOTS = {
    "matmul": (lambda a, b: a @ b, (3, 4), (4, 5)),
    "vecmat": (lambda a, b: a @ b, (4,), (4, 5)),
    "dot": (jnp.dot, (4,), (4,)),
    "batched": (lambda a, b: a @ b, (2, 3, 4), (2, 4, 5)),
    "einsum_bkj": (lambda a, b: jnp.einsum("bij,bkj->bik", a, b), (2, 3, 4), (2, 5, 4)),
    "two_contract": (lambda a, b: jnp.einsum("bijk,bjkl->bil", a, b), (2, 3, 4, 5), (2, 4, 5, 6)),
    "batch_late": (lambda a, b: jnp.einsum("ibj,jbk->bik", a, b), (3, 2, 4), (4, 2, 5)),
    "outer": (jnp.outer, (3,), (4,)),
}


@pytest.mark.parametrize("name", sorted(DOTS))
def test_dot_general(name: str) -> None:
    fn, sa, sb = DOTS[name]
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    check(fn, a, b)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum(axis: int, reverse: bool) -> None:
    x3 = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    check(lambda x: lax.cumsum(x, axis=axis, reverse=reverse), X)
    check(lambda x: lax.cumsum(x, axis=axis + 1, reverse=reverse), x3)
    check(lambda x: jnp.cumsum(x, axis=axis), INTS)


def test_dot_general_bool() -> None:
    a, b = RNG.random((3, 4)) > 0.7, RNG.random((4, 5)) > 0.7
    check(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))), a, b)


def test_take_fill_i32_and_bool() -> None:
    for x in (INTS, B):
        check(lambda x: jnp.take(x, jnp.array([4, -1, 0]), axis=1), x)


def test_dot_general_i32_and_preferred() -> None:
    a = RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    b = RNG.integers(-9, 9, (4, 2)).astype(np.int32)
    check(lambda a, b: a @ b, a, b)
    h = X.astype(np.float16)
    check(lambda a: lax.dot(a, a.T, preferred_element_type=jnp.float32), h)


MOVES = {
    "transpose": lambda x: x.T,
    "reshape": lambda x: x.reshape(2, 6),
    "broadcast": lambda x: jnp.broadcast_to(x[:, None, :], (3, 2, 4)),
    "expand_squeeze": lambda x: jnp.squeeze(jnp.expand_dims(x, 1)[:, :, 1:2], axis=(1, 2)),
    "slice": lambda x: x[1:3, ::2],
    "rev": lambda x: jnp.flip(x, axis=(0, 1)),
    "concat": lambda x: jnp.concatenate([x, x * 2], axis=1),
    "pad": lambda x: jnp.pad(x, ((1, 2), (0, 1)), constant_values=3.0),
    "pad_negative": lambda x: lax.pad(x, 0.0, ((-1, 1, 0), (2, -2, 0))),
    "iota": lambda x: x + jnp.arange(4, dtype=jnp.float32),
    "eye": lambda x: x[:, :3] * jnp.eye(3, dtype=jnp.float32),
    "take_rows": lambda x: x[jnp.array([2, 0, 1, 2])],
    "take_cols": lambda x: x[:, jnp.array([3, 0])],
    "take_clip": lambda x: jnp.take(x, jnp.array([5, -7, 1]), axis=1, mode="clip"),
    "take_fill": lambda x: jnp.take(x, jnp.array([5, -7, 1, 3]), axis=1),
    "take_fill_rows": lambda x: jnp.take(x, jnp.array([[0, 9], [2, 1]]), axis=0, fill_value=-2.0),
    "pad_interior": lambda x: lax.pad(x, 0.5, ((1, -1, 2), (-2, 3, 1))),
    "reshape_dimensions": lambda x: lax.reshape(x, (4, 3), dimensions=(1, 0)),
    "stack": lambda x: jnp.stack([x, -x, x * 2], axis=1),
    "unstack": lambda x: list(x),
    "split": lambda x: jnp.split(x, [1, 3], axis=1),
    "tile": lambda x: jnp.tile(x, (2, 1, 3)),
}


@pytest.mark.parametrize("name", sorted(MOVES))
def test_movement(name: str) -> None:
    check(MOVES[name], X)


def test_dynamic_slice_clamps() -> None:
    for start in (0, 1, 2, 5, -3):
        i = np.int32(start)
        check(lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 2)), X, i)
        check(lambda x, i: x[i], X, i)


def test_dynamic_update_slice_clamps() -> None:
    u = np.ones((2, 2), np.float32)
    for start in (0, 1, 2, 7, -4):
        i = np.int32(start)
        check(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)), X, u, i)
        check(lambda x, u, s=start: lax.dynamic_update_slice(x, u, (s, 1)), X, u)


def test_general_gather_forms() -> None:
    rows, cols = jnp.array([2, 0, 5, -1]), jnp.array([1, 3, 0, 9])
    check(lambda x: x[rows, cols], X)  # two start axes, clamped as XLA clamps
    order = np.argsort(X, axis=1).astype(np.int32)
    check(lambda x, i: jnp.take_along_axis(x, i, axis=1), X, order)  # batching dims
    check(
        lambda x, i: jnp.take_along_axis(x, i, axis=1), X, order - 6
    )  # wrapped negatives, fills below -4
    check(lambda x: lax.dynamic_slice(x, (1, 1), (2, 3))[jnp.array([1, 0])], X)


def test_embedding_gather() -> None:
    table = RNG.standard_normal((10, 8)).astype(np.float32)
    ids = RNG.integers(0, 10, (2, 7)).astype(np.int32)
    check(lambda t, i: t[i], table, ids)


def test_nested_inlined() -> None:
    w = RNG.standard_normal((4, 4)).astype(np.float32)

    @jax.jit
    def inner(x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ w)

    @jax.custom_vjp
    def f(x: jax.Array) -> jax.Array:
        return x * 2.0

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 2.0,))
    imp = check(lambda x: jax.checkpoint(lambda y: f(jax.nn.relu(inner(y))))(x), X)
    assert any(v.shape == (4, 4) for v in imp.weights.values())  # the closed-over w


def test_float16_bfloat16_chains() -> None:
    for dt in (jnp.float16, jnp.bfloat16):
        x = X.astype(dt)
        check(lambda x: jnp.exp(x) * x + jnp.max(x, axis=1, keepdims=True), x)
