"""A BERT-class encoder layer written as an ONNX graph, as a sentence encoder's export ships
it: int64 ``input_ids`` and ``attention_mask``, word and position embeddings (``Gather``),
``LayerNormalization``, two-head self-attention with the ``(1 - mask) * -10000`` additive mask
(``Cast``, ``Sub``, ``Mul``, ``Unsqueeze``), ``Softmax``, an erf GELU MLP and residuals.
Weights are initializers at BERT-like scales (seeded), so the model is one file's bytes for
poot's importer, ONNX Runtime and OpenVINO alike (``benchmarks/bench_legalize_onnx``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["encoder_feed", "encoder_onnx"]


def encoder_onnx(batch: int, seq: int, hidden: int, heads: int, ffn: int, vocab: int = 96) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2**20)
    inits: list[object] = []
    nodes: list[object] = []

    def w(name: str, shape: tuple[int, ...], scale: float, base: float = 0.0) -> str:
        v = (base + scale * rng.standard_normal(shape)).astype(np.float32)
        inits.append(numpy_helper.from_array(v, name))
        return name

    def const(name: str, v: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(v, name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def dense(x: str, n: str, i: int, o: int) -> str:
        y = node("MatMul", [x, w(f"{n}.w", (i, o), 1.0 / math.sqrt(i))], f"{n}.mm")
        return node("Add", [y, w(f"{n}.b", (o,), 0.02)], f"{n}.out")

    def ln(x: str, n: str) -> str:
        g, b = w(f"{n}.g", (hidden,), 0.1, 1.0), w(f"{n}.b", (hidden,), 0.02)
        return node("LayerNormalization", [x, g, b], f"{n}.out", axis=-1, epsilon=1e-12)

    dh = hidden // heads
    one = const("one", np.array(1.0, np.float32))
    m = node("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT)
    m = node("Mul", [node("Sub", [one, m], "mask.inv"), const("big", np.array(-10000.0, np.float32))], "mask.add")  # fmt: skip
    m = node("Unsqueeze", [m, const("ax12", np.array([1, 2], np.int64))], "mask.4d")
    x = node("Gather", [w("words", (vocab, hidden), 0.5), "input_ids"], "emb", axis=0)
    x = ln(node("Add", [x, w("positions", (seq, hidden), 0.5)], "emb.pos"), "ln0")
    heads_shape = const("split", np.array([batch, seq, heads, dh], np.int64))

    def split(v: str, perm: list[int]) -> str:
        r = node("Reshape", [v, heads_shape], f"{v}.r")
        return node("Transpose", [r], f"{v}.t", perm=perm)

    q = split(dense(x, "q", hidden, hidden), [0, 2, 1, 3])
    k = split(dense(x, "k", hidden, hidden), [0, 2, 3, 1])
    v = split(dense(x, "v", hidden, hidden), [0, 2, 1, 3])
    s = node("MatMul", [q, k], "scores")
    s = node("Div", [s, const("scale", np.array(math.sqrt(dh), np.float32))], "scores.s")
    s = node("Softmax", [node("Add", [s, m], "scores.m")], "probs", axis=-1)
    c = node("Transpose", [node("MatMul", [s, v], "ctx")], "ctx.t", perm=[0, 2, 1, 3])
    c = node("Reshape", [c, const("merge", np.array([batch, seq, hidden], np.int64))], "ctx.r")
    x1 = ln(node("Add", [x, dense(c, "o", hidden, hidden)], "res1"), "ln1")
    h = dense(x1, "f1", hidden, ffn)
    g = node("Erf", [node("Div", [h, const("sqrt2", np.array(math.sqrt(2), np.float32))], "g.d")], "g.e")  # fmt: skip
    g = node("Mul", [node("Mul", [h, node("Add", [g, one], "g.a")], "g.m"), const("half", np.array(0.5, np.float32))], "g.out")  # fmt: skip
    x2 = ln(node("Add", [x1, dense(g, "f2", ffn, hidden)], "res2"), "ln2")
    nodes.append(helper.make_node("Identity", [x2], ["hidden"]))
    ints = TensorProto.INT64
    graph = helper.make_graph(
        nodes,  # type: ignore[arg-type]
        "encoder",
        [
            helper.make_tensor_value_info("input_ids", ints, [batch, seq]),
            helper.make_tensor_value_info("attention_mask", ints, [batch, seq]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [batch, seq, hidden])],
        initializer=inits,  # type: ignore[arg-type]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def encoder_feed(batch: int, seq: int, vocab: int = 96, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids and a padded 0/1 mask (every sequence but the first has trailing zeros)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    lengths = [seq] + [max(1, seq - 3 - 4 * k) for k in range(1, batch)]
    mask = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}
