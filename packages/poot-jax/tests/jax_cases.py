"""Shared test helpers: import a JAX function, run it on the oracle, compare with ``jax.jit``.

The tolerance: the oracle computes exp/log/tanh/erf at float64 and rounds once, and sums and
matmuls accumulate at float64, while XLA:CPU uses float32 polynomial approximations and float32
accumulation; composites (rsqrt, logistic, erfc, integer_pow) round after each poot primitive.
So floats compare with ``rtol`` (default 1e-5 for f32, 1e-2 for f16/bf16) and an ``atol`` of the
same size scaled by the largest magnitude of the expected result (cancellation in a sum);
integers and bools compare exactly, and NaNs must sit where JAX has them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from poot_ir.oracle import evaluate
from poot_jax import ImportedFunction, import_function


def run_imported(imp: ImportedFunction, *args: Any) -> list[np.ndarray]:
    """The program on the oracle, given the flattened example arguments in slot order."""
    leaves = jax.tree_util.tree_leaves(args)
    feeds: dict[str, object] = dict(imp.weights)
    slots = [a.name for a in imp.program.args if a.name not in imp.weights]
    for slot, leaf in zip(slots, leaves, strict=True):
        feeds[slot] = np.asarray(jax.numpy.asarray(leaf))  # as JAX takes it: int64 -> int32
    got = evaluate(imp.program, feeds)
    return [got[n] for n in imp.outputs]


def compare(got: np.ndarray, want: np.ndarray, rtol: float | None = None) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    tol = rtol if rtol is not None else (1e-5 if want.dtype == np.float32 else 1e-2)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    finite = np.isfinite(w)
    np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)])
    scale = float(np.max(np.abs(w[finite]), initial=0.0))
    np.testing.assert_allclose(g[finite], w[finite], rtol=tol, atol=tol * max(scale, 1e-30))


def check(
    fn: Callable[..., Any], *args: Any, rtol: float | None = None, **kw: Any
) -> ImportedFunction:
    """Import ``fn`` on ``args``, run it on the oracle, compare with ``jax.jit(fn)`` on CPU."""
    imp = import_function(fn, *args, **kw)
    got = run_imported(imp, *args)
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        compare(g, np.asarray(w), rtol)
    return imp
