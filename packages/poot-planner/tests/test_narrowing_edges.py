"""Edges under narrowing (issue 24 item 2): a non-zero literal FP16 flushes to zero, and a
literal a comparison reads that FP16 moves, are refused when planning for intel-npu4 with a
typed reason naming the literal; both sides of each edge. The oracle shows why: the narrowed
program answers otherwise than the F32 one."""

from __future__ import annotations

import numpy as np
import pytest
from poot_ir import Builder, DType, Program, evaluate
from poot_planner import TARGETS, RefusalKind, narrow_to_device_precision, plan

INTEL = TARGETS["intel-npu4"]
F32 = DType.F32
HALF_TINY = 2.0**-25  # half FP16's smallest subnormal: rounds to 0 (ties to even)


def _one(prim: str, literal: float) -> Program:
    b = Builder(prim)
    b.output("y", getattr(b, prim)(b.slot("x", F32, (2,)), literal))
    return b.build()


def _refused(program: Program) -> dict[str, object] | None:
    p = plan(program, INTEL)
    if p.admitted:
        return None
    (r,) = p.refusals
    assert r.kind is RefusalKind.NARROWING_RANGE and r.eqn == 0
    return dict(r.facts)


def test_ge_against_a_literal_fp16_flushes_is_refused() -> None:
    program = _one("ge", 1e-30)
    x = {"x": np.zeros(2, np.float32)}
    assert INTEL.narrowing is not None
    narrowed = narrow_to_device_precision(program, INTEL.narrowing)
    # why: at x = 0 the F32 program says False, the FP16 one True
    assert not evaluate(program, x)["y"].any() and evaluate(narrowed, x)["y"].all()
    facts = _refused(program)
    assert facts is not None and facts["fp16"] == 0.0 and "flushes" in str(facts["use"])
    assert float(str(facts["literal"])) == pytest.approx(1e-30)


@pytest.mark.parametrize("prim", ["mul", "div"])
def test_a_literal_is_refused_exactly_where_fp16_flushes_it(prim: str) -> None:
    assert _refused(_one(prim, HALF_TINY)) is not None
    assert _refused(_one(prim, -HALF_TINY)) is not None
    above = float(np.nextafter(np.float32(HALF_TINY), np.float32(1.0)))  # rounds to 2^-24
    assert _refused(_one(prim, above)) is None
    assert _refused(_one(prim, 2.0**-24)) is None and _refused(_one(prim, 0.0)) is None


@pytest.mark.parametrize("prim", ["add", "sub"])
def test_an_addend_fp16_flushes_is_carried_by_the_derived_contract(prim: str) -> None:
    """LayerNorm's ``var + 1e-12``: on the device the addend is 0, an error of at most 2^-25
    that the derived contract carries, so it is admitted (a transformer's every layer norm
    was a host span), and the run on vpu-cpu is within that contract against the F32 oracle
    at 0, at FP16's smallest subnormal and beyond."""
    from poot_engine.run import run_program
    from poot_npu.registry import make_device

    for literal in (1e-12, -1e-12, HALF_TINY):
        assert _refused(_one(prim, literal)) is None
    program = _one(prim, 1e-12)
    x = np.array([0.0, 2.0**-24], np.float32)
    for xs in (x, np.array([1.0, -3.5], np.float32)):
        device = make_device("vpu-cpu")
        try:
            report = run_program(program, device, "vpu-cpu", inputs=[{"x": xs}])
        finally:
            device.close()
        assert report.ok, report.steps[0].worst


def test_a_compared_literal_fp16_moves_is_refused() -> None:
    facts = _refused(_one("ge", 0.1))
    assert facts is not None and facts["fp16"] == float(np.float16(0.1))
    assert "compared" in str(facts["use"])
    program = _one("ge", 0.1)
    x = {"x": np.full(2, np.float16(0.1), np.float32)}  # FP16's 0.1, below 0.1
    assert INTEL.narrowing is not None
    narrowed = narrow_to_device_precision(program, INTEL.narrowing)
    assert not evaluate(program, x)["y"].any() and evaluate(narrowed, x)["y"].all()
    assert _refused(_one("ge", 0.5)) is None and _refused(_one("ge", 2.0**-24)) is None
    assert _refused(_one("mul", 0.1)) is None  # not compared: an ordinary rounding
