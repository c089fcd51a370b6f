"""Convolutions and window reductions on xdna2 (issue 28: xdna2 runs them once its matmul
lands), as their windows (``poot_planner.legalize.windows``).

Convolutions: legalized into the matmul the tiles run (operands narrowed to bf16, FP32
accumulation) over the windows, the same terms as the convolution: pointwise, padded,
strided, kernel-dilated, grouped and depthwise, in 1 to 3 spatial axes. Each is planned whole,
equal to the convolution on the oracle, and run on the xdna-host stand-in within the matmul's
contract of an independent float64 convolution at the operands' edges; an input-dilated
(transposed) convolution stays refused, typed, and so does an operand bf16 cannot hold.

Window sums and maxima (pools): the windows stacked and reduced by the tiles' row reduction,
equal on the oracle, exact (a maximum) or within the row sum's contract of numpy's sliding
windows in float64 on xdna-host; a maximum whose padding no edge element can stand for stays
refused, typed."""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_codegen.xdna import design_program
from poot_codegen.xdna.execute import new_arenas
from poot_engine import Engine
from poot_ir import Builder, DType, Prim, Program, evaluate
from poot_ir.budget import BudgetExceeded, budget_set
from poot_ir.errors import DomainError, DomainFlagged
from poot_ir.numerics import ScaledSum
from poot_npu.registry import make_device
from poot_planner import Plan, RefusalKind, plan
from poot_planner.legalize.rewrite import Rewrite
from poot_planner.targets import TARGETS
from poot_planner.targets.xdna2 import MATMUL_CONTRACT

F32 = DType.F32
Array = np.ndarray[Any, np.dtype[Any]]


class Case:
    """One convolution: batch, input and output features, spatial shape, kernel shape, and the
    convolution's keywords (``Builder.conv``: strides, padding, rhs_dilation, groups)."""

    def __init__(
        self, n: int, c: int, o: int, space: tuple[int, ...], kernel: tuple[int, ...], **kw: Any
    ) -> None:
        self.n, self.c, self.o, self.space, self.kernel, self.kw = n, c, o, space, kernel, kw
        self.groups: int = kw.get("groups", 1)

    def __repr__(self) -> str:
        return f"{self.n}x{self.c}x{self.space} * {self.o}x{self.kernel} {self.kw}"

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.n, self.c, *self.space)

    @property
    def w_shape(self) -> tuple[int, ...]:
        return (self.o, self.c // self.groups, *self.kernel)

    def program(self) -> Program:
        b = Builder("conv")
        x = b.slot("x", F32, self.x_shape)
        w = b.weight("w", F32, self.w_shape)
        b.output("y", b.conv(x, w, **self.kw))
        return b.build()


CASES = [
    # pointwise: 1 to 3 spatial axes, a batch of two, strided (ResNet's downsampling shortcut)
    Case(1, 16, 24, (14, 14), (1, 1)),
    Case(2, 3, 5, (4, 6), (1, 1)),
    Case(1, 8, 4, (10,), (1,)),
    Case(1, 4, 6, (2, 3, 4), (1, 1, 1)),
    Case(1, 8, 6, (7, 8), (1, 1), strides=(2, 2)),
    Case(2, 4, 3, (9,), (1,), strides=(3,)),
    # a 3x3 "same" convolution, a stride-2 depthwise one (MobileNet's), a 5-tap depthwise 1-D
    Case(1, 4, 6, (7, 8), (3, 3), padding=((1, 1), (1, 1))),
    Case(1, 6, 6, (9, 8), (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)), groups=6),
    Case(2, 6, 6, (9,), (5,), padding=((2, 2),), groups=6),
    # grouped, strided, padded on one side each; a dilated kernel; 3-D with uneven padding
    Case(1, 4, 8, (10, 9), (3, 3), strides=(2, 2), padding=((1, 0), (0, 1)), groups=2),
    Case(1, 3, 2, (6, 7), (2, 3), rhs_dilation=(2, 1)),
    Case(1, 2, 3, (3, 4, 5), (2, 2, 2), padding=((1, 0), (0, 0), (1, 1))),
]


