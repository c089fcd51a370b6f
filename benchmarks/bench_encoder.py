"""Oracle on a BERT-shaped encoder (batch 8 x 128 tokens): evaluate against ONNX Runtime and numpy.

The encoder is made with the Builder (the ONNX issue's real-model suite is not here yet): two
pre-LayerNorm layers of hidden 256, 4 heads of 64, a 1024-wide GELU (erf) feed-forward, every
weight a slot of F32. The same computation is run three ways on the same inputs in the same
run: the oracle's ``evaluate`` (float64 matmul accumulation, the vectorised ``erf``), a plain
numpy float32 program (float32 BLAS; its erf is the oracle's, since numpy has none), and, when
``onnxruntime`` is installed, ONNX Runtime on the same graph written with ``onnx.helper``
(default session options: its own thread count, like numpy's BLAS here). Where the oracle's
time goes is reported from the same shapes: its float64 matmuls and its erf alone.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from poot_ir import Builder, DType, Program, Var, evaluate
from poot_ir.erf import erf64

from benchmarks.harness import Figure, alternating

B, S, H, NH, FF, LAYERS = 8, 128, 256, 4, 1024, 2
N, DH = B * S, H // NH
F32 = DType.F32


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    w: dict[str, np.ndarray] = {}
    for i in range(LAYERS):
        for name, shape in (("wq", (H, H)), ("wk", (H, H)), ("wv", (H, H)), ("wo", (H, H))):
            w[f"{name}{i}"] = (rng.standard_normal(shape) / np.sqrt(H)).astype(np.float32)
        w[f"w1_{i}"] = (rng.standard_normal((H, FF)) / np.sqrt(H)).astype(np.float32)
        w[f"w2_{i}"] = (rng.standard_normal((FF, H)) / np.sqrt(FF)).astype(np.float32)
        for ln in ("a", "b"):
            w[f"g{ln}{i}"] = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
            w[f"beta{ln}{i}"] = (0.1 * rng.standard_normal(H)).astype(np.float32)
    return w


def program() -> Program:
    b = Builder("encoder")
    x = b.slot("x", F32, (N, H))

    def layernorm(v: Var, g: Var, beta: Var) -> Var:
        mean = b.reshape(b.mul(b.reduce_sum(v, 1), 1.0 / H), (N, 1))
        c = b.sub(v, mean)
        var = b.reshape(b.mul(b.reduce_sum(b.mul(c, c), 1), 1.0 / H), (N, 1))
        return b.add(b.mul(b.mul(c, b.recip(b.sqrt(b.add(var, 1e-5)))), g), beta)

    def heads(v: Var) -> Var:  # (N, H) -> (B * NH, S, DH)
        return b.reshape(b.transpose(b.reshape(v, (B, S, NH, DH)), (0, 2, 1, 3)), (B * NH, S, DH))

    for i in range(LAYERS):
        w = {n: b.slot(f"{n}{i}", F32, (H, H)) for n in ("wq", "wk", "wv", "wo")}
        w1, w2 = b.slot(f"w1_{i}", F32, (H, FF)), b.slot(f"w2_{i}", F32, (FF, H))
        ga, ba = b.slot(f"ga{i}", F32, (H,)), b.slot(f"betaa{i}", F32, (H,))
        gb, bb = b.slot(f"gb{i}", F32, (H,)), b.slot(f"betab{i}", F32, (H,))
        h = layernorm(x, ga, ba)
        q, k, v = (heads(b.matmul(h, w[n])) for n in ("wq", "wk", "wv"))
        scores = b.mul(b.matmul(q, b.transpose(k, (0, 2, 1))), 1.0 / math.sqrt(DH))
        m = b.reshape(b.reduce_max(scores, 2), (B * NH, S, 1))
        e = b.exp(b.sub(scores, m))
        p = b.div(e, b.reshape(b.reduce_sum(e, 2), (B * NH, S, 1)))
        ctx = b.reshape(
            b.transpose(b.reshape(b.matmul(p, v), (B, NH, S, DH)), (0, 2, 1, 3)), (N, H)
        )
        x = b.add(x, b.matmul(ctx, w["wo"]))
        f = b.matmul(layernorm(x, gb, bb), w1)
        gelu = b.mul(b.mul(f, 0.5), b.add(b.erf(b.mul(f, 1.0 / math.sqrt(2.0))), 1.0))
        x = b.add(x, b.matmul(gelu, w2))
    b.output("y", x)
    return b.build()


def _numpy(inputs: dict[str, np.ndarray]) -> np.ndarray:
    f32 = np.float32
    x = inputs["x"]

    def layernorm(v: np.ndarray, g: np.ndarray, beta: np.ndarray) -> np.ndarray:
        c = v - v.mean(axis=1, keepdims=True, dtype=f32)
        var = (c * c).mean(axis=1, keepdims=True, dtype=f32)
        out: np.ndarray = c / np.sqrt(var + f32(1e-5)) * g + beta
        return out

    def heads(v: np.ndarray) -> np.ndarray:
        return v.reshape(B, S, NH, DH).transpose(0, 2, 1, 3).reshape(B * NH, S, DH)

    for i in range(LAYERS):
        h = layernorm(x, inputs[f"ga{i}"], inputs[f"betaa{i}"])
        q, k, v = (heads(h @ inputs[f"{n}{i}"]) for n in ("wq", "wk", "wv"))
        scores = (q @ k.transpose(0, 2, 1)) * f32(1.0 / math.sqrt(DH))
        e = np.exp(scores - scores.max(axis=2, keepdims=True))
        p = e / e.sum(axis=2, keepdims=True)
        ctx = (p @ v).reshape(B, NH, S, DH).transpose(0, 2, 1, 3).reshape(N, H)
        x = x + ctx @ inputs[f"wo{i}"]
        f = layernorm(x, inputs[f"gb{i}"], inputs[f"betab{i}"]) @ inputs[f"w1_{i}"]
        erf = erf64(f * f32(1.0 / math.sqrt(2.0))).astype(f32)
        x = x + (f * f32(0.5) * (erf + f32(1))) @ inputs[f"w2_{i}"]
    return x


def _onnxruntime(
    inputs: dict[str, np.ndarray], threads: int | None
) -> Callable[[], np.ndarray] | None:
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    nodes, inits = [], []
    count = iter(range(10**6))

    def node(op: str, ins: list[str], **attrs: Any) -> str:
        out = f"t{next(count)}"
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def const(name: str, value: np.ndarray) -> str:
        inits.append(
            helper.make_tensor(
                name,
                TensorProto.FLOAT if value.dtype == np.float32 else TensorProto.INT64,
                value.shape,
                value.flatten().tolist(),
            )
        )
        return name

    shape_heads = const("shape_heads", np.array([B, S, NH, DH], np.int64))
    shape_bh = const("shape_bh", np.array([B * NH, S, DH], np.int64))
    shape_bnsd = const("shape_bnsd", np.array([B, NH, S, DH], np.int64))
    shape_nh = const("shape_nh", np.array([N, H], np.int64))
    scale = const("scale", np.array(1.0 / math.sqrt(DH), np.float32))
    half, one = const("half", np.array(0.5, np.float32)), const("one", np.array(1.0, np.float32))
    rsqrt2 = const("rsqrt2", np.array(1.0 / math.sqrt(2.0), np.float32))
    x = "x"

    def heads(v: str) -> str:
        r = node("Reshape", [v, shape_heads])
        return node("Reshape", [node("Transpose", [r], perm=[0, 2, 1, 3]), shape_bh])

    for i in range(LAYERS):
        h = node("LayerNormalization", [x, f"ga{i}", f"betaa{i}"], axis=-1, epsilon=1e-5)
        q, k, v = (heads(node("MatMul", [h, f"{n}{i}"])) for n in ("wq", "wk", "wv"))
        kt = node("Transpose", [k], perm=[0, 2, 1])
        p = node("Softmax", [node("Mul", [node("MatMul", [q, kt]), scale])], axis=-1)
        ctx = node("Reshape", [node("MatMul", [p, v]), shape_bnsd])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), shape_nh])
        x = node("Add", [x, node("MatMul", [ctx, f"wo{i}"])])
        f = node(
            "MatMul",
            [
                node("LayerNormalization", [x, f"gb{i}", f"betab{i}"], axis=-1, epsilon=1e-5),
                f"w1_{i}",
            ],
        )
        erf = node("Erf", [node("Mul", [f, rsqrt2])])
        gelu = node("Mul", [node("Mul", [f, half]), node("Add", [erf, one])])
        x = node("Add", [x, node("MatMul", [gelu, f"w2_{i}"])])
    graph_inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
        for n, a in inputs.items()
    ]
    out = helper.make_tensor_value_info(x, TensorProto.FLOAT, [N, H])
    graph = helper.make_graph(nodes, "encoder", graph_inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()  # the defaults, but the thread count when one is asked for
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return lambda: session.run([x], inputs)[0]


def measure(threads: int | None) -> dict[str, float]:
    """Every time (seconds) and error of one configuration: ``threads`` None is each library's
    default thread count (numpy's BLAS and ONNX Runtime both take the machine's cores)."""
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((N, H)).astype(np.float32), **_weights(rng)}
    prog = program()
    want = evaluate(prog, inputs)["y"]
    fns: dict[str, Callable[[], object]] = {
        "oracle": lambda: evaluate(prog, inputs),
        "numpy": lambda: _numpy(inputs),
    }
    ort_run = _onnxruntime(inputs, threads)
    if ort_run is not None:
        fns["ort"] = ort_run
    t = alternating(fns, rounds=3, calls=1, warmup=1)
    t["err_numpy"] = float(np.abs(_numpy(inputs) - want).max())
    if ort_run is not None:
        t["err_ort"] = float(np.abs(ort_run() - want).max())
    # where the oracle's time goes, on the same shapes
    f = rng.standard_normal((N, FF))
    Shapes = tuple[tuple[int, ...], tuple[int, ...]]
    mats: list[Shapes] = [((N, H), (H, H)) for _ in range(4)]
    mats += [((N, H), (H, FF)), ((N, FF), (FF, H))]
    mats += [((B * NH, S, DH), (B * NH, DH, S)), ((B * NH, S, S), (B * NH, S, DH))]
    arrays = [
        (rng.standard_normal(a).astype(np.float32), rng.standard_normal(c).astype(np.float32))
        for a, c in mats
    ]

    def matmuls64() -> None:
        for _ in range(LAYERS):
            for a, c in arrays:
                np.matmul(a.astype(np.float64), c.astype(np.float64)).astype(np.float32)

    f32, out32 = f.astype(np.float32), np.empty(f.shape, np.float32)

    def erfs() -> None:  # as the oracle's F32 erf runs: float32 in, rounded once into out
        for _ in range(LAYERS):
            erf64(f32, out=out32)

    t.update(alternating({"matmul64": matmuls64, "erf": erfs}, rounds=3, calls=1, warmup=1))
    return t


_ONE_THREAD = """
import json, sys
sys.path.insert(0, {root!r})
from benchmarks.bench_encoder import measure
print(json.dumps(measure(1)))
"""


def run() -> list[Figure]:
    figures: list[Figure] = []
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    one = json.loads(
        subprocess.run(
            [sys.executable, "-c", _ONE_THREAD.format(root=root)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
    )
    for label, t in (("default threads", measure(None)), ("1 thread each", one)):
        figures += [
            Figure(
                f"[{label}] oracle evaluate, encoder {B}x{S}, hidden {H}, {LAYERS} layers",
                t["oracle"] * 1e3,
                "ms",
            ),
            Figure(
                f"[{label}] numpy float32 (float32 BLAS, the oracle's erf)", t["numpy"] * 1e3, "ms"
            ),
            Figure(f"[{label}] oracle / numpy float32", t["oracle"] / t["numpy"], "x"),
            Figure(f"[{label}]   oracle part: float64 matmuls", t["matmul64"] * 1e3, "ms"),
            Figure(f"[{label}]   oracle part: erf", t["erf"] * 1e3, "ms"),
            Figure(f"[{label}] max |numpy - oracle|", t["err_numpy"], ""),
        ]
        if "ort" in t:
            figures += [
                Figure(f"[{label}] onnxruntime", t["ort"] * 1e3, "ms"),
                Figure(
                    f"[{label}] oracle / onnxruntime",
                    t["oracle"] / t["ort"],
                    "x",
                    aim="<= 1.5 (issue 15)",
                ),
                Figure(f"[{label}] max |onnxruntime - oracle|", t["err_ort"], ""),
                # the floor the documented float64-matmul promise sets: its GEMMs alone (with
                # their float32 -> float64 -> float32 conversions) against ORT's whole run
                Figure(
                    f"[{label}] floor: float64 matmuls alone / onnxruntime",
                    t["matmul64"] / t["ort"],
                    "x",
                ),
                Figure(
                    f"[{label}] oracle without its float64 matmuls / onnxruntime",
                    (t["oracle"] - t["matmul64"]) / t["ort"],
                    "x",
                ),
            ]
        else:
            figures.append(Figure(f"[{label}] onnxruntime", 0, "", note="not installed: no ratio"))
    return figures
