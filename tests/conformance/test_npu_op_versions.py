"""Every op the Intel lowering emits for the NPU is one the NPU compiler's frontend imports.

For every capability row of ``intel-npu4`` on every dtype, the conformance suite's one-equation
program is planned (narrowed where the target narrows) and lowered as the NPU gets it (no FP16
emulation), and every (op type, version) of the model must be in ``compiler_ops.ACCEPTED``,
the table read from the NPU compiler's own dispatch map.
"""

from __future__ import annotations

import pytest
from poot_codegen.intel import compiler_ops
from poot_codegen.intel import graph as intel_graph
from poot_ir import Builder, DType
from poot_planner import TARGETS, Capability, Plan, plan
from poot_planner.fp16.checks import RangeCheck
from poot_planner.fp16.narrowing import intermediate_guards

from conformance.test_capabilities import _program

_NPU = TARGETS["intel-npu4"]


@pytest.mark.parametrize(
    ("cap", "dtype"),
    [
        pytest.param(c, d, id=f"{c.prim.value}-{d.value}")
        for c in _NPU.capabilities
        for d in sorted(c.dtypes, key=lambda d: d.value)
    ],
)
def test_every_admitted_capability_lowers_to_ops_the_npu_compiler_imports(
    cap: Capability, dtype: DType
) -> None:
    program = _program(cap, dtype)
    assert program is not None
    planned = plan(program, _NPU).check()
    model = intel_graph.lower(planned.program, guards=_guards(planned))
    assert compiler_ops.outside_table(intel_graph.op_census(model)) == []


def _guards(planned: Plan) -> tuple[tuple[int, RangeCheck], ...]:
    if planned.narrowing is None:
        return ()
    return intermediate_guards(planned.source, planned.narrowing)


def test_the_fp16_guard_uses_only_ops_the_npu_compiler_imports() -> None:
    b = Builder("guarded")
    x = b.slot("x", DType.F32, (3, 4))
    m = b.max(b.sub(x, 1e9), x)  # a sentinel check
    q = b.div(x, b.mul(x, x))  # an overflow check
    s = b.reduce_sum(b.mul(m, x), 1)  # a fresh check: m may carry the sentinel's infinity
    b.output("y", b.add(b.reduce_sum(q, 1), s))
    planned = plan(b.build(), _NPU).check()
    guards = _guards(planned)
    assert {g.kind.value for _, g in guards} == {"overflow", "sentinel"}
    assert any(g.fresh for _, g in guards)
    model = intel_graph.lower(planned.program, guards=guards)
    census = intel_graph.op_census(model)
    assert ("ReduceLogicalAnd", "opset1") in census
    assert compiler_ops.outside_table(census) == []


def test_the_table_catches_the_versions_the_npu_compiler_lacks() -> None:
    # opset15's ScatterNDUpdate and opset8's Slice are what the lowering used to emit
    emitted = {("ScatterNDUpdate", "opset15"), ("Slice", "opset8"), ("Add", "opset1")}
    assert compiler_ops.outside_table(emitted) == [
        ("ScatterNDUpdate", "opset15"),
        ("Slice", "opset8"),
    ]
    assert ("ScatterNDUpdate", "opset4") in compiler_ops.ACCEPTED
