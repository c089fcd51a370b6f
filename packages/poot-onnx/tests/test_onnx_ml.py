"""Classic ML (issue 28, item 4): the ``ai.onnx.ml`` operators skl2onnx emits, the norm-like
reductions, and the opset imports skl2onnx writes.

Each node case is checked on the oracle against a float64 numpy model of ONNX Runtime's CPU
kernel written here (not the importer's chain), at the inputs where the kernels' edges are
(zero rows, a negative maximum, NaN, infinities, tiny and huge values); where onnxruntime is
installed (the ``models`` group) the same numpy model is checked against onnxruntime, so the
reference is ONNX Runtime's arithmetic and not a guess. skl2onnx pipelines (the ``models``
group) are compared with onnxruntime directly.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper
from poot_ir import evaluate
from poot_ir.errors import UnsupportedOnnx
from poot_onnx import Imported, import_model

F, I64, STR = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
ML = "ai.onnx.ml"
Array = np.ndarray[Any, np.dtype[Any]]


def _model(
    nodes: Sequence[Any],
    x_shape: Sequence[int],
    outs: Sequence[tuple[str, int]],
    opset: int = 17,
    inits: Sequence[Any] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "ml",
        [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info(o, t, None) for o, t in outs],
        list(inits),
    )
    ops = [helper.make_opsetid("", opset), helper.make_opsetid(ML, 1)]
    return helper.make_model(graph, opset_imports=ops, ir_version=8)


def _run(imp: Imported, x: Array) -> dict[str, Array]:
    return imp.results(evaluate(imp.program, {imp.inputs["x"]: x, **imp.weights}))


def _ort(m: onnx.ModelProto, feeds: dict[str, Array]) -> list[Array] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got: list[Array] = s.run(None, feeds)
    return got


def _f32(x: Array) -> Array:
    """float64 rounded once to float32 (beyond its range: infinite)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(np.float32)


# -- numpy models of ONNX Runtime's kernels (float64, rounded once) ---------------------------


def _divide_rows(x: Array, norm: Array) -> Array:
    """x / norm per row, a row whose norm is 0 left as it is."""
    safe = np.where(norm == 0, 1.0, norm)
    with np.errstate(all="ignore"):
        return x / safe[:, None]


def _normalizer(norm: str) -> Callable[[Array], Array]:
    """ORT squares in float32 and sums into a float32 norm: a square below float32's range is
    0, and a sum beyond it is infinite (each rounded once here)."""

    def f(x: Array) -> Array:
        x = x.astype(np.float64)
        with np.errstate(all="ignore"):
            sq = _f32(x * x).astype(np.float64)
            d = {
                "MAX": lambda: x.max(axis=1),
                "L1": lambda: _f32(np.abs(x).sum(axis=1)),
                "L2": lambda: _f32(sq.sum(axis=1)),
            }[norm]()
            d = np.asarray(d, np.float64)
            if norm == "L2":  # sign(x) * sqrt(x^2 / s), or x where s is 0
                r = np.sign(x) * np.sqrt(sq / np.where(d == 0, 1.0, d)[:, None])
                return np.where(d[:, None] == 0, x, r)
        return _divide_rows(x, d)

    return f


def _lp(p: int, axis: int) -> Callable[[Array], Array]:
    def f(x: Array) -> Array:
        x = x.astype(np.float64)
        with np.errstate(all="ignore"):
            sq = _f32(x * x).astype(np.float64)
            s = _f32(np.abs(x).sum(axis, keepdims=True) if p == 1 else sq.sum(axis, keepdims=True))
            n = s.astype(np.float64) if p == 1 else np.sqrt(s.astype(np.float64))
            return np.where(n == 0, 0.0, x / np.where(n == 0, 1.0, n))

    return f


def _one(f: Callable[[Array], Array]) -> Callable[[Array], tuple[Array, ...]]:
    return lambda x: (f(x),)


def _logistic(z: Array) -> Array:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def _softmax(z: Array) -> Array:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Case:
    name: str
    node: Any
    outs: tuple[tuple[str, int], ...]
    want: Callable[[Array], tuple[Array, ...]]
    inputs: tuple[Array, ...]
    tol: float = 2e-6
    #: onnxruntime refuses these inputs (Binarizer: NaN), so it is not asked about them
    ort_skips: bool = False


