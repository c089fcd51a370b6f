"""Domain guards end to end on the XDNA2 stand-in: a value outside a capability's domain is
refused with a typed error, never returned. Host-visible values (inputs, weights, states) are
checked before the run (``DomainError``: nothing runs); values computed in a region are
counted by its kernels into the region's flag word and the run is refused (``DomainFlagged``:
no state changes). The planner skips a guard a literal or its range analysis proves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_engine.domain import HostGuard
from poot_ir import (
    Builder,
    DomainError,
    DomainFlagged,
    DType,
    IndexOutOfRange,
    Program,
    evaluate,
)
from poot_ir.numerics import FiniteInputs, NotNaN
from poot_ir.ops import rmsnorm
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import KernelClass, plan
from poot_planner.guards import RESULT, Site

F32 = DType.F32


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture
def engine(tmp_path: Path, kernels: Path) -> Iterator[Engine]:
    with Engine(XdnaHostDevice(kernels), cache_dir=tmp_path) as e:
        yield e


def _f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def _issue_program() -> Program:
    b = Builder("issue12")
    x = b.slot("x", F32, (4,))
    b.output("e", b.exp(x))
    b.output("m", b.max(b.sqrt(x), 2.0))
    return b.build()


def test_the_issue_cases_are_refused_before_anything_runs(engine: Engine) -> None:
    p = _issue_program()
    entry = engine.add_entry(p)
    device = engine.device
    assert isinstance(device, XdnaHostDevice)
    ok = _f32(1, 2, 3, 4)
    got = engine.step(entry, {"x": ok})
    assert np.array_equal(got["m"], evaluate(p, {"x": ok})["m"])
    runs = device.runs
    with pytest.raises(DomainError) as err:  # exp(100): the oracle says inf, 1.65e38 came back
        engine.step(entry, {"x": _f32(1, 100, 3, 4)})
    e = err.value
    assert (e.argument, e.element, e.value, e.eqn, e.primitive) == ("x", (1,), 100.0, 0, "exp")
    assert "[-inf, 88]" in e.domain
    with pytest.raises(DomainError) as err:  # max(sqrt(-1), 2): the oracle says NaN, 2 came back
        engine.step(entry, {"x": _f32(1, 2, -1, 4)})
    assert (err.value.eqn, err.value.primitive, err.value.element) == (1, "sqrt", (2,))
    assert device.runs == runs  # nothing ran


def _computed_program() -> Program:
    """exp and sqrt of computed values, and a running state: the guards are the kernels'."""
    b = Builder("computed")
    x = b.slot("x", F32, (4,))
    s = b.state("s", F32, (4,))
    b.output("e", b.exp(b.add(x, 50.0)))
    b.output("r", b.max(b.sqrt(b.sub(x, 10.0)), 2.0))
    b.update(s, b.add(s, x))
    return b.build()


def test_values_computed_in_a_region_are_flagged_and_refused(engine: Engine) -> None:
    p = _computed_program()
    placed = {(g.eqn, g.operand): g.site for g in plan(p, "xdna2").guards}
    assert placed[(1, 0)] is Site.DEVICE  # exp of x + 50
    assert placed[(3, 0)] is Site.DEVICE  # sqrt of x - 10
    assert placed[(4, 0)] is Site.PROVEN  # max of a guarded sqrt: never NaN
    assert placed[(4, 1)] is Site.PROVEN  # the literal 2
    assert placed[(0, 0)] is Site.HOST and placed[(0, RESULT)] is Site.DEVICE
    entry = engine.add_entry(p)
    x = _f32(11, 12, 13, 14)
    got = engine.step(entry, {"x": x})
    want = evaluate(p, {"x": x, "s": np.zeros(4, np.float32)})
    assert np.array_equal(got["r"], want["r"]) and np.array_equal(got["s"], want["s"])
    for bad in (_f32(11, 40, 13, 14), _f32(11, 12, 5, 14)):  # exp(90); sqrt(-5)
        with pytest.raises(DomainFlagged) as err:
            engine.step(entry, {"x": bad})
        assert err.value.count == 1 and err.value.region == 0
    # no state changed: the next step starts from the state of the first
    got = engine.step(entry, {"x": x})
    assert np.array_equal(got["s"], 2 * x)


