"""The suite's attention models partitioned on xdna-host, checked within their derived contract
at EVERY element: the running error analysis gives each device span's results a finite bound
on these inputs (no element "promised nothing"), through LayerNorm, a softmax over scores
masked by ``finfo(float32).min`` (gpt2_tiny's causal mask) and magika's layer norms
(``poot_planner.row_ranges``, ``test_masked_rows``). ``tools/xdna2_model_table.py --run``
prints the same for every model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from poot_engine.run import run_program
from poot_npu.registry import make_device
from poot_onnx import import_model

from models.catalog import MODELS, available

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


@pytest.mark.parametrize("name", ["gpt2_tiny", "magika"])
def test_every_element_is_within_a_finite_derived_bound(name: str, tmp_path: Path) -> None:
    (m,) = [m for m in MODELS if m.name == name]
    if m.missing() is not None:
        pytest.skip(str(m.missing()))
    imp = import_model(m.model(), shapes=m.shapes, constants=m.constants)
    feed = {**imp.weights, **{imp.inputs[k]: v for k, v in m.inputs().items()}}
    dev = make_device("xdna-host")
    try:
        report = run_program(
            imp.program, dev, "xdna-host", inputs=[feed], partition=True, cache_dir=tmp_path
        )
    finally:
        dev.close()
    assert any(s.device for s in report.spans)
    checks = [(n, c) for s in report.steps for n, c in s.results]
    assert report.ok, [str(c) for _, c in checks if not c.ok]
    unbounded = [(n, c.reason) for n, c in checks if "promised nothing" in c.reason]
    assert unbounded == []


def test_minilm_is_on_the_device_within_16_contexts() -> None:
    """Issue #30: every matmul of MiniLM's six layers on the device, at least 80% of its
    equations, within the 16 hardware contexts (its layers share their regions: torch's
    softmax NaN guard, ``select(isnan(p), 0, p)``, no longer cuts each layer off the next)."""
    from poot_ir import Prim
    from poot_planner import TARGETS, partition

    (m,) = [m for m in MODELS if m.name == "minilm"]
    if m.missing() is not None:
        pytest.skip(str(m.missing()))
    imp = import_model(m.model(), shapes=m.shapes, constants=m.constants)
    program = imp.program
    xdna2 = TARGETS["xdna2"]
    device = [s for s in partition(program, xdna2) if s.device and s.plan is not None]
    on = {i for s in device for i in s.eqns}
    matmuls = {i for i, e in enumerate(program.eqns) if e.prim is Prim.MATMUL}
    assert len(matmuls) == 48 and matmuls <= on
    assert len(on) >= 0.8 * len(program.eqns)
    contexts = sum(s.plan.contexts for s in device if s.plan is not None)
    assert contexts <= xdna2.region_limits.contexts  # type: ignore[union-attr]


@pytest.mark.parametrize("padded", [True, False])
def test_minilm_runs_partitioned_within_contract(padded: bool, tmp_path: Path) -> None:
    """Issue #28: MiniLM partitioned on xdna-host, padded (its ``-inf`` mask becomes -2^64
    where the device checks the scores it is added to) and unpadded, within its derived
    contract at every element. (Attending the pad tokens instead, layer 1's softmax spreads
    its scores past 100: a probability below FLT_MIN, outside the divide's measured domain of
    normal results, which the device refuses, typed.)"""
    (m,) = [m for m in MODELS if m.name == "minilm"]
    if m.missing() is not None:
        pytest.skip(str(m.missing()))
    imp = import_model(m.model(), shapes=m.shapes, constants=m.constants)
    inputs = m.inputs()
    assert (inputs["attention_mask"] == 0).any()  # the catalog's sentences are padded
    if not padded:  # the sentence longer than the sequence (a mask of ones), four times
        assert inputs["attention_mask"][0].all()
        inputs = {k: np.repeat(v[:1], len(v), axis=0) for k, v in inputs.items()}
    feed = {**imp.weights, **{imp.inputs[k]: v for k, v in inputs.items()}}
    dev = make_device("xdna-host")
    try:
        report = run_program(
            imp.program,
            dev,
            "xdna-host",
            inputs=[feed],
            partition=True,
            cache_dir=tmp_path,
            deadline_s=300.0,  # the stand-in runs 48 matmuls of 128 x 384 x 384 in C
        )
    finally:
        dev.close()
    assert sum(s.device for s in report.spans) == 1
    checks = [(n, c) for s in report.steps for n, c in s.results]
    assert report.ok, [str(c) for _, c in checks if not c.ok]
    assert [(n, c.reason) for n, c in checks if "promised nothing" in c.reason] == []
