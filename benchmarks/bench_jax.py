"""The JAX frontend: Flax encoder block import vs jax.jit compile, oracle step vs jax.jit step (CPU; needs jax: `nox -s bench_jax`).

The model is the tests' Flax transformer encoder block (``packages/poot-jax/tests/jax_models``:
LayerNorm, 4-head self-attention, LayerNorm, a GELU MLP; random init, seed 0) on x [2, 64, 128].
Both sides start from cleared JAX caches in every round (``jax.clear_caches``): the import is
``poot_jax.import_function`` (``jax.make_jaxpr`` plus lowering to poot), the baseline is
``jax.jit(fn).lower(params, x).compile()`` (tracing, StableHLO, XLA:CPU's compile). The step is
``poot_ir.evaluate`` of the imported program (float64 accumulation, one rounding per
primitive) against the compiled XLA executable, both on the same inputs, results read back.
Run in the workspace's 3.11 venv (no jax), this benchmark reports nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from benchmarks.harness import Figure, median_time

SHAPE = (2, 64, 128)
_TESTS = Path(__file__).resolve().parents[1] / "packages" / "poot-jax" / "tests"


def run() -> list[Figure]:
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("flax") is None:
        print("  (skipped: jax and flax are not installed here; run `nox -s bench_jax`)")
        return []
    import jax
    import numpy as np
    from poot_ir import evaluate

    # poot_jax and the tests' models exist only in the jax venv: imported by name, so the
    # workspace's typecheck (no poot_jax installed) reads this file too
    import_function = importlib.import_module("poot_jax").import_function
    if str(_TESTS) not in sys.path:
        sys.path.insert(0, str(_TESTS))
    m = importlib.import_module("jax_models").encoder_block(shape=SHAPE)

    def traced() -> object:
        jax.clear_caches()
        return import_function(m.fn, m.x, params=m.params)

    def compiled() -> object:
        jax.clear_caches()
        return jax.jit(m.fn).lower(m.params, m.x).compile()

    t_import = median_time(traced, repeat=5)
    t_compile = median_time(compiled, repeat=5)

    imp = import_function(m.fn, m.x, params=m.params)
    feeds = {**imp.weights, "x": m.x}
    exe = jax.jit(m.fn).lower(m.params, m.x).compile()
    x = jax.numpy.asarray(m.x)
    params = jax.tree_util.tree_map(jax.numpy.asarray, m.params)
    t_oracle = median_time(lambda: evaluate(imp.program, feeds)["out"], repeat=7)
    t_xla = median_time(lambda: np.asarray(exe(params, x)), repeat=7, number=20)
    n = len(imp.program.eqns)
    return [
        Figure("encoder block: trace + import / jax.jit compile", t_import / t_compile, "x"),
        Figure("  trace + import", t_import * 1e3, "ms", note=f"{n} poot equations"),
        Figure("  jax.jit lower + compile", t_compile * 1e3, "ms"),
        Figure("encoder block: oracle step / jax.jit step (CPU)", t_oracle / t_xla, "x"),
        Figure("  oracle step", t_oracle * 1e3, "ms"),
        Figure("  jax.jit step", t_xla * 1e3, "ms"),
    ]
