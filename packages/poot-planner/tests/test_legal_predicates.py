"""The rule for a comparison's predicate against a boolean literal on intel-npu4 (an exported
``isnan`` guard: ``select((p == p) == False, 0, p)``), on the oracle against the original at the
edges of FP16's range, bit for bit; and what it does not take."""

from __future__ import annotations

import numpy as np
import pytest
from poot_ir import Builder, DType, Prim, Program, evaluate
from poot_planner import TARGETS, RefusalKind, narrow_to_device_precision, plan

INTEL = TARGETS["intel-npu4"]
F32, BOOL = DType.F32, DType.BOOL

#: FP16 values (stored as F32): zeros, subnormals, the range's ends and ordinary values
EDGES = np.array(
    [0.0, -0.0, 2**-24, -(2**-24), 2**-14, 0.1, 1.0, -1.0, 2.0, 100.0, -100.0, 65504.0,
     -65504.0, 65472.0, 1e-3, -3.5],
    dtype=np.float16,
).astype(np.float32)  # fmt: skip


def _guarded(n: int, against: bool, cmp: str) -> Program:
    b = Builder("guard")
    x, z = b.slot("x", F32, (n,)), b.slot("z", F32, (n,))
    pred = b.eq(getattr(b, cmp)(x, z), b.literal(against, BOOL))
    b.output("m", pred)
    b.output("y", b.select(pred, b.literal(0.0, F32), x))
    return b.build()


@pytest.mark.parametrize("against", [False, True])
@pytest.mark.parametrize("cmp", ["eq", "ge", "gt"])
def test_a_predicate_against_a_literal_is_bit_exact(against: bool, cmp: str) -> None:
    xs, zs = np.meshgrid(EDGES, EDGES)
    inputs = {"x": xs.ravel(), "z": zs.ravel()}
    program = _guarded(xs.size, against, cmp)
    p = plan(program, INTEL)
    assert p.admitted, [str(r) for r in p.refusals]
    names = {rw.rule.name for rw in p.rewrites}
    assert "a comparison's predicate against a literal" in names
    assert all(e.prim is not Prim.SELECT for e in p.legalized.eqns)
    got = evaluate(p.program, inputs)
    assert INTEL.narrowing is not None
    want = evaluate(narrow_to_device_precision(program, INTEL.narrowing), inputs)
    assert np.array_equal(got["m"], want["m"])
    assert np.array_equal(got["y"], want["y"])  # the sign of a zero aside (not promised)
    assert want["m"].any() and not want["m"].all()


def test_the_isnan_guard_of_an_export_is_the_value() -> None:
    b = Builder("isnan")
    x = b.slot("x", F32, (EDGES.size,))
    isnan = b.eq(b.eq(x, x), b.literal(False, BOOL))
    b.output("y", b.select(isnan, b.literal(0.0, F32), x))
    program = b.build()
    p = plan(program, INTEL)
    assert p.admitted
    got = evaluate(p.program, {"x": EDGES})["y"]
    assert np.array_equal(got, EDGES)  # the sign of a zero aside: the NPU does not promise it


def test_a_predicate_from_an_argument_stays_refused() -> None:
    b = Builder("arg")
    m = b.slot("m", BOOL, (4,))
    b.output("y", b.eq(m, b.literal(False, BOOL)))
    p = plan(b.build(), INTEL)
    assert [(r.kind, r.primitive) for r in p.refusals] == [
        (RefusalKind.UNSUPPORTED_PRIMITIVE, "eq")
    ]