_EDGES = np.array(
    [
        [-3.0, -1.0, -2.0],  # a negative maximum
        [0.0, 0.0, 0.0],  # a zero norm
        [1e-30, 0.0, -0.0],  # a square below float32's range
        [3e38, -3e38, 1.0],  # squares that overflow
        [np.inf, 1.0, 0.0],
        [-np.inf, 1.0, 2.0],
        [0.5, -0.25, 4.0],
    ],
    np.float32,
)
_ORDINARY = np.random.default_rng(7).normal(size=(5, 3)).astype(np.float32)
_COEF = np.array([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0], [-0.5, 0.0, 2.0]], np.float32)
_B3 = np.array([0.1, -0.2, 0.3], np.float32)


def _node(op: str, outs: Sequence[str] = ("y",), **attrs: Any) -> Any:
    return helper.make_node(op, ["x"], list(outs), domain=ML, **attrs)


def _classifier(
    coef: Array, intercepts: Array, post: str, labels: Sequence[int] | None
) -> Callable[[Array], tuple[Array, ...]]:
    def f(x: Array) -> tuple[Array, ...]:
        raw = x.astype(np.float64) @ coef.astype(np.float64).T + intercepts
        if coef.shape[0] == 1:
            s = raw[:, 0]
            label = np.where(s > 0, labels[1], labels[0]) if labels else (s > 0).astype(int)
            p = _logistic(raw) if post == "LOGISTIC" else raw
            scores = np.concatenate([1.0 - p, p], axis=1) if labels else p
        else:
            label = np.asarray(labels)[raw.argmax(axis=1)] if labels else raw.argmax(axis=1)
            scores = {"NONE": raw, "LOGISTIC": _logistic(raw), "SOFTMAX": _softmax(raw)}[post]
        return label.astype(np.int64), scores

    return f


