"""Conv, ConvTranspose and the pools import as ``conv`` and window reductions: a handful of
equations whatever the group count, and the oracle's result equals an independent reference:
onnx's reference evaluator (``onnx.reference``) for the convolutions, and for the pools the
float64 pool of ``shared/reference/conv-pool.md`` (checked there against ONNX Runtime on 720
configurations; ``onnx.reference`` 1.23 gets ceil_mode extents wrong, e.g. 6 windows of 2 over
5 + 1 padding at stride 1) over a grid of ceil_mode, count_include_pad, dilations and pads up
to and past the kernel."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view
from onnx import ModelProto, TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from poot_ir import Prim, Var, evaluate
from poot_ir.errors import UnsupportedOnnx
from poot_onnx import import_model


def _model(node: object, x_shape: tuple[int, ...], inits: dict[str, np.ndarray]) -> ModelProto:
    graph = helper.make_graph(
        [node],  # type: ignore[list-item]
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _check(model: ModelProto, x: np.ndarray, want: np.ndarray | None = None) -> int:
    """Compare the oracle with ``want`` (default: the reference evaluator); the equation count."""
    if want is None:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    imported = import_model(model)
    program = imported.program
    feed = dict(imported.weights) | {imported.inputs["x"]: x}
    got = imported.results(evaluate(program, feed))["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return len(program.eqns)


def test_a_depthwise_conv_of_576_groups_is_three_equations() -> None:
    rng = np.random.default_rng(0)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=576, pads=[1, 1, 1, 1])
    w = rng.standard_normal((576, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(576).astype(np.float32)
    x = rng.standard_normal((1, 576, 7, 7)).astype(np.float32)
    program = import_model(_model(node, x.shape, {"w": w, "b": b})).program
    assert [e.prim for e in program.eqns] == [Prim.CONV, Prim.BROADCAST_IN_DIM, Prim.ADD]
    assert _check(_model(node, x.shape, {"w": w, "b": b}), x) == 3


_CONVS = [
    ({"pads": [1, 0, 2, 1], "strides": [2, 1]}, (4, 4, 3, 2), 1),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (4, 4, 3, 3), 1),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 3]}, (4, 2, 2, 3), 2),
    ({"auto_pad": "VALID", "dilations": [2, 1]}, (6, 2, 2, 2), 2),
    ({"pads": [1, 1, 1, 1]}, (8, 1, 3, 3), 4),  # depthwise, multiplier 2
]


@pytest.mark.parametrize(("attrs", "w_shape", "group"), _CONVS)
def test_conv_matches_the_reference(
    attrs: dict[str, object], w_shape: tuple[int, ...], group: int
) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)
    _check(_model(node, x.shape, {"w": w, "b": b}), x)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2], "pads": [1, 2], "output_padding": [1]},
        {"strides": [3], "pads": [0, 1]},  # (groups and dilations: the ONNX node cases)
        {"strides": [2], "pads": [3, 3]},  # pads past dilation*(kernel-1): a cropping conv
    ],
)
def test_conv_transpose_matches_the_reference(attrs: dict[str, object]) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    _check(_model(node, x.shape, {"w": w}), x)


# -- the pool of conv-pool.md, section (c), verbatim in substance -----------------------------


def _pad(x: np.ndarray, pads: Any, value: float = 0.0) -> np.ndarray:
    crop = tuple(
        slice(max(-lo, 0), x.shape[2 + a] - max(-hi, 0)) for a, (lo, hi) in enumerate(pads)
    )
    x = x[(slice(None), slice(None), *crop)]
    widths = [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    return np.pad(x, widths, constant_values=value)


def _windows(x: np.ndarray, kernel: Any, strides: Any, dil: Any) -> np.ndarray:
    k = len(kernel)
    spans = [(kk - 1) * d + 1 for kk, d in zip(kernel, dil, strict=True)]
    v = sliding_window_view(x, spans, axis=tuple(range(2, 2 + k)))
    v = v[(Ellipsis, *(slice(None, None, d) for d in dil))]
    return v[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]


def _out_size(n: int, k: int, s: int, d: int, lo: int, hi: int, ceil: bool) -> tuple[int, int]:
    span = (k - 1) * d + 1
    room = n + lo + hi - span
    o = (-(-room // s) if ceil else room // s) + 1
    if ceil and (o - 1) * s >= n + lo:
        o -= 1
    return o, max((o - 1) * s + span - (n + lo + hi), 0)


def ref_pool(
    x: np.ndarray,
    kernel: Any,
    strides: Any,
    pads: Any,
    dil: Any,
    kind: str,
    include: bool,
    ceil: bool,
) -> np.ndarray:
    x = np.asarray(x, np.float64)
    k = x.ndim - 2
    sizes = [
        _out_size(x.shape[2 + a], kernel[a], strides[a], dil[a], *pads[a], ceil) for a in range(k)
    ]
    full = tuple((lo, hi + e) for (lo, hi), (_, e) in zip(pads, sizes, strict=True))
    crop = (slice(None), slice(None), *(slice(0, o) for o, _ in sizes))
    fill = -np.inf if kind == "max" else 0.0
    win = _windows(_pad(x, full, fill), kernel, strides, dil)[crop]
    axes = tuple(range(-k, 0))
    if kind == "max":
        return np.asarray(win.max(axis=axes))
    mask = _pad(np.ones((1, 1, *x.shape[2:])), pads, 1.0 if include else 0.0)
    mask = _pad(mask, tuple((0, e) for _, e in sizes), 0.0)
    counts = _windows(mask, kernel, strides, dil)[crop].sum(axis=axes)
    with np.errstate(invalid="ignore"):  # a window wholly in padding counts 0 taps: NaN
        return np.asarray(win.sum(axis=axes) / counts)


def _pool_grid() -> list[object]:
    cases = []
    for n, k, s, (pb, pe), d, ceil in itertools.product(
        (6, 7), (2, 3), (1, 2, 3), ((0, 0), (1, 0), (0, 1), (2, 1)), (1, 2), (0, 1)
    ):
        if (k - 1) * d + 1 > n + pb + pe:
            continue
        cases.append(pytest.param(n, k, s, pb, pe, d, ceil, id=f"n{n}k{k}s{s}p{pb}{pe}d{d}c{ceil}"))
    return cases


@pytest.mark.parametrize(("n", "k", "s", "pb", "pe", "d", "ceil"), _pool_grid())
def test_pools_match_the_reference(
    n: int, k: int, s: int, pb: int, pe: int, d: int, ceil: int
) -> None:
    rng = np.random.default_rng(n * 1000 + k * 100 + s)
    x = rng.standard_normal((1, 2, n, 5)).astype(np.float32)
    window = {
        "kernel_shape": [k, 2],
        "strides": [s, 1],
        "pads": [pb, 0, pe, 1],
        "dilations": [d, 1],
        "ceil_mode": ceil,
    }
    pads, ref = [(pb, pe), (0, 1)], (x, [k, 2], [s, 1])
    want = ref_pool(*ref, pads, [d, 1], "max", False, bool(ceil)).astype(np.float32)
    _check(_model(helper.make_node("MaxPool", ["x"], ["y"], **window), x.shape, {}), x, want)
    for include in (0, 1):
        node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=include, **window)
        want = ref_pool(*ref, pads, [d, 1], "avg", bool(include), bool(ceil)).astype(np.float32)
        _check(_model(node, x.shape, {}), x, want)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_are_one_window(op: str) -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    assert _check(_model(helper.make_node(op, ["x"], ["y"]), x.shape, {}), x) <= 2


def test_max_pool_padding_is_no_weight() -> None:
    # the -inf padding lives in the primitive: no `.fill` weight a device must hold (issue 28)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    imported = import_model(_model(node, (1, 2, 5, 5), {}))
    assert not imported.weights


def _ref_lp(x: np.ndarray, kernel: Any, strides: Any, pads: Any, dil: Any, p: int) -> np.ndarray:
    """``(sum |x|^p)^(1/p)`` over zero-padded windows, in float64 (ONNX's LpPool)."""
    x = np.abs(np.asarray(x, np.float64)) ** p
    k = x.ndim - 2
    sizes = [
        _out_size(x.shape[2 + a], kernel[a], strides[a], dil[a], *pads[a], False) for a in range(k)
    ]
    crop = (slice(None), slice(None), *(slice(0, o) for o, _ in sizes))
    win = _windows(_pad(x, pads, 0.0), kernel, strides, dil)[crop]
    return np.asarray(win.sum(axis=tuple(range(-k, 0))) ** (1.0 / p))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize(
    ("kernel", "strides", "pads", "dil"),
    [
        ([3, 3], [1, 1], [0, 0, 0, 0], [1, 1]),
        ([3, 2], [2, 1], [1, 0, 2, 1], [1, 2]),
        ([2], [2], [1, 1], [1]),
    ],
)
def test_lp_pool_is_a_window_sum(
    kernel: list[int], strides: list[int], pads: list[int], dil: list[int], p: int
) -> None:
    k = len(kernel)
    x = np.random.default_rng(5).standard_normal((2, 3, *([7] * k))).astype(np.float32)
    node = helper.make_node(
        "LpPool", ["x"], ["y"], kernel_shape=kernel, strides=strides, pads=pads, dilations=dil, p=p
    )
    pairs = [(pads[a], pads[a + k]) for a in range(k)]
    want = _ref_lp(x, kernel, strides, pairs, dil, p).astype(np.float32)
    assert _check(_model(node, x.shape, {}), x, want) <= 3  # |x| or x*x, the window sum, sqrt
    whole = helper.make_node("GlobalLpPool", ["x"], ["y"], p=p)
    want = _ref_lp(x, x.shape[2:], [1] * k, [(0, 0)] * k, [1] * k, p).astype(np.float32)
    assert _check(_model(whole, x.shape, {}), x, want) <= 3


def test_lp_pool_of_another_p_is_refused_typed() -> None:
    from poot_ir import UnsupportedOnnx

    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3)
    with pytest.raises(UnsupportedOnnx, match="p=3"):
        import_model(_model(node, (1, 1, 4, 4), {}))