@pytest.mark.parametrize(
    ("k", "ok", "bad"),
    [(1e30, 3.0, 1e9), (1e-30, 3.0, 1e-10)],  # an overflow to inf; a subnormal product
    ids=["overflow", "underflow"],
)
def test_an_operation_whose_result_leaves_the_domain_is_flagged(
    engine: Engine, k: float, ok: float, bad: float
) -> None:
    b = Builder("mul")
    x = b.slot("x", F32, (3,))
    b.output("y", b.mul(x, k))
    p = b.build()
    entry = engine.add_entry(p)
    got = engine.step(entry, {"x": _f32(1, ok, 3)})["y"]
    assert np.array_equal(got, evaluate(p, {"x": _f32(1, ok, 3)})["y"])
    with pytest.raises(DomainFlagged):
        engine.step(entry, {"x": _f32(1, bad, 3)})


def test_weights_and_states_are_checked_on_the_host(engine: Engine) -> None:
    b = Builder("ws")
    w = b.weight("w", F32, (2,))
    s = b.state("s", F32, (2,))
    x = b.slot("x", F32, (2,))
    b.output("y", b.log(w))
    b.output("z", b.exp(s))
    b.update(s, b.add(s, x))
    p = b.build()
    with pytest.raises(DomainError) as err:
        engine.add_entry(p, engine.load_weights({"w": _f32(1, -2)}))
    assert (err.value.argument, err.value.element, err.value.primitive) == ("w", (1,), "log")
    weights = engine.load_weights({"w": _f32(1, 2)})
    with pytest.raises(DomainError):
        engine.add_entry(p, weights, initial_state={"s": _f32(0, 89)})
    entry = engine.add_entry(p, weights, initial_state={"s": _f32(0, 80)})
    engine.step(entry, {"x": _f32(1, 5)})  # s was [0, 80]: fine; now [1, 85]
    engine.step(entry, {"x": _f32(1, 5)})  # s was [1, 85]: fine; now [2, 90]
    with pytest.raises(DomainError) as err:  # s = 90 reaches exp: refused before the run
        engine.step(entry, {"x": _f32(0, 0)})
    assert (err.value.argument, err.value.element, err.value.value) == ("s", (1,), 90.0)
    engine.reset_state(entry)
    assert engine.step(entry, {"x": _f32(0, 0)})["s"].tolist() == [0.0, 80.0]


def test_a_gather_index_outside_its_axis_is_refused(engine: Engine) -> None:
    b = Builder("g")
    t = b.slot("t", F32, (5, 3))
    i = b.slot("i", DType.I32, (2,))
    b.output("r", b.gather(t, i, 0))
    p = b.build()
    entry = engine.add_entry(p)
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    got = engine.step(entry, {"t": table, "i": np.array([-5, 4], np.int32)})
    assert np.array_equal(got["r"], table[[0, 4]])
    with pytest.raises(IndexOutOfRange) as err:  # the oracle's own error, before the run
        engine.step(entry, {"t": table, "i": np.array([1, 5], np.int32)})
    assert err.value.eqn == 0


def test_host_guards_on_f16_inputs_find_infinity_and_nan() -> None:
    x = np.array([1.0, -65504.0, 0.0, 3.0], np.float16)
    HostGuard("x", 0, "exp", FiniteInputs()).check(x)
    for bad, domain in ((np.inf, FiniteInputs()), (-np.inf, FiniteInputs()), (np.nan, NotNaN())):
        y = x.copy()
        y[2] = bad
        with pytest.raises(DomainError) as err:
            HostGuard("x", 0, "exp", domain).check(y)
        assert err.value.element == (2,)
    y = x.copy()
    y[1] = np.inf
    HostGuard("x", 0, "max", NotNaN()).check(y)  # an infinity is not a NaN


