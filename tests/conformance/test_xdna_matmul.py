"""Matmul and broadcast_in_dim on the XDNA2 tiles, on xdna-host (and on the NPU, where present).

The matmul contract is ``ProductSum``: operands narrowed to bf16 (RNE), products exact, summed
in order of k in FP32 (upstream aie2p ``mm.cc``'s arithmetic, ``targets/xdna2.py``). These tests
hold the stand-in to it three ways:

- bit for bit against an independent emulation: ``ml_dtypes.bfloat16`` rounding of the
  operands and an FP32 accumulation in order of k, in numpy (nothing of poot's);
- under the contract against the oracle and against numpy's float64 product, at the domain's
  edges (bf16 ties, subnormals, underflowing products, bf16's largest value) and over fuzzed
  shapes (rows split across calls, batches, K = 0 and K = 1);
- the domain's guard: an argument past bf16's range is refused on the host, a computed one by
  the flag word.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_ir import Builder, DomainError, DomainFlagged, DType, Prim, Program, evaluate
from poot_ir.numerics import Bf16Contraction, Derived, compare
from poot_npu.registry import device_info
from poot_planner import TARGETS, KernelClass, plan
from poot_planner.error_bounds import result_bounds

from conformance.devices import open_device

F32, I32 = DType.F32, DType.I32
XDNA2 = TARGETS["xdna2"]
(MATMUL,) = [c for c in XDNA2.capabilities if c.kernel is KernelClass.MATMUL]
HOST = device_info("xdna-host")
BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def _matmul(a: tuple[int, ...], b: tuple[int, ...]) -> Program:
    bl = Builder("mm")
    bl.output("y", bl.matmul(bl.slot("a", F32, a), bl.slot("b", F32, b)))
    return bl.build()


def _emulated(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The aie2p arithmetic, independently: bf16 operands (ml_dtypes' RNE), each product exact
    in f32, added in order of k from +0 into an f32 accumulator."""
    a16 = a.astype(ml_dtypes.bfloat16).astype(np.float32)
    b16 = b.astype(ml_dtypes.bfloat16).astype(np.float32)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], np.float32)
    with np.errstate(all="ignore"):
        for k in range(a.shape[-1]):
            acc = (acc + a16[..., :, k, None] * b16[..., None, k, :]).astype(np.float32)
    return acc


