"""The result guard at F32's largest magnitude, on the XDNA2 host stand-in.

A step's ``FiniteNormalResult`` domain asks for the oracle's result to be finite. The kernel
cannot tell a result that rounded to +-FLT_MAX from one that overflowed and saturated there, so
it flags the largest magnitude, but only where the step can overflow: a sum or a difference of
two operands both of at least 2^103 (half the spacing at FLT_MAX: with a smaller one the exact
result rounds to a finite value), a product of two operands both above 1 in magnitude, a
quotient by a divisor below 1. An additive mask of ``finfo(float32).min`` (``(1 - m) * min``,
then ``score + mask``, then ``- max``) is exact -FLT_MAX arithmetic and runs; an overflow is
still refused. Expected flags come from float64 arithmetic on the inputs, not from the kernels.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import Builder, DomainFlagged, DType, Program, evaluate
from poot_npu.xdna_host import XdnaHostDevice

BIG = float(np.finfo(np.float32).max)
HALF_SPACING = 2.0**103

#: per step: operand pairs that run (the exact result rounds to a finite value, most to
#: +-FLT_MAX) and pairs the kernel flags (an overflow, or a largest magnitude it cannot tell
#: from one)
CASES: dict[str, tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {
    "add": (
        [(-BIG, 5.0), (-BIG, -5.0), (BIG, -1e30), (BIG, 1e31), (-BIG, 0.0)],
        [(BIG, BIG), (3e38, 1e38), (BIG, HALF_SPACING)],
    ),
    "sub": (
        [(-BIG, 5.0), (-BIG, -5.0), (-BIG, 10.0), (BIG, 1e31)],
        [(BIG, -BIG), (-3e38, 1e38), (BIG, -HALF_SPACING)],
    ),
    "mul": (
        [(1.0, -BIG), (-BIG, 1.0), (0.5, BIG), (-1.0, -BIG)],
        [(2.0, BIG), (1e20, 1e20), (1.0000001, BIG)],
    ),
    "div": (
        [(-BIG, 1.0), (BIG, 2.0), (BIG, -1.0)],
        [(BIG, 0.5), (1e30, 1e-10)],
    ),
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    root = tmp_path_factory.mktemp("largest")
    with Engine(XdnaHostDevice(root / "kernels"), root / "blobs", verify="always") as e:
        yield e


def _program(op: str, n: int) -> Program:
    b = Builder(f"largest_{op}")
    a, c = b.slot("a", DType.F32, (n,)), b.slot("b", DType.F32, (n,))
    b.output("y", getattr(b, op)(a, c))
    return b.build()


def _feed(pairs: list[tuple[float, float]]) -> dict[str, np.ndarray]:
    a, b = zip(*pairs, strict=True)
    return {"a": np.array(a, np.float32), "b": np.array(b, np.float32)}


@pytest.mark.parametrize("op", list(CASES))
def test_a_largest_magnitude_that_cannot_be_an_overflow_runs(engine: Engine, op: str) -> None:
    runs, _ = CASES[op]
    feed = _feed(runs)
    program = _program(op, len(runs))
    got = engine.step(engine.add_entry(program), feed)["y"]  # verified against the oracle
    want = evaluate(program, feed)["y"]
    assert np.all(np.isfinite(got)) and np.array_equal(got, want)
    assert np.any(np.abs(got) == np.float32(BIG))  # the edge itself is exercised


@pytest.mark.parametrize("op", list(CASES))
def test_a_possible_overflow_is_flagged(engine: Engine, op: str) -> None:
    runs, flagged = CASES[op]
    for pair in flagged:
        feed = _feed([*runs, pair])
        entry = engine.add_entry(_program(op, len(runs) + 1))
        with pytest.raises(DomainFlagged) as err:
            engine.step(entry, feed)
        assert err.value.count == 1, pair