# -- a Pad before a convolution (TF-style exports: MobileNetV2 pads every strided conv) --------


def _padded_conv(
    pads: list[int],
    *,
    value: float | None = None,
    axes: list[int] | None = None,
    conv: dict[str, object] | None = None,
    also_out: bool = False,
) -> ModelProto:
    """x -> Pad(pads[, value][, axes]) -> Conv(w, b) -> y; ``also_out``: the padded value is a
    graph output too."""
    ins = ["x", "pads", "value" if value is not None else "", "axes" if axes is not None else ""]
    while ins[-1] == "":
        ins.pop()
    nodes = [
        helper.make_node("Pad", ins, ["p"], mode="constant"),
        helper.make_node("Conv", ["p", "w", "b"], ["y"], **(conv or {})),
    ]
    rng = np.random.default_rng(3)
    inits = {
        "pads": np.array(pads, np.int64),
        "w": rng.standard_normal((3, 4, 3, 2)).astype(np.float32),
        "b": rng.standard_normal(3).astype(np.float32),
    }
    if value is not None:
        inits["value"] = np.array(value, np.float32)
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
    outs = ["y", "p"] if also_out else ["y"]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 4, 7, 6))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


_PADDED = [
    # (pads, value, axes, conv attributes, folded into the conv's padding)
    ([0, 0, 1, 0, 0, 0, 2, 1], None, None, {"strides": [2, 2]}, True),
    ([0, 0, 1, 1, 0, 0, 1, 1], 0.0, None, {"pads": [1, 0, 0, 1]}, True),
    ([1, 2, 0, 1], None, [2, -1], {}, True),
    ([0, 0, 1, 1, 0, 0, 1, 1], -0.0, None, {}, False),  # -0 is not the conv's +0
    ([0, 0, 1, 1, 0, 0, 1, 1], 2.5, None, {}, False),
    ([0, 0, -1, 1, 0, 0, 2, -2], None, None, {}, True),  # a crop (a slice), then zeros
    ([0, 0, 1, 0, 0, 0, 1, 0], None, None, {"auto_pad": "SAME_UPPER"}, False),
]