def _run(engine: Engine, program: Program, feed: dict[str, np.ndarray]) -> np.ndarray:
    return engine.step(engine.add_entry(program), feed)["y"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> object:
    d = tmp_path_factory.mktemp("xdna-matmul")
    with Engine(open_device(HOST), cache_dir=d) as e:
        yield e


def _edges(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Ordinary values times ``scale``, with the domain's edge values (ties, subnormals,
    underflowing terms, zeros of both signs) planted in about a third of the elements."""
    edges = np.array(Bf16Contraction().edges(DType.F32).every, np.float64)
    edges = edges[np.abs(edges) < 1e30]  # bf16's largest has a case of its own
    x = rng.standard_normal(shape) * scale
    at = rng.random(shape) < 0.3
    return np.where(at, rng.choice(edges, shape), x).astype(np.float32)


def test_the_plan_narrows_matmul_operands_to_bf16_explicitly() -> None:
    p = plan(_matmul((3, 8), (8, 5)), XDNA2).check()
    (a,) = p.admissions.values() if isinstance(p.admissions, dict) else p.admissions
    assert a.kernel is KernelClass.MATMUL and a.contract == MATMUL.contract
    assert "bf16" in MATMUL.note and MATMUL.contract.bound.operand_unit == 2.0**-8


def test_bf16_rounding_is_emulated_bit_for_bit(engine: Engine) -> None:
    rng = np.random.default_rng(3)
    a = _edges(rng, (2, 7, 40), 1.0)
    b = _edges(rng, (2, 40, 6), 1.0)
    # ties of the rounding itself: halfway between two bf16 values, both parities
    a[0, 0, :4] = [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -(1.0 + 2.0**-8), 3.0 + 2.0**-7]
    got = _run(engine, _matmul(a.shape, b.shape), {"a": a, "b": b})
    want = _emulated(a, b)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # and the narrowing is real: a plain f32 product differs somewhere
    assert not np.array_equal(got, np.matmul(a, b))


def test_contract_at_the_edges_against_oracle_and_float64(engine: Engine) -> None:
    rng = np.random.default_rng(5)
    for scale in (1.0, 2.0**60, 2.0**-60):
        a, b = _edges(rng, (9, 33), scale), _edges(rng, (33, 4), 1.0)
        program = _matmul(a.shape, b.shape)
        got = _run(engine, program, {"a": a, "b": b})
        oracle = evaluate(program, {"a": a, "b": b})["y"]
        cmp = MATMUL.contract.check(got, oracle, [a, b])
        assert cmp.ok and cmp.compared == got.size, cmp
        # against float64 directly: the contract's bound less the oracle's own rounding
        exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
        s = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
        bound = MATMUL.contract.bound
        allowed = bound.factor(33) * s + 33 * bound.floor
        assert (np.abs(got.astype(np.float64) - exact) <= allowed).all()


def test_bf16_largest_operand_inside_and_overflow_promised_nothing(engine: Engine) -> None:
    a = np.array([[BF16_MAX, 1.0], [1.0, 1.0]], np.float32)
    b = np.array([[2.0**-10, BF16_MAX], [1.0, 1.0]], np.float32)
    program = _matmul(a.shape, b.shape)
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))
    cmp = MATMUL.contract.check(got, evaluate(program, {"a": a, "b": b})["y"], [a, b])
    # (0, 1) meets bf16's largest twice: its product overflows F32, promised nothing; (1, 1)
    # sums to bf16's largest, and the bound's room above it passes F32's: nothing promised
    assert cmp.ok and cmp.compared == 2, cmp
    assert np.isinf(got[0, 1]) and got[1, 1] == np.float32(BF16_MAX)


def test_an_argument_past_bf16_range_is_refused_on_the_host(engine: Engine) -> None:
    a = np.ones((2, 3), np.float32)
    a[1, 2] = np.nextafter(np.float32(BF16_MAX), np.float32(np.inf))  # rounds to bf16 inf
    with pytest.raises(DomainError):
        _run(engine, _matmul((2, 3), (3, 2)), {"a": a, "b": np.ones((3, 2), np.float32)})


def test_a_computed_operand_past_bf16_range_is_flagged(engine: Engine) -> None:
    bl = Builder("flagged")
    x = bl.slot("x", F32, (2, 3))
    bl.output("y", bl.matmul(bl.add(x, x), bl.slot("b", F32, (3, 2))))
    x_ = np.full((2, 3), 1.7e38, np.float32)  # x + x = 3.4e38: finite, past bf16's range
    with pytest.raises(DomainFlagged):
        _run(engine, bl.build(), {"x": x_, "b": np.ones((3, 2), np.float32)})


def test_rows_split_across_calls_and_batches(engine: Engine) -> None:
    """A left operand too large for one call streams in chunks of rows; each chunk finds its
    batch's right operand from its first row."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 200, 40)).astype(np.float32)  # 96 KB: chunked
    b = rng.standard_normal((3, 40, 8)).astype(np.float32)
    program = _matmul(a.shape, b.shape)
    (tile,) = plan(program, XDNA2).check().tiles
    assert tile.n_chunks > 1 and (a.shape[0] * a.shape[1]) % tile.chunk == 0
    assert (tile.chunk % a.shape[1]) != 0  # a chunk crosses a batch boundary somewhere
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))


def _pieces(program: Program) -> int:
    """Pieces of K the plan streams the right operand of its one matmul tile in (1: resident)."""
    (tile,) = plan(program, XDNA2).check().tiles
    return tile.pieces


