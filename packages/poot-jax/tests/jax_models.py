"""The real models written in JAX that the tests and the benchmark share (random init, seeded):
a Flax MLP, a Flax transformer encoder block and a decoder block (causal), a Flax CNN
(channels-last convolutions and pools, as Flax writes them) and a ``softmax``/``layer_norm``/
``gelu`` chain.
Each is ``fn(params, x)`` with its ``params`` (bound as weights) and an example ``x``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True, slots=True)
class JaxModel:
    name: str
    fn: Callable[..., Any]
    params: Any
    x: np.ndarray


def layer_norm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b


def chain(approximate: bool = False, seed: int = 0) -> JaxModel:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((4, 16)) * 3).astype(np.float32)
    params = {
        "g": rng.standard_normal(16).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
    }

    def chain(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        h = jax.nn.gelu(layer_norm(x, p["g"], p["b"]), approximate=approximate)
        return jax.nn.softmax(h @ h.T / 4.0, axis=-1) @ h

    return JaxModel("chain", chain, params, x)


def mlp(seed: int = 0) -> JaxModel:
    from flax import linen as nn

    class MLP(nn.Module):  # type: ignore[misc]
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            x = nn.relu(nn.Dense(32)(x))
            x = nn.gelu(nn.Dense(32)(x))
            return nn.Dense(10)(x)

    model = MLP()
    x = np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)
    return JaxModel("flax_mlp", _apply(model), model.init(jax.random.key(seed), x), x)


def encoder_block(seed: int = 0, shape: tuple[int, int, int] = (2, 8, 32)) -> JaxModel:
    return _attention_block("flax_encoder_block", False, seed, shape)


def decoder_block(seed: int = 0, shape: tuple[int, int, int] = (2, 8, 32)) -> JaxModel:
    """The encoder block with Flax's causal mask: its attention selects ``finfo.min`` where a
    key is masked (``where(mask, scores, big_neg)``), a constant the importer binds."""
    return _attention_block("flax_decoder_block", True, seed, shape)


def _attention_block(name: str, causal: bool, seed: int, shape: tuple[int, int, int]) -> JaxModel:
    """A pre-norm transformer block: LayerNorm, 4-head self-attention (``causal``: with
    ``nn.make_causal_mask``), a residual, LayerNorm, a GELU MLP, a residual."""
    from flax import linen as nn

    class Block(nn.Module):  # type: ignore[misc]
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if causal else None
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=4)(h, h, mask=mask)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(shape[-1])(nn.gelu(nn.Dense(2 * shape[-1])(h)))

    model = Block()
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return JaxModel(name, _apply(model), model.init(jax.random.key(seed), x), x)


def cnn(seed: int = 0) -> JaxModel:
    """Flax's NHWC: a strided SAME convolution and batch norm, a depthwise one, a padded max
    pool, a dilated convolution, an average pool, a global mean and a classifier."""
    from flax import linen as nn

    class CNN(nn.Module):  # type: ignore[misc]
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            x = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(16, (3, 3), 2)(x)))
            x = nn.Conv(16, (3, 3), feature_group_count=16, padding=((1, 1), (1, 1)))(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            y = nn.Conv(32, (3, 3), kernel_dilation=2)(nn.gelu(nn.Conv(32, (1, 1))(x)))
            x = nn.avg_pool(y, (2, 2), strides=(2, 2)).mean(axis=(1, 2))
            return nn.Dense(10)(x)

    model = CNN()
    x = np.random.default_rng(seed).standard_normal((2, 32, 32, 3)).astype(np.float32)
    return JaxModel("flax_cnn", _apply(model), model.init(jax.random.key(seed), x), x)


def _apply(model: Any) -> Callable[[Any, jax.Array], jax.Array]:
    """``model.apply`` with its data argument named ``x`` (the program's slot)."""

    def apply(variables: Any, x: jax.Array) -> jax.Array:
        out: jax.Array = model.apply(variables, x)
        return out

    return apply


MODELS: dict[str, Callable[[], JaxModel]] = {
    "chain": chain,
    "flax_mlp": mlp,
    "flax_encoder_block": encoder_block,
    "flax_decoder_block": decoder_block,
    "flax_cnn": cnn,
}
