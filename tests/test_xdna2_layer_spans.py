"""Regressions of MiniLM on xdna2 (issues #28 and #30), each on a small Builder program.

- torch's scaled dot-product attention guards its softmax with ``select(isnan(p), 0, p)``
  (``isnan`` written ``(p == p) == False``), once per layer. xdna2 has no comparison to a
  boolean nor a select: each guard was an oracle span cutting the layers, each device span
  was planned alone, and the spans' contexts summed past 16 (MiniLM: 6 of 48 matmuls on the
  device). The rule ``select(isnan(x), c, x) -> max(x, x)`` (``poot_planner.legalize.rules``)
  keeps the layers one device span whose identical layers share their regions' artifacts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from poot_engine.run import run_program
from poot_ir import Builder, DType, Prim, Program, Var, evaluate, ops
from poot_npu.registry import device_info
from poot_planner import TARGETS, partition, plan

XDNA2 = TARGETS["xdna2"]
F32 = DType.F32
ROWS, WIDTH = 32, 16


def _guarded(b: Builder, p: Var) -> Var:
    """torch's NaN guard after a softmax: ``select((p == p) == False, 0, p)``."""
    isnan = b.eq(b.eq(p, p), b.literal(False, DType.BOOL))
    return b.select(isnan, b.literal(0.0, F32), p)


def attention_layers(n: int) -> Program:
    """``n`` identical post-norm self-attention layers over ``x`` [32, 16], each guarding its
    softmax (as BERT's: xdna2 runs a softmax alone as a row kernel, which has no bound yet)."""
    b = Builder(f"attention{n}")
    x = b.slot("x", F32, (ROWS, WIDTH))
    mask = b.slot("mask", F32, (1, 1, 1, ROWS))  # additive over the keys, finite: 0 or -10000
    x = ops.layernorm(b, x, b.weight("g", F32, (WIDTH,)), b.weight("h", F32, (WIDTH,)))
    for k in range(n):
        wq = b.weight(f"wq{k}", F32, (WIDTH, WIDTH))
        wv = b.weight(f"wv{k}", F32, (WIDTH, WIDTH))
        q = b.reshape(b.matmul(x, wq), (1, 1, ROWS, WIDTH))
        keys = b.reshape(b.transpose(x, (1, 0)), (1, 1, WIDTH, ROWS))
        scores = b.add(b.mul(b.matmul(q, keys), 0.25), mask)
        p = _guarded(b, ops.softmax(b, scores))
        v = b.reshape(b.matmul(x, wv), (1, 1, ROWS, WIDTH))
        x = b.add(x, b.reshape(b.matmul(p, v), (ROWS, WIDTH)))
        x = ops.layernorm(b, x, b.weight(f"g{k}", F32, (WIDTH,)), b.weight(f"h{k}", F32, (WIDTH,)))
    b.output("y", x)
    return b.build()


def _inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    """Weights and ``x`` from ``seed``; the last two keys masked."""
    rng = np.random.default_rng(seed)
    out = {
        a.name: (rng.standard_normal(a.var.shape) * (1.0 if a.name == "x" else 0.25))
        for a in program.args
    }
    out["mask"] = np.where(np.arange(ROWS) < ROWS - 2, 0.0, -10000.0).reshape(1, 1, 1, ROWS)
    return {k: v.astype(np.float32) for k, v in out.items()}


@pytest.mark.parametrize("n", [3, 6])
def test_nan_guarded_layers_are_one_device_span_sharing_regions(n: int) -> None:
    """Every equation admitted (the guard's comparisons dropped with it), one device span, and
    six layers need no more contexts than three: the layers share their regions."""
    program = attention_layers(n)
    p = plan(program, XDNA2)
    assert p.admitted, [str(r) for r in p.refusals]
    guards = [rw for rw in p.rewrites if rw.primitive == "select"]
    assert len(guards) == n
    assert all(len(rw.unread) == 2 for rw in guards)  # eq(p, p) and eq(., False) dropped
    spans = partition(program, XDNA2)
    assert [s.device for s in spans] == [True]
    matmuls = sum(e.prim is Prim.MATMUL for e in program.eqns)
    assert matmuls == 4 * n
    assert p.contexts < p.contexts_before_reuse
    assert p.contexts == plan(attention_layers(3), XDNA2).contexts


def test_nan_guarded_layers_run_on_xdna_host_within_contract(tmp_path: Path) -> None:
    program = attention_layers(3)
    steps = [_inputs(program, s) for s in (0, 1)]
    report = run_program(
        program,
        open_device(device_info("xdna-host")),
        "xdna-host",
        inputs=steps,
        cache_dir=tmp_path,
        partition=True,
    )
    assert report.ok, [str(c) for s in report.steps for _, c in s.results if not c.ok]
    for step in report.steps:
        for name, c in step.results:
            assert "promised nothing" not in c.reason and c.compared > 0, (name, c.reason)
    want = evaluate(program, steps[0])["y"]
    got = report.outputs[0]["y"]
    np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05)


def test_a_nan_the_guard_would_answer_is_refused_not_zeroed() -> None:
    """max(x, x)'s domain is "not NaN": the plan guards the guarded value on the device."""
    p = plan(attention_layers(1), XDNA2)
    eqns = p.legalized.eqns
    (i,) = [k for k, e in enumerate(eqns) if e.prim is Prim.MAX and e.inputs[0] == e.inputs[1]]
    assert any(g.eqn == i and g.operand == 0 for g in p.guards), [str(g) for g in p.guards]


# -- a row kernel is never cut ----------------------------------------------------------------


def softmax_of_products() -> Program:
    """``softmax(x @ w) @ w2``: a softmax xdna2 recognizes as a row kernel, refused there (its
    exp has no derived bound inside one)."""
    b = Builder("rows")
    x = b.slot("x", F32, (ROWS, WIDTH))
    p = ops.softmax(b, b.matmul(x, b.weight("w", F32, (WIDTH, ROWS))))
    b.output("y", b.matmul(p, b.weight("w2", F32, (ROWS, WIDTH))))
    return b.build()


def test_a_refused_row_kernel_goes_to_the_host_whole() -> None:
    """Cut, the host's exp made subnormals the device's divide flagged as an underflow."""
    program = softmax_of_products()
    prims = [e.prim for e in program.eqns]
    first, last = prims.index(Prim.REDUCE_MAX), prims.index(Prim.DIV)
    spans = partition(program, XDNA2)
    (host,) = [s for s in spans if not s.device]
    assert set(range(first, last + 1)) <= set(host.eqns)
    assert [s.device for s in spans] == [True, False, True]  # the matmuls on the device


def test_a_softmax_with_subnormal_exponentials_runs_within_contract(tmp_path: Path) -> None:
    """Scores 100 apart in a row: float32's exp(-100) is subnormal."""
    program = softmax_of_products()
    rng = np.random.default_rng(0)
    w = np.zeros((WIDTH, ROWS), np.float32)
    w[0, :] = np.linspace(0.0, 100.0, ROWS)
    feed = {
        "x": np.ones((ROWS, WIDTH), np.float32),
        "w": w,
        "w2": rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
    }
    scores = feed["x"] @ w
    assert np.any(np.exp(scores - scores.max(1, keepdims=True)) < np.finfo(np.float32).tiny)
    report = run_program(
        program,
        open_device(device_info("xdna-host")),
        "xdna-host",
        inputs=[feed],
        cache_dir=tmp_path,
        partition=True,
    )
    assert report.ok, [str(c) for s in report.steps for _, c in s.results if not c.ok]
