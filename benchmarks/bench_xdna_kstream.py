"""XDNA2 matmul with right operands streamed in pieces of K or held a batch at a time: what BERT-class encoder layers put
on the device as they widen, and what the repeated passes cost in host traffic.

The encoder layer (``tests/encoder_model.py``, Builder-made) at its test size (batch 2 x 16
tokens, hidden 32) and at the widths of real sentence encoders, one sequence of 128 tokens:
hidden 128 (FFN 512), 384 (12 heads, FFN 1536: all-MiniLM-L6-v2's layer) and 768 (12 heads,
FFN 3072: BERT-base's), partitioned for xdna2. Per width: the fraction of equations on the
device, the spans (device and host), the hardware contexts of the device spans (distinct
artifacts, and one per region before reuse), and how many of its matmuls stream their right
operand in pieces of K (a tile holds at most ~62 KB: a 384 x 384 f32 weight is 576 KiB) or
hold a batched one a batch (a head) at a time.

A K-streamed operand is passed once per call of rows, so host bytes per step exceed the
minimum (each argument read once, each result written once); the dense layer of MiniLM's FFN
(``[128, 384] @ [384, 1536]``) is run on xdna-host and that ratio measured: a property of the
design, which holds on the NPU.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_ir import Builder, DType
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import KernelClass, partition, plan

from benchmarks.harness import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from encoder_model import encoder_layer  # type: ignore[import-not-found]

TARGET = "xdna2"
WIDTHS = {
    "hidden 32 (test size)": {},
    "hidden 128": {"batch": 1, "seq": 128, "hidden": 128, "heads": 2, "ffn": 512},
    "hidden 384 (MiniLM-L6)": {"batch": 1, "seq": 128, "hidden": 384, "heads": 12, "ffn": 1536},
    "hidden 768 (BERT-base)": {"batch": 1, "seq": 128, "hidden": 768, "heads": 12, "ffn": 3072},
}


def _width(name: str, kw: dict[str, int]) -> list[Figure]:
    program = encoder_layer(**kw)
    spans = partition(program, TARGET)
    device = [s for s in spans if s.device and s.plan is not None]
    on = sum(len(s.eqns) for s in spans if s.device)
    contexts = sum(s.plan.contexts for s in device if s.plan is not None)
    before = sum(s.plan.contexts_before_reuse for s in device if s.plan is not None)
    matmuls = sum(1 for e in program.eqns if e.prim.value == "matmul")
    streamed = sum(
        1
        for s in device
        if s.plan is not None
        for t in s.plan.tiles
        if t.kind is KernelClass.MATMUL and t.pieces > 1
    )
    held = sum(
        1
        for s in device
        if s.plan is not None
        for t in s.plan.tiles
        if t.kind is KernelClass.MATMUL and t.by_batch
    )
    placed = sum(
        1
        for s in device
        if s.plan is not None
        for t in s.plan.tiles
        if t.kind is KernelClass.MATMUL
    )
    return [
        Figure(
            f"{name}: equations on the device",
            on / len(program.eqns),
            "fraction",
            note=f"{on} of {len(program.eqns)}; {len(spans)} spans, {len(device)} on the "
            f"device; matmuls on tiles {placed} of {matmuls}, {streamed} K-streamed, "
            f"{held} held a batch at a time",
        ),
        Figure(
            f"{name}: hardware contexts of the device spans",
            contexts,
            "contexts",
            note=f"{before} before reuse across identical regions",
        ),
    ]


def _traffic() -> Figure:
    m, k, n = 128, 384, 1536
    b = Builder("ffn_up")
    b.output("y", b.matmul(b.slot("x", DType.F32, (m, k)), b.weight("w", DType.F32, (k, n))))
    program = b.build()
    p = plan(program, TARGET).check()
    (tile,) = p.tiles
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="poot-bench-kstream-") as tmp:
        device = XdnaHostDevice(Path(tmp) / "kernels")
        with Engine(device, cache_dir=Path(tmp) / "blobs") as engine:
            entry = engine.add_entry(p, engine.load_weights({"w": w}))
            engine.step(entry, {"x": x})
            stats = device.last_run_stats()
    assert stats is not None
    return Figure(
        "MiniLM FFN [128,384]@[384,1536]: host bytes per step / minimum",
        stats.host_ratio,
        "x",
        note=f"{tile.pieces} pieces of K, {tile.n_chunks} calls of {tile.chunk} rows: the "
        f"weight passed {tile.n_chunks} times; {stats.host_bytes} B vs {stats.min_host_bytes} B",
    )


def run() -> list[Figure]:
    out: list[Figure] = []
    for name, kw in WIDTHS.items():
        out += _width(name, kw)
    out.append(_traffic())
    return out
