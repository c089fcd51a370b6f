"""The ONNX frontend's model-level behaviour: int64 inputs and constants, folding at import,
``If``, ``shapes=``, every blocker at once, names back to the model, and files and headers that
are refused before anything is read. Expected values come from numpy or onnx's reference
evaluator, never from the importer."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from poot_ir import ArgumentError, Prim, evaluate, format_program, parse_program
from poot_ir.errors import UnsupportedOnnx
from poot_onnx import Imported, check_model, import_model

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name: str, shape: Sequence[int | str] | None, elem: int = F) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def model(
    nodes: Sequence[Any],
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    inits: Sequence[Any] = (),
    opset: int = 18,
) -> onnx.ModelProto:
    outs = [o if not isinstance(o, str) else vi(o, None) for o in outputs]
    graph = helper.make_graph(list(nodes), "m", list(inputs), outs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def init(name: str, value: Any, dtype: Any = np.float32) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def run(imp: Imported, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    feed = {imp.inputs[k]: v for k, v in inputs.items()}
    return imp.results(evaluate(imp.program, {**feed, **imp.weights}))


def reference(m: onnx.ModelProto, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    names = [o.name for o in m.graph.output]
    return dict(zip(names, ReferenceEvaluator(m).run(None, inputs), strict=True))


# -- int64 ---------------------------------------------------------------------------------


def _embedding() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        helper.make_node("Unsqueeze", ["ids", "ax"], ["u"], name="keep"),
    ]
    inits = [init("table", np.arange(40).reshape(10, 4)), init("ax", [0], np.int64)]
    outs = [vi("e", [2, 3, 4]), vi("u", [1, 2, 3], I64)]
    return model(nodes, [vi("ids", [2, 3], I64)], outs, inits)


def test_an_int64_input_is_a_wide_i32_slot_checked_at_every_step() -> None:
    m = _embedding()
    imp = import_model(m)
    (arg,) = [a for a in imp.program.args if a.name == imp.inputs["ids"]]
    assert arg.wide and arg.var.dtype.value == "i32"
    assert "slot ids %0: i32[2,3] from i64" in format_program(imp.program)
    assert parse_program(format_program(imp.program)) == imp.program
    ids = np.array([[0, 9, -1], [3, 3, 2]], np.int64)
    got, want = run(imp, ids=ids), reference(m, ids=ids)
    np.testing.assert_array_equal(got["e"], want["e"])
    assert got["u"].dtype == np.int64 and "u" in imp.int64_outputs
    np.testing.assert_array_equal(got["u"], want["u"])
    big = ids.copy()
    big[1, 2] = 2**31
    with pytest.raises(ArgumentError, match=r"2147483648 at element \(1, 2\)"):
        evaluate(imp.program, {**imp.weights, "ids": big})


def test_int64_arithmetic_at_run_time_is_refused_but_folds_when_static() -> None:
    add = helper.make_node("Add", ["a", "b"], ["y"], name="add")
    with pytest.raises(UnsupportedOnnx, match="int64 arithmetic at run time") as info:
        import_model(model([add], [vi("a", [2], I64), vi("b", [2], I64)], ["y"]))
    assert (info.value.node, info.value.op_type, info.value.kind) == ("add", "Add", "dtype")
    # Static: computed in int64 at import, narrowed after a range check where it is used.
    inits = [init("a", [2**40, 5], np.int64), init("b", [-(2**40), 1], np.int64)]
    imp = import_model(model([add], [], [vi("y", [2], I64)], inits))
    np.testing.assert_array_equal(run(imp)["y"], [0, 6])
    inits = [init("a", [2**40, 5], np.int64), init("b", [0, 1], np.int64)]
    with pytest.raises(UnsupportedOnnx, match="beyond i32"):
        import_model(model([add], [], [vi("y", [2], I64)], inits))


# -- folding -------------------------------------------------------------------------------


def test_a_static_shape_chain_folds_to_a_reshape() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=F),
        helper.make_node("Cast", ["nf"], ["n64"], to=I64),
        helper.make_node("Unsqueeze", ["n64", "ax"], ["nu"]),
        helper.make_node("Concat", ["nu", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [init("i0", 0, np.int64), init("ax", [0], np.int64), init("m1", [-1], np.int64)]
    m = model(nodes, [vi("x", [3, 2, 4])], ["y"], inits)
    imp = import_model(m)
    assert [e.prim for e in imp.program.eqns] == [Prim.RESHAPE] and imp.weights == {}
    x = np.random.default_rng(0).standard_normal((3, 2, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(imp, x=x)["y"], reference(m, x=x)["y"])


def test_any_op_known_at_import_is_folded_by_the_reference_evaluator() -> None:
    # Trilu and NonZero have no lowering: their constant results still import.
    nodes = [
        helper.make_node("Trilu", ["c"], ["t"], upper=0),
        helper.make_node("Mul", ["x", "t"], ["y"]),
        helper.make_node("NonZero", ["t"], ["nz"]),
    ]
    c = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    m = model(nodes, [vi("x", [3, 3])], ["y", vi("nz", [2, 6], I64)], [init("c", c)])
    imp = import_model(m)
    x = np.ones((3, 3), np.float32)
    got, want = run(imp, x=x), reference(m, x=x)
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["nz"], want["nz"])


def test_if_with_a_static_condition_inlines_its_branch() -> None:
    def branch(op: str) -> Any:
        return helper.make_graph(
            [helper.make_node(op, ["x"], [f"{op}_out"])], op, [], [vi(f"{op}_out", [3])]
        )

    for cond, op, fn in ((True, "Neg", np.negative), (False, "Abs", np.abs)):
        nodes = [
            helper.make_node(
                "If", ["c"], ["y"], then_branch=branch("Neg"), else_branch=branch("Abs")
            )
        ]
        m = model(nodes, [vi("x", [3])], ["y"], [init("c", cond, np.bool_)])
        imp = import_model(m)
        x = np.array([-1.0, 2.0, -3.0], np.float32)
        np.testing.assert_array_equal(run(imp, x=x)["y"], fn(x))
        assert imp.origin(0) == f"ONNX node '#0 -> {op}_out' ({op})"
    nodes[0].input[0] = "rc"
    with pytest.raises(UnsupportedOnnx, match="computed at run time"):
        import_model(model(nodes, [vi("x", [3]), vi("rc", [], BOOL)], ["y"]))


# -- shapes --------------------------------------------------------------------------------


def _dynamic() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="sum")]
    return model(nodes, [vi("a", ["batch", "seq"]), vi("b", ["batch", "seq"])], ["y"])


def test_shapes_fix_dynamic_dims_and_a_symbol_is_bound_once() -> None:
    imp = import_model(_dynamic(), shapes={"a": (2, 5)})
    assert [a.var.shape for a in imp.program.args] == [(2, 5), (2, 5)]
    imp = import_model(_dynamic(), shapes={"batch": 3, "seq": 4})
    assert [a.var.shape for a in imp.program.args] == [(3, 4), (3, 4)]
    with pytest.raises(UnsupportedOnnx, match="bound to 2 and 3"):
        import_model(_dynamic(), shapes={"a": (2, 5), "b": (3, 5)})
    with pytest.raises(UnsupportedOnnx, match="names no graph input"):
        import_model(_dynamic(), shapes={"nope": (1,)})


def test_an_unbound_dynamic_dim_names_the_input_and_the_dim() -> None:
    with pytest.raises(UnsupportedOnnx) as info:
        import_model(_dynamic(), shapes={"batch": 2})
    err = info.value
    assert (err.node, err.kind) == ("a", "dynamic") and "axis 1 ('seq')" in err.detail
    assert "1 more blocker" in err.detail  # b's axis 1 too


# -- every blocker at once -------------------------------------------------------------------


def test_check_model_lists_every_blocker_with_its_nodes() -> None:
    nodes = [
        helper.make_node("Foo", ["x"], ["f1"], name="foo1"),
        helper.make_node("Neg", ["f1"], ["n"], name="skipped"),  # reads a blocked value
        helper.make_node("Foo", ["x"], ["f2"], name="foo2"),
        helper.make_node("Bar", ["n"], ["y"], name="bar"),  # its own op is a blocker too
        helper.make_node("Cast", ["x"], ["d"], name="to64", to=TensorProto.DOUBLE),
    ]
    m = model(nodes, [vi("x", [2]), vi("z", ["n"])], ["y", "f2", "d"])
    blockers = check_model(m)
    by_detail = {b.detail: b.nodes for b in blockers}
    assert len(blockers) == 4, blockers
    assert any(v == ("foo1 (Foo)", "foo2 (Foo)") for v in by_detail.values())
    assert any(v == ("bar (Bar)",) for v in by_detail.values())
    assert any(v == ("z (graph input)",) for v in by_detail.values())
    assert not any("skipped" in n for v in by_detail.values() for n in v)
    with pytest.raises(UnsupportedOnnx, match="and 4 more blocker"):
        import_model(m)  # z, foo1, foo2, bar, to64: the first and four more
    assert check_model(_embedding()) == ()


# -- files and headers ---------------------------------------------------------------------


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            import_model(fifo)
        except BaseException as err:
            errors.append(err)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "import_model blocked on a FIFO"
    assert isinstance(errors[0], UnsupportedOnnx) and "not a regular file" in str(errors[0])


@pytest.mark.parametrize(
    ("content", "why"), [(b"", "empty file"), (None, "not a regular file")], ids=["empty", "dir"]
)
def test_empty_files_and_directories_are_refused(
    tmp_path: Path, content: bytes | None, why: str
) -> None:
    path = tmp_path / "m.onnx"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(UnsupportedOnnx, match=why):
        import_model(path)
    with pytest.raises(UnsupportedOnnx, match="not a regular file"):
        import_model("/dev/null")


def _neg(opsets: Sequence[tuple[str, int]]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])], "m", [vi("x", [2])], [vi("y", [2])]
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    if not opsets:
        del m.opset_import[:]
    return m


@pytest.mark.parametrize(
    ("opsets", "why"),
    [
        ([("", 1)], "opset 1;"),
        ([("", 99)], "opset 99;"),
        ([("", -1)], "opset -1;"),
        ([("", 2**62)], f"opset {2**62};"),
        ([], "no opset at all"),
        ([("", 18), ("ai.onnx", 17)], "two versions, 18 and 17"),
        ([("com.microsoft", 1)], "no opset of the default domain"),
    ],
    ids=["1", "99", "-1", "2^62", "none", "twice", "other-domain-only"],
)
def test_opsets_outside_the_importer_are_refused(
    opsets: Sequence[tuple[str, int]], why: str
) -> None:
    with pytest.raises(UnsupportedOnnx, match=why):
        import_model(_neg(opsets))


def test_a_value_produced_twice_is_refused() -> None:
    nodes = [
        helper.make_node("Neg", ["x"], ["y"], name="first"),
        helper.make_node("Abs", ["x"], ["y"], name="second"),
    ]
    with pytest.raises(UnsupportedOnnx, match="produced by two nodes") as info:
        import_model(model(nodes, [vi("x", [2])], ["y"]))
    assert (info.value.node, info.value.op_type) == ("second", "Abs")
    shadow = [helper.make_node("Neg", ["x"], ["x"], name="shadow")]
    with pytest.raises(UnsupportedOnnx, match="graph input"):
        import_model(model(shadow, [vi("x", [2])], ["x"]))


def test_equations_name_the_onnx_node_they_came_from() -> None:
    imp = import_model(_embedding())
    where = {imp.origin(i) for i in range(len(imp.program.eqns))}
    assert "ONNX node 'embed' (Gather)" in where
    assert imp.origin(10**6) == ""
