"""ONNX constant folding is charged to the memory budget (``poot_onnx.folding``): a fold whose
size follows from its inputs is refused before the evaluator allocates it; any other result as
soon as it is computed; and the charge is the import's running total. Expected sizes are
counted here from the shapes, never read from the importer."""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from poot_ir.budget import BudgetExceeded, budget_set
from poot_onnx import import_model

F = TensorProto.FLOAT


def _model(nodes: Sequence[Any], outputs: Sequence[str], inits: Sequence[Any]) -> onnx.ModelProto:
    outs = [helper.make_tensor_value_info(o, F, None) for o in outputs]
    x = helper.make_tensor_value_info("x", F, [1])
    graph = helper.make_graph(list(nodes), "m", [x], outs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _init(name: str, value: Any, dtype: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _filled(n: int) -> onnx.ModelProto:
    """y = x + ConstantOfShape([n]) of f32: a fold of 4n bytes."""
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
        helper.make_node("Add", ["x", "c"], ["y"], name="use"),
    ]
    return _model(nodes, ["y"], [_init("s", [n], np.int64)])


def test_constant_of_shape_to_a_trillion_is_refused_without_allocating() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(BudgetExceeded) as info:
            import_model(_filled(10**12))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = info.value
    assert err.size == 4 * 10**12  # f32, counted from the shape
    assert "'fill'" in str(err) and "ConstantOfShape" in str(err)
    assert f"{err.limit} bytes" in str(err) and str(4 * 10**12) in str(err)
    assert peak < 64 << 20  # nothing near the fold's size was ever allocated


def test_a_low_budget_refuses_a_modest_fold_the_default_admits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import_model(_filled(1000))  # 4000 bytes: within any default budget
    with budget_set(3999), pytest.raises(BudgetExceeded, match=r"'fill'.*\(4000 bytes\)"):
        import_model(_filled(1000))
    with budget_set(4000):
        import_model(_filled(1000))  # the edge: exactly the budget is admitted
    monkeypatch.setenv("POOT_MEMORY_BUDGET", "3999")
    with pytest.raises(BudgetExceeded, match="3999 bytes"):
        import_model(_filled(1000))


def test_a_broadcast_fold_is_refused_before_it_is_computed() -> None:
    n = 1 << 16
    nodes = [
        helper.make_node("Add", ["a", "b"], ["c"], name="outer"),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    inits = [_init("a", np.zeros((n, 1)), np.float32), _init("b", np.zeros((1, n)), np.float32)]
    tracemalloc.start()
    try:
        with budget_set(1 << 30), pytest.raises(BudgetExceeded, match="'outer'") as info:
            import_model(_model(nodes, ["y"], inits))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.size == 4 * n * n
    assert peak < 64 << 20


def test_folds_of_unknown_size_are_charged_when_computed_and_add_up() -> None:
    # Trilu keeps its input's 9 f32 (36 bytes); NonZero's size depends on the values: 2x6
    # int64 (96 bytes), known only after the evaluator ran.
    c = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    nodes = [
        helper.make_node("Trilu", ["c"], ["t"], upper=0, name="tri"),
        helper.make_node("NonZero", ["t"], ["nz"], name="where"),
        helper.make_node("Cast", ["nz"], ["f"], to=F),
        helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    m = _model(nodes, ["y"], [_init("c", c, np.float32)])
    with budget_set(36 + 96 + 48 + 4):  # tri, where, Cast to 2x6 f32, the sum
        import_model(m)
    with budget_set(36 + 95), pytest.raises(BudgetExceeded) as info:
        import_model(m)
    assert info.value.size == 36 + 96
    assert "'where'" in str(info.value) and "36 bytes folded before it" in str(info.value)


def test_dims_past_any_target_are_refused_by_the_importer() -> None:
    from poot_ir import PootError

    y = helper.make_tensor_value_info("y", F, None)
    for dims, shapes in (([2**62], None), (["n"], {"n": 2**62}), ([2**20, 2**21], None)):
        x = helper.make_tensor_value_info("x", F, dims)
        graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "m", [x], [y])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        with pytest.raises(PootError, match="no target holds"):
            import_model(m, shapes=shapes)


def test_a_traced_pad_past_the_budget_is_refused_before_it_is_traced() -> None:
    # a reflect Pad is traced on the element numbers: the traced output is the padded size,
    # so a Pad of 2^40 more elements is refused by the budget, naming the node, not by numpy
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect", name="mirror")]
    inits = [_init("pads", [0, 1 << 40], np.int64)]
    tracemalloc.start()
    try:
        with pytest.raises(BudgetExceeded, match="'mirror'") as info:
            import_model(_model(nodes, ["y"], inits))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.size == 8 * (1 + (1 << 40))  # the int64 element numbers, by shape
    assert peak < 64 << 20
