"""The real-model suite (``nox -s models``; outside the default run: it takes minutes). Each
pretrained model of ``models.catalog`` is imported as shipped and run on the oracle against ONNX
Runtime on the same inputs, planned for both NPU targets, and run partitioned on both stand-ins.

Figures (worst absolute and relative error, plan outcomes) are printed for the record. A model
made by an export tool (``minilm``) skips, naming the command, until it is exported; the fitted
scikit-learn models (skl2onnx) are fitted and exported in memory when first imported.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from poot_engine.run import run_program
from poot_ir import DomainError, NarrowingRangeUpload, PootError, Prim, evaluate
from poot_npu.registry import host_device, make_device
from poot_onnx import Imported, import_model
from poot_planner import Refusal, RefusalKind, plan

from models.catalog import MODELS, RealModel, available, params

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

_IMPORTED: dict[str, Imported] = {}


def _imported(m: RealModel) -> Imported:
    if m.name not in _IMPORTED:
        _IMPORTED[m.name] = import_model(m.model(), shapes=m.shapes, constants=m.constants)
    return _IMPORTED[m.name]


def _feed(m: RealModel, imp: Imported) -> dict[str, np.ndarray]:
    return {**imp.weights, **{imp.inputs[k]: v for k, v in m.inputs().items()}}


@pytest.mark.parametrize("m", params())
def test_oracle_matches_onnxruntime(m: RealModel, capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime as ort

    imp = _imported(m)
    got = imp.results(evaluate(imp.program, _feed(m, imp)))
    src = m.model()
    model = str(src) if isinstance(src, Path) else src.SerializeToString()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = session.run(None, {**m.inputs(), **m.constants})
    for out, ref in zip(session.get_outputs(), want, strict=True):
        y = got[out.name].astype(np.float64)
        diff = np.abs(y - ref)
        worst_abs = float(diff.max())
        # float32 throughout on both sides: agreement to within a few float32 roundings,
        # relative to the output's scale (a probability near 0 has no meaningful relative
        # error, so the relative figure counts elements of at least 1e-3 of the scale)
        scale = max(float(np.abs(ref).max()), 1e-30)
        big = np.abs(ref) >= 1e-3 * scale
        worst_rel = float((diff[big] / np.abs(ref[big])).max()) if np.any(big) else 0.0
        with capsys.disabled():
            print(
                f"\n{m.name}.{out.name}: worst abs {worst_abs:.3g}, worst rel {worst_rel:.3g} "
                f"(elements >= 1e-3 of the scale {scale:.3g})"
            )
        assert worst_abs <= 1e-4 * scale + 1e-6, (worst_abs, scale)


@pytest.mark.parametrize("target", ["xdna2", "intel-npu4"])
@pytest.mark.parametrize("m", params())
def test_plans_for_both_npu_targets(
    m: RealModel, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    imp = _imported(m)
    p = plan(imp.program, target, constants=imp.weights)  # the weights are known: checked
    assert all(isinstance(r, Refusal) and isinstance(r.kind, RefusalKind) for r in p.refusals)
    kinds = sorted({r.kind.value for r in p.refusals})
    with capsys.disabled():
        total = len(p.legalized.eqns)  # the program admission ran on
        state = "admitted" if p.admitted else f"{len(p.refusals)} refusals: {', '.join(kinds)}"
        print(f"\n{m.name} on {target}: {len(p.admissions)} of {total} equations; {state}")


@pytest.mark.parametrize("device", ["vpu-cpu", "xdna-host"])
@pytest.mark.parametrize("m", params())
def test_partitioned_run_on_the_stand_ins(
    m: RealModel, device: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Host spans on the compiled host device, as ``poot run --partition`` runs them by
    default (issue 27), each span's results checked against the oracle within its contract."""
    imp = _imported(m)
    dev = make_device(device)
    host = host_device(dev.target, "compiled")
    try:
        report = run_program(
            imp.program,
            dev,
            device,
            inputs=[_feed(m, imp)],
            partition=True,
            cache_dir=tmp_path,
            host=host,
        )
    except PootError as err:
        # a typed refusal at run time (an FP16 stand-in meets a value FP16 cannot hold): the
        # model's fact, reported, not a failure of the suite; but a weight refused at upload
        # or at bind (outside a domain) was known when planning, so the plan should have
        # refused it (and the partition routed around it): plan and run disagree
        assert not isinstance(err, NarrowingRangeUpload), str(err)
        assert not (isinstance(err, DomainError) and err.argument in imp.weights), str(err)
        with capsys.disabled():
            print(f"\n{m.name} on {device}: refused at run time: {type(err).__name__}: {err}")
        return
    finally:
        dev.close()
        if host is not None:
            host.close()
    with capsys.disabled():
        if report.spans:
            on = [s for s in report.spans if s.device]
            moved = sum(len(s.eqns) for s in on)
            compiled = sum(h is not None for h in report.hosts)
            state = (
                f"{len(on)} device spans of {len(report.spans)}, {moved} equations on device, "
                f"{compiled} of {len(report.spans) - len(on)} host spans compiled"
            )
        else:
            state = "admitted whole: one program on the device"
        print(f"\n{m.name} on {device}: {state}, ok={report.ok}")
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"


