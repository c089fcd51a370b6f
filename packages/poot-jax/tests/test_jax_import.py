"""The import as a whole: slot and weight names, parameters bound as weights, typed refusals
listing every blocker with the user's line, a softmax/layer_norm/gelu chain and a Flax MLP
(``jax_models``) on the oracle against ``jax.jit`` on XLA:CPU (tolerance in ``jax_cases``)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")

import jax.numpy as jnp  # noqa: E402
import jax_models  # noqa: E402
import numpy as np  # noqa: E402
from jax_cases import check, compare, run_imported  # noqa: E402
from poot_ir.core import Storage  # noqa: E402
from poot_ir.errors import PootError, UnsupportedJax  # noqa: E402
from poot_jax import check_function, import_function  # noqa: E402

RNG = np.random.default_rng(1)


def test_slots_weights_and_outputs_are_named() -> None:
    def f(x: jax.Array, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return x + batch["bias"], batch["ids"] * 2

    x = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    batch = {"bias": jax.ShapeDtypeStruct((3,), jnp.float32), "ids": np.zeros(4, np.int32)}
    imp = import_function(f, x, batch)
    args = {a.name: a for a in imp.program.args}
    assert set(args) == {"x", "batch.bias", "batch.ids"}
    assert all(a.storage is Storage.SLOT for a in args.values())
    assert imp.outputs == ("out0", "out1")
    assert imp.inputs == {"[0]": "x", "[1]['bias']": "batch.bias", "[1]['ids']": "batch.ids"}
    assert imp.weights == {}


def test_params_become_weights_with_their_values() -> None:
    params = {
        "w": RNG.standard_normal((3, 4)).astype(np.float32),
        "b": np.arange(4.0, dtype=np.float32),
    }

    def f(p: dict[str, np.ndarray], x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ p["w"] + p["b"])

    x = RNG.standard_normal((2, 3)).astype(np.float32)
    imp = import_function(f, x, params=params)
    weights = {a.name for a in imp.program.args if a.storage is Storage.WEIGHT}
    assert weights == {"w", "b"}
    np.testing.assert_array_equal(imp.weights["w"], params["w"])
    got = run_imported(imp, x)[0]
    compare(got, np.asarray(jax.jit(f)(params, x)))


def test_output_that_is_an_argument_or_a_constant() -> None:
    one = np.ones(2, np.float32)
    imp = check(lambda x, y: (x, x, y + 1.0, jnp.float32(2.0), jnp.zeros(3)), one, one)
    args = {a.var.id for a in imp.program.args}
    assert not any(o.var.id in args for o in imp.program.outputs)


def _blocked(x: jax.Array, i: jax.Array) -> jax.Array:
    y = jnp.sort(x, axis=-1)
    z = jnp.cumsum(y, axis=0)
    return z + x.astype(jnp.int8).astype(jnp.float32) + jnp.sin(x) + y[i]


def _line(fn: object, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_unsupported_primitive_is_refused_naming_it_and_the_line() -> None:
    x, i = np.ones((3, 4), np.float32), np.int32(1)
    with pytest.raises(UnsupportedJax) as caught:
        import_function(_blocked, x, i)
    err = caught.value
    assert isinstance(err, PootError)
    assert err.primitive == "sort" and err.kind == "primitive"
    assert err.where.startswith(f"{__file__}:{_line(_blocked, 'jnp.sort')} ")
    assert "more blocker(s)" in str(err)


def test_check_function_lists_every_blocker_at_once() -> None:
    x, i = np.ones((3, 4), np.float32), np.int32(1)
    blockers = check_function(_blocked, x, i)
    found = {(b.primitive, b.kind) for b in blockers}
    # the cumsum reads the sort's poisoned result: skipped, not a second blocker; int8 is a dtype
    assert found == {
        ("sort", "primitive"),
        ("convert_element_type", "dtype"),
        ("sin", "primitive"),
    }
    lines = {b.primitive: b.lines for b in blockers}
    assert lines["sin"] == (f"{__file__}:{_line(_blocked, 'jnp.sin')} (_blocked)",)


def test_unsupported_argument_dtype_is_refused() -> None:
    with pytest.raises(UnsupportedJax) as caught:
        import_function(lambda x: x + 1, np.ones(3, np.int8))
    assert caught.value.primitive == "argument" and caught.value.kind == "dtype"


def test_a_literal_of_a_type_poot_lacks_is_a_blocker() -> None:
    # the int8 literal 3 read by the add is a blocker of its own (the add's operands are not
    # poisoned: a literal is read, not computed); a literal output too, never a lost output
    def f(x: jax.Array) -> jax.Array:
        return (x.astype(jnp.int8) + jnp.int8(3)).astype(jnp.float32)

    found = {(b.primitive, b.kind) for b in check_function(f, np.ones(3, np.float32))}
    assert found == {("convert_element_type", "dtype"), ("add", "dtype")}
    blockers = check_function(lambda x: (x + 1.0, jnp.int8(3)), np.ones(3, np.float32))
    assert [(b.primitive, b.kind) for b in blockers] == [("output", "dtype")]


@pytest.mark.parametrize("approximate", [False, True])
def test_softmax_layer_norm_gelu_chain(approximate: bool) -> None:
    m = jax_models.chain(approximate)
    check(m.fn, m.params, m.x)


def test_flax_mlp() -> None:
    pytest.importorskip("flax.linen", reason="flax is in poot-jax's test group")
    m = jax_models.mlp()
    imp = import_function(m.fn, m.x, params=m.params)
    weights = sorted(a.name for a in imp.program.args if a.storage is Storage.WEIGHT)
    assert "params.Dense_0.kernel" in weights and len(weights) == 6
    assert list(imp.inputs.values()) == ["x"]
    got = run_imported(imp, m.x)[0]
    compare(got, np.asarray(jax.jit(m.fn)(m.params, m.x)))


def test_poot_jax_alone_needs_poot_ir_and_jax_only() -> None:
    code = (
        "import sys, poot_jax\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('onnx', 'openvino', 'rich', 'flax', 'poot_onnx', 'poot_planner', 'poot_engine'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import poot_jax also imported {out.stdout.strip()}"


def test_refusal_inside_a_flax_layer_names_the_users_line() -> None:
    nn = pytest.importorskip("flax.linen", reason="flax is in poot-jax's test group")

    class Dropped(nn.Module):  # type: ignore[misc]
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.Dropout(0.5, deterministic=False)(nn.Dense(4)(x))

    model = Dropped()
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    variables = model.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)

    def f(v: Any, x: jax.Array, seed: jax.Array) -> jax.Array:
        out: jax.Array = model.apply(v, x, rngs={"dropout": jax.random.key(seed)})
        return out

    blockers = {b.primitive: b.lines for b in check_function(f, x, np.int32(3), params=variables)}
    # flax's dropout draws its mask inside flax: the blocker names the user's Dropout line
    line = _line(Dropped.__call__, "nn.Dropout(")
    (bits,) = blockers["random_bits"]
    assert bits.startswith(f"{__file__}:{line} (") and bits.endswith("Dropped.__call__)"), bits
    (seed,) = blockers["random_seed"]
    assert seed.startswith(f"{__file__}:{_line(f, 'jax.random.key')} ("), seed


def test_scalar_literal_arithmetic_folds_and_a_decided_where_leaves_no_nan() -> None:
    # jnp.var guards an empty reduction with where(N - ddof > 0, var, nan): the guard is known
    # at import, so the program has no NaN (before: a NaN weight a narrowing target refused)
    def f(x: jax.Array) -> jax.Array:
        return jnp.var(x, axis=-1, keepdims=True)

    x = RNG.standard_normal((4, 16)).astype(np.float32)
    imp = check(f, x)
    assert imp.weights == {}
    assert all(e.prim.name.lower() not in ("iota", "select") for e in imp.program.eqns)


def test_a_captured_scalar_is_a_literal_and_a_non_finite_one_no_weight() -> None:
    scale = np.float32(3.0)

    def f(x: jax.Array) -> jax.Array:
        return jnp.where(x > 0, x * jnp.asarray(scale), -jnp.inf)

    x = RNG.standard_normal((3, 5)).astype(np.float32)
    imp = check(f, x)
    assert imp.weights == {}  # before: const0 = 3.0 and a -inf weight
