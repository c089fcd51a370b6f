"""Domain guards in XDNA2 kernels: each kernel counts the operands it computes on outside their
contract's domain into its region's flag word, ``poot_guard_word``.

Which operands a kernel guards is the planner's decision (``poot_planner.guards``: arguments are
checked on the host, literals and values proven inside their domain are not guarded). The word
is a ``uint32_t`` defined once per translation unit, so once per region object; the kernels add
to it and never read it, and the results are computed exactly as without guards (a guard only
counts; a gather index outside its axis is also replaced by 0, so the copy stays inside the
table). The count is at least the number of elements outside the domain (a fused norm
recomputes an element value in each loop that needs it, and guards it each time; the sums
saturate at 2^32 - 1, so a count never wraps to zero): zero exactly when every guarded operand
was inside.

On the NPU each core links its own copy of the region object, so each core has its own word.
After a run's last call each core hands its word on along the region's flag path
(``design.FlagPath``) with ``poot_flag_first`` / ``poot_flag_next`` (which clear it), and the
last core's sum is drained to the flags arena: one word per region, read with the results.
The host executor (``execute.run_region``) runs the same functions over the same chain, and
both ``XdnaHostDevice`` and ``XdnaDevice`` refuse a run whose words are not all zero
(``DomainFlagged``).

The class tests are on the bits (an exponent field of all ones is an infinity or a NaN, of zero
a zero or a subnormal), so no float comparison a compiler could fold decides them. Float
comparisons remain where the question is one of value: exp's interval (``!(lo <= x && x <=
hi)``, true for NaN) and whether an add's or a sub's operands cancel exactly (``a != -b``: +0
and -0 cancel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from poot_ir import DType, Eqn, Prim
from poot_ir.numerics import Domain
from poot_planner import Plan
from poot_planner.fp16.prelude import F32_SCORE_BOUND
from poot_planner.guards import Site, score_checks

__all__ = [
    "FLAG_FIRST",
    "FLAG_NEXT",
    "GUARD_PRELUDE",
    "LOCAL",
    "RESULT",
    "Guarded",
    "KernelGuards",
    "kernel_guards",
    "operand_guard",
    "result_guard",
    "step_guards",
]

#: A kernel's own count, added to the region's word once, at its end: a store to a global in
#: the loop would be a memory write per element that the compiler must keep.
LOCAL = "poot_g"

#: The ``(eqn, operand)`` pairs to guard (``RESULT`` as the operand: the result).
Guarded = frozenset[tuple[int, int]]
RESULT = -1

#: The flag path's functions (``design.FlagPath``): the chain's first core, and every other.
FLAG_FIRST = "poot_flag_first"
FLAG_NEXT = "poot_flag_next"

GUARD_PRELUDE = """
/* Domain guards (poot_codegen.xdna.guards): the region's count of operands outside a domain. */
uint32_t poot_guard_word = 0u;
static inline uint32_t poot_g_nonfinite(float x) {
    return (poot_f32_bits(x) & 0x7f800000u) == 0x7f800000u;
}
static inline uint32_t poot_g_nan(float x) { return (poot_f32_bits(x) & 0x7fffffffu) > 0x7f800000u; }
static inline uint32_t poot_g_not_positive_normal(float x) {
    const uint32_t b = poot_f32_bits(x), e = b & 0x7f800000u;
    return (b >> 31) | (uint32_t)(e == 0u) | (uint32_t)(e == 0x7f800000u);
}
static inline uint32_t poot_g_outside(float x, float lo, float hi) {
    return (uint32_t)!(lo <= x && x <= hi);
}
/* A result that is not finite and normal (or a zero), or the largest magnitude, which an
 * overflowing sum can round or saturate to: the exact result may be outside the domain. */
static inline uint32_t poot_g_result(float y) {
    const uint32_t b = poot_f32_bits(y) & 0x7fffffffu, e = b & 0x7f800000u;
    return (uint32_t)(e == 0x7f800000u) | (uint32_t)(e == 0u && b != 0u) | (uint32_t)(b == 0x7f7fffffu);
}
/* The same for a sum or a difference, whose largest magnitude is flagged only when both
 * operands are at least 2^103 (half the spacing at FLT_MAX) in magnitude: with a smaller one
 * the exact result is below FLT_MAX + 2^103 and rounds to a finite value (a score plus a
 * -FLT_MAX mask rounds to -FLT_MAX exactly as the oracle's does: no overflow). */
