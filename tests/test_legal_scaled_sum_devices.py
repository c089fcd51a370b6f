"""The intel-npu4 scaled-sum rule on the vpu-cpu stand-in (OpenVINO's CPU plugin computing in
FP16 as the NPU does): LayerNorm's variance term, ``reduce_sum(x^2) * 2^-9`` over 512 features,
whose sum is past FP16 on real rows (magika's ``LayerNorm_1/Sum_1``). Planned as written, the
device refuses it at run time (the in-graph overflow flag); legalized, it runs, within the derived
bound of the exact scaled sum of the summands the device carries, plus one FP16 ulp of rounding
(``poot_planner.error_bounds``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from poot_engine import Engine
from poot_ir import AbsRel, Builder, DType, NarrowingRangeIntermediate, Program
from poot_npu.registry import device_info
from poot_planner import Plan, plan

N = 512


def _variance_term(scale: float, divide: bool) -> Program:
    b = Builder("var_term")
    x = b.slot("x", DType.F32, (4, N))
    s = b.reduce_sum(b.mul(x, x), axes=(1,))
    b.output("y", b.div(s, 1.0 / scale) if divide else b.mul(s, scale))
    return b.build()


def _step(p: Plan, x: np.ndarray, tmp: Path) -> np.ndarray:
    with Engine(open_device(device_info("vpu-cpu")), cache_dir=tmp) as engine:
        entry = engine.add_entry(p, engine.load_weights({}))
        return engine.step(entry, {"x": x})["y"].astype(np.float64)


def _rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    rows = [
        rng.normal(0.0, 16.0, N),  # a sum of squares ~1.3e5: past FP16
        np.full(N, np.sqrt(65536.0 / N)),  # just past 65504
        np.full(N, 2.0**-12),  # squares 2^-24: every scaled summand underflows to zero
        rng.integers(1, 8, N) * 2.0**-9,  # squares from 2^-18: some lost in the scaling
    ]
    return np.stack(rows).astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("divide", [False, True], ids=["mul", "div"])
def test_scaled_sum_on_vpu_cpu_within_the_derived_bound(divide: bool, tmp_path: Path) -> None:
    program = _variance_term(2.0**-9, divide)
    x = _rows()
    with pytest.raises(NarrowingRangeIntermediate):
        _step(plan(program, "intel-npu4", legalization=False), x, tmp_path / "a")
    p = plan(program, "intel-npu4")
    (rw,) = p.rewrites
    bound = rw.derivation.bound
    assert isinstance(bound, AbsRel)
    got = _step(p, x, tmp_path / "b")
    squares = (x.astype(np.float64) ** 2).astype(np.float16).astype(np.float64)
    exact = squares.sum(axis=1) * 2.0**-9
    ulp = np.spacing(exact.astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got - exact) <= bound.abs + ulp + 2.0**-25), (got, exact)
    assert got[2] == 0.0  # the lost summands, as the bound allows (exact: 2^-24 * 512 / 512)
