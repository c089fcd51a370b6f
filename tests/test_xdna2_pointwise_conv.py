"""A pointwise (1x1) convolution on xdna2 (issue 28: xdna2 runs convolutions once its matmul
lands): legalized into the matmul the tiles run (operands narrowed to bf16, FP32 accumulation)
over the same terms, planned whole, and run on the xdna-host stand-in within the matmul's
contract of an independent float64 convolution (``numpy.einsum``) at the operands' edges; any
other convolution stays refused, typed, and so does an operand bf16 cannot hold."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_ir import Builder, DType, Prim, Program, evaluate
from poot_ir.errors import DomainError, DomainFlagged
from poot_npu.registry import make_device
from poot_planner import RefusalKind, plan
from poot_planner.targets.xdna2 import MATMUL_CONTRACT

F32 = DType.F32
Array = np.ndarray[Any, np.dtype[Any]]

#: (batch, input features, output features, spatial shape, strides): 1 to 3 spatial axes, a
#: batch of two, strided (ResNet's downsampling shortcut: every second pixel)
SHAPES = [
    (1, 16, 24, (14, 14), None),
    (2, 3, 5, (4, 6), None),
    (1, 8, 4, (10,), None),
    (1, 4, 6, (2, 3, 4), None),
    (1, 8, 6, (7, 8), (2, 2)),
    (2, 4, 3, (9,), (3,)),
]
Shape = tuple[int, int, int, tuple[int, ...], tuple[int, ...] | None]


def _conv(n: int, c: int, o: int, space: Sequence[int], k: int = 1, **kw: Any) -> Program:
    b = Builder("pointwise")
    x = b.slot("x", F32, (n, c, *space))
    w = b.weight("w", F32, (o, c // kw.get("groups", 1), *(k for _ in space)))
    b.output("y", b.conv(x, w, **kw))
    return b.build()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_pointwise_convolution_is_a_matmul_of_the_pixels(shape: Shape) -> None:
    n, c, o, space, strides = shape
    source = _conv(n, c, o, space, strides=strides)
    p = plan(source, "xdna2")
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = p.rewrites
    assert rw.rule.name == "a pointwise convolution as a matmul"
    assert rw.derivation.bound == MATMUL_CONTRACT.bound  # the matmul's: moves after it only
    assert [e.prim for e in p.legalized.eqns].count(Prim.MATMUL) == 1
    assert Prim.CONV not in {e.prim for e in p.legalized.eqns}
    # on the oracle the rewrite is the convolution: the same exact terms, each output rounded
    # once (whole numbers: every sum exact in F32)
    rng = np.random.default_rng(len(space))
    feed = {
        "x": rng.integers(-9, 10, (n, c, *space)).astype(np.float32),
        "w": rng.integers(-9, 10, (o, c, *(1 for _ in space))).astype(np.float32),
    }
    np.testing.assert_array_equal(evaluate(p.legalized, feed)["y"], evaluate(source, feed)["y"])


@pytest.mark.parametrize(
    "kw",
    [
        {"k": 3},
        {"padding": ((1, 1), (0, 0))},
        {"lhs_dilation": (2, 1)},
        {"groups": 2},
    ],
    ids=["3x3", "padded", "dilated input", "grouped"],
)
def test_any_other_convolution_stays_refused_typed(kw: dict[str, Any]) -> None:
    (r,) = plan(_conv(1, 4, 4, (6, 6), **kw), "xdna2").refusals
    assert (r.kind, r.primitive) == (RefusalKind.UNSUPPORTED_PRIMITIVE, "conv")


def _allowed(x: Array, w: Array) -> Array:
    """The matmul's contract (``ProductSum``) at each output of the convolution of ``x`` by the
    1x1 kernel ``w``: its factor over the ``K = C`` terms times the sum of ``|x| |w|``, the
    operands' subnormal rounding scaled by the row and column magnitudes, and the floors;
    infinite (nothing promised) where that sum reaches F32's largest value."""
    bound = MATMUL_CONTRACT.bound
    ax, aw = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)).reshape(w.shape[:2])
    k = x.shape[1]
    s = np.einsum("nc...,oc->no...", ax, aw)
    rows = ax.sum(axis=1, keepdims=True)
    cols = aw.sum(axis=1).reshape((1, -1) + (1,) * (x.ndim - 2))
    eta = bound.operand_floor
    subnormal = (1 + bound.operand_unit) * (1 + bound.gamma(k)) * eta * (rows + cols)
    allowed = bound.factor(k) * s + subnormal + k * (eta * eta + bound.floor)
    return np.asarray(
        np.where(s * (1 + bound.factor(k)) < np.finfo(np.float32).max, allowed, np.inf)
    )


#: the operands' edges: zeros of both signs, bf16's subnormals and its smallest normal, values
#: bf16 rounds (0.1, 1 + 2^-9), magnitudes whose products reach far (1e30)
EDGES = [0.0, -0.0, 1.0, -1.0, 0.1, 1.0 + 2.0**-9, 1e-38, -1e-38, 9e-41, 2.0**-126, 7.0, 1e30]


@settings(derandomize=True, max_examples=12, deadline=None, database=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(range(len(SHAPES))))
def test_on_xdna_host_within_the_matmul_contract_of_float64(seed: int, which: int) -> None:
    n, c, o, space, strides = SHAPES[which]
    rng = np.random.default_rng(seed)
    xs, ws = (n, c, *space), (o, c, *(1 for _ in space))
    x = np.where(rng.random(xs) < 0.3, rng.choice(EDGES, xs), rng.normal(size=xs))
    w = np.where(rng.random(ws) < 0.3, rng.choice(EDGES, ws), rng.normal(size=ws))
    x, w = x.astype(np.float32), w.astype(np.float32)
    program = _conv(n, c, o, space, strides=strides)
    with tempfile.TemporaryDirectory() as cache, Engine(make_device("xdna-host"), cache) as engine:
        entry = engine.add_entry(plan(program, "xdna2"), engine.load_weights({"w": w}))
        got = engine.step(entry, {"x": x})["y"].astype(np.float64)
    # the taps a strided 1x1 window reads: every stride-th pixel
    x = x[(slice(None), slice(None), *(slice(None, None, s) for s in strides or ()))]
    want = np.einsum("nc...,oc->no...", x.astype(np.float64), w.reshape(o, c).astype(np.float64))
    allowed = _allowed(x, w)
    promised = np.isfinite(allowed)
    assert promised.any()
    # the oracle's own rounding of the exact sum to F32 on top of the contract
    err = np.abs(got - want)[promised]
    assert np.all(err <= allowed[promised] + 2.0**-24 * np.abs(want[promised]))


def test_an_operand_bf16_cannot_hold_is_refused_typed(tmp_path: Path) -> None:
    # 3.4e38 is a finite F32 that bf16 rounds to infinity: the matmul's domain refuses it
    x = np.ones((1, 4, 3, 3), np.float32)
    x[0, 2, 1, 1] = 3.4e38
    w = np.ones((2, 4, 1, 1), np.float32)
    program = _conv(1, 4, 2, (3, 3))
    with Engine(make_device("xdna-host"), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(plan(program, "xdna2"), engine.load_weights({"w": w}))
        with pytest.raises((DomainError, DomainFlagged)):
            engine.step(entry, {"x": x})
