"""A BERT-class encoder layer (``encoder_model``) on intel-npu4 after legalization: what the
plan admits before and after, the partition (one device span for every non-integer equation),
and a partitioned run on the vpu-cpu stand-in with padded masks in each of the three forms
models ship, within the narrowing contract against the F32 oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from encoder_model import encoder_inputs, encoder_layer
from poot_engine.run import run_program
from poot_ir import evaluate
from poot_npu.registry import device_info
from poot_planner import TARGETS, RefusalKind, partition, plan, summarize

INTEL = TARGETS["intel-npu4"]
STYLES = ["10000", "finfo", "inf"]


@pytest.mark.parametrize("style", STYLES)
def test_legalization_leaves_only_the_integer_mask_convert(style: str) -> None:
    program = encoder_layer(mask_style=style)
    before = plan(program, INTEL, legalization=False)
    after = plan(program, INTEL)
    assert len(after.refusals) < len(before.refusals)
    assert {r.primitive for r in before.refusals} >= {"convert", "erf"}
    assert [(r.primitive, r.kind) for r in after.refusals] == [
        ("convert", RefusalKind.INTEGER_TO_FLOAT)
    ]
    spans = partition(program, INTEL)
    device = [s for s in spans if s.device]
    assert len(device) == 1  # every non-integer equation in one graph
    oracle = [i for s in spans if not s.device for i in s.eqns]
    assert [program.eqns[i].prim.value for i in oracle] == ["convert"]
    summary = summarize(spans, INTEL)
    assert (summary.graphs, summary.compiles, summary.round_trips) == (1, 1, 1)
    unlegalized = summarize(partition(program, INTEL, legalization=False), INTEL)
    assert unlegalized.graphs > summary.graphs


@pytest.mark.slow
@pytest.mark.parametrize("style", STYLES)
def test_encoder_on_vpu_cpu_with_padded_masks(style: str, tmp_path: Path) -> None:
    program = encoder_layer(mask_style=style)
    steps = [encoder_inputs(program, seed) for seed in (0, 1)]
    assert all(s["attention_mask"][1:, -1].sum() == 0 for s in steps)  # padded sequences
    report = run_program(
        program,
        open_device(device_info("vpu-cpu")),
        "vpu-cpu",
        inputs=steps,
        cache_dir=tmp_path,
        partition=True,
    )
    assert report.ok, [str(c) for s in report.steps for _, c in s.results if not c.ok]
    assert [s.device for s in report.spans] == [False, True]
    assert INTEL.narrowing is not None
    for inputs, got in zip(steps, report.outputs, strict=True):
        want = evaluate(program, inputs)["hidden"].astype(np.float64)
        y = got["hidden"].astype(np.float64)
        assert np.linalg.norm(y - want) <= INTEL.narrowing.normwise * np.linalg.norm(want)
        # padded positions too: each sequence's rows are within the contract on their own
        for row in range(y.shape[0]):
            err = np.linalg.norm(y[row] - want[row])
            assert err <= INTEL.narrowing.normwise * np.linalg.norm(want[row]), row
