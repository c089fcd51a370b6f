"""xdna2's sigmoid over the whole finite line, saturating where the function does.

The importer writes a sigmoid as ``select(x >= 0, r, e r)``, ``e = exp(-|x|)``,
``r = 1 / (1 + e)`` (``poot_onnx.logic.sigmoid``); xdna2 has no select, so the rule rewrites
it as

    g = exp(clamp(x, LOW, HIGH)),   sigmoid(x) = g / (1 + g)

which is the same function in exact arithmetic (``e^x / (1 + e^x) = 1 / (1 + e^-x)``) and
saturates exactly where float32's sigmoid does, with no step outside its contract's domain on
any finite input:

- below about -87.34 the kernel's exp flushes ``g`` to exactly +0 (``csrc/poot_math.h``: its
  exact value is below FLT_MIN), so the result is ``0 / 1 = 0``, the oracle's 0 below -103.97
  and within FLT_MIN of its subnormal values above (a zero quotient of a zero dividend passes
  div's result guard; a subnormal one would not). ``LOW = -104`` sends -inf and -FLT_MAX
  there too (max admits infinities);
- above about 17.33 (``g > 2^25``) ``1 + g`` rounds to ``g`` and the result is exactly 1,
  float32's sigmoid there; above ``HIGH = 88`` (exp's domain ends there) ``g = exp(88)``
  still gives 1;
- every other step's value is finite and normal: ``g`` in ``[0, exp(88)]``, ``1 + g`` in
  ``[1, 1.7e38]``, the quotient in ``[FLT_MIN, 1]`` or exactly 0.

What the device refuses (its flag word, ``DomainFlagged``; the host refuses an argument before
the run): NaN (max's domain), +inf (the clamp negates it, and neg's domain is finite operands),
and a subnormal ``x`` (negated: neg's result guard flags a subnormal result). All three are
the xdna2 contracts' seed domains, not this rule's.

The bound (``derive``) is absolute plus relative, derived by the interval analysis of the
chain (``poot_planner.legalize.intervals``) on pieces: the two clamped tails (each one value
after the clamp, plus the clamp's own error against the exact function there) and slices of
1/8 between, where ``g``'s relative error stays a relative error of the result.
"""

from __future__ import annotations

import itertools
import math

from poot_ir import DType, Eqn

from poot_planner.emit import Emit, RuleContext
from poot_planner.legalize.intervals import Enclosure, chain_value
from poot_planner.legalize.steps import sigmoid_operand
from poot_planner.target import Target

__all__ = ["HIGH", "LOW", "derive_sigmoid", "expand_sigmoid_select", "sigmoid"]

#: the clamp: exp(LOW) is 0 in float32 (below half its smallest subnormal); exp's domain on
#: xdna2 ends at HIGH
LOW, HIGH = -104.0, 88.0
#: the width of a piece between the clamps: sigmoid changes by at most e^(1/8) across one
_SLICE = 1.0 / 8.0
#: below this exact value a piece's error goes to the absolute part of the bound (its relative
#: error against so small a value says nothing); from it up, to the relative part
_TINY = 2.0**-14


def sigmoid(x: float) -> float:
    """The exact function, without overflow (float64)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    g = math.exp(x)
    return g / (1.0 + g)


def expand_sigmoid_select(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    x = sigmoid_operand(e, ctx)
    if x is None or not em.dtype.is_float:
        return False
    g = em.exp(em.clamp(x, LOW, HIGH))
    em.div(g, em.add(g, 1.0), out=e.out)
    return True


def _pieces(limit: float) -> list[tuple[float, float]]:
    n = math.ceil((HIGH - LOW) / _SLICE)
    cuts = [LOW + (HIGH - LOW) * q / n for q in range(n + 1)]
    return [(-limit, LOW), *itertools.pairwise(cuts), (HIGH, limit)]


def derive_sigmoid(
    eqns: list[Eqn], target: Target, device: DType, unit: float, limit: float
) -> tuple[float, float] | str:
    """``(abs, rel)``: every device result within ``abs + rel |sigmoid(x)|`` of the exact
    function, for every finite ``x`` the device does not refuse (the module's docstring), or
    why there is no bound. Each piece's error is the interval analysis's plus, on a clamped
    tail, the clamp's (the exact function moves by ``sigmoid(LOW)`` below it and by
    ``1 - sigmoid(HIGH)`` above it). ``abs`` is the largest error of a piece whose exact value
    may be below ``_TINY``; ``rel`` the largest of the others' excess over ``abs`` relative to
    their smallest exact value."""
    found: list[tuple[float, float, float]] = []  # (error, smallest, largest exact value)
    for lo, hi in _pieces(limit):
        got = chain_value(eqns, target, device, unit, limit, Enclosure(lo, hi, 0.0))
        if isinstance(got, str):
            return got
        err = got.err
        if hi == LOW:
            err += sigmoid(LOW)
        if lo == HIGH:
            err += 1.0 - sigmoid(HIGH)
        found.append((err, sigmoid(lo), sigmoid(hi)))
    small = max(err for err, _, top in found if top < _TINY)
    rel = max(max(err - small, 0.0) / low for err, low, top in found if top >= _TINY)
    return small, rel
