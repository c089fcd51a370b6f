"""The vpu-cpu stand-in's graph as the CPU plugin runs it (issue 28): its overflow guard and its
broadcast operands leave a convolution's values in the layout the convolution wrote them.

The guard of a narrowed graph computes, on the stand-in (FP16 carried in f32), each check as a
sum that is NaN exactly where the check fails (``intel.guard._nan_flag``), and an elementwise
equation reads a broadcast operand with unit axes (``intel.graph._Graph.implicit``). The flags
are held here to the checks' semantics (``intel.guard``'s docstring) computed in numpy on the
values the graph holds, over edge operands, and the compiled graph to run no
layout reorder, broadcast or boolean reduction beside the convolution's own input reorder.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from poot_codegen.intel import guard as intel_guard
from poot_codegen.intel.graph import CPU_STANDIN_CONFIG, lower, program_result_name
from poot_ir import Builder, DType
from poot_planner import plan
from poot_planner.fp16.checks import GuardKind, RangeCheck
from poot_planner.fp16.narrowing import intermediate_guards
from poot_planner.fp16.prelude import SCORE_BOUND
from test_intel_graph import CORE  # the one OpenVINO core of the codegen tests

F16, F32 = DType.F16, DType.F32
Array = NDArray[Any]
INF = np.inf
#: FP16 values at and beside each edge a check has: 65472 (the largest below the DPU's
#: saturation), 65504, the score bound, infinities, NaN, a subnormal, plain values
POOL = np.array(
    [0.0, 1.0, -1.0, 3.0, 2.0**-24, 16360.0, 16368.0, -16376.0, 30000.0, 32752.0, 40000.0]
    + [-40000.0, 65472.0, -65472.0, 65504.0, -65504.0, INF, -INF, np.nan],
    np.float16,
)


def test_stand_in_guard_flags_are_the_checks() -> None:
    """Every kind of check (an overflow of a DPU add with a carried sentinel and infinite
    operands excused, of a multiply, of a matmul whose infinite operand turns it off, a score
    bound, a sentinel) on edge operands: the stand-in's flags equal the flags worked out here."""
    b = Builder("checks")
    a, c = b.slot("a", F16, (4, 8)), b.slot("c", F16, (4, 8))
    d, m = b.slot("d", F16, (4, 8)), b.slot("m", F16, (8, 3))
    b.output("add", b.add(a, c))  # e0: DPU, saturating
    b.output("mul", b.mul(a, c))  # e1: SHAVE
    b.output("matmul", b.matmul(d, m))  # e2: DPU
    b.output("neg", b.neg(a))  # e3
    b.output("sub", b.sub(a, c))  # e4: DPU, checked without excusing infinite operands
    program = b.build()
    checks = [
        (0, RangeCheck(0, "add", GuardKind.OVERFLOW, fresh=True)),
        (1, RangeCheck(1, "mul", GuardKind.OVERFLOW, fresh=True)),
        (2, RangeCheck(2, "matmul", GuardKind.OVERFLOW, fresh=True)),
        (1, RangeCheck(1, "mul", GuardKind.SCORE)),
        (3, RangeCheck(3, "neg", GuardKind.SENTINEL, side=1)),
        (0, RangeCheck(0, "add", GuardKind.SENTINEL, side=-1)),
        (4, RangeCheck(4, "sub", GuardKind.OVERFLOW)),
    ]
    model = lower(program, emulate_f16=True, guards=checks)
    cm = CORE.compile_model(model, "CPU", CPU_STANDIN_CONFIG)
    req = cm.create_infer_request()
    (port,) = [p for p in cm.outputs if intel_guard.guard_labels({str(n) for n in p.get_names()})]
    labels = intel_guard.guard_labels({str(n) for n in port.get_names()})
    assert labels is not None and sorted(labels) == sorted(g.label for _, g in checks)
    rng = np.random.default_rng(28)
    integral = POOL[np.float16(2.0**-24) != POOL]  # the matmul's sums stay exact in f32
    seen = np.zeros(len(checks), int)
    trials = 240
    for trial in range(trials):
        # a few edge elements among plain ones, so that each flag is both set and clear
        ins = {k: rng.integers(-4, 5, (4, 8)).astype(np.float16) for k in ("a", "c", "d")}
        ins["m"] = rng.integers(-2, 3, (8, 3)).astype(np.float16)
        for k in ("a", "c", "d", "m"):
            pool = POOL if k in ("a", "c") else integral
            if k == "m" and trial % 5:
                pool = pool[np.isfinite(pool)]
            n = int(rng.integers(0, 3))
            flat = ins[k].reshape(-1)
            flat[rng.integers(0, flat.size, n)] = rng.choice(pool, n)
        if trial % 6 == 0:  # both sentinels dominate: -a at 65504, a + c at -65504
            ins["a"][...] = -65504.0
            ins["c"] = -np.abs(ins["c"])
        if trial % 6 == 3:  # an add that overflows from finite operands below 65504
            ins["a"][0, 0] = ins["c"][0, 0] = 40000.0
            ins["a"][1, 1], ins["c"][1, 1] = 40000.0, -40000.0  # and a subtract
        res = req.infer(ins)
        got = res[port]
        # the values as the graph holds them, which is what its guard checks (their rounding
        # is held to the oracle elsewhere); a NaN operand is never one at 65504
        out = {program_result_name(set(o.get_names())): res[o] for o in cm.outputs}
        add, mul, matmul, sub = (out[k].astype(np.float64) for k in ("add", "mul", "matmul", "sub"))
        x, y, z, w = (ins[k].astype(np.float64) for k in ("a", "c", "d", "m"))
        with np.errstate(invalid="ignore"):
            finite_x, finite_y = np.abs(x) <= 65504, np.abs(y) <= 65504
            ok_add = (np.abs(add) <= 65472) | (np.abs(x) >= 65504) | (np.abs(y) >= 65504)
            ok_add |= ~finite_x | ~finite_y
            ok_mul = (np.abs(mul) <= 65504) | ~finite_x | ~finite_y
            inherited = not ((np.abs(z) <= 65504).all() and (np.abs(w) <= 65504).all())
            score = np.abs(mul.astype(np.float32)) <= np.float32(SCORE_BOUND)
            want = [
                not ok_add.all(),
                not ok_mul.all(),
                bool(not (np.abs(matmul) <= 65472).all() and not inherited),
                not score.all(),
                not (-x >= 65504).all(),
                not (add <= -65504).all(),
                not ((np.abs(sub) <= 65472) | (np.abs(x) >= 65504) | (np.abs(y) >= 65504)).all(),
            ]
        flags = dict(zip(labels, (bool(f) for f in got), strict=True))
        assert [flags[g.label] for _, g in checks] == want, (trial, ins)
        seen += np.array(want, int)
    assert all(0 < s < trials for s in seen), seen  # every flag both set and clear