CASES = [
    *(
        Case(
            f"normalizer-{norm}",
            _node("Normalizer", norm=norm),
            (("y", F),),
            _one(_normalizer(norm)),
            (_EDGES, _ORDINARY),
        )
        for norm in ("MAX", "L1", "L2")
    ),
    Case(
        "scaler",
        _node("Scaler", offset=[1.0, -2.0, 0.5], scale=[2.0, 0.5, -4.0]),
        (("y", F),),
        lambda x: ((x.astype(np.float64) - [1.0, -2.0, 0.5]) * [2.0, 0.5, -4.0],),
        (_EDGES[[0, 1, 6]], _ORDINARY),
    ),
    Case(
        "scaler-one-value",
        _node("Scaler", offset=[0.5], scale=[3.0]),
        (("y", F),),
        lambda x: ((x.astype(np.float64) - 0.5) * 3.0,),
        (_EDGES, _ORDINARY),
    ),
    Case(
        "binarizer",
        _node("Binarizer", threshold=0.5),
        (("y", F),),
        lambda x: ((x > 0.5).astype(np.float64),),
        (_EDGES, _ORDINARY, np.array([[0.5, np.nextafter(0.5, 1), -np.inf]], np.float32)),
    ),
    Case(
        "binarizer-nan",
        _node("Binarizer", threshold=0.0),
        (("y", F),),
        lambda x: ((x > 0.0).astype(np.float64),),  # NaN > 0 is false: 0
        (np.array([[np.nan, 1.0, -1.0]], np.float32),),
        ort_skips=True,
    ),
    Case(
        "imputer-nan",
        _node("Imputer", imputed_value_floats=[7.0, 8.0, 9.0], replaced_value_float=np.nan),
        (("y", F),),
        lambda x: (np.where(np.isnan(x), [7.0, 8.0, 9.0], x),),
        (np.array([[np.nan, 1.0, np.nan], [0.0, np.nan, -np.inf]], np.float32), _ORDINARY),
    ),
    Case(
        "imputer-value",
        _node("Imputer", imputed_value_floats=[7.0], replaced_value_float=0.0),
        (("y", F),),
        lambda x: (np.where(x == 0.0, 7.0, x),),
        (np.array([[0.0, -0.0, np.nan], [1.0, 0.0, 2.0]], np.float32),),
    ),
    Case(
        "linear-regressor",
        _node(
            "LinearRegressor",
            coefficients=_COEF[:2].reshape(-1).tolist(),
            intercepts=[1.0, -1.0],
            targets=2,
        ),
        (("y", F),),
        lambda x: (x.astype(np.float64) @ _COEF[:2].T.astype(np.float64) + [1.0, -1.0],),
        (_EDGES[[0, 1, 2, 6]], _ORDINARY),
    ),
    *(
        Case(
            f"linear-classifier-{post}-{'labels' if labels else 'index'}",
            _node(
                "LinearClassifier",
                ("label", "scores"),
                coefficients=_COEF.reshape(-1).tolist(),
                intercepts=_B3.tolist(),
                post_transform=post,
                **({"classlabels_ints": labels} if labels else {"classlabels_ints": [0, 1, 2]}),
            ),
            (("label", I64), ("scores", F)),
            _classifier(_COEF, _B3.astype(np.float64), post, labels or [0, 1, 2]),
            (_EDGES[[0, 1, 2, 6]], _ORDINARY, np.array([[1.0, 1.0, 1.0]], np.float32)),
            tol=4e-6,
        )
        for post in ("NONE", "LOGISTIC", "SOFTMAX")
        for labels in (None, [-7, 2**31 - 1, 40])
    ),
    *(
        Case(
            f"linear-classifier-binary-{post}",
            _node(
                "LinearClassifier",
                ("label", "scores"),
                coefficients=_COEF[0].tolist(),
                intercepts=[0.5],
                post_transform=post,
                classlabels_ints=[5, 9],
            ),
            (("label", I64), ("scores", F)),
            _classifier(_COEF[:1], np.array([0.5]), post, [5, 9]),
            # a raw score of exactly 0 is the first class (ORT: "score > 0")
            (_EDGES[[0, 1, 2, 6]], _ORDINARY, np.array([[0.0, 0.25, 0.0]], np.float32)),
            tol=4e-6,
        )
        for post in ("NONE", "LOGISTIC", "SOFTMAX")
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_ml_node_matches_onnx_runtimes_arithmetic(case: Case) -> None:
    m = _model([case.node], (None, 3), case.outs)  # type: ignore[list-item]
    for x in case.inputs:
        imp = import_model(m, shapes={"x": x.shape})
        got = _run(imp, x)
        want = case.want(x)
        ort = None if case.ort_skips else _ort(m, {"x": x})
        for (name, elem), w, o in zip(case.outs, want, ort or [None] * len(want), strict=True):
            g = got[name]
            assert g.dtype == (np.int64 if elem == I64 else np.float32), name
            w = w if elem == I64 else _f32(w)
            np.testing.assert_allclose(g, w, rtol=case.tol, atol=case.tol, err_msg=f"{name} at {x}")
            if o is not None:  # the numpy model is ONNX Runtime's arithmetic
                np.testing.assert_allclose(o, w, rtol=case.tol, atol=case.tol, err_msg=name)


def test_array_feature_extractor_gathers_the_last_axis_and_a_vector_is_one_row() -> None:
    idx = numpy_helper.from_array(np.array([[2], [0]], np.int64), "i")
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    imp = import_model(_model([node], (4, 3), [("y", F)], inits=[idx]))
    np.testing.assert_array_equal(_run(imp, x)["y"], x[:, [2, 0]])
    v = np.array([5.0, 6.0, 7.0], np.float32)
    imp = import_model(_model([node], (3,), [("y", F)], inits=[idx]))
    np.testing.assert_array_equal(_run(imp, v)["y"], [[7.0, 5.0]])
    bad = numpy_helper.from_array(np.array([3], np.int64), "i")
    with pytest.raises(UnsupportedOnnx, match="outside an axis of size 3"):
        import_model(_model([node], (3,), [("y", F)], inits=[bad]))


# -- refusals -------------------------------------------------------------------------------


def test_zipmap_is_refused_with_the_converter_option_that_removes_it() -> None:
    nodes = [
        _node("Normalizer", ("p",), norm="L1"),
        helper.make_node("ZipMap", ["p"], ["z"], domain=ML, classlabels_int64s=[0, 1, 2]),
    ]
    m = _model(nodes, (2, 3), [("p", F)])
    m.graph.output.append(
        helper.make_value_info(
            "z",
            helper.make_sequence_type_proto(
                helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, []))
            ),
        )
    )
    with pytest.raises(UnsupportedOnnx, match=r"zipmap': False") as info:
        import_model(m)
    assert info.value.op_type == "ZipMap" and info.value.kind == "op"