def _resident_limit(m: int, n: int) -> int:
    """The largest K at which xdna2 holds an ``[K, n]`` right operand resident beside an
    ``[m, K]`` left one (found by planning, by bisection: a tile holds less as K grows)."""
    lo, hi = 1, 2**16 // n  # 256 KiB: past any tile
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _pieces(_matmul((m, mid), (mid, n))) == 1 else (lo, mid)
    return lo


@pytest.mark.parametrize("past", [0, 1, 2])
def test_k_streamed_at_the_resident_limit_and_past_it(engine: Engine, past: int) -> None:
    """At the largest K whose right operand a tile holds, one past (the first streamed in
    pieces of K, here a prime K: pieces of one row) and two past: bit for bit the emulation's
    order of k (the accumulator kept in f32 between pieces changes nothing), and the
    contract against the oracle."""
    m, n = 3, 60
    k = _resident_limit(m, n) + past
    program = _matmul((m, k), (k, n))
    assert (_pieces(program) > 1) == (past > 0)
    rng = np.random.default_rng(11 + past)
    a, b = _edges(rng, (m, k), 1.0), _edges(rng, (k, n), 1.0)
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))
    cmp = MATMUL.contract.check(got, evaluate(program, {"a": a, "b": b})["y"], [a, b])
    assert cmp.ok and cmp.compared == got.size, cmp


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(64, 512, 128), (48, 384, 384), (16, 1536, 96), (5, 770, 70)],  # 770 = 2 * 5 * 7 * 11
)
def test_k_streamed_rows_over_calls_bits_and_contract(
    engine: Engine, m: int, k: int, n: int
) -> None:
    """Right operands of 256 KiB to 590 KiB (BERT-base and MiniLM sized layers, fewer rows):
    streamed in pieces of K, once per call of rows."""
    program = _matmul((m, k), (k, n))
    (tile,) = plan(program, XDNA2).check().tiles
    assert tile.pieces > 1
    rng = np.random.default_rng(k)
    a, b = _edges(rng, (m, k), 1.0), _edges(rng, (k, n), 2.0**-3)
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))
    cmp = MATMUL.contract.check(got, evaluate(program, {"a": a, "b": b})["y"], [a, b])
    assert cmp.ok and cmp.compared == got.size, cmp


@pytest.mark.parametrize(
    ("batch", "m", "k", "n"),
    [
        (6, 32, 64, 64),  # 96 KiB of right operands, 16 KiB a batch
        (3, 5, 200, 64),  # one call a batch
        (12, 128, 32, 128),  # MiniLM's attention scores: q @ k^T over 12 heads
        (12, 128, 128, 32),  # and the context: p @ v
    ],
)
def test_batched_right_operands_held_one_batch_at_a_time(
    engine: Engine, batch: int, m: int, k: int, n: int
) -> None:
    """A batched right operand no tile holds whole, one batch of which it does: held one
    batch at a time across the calls of that batch's rows; bit for bit the emulation, and the
    contract against the oracle."""
    program = _matmul((batch, m, k), (batch, k, n))
    (tile,) = plan(program, XDNA2).check().tiles
    assert tile.by_batch and m % tile.chunk == 0
    rng = np.random.default_rng(batch * k)
    a, b = _edges(rng, (batch, m, k), 1.0), _edges(rng, (batch, k, n), 1.0)
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))
    cmp = MATMUL.contract.check(got, evaluate(program, {"a": a, "b": b})["y"], [a, b])
    assert cmp.ok and cmp.compared == got.size, cmp


