"""intel-npu4's tensor byte limit: one tensor is one device allocation, and the NPU driver caps
an allocation at 4 GiB (intel/linux-npu-driver umd/vpu_driver/source/device/hw_info.hpp,
``maxMemAllocSize = 0x100000000``). Planning refuses a larger tensor with ``tensor_bytes`` at
once, counting a narrowed F32 at the FP16 it is stored in; at the limit it is admitted."""

from __future__ import annotations

import pytest
from poot_ir import Builder, DType, Program
from poot_planner import RefusalKind, plan
from poot_planner.targets import get_target

LIMIT = 2**32  # bytes: the driver's maxMemAllocSize (the value read upstream, not our table)


def _neg(dtype: DType, shape: tuple[int, ...]) -> Program:
    b = Builder("big")
    b.output("y", b.neg(b.slot("x", dtype, shape)))
    return b.build()


def test_the_table_records_the_drivers_allocation_limit() -> None:
    assert get_target("intel-npu4").tensor_bytes == LIMIT
    assert get_target("xdna2").tensor_bytes is None  # xdna2 bounds elements (tensor_elements)


@pytest.mark.parametrize(
    ("dtype", "itemsize"),
    [(DType.F16, 2), (DType.F32, 2)],  # F32 is narrowed: stored as FP16 on the device
)
def test_at_the_limit_admitted_and_one_element_past_refused(dtype: DType, itemsize: int) -> None:
    at = LIMIT // itemsize
    assert plan(_neg(dtype, (at,)), "intel-npu4").admitted
    p = plan(_neg(dtype, (at + 1,)), "intel-npu4")
    (r,) = p.refusals
    assert r.kind is RefusalKind.REGION_LIMIT and r.fact("limit") == "tensor_bytes"
    assert (r.fact("needed"), r.fact("available")) == ((at + 1) * itemsize, LIMIT)
    assert r.eqn == 0 and r.primitive == "neg"


def test_a_shape_whose_product_is_huge_is_refused_by_bytes() -> None:
    """Each dim is small; the product is what the device cannot hold (2^38 F16 elements, 2^39 bytes)."""
    p = plan(_neg(DType.F16, (2**19, 2**19)), "intel-npu4")
    assert [r.fact("limit") for r in p.refusals] == ["tensor_bytes"]
    assert p.refusals[0].fact("needed") == 2**39