def test_string_class_labels_are_refused_when_the_label_is_used() -> None:
    attrs = {"coefficients": _COEF.reshape(-1).tolist(), "intercepts": _B3.tolist()}
    node = _node(
        "LinearClassifier", ("label", "scores"), classlabels_strings=["a", "b", "c"], **attrs
    )
    with pytest.raises(UnsupportedOnnx, match="strings") as info:
        import_model(_model([node], (2, 3), [("label", STR), ("scores", F)]))
    assert info.value.kind == "dtype"
    # the scores alone import (the label is never made)
    only = _node("LinearClassifier", ("", "scores"), classlabels_strings=["a", "b", "c"], **attrs)
    x = _ORDINARY[:2]
    got = _run(import_model(_model([only], (2, 3), [("scores", F)])), x)
    np.testing.assert_allclose(
        got["scores"], x.astype(np.float64) @ _COEF.T + _B3, rtol=2e-6, atol=2e-6
    )


@pytest.mark.parametrize(
    ("op", "attrs", "why"),
    [
        (
            "LinearClassifier",
            {
                "coefficients": [1.0, 2.0, 3.0],
                "intercepts": [0.0],
                "classlabels_ints": [0, 1],
                "post_transform": "PROBIT",
            },
            "PROBIT",
        ),
        (
            "LinearClassifier",
            {
                "coefficients": [1.0, 2.0, 3.0],
                "intercepts": [0.0],
                "classlabels_ints": [0, 2**31],
                "post_transform": "NONE",
            },
            "beyond i32",
        ),
        (
            "LinearRegressor",
            {"coefficients": [1.0, 2.0], "targets": 1},
            "2 coefficients for 1 target",
        ),
        (
            "LinearRegressor",
            {"coefficients": [1.0, 2.0, 3.0], "post_transform": "SOFTMAX"},
            "SOFTMAX",
        ),
        ("Scaler", {"offset": [1.0, 2.0, 3.0], "scale": [2.0]}, "must agree"),
        ("Normalizer", {"norm": "L3"}, "L3"),
        ("Imputer", {"imputed_value_int64s": [1]}, "int64"),
        ("SVMClassifier", {}, "no lowering for the ai.onnx.ml op 'SVMClassifier'"),
    ],
)
def test_what_poot_cannot_keep_is_refused_typed(op: str, attrs: dict[str, Any], why: str) -> None:
    node = _node(op, ("label", "scores") if "Classifier" in op else ("y",), **attrs)
    outs = [("label", I64), ("scores", F)] if "Classifier" in op else [("y", F)]
    with pytest.raises(UnsupportedOnnx, match=why) as info:
        import_model(_model([node], (2, 3), outs))
    assert info.value.op_type == op


# -- opset imports --------------------------------------------------------------------------


def _neg(opsets: Sequence[tuple[str, int]]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])],
        "m",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_the_default_domain_imported_twice_at_one_version_is_one_import() -> None:
    """skl2onnx writes ``('', 17)`` twice; onnx's checker and ONNX Runtime accept it. Fails
    before the fix ("the default domain is imported twice")."""
    m = _neg([(ML, 1), ("", 17), ("", 17)])
    x = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(_run(import_model(m), x)["y"], -x)
    m = _neg([("ai.onnx", 17), ("", 17)])
    np.testing.assert_array_equal(_run(import_model(m), x)["y"], -x)
    with pytest.raises(UnsupportedOnnx, match="two versions, 17 and 18") as info:
        import_model(_neg([("", 17), ("", 18)]))
    assert info.value.kind == "model"
    with pytest.raises(UnsupportedOnnx, match=r"'ai\.onnx\.ml' domain is imported at two versions"):
        import_model(_neg([("", 17), (ML, 1), (ML, 3)]))


# -- the norm-like reductions and LpNormalization ---------------------------------------------

