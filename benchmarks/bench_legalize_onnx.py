"""Legalization on an ONNX encoder: its step on vpu-cpu, imported by poot and partitioned after
legalization, against ONNX Runtime and against OpenVINO each running the original ONNX model
directly on the CPU (same bytes, same inputs, same run), as ratios.

Two models: ``benchmarks/encoder_onnx`` (a BERT-class layer written as ONNX, with a padded
``(1 - mask) * -10000`` mask; no export needed), and the real sentence encoder all-MiniLM-L6-v2
of the models suite (6 layers, exported by ``tools/export_minilm.py``; skipped, saying so,
until exported) on real sentences padded to the sequence. After legalization the integer mask
runs on the oracle (the host prelude) and the rest is one device graph (minilm's mask scores are
not proven bounded: the device graph checks them, ``poot_planner.fp16.prelude``; a refused step
would be a figure saying so). ONNX Runtime sits in
the ``models`` dependency group: when it is absent its figures are skipped and a figure says so. OpenVINO runs the ONNX file with its
CPU plugin's defaults (what a user of OpenVINO gets), the stand-in with the NPU-like FP16 config.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov
from poot_engine import Engine
from poot_ir import NarrowingRangeError, evaluate
from poot_npu.registry import make_device
from poot_onnx import import_model
from poot_planner import summarize

from benchmarks.encoder_onnx import encoder_feed, encoder_onnx
from benchmarks.harness import Figure, alternating

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.catalog import MODELS, available

TARGET = "intel-npu4"
SHAPE = {"batch": 2, "seq": 64, "hidden": 128, "heads": 4, "ffn": 512}


def _ort(path: Path) -> Callable[[dict[str, np.ndarray]], np.ndarray] | None:
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, feed)[0]


def _measure(
    label: str, path: Path, feed: dict[str, np.ndarray], output: str, rounds: int, calls: int
) -> list[Figure]:
    """poot's partitioned step on vpu-cpu, OpenVINO CPU and ONNX Runtime CPU on ``path`` (the
    ONNX file each runs directly), ``feed`` (int64, as the model takes it) alike."""
    imp = import_model(path, shapes={k: v.shape for k, v in feed.items()})
    slots = {imp.inputs[k]: v for k, v in feed.items()}  # int64, range-checked into I32 slots
    core = ov.Core()
    model = core.read_model(str(path))
    model.reshape({k: list(v.shape) for k, v in feed.items()})  # the static shapes poot plans
    infer = core.compile_model(model, "CPU").create_infer_request()
    ort_run = _ort(path)
    with (
        tempfile.TemporaryDirectory() as tmp,
        Engine(make_device("vpu-cpu"), cache_dir=Path(tmp)) as engine,
    ):
        entry = engine.add_partitioned(imp.program, engine.load_weights(imp.weights))
        parts = engine.partitioned(entry)
        assert parts is not None
        sides: dict[str, Callable[[], object]] = {
            "poot": lambda: engine.step(entry, slots),
            "openvino": lambda: infer.infer(feed),
        }
        if ort_run is not None:
            sides["ort"] = lambda: ort_run(feed)
        got = imp.results(engine.step(entry, slots))[output].astype(np.float64)
        t = alternating(sides, rounds=rounds, calls=calls, warmup=2)
        note = summarize(parts.spans, TARGET).describe()
    want = imp.results(evaluate(imp.program, {**imp.weights, **slots}))[output].astype(np.float64)
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    figures = [
        Figure(
            f"{label} on vpu-cpu, partitioned after legalization", t["poot"] * 1e3, "ms", note=note
        ),
        Figure("  normwise error against the oracle (NarrowStorage: 2^-8)", rel, ""),
        Figure("  OpenVINO CPU, the ONNX file directly", t["openvino"] * 1e3, "ms"),
        Figure("  poot vpu-cpu / OpenVINO direct", t["poot"] / t["openvino"], "x"),
    ]
    if "ort" in t:
        figures.append(Figure("  ONNX Runtime CPU, the ONNX file", t["ort"] * 1e3, "ms"))
        figures.append(Figure("  poot vpu-cpu / ONNX Runtime", t["poot"] / t["ort"], "x"))
    else:
        figures.append(Figure("  ONNX Runtime absent (uv sync --group models): skipped", 0, ""))
    return figures


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "encoder.onnx"
        path.write_bytes(encoder_onnx(**SHAPE))
        size = "x".join(str(v) for v in SHAPE.values())
        feed = encoder_feed(SHAPE["batch"], SHAPE["seq"])
        figures = _measure(f"ONNX encoder {size}", path, feed, "hidden", rounds=9, calls=10)
    minilm = next(m for m in MODELS if m.name == "minilm")
    why = available() or minilm.missing()
    if why is not None:
        figures.append(Figure("all-MiniLM-L6-v2: skipped", 0, "", note=why))
        return figures
    size = "x".join(str(v) for v in minilm.shapes["input_ids"])
    label = f"all-MiniLM-L6-v2 {size} (real sentences, padded)"
    try:
        figures += _measure(label, minilm.file(), minilm.inputs(), "last_hidden_state", 5, 3)
    except NarrowingRangeError as err:
        # a score past the mask rewrite's bound (the graph's score guard) or a fully masked
        # row's -inf (the input check): refused, typed (poot_planner.fp16.prelude)
        figures.append(Figure(f"{label}: refused, typed", 0, "", note=str(err)))
    return figures
