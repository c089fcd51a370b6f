"""The ``Prim`` groups mean what they say, checked on the oracle: a movement's every result
element is an operand's element, an exact arithmetic step's an operand's element or its
negation, and the groups split the primitives once."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_ir import Literal, Prim, Program, evaluate
from poot_ir.core import (
    BINARY,
    COMPARISONS,
    COMPUTING,
    EXACT_ARITHMETIC,
    MOVEMENT,
    REARRANGEMENT,
    UNARY,
)
from strategies import draw_inputs, programs


def test_the_groups_split_the_primitives_once() -> None:
    rest = {Prim.CONVERT, Prim.IOTA}
    parts = [MOVEMENT, EXACT_ARITHMETIC, COMPARISONS, COMPUTING, rest]
    assert sum(len(p) for p in parts) == len(Prim)
    assert frozenset().union(*parts) == frozenset(Prim)
    assert REARRANGEMENT < MOVEMENT
    assert all(p.is_movement == (p in MOVEMENT) for p in Prim)
    windows = {Prim.CONV, Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX}
    assert COMPUTING.issubset(UNARY | BINARY | {Prim.REDUCE_SUM, Prim.MATMUL} | windows)


def _values(a: np.ndarray) -> set[object]:
    """The elements of ``a`` as plain values (NaN as the string, so a set can hold it). A
    signalling NaN (a literal's bits) raises the processor's invalid flag when widened on some
    SIMD paths and not others: ignored, the NaN is kept as NaN either way."""
    with np.errstate(invalid="ignore"):
        flat = a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a
    return {"nan" if isinstance(x, float) and x != x else x for x in flat.ravel().tolist()}


def _allowed(program: Program, feed: dict[str, np.ndarray], signs: bool) -> set[object]:
    out: set[object] = set()
    for a in feed.values():
        out |= _values(a)
    for e in program.eqns:
        for x in e.inputs:
            if isinstance(x, Literal):
                out |= _values(np.asarray(x.as_float() if x.dtype.is_float else x.as_int()))
    if signs:
        out |= {-x for x in out if not isinstance(x, str | bool)}
        out |= {-np.inf, -(2**31)}  # reduce_max of an empty row: its identity (float, i32)
    return out


@st.composite
def _cases(draw: st.DrawFn, prims: frozenset[Prim]) -> tuple[Program, dict[str, np.ndarray]]:
    program = draw(programs(prims=prims, max_eqns=4, max_rank=2, exotic=False))
    return program, draw_inputs(draw, program)


def _check(program: Program, feed: dict[str, np.ndarray], signs: bool) -> None:
    allowed = _allowed(program, feed, signs)
    for name, got in evaluate(program, feed).items():
        extra = _values(got) - allowed
        assert not extra, f"{name} of {program.name}: {sorted(map(str, extra))[:5]} made"


@settings(
    derandomize=True, max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(_cases(MOVEMENT))
def test_movement_only_moves_operand_elements(case: tuple[Program, dict[str, np.ndarray]]) -> None:
    _check(*case, signs=False)


@settings(
    derandomize=True, max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(_cases(EXACT_ARITHMETIC | REARRANGEMENT))
def test_exact_arithmetic_chooses_or_sets_signs(
    case: tuple[Program, dict[str, np.ndarray]],
) -> None:
    _check(*case, signs=True)