_REDUCE: dict[str, Callable[[Array, tuple[int, ...]], Array]] = {
    "ReduceL1": lambda x, a: np.abs(x).sum(a),
    "ReduceL2": lambda x, a: np.sqrt(_f32(x * x).astype(np.float64).sum(a)),
    "ReduceSumSquare": lambda x, a: _f32(x * x).astype(np.float64).sum(a),
    "ReduceLogSumExp": lambda x, a: _lse(x, a),
}


def _lse(x: Array, axes: tuple[int, ...]) -> Array:
    m = x.max(axes, keepdims=True)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - shift).sum(axes, keepdims=True)) + shift).squeeze(axes)


def _reduce_model(
    op: str, opset: int, axes: Sequence[int], keep: int, shape: Sequence[int]
) -> onnx.ModelProto:
    inits: list[Any] = []
    inputs = ["x"]
    attrs: dict[str, Any] = {"keepdims": keep}
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    else:
        attrs["axes"] = list(axes)
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "r",
        [helper.make_tensor_value_info("x", F, list(shape))],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


_R_INPUTS = [
    _ORDINARY.reshape(3, 5),
    np.array(
        [
            [100.0, 90.0, -5.0, 0.0, 1.0],
            [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf],
            [np.inf, 0.0, 1.0, -np.inf, 2.0],
        ],
        np.float32,
    ),
    np.array([[1e-30, 0.0, -0.0, 3e18, -3e18]] * 3, np.float32),
]


@pytest.mark.parametrize("op", sorted(_REDUCE))
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize(("axes", "keep"), [((1,), 1), ((0, 1), 0), ((-2,), 0)])
def test_norm_reductions_match_numpy_and_onnx_runtime(
    op: str, opset: int, axes: tuple[int, ...], keep: int
) -> None:
    m = _reduce_model(op, opset, axes, keep, (3, 5))
    imp = import_model(m)
    norm = tuple(sorted(a % 2 for a in axes))
    for x in _R_INPUTS:
        got = _run(imp, x)["y"]
        with np.errstate(over="ignore", invalid="ignore"):
            want = _REDUCE[op](x.astype(np.float64), norm)
        want = np.expand_dims(want, norm) if keep else want
        np.testing.assert_allclose(got, _f32(want), rtol=3e-6, atol=0)
        o = _ort(m, {"x": x})
        if o is not None:
            np.testing.assert_allclose(o[0], _f32(want), rtol=3e-6, atol=0)


@pytest.mark.parametrize(("p", "axis"), [(1, 1), (2, 1), (2, 0), (1, -2)])
def test_lp_normalization_is_zero_where_the_norm_is_zero(p: int, axis: int) -> None:
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis)
    m = _model([node], (7, 3), [("y", F)])
    imp = import_model(m)
    got = _run(imp, _EDGES)["y"]
    want = _lp(p, axis)(_EDGES)
    np.testing.assert_allclose(got, _f32(want), rtol=3e-6, atol=0)
    o = _ort(m, {"x": _EDGES})
    if o is not None:
        np.testing.assert_allclose(o[0], _f32(want), rtol=3e-6, atol=0)


_ROWS = hnp.arrays(
    np.float32,
    st.tuples(st.integers(1, 4), st.integers(1, 5)),
    elements=st.one_of(
        st.sampled_from([0.0, -0.0, 1e-30, -1e-30, 3e38, -3e38, 1.0, -1.0]),
        st.floats(-1e6, 1e6, width=32),
    ),
)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(x=_ROWS, norm=st.sampled_from(["MAX", "L1", "L2"]))
def test_normalizer_over_rows_at_the_edges(x: Array, norm: str) -> None:
    m = _model([_node("Normalizer", norm=norm)], x.shape, [("y", F)])
    got = _run(import_model(m), x)["y"]
    want = _normalizer(norm)(x)
    np.testing.assert_allclose(got, _f32(want), rtol=3e-6, atol=1e-37)


# -- skl2onnx pipelines against onnxruntime (the models group) ------------------------------


