"""Composite operations, built from primitives through a ``Builder``.

Nothing here is a primitive: each function emits the ordinary equations, so every target sees
the same chain. A planner may recognize a chain (the XDNA2 planner fuses ``rmsnorm``), but no
device needs to. All reductions run over the last axis unless an ``axis`` says otherwise.
"""

from __future__ import annotations

import math

from poot_ir.builder import Builder
from poot_ir.core import Var
from poot_ir.errors import TypeCheckError

__all__ = ["attention", "gelu", "layernorm", "rmsnorm", "sigmoid", "softmax"]


def _keep(b: Builder, reduced: Var, like: Var, axis: int) -> Var:
    """Broadcast a value reduced over ``axis`` back to the shape of ``like``."""
    dims = tuple(i for i in range(like.type.rank) if i != axis)
    return b.broadcast_in_dim(reduced, like.shape, dims)


def _last_axis(x: Var, axis: int, what: str) -> int:
    rank = x.type.rank
    if not -rank <= axis < rank:
        raise TypeCheckError(f"{what}: axis {axis} is outside rank {rank} of {x.type}")
    return axis % rank


def rmsnorm(b: Builder, x: Var, w: Var | None = None, eps: float = 1e-6) -> Var:
    """``x / sqrt(mean(x * x) + eps) * w`` over the last axis.

    The chain is ``mul, reduce_sum, div n, add eps, sqrt, broadcast_in_dim, div[, mul w]``:
    every step keeps its operands non-negative, which is what lets the XDNA2 planner derive an
    error bound for it.
    """
    axis = _last_axis(x, -1, "rmsnorm")
    n = x.shape[axis]
    ms = b.div(b.reduce_sum(b.mul(x, x), axes=(axis,)), float(n))
    rms = b.sqrt(b.add(ms, eps))
    y = b.div(x, _keep(b, rms, x, axis))
    return y if w is None else b.mul(y, w)


def layernorm(b: Builder, x: Var, gamma: Var, beta: Var, eps: float = 1e-5) -> Var:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis."""
    axis = _last_axis(x, -1, "layernorm")
    n = float(x.shape[axis])
    mean = b.div(b.reduce_sum(x, axes=(axis,)), n)
    xc = b.sub(x, _keep(b, mean, x, axis))
    var = b.div(b.reduce_sum(b.mul(xc, xc), axes=(axis,)), n)
    inv = b.sqrt(b.add(var, eps))
    return b.add(b.mul(b.div(xc, _keep(b, inv, x, axis)), gamma), beta)


def softmax(b: Builder, x: Var, axis: int = -1) -> Var:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (max-subtracted, so it never
    overflows for finite input)."""
    ax = _last_axis(x, axis, "softmax")
    m = b.reduce_max(x, axes=(ax,))
    e = b.exp(b.sub(x, _keep(b, m, x, ax)))
    s = b.reduce_sum(e, axes=(ax,))
    return b.div(e, _keep(b, s, x, ax))


def gelu(b: Builder, x: Var) -> Var:
    """The exact (erf) GELU: ``0.5 * x * (1 + erf(x / sqrt(2)))``."""
    return b.mul(b.mul(x, 0.5), b.add(b.erf(b.mul(x, 1.0 / math.sqrt(2.0))), 1.0))


def sigmoid(b: Builder, x: Var) -> Var:
    """``1 / (1 + e^-x)``, from ``e = e^-|x|`` (at most 1, so nothing overflows, in f32 or in
    an FP16 stand-in): ``1 / (1 + e)`` for ``x >= 0``, ``e / (1 + e)`` below. The form the ONNX
    importer writes (Sigmoid, the LSTM's gates, the classifiers' logistic), which xdna2's
    sigmoid rule recognises."""
    e = b.exp(b.neg(b.abs(x)))
    r = b.recip(b.add(e, 1.0))
    return b.select(b.ge(x, 0.0), r, b.mul(e, r))


def attention(b: Builder, q: Var, k: Var, v: Var, mask: Var | None = None) -> Var:
    """Scaled dot-product attention: ``softmax(q @ k^T / sqrt(d) + mask) @ v``.

    ``q`` is ``[..., s, d]``, ``k`` is ``[..., t, d]``, ``v`` is ``[..., t, dv]``; ``mask`` is
    additive and broadcasts to ``[..., s, t]`` (use a large negative value to mask out).
    """
    rank = q.type.rank
    if rank < 2:
        raise TypeCheckError(f"attention: q must have rank >= 2, got {q.type}")
    if q.shape[-1] == 0:  # the scale 1 / sqrt(d) is undefined
        raise TypeCheckError(f"attention: q has an empty last axis (d = 0): {q.type}")
    perm = (*range(rank - 2), rank - 1, rank - 2)
    scores = b.mul(b.matmul(q, b.transpose(k, perm)), 1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = b.add(scores, mask)
    return b.matmul(softmax(b, scores, axis=-1), v)