def test_a_k_streamed_operand_is_its_tiles_alone(engine: Engine) -> None:
    """Its pieces are one core's objects: a weight another tile reads too, or one a tile
    computes, is streamed in a region where no other tile reads it and none makes it, and the
    results are the emulation's bit for bit."""
    k, n = 256, 64
    bl = Builder("shared")
    w = bl.slot("w", F32, (k, n))
    x1, x2 = bl.slot("x1", F32, (4, k)), bl.slot("x2", F32, (4, k))
    bl.output("y1", bl.matmul(x1, w))
    bl.output("y2", bl.matmul(x2, bl.add(w, w)))  # computed: a pointwise tile makes it
    bl.output("y3", bl.matmul(x2, w))
    program = bl.build()
    p = plan(program, XDNA2).check()
    mm = [t for t in p.tiles if t.kind is KernelClass.MATMUL]
    assert len(mm) == 3 and all(t.pieces > 1 for t in mm)
    region = {t.index: r.index for r in p.regions for t in r.tiles}
    (add,) = [t.index for t in p.tiles if t.kind is KernelClass.POINTWISE]
    # the add reads the w the first matmul streams in pieces; the second matmul streams the
    # add's output; the third streams w again beside the second (another value's pieces)
    assert region[mm[0].index] != region[add] != region[mm[1].index]
    for r in p.regions:
        pieced = [op.var.id for t in r.tiles for op in t.inputs if op.pieces > 1]
        read = [op.var.id for t in r.tiles for op in t.inputs]
        assert all(read.count(v) == 1 for v in pieced)
    rng = np.random.default_rng(4)
    feed = {  # ordinary values: the add's own domain is not under test here
        "w": rng.standard_normal((k, n)).astype(np.float32),
        "x1": _edges(rng, (4, k), 1.0),
        "x2": _edges(rng, (4, k), 1.0),
    }
    got = engine.step(engine.add_entry(program), feed)
    w2 = (feed["w"] + feed["w"]).astype(np.float32)
    for name, want in (
        ("y1", _emulated(feed["x1"], feed["w"])),
        ("y2", _emulated(feed["x2"], w2)),
        ("y3", _emulated(feed["x2"], feed["w"])),
    ):
        np.testing.assert_array_equal(got[name].view(np.uint32), want.view(np.uint32))


def test_k_streamed_overflow_is_flagged_once_the_whole_sum_is_in(engine: Engine) -> None:
    """A computed left operand (so the kernel guards the matmul) whose terms are inside
    bf16's range and whose sum passes f32's only over the last pieces: the run is refused by
    the flag word, as unstreamed; one row short of it, the same design runs."""
    k, n = 400, 64
    bl = Builder("mm")
    x = bl.slot("x", F32, (2, k))
    bl.output("y", bl.matmul(bl.add(x, x), bl.slot("b", F32, (k, n))))
    program = bl.build()
    (tile,) = [t for t in plan(program, XDNA2).check().tiles if t.kind is KernelClass.MATMUL]
    assert tile.pieces > 1
    b = np.full((k, n), 2.0**20, np.float32)
    x_ = np.full((2, k), 2.0**99, np.float32)  # terms of 2^120: 400 of them pass 2^128
    with pytest.raises(DomainFlagged):
        _run(engine, program, {"x": x_, "b": b})
    x_[:, 255:] = 0.0  # 255 terms: 2^127.99, finite
    got = _run(engine, program, {"x": x_, "b": b})
    assert np.isfinite(got).all()


def test_empty_contraction_writes_zeros(engine: Engine) -> None:
    got = _run(
        engine,
        _matmul((3, 0), (0, 4)),
        {"a": np.zeros((3, 0), np.float32), "b": np.zeros((0, 4), np.float32)},
    )
    np.testing.assert_array_equal(got.view(np.uint32), np.zeros((3, 4), np.uint32))


_DIMS = st.tuples(
    st.sampled_from([(), (1,), (2,)]),
    st.integers(1, 9),
    st.sampled_from([1, 2, 7, 8, 9, 31, 32, 33]),  # around upstream's 8-wide k blocks
    st.integers(1, 6),
)


