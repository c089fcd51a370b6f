"""The BERT-class encoder layer (``encoder_model``) on xdna2: every matmul on the compute tiles
(operands narrowed to bf16, FP32 accumulation), the equations around it (bias and mask
broadcasts on tiles), how much of the program reaches the device, in how many hardware contexts
(before region reuse across layers), and a partitioned run on the xdna-host stand-in against
the oracle.

Measured here (the issue's aim: 80% of the equations on the device within 16 contexts): 99 of
100 equations on the device with the additive masks ``10000`` and ``finfo`` (only the integer
mask's ``convert`` runs on the host), 97 of 100 with ``inf`` (its ``gt`` and ``select`` too);
2 spans; 8 contexts (7 with ``inf``), all 8 matmuls on tiles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conformance.devices import open_device
from encoder_model import encoder_inputs, encoder_layer
from poot_engine.run import RunReport, run_program
from poot_ir import Output, Prim, Program, evaluate
from poot_npu.registry import device_info
from poot_planner import TARGETS, KernelClass, partition
from poot_planner.error_bounds import result_bounds

XDNA2 = TARGETS["xdna2"]
STYLES = ["10000", "finfo", "inf"]


@pytest.mark.parametrize("style", STYLES)
def test_every_matmul_on_the_device_within_the_context_limit(style: str) -> None:
    program = encoder_layer(mask_style=style)
    spans = partition(program, XDNA2)
    device = [s for s in spans if s.device]
    on = {i for s in device for i in s.eqns}
    matmuls = [i for i, e in enumerate(program.eqns) if e.prim is Prim.MATMUL]
    assert len(matmuls) == 8 and set(matmuls) <= on
    assert len(on) / len(program.eqns) >= 0.8
    host = sorted(program.eqns[i].prim.value for s in spans if not s.device for i in s.eqns)
    assert host == (["convert", "gt", "select"] if style == "inf" else ["convert"])
    contexts = sum(s.plan.contexts for s in device if s.plan is not None)
    assert contexts <= XDNA2.region_limits.contexts  # type: ignore[union-attr]
    (plan,) = [s.plan for s in device]
    assert plan is not None
    kinds = [t.kind for t in plan.tiles]
    assert kinds.count(KernelClass.MATMUL) == 8
    assert KernelClass.BROADCAST in kinds
    print(
        f"{style}: {len(on)}/{len(program.eqns)} equations on xdna2, {len(spans)} spans, {contexts} contexts"
    )


def test_encoder_runs_partitioned_on_xdna_host(tmp_path: Path) -> None:
    """Unpadded sequences: the run is within the plan's derived contract at every element of
    every span (``run_program``'s check: the running error analysis, finite through both
    LayerNorms by their normalized rows' ranges, ``poot_planner.row_ranges``), and close to the
    oracle by the bf16-sized figure besides (the derived bound is the worst case of every bf16
    operand rounding at once: about |y| + sqrt(32) |gamma| past a LayerNorm)."""
    program = encoder_layer()
    steps = [encoder_inputs(program, seed) for seed in (0, 1)]
    for s in steps:
        s["attention_mask"][:] = 1
    report = _run_partitioned(program, steps, tmp_path)
    assert [s.device for s in report.spans] == [False, True]
    _close_to_the_oracle(program, steps, report.outputs)


def test_a_wider_encoder_streams_its_weights_in_pieces_of_k(tmp_path: Path) -> None:
    """Hidden 128 (FFN 512): every weight is 64 KiB or more, past a tile's memory, so its
    matmul streams it in pieces of K once per call of rows; every matmul still runs on the
    device (before K-streaming, none did), within the plan's contracts and close to the
    oracle."""
    program = encoder_layer(batch=1, seq=32, hidden=128, heads=2, ffn=512)
    spans = partition(program, XDNA2)
    tiles = [t for s in spans if s.device and s.plan is not None for t in s.plan.tiles]
    matmuls = [t for t in tiles if t.kind is KernelClass.MATMUL]
    assert len(matmuls) == 8
    # the six dense layers; the attention's per-head operands (16 KiB in all) stay resident
    assert sum(t.pieces > 1 for t in matmuls) == 6
    steps = [encoder_inputs(program, 0)]
    steps[0]["attention_mask"][:] = 1
    report = _run_partitioned(program, steps, tmp_path)
    _close_to_the_oracle(program, steps, report.outputs)


def _run_partitioned(
    program: Program, steps: list[dict[str, np.ndarray]], cache: Path
) -> RunReport:
    """``steps`` of ``program`` partitioned on xdna-host, each span checked by ``run_program``;
    every element of every checked value within the derived contract (``_within...``)."""
    report = run_program(
        program,
        open_device(device_info("xdna-host")),
        "xdna-host",
        inputs=steps,
        cache_dir=cache,
        partition=True,
    )
    _within_the_derived_contract(report)
    return report


def _within_the_derived_contract(report: RunReport) -> None:
    """Every element of every checked value compared under a finite bound, and within it."""
    assert report.ok, [str(c) for s in report.steps for _, c in s.results if not c.ok]
    for step in report.steps:
        for name, c in step.results:
            assert "promised nothing" not in c.reason, (name, c.reason)
            assert c.compared > 0, name


@pytest.mark.parametrize("style", STYLES)
def test_the_derived_bound_is_finite_through_the_layer(style: str) -> None:
    """The running error analysis of the device span on a padded step: every element of the
    layer's output has a finite bound (before the normalized rows' ranges it was infinite
    from the second LayerNorm's divide on: the variance's bound exceeded the variance); how
    far the device may be is checked by the runs above."""
    program = encoder_layer(mask_style=style)
    inputs = encoder_inputs(program, 0)
    spans = partition(program, XDNA2)
    trace = evaluate(_with_every_value(program), inputs)
    (device,) = [s for s in spans if s.device]
    assert device.plan is not None
    feed = {
        a.name: trace[a.name] if a.name in trace else inputs[a.name] for a in device.program.args
    }
    origins: dict[str, tuple[int, str]] = {}
    bounds = result_bounds(device.plan, feed, None, origins)
    assert origins == {}
    for name, bound in bounds.items():
        assert np.isfinite(bound).all(), name


def _close_to_the_oracle(
    program: Program, steps: list[dict[str, np.ndarray]], outputs: list[dict[str, np.ndarray]]
) -> None:
    """The second check, a figure: the matmuls' bf16 operands (2^-8 relative each) through a
    layer-normed output (measured 0.01 at most), far inside the derived bound."""
    for inputs, got in zip(steps, outputs, strict=True):
        want = evaluate(program, inputs)["hidden"].astype(np.float64)
        assert np.allclose(got["hidden"].astype(np.float64), want, atol=3e-2)


def test_a_padded_mask_runs_within_contract(tmp_path: Path) -> None:
    """A padded mask puts exp's argument below -87, inside xdna2's exp domain since it reaches
    -inf (the kernel flushes to 0): the padded step runs, within the plan's contracts and close
    to the oracle (a refusal would fail it)."""
    program = encoder_layer()
    steps = [encoder_inputs(program, 0)]
    assert not steps[0]["attention_mask"].all()  # padded
    report = _run_partitioned(program, steps, tmp_path)
    _close_to_the_oracle(program, steps, report.outputs)


def _with_every_value(program: Program) -> Program:
    """``program`` with every value it computes an output named as a span's argument names it
    (``v<id>``), so one evaluation feeds any span."""
    outs = tuple(Output(f"v{e.out.id}", e.out) for e in program.eqns)
    return Program(program.name, program.args, program.eqns, outs, ())
