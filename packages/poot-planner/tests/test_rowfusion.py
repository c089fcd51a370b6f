"""XDNA2 row kernels: the fused RMSNorm (with and without a weight) is one kernel on one tile
whose relative bound is derived from its steps; a step with no derived bound is a typed
MISSING_BOUND naming it, so LayerNorm and softmax are refused."""

from __future__ import annotations

import numpy as np
import pytest
from poot_ir import Bounded, Builder, DType, PlanRefused, Program, Var, evaluate, ops
from poot_planner import KernelClass, Plan, RefusalKind, plan
from poot_planner.xdna2.facts import value_facts

F32 = DType.F32


def hand_bound(cols: int, weight: bool) -> float:
    """The first-order relative bound of ``x / sqrt(sum(x * x) / cols + eps) [* w]``, worked
    from the seed's contracts step by step (products of two errors, below 1e-10, dropped)."""
    u = 2.0**-24  # mul and div are bit for bit IEEE: one correct rounding each
    two_units = 2 * 2.0**-23  # an add is faithful to two units of its larger operand
    square = u  # x * x
    total = square + cols * two_units  # in-order sum of non-negative terms: cols additions
    mean = total + u  # / cols
    shifted = mean + two_units  # + eps, both non-negative: no cancellation
    rms = shifted / 2 + 4e-7  # sqrt halves its operand's relative error, then its own 4e-7
    y = rms + u  # x / rms
    return y + u if weight else y  # * w


def rmsnorm_program(
    shape: tuple[int, ...] = (4, 64), weight: bool = False, eps: float = 1e-6
) -> Program:
    b = Builder("rmsnorm")
    x = b.slot("x", F32, shape)
    w = b.weight("w", F32, shape[-1:]) if weight else None
    b.output("y", ops.rmsnorm(b, x, w, eps))
    return b.build()


def missing_bounds(p: Plan) -> dict[str, str]:
    """The MISSING_BOUND refusals of ``p``: primitive -> the step's reason."""
    assert all(r.kind is RefusalKind.MISSING_BOUND for r in p.refusals), [
        str(r) for r in p.refusals
    ]
    return {r.primitive: str(r.fact("step")) for r in p.refusals}


def test_hand_bound_is_the_seeds_figure() -> None:
    """The seed: "the derived relative bound of a 64-column RMSNorm is 8.5e-6"."""
    assert hand_bound(64, weight=False) == pytest.approx(8.27e-6, rel=1e-3)
    assert hand_bound(64, weight=True) == pytest.approx(8.33e-6, rel=1e-3)
    assert hand_bound(64, weight=True) == pytest.approx(8.5e-6, rel=0.03)


@pytest.mark.parametrize("weight", [False, True], ids=["no-weight", "weight"])
def test_fused_rmsnorm_is_one_kernel_with_its_derived_bound(weight: bool) -> None:
    source = rmsnorm_program(weight=weight)
    p = plan(source, "xdna2")
    assert p.admitted, [str(r) for r in p.refusals]
    (tile,) = p.tiles
    assert tile.kind is KernelClass.FUSED_NORM
    assert tile.eqns == tuple(range(len(source.eqns)))
    assert [a.kernel for a in p.admissions] == [KernelClass.FUSED_NORM] * len(source.eqns)
    assert all(a.contract is None and a.tile == 0 for a in p.admissions)
    (region,) = p.regions
    assert p.contexts == 1
    assert [v.name for v in region.host_in] == (["x", "w"] if weight else ["x"])
    assert region.host_out == (source.outputs[0].var,) and region.internal == ()
    assert tile.bound is not None
    print(f"\nfused rmsnorm (64 columns, weight={weight}): derived bound {tile.bound:.4g}")
    assert tile.bound == pytest.approx(hand_bound(64, weight), rel=1e-9)
    assert 8.0e-6 < tile.bound <= 8.5e-6
    assert p.numerics == Bounded(0.0, tile.bound)


@pytest.mark.parametrize("cols", [1, 16, 128, 1000])
def test_bound_scales_with_the_row(cols: int) -> None:
    for weight in (False, True):
        (tile,) = plan(rmsnorm_program((3, cols), weight), "xdna2").tiles
        assert tile.bound == pytest.approx(hand_bound(cols, weight), rel=1e-9)


