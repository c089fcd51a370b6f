"""``poot.InferenceSession`` (issue 28, item 6): ONNX names and dtypes in and out, one plan, one
entry recorded once and replayed, partitioned where the target refuses, and feeds checked
before anything runs.

Results are compared with onnx's reference evaluator (always installed) and with onnxruntime
where it is (the ``models`` group); on the stand-ins every step is also verified against the
oracle under the plan's derived contract (``verify="always"``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from poot_ir import StepInputError
from poot_ir.errors import DeviceUnavailable, InputError, PlanRefused, UnsupportedOnnx
from poot_npu.registry import device_info

import poot

F, I64 = TensorProto.FLOAT, TensorProto.INT64
Array = np.ndarray[Any, np.dtype[Any]]


def _init(name: str, value: Array) -> Any:
    return numpy_helper.from_array(value, name)


def conv_model() -> onnx.ModelProto:
    """A small CNN: Conv (padded) + Relu + MaxPool + Flatten + Gemm + Softmax, batch dynamic."""
    rng = np.random.default_rng(3)
    w = (rng.normal(size=(4, 2, 3, 3)) * 0.3).astype(np.float32)
    bias = rng.normal(size=(4,)).astype(np.float32) * 0.1
    fc = (rng.normal(size=(4 * 3 * 3, 5)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("x", F, ["batch", 2, 6, 6])],
        [helper.make_tensor_value_info("prob", F, ["batch", 5])],
        [_init("w", w), _init("b", bias), _init("fc", fc)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def ml_model() -> onnx.ModelProto:
    """Scaler -> LinearClassifier (three classes, SOFTMAX, labels 10/20/30) -> Normalizer, as
    skl2onnx writes a scaled logistic regression (with its default opset imported twice)."""
    coef = [1.0, -2.0, 0.5, 0.25, 1.0, -1.0, -0.5, 0.0, 2.0, 0.3, 0.3, 0.3]
    nodes = [
        helper.make_node(
            "Scaler",
            ["x"],
            ["s"],
            domain="ai.onnx.ml",
            offset=[0.1, 0.2, -0.3, 0.0],
            scale=[2.0, 1.0, 0.5, 1.0],
        ),
        helper.make_node(
            "LinearClassifier",
            ["s"],
            ["label", "raw"],
            domain="ai.onnx.ml",
            coefficients=coef,
            intercepts=[0.1, -0.2, 0.3],
            classlabels_ints=[10, 20, 30],
            post_transform="SOFTMAX",
        ),
        helper.make_node("Normalizer", ["raw"], ["probabilities"], domain="ai.onnx.ml", norm="L1"),
    ]
    graph = helper.make_graph(
        nodes,
        "scaled_logistic",
        [helper.make_tensor_value_info("x", F, [None, 4])],
        [
            helper.make_tensor_value_info("label", I64, [None]),
            helper.make_tensor_value_info("probabilities", F, [None, 3]),
        ],
    )
    ops = [
        helper.make_opsetid("ai.onnx.ml", 1),
        helper.make_opsetid("", 17),
        helper.make_opsetid("", 17),
    ]
    return helper.make_model(graph, opset_imports=ops, ir_version=8)


def ids_model() -> onnx.ModelProto:
    """An int64 input: an embedding lookup, and the ids passed through."""
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("Identity", ["ids"], ["same"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ids",
        [helper.make_tensor_value_info("ids", I64, [2, 3])],
        [
            helper.make_tensor_value_info("e", F, [2, 3, 4]),
            helper.make_tensor_value_info("same", I64, [2, 3]),
        ],
        [_init("table", table)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _reference(m: onnx.ModelProto, feeds: dict[str, Array]) -> list[Array]:
    got: list[Array] = ReferenceEvaluator(m).run(None, feeds)
    try:
        import onnxruntime as ort
    except ImportError:
        return got
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs: list[Array] = s.run(None, feeds)
    for a, b in zip(got, theirs, strict=True):  # the two references agree
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return theirs


#: The oracle, and the two stand-ins (each runs its target's plan; xdna2 refuses the
#: convolution and the pooling, so the CNN is partitioned there).
DEVICES = ["cpu", "vpu-cpu", "xdna-host"]


def _device(name: str) -> str:
    why = device_info(name).unavailable_reason()
    if why is not None:
        pytest.skip(f"{name} is not here: {why}")
    return name


def _tolerance(device: str) -> dict[str, float]:
    # the stand-ins' steps are verified against the oracle under the plan's derived contract;
    # against the references a loose figure of the device's precision is kept: vpu-cpu
    # computes in FP16, xdna-host's matmuls round their operands to bf16 (2^-8 relative each)
    return {"cpu": {"rtol": 1e-5, "atol": 1e-6}}.get(device, {"rtol": 2e-2, "atol": 2e-2})


@pytest.fixture
def cache(tmp_path: Any) -> Iterator[Any]:
    yield tmp_path / "cache"


@pytest.mark.parametrize("device", DEVICES)
def test_a_small_cnn_matches_the_references_on_each_device(device: str, cache: Any) -> None:
    m = conv_model()
    verify = "off" if device == "cpu" else "always"
    with poot.InferenceSession(
        m, device=_device(device), shapes={"batch": 2}, verify=verify, cache_dir=cache
    ) as sess:
        (arg,) = sess.get_inputs()
        assert (arg.name, arg.shape, arg.type) == ("x", (2, 2, 6, 6), "tensor(float)")
        assert [(o.name, o.shape, o.type) for o in sess.get_outputs()] == [
            ("prob", (2, 5), "tensor(float)")
        ]
        rng = np.random.default_rng(0)
        for _ in range(3):
            x = rng.normal(size=(2, 2, 6, 6)).astype(np.float32)
            (got,) = sess.run(None, {"x": x})
            (want,) = _reference(m, {"x": x})
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, **_tolerance(device))
        stats = sess.engine.stats()
        # recorded once (each device span of a partitioned entry once), replayed after
        assert stats.steps == 3 and stats.recordings >= 1
        assert stats.replays == 2 * stats.recordings
        if device != "cpu":
            assert stats.verified_steps >= 1
        text = str(sess.plan)
        assert f"on {device}" in text and "equations" in text
        if not sess.plan.whole:  # partitioned: the summary says what runs where, and why
            assert ("host device" in text or "host oracle" in text) and "refused" in text
            assert any(s.device for s in sess.plan.spans) or device == "xdna-host"


def test_the_cnn_is_partitioned_on_xdna_host_where_xdna2_refuses_part(cache: Any) -> None:
    with poot.InferenceSession(
        conv_model(), device=_device("xdna-host"), shapes={"batch": 1}, cache_dir=cache
    ) as sess:
        if sess.plan.whole:
            pytest.skip("xdna2 admits the whole CNN now: nothing to partition")
        assert any(not s.device for s in sess.plan.spans)
        text = str(sess.plan)  # what runs where, and the ONNX node each refusal came from
        assert "on xdna-host (target xdna2)" in text and "partitioned" in text
        assert re.search(r"refused: \w+ [A-Z_]+ x\d+ from ONNX node '\w+' \(\w+\)", text), text
        x = np.random.default_rng(5).normal(size=(1, 2, 6, 6)).astype(np.float32)
        a = sess.run(["prob"], {"x": x})[0]
        b = sess.run(["prob"], {"x": x})[0]  # replayed: the same step again
        np.testing.assert_array_equal(a, b)
        assert sess.engine.stats().steps == 2
        # its refused spans (the convolution, the pooling) on the compiled host device, whose
        # target admits them (issue 27: host spans compiled by default, as poot run does)
        assert "host device: equations" in text and "host oracle" not in text, text


def test_a_session_keeps_host_spans_on_the_oracle_when_asked(cache: Any) -> None:
    with poot.InferenceSession(
        conv_model(),
        device=_device("xdna-host"),
        shapes={"batch": 1},
        cache_dir=cache,
        verify="always",
        host="oracle",
    ) as sess:
        if sess.plan.whole:
            pytest.skip("xdna2 admits the whole CNN now: nothing to partition")
        text = str(sess.plan)
        assert "host oracle: equations" in text and "host device" not in text, text
        x = np.random.default_rng(6).normal(size=(1, 2, 6, 6)).astype(np.float32)
        (got,) = sess.run(None, {"x": x})
        (want,) = _reference(conv_model(), {"x": x})
        np.testing.assert_allclose(got, want, **_tolerance("xdna-host"))


@pytest.mark.parametrize("device", DEVICES)
def test_a_classic_ml_pipeline_matches_the_references(device: str, cache: Any) -> None:
    m = ml_model()
    x = np.array(
        [
            [0.0, 0.0, 0.0, 0.0],
            [1.0, -1.0, 2.0, 0.5],
            [-3.0, 4.0, 0.25, -1.0],
            [0.1, 0.2, -0.3, 0.0],
        ],
        np.float32,
    )
    with poot.InferenceSession(
        m, device=_device(device), shapes={"x": x.shape}, cache_dir=cache
    ) as sess:
        assert [o.type for o in sess.get_outputs()] == ["tensor(int64)", "tensor(float)"]
        label, prob = sess.run(None, {"x": x})
        want_label, want_prob = _reference(m, {"x": x})
        assert label.dtype == np.int64
        np.testing.assert_array_equal(label, want_label)
        np.testing.assert_allclose(prob, want_prob, **_tolerance(device))
        (only,) = sess.run(["probabilities"], {"x": x})
        np.testing.assert_allclose(only, prob, rtol=0, atol=0)


def test_int64_feeds_are_carried_as_i32_and_come_back_int64() -> None:
    m = ids_model()
    with poot.InferenceSession(m) as sess:
        assert [(a.name, a.type) for a in sess.get_inputs()] == [("ids", "tensor(int64)")]
        assert [o.type for o in sess.get_outputs()] == ["tensor(float)", "tensor(int64)"]
        ids = np.array([[0, 9, -1], [3, 3, 2]], np.int64)
        e, same = sess.run(None, {"ids": ids})
        want_e, want_same = ReferenceEvaluator(m).run(None, {"ids": ids})
        np.testing.assert_array_equal(e, want_e)
        assert same.dtype == np.int64
        np.testing.assert_array_equal(same, want_same)


def _bad_feeds() -> list[tuple[str, dict[str, Any], str]]:
    ok = np.zeros((2, 3), np.int64)
    big = ok.copy()
    big[1, 2] = 2**31
    return [
        ("missing", {}, "'ids'.*missing"),
        ("extra", {"ids": ok, "mask": ok}, "'mask'.*no input"),
        (
            "dtype",
            {"ids": ok.astype(np.int32)},
            "'ids'.*int32 given, the input is tensor\\(int64\\)",
        ),
        ("float64", {"ids": ok.astype(np.float64)}, "'ids'.*float64 given"),
        ("shape", {"ids": np.zeros((3, 2), np.int64)}, "'ids'.*shape \\(3, 2\\) given.*\\(2, 3\\)"),
        ("range", {"ids": big}, "'ids'.*element \\(1, 2\\) is 2147483648"),
        ("low", {"ids": -big - 1}, "'ids'.*element \\(1, 2\\) is -2147483649"),
        ("list", {"ids": [[0, 1, 2], [3, 4, 5]]}, "'ids'.*not a numpy array"),
    ]


@pytest.mark.parametrize(
    ("case", "feeds", "why"), _bad_feeds(), ids=[c for c, _, _ in _bad_feeds()]
)
def test_a_bad_feed_is_refused_naming_the_input_and_nothing_runs(
    case: str, feeds: dict[str, Any], why: str
) -> None:
    with poot.InferenceSession(ids_model()) as sess:
        with pytest.raises(StepInputError, match=why) as info:
            sess.run(None, feeds)
        assert info.value.argument in ("ids", "mask")
        assert sess.engine.stats().steps == 0  # nothing ran
        sess.run(None, {"ids": np.zeros((2, 3), np.int64)})  # the session is still usable
        assert sess.engine.stats().steps == 1


def test_bad_output_names_and_arguments_are_typed() -> None:
    with poot.InferenceSession(ids_model()) as sess:
        feeds = {"ids": np.zeros((2, 3), np.int64)}
        with pytest.raises(StepInputError, match=r"'nope'.*no output"):
            sess.run(["nope"], feeds)
        with pytest.raises(StepInputError, match="list of names"):
            sess.run("e", feeds)  # type: ignore[arg-type]
        with pytest.raises(StepInputError, match="must map input names"):
            sess.run(None, [feeds["ids"]])  # type: ignore[arg-type]
        with pytest.raises(InputError, match="run_options"):
            sess.run(None, feeds, object())  # type: ignore[arg-type]
        assert sess.engine.stats().steps == 0
    with pytest.raises(StepInputError, match="closed"):
        sess.run(None, feeds)
    with pytest.raises(InputError, match="SessionOptions"):
        poot.InferenceSession(ids_model(), object())  # type: ignore[arg-type]
    with pytest.raises(UnsupportedOnnx, match="cannot be read"):
        poot.InferenceSession(b"not a model")
    # a script catches every one of them by poot's own name, as ONNX Runtime's by its module's
    with pytest.raises(poot.PootError):
        poot.InferenceSession(b"not a model")


def test_partition_false_refuses_what_the_target_refuses_and_an_unknown_device_is_typed(
    cache: Any,
) -> None:
    from poot_onnx import import_model
    from poot_planner import plan

    if plan(import_model(conv_model(), shapes={"batch": 1}).program, "xdna2").admitted:
        pytest.skip("xdna2 admits the whole CNN now: nothing to refuse")
    with pytest.raises(PlanRefused, match="xdna2 refuses"):
        poot.InferenceSession(
            conv_model(),
            device=_device("xdna-host"),
            shapes={"batch": 1},
            partition=False,
            cache_dir=cache,
        )
    with pytest.raises(DeviceUnavailable, match="no such device"):
        poot.InferenceSession(ids_model(), device="nope")


def mask_model(as_weight: bool) -> onnx.ModelProto:
    """An attention mask as T5's and GPT-2's exports apply it: ``Where(keep, scores,
    finfo(float32).min)``, then the softmax. The minimum is a row of them (a weight, as T5's
    export has it) or one (a literal)."""
    minimum = np.full((6,) if as_weight else (), np.finfo(np.float32).min, np.float32)
    nodes = [
        helper.make_node("Cast", ["mask"], ["keep"], to=TensorProto.BOOL, name="keep"),
        helper.make_node("Where", ["keep", "scores", "min"], ["masked"], name="masked"),
        helper.make_node("Softmax", ["masked"], ["prob"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "masked_softmax",
        [
            helper.make_tensor_value_info("scores", F, [2, 6]),
            helper.make_tensor_value_info("mask", F, [2, 6]),
        ],
        [helper.make_tensor_value_info("prob", F, [2, 6])],
        [_init("min", minimum)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("as_weight", [True, False], ids=["weight", "literal"])
def test_a_mask_minimum_the_device_cannot_hold_stays_on_the_host(
    as_weight: bool, cache: Any
) -> None:
    # planned with its weights, as `poot plan` and `poot run` plan (before, a weight was
    # refused at upload, NarrowingRangeUpload); and the host's exact finfo.min is kept from the
    # device, its softmax's maximum, shift and exponent with it (before, the device span's
    # input check refused the step at run time, NarrowingRangeInput)
    m = mask_model(as_weight)
    feeds = {
        "scores": np.random.default_rng(8).normal(size=(2, 6)).astype(np.float32),
        "mask": np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.float32),
    }
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    device = _device("vpu-cpu")
    with poot.InferenceSession(m, device=device, verify="always", cache_dir=cache) as sess:
        assert not sess.plan.whole and sess.plan.spans
        (got,) = sess.run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-6)
    assert np.all(got[0, 4:] == 0.0)  # the masked keys, exactly
    with pytest.raises(PlanRefused, match="intel-npu4 refuses"):
        poot.InferenceSession(m, device=device, partition=False, cache_dir=cache)


def branch_model() -> onnx.ModelProto:
    """Silero VAD's shape of control flow: an int64 input (the sample rate) picks a branch of
    an ``If`` that reads the audio."""
    double = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["twice"])],
        "then",
        [],
        [helper.make_tensor_value_info("twice", F, [3])],
    )
    shift = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["plus"])],
        "else",
        [],
        [helper.make_tensor_value_info("plus", F, [3])],
    )
    nodes = [
        helper.make_node("Equal", ["sr", "k16"], ["is16"]),
        helper.make_node("If", ["is16"], ["y"], then_branch=double, else_branch=shift),
    ]
    graph = helper.make_graph(
        nodes,
        "branch",
        [helper.make_tensor_value_info("x", F, [3]), helper.make_tensor_value_info("sr", I64, [])],
        [helper.make_tensor_value_info("y", F, [3])],
        [_init("k16", np.array(16000, np.int64)), _init("one", np.array(1.0, np.float32))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_an_input_bound_at_import_picks_its_branch_and_must_be_fed_as_bound() -> None:
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with pytest.raises(UnsupportedOnnx, match="constants="):  # the refusal says how
        poot.InferenceSession(branch_model())
    for sr, want in ((16000, x + x), (8000, x + 1)):
        bound = np.array(sr, np.int64)
        with poot.InferenceSession(branch_model(), constants={"sr": bound}) as sess:
            assert [i.name for i in sess.get_inputs()] == ["x"]
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
            # an ONNX Runtime script feeds it every call: the bound value is accepted
            np.testing.assert_array_equal(sess.run(None, {"x": x, "sr": bound})[0], want)
            with pytest.raises(StepInputError, match=r"sr.*bound at import"):
                sess.run(None, {"x": x, "sr": np.array(sr + 1, np.int64)})
            # the same number of another dtype is not the model's input (ONNX Runtime
            # refuses it too), nor is a Python int
            with pytest.raises(StepInputError, match=r"sr.*int32 given, the input is int64"):
                sess.run(None, {"x": x, "sr": np.array(sr, np.int32)})
            with pytest.raises(StepInputError, match=r"sr.*a Python int, not a numpy array"):
                sess.run(None, {"x": x, "sr": sr})
    # bound with a Python int: the value as the model declares it (int64), fed as int64
    with poot.InferenceSession(branch_model(), constants={"sr": 16000}) as sess:
        got = sess.run(None, {"x": x, "sr": np.array(16000, np.int64)})[0]
        np.testing.assert_array_equal(got, x + x)


def test_a_model_path_and_its_bytes_make_the_same_session(tmp_path: Any) -> None:
    m = conv_model()
    path = tmp_path / "cnn.onnx"
    onnx.save(m, path)
    x = np.random.default_rng(9).normal(size=(1, 2, 6, 6)).astype(np.float32)
    with (
        poot.InferenceSession(str(path), shapes={"batch": 1}) as a,
        poot.InferenceSession(
            path.read_bytes(), providers=["CPUExecutionProvider"], shapes={"batch": 1}
        ) as b,
    ):
        np.testing.assert_array_equal(a.run(None, {"x": x})[0], b.run(None, {"x": x})[0])
    with pytest.raises(UnsupportedOnnx, match="'batch'"):
        poot.InferenceSession(str(path))  # the batch is dynamic: shapes= fixes it


@pytest.mark.parametrize("device", DEVICES)
def test_an_skl2onnx_pipeline_through_a_session_matches_onnx_runtime(
    device: str, cache: Any
) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)
    est = make_pipeline(StandardScaler(), LogisticRegression())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        m = to_onnx(est, X[:1], options={id(est.steps[-1][1]): {"zipmap": False}}, target_opset=17)
    x = X[:6]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"X": x}
    )
    with poot.InferenceSession(
        m, device=_device(device), shapes={"X": x.shape}, cache_dir=cache
    ) as sess:
        got = sess.run(None, {"X": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], **_tolerance(device))


def test_the_summary_states_a_refusal_of_the_whole_program_with_its_figures() -> None:
    # a context limit is the program's (equation -1, no primitive): the summary reads it as the
    # plan does, with what was needed and what the target has, not as an empty kind of node
    from poot_planner import plan
    from poot_planner.xdna2 import probes

    p = plan(probes.marked_chain(16 * 32 + 1, 32, (4, 64)), "xdna2")
    text = str(poot.SessionPlan("chain", "xdna-host", p, (), {}))
    assert "  refused: program: context limit: limit=contexts, needed=17, available=16" in text
    assert "refused:  " not in text, text
