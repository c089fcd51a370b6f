"""``poot acceptance``: the legalization rules that make a target run functions it has no
primitive for, measured on the device.

Every rule of the target, through its probe (``poot_planner.legalize.probes``: a program the
rule rewrites, with inputs from 1e-6 to 1e-1 of both signs and at the edges of the target's
domain): the figure is the worst error over the running bound of the legalized plan (against
the oracle), and an odd function's result (erf, tanh) must keep the sign of ``x`` wherever the
exact value is not below FP16's smallest subnormal (issue 24 item 3).

Where a rule's numerics claim something beyond that (``Numerics.SATURATING``: xdna2's
sigmoid):

- sigmoid (as the ONNX importer writes it) over the whole finite line, -inf included: the
  figure is the worst error over the rule's derived bound (``abs + rel |sigmoid(x)|``, against
  numpy float64); it must saturate exactly where float32's sigmoid does (1 from 17.34 on, 0
  below -87.34) and refuse NaN, typed;
- SiLU (``x sigmoid(x)``, as YOLOv8 exports it): the figure is the worst error over the
  running bound; ``x`` itself from 17.34 on;
- a masked softmax's exponent, ``exp(scores - row_max)`` with padded keys at
  ``finfo(float32).min``: every masked key weighs exactly 0, the run verified.

Every step runs on a verifying engine, so a breach of the running bound is a failure too.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from poot_engine import Engine
from poot_engine.verify import check_results
from poot_ir import (
    AbsRel,
    Builder,
    DomainError,
    DomainFlagged,
    DType,
    PootError,
    Program,
    evaluate,
)
from poot_ir.ops import sigmoid
from poot_planner import plan
from poot_planner.legalize.probes import Probe, probes
from poot_planner.legalize.rules import RULES, Numerics

from poot.acceptance.engine import Check

__all__ = ["legalized_checks"]

_F32 = DType.F32
_BIG = float(np.finfo(np.float32).max)
#: the finite line's edges for sigmoid: the largest magnitudes, the clamps, where float32's
#: sigmoid saturates or its exp flushes, zeros, ordinary values; -inf (exactly 0)
EDGES = np.array(
    [-_BIG, -1e30, -110.0, -104.0, -103.97, -88.0, -87.34, -87.0, -20.0, -1.0, -1e-30, -0.0,
     0.0, 1e-30, 1e-7, 0.5, 1.0, 16.6, 17.34, 20.0, 87.0, 88.0, 100.0, 1e30, _BIG, -np.inf],
    dtype=np.float32,
)  # fmt: skip
ONE, ZERO = 17.34, -87.34  # float32's sigmoid is 1 above; the kernel's exp flushes below


def _exact(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x.astype(np.float64)))


def _program(name: str, n: int, silu: bool) -> Program:
    b = Builder(name)
    x = b.slot("x", _F32, (n,))
    y = sigmoid(b, x)
    b.output("y", b.mul(x, y) if silu else y)
    return b.build()


def _sigmoid(engine: Engine, target: str) -> Check:
    name = "sigmoid (legalized) over the finite line"
    program = _program("accept_sigmoid", EDGES.size, silu=False)
    p = plan(program, target)
    bounds = [rw.derivation.bound for rw in p.rewrites if rw.primitive == "select"]
    if not p.admitted or len(bounds) != 1 or not isinstance(bounds[0], AbsRel):
        return Check(name, False, detail="not admitted with a derived abs + rel bound")
    bound = bounds[0]
    try:
        entry = engine.add_entry(p)
        got = engine.step(entry, {"x": EDGES})["y"].astype(np.float64)
        nan = EDGES.copy()
        nan[3] = np.nan
        try:
            engine.step(entry, {"x": nan})
            refused = "NaN was returned"
        except (DomainError, DomainFlagged) as err:
            refused = f"NaN refused ({type(err).__name__})"
        engine.remove_entry(entry)
    except PootError as err:
        return Check(name, False, detail=f"{type(err).__name__}: {err}")
    want = _exact(EDGES)
    worst = float(np.max(np.abs(got - want) / (bound.abs + bound.rel * want)))
    saturates = bool(np.all(got[EDGES >= ONE] == 1.0) and np.all(got[EDGES < ZERO] == 0.0))
    detail = f"bound abs {bound.abs:.3g} + rel {bound.rel:.3g}; " + (
        "saturates exactly" if saturates else "does NOT saturate exactly"
    )
    ok = worst <= 1.0 and saturates and "refused" in refused
    return Check(name, ok, worst, "error/bound", f"{detail}; {refused}")


def _silu(engine: Engine, target: str) -> Check:
    name = "SiLU (legalized) over the finite line"
    x = EDGES[np.isfinite(EDGES) & (np.abs(EDGES) < 1e30)]
    program = _program("accept_silu", x.size, silu=True)
    p = plan(program, target)
    try:
        entry = engine.add_entry(p)
        got = engine.step(entry, {"x": x})
        engine.remove_entry(entry)
    except PootError as err:
        return Check(name, False, detail=f"{type(err).__name__}: {err}")
    worst = max((c.error_ratio for _, c in check_results(p, {"x": x}, got)), default=0.0)
    y = got["y"]
    identity = bool(np.all(y[x >= ONE] == x[x >= ONE]))
    detail = "x from 17.34 on" if identity else "NOT x from 17.34 on"
    return Check(name, worst <= 1.0 and identity, worst, "error/bound", detail)


def _masked_exponent(engine: Engine, target: str) -> Check:
    name = "masked softmax exponent (finfo(float32).min keys)"
    b = Builder("accept_masked_exponent")
    s = b.slot("scores", _F32, (4, 32))
    m = b.slot("row_max", _F32, (4, 32))
    e = b.exp(b.sub(s, m))
    b.output("e", e)
    b.output("s", b.reduce_sum(e, 1))
    rng = np.random.default_rng(0)
    top = np.array([0.0, 2.5, -1.25, 10.0], np.float32)[:, None]
    scores = (top + rng.uniform(-20.0, 0.0, (4, 32))).astype(np.float32)
    scores[:, 0] = top[:, 0]  # each row's maximum is its own
    masked = np.zeros((4, 32), bool)
    for row, length in ((1, 12), (2, 9), (3, 4)):
        masked[row, length:] = True
    scores[masked] = -_BIG
    feed = {"scores": scores, "row_max": np.broadcast_to(top, (4, 32)).astype(np.float32)}
    try:
        entry = engine.add_entry(b.build())
        got = engine.step(entry, feed)  # verified
        engine.remove_entry(entry)
    except PootError as err:
        return Check(name, False, detail=f"{type(err).__name__}: {err}")
    zero = bool(np.all(got["e"][masked] == 0.0))
    n = int(masked.sum())
    return Check(name, zero, float(n), "masked keys", "each exactly 0" if zero else "NOT 0")


def _probe(engine: Engine, probe: Probe) -> Check:
    name = f"legalized near zero and at the edges: {', '.join(sorted(probe.rules))}"
    p = plan(probe.program, probe.target)
    applied = {rw.rule.name for rw in p.rewrites}
    if not p.admitted or not probe.rules <= applied:
        return Check(name, False, detail=f"the probe is not rewritten by its rules ({applied})")
    inputs = dict(probe.inputs)
    try:
        entry = engine.add_entry(p, engine.load_weights({}))
        got = engine.step(entry, inputs)  # verified: a breach of the running bound fails here
        engine.remove_entry(entry)
    except PootError as err:
        return Check(name, False, detail=f"{type(err).__name__}: {err}")
    worst = max((c.error_ratio for _, c in check_results(p, inputs, got)), default=0.0)
    detail = f"{inputs['x'].size if 'x' in inputs else 0} inputs, {len(p.rewrites)} rewrites"
    signed = True
    if probe.odd:  # the result has the sign of x where the exact value is an FP16 number
        x, y = inputs["x"].astype(np.float64), got["y"].astype(np.float64)
        want = evaluate(probe.program, inputs)["y"].astype(np.float64)
        shown = np.abs(want) >= 2.0**-24
        signed = bool(np.all(np.sign(y[shown]) == np.sign(x[shown])))
        detail += "; the sign of x kept" if signed else "; a WRONG SIGN"
    return Check(name, worst <= 1.0 and signed, worst, "error/bound", detail)


def legalized_checks(engine: Engine, target: str) -> Iterator[Check]:
    """Every rule of ``target`` through its probe; and where a rule of it claims saturation,
    the checks above."""
    for probe in probes(target):
        yield _probe(engine, probe)
    if not any(r.target == target and r.numerics is Numerics.SATURATING for r in RULES):
        return
    yield _sigmoid(engine, target)
    yield _silu(engine, target)
    yield _masked_exponent(engine, target)