def _pipelines() -> dict[str, tuple[Any, Array]]:
    """Classic-ML pipelines by name, unfitted, with their targets."""
    pytest.importorskip("sklearn")
    from sklearn.decomposition import PCA
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge, SGDClassifier
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        Binarizer,
        MaxAbsScaler,
        MinMaxScaler,
        Normalizer,
        RobustScaler,
        StandardScaler,
    )
    from sklearn.svm import LinearSVR

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)).astype(np.float32)
    three = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)
    two = (X[:, 0] - X[:, 3] > 0).astype(int) * 5 + 3  # labels 3 and 8
    real = X[:, 0] * 2 - X[:, 1]
    mlp = {"hidden_layer_sizes": (8,), "max_iter": 60, "random_state": 0}
    return {
        "scaler-logistic-3": (make_pipeline(StandardScaler(), LogisticRegression()), three),
        "scaler-logistic-2": (make_pipeline(StandardScaler(), LogisticRegression()), two),
        "normalizer-logistic": (make_pipeline(Normalizer(), LogisticRegression()), three),
        "normalizer-max-logistic": (make_pipeline(Normalizer("max"), LogisticRegression()), three),
        "minmax-logistic": (make_pipeline(MinMaxScaler(), LogisticRegression()), two),
        "robust-sgd-3": (make_pipeline(RobustScaler(), SGDClassifier(random_state=0)), three),
        "robust-sgd-2": (make_pipeline(RobustScaler(), SGDClassifier(random_state=0)), two),
        "scaler-mlp-2": (make_pipeline(StandardScaler(), MLPClassifier(**mlp)), two),
        "scaler-mlp-3": (make_pipeline(StandardScaler(), MLPClassifier(**mlp)), three),
        "scaler-mlp-regressor": (make_pipeline(StandardScaler(), MLPRegressor(**mlp)), real),
        "maxabs-pca-ridge": (make_pipeline(MaxAbsScaler(), PCA(3), Ridge()), real),
        "impute-binarize-linear": (
            make_pipeline(SimpleImputer(), Binarizer(), LinearRegression()),
            real,
        ),
        "linear-svr": (make_pipeline(LinearSVR(random_state=0)), real),
    }


def sklearn_pipeline(name: str, zipmap: bool = False) -> tuple[onnx.ModelProto, Array]:
    """A fitted skl2onnx pipeline (a classifier's probabilities as one tensor unless
    ``zipmap``) and inputs at its edges."""
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.base import is_classifier

    est, y = _pipelines()[name]
    X = np.random.default_rng(1).normal(size=(60, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        last = est.steps[-1][1]
        opts = {id(last): {"zipmap": False}} if is_classifier(last) and not zipmap else None
        m = to_onnx(est, X[:1], options=opts, target_opset=17)
    edges = np.array([[0, 0, 0, 0], [1e3, -1e3, 1e-3, 0], [-5, 5, -5, 5]], np.float32)
    return m, np.concatenate([X[:5], edges])


PIPELINES = [
    "scaler-logistic-3",
    "scaler-logistic-2",
    "normalizer-logistic",
    "normalizer-max-logistic",
    "minmax-logistic",
    "robust-sgd-3",
    "robust-sgd-2",
    "scaler-mlp-2",
    "scaler-mlp-3",
    "scaler-mlp-regressor",
    "maxabs-pca-ridge",
    "impute-binarize-linear",
    "linear-svr",
]


@pytest.mark.parametrize("name", PIPELINES)
def test_an_skl2onnx_pipeline_matches_onnx_runtime(name: str) -> None:
    pytest.importorskip("onnxruntime")
    m, x = sklearn_pipeline(name)
    imp = import_model(m, shapes={"X": x.shape})
    got = imp.results(evaluate(imp.program, {imp.inputs["X"]: x, **imp.weights}))
    want = _ort(m, {"X": x})
    assert want is not None
    for o, w in zip([o.name for o in m.graph.output], want, strict=True):
        assert got[o].dtype == w.dtype, o
        np.testing.assert_allclose(got[o], w, rtol=1e-5, atol=1e-6, err_msg=o)


def test_an_skl2onnx_pipeline_with_zipmap_names_the_option() -> None:
    m, x = sklearn_pipeline("scaler-logistic-3", zipmap=True)
    with pytest.raises(UnsupportedOnnx, match="zipmap"):
        import_model(m, shapes={"X": x.shape})
