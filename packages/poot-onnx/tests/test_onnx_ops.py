"""The decomposed ONNX ops past their node cases: ``Einsum`` (whose node cases are float64, a dtype
poot lacks), the recurrent layers' attributes the reference evaluator ignores (``clip``,
``input_forget``, ``activations``, ``layout``), and ``TopK``/``OneHot``/``ReduceProd`` at their
edges (ties, infinities, negative and out-of-range indices, odd lengths). Each is checked against
numpy written here, independently of the lowering.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from poot_ir import UnsupportedOnnx
from poot_onnx import import_model
from test_onnx import I32, F, init, model, rand, run, vi


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,...jk->...ik", [(2, 2, 3, 4), (2, 2, 4, 3)]),
        ("ij->ji", [(3, 4)]),
        ("ij->", [(3, 4)]),
        ("i,i", [(5,), (5,)]),
        ("ij,kj", [(3, 4), (2, 4)]),  # implicit output: ik
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
        ("abc,cd->dba", [(2, 3, 4), (4, 2)]),
        ("ij,jk->k", [(3, 4), (4, 2)]),
    ],
)
def test_einsum_matches_numpy(equation: str, shapes: list[tuple[int, ...]]) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    m = model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [vi(n, s) for n, s in zip(names, shapes, strict=True)],
        ["y"],
        opset=12,
    )
    xs = {n: rand(*s) for n, s in zip(names, shapes, strict=True)}
    got = run(import_model(m), **xs)["y"]
    want = np.einsum(equation, *xs.values())
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _edgy(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Random values with NaN, infinities and both zeros spread over the array (diagonal and
    off it) for floats; the i32 extremes for integers."""
    rng = np.random.default_rng(sum(shape))
    if dtype == np.int32:
        x = rng.integers(-100, 100, shape).astype(np.int32)
        specials = [np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0]
    else:
        x = rng.standard_normal(shape).astype(np.float32)
        specials = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    flat = x.reshape(-1)
    for i, v in enumerate(specials):
        flat[(i * 7) % flat.size] = v
    return x


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),  # implicit output: the trace
        ("bii->bi", [(2, 3, 3)]),
        ("...ii->...i", [(2, 2, 3, 3)]),
        ("ibi->bi", [(3, 2, 3)]),  # the repeated axes apart
        ("iii->i", [(3, 3, 3)]),
        ("iijj->ij", [(2, 2, 3, 3)]),
        ("ijij->ji", [(2, 3, 2, 3)]),
        ("ii,i->i", [(4, 4), (4,)]),
        ("ij,jj->i", [(2, 3), (3, 3)]),
        ("ii->", [(1, 1)]),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_einsum_diagonals_match_numpy(
    equation: str, shapes: list[tuple[int, ...]], dtype: Any
) -> None:
    """A diagonal is data movement: where no product or sum mixes values, each element comes
    through bit for bit (NaN, infinities, signed zeros); with them, as numpy computes."""
    names = [f"x{i}" for i in range(len(shapes))]
    elem = F if dtype == np.float32 else I32
    m = model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [vi(n, s, elem) for n, s in zip(names, shapes, strict=True)],
        ["y"],
        opset=12,
    )
    xs = {n: _edgy(s, dtype) for n, s in zip(names, shapes, strict=True)}
    got = run(import_model(m), **xs)["y"]
    with np.errstate(all="ignore"):
        want = np.einsum(equation, *xs.values())
    assert got.shape == want.shape and got.dtype == want.dtype
    moved_only = (
        len(shapes) == 1
        and "->" in equation
        and len(equation.split("->")[1]) == len(set(equation.split("->")[0]))
    )
    if moved_only:  # nothing summed: the same bits
        assert got.tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_diagonal_of_axes_of_two_sizes_is_a_typed_refusal() -> None:
    m = model(
        [helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")],
        [vi("x", (3, 4))],
        ["y"],
        opset=12,
    )
    with pytest.raises(UnsupportedOnnx, match="sizes 3 and 4"):
        import_model(m)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _lstm_ref(
    x: np.ndarray, w: np.ndarray, r: np.ndarray, clip: float, coupled: bool
) -> np.ndarray:
    """A forward LSTM (gates i o f c, no bias) with the gate inputs clipped."""
    h = np.zeros((x.shape[1], r.shape[-1]), np.float64)
    c = np.zeros_like(h)
    ys = []
    for t in range(x.shape[0]):
        g = np.clip(x[t] @ w[0].T + h @ r[0].T, -clip, clip)
        i, o, f, cc = np.split(g, 4, axis=-1)
        i = _sigmoid(i)
        f = 1 - i if coupled else _sigmoid(f)
        c = f * c + i * np.tanh(cc)
        h = _sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys)[:, None]


