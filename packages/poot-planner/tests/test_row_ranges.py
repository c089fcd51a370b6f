"""The range of a normalized row and of a softmax (``poot_planner.row_ranges``): every device
that keeps xdna2's per-step contracts lands inside it whatever its row, and it is close to the
exact extremes (``sqrt(n - 1)`` for a normalized row, ``[0, 1]`` for a softmax).

The device here is an adversary in numpy: each step computed in float64 on the device's own
operands, rounded to F32, then moved by the whole error its contract allows, with a random
sign (``_adversary``). The exact references are numpy float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from poot_ir import (
    AbsRel,
    BitExact,
    BroadcastParams,
    Builder,
    DType,
    LargerOperandUlps,
    Literal,
    Prim,
    Program,
    ReduceParams,
    Relative,
    ScaledSum,
    Var,
    ops,
)
from poot_planner import TARGETS
from poot_planner.row_ranges import RowRange, row_range

F32 = DType.F32
XDNA2 = TARGETS["xdna2"]
EPS = 1e-5


def _layernorm_rows(rows: int, n: int) -> Program:
    """LayerNorm's normalized value, ``(x - mean) / sqrt(var + eps)`` (no gamma, no beta)."""
    b = Builder("normalized")
    x = b.slot("x", F32, (rows, n))
    mean = b.div(b.reduce_sum(x, axes=(1,)), float(n))
    xc = b.sub(x, b.broadcast_in_dim(mean, (rows, n), (0,)))
    var = b.div(b.reduce_sum(b.mul(xc, xc), axes=(1,)), float(n))
    std = b.sqrt(b.add(var, EPS))
    b.output("y", b.div(xc, b.broadcast_in_dim(std, (rows, n), (0,))))
    return b.build()


def _rmsnorm_rows(rows: int, n: int) -> Program:
    b = Builder("rms")
    x = b.slot("x", F32, (rows, n))
    b.output("y", ops.rmsnorm(b, x, eps=EPS))
    return b.build()


def _softmax_rows(rows: int, n: int) -> Program:
    b = Builder("softmax")
    x = b.slot("x", F32, (rows, n))
    b.output("y", ops.softmax(b, x))
    return b.build()


def _contract_of(program: Program) -> object:
    def of(k: int) -> object:
        cap = XDNA2.capability(program.eqns[k].prim, F32)
        return None if cap is None else cap.contract

    return of


def _range(program: Program, magnitude: float = 0.0) -> RowRange:
    producer = {e.out.id: k for k, e in enumerate(program.eqns)}
    found = row_range(
        program,
        len(program.eqns) - 1,
        producer,
        _contract_of(program),  # type: ignore[arg-type]
        lambda _v: magnitude,
    )
    assert found is not None
    return found


def _step64(e: object, ops_: list[np.ndarray]) -> np.ndarray:
    """One step exactly (float64) on the device's operands."""
    assert hasattr(e, "prim")
    p = e.params  # type: ignore[attr-defined]
    with np.errstate(all="ignore"):
        match e.prim:  # type: ignore[attr-defined]
            case Prim.ADD:
                return ops_[0] + ops_[1]
            case Prim.SUB:
                return ops_[0] - ops_[1]
            case Prim.MUL:
                return ops_[0] * ops_[1]
            case Prim.DIV:
                return ops_[0] / ops_[1]
            case Prim.SQRT:
                return np.sqrt(ops_[0])
            case Prim.EXP:
                return np.exp(ops_[0])
            case Prim.REDUCE_SUM if isinstance(p, ReduceParams):
                return np.sum(ops_[0], axis=p.axes)
            case Prim.REDUCE_MAX if isinstance(p, ReduceParams):
                return np.max(ops_[0], axis=p.axes)
            case Prim.BROADCAST_IN_DIM if isinstance(p, BroadcastParams):
                shape = [ops_[0].shape[p.dims.index(d)] if d in p.dims else 1 for d in range(len(p.shape))]  # fmt: skip
                return np.broadcast_to(ops_[0].reshape(shape), p.shape)
    raise AssertionError(f"no simulation for {e}")


