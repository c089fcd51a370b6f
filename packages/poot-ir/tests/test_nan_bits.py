"""The oracle's NaN bits follow ``poot_ir.nan_bits``'s rules, and are the same whatever SIMD
loops numpy dispatches to: every program of ``nan_edges`` is evaluated in subprocesses with
numpy's CPU features switched down one level at a time (``NPY_DISABLE_CPU_FEATURES``) and the
result bits compared with this process's (issue 26: an AMD EPYC's loops flipped a NaN's sign
in TopK's values)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nan_edges import BINARY, FLOATS, UNARY, all_bits, bits_of, run_binary, run_unary
from numpy._core import _multiarray_umath
from poot_ir import DType

CANONICAL = {DType.F32: 0x7FC0_0000, DType.F16: 0x7E00, DType.BF16: 0x7FC0}
MOVES = {"neg", "abs", "reduce_max", "reduce_max_cols", "relu", "max_lit", "min_lit"}
MOVES |= {"gather", "concat", "max", "min", "select"}


def cpu_feature_settings() -> list[str]:
    """Each ``NPY_DISABLE_CPU_FEATURES`` value that switches this numpy's dispatch down a level
    on this processor: the top dispatched feature off, then the top two, ... down to the
    baseline. Empty where numpy dispatches nothing beyond its baseline."""
    found = [f for f in _multiarray_umath.__cpu_dispatch__ if _multiarray_umath.__cpu_features__[f]]
    return [" ".join(found[i:]) for i in range(len(found) - 1, -1, -1)]


def _bits_under(setting: str) -> dict[str, list[int]]:
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": setting}
    script = Path(__file__).with_name("nan_edges.py")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("setting", ["", *cpu_feature_settings()])
def test_bits_do_not_depend_on_the_simd_loops(setting: str) -> None:
    here = all_bits()
    there = _bits_under(setting)
    differ = [k for k in here if here[k] != there[k]]
    assert not differ, f"NPY_DISABLE_CPU_FEATURES={setting!r} changes the bits of {differ}"


def _is_nan(b: int, dt: DType) -> bool:
    exp_bits = {DType.F32: 0x7F80_0000, DType.F16: 0x7C00, DType.BF16: 0x7F80}[dt]
    return b & ~_sign(dt) > exp_bits  # all exponent bits set and a nonzero fraction


def _sign(dt: DType) -> int:
    return 1 << (8 * dt.itemsize - 1)


def _value(b: int, dt: DType) -> float:
    return float(np.array(b, {4: np.uint32, 2: np.uint16}[dt.itemsize]).view(dt.numpy))


def _ieee_pick(a: int, b: int, dt: DType, largest: bool) -> int:
    """IEEE 754-2019 maximum/minimum on bit patterns; the first NaN operand when there is one."""
    if _is_nan(a, dt):
        return a
    if _is_nan(b, dt):
        return b
    va, vb = _value(a, dt), _value(b, dt)
    if va == vb:  # -0 < +0: the maximum has the AND of the signs, the minimum the OR
        neg_a, neg_b = bool(a & _sign(dt)), bool(b & _sign(dt))
        return a if (neg_a and neg_b) or (not largest and neg_a) or (largest and not neg_a) else b
    return a if (va > vb) == largest else b


def _first_nan_or_max(row: list[int], dt: DType) -> int:
    best = None
    for b in row:
        if _is_nan(b, dt):
            return b
        best = b if best is None else _ieee_pick(best, b, dt, True)
    assert best is not None
    return best


def _literal_bits(value: float, dt: DType) -> int:
    return int(bits_of(np.array([value], dt.numpy))[0])


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.value)
def test_moved_and_chosen_values_keep_their_bits(dt: DType) -> None:
    for name in sorted(MOVES & set(UNARY)):
        x, y = run_unary(dt, name)
        xb, yb = bits_of(x).tolist(), bits_of(y).reshape(-1).tolist()
        rows = [xb[i : i + 8] for i in range(0, 32, 8)]
        match name:
            case "neg":
                want = [b ^ _sign(dt) for b in xb]
            case "abs":
                want = [b & ~_sign(dt) for b in xb]
            case "reduce_max":
                want = [_first_nan_or_max(r, dt) for r in rows]
            case "reduce_max_cols":
                want = [_first_nan_or_max([r[c] for r in rows], dt) for c in range(8)]
            case "relu" | "max_lit" | "min_lit":
                lit, largest = {"relu": (0.0, True), "max_lit": (1.0, True)}.get(
                    name, (-2.0, False)
                )
                lb = _literal_bits(lit, dt)
                # the literal is the second operand of relu and max_lit, the first of min_lit
                want = [
                    _ieee_pick(lb, b, dt, largest)
                    if name == "min_lit"
                    else _ieee_pick(b, lb, dt, largest)
                    for b in xb
                ]
            case "gather":
                want = xb
            case "concat":
                want = xb[16:] + xb[:16]
            case _:
                raise AssertionError(name)
        assert yb == want, name
    for name in sorted(MOVES & set(BINARY)):
        xv, yv, r = run_binary(dt, name)
        xb, ybits, rb = bits_of(xv).tolist(), bits_of(yv).tolist(), bits_of(r).tolist()
        if name == "select":
            want = [
                a if _value(a, dt) > _value(b, dt) else b for a, b in zip(xb, ybits, strict=True)
            ]
        else:
            want = [_ieee_pick(a, b, dt, name == "max") for a, b in zip(xb, ybits, strict=True)]
        assert rb == want, name


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.value)
def test_computed_nans_are_canonical(dt: DType) -> None:
    computed = {n: run_unary(dt, n)[1] for n in UNARY if n not in MOVES}
    computed |= {n: run_binary(dt, n)[2] for n in BINARY if n not in MOVES}
    for name, r in computed.items():
        out_dt = {"to_f32": DType.F32, "to_f16": DType.F16, "to_bf16": DType.BF16}.get(name, dt)
        if name.startswith("to_") and out_dt is dt:  # a convert to its own type moves bits
            assert bits_of(r).tolist() == bits_of(run_unary(dt, "gather")[0]).tolist()
            continue
        rb = bits_of(r).reshape(-1)
        nans = [int(b) for b in rb if _is_nan(int(b), out_dt)]
        assert nans, f"{name}: the edge values make no NaN"
        assert set(nans) == {CANONICAL[out_dt]}, name
