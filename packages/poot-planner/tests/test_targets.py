"""Targets are data: every registered target loads, its table says exactly what the seed lists
as verified, and a malformed table fails when it is built (so when its module is imported)."""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import sys
from pathlib import Path

import poot_planner.targets
import pytest
from poot_ir import Builder, DType, Prim, TargetTableError, UnknownTarget
from poot_ir.numerics import (
    AbsRel,
    AnyInput,
    BitExact,
    Contract,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    LargerOperandUlps,
    NotNaN,
    PositiveNormal,
    ProductSum,
    Relative,
    ScaledSum,
)
from poot_planner import (
    TARGETS,
    AxisRule,
    Capability,
    KernelClass,
    NarrowingContract,
    RefusalKind,
    RegionLimits,
    Target,
    get_target,
    plan,
)

F32 = frozenset({DType.F32})


def _cap(prim: Prim = Prim.ADD, dtypes: frozenset[DType] = F32) -> Capability:
    return Capability(prim, dtypes, KernelClass.POINTWISE, Contract(prim, BitExact(), AnyInput()))


# -- every target loads --------------------------------------------------------------------


def test_every_target_module_loads_and_is_registered() -> None:
    names = [m.name for m in pkgutil.iter_modules(poot_planner.targets.__path__)]
    assert {"cpu", "intel_npu4", "xdna2"} <= set(names)
    loaded = set()
    for name in names:
        module = importlib.import_module(f"poot_planner.targets.{name}")
        target = module.TARGET
        assert isinstance(target, Target)
        assert TARGETS[target.name] is target
        assert get_target(target.name) is target
        assert get_target(target) is target
        # re-running the table's checks on the loaded rows passes
        assert dataclasses.replace(target) == target
        loaded.add(target.name)
    assert loaded == set(TARGETS), "one module per target, one registry line per module"
    assert list(TARGETS)[:3] == ["cpu", "xdna2", "intel-npu4"]


def test_unknown_target_is_a_typed_error() -> None:
    with pytest.raises(UnknownTarget) as err:
        get_target("tpu")
    assert err.value.name == "tpu"
    assert err.value.known == tuple(TARGETS)


# -- malformed tables ----------------------------------------------------------------------


def test_contract_without_a_domain_is_refused() -> None:
    bad = Capability(
        Prim.ADD,
        F32,
        KernelClass.POINTWISE,
        Contract(Prim.ADD, BitExact(), None),  # type: ignore[arg-type]
    )
    with pytest.raises(TargetTableError, match="a contract without a domain") as err:
        Target("bad", "no domain", (bad,))
    assert err.value.target == "bad"


def test_capability_without_a_contract_is_refused() -> None:
    bad = Capability(Prim.ADD, F32, KernelClass.POINTWISE, BitExact())  # type: ignore[arg-type]
    with pytest.raises(TargetTableError, match="add has no contract"):
        Target("bad", "no contract", (bad,))


def test_primitive_the_ir_does_not_know_is_refused() -> None:
    bad = Capability(
        "softmax",  # type: ignore[arg-type]
        F32,
        KernelClass.POINTWISE,
        Contract(Prim.ADD, BitExact(), AnyInput()),
    )
    with pytest.raises(TargetTableError, match="'softmax' is not a primitive of the IR"):
        Target("bad", "unknown primitive", (bad,))


def test_duplicate_row_is_refused() -> None:
    with pytest.raises(TargetTableError, match="add on f32 is declared twice"):
        Target("bad", "duplicate", (_cap(), _cap()))
    # overlapping dtype sets are a duplicate too
    with pytest.raises(TargetTableError, match="add on f32 is declared twice"):
        Target("bad", "overlap", (_cap(dtypes=frozenset({DType.F32, DType.F16})), _cap()))
    # the same primitive on disjoint dtypes is two rows, not a duplicate
    ok = Target("ok", "disjoint", (_cap(dtypes=frozenset({DType.F16})), _cap()))
    assert ok.capability(Prim.ADD, DType.F16) is not None


def test_capability_admitting_no_dtype_is_refused() -> None:
    with pytest.raises(TargetTableError, match="admits no dtype"):
        Target("bad", "empty", (_cap(dtypes=frozenset()),))


def test_malformed_target_module_fails_at_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad_target_for_test.py").write_text(
        "from poot_ir import DType, Prim\n"
        "from poot_ir.numerics import AnyInput, BitExact, Contract\n"
        "from poot_planner import Capability, KernelClass, Target\n"
        "F32 = frozenset({DType.F32})\n"
        "ROW = Capability(Prim.MUL, F32, KernelClass.POINTWISE,\n"
        "                 Contract(Prim.MUL, BitExact(), AnyInput()))\n"
        "TARGET = Target('bad', 'a duplicate row', (ROW, ROW))\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(TargetTableError, match="mul on f32 is declared twice"):
            importlib.import_module("bad_target_for_test")
    finally:
        sys.modules.pop("bad_target_for_test", None)