def test_a_guarded_convolution_with_bias_stays_in_its_layout() -> None:
    """A narrowed conv + bias + relu block: its values are rounded, checked and summed where
    the convolution wrote them, and the bias is broadcast by the add itself. Before: every
    guard reordered its value to a flat planar layout and reduced it as booleans, and the
    bias became a whole-tensor constant laid out again at every run."""
    b = Builder("block")
    x = b.slot("x", F32, (1, 16, 28, 28))
    w = b.weight("w", F32, (32, 16, 3, 3))
    bias = b.weight("bias", F32, (32,))
    y = b.conv(x, w, padding=[(1, 1), (1, 1)])
    y = b.add(y, b.broadcast_in_dim(bias, y.shape, (1,)))
    b.output("y", b.max(y, 0.0))
    p = plan(b.build(), "intel-npu4").check()
    assert p.narrowing is not None
    guards = intermediate_guards(p.legalized, p.narrowing, p.score_bound)
    assert guards
    rng = np.random.default_rng(28)
    weights = {
        "w": (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32),
        "bias": rng.standard_normal(32).astype(np.float32),
    }
    model = lower(p.program, emulate_f16=True, guards=guards, constants=weights)
    cm = CORE.compile_model(model, "CPU", {**CPU_STANDIN_CONFIG, "PERF_COUNT": "YES"})
    req = cm.create_infer_request()
    feed = {"x": rng.standard_normal((1, 16, 28, 28)).astype(np.float32), **weights}
    req.infer({k: v for k, v in feed.items() if k in {i.any_name for i in cm.inputs}})
    ran = [i for i in req.profiling_info if i.status.name == "EXECUTED"]
    kinds = [i.node_type for i in ran]
    assert "Broadcast" not in kinds and "ReduceLogicalAnd" not in kinds, kinds
    reorders = [i.node_name for i in ran if i.node_type == "Reorder"]
    # the input's into the convolution's layout, and the result's out of it
    assert all(n.startswith("in:x") or n.endswith("out:y") for n in reorders), reorders
    names = {program_result_name({str(n) for n in o.get_names()}) for o in cm.outputs}
    assert "y" in names
