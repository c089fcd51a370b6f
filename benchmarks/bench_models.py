"""Real ONNX models (the ``models`` dependency group): equations per model (the conv and window
primitives against the im2col importer before them), import time, the oracle's time against
ONNX Runtime's, and on the vpu-cpu stand-in the compile and the warm step against ONNX Runtime
on one thread and OpenVINO on the CPU running the same file, as ratios measured in one run.

Skipped, with the reason, when the group is not installed (``uv sync --group models``); an
exported model not yet exported is skipped with the command that makes it.
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from poot_ir import evaluate
from poot_onnx import Imported, import_model

from benchmarks.harness import Figure, alternating, median_time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.catalog import MODELS, RealModel, available

#: Equations per model as the importer before the conv and window primitives wrote them (an
#: im2col gather and matmuls per convolution, one per group): measured with the poot_ir and
#: poot_onnx sources of commit 7e46406^1 on these files and shapes (2026-12-02).
BEFORE = {
    "magika": 98,
    "ocr_det": 15817,
    "ocr_cls": 6074,
    "ocr_rec": 19436,
    "silero_vad": 183,
    "ddddocr": 1378,
    "mobilenet_v3_small": 15559,
    "detector": 294,
    "gpt2_tiny": 212,
}

#: the models also timed on vpu-cpu (seconds each to compile; the OCR recognizer's minutes
#: of partitioned spans stay out of a benchmark run)
ON_VPU = ("mobilenet_v3_small", "detector", "gpt2_tiny", "ocr_cls", "magika")
#: the convolutional models whose xdna2 designs are weighed for host traffic
ON_XDNA = ("mobilenet_v3_small", "detector", "ocr_det", "ocr_cls")


def run() -> list[Figure]:
    why = available()
    if why is not None:
        return [Figure("real models", 0, "skipped", note=why)]
    import onnxruntime as ort

    figures = []
    for m in MODELS:
        missing = m.missing()
        if missing is not None:  # an exported model not made here yet
            figures.append(Figure(f"{m.name}: skipped", 0, "", note=missing))
            continue
        t0 = time.perf_counter()
        imp = import_model(m.model(), shapes=m.shapes, constants=m.constants)
        seconds = time.perf_counter() - t0  # one cold import: what a user waits for
        n = len(imp.program.eqns)
        figures.append(Figure(f"{m.name}: import ({n} eqns)", seconds, "s"))
        if m.name in BEFORE:
            before = BEFORE[m.name]
            figures.append(
                Figure(
                    f"{m.name}: equations / im2col importer's",
                    n / before,
                    "x",
                    note=f"{n} vs {before}",
                )
            )
        ins = m.inputs()
        feed = {**imp.weights, **{imp.inputs[k]: v for k, v in ins.items()}}
        session = ort.InferenceSession(m.onnx_source(), providers=["CPUExecutionProvider"])
        program = imp.program
        oracle = median_time(functools.partial(evaluate, program, feed), repeat=3)
        ort_ins = {**ins, **m.constants}
        runtime = median_time(functools.partial(session.run, None, ort_ins), repeat=7)
        figures.append(
            Figure(f"{m.name}: oracle / onnxruntime", oracle / runtime, "x", note="same inputs")
        )
        if m.name in ON_VPU:
            figures.extend(_on_vpu_cpu(m, imp))
        if m.name in ON_XDNA:
            figures.append(_xdna_traffic(m, imp))
    return figures


def _xdna_traffic(m: RealModel, imp: Imported) -> Figure:
    """The bytes one step of the model partitioned for xdna2 moves between host memory and the
    array, over its device spans' designs (``poot_npu.xdna_host.traffic``: a property of the
    design, which the NPU runs as the stand-in does), against each span's arguments read once
    and results written once: what a convolution's windows, made by host copies, and values
    handed between regions cost past the minimum. Designed, not run."""
    from poot_codegen.xdna import design_program
    from poot_npu.xdna_host import traffic
    from poot_planner.partition import partition

    plans = [s.plan for s in partition(imp.program, "xdna2") if s.device and s.plan is not None]
    stats = [traffic(design_program(p)) for p in plans]
    moved = sum(t.host_bytes for t in stats)
    minimum = sum(t.min_host_bytes for t in stats)
    return Figure(
        f"{m.name}: xdna2 partition host bytes per step / minimum",
        moved / minimum if minimum else 1.0,
        "x",
        note=f"{moved / 2**20:.1f} MiB vs {minimum / 2**20:.1f} MiB over {len(plans)} device spans",
    )


def _on_vpu_cpu(m: RealModel, imp: Imported) -> list[Figure]:
    """The Engine on vpu-cpu (planned with the model's weights; partitioned where the plan
    refuses a part): the compile (a fresh cache) and the warm step, against ONNX Runtime on one
    thread and OpenVINO's CPU plugin on the same ONNX file (its default configuration, F32)."""
    import onnxruntime as ort
    import openvino as ov
    from poot_engine import Engine
    from poot_npu.registry import make_device
    from poot_planner import plan

    ins = m.inputs()
    ort_ins = {**ins, **m.constants}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    one = ort.InferenceSession(str(m.file()), opts, providers=["CPUExecutionProvider"])
    ort1 = median_time(functools.partial(one.run, None, ort_ins), repeat=15)
    compiled = ov.Core().compile_model(str(m.file()), "CPU")
    request = compiled.create_infer_request()
    ov_ins = {k: v for k, v in ort_ins.items() if k in {i.any_name for i in compiled.inputs}}
    ov_cpu = median_time(functools.partial(request.infer, ov_ins), repeat=15)

    storage = {a.name: a for a in imp.program.args}
    slots = {
        imp.inputs[k]: np.asarray(v).astype(storage[imp.inputs[k]].var.dtype.numpy)
        for k, v in ins.items()
    }
    p = plan(imp.program, "intel-npu4", constants=imp.weights)
    how = "whole" if p.admitted else "partitioned"
    device = make_device("vpu-cpu")
    with tempfile.TemporaryDirectory() as cache, Engine(device, cache) as engine:
        weights = engine.load_weights(imp.weights, host_only=_host_weights(p))
        t0 = time.perf_counter()
        add = engine.add_entry if p.admitted else engine.add_partitioned
        entry = add(p, weights)
        engine.step(entry, slots)  # the first step records
        compile_s = time.perf_counter() - t0
        step = median_time(functools.partial(engine.step, entry, slots), repeat=15)
        # CPU time of the whole process (the plugin's worker threads too: the stand-in uses
        # every core, ONNX Runtime here one), which a loaded machine does not inflate
        cpu = alternating(
            {
                "poot": functools.partial(engine.step, entry, slots),
                "ort": functools.partial(one.run, None, ort_ins),
            },
            rounds=7,
            calls=5,
            clock=time.process_time,
            warmup=2,
        )
    figures = []
    if p.admitted:  # where the stand-in's time goes: FP16 emulation rounds each equation
        from poot_codegen.intel.graph import lower
        from poot_planner.fp16.narrowing import intermediate_guards

        # with the weights baked in as constants, as the device lowers an entry
        emulated = len(lower(p.program, emulate_f16=True, constants=imp.weights).get_ops())
        plain = len(lower(p.program, constants=imp.weights).get_ops())
        guards = (
            intermediate_guards(p.legalized, p.narrowing, p.score_bound)
            if p.narrowing is not None
            else ()
        )
        # and with the in-graph FP16 guard, as the device compiles it
        guarded = lower(p.program, emulate_f16=True, guards=guards, constants=imp.weights)
        figures.append(
            Figure(
                f"{m.name}: vpu-cpu graph ops / without FP16 emulation",
                emulated / plain,
                "x",
                note=f"{emulated} vs {plain}; {len(guarded.get_ops())} with its FP16 guard",
            )
        )
    return [
        *figures,
        Figure(
            f"{m.name}: vpu-cpu compile and first step ({how})",
            compile_s,
            "s",
            aim="< 2 s" if m.name == "mobilenet_v3_small" else "",
        ),
        Figure(
            f"{m.name}: vpu-cpu warm step / onnxruntime 1 thread",
            step / ort1,
            "x",
            aim="< 5x" if m.name == "mobilenet_v3_small" else "",
            note=f"{step * 1e3:.2f} ms vs {ort1 * 1e3:.2f} ms",
        ),
        Figure(
            f"{m.name}: vpu-cpu warm step CPU time / onnxruntime 1 thread's",
            cpu["poot"] / cpu["ort"],
            "x",
            note=f"{cpu['poot'] * 1e3:.2f} ms vs {cpu['ort'] * 1e3:.2f} ms of CPU",
        ),
        Figure(
            f"{m.name}: vpu-cpu warm step / openvino CPU",
            step / ov_cpu,
            "x",
            note=f"{step * 1e3:.2f} ms vs {ov_cpu * 1e3:.2f} ms",
        ),
    ]


def _host_weights(p: object) -> set[str]:
    """The weights the plan refused for their range: a partition's host spans read them."""
    refusals = getattr(p, "refusals", ())
    return {str(n) for r in refusals if (n := r.fact("constant")) is not None}