@pytest.mark.parametrize("coupled", [False, True])
def test_lstm_clip_and_input_forget(coupled: bool) -> None:
    seq, batch, inp, hid = 3, 2, 3, 4
    w, r = rand(1, 4 * hid, inp) * 3, rand(1, 4 * hid, hid) * 3  # large: the clip bites
    m = model(
        [
            helper.make_node(
                "LSTM",
                ["x", "w", "r"],
                ["y"],
                hidden_size=hid,
                clip=1.5,
                input_forget=int(coupled),
            )
        ],
        [vi("x", (seq, batch, inp))],
        ["y"],
        [init("w", w), init("r", r)],
    )
    x = rand(seq, batch, inp)
    got = run(import_model(m), x=x)["y"]
    want = _lstm_ref(x.astype(np.float64), w, r, 1.5, coupled)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _recurrent(op: str, layout: int, **attrs: Any) -> Any:
    seq, batch, inp, hid = 3, 2, 3, 4
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    xs = (batch, seq, inp) if layout else (seq, batch, inp)
    hs = (batch, 2, hid) if layout else (2, batch, hid)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, gates * hid, inp)).astype(np.float32)
    r = rng.standard_normal((2, gates * hid, hid)).astype(np.float32)
    bias = rng.standard_normal((2, 2 * gates * hid)).astype(np.float32)
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    ins = ["x", "w", "r", "b", "", "h0"] + (["c0"] if op == "LSTM" else [])
    node = helper.make_node(
        op, ins, outs, hidden_size=hid, direction="bidirectional", layout=layout, **attrs
    )
    states = [vi("h0", hs)] + ([vi("c0", hs)] if op == "LSTM" else [])
    return model(
        [node],
        [vi("x", xs), *states],
        outs,
        [init("w", w), init("r", r), init("b", bias)],
        opset=14,
    )


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_layout_1_is_layout_0_batch_first(op: str) -> None:
    attrs: dict[str, Any] = {"linear_before_reset": 1} if op == "GRU" else {}
    x, h0, c0 = rand(3, 2, 3), rand(2, 2, 4), rand(2, 2, 4)
    states = {"h0": h0, **({"c0": c0} if op == "LSTM" else {})}
    seq_first = run(import_model(_recurrent(op, 0, **attrs)), x=x, **states)
    batch_first = run(
        import_model(_recurrent(op, 1, **attrs)),
        x=x.transpose(1, 0, 2),
        **{k: v.transpose(1, 0, 2) for k, v in states.items()},
    )
    np.testing.assert_array_equal(batch_first["y"], seq_first["y"].transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(batch_first["yh"], seq_first["yh"].transpose(1, 0, 2))


def test_rnn_activations_take_their_alphas_in_order() -> None:
    hid = 3
    w, r = rand(1, hid, 2), rand(1, hid, hid)
    m = model(
        [
            helper.make_node(
                "RNN",
                ["x", "w", "r"],
                ["y"],
                hidden_size=hid,
                activations=["LeakyRelu"],
                activation_alpha=[0.25],
            )
        ],
        [vi("x", (2, 1, 2))],
        ["y"],
        [init("w", w), init("r", r)],
    )
    x = rand(2, 1, 2)
    h = np.zeros((1, hid))
    ys = []
    for t in range(2):
        pre = x[t] @ w[0].T + h @ r[0].T
        h = np.where(pre >= 0, pre, 0.25 * pre)
        ys.append(h)
    np.testing.assert_allclose(run(import_model(m), x=x)["y"][:, 0], np.stack(ys), rtol=1e-5)


def test_unequal_sequence_lens_are_a_typed_refusal() -> None:
    m = model(
        [helper.make_node("RNN", ["x", "w", "r", "", "lens"], ["y"], hidden_size=2)],
        [vi("x", (3, 2, 2))],
        ["y"],
        [init("w", rand(1, 2, 2)), init("r", rand(1, 2, 2)), init("lens", [3, 2], np.int32)],
    )
    with pytest.raises(UnsupportedOnnx, match="sequence_lens"):
        import_model(m)


def _topk_model(k: int, largest: int, elem: int, shape: tuple[int, int] = (2, 6)) -> Any:
    return model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)],
        [vi("x", shape, elem)],
        ["v", "i"],
        [init("k", [k], np.int64)],
    )


def _topk_order(row: np.ndarray, largest: bool) -> list[int]:
    """TopK's order of one row, written out: NaN (either sign) above every number, +inf
    included, so first when largest and last when smallest; equal values (-0 and +0 too) by
    index."""

    def key(j: int) -> tuple[int, float, int]:
        v = float(row[j])
        if np.isnan(v):
            return (0 if largest else 1, 0.0, j)
        return (1 if largest else 0, -v if largest else v, j)

    return sorted(range(row.size), key=key)


