"""The compiled host device (``HostDevice``) against ONNX Runtime, and a partition's host spans on
it against the same spans on the oracle; every figure a ratio of two timings in the same run.

1. Whole program: ``Engine.step`` on ``HostDevice`` (one compiled OpenVINO graph in F32) against
   ``InferenceSession.run`` of the same ONNX model on the same inputs, both pinned to one thread
   and both at their default thread counts, beside the floor: OpenVINO's CPU plugin compiling
   the ONNX file itself (F32 kept, latency hint, the same threads) against the same run (a
   file its ONNX frontend cannot read says why), for each real model of the suite that is here
   (``models/catalog.py``, the ``models`` group) and for a BERT-class encoder layer
   (``benchmarks/encoder_onnx``: 8 x 128 tokens, hidden 256, 4 heads, a 1024-wide erf MLP). A model the host target refuses in part
   runs partitioned on the host device (its refused equations on the oracle), and says so.
2. Partitioned step on the stand-ins (xdna-host, vpu-cpu): the same entry with its host spans on
   the compiled host device against on the oracle (``host_spans="oracle"``), per model.
   ``BENCH_HOST_PARTITIONED`` (comma-separated model names, default ``ocr_cls,encoder``)
   picks the models: xdna-host builds C kernels per region, minutes for a large model.

Skipped, with the reason, where the ``models`` group is not installed.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from poot_engine import Engine
from poot_ir import PootError, Program, Storage
from poot_npu.host import HOST_CONFIG, HostDevice
from poot_npu.registry import make_device
from poot_planner import plan

from benchmarks.harness import Figure, alternating, median_time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPEAT = 7


class _Case:
    """A program with its weights and step inputs, and the ONNX file and feed behind it."""

    def __init__(
        self,
        name: str,
        program: Program,
        feed: dict[str, np.ndarray],
        onnx: str | bytes | None,
        onnx_feed: dict[str, np.ndarray],
    ) -> None:
        self.name, self.program, self.onnx, self.onnx_feed = name, program, onnx, onnx_feed
        kinds = {a.name: a.storage for a in program.args}
        self.weights = {n: v for n, v in feed.items() if kinds[n] is Storage.WEIGHT}
        self.states = {n: v for n, v in feed.items() if kinds[n] is Storage.STATE}
        self.slots = {n: v for n, v in feed.items() if kinds[n] is Storage.SLOT}


def _cases(tmp: Path) -> tuple[list[_Case], list[Figure]]:
    from poot_onnx import import_model

    from models.catalog import MODELS, available

    notes: list[Figure] = []
    cases: list[_Case] = []
    why = available()
    if why is None:
        for m in MODELS:
            missing = m.missing()
            if missing is not None:
                notes.append(Figure(f"{m.name}: skipped", 0, "", note=missing))
                continue
            imp = import_model(m.model(), shapes=m.shapes, constants=m.constants)
            ins = m.inputs()
            feed = {**imp.weights, **{imp.inputs[k]: v for k, v in ins.items()}}
            cases.append(_Case(m.name, imp.program, feed, m.onnx_source(), {**ins, **m.constants}))
    else:
        notes.append(Figure("real models", 0, "skipped", note=why))
    cases.append(_encoder(tmp))
    return cases, notes


def _encoder(tmp: Path) -> _Case:
    """The BERT-class encoder layer (``benchmarks/encoder_onnx``, the legalization tests'
    ``tests/encoder_model.py`` as an export ships it) at a sentence encoder's size, imported."""
    from poot_onnx import import_model

    from benchmarks.encoder_onnx import encoder_feed, encoder_onnx

    path = tmp / "encoder.onnx"
    path.write_bytes(encoder_onnx(batch=8, seq=128, hidden=256, heads=4, ffn=1024, vocab=1000))
    ins = encoder_feed(batch=8, seq=128, vocab=1000)
    imp = import_model(path)
    feed = {**imp.weights, **{imp.inputs[k]: v for k, v in ins.items()}}
    return _Case("encoder", imp.program, feed, str(path), ins)


def _ort(source: str | bytes, threads: int | None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _openvino(source: str | bytes, feed: dict[str, np.ndarray], threads: int | None) -> Any:
    """The raw-OpenVINO floor: the CPU plugin compiling the ONNX file itself (its own frontend
    and transformations, poot's graph not involved) with the host device's options (F32 kept,
    threads unpinned; snippets at the plugin's default) and the latency hint, shapes fixed to ``feed``'s; a call runs it once. Or the
    frontend's or plugin's refusal, as text."""
    import openvino as ov

    core = ov.Core()
    config = {**HOST_CONFIG, "PERFORMANCE_HINT": "LATENCY"}
    config.pop("SNIPPETS_MODE")  # the plugin's own default: the floor as OpenVINO ships it
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="poot-bench-ov-") as tmp:
            path = source
            if isinstance(source, bytes):
                path = str(Path(tmp) / "model.onnx")
                Path(path).write_bytes(source)
            model = core.read_model(path)
        ports = {p.get_any_name(): p for p in model.inputs}
        named = {n: next(k for k in feed if k in p.get_names()) for n, p in ports.items()}
        model.reshape({n: ov.PartialShape(list(feed[k].shape)) for n, k in named.items()})
        request = core.compile_model(model, "CPU", config).create_infer_request()
    except (RuntimeError, StopIteration) as err:
        return f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:100]}"
    inputs = {n: feed[k] for n, k in named.items()}
    return functools.partial(request.infer, inputs)


