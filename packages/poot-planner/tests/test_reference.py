"""The joint program of a legalized plan (``poot_planner.reference``): one evaluation gives the
source program's results bit for bit as ``evaluate(plan.source, ...)`` does, and every value of
the legalized program bit for bit as ``legalized_values`` does, on the legalized plans of the
repo's tests (intel-npu4's GELU, erf, tanh, log, softplus, recip, min, abs; xdna2's min, abs,
sigmoid) at their domains' edges: NaN (payloads too), infinities, signed zeros, subnormals,
FP16's ends, the clamps and the exp domain's ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from poot_ir import Builder, DType, Program, evaluate, ops
from poot_ir.ops import sigmoid
from poot_planner import TARGETS, Plan, plan
from poot_planner.error_bounds import legalized_values
from poot_planner.reference import joint_program, joint_values

F32 = DType.F32
N = 96

#: F32 bit patterns at every rule's edges, NaNs with payloads and signs among them
_EDGE_BITS = [0x7FC0_0000, 0xFFC0_0000, 0x7FC0_1234, 0x7F80_0001, 0x7F80_0000, 0xFF80_0000,
              0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x007F_FFFF, 0x0080_0000,
              0x7F7F_FFFF, 0xFF7F_FFFF]  # fmt: skip
_EDGE_VALUES = [2**-24, -(2**-24), 2**-14, 0.5, 1.0, -1.0, 3.99, 4.0, 4.004, -4.0, 8.99, 9.0,
                9.01, -9.0, 65504.0, -65504.0, 65520.0, 88.6875, 88.7, 87.0, -88.0, -88.1,
                -87.9, 1e-38, -1e-45, 100.0]  # fmt: skip


def _inputs(seed: int, n: int = N) -> np.ndarray:
    edges = np.concatenate(
        [np.array(_EDGE_BITS, np.uint32).view(np.float32), np.array(_EDGE_VALUES, np.float32)]
    )
    rng = np.random.default_rng(seed)
    rest = rng.normal(0, 8, n - edges.size).astype(np.float32)
    return np.concatenate([edges, rest])


def _unary(build: Callable[[Builder, object], object]) -> Callable[[], Program]:
    def make() -> Program:
        b = Builder("unary")
        b.output("y", build(b, b.slot("x", F32, (N,))))  # type: ignore[arg-type]
        return b.build()

    return make


def _binary(prim: str) -> Program:
    b = Builder(prim)
    x, z = b.slot("x", F32, (N,)), b.slot("z", F32, (N,))
    b.output("y", getattr(b, prim)(x, z))
    b.output("x_again", x)  # a result that is an argument: returned as a copy
    return b.build()


def _chain() -> Program:
    """abs and min (rewritten on xdna2) among approximate steps: a Bounded plan."""
    b = Builder("chain")
    x, z = b.slot("x", F32, (N,)), b.slot("z", F32, (N,))
    a = b.abs(x)
    t = b.tanh(b.min(a, z))
    b.output("y", b.exp(b.mul(t, a)))
    b.output("t", t)
    return b.build()


PROGRAMS: dict[str, tuple[Callable[[], Program], str]] = {
    "gelu": (_unary(lambda b, x: ops.gelu(b, x)), "intel-npu4"),  # type: ignore[arg-type]
    "erf": (_unary(lambda b, x: b.erf(x)), "intel-npu4"),  # type: ignore[arg-type]
    "tanh": (_unary(lambda b, x: b.tanh(x)), "intel-npu4"),  # type: ignore[arg-type]
    "log": (_unary(lambda b, x: b.log(x)), "intel-npu4"),  # type: ignore[arg-type]
    "softplus": (
        _unary(lambda b, x: b.log(b.add(b.exp(x), 1.0))),  # type: ignore[arg-type]
        "intel-npu4",
    ),
    "recip": (_unary(lambda b, x: b.recip(x)), "intel-npu4"),  # type: ignore[arg-type]
    "abs-intel": (_unary(lambda b, x: b.abs(x)), "intel-npu4"),  # type: ignore[arg-type]
    "min-intel": (lambda: _binary("min"), "intel-npu4"),
    "abs": (_unary(lambda b, x: b.abs(x)), "xdna2"),  # type: ignore[arg-type]
    "min": (lambda: _binary("min"), "xdna2"),
    "sigmoid": (_unary(lambda b, x: sigmoid(b, x)), "xdna2"),  # type: ignore[arg-type]
    "chain": (_chain, "xdna2"),
}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        uint = np.dtype(f"u{a.dtype.itemsize}")
        return np.array_equal(a.view(uint), b.view(uint))
    return np.array_equal(a, b)


def _legalized(name: str) -> Plan:
    make, target = PROGRAMS[name]
    p = plan(make(), TARGETS[target])
    assert p.legal is not None and p.rewrites, "the case: a plan with rewrites"
    return p


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("seed", [0, 1])
def test_the_joint_program_gives_the_source_and_legalized_values_bit_for_bit(
    name: str, seed: int
) -> None:
    p = _legalized(name)
    x = _inputs(seed)
    feed = {"x": x, "z": np.roll(x[::-1], seed + 1)}
    feed = {a.name: feed[a.name] for a in p.source.args}
    values, want = joint_values(joint_program(p), feed)
    reference = evaluate(p.source, feed)
    assert list(want) == list(reference) == list(p.source.result_names)
    for n in reference:
        assert _same_bits(want[n], reference[n]), n
    legal = legalized_values(p, feed)
    assert set(values) == set(legal)
    assert all(_same_bits(np.asarray(values[i]), np.asarray(legal[i])) for i in legal)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_joint_program_shares_every_equation_the_rewrites_left(name: str) -> None:
    """Only what the rewrites replaced is evaluated besides: every source equation before the
    first rewritten one merges with its legalized copy, so the joint program is the legalized
    program's equations and at most one more per source equation from the first rewritten on."""
    p = _legalized(name)
    joint = joint_program(p).program
    assert joint.eqns[: len(p.legalized.eqns)] == p.legalized.eqns
    extra = len(joint.eqns) - len(p.legalized.eqns)
    downstream = len(p.source.eqns) - min(rw.eqn for rw in p.rewrites)
    assert 1 <= extra <= downstream


def test_a_plan_without_rewrites_adds_nothing() -> None:
    p = plan(_unary(lambda b, x: b.tanh(x))(), TARGETS["xdna2"])  # type: ignore[arg-type]
    assert p.legal is None
    joint = joint_program(p)
    assert joint.program.eqns == p.source.eqns
    assert [o.name for o in joint.program.outputs] == [f"v{e.out.id}" for e in p.source.eqns]


def test_literals_merge_by_their_bits_not_their_values() -> None:
    """``x + -0.0`` and ``x + 0.0`` are equal as numbers but differ at ``x = -0.0``: a legalized
    program holding the one never stands in for a source holding the other."""
    src = Builder("signed")
    src.output("y", src.add(src.slot("x", F32, (4,)), -0.0))
    other = Builder("signed")
    other.output("y", other.add(other.slot("x", F32, (4,)), 0.0))
    source, legal = src.build(), other.build()
    p = dataclasses.replace(plan(source, TARGETS["cpu"]), legal=legal)
    x = np.array([-0.0, 0.0, 1.0, np.nan], np.float32)
    values, want = joint_values(joint_program(p), {"x": x})
    assert _same_bits(want["y"], evaluate(source, {"x": x})["y"])
    assert np.signbit(want["y"][0]) and not np.signbit(values[legal.eqns[0].out.id][0])
