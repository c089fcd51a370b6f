"""Legalization: a BERT-class encoder layer's step on vpu-cpu, partitioned after legalization
against partitioned before it (same inputs, same run), with OpenVINO running the whole F32
program directly on the CPU as a reference.

The encoder (``tests/encoder_model.py``: embeddings, layernorm, two-head attention with a padded
``(1 - mask) * -10000`` mask, GELU MLP) is planned for intel-npu4. Before legalization the
refused equations (the integer mask's convert, erf) run on the oracle between device spans;
after it, only the integer convert does, and the rest is one graph. (With a ``finfo.min`` or
``-inf`` mask the unlegalized partition does not run at all: the oracle span's mask value
reaches the next device span and the engine's range check refuses it.) Each side is a ``PartitionedEntry`` over the engine's device entries (the same code the
engine's ``add_partitioned`` entry uses), stepped in alternating rounds. The reference compiles
the un-narrowed program as one OpenVINO model on the CPU plugin (f32), with no poot engine in
the loop: what a user gets running the model on OpenVINO directly.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import openvino as ov
from poot_codegen.intel import graph as intel_graph
from poot_engine import Engine
from poot_engine.engine import Entry
from poot_engine.partitioned import PartitionedEntry
from poot_ir import Program, Storage
from poot_npu.registry import make_device
from poot_planner import Span, partition, summarize

from benchmarks.harness import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from encoder_model import encoder_inputs, encoder_layer  # type: ignore[import-not-found]

TARGET = "intel-npu4"


def _entry(
    engine: Engine, program: Program, inputs: dict[str, np.ndarray], legal: bool
) -> PartitionedEntry:
    spans = partition(program, TARGET, legalization=legal)

    def add_sub(span: Span) -> Entry:
        names = [a.name for a in span.program.args if a.storage is Storage.WEIGHT]
        sub = span.plan if span.plan is not None else span.program
        return engine.add_entry(sub, engine.load_weights({n: inputs[n] for n in names}))

    return PartitionedEntry.build(
        program, spans, inputs.__getitem__, {}, add_sub, engine.remove_entry
    )


ROUNDS, CALLS = 15, 10


def _alternating(sides: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The median over ``ROUNDS`` rounds of each side's mean call time, the sides taking turns
    within each round (a loaded machine slows both alike)."""
    for fn in sides.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(ROUNDS):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            for _ in range(CALLS):
                fn()
            times[name].append((time.perf_counter() - t0) / CALLS)
    return {k: statistics.median(v) for k, v in times.items()}


def run() -> list[Figure]:
    program = encoder_layer(batch=2, seq=32, hidden=64, heads=4, ffn=128, mask_style="10000")
    inputs = encoder_inputs(program, 0)
    slots = {a.name: inputs[a.name] for a in program.args if a.storage is Storage.SLOT}
    feed = {a.name: inputs[a.name] for a in program.args}
    figures: list[Figure] = []
    compiled = ov.Core().compile_model(
        intel_graph.lower(program), "CPU", dict(intel_graph.CPU_STANDIN_CONFIG)
    )
    request = compiled.create_infer_request()
    with (
        tempfile.TemporaryDirectory() as cache,
        Engine(make_device("vpu-cpu"), cache_dir=Path(cache)) as engine,
    ):
        entries = {legal: _entry(engine, program, inputs, legal) for legal in (False, True)}

        def run_sub(sub: Entry, f: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
            return engine.step(sub, f), 0.0

        outs = {legal: e.step(slots, run_sub)[0]["hidden"] for legal, e in entries.items()}
        t = _alternating(
            {
                "before": lambda: entries[False].step(slots, run_sub),
                "after": lambda: entries[True].step(slots, run_sub),
                "openvino": lambda: request.infer(feed),
            }
        )
        for legal, side in ((False, "before"), (True, "after")):
            s = summarize(entries[legal].spans, TARGET)
            what = f"encoder step on vpu-cpu, partitioned {side} legalization"
            figures.append(Figure(what, t[side] * 1e3, "ms", note=s.describe()))
    figures.append(Figure("after / before (step time)", t["after"] / t["before"], "x", aim="< 1"))
    diff = float(np.max(np.abs(outs[True] - outs[False])))
    figures.append(Figure("largest difference, after vs before", diff, ""))
    figures.append(Figure("OpenVINO CPU f32, whole program, direct", t["openvino"] * 1e3, "ms"))
    figures.append(Figure("after legalization / OpenVINO direct", t["after"] / t["openvino"], "x"))
    return figures
