"""Where a real model's derived FP16 bound grows: per equation of each device span, the bound
``error_bounds.result_bounds`` derives against an FP16 emulation's error (the oracle evaluating
the narrowed program: every F32 value rounded to FP16 at each step, as the device narrows it;
not the device itself, whose accumulation differs), normwise over the elements both bound.

The first equation whose bound is infinite somewhere, or more than ``--blow`` times the
emulated error, is what makes the model's contract loose: the line is flagged (INF, BLOW).
Used for issue 24's table (per model, the first equation that blows up and why).

    uv run --group models python tools/fp16_bound_trace.py MODEL [--blow 1000] [--all]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_engine.run import host_only_weights
from poot_ir import Storage, Var, evaluate
from poot_npu.registry import make_device
from poot_planner import plan
from poot_planner.error_bounds import _everything, result_bounds
from poot_planner.fp16.narrowing import _narrow  # the narrowed index of each equation
from poot_planner.reference import joint_program, joint_values

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.catalog import MODELS, RealModel  # noqa: E402
from models.test_fp16_contract import _feeds  # noqa: E402
from models.test_models import _imported  # noqa: E402


def trace(m: RealModel, blow: float, every_line: bool) -> None:
    imp = _imported(m)
    p = plan(imp.program, "intel-npu4", constants=imp.weights)
    storage = {a.name: a.storage for a in imp.program.args}
    feed = _feeds(m)[0]
    weights = {n: v for n, v in feed.items() if storage[n] is Storage.WEIGHT}
    states = {n: v for n, v in feed.items() if storage[n] is Storage.STATE}
    slots = {n: v for n, v in feed.items() if storage[n] is Storage.SLOT}
    with (
        tempfile.TemporaryDirectory() as tmp,
        Engine(make_device("vpu-cpu"), cache_dir=Path(tmp)) as engine,
    ):
        handle = engine.load_weights(weights, host_only=host_only_weights(p))  # as poot run
        entry = engine.add_partitioned(p, handle, states)
        engine.step(entry, slots)
        part = engine.partitioned(entry)
        if part is None:
            runs = [(-1, p, {**weights, **states, **slots})]
        else:
            seen = {**weights, **part.trace}
            runs = [
                (k, s.plan, {a.name: seen[a.name] for a in s.program.args})
                for k, s in enumerate(part.spans)
                if s.plan is not None
            ]
    print(f"=== {m.name}")
    for k, sp, sfeed in runs:
        legal = sp.legalized
        if sp.narrowing is None:  # no F32 value to narrow (sklearn_mlp's label gather, i32)
            print(f"-- span {k}: {len(legal.eqns)} equations, none narrowed")
            continue
        values, _ = joint_values(joint_program(sp), sfeed)
        bounds: dict[int, np.ndarray] = {}
        result_bounds(sp, sfeed, values, every=bounds)
        narrowed, at = _narrow(legal, sp.narrowing)
        with np.errstate(all="ignore"):
            emulated = evaluate(_everything(narrowed), sfeed)
        print(f"-- span {k}: {len(legal.eqns)} equations")
        for i, e in enumerate(legal.eqns):
            if not e.out.dtype.is_float or i not in at:
                continue
            dev = np.asarray(emulated[f"v{narrowed.eqns[at[i]].out.id}"], np.float64)
            y = np.asarray(values[e.out.id], np.float64)
            b = bounds[e.out.id]
            with np.errstate(all="ignore"):
                err = np.abs(dev - y)
            ok = np.isfinite(b) & np.isfinite(err)
            en, bn = float(np.linalg.norm(err[ok])), float(np.linalg.norm(b[ok]))
            unbounded = int(np.sum(~np.isfinite(b)))
            ratio = bn / en if en > 0 else np.inf
            flag = "INF" if unbounded else "BLOW" if en > 0 and ratio > blow else ""
            if every_line or flag:
                ins = [f"v{a.id}" if isinstance(a, Var) else repr(a.value) for a in e.inputs]
                print(
                    f"{i:4d} {e.prim.value:17s} {e.out.shape!s:20s} max|y| "
                    f"{float(np.max(np.abs(y), initial=0)):9.3g} emulated {en:9.3g} bound "
                    f"{bn:9.3g} ratio {ratio:9.3g} unbounded {unbounded:6d} {flag} "
                    f"v{e.out.id} <- {', '.join(ins)}"
                )
            if unbounded and not every_line:
                break


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--blow", type=float, default=1e3)
    ap.add_argument("--all", action="store_true", help="every equation, not only flagged ones")
    args = ap.parse_args()
    for m in MODELS:
        if m.name in args.models:
            trace(m, args.blow, args.all)


if __name__ == "__main__":
    main()