@pytest.mark.parametrize(("pads", "value", "axes", "conv", "folded"), _PADDED)
def test_a_pad_before_a_conv_matches_the_reference(
    pads: list[int],
    value: float | None,
    axes: list[int] | None,
    conv: dict[str, object],
    folded: bool,
) -> None:
    x = np.random.default_rng(4).standard_normal((2, 4, 7, 6)).astype(np.float32)
    model = _padded_conv(pads, value=value, axes=axes, conv=conv)
    # the reference: numpy pads (a negative width crops, which onnx.reference's Pad refuses),
    # then onnx.reference's Conv alone
    k = len(pads) // 2
    widths = [(0, 0)] * 4
    for i, a in enumerate(axes if axes is not None else range(4)):
        widths[a] = (pads[i], pads[i + k])
    crop = tuple(
        slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths, strict=True)
    )
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    padded = np.pad(x[crop], grow, constant_values=0.0 if value is None else value)
    alone = helper.make_node("Conv", ["x", "w", "b"], ["y"], **conv)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weights = {"w": inits["w"], "b": inits["b"]}
    want = ReferenceEvaluator(_model(alone, padded.shape, weights)).run(None, {"x": padded})[0]
    _check(model, x, want)
    program = import_model(model).program
    prims = [e.prim for e in program.eqns]
    # the pad's concats and fills are gone when the conv pads by itself; never a gather
    assert (Prim.CONCAT not in prims) is folded and Prim.GATHER not in prims
    read = {a.id for e in program.eqns for a in e.inputs if isinstance(a, Var)}
    assert all(a.var.id in read for a in program.args)  # no weight uploaded to sit unread