def test_weight_is_resident_and_rows_stream() -> None:
    p = plan(rmsnorm_program((4, 64), weight=True), "xdna2")
    (tile,) = p.tiles
    x, w = tile.inputs
    assert (x.var.name, x.resident, x.unit) == ("x", False, 64)
    assert (w.var.name, w.resident) == ("w", True)
    assert (tile.units, tile.out_unit, tile.chunk) == (4, 64, 4)
    # resident weight once, then two row buffers each of x and y per row of the chunk
    # (and the region's flag path, one word in and one out, and the link's data sections
    # after the buffers, the core's guard count and a reserve: 8 + 256)
    assert tile.tile_bytes == 64 * 4 + 2 * 4 * (64 * 4 + 64 * 4) + 8 + 256


@pytest.mark.parametrize(("shape", "weight"), [((64,), False), ((2, 3, 64), True)])
def test_other_ranks_fuse_too(shape: tuple[int, ...], weight: bool) -> None:
    p = plan(rmsnorm_program(shape, weight), "xdna2")
    assert p.admitted and len(p.tiles) == 1 and p.tiles[0].kind is KernelClass.FUSED_NORM
    assert p.tiles[0].bound == pytest.approx(hand_bound(64, weight), rel=1e-9)


def test_a_rank_one_weight_needs_no_broadcast_so_it_is_its_own_tile() -> None:
    """For a ``[cols]`` row the weight has the row's shape: ``* w`` is an ordinary pointwise
    mul (bit exact) after the kernel, and the kernel's output stays on the tiles."""
    p = plan(rmsnorm_program((64,), weight=True), "xdna2")
    assert p.admitted
    assert [t.kind for t in p.tiles] == [KernelClass.FUSED_NORM, KernelClass.POINTWISE]
    (region,) = p.regions
    assert region.internal == (p.tiles[0].output,)


@pytest.mark.parametrize("weight", [False, True])
def test_the_bound_holds_for_the_correctly_rounded_oracle(weight: bool) -> None:
    """A sanity check of the derivation: the F32 oracle (every step correctly rounded, so
    tighter than the core) stays inside the derived bound against a float64 reference."""
    source = rmsnorm_program((32, 64), weight)
    (tile,) = plan(source, "xdna2").tiles
    assert tile.bound is not None
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((32, 64)) * np.logspace(-3, 3, 32)[:, None]).astype(np.float32)
    w = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    y = evaluate(source, {"x": x, "w": w} if weight else {"x": x})["y"]
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + float(np.float32(1e-6)))
    if weight:
        ref = ref * w.astype(np.float64)
    rel = np.max(np.abs(y - ref) / np.abs(ref))
    assert rel < tile.bound


# -- steps with no derived bound -------------------------------------------------------------


def test_rmsnorm_with_zero_eps_is_refused_naming_sqrt() -> None:
    p = plan(rmsnorm_program(eps=0.0), "xdna2")
    (r,) = p.refusals
    assert r.kind is RefusalKind.MISSING_BOUND
    assert (r.eqn, r.primitive) == (4, "sqrt")
    assert r.facts == (("step", "sqrt of an operand not provably positive normal (non-negative)"),)
    assert p.tiles == () and p.regions == ()


def test_subnormal_eps_is_positive_but_not_normal() -> None:
    p = plan(rmsnorm_program(eps=1e-40), "xdna2")
    assert missing_bounds(p) == {
        "sqrt": "sqrt of an operand not provably positive normal (positive)"
    }
    assert plan(rmsnorm_program(eps=1.2e-38), "xdna2").admitted


def test_negative_eps_is_an_add_that_can_cancel() -> None:
    p = plan(rmsnorm_program(eps=-1e-6), "xdna2")
    assert missing_bounds(p) == {
        "add": "an add of operands not provably non-negative (non-negative, sign unknown) "
        "can cancel",
        "sqrt": "sqrt of an operand not provably positive normal (sign unknown)",
    }


