"""The suite's attention models partitioned on xdna-host, checked within their derived contract
at EVERY element: the running error analysis gives each device span's results a finite bound
on these inputs (no element "promised nothing"), through LayerNorm, a softmax over scores
masked by ``finfo(float32).min`` (gpt2_tiny's causal mask) and magika's layer norms
(``poot_planner.row_ranges``, ``test_masked_rows``). ``tools/xdna2_model_table.py --run``
prints the same for every model.
"""

from __future__ import annotations

from pathlib import Path

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
