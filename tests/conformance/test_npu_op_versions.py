"""Every op the Intel lowering emits for the NPU is one the NPU compiler's frontend imports.

For every capability row of ``intel-npu4`` on every dtype, the conformance suite's one-equation
program is planned (narrowed where the target narrows) and lowered as the NPU gets it (no FP16
emulation), and every (op type, version) of the model must be in ``npu_frontend_ops.ACCEPTED``,
the table read from the NPU compiler's own dispatch map.
"""

from __future__ import annotations

import pytest
from poot_codegen import npu_frontend_ops, openvino_ir
from poot_ir import DType
from poot_planner import TARGETS, Capability, plan

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
    model = openvino_ir.lower(planned.program)
    assert npu_frontend_ops.outside_table(openvino_ir.op_census(model)) == []


def test_the_table_catches_the_versions_the_npu_compiler_lacks() -> None:
    # opset15's ScatterNDUpdate and opset8's Slice are what the lowering used to emit
    emitted = {("ScatterNDUpdate", "opset15"), ("Slice", "opset8"), ("Add", "opset1")}
    assert npu_frontend_ops.outside_table(emitted) == [
        ("ScatterNDUpdate", "opset15"),
        ("Slice", "opset8"),
    ]
    assert ("ScatterNDUpdate", "opset4") in npu_frontend_ops.ACCEPTED
