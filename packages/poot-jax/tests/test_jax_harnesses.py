"""JAX's primitive harnesses through the frontend (``jax_harnesses``): the counts in
docs/conformance-jax.md may not drop, and no harness may give a wrong result."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")
pytest.importorskip("absl", reason="jax's harnesses need absl-py (poot-jax's test group)")

from pathlib import Path  # noqa: E402

from jax_harnesses import counts, markdown  # noqa: E402

DOC = Path(__file__).resolve().parents[3] / "docs" / "conformance-jax.md"

#: Harnesses that pass, per group (float32, int32 and bool; docs/conformance-jax.md).
PASSING = {
    "abs": 2,
    "add": 4,
    "add_any": 2,
    "and": 1,
    "argmax": 30,
    "argmin": 30,
    "broadcast_in_dim": 7,
    "ceil": 1,
    "clamp": 7,
    "concatenate": 5,
    "conv_general_dilated": 81,
    "convert_element_type": 15,
    "cummax": 10,
    "cummin": 10,
    "cumprod": 10,
    "cumsum": 10,
    "device_put": 4,
    "div": 8,
    "dot_general": 50,
    "dynamic_slice": 40,
    "dynamic_update_slice": 18,
    "eq": 5,
    "erf": 1,
    "erfc": 1,
    "exp": 1,
    "exp2": 1,
    "floor": 1,
    "gather": 142,
    "ge": 5,
    "gt": 5,
    "integer_pow": 14,
    "iota": 4,
    "is_finite": 1,
    "le": 5,
    "log": 1,
    "logistic": 1,
    "lt": 5,
    "max": 6,
    "min": 6,
    "mul": 4,
    "ne": 5,
    "neg": 2,
    "or": 1,
    "pad": 36,
    "pow": 5,
    "reduce_and": 1,
    "reduce_max": 3,
    "reduce_min": 3,
    "reduce_or": 1,
    "reduce_prod": 2,
    "reduce_sum": 2,
    "reduce_window_add": 22,
    "reduce_window_max": 26,
    "reduce_window_min": 9,
    "rem": 1,
    "reshape": 7,
    "rev": 7,
    "round": 3,
    "rsqrt": 1,
    "select_n": 8,
    "sign": 4,
    "slice": 12,
    "sqrt": 1,
    "squeeze": 11,
    "stop_gradient": 3,
    "sub": 4,
    "tanh": 1,
    "transpose": 5,
    "xor": 1,
}


def test_harness_counts_do_not_drop_and_none_is_wrong() -> None:
    table, notes = counts()
    wrong = [n for n in notes if n.startswith("wrong")]
    assert not wrong, "\n".join(wrong)
    dropped = {
        g: (table.get(g, {}).get("pass", 0), n)
        for g, n in PASSING.items()
        if table.get(g, {}).get("pass", 0) < n
    }
    assert not dropped, f"passing harnesses dropped (now, before): {dropped}"
    assert sum(c["pass"] for c in table.values()) >= 741  # 90.0% of 823
    assert DOC.read_text(encoding="utf-8") == markdown(table), (
        "docs/conformance-jax.md is stale: python packages/poot-jax/tests/jax_harnesses.py"
    )