def _allowed(bound: object, e: object, ops_: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """What the step's xdna2 contract lets the device add to the oracle's F32 value."""
    y64 = np.abs(y)
    match bound:
        case BitExact():
            return np.zeros(y.shape)
        case AbsRel(abs=a, rel=r):
            return a + r * y64
        case Relative(rel=r):
            return r * y64
        case LargerOperandUlps(ulps=u, unit=unit):
            big = np.maximum(np.abs(ops_[0]), np.abs(ops_[-1]))
            return u * unit * np.broadcast_to(big, y.shape)
        case ScaledSum(ulps_per_term=u, unit=unit):
            n = ops_[0].shape[-1]
            return u * unit * n * np.sum(np.abs(ops_[0]), axis=-1)
    raise AssertionError(f"no simulation for {bound}")


def _adversary(program: Program, x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """A device keeping every step's contract, moved by the whole of it; None when a step
    leaves its domain (nothing promised there)."""
    val: dict[int, np.ndarray] = {program.args[0].var.id: x.astype(np.float64)}
    for e in program.eqns:
        operands = [val[a.id] if isinstance(a, Var) else np.asarray(a.as_float()) for a in e.inputs]
        assert all(isinstance(a, Var | Literal) for a in e.inputs)
        with np.errstate(all="ignore"):
            oracle = _step64(e, operands).astype(np.float32).astype(np.float64)
        cap = XDNA2.capability(e.prim, F32)
        assert cap is not None
        c = cap.contract
        if not np.all(c.domain.inside([o.astype(np.float32) for o in operands], oracle)):
            return None
        allowed = _allowed(c.bound, e, operands, oracle)
        with np.errstate(invalid="ignore"):
            moved = oracle + rng.choice([-1.0, 1.0], oracle.shape) * allowed
        # a device value is an F32 one: moved past the largest, it stays the largest
        top = float(np.finfo(np.float32).max)
        val[e.out.id] = np.where(np.isfinite(oracle), np.clip(moved, -top, top), oracle)
    ((_, out),) = program.results()
    return val[out.id]


def _normalized64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + EPS)


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _inside(rng_: RowRange, y: np.ndarray) -> bool:
    y = y[np.isfinite(y)]
    return bool(np.all((y >= rng_.lo) & (y <= rng_.hi)))


@pytest.mark.parametrize("n", [2, 16, 32, 768, 4096])
@pytest.mark.parametrize("build", [_layernorm_rows, _rmsnorm_rows])
def test_a_normalized_row_is_within_sqrt_n(build: object, n: int) -> None:
    """Never below the exact supremum (LayerNorm: ``sqrt(n - 1)``, a row of one non-zero
    deviation; RMSNorm: ``sqrt(n)``, one non-zero value), and within 1e-3 of ``sqrt(n)``."""
    r = _range(build(4, n))  # type: ignore[operator]
    assert r.kind == "normalized" and r.lo == -r.hi
    assert math.sqrt(n) <= r.hi <= math.sqrt(n) * (1 + 1e-3)


def _edge_rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    rows = np.stack(
        [
            rng.standard_normal(n),  # ordinary
            np.full(n, 3.25),  # equal values: variance 0, the output 0 (eps keeps it defined)
            np.where(np.arange(n) == n // 2, 1e18, 0.0),  # one huge value: sqrt(n - 1) there
            np.where(np.arange(n) == 0, -1e-3, 1e-3) + 7.0,  # a tiny spread on a large mean
        ]
    )
    return rows.astype(np.float32)


@pytest.mark.parametrize("n", [16, 4096])
@pytest.mark.parametrize("build", [_layernorm_rows, _rmsnorm_rows])
def test_edge_rows_stay_in_the_normalized_range(build: object, n: int) -> None:
    program = build(4, n)  # type: ignore[operator]
    r = _range(program)
    x = _edge_rows(n)
    exact = _normalized64(x) if build is _layernorm_rows else _rms64(x)
    assert _inside(r, exact)
    # the huge value's element reaches the exact supremum: the range is not loose there
    top = math.sqrt(n - 1) if build is _layernorm_rows else math.sqrt(n)
    assert np.max(np.abs(exact[2])) >= (1 - 1e-9) * top
    rng = np.random.default_rng(0)
    for _ in range(10):
        got = _adversary(program, x, rng)
        assert got is not None and _inside(r, got)


def _rms64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS)


@pytest.mark.parametrize("n", [2, 16, 4096])
def test_a_softmax_is_within_zero_and_one(n: int) -> None:
    """Near ``[0, 1]``: wider as the row grows (each of its ``n`` exps may sit ``2e-6`` off,
    0.8% over 4096 terms)."""
    r = _range(_softmax_rows(4, n), magnitude=1e4)
    assert r.kind == "softmax"
    assert -1e-3 <= r.lo <= 0.0 and 1.0 <= r.hi <= 1.0 + 0.02 * max(n / 4096, 0.05)


def test_no_softmax_range_past_the_subtraction_of_a_huge_max() -> None:
    """The device's ``max - max`` is within two ulps of ``|max|``: past about 2^22 that may
    leave exp(z) of the row's maximum near 0, and nothing bounds the quotient."""
    program = _softmax_rows(2, 8)
    producer = {e.out.id: k for k, e in enumerate(program.eqns)}
    of = _contract_of(program)
    at = len(program.eqns) - 1
    assert row_range(program, at, producer, of, lambda _v: 1e30) is None  # type: ignore[arg-type]
    assert row_range(program, at, producer, of, None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [16, 4096])
def test_edge_rows_stay_in_the_softmax_range(n: int) -> None:
    program = _softmax_rows(4, n)
    rng = np.random.default_rng(n)
    lowest = float(np.finfo(np.float32).min)
    x = np.stack(
        [
            rng.standard_normal(n) * 30,
            np.full(n, -2.5),  # equal values: 1/n each
            np.where(np.arange(n) == 3, 1e4, -1e4),  # one huge value: 1 there, 0 elsewhere
            np.where(np.arange(n) % 3 == 0, lowest, rng.standard_normal(n)),  # finfo-masked
        ]
    ).astype(np.float32)
    r = _range(program, magnitude=1e4)
    exact = _softmax64(x)
    assert _inside(r, exact)
    assert exact[2, 3] == 1.0  # the huge value's element reaches the top of the range
    for seed in range(10):
        got = _adversary(program, x, np.random.default_rng(seed))
        assert got is not None and _inside(r, got)


def test_a_row_masked_by_minus_inf_leaves_the_contracts() -> None:
    """``-inf - max`` is outside xdna2's subtraction domain (finite operands): nothing is
    promised for such a row, so the analysis takes no range there (the exact softmax is
    inside it all the same)."""
    n = 16
    x = np.where(np.arange(n) % 3 == 0, -np.inf, np.linspace(-2, 2, n))[None].astype(np.float32)
    program = _softmax_rows(1, n)
    assert _inside(_range(program, magnitude=2.0), _softmax64(x))
    assert _adversary(program, x, np.random.default_rng(0)) is None


@given(
    st.lists(
        st.floats(-(2.0**50), 2.0**50, width=32, allow_subnormal=False), min_size=2, max_size=48
    ),
    st.integers(0, 2**32 - 1),
)
def test_a_fuzzed_row_stays_in_its_ranges(row: list[float], seed: int) -> None:
    n = len(row)
    x = np.asarray([row], np.float32)
    rng = np.random.default_rng(seed)
    for build, exact in ((_layernorm_rows, _normalized64), (_rmsnorm_rows, _rms64)):
        program = build(1, n)
        r = _range(program)
        assert _inside(r, exact(x))
        got = _adversary(program, x, rng)
        if got is not None:  # None: a step left its domain (a subnormal square)
            assert _inside(r, got)
    small = (x / 2.0**37).astype(np.float32)  # softmax: |max| <= 2^13
    program = _softmax_rows(1, n)
    r = _range(program, magnitude=float(np.max(np.abs(small))))
    assert _inside(r, _softmax64(small))
    got = _adversary(program, small, rng)
    if got is not None:
        assert _inside(r, got)
