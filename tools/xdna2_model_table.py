"""The xdna2 table of the model suite: how each model of ``models/catalog.py`` (and the Builder
encoder of ``tests/encoder_model.py``) partitions for xdna2, and, with ``--run``, whether its
partitioned run on the xdna-host stand-in is within its derived contract against the oracle.

Per model: equations, spans (device spans), hardware contexts before and after region reuse
(``Plan.contexts_before_reuse``, ``Plan.contexts``, summed over the device spans), equations on
the device over the total, matmuls on the device over the total. With ``--run``: the run's
check (``run_program``: each span under its plan's derived bound) and how many elements were
promised nothing (an infinite derived bound is no check, so it is reported, not passed).

    uv run python tools/xdna2_model_table.py                 # plan every available model
    uv run python tools/xdna2_model_table.py --run encoder magika ocr_cls

A model not installed (``uv sync --group models``) or not exported is listed with the reason.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from poot_ir import Prim, Program

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    eqns: int = 0
    spans: int = 0
    device_spans: int = 0
    contexts_before: int = 0
    contexts: int = 0
    on_device: int = 0
    matmuls: int = 0
    matmuls_on_device: int = 0
    seconds: float = 0.0
    run: str = ""
    note: str = ""

    def cells(self) -> list[str]:
        if self.note and not self.eqns:
            return [self.name, *["-"] * 7, self.note]
        share = f"{self.on_device}/{self.eqns} ({100 * self.on_device / self.eqns:.0f}%)"
        return [
            self.name,
            str(self.eqns),
            f"{self.spans} ({self.device_spans})",
            f"{self.contexts_before} -> {self.contexts}",
            share,
            f"{self.matmuls_on_device}/{self.matmuls}",
            f"{self.seconds:.1f}",
            self.run or "not run",
            self.note,
        ]


HEADER = [
    "model",
    "eqns",
    "spans (device)",
    "contexts before -> after reuse",
    "eqns on device",
    "matmuls on device",
    "plan s",
    "xdna-host run",
    "note",
]


def _models() -> list[tuple[str, object]]:
    """(name, how to load it): the encoder first, then the catalog."""
    out: list[tuple[str, object]] = [("encoder", None)]
    try:
        from models.catalog import MODELS
    except ImportError as exc:  # pragma: no cover - the catalog ships with the repository
        print(f"models.catalog: {exc}", file=sys.stderr)
        return out
    out.extend((m.name, m) for m in MODELS)
    return out


def _load(model: object) -> tuple[Program, dict[str, np.ndarray]] | str:
    """The program and one step's inputs (weights included), or why it is not here."""
    if model is None:
        from encoder_model import encoder_inputs, encoder_layer

        program = encoder_layer()
        return program, encoder_inputs(program, 0)
    from models.catalog import RealModel, available

    assert isinstance(model, RealModel)
    why = available()
    if why is not None:
        return why
    missing = model.missing()
    if missing is not None:
        return missing
    from poot_onnx import import_model

    imp = import_model(model.model(), shapes=model.shapes, constants=model.constants)
    feed = {**imp.weights, **{imp.inputs[k]: v for k, v in model.inputs().items()}}
    return imp.program, feed


def _row(name: str, model: object, run: bool) -> Row:
    from poot_planner import TARGETS, partition

    loaded = _load(model)
    if isinstance(loaded, str):
        return Row(name, note=loaded)
    program, feed = loaded
    t0 = time.perf_counter()
    try:
        spans = partition(program, TARGETS["xdna2"])
    except Exception as exc:  # a partition that fails is a row of the table, not a crash
        return Row(name, len(program.eqns), note=f"partition failed: {type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - t0
    device = [s for s in spans if s.device and s.plan is not None]
    on = {i for s in device for i in s.eqns}
    matmuls = [i for i, e in enumerate(program.eqns) if e.prim is Prim.MATMUL]
    row = Row(
        name,
        len(program.eqns),
        len(spans),
        len(device),
        sum(s.plan.contexts_before_reuse for s in device if s.plan is not None),
        sum(s.plan.contexts for s in device if s.plan is not None),
        len(on),
        len(matmuls),
        sum(1 for i in matmuls if i in on),
        seconds,
    )
    if not run:
        return row
    return Row(**{**_fields(row), "run": _run(program, feed)})


def _fields(row: Row) -> dict[str, object]:
    return {f: getattr(row, f) for f in Row.__slots__}  # type: ignore[attr-defined]


#: a dispatch's deadline on the stand-in: it runs a region's kernels as C on the host, and a
#: region of MiniLM's 128 x 384 x 384 matmuls on a shared two-core machine takes seconds
STAND_IN_DEADLINE_S = 300.0


def _run(program: Program, feed: dict[str, np.ndarray]) -> str:
    """The partitioned run on xdna-host: within the derived contract (every span checked under
    its plan's bound), and the elements promised nothing (an infinite bound)."""
    from poot_engine.run import run_program
    from poot_npu.registry import device_info

    info = device_info("xdna-host")
    why = info.unavailable_reason()
    if why is not None:
        return f"xdna-host unavailable: {why}"
    with tempfile.TemporaryDirectory(prefix="poot-xdna2-table-") as tmp:
        t0 = time.perf_counter()
        try:
            report = run_program(
                program,
                info.make(),
                "xdna-host",
                inputs=[feed],
                cache_dir=Path(tmp),
                partition=True,
                deadline_s=STAND_IN_DEADLINE_S,
            )
        except Exception as exc:  # a run that fails is reported in the table
            return f"failed: {type(exc).__name__}: {str(exc)[:120]}"
        seconds = time.perf_counter() - t0
    checks = [c for s in report.steps for _, c in s.results]
    unbounded = sum(1 for c in checks if "promised nothing" in c.reason)
    worst = max((c.error_ratio for c in checks if c.ok), default=0.0)
    verdict = "within contract" if report.ok else "OUTSIDE contract"
    extra = f", {unbounded} value(s) with unbounded elements" if unbounded else ""
    return f"{verdict} (worst error/bound {worst:.2g}{extra}; {seconds:.0f} s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="model names (default: all)")
    parser.add_argument("--run", action="store_true", help="run partitioned on xdna-host")
    args = parser.parse_args(argv)
    chosen = [(n, m) for n, m in _models() if not args.models or n in args.models]
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for name, model in chosen:
        row = _row(name, model, args.run)
        print("| " + " | ".join(row.cells()) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
