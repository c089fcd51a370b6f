"""The Builder: one method per primitive building the right equation, Python scalars as literals,
numpy-style broadcasting, negative axes, the state and result rules, and typed errors that name
the equation and its primitive (a failed call adds nothing to the program)."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from poot_ir import (
    BroadcastParams,
    Builder,
    ConcatParams,
    ConvertParams,
    ConvParams,
    DType,
    Eqn,
    GatherParams,
    IotaParams,
    Literal,
    NoParams,
    Params,
    PootError,
    Prim,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    TensorType,
    TransposeParams,
    TypeCheckError,
    Update,
    Var,
    evaluate,
)

F32, F16, BF16, I32, BOOL = DType.F32, DType.F16, DType.BF16, DType.I32, DType.BOOL


def eqns(b: Builder) -> tuple[Eqn, ...]:
    """The equations built so far (for a builder with no state waiting for its update)."""
    return b.build().eqns


# -- one method per primitive ---------------------------------------------------------------

#: For each primitive: a call on a Builder that has ``x: f32[2,3]``, ``y: f32[2,3]``,
#: ``p: bool[2,3]``, ``i: i32[4]``, ``v: f32[3]``, ``m: f32[3,4]``, ``u: f32[1,2]``, and
#: the parameters and result type the equation must have.
Call = Callable[[Builder, dict[str, Var]], Var]
CASES: dict[Prim, tuple[Call, Params, TensorType]] = {
    **{
        p: (
            lambda b, a, p=p: getattr(b, p.value)(a["x"]),
            NoParams(),
            TensorType((2, 3), F32),
        )
        for p in Prim
        if p.is_unary
    },
    **{
        p: (
            lambda b, a, p=p: getattr(b, p.value)(a["x"], a["y"]),
            NoParams(),
            TensorType((2, 3), BOOL if p.is_comparison else F32),
        )
        for p in Prim
        if p.is_binary
    },
    Prim.SELECT: (
        lambda b, a: b.select(a["p"], a["x"], a["y"]),
        NoParams(),
        TensorType((2, 3), F32),
    ),
    Prim.CONVERT: (
        lambda b, a: b.convert(a["x"], I32),
        ConvertParams(I32),
        TensorType((2, 3), I32),
    ),
    Prim.REDUCE_SUM: (
        lambda b, a: b.reduce_sum(a["x"], 1),
        ReduceParams((1,)),
        TensorType((2,), F32),
    ),
    Prim.REDUCE_MAX: (
        lambda b, a: b.reduce_max(a["x"], (1, 0)),
        ReduceParams((0, 1)),
        TensorType((), F32),
    ),
    Prim.GATHER: (
        lambda b, a: b.gather(a["m"], a["i"], axis=1),
        GatherParams(1),
        TensorType((3, 4), F32),
    ),
    Prim.TRANSPOSE: (
        lambda b, a: b.transpose(a["x"], (1, 0)),
        TransposeParams((1, 0)),
        TensorType((3, 2), F32),
    ),
    Prim.RESHAPE: (
        lambda b, a: b.reshape(a["x"], (3, 1, 2)),
        ReshapeParams((3, 1, 2)),
        TensorType((3, 1, 2), F32),
    ),
    Prim.BROADCAST_IN_DIM: (
        lambda b, a: b.broadcast_in_dim(a["v"], (2, 3), (1,)),
        BroadcastParams((2, 3), (1,)),
        TensorType((2, 3), F32),
    ),
    Prim.SLICE: (
        lambda b, a: b.slice(a["x"], (0, 1), (2, 3), (1, 2)),
        SliceParams((0, 1), (2, 3), (1, 2)),
        TensorType((2, 1), F32),
    ),
    Prim.CONCAT: (
        lambda b, a: b.concat([a["x"], a["y"], a["x"]], 1),
        ConcatParams(1),
        TensorType((2, 9), F32),
    ),
    Prim.DYNAMIC_UPDATE_SLICE: (
        lambda b, a: b.dynamic_update_slice(a["x"], a["u"], (1, 1)),
        NoParams(),
        TensorType((2, 3), F32),
    ),
    Prim.IOTA: (
        lambda b, a: b.iota((2, 5), I32, 1),
        IotaParams((2, 5), I32, 1),
        TensorType((2, 5), I32),
    ),
    Prim.MATMUL: (lambda b, a: b.matmul(a["x"], a["m"]), NoParams(), TensorType((2, 4), F32)),
    Prim.CONV: (
        lambda b, a: b.conv(a["cx"], a["cw"], (2,)),
        ConvParams((2,), (0,), (0,), (1,), (1,), 1),
        TensorType((1, 1, 2), F32),
    ),
    Prim.REDUCE_WINDOW_SUM: (
        lambda b, a: b.reduce_window_sum(a["x"], (1, 2), (1, 1), [(0, 0), (1, 0)]),
        ReduceWindowParams((1, 2), (1, 1), (0, 1), (0, 0), (1, 1)),
        TensorType((2, 3), F32),
    ),
    Prim.REDUCE_WINDOW_MAX: (
        lambda b, a: b.reduce_window_max(a["x"], (2, 2), (1, 2)),
        ReduceWindowParams((2, 2), (1, 2), (0, 0), (0, 0), (1, 1)),
        TensorType((1, 1), F32),
    ),
}


def fresh() -> tuple[Builder, dict[str, Var]]:
    b = Builder("t")
    a = {
        "x": b.slot("x", F32, (2, 3)),
        "y": b.slot("y", F32, (2, 3)),
        "p": b.slot("p", BOOL, (2, 3)),
        "i": b.slot("i", I32, (4,)),
        "v": b.weight("v", F32, (3,)),
        "m": b.weight("m", F32, (3, 4)),
        "u": b.slot("u", F32, (1, 2)),
        "k": b.slot("k", I32, (2, 3)),
        "cx": b.slot("cx", F32, (1, 2, 3)),
        "cw": b.weight("cw", F32, (1, 2, 1)),
    }
    return b, a


def test_the_table_covers_every_primitive() -> None:
    assert set(CASES) == set(Prim)


@pytest.mark.parametrize("prim", list(Prim), ids=lambda p: p.value)
def test_every_primitive_has_a_builder_method_of_its_name(prim: Prim) -> None:
    assert callable(getattr(Builder, prim.value, None))


@pytest.mark.parametrize("prim", list(Prim), ids=lambda p: p.value)
def test_each_method_builds_its_equation(prim: Prim) -> None:
    call, params, result = CASES[prim]
    b, a = fresh()
    out = call(b, a)
    (e,) = eqns(b)  # exactly one equation: nothing needed broadcasting
    assert e.prim is prim
    assert e.params == params
    assert e.outputs == (out,)
    assert out.type == result
    assert all(v in a.values() for v in e.inputs if isinstance(v, Var))
    b.output("r", out)
    b.build()  # validates again, as a whole program


def test_python_int_starts_become_i32_literals() -> None:
    b, a = fresh()
    b.dynamic_update_slice(a["x"], a["u"], (1, 0))
    (e,) = eqns(b)
    assert e.inputs == (a["x"], a["u"], Literal(1, I32), Literal(0, I32))


# -- scalars become literals ----------------------------------------------------------------

_SCALARS: list[tuple[DType, float | int | bool, int]] = [
    # dtype, the Python scalar, its bit pattern in that dtype (computed by numpy itself)
    (F32, 0.1, int(np.float32(0.1).view(np.uint32))),
    (F32, 3, int(np.float32(3).view(np.uint32))),
    (F32, True, int(np.float32(1).view(np.uint32))),
    (F32, -0.0, 0x8000_0000),
    (F32, 1e39, 0x7F80_0000),  # beyond the range: rounds to +inf, as numpy's cast does
    (F32, 2**2000, 0x7F80_0000),  # beyond float64, too
    (F16, 0.1, int(np.float16(0.1).view(np.uint16))),
    (F16, 70000.0, 0x7C00),
    (F16, -(2**3000), 0xFC00),
    (BF16, 0.1, int(np.array(0.1).astype(ml_dtypes.bfloat16).view(np.uint16))),
    (BF16, 3, 0x4040),
    (I32, 7, 7),
    (I32, -1, 0xFFFF_FFFF),
    (I32, 2.0, 2),  # an integral float is an integer
    (I32, -(2**31), 0x8000_0000),
    (I32, 2**31 - 1, 0x7FFF_FFFF),
    (I32, True, 1),
]


@pytest.mark.parametrize(
    ("dtype", "scalar", "bits"), _SCALARS, ids=[f"{d.value}-{bits:#x}" for d, _, bits in _SCALARS]
)
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_scalar_is_a_literal_of_the_other_operands_dtype(
    dtype: DType, scalar: float, bits: int, side: str
) -> None:
    b = Builder("t")
    x = b.slot("x", dtype, (2,))
    out = b.sub(scalar, x) if side == "left" else b.sub(x, scalar)
    (e,) = eqns(b)  # a literal needs no broadcast
    lit = Literal(bits, dtype)
    assert e.inputs == ((lit, x) if side == "left" else (x, lit))
    assert out.type == x.type


def test_scalars_work_in_every_binary_method_and_in_select() -> None:
    b = Builder("t")
    x = b.slot("x", F32, (3,))
    pred = b.slot("p", BOOL, (3,))
    binary = [prim for prim in Prim if prim.is_binary]
    for prim in binary:
        getattr(b, prim.value)(x, 2.0)
    assert [e.inputs for e in eqns(b)] == [(x, Literal(0x4000_0000, F32))] * len(binary)
    b.output("s", b.select(pred, x, -1.5))
    b.output("t", b.select(pred, 0.25, x))
    r = evaluate(b.build(), {"x": np.array([1, 2, 3], np.float32), "p": np.array([1, 0, 1], bool)})
    np.testing.assert_array_equal(r["s"], np.float32([1, -1.5, 3]))
    np.testing.assert_array_equal(r["t"], np.float32([0.25, 2, 0.25]))


@pytest.mark.parametrize(
    ("scalar", "what"),
    [
        (2.5, "not an integer"),
        (float("nan"), "not an integer"),
        (float("inf"), "not an integer"),
        (2**31, "outside the range"),
        (-(2**31) - 1, "outside the range"),
        (10**5000, "too large to print"),  # too long for str(): still a typed error
    ],
    ids=["2.5", "nan", "inf", "2**31", "-2**31-1", "10**5000"],
)
def test_a_scalar_that_is_no_i32_is_a_typed_error_naming_the_equation(
    scalar: float, what: str
) -> None:
    b = Builder("t")
    x = b.slot("x", I32, (2,))
    b.neg(x)
    with pytest.raises(TypeCheckError, match=what) as info:
        b.mul(x, scalar)
    assert (info.value.eqn, info.value.primitive) == (1, "mul")
    assert str(info.value).startswith("equation 1 (mul): ")
    assert len(eqns(b)) == 1


def test_an_array_is_no_scalar() -> None:
    b = Builder("t")
    x = b.slot("x", F32, (2,))
    with pytest.raises(TypeCheckError) as info:
        b.add(x, np.ones(2, np.float32))
    assert (info.value.eqn, info.value.primitive) == (0, "add")


def test_two_scalars_have_no_dtype() -> None:
    b = Builder("t")
    with pytest.raises(TypeCheckError, match="at least one tensor") as info:
        b.add(1.0, 2.0)
    assert (info.value.eqn, info.value.primitive) == (0, "add")


# -- broadcasting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xs", "ys", "inserted"),
    [
        # shapes of x and y, then the broadcast_in_dim equations inserted: (operand, shape, dims)
        ((2, 3), (2, 3), []),
        ((), (2, 3), [("x", (2, 3), ())]),
        ((2, 3), (), [("y", (2, 3), ())]),
        ((3,), (2, 3), [("x", (2, 3), (1,))]),
        ((2, 1), (2, 3), [("x", (2, 3), (0, 1))]),
        ((2, 1), (1, 3), [("x", (2, 3), (0, 1)), ("y", (2, 3), (0, 1))]),
        ((4, 1, 3), (5, 1), [("x", (4, 5, 3), (0, 1, 2)), ("y", (4, 5, 3), (1, 2))]),
        ((1,), (0,), [("x", (0,), (0,))]),
        ((0, 3), (1, 3), [("y", (0, 3), (0, 1))]),
        ((1, 1), (), [("y", (1, 1), ())]),
    ],
)
def test_broadcasting_inserts_broadcast_in_dim(
    xs: tuple[int, ...],
    ys: tuple[int, ...],
    inserted: list[tuple[str, tuple[int, ...], tuple[int, ...]]],
) -> None:
    b = Builder("t")
    a = {"x": b.slot("x", F32, xs), "y": b.slot("y", F32, ys)}
    out = b.sub(a["x"], a["y"])
    *bcasts, last = eqns(b)
    assert [(e.inputs, e.params) for e in bcasts] == [
        ((a[name],), BroadcastParams(shape, dims)) for name, shape, dims in inserted
    ]
    assert last.prim is Prim.SUB and out.shape == np.broadcast_shapes(xs, ys)
    b.output("r", out)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    y = rng.standard_normal(ys).astype(np.float32)
    r = evaluate(b.build(), {"x": x, "y": y})["r"]
    np.testing.assert_array_equal(r, x - y)


_BINARY_NUMPY: dict[Prim, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Prim.ADD: np.add,
    Prim.SUB: np.subtract,
    Prim.MUL: np.multiply,
    Prim.MAX: np.maximum,
    Prim.MIN: np.minimum,
    Prim.GE: np.greater_equal,
    Prim.GT: np.greater,
    Prim.EQ: np.equal,
}


@settings(max_examples=60, deadline=None)
@given(
    hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3),
    st.sampled_from(sorted(_BINARY_NUMPY, key=lambda p: p.value)),
    st.integers(0, 2**32 - 1),
)
def test_broadcasting_is_numpys(shapes: hnp.BroadcastableShapes, prim: Prim, seed: int) -> None:
    xs, ys = shapes.input_shapes
    b = Builder("t")
    out = getattr(b, prim.value)(b.slot("x", F32, xs), b.slot("y", F32, ys))
    assert out.shape == np.broadcast_shapes(xs, ys) == shapes.result_shape
    b.output("r", out)
    rng = np.random.default_rng(seed)
    # small integers, so ties (eq, max of equal values) happen; every op here is exact on them
    x = rng.integers(-3, 4, xs).astype(np.float32)
    y = rng.integers(-3, 4, ys).astype(np.float32)
    r = evaluate(b.build(), {"x": x, "y": y})["r"]
    want = _BINARY_NUMPY[prim](x, y)
    assert r.dtype == want.dtype and r.shape == want.shape
    np.testing.assert_array_equal(r, want)


@settings(max_examples=40, deadline=None)
@given(
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
)
def test_shapes_that_do_not_broadcast_are_typed_errors(
    xs: tuple[int, ...], ys: tuple[int, ...]
) -> None:
    try:
        np.broadcast_shapes(xs, ys)
    except ValueError:
        pass
    else:
        return  # these broadcast; the test above covers them
    b = Builder("t")
    x, y = b.slot("x", F32, xs), b.slot("y", F32, ys)
    b.neg(x)
    with pytest.raises(TypeCheckError, match="do not broadcast") as info:
        b.add(x, y)
    assert (info.value.eqn, info.value.primitive) == (1, "add")
    assert len(eqns(b)) == 1


def test_select_broadcasts_predicate_and_branches() -> None:
    b = Builder("t")
    p = b.slot("p", BOOL, (3, 1))
    x = b.slot("x", F32, (4,))
    out = b.select(p, x, 0.5)
    assert out.type == TensorType((3, 4), F32)
    b.output("r", out)
    pv = np.array([[True], [False], [True]])
    xv = np.arange(4, dtype=np.float32)
    r = evaluate(b.build(), {"p": pv, "x": xv})["r"]
    np.testing.assert_array_equal(r, np.where(pv, xv, np.float32(0.5)))


def test_a_failed_binary_call_adds_no_broadcast() -> None:
    b = Builder("t")
    x = b.slot("x", F32, (3,))
    i = b.slot("i", I32, (2, 3))
    with pytest.raises(TypeCheckError, match="dtypes differ") as info:
        b.add(x, i)  # x would need a broadcast, but the dtypes differ anyway
    assert (info.value.eqn, info.value.primitive) == (0, "add")
    assert eqns(b) == ()
    with pytest.raises(TypeCheckError) as info:
        b.select(b.slot("p", F32, (2, 3)), x, x)  # the predicate is no bool
    assert (info.value.eqn, info.value.primitive) == (0, "select")
    assert eqns(b) == ()


# -- negative axes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "params"),
    [
        (lambda b, x, i: b.reduce_sum(x, -1), ReduceParams((2,))),
        (lambda b, x, i: b.reduce_sum(x, (-1, 0)), ReduceParams((0, 2))),
        (lambda b, x, i: b.reduce_max(x, (-2, -3)), ReduceParams((0, 1))),
        (lambda b, x, i: b.gather(x, i, axis=-1), GatherParams(2)),
        (lambda b, x, i: b.gather(x, i, axis=-3), GatherParams(0)),
        (lambda b, x, i: b.concat([x, x], -2), ConcatParams(1)),
        (lambda b, x, i: b.transpose(x, (-1, 0, -2)), TransposeParams((2, 0, 1))),
        (lambda b, x, i: b.iota((2, 3), F32, -1), IotaParams((2, 3), F32, 1)),
    ],
    ids=[
        "reduce -1",
        "reduce (-1, 0)",
        "reduce (-2, -3)",
        "gather -1",
        "gather -3",
        "concat -2",
        "transpose (-1, 0, -2)",
        "iota -1",
    ],
)
def test_negative_axes_count_from_the_end(
    call: Callable[[Builder, Var, Var], Var], params: Params
) -> None:
    b = Builder("t")
    x, i = b.slot("x", F32, (2, 3, 4)), b.slot("i", I32, (2,))
    call(b, x, i)
    assert eqns(b)[-1].params == params


@pytest.mark.parametrize(
    ("call", "prim"),
    [
        (lambda b, x: b.reduce_sum(x, -4), "reduce_sum"),
        (lambda b, x: b.reduce_sum(x, 3), "reduce_sum"),
        (lambda b, x: b.reduce_max(x, (1, -2)), "reduce_max"),  # the same axis twice
        (lambda b, x: b.concat([x], -4), "concat"),
        (lambda b, x: b.transpose(x, (0, 1, -4)), "transpose"),
        (lambda b, x: b.transpose(x, (0, 1, -2)), "transpose"),
        (lambda b, x: b.iota((2,), I32, -2), "iota"),
    ],
    ids=[
        "reduce -4",
        "reduce 3",
        "reduce (1, -2)",
        "concat -4",
        "transpose -4",
        "transpose twice",
        "iota -2",
    ],
)
def test_axes_out_of_range_are_typed_errors(call: Callable[[Builder, Var], Var], prim: str) -> None:
    b = Builder("t")
    x = b.slot("x", F32, (2, 3, 4))
    with pytest.raises(TypeCheckError) as info:
        call(b, x)
    assert (info.value.eqn, info.value.primitive) == (0, prim)


# -- state updates and results --------------------------------------------------------------


def test_a_state_and_its_update() -> None:
    b = Builder("acc")
    s = b.state("s", F32, (2,))
    x = b.slot("x", F32, (2,))
    nxt = b.add(s, x)
    b.output("y", nxt)
    b.update(s, nxt)
    p = b.build()
    assert p.result_names == ("y", "s")
    r = evaluate(p, {"s": np.float32([1, 2]), "x": np.float32([3, 4])})
    np.testing.assert_array_equal(r["s"], np.float32([4, 6]))


def test_only_a_state_has_an_update() -> None:
    b = Builder("t")
    x = b.slot("x", F32, (2,))
    w = b.weight("w", F32, (2,))
    for arg in (x, w, b.neg(x)):
        with pytest.raises(TypeCheckError, match="not a state argument"):
            b.update(arg, x)
    with pytest.raises(TypeCheckError, match="not a state argument"):
        b.update(Literal.of(1.0, F32), x)


def test_a_state_without_an_update_does_not_build() -> None:
    b = Builder("t")
    b.state("s", F32, (2,))
    b.state("kv", F32, (2,))
    with pytest.raises(TypeCheckError, match=r"\['kv', 's'\] have no update"):
        b.build()


def test_a_state_is_updated_once() -> None:
    b = Builder("t")
    s = b.state("s", F32, (2,))
    first = b.neg(s)
    b.update(s, first)
    with pytest.raises(TypeCheckError, match="already a result"):
        b.update(s, b.abs(s))
    assert b.build().updates == (Update("s", first),)


def test_an_update_has_the_states_type() -> None:
    b = Builder("t")
    s = b.state("s", F32, (2,))
    for wrong in (b.slot("a", F32, (3,)), b.slot("c", F16, (2,)), b.reduce_sum(s, 0)):
        with pytest.raises(TypeCheckError, match="the state is f32\\[2\\]"):
            b.update(s, wrong)


def test_result_names_are_distinct() -> None:
    b = Builder("t")
    s = b.state("s", F32, (2,))
    y = b.neg(s)
    b.output("y", y)
    with pytest.raises(TypeCheckError, match="already a result"):
        b.output("y", s)
    b.output("s", y)  # an output named like a state argument ...
    with pytest.raises(TypeCheckError, match="already a result"):
        b.update(s, y)  # ... then takes the name its update needs


def test_an_update_name_is_not_an_output_name() -> None:
    b = Builder("t")
    s = b.state("s", F32, (2,))
    b.update(s, b.neg(s))
    with pytest.raises(TypeCheckError, match="already a result"):
        b.output("s", s)


def test_arguments_are_declared_once() -> None:
    b = Builder("t")
    b.slot("x", F32, (2,))
    for declare in (b.slot, b.weight, b.state):
        with pytest.raises(TypeCheckError, match="declared twice"):
            declare("x", F32, (2,))
    assert [a.name for a in b.build().args] == ["x"]


@pytest.mark.parametrize("shape", [(-1,), (2, -3), (1.5,)])
def test_an_argument_shape_is_non_negative_integers(shape: tuple[int, ...]) -> None:
    with pytest.raises(TypeCheckError, match="non-negative integers"):
        Builder("t").slot("x", F32, shape)


def test_a_bad_argument_name_does_not_build() -> None:
    b = Builder("t")
    b.output("y", b.neg(b.slot("not a name", F32, (2,))))
    with pytest.raises(TypeCheckError, match="not an identifier"):
        b.build()


# -- values of another Builder --------------------------------------------------------------


def _twins() -> tuple[Builder, list[Var], list[Var]]:
    """Two builders whose vars have equal ids, types and names, so each var of the second
    compares equal to (but is not) the var of the first with its id."""
    made: list[tuple[Builder, list[Var]]] = []
    for name in ("one", "two"):
        b = Builder(name)
        s = b.state("s", F32, (2,))
        n1 = b.neg(s)
        made.append((b, [s, n1, b.neg(n1)]))
    (b1, ours), (_, theirs) = made
    assert ours == theirs and not any(o is t for o, t in zip(ours, theirs, strict=True))
    return b1, ours, theirs


@pytest.mark.parametrize(
    ("call", "prim"),
    [
        (lambda b, own, v: b.exp(v), "exp"),
        (lambda b, own, v: b.add(v, 1.0), "add"),
        (lambda b, own, v: b.mul(own, v), "mul"),
        (lambda b, own, v: b.select(b.gt(own, 0.0), v, 0.0), "select"),
        (lambda b, own, v: b.select(b.gt(v, 0.0), own, 0.0), "gt"),
        (lambda b, own, v: b.reduce_sum(v, 0), "reduce_sum"),
        (lambda b, own, v: b.concat([v, own], 0), "concat"),
        (lambda b, own, v: b.concat([own, v], 0), "concat"),
        (lambda b, own, v: b.transpose(v, (0,)), "transpose"),
        (lambda b, own, v: b.matmul(b.reshape(own, (1, 2)), b.reshape(v, (2, 1))), "reshape"),
    ],
    ids=[
        "exp",
        "add",
        "mul",
        "select branch",
        "gt",
        "reduce_sum",
        "concat first",
        "concat second",
        "transpose",
        "reshape",
    ],
)
def test_a_value_of_another_builder_is_refused(
    call: Callable[[Builder, Var, Var], Var], prim: str
) -> None:
    b1, ours, theirs = _twins()
    with pytest.raises(TypeCheckError, match="is not a value of program 'one'") as info:
        call(b1, ours[0], theirs[2])
    assert info.value.primitive == prim
    assert info.value.eqn is not None and info.value.eqn >= 2


def test_results_of_another_builder_are_refused() -> None:
    b1, ours, theirs = _twins()
    with pytest.raises(TypeCheckError, match="not a value of program 'one'"):
        b1.output("y", theirs[2])
    with pytest.raises(TypeCheckError, match="not a value of program 'one'"):
        b1.update(ours[0], theirs[2])
    with pytest.raises(TypeCheckError, match="not a state argument"):
        b1.update(theirs[0], ours[2])  # the other builder's state, equal to this one's


# -- every failure names its equation -------------------------------------------------------

_FAILURES: list[tuple[str, Callable[[Builder, dict[str, Var]], object], str, str]] = [
    # name, the failing call (after two equations), its primitive, a fact the message states
    ("exp of i32", lambda b, a: b.exp(a["i"]), "exp", "not defined on i32"),
    ("neg of bool", lambda b, a: b.neg(a["p"]), "neg", "not defined on bool"),
    ("neg of a literal", lambda b, a: b.neg(Literal.of(1.0, F32)), "neg", "not a literal"),
    ("neg of a float", lambda b, a: b.neg(1.0), "neg", "neither a value nor a literal"),
    ("add f32 + i32", lambda b, a: b.add(a["v"], a["k"]), "add", "dtypes differ"),
    ("add of bools", lambda b, a: b.add(a["p"], a["p"]), "add", "not defined on bool"),
    ("add of mismatched literal", lambda b, a: b.add(a["x"], Literal.of(1, I32)), "add", "differ"),
    ("gt shapes", lambda b, a: b.gt(a["x"], a["m"]), "gt", "do not broadcast"),
    ("select non-bool", lambda b, a: b.select(a["x"], a["x"], a["y"]), "select", "predicate"),
    (
        "select literal predicate",
        lambda b, a: b.select(Literal.of(True, BOOL), a["x"], 0.0),
        "select",
        "not a value",
    ),
    ("select shapes", lambda b, a: b.select(a["p"], a["m"], 0.0), "select", "do not broadcast"),
    ("select branch dtypes", lambda b, a: b.select(a["p"], a["x"], a["k"]), "select", "differ"),
    ("select two scalars", lambda b, a: b.select(a["p"], 1.0, 0.0), "select", "tensor operand"),
    (
        "convert of a literal",
        lambda b, a: b.convert(Literal.of(1.0, F32), I32),
        "convert",
        "not a literal",
    ),
    ("reduce_sum axis", lambda b, a: b.reduce_sum(a["x"], 2), "reduce_sum", "within rank 2"),
    ("reduce_max bool", lambda b, a: b.reduce_max(a["p"], 0), "reduce_max", "not defined on bool"),
    ("gather f32 indices", lambda b, a: b.gather(a["m"], a["v"]), "gather", "must be i32"),
    ("gather axis", lambda b, a: b.gather(a["m"], a["i"], 2), "gather", "outside rank 2"),
    ("transpose perm", lambda b, a: b.transpose(a["x"], (0, 0)), "transpose", "not a permutation"),
    ("reshape size", lambda b, a: b.reshape(a["x"], (7,)), "reshape", "6 elements"),
    ("reshape negative", lambda b, a: b.reshape(a["x"], (-2, -3)), "reshape", "non-negative"),
    ("reshape huge", lambda b, a: b.reshape(a["x"], (10**4000, 10**4000)), "reshape", "too large"),
    (
        "broadcast dims",
        lambda b, a: b.broadcast_in_dim(a["v"], (3, 2), (1,)),
        "broadcast_in_dim",
        "size 3",
    ),
    (
        "broadcast rank",
        lambda b, a: b.broadcast_in_dim(a["x"], (2, 3), (0,)),
        "broadcast_in_dim",
        "dims",
    ),
    ("slice limit", lambda b, a: b.slice(a["x"], (0, 0), (2, 4)), "slice", "limit 4 <= size 3"),
    ("slice stride", lambda b, a: b.slice(a["x"], (0, 0), (2, 3), (1, 0)), "slice", "stride 0"),
    (
        "concat shapes",
        lambda b, a: b.concat([a["x"], a["m"]], 0),
        "concat",
        "differ outside axis 0",
    ),
    ("concat nothing", lambda b, a: b.concat([], 0), "concat", "at least one"),
    (
        "dus start",
        lambda b, a: b.dynamic_update_slice(a["x"], a["u"], (0, 2)),
        "dynamic_update_slice",
        "literal start 2",
    ),
    (
        "dus negative start",
        lambda b, a: b.dynamic_update_slice(a["x"], a["u"], (-1, 0)),
        "dynamic_update_slice",
        "literal start -1",
    ),
    (
        "dus huge start",
        lambda b, a: b.dynamic_update_slice(a["x"], a["u"], (2**40, 0)),
        "dynamic_update_slice",
        "outside the range of i32",
    ),
    (
        "dus starts",
        lambda b, a: b.dynamic_update_slice(a["x"], a["u"], (0,)),
        "dynamic_update_slice",
        "needs 2 start",
    ),
    (
        "dus update",
        lambda b, a: b.dynamic_update_slice(a["u"], a["x"], (0, 0)),
        "dynamic_update_slice",
        "does not fit",
    ),
    ("iota axis", lambda b, a: b.iota((2, 3), I32, 2), "iota", "axis 2"),
    ("iota bool", lambda b, a: b.iota((2, 3), BOOL, 0), "iota", "numeric dtype"),
    ("matmul shapes", lambda b, a: b.matmul(a["x"], a["y"]), "matmul", "cannot contract"),
    ("matmul rank", lambda b, a: b.matmul(a["v"], a["m"]), "matmul", "cannot contract"),
    ("literal bits", lambda b, a: b.add(a["x"], Literal(2**40, F32)), "add", "does not fit f32"),
]


@pytest.mark.parametrize(("name", "call", "prim", "fact"), _FAILURES, ids=[f[0] for f in _FAILURES])
def test_every_failure_names_the_equation_and_primitive(
    name: str, call: Callable[[Builder, dict[str, Var]], object], prim: str, fact: str
) -> None:
    b, a = fresh()
    b.neg(a["x"])
    b.neg(a["y"])
    with pytest.raises(PootError) as info:
        call(b, a)
    err = info.value
    assert isinstance(err, TypeCheckError)
    assert (err.eqn, err.primitive) == (2, prim)
    assert str(err).startswith(f"equation 2 ({prim}): ")
    assert fact in str(err)
    assert len(eqns(b)) == 2  # a failed call adds nothing


def test_a_failure_leaves_a_builder_that_still_builds() -> None:
    b, a = fresh()
    with pytest.raises(TypeCheckError):
        b.add(a["v"], a["m"])
    b.output("r", b.add(a["v"], a["x"]))
    r = evaluate(
        b.build(),
        {
            "x": np.ones((2, 3), np.float32),
            "y": np.zeros((2, 3), np.float32),
            "p": np.zeros((2, 3), bool),
            "i": np.zeros(4, np.int32),
            "v": np.float32([1, 2, 3]),
            "m": np.zeros((3, 4), np.float32),
            "u": np.zeros((1, 2), np.float32),
            "k": np.zeros((2, 3), np.int32),
            "cx": np.zeros((1, 2, 3), np.float32),
            "cw": np.zeros((1, 2, 1), np.float32),
        },
    )
    np.testing.assert_array_equal(r["r"], np.float32([[2, 3, 4], [2, 3, 4]]))


def test_build_twice_gives_equal_programs() -> None:
    b, a = fresh()
    b.output("r", b.neg(a["x"]))
    assert b.build() == b.build()


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8, np.intp, int])
def test_dims_and_axes_of_any_integer_type(kind: type) -> None:
    """issue 26: ``slot(..., (np.int64(3),))`` raised ``TypeCheckError``. Any integer type
    (``numbers.Integral``, ``operator.index``) is a dim, an axis or a start; the program is the
    one built from Python ints, its params Python ints."""

    def build(n: Callable[[int], object]) -> str:
        b = Builder("t")
        x = b.slot("x", F32, (n(2), n(3)))
        y = b.reshape(b.transpose(x, (n(1), n(0))), (n(6),))
        y = b.slice(y, (n(1),), (n(5),), (n(2),))
        z = b.broadcast_in_dim(y, (n(3), n(2)), (n(1),))
        z = b.add(z, b.convert(b.iota((n(3), n(2)), DType.I32, n(0)), F32))
        b.output("r", b.reduce_sum(b.concat([z, z], n(0)), n(1)))
        return repr(b.build())  # numpy 2's repr of an np.int64 param is ``np.int64(3)``

    assert build(kind) == build(int)


@pytest.mark.parametrize("dim", [True, np.bool_(True), 2.0, "3"])
def test_a_bool_or_a_non_integer_is_no_dim(dim: object) -> None:
    with pytest.raises(TypeCheckError, match="non-negative integers"):
        Builder("t").slot("x", F32, (dim,))  # type: ignore[arg-type]
