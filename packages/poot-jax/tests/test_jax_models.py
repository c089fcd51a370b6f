"""The real models written in JAX (``jax_models``: a Flax MLP, a Flax transformer encoder block
and a causal decoder block, a Flax CNN, a softmax/layer_norm/gelu chain): on the oracle against ``jax.jit`` on XLA:CPU, planned for both
NPU targets, and run partitioned on both stand-ins (xdna-host: xdna2; vpu-cpu: intel-npu4), each
step checked against the oracle under the plan's contract (``poot_engine.run``)."""

from __future__ import annotations

from pathlib import Path

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")
pytest.importorskip("flax", reason="flax is in poot-jax's test group")

import numpy as np  # noqa: E402
from jax_cases import compare, run_imported  # noqa: E402
from jax_models import MODELS  # noqa: E402
from poot_engine.run import run_program  # noqa: E402
from poot_jax import ImportedFunction, import_function  # noqa: E402
from poot_npu.registry import device_info  # noqa: E402
from poot_planner import plan  # noqa: E402

_IMPORTED: dict[str, ImportedFunction] = {}


def _imported(name: str) -> tuple[ImportedFunction, np.ndarray]:
    m = MODELS[name]()
    if name not in _IMPORTED:
        _IMPORTED[name] = import_function(m.fn, m.x, params=m.params, name=name)
    return _IMPORTED[name], m.x


@pytest.mark.parametrize("name", sorted(MODELS))
def test_on_the_oracle_against_jax(name: str) -> None:
    m = MODELS[name]()
    imp, x = _imported(name)
    compare(run_imported(imp, x)[0], np.asarray(jax.jit(m.fn)(m.params, x)))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(("device", "target"), [("xdna-host", "xdna2"), ("vpu-cpu", "intel-npu4")])
def test_planned_and_run_partitioned_on_the_stand_in(
    name: str, device: str, target: str, tmp_path: Path
) -> None:
    info = device_info(device)
    if (why := info.unavailable_reason()) is not None:
        pytest.skip(f"stand-in unavailable: {why}")
    imp, x = _imported(name)
    p = plan(imp.program, target)
    assert p.admitted or p.refusals  # a plan either way: admitted, or every refusal named
    rng = np.random.default_rng(1)
    steps = [
        {**imp.weights, "x": x},
        {**imp.weights, "x": rng.standard_normal(x.shape).astype(x.dtype)},
    ]
    report = run_program(
        imp.program, info.make(), device, cache_dir=tmp_path, inputs=steps, partition=True
    )
    assert report.plan.admitted or any(s.device for s in report.spans), "nothing ran on the device"
    assert len(report.steps) == 2 and report.ok, report.steps


def test_a_flax_cnn_keeps_its_structure_and_plans_whole_on_intel() -> None:
    # Flax pools channels-last: intel-npu4's MaxPool and AvgPool window [N, C, spatial...],
    # so each pool is transposed to channels-first and back (before, both were refused)
    from poot_ir import Prim

    imp, _ = _imported("flax_cnn")
    prims = [e.prim for e in imp.program.eqns]
    assert prims.count(Prim.CONV) == 4 and Prim.GATHER not in prims
    assert {Prim.REDUCE_WINDOW_MAX, Prim.REDUCE_WINDOW_SUM} <= set(prims)
    p = plan(imp.program, "intel-npu4", constants=imp.weights)
    assert p.admitted, p.refusals
    named = {rw.rule.name for rw in p.rewrites}
    assert "a channels-last window, transposed to channels-first" in named


def test_a_flax_decoders_causal_mask_runs_on_the_host_with_its_softmax_alone() -> None:
    # Flax masks by where(mask, scores, finfo.min), the minimum a bound constant; intel-npu4
    # has no select, so legalization writes x m + y (1 - m): its products keep the constant's
    # side, and the softmax's shift and exp bring it back into FP16's range (before, every
    # equation after the select was refused: 26 spans on vpu-cpu)
    from poot_ir import Prim

    imp, _ = _imported("flax_decoder_block")
    p = plan(imp.program, "intel-npu4", constants=imp.weights)
    refused = {imp.program.eqns[r.eqn].prim for r in p.refusals if r.eqn >= 0}
    assert {Prim.SELECT, Prim.EXP} <= refused
    assert not refused & {Prim.MATMUL, Prim.DIV, Prim.SQRT, Prim.TANH}, refused