@settings(
    derandomize=True,
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(dims=_DIMS, seed=st.integers(0, 2**16), scale=st.sampled_from([1.0, 2.0**-70, 2.0**50]))
def test_fuzz_bits_and_contract(
    engine: Engine, dims: tuple[tuple[int, ...], int, int, int], seed: int, scale: float
) -> None:
    batch, m, k, n = dims
    rng = np.random.default_rng(seed)
    a, b = _edges(rng, (*batch, m, k), scale), _edges(rng, (*batch, k, n), 1.0)
    program = _matmul(a.shape, b.shape)
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))
    cmp = MATMUL.contract.check(got, evaluate(program, {"a": a, "b": b})["y"], [a, b])
    assert cmp.ok, cmp


def test_dense_layer_within_its_derived_bound(engine: Engine) -> None:
    """``gelu(x @ w + bias)``: the bias broadcast on a tile, the matmul's ProductSum carried
    through the add and erf by the running error analysis, against the oracle."""
    from poot_ir import ops

    bl = Builder("dense")
    x, w, bias = (
        bl.slot("x", F32, (16, 32)),
        bl.weight("w", F32, (32, 24)),
        bl.weight("bias", F32, (24,)),
    )
    bl.output("y", ops.gelu(bl, bl.add(bl.matmul(x, w), bl.broadcast_in_dim(bias, (16, 24), (1,)))))
    program = bl.build()
    p = plan(program, XDNA2).check()
    assert KernelClass.BROADCAST in {t.kind for t in p.tiles}
    rng = np.random.default_rng(1)
    feed = {
        "x": rng.standard_normal((16, 32)).astype(np.float32),
        "w": (rng.standard_normal((32, 24)) * 0.2).astype(np.float32),
        "bias": rng.standard_normal(24).astype(np.float32),
    }
    got = engine.step(
        engine.add_entry(p, engine.load_weights({k: feed[k] for k in ("w", "bias")})),
        {"x": feed["x"]},
    )
    bound = result_bounds(p, feed)["y"]
    assert np.isfinite(bound).all()
    cmp = compare(got["y"], evaluate(program, feed)["y"], Derived(), scale=bound)
    assert cmp.ok and cmp.compared == bound.size, cmp


@pytest.mark.parametrize("dtype", [F32, I32])
def test_broadcast_is_bit_exact(engine: Engine, dtype: DType) -> None:
    bl = Builder("bcast")
    x = bl.slot("x", dtype, (3, 1, 4))
    bl.output("y", bl.broadcast_in_dim(x, (2, 3, 5, 4), (1, 2, 3)))
    program = bl.build()
    if dtype is F32:
        v = np.array([0.0, -0.0, np.inf, -1.5] * 3, np.float32).reshape(3, 1, 4)
        v.view(np.uint32)[0, 0, 3] = 0x7FC01234  # a NaN payload moves as bits
    else:
        v = np.arange(-6, 6, dtype=np.int32).reshape(3, 1, 4)
    got = _run(engine, program, {"x": v})
    want = evaluate(program, {"x": v})["y"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.xdna
def test_matmul_on_the_npu(tmp_path: Path) -> None:
    """The same arithmetic on silicon: bit for bit with the emulation where the accumulate is
    RNE (not established upstream: this test settles it), within the contract in any case."""
    device = open_device(device_info("xdna"))  # skips: "hardware unavailable"
    rng = np.random.default_rng(11)
    a, b = _edges(rng, (8, 64), 1.0), _edges(rng, (64, 8), 1.0)
    program = _matmul(a.shape, b.shape)
    with Engine(device, cache_dir=tmp_path) as e:
        got = _run(e, program, {"a": a, "b": b})
    cmp = MATMUL.contract.check(got, evaluate(program, {"a": a, "b": b})["y"], [a, b])
    assert cmp.ok, cmp
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))


