"""The derived FP16 contract's check per verified step against the fixed-figure check it replaced.

A narrowed (intel-npu4) plan is checked under the bound the running error analysis derives for
each step's inputs (``poot_engine.verify.check_results``: one evaluation of the joint program,
``result_bounds`` with each equation's FP16 lowering, an elementwise comparison). The fixed
figure it replaced evaluated the source alone and compared normwise (2^-8). Both run here on the
same plan, inputs and device results (the vpu-cpu stand-in's), alternating; the step itself on
vpu-cpu (verify off) is the scale both are read against. The program is an MLP block of a small
model: matmul, bias, GELU by erf (legalized: the odd series and A&S), a layer-norm-like sum over
the channel axis and a sum over the rows (AvgPool x N on the NPU).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_engine.verify import check_results, step_joint
from poot_ir import Builder, DType, Normwise, Program, compare, evaluate
from poot_npu.registry import make_device
from poot_planner import plan

from benchmarks.harness import Figure, median_time

ROWS, WIDTH = 64, 128


def _program() -> Program:
    b = Builder("mlp_block")
    x = b.slot("x", DType.F32, (ROWS, WIDTH))
    w = b.weight("w", DType.F32, (WIDTH, WIDTH))
    bias = b.weight("bias", DType.F32, (WIDTH,))
    h = b.add(b.matmul(x, w), b.broadcast_in_dim(bias, (ROWS, WIDTH), (1,)))
    g = b.mul(b.mul(h, 0.5), b.add(b.erf(b.mul(h, 0.70703125)), 1.0))
    mean = b.mul(b.reduce_sum(g, 1), 1.0 / 128)
    b.output("y", b.sub(g, b.broadcast_in_dim(mean, (ROWS, WIDTH), (0,))))
    b.output("col", b.reduce_sum(g, 0))
    return b.build()


def run() -> list[Figure]:
    p = plan(_program(), "intel-npu4")
    assert p.admitted and p.narrowing is not None, [str(r) for r in p.refusals]
    rng = np.random.default_rng(0)
    feed = {
        "x": rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
        "w": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
        "bias": (0.1 * rng.standard_normal(WIDTH)).astype(np.float32),
    }
    figure = Normwise(p.narrowing.normwise, p.narrowing.floor)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Engine(make_device("vpu-cpu"), cache_dir=Path(tmp)) as engine,
    ):
        entry = engine.add_entry(p, engine.load_weights({"w": feed["w"], "bias": feed["bias"]}))
        got = engine.step(entry, {"x": feed["x"]})
        step = median_time(lambda: engine.step(entry, {"x": feed["x"]}), repeat=7, number=3)
    joint = step_joint(p)

    def derived() -> object:
        checks = check_results(p, feed, got, joint=joint)
        assert all(c.ok for _, c in checks), [str(c) for _, c in checks]
        return checks

    def fixed() -> object:
        want = evaluate(p.source, feed)
        return [compare(got[n], want[n], figure) for n in want]

    t_derived = median_time(derived, repeat=7, number=3)
    t_fixed = median_time(fixed, repeat=7, number=3)
    return [
        Figure(
            "derived FP16 check / fixed-figure check, per verified step",
            t_derived / t_fixed,
            "x",
            note=f"{t_derived * 1e3:.3g} ms vs {t_fixed * 1e3:.3g} ms",
        ),
        Figure(
            "derived FP16 check / the vpu-cpu step (verify off)",
            t_derived / step,
            "x",
            note=f"{t_derived * 1e3:.3g} ms vs {step * 1e3:.3g} ms",
        ),
    ]
