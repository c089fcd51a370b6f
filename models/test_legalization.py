"""Legalization counts of the real models (outside the default run: planning the OCR models
takes tens of seconds): docs/legalization.md is what ``tools/gen_legalization.py`` writes now,
and every convolution of the convolutional models (its im2col ``gather`` and ``matmul``s, as
the importer writes a ``Conv``) is admitted on intel-npu4 after legalization."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from poot_ir import Prim
from poot_onnx import import_model
from poot_planner import plan

from models.catalog import MODELS, available

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


def test_the_legalization_table_is_current() -> None:
    # a model not exported here (``minilm`` before ``tools/export_minilm.py``) is left out of
    # both sides: its rows are checked where it is exported
    sys.path.insert(0, str(ROOT / "tools"))
    from gen_legalization import rows

    present = tuple(m for m in MODELS if m.missing() is None)
    names = {m.name for m in MODELS} - {m.name for m in present}
    doc = (ROOT / "docs" / "legalization.md").read_text().splitlines()
    table = [r for r in doc if r.startswith("|") and r.split("|")[1].strip() not in names]
    assert table == rows(present)


@pytest.mark.parametrize("m", [m for m in MODELS if m.name.startswith("ocr")], ids=str)
def test_convolutions_are_admitted_on_intel_after_legalization(m: object) -> None:
    program = import_model(m.model(), shapes=m.shapes).program  # type: ignore[attr-defined]
    p = plan(program, "intel-npu4")
    refused = {r.eqn for r in p.refusals}
    conv = [i for i, e in enumerate(program.eqns) if e.prim in (Prim.GATHER, Prim.MATMUL)]
    assert conv and not refused & set(conv)
    assert p.admitted, [str(r) for r in p.refusals[:5]]


def test_magika_runs_on_vpu_cpu_within_its_contract(tmp_path: Path) -> None:
    # magika's LayerNorm sums of squares (~1.3e5 over 512 features) overflow FP16 before their
    # 1/512 scale: refused at run time until the scale is moved into the sum (the scaled-sum
    # rule); now the partitioned run passes its check against the oracle (NarrowStorage), and
    # against ONNX Runtime it is as close as that contract allows
    import numpy as np
    import onnxruntime as ort
    from poot_engine.run import run_program
    from poot_npu.registry import make_device

    m = next(m for m in MODELS if m.name == "magika")
    imp = import_model(m.model(), shapes=m.shapes, constants=m.constants)
    p = plan(imp.program, "intel-npu4")
    assert sum(rw.rule.name == "power-of-two scale into the sum" for rw in p.rewrites) == 4
    feed = {**imp.weights, **{imp.inputs[k]: v for k, v in m.inputs().items()}}
    dev = make_device("vpu-cpu")
    try:
        report = run_program(
            imp.program, dev, "vpu-cpu", inputs=[feed], partition=True, cache_dir=tmp_path
        )
    finally:
        dev.close()
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"
    session = ort.InferenceSession(m.onnx_source(), providers=["CPUExecutionProvider"])
    want = session.run(None, {**m.inputs(), **m.constants})
    for out, ref in zip(session.get_outputs(), want, strict=True):
        got = report.outputs[0][out.name].astype(np.float64)
        rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        print(f"\nmagika on vpu-cpu vs ORT: {out.name} normwise {rel:.3g}")
        assert rel <= 2.0**-8 and int(np.argmax(got)) == int(np.argmax(ref))