# -- the tables say what the seed verified ---------------------------------------------------


def _rows(target: Target) -> dict[Prim, Capability]:
    rows = {c.prim: c for c in target.capabilities}
    assert len(rows) == len(target.capabilities), "one row per primitive in the NPU tables"
    return rows


_ANY_DTYPE = {
    Prim.EQ,
    Prim.SELECT,
    Prim.CONVERT,
    Prim.GATHER,
    Prim.TRANSPOSE,
    Prim.RESHAPE,
    Prim.BROADCAST_IN_DIM,
    Prim.SLICE,
    Prim.CONCAT,
    Prim.DYNAMIC_UPDATE_SLICE,
}


def test_cpu_admits_every_primitive_on_the_dtypes_its_type_rule_defines() -> None:
    cpu = TARGETS["cpu"]
    float_only = {Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT}
    float_only |= {Prim.CONV, Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX}
    for p in Prim:
        for d in DType:
            cap = cpu.capability(p, d)
            defined = d.is_float if p in float_only else d is not DType.BOOL or p in _ANY_DTYPE
            assert (cap is not None) == defined, (p, d)
            assert cap is None or cap.kernel is KernelClass.ORACLE
    assert cpu.region_limits is None and cpu.narrowing is None


def test_xdna2_table_is_the_verified_list() -> None:
    xdna2 = TARGETS["xdna2"]
    rows = _rows(xdna2)
    smooth = AbsRel(2e-6, 1e-5)
    expected = {
        Prim.ADD: (LargerOperandUlps(2), FiniteNormalResult()),
        Prim.SUB: (LargerOperandUlps(2), FiniteNormalResult()),
        Prim.MUL: (BitExact(), FiniteNormalResult()),
        Prim.DIV: (BitExact(), FiniteNormalResult()),
        Prim.NEG: (BitExact(), FiniteNormalResult()),
        Prim.RECIP: (BitExact(), FiniteNormalResult()),
        Prim.GE: (BitExact(), FiniteNormalResult()),
        # the specification's [-87, 88], extended down to -inf (issue 30): below -87.34 the
        # kernel flushes to +0, within the absolute part (packages/poot-codegen test_poot_math)
        Prim.EXP: (smooth, Interval(-math.inf, 88.0)),
        Prim.LOG: (smooth, PositiveNormal()),
        Prim.TANH: (smooth, FiniteInputs()),
        Prim.ERF: (smooth, FiniteInputs()),
        Prim.SQRT: (Relative(4e-7), PositiveNormal()),
        Prim.REDUCE_SUM: (ScaledSum(2), FiniteInputs()),
    }
    relayouts = {Prim.RESHAPE, Prim.TRANSPOSE, Prim.SLICE, Prim.CONCAT, Prim.IOTA}
    tiles = {Prim.MAX, Prim.REDUCE_MAX, Prim.GATHER, Prim.MATMUL, Prim.BROADCAST_IN_DIM}
    assert set(rows) == {*expected, *tiles, *relayouts}
    # matmul narrows its operands to bf16 (upstream aie2p mm.cc's arithmetic): ProductSum
    assert rows[Prim.MATMUL].contract.bound == ProductSum(2.0**-8)
    assert rows[Prim.MATMUL].kernel is KernelClass.MATMUL
    # the relayouts the host arenas absorb: they move bytes, on the dtypes tiles compute in
    for prim in relayouts:
        assert rows[prim].kernel is KernelClass.HOST_RELAYOUT
        assert rows[prim].contract == Contract(prim, BitExact(), AnyInput())
        assert rows[prim].dtypes == frozenset({DType.F32, DType.I32})
    for prim, (bound, domain) in expected.items():
        c = rows[prim]
        assert (c.contract.bound, c.contract.domain) == (bound, domain), prim
        assert c.contract.primitive is prim
    assert ScaledSum(2).unit == 2.0**-23 and LargerOperandUlps(2).unit == 2.0**-23
    # max and a row max are a compare and select: exact (a zero tie's sign aside), not NaN
    for prim in (Prim.MAX, Prim.REDUCE_MAX):
        assert isinstance(rows[prim].contract.bound, BitExact)
        assert rows[prim].contract.domain == NotNaN()
    assert rows[Prim.GATHER].contract == Contract(Prim.GATHER, BitExact(), AnyInput())
    assert rows[Prim.GATHER].dtypes == frozenset({DType.F32, DType.I32})
    assert rows[Prim.GATHER].axes is AxisRule.ANY
    for prim in (Prim.REDUCE_SUM, Prim.REDUCE_MAX):
        assert rows[prim].kernel is KernelClass.ROW and rows[prim].axes is AxisRule.ANY
    for prim, c in rows.items():
        # gather and a broadcast copy move words, as the relayouts do
        if prim not in (Prim.GATHER, Prim.BROADCAST_IN_DIM) and prim not in relayouts:
            assert c.dtypes == F32, prim
    assert xdna2.region_limits == RegionLimits(
        compute_tiles=32,
        host_streams_in=16,
        host_streams_out=16,
        streams_per_tile=2,
        tile_bytes=64512,
        contexts=16,
        host_buffers=5,
    )
    assert xdna2.narrowing is None
    assert Prim.SQRT in xdna2.fused_steps and Prim.BROADCAST_IN_DIM in xdna2.fused_steps
    assert Prim.SUB not in xdna2.fused_steps and Prim.EXP not in xdna2.fused_steps


