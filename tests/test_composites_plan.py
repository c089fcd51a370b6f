"""``poot_ir.ops.rmsnorm`` builds exactly the chain the XDNA2 planner fuses: the whole program,
with or without a weight, is admitted as one fused-norm tile with a derived bound. A cross-package
check, so it lives here rather than in either package's tests."""

from __future__ import annotations

import pytest
from poot_ir import Builder, DType, ops
from poot_planner import KernelClass, plan

F32 = DType.F32


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
@pytest.mark.parametrize("shape", [(4, 64), (1, 8), (2, 3, 16)])
def test_rmsnorm_is_one_fused_tile_on_xdna2(weighted: bool, shape: tuple[int, ...]) -> None:
    b = Builder("rms")
    x = b.slot("x", F32, shape)
    w = b.weight("w", F32, shape[-1:]) if weighted else None
    b.output("y", ops.rmsnorm(b, x, w))
    prog = b.build()
    p = plan(prog, "xdna2")
    assert p.admitted, p.refusals
    (tile,) = p.tiles
    assert tile.kind is KernelClass.FUSED_NORM
    assert tile.eqns == tuple(range(len(prog.eqns)))  # every equation of the chain, no other
    assert tile.bound is not None and 0 < tile.bound < 1e-4
