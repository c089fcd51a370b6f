"""``log`` for a target that computes in FP16 without it (intel-npu4): range reduction by exact
steps, then a short odd series, so the error is relative, as log's own is.

For an F16 ``x > 0`` (subnormals included):

1. **Reduction, exact.** Ten stages find an integer ``k`` and ``m = x 2^-k`` in
   ``[0.70703125, 1.4140625)`` (``M_LO`` is the FP16 value just below sqrt(2)/2, so ``log m``
   is small on both sides): five that halve while ``x >= M_LO 2^s`` (s = 16, 8, 4, 2, 1: from
   ``x < 65504 < M_LO 2^17``, each keeps ``x < M_LO 2^s``), five that double while
   ``x < M_LO 2^(1-s)`` (from ``x >= 2^-24``). Each stage's test is the exact 0/1 value of
   ``x < c`` (``below``: an FP16 difference has the sign of the exact one and is at least 2^-24
   when nonzero); its factor is exactly ``2^+-s`` or 1 (``lt (1 - 2^-s) + 2^-s``, ``lt (2^s -
   1) + 1``: FP16 holds each term and sum), ``x`` times it is exact (a power of two, the
   product inside FP16's range and normal or exactly scaled), and ``k`` is a sum of small
   integers, exact. ``2^16`` is not an FP16 value: that stage applies ``2^8`` twice.
2. **Series.** ``log m = 2 atanh(u) = 2u (1 + u^2/3 + u^4/5 + ...)``, ``u = (m - 1)/(m + 1)``,
   ``|u| <= 0.1716``: the three terms kept leave a remainder below ``2|u|^7 / (7 (1 - u^2))``
   (3.7e-6 relative to |log m|), derived per piece in ``poot_planner.legalize.bounds``.
3. ``log x = k ln2_hi + (k ln2_lo + log m)``, ``ln2_hi = 11/16`` so that ``k ln2_hi`` is exact
   (``|k| <= 24``: 5 + 4 bits), ``ln2_lo = ln 2 - 11/16`` rounded into FP16.

**Domain.** ``log`` of ``x <= 0`` is ``-inf`` or NaN on the oracle; this rewrite must not make it
a finite value. It adds ``(sqrt(x) / x) 0`` to ``x`` first: 0 for a positive ``x`` (a finite
quotient, times zero), NaN for ``x < 0`` (``sqrt``) and for ``x = +-0`` (``0 / 0``), so the NaN
reaches the result, and the narrowed graph's overflow guard (``poot_planner.fp16.checks``) flags
the ``sqrt`` or the division, whose operands are finite, and the step is refused
(``NarrowingRangeIntermediate``); a NaN result is also refused by the result range check. A NaN
or infinite ``x`` never reaches the device (the input range check refuses it).

The bound is derived in ``poot_planner.legalize.bounds`` (``Numerics.REDUCED``): the reduction is
exact (proved above, and checked on every positive FP16 value in the tests), so the analysis
runs on the tail (steps 2 and 3) alone, with ``m`` in pieces and ``k`` each integer.
"""

from __future__ import annotations

import math

from poot_ir import DType, Eqn, Literal, Prim, Var

from poot_planner.emit import Emit, RuleContext
from poot_planner.legalize.steps import TINY_F16

__all__ = [
    "K_RANGE",
    "LN2_HI",
    "LN2_LO",
    "M_HI",
    "M_LO",
    "SOFTPLUS_TOP",
    "below",
    "domain_guarded",
    "expand_log",
    "expand_softplus",
    "operand_of_softplus",
    "reduce",
    "tail",
]

LN2_HI = 0.6875  # 11/16: k * LN2_HI is exact in FP16 for |k| < 2^7
LN2_LO = math.log(2.0) - LN2_HI  # 0.0056472, rounded into FP16 (11 bits of it) when narrowed
M_LO, M_HI = 0.70703125, 1.4140625  # m in [M_LO, M_HI): 181/256 and twice it
#: x = m 2^k over FP16's positive range: 2^-24 = 1 * 2^-24, 65504 = 0.9995 * 2^16
K_RANGE = (-24, 16)
_STAGES = (16, 8, 4, 2, 1)  # halving while x >= M_LO 2^s, then doubling while x < M_LO 2^(1-s)
#: the kept series 1 + u^2/3 + u^4/5, by Horner in u^2
_SERIES = (1.0 / 5.0, 1.0 / 3.0, 1.0)
_AMP = 4096.0  # 2^12: twice, 2^-24 to exactly 1


def below(em: Emit, x: Var, c: float) -> Var:
    """Exactly 1 where the F16 ``x < c``, else 0: ``d = c - x`` has the exact difference's sign
    and is 0 or at least 2^-24 in magnitude, so ``min(max(d, 0), 2^-24)`` is 0 or 2^-24, and
    two products by 2^12 make it 0 or 1 (exact: powers of two, subnormal operand included)."""
    g = em.min(em.max(em.sub(c, x), 0.0), TINY_F16)
    return em.mul(em.mul(g, _AMP), _AMP)


