"""The README's Python example runs as written, and its result matches the oracle."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_python_example_runs_and_matches_the_oracle() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no Python example"
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    from poot_ir import evaluate

    out, prog = scope["out"], scope["prog"]
    assert isinstance(out, dict)
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    want = evaluate(
        prog, {"x": x, "w": np.ones(64, np.float32), "acc": np.zeros((8, 64), np.float32)}
    )  # type: ignore[arg-type]
    bound = 8.5e-6  # the fused RMSNorm's derived relative bound (about 8.3e-6 for 64 columns)
    assert np.all(np.abs(out["y"] - want["y"]) <= bound * np.abs(want["y"]))


def test_the_onnx_runtime_example_runs_by_changing_its_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's session example, on a small CNN saved as model.onnx, gives what onnx's
    reference evaluator gives; with onnxruntime installed, the same script with the import
    changed back gives the same too."""
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
        if "InferenceSession" in b
    ]
    changed = [line for line in block.splitlines() if "onnxruntime" in line]
    assert changed == [
        "import poot as ort  # the one line changed: it was `import onnxruntime as ort`"
    ]
    m = _static_cnn()
    monkeypatch.chdir(tmp_path)
    onnx.save(m, "model.onnx")
    scope: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), scope)
    y, x = scope["y"], scope["x"]
    assert isinstance(y, np.ndarray) and isinstance(x, np.ndarray)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    if importlib.util.find_spec("onnxruntime") is not None:
        original: dict[str, object] = {"print": lambda *a: None}
        exec(
            compile(
                block.replace("import poot as ort", "import onnxruntime as ort").replace(
                    "print(sess.plan)", ""
                ),
                "README.md",
                "exec",
            ),
            original,
        )
        np.testing.assert_allclose(y, original["y"], rtol=1e-5, atol=1e-6)  # type: ignore[arg-type]


def _static_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = (rng.normal(size=(4, 2, 3, 3)) * 0.3).astype(np.float32)
    fc = (rng.normal(size=(4 * 3 * 3, 5)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
