"""Per real model: the derived FP16 contract against the measured error, on vpu-cpu partitioned.

Each model of the suite (``models.catalog``) is planned for intel-npu4, run partitioned on the
vpu-cpu stand-in with the suite's inputs (magika: and real files' bytes, ``--files``), and each
device span's results are set against the bound ``error_bounds.result_bounds`` derives for the
inputs the span really had. Printed per output: the normwise bound over the normwise measured
error on the promised elements, the share promised; and where an element is promised nothing,
the first equation whose bound became infinite on finite operand bounds, with its operands'
values and bounds there (why). Last, the cost of deriving against the step.

    uv run --group models python tools/fp16_contract_report.py [model ...] [--files PATH ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_engine.run import host_only_weights
from poot_ir import PootError, Storage, Var
from poot_npu.registry import make_device
from poot_planner import plan
from poot_planner.error_bounds import result_bounds
from poot_planner.plan import Plan
from poot_planner.reference import joint_program, joint_values

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.catalog import MODELS, RealModel, available  # noqa: E402
from models.test_fp16_contract import _feeds, _file_bytes  # noqa: E402
from models.test_models import _imported  # noqa: E402


def _why(sp: Plan, sfeed: dict[str, np.ndarray], values: dict[int, np.ndarray]) -> str:
    """The first equation whose bound became infinite on finite operand bounds, and its
    operands' values and bounds at its first such element."""
    every: dict[int, np.ndarray] = {}
    result_bounds(sp, sfeed, values, every=every)
    prog = sp.legalized
    for i, e in enumerate(prog.eqns):
        vs = [a for a in e.inputs if isinstance(a, Var) and a.dtype.is_float]
        if any(not np.isfinite(every[a.id]).all() for a in vs):
            continue
        out = every[e.out.id]
        if np.isfinite(out).all() or not e.out.dtype.is_float:
            continue  # a comparison the errors could flip is infinite by design
        at = np.unravel_index(int(np.argmax(~np.isfinite(out))), out.shape)
        parts = [
            f"eqn {i} {e.prim.value} -> {out.shape}, inf at {np.count_nonzero(~np.isfinite(out))} el"
        ]
        parts.append(f"  y={float(np.asarray(values[e.out.id])[at]):.4g}")
        for a in e.inputs:
            if isinstance(a, Var):
                v, b = np.asarray(values.get(a.id, sfeed.get(a.name))), every[a.id]
                ix = at if v.shape == out.shape else tuple(0 for _ in v.shape)
                src = next((q for q in prog.eqns if q.out.id == a.id), None)
                parts.append(
                    f"  op v{a.id} ({src.prim.value if src else 'arg'}) {v.shape}: "
                    f"val {float(v[ix]):.4g} bound {float(b[ix]):.4g}; max|v| "
                    f"{float(np.max(np.abs(v))) if v.size else 0:.4g} max bound {float(np.max(b)):.4g}"
                )
            else:
                parts.append(f"  literal {a.value!r}")
        return "\n".join(parts)
    return "no single equation"


def report(m: RealModel, files: list[Path]) -> None:
    imp = _imported(m)
    program = imp.program
    p = plan(program, "intel-npu4", constants=imp.weights)  # the weights checked
    storage = {a.name: a.storage for a in program.args}
    feeds = _feeds(m)
    if m.name == "magika" and files:
        (shape,) = m.shapes.values()
        feeds += [{**imp.weights, imp.inputs["bytes"]: _file_bytes(f, shape[1])} for f in files]
    weights = {n: v for n, v in feeds[0].items() if storage[n] is Storage.WEIGHT}
    states = {n: v for n, v in feeds[0].items() if storage[n] is Storage.STATE}
    derive_s = step_s = 0.0
    per: dict[str, list[float]] = {}  # output: [bound^2, err^2, promised, total]
    whys: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        Engine(make_device("vpu-cpu"), cache_dir=Path(tmp)) as engine,
    ):
        handle = engine.load_weights(weights, host_only=host_only_weights(p))  # as poot run
        entry = engine.add_partitioned(p, handle, states)
        joints: dict[int, object] = {}
        for j, feed in enumerate(feeds):
            slots = {n: v for n, v in feed.items() if storage[n] is Storage.SLOT}
            t0 = time.perf_counter()
            try:
                got = engine.step(entry, slots)
            except PootError as refused:  # an FP16 overflow the in-graph guard saw: named
                print(f"  input {j}: refused: {refused}")
                continue
            step_s += time.perf_counter() - t0
            part = engine.partitioned(entry)
            if part is None:
                runs = [(-1, p, {**weights, **states, **slots}, got)]
            else:
                trace = {**weights, **part.trace}
                runs = [
                    (k, s.plan, {a.name: trace[a.name] for a in s.program.args}, trace)
                    for k, s in enumerate(part.spans)
                    if s.plan is not None
                ]
            states = {n: got[n] for n in states}
            for k, sp, sfeed, trace in runs:
                t0 = time.perf_counter()
                joint = joints.setdefault(k, joint_program(sp))
                values, want = joint_values(joint, sfeed)  # type: ignore[arg-type]
                bounds = result_bounds(sp, sfeed, values)
                derive_s += time.perf_counter() - t0
                for name, ref in want.items():
                    if not np.issubdtype(np.asarray(ref).dtype, np.floating):
                        continue
                    b = bounds[name]
                    r64 = np.asarray(ref, np.float64)
                    with np.errstate(invalid="ignore"):
                        err = np.abs(np.asarray(trace[name], np.float64) - r64)
                    ok = np.isfinite(b) & np.isfinite(r64)
                    bad = ok & (err > b)
                    if bad.any():
                        print(f"  VIOLATION {name}: {int(bad.sum())} elements")
                    acc = per.setdefault(f"span{k}.{name}", [0.0, 0.0, 0, 0])
                    acc[0] += float(np.sum(b[ok] ** 2))
                    acc[1] += float(np.sum(err[ok] ** 2))
                    acc[2] += int(ok.sum())
                    acc[3] += b.size
                    if not ok.all() and f"span{k}" not in whys:
                        whys[f"span{k}"] = _why(sp, sfeed, values)
    print(f"{m.name} ({len(feeds)} inputs)")
    for name, (b2, e2, pr, tot) in per.items():
        ratio = np.sqrt(b2 / e2) if e2 > 0 else (np.inf if b2 > 0 else 0.0)
        print(f"  {name}: bound/error {ratio:.3g}, promised {pr}/{tot}")
    for k, why in whys.items():
        print(f"  {k} first infinite: {why}")
    print(
        f"  deriving {derive_s:.2f} s against the steps' {step_s:.2f} s ({derive_s / step_s:.2g}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--files", nargs="*", type=Path, default=[])
    args = ap.parse_args()
    if (why := available()) is not None:
        raise SystemExit(why)
    for m in MODELS:
        if not args.models or m.name in args.models:
            report(m, args.files)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
