"""Edges under narrowing, the inputs (issue 24 item 2): on intel-npu4 an F32 input, weight or
state that sqrt or log reads and whose FP16 rounding crosses the function's domain edge at 0 is
refused before the run (``DomainError`` naming the element), not answered for the rounded
input: a tiny negative before sqrt (the oracle's NaN; FP16's -0 has root -0) and a tiny
positive before log (finite in F32; FP16's 0 has log -inf). Both sides of each edge, on the
vpu-cpu stand-in. Before, sqrt(-1e-30) returned -0 and log(1e-30) was refused for a reason
naming an overflow inside the graph."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import Builder, DomainError, DType, NarrowingRangeError, Program
from poot_npu.registry import make_device
from poot_planner import plan

F32 = DType.F32


def _unary(prim: str, weight: bool = False) -> Program:
    b = Builder(prim)
    x = b.weight("x", F32, (3,)) if weight else b.slot("x", F32, (3,))
    b.output("y", getattr(b, prim)(x))
    return b.build()


@pytest.mark.parametrize(
    ("prim", "crossing", "kept"),
    [
        ("sqrt", -1e-30, [1e-30, 2.0**-24, 0.25]),  # -1e-30 is -0 in FP16; 1e-30 is 0 (inside)
        ("log", 1e-30, [2.0**-24, 0.5, 3.0]),  # 1e-30 is 0 in FP16; 2^-24 is FP16's smallest
    ],
)
def test_an_input_fp16_moves_across_a_domain_edge_is_refused(
    prim: str, crossing: float, kept: list[float], tmp_path: Path
) -> None:
    fn = {"sqrt": math.sqrt, "log": math.log}[prim]
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(plan(_unary(prim), "intel-npu4"), engine.load_weights({}))
        x = np.array([1.0, crossing, 1.0], np.float32)
        with pytest.raises(DomainError) as err:
            engine.step(entry, {"x": x})
        assert (err.value.argument, err.value.element, err.value.primitive) == ("x", (1,), prim)
        assert "FP16 rounds" in str(err.value)
        # the other side of the edge, and values FP16 keeps on the same side: they run
        got = engine.step(entry, {"x": np.array(kept, np.float32)})["y"]
        want = np.array([fn(v) for v in np.array(kept, np.float32).astype(np.float16)])
        assert np.allclose(got, want, rtol=2.0**-9, atol=2.0**-24)
        # a value outside the domain on both sides is no crossing: refused by the graph's
        # checks (a NaN or infinite value), not by this guard
        outside = np.array([1.0, -1.0 if prim == "sqrt" else -1e-30, 1.0], np.float32)
        with pytest.raises(NarrowingRangeError):
            engine.step(entry, {"x": outside})


def test_a_weight_fp16_moves_across_the_edge_is_refused_when_bound(tmp_path: Path) -> None:
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        weights = engine.load_weights({"x": np.array([1.0, 4.0, -2e-8], np.float32)})
        with pytest.raises(DomainError) as err:
            engine.add_entry(plan(_unary("sqrt", weight=True), "intel-npu4"), weights)
        assert (err.value.argument, err.value.element) == ("x", (2,))
