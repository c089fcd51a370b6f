"""Oracle overhead: a 1,000-equation elementwise chain, evaluate versus plain numpy.

The chain is add, mul, sub and max on 64x64 F32, each with a literal operand and with a second
tensor, chosen so the values stay normal numbers (subnormal arithmetic would time the FPU). The baseline runs the same ufuncs on the same float32 arrays in a Python loop, with the
same IEEE-2019 signed-zero handling for a tensor max as the oracle, so the ratio is the cost of
the oracle's dispatch and argument checks, not a difference in arithmetic.
"""

from __future__ import annotations

import numpy as np
from poot_ir import Builder, DType, Program, Var, evaluate

from benchmarks.harness import Figure, median_time

N, SHAPE = 1000, (64, 64)
#: One period of the chain: (primitive, literal operand or None for the tensor ``w``).
_PATTERN = (
    ("add", 0.5),
    ("mul", None),
    ("sub", None),
    ("max", -1.0),
    ("mul", 0.5),
    ("add", None),
    ("max", None),
    ("sub", 0.25),
)


def _program() -> Program:
    b = Builder("chain")
    x = b.slot("x", DType.F32, SHAPE)
    w = b.slot("w", DType.F32, SHAPE)
    v: Var = x
    for i in range(N):
        prim, lit = _PATTERN[i % len(_PATTERN)]
        v = getattr(b, prim)(v, w if lit is None else lit)
    b.output("y", v)
    return b.build()


def _numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    u32 = np.dtype(np.uint32)
    ufuncs = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "max": np.maximum}
    pattern = [(ufuncs[p], w if lit is None else np.float32(lit)) for p, lit in _PATTERN]
    v = x
    for i in range(N):
        uf, other = pattern[i % len(pattern)]
        if uf is np.maximum and other is w:  # IEEE maximum: a tied zero's sign is the AND
            r = np.maximum(v, w).view(u32)
            s = np.maximum(w, v).view(u32)
            v = (r & (s | np.uint32(0x7FFF_FFFF))).view(np.float32)
        else:
            v = uf(v, other)
    return np.array(v, copy=True)


def run() -> list[Figure]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.uniform(0.5, 1.5, SHAPE).astype(np.float32)
    program = _program()
    inputs = {"x": x, "w": w}
    with np.errstate(all="ignore"):
        y = evaluate(program, inputs)["y"]
        assert np.array_equal(y, _numpy(x, w)) and np.all(np.abs(y) >= 2.0**-126)
        t_eval = median_time(lambda: evaluate(program, inputs), repeat=9)
        t_np = median_time(lambda: _numpy(x, w), repeat=9)
    return [
        Figure("evaluate, 1000-equation F32 chain on 64x64", t_eval * 1e3, "ms"),
        Figure("plain numpy loop, same ufuncs and dtypes", t_np * 1e3, "ms"),
        Figure("evaluate / numpy", t_eval / t_np, "x", aim="<= 1.3"),
    ]