static inline uint32_t poot_g_result_sum(float y, float a, float b) {
    const uint32_t m = poot_f32_bits(y) & 0x7fffffffu, e = m & 0x7f800000u;
    const uint32_t big = (uint32_t)((poot_f32_bits(a) & 0x7fffffffu) >= 0x73000000u)
                       & (uint32_t)((poot_f32_bits(b) & 0x7fffffffu) >= 0x73000000u);
    return (uint32_t)(e == 0x7f800000u) | (uint32_t)(e == 0u && m != 0u) | ((uint32_t)(m == 0x7f7fffffu) & big);
}
/* The same for a product (a quotient): the largest magnitude only when both operands exceed 1
 * in magnitude (the divisor is below 1): otherwise |y| is at most the other operand's (the
 * dividend's) magnitude, which is finite, so nothing overflowed (a 0/1 mask times
 * finfo(float32).min is exactly -FLT_MAX). */
static inline uint32_t poot_g_result_mul(float y, float a, float b) {
    const uint32_t m = poot_f32_bits(y) & 0x7fffffffu, e = m & 0x7f800000u;
    const uint32_t big = (uint32_t)((poot_f32_bits(a) & 0x7fffffffu) > 0x3f800000u)
                       & (uint32_t)((poot_f32_bits(b) & 0x7fffffffu) > 0x3f800000u);
    return (uint32_t)(e == 0x7f800000u) | (uint32_t)(e == 0u && m != 0u) | ((uint32_t)(m == 0x7f7fffffu) & big);
}
static inline uint32_t poot_g_result_div(float y, float b) {
    const uint32_t m = poot_f32_bits(y) & 0x7fffffffu, e = m & 0x7f800000u;
    const uint32_t small = (uint32_t)((poot_f32_bits(b) & 0x7fffffffu) < 0x3f800000u);
    return (uint32_t)(e == 0x7f800000u) | (uint32_t)(e == 0u && m != 0u) | ((uint32_t)(m == 0x7f7fffffu) & small);
}
/* The same for an exact step (a negation): its result is never rounded or saturated, so the
 * largest magnitude is an exact result inside the domain. */
static inline uint32_t poot_g_result_exact(float y) {
    const uint32_t b = poot_f32_bits(y) & 0x7fffffffu, e = b & 0x7f800000u;
    return (uint32_t)(e == 0x7f800000u) | (uint32_t)(e == 0u && b != 0u);
}
static inline uint32_t poot_g_zero(float y) { return (poot_f32_bits(y) & 0x7fffffffu) == 0u; }
/* A count that saturates: 2^32 operands outside must not read as none. */
static inline uint32_t poot_g_sat(uint32_t a, uint32_t b) {
    const uint32_t s = a + b;
    return s < a ? 0xffffffffu : s;
}
/* The flag path (design.FlagPath): after its run, a core hands on its count (the first core of
 * the chain), or the previous core's word plus its count, and clears its own. */
void poot_flag_first(uint32_t* out) {
    out[0] = poot_guard_word;
    poot_guard_word = 0u;
}
void poot_flag_next(const uint32_t* in, uint32_t* out) {
    out[0] = poot_g_sat(in[0], poot_guard_word);
    poot_guard_word = 0u;
}
"""


def operand_guard(domain: Domain, x: str) -> str | None:
    """A C ``uint32_t`` expression, 1 when ``x`` is outside ``domain`` (None: no guard),
    rendered from the domain's F32 bounds (``Domain.bounds``): a class test on the bits for
    the dtype's own limits, a comparison for an explicit interval."""
    b = domain.bounds(DType.F32)
    if b.anything:
        return None
    if b.not_nan:
        return f"poot_g_nan({x})"
    if b.finite:
        return f"poot_g_nonfinite({x})"
    if b.positive_normal:
        return f"poot_g_not_positive_normal({x})"
    if b.lo == -math.inf:  # exp's [-inf, 88]: only the upper end (and NaN) is outside
        return f"(uint32_t)!({x} <= {float(b.hi)!r}f)"
    return f"poot_g_outside({x}, {float(b.lo)!r}f, {float(b.hi)!r}f)"


