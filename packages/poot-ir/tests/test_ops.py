"""The composites of ``poot_ir.ops``, evaluated by the oracle, against plain-numpy formulas
written here at float64.

Tolerances are derived from the F32 chain each composite builds (``U = 2^-24`` is the unit
roundoff of one correctly rounded F32 operation; the oracle rounds every primitive once): one
``U`` per rounding along the chain, ``n U`` for a sum of ``n`` terms (any order: the oracle does
not promise numpy's pairwise order), and the condition of the formula where it amplifies an
earlier error. Each is then doubled, because the bounds are first order. They stay far below
what any mistake in a formula would show (a missing scale, a wrong axis, a biased variance).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest
from poot_ir import (
    Builder,
    DType,
    Literal,
    Prim,
    ReduceParams,
    TypeCheckError,
    Var,
    evaluate,
    ops,
)

F32 = DType.F32
U = 2.0**-24  # unit roundoff of F32
TINY = 2.0**-126  # the smallest normal F32: below it F32 keeps only absolute precision

Arrays = dict[str, np.ndarray]


def run(build: Callable[[Builder, dict[str, Var]], Var], inputs: Arrays) -> np.ndarray:
    """Evaluate ``build`` on F32 slots shaped like ``inputs``."""
    b = Builder("composite")
    args = {k: b.slot(k, F32, v.shape) for k, v in inputs.items()}
    b.output("y", build(b, args))
    y = evaluate(b.build(), inputs)["y"]
    assert y.dtype == np.float32
    return y


def f32(x: object) -> np.ndarray:
    return np.asarray(x, np.float32)


def assert_within(y: np.ndarray, ref: np.ndarray, tol: np.ndarray | float) -> None:
    assert y.shape == ref.shape
    assert np.isfinite(y).all()
    err = np.abs(y.astype(np.float64) - ref)
    bad = err > tol
    assert not bad.any(), f"{bad.sum()} elements off; worst excess {np.max(err - tol):.3g}"


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- rmsnorm --------------------------------------------------------------------------------


def rmsnorm_ref(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w.astype(np.float64)


def rmsnorm_tol(ref: np.ndarray, n: int) -> np.ndarray:
    # every step keeps its operands non-negative, so errors are relative and just add up:
    # x*x (U), a sum of n terms (n U), / n, + eps, sqrt (half of what came before, + U),
    # x / rms, * w: at most (n + 6) U; doubled.
    return 2 * (n + 6) * U * np.abs(ref)


@pytest.mark.parametrize("shape", [(1,), (7,), (4, 16), (2, 3, 64), (3, 1)])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
@pytest.mark.parametrize("seed", [0, 1])
def test_rmsnorm(shape: tuple[int, ...], weighted: bool, seed: int) -> None:
    r = rng(seed)
    x = f32(r.standard_normal(shape) * r.choice([1e-3, 1.0, 50.0], shape[:-1] + (1,)))
    w = f32(r.standard_normal(shape[-1:])) if weighted else None
    inputs = {"x": x} if w is None else {"x": x, "w": w}
    y = run(lambda b, a: ops.rmsnorm(b, a["x"], a.get("w")), inputs)
    ref = rmsnorm_ref(x, w, 1e-6)
    assert_within(y, ref, rmsnorm_tol(ref, shape[-1]))


def test_rmsnorm_of_a_row_of_zeros_is_zero_thanks_to_eps() -> None:
    x = f32([[0, 0, 0, 0], [1, -2, 3, -4], [-0.0, 0, 0, 0]])
    y = run(lambda b, a: ops.rmsnorm(b, a["x"]), {"x": x})
    assert np.all(y[0] == 0) and np.all(y[2] == 0)
    ref = rmsnorm_ref(x, None, 1e-6)
    assert_within(y, ref, rmsnorm_tol(ref, 4))
    # and eps is what keeps it finite: without it the row is 0 / 0
    y0 = run(lambda b, a: ops.rmsnorm(b, a["x"], eps=0.0), {"x": x})
    assert np.isnan(y0[0]).all() and np.isfinite(y0[1]).all()


@pytest.mark.parametrize("eps", [1e-6, 1e-2, 1.0])
def test_rmsnorm_eps_is_added_to_the_mean_square(eps: float) -> None:
    # rows whose mean square is comparable to eps, where the value of eps shows
    x = f32(rng(3).standard_normal((4, 8)) * np.float32([[1e-3], [3e-2], [1.0], [3.0]]))
    y = run(lambda b, a: ops.rmsnorm(b, a["x"], eps=eps), {"x": x})
    ref = rmsnorm_ref(x, None, eps)
    assert_within(y, ref, rmsnorm_tol(ref, 8))


def test_rmsnorm_is_the_chain_the_xdna2_planner_fuses() -> None:
    """``mul, reduce_sum, div n, add eps, sqrt, broadcast_in_dim, div[, mul w]``, as documented
    (tests/test_composites_plan.py checks that the planner admits it as one tile)."""
    b = Builder("rms")
    x = b.slot("x", F32, (4, 64))
    w = b.weight("w", F32, (64,))
    b.output("y", ops.rmsnorm(b, x, w, eps=1e-5))
    p = b.build()
    assert [e.prim for e in p.eqns] == [
        Prim.MUL,
        Prim.REDUCE_SUM,
        Prim.DIV,
        Prim.ADD,
        Prim.SQRT,
        Prim.BROADCAST_IN_DIM,
        Prim.DIV,
        Prim.BROADCAST_IN_DIM,  # w, to the shape of x
        Prim.MUL,
    ]
    mul, total, mean, plus_eps = p.eqns[:4]
    assert mul.inputs == (x, x)
    assert total.params == ReduceParams((1,))
    assert mean.inputs[1] == Literal.of(64.0, F32)
    assert plus_eps.inputs[1] == Literal.of(1e-5, F32)


# -- layernorm ------------------------------------------------------------------------------


def layernorm_ref(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # the biased (population) variance
    return (x - mean) / np.sqrt(var + eps) * gamma.astype(np.float64) + beta.astype(np.float64)


def layernorm_tol(x: np.ndarray, gamma: np.ndarray, ref: np.ndarray, eps: float) -> np.ndarray:
    # The mean (a signed sum of n terms) is off by up to n U max|x|, and x - mean carries that
    # absolute error; dividing by the standard deviation turns it into (n + 2) U max|x| / std
    # (the condition of centring), and the variance and sqrt add about as much again relative
    # to the normalized value. gamma and beta add one rounding each. Doubled.
    x = x.astype(np.float64)
    n = x.shape[-1]
    std = np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    cond = np.max(np.abs(x), axis=-1, keepdims=True) / std
    yhat = (x - x.mean(axis=-1, keepdims=True)) / std
    normalized = 2 * (n + 2) * U * cond * (1 + np.abs(yhat))
    return 2 * (normalized * np.abs(gamma) + 2 * U * np.abs(ref))


@pytest.mark.parametrize("shape", [(1,), (5,), (4, 16), (2, 3, 32)])
@pytest.mark.parametrize("seed", [0, 1])
def test_layernorm(shape: tuple[int, ...], seed: int) -> None:
    r = rng(seed)
    x = f32(r.standard_normal(shape) * 3 + r.standard_normal(shape[:-1] + (1,)))
    gamma = f32(r.standard_normal(shape[-1:]))
    beta = f32(r.standard_normal(shape[-1:]))
    y = run(lambda b, a: ops.layernorm(b, a["x"], a["g"], a["b"]), {"x": x, "g": gamma, "b": beta})
    ref = layernorm_ref(x, gamma, beta, 1e-5)
    assert_within(y, ref, layernorm_tol(x, gamma, ref, 1e-5))


def test_layernorm_edges() -> None:
    x = f32(
        [
            [2.5, 2.5, 2.5, 2.5],  # constant: variance 0, eps keeps it finite, y = beta
            [1e-3, -1e-3, 2e-3, -2e-3],  # variance 2.5e-6, below eps = 1e-5
            [4e-3, -3e-3, 1e-3, -2e-3],  # variance 7.5e-6, about eps
            [1e4, -1e4, 3e4, 0],  # large magnitudes
        ]
    )
    gamma, beta = f32([1, 2, -1, 0.5]), f32([0, -1, 3, 0.25])
    y = run(lambda b, a: ops.layernorm(b, a["x"], a["g"], a["b"]), {"x": x, "g": gamma, "b": beta})
    np.testing.assert_array_equal(y[0], beta)
    ref = layernorm_ref(x, gamma, beta, 1e-5)
    assert_within(y, ref, layernorm_tol(x, gamma, ref, 1e-5))


# -- softmax --------------------------------------------------------------------------------


def softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_tol(x: np.ndarray, axis: int, ref: np.ndarray) -> np.ndarray:
    # d = x - max is off by U |d|, which exp turns into a relative error U |d|; exp rounds (U);
    # the sum of n positive terms adds n U (and each term's own error, at most U / e, since
    # e^d |d| <= 1/e and the sum is at least 1); the division rounds (U). Doubled. Below the
    # normal range the quotient keeps only absolute precision (the sum is >= 1): TINY.
    x = x.astype(np.float64)
    n = x.shape[axis]
    d = np.abs(x - x.max(axis=axis, keepdims=True))
    return 2 * (d + n + 3) * U * ref + TINY


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2])
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_softmax_on_every_axis(axis: int, scale: float) -> None:
    x = f32(rng(axis + 7).standard_normal((3, 4, 5)) * scale)
    y = run(lambda b, a: ops.softmax(b, a["x"], axis=axis), {"x": x})
    ref = softmax_ref(x, axis)
    assert_within(y, ref, softmax_tol(x, axis, ref))


@pytest.mark.parametrize(
    "row",
    [
        [1000.0, 999.0, 0.0, -1000.0],  # exp(1000) overflows everything; exp(0 - 1) does not
        [88.0, 89.0, 100.0, 200.0],
        [3e38, 3e38, -3e38, 0.0],  # x - max overflows F32 to -inf: exp gives 0, still finite
        [-3e38, -3e38, -3e38, -3e38],  # equal: uniform
        [1e30, -1e30, 1e30 * (1 - 2**-20), 5.0],
        [0.0, -0.0, 0.0, -0.0],
        [-200.0, -100.0, -0.0, -103.9],  # exp(-103.9) is an F32 subnormal
    ],
)
def test_softmax_of_large_magnitudes_stays_finite(row: list[float]) -> None:
    x = f32([row])
    y = run(lambda b, a: ops.softmax(b, a["x"]), {"x": x})
    ref = softmax_ref(x, -1)
    assert_within(y, ref, softmax_tol(x, -1, ref))


def test_softmax_over_a_size_one_axis_is_one() -> None:
    x = f32(rng(2).standard_normal((3, 1)) * 1e30)
    y = run(lambda b, a: ops.softmax(b, a["x"], axis=1), {"x": x})
    np.testing.assert_array_equal(y, np.ones((3, 1), np.float32))


# -- gelu -----------------------------------------------------------------------------------


def gelu_ref(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_tol(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    # 1 + erf(x / sqrt 2) is computed with an absolute error of a few U: the rounded constant
    # and product (2 U relative on the argument, which erf's slope 2/sqrt(pi) e^(-t^2) turns
    # into at most 2 U * 0.49 absolute), erf's rounding (U) and the add (2 U). Multiplied by
    # 0.5 x (exact) that is 2 U |x|; the last product rounds (U |ref|). Doubled. For very
    # negative x the result is tiny and only this absolute bound holds (cancellation in 1 + erf).
    x = np.abs(x.astype(np.float64))
    return 2 * (2 * U * x + U * np.abs(ref)) + TINY


def test_gelu_random() -> None:
    x = f32(rng(5).standard_normal(1000) * 3)
    y = run(lambda b, a: ops.gelu(b, a["x"]), {"x": x})
    ref = gelu_ref(x)
    assert_within(y, ref, gelu_tol(x, ref))


def test_gelu_edges() -> None:
    x = f32([0, -0.0, 1e-30, -1e-30, 1, -1, 3, -3, -5, -10, -40, 10, 40, 1e4, -1e4, 3e38, -3e38])
    y = run(lambda b, a: ops.gelu(b, a["x"]), {"x": x})
    ref = gelu_ref(x)
    assert_within(y, ref, gelu_tol(x, ref))
    assert y[0] == 0 and y[-1] == 0 and y[-2] == np.float32(3e38)  # gelu(x) = x for big x


# -- attention ------------------------------------------------------------------------------


def attention_ref(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The output, and the scores before masking."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = np.einsum("...sd,...td->...st", q, k) / math.sqrt(q.shape[-1])
    masked = s if mask is None else s + mask.astype(np.float64)
    p = np.exp(masked - masked.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("...st,...tv->...sv", p, v), s


def attention_tol(
    s: np.ndarray, mask: np.ndarray | None, v: np.ndarray, ref: np.ndarray
) -> np.ndarray:
    # A score is the dot product rounded once (the oracle's matmul), times 1/sqrt(d) rounded
    # once as a constant and once as a product: 3 U |s|. Masked entries (-1e9) get exp(...) = 0
    # in both, so only unmasked scores count: with S the largest of them in a row, each
    # difference d = s - max is off by at most 8 U S, and the softmax adds (t + 2) U (see
    # softmax_tol), so each weight is off by (16 S + t + 2) U relatively. The product with v
    # carries that times max|v| and rounds once (U |ref|). Doubled.
    t = s.shape[-1]
    live = np.ones(s.shape, bool) if mask is None else np.broadcast_to(mask == 0, s.shape)
    big = np.max(np.where(live, np.abs(s), 0), axis=-1, keepdims=True)
    vmax = np.max(np.abs(v.astype(np.float64)), axis=(-2, -1), keepdims=True)
    return 2 * ((16 * big + t + 2) * U * vmax + U * np.abs(ref)) + TINY


def causal(s: int, t: int) -> np.ndarray:
    return f32(np.where(np.arange(t)[None, :] > np.arange(s)[:, None] + (t - s), -1e9, 0.0))


@pytest.mark.parametrize(
    ("qs", "ks", "vs"),
    [
        ((4, 8), (5, 8), (5, 6)),
        ((1, 1), (1, 1), (1, 1)),
        ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),  # batch and heads
        ((3, 7, 16), (3, 7, 16), (3, 7, 16)),
    ],
)
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "causal"])
def test_attention(
    qs: tuple[int, ...], ks: tuple[int, ...], vs: tuple[int, ...], masked: bool
) -> None:
    r = rng(len(qs) + 10 * masked)
    q, k, v = (f32(r.standard_normal(s)) for s in (qs, ks, vs))
    mask = causal(qs[-2], ks[-2]) if masked else None  # [s, t]: the Builder broadcasts it
    inputs = {"q": q, "k": k, "v": v} | ({} if mask is None else {"m": mask})
    y = run(lambda b, a: ops.attention(b, a["q"], a["k"], a["v"], a.get("m")), inputs)
    ref, s = attention_ref(q, k, v, mask)
    assert_within(y, ref, attention_tol(s, mask, v, ref))


def test_attention_mask_rows_see_only_their_prefix() -> None:
    # with a causal mask, row 0 attends only to key 0, so its output is v[0] exactly (weight
    # exp(0) / exp(0) = 1, the masked weights exp(-1e9 - ...) = 0)
    r = rng(4)
    q, k, v = (
        f32(r.standard_normal((3, 4))),
        f32(r.standard_normal((3, 4))),
        f32(r.standard_normal((3, 2))),
    )
    y = run(
        lambda b, a: ops.attention(b, a["q"], a["k"], a["v"], a["m"]),
        {"q": q, "k": k, "v": v, "m": causal(3, 3)},
    )
    np.testing.assert_array_equal(y[0], v[0])
    ref, s = attention_ref(q, k, v, causal(3, 3))
    assert_within(y, ref, attention_tol(s, causal(3, 3), v, ref))


def test_attention_scale_is_one_over_sqrt_d() -> None:
    # two keys whose scores differ by exactly sqrt(d) before scaling, 1 after: weights e/(1+e)
    d = 16
    q = f32(np.eye(1, d))  # [1, d]
    k = f32([[4.0] + [0] * (d - 1), [0] * d])  # scores 4 and 0; sqrt(16) = 4
    v = f32([[1.0], [0.0]])
    y = run(lambda b, a: ops.attention(b, a["q"], a["k"], a["v"]), {"q": q, "k": k, "v": v})
    assert abs(float(y[0, 0]) - math.e / (1 + math.e)) < 8 * U


# -- typed errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "call", "fact"),
    [
        (
            {"x": (2, 3)},
            lambda b, a: ops.softmax(b, a["x"], axis=2),
            "softmax: axis 2 is outside rank 2",
        ),
        ({"x": (2, 3)}, lambda b, a: ops.softmax(b, a["x"], axis=-3), "softmax: axis -3"),
        ({"x": ()}, lambda b, a: ops.softmax(b, a["x"]), "outside rank 0"),
        ({"x": ()}, lambda b, a: ops.rmsnorm(b, a["x"]), "rmsnorm: axis -1 is outside rank 0"),
        (
            {"x": (), "g": (), "b": ()},
            lambda b, a: ops.layernorm(b, a["x"], a["g"], a["b"]),
            "layernorm",
        ),
        ({"q": (4,)}, lambda b, a: ops.attention(b, a["q"], a["q"], a["q"]), "rank >= 2"),
        ({"q": (4, 0)}, lambda b, a: ops.attention(b, a["q"], a["q"], a["q"]), "d = 0"),
    ],
    ids=[
        "softmax axis 2",
        "softmax axis -3",
        "softmax rank 0",
        "rmsnorm rank 0",
        "layernorm rank 0",
        "attention rank 1",
        "attention d 0",
    ],
)
def test_a_bad_axis_or_rank_is_a_typed_error(
    shapes: dict[str, tuple[int, ...]], call: Callable[[Builder, dict[str, Var]], Var], fact: str
) -> None:
    b = Builder("t")
    a = {k: b.slot(k, F32, s) for k, s in shapes.items()}
    with pytest.raises(TypeCheckError, match=re.escape(fact)):
        call(b, a)


@pytest.mark.parametrize(
    ("shapes", "call", "prim"),
    [
        ({"x": (2, 3), "w": (4,)}, lambda b, a: ops.rmsnorm(b, a["x"], a["w"]), "mul"),
        (
            {"x": (2, 3), "g": (2,), "b": (3,)},
            lambda b, a: ops.layernorm(b, a["x"], a["g"], a["b"]),
            "mul",
        ),
        (
            {"x": (2, 3), "g": (3,), "b": (2, 1, 2)},
            lambda b, a: ops.layernorm(b, a["x"], a["g"], a["b"]),
            "add",
        ),
        (
            {"q": (4, 8), "k": (5, 7), "v": (5, 2)},
            lambda b, a: ops.attention(b, a["q"], a["k"], a["v"]),
            "matmul",
        ),
        (
            {"q": (4, 8), "k": (5, 8), "v": (6, 2)},
            lambda b, a: ops.attention(b, a["q"], a["k"], a["v"]),
            "matmul",
        ),
        (
            {"q": (4, 8), "k": (2, 5, 8), "v": (5, 2)},
            lambda b, a: ops.attention(b, a["q"], a["k"], a["v"]),
            "transpose",
        ),
        (
            {"q": (4, 8), "k": (5, 8), "v": (5, 2), "m": (4, 4)},
            lambda b, a: ops.attention(b, a["q"], a["k"], a["v"], a["m"]),
            "add",
        ),
    ],
    ids=[
        "rmsnorm w",
        "layernorm gamma",
        "layernorm beta",
        "attention d",
        "attention v",
        "attention k rank",
        "attention mask",
    ],
)
def test_mismatched_operands_are_typed_errors_naming_the_equation(
    shapes: dict[str, tuple[int, ...]], call: Callable[[Builder, dict[str, Var]], Var], prim: str
) -> None:
    b = Builder("t")
    a = {k: b.slot(k, F32, s) for k, s in shapes.items()}
    with pytest.raises(TypeCheckError) as info:
        call(b, a)
    assert info.value.primitive == prim and info.value.eqn is not None


def test_gelu_of_i32_is_a_typed_error() -> None:
    b = Builder("t")
    with pytest.raises(TypeCheckError) as info:
        ops.gelu(b, b.slot("x", DType.I32, (3,)))
    assert (info.value.eqn, info.value.primitive) == (0, "mul")
