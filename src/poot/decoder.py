"""A small decoder-only transformer as a program pair: ``prefill`` and ``decode``.

Built with the ``Builder`` from primitives only (the ``poot_ir.ops`` composites where they fit),
so each target admits or refuses it equation by equation like any other program:

- ``prefill`` takes the prompt (``tokens``: i32[T]) and writes the KV cache: every layer's
  keys and values for positions 0..T-1 (states ``k{l}``, ``v{l}``: f32[H, S, dh]) and the
  ``filled`` marks (f32[S], 1.0 where a position holds a key). Its output is the logits of
  the prompt's last position (``logits``: f32[1, V]). Attention inside the prompt is causal
  through an additive mask computed from two ``iota``s with ``sub``, ``max`` and ``mul`` only
  (no ``select``, no comparison, no integer-to-float convert: intel-npu4 admits it).
- ``decode`` takes one token and its position (``token``: i32[1], ``pos``: i32[]), writes the
  token's keys and values into the cache at ``pos`` with a runtime ``dynamic_update_slice``,
  attends over the cache with the positions not yet ``filled`` masked out, and returns the
  next logits. Its states are exactly ``prefill``'s, so a handoff moves them by name.

The mask value is ``-MASK`` added to a score: large enough that ``exp`` of it is 0 in F32 and
FP16, small enough that FP16 holds it (a narrowing target refuses an argument beyond 65504).
The softmax clamps its max-subtracted scores at ``EXP_FLOOR`` (-80), so a masked position's
``exp`` is 1.8e-35 instead of 0: no device computes ``exp`` outside its domain (xdna2's was
[-87, 88] when this was written; it is [-inf, 88] now), its weight ``exp / sum`` stays a normal number for rows of up to 1,500 keys (the sum
is at most the row's length; a subnormal quotient is outside xdna2's ``div`` domain), and the
row's sum (at least 1, from its largest score) cannot tell it from 0 in F32.
Weights come from a seeded generator (``weights``), scaled so activations stay near 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from poot_ir import Builder, DType, Program, Var
from poot_ir.ops import rmsnorm

__all__ = ["EXAMPLES", "MASK", "DecoderConfig", "build_decode", "build_prefill", "weights"]

#: The additive mask of a position attention must not see (its exp is 0 in F32 and in FP16).
MASK = 30000.0
#: The lowest argument the softmax hands ``exp`` (see the module docstring).
EXP_FLOOR = -80.0

F32 = DType.F32
I32 = DType.I32


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """The model's dimensions: ``vocab`` tokens, ``d_model`` = ``heads`` x head size,
    ``layers``, the MLP's ``hidden`` width, a cache of ``max_len`` positions and a prompt of
    ``prompt_len`` tokens (prefill's T)."""

    name: str = "tiny-decoder"
    vocab: int = 64
    d_model: int = 32
    heads: int = 2
    layers: int = 2
    hidden: int = 64
    max_len: int = 48
    prompt_len: int = 8
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def state_names(self) -> tuple[str, ...]:
        return (*(f"{kv}{i}" for i in range(self.layers) for kv in "kv"), "filled")

    def cache_bytes(self) -> int:
        """The size of the KV cache states (``filled`` included), in bytes."""
        per = self.heads * self.max_len * self.head_dim * 4
        return 2 * self.layers * per + self.max_len * 4

    def with_prompt(self, prompt_len: int, max_len: int | None = None) -> DecoderConfig:
        return DecoderConfig(
            self.name,
            self.vocab,
            self.d_model,
            self.heads,
            self.layers,
            self.hidden,
            max_len if max_len is not None else max(self.max_len, prompt_len + 40),
            prompt_len,
            self.seed,
        )


#: The examples ``poot generate`` knows, by name.
EXAMPLES = {"tiny-decoder": DecoderConfig()}


def weights(cfg: DecoderConfig) -> dict[str, np.ndarray]:
    """Seeded weights: projections scaled by 1/sqrt(fan-in), norms near 1, and an output
    head scaled up so the greedy token wins by a clear margin."""
    rng = np.random.default_rng(cfg.seed)
    d, f, v = cfg.d_model, cfg.hidden, cfg.vocab

    def mat(rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(rows)).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "embed": rng.standard_normal((v, d)).astype(np.float32),
        "pos_embed": (0.5 * rng.standard_normal((cfg.max_len, d))).astype(np.float32),
    }
    for i in range(cfg.layers):
        w[f"norm1_{i}"] = (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        for p in ("wq", "wk", "wv", "wo"):
            w[f"{p}{i}"] = mat(d, d)
        w[f"norm2_{i}"] = (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        w[f"w1_{i}"] = mat(d, f)
        w[f"w2_{i}"] = mat(f, d)
    w["norm_f"] = (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    w["head"] = mat(d, v, gain=4.0)
    return w


class _Model:
    """The weight arguments of one program, declared in a fixed order."""

    def __init__(self, b: Builder, cfg: DecoderConfig) -> None:
        d, f, v = cfg.d_model, cfg.hidden, cfg.vocab
        self.w: dict[str, Var] = {
            "embed": b.weight("embed", F32, (v, d)),
            "pos_embed": b.weight("pos_embed", F32, (cfg.max_len, d)),
        }
        for i in range(cfg.layers):
            self.w[f"norm1_{i}"] = b.weight(f"norm1_{i}", F32, (d,))
            for p in ("wq", "wk", "wv", "wo"):
                self.w[f"{p}{i}"] = b.weight(f"{p}{i}", F32, (d, d))
            self.w[f"norm2_{i}"] = b.weight(f"norm2_{i}", F32, (d,))
            self.w[f"w1_{i}"] = b.weight(f"w1_{i}", F32, (d, f))
            self.w[f"w2_{i}"] = b.weight(f"w2_{i}", F32, (f, d))
        self.w["norm_f"] = b.weight("norm_f", F32, (d,))
        self.w["head"] = b.weight("head", F32, (d, v))


def _states(b: Builder, cfg: DecoderConfig) -> dict[str, Var]:
    shape = (cfg.heads, cfg.max_len, cfg.head_dim)
    states = {n: b.state(n, F32, shape) for n in cfg.state_names()[:-1]}
    states["filled"] = b.state("filled", F32, (cfg.max_len,))
    return states


def _heads(b: Builder, x: Var, cfg: DecoderConfig) -> Var:
    """[n, d_model] -> [heads, n, head_dim]."""
    n = x.shape[0]
    return b.transpose(b.reshape(x, (n, cfg.heads, cfg.head_dim)), (1, 0, 2))


def _merge(b: Builder, x: Var, cfg: DecoderConfig) -> Var:
    """[heads, n, head_dim] -> [n, d_model]."""
    n = x.shape[1]
    return b.reshape(b.transpose(x, (1, 0, 2)), (n, cfg.d_model))


def _softmax(b: Builder, x: Var) -> Var:
    """``poot_ir.ops.softmax`` along the last axis, its max-subtracted scores clamped at
    ``EXP_FLOOR`` (see the module docstring)."""
    ax = x.type.rank - 1
    rows = tuple(range(ax))  # a row's max and sum broadcast back along the last axis
    m = b.broadcast_in_dim(b.reduce_max(x, axes=(ax,)), x.shape, rows)
    e = b.exp(b.max(b.sub(x, m), EXP_FLOOR))
    s = b.broadcast_in_dim(b.reduce_sum(e, axes=(ax,)), x.shape, rows)
    return b.div(e, s)


def _attend(b: Builder, q: Var, k: Var, v: Var, mask: Var) -> Var:
    """``softmax(q k^T / sqrt(dh) + mask) v`` per head; ``mask`` is [heads, n, keys]."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = b.mul(b.matmul(q, b.transpose(k, (0, 2, 1))), scale)
    return b.matmul(_softmax(b, b.add(scores, mask)), v)


def _mlp(b: Builder, m: _Model, x: Var, i: int) -> Var:
    h = b.max(b.matmul(x, m.w[f"w1_{i}"]), 0.0)  # ReLU: admitted where erf is not
    return b.matmul(h, m.w[f"w2_{i}"])


def _head(b: Builder, m: _Model, x: Var) -> Var:
    return b.matmul(rmsnorm(b, x, m.w["norm_f"]), m.w["head"])


def _count(b: Builder, shape: tuple[int, ...], axis: int) -> Var:
    """0, 1, 2, ... along ``axis`` as F32, counted in F16 (exact below 2048): intel-npu4
    admits an F16 ``iota`` and a float convert, not an F32 ``iota`` or an integer convert."""
    return b.convert(b.iota(shape, DType.F16, axis), F32)


def _ones(b: Builder, n: int) -> Var:
    return b.add(b.mul(_count(b, (n,), 0), 0.0), 1.0)


def build_prefill(cfg: DecoderConfig) -> Program:
    """The prefill program (see the module docstring)."""
    t, h = cfg.prompt_len, cfg.heads
    b = Builder("prefill")
    tokens = b.slot("tokens", DType.I32, (t,))
    m = _Model(b, cfg)
    st = _states(b, cfg)
    # causal: key j > query i is masked; clamp(j - i, 0, 1) from max only, times -MASK
    gap = b.sub(_count(b, (t, t), 1), _count(b, (t, t), 0))
    later = b.sub(b.max(gap, 0.0), b.max(b.sub(gap, 1.0), 0.0))
    mask = b.broadcast_in_dim(b.mul(later, -MASK), (h, t, t), (1, 2))
    x = b.add(b.gather(m.w["embed"], tokens), b.gather(m.w["pos_embed"], b.iota((t,), I32, 0)))
    for i in range(cfg.layers):
        n = rmsnorm(b, x, m.w[f"norm1_{i}"])
        q, k, v = (_heads(b, b.matmul(n, m.w[f"{p}{i}"]), cfg) for p in ("wq", "wk", "wv"))
        b.update(st[f"k{i}"], b.dynamic_update_slice(st[f"k{i}"], k, (0, 0, 0)))
        b.update(st[f"v{i}"], b.dynamic_update_slice(st[f"v{i}"], v, (0, 0, 0)))
        x = b.add(x, b.matmul(_merge(b, _attend(b, q, k, v, mask), cfg), m.w[f"wo{i}"]))
        x = b.add(x, _mlp(b, m, rmsnorm(b, x, m.w[f"norm2_{i}"]), i))
    b.update(st["filled"], b.dynamic_update_slice(st["filled"], _ones(b, t), (0,)))
    b.output("logits", _head(b, m, b.slice(x, (t - 1, 0), (t, cfg.d_model))))
    return b.build()


def build_decode(cfg: DecoderConfig) -> Program:
    """The decode program (see the module docstring)."""
    s, h = cfg.max_len, cfg.heads
    b = Builder("decode")
    token = b.slot("token", DType.I32, (1,))
    pos = b.slot("pos", DType.I32, ())
    m = _Model(b, cfg)
    st = _states(b, cfg)
    filled = b.dynamic_update_slice(st["filled"], _ones(b, 1), (pos,))
    b.update(st["filled"], filled)
    mask = b.broadcast_in_dim(b.mul(b.sub(filled, 1.0), MASK), (h, 1, s), (2,))
    x = b.add(b.gather(m.w["embed"], token), b.gather(m.w["pos_embed"], b.reshape(pos, (1,))))
    for i in range(cfg.layers):
        n = rmsnorm(b, x, m.w[f"norm1_{i}"])
        q, k, v = (_heads(b, b.matmul(n, m.w[f"{p}{i}"]), cfg) for p in ("wq", "wk", "wv"))
        kc = b.dynamic_update_slice(st[f"k{i}"], k, (0, pos, 0))
        vc = b.dynamic_update_slice(st[f"v{i}"], v, (0, pos, 0))
        b.update(st[f"k{i}"], kc)
        b.update(st[f"v{i}"], vc)
        x = b.add(x, b.matmul(_merge(b, _attend(b, q, kc, vc, mask), cfg), m.w[f"wo{i}"]))
        x = b.add(x, _mlp(b, m, rmsnorm(b, x, m.w[f"norm2_{i}"]), i))
    b.output("logits", _head(b, m, x))
    return b.build()