def result_guard(prim: Prim, args: list[str], y: str) -> str:
    """1 when ``y`` (the step's result) may have left a ``FiniteNormalResult`` domain: not
    finite and normal, the largest magnitude (only where the step can overflow to it: a sum
    or a difference of two operands of at least 2^103, a product of two operands above 1, a
    quotient by a divisor below 1), or a zero the operands cannot make exactly (an
    add of non-opposites, a sub of different values, a product or quotient of nonzeros, whose
    exact result is then a nonzero that underflowed). A negation is exact: its largest
    magnitude is the negated operand's, inside the domain, so only its class is checked."""
    if prim is Prim.NEG:
        return f"poot_g_result_exact({y})"
    terms = [f"poot_g_result({y})"]
    if prim in (Prim.ADD, Prim.SUB) and len(args) == 2:
        terms = [f"poot_g_result_sum({y}, {args[0]}, {args[1]})"]
    if prim is Prim.MUL and len(args) == 2:
        terms = [f"poot_g_result_mul({y}, {args[0]}, {args[1]})"]
    if prim is Prim.DIV and len(args) == 2:
        terms = [f"poot_g_result_div({y}, {args[1]})"]
    match prim:
        case Prim.ADD if len(args) == 2:
            terms.append(f"(poot_g_zero({y}) & (uint32_t)({args[0]} != poot_negf({args[1]})))")
        case Prim.SUB if len(args) == 2:
            terms.append(f"(poot_g_zero({y}) & (uint32_t)({args[0]} != {args[1]}))")
        case Prim.MUL if len(args) == 2:
            terms.append(f"(poot_g_zero({y}) & !poot_g_zero({args[0]}) & !poot_g_zero({args[1]}))")
        case Prim.DIV if len(args) == 2:
            terms.append(f"(poot_g_zero({y}) & !poot_g_zero({args[0]}))")
        case Prim.RECIP:
            terms.append(f"poot_g_zero({y})")
        case _:
            pass
    return " | ".join(terms)


def step_guards(
    index: int,
    e: Eqn,
    domain: Domain | None,
    guarded: Guarded,
    args: list[str],
    y: str,
    scores: Guarded = frozenset(),
) -> str | None:
    """The C statement adding equation ``index``'s guarded operands (and result) outside
    ``domain``, and its ``scores`` operands past the mask rewrite's score bound (``|s| <=
    F32_SCORE_BOUND``, NaN outside too: ``poot_planner.fp16.prelude``), to the kernel's count
    (``LOCAL``), or None when it guards nothing."""
    terms = []
    for k, x in enumerate(args):
        if domain is not None and (index, k) in guarded:
            g = operand_guard(domain, x)
            if g is not None:
                terms.append(g)
        if (index, k) in scores:
            terms.append(f"poot_g_outside({x}, {-F32_SCORE_BOUND!r}f, {F32_SCORE_BOUND!r}f)")
    if domain is not None and (index, RESULT) in guarded and domain.on_result:
        terms.append(result_guard(e.prim, args, y))
    if not terms:
        return None
    return f"{LOCAL} += {' + '.join(f'({t})' for t in terms)};"


@dataclass(frozen=True, slots=True)
class KernelGuards:
    """What a plan's kernels guard: the ``(eqn, operand)`` pairs and each equation's domain."""

    guarded: Guarded = frozenset()
    domains: Mapping[int, Domain] = field(default_factory=dict)
    #: the operands checked against the mask rewrite's score bound (``score_checks``)
    scores: Guarded = frozenset()

    def line(self, index: int, e: Eqn, args: list[str], y: str) -> str | None:
        domain = self.domains.get(index)
        return step_guards(index, e, domain, self.guarded, args, y, self.scores)


def kernel_guards(plan: Plan) -> KernelGuards:
    """The device guards of ``plan`` (``Plan.guards``, placed by the planner), and the score
    checks of its ``score_bound`` (``poot_planner.guards.score_checks``)."""
    found = [g for g in plan.guards if g.site is Site.DEVICE]
    return KernelGuards(
        frozenset((g.eqn, g.operand) for g in found),
        {g.eqn: g.domain for g in found},
        frozenset(score_checks(plan.program, plan.score_bound)),
    )