_NAN_ROWS = np.array(
    [
        [1.0, np.nan, -np.inf, 3.0, np.nan, np.inf, -0.0, 0.0],
        [np.nan, 2.0, 2.0, -np.inf, np.inf, np.nan, -1.0, 2.0],
        [-np.nan, np.inf, np.inf, 0.0, -0.0, -np.inf, -np.inf, np.nan],  # a NaN with its sign set
        [np.nan] * 8,
        [-np.inf] * 7 + [np.nan],
        [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0],  # no NaN: the plain order
    ],
    np.float32,
)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("k", [1, 3, 8])  # 8: the whole axis
def test_topk_puts_nan_above_every_number(largest: int, k: int) -> None:
    """Against the order written out here, and bit for bit against ONNX Runtime on the same
    model when it is installed (the ``models`` group)."""
    x = _NAN_ROWS
    m = _topk_model(k, largest, F, x.shape)
    got = run(import_model(m), x=x)
    order = np.array([_topk_order(r, bool(largest))[:k] for r in x])
    np.testing.assert_array_equal(got["i"], order)
    assert got["v"].tobytes() == np.take_along_axis(x, order, 1).tobytes()  # NaN signs too
    ort = pytest.importorskip("onnxruntime")
    m.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64  # ORT checks it
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    v, i = session.run(None, {"x": x})
    np.testing.assert_array_equal(got["i"], i)
    assert got["v"].tobytes() == v.tobytes()


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_orders_ties_by_index_and_keeps_infinities(largest: int) -> None:
    x = np.array(
        [[1.0, -np.inf, 3.0, 3.0, -np.inf, 0.0], [np.inf, 2.0, 2.0, -1.0, np.inf, 2.0]],
        np.float32,
    )
    got = run(import_model(_topk_model(5, largest, F)), x=x)
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got["i"], order)
    np.testing.assert_array_equal(got["v"], np.take_along_axis(x, order, 1))


def test_topk_of_i32_smallest_at_the_type_edges() -> None:
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    x = np.array([[hi, lo, 0, lo, hi, -1], [5, 5, 5, 5, 5, 5]], np.int32)
    got = run(import_model(_topk_model(6, 0, I32)), x=x)
    order = np.argsort(x, axis=1, kind="stable")
    np.testing.assert_array_equal(got["i"], order)
    np.testing.assert_array_equal(got["v"], np.take_along_axis(x, order, 1))


def test_onehot_wraps_negative_indices_and_drops_out_of_range() -> None:
    idx = np.array([[0, -1, 4, -5], [2, 5, -6, 3]], np.int32)
    m = model(
        [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=0)],
        [vi("i", (2, 4), I32)],
        ["y"],
        [init("d", 5, np.int64), init("v", [-2.0, 7.0])],
    )
    got = run(import_model(m), i=idx)["y"]
    want = np.full((5, 2, 4), -2.0, np.float32)
    for j, k in np.ndindex(idx.shape):
        t = idx[j, k] + (5 if idx[j, k] < 0 else 0)
        if 0 <= t < 5:
            want[t, j, k] = 7.0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("axes", "keep"), [((1,), 1), ((0, 2), 0), ((), 1)])
def test_reduce_prod_over_odd_lengths(axes: tuple[int, ...], keep: int) -> None:
    x = (np.random.default_rng(1).uniform(0.5, 1.5, (3, 5, 7)) * [[[1]], [[-1]], [[1]]]).astype(
        np.float32
    )
    inits = [init("axes", list(axes), np.int64)] if axes else []
    m = model(
        [helper.make_node("ReduceProd", ["x", "axes"] if axes else ["x"], ["y"], keepdims=keep)],
        [vi("x", x.shape)],
        ["y"],
        inits,
    )
    got = run(import_model(m), x=x)["y"]
    want = np.prod(x.astype(np.float64), axis=axes or None, keepdims=bool(keep))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("act", ["Softplus", "Elu", "Sigmoid"])
def test_rnn_activations_stay_finite_where_exp_would_overflow(act: str) -> None:
    """Gate inputs of +-1000: e^1000 overflows f32, the activations do not."""
    w = np.array([[[1000.0], [-1000.0]]], np.float32)
    m = model(
        [helper.make_node("RNN", ["x", "w", "r"], ["y"], hidden_size=2, activations=[act])],
        [vi("x", (1, 1, 1))],
        ["y"],
        [init("w", w), init("r", np.zeros((1, 2, 2)))],
    )
    got = run(import_model(m), x=np.ones((1, 1, 1), np.float32))["y"].reshape(-1)
    want = {"Softplus": [1000.0, 0.0], "Elu": [1000.0, -1.0], "Sigmoid": [1.0, 0.0]}[act]
    np.testing.assert_array_equal(got, np.asarray(want, np.float32))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_a_recurrence_past_the_unroll_limit_is_refused_before_unrolling(op: str) -> None:
    from poot_onnx.context import MAX_UNROLLED

    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = np.random.default_rng(4)
    for seq, refused in ((MAX_UNROLLED + 1, True), (2, False)):
        m = model(
            [helper.make_node(op, ["x", "w", "r"], ["y"], hidden_size=2)],
            [vi("x", (seq, 1, 2))],
            ["y"],
            [
                init("w", rng.standard_normal((1, gates * 2, 2)).astype(np.float32)),
                init("r", rng.standard_normal((1, gates * 2, 2)).astype(np.float32)),
            ],
            opset=14,
        )
        if refused:  # a 10^7-step sequence would exhaust memory unrolling it
            with pytest.raises(UnsupportedOnnx, match=f"sequence length {seq}"):
                import_model(m)
        else:
            assert len(import_model(m).program.eqns) > 0