def _rewritten(source: Program) -> tuple[Plan, Rewrite]:
    """``source``'s xdna2 plan, admitted, and the one rewrite it made."""
    p = plan(source, "xdna2")
    assert p.admitted, [str(r) for r in p.refusals]
    (rw,) = p.rewrites
    return p, rw


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_convolution_is_a_matmul_of_its_windows(case: Case) -> None:
    source = case.program()
    p, rw = _rewritten(source)
    assert rw.rule.name == "a convolution as a matmul of its windows"
    assert rw.derivation.bound == MATMUL_CONTRACT.bound  # the matmul's: moves around it only
    assert [e.prim for e in p.legalized.eqns].count(Prim.MATMUL) == 1
    assert Prim.CONV not in {e.prim for e in p.legalized.eqns}
    # on the oracle the rewrite is the convolution: the same exact terms, each output rounded
    # once (whole numbers: every sum exact in F32)
    rng = np.random.default_rng(len(case.space))
    feed = {
        "x": rng.integers(-9, 10, case.x_shape).astype(np.float32),
        "w": rng.integers(-9, 10, case.w_shape).astype(np.float32),
    }
    np.testing.assert_array_equal(evaluate(p.legalized, feed)["y"], evaluate(source, feed)["y"])


def test_an_input_dilated_convolution_stays_refused_typed() -> None:
    # a transposed convolution's zeros between pixels: no strided slice reads them
    program = Case(1, 4, 4, (6, 6), (3, 3), lhs_dilation=(2, 1)).program()
    (r,) = plan(program, "xdna2").refusals
    assert (r.kind, r.primitive) == (RefusalKind.UNSUPPORTED_PRIMITIVE, "conv")