def test_intel_npu4_table_is_the_verified_list() -> None:
    intel = TARGETS["intel-npu4"]
    rows = _rows(intel)
    arithmetic = {
        Prim.ADD,
        Prim.SUB,
        Prim.MUL,
        Prim.MAX,
        Prim.GE,
        Prim.DIV,
        Prim.NEG,
        Prim.SQRT,
        Prim.EXP,
        Prim.REDUCE_SUM,
        Prim.REDUCE_MAX,
        Prim.MATMUL,
        Prim.CONV,
        Prim.REDUCE_WINDOW_MAX,
        Prim.REDUCE_WINDOW_SUM,
    }
    movement = {
        Prim.GATHER,
        Prim.TRANSPOSE,
        Prim.RESHAPE,
        Prim.BROADCAST_IN_DIM,
        Prim.SLICE,
        Prim.CONCAT,
        Prim.DYNAMIC_UPDATE_SLICE,
    }
    assert set(rows) == arithmetic | movement | {Prim.CONVERT, Prim.IOTA}
    for prim in arithmetic:
        assert rows[prim].dtypes == frozenset({DType.F16}), prim
        assert rows[prim].kernel is KernelClass.GRAPH_OP
        assert rows[prim].axes is AxisRule.ANY  # rows and columns
    for prim in movement:
        assert rows[prim].dtypes == frozenset(DType)
        assert rows[prim].contract.bound == BitExact()
    assert rows[Prim.NEG].contract.bound == BitExact(signed_zero=False)
    assert rows[Prim.CONVERT].dtypes == frozenset({DType.F32, DType.F16})
    assert intel.narrowing == NarrowingContract(
        device_dtype=DType.F16,
        normwise=intel.narrowing.normwise if intel.narrowing else 0.0,
        max_magnitude=65504.0,
        measured_on=intel.narrowing.measured_on if intel.narrowing else "",
        floor=2.0**-24,  # FP16's smallest subnormal
    )
    assert intel.region_limits is None and not intel.fused_steps
    for removed in (Prim.LOG, Prim.RECIP, Prim.TANH, Prim.ERF, Prim.ABS, Prim.MIN, Prim.SELECT):
        assert not intel.admits_prim(removed)


def _pooled(lhs_dilation: int = 1, window_dilation: int = 1, conv_stride: int = 1) -> Builder:
    b = Builder("pool")
    x = b.slot("x", DType.F32, (1, 2, 6, 6))
    w = b.weight("w", DType.F32, (2, 1, 3, 3))
    y = b.conv(x, w, (conv_stride, 1), lhs_dilation=(lhs_dilation, 1), groups=2)
    y = b.reduce_window_max(y, (1, 1, 2, 2), (1, 1, 2, 2), dilation=(1, 1, window_dilation, 1))
    b.output("y", b.reduce_window_sum(y, (1, 1, 2, 2)))
    return b


def test_xdna2_runs_windows_by_their_windows_and_refuses_a_transposed_conv_typed() -> None:
    # a convolution is the tiles' matmul of its windows, a window reduction a reduction of
    # them; a convolution's input dilation has no such rewrite (strided slices cannot insert
    # zeros): refused by name, so --partition routes around it
    p = plan(_pooled().build(), "xdna2")
    assert p.admitted, p.refusals
    assert [rw.rule.name for rw in p.rewrites] == [
        "a convolution as a matmul of its windows",
        "a window maximum as a maximum of its windows",
        "a window sum as a sum of its windows",
    ]
    p = plan(_pooled(lhs_dilation=2).build(), "xdna2")
    assert [(r.kind, r.primitive) for r in p.refusals] == [
        (RefusalKind.UNSUPPORTED_PRIMITIVE, Prim.CONV.value)
    ]


def test_intel_admits_conv_and_window_reductions_and_refuses_what_opset1_cannot_say() -> None:
    assert plan(_pooled().build(), "intel-npu4").admitted
    # an input dilation with unit strides is a transposed convolution (ConvolutionBackpropData)
    assert plan(_pooled(lhs_dilation=2).build(), "intel-npu4").admitted
    p = plan(_pooled(lhs_dilation=2, window_dilation=2, conv_stride=2).build(), "intel-npu4")
    axis = [r for r in p.refusals if r.kind is RefusalKind.UNSUPPORTED_AXIS]
    assert [r.primitive for r in axis] == [Prim.CONV.value, Prim.REDUCE_WINDOW_MAX.value]
    assert "lhs_dilation" in str(axis[0].fact("params"))
    assert "dilation" in str(axis[1].fact("params"))