def test_topk_past_the_unroll_limit_is_refused() -> None:
    from poot_onnx.context import MAX_UNROLLED

    k = MAX_UNROLLED + 1
    m = model(
        [
            helper.make_node(
                "Constant", [], ["k"], value=helper.make_tensor("k", TensorProto.INT64, [1], [k])
            ),
            helper.make_node("TopK", ["x", "k"], ["v", "i"]),
        ],
        [vi("x", (1, k))],
        ["v", "i"],
        opset=11,
    )
    with pytest.raises(UnsupportedOnnx, match=f"k {k}"):
        import_model(m)


def _rnn_ref(x: np.ndarray, w: np.ndarray, r: np.ndarray, reverse: bool) -> np.ndarray:
    """A tanh RNN over ``x`` (no bias, zero initial state), backwards when ``reverse``; ``Y``
    in sequence order, as ONNX lays it out."""
    h = np.zeros((x.shape[1], r.shape[-1]), np.float64)
    ys: dict[int, np.ndarray] = {}
    for t in range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0]):
        h = np.tanh(x[t] @ w.T + h @ r.T)
        ys[t] = h
    return np.stack([ys[t] for t in range(x.shape[0])])


@pytest.mark.parametrize("op", ["RNN", "GRU"])
def test_recurrent_reverse_and_bidirectional_lay_y_out_in_sequence_order(op: str) -> None:
    """The reverse direction runs from the last step but ``Y`` is in sequence order and
    ``Y_h`` is its last step run (step 0); bidirectional stacks forward then reverse. For GRU
    the check is against its own forward run of the reversed sequence."""
    seq, batch, inp, hid = 4, 2, 3, 5
    gates = {"RNN": 1, "GRU": 3}[op]
    w, r = rand(2, gates * hid, inp), rand(2, gates * hid, hid)
    x = rand(seq, batch, inp)

    def imported(direction: str, ws: np.ndarray, rs: np.ndarray) -> Any:
        node = helper.make_node(
            op, ["x", "w", "r"], ["y", "yh"], hidden_size=hid, direction=direction
        )
        return import_model(
            model([node], [vi("x", (seq, batch, inp))], ["y", "yh"], [init("w", ws), init("r", rs)])
        )

    both = run(imported("bidirectional", w, r), x=x)
    assert both["y"].shape == (seq, 2, batch, hid) and both["yh"].shape == (2, batch, hid)
    back = run(imported("reverse", w[1:], r[1:]), x=x)
    if op == "RNN":
        x64 = x.astype(np.float64)
        fwd_want = _rnn_ref(x64, w[0].astype(np.float64), r[0].astype(np.float64), False)
        want = _rnn_ref(x64, w[1].astype(np.float64), r[1].astype(np.float64), True)
        np.testing.assert_allclose(both["y"][:, 0], fwd_want, rtol=1e-5, atol=1e-6)
    else:  # reverse over x is forward over x reversed, with Y flipped back
        fwd = run(imported("forward", w[1:], r[1:]), x=x[::-1].copy())
        want = fwd["y"][::-1, 0]
    np.testing.assert_allclose(back["y"][:, 0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(back["yh"][0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(both["y"][:, 1], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(both["yh"][1], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(both["yh"][0], both["y"][-1, 0], rtol=0, atol=0)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("with_state", [False, True])
def test_a_recurrence_over_an_empty_sequence_is_a_typed_refusal(op: str, with_state: bool) -> None:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    hid, batch = 2, 1
    ins = ["x", "w", "r"] + (["", "", "h0"] if with_state else [])
    node = helper.make_node(op, ins, ["y", "yh"], hidden_size=hid)
    states = [vi("h0", (1, batch, hid))] if with_state else []
    m = model(
        [node],
        [vi("x", (0, batch, 3)), *states],
        ["y", "yh"],
        [init("w", rand(1, gates * hid, 3)), init("r", rand(1, gates * hid, hid))],
    )
    with pytest.raises(UnsupportedOnnx, match="length 0"):
        import_model(m)
