"""Legalization rules as data: a primitive a target refuses, rewritten into steps it admits.

Each ``Rule`` names the primitive, the target, the decomposition (as text for people and as an
expander that emits the equations) and its numerics:

- ``IDENTITY``: the decomposition equals the primitive in the dtype the target computes in; its
  bound is its steps' contracts (exact when every step is exact; a single approximate step, the
  last one, passes its own contract on). The argument for each identity is in its comment.
- ``APPROXIMATION``: a published formula whose error in exact arithmetic is ``approximation``;
  the planner adds the floating-point error of its steps, derived from the steps' contracts and
  the device dtype's rounding over the formula's domain (``poot_planner.legalize.bounds``).
- ``REDUCED``: an exact range reduction, then a short series (``poot_planner.legalize.logarithm``): the
  bound is derived on the series alone, over the reduced argument's pieces, and is relative;
  the running error analysis carries the rewrite as one step under that bound.
- ``PIECEWISE``: an odd function as a short series below a threshold and a formula above it,
  the piece chosen by an exact mask (``poot_planner.legalize.odd``): the bound is derived on
  each piece alone and is relative plus absolute (relative where the value is FP16-normal).
- ``SATURATING``: a formula on a clamped operand (``poot_planner.legalize.logistic``: xdna2's
  sigmoid), exact in exact arithmetic; its bound is derived over the whole line, the clamped
  tails included, and is absolute plus relative. The running error analysis carries it as one
  step under that bound (``carried``).
- ``SENTINEL``: the specification's mask-sentinel rule carried to a product: a mask value too
  large for FP16 saturates to the sentinel (+-65504), which is all an additive mask needs.
- ``SCALED_SUM``: a range rewrite, made where the equation is admitted too (``admitted_too``):
  ``reduce_sum(x) * 2^k`` (k < 0) as ``reduce_sum(x * 2^k)``, so a sum FP16 cannot hold whose
  scaled value it can (LayerNorm's sum of squares over 512 features, ~1.3e5, times 1/512) stays
  in range. Scaling by a power of two is exact in FP16 unless the product underflows: a scaled
  summand in the subnormal range loses at most half the smallest subnormal (2^-25), so over n
  summands the sum moves by at most n 2^-25 (``poot_planner.legalize.bounds``). A scale that is
  not a power of two (BERT's 1/768) is not moved: each scaled summand would round (2^-11
  relative), which bounds the sum only relative to ``sum |x_i|``, not to the result: fine for a
  sum of squares, unbounded relative to a mean of signed values that cancel, and not an
  absolute bound this table can state.

The step functions need an F16 operand: ``x - y`` of two distinct FP16 values (with subnormals,
which the NPU's contracts promise) is at least 2^-24 in magnitude, so ``x - y >= 2^-24`` is
``x > y`` exactly, and amplifying ``max(d, 0)`` by 2^24 (two exact power-of-two steps, clamped)
gives exactly 1 for ``d > 0`` and 0 otherwise. These rules are on a target that narrows F32 to
F16 (intel-npu4), so they run on F16 operands; on F32 they are exact unless ``0 < |x - y| <
2^-24``, values FP16 cannot tell apart anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from poot_ir import Eqn, Prim

from poot_planner.emit import Emit, RuleContext
from poot_planner.legalize.expanders import (
    expand_abs,
    expand_convert,
    expand_counter_convert,
    expand_eq,
    expand_gt,
    expand_integer_compare,
    expand_mask_scale,
    expand_min,
    expand_nan_guard,
    expand_predicate_eq,
    expand_recip,
    expand_scaled_sum,
    expand_select,
)
from poot_planner.legalize.logarithm import (
    SOFTPLUS_REMAINDER,
    SOFTPLUS_TOP,
    expand_log,
    expand_softplus,
)
from poot_planner.legalize.logistic import expand_sigmoid_select
from poot_planner.legalize.odd import ERF, TANH, OddFunction, expand_erf, expand_tanh
from poot_planner.legalize.windows import (
    expand_conv_as_matmul,
    expand_window_channels_first,
    expand_window_reduction,
)

__all__ = ["RULES", "Numerics", "Rule", "RuleContext", "rules_for"]


class Numerics(Enum):
    IDENTITY = "exact identity"
    APPROXIMATION = "approximation"
    SENTINEL = "saturated sentinel"
    REDUCED = "range-reduced approximation"
    SCALED_SUM = "power-of-two scale moved into the sum"
    PIECEWISE = "piecewise approximation"
    SATURATING = "clamped approximation, saturating as the function does"


#: Emits the decomposition of the equation (its last step writing the equation's output) and
#: returns True, or returns False when the rule does not apply to this equation.
Expander = Callable[[Emit, Eqn, RuleContext], bool]


@dataclass(frozen=True, slots=True)
class Rule:
    prim: Prim
    target: str
    name: str
    decomposition: str
    numerics: Numerics
    expand: Expander
    #: error of the formula in exact arithmetic over its whole domain (APPROXIMATION only);
    #: relative to the function's value when ``relative``, whose derived bound is then fitted
    #: as absolute plus relative (``poot_planner.legalize.bounds``). For a PIECEWISE rule, the
    #: whole rewrite's worst error in the device dtype, absolute: the running error analysis
    #: (``poot_planner.error_bounds``) adds this figure at the rewrite's last step and does not
    #: see the FP16 roundings of its exact steps (the series' adds and products), so it needs
    #: them inside; the relative bound near zero is the derivation's
    #: (``poot_planner.legalize.bounds``), checked to be inside this figure by a test
    approximation: float = 0.0
    source: str = ""
    relative: bool = False
    #: the function the running error analysis carries the rewrite as, one step under its
    #: derived bound (``poot_planner.error_bounds``): "log", "softplus" or "sigmoid"; "" carries it step
    #: by step
    carried: str = ""
    #: the operand's range the bound is derived on, when narrower than the device dtype's
    #: (beyond it the rewrite is refused in the graph)
    domain: tuple[float, float] | None = None
    #: tried on every matching equation, admitted or not (a range rewrite: the admitted form
    #: may overflow FP16 at run time where the rewritten one does not)
    admitted_too: bool = False
    #: the two pieces of a ``PIECEWISE`` rule (``poot_planner.legalize.odd``)
    piecewise: OddFunction | None = None


_I, _A, _S = Numerics.IDENTITY, Numerics.APPROXIMATION, Numerics.SENTINEL
_R, _P = Numerics.REDUCED, Numerics.PIECEWISE
INTEL, XDNA, HOST = "intel-npu4", "xdna2", "host-cpu"

RULES: tuple[Rule, ...] = (
    Rule(
        Prim.TANH,
        INTEL,
        "tanh by a series near zero and exp",
        "sign(x) m, m = a (1 - a^2/3 + 2a^4/15 - ...), ten terms, for a = |x| <= 3/4, else "
        "(1 - exp(-2a)) / (1 + exp(-2a)), a clamped at 9 (the piece chosen by an exact 0/1 mask)",
        _P,
        expand_tanh,
        # the whole rewrite's worst error in FP16 (its derived abs + rel at |tanh| <= 1); the
        # series' remainder at 3/4 is 3.0e-7, 1 - tanh(9) 3e-8
        approximation=0.0051,
        source="Taylor series; identity; clamp error 1 - tanh(9)",
        piecewise=TANH,
    ),
    Rule(
        Prim.ERF,
        INTEL,
        "erf by a series near zero and Abramowitz-Stegun 7.1.26",
        "sign(x) m, m = 2/sqrt(pi) a (1 - a^2/3 + a^4/10 - ...), ten terms, for a = |x| <= 1, else "
        "1 - t P(t) exp(-a^2), t = 1 / (1 + 0.3275911 a), a clamped at 4 (the piece chosen by an "
        "exact 0/1 mask)",
        _P,
        expand_erf,
        # the whole rewrite's worst error in FP16 (its derived abs + rel at |erf| <= 1); A&S's
        # 1.5e-7, the clamp's 1.5e-8 and the series' remainder at 1 (1.5e-8) are inside it
        approximation=0.0041,
        source="Taylor series; Abramowitz and Stegun 7.1.26, |eps| <= 1.5e-7",
        piecewise=ERF,
    ),
    Rule(
        Prim.LOG,
        INTEL,
        "softplus as ONNX writes it, stably",
        "log(exp(v) + 1) as max(v, 0) + 2u (1 + u^2/3 + ... + u^8/9), u = g / (g + 2), "
        "g = exp(-|v|); v > 88.6875 (F32's exp overflows: the oracle's +inf) made NaN by an "
        "FP16 overflow, flagged in the graph",
        _A,
        expand_softplus,
        approximation=SOFTPLUS_REMAINDER,
        source="identity log(1 + g) = 2 atanh(g / (2 + g)); remainder <= u^10 / (11 (1 - u^2)) "
        "relative, u <= 1/3",
        relative=True,
        carried="softplus",
        domain=(-math.inf, SOFTPLUS_TOP),
    ),
    Rule(
        Prim.LOG,
        INTEL,
        "log by exact range reduction",
        "x = m 2^k by ten exact 0/1-mask stages (m in [0.707, 1.414)), then "
        "k 11/16 + (k (ln2 - 11/16) + 2u (1 + u^2/3 + u^4/5)), u = (m - 1)/(m + 1); "
        "x <= 0 made NaN by + (sqrt(x) / x) 0, flagged in the graph",
        _R,
        expand_log,
        source="atanh series, remainder <= 2|u|^7 / (7 (1 - u^2)) (3.7e-6 relative)",
        carried="log",
    ),
    Rule(Prim.RECIP, INTEL, "recip as a division", "1 / x", _I, expand_recip),
    Rule(Prim.MIN, INTEL, "min via max", "-max(-a, -b)", _I, expand_min),
    Rule(Prim.ABS, INTEL, "abs via max", "max(x, -x)", _I, expand_abs),
    Rule(Prim.EQ, INTEL, "eq via ge", "-max(a - b, b - a) >= 0", _I, expand_eq),
    Rule(Prim.GT, INTEL, "gt via ge", "a - b >= 2^-24 (exact on F16)", _I, expand_gt),
    Rule(
        Prim.SELECT,
        INTEL,
        "select on a comparison's mask",
        "x m + y (1 - m), m the comparison as 0/1 by exact clamped steps",
        _I,
        expand_select,
    ),
    Rule(
        Prim.EQ,
        INTEL,
        "a comparison's predicate against a literal",
        "m >= 1 (p == True) or -m >= 0 (p == False), m the comparison as 0/1 (an isnan guard)",
        _I,
        expand_predicate_eq,
    ),
    Rule(
        Prim.CONVERT,
        INTEL,
        "a comparison's predicate to float",
        "m, the comparison as 0/1 by exact clamped steps",
        _I,
        expand_convert,
    ),
    Rule(
        Prim.CONVERT,
        INTEL,
        "a counter to float",
        "iota in the float dtype (axis <= 2049: FP16's exact integers)",
        _I,
        expand_counter_convert,
    ),
    *(
        Rule(
            p,
            INTEL,
            f"integer {p.value} of counters",
            "the same integers in F32 (F16 once narrowed); x > y as x - y >= 1",
            _I,
            expand_integer_compare,
        )
        for p in (Prim.GE, Prim.GT, Prim.EQ)
    ),
    Rule(
        Prim.MUL,
        INTEL,
        "mask scale saturates",
        "v * L (|L| > 65504, read only additively) as v * sign(L) 65504",
        _S,
        expand_mask_scale,
    ),
    Rule(
        Prim.SELECT,
        XDNA,
        "sigmoid's select through exp and div",
        "select(x >= 0, r, e r), e = exp(-|x|), r = 1 / (1 + e) as g / (1 + g), "
        "g = exp(clamp(x, -104, 88)): every finite x (NaN, +inf and subnormal x flagged on the "
        "device), exactly 0 below -87.34 and exactly 1 above 17.33 as float32's sigmoid",
        Numerics.SATURATING,
        expand_sigmoid_select,
        source="identity: e^x / (1 + e^x) = 1 / (1 + e^-x); exp flushes below FLT_MIN",
        carried="sigmoid",
    ),
    Rule(
        Prim.REDUCE_SUM,
        INTEL,
        "power-of-two scale into the sum",
        "reduce_sum(x) * 2^k (k < 0, its only reader) as reduce_sum(x * 2^k)",
        Numerics.SCALED_SUM,
        expand_scaled_sum,
        source="exact scaling; n 2^-25 for summands that underflow",
        admitted_too=True,
    ),
    Rule(
        Prim.SELECT,
        XDNA,
        "a NaN guard on a value the device proves not NaN",
        "select(isnan(x), c, x) as max(x, x): x wherever x is not NaN, the domain of max, whose "
        "device guard refuses a NaN x (the comparisons feeding the select, unread then, go too)",
        _I,
        expand_nan_guard,
    ),
    *(  # the OpenVINO graph targets: MaxPool and AvgPool window [N, C, spatial...]
        Rule(
            prim,
            target,
            "a channels-last window, transposed to channels-first",
            "transpose the window's two untouched axes first ([N, H, W, C] to [N, C, H, W]), "
            "the same window over the rest, transpose back",
            _I,
            expand_window_channels_first,
        )
        for target in (INTEL, HOST)
        for prim in (Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX)
    ),
    Rule(Prim.MIN, XDNA, "min via max", "-max(-a, -b)", _I, expand_min),
    Rule(Prim.ABS, XDNA, "abs via max", "max(x, -x)", _I, expand_abs),
    Rule(
        Prim.CONV,
        XDNA,
        "a convolution as a matmul of its windows",
        "each kernel tap's pixels a strided slice of the zero-padded input, side by side: "
        "(N H W, T C/G) rows @ the kernel as a (T C/G, O/G) matrix per group (a batched "
        "matmul), the rows back to [N, O, H, W] (the same terms); not input dilation",
        _I,
        expand_conv_as_matmul,
    ),
    Rule(
        Prim.REDUCE_WINDOW_SUM,
        XDNA,
        "a window sum as a sum of its windows",
        "each window tap's elements a strided slice of the zero-padded input, stacked on a new "
        "axis and reduce_sum over it (the same terms)",
        _I,
        expand_window_reduction,
    ),
    Rule(
        Prim.REDUCE_WINDOW_MAX,
        XDNA,
        "a window maximum as a maximum of its windows",
        "each window tap's elements a strided slice of the input padded with its edge elements "
        "(every window of unit dilation holds the edge it reaches past), stacked on a new axis "
        "and reduce_max over it",
        _I,
        expand_window_reduction,
    ),
)


def rules_for(target: str, prim: Prim) -> tuple[Rule, ...]:
    return tuple(r for r in RULES if r.target == target and r.prim is prim)
