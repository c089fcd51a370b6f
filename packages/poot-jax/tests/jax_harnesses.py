"""JAX's own primitive test harnesses (``jax._src.internal_test_util.test_harnesses``, shipped in
the jax wheel, written by JAX's authors) run through the frontend.

Every harness whose group is a primitive the frontend lowers, in float32, int32 and bool, that
JAX runs on CPU (``Harness.filter("cpu")``): trace ``dyn_fun`` on the harness's own arguments
(``np.random.RandomState(0)``), import, evaluate on the oracle and compare with ``jax.jit`` on
XLA:CPU under ``jax_cases.compare`` (rtol 1e-5 scaled by the result's largest magnitude for
f32, exact for i32 and bool, NaNs in the same places). Outcomes: ``pass``; ``refused`` (a typed
``UnsupportedJax``: ``refused_dtype`` when it is about an element type poot lacks, such as
uint8 indices or an int8 result); ``wrong`` (imported, but a different result, or any other
exception: none is allowed).
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import numpy as np
from jax_cases import compare, run_imported
from poot_ir.errors import UnsupportedJax
from poot_jax import SUPPORTED_PRIMITIVES, import_function

DTYPES = (np.float32, np.int32, np.bool_)

#: Harness groups named otherwise than the primitive they test.
PRIMITIVE_OF = {"reduce_window_add": "reduce_window_sum"}


def selected() -> list[Any]:
    import jax._src.internal_test_util.test_harnesses as th

    return [
        h
        for h in th.all_harnesses
        if PRIMITIVE_OF.get(h.group_name, h.group_name) in SUPPORTED_PRIMITIVES
        and h.dtype is not None
        and np.dtype(h.dtype) in DTYPES
        and h.filter("cpu")
    ]


def outcome(h: Any) -> tuple[str, str]:
    """What happens to harness ``h``, and why (for a refusal or a wrong result)."""
    args = h.dyn_args_maker(np.random.RandomState(0))
    try:
        imp = import_function(h.dyn_fun, *args)
    except UnsupportedJax as err:
        kind = "refused_dtype" if err.kind == "dtype" else "refused"
        return kind, f"{err.primitive}: {err.detail}"
    try:
        got = run_imported(imp, *args)
        want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(h.dyn_fun)(*args))]
        for g, w in zip(got, want, strict=True):
            compare(g, w)
    except Exception as err:  # anything else: a wrong import
        return "wrong", f"{type(err).__name__}: {err}"
    return "pass", ""


def counts() -> tuple[dict[str, collections.Counter[str]], list[str]]:
    """Outcomes per group, and every non-pass harness's full name and reason."""
    found: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    notes = []
    for h in selected():
        kind, why = outcome(h)
        found[h.group_name][kind] += 1
        if kind != "pass":
            notes.append(f"{kind} {h.fullname}: {why[:200]}")
    return dict(found), notes


HEADER = """# JAX conformance

JAX's own primitive test harnesses (`jax._src.internal_test_util.test_harnesses`, in the jax
0.12.0.1 wheel) for every primitive `poot_jax` lowers, in float32, int32 and bool, that JAX runs
on CPU: traced, imported, evaluated on the oracle and compared with `jax.jit` on XLA:CPU (f32
within rtol 1e-5 of the result's largest magnitude, i32 and bool exactly, NaNs in the same
places). Made by `python packages/poot-jax/tests/jax_harnesses.py` in the jax session's
environment (`.venv-jax`, Python 3.12); `test_jax_harnesses.py` fails when a group's pass count
drops or any harness is wrong. A group is the primitive of its name (`reduce_window_add` tests
`reduce_window_sum`), and holds what JAX's authors put in it (the `reduce_window_*` groups also
use the generic `reduce_window`). "refused (dtype)": a typed `UnsupportedJax` about an element
type poot lacks (uint8/int8/int16 indices or results, complex64, bitwise logic on i32, rem on
f32); "refused (other)": an i32 convolution accumulating in i32 (poot's `conv` is float).

Real models written in JAX (`packages/poot-jax/tests/jax_models.py`, random init, seed 0): a
Flax MLP, a Flax transformer encoder block (LayerNorm, 4-head self-attention, GELU MLP), the
same block as a causal decoder (its mask's `finfo.min` refused with the softmax, on the host), a
Flax CNN (channels-last convolutions and pools) and a `softmax`/`layer_norm`/`gelu` chain, each
on the oracle against `jax.jit`, planned for xdna2 and intel-npu4 and run partitioned on
xdna-host and vpu-cpu, every step within the plan's contract (`test_jax_models.py`).
`poot_jax.jit(fn, device=...)` runs them the same way from Python.
"""


def markdown(table: dict[str, collections.Counter[str]]) -> str:
    """docs/conformance-jax.md for these outcomes."""
    total: collections.Counter[str] = collections.Counter()
    lines = [HEADER, "| group | pass | refused (dtype) | refused (other) | wrong |"]
    lines.append("| --- | ---: | ---: | ---: | ---: |")
    for g in sorted(table):
        c = table[g]
        total.update(c)
        lines.append(
            f"| {g} | {c['pass']} | {c['refused_dtype']} | {c['refused']} | {c['wrong']} |"
        )
    lines.append(
        f"| **all {sum(total.values())}** | **{total['pass']}** | {total['refused_dtype']} "
        f"| {total['refused']} | {total['wrong']} |"
    )
    share = 100.0 * total["pass"] / max(1, sum(total.values()))
    lines.append("")
    lines.append(f"{total['pass']} of {sum(total.values())} pass ({share:.1f}%).")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(counts()[0]), end="")
