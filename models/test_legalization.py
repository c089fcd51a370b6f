"""Legalization counts of the real models (outside the default run: planning the OCR models
takes tens of seconds): docs/legalization.md is what ``tools/gen_legalization.py`` writes now,
and every convolution of the convolutional models (its im2col ``gather`` and ``matmul``s, as
the importer writes a ``Conv``) is admitted on intel-npu4 after legalization."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from poot_ir import Prim
from poot_ir.onnx import import_model
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
    program = import_model(m.file(), shapes=m.shapes).program  # type: ignore[attr-defined]
    p = plan(program, "intel-npu4")
    refused = {r.eqn for r in p.refusals}
    conv = [i for i, e in enumerate(program.eqns) if e.prim in (Prim.GATHER, Prim.MATMUL)]
    assert conv and not refused & set(conv)
    assert p.admitted, [str(r) for r in p.refusals[:5]]