def test_layernorm_is_refused_naming_sub_and_the_signed_sum() -> None:
    b = Builder("layernorm")
    x = b.slot("x", F32, (4, 64))
    g, beta = b.weight("g", F32, (64,)), b.weight("b", F32, (64,))
    b.output("y", ops.layernorm(b, x, g, beta))
    source = b.build()
    p = plan(source, "xdna2")
    prims = {r.eqn: r.primitive for r in p.refusals}
    assert prims[0] == "reduce_sum" and prims[3] == "sub"
    steps = missing_bounds(p)
    assert steps["reduce_sum"] == "a signed sum: its terms are not provably non-negative"
    assert steps["sub"] == "a subtraction inside a row kernel has no relative bound"
    assert "add" in steps  # + beta: operands of unknown sign
    assert p.tiles == ()
    with pytest.raises(PlanRefused, match="missing bound"):
        p.check()


def test_softmax_is_refused_naming_sub_and_exp() -> None:
    b = Builder("softmax")
    b.output("y", ops.softmax(b, b.slot("x", F32, (4, 64))))
    p = plan(b.build(), "xdna2")
    assert missing_bounds(p) == {
        "sub": "a subtraction inside a row kernel has no relative bound",
        "exp": "exp inside a row kernel has no derived bound",
    }
    assert [r.eqn for r in p.refusals] == [2, 3]


def test_a_sum_over_provably_non_negative_terms_fuses() -> None:
    """``x / (sum(max(x, 0)) + 1)``: max with 0 makes the terms non-negative."""
    b = Builder("relu-norm")
    x = b.slot("x", F32, (4, 64))
    s = b.add(b.reduce_sum(b.max(x, 0.0), -1), 1.0)
    b.output("y", b.div(x, b.broadcast_in_dim(s, (4, 64), (0,))))
    p = plan(b.build(), "xdna2")
    assert p.admitted and len(p.tiles) == 1
    # max exact, sum 2 * 64 units, add two units, div one rounding
    expected = 2 * 64 * 2.0**-23 + 2 * 2.0**-23 + 2.0**-24
    assert p.tiles[0].bound == pytest.approx(expected, rel=1e-9)


def test_a_signed_sum_with_a_broadcast_back_is_refused() -> None:
    b = Builder("mean-scale")
    x = b.slot("x", F32, (4, 64))
    s = b.reduce_sum(x, -1)
    b.output("y", b.mul(x, b.broadcast_in_dim(s, (4, 64), (0,))))
    p = plan(b.build(), "xdna2")
    assert missing_bounds(p) == {
        "reduce_sum": "a signed sum: its terms are not provably non-negative"
    }


def test_a_standalone_signed_row_sum_is_a_row_kernel() -> None:
    """Without a broadcast back it is the ordinary row kernel under the magnitude bound."""
    b = Builder("rowsum")
    b.output("y", b.reduce_sum(b.slot("x", F32, (4, 64)), -1))
    p = plan(b.build(), "xdna2")
    assert p.admitted and p.tiles[0].kind is KernelClass.ROW
    assert p.numerics == Bounded(0.0, 2 * 64 * 2.0**-23)


def test_a_row_kernel_with_two_outputs_is_a_region_limit() -> None:
    b = Builder("two-out")
    x = b.slot("x", F32, (4, 64))
    s = b.reduce_sum(b.mul(x, x), -1)
    b.output("s", s)
    b.output("y", b.div(x, b.broadcast_in_dim(s, (4, 64), (0,))))
    (r,) = plan(b.build(), "xdna2").refusals
    assert r.kind is RefusalKind.REGION_LIMIT
    assert r.facts == (("limit", "row kernel outputs"), ("needed", 2), ("available", 1))


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_a_row_kernel_in_another_dtype_is_refused(dtype: DType) -> None:
    """Regression: a row group skipped the dtype check, so an F16 RMSNorm was admitted as an
    F32 fused kernel. Every step is now refused with the dtype the row kernels admit."""
    b = Builder("rms16")
    b.output("y", ops.rmsnorm(b, b.slot("x", dtype, (4, 64))))
    p = plan(b.build(), "xdna2")
    assert not p.admitted and p.tiles == ()
    assert {r.kind for r in p.refusals} == {RefusalKind.UNSUPPORTED_DTYPE}
    assert len(p.refusals) == 7
    assert all(r.facts == (("dtype", dtype.value), ("admitted", "f32")) for r in p.refusals)


