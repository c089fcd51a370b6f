"""XDNA2 encoder: the BERT-class layer partitioned on xdna-host (matmuls on tiles) against the
oracle's step, host bytes per step over the minimum, and the hardware contexts it needs.

The encoder (``tests/encoder_model.py``: embeddings, layernorm, two-head attention, GELU MLP,
batch 2 x 16 tokens, hidden 32) is planned for xdna2: every matmul on a compute tile (bf16
operands, FP32 accumulation), the bias and mask broadcasts on tiles, only the integer mask's
``convert`` on the host oracle. Its sequences are unpadded (a padded mask puts exp's argument
below -87, refused today). Both sides run in the same process on the same inputs, taking turns:

- xdna-host step / oracle step: the stand-in runs the region design with host-built scalar C
  kernels, region by region, so this ratio is the stand-in's cost, not the NPU's;
- host bytes per step / minimum (the device span's dispatch): what the shim transfers move
  between the host arenas and the array over each argument read once and each result written
  once; a property of the design, which holds on the NPU;
- contexts: distinct region artifacts of the device span, before any reuse across layers.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_engine.engine import Entry
from poot_engine.partitioned import PartitionedEntry
from poot_ir import Storage, evaluate
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import Span, partition, summarize

from benchmarks.harness import Figure, alternating

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from encoder_model import encoder_inputs, encoder_layer  # type: ignore[import-not-found]

TARGET = "xdna2"


def run() -> list[Figure]:
    program = encoder_layer()
    inputs = encoder_inputs(program, 0)
    inputs["attention_mask"][:] = 1
    slots = {a.name: inputs[a.name] for a in program.args if a.storage is Storage.SLOT}
    spans = partition(program, TARGET)
    with tempfile.TemporaryDirectory(prefix="poot-bench-xdna-enc-") as tmp:
        device = XdnaHostDevice(Path(tmp) / "kernels")
        with Engine(device, cache_dir=Path(tmp) / "blobs") as engine:

            def add_sub(span: Span) -> Entry:
                names = [a.name for a in span.program.args if a.storage is Storage.WEIGHT]
                sub = span.plan if span.plan is not None else span.program
                return engine.add_entry(sub, engine.load_weights({n: inputs[n] for n in names}))

            entry = PartitionedEntry.build(
                program, spans, inputs.__getitem__, {}, add_sub, engine.remove_entry
            )

            def run_sub(
                sub: Entry, f: Mapping[str, np.ndarray]
            ) -> tuple[dict[str, np.ndarray], float]:
                return engine.step(sub, f), 0.0

            got = entry.step(slots, run_sub)[0]["hidden"]
            stats = device.last_run_stats()
            assert stats is not None
            t = alternating(
                {
                    "xdna-host": lambda: entry.step(slots, run_sub),
                    "oracle": lambda: evaluate(program, inputs),
                },
                rounds=7,
                calls=5,
                warmup=2,
            )
    want = evaluate(program, inputs)["hidden"]
    contexts = sum(s.plan.contexts for s in spans if s.device and s.plan is not None)
    on = sum(len(s.eqns) for s in spans if s.device)
    return [
        Figure(
            "encoder: xdna-host step / oracle step",
            t["xdna-host"] / t["oracle"],
            "x",
            note=f"{t['xdna-host'] * 1e3:.3g} ms vs {t['oracle'] * 1e3:.3g} ms; "
            + summarize(spans, TARGET).describe(),
        ),
        Figure(
            "encoder: host bytes per step / minimum (device span)",
            stats.host_ratio,
            "x",
            "1.0: no intermediate in host memory",
            f"{stats.host_bytes} B moved, {stats.min_host_bytes} B minimum",
        ),
        Figure("encoder: hardware contexts (before reuse)", contexts, "contexts", "<= 16"),
        Figure(
            "encoder: equations on the device",
            on / len(program.eqns),
            "fraction",
            ">= 0.8",
            f"{on} of {len(program.eqns)}",
        ),
        Figure(
            "encoder: largest error against the oracle",
            float(np.max(np.abs(got.astype(np.float64) - want))),
            "",
            note="bf16 matmul operands",
        ),
    ]