def _conv64(case: Case, x: Array, w: Array) -> Array:
    """The convolution in float64, written independently of the rule: for each kernel tap, the
    zero-padded input's strided pixels times that tap's weights, group by group, summed."""
    g, kw = case.groups, case.kw
    strides = kw.get("strides") or (1,) * len(case.space)
    dilation = kw.get("rhs_dilation") or (1,) * len(case.space)
    padding = kw.get("padding") or ((0, 0),) * len(case.space)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *padding])
    out_space = [
        (size - d * (k - 1) - 1) // s + 1
        for size, k, s, d in zip(xp.shape[2:], case.kernel, strides, dilation, strict=True)
    ]
    xg = xp.reshape(case.n, g, case.c // g, *xp.shape[2:])
    wg = w.astype(np.float64).reshape(g, case.o // g, case.c // g, *case.kernel)
    out = np.zeros((case.n, g, case.o // g, *out_space))
    for tap in itertools.product(*(range(k) for k in case.kernel)):
        pixels = tuple(
            slice(t * d, t * d + (size - 1) * s + 1, s)
            for t, d, s, size in zip(tap, dilation, strides, out_space, strict=True)
        )
        out += np.einsum("ngc...,goc->ngo...", xg[(..., *pixels)], wg[(..., *tap)])
    return out.reshape(case.n, case.o, *out_space)


def _allowed(case: Case, x: Array, w: Array) -> Array:
    """The matmul's contract (``ProductSum``) at each output of the convolution: its factor
    over the ``K = T C/G`` terms times the sum of ``|x| |w|`` over the window, the operands'
    subnormal rounding scaled by the window's and the kernel's magnitudes, and the floors;
    infinite (nothing promised) where that sum reaches F32's largest value."""
    bound = MATMUL_CONTRACT.bound
    ax, aw = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64))
    k = (case.c // case.groups) * math.prod(case.kernel)
    s = _conv64(case, ax, aw)
    rows = _conv64(case, ax, np.ones_like(aw))  # each window's sum of |x|
    cols = aw.reshape(case.o, -1).sum(axis=1).reshape((1, -1) + (1,) * len(case.space))
    eta = bound.operand_floor
    subnormal = (1 + bound.operand_unit) * (1 + bound.gamma(k)) * eta * (rows + cols)
    allowed = bound.factor(k) * s + subnormal + k * (eta * eta + bound.floor)
    return np.asarray(
        np.where(s * (1 + bound.factor(k)) < np.finfo(np.float32).max, allowed, np.inf)
    )


#: the operands' edges: zeros of both signs, bf16's subnormals and its smallest normal, values
#: bf16 rounds (0.1, 1 + 2^-9), magnitudes whose products reach far (1e30)
EDGES = [0.0, -0.0, 1.0, -1.0, 0.1, 1.0 + 2.0**-9, 1e-38, -1e-38, 9e-41, 2.0**-126, 7.0, 1e30]


@settings(derandomize=True, max_examples=24, deadline=None, database=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(range(len(CASES))))
def test_on_xdna_host_within_the_matmul_contract_of_float64(seed: int, which: int) -> None:
    case = CASES[which]
    rng = np.random.default_rng(seed)
    xs, ws = case.x_shape, case.w_shape
    x = np.where(rng.random(xs) < 0.3, rng.choice(EDGES, xs), rng.normal(size=xs))
    w = np.where(rng.random(ws) < 0.3, rng.choice(EDGES, ws), rng.normal(size=ws))
    x, w = x.astype(np.float32), w.astype(np.float32)
    want = _conv64(case, x, w)
    allowed = _allowed(case, x, w)
    promised = np.isfinite(allowed)
    assert promised.any()
    with tempfile.TemporaryDirectory() as cache, Engine(make_device("xdna-host"), cache) as engine:
        entry = engine.add_entry(plan(case.program(), "xdna2"), engine.load_weights({"w": w}))
        try:
            got = engine.step(entry, {"x": x})["y"].astype(np.float64)
        except DomainFlagged:
            # the kernel refuses a sum that overflowed F32: only where the contract promises
            # nothing (some window's sum of |x| |w| reaches F32's largest value)
            assert not promised.all()
            return
    # the oracle's own rounding of the exact sum to F32 on top of the contract
    err = np.abs(got - want)[promised]
    assert np.all(err <= allowed[promised] + 2.0**-24 * np.abs(want[promised]))


def test_an_operand_bf16_cannot_hold_is_refused_typed(tmp_path: Path) -> None:
    # 3.4e38 is a finite F32 that bf16 rounds to infinity: the matmul's domain refuses it
    x = np.ones((1, 4, 3, 3), np.float32)
    x[0, 2, 1, 1] = 3.4e38
    w = np.ones((2, 4, 1, 1), np.float32)
    program = Case(1, 4, 2, (3, 3), (1, 1)).program()
    with Engine(make_device("xdna-host"), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(plan(program, "xdna2"), engine.load_weights({"w": w}))
        with pytest.raises((DomainError, DomainFlagged)):
            engine.step(entry, {"x": x})


# -- window sums and maxima -------------------------------------------------------------------


class Pool:
    """One window reduction: ``kind`` (sum or max), the operand's shape, and the window's
    parameters over every axis (``Builder.reduce_window_sum``)."""

    def __init__(
        self,
        kind: str,
        shape: tuple[int, ...],
        window: tuple[int, ...],
        strides: tuple[int, ...] | None = None,
        padding: tuple[tuple[int, int], ...] | None = None,
        dilation: tuple[int, ...] | None = None,
    ) -> None:
        self.kind, self.shape, self.window = kind, shape, window
        self.strides = strides or (1,) * len(shape)
        self.padding = padding or ((0, 0),) * len(shape)
        self.dilation = dilation or (1,) * len(shape)

    def __repr__(self) -> str:
        return f"{self.kind} {self.shape} {self.window} {self.strides} {self.padding}"

    def program(self) -> Program:
        b = Builder("pool")
        x = b.slot("x", F32, self.shape)
        f = b.reduce_window_max if self.kind == "max" else b.reduce_window_sum
        b.output("y", f(x, self.window, self.strides, self.padding, self.dilation))
        return b.build()

    def windows64(self, x: Array) -> Array:
        """Every window's elements in float64 (the last axes), written independently of the
        rule: numpy's sliding windows over the input padded with the reduction's identity."""
        fill = -np.inf if self.kind == "max" else 0.0
        xp = np.pad(x.astype(np.float64), self.padding, constant_values=fill)
        span = tuple((k - 1) * d + 1 for k, d in zip(self.window, self.dilation, strict=True))
        views = np.lib.stride_tricks.sliding_window_view(xp, span)
        pick = tuple(slice(None, None, s) for s in self.strides)
        taps = tuple(slice(None, None, d) for d in self.dilation)
        return np.asarray(views[pick][(..., *taps)])


P0 = ((0, 0), (0, 0))
POOLS = [
    Pool("max", (1, 3, 8, 8), (1, 1, 2, 2), (1, 1, 2, 2)),  # a plain 2x2 pool
    Pool("max", (1, 3, 9, 9), (1, 1, 5, 5), None, (*P0, (2, 2), (2, 2))),  # YOLOv8's SPPF
    Pool("max", (1, 3, 7, 7), (1, 1, 3, 3), (1, 1, 2, 2), (*P0, (1, 1), (1, 1))),  # ResNet's
    Pool("max", (2, 2, 8, 7), (1, 1, 3, 3), (1, 1, 2, 2), (*P0, (0, 1), (0, 2))),  # ceil mode
    Pool("max", (1, 2, 9), (1, 1, 3), (1, 1, 1), None, (1, 1, 2)),  # dilated, unpadded
    Pool("sum", (1, 16, 7, 7), (1, 1, 7, 7)),  # a global pool: reduced whole, no taps
    Pool("sum", (1, 3, 8, 8), (1, 1, 3, 3), None, (*P0, (1, 1), (1, 1))),
    Pool("sum", (2, 4, 9), (1, 1, 3), (1, 1, 2), (*P0, (1, 0))),
    Pool("sum", (1, 2, 6, 5), (1, 1, 2, 2), (1, 1, 1, 1), None, (1, 1, 2, 1)),
]


@pytest.mark.parametrize("pool", POOLS, ids=repr)
def test_a_window_reduction_is_a_reduction_of_its_windows(pool: Pool) -> None:
    source = pool.program()
    p, rw = _rewritten(source)
    reduce = Prim.REDUCE_MAX if pool.kind == "max" else Prim.REDUCE_SUM
    # the reduction's own contract: exact for a maximum, the row sum's for a sum
    assert rw.derivation.bound == p.target.capability(reduce, F32).contract.bound  # type: ignore[union-attr]
    assert [e.prim for e in p.legalized.eqns].count(reduce) == 1
    assert not {Prim.REDUCE_WINDOW_MAX, Prim.REDUCE_WINDOW_SUM} & {e.prim for e in p.legalized.eqns}
    x = np.random.default_rng(1).integers(-9, 10, pool.shape).astype(np.float32)
    np.testing.assert_array_equal(
        evaluate(p.legalized, {"x": x})["y"], evaluate(source, {"x": x})["y"]
    )


@pytest.mark.parametrize(
    "pool",
    [
        # a window wholly in the padding (its maximum is -inf) and a dilated padded one (its
        # window may skip the edge element): no edge can stand in for -inf there
        Pool("max", (1, 1, 6, 6), (1, 1, 3, 3), None, (*P0, (3, 3), (1, 1))),
        Pool("max", (1, 1, 9, 9), (1, 1, 3, 3), None, (*P0, (2, 2), (2, 2)), (1, 1, 2, 2)),
    ],
    ids=["wholly padded", "dilated padded"],
)
def test_a_maximum_no_edge_can_pad_stays_refused_typed(pool: Pool) -> None:
    (r,) = plan(pool.program(), "xdna2").refusals
    assert (r.kind, r.primitive) == (RefusalKind.UNSUPPORTED_PRIMITIVE, "reduce_window_max")


#: window reductions' edges: signed zeros, the smallest subnormal and normal, sums that cancel;
#: and, drawn in half the examples, the extremes (a sum near them overflows: refused) and, for
#: a maximum, the infinities (its domain is "not NaN")
POOL_EDGES = [0.0, -0.0, 1.0, -1.0, 1e-45, 2.0**-126, 1e30, -1e30]
EXTREMES = {"sum": [3.4e38, -3.4e38], "max": [3.4e38, -3.4e38, np.inf, -np.inf]}


@settings(derandomize=True, max_examples=24, deadline=None, database=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(range(len(POOLS))), st.booleans())
def test_on_xdna_host_within_the_reductions_contract_of_float64(
    seed: int, which: int, extreme: bool
) -> None:
    pool = POOLS[which]
    rng = np.random.default_rng(seed)
    edges = POOL_EDGES + (EXTREMES[pool.kind] if extreme else [])
    x = np.where(
        rng.random(pool.shape) < 0.3, rng.choice(edges, pool.shape), rng.normal(size=pool.shape)
    )
    x = x.astype(np.float32)
    windows = pool.windows64(x)
    axes = tuple(range(-len(pool.shape), 0))
    with tempfile.TemporaryDirectory() as cache, Engine(make_device("xdna-host"), cache) as engine:
        entry = engine.add_entry(plan(pool.program(), "xdna2"))
        try:
            got = engine.step(entry, {"x": x})["y"].astype(np.float64)
        except DomainFlagged:
            # a sum the row kernel saw overflow: only where its terms reach F32's largest value
            assert pool.kind == "sum" and np.abs(windows).sum(axis=axes).max() >= 3.4e38
            return
    if pool.kind == "max":  # exact: the same elements' maximum (zeros' signs not promised)
        np.testing.assert_array_equal(got, windows.max(axis=axes))
        return
    want = windows.sum(axis=axes)
    n = math.prod(pool.window)
    magnitudes = np.abs(windows).sum(axis=axes)
    # the row sum's contract (ScaledSum: ulps per term x n x unit of the terms' magnitudes) and
    # the oracle's own rounding of the exact sum to F32
    contract = TARGETS["xdna2"].capability(Prim.REDUCE_SUM, F32)
    assert contract is not None and isinstance(contract.contract.bound, ScaledSum)
    bound = contract.contract.bound
    allowed = bound.ulps_per_term * n * bound.unit * magnitudes + 2.0**-24 * np.abs(want)
    finite = magnitudes < 3.4e38
    assert np.all(np.abs(got - want)[finite] <= allowed[finite])


def test_host_arenas_past_the_memory_budget_are_refused_before_loading(tmp_path: Path) -> None:
    # a 9x9 convolution's windows are 81 times its input: the arenas are sized by the program,
    # so a design over the budget is refused typed, before its kernels build, not a MemoryError
    case = Case(1, 4, 4, (64, 64), (9, 9), padding=((4, 4), (4, 4)))
    w = np.ones(case.w_shape, np.float32)
    with Engine(make_device("xdna-host"), cache_dir=tmp_path) as engine:
        handle = engine.load_weights({"w": w})
        with budget_set(4 << 20), pytest.raises(BudgetExceeded, match="host arenas"):
            engine.add_entry(plan(case.program(), "xdna2"), handle)
        entry = engine.add_entry(plan(case.program(), "xdna2"), handle)  # the default budget
        x = np.ones(case.x_shape, np.float32)
        assert engine.step(entry, {"x": x})["y"].shape == (1, 4, 64, 64)
    # and wherever arenas are made (``run_design``, which codegen's own tests run): the same
    layout = design_program(plan(case.program(), "xdna2")).layout
    with budget_set(4 << 20), pytest.raises(BudgetExceeded, match="host arenas"):
        new_arenas(layout)
