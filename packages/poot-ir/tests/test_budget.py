"""The memory budget and the static size limit, at their edges, on every entry point that
sizes an allocation from user input."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from poot_ir import Builder, DType, ParseError, parse_program, sample_inputs
from poot_ir.budget import (
    MAX_DIM,
    MAX_TENSOR_BYTES,
    BudgetExceeded,
    DimsTooLarge,
    InvalidBudget,
    budget,
    check_alloc,
    check_array,
    check_dims,
    nbytes,
    parse_budget,
    set_budget,
)


@pytest.fixture
def small_budget() -> Iterator[int]:
    set_budget(10_000)
    try:
        yield 10_000
    finally:
        set_budget(None)


def _mem_available() -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        line = next(x for x in f if x.startswith("MemAvailable:"))
    return int(line.split()[1]) * 1024


def test_the_static_limit_at_its_edge() -> None:
    check_dims([MAX_TENSOR_BYTES // 4], "x", 4)  # exactly 1 TiB of f32 is allowed
    with pytest.raises(DimsTooLarge, match="x: shape"):
        check_dims([MAX_TENSOR_BYTES // 4 + 1], "x", 4)
    check_dims([MAX_DIM, 0], "empty", 4)  # no bytes, but the dim is at the limit
    with pytest.raises(DimsTooLarge):
        check_dims([MAX_DIM + 1, 0], "empty", 4)
    assert nbytes([2**62, 2**62], 4) == 2**126  # exact: never wraps


def test_huge_dims_are_refused_at_the_builder_and_the_parser() -> None:
    b = Builder("p")
    with pytest.raises(DimsTooLarge, match="argument 'x'"):
        b.slot("x", DType.F32, (2**62,))
    y = b.slot("y", DType.F32, (2**20,))
    with pytest.raises(DimsTooLarge, match="equation 0"):  # an intermediate result too
        b.broadcast_in_dim(y, (2**21, 2**20), (1,))
    text = "program p\n  slot x %0: f32[4611686018427387904]\n  output y = %0\nend\n"
    with pytest.raises(ParseError, match=r"line 2.*no target holds"):
        parse_program(text)


def test_default_budget_is_half_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POOT_MEMORY_BUDGET", raising=False)
    before, got, after = _mem_available(), budget(), _mem_available()
    assert min(before, after) * 0.45 <= got <= max(before, after) * 0.55


@pytest.mark.parametrize(
    ("text", "value"), [("1", 1), ("2K", 2048), ("1.5m", 3 << 19), ("3G", 3 << 30)]
)
def test_the_budget_is_settable_by_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, value: int
) -> None:
    monkeypatch.setenv("POOT_MEMORY_BUDGET", text)
    assert budget() == value


@pytest.mark.parametrize("text", ["", "abc", "0", "-1", "inf", "nan", "1X", "0.5"])
def test_a_bad_budget_is_a_typed_error(text: str) -> None:
    with pytest.raises(InvalidBudget):
        parse_budget(text) if text else set_budget(0)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1G", None])
def test_set_budget_checks_its_argument(bad: object) -> None:
    if bad is None:
        set_budget(None)  # back to the default
        return
    with pytest.raises(InvalidBudget):
        set_budget(bad)  # type: ignore[arg-type]


def test_an_allocation_over_the_budget_names_value_size_and_budget(small_budget: int) -> None:
    check_alloc("ten thousand bytes", 10_000)  # at the budget: allowed
    with pytest.raises(BudgetExceeded) as caught:
        check_alloc("the weights", 10_001)
    err = caught.value
    assert (err.what, err.size, err.limit) == ("the weights", 10_001, 10_000)
    assert "the weights" in str(err) and "10001 bytes" in str(err) and "10000 bytes" in str(err)
    with pytest.raises(BudgetExceeded):
        check_array("a folded constant", [2501], 4)


def test_sample_inputs_are_checked_before_anything_is_drawn(small_budget: int) -> None:
    b = Builder("big")
    x = b.slot("x", DType.F32, (1000,))  # 4000 bytes, drawn from 8000 bytes of float64
    b.output("y", b.neg(x))
    with pytest.raises(BudgetExceeded, match="sample inputs of program 'big'") as caught:
        sample_inputs(b.build())
    assert caught.value.size == 12_000
    b = Builder("fits")
    x = b.slot("x", DType.F32, (500,))
    b.output("y", b.neg(x))
    assert sample_inputs(b.build())["x"].shape == (500,)
