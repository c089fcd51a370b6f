"""Program memory as a region bound: each xdna2 tile's kernel has a code-size estimate (the
target table's, marked unmeasured), and an equation whose kernel cannot fit is refused with a
typed limit naming the figures."""

from __future__ import annotations

import dataclasses

import pytest
from poot_ir import Builder, DType, Prim, Program, TargetTableError, ops
from poot_planner import TARGETS, RefusalKind, Target, plan
from poot_planner.target import CodeSize

F32 = DType.F32
XDNA2 = TARGETS["xdna2"]
CS = XDNA2.code_size
assert CS is not None
# by hand from the table: base 1536; erf calls addsf3 1424, mulsf3 1168, divsf3 1440,
# cmpsf2 1000 and the conversions 464 once each; its body 1400
ERF_BYTES = 1536 + 1424 + 1168 + 1440 + 1000 + 464 + 1400


def _erf() -> Program:
    b = Builder("erf")
    b.output("y", b.erf(b.slot("x", F32, (4, 8))))
    return b.build()


def _with(program_bytes: int) -> Target:
    assert CS is not None
    return dataclasses.replace(
        XDNA2, code_size=dataclasses.replace(CS, program_bytes=program_bytes)
    )


def test_the_table_is_an_unmeasured_estimate_of_16_kib_per_core() -> None:
    assert CS is not None
    assert CS.program_bytes == 16384 and CS.measured is False


def test_each_tile_carries_its_estimate() -> None:
    (tile,) = plan(_erf(), "xdna2").check().tiles
    assert tile.code_bytes == ERF_BYTES
    b = Builder("norm")
    x = b.slot("x", F32, (4, 64))
    b.output("y", ops.rmsnorm(b, x, b.weight("w", F32, (64,))))
    (norm,) = plan(b.build(), "xdna2").check().tiles
    # mul, div, add, sqrt, reduce_sum, broadcast: four routines once each, six bodies
    assert norm.code_bytes == 1536 + 1424 + 1168 + 1440 + 1000 + (96 * 3 + 700 + 160 + 160)


@pytest.mark.parametrize(("available", "fits"), [(ERF_BYTES, True), (ERF_BYTES - 1, False)])
def test_a_kernel_past_program_memory_is_refused_naming_the_figures(
    available: int, fits: bool
) -> None:
    p = plan(_erf(), _with(available))
    if fits:
        assert p.admitted and p.tiles[0].code_bytes == ERF_BYTES
        return
    (r,) = p.refusals
    assert (r.kind, r.eqn, r.primitive) == (RefusalKind.REGION_LIMIT, 0, "erf")
    assert r.facts == (("limit", "program_bytes"), ("needed", ERF_BYTES), ("available", available))
    assert p.tiles == () and p.regions == ()


def test_a_table_without_a_figure_for_an_admitted_primitive_is_refused_at_import() -> None:
    assert CS is not None
    bodies = tuple(b for b in CS.bodies if b[0] is not Prim.ERF)
    with pytest.raises(TargetTableError, match="no code-size figure for erf"):
        dataclasses.replace(XDNA2, code_size=dataclasses.replace(CS, bodies=bodies))
    odd = ((Prim.ERF, ("nosuch",), 1), *bodies)
    with pytest.raises(TargetTableError, match="erf calls unknown routine nosuch"):
        dataclasses.replace(XDNA2, code_size=CodeSize(1, 1, CS.routines, odd))


@pytest.mark.parametrize("prim", [Prim.ADD, Prim.SUB], ids=lambda p: p.value)
def test_a_guarded_add_or_sub_counts_the_float_compare_it_calls(prim: Prim) -> None:
    """The result guard of an add or sub asks whether its operands cancel exactly, a float
    ``!=`` (``poot_codegen.xdna.guards.result_guard``): on aie2p a soft-float compare routine
    linked into the core beside the adder, so the estimate counts it too."""
    from poot_codegen.xdna.guards import result_guard

    assert CS is not None
    guard = result_guard(prim, ["a[i]", "b[i]"], "y")
    assert "!=" in guard  # a float compare of the operands
    alone = 1536 + 96 + 1424 + 1000  # by hand: base, body, addsf3, cmpsf2
    assert CS.estimate((prim,)) == alone
    b = Builder(prim.value)
    x, w = b.slot("x", F32, (4, 8)), b.slot("w", F32, (4, 8))
    b.output("y", b.add(x, w) if prim is Prim.ADD else b.sub(x, w))
    (tile,) = plan(b.build(), "xdna2").check().tiles
    assert tile.code_bytes == alone
