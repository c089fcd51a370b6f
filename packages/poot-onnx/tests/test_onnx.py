"""The ONNX frontend: the ONNX node test cases through ``import_model`` and the oracle, hand-built
models for the composite and folding paths, and every kind of refusal.

Each node test case either imports and evaluates to the case's expected outputs (exact dtype and
shape, the case's rtol/atol for floats, bit-equal otherwise), or raises ``UnsupportedOnnx``;
nothing else is allowed. A floor per op type on the passed count catches regressions.

The cases, and the inputs each binds as constants, come from ``onnx_cases`` (shared with the
conformance suite, which runs the same cases on every device).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_cases
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import array, is_float, node_cases
from poot_ir import (
    DType,
    Literal,
    PootError,
    Prim,
    Storage,
    UnsupportedOnnx,
    evaluate,
)
from poot_onnx import SUPPORTED_OPS, Imported, import_model
from poot_onnx.reading import MIN_OPSET

# -- the ONNX node test cases ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    case: str
    group: str  # the op type of a one-node case, "graph" for a supported multi-node graph
    result: str  # "passed", "refused:<kind>" or "FAILED: <why>"
    float64: bool  # a graph input or output is float64
    reason: str = ""  # a refusal's reason, for docs/conformance.md (onnx_cases.reason)


def _elem(vi: Any) -> int:
    return int(vi.type.tensor_type.elem_type) if vi.type.HasField("tensor_type") else 0


def _run_case(case: Any) -> Outcome:
    graph = case.model.graph
    group = onnx_cases.group(case)
    f64 = any(_elem(vi) == TensorProto.DOUBLE for vi in [*graph.input, *graph.output])
    for inputs, expected in case.data_sets:
        ins = [array(x) for x in inputs]
        bind = onnx_cases.constants(case, ins)
        try:
            imported = import_model(case.model, constants=bind)
        except UnsupportedOnnx as err:
            return Outcome(case.name, group, f"refused:{err.kind}", f64, onnx_cases.reason(err))
        except Exception as err:
            return Outcome(case.name, group, f"FAILED: import raised {err!r}", f64)
        feed = onnx_cases.slots(case, imported, ins)
        try:
            got = evaluate(imported.program, {**feed, **imported.weights})
        except Exception as err:
            return Outcome(case.name, group, f"FAILED: evaluate raised {err!r}", f64)
        by_onnx = imported.results(got)  # int64 outputs widened back from I32
        for vi, want in zip(graph.output, (array(x) for x in expected), strict=True):
            y = by_onnx[vi.name]
            if want is None:
                return Outcome(case.name, group, "FAILED: expected a non-tensor", f64)
            if y.dtype != want.dtype or y.shape != want.shape:
                why = f"{vi.name}: {y.dtype}{y.shape}, expected {want.dtype}{want.shape}"
                return Outcome(case.name, group, f"FAILED: {why}", f64)
            if is_float(want.dtype):
                a, b = y.astype(np.float64), want.astype(np.float64)
                rtol = onnx_cases.rtol(case, want.dtype)
                ok = np.allclose(a, b, rtol=rtol, atol=case.atol, equal_nan=True)
            else:
                ok = np.array_equal(y, want)
            if not ok:
                return Outcome(case.name, group, f"FAILED: {vi.name} differs", f64)
    return Outcome(case.name, group, "passed", f64)


KNOWN = onnx_cases.ORACLE_KNOWN


def _known(o: Outcome) -> Outcome:
    if o.case not in KNOWN:
        return o
    if o.result.startswith("FAILED"):
        return Outcome(o.case, o.group, "known", o.float64)
    return Outcome(o.case, o.group, f"FAILED: listed in KNOWN but {o.result}", o.float64)


@functools.cache
def _outcomes() -> tuple[Outcome, ...]:
    return tuple(_known(_run_case(c)) for c in node_cases() if c.kind == "node")


#: The passed count each group must reach (what the importer achieves today).
FLOORS = {
    "Abs": 1,
    "Add": 2,
    "And": 8,
    "ArgMax": 16,
    "ArgMin": 16,
    "AveragePool": 20,
    "BatchNormalization": 2,
    "Cast": 8,
    "CastLike": 4,
    "Ceil": 2,
    "CenterCropPad": 6,
    "Clip": 9,
    "Compress": 0,
    "Concat": 12,
    "Constant": 1,
    "ConstantOfShape": 3,
    "Conv": 6,
    "ConvTranspose": 11,
    "DepthToSpace": 2,
    "Div": 4,
    "Dropout": 5,
    "Einsum": 3,
    "Equal": 2,
    "Erf": 1,
    "Exp": 2,
    "Expand": 2,
    "Flatten": 9,
    "Floor": 2,
    "GRU": 6,
    "Gather": 4,
    "GatherElements": 3,
    "GatherND": 3,
    "Gemm": 11,
    "GlobalAveragePool": 2,
    "GlobalLpPool": 0,  # no ONNX node case: tests/test_onnx_conv_pool.py checks it
    "GlobalMaxPool": 2,
    "Greater": 2,
    "GreaterOrEqual": 2,
    "Identity": 2,
    "If": 0,
    "InstanceNormalization": 2,
    "IsInf": 4,
    "IsNaN": 2,
    "LSTM": 6,
    "LayerNormalization": 19,
    "Less": 2,
    "LessOrEqual": 2,
    "LpPool": 3,
    "Log": 2,
    "LpNormalization": 6,
    "MatMul": 7,
    "Max": 7,
    "MaxPool": 16,
    "Min": 7,
    "Mod": 6,
    "Mul": 3,
    "Neg": 2,
    "Not": 0,
    "OneHot": 6,
    "Or": 8,
    "Pad": 3,
    "Pow": 3,
    "RMSNormalization": 19,
    "RNN": 6,
    "Range": 4,
    "Reciprocal": 2,
    "ReduceMax": 11,
    "ReduceMean": 8,
    "ReduceL1": 9,
    "ReduceL2": 9,
    "ReduceLogSumExp": 1,
    "ReduceMin": 10,
    "ReduceProd": 9,
    "ReduceSumSquare": 9,
    "ReduceSum": 12,
    "Relu": 1,
    "Reshape": 10,
    "Resize": 39,
    "ReverseSequence": 3,
    "Round": 1,
    "ScatterElements": 7,
    "ScatterND": 7,
    "Shape": 11,
    "Sigmoid": 2,
    "Sign": 1,
    "Size": 2,
    "Slice": 8,
    "Softmax": 7,
    "SpaceToDepth": 4,
    "Split": 16,
    "Sqrt": 2,
    "Squeeze": 2,
    "Sub": 3,
    "Sum": 3,
    "Tanh": 2,
    "Tile": 2,
    "TopK": 6,
    "Transpose": 7,
    "Unsqueeze": 7,
    "Upsample": 1,
    "Where": 2,
    "Xor": 8,
    "graph": 315,
    "other": 281,  # 306 before the norm reductions left it for their own groups (+34 there)
}


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(FLOORS))
def test_node_cases(group: str) -> None:
    outcomes = [o for o in _outcomes() if o.group == group]
    failed = [f"{o.case}: {o.result}" for o in outcomes if o.result.startswith("FAILED")]
    assert not failed, "\n".join(failed)
    passed = sum(o.result == "passed" for o in outcomes)
    assert passed >= FLOORS[group], f"{group}: {passed} passed, the floor is {FLOORS[group]}"


@pytest.mark.slow
def test_node_case_report(capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = _outcomes()
    table: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        table[o.group][o.result if not o.result.startswith("FAILED") else "FAILED"] += 1
    kinds = sorted({k for counts in table.values() for k in counts if k != "passed"})
    lines = [f"{'group':<20}{'passed':>8}" + "".join(f"{k:>18}" for k in kinds)]
    for group in sorted(table):
        counts = table[group]
        lines.append(
            f"{group:<20}{counts['passed']:>8}" + "".join(f"{counts[k]:>18}" for k in kinds)
        )
    with capsys.disabled():
        print("\nONNX node test cases through poot_onnx:\n" + "\n".join(lines))
    assert set(table) <= set(FLOORS), f"groups without a floor: {set(table) - set(FLOORS)}"
    # float64 is not a poot dtype: such a case is refused as a dtype (or passes when the
    # float64 value is only ever a folded constant).
    bad = [
        o
        for o in outcomes
        if o.float64 and o.group != "other" and o.result not in ("passed", "refused:dtype")
    ]
    assert not bad, bad
    # The cases are valid models: "model" refusals would be importer bugs, except the few
    # cases of an opset older than the importer implements (refused as the model's).
    old = {
        c.name
        for c in node_cases()
        if any(e.domain in ("", "ai.onnx") and e.version < MIN_OPSET for e in c.model.opset_import)
    }
    assert not [o for o in outcomes if o.result == "refused:model" and o.case not in old]
    assert not [o for o in outcomes if o.result.startswith("FAILED")]


def _mutate(m: onnx.ModelProto, rng: np.random.Generator) -> None:
    """One random damage to a model: a dropped or extra input, random int attributes, random
    extents or element types, a float where an int attribute belongs."""
    g = m.graph
    node = g.node[int(rng.integers(len(g.node)))]
    match int(rng.integers(6)):
        case 0 if len(node.input):
            del node.input[-1]
        case 1:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.INT:
                    a.i = int(rng.integers(-6, 6))
                elif a.type == onnx.AttributeProto.INTS:
                    del a.ints[:]
                    a.ints.extend(int(v) for v in rng.integers(-6, 6, size=rng.integers(4)))
        case 2:
            for v in g.input:
                dims = v.type.tensor_type.shape.dim
                if len(dims):
                    dims[int(rng.integers(len(dims)))].dim_value = int(rng.integers(5))
        case 3:
            node.input.append(node.input[0] if len(node.input) else "nothing")
        case 4:
            node.attribute.append(helper.make_attribute("axis", float(rng.standard_normal())))
        case _:
            for v in g.input:
                v.type.tensor_type.elem_type = int(rng.integers(24))


def test_damaged_models_raise_only_unsupported_onnx() -> None:
    rng = np.random.default_rng(2024)
    for case in node_cases():
        if not {n.op_type for n in case.model.graph.node} <= set(SUPPORTED_OPS):
            continue
        ins = [array(x) for x in case.data_sets[0][0]]
        names = [v.name for v in case.model.graph.input]
        bind = {
            k: v for k, v in zip(names, ins, strict=False) if v is not None and v.dtype == np.int64
        }
        for _ in range(3):
            damaged = onnx.ModelProto()
            damaged.CopyFrom(case.model)
            _mutate(damaged, rng)
            with contextlib.suppress(UnsupportedOnnx):  # anything else fails the test
                import_model(damaged, constants=bind)


def test_import_poot_ir_does_not_import_onnx() -> None:
    code = "import sys, poot_ir; assert 'onnx' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- hand-built models ---------------------------------------------------------------------

F, I64, I32, F16, F64, BOOL = (
    TensorProto.FLOAT,
    TensorProto.INT64,
    TensorProto.INT32,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.BOOL,
)


def vi(name: str, shape: Sequence[int | str] | None, elem: int = F) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def model(
    nodes: Sequence[Any],
    inputs: Sequence[Any],
    outputs: Sequence[str],
    inits: Sequence[Any] = (),
    opset: int = 18,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes), "m", list(inputs), [vi(o, None) for o in outputs], list(inits)
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def init(name: str, value: Any, dtype: Any = np.float32) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def const(out: str, value: Any, dtype: Any = np.float32) -> Any:
    return helper.make_node(
        "Constant", [], [out], value=numpy_helper.from_array(np.asarray(value, dtype))
    )


def run(imported: Imported, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    feed = {imported.inputs[k]: v for k, v in inputs.items()}
    got = evaluate(imported.program, {**feed, **imported.weights})
    return {k: got[v] for k, v in imported.outputs.items()}


def prims(imported: Imported) -> list[Prim]:
    return [e.prim for e in imported.program.eqns]


RNG = np.random.default_rng(7)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_matmul_broadcasts_batch_axes() -> None:
    m = model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [vi("a", [2, 1, 3, 4]), vi("b", [5, 4, 6])],
        ["y"],
    )
    a, b = rand(2, 1, 3, 4), rand(5, 4, 6)
    y = run(import_model(m), a=a, b=b)["y"]
    assert y.shape == (2, 5, 3, 6)
    np.testing.assert_allclose(y, np.matmul(a, b), rtol=1e-5, atol=1e-6)


def test_matmul_with_a_matrix_flattens_the_batch_instead_of_copying_it() -> None:
    w = rand(4, 5)
    m = model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", [2, 3, 4])], ["y"], [init("W", w)]
    )
    imp = import_model(m)
    assert Prim.BROADCAST_IN_DIM not in prims(imp)
    assert [e.inputs[0].type.shape for e in imp.program.eqns if e.prim is Prim.MATMUL] == [(6, 4)]
    x = rand(2, 3, 4)
    np.testing.assert_allclose(run(imp, x=x)["y"], x @ w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("sa", "sb"), [((3,), (3,)), ((3,), (2, 3, 4)), ((2, 2, 3), (3,))])
def test_matmul_vectors(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"])], [vi("a", sa), vi("b", sb)], ["y"])
    a, b = rand(*sa), rand(*sb)
    y = run(import_model(m), a=a, b=b)["y"]
    np.testing.assert_allclose(y, np.matmul(a, b), rtol=1e-5, atol=1e-6)


def test_names_are_sanitized_deterministically() -> None:
    nodes = [
        helper.make_node("Add", ["1x", "layer.0/weight:0"], ["t"]),
        helper.make_node("Add", ["t", "layer.0_weight_0"], ["out/0"]),
    ]
    inits = [init("layer.0/weight:0", [1, 2, 3]), init("layer.0_weight_0", [4, 5, 6])]
    m = model(nodes, [vi("1x", [3])], ["out/0"], inits)
    imp = import_model(m)
    assert imp.inputs == {"1x": "_1x"}
    assert imp.outputs == {"out/0": "out_0"}
    assert [(a.name, a.storage) for a in imp.program.args] == [
        ("_1x", Storage.SLOT),
        ("layer.0_weight_0", Storage.WEIGHT),
        ("layer.0_weight_0_1", Storage.WEIGHT),
    ]
    np.testing.assert_array_equal(imp.weights["layer.0_weight_0"], [1, 2, 3])
    np.testing.assert_array_equal(imp.weights["layer.0_weight_0_1"], [4, 5, 6])
    assert import_model(m).program == imp.program  # deterministic
    assert import_model(m, name="net").program.name == "net"


def test_scalar_and_uniform_constants_are_literals_tensor_constants_weights() -> None:
    nodes = [
        const("two", 2.0),
        const("threes", [3.0] * 4),  # uniform: a literal as long as it does not widen
        const("vec", [1.0, 2.0, 3.0, 4.0]),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=init("v", [1.0])),
        helper.make_node("Mul", ["x", "two"], ["a"]),
        helper.make_node("Add", ["a", "threes"], ["b"]),
        helper.make_node("Add", ["b", "vec"], ["c"]),
        helper.make_node("Sub", ["c", "ones"], ["y"]),
    ]
    m = model(nodes, [vi("x", [3, 4])], ["y"], [init("shape", [3, 4], np.int64)])
    imp = import_model(m)
    assert list(imp.weights) == ["vec"]
    np.testing.assert_array_equal(imp.weights["vec"], [1, 2, 3, 4])
    literals = [a for e in imp.program.eqns for a in e.inputs if isinstance(a, Literal)]
    assert [a.as_float() for a in literals] == [2.0, 3.0, 1.0]
    x = rand(3, 4)
    np.testing.assert_allclose(run(imp, x=x)["y"], x * 2 + 3 + [1, 2, 3, 4] - 1, rtol=1e-6)


def test_constant_arithmetic_folds_through_the_oracle() -> None:
    # scale = 1 / sqrt(head_dim), as attention exports compute it: one literal, no weights.
    nodes = [
        const("d", 64.0),
        helper.make_node("Sqrt", ["d"], ["s"]),
        helper.make_node("Reciprocal", ["s"], ["r"]),
        helper.make_node("Mul", ["x", "r"], ["y"]),
    ]
    imp = import_model(model(nodes, [vi("x", [2])], ["y"]))
    assert imp.weights == {} and prims(imp) == [Prim.MUL]
    assert imp.program.eqns[0].inputs[1] == Literal.of(0.125, DType.F32)


def test_a_constant_output_is_a_weight() -> None:
    imp = import_model(model([const("c", [[1.0, 2.0]])], [], ["c"]))
    assert run(imp)["c"].tolist() == [[1.0, 2.0]]
    assert list(imp.weights) == ["c"]


def test_shape_arithmetic_folds_to_static_shapes() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        const("zero", 0, np.int64),
        helper.make_node("Gather", ["s", "zero"], ["n"]),
        const("axes", [0], np.int64),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        const("rest", [-1], np.int64),
        helper.make_node("Concat", ["n1", "rest"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    imp = import_model(model(nodes, [vi("x", [2, 3, 4])], ["y"]))
    assert imp.weights == {} and prims(imp) == [Prim.RESHAPE]
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(run(imp, x=x)["y"], x.reshape(2, 12))


def test_reshape_resolves_zero_and_minus_one() -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = model(nodes, [vi("x", [2, 3, 4])], ["y"], [init("shape", [0, -1], np.int64)])
    imp = import_model(m)
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(run(imp, x=x)["y"], x.reshape(2, 12))
    assert imp.weights == {}  # the int64 shape is folded, never a weight


@pytest.mark.parametrize(
    ("op", "opset", "axes_attr", "keepdims", "fn"),
    [
        ("ReduceSum", 11, True, 1, np.sum),
        ("ReduceSum", 13, False, 0, np.sum),
        ("ReduceMax", 13, True, 1, np.max),
        ("ReduceMax", 18, False, 0, np.max),
        ("ReduceMean", 18, False, 1, np.mean),
    ],
)
def test_reductions_by_opset(op: str, opset: int, axes_attr: bool, keepdims: int, fn: Any) -> None:
    if axes_attr:
        nodes = [helper.make_node(op, ["x"], ["y"], axes=[-1, 0], keepdims=keepdims)]
        inits = []
    else:
        nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)]
        inits = [init("axes", [-1, 0], np.int64)]
    imp = import_model(model(nodes, [vi("x", [2, 3, 4])], ["y"], inits, opset))
    x = rand(2, 3, 4)
    want = fn(x, axis=(0, 2), keepdims=bool(keepdims))
    np.testing.assert_allclose(run(imp, x=x)["y"], want, rtol=1e-5)


def test_softmax_before_opset_13_normalizes_the_flattened_tail() -> None:
    m = model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [vi("x", [2, 3, 4])], ["y"], opset=11
    )
    x = rand(2, 3, 4)
    flat = x.reshape(2, 12)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    want = (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4)
    np.testing.assert_allclose(run(import_model(m), x=x)["y"], want, rtol=1e-5)


def test_layernorm_in_f16_computes_in_f32_and_needs_no_bias() -> None:
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1)]
    m = model(nodes, [vi("x", [3, 8], F16), vi("g", [8], F16)], ["y"])
    imp = import_model(m)
    assert Prim.CONVERT in prims(imp)
    x, g = rand(3, 8, dtype=np.float16), rand(8, dtype=np.float16)
    x32 = x.astype(np.float32)
    norm = (x32 - x32.mean(-1, keepdims=True)) / np.sqrt(x32.var(-1, keepdims=True) + 1e-5)
    want = norm.astype(np.float16) * g
    y = run(imp, x=x, g=g)["y"]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_rmsnorm_uses_the_composite() -> None:
    nodes = [helper.make_node("RMSNormalization", ["x", "w"], ["y"], epsilon=1e-6)]
    imp = import_model(model(nodes, [vi("x", [4, 16])], ["y"], [init("w", rand(16))], opset=23))
    # ops.rmsnorm's chain: mul, reduce_sum, div, add, sqrt, broadcast_in_dim, div, mul w
    assert prims(imp)[:5] == [Prim.MUL, Prim.REDUCE_SUM, Prim.DIV, Prim.ADD, Prim.SQRT]
    x = rand(4, 16)
    w = imp.weights["w"]
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(run(imp, x=x)["y"], want, rtol=1e-5)


def test_slice_with_a_negative_step_gathers() -> None:
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])]
    inits = [
        init("st", [-1, 1], np.int64),
        init("en", [-(2**63), 100], np.int64),
        init("ax", [0, 1], np.int64),
        init("sp", [-2, 2], np.int64),
    ]
    imp = import_model(model(nodes, [vi("x", [5, 6])], ["y"], inits))
    assert Prim.GATHER in prims(imp) and Prim.SLICE in prims(imp)
    assert imp.weights["y.indices0"].tolist() == [4, 2, 0]
    x = rand(5, 6)
    np.testing.assert_array_equal(run(imp, x=x)["y"], x[::-2, 1::2])


def test_gather_with_a_scalar_constant_index_is_a_slice() -> None:
    nodes = [const("i", -1, np.int64), helper.make_node("Gather", ["x", "i"], ["y"], axis=1)]
    imp = import_model(model(nodes, [vi("x", [2, 3, 4])], ["y"]))
    assert prims(imp) == [Prim.SLICE, Prim.RESHAPE] and imp.weights == {}
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(run(imp, x=x)["y"], x[:, -1])


def test_gather_narrows_int64_constant_indices_to_i32() -> None:
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"])]
    inits = [init("ids", [[1, -1], [9, 0]], np.int64)]
    imp = import_model(model(nodes, [vi("table", [10, 4])], ["y"], inits))
    assert imp.weights["ids"].dtype == np.int32
    table = rand(10, 4)
    np.testing.assert_array_equal(run(imp, table=table)["y"], table[[[1, -1], [9, 0]]])


def _gathered_elements(data: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """ONNX GatherElements element by element, as its definition reads: the output at each
    position of ``idx`` is ``data`` there with the axis coordinate replaced by the index."""
    out = np.empty(idx.shape, data.dtype)
    for at in np.ndindex(*idx.shape):
        k = int(idx[at])
        src = list(at)
        src[axis] = k + data.shape[axis] if k < 0 else k
        out[at] = data[tuple(src)]
    return out


@pytest.mark.parametrize("axis_size", [3, 64, 65, 512])
def test_gather_elements_along_a_long_axis(axis_size: int) -> None:
    # BERT's token_type_ids: a constant buffer of 512 gathered to the sequence, folded at
    # import; onnx's own evaluator picks with np.choose, which takes at most 64 choices
    rng = np.random.default_rng(axis_size)
    idx = rng.integers(-axis_size, axis_size, (2, 16)).astype(np.int64)
    buffer = np.arange(2 * axis_size, dtype=np.int64).reshape(2, axis_size)
    nodes = [
        const("buffer", buffer, np.int64),
        const("idx", idx, np.int64),
        helper.make_node("GatherElements", ["buffer", "idx"], ["ids"], axis=1),
        helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=-1),
    ]
    imp = import_model(model(nodes, [vi("x", [2, axis_size])], ["ids", "y"]))
    x = rand(2, axis_size)
    got = run(imp, x=x)
    np.testing.assert_array_equal(got["ids"], _gathered_elements(buffer, idx, 1))
    np.testing.assert_array_equal(got["y"], _gathered_elements(x, idx, 1))


def test_gather_elements_reads_the_leading_part_off_the_axis() -> None:
    # indices shorter than the data off the axis: ONNX Runtime 1.x gives [[0, 4, 4], [6, 7, 8]]
    idx = np.array([[0, 4, -1], [1, 2, 3]], np.int64)
    nodes = [
        const("idx", idx, np.int64),
        helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1),
    ]
    imp = import_model(model(nodes, [vi("x", [4, 5])], ["y"]))
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    np.testing.assert_array_equal(run(imp, x=x)["y"], [[0, 4, 4], [6, 7, 8]])


def test_gather_elements_outside_the_axis_is_refused() -> None:
    nodes = [
        const("idx", [[0, 5]], np.int64),
        helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1, name="ge"),
    ]
    with pytest.raises(UnsupportedOnnx, match="ge"):
        import_model(model(nodes, [vi("x", [1, 5])], ["y"]))


def test_range_is_an_iota() -> None:
    nodes = [
        const("start", 1.0),
        const("limit", 4.0),
        const("delta", 0.5),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    imp = import_model(model(nodes, [vi("x", [6])], ["y"]))
    assert imp.weights == {} and prims(imp)[0] is Prim.IOTA
    x = rand(6)
    np.testing.assert_array_equal(run(imp, x=x)["y"], x + np.arange(1.0, 4.0, 0.5, np.float32))


def test_where_relu_gemm_expand_flatten_pow_castlike() -> None:
    nodes = [
        const("ninf", -np.inf),
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("Where", ["pos", "x", "ninf"], ["w"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Gemm", ["r", "B", "C"], ["g"], transB=1, alpha=0.5),
        helper.make_node("Expand", ["c1", "shape"], ["e"]),
        helper.make_node("Flatten", ["e"], ["f"], axis=1),
        const("two", 2.0),
        helper.make_node("Pow", ["x", "two"], ["p"]),
        helper.make_node("CastLike", ["pos", "x"], ["cl"]),
    ]
    c1 = rand(3, 1)
    inits = [
        init("zero", 0.0),
        init("B", rand(5, 4)),
        init("C", rand(5)),
        init("c1", c1),
        init("shape", [2, 3, 4], np.int64),
    ]
    imp = import_model(model(nodes, [vi("x", [3, 4])], ["w", "g", "f", "p", "cl"], inits))
    x = rand(3, 4)
    got = run(imp, x=x)
    wts = imp.weights
    np.testing.assert_array_equal(got["w"], np.where(x > 0, x, -np.inf))
    want_g = 0.5 * np.maximum(x, 0) @ wts["B"].T + wts["C"]
    np.testing.assert_allclose(got["g"], want_g, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["f"], np.broadcast_to(c1, (2, 3, 4)).reshape(2, 12))
    np.testing.assert_array_equal(got["p"], x * x)
    np.testing.assert_array_equal(got["cl"], (x > 0).astype(np.float32))


def test_squeeze_unsqueeze_transpose_concat_identity() -> None:
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"]),  # every axis of size 1
        helper.make_node("Unsqueeze", ["s", "ax"], ["u"]),
        helper.make_node("Transpose", ["u"], ["t"]),  # reversed
        helper.make_node("Identity", ["t"], ["i"]),
        helper.make_node("Concat", ["i", "i"], ["y"], axis=-1),
    ]
    inits = [init("ax", [-1], np.int64)]
    imp = import_model(model(nodes, [vi("x", [1, 3, 1, 2])], ["y"], inits))
    x = rand(1, 3, 1, 2)
    t = x.reshape(3, 2, 1).transpose()
    np.testing.assert_array_equal(run(imp, x=x)["y"], np.concatenate([t, t], axis=-1))


def test_bound_constants_replace_graph_inputs() -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = model(nodes, [vi("x", [2, 3]), vi("shape", [2], I64)], ["y"])
    imp = import_model(m, constants={"shape": np.array([3, 2])})
    assert imp.inputs == {"x": "x"}
    x = rand(2, 3)
    np.testing.assert_array_equal(run(imp, x=x)["y"], x.reshape(3, 2))


def test_import_from_a_path(tmp_path: Path) -> None:
    m = model([helper.make_node("Neg", ["x"], ["y"])], [vi("x", [2])], ["y"])
    path = tmp_path / "neg.onnx"
    onnx.save(m, str(path))
    assert import_model(path).program == import_model(str(path)).program == import_model(m).program


# -- refusals ------------------------------------------------------------------------------


def _node_model(op: str, inputs: Sequence[Any], n_in: list[str], **attrs: Any) -> onnx.ModelProto:
    return model([helper.make_node(op, n_in, ["y"], name="n0", **attrs)], inputs, ["y"])


REFUSALS: list[tuple[str, Any, dict[str, Any], tuple[str, str, str]]] = [
    (
        "op",
        lambda: _node_model("Unique", [vi("x", [3])], ["x"]),
        {},
        ("op", "n0", "Unique"),
    ),
    (
        "domain",
        lambda: model(
            [helper.make_node("Gelu", ["x"], ["y"], name="g", domain="com.microsoft")],
            [vi("x", [2])],
            ["y"],
        ),
        {},
        ("op", "g", "Gelu"),
    ),
    (
        "unknown attribute",
        lambda: _node_model("Transpose", [vi("x", [2, 3])], ["x"], perm=[1, 0], foo=1),
        {},
        ("attribute", "n0", "Transpose"),
    ),
    (
        "attribute value",
        lambda: _node_model("Gather", [vi("x", [2, 3]), vi("i", [2], I32)], ["x", "i"], axis=5),
        {},
        ("attribute", "n0", "Gather"),
    ),
    (
        "stash type",
        lambda: _node_model(
            "LayerNormalization", [vi("x", [2, 3]), vi("g", [3])], ["x", "g"], stash_type=0
        ),
        {},
        ("attribute", "n0", "LayerNormalization"),
    ),
    (
        "float64 input",
        lambda: _node_model("Neg", [vi("x", [2], F64)], ["x"]),
        {},
        ("dtype", "x", "graph input"),
    ),
    (
        "cast to float64",
        lambda: _node_model("Cast", [vi("x", [2])], ["x"], to=F64),
        {},
        ("dtype", "n0", "Cast"),
    ),
    (
        "int64 data constant",
        lambda: model(
            [
                const("c", [1, 2], np.int64),
                helper.make_node("Cast", ["x"], ["x64"], to=I64),
                helper.make_node("Add", ["x64", "c"], ["y"]),
            ],
            [vi("x", [2])],
            ["y"],
        ),
        {},
        ("dtype", "#1 -> x64", "Cast"),
    ),
    (
        "int64 input",
        lambda: _node_model("Reshape", [vi("x", [2, 3]), vi("s", [2], I64)], ["x", "s"]),
        {},
        ("dynamic", "n0", "Reshape"),
    ),
    (
        "int64 arithmetic at run time",
        lambda: _node_model("Add", [vi("a", [2], I64), vi("b", [2], I64)], ["a", "b"]),
        {},
        ("dtype", "n0", "Add"),
    ),
    (
        "exp of i32",
        lambda: _node_model("Exp", [vi("x", [2], I32)], ["x"]),
        {},
        ("dtype", "n0", "Exp"),
    ),
    (
        "dynamic axis",
        lambda: _node_model("Neg", [vi("x", ["batch", 2])], ["x"]),
        {},
        ("dynamic", "x", "graph input"),
    ),
    (
        "runtime shape",
        lambda: _node_model("Reshape", [vi("x", [2, 3]), vi("s", [2], I32)], ["x", "s"]),
        {},
        ("dynamic", "n0", "Reshape"),
    ),
    (
        "index out of range",
        lambda: model(
            [const("i", [7], np.int64), helper.make_node("Gather", ["x", "i"], ["y"], name="n0")],
            [vi("x", [3])],
            ["y"],
        ),
        {},
        ("value", "n0", "Gather"),
    ),
    (
        "slice step 0",
        lambda: model(
            [helper.make_node("Slice", ["x", "a", "a", "a", "z"], ["y"], name="n0")],
            [vi("x", [3])],
            ["y"],
            [init("a", [0], np.int64), init("z", [0], np.int64)],
        ),
        {},
        ("value", "n0", "Slice"),
    ),
    (
        "impossible reshape",
        lambda: model(
            [helper.make_node("Reshape", ["x", "s"], ["y"], name="n0")],
            [vi("x", [2, 3])],
            ["y"],
            [init("s", [4, -1], np.int64)],
        ),
        {},
        ("value", "n0", "Reshape"),
    ),
    (
        "pow exponent",
        lambda: model(
            [const("e", 1.7), helper.make_node("Pow", ["x", "e"], ["y"], name="n0")],
            [vi("x", [3])],
            ["y"],
        ),
        {},
        ("value", "n0", "Pow"),
    ),
    (
        "undefined input",
        lambda: _node_model("Neg", [vi("x", [2])], ["nope"]),
        {},
        ("model", "n0", "Neg"),
    ),
    (
        "shapes that do not broadcast",
        lambda: _node_model("Add", [vi("a", [3]), vi("b", [4])], ["a", "b"]),
        {},
        ("model", "n0", "Add"),
    ),
    (
        "output never computed",
        lambda: model([], [vi("x", [2])], ["y"]),
        {},
        ("model", "y", "graph output"),
    ),
    (
        "binding no input",
        lambda: _node_model("Neg", [vi("x", [2])], ["x"]),
        {"constants": {"z": np.zeros(2, np.float32)}},
        ("model", "z", "graph input"),
    ),
    (
        "binding the wrong dtype",
        lambda: _node_model("Neg", [vi("x", [2])], ["x"]),
        {"constants": {"x": np.zeros(2, np.float64)}},
        ("model", "x", "graph input"),
    ),
]


@pytest.mark.parametrize(
    ("make", "kwargs", "expect"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_refusals_are_typed_and_name_the_node(
    make: Any, kwargs: dict[str, Any], expect: tuple[str, str, str]
) -> None:
    kind, node, op_type = expect
    with pytest.raises(UnsupportedOnnx) as info:
        import_model(make(), **kwargs)
    err = info.value
    assert isinstance(err, PootError)
    assert (err.kind, err.node, err.op_type) == (kind, node, op_type), str(err)
    assert op_type in str(err) and node in str(err)


def test_a_file_that_is_no_model_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\xfe not a protobuf \x00" * 8)
    with pytest.raises(UnsupportedOnnx) as info:
        import_model(path)
    assert info.value.kind == "model"
    with pytest.raises(UnsupportedOnnx, match="No such file"):
        import_model(tmp_path / "missing.onnx")


def test_a_non_model_argument_is_a_typed_refusal() -> None:
    with pytest.raises(UnsupportedOnnx):
        import_model(42)  # type: ignore[arg-type]


def test_every_supported_op_has_a_floor() -> None:
    assert set(SUPPORTED_OPS) <= set(FLOORS), set(SUPPORTED_OPS) - set(FLOORS)


DOC = Path(__file__).resolve().parents[3] / "docs" / "conformance.md"


def test_conformance_doc_is_current() -> None:
    """docs/conformance.md is generated from these outcomes (tools/gen_conformance.py)."""
    want = onnx_cases.conformance_markdown([(o.case, o.result, o.reason) for o in _outcomes()])
    assert DOC.read_text(encoding="utf-8") == want, (
        "docs/conformance.md is stale: run `uv run python tools/gen_conformance.py`"
    )