def _stage(em: Emit, x: Var, acc: Var | None, s: int, up: bool) -> tuple[Var, Var]:
    """One reduction stage: ``lt = [x < c]``; up (``c = M_LO 2^s``): ``x`` times ``2^-s`` unless
    ``lt``; down (``c = M_LO 2^(1-s)``): ``x`` times ``2^s`` where ``lt``. Both add ``-s lt`` to
    ``acc`` (``k`` is ``acc`` plus the up stages' sum)."""
    lt = below(em, x, M_LO * 2.0 ** (s if up else 1 - s))
    step_, times = (2.0**s, 1) if s <= 8 else (2.0**8, s // 8)  # 2^16 is two steps of 2^8
    if up:  # lt (1 - 2^-s) + 2^-s: exactly 1 or 2^-s (1 - 2^-s has at most 8 bits)
        f = em.add(em.mul(lt, 1.0 - 1.0 / step_), 1.0 / step_)
    else:  # lt (2^s - 1) + 1: exactly 2^s or 1
        f = em.add(em.mul(lt, step_ - 1.0), 1.0)
    for _ in range(times):
        x = em.mul(x, f)
    dk = em.mul(lt, -float(s))
    return x, dk if acc is None else em.add(acc, dk)


def reduce(em: Emit, x: Var) -> tuple[Var, Var]:
    """``(m, k)`` with ``x = m 2^k`` exactly, ``m`` in ``[M_LO, M_HI)``, for an F16 ``x > 0``:
    five stages halve the binade while ``x >= M_LO 2^s`` (x < 65504 < M_LO 2^17 ends below
    ``2 M_LO``), five double it while ``x < M_LO 2^(1-s)`` (x >= 2^-24 ends at or above M_LO)."""
    acc: Var | None = None
    for s in _STAGES:
        x, acc = _stage(em, x, acc, s, True)
    for s in _STAGES:
        x, acc = _stage(em, x, acc, s, False)
    assert acc is not None
    return x, em.add(acc, float(sum(_STAGES)))


def tail(em: Emit, m: Var, k: Var, out: Var | None = None) -> Var:
    """``k ln2_hi + (k ln2_lo + log m)``, ``log m`` by the odd series in ``u``."""
    u = em.div(em.sub(m, 1.0), em.add(m, 1.0))
    u2 = em.mul(u, u)
    poly: Var = em.add(em.mul(u2, _SERIES[0]), _SERIES[1])
    poly = em.add(em.mul(poly, u2), _SERIES[2])
    log_m = em.mul(em.mul(u, 2.0), poly)
    low = em.add(em.mul(k, LN2_LO), log_m)
    return em.add(em.mul(k, LN2_HI), low, out=out)


def domain_guarded(em: Emit, x: Var) -> Var:
    """``x + (sqrt(x) / x) 0``: ``x`` itself where ``x > 0``, NaN where ``x <= 0`` (module)."""
    z = em.mul(em.div(em.op(Prim.SQRT, x), x), 0.0)
    return em.add(x, z)


def expand_log(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    (x,) = e.inputs
    if not isinstance(x, Var) or em.dtype not in (DType.F32, DType.F16):
        return False
    m, k = reduce(em, domain_guarded(em, x))
    tail(em, m, k, out=e.out)
    return True


#: the largest FP16 value whose exp F32 holds (ln(F32 max) = 88.7228): the softplus rule's
#: domain ends there
SOFTPLUS_TOP = 88.6875
#: the kept series of softplus' 2 atanh(u), u <= 1/3: 1 + u^2/3 + ... + u^8/9, by Horner
_SOFTPLUS_SERIES = (1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0)
#: the series' remainder relative to log(1 + e) >= 2u: u^10 / (11 (1 - u^2)) at u = 1/3
SOFTPLUS_REMAINDER = (1.0 / 3.0) ** 10 / (11.0 * (1.0 - 1.0 / 9.0))


def operand_of_softplus(e: Eqn, ctx: RuleContext) -> Var | None:
    """``v`` of ``log(exp(v) + 1)`` (how ONNX's own function body writes Softplus), else None."""
    (s,) = e.inputs
    add = ctx.producer.get(s.id) if isinstance(s, Var) else None
    if add is None or add.prim is not Prim.ADD:
        return None
    for g, one in (add.inputs, add.inputs[::-1]):
        if not (isinstance(one, Literal) and one.as_float() == 1.0 and isinstance(g, Var)):
            continue
        ex = ctx.producer.get(g.id)
        if ex is not None and ex.prim is Prim.EXP and isinstance(ex.inputs[0], Var):
            return ex.inputs[0]
    return None


def expand_softplus(em: Emit, e: Eqn, ctx: RuleContext) -> bool:
    """``log(exp(v) + 1)`` as ``max(v, 0) + log(1 + exp(-|v|))``, the log by its odd series in
    ``u = g / (g + 2)``, ``g = exp(-|v|)`` in ``(0, 1]`` (so ``u <= 1/3``): ``1 + g`` is never
    formed, so the result keeps its relative accuracy where ``g`` is small, and no exp of a
    large ``v`` overflows. The source's ``exp(v) + 1`` is left unread (dead: nothing computes
    with it, so its FP16 overflow is not flagged)."""
    v = operand_of_softplus(e, ctx)
    if v is None or em.dtype not in (DType.F32, DType.F16) or v.dtype is not em.dtype:
        return False
    g = em.exp(em.neg(em.abs(v)))
    # where the source's exp(v) overflows F32 (v > 88.72: the FP16 values from 88.75 on) the
    # oracle's softplus is +inf; the rewrite must not answer a finite value there: a product
    # that overflows FP16 (flagged in the graph: the step is refused), times 0, added in
    over = em.sub(em.max(v, SOFTPLUS_TOP), SOFTPLUS_TOP)  # >= 0.0625 past the top, else 0
    nan_past = em.mul(em.mul(em.mul(over, 65504.0), 65504.0), 0.0)
    u = em.div(g, em.add(g, 2.0))
    u2 = em.mul(u, u)
    poly: Var = em.add(em.mul(u2, _SOFTPLUS_SERIES[0]), _SOFTPLUS_SERIES[1])
    for c in _SOFTPLUS_SERIES[2:]:
        poly = em.add(em.mul(poly, u2), c)
    em.add(em.add(em.max(v, 0.0), nan_past), em.mul(em.mul(u, 2.0), poly), out=e.out)
    return True