def test_an_i32_row_chain_is_refused() -> None:
    b = Builder("i32")
    x = b.slot("x", DType.I32, (4, 64))
    s = b.reduce_sum(b.mul(x, x), -1)
    b.output("y", b.div(x, b.broadcast_in_dim(s, (4, 64), (0,))))
    p = plan(b.build(), "xdna2")
    assert [r.primitive for r in p.refusals] == ["mul", "reduce_sum", "broadcast_in_dim", "div"]
    assert {r.fact("dtype") for r in p.refusals} == {"i32"}


# -- value facts -----------------------------------------------------------------------------


def test_value_facts_of_rmsnorm() -> None:
    source = rmsnorm_program()
    facts = value_facts(source)
    sq, total, mean, shifted, rms, back, y = (facts[e.out.id] for e in source.eqns)
    assert sq.non_negative and not sq.positive
    assert total.non_negative and mean.non_negative
    assert shifted.positive_normal and shifted.lower is not None
    assert shifted.lower <= float(np.float32(1e-6))
    assert rms.positive_normal and back.positive_normal
    assert y.lower is None  # x / rms: x has any sign


def test_value_facts_are_sound_on_small_rules() -> None:
    b = Builder("facts")
    x = b.slot("x", F32, (3, 5))
    e = b.exp(x)
    neg = b.neg(e)
    big = b.max(x, 2.0)
    half = b.div(big, 4.0)
    rt = b.sqrt(half)
    empty = b.reduce_max(b.exp(b.slot("z", F32, (3, 0))), -1)
    b.output("y", rt)
    b.output("n", neg)
    b.output("m", empty)
    facts = value_facts(b.build())
    assert facts[e.id].non_negative and not facts[e.id].positive
    assert facts[neg.id].lower is None
    assert facts[big.id].lower == 2.0
    half_lower, rt_lower = facts[half.id].lower, facts[rt.id].lower
    assert half_lower is not None and 0.49 < half_lower <= 0.5
    assert rt_lower is not None and 0.7 < rt_lower <= 0.5**0.5
    # regression: a max over an empty axis is -inf, so no lower bound survives it
    assert facts[empty.id].lower is None


def test_value_facts_lower_bounds_hold_on_the_oracle() -> None:
    b = Builder("check")
    x = b.slot("x", F32, (64, 64))
    outs: dict[str, Var] = {
        "sq": b.mul(x, x),
        "relu": b.max(x, 0.0),
        "shift": b.add(b.exp(x), 0.5),
        "ratio": b.div(b.add(b.mul(x, x), 3.0), 2.0),
        "root": b.sqrt(b.add(b.mul(x, x), 4.0)),
    }
    for k, v in outs.items():
        b.output(k, v)
    source = b.build()
    facts = value_facts(source)
    rng = np.random.default_rng(3)
    got = evaluate(source, {"x": rng.standard_normal((64, 64)).astype(np.float32) * 10})
    for k, v in outs.items():
        lower = facts[v.id].lower
        assert lower is not None, k
        assert float(got[k].min()) >= lower, k


def test_a_broadcast_of_a_value_reduced_elsewhere_is_no_row_kernel() -> None:
    # a per-row input broadcast across the row: no reduction in the chain, so no row kernel
    # (its C had no way to read the per-row value); the broadcast is a tile of its own
    from poot_ir import Builder, DType
    from poot_planner import KernelClass, plan

    b = Builder("per_row")
    m = b.slot("m", DType.F32, (8,))
    x = b.slot("x", DType.F32, (8, 64))
    b.output("y", b.mul(x, b.broadcast_in_dim(b.div(m, 64.0), (8, 64), (0,))))
    p = plan(b.build(), "xdna2").check()
    assert [t.kind for t in p.tiles] == [
        KernelClass.POINTWISE,
        KernelClass.BROADCAST,
        KernelClass.POINTWISE,
    ]
