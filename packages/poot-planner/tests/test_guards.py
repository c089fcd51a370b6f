"""Where the planner places each domain guard: on the host for an argument, on the device for a
computed operand (and a FiniteNormalResult result), and nowhere when a literal or the range
analysis proves the operand inside; never proven when the analysis cannot show it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

import pytest
from poot_ir import Builder, DType, Program, Var
from poot_planner import plan
from poot_planner.guards import RESULT, Site

F32 = DType.F32


def _sites(f: Callable[[Builder, Var], Var], target: str = "xdna2") -> dict[tuple[int, int], Site]:
    b = Builder("g")
    x = b.slot("x", F32, (4, 8))
    b.output("y", f(b, x))
    return {(g.eqn, g.operand): g.site for g in plan(b.build(), target).guards}


def test_arguments_are_guarded_on_the_host_and_literals_proven() -> None:
    s = _sites(lambda b, x: b.add(x, 2.0))
    assert s == {(0, 0): Site.HOST, (0, 1): Site.PROVEN, (0, RESULT): Site.DEVICE}


def test_a_bounded_value_is_proven_inside_the_next_domain() -> None:
    # tanh is in [-1, 1]: exp of it is inside [-87, 88]; exp(tanh) is positive normal: log too
    s = _sites(lambda b, x: b.log(b.exp(b.tanh(x))))
    assert s[(0, 0)] is Site.HOST and s[(1, 0)] is Site.PROVEN and s[(2, 0)] is Site.PROVEN


def test_what_the_analysis_cannot_show_stays_guarded() -> None:
    # exp's absolute error can make a tiny result 0: log of exp(x) is not proven positive
    assert _sites(lambda b, x: b.log(b.exp(x)))[(1, 0)] is Site.DEVICE
    # x * 1e30 may be huge: exp of it is not inside [-87, 88]
    assert _sites(lambda b, x: b.exp(b.mul(x, 1e30)))[(1, 0)] is Site.DEVICE
    # sqrt of x - 1 may be negative
    assert _sites(lambda b, x: b.sqrt(b.sub(x, 1.0)))[(1, 0)] is Site.DEVICE
    # max of sqrt: a guarded sqrt never gives NaN, so max's NotNaN is proven
    assert _sites(lambda b, x: b.max(b.sqrt(b.sub(x, 1.0)), 2.0))[(2, 0)] is Site.PROVEN


def test_the_rms_of_a_row_is_proven_positive_normal() -> None:
    def rms(b: Builder, x: Var) -> Var:
        mean = b.div(b.reduce_sum(b.mul(x, x), 1), 8.0)
        return b.sqrt(b.add(mean, 1e-6))

    s = _sites(rms)
    assert s[(4, 0)] is Site.PROVEN  # sqrt(sum(x * x) / 8 + 1e-6): >= 1e-6, finite (guarded)
    assert s[(1, RESULT)] is Site.DEVICE  # the row sum may overflow: the kernel flags it


def test_the_cpu_guards_nothing() -> None:
    assert _sites(lambda b, x: b.exp(x), "cpu") == {}


def _chain(n: int) -> Program:
    """``n`` equations, each reading the one before: add, mul, tanh, exp in turn."""
    b = Builder(f"chain{n}")
    v = b.slot("x", F32, (4, 8))
    for i in range(n):
        match i % 4:
            case 0:
                v = b.add(v, 1.0)
            case 1:
                v = b.mul(v, 0.5)
            case 2:
                v = b.tanh(v)
            case _:
                v = b.exp(v)
    b.output("y", v)
    return b.build()


def _lines_planning(program: Program, target: str) -> int:
    """The lines of poot's own code ``plan`` executes (an operation count, not a time)."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> object:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame: FrameType, event: str, arg: object) -> object:
        return local if "/poot_" in frame.f_code.co_filename else None

    before = sys.gettrace()  # a coverage run's tracer, put back after
    sys.settrace(calls)
    try:
        plan(program, target)
    finally:
        sys.settrace(before)
    return count


@pytest.mark.parametrize(("target", "n"), [("cpu", 400), ("xdna2", 400), ("intel-npu4", 120)])
def test_planning_is_linear_in_the_program_length(target: str, n: int) -> None:
    # doubling a chain doubles the work (the guards' placement looked each equation's
    # admission up in a scan of all of them: quadratic, 86 s for 20,000 equations)
    plan(_chain(8), target)  # what a process makes once (the targets' tables) is not counted
    small = _lines_planning(_chain(n), target)
    large = _lines_planning(_chain(2 * n), target)
    assert large < 2.3 * small, (small, large)
