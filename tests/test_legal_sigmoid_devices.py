"""xdna2's sigmoid rule, and SiLU (x sigmoid(x), as YOLOv8 exports it), on the xdna-host
stand-in (the host C compiler over the region layout), verified by the engine: every finite
input within the derived bound against numpy float64, saturating exactly where float32's
sigmoid does (0 below -103.97 and -- the kernel's exp flushing below FLT_MIN -- below -87.34;
1 above 17.33), -inf giving 0; NaN, +inf and subnormal inputs refused, typed, as the xdna2
contracts' domains say (max: not NaN; neg: finite operands, finite normal result)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_ir import AbsRel, Builder, DomainError, DomainFlagged, DType, Program, evaluate
from poot_ir.ops import sigmoid
from poot_npu.registry import make_device
from poot_planner import TARGETS, Plan, plan
from poot_planner.error_bounds import result_bounds

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/poot-planner/tests"))
from test_legal_sigmoid import BIG, EDGES, exact, inputs, sigmoid_program

N = 64


def silu_program(n: int) -> Program:
    b = Builder("silu")
    x = b.slot("x", DType.F32, (n,))
    b.output("y", b.mul(x, sigmoid(b, x)))
    return b.build()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    cache = tmp_path_factory.mktemp("sigmoid")
    with Engine(make_device("xdna-host"), cache_dir=cache, verify="always") as e:
        yield e


def _bound(p: Plan) -> AbsRel:
    (rw,) = [rw for rw in p.rewrites if rw.primitive == "select"]
    assert isinstance(rw.derivation.bound, AbsRel)
    return rw.derivation.bound


def _padded(x: np.ndarray) -> np.ndarray:
    return np.resize(x, N)


def test_sigmoid_on_xdna_host_over_the_whole_line(engine: Engine) -> None:
    x = inputs(1)
    program = sigmoid_program(x.size)
    p = plan(program, TARGETS["xdna2"])
    bound = _bound(p)
    entry = engine.add_entry(p, engine.load_weights({}))
    got = engine.step(entry, {"x": x})["y"].astype(np.float64)  # verified: the running bound
    want = exact(x)
    assert np.all(np.abs(got - want) <= bound.abs + bound.rel * want)
    one = x >= 17.34  # float32's sigmoid is 1 from 17.33 on
    assert np.all(got[one] == 1.0) and np.all(exact(x[one]).astype(np.float32) == 1.0)
    # the kernel's exp is 0 below FLT_MIN: 0 where float32's sigmoid is 0 or subnormal
    zero = x < -87.34
    assert np.all(got[zero] == 0.0) and not np.any(np.signbit(got[zero]))
    assert np.all(exact(x[x < -103.98]).astype(np.float32) == 0.0)
    assert np.all((got == 0.0) | (got >= np.finfo(np.float32).tiny))  # never subnormal
    assert got[np.isneginf(x)].tolist() == [0.0] and got[x == 0].tolist() == [0.5, 0.5]


def test_silu_on_xdna_host_over_the_whole_line(engine: Engine) -> None:
    # YOLOv8's SiLU was refused here on an ordinary image (353 operands outside the old rule's
    # domain [-88, 87]); now every finite input runs
    rng = np.random.default_rng(2)
    x = np.concatenate([EDGES[np.isfinite(EDGES)], rng.normal(0, 30, 100).astype(np.float32)])
    x = x[np.abs(x) < 1e30]  # x * 1 stays finite; near FLT_MAX the product is the mul's edge
    program = silu_program(x.size)
    p = plan(program, TARGETS["xdna2"])
    entry = engine.add_entry(p, engine.load_weights({}))
    got = engine.step(entry, {"x": x})["y"].astype(np.float64)
    run = result_bounds(p, {"x": x})["y"]
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    promised = np.isfinite(run)  # not where the oracle's own product is subnormal
    assert np.all(np.abs(got - want)[promised] <= run[promised])
    assert np.all(np.abs(got - x * exact(x)) <= 2.5e-6 * np.abs(x) + 2.3e-5 * np.abs(got))
    assert np.all(got[x >= 17.34] == x[x >= 17.34])  # SiLU(x) = x
    assert np.all(got[x < -87.34] == 0.0)  # and 0 (the sign of the zero aside)


@pytest.mark.parametrize(
    ("bad", "error"),
    [(math.nan, DomainError), (math.inf, DomainFlagged), (1e-45, DomainFlagged)],
)
def test_nan_inf_and_subnormal_inputs_are_refused_typed(
    engine: Engine, bad: float, error: type[Exception]
) -> None:
    # NaN: max's domain, checked on the host; +inf: negated in the clamp (neg: finite
    # operands); a subnormal: negated to a subnormal (neg's result guard)
    p = plan(sigmoid_program(N), TARGETS["xdna2"])
    entry = engine.add_entry(p, engine.load_weights({}))
    x = _padded(np.array([0.5, -3.0], np.float32))
    x[5] = bad
    with pytest.raises(error):
        engine.step(entry, {"x": x})


_finite = st.floats(min_value=-BIG, max_value=BIG, width=32, allow_subnormal=False)


@given(st.lists(st.one_of(_finite, st.sampled_from([float(v) for v in EDGES])), min_size=N))
@settings(derandomize=True, max_examples=15, deadline=None)
def test_fuzz_on_xdna_host_within_the_bound(engine: Engine, values: list[float]) -> None:
    x = _padded(np.array(values, np.float32))
    p = plan(sigmoid_program(N), TARGETS["xdna2"])
    bound = _bound(p)
    got = engine.step(engine.add_entry(p, engine.load_weights({})), {"x": x})["y"]
    want = exact(x)
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound.abs + bound.rel * want)
