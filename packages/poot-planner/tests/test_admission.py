"""Admission by the capability tables: what each target admits, and the typed refusal (kind and
facts) of what it does not. ``plan`` never raises for a program a target cannot run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from poot_ir import Builder, DType, Exact, PlanRefused, Prim, Program, Var, ops
from poot_planner import TARGETS, AxisRule, KernelClass, Plan, Refusal, RefusalKind, plan
from poot_planner.xdna2.probes import chain_factor

F32, F16, BF16, I32, BOOL = DType.F32, DType.F16, DType.BF16, DType.I32, DType.BOOL
XDNA2 = TARGETS["xdna2"]
INTEL = TARGETS["intel-npu4"]
NO_CONTRACT = dataclasses.replace(INTEL, narrowing=None)
#: xdna2 with its row reductions on the last axis only (as before issue 30): the axis rule's own
#: refusal, which no shipped target makes any more
LAST_AXIS = dataclasses.replace(
    XDNA2,
    capabilities=tuple(
        dataclasses.replace(c, axes=AxisRule.LAST) if c.kernel is KernelClass.ROW else c
        for c in XDNA2.capabilities
    ),
)

Body = Callable[[Builder], Var]


def program(body: Body, name: str = "p") -> Program:
    b = Builder(name)
    b.output("y", body(b))
    return b.build()


def only_refusal(p: Plan) -> Refusal:
    assert not p.admitted
    assert len(p.refusals) == 1, [str(r) for r in p.refusals]
    return p.refusals[0]


def x(b: Builder, dtype: DType = F32, shape: tuple[int, ...] = (4, 64), name: str = "x") -> Var:
    return b.slot(name, dtype, shape)


# -- xdna2 -----------------------------------------------------------------------------------

XDNA2_ADMITTED: dict[str, tuple[Body, KernelClass]] = {
    "add": (lambda b: b.add(x(b), x(b, name="z")), KernelClass.POINTWISE),
    "sub": (lambda b: b.sub(x(b), x(b, name="z")), KernelClass.POINTWISE),
    "mul": (lambda b: b.mul(x(b), 0.5), KernelClass.POINTWISE),
    "div": (lambda b: b.div(x(b), x(b, name="z")), KernelClass.POINTWISE),
    "neg": (lambda b: b.neg(x(b)), KernelClass.POINTWISE),
    "recip": (lambda b: b.recip(x(b)), KernelClass.POINTWISE),
    "ge": (lambda b: b.ge(x(b), 0.0), KernelClass.POINTWISE),
    "exp": (lambda b: b.exp(x(b)), KernelClass.POINTWISE),
    "log": (lambda b: b.log(x(b)), KernelClass.POINTWISE),
    "tanh": (lambda b: b.tanh(x(b)), KernelClass.POINTWISE),
    "erf": (lambda b: b.erf(x(b)), KernelClass.POINTWISE),
    "sqrt": (lambda b: b.sqrt(x(b)), KernelClass.POINTWISE),
    "max": (lambda b: b.max(x(b), x(b, name="z")), KernelClass.POINTWISE),
    "reduce_sum": (lambda b: b.reduce_sum(x(b), -1), KernelClass.ROW),
    "reduce_max": (lambda b: b.reduce_max(x(b, shape=(2, 3, 64)), 2), KernelClass.ROW),
    "gather": (
        lambda b: b.gather(x(b), x(b, I32, (5,), "i"), axis=0),
        KernelClass.GATHER,
    ),
}


@pytest.mark.parametrize("name", sorted(XDNA2_ADMITTED))
def test_xdna2_admits_each_capability(name: str) -> None:
    body, kernel = XDNA2_ADMITTED[name]
    p = plan(program(body), "xdna2")
    assert p.admitted, [str(r) for r in p.refusals]
    assert p.check() is p
    (a,) = p.admissions
    assert a.kernel is kernel and a.tile == 0
    prim = Prim(name)
    cap = XDNA2.capability(prim, F32)
    assert cap is not None and a.contract == cap.contract
    assert len(p.tiles) == 1 and len(p.regions) == 1 and p.contexts == 1


@pytest.mark.parametrize(("table", "axis"), [(F32, 0), (F32, 1), (I32, 0), (I32, 1)])
def test_xdna2_gather_any_axis_f32_or_i32(table: DType, axis: int) -> None:
    p = plan(program(lambda b: b.gather(x(b, table, (6, 8)), x(b, I32, (3, 2), "i"), axis)), XDNA2)
    assert p.admitted and p.admissions[0].kernel is KernelClass.GATHER


@pytest.mark.parametrize(
    ("body", "prim"),
    [
        # abs and min are legalized on xdna2 (tests/test_legalize.py)
        (lambda b: b.gt(x(b), 0.0), "gt"),
        (lambda b: b.eq(x(b), 0.0), "eq"),
        (lambda b: b.select(x(b, BOOL), x(b, name="z"), 0.0), "select"),
        # reshape, transpose, slice, concat and iota are host relayouts
        # (test_host_relayouts.py); matmul and broadcast_in_dim run on tiles
        # (test_xdna2_matmul.py)
        (lambda b: b.convert(x(b), F16), "convert"),
        (
            lambda b: b.dynamic_update_slice(x(b), x(b, shape=(1, 64), name="u"), [0, 0]),
            "dynamic_update_slice",
        ),
    ],
)
def test_xdna2_refuses_other_primitives(body: Body, prim: str) -> None:
    p = plan(program(body), "xdna2")
    r = only_refusal(p)
    assert r.kind is RefusalKind.UNSUPPORTED_PRIMITIVE
    assert (r.eqn, r.primitive, r.facts) == (0, prim, (("target", "xdna2"),))
    assert str(r) == f"equation 0 ({prim}): unsupported primitive: target=xdna2"


@pytest.mark.parametrize(
    ("body", "prim", "dtype"),
    [
        (lambda b: b.add(x(b, F16), x(b, F16, name="z")), "add", "f16"),
        (lambda b: b.mul(x(b, I32), 3), "mul", "i32"),
        (lambda b: b.exp(x(b, BF16)), "exp", "bf16"),
        (lambda b: b.reduce_sum(x(b, I32), -1), "reduce_sum", "i32"),
        (lambda b: b.ge(x(b, F16), 0.0), "ge", "f16"),
    ],
)
def test_xdna2_refuses_other_dtypes(body: Body, prim: str, dtype: str) -> None:
    r = only_refusal(plan(program(body), "xdna2"))
    assert r.kind is RefusalKind.UNSUPPORTED_DTYPE
    assert (r.eqn, r.primitive) == (0, prim)
    assert r.facts == (("dtype", dtype), ("admitted", "f32"))


def test_xdna2_gather_of_a_bool_table_names_the_admitted_dtypes() -> None:
    r = only_refusal(plan(program(lambda b: b.gather(x(b, BOOL), x(b, I32, (3,), "i"))), "xdna2"))
    assert r.kind is RefusalKind.UNSUPPORTED_DTYPE
    assert r.facts == (("dtype", "bool"), ("admitted", "f32 i32"))


@pytest.mark.parametrize(
    ("shape", "axes", "text"),
    [((4, 64), 0, "(0,)"), ((4, 64), (0, 1), "(0, 1)"), ((2, 3, 64), 1, "(1,)")],
)
def test_a_last_axis_rule_refuses_a_reduction_over_another_axis(
    shape: tuple[int, ...], axes: int | tuple[int, ...], text: str
) -> None:
    for prim in ("reduce_sum", "reduce_max"):

        def body(b: Builder, prim: str = prim) -> Var:
            reduce: Callable[[Var, int | tuple[int, ...]], Var] = getattr(b, prim)
            return reduce(x(b, shape=shape), axes)

        # xdna2 reduces over any axes on a row tile (tests/conformance/test_xdna_matmul.py)
        (tile,) = plan(program(body), XDNA2).check().tiles
        assert tile.kind is KernelClass.ROW
        p = plan(program(body), LAST_AXIS)
        r = only_refusal(p)
        assert r.kind is RefusalKind.UNSUPPORTED_AXIS
        assert r.facts == (("axes", text), ("admitted", f"last axis ({len(shape) - 1})"))


def test_refusals_are_collected_not_raised_and_check_raises_them_all() -> None:
    def body(b: Builder) -> Var:
        v = b.dynamic_update_slice(x(b), x(b, shape=(1, 64), name="u"), [0, 0])  # refused
        v = b.exp(v)  # admitted
        v = b.reduce_sum(v, 0)  # refused: axis
        return b.convert(v, F16)  # refused: primitive

    p = plan(program(body, "mixed"), LAST_AXIS)
    assert not p.admitted
    assert [(r.eqn, r.kind) for r in p.refusals] == [
        (0, RefusalKind.UNSUPPORTED_PRIMITIVE),
        (2, RefusalKind.UNSUPPORTED_AXIS),
        (3, RefusalKind.UNSUPPORTED_PRIMITIVE),
    ]
    assert [a.eqn for a in p.admissions] == [1]
    with pytest.raises(PlanRefused) as err:
        p.check()
    assert err.value.refusals == p.refusals
    message = str(err.value)
    assert "xdna2 refuses 3 equation(s) of 'mixed'" in message
    for r in p.refusals:
        assert str(r) in message
        assert "\n" not in str(r)


# -- intel-npu4 ------------------------------------------------------------------------------

INTEL_ADMITTED: dict[str, Body] = {
    "add": lambda b: b.add(x(b, F16), 1.0),
    "sub": lambda b: b.sub(x(b, F16), x(b, F16, name="z")),
    "mul": lambda b: b.mul(x(b, F16), x(b, F16, name="z")),
    "max": lambda b: b.max(x(b, F16), 0.0),
    "ge": lambda b: b.ge(x(b, F16), 0.0),
    "div": lambda b: b.div(x(b, F16), 3.0),
    "neg": lambda b: b.neg(x(b, F16)),
    "sqrt": lambda b: b.sqrt(x(b, F16)),
    "exp": lambda b: b.exp(x(b, F16)),
    "row sum": lambda b: b.reduce_sum(x(b, F16), 1),
    "column sum": lambda b: b.reduce_sum(x(b, F16), 0),
    "row max": lambda b: b.reduce_max(x(b, F16), 1),
    "column max": lambda b: b.reduce_max(x(b, F16), 0),
    "matmul": lambda b: b.matmul(x(b, F16), x(b, F16, (64, 8), "z")),
    "gather": lambda b: b.gather(x(b, F16), x(b, I32, (3,), "i")),
    "gather by iota": lambda b: b.gather(x(b, F16), b.iota((3,), I32, 0)),
    "transpose": lambda b: b.transpose(x(b, F16), (1, 0)),
    "reshape": lambda b: b.reshape(x(b, F16), (8, 32)),
    "slice": lambda b: b.slice(x(b, F16), (1, 0), (3, 64)),
    "concat": lambda b: b.concat([x(b, F16), x(b, F16, name="z")], 1),
    "broadcast": lambda b: b.broadcast_in_dim(x(b, F16, (64,)), (4, 64), (1,)),
    "dus at a literal": lambda b: b.dynamic_update_slice(
        x(b, F16), x(b, F16, (1, 64), "u"), [2, 0]
    ),
    "dus at a runtime index": lambda b: b.dynamic_update_slice(
        x(b, F16), x(b, F16, (1, 64), "u"), [x(b, I32, (), "at"), 0]
    ),
    "rank four": lambda b: b.add(x(b, F16, (2, 3, 4, 5)), x(b, F16, (2, 3, 4, 5), "z")),
    "f16 to f32": lambda b: b.convert(x(b, F16), F32),
    "f32 to f16": lambda b: b.convert(x(b, F32), F16),
    "f16 iota": lambda b: b.iota((4, 8), F16, 0),
}


@pytest.mark.parametrize("name", sorted(INTEL_ADMITTED))
@pytest.mark.parametrize("target", [INTEL, NO_CONTRACT], ids=["contract", "no-contract"])
def test_intel_admits_the_verified_list(name: str, target: object) -> None:
    p = plan(program(INTEL_ADMITTED[name]), target)  # type: ignore[arg-type]
    assert p.admitted, [str(r) for r in p.refusals]
    assert all(a.kernel is KernelClass.GRAPH_OP for a in p.admissions)
    # an F32 argument or result is narrowed where there is a contract; nothing else is
    has_f32 = any(a.var.dtype is F32 for a in p.source.args) or any(
        v.dtype is F32 for _, v in p.source.results()
    )
    if has_f32 and target is INTEL:
        assert p.narrowing is not None
    else:
        assert p.narrowing is None and p.program == p.source  # nothing to narrow
    assert p.regions == () and p.tiles == ()


# recip, tanh, erf, abs and log are legalized on intel-npu4 (tests/test_legalize.py,
# test_legal_log.py): the table itself refuses them
@pytest.mark.parametrize("prim", ["log", "tanh", "erf", "recip"])
def test_intel_refuses_other_unary_ops(prim: str) -> None:
    body = program(lambda b: getattr(b, prim)(x(b, F16)))
    r = only_refusal(plan(body, INTEL, legalization=False))
    assert r.kind is RefusalKind.UNSUPPORTED_PRIMITIVE
    assert (r.primitive, r.facts) == (prim, (("target", "intel-npu4"),))


@pytest.mark.parametrize(
    ("src", "dst"), [(F32, BF16), (F16, BF16), (BF16, F32), (F32, I32), (F16, I32), (F32, BOOL)]
)
def test_intel_refuses_converts_through_bf16_or_to_an_integer(src: DType, dst: DType) -> None:
    r = only_refusal(plan(program(lambda b: b.convert(x(b, src), dst)), INTEL))
    assert r.kind is RefusalKind.UNSUPPORTED_DTYPE
    assert r.primitive == "convert"
    if src is BF16:
        assert r.facts == (("dtype", "bf16"), ("admitted", "f16 f32"))
    else:
        assert r.facts == (("from", src.value), ("to", dst.value))


@pytest.mark.parametrize(("src", "dst"), [(I32, F32), (I32, F16), (BOOL, F16), (BOOL, BF16)])
@pytest.mark.parametrize("target", [INTEL, NO_CONTRACT], ids=["contract", "no-contract"])
def test_intel_refuses_integer_to_float(src: DType, dst: DType, target: object) -> None:
    r = only_refusal(plan(program(lambda b: b.convert(x(b, src), dst)), target))  # type: ignore[arg-type]
    assert r.kind is RefusalKind.INTEGER_TO_FLOAT
    assert (r.eqn, r.primitive) == (0, "convert")
    assert r.facts == (("from", src.value), ("to", dst.value), ("exact_up_to", 2048))
    assert str(r) == (
        f"equation 0 (convert): integer to float: from={src.value}, to={dst.value}, "
        "exact_up_to=2048"
    )


@pytest.mark.parametrize("target", [INTEL, NO_CONTRACT], ids=["contract", "no-contract"])
def test_bf16_arithmetic_is_refused_missing_contract(target: object) -> None:
    r = only_refusal(plan(program(lambda b: b.add(x(b, BF16), 1.0)), target))  # type: ignore[arg-type]
    assert r.kind is RefusalKind.MISSING_CONTRACT
    assert r.facts == (("dtype", "bf16"), ("missing", "no contract covers bf16"))


@pytest.mark.parametrize(
    ("body", "prim"),
    [
        (lambda b: b.add(x(b), 1.0), "add"),
        (lambda b: b.exp(x(b)), "exp"),
        (lambda b: b.reduce_sum(x(b), 0), "reduce_sum"),
        (lambda b: b.ge(x(b), 0.0), "ge"),
        (lambda b: b.matmul(x(b), x(b, F32, (64, 2), "z")), "matmul"),
    ],
)
def test_f32_arithmetic_without_a_narrowing_contract_is_refused(body: Body, prim: str) -> None:
    r = only_refusal(plan(program(body), NO_CONTRACT))
    assert r.kind is RefusalKind.MISSING_CONTRACT
    assert (r.eqn, r.primitive) == (0, prim)
    assert r.facts == (("dtype", "f32"), ("missing", "no narrowing contract recorded"))
    # the same program is admitted (narrowed) where the contract is recorded
    assert plan(program(body), INTEL).admitted


def test_f32_data_movement_needs_no_contract_and_is_narrowed_under_one() -> None:
    def body(b: Builder) -> Var:
        t = b.transpose(x(b), (1, 0))
        return b.gather(t, x(b, I32, (2,), "i"))

    p = plan(program(body), NO_CONTRACT)
    assert p.admitted and p.narrowing is None and p.program == p.source
    # the NPU compiler carries F32 data as FP16: with the contract, it is narrowed
    p = plan(program(body), INTEL)
    assert p.admitted and p.narrowing is not None and p.program != p.source


# -- cpu -------------------------------------------------------------------------------------


def test_cpu_admits_everything_exactly() -> None:
    def body(b: Builder) -> Var:
        v = x(b)
        g = b.weight("g", F32, (64,))
        v = ops.layernorm(b, b.abs(v), g, g)
        v = ops.softmax(b, b.matmul(v, b.transpose(v, (1, 0))), axis=0)
        return b.convert(b.min(v, 1.0), BF16)

    p = plan(program(body), "cpu")
    assert p.admitted and p.refusals == ()
    assert {a.kernel for a in p.admissions} == {KernelClass.ORACLE}
    assert len(p.admissions) == len(p.source.eqns)
    assert p.numerics == Exact()
    assert p.program == p.source and p.regions == ()


# -- every kind, with its facts --------------------------------------------------------------


def test_every_refusal_kind_carries_its_facts() -> None:
    """One program per kind (the concept tests go deeper); each refusal renders as one line
    that names the equation, the primitive, the kind and every fact."""
    seen: dict[RefusalKind, Refusal] = {}

    def refuse(target: object, body: Body) -> None:
        r = plan(program(body), target).refusals[0]  # type: ignore[arg-type]
        seen[r.kind] = r

    refuse(XDNA2, lambda b: b.gt(x(b), 0.0))
    refuse(XDNA2, lambda b: b.add(x(b, F16), 1.0))
    refuse(LAST_AXIS, lambda b: b.reduce_sum(x(b), 0))
    refuse(XDNA2, lambda b: ops.rmsnorm(b, x(b), eps=0.0))
    refuse(NO_CONTRACT, lambda b: b.add(x(b), 1.0))
    refuse(INTEL, lambda b: b.mul(x(b), 1e6))
    refuse(INTEL, lambda b: b.convert(x(b, I32), F16))
    refuse(XDNA2, lambda b: b.reduce_sum(x(b, shape=(1, 8064)), 1))

    def many_regions(b: Builder) -> Var:
        # 17 regions of 32 products, each by a factor of its own: 17 artifacts
        v = x(b)
        for j in range(17 * 32):
            v = b.mul(v, chain_factor(j))
        return v

    refuse(XDNA2, many_regions)
    # a weight known when planning, outside exp's domain on xdna2 ([-inf, 88])
    b = Builder("w")
    b.output("y", b.exp(b.weight("w", F32, (4, 64))))
    w = np.full((4, 64), 100.0, np.float32)
    r = plan(b.build(), XDNA2, constants={"w": w}).refusals[0]
    seen[r.kind] = r
    assert set(seen) == set(RefusalKind)
    expected = {
        RefusalKind.UNSUPPORTED_PRIMITIVE: "equation 0 (gt): unsupported primitive: target=xdna2",
        RefusalKind.UNSUPPORTED_DTYPE: "equation 0 (add): unsupported dtype: dtype=f16, "
        "admitted=f32",
        RefusalKind.UNSUPPORTED_AXIS: "equation 0 (reduce_sum): unsupported axis: axes=(0,), "
        "admitted=last axis (1)",
        RefusalKind.MISSING_BOUND: "equation 4 (sqrt): missing bound: step=sqrt of an operand "
        "not provably positive normal (non-negative)",
        RefusalKind.MISSING_CONTRACT: "equation 0 (add): missing contract: dtype=f32, "
        "missing=no narrowing contract recorded",
        RefusalKind.NARROWING_RANGE: "equation 0 (mul): narrowing range: literal=1000000.0, "
        "limit=65504.0, use=multiplicative or other",
        RefusalKind.INTEGER_TO_FLOAT: "equation 0 (convert): integer to float: from=i32, "
        "to=f16, exact_up_to=2048",
        RefusalKind.REGION_LIMIT: "equation 0 (reduce_sum): region limit: limit=tile_bytes, "
        "needed=64784, available=64512",
        RefusalKind.CONTEXT_LIMIT: "program: context limit: limit=contexts, needed=17, "
        "available=16, regions=17",
        RefusalKind.DOMAIN: "equation 0 (exp): domain: constant=w, element=(0, 0), "
        "value=100.0, domain=[-inf, 88]",
    }
    for kind, line in expected.items():
        assert str(seen[kind]) == line
        assert seen[kind].fact("nonexistent") is None
    # the row and its sum, double buffered, the flag path's word in and word out, and the
    # link's data after the buffers (the core's ``poot_guard_word`` and a reserve: 256)
    assert seen[RefusalKind.REGION_LIMIT].fact("needed") == 2 * 8064 * 4 + 2 * 4 + 8 + 256
    assert seen[RefusalKind.CONTEXT_LIMIT].eqn == -1
