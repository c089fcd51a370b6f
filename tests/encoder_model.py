"""A BERT-class encoder layer built with the Builder, as an exported sentence encoder computes
it: token and position embeddings gathered and layer-normalized, multi-head self-attention with
an additive padding mask made from the model's integer 0/1 attention mask, a GELU (erf) MLP,
residuals and layernorms. Shared by the legalization tests and ``benchmarks/bench_legalize``.

``mask_style`` is how the exported graph turns the 0/1 mask into its additive form, the forms
real models ship: ``"10000"`` (``(1 - mask) * -10000``), ``"finfo"`` (``(1 - mask) *
finfo(float32).min``), ``"inf"`` (``where(mask > 0.5, 0, -inf)``) and ``"bool"``
(``where(bool(mask), 0, -inf)`` on the integer mask, as torch's scaled dot-product attention
exports it in MiniLM: it reads no float, so a partition runs it in the host prelude).
"""

from __future__ import annotations

import math

import numpy as np
from poot_ir import Builder, DType, Program, Storage, Var, ops

F32, I32 = DType.F32, DType.I32


def _dense(b: Builder, x: Var, w: Var, bias: Var) -> Var:
    """``x @ w + bias`` over the last axis of a ``[rows, in]`` value."""
    return b.add(b.matmul(x, w), bias)


def encoder_layer(
    batch: int = 2,
    seq: int = 16,
    hidden: int = 32,
    heads: int = 2,
    ffn: int = 64,
    vocab: int = 96,
    mask_style: str = "10000",
) -> Program:
    b = Builder(f"encoder_{mask_style}")
    ids = b.slot("input_ids", I32, (batch, seq))
    mask = b.slot("attention_mask", I32, (batch, seq))
    words = b.weight("word_embeddings", F32, (vocab, hidden))
    positions = b.weight("position_embeddings", F32, (seq, hidden))
    w = {n: b.weight(n, F32, (hidden, hidden)) for n in ("wq", "wk", "wv", "wo")}
    bias = {n: b.weight(f"b{n[1]}", F32, (hidden,)) for n in ("wq", "wk", "wv", "wo")}
    w1, b1 = b.weight("w1", F32, (hidden, ffn)), b.weight("b1", F32, (ffn,))
    w2, b2 = b.weight("w2", F32, (ffn, hidden)), b.weight("b2", F32, (hidden,))
    ln = {k: (b.weight(f"{k}_g", F32, (hidden,)), b.weight(f"{k}_b", F32, (hidden,))) for k in ("ln0", "ln1", "ln2")}  # fmt: skip

    # the additive mask, [batch, 1, 1, seq], from the integer 0/1 mask
    m = b.convert(mask, F32) if mask_style != "bool" else mask
    if mask_style == "10000":
        add_mask = b.mul(b.sub(1.0, m), -10000.0)
    elif mask_style == "finfo":
        add_mask = b.mul(b.sub(1.0, m), float(np.finfo(np.float32).min))
    elif mask_style == "inf":
        add_mask = b.select(b.gt(m, 0.5), b.literal(0.0, F32), -math.inf)
    elif mask_style == "bool":
        keep = b.convert(mask, DType.BOOL)
        add_mask = b.select(keep, b.literal(0.0, F32), b.literal(-math.inf, F32))
    else:
        raise ValueError(f"unknown mask style {mask_style!r}")
    add_mask = b.reshape(add_mask, (batch, 1, 1, seq))

    x = b.add(b.gather(words, ids, axis=0), positions)  # [batch, seq, hidden]
    x = ops.layernorm(b, x, *ln["ln0"])
    rows = b.reshape(x, (batch * seq, hidden))
    dh = hidden // heads

    def split(v: Var) -> Var:  # [batch * seq, hidden] -> [batch, heads, seq, dh]
        return b.transpose(b.reshape(v, (batch, seq, heads, dh)), (0, 2, 1, 3))

    q, k, v = (split(_dense(b, rows, w[n], bias[n])) for n in ("wq", "wk", "wv"))
    ctx = ops.attention(b, q, k, v, add_mask)  # [batch, heads, seq, dh]
    ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch * seq, hidden))
    x1 = ops.layernorm(b, b.add(rows, _dense(b, ctx, w["wo"], bias["wo"])), *ln["ln1"])
    h = ops.gelu(b, _dense(b, x1, w1, b1))
    x2 = ops.layernorm(b, b.add(x1, _dense(b, h, w2, b2)), *ln["ln2"])
    b.output("hidden", b.reshape(x2, (batch, seq, hidden)))
    return b.build()


def encoder_inputs(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights at BERT-like scales (the same for every seed: a model's), token ids from
    ``seed``, and a padded 0/1 mask (every sequence but the first padded: its trailing
    positions are zeros)."""
    rng, wrng = np.random.default_rng(seed), np.random.default_rng(2**20)
    out: dict[str, np.ndarray] = {}
    for a in program.args:
        shape = a.var.shape
        if a.storage is Storage.SLOT:
            pass
        elif a.name.endswith("_g"):
            out[a.name] = (1.0 + 0.1 * wrng.standard_normal(shape)).astype(np.float32)
            continue
        elif a.name.startswith("b") or a.name.endswith("_b"):
            out[a.name] = (0.02 * wrng.standard_normal(shape)).astype(np.float32)
            continue
        else:
            scale = 1.0 / math.sqrt(shape[0]) if a.name.startswith("w") else 0.5
            out[a.name] = (scale * wrng.standard_normal(shape)).astype(np.float32)
            continue
        if a.name == "input_ids":
            vocab = program.arg("word_embeddings").var.shape[0]  # type: ignore[union-attr]
            out[a.name] = rng.integers(0, vocab, shape).astype(np.int32)
        elif a.name == "attention_mask":
            batch, seq = shape
            lengths = [seq] + [max(1, seq - 3 - 4 * k) for k in range(1, batch)]
            out[a.name] = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype(np.int32)
    return out
