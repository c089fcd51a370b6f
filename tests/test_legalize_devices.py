"""Legalized programs through the Engine on the hardware-free stand-ins (vpu-cpu: OpenVINO's
CPU plugin computing in FP16 as the NPU does; xdna-host: the host C compiler over the region
layout), against the original equation on the oracle: approximations within their derived
bound, identities bit for bit (the sign of a zero aside), at FP16's domain edges."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from poot_engine import Engine
from poot_ir import AbsRel, Builder, DType, Program, evaluate, ops
from poot_npu.registry import device_info
from poot_planner import TARGETS, narrow_to_device_precision, plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/poot-planner/tests"))
from test_legalize import (
    IDENTITIES,
    _counters,
    _f16_values,
    _pairs,
    _select_program,
    unary,
)

INTEL = TARGETS["intel-npu4"]


def _run(
    device: str, program: Program, inputs: dict[str, np.ndarray], tmp: Path
) -> dict[str, np.ndarray]:
    with Engine(open_device(device_info(device)), cache_dir=tmp) as engine:
        entry = engine.add_entry(program, engine.load_weights({}))
        return engine.step(entry, inputs)


@pytest.mark.parametrize("prim", ["erf", "tanh"])
def test_approximations_on_vpu_cpu(prim: str, tmp_path: Path) -> None:
    x = _f16_values(3)
    x = x[np.abs(x) < 65504]  # the engine's range check refuses an F32 input FP16 cannot hold
    program = unary(prim, x.size)
    bound = plan(program, INTEL).rewrites[0].derivation.bound
    assert isinstance(bound, AbsRel)
    got = _run("vpu-cpu", program, {"x": x}, tmp_path)["y"].astype(np.float64)
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    # relative plus absolute (issue 24 item 3); the F32 reference's own rounding on top
    allowed = bound.abs + (bound.rel + 2.0**-23) * np.abs(want)
    assert np.all(np.abs(got - want) <= allowed)


def test_gelu_on_vpu_cpu_within_the_narrowing_contract(tmp_path: Path) -> None:
    x = _f16_values(4, 1024)
    x = x[np.abs(x) < 100]
    b = Builder("gelu")
    b.output("y", ops.gelu(b, b.slot("x", DType.F32, (x.size,))))
    program = b.build()
    got = _run("vpu-cpu", program, {"x": x}, tmp_path)["y"].astype(np.float64)
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    assert INTEL.narrowing is not None
    assert np.linalg.norm(got - want) <= INTEL.narrowing.normwise * np.linalg.norm(want)


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_identities_on_vpu_cpu(name: str, tmp_path: Path) -> None:
    pairs = _pairs()
    keep = (np.abs(pairs["x"]) < 65504) & (np.abs(pairs["z"]) < 65504)
    pairs = {k: v[keep] for k, v in pairs.items()}
    program = IDENTITIES[name](pairs["x"].size)
    inputs = {a.name: pairs[a.name] for a in program.args}
    if name == "recip":  # 1/x past FP16's range is a range error of the result, by contract
        inputs["x"] = np.where(np.abs(inputs["x"]) < 2**-15, np.float32(1.0), inputs["x"])
    got = _run("vpu-cpu", program, inputs, tmp_path)["y"]
    assert INTEL.narrowing is not None
    want = evaluate(narrow_to_device_precision(program, INTEL.narrowing), inputs)["y"]
    if name == "recip":  # the division's contract, not bit for bit
        assert np.allclose(got, want, rtol=2.0**-9, atol=2.0**-24)
    else:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("cmp", ["ge", "gt", "eq"])
def test_select_with_a_sentinel_on_vpu_cpu(cmp: str, tmp_path: Path) -> None:
    pairs = _pairs()
    keep = (np.abs(pairs["x"]) < 65504) & (np.abs(pairs["z"]) < 65504)
    pairs = {k: v[keep] for k, v in pairs.items()}
    program = _select_program(pairs["x"].size, cmp, -1e30)
    got = _run("vpu-cpu", program, pairs, tmp_path)
    want = evaluate(plan(program, INTEL).program, pairs)  # the oracle on the legalized program
    assert np.array_equal(got["y"], want["y"]) and np.array_equal(got["m"], want["m"])


@pytest.mark.parametrize("name", ["abs", "min"])
def test_xdna2_identities_on_xdna_host(name: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = np.concatenate([[0.0, -0.0, 1.0, -1.0, 3.4e38, -3.4e38, 1e-30], rng.normal(0, 1e3, 57)])
    x = x.astype(np.float32)
    program = IDENTITIES[name](x.size)
    inputs = {a.name: v for a, v in zip(program.args, (x, x[::-1].copy()), strict=False)}
    got = _run("xdna-host", program, inputs, tmp_path)["y"]
    want = evaluate(program, inputs)["y"]
    assert np.array_equal(got, want)


def test_counter_compares_and_converts_on_vpu_cpu(tmp_path: Path) -> None:
    program = _counters(33)
    x = np.random.default_rng(5).normal(0, 2, (33, 33)).astype(np.float16).astype(np.float32)
    got = _run("vpu-cpu", program, {"x": x}, tmp_path)
    want = evaluate(program, {"x": x})
    for name in ("ge", "gt", "eq"):
        assert np.array_equal(got[name], want[name]), name
    assert INTEL.narrowing is not None  # the product rounds to FP16, as the narrowed original
    narrowed = evaluate(narrow_to_device_precision(program, INTEL.narrowing), {"x": x})
    assert np.array_equal(got["pos"], narrowed["pos"])