def test_a_pad_read_elsewhere_too_stays() -> None:
    x = np.random.default_rng(5).standard_normal((2, 4, 7, 6)).astype(np.float32)
    model = _padded_conv([0, 0, 1, 1, 0, 0, 1, 1], also_out=True)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    imported = import_model(model)
    got = imported.results(evaluate(imported.program, dict(imported.weights) | {"x": x}))
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["p"], want[1])
    assert Prim.CONCAT in [e.prim for e in imported.program.eqns]


_PAD_TYPES = [
    (np.float32, TensorProto.FLOAT),
    (np.int32, TensorProto.INT32),
    (bool, TensorProto.BOOL),
]


@st.composite
def _pads(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[int, int]], int, bool]:
    """A shape (zero extents among them), per-axis widths that may crop the whole axis or
    grow it, a dtype (by index) and whether the fill is given as input 2."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=4)))
    widths = []
    for d in shape:
        before = draw(st.integers(-d, 3))
        widths.append((before, draw(st.integers(-(d + min(before, 0)), 3))))
    return shape, widths, draw(st.integers(0, len(_PAD_TYPES) - 1)), draw(st.booleans())


@settings(derandomize=True, max_examples=60, deadline=None)
@given(case=_pads())
def test_a_constant_pad_matches_numpy_at_the_edges(
    case: tuple[tuple[int, ...], list[tuple[int, int]], int, bool],
) -> None:
    """Crops of a whole axis, zero extents, growth of an empty axis, every dtype, the fill
    given or not: the oracle against numpy's crop and ``np.pad``."""
    shape, widths, kind, given_fill = case
    np_type, elem = _PAD_TYPES[kind]
    fill = np.array(True if np_type is bool else -7, np_type) if given_fill else None
    pads = [b for b, _ in widths] + [e for _, e in widths]
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    ins = ["x", "pads"]
    if fill is not None:
        inits.append(numpy_helper.from_array(fill, "value"))
        ins.append("value")
    graph = helper.make_graph(
        [helper.make_node("Pad", ins, ["y"], mode="constant")],
        "pad",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    imported = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    x = np.random.default_rng(len(shape)).integers(-5, 5, shape).astype(np_type)
    got = imported.results(evaluate(imported.program, dict(imported.weights) | {"x": x}))["y"]
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(shape, widths, strict=True))
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    want = np.pad(x[crop], grow, constant_values=fill if fill is not None else np_type(0))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@st.composite
def _copied_pads(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[int, int]], int, str]:
    """A shape (an empty or one-element axis among them), per-axis widths from none to
    past what the mode copies once (reflect: n - 1, wrap: n), a dtype and a mode."""
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
    widths = [(draw(st.integers(0, d + 1)), draw(st.integers(0, d + 1))) for d in shape]
    mode = draw(st.sampled_from(["edge", "reflect", "wrap"]))
    return shape, widths, draw(st.integers(0, len(_PAD_TYPES) - 1)), mode


@settings(derandomize=True, max_examples=90, deadline=None)
@given(case=_copied_pads())
def test_an_edge_reflect_or_wrap_pad_matches_numpy_and_keeps_its_structure(
    case: tuple[tuple[int, ...], list[tuple[int, int]], int, str],
) -> None:
    """The oracle against ``np.pad`` (onnx's reference) for every mode, width and dtype;
    where every width is one the mode copies from the axis once, the program is slices,
    broadcasts, gathers along the axis by an index as long as the width, and concats; past
    it the node is traced, or refused typed where numpy refuses (an empty axis padded)."""
    shape, widths, kind, mode = case
    np_type, elem = _PAD_TYPES[kind]
    pads = [b for b, _ in widths] + [e for _, e in widths]
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)],
        "pad",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(np.array(pads, np.int64), "pads")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = np.random.default_rng(sum(shape)).integers(-5, 5, shape).astype(np_type)
    try:
        want = np.pad(x, widths, mode=mode)
    except ValueError:  # padding an empty axis: onnx's reference refuses it too
        with pytest.raises(UnsupportedOnnx):
            import_model(model)
        return
    imported = import_model(model)
    got = imported.results(evaluate(imported.program, dict(imported.weights) | {"x": x}))["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    widest = {"edge": lambda d: 99 if d else 0, "reflect": lambda d: d - 1, "wrap": lambda d: d}
    if all(max(w) <= widest[mode](d) for d, w in zip(shape, widths, strict=True) if max(w)):
        # no flattened input gathered by an index the size of the output, no select: at most
        # a gather along the axis by an index as long as its width (reflect's)
        prims = {e.prim for e in imported.program.eqns}
        assert not prims & {Prim.RESHAPE, Prim.SELECT}, prims
        widest_pad = max(max(w) for w in widths)
        assert all(w.size <= widest_pad for w in imported.weights.values()), imported.weights