def test_a_fused_norm_flags_a_square_that_overflows(engine: Engine) -> None:
    b = Builder("norm")
    x = b.slot("x", F32, (2, 16))
    b.output("y", rmsnorm(b, x))
    p = b.build()
    assert any(t.kind is KernelClass.FUSED_NORM for t in plan(p, "xdna2").tiles)
    entry = engine.add_entry(p)
    ok = np.linspace(-3, 3, 32, dtype=np.float32).reshape(2, 16)
    got = engine.step(entry, {"x": ok})["y"]
    want = evaluate(p, {"x": ok})["y"]
    assert np.allclose(got, want, rtol=1e-5, atol=0)
    big = ok.copy()
    big[1, 3] = 1e20  # finite, so the host lets it through; its square is not
    with pytest.raises(DomainFlagged):
        engine.step(entry, {"x": big})


def test_an_unread_equation_is_not_guarded(engine: Engine) -> None:
    # neg(x) is read by nothing (as a legalization rule leaves the steps it replaced): its
    # domain (finite operands) must not refuse a -inf that only it would see
    b = Builder("dead")
    x = b.slot("x", F32, (4,))
    b.neg(x)
    b.output("y", b.max(x, 0.0))
    p = plan(b.build(), "xdna2")
    assert all(g.primitive.value != "neg" for g in p.guards)
    got = engine.step(engine.add_entry(p), {"x": _f32(-np.inf, 1, -2, 3)})
    assert got["y"].tolist() == [0.0, 1.0, 0.0, 3.0]


def test_an_underflowed_product_is_outside_its_domain(engine: Engine) -> None:
    # 1e-30 * 1e-30 rounds to 0 in F32 but is not an exact zero: the kernel's result guard
    # flags it, and the conformance suites' oracle check agrees (a zero from nonzero factors)
    from conformance.outside import unjustified

    b = Builder("underflow")
    x = b.slot("x", F32, (4,))
    b.output("y", b.mul(x, x))
    p = plan(b.build(), "xdna2")
    feed = {"x": _f32(1e-30, 1, 2, 3)}
    with pytest.raises(DomainFlagged) as err:
        engine.step(engine.add_entry(p), feed)
    assert unjustified(err.value, p, [feed]) is None


def test_an_input_under_several_domains_is_refused_by_the_one_it_leaves() -> None:
    # EntryDomains holds an input first to the intersection of its guards' intervals (one pass
    # a step): each value outside one domain only is still refused, naming that guard's
    # equation and domain, and a NaN where one domain admits it goes to each guard
    from poot_engine.domain import EntryDomains
    from poot_ir.numerics import AnyInput, Interval, PositiveNormal

    guards = (
        HostGuard("x", 3, "exp", Interval(-np.inf, 88.0)),
        HostGuard("x", 5, "log", PositiveNormal()),
        HostGuard("x", 7, "select", AnyInput()),
    )
    domains = EntryDomains({"x": guards}, set())
    domains.check({"x": _f32(1.0, 2.0, 87.5)})  # inside all three, twice (the cached box)
    domains.check({"x": _f32(3.0, 2.0**-126, 88.0)})
    for value, eqn in ((100.0, 3), (-1.0, 5), (2.0**-130, 5), (np.nan, 3)):
        with pytest.raises(DomainError) as err:
            domains.check({"x": _f32(1.0, value)})
        assert err.value.eqn == eqn and err.value.element == (1,), (value, err.value)
    nan_ok = EntryDomains({"x": (HostGuard("x", 2, "select", AnyInput()),)}, set())
    nan_ok.check({"x": _f32(np.nan, np.inf, -np.inf)})  # AnyInput admits them all
