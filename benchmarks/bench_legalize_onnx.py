"""Legalization on an ONNX encoder: its step on vpu-cpu, imported by poot and partitioned after
legalization, against ONNX Runtime and against OpenVINO each running the original ONNX model
directly on the CPU (same bytes, same inputs, same run), as ratios.

The model is ``benchmarks/encoder_onnx`` (a BERT-class layer with a padded
``(1 - mask) * -10000`` mask). After legalization only the integer mask's convert runs on the
oracle; the rest is one device graph. ONNX Runtime sits in the ``models`` dependency group: when
it is absent its figures are skipped and a figure says so. OpenVINO runs the ONNX file with its
CPU plugin's defaults (what a user of OpenVINO gets), the stand-in with the NPU-like FP16 config.
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov
from poot_engine import Engine
from poot_ir import evaluate
from poot_ir.onnx import import_model
from poot_npu.registry import make_device
from poot_planner import summarize

from benchmarks.encoder_onnx import encoder_feed, encoder_onnx
from benchmarks.harness import Figure, alternating

TARGET = "intel-npu4"
SHAPE = {"batch": 2, "seq": 64, "hidden": 128, "heads": 4, "ffn": 512}


def _ort(path: Path) -> Callable[[dict[str, np.ndarray]], np.ndarray] | None:
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnxruntime as ort  # type: ignore[import-untyped]

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, feed)[0]


def run() -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "encoder.onnx"
        path.write_bytes(encoder_onnx(**SHAPE))
        feed = encoder_feed(SHAPE["batch"], SHAPE["seq"])
        imp = import_model(path)
        slots = {imp.inputs[k]: v.astype(np.int32) for k, v in feed.items()}
        values = {**imp.weights, **slots}
        request = ov.Core().compile_model(ov.Core().read_model(str(path)), "CPU")
        infer = request.create_infer_request()
        ort_run = _ort(path)
        with Engine(make_device("vpu-cpu"), cache_dir=Path(tmp) / "cache") as engine:
            weights = engine.load_weights(imp.weights)
            entry = engine.add_entry(imp.program, weights, partition=True)
            parts = engine.partitioned(entry)
            assert parts is not None
            sides: dict[str, Callable[[], object]] = {
                "poot": lambda: engine.step(entry, slots),
                "openvino": lambda: infer.infer(feed),
            }
            if ort_run is not None:
                sides["ort"] = lambda: ort_run(feed)
            got = imp.results(engine.step(entry, slots))["hidden"].astype(np.float64)
            t = alternating(sides, rounds=9, calls=10, warmup=3)
            note = summarize(parts.spans, TARGET).describe()
        want = imp.results(evaluate(imp.program, values))["hidden"].astype(np.float64)
    size = "x".join(str(v) for v in SHAPE.values())
    figures.append(Figure(f"ONNX encoder {size} on vpu-cpu, partitioned after legalization", t["poot"] * 1e3, "ms", note=note))  # fmt: skip
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    figures.append(Figure("normwise error against the oracle (NarrowStorage: 2^-8)", rel, ""))
    figures.append(Figure("OpenVINO CPU, the ONNX file directly", t["openvino"] * 1e3, "ms"))
    figures.append(Figure("poot vpu-cpu / OpenVINO direct", t["poot"] / t["openvino"], "x"))
    if "ort" in t:
        figures.append(Figure("ONNX Runtime CPU, the ONNX file", t["ort"] * 1e3, "ms"))
        figures.append(Figure("poot vpu-cpu / ONNX Runtime", t["poot"] / t["ort"], "x"))
    else:
        figures.append(Figure("ONNX Runtime absent (uv sync --group models): skipped", 0, ""))
    return figures
