"""Text format: format + parse of a 1,000- and a 10,000-equation chain (linear: ratio about 10).

Each round prints the program and parses the text back (which includes validation). The ratio of
the two times is the figure: 10 times the equations should cost about 10 times the time.
"""

from __future__ import annotations

from poot_ir import Builder, DType, Program, format_program, parse_program

from benchmarks.harness import Figure, median_time


def chain(n: int) -> Program:
    """``n`` equations, each reading the previous one: adds, muls and exps on an f32[8,64]
    value, with inline literals and a weight, like a long unrolled elementwise body."""
    b = Builder(f"chain{n}")
    x = b.slot("x", DType.F32, (8, 64))
    w = b.weight("w", DType.F32, (8, 64))
    for i in range(n):
        match i % 3:
            case 0:
                x = b.add(x, 0.1 * (i % 7) - 0.25)
            case 1:
                x = b.mul(x, w)
            case _:
                x = b.exp(x)
    b.output("y", x)
    return b.build()


def _round_trip(program: Program) -> None:
    if parse_program(format_program(program)) != program:
        raise AssertionError("the text format did not round-trip the benchmark program")


def run() -> list[Figure]:
    small, large = chain(1_000), chain(10_000)
    t_small = median_time(lambda: _round_trip(small), repeat=7)
    t_large = median_time(lambda: _round_trip(large), repeat=5)
    return [
        Figure("format+parse, 1,000-equation chain", t_small * 1e3, "ms"),
        Figure("format+parse, 10,000-equation chain", t_large * 1e3, "ms"),
        Figure("10,000 / 1,000 time ratio", t_large / t_small, "x", aim="about 10 (linear)"),
    ]
