"""Planner: plan 1,000- and 10,000-equation chains for xdna2 and intel-npu4 (linear, under 1 s),
and an xdna2 pointwise pair over one prime dimension of 65,521 and of 2^31 - 1 elements (the
most an xdna2 tensor holds): a prime's only chunking is one element a call, so both search every
chunk size tile memory allows.

The ratio of the two chain times should stay about 10, and 10,000 equations plan in under a
second; the two dimension sizes should plan in about the same time (chunking searches chunk
sizes bounded by tile memory, never the divisors of a dimension).

The chain alternates ``mul``, ``add`` and ``max`` with an inline literal on an f32[8,64] value,
which both NPU targets admit. For xdna2 each equation is a tile; the chain repeats every 3
tiles, so it forms a region per 30 equations (ten whole periods: identical regions share one
artifact, ``poot_planner.xdna2.regions``), in two hardware contexts (the first region, whose
first tile reads the argument, and the rest); finding the period and forming those regions is
part of what is timed. For intel-npu4 the plan includes the narrowing pass
(casts on entry and exit, the chain rewritten in F16).
"""

from __future__ import annotations

import os
from functools import partial

from poot_ir import Builder, DType, Program
from poot_planner import plan

from benchmarks.harness import Figure, median_time

TARGETS = ("xdna2", "intel-npu4")


def chain(n: int) -> Program:
    """``n`` equations, each reading the previous one: ``* 0.5``, ``+ 0.25``, ``max -1``."""
    b = Builder(f"chain{n}")
    x = b.slot("x", DType.F32, (8, 64))
    for i in range(n):
        match i % 3:
            case 0:
                x = b.mul(x, 0.5)
            case 1:
                x = b.add(x, 0.25)
            case _:
                x = b.max(x, -1.0)
    b.output("y", x)
    return b.build()


def wide(n: int) -> Program:
    """``exp(neg(x))`` over one dimension of ``n`` elements."""
    b = Builder(f"wide{n}")
    b.output("y", b.exp(b.neg(b.slot("x", DType.F32, (n,)))))
    return b.build()


def _check(program: Program, target: str) -> None:
    """The plan is the one the benchmark means to time (not an early refusal)."""
    p = plan(program, target)
    n = len(program.eqns)
    if target == "intel-npu4":
        if not p.admitted or len(p.program.eqns) != n + 2:
            raise AssertionError("intel-npu4 did not narrow the benchmark chain")
    else:
        kinds = {r.kind for r in p.refusals}
        if len(p.tiles) != n or len(p.regions) != -(-n // 30):
            raise AssertionError("xdna2 did not tile the benchmark chain one equation a tile")
        if kinds or p.contexts > 2:
            raise AssertionError(f"xdna2 refused the chain for {kinds}, or it needs {p.contexts}")


def run() -> list[Figure]:
    small, large = chain(1_000), chain(10_000)
    figures: list[Figure] = []
    for target in TARGETS:
        _check(small, target)
        _check(large, target)
        t_small = median_time(partial(plan, small, target), repeat=7)
        t_large = median_time(partial(plan, large, target), repeat=5)
        figures += [
            Figure(f"plan {target}, 1,000-equation chain", t_small * 1e3, "ms"),
            Figure(
                f"plan {target}, 10,000-equation chain",
                t_large * 1e3,
                "ms",
                aim="under 1,000 ms",
            ),
            Figure(
                f"plan {target}, 10,000 / 1,000 time ratio",
                t_large / t_small,
                "x",
                aim="about 10 (linear)",
            ),
        ]
    # the machine's load when the chains were timed: the absolute figures mean little on a
    # loaded machine (the ratios hold), so the reader can weigh them
    figures.append(Figure("1-minute load average after the chains", os.getloadavg()[0], ""))
    narrow, huge = wide(65_521), wide(2**31 - 1)
    for p in (narrow, huge):
        if not plan(p, "xdna2").admitted:
            raise AssertionError(f"xdna2 refused {p.name}")
    t_narrow = median_time(partial(plan, narrow, "xdna2"), repeat=7)
    t_huge = median_time(partial(plan, huge, "xdna2"), repeat=7)
    figures += [
        Figure("plan xdna2, a dimension of 2^31 - 1 elements", t_huge * 1e3, "ms"),
        Figure(
            "plan xdna2, dimension 2^31 - 1 / dimension 65,521 time ratio",
            t_huge / t_narrow,
            "x",
            aim="about 1 (independent of the dimension)",
        ),
    ]
    return figures