def _host_step(case: _Case, cache: Path, threads: int | None) -> tuple[Callable[[], Any], Engine]:
    engine = Engine(HostDevice(threads=threads), cache)
    weights = engine.load_weights(case.weights)
    p = plan(case.program, "host-cpu")
    add = engine.add_entry if p.admitted else engine.add_partitioned
    entry = add(p, weights, case.states)
    engine.step(entry, case.slots)  # the recording
    return (lambda: engine.step(entry, case.slots)), engine


def whole(case: _Case, cache: Path) -> list[Figure]:
    """The host step, ONNX Runtime's run and the raw-OpenVINO floor, taking turns within each
    round (``alternating``) so a busy neighbour hits all three alike."""
    p = plan(case.program, "host-cpu")
    how = "" if p.admitted else f" (partitioned: {len(p.refusals)} refused on the oracle)"
    figures = []
    for threads, label in ((1, "1 thread"), (None, "default threads")):
        step, engine = _host_step(case, cache, threads)
        try:
            if case.onnx is None:
                t_host = median_time(step, repeat=REPEAT)
                figures.append(Figure(f"{case.name}: host step, {label}", t_host * 1e3, "ms"))
                continue
            session = _ort(case.onnx, threads)
            runs: dict[str, Callable[[], object]] = {
                "host": step,
                "ort": functools.partial(session.run, None, case.onnx_feed),
            }
            floor = _openvino(case.onnx, case.onnx_feed, threads)
            if isinstance(floor, str):
                figures.append(
                    Figure(f"{case.name}: openvino on the ONNX file, {label}", 0, "", note=floor)
                )
            else:
                runs["ov"] = floor
            t = alternating(runs, rounds=REPEAT, calls=_calls(step), warmup=2)
            # at one thread, the CPU time too: the work, whatever a loaded machine's scheduler
            # does to a hand-off between threads (OpenVINO runs on a worker, ONNX Runtime on
            # the caller)
            cpu = (
                alternating(runs, REPEAT, _calls(step), clock=time.process_time, warmup=2)
                if threads == 1
                else None
            )
        finally:
            engine.close()
        if "ov" in t:
            figures.append(
                Figure(
                    f"{case.name}: openvino on the ONNX file / onnxruntime, {label}",
                    t["ov"] / t["ort"],
                    "x",
                    note=f"the floor: {t['ov'] * 1e3:.2f} ms vs {t['ort'] * 1e3:.2f} ms",
                )
            )
        figures.append(
            Figure(
                f"{case.name}: host / onnxruntime, {label}{how}",
                t["host"] / t["ort"],
                "x",
                aim="<= 1.5 (issue 27)",
                note=f"{t['host'] * 1e3:.2f} ms vs {t['ort'] * 1e3:.2f} ms",
            )
        )
        if cpu is not None:
            floor_cpu = f"; the floor {cpu['ov'] / cpu['ort']:.2f}x" if "ov" in cpu else ""
            figures.append(
                Figure(
                    f"{case.name}: host / onnxruntime, {label}, CPU time",
                    cpu["host"] / cpu["ort"],
                    "x",
                    note=f"{cpu['host'] * 1e3:.2f} ms vs {cpu['ort'] * 1e3:.2f} ms{floor_cpu}",
                )
            )
    return figures


def _calls(step: Callable[[], object]) -> int:
    """Calls per round: about 20 ms of host steps, at least one."""
    t0 = time.perf_counter()
    step()
    return max(1, int(0.02 / max(time.perf_counter() - t0, 1e-6)))


def partitioned(case: _Case, stand_in: str, cache: Path) -> list[Figure]:
    """The partitioned step on ``stand_in`` with host spans compiled against on the oracle."""
    device = make_device(stand_in)
    if plan(case.program, device.target).admitted:
        device.close()
        return [Figure(f"{case.name} on {stand_in}: admitted whole, no host span", 0, "")]
    engine = Engine(device, cache, host=HostDevice())
    try:
        weights = engine.load_weights(case.weights)
        entries = {
            k: engine.add_partitioned(case.program, weights, case.states, host_spans=k)
            for k in ("compiled", "oracle")
        }
        part = engine.partitioned(entries["compiled"])
        assert part is not None
        hosted = sum(h is not None for h in part.hosts)
        host_spans = sum(not s.device for s in part.spans)
        steps = {k: (lambda e=e: engine.step(e, case.slots)) for k, e in entries.items()}
        try:
            steps["compiled"]()  # the recordings (and a stand-in's refusal) before timing
            t = {k: median_time(f, repeat=5) for k, f in steps.items()}
        except PootError as err:  # a stand-in's own refusal of these inputs, typed
            note = f"{type(err).__name__}: {str(err)[:120]}"
            return [Figure(f"{case.name} on {stand_in}: refused", 0, "", note=note)]
    finally:
        engine.close()
    figures = [
        Figure(
            f"{case.name} on {stand_in}: step, host spans compiled / on the oracle",
            t["compiled"] / t["oracle"],
            "x",
            note=f"{hosted} of {host_spans} host spans compiled, "
            f"{part.oracle_steps} host-span steps the oracle answered (a boundary value "
            f"outside a domain); {t['compiled'] * 1e3:.1f} ms vs {t['oracle'] * 1e3:.1f} ms",
        )
    ]
    return figures


def run() -> list[Figure]:
    wanted = os.environ.get("BENCH_HOST_PARTITIONED", "ocr_cls,encoder").split(",")
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="poot-bench-host-") as tmp:
        cache = Path(tmp) / "cache"
        cases, notes = _cases(Path(tmp))
        figures += notes
        for case in cases:
            figures += whole(case, cache)
        for case in cases:
            if case.name in wanted:
                for stand_in in ("vpu-cpu", "xdna-host"):
                    figures += partitioned(case, stand_in, cache)
    return figures