@pytest.mark.parametrize("m", params())
def test_what_plan_admits_whole_on_intel_runs_on_vpu_cpu(
    m: RealModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``poot plan`` and ``poot run`` agree: a model the plan admits whole (its weights
    checked) runs whole on the FP16 stand-in without a refusal at upload (a causal mask of
    finfo.min, a max pool's -inf padding as a weight: both were admitted, then refused)."""
    imp = _imported(m)
    p = plan(imp.program, "intel-npu4", constants=imp.weights)
    if not p.admitted:
        with capsys.disabled():
            print(f"\n{m.name}: refused whole on intel-npu4 ({len(p.refusals)}): not run whole")
        return
    dev = make_device("vpu-cpu")
    try:
        report = run_program(
            imp.program, dev, "vpu-cpu", inputs=[_feed(m, imp)], cache_dir=tmp_path
        )
    except NarrowingRangeUpload as err:  # the disagreement this test exists for
        pytest.fail(f"admitted when planning, refused at upload: {err}")
    except PootError as err:  # a value met while running (an input, an intermediate): typed
        with capsys.disabled():
            print(f"\n{m.name}: admitted whole, refused while running: {type(err).__name__}")
        return
    finally:
        dev.close()
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"


def test_a_mobilenet_v3_imports_in_under_500_equations() -> None:
    # the conv primitives: a depthwise convolution is one equation, not one per group (the
    # im2col importer wrote 15,596 for a MobileNetV3-small, issue 28)
    m = next(m for m in MODELS if m.name == "mobilenet_v3_small")
    if m.missing() is not None:
        pytest.skip(str(m.missing()))
    import onnx

    program = _imported(m).program
    nodes = sum(n.op_type == "Conv" for n in onnx.load(m.onnx_source()).graph.node)
    convs = sum(e.prim is Prim.CONV for e in program.eqns)
    assert convs == nodes and len(program.eqns) < 500, (convs, nodes, len(program.eqns))


def test_gpt2_masked_scores_run_on_xdna_host_as_planned(tmp_path: Path) -> None:
    """GPT-2's causal mask, folded by torch to a constant of finfo(float32).min, is known when
    planning: the plan for xdna2 checks it (``constants``) and admits its adds to the scores
    (a score plus -FLT_MAX rounds to -FLT_MAX, which the add's result guard flags only for two
    operands that can overflow), and the partitioned run on xdna-host computes them on the
    device without a refusal, within its contract: ``poot plan`` and ``poot run`` agree (the
    device once flagged those adds while the plan admitted them)."""
    m = next(m for m in MODELS if m.name == "gpt2_tiny")
    if m.missing() is not None:
        pytest.skip(str(m.missing()))
    imp = _imported(m)
    program = imp.program
    (mask,) = [n for n, v in imp.weights.items() if v.dtype.kind == "f" and v.min() < -1e38]
    ids = {a.var.id for a in program.args if a.name == mask}
    moved = {e.out.id for e in program.eqns if any(getattr(x, "id", None) in ids for x in e.inputs)}
    adds = [
        i
        for i, e in enumerate(program.eqns)
        if e.prim is Prim.ADD and any(getattr(x, "id", None) in moved for x in e.inputs)
    ]
    assert len(adds) == 2  # one per layer
    p = plan(program, "xdna2", constants=imp.weights)
    assert not {r.eqn for r in p.refusals} & set(adds), [str(r) for r in p.refusals]
    assert {r.kind for r in p.refusals} <= {RefusalKind.REGION_LIMIT}
    dev = make_device("xdna-host")
    try:
        report = run_program(
            program, dev, "xdna-host", inputs=[_feed(m, imp)], partition=True, cache_dir=tmp_path
        )
    finally:
        dev.close()
    assert report.ok, report.steps[0].worst if report.steps else "no step ran"
    on_device = {i for s in report.spans if s.device for i in s.eqns}
    assert set(adds) <= on_device