def _sequential(x: np.ndarray, axes: tuple[int, ...], prim: Prim) -> np.ndarray:
    """The row kernel's order, independently: the reduced axes moved last (row-major), added
    in order from -0 in f32 (or the max from -inf)."""
    last = tuple(range(x.ndim - len(axes), x.ndim))
    kept = [s for i, s in enumerate(x.shape) if i not in axes]
    rows = np.moveaxis(x, axes, last).reshape(*kept, -1)
    summing = prim is Prim.REDUCE_SUM
    acc = np.full(kept, -0.0 if summing else -np.inf, np.float32)
    for c in range(rows.shape[-1]):
        acc = (acc + rows[..., c]).astype(np.float32) if summing else np.maximum(acc, rows[..., c])
    if summing and rows.shape[-1] == 0:
        acc = np.zeros(kept, np.float32)  # numpy's (and the oracle's) empty sum is +0
    return acc


@pytest.mark.parametrize("prim", [Prim.REDUCE_SUM, Prim.REDUCE_MAX])
@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((2, 3, 4, 5), (2, 3)),  # trailing: streamed rows of 20 (global average pooling, NCHW)
        ((2, 3, 4, 5), (1, 2)),  # NHWC pooling: strided over the resident operand
        ((2, 3, 4, 5), (0,)),
        ((6, 7), (0, 1)),  # everything: one output
        ((5, 0, 3), (1,)),  # empty terms: the identities
    ],
)
def test_reduction_over_any_axes(
    engine: Engine, prim: Prim, shape: tuple[int, ...], axes: tuple[int, ...]
) -> None:
    bl = Builder("reduce")
    bl.output("y", getattr(bl, prim.value)(bl.slot("x", F32, shape), axes=axes))
    program = bl.build()
    p = plan(program, XDNA2).check()
    rng = np.random.default_rng(2)
    x = _edges(rng, shape, 1.0)
    got = engine.step(engine.add_entry(p), {"x": x})["y"]
    np.testing.assert_array_equal(got.view(np.uint32), _sequential(x, axes, prim).view(np.uint32))
    bound = result_bounds(p, {"x": x})["y"]
    cmp = compare(got, evaluate(program, {"x": x})["y"], Derived(), scale=bound)
    assert cmp.ok, cmp
    if prim is Prim.REDUCE_SUM and x.size:  # the derived bound is ScaledSum over the axes
        terms = int(np.prod([shape[a] for a in axes]))
        s = np.sum(np.abs(x.astype(np.float64)), axis=axes)
        np.testing.assert_allclose(bound, 2 * 2.0**-23 * terms * s)


def test_a_strided_reduction_too_large_to_hold_is_refused_with_its_limit() -> None:
    bl = Builder("big")
    bl.output("y", bl.reduce_sum(bl.slot("x", F32, (300, 100)), axes=(0,)))
    (r,) = plan(bl.build(), XDNA2).refusals
    assert r.fact("limit") == "tile_bytes"


def test_a_subnormal_operand_times_a_large_one_is_within_the_contract(engine: Engine) -> None:
    """bf16 keeps 7 bits of a subnormal 2^-133 apart: 1e-40 becomes 9.18e-41 (8 % off), and
    its product with 2^50 x 1.3 is 1e-26 off, far past a relative bound or a fixed floor. The
    contract scales the operands' subnormal rounding by the partner's magnitude (a CI run's
    derandomized fuzz found this with K = 1; the bits were the emulation's, the bound wrong)."""
    a = np.array([[[2.0**50 * 1.3]], [[-(2.0**50)]]], np.float32)
    b = np.array([[[1e-40]], [[-1e-40]]], np.float32)
    program = _matmul(a.shape, b.shape)
    got = _run(engine, program, {"a": a, "b": b})
    np.testing.assert_array_equal(got.view(np.uint32), _emulated(a, b).view(np.uint32))
    want = evaluate(program, {"a": a, "b": b})["y"]
    assert np.all(np.abs(got.astype(np.float64) - want) > 1e-27)  # the rounding shows
    cmp = MATMUL.contract.check(got, want, [a, b])
    assert cmp.ok, cmp
