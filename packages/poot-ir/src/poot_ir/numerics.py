"""Numerical contracts as data, a program's published numerics class, and the comparison.
(The domains a contract is promised on are ``poot_ir.domains``, re-exported here.)

A ``Contract`` pairs one primitive with a ``Bound`` (how far a device result may be from the
oracle's) and a ``Domain`` (the operands it is promised on; outside it nothing is promised).
``compare`` checks a device result against the oracle's under a bound, and reports the worst
element. Rules every bound shares:

- NaN where the oracle has NaN matches (under ``BitExact`` the bits must match, payload too);
  NaN or an infinity where the oracle is finite fails at any tolerance; an infinity must match
  exactly (same sign).
- I32 and BOOL results are always compared exactly, whatever the bound.
- A shape or dtype mismatch is a failed comparison with a reason, not an exception.
- Errors are measured at float64: ``|actual - expected|``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import numpy as np

from poot_ir.core import ConvParams, Eqn, Prim, ReduceParams, ReduceWindowParams
from poot_ir.domains import (
    AnyInput,
    Bf16Contraction,
    Domain,
    DomainBounds,
    DomainEdges,
    FiniteInputs,
    FiniteNormalResult,
    Interval,
    NotNaN,
    PositiveNormal,
)
from poot_ir.dtypes import DType

__all__ = [
    "F32_UNIT",
    "AbsRel",
    "AnyInput",
    "Bf16Contraction",
    "BitExact",
    "Bound",
    "Bounded",
    "Comparison",
    "Contract",
    "Derived",
    "Domain",
    "DomainBounds",
    "DomainEdges",
    "Exact",
    "FiniteInputs",
    "FiniteNormalResult",
    "Interval",
    "LargerOperandUlps",
    "NarrowStorage",
    "Normwise",
    "NotNaN",
    "NumericsClass",
    "PositiveNormal",
    "ProductSum",
    "Relative",
    "RoundedTwice",
    "ScaledSum",
    "Unbounded",
    "UnboundedBy",
    "accumulated",
    "compare",
    "larger_operand",
    "looser",
    "product_magnitudes",
    "row_magnitudes",
    "summands",
]

Array = np.ndarray[Any, np.dtype[Any]]

#: The unit in the last place of 1.0 in F32 (2^-23), the unit of the ulp-based bounds.
F32_UNIT = 2.0**-23

# -- bounds -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BitExact:
    """Bit for bit equal. ``signed_zero=False`` when the device does not promise the sign of a
    zero (the Intel NPU's neg of +0 is +0): then +0 and -0 match each other."""

    signed_zero: bool = True


@dataclass(frozen=True, slots=True)
class LargerOperandUlps:
    """``|y - ref| <= ulps * unit * max(|a|, |b|)`` for a binary op on operands ``a``, ``b``."""

    ulps: float
    unit: float = F32_UNIT


@dataclass(frozen=True, slots=True)
class AbsRel:
    """``|y - ref| <= abs + rel * |ref|``."""

    abs: float
    rel: float


@dataclass(frozen=True, slots=True)
class Relative:
    """``|y - ref| <= rel * |ref|``."""

    rel: float


@dataclass(frozen=True, slots=True)
class ScaledSum:
    """An accumulation: ``|y - ref| <= ulps_per_term * n * unit * sum(|terms|)``, ``n`` the
    terms summed into the element. A last-axis sum: ``cols * sum(|x_row|)``
    (``row_magnitudes``); any sum, matmul, convolution or window sum: ``accumulated``."""

    ulps_per_term: float
    unit: float = F32_UNIT


@dataclass(frozen=True, slots=True)
class ProductSum:
    """A contraction ``y = a @ b`` over ``K`` terms whose operands are rounded to a narrower
    type (unit roundoff ``operand_unit``: bf16's 2^-8) with every product exact and the sum
    accumulated in order at unit ``unit`` (an FP32 accumulator: 2^-23, safe whether or not
    its add rounds to nearest), against the oracle's result rounded once to F32::

        |y - ref| <= (2 u_o + u_o^2 + (1 + u_o)^2 gamma_K(unit) + 2^-24) * sum_k |a_ik| |b_kj|

             + (1 + u_o) (1 + gamma_K(unit)) eta (sum_k |a_ik| + sum_k |b_kj|) + K eta^2

             + K x floor

    with ``gamma_K(u) = K u / (1 - K u)`` (Higham, recursive summation); ``eta`` (``operand_floor``)
    the absolute error of rounding an operand below the narrow type's normal range (bf16 keeps
    7 bits down to 2^-133 apart there: half of that, 2^-134), so a subnormal operand's rounding
    (1e-40 becomes 9.18e-41, 8 % off) is carried scaled by its partner's magnitude, a product
    of it with 2^50 being 1e-26 off; and ``floor`` an
    absolute error per term for a product or partial sum below the normal range: 2^-125 holds
    whether the device rounds it (at most 2^-150 each) or flushes it to zero (below 2^-126
    each, the product and the sum), which is not established for aie2p's accumulate. An
    element whose magnitudes sum ``S`` (times that factor) reaches F32's largest finite value
    is promised nothing: a partial sum may overflow where the exact result does not."""

    operand_unit: float
    unit: float = F32_UNIT
    floor: float = 2.0**-125
    operand_floor: float = 2.0**-134

    def factor(self, k: int) -> float:
        """The coefficient of ``S`` for ``K = k`` terms (inf when ``k * unit >= 1``)."""
        uo, ku = self.operand_unit, k * self.unit
        gamma = ku / (1.0 - ku) if ku < 1.0 else float("inf")
        return 2 * uo + uo * uo + (1 + uo) ** 2 * gamma + 2.0**-24

    def gamma(self, k: int) -> float:
        ku = k * self.unit
        return ku / (1.0 - ku) if ku < 1.0 else float("inf")


@dataclass(frozen=True, slots=True)
class RoundedTwice:
    """A sum a device computes as the mean rounded to its type, then times N rounded again
    (the Intel NPU's AvgPool x N): ``|y - ref| <= rel * |ref| + floor * (N + 2)``, ``N`` the
    summands per result (the scale: ``summands``). Against a sum rounded once, the mean's
    rounding is ``N`` times its half ulp, the product's one more: three half ulps relative in
    the normal range (``rel``), and ``N + 2`` halves of the smallest subnormal (``floor``)
    where the mean is subnormal."""

    rel: float
    floor: float


@dataclass(frozen=True, slots=True)
class Normwise:
    """A whole result tensor: ``||y - ref||_2 <= rel * ||ref||_2 + floor * sqrt(n)`` (a
    narrowed graph). ``floor`` is the narrow type's absolute resolution near zero (FP16's
    smallest subnormal, 2^-24): a value it cannot hold is promised no relative accuracy."""

    rel: float
    floor: float = 0.0


@dataclass(frozen=True, slots=True)
class Derived:
    """``|y - ref| <= scale`` elementwise, where ``scale`` is a bound derived for these very
    inputs by a running error analysis (``poot_planner.error_bounds``). An element whose
    derived bound is infinite (an input outside some step's domain) is promised nothing."""


Bound = (
    BitExact
    | LargerOperandUlps
    | AbsRel
    | Relative
    | ScaledSum
    | RoundedTwice
    | Normwise
    | Derived
    | ProductSum
)

#: F32's largest finite value: a contraction whose magnitudes reach it is promised nothing.
_F32_MAX = float(np.finfo(np.float32).max)


def larger_operand(a: Any, b: Any) -> Array:
    """The scale of ``LargerOperandUlps``: ``max(|a|, |b|)`` at float64."""
    return np.maximum(np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64)))


def summands(x: Any, result: Any) -> float:
    """The scale of ``RoundedTwice``: the number of summands of each result element."""
    return float(np.size(x)) / max(float(np.size(result)), 1.0)


def row_magnitudes(x: Any) -> Array:
    """The scale of ``ScaledSum`` for a last-axis sum of ``x``: ``cols * sum(|x_row|)``."""
    x64 = np.asarray(x, np.float64)
    return np.asarray(np.sum(np.abs(x64), axis=-1) * x64.shape[-1])


def product_magnitudes(bound: ProductSum, a: Any, b: Any) -> Array:
    """The allowed error of ``ProductSum`` for ``a @ b`` (batched over the leading axes):
    ``factor(K) * (|a| @ |b|)``, the operands' subnormal rounding scaled by the row and column
    magnitudes, and the floors, at float64; inf where a partial sum could overflow F32."""
    a64, b64 = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    k = a64.shape[-1]
    f, eta = bound.factor(k), bound.operand_floor
    with np.errstate(all="ignore"):
        s = (
            np.matmul(a64, b64)
            if a64.size and b64.size
            else np.zeros(a64.shape[:-1] + b64.shape[-1:])
        )
        rows = a64.sum(axis=-1)[..., :, None]  # sum_k |a_ik|
        cols = b64.sum(axis=-2)[..., None, :]  # sum_k |b_kj|
        subnormal = (1 + bound.operand_unit) * (1 + bound.gamma(k)) * eta * (rows + cols)
        allowed = f * s + subnormal + k * (eta * eta + bound.floor)
    return np.asarray(np.where(s * (1 + f) < _F32_MAX, allowed, np.inf))


def accumulated(eqn: Eqn, operands: Sequence[Any]) -> Array:
    """The scale of ``ScaledSum`` for the accumulating step ``eqn`` on ``operands``: at each
    result element, the number of terms summed into it times the sum of their magnitudes
    (float64). A reduce_sum over any axes, a matmul (terms ``a_ik * b_kj``), a convolution
    (``x * w`` over the window and the group's channels) and a window sum; another primitive is
    ``ValueError``. The count is of the terms really summed: a term of the padding (or of a
    dilation's inserted zeros) adds an exact zero and no rounding, so it is not counted. The
    FP16 contract's FP32 accumulation scales the same figure (``poot_planner.fp16.contract``)."""
    from poot_ir.window import conv64, windows_of  # the oracle's own window arithmetic

    mags = [np.abs(np.asarray(o, np.float64)) for o in operands]
    p = eqn.params
    match eqn.prim:
        case Prim.REDUCE_SUM if isinstance(p, ReduceParams):
            x = mags[0]
            n = int(np.prod([x.shape[a] for a in p.axes]))
            return np.asarray(n * np.sum(x, axis=p.axes))
        case Prim.MATMUL:
            return np.asarray(mags[0].shape[-1] * (mags[0] @ mags[1]))
        case Prim.CONV if isinstance(p, ConvParams):
            shape = eqn.out.type.shape
            # the count depends on the output position alone (how much of the window is
            # padding), times the group's input channels: one channel of ones, one group
            x, w = mags
            ones = conv64(
                np.ones((1, 1, *x.shape[2:])),
                np.ones((1, 1, *w.shape[2:])),
                replace(p, groups=1),
                (1, 1, *shape[2:]),
            )
            return np.asarray(w.shape[1] * ones * conv64(x, w, p, shape))
        case Prim.REDUCE_WINDOW_SUM if isinstance(p, ReduceWindowParams):
            axes = tuple(range(mags[0].ndim, 2 * mags[0].ndim))
            ones = np.sum(windows_of(np.ones_like(mags[0]), p, 0.0), axis=axes)
            return np.asarray(ones * np.sum(windows_of(mags[0], p, 0.0), axis=axes))
    raise ValueError(f"{eqn.prim.value} is no accumulation")


@dataclass(frozen=True, slots=True)
class Contract:
    """What a target promises for one primitive: ``bound`` on ``domain``."""

    primitive: Prim
    bound: Bound
    domain: Domain

    def check(
        self, actual: Any, expected: Any, operands: Sequence[Any], eqn: Eqn | None = None
    ) -> Comparison:
        """Compare a device result with the oracle's inside the domain; the scale the bound
        needs is computed from ``operands`` (a ``ScaledSum``: of the step ``eqn`` when given,
        ``accumulated``; else a last-axis sum's, ``row_magnitudes``)."""
        mask = self.domain.inside(operands, expected)
        scale: Array | None = None
        match self.bound:
            case LargerOperandUlps():
                scale = larger_operand(operands[0], operands[-1])
            case ScaledSum():
                scale = row_magnitudes(operands[0]) if eqn is None else accumulated(eqn, operands)
            case ProductSum():
                scale = product_magnitudes(self.bound, operands[0], operands[1])
                mask = np.asarray(mask, bool) & np.isfinite(scale)
            case RoundedTwice():
                scale = np.asarray(summands(operands[0], expected))
            case _:
                pass
        return compare(actual, expected, self.bound, scale=scale, mask=mask)


# -- numerics classes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exact:
    """Every result bit for bit equal to the oracle's (``signed_zero=False``: except that +0
    and -0 match each other, on a device that does not promise the sign of a zero)."""

    signed_zero: bool = True

    @property
    def bound(self) -> Bound:
        return BitExact(self.signed_zero)


@dataclass(frozen=True, slots=True)
class Bounded:
    """Every element within ``abs + rel * |ref|`` of the oracle's."""

    abs: float
    rel: float

    @property
    def bound(self) -> Bound:
        return AbsRel(self.abs, self.rel)


class UnboundedBy(Enum):
    """Why the analysis can give a result no finite bound for any input."""

    SENTINEL = "a saturated mask sentinel (an F32 literal beyond 65504, carried as +-65504)"


@dataclass(frozen=True, slots=True)
class Unbounded:
    """Result ``result`` of a narrowed program has no finite derived bound: equation ``eqn``
    (``primitive``) of the program makes it so, for ``why``."""

    result: str
    eqn: int
    primitive: str
    why: UnboundedBy

    def __str__(self) -> str:
        return (
            f"{self.result}: unbounded by equation {self.eqn} ({self.primitive}): {self.why.value}"
        )


@dataclass(frozen=True, slots=True)
class NarrowStorage:
    """Computed in a narrower type (FP16). A step's contract is derived, not a figure: each
    result element within the bound the running error analysis derives for the step's very
    inputs (``poot_planner.fp16.contract``: the FP16 rounding of every F32 argument, weight,
    state and literal, and each equation's FP16 rounding as the NPU compiler lowers it, carried
    through the program), checked as ``Derived`` (``poot_engine.verify``). ``unbounded``: the
    results the analysis can give no finite bound, each naming the equation that makes it so.

    ``normwise_rel`` and ``floor`` are the specification's design figure for a short graph
    (normwise, plus the narrow type's floor per element): what ``poot acceptance`` measures and
    reports on hardware, and the bound (``bound``) of values carried between engines, where no
    analysis follows them. The loosest class."""

    normwise_rel: float
    floor: float = 0.0
    unbounded: tuple[Unbounded, ...] = ()

    @property
    def bound(self) -> Bound:
        return Normwise(self.normwise_rel, self.floor)


NumericsClass = Exact | Bounded | NarrowStorage


def looser(a: NumericsClass, b: NumericsClass) -> NumericsClass:
    """The looser of two classes (Exact < Bounded < NarrowStorage; within a kind, the larger
    figures). An ordering for publishing, not an error-propagation rule."""
    match a, b:
        case Exact(), Exact():
            return a if not a.signed_zero else b
        case Exact(), _:
            return b
        case _, Exact():
            return a
        case Bounded(), Bounded():
            return Bounded(max(a.abs, b.abs), max(a.rel, b.rel))
        case NarrowStorage(), NarrowStorage():
            return NarrowStorage(
                max(a.normwise_rel, b.normwise_rel),
                max(a.floor, b.floor),
                a.unbounded + tuple(u for u in b.unbounded if u not in a.unbounded),
            )
        case NarrowStorage(), _:
            return a
        case _:
            return b


# -- comparison -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Comparison:
    """The outcome of ``compare``. ``index`` is the worst element (the one with the largest
    error relative to its bound; a failing element first), or None when nothing was compared
    or the shapes differ. ``error`` and ``allowed`` are at that element (for ``Normwise``: the
    norms, with the largest elementwise difference as the reported element)."""

    ok: bool
    bound: Bound
    compared: int
    index: tuple[int, ...] | None = None
    actual: float | None = None
    expected: float | None = None
    error: float = 0.0
    allowed: float = 0.0
    reason: str = ""

    @property
    def error_ratio(self) -> float:
        """Worst error over its bound: 0 is exact, above 1 fails (inf: no tolerance covers it)."""
        if self.error == 0:
            return 0.0
        return self.error / self.allowed if self.allowed > 0 else float("inf")

    def __str__(self) -> str:
        head = "ok" if self.ok else "FAILED"
        if self.index is None:
            return f"{head}: {self.reason or 'nothing compared'} [{self.bound}]"
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"{head}: worst element {self.index}: actual {self.actual!r}, expected "
            f"{self.expected!r}, error {self.error:.3g} vs allowed {self.allowed:.3g} "
            f"(ratio {self.error_ratio:.3g}){why}; {self.compared} element(s) compared "
            f"[{self.bound}]"
        )


def _bits(x: Array) -> Array:
    dt = DType.from_numpy(x.dtype)
    return x.view(dt.bits_dtype) if dt is not None and dt.is_float else x


def compare(
    actual: Any,
    expected: Any,
    bound: Bound,
    *,
    scale: Any = None,
    mask: Any = None,
) -> Comparison:
    """Compare ``actual`` with the oracle's ``expected`` under ``bound`` (see the module).

    ``scale`` is the bound's reference magnitude, required by ``LargerOperandUlps``
    (``larger_operand``) and ``ScaledSum`` (``row_magnitudes``); ``mask`` selects the elements
    to compare (a domain's ``inside``), all of them when None.
    """
    y, ref = np.asarray(actual), np.asarray(expected)
    if y.shape != ref.shape or y.dtype != ref.dtype:
        return Comparison(
            False,
            bound,
            0,
            reason=f"expected {ref.dtype}{list(ref.shape)}, got {y.dtype}{list(y.shape)}",
        )
    m = (
        np.ones(ref.shape, bool)
        if mask is None
        else np.broadcast_to(np.asarray(mask, bool), ref.shape)
    )
    compared = int(np.count_nonzero(m))
    dt = DType.from_numpy(ref.dtype)
    exact = isinstance(bound, BitExact) or dt is None or not dt.is_float
    if isinstance(bound, Derived):
        if scale is None:
            raise ValueError("Derived needs the derived bound as its scale")
        promised = np.isfinite(np.broadcast_to(np.asarray(scale, np.float64), ref.shape))
        m = m & promised
        compared = int(np.count_nonzero(m))
    if (
        isinstance(bound, LargerOperandUlps | ScaledSum | ProductSum | RoundedTwice)
        and scale is None
    ):
        raise ValueError(f"{bound} needs a scale (larger_operand or row_magnitudes)")
    y64, r64 = y.astype(np.float64), ref.astype(np.float64)
    with np.errstate(all="ignore"):
        err = np.abs(y64 - r64)
        y_nan, r_nan = np.isnan(y64), np.isnan(r64)
        r_inf = np.isinf(r64)
        if exact:
            if isinstance(bound, BitExact) and not bound.signed_zero and dt is not None:
                same = (_bits(y) == _bits(ref)) | ((y64 == 0) & (r64 == 0))
            else:
                same = _bits(y) == _bits(ref) if dt is not None else y == ref
            allowed = np.zeros(ref.shape)
            bad = ~same
            err = np.where(bad, np.where(np.isfinite(err), err, np.inf), 0.0)
            err = np.where(bad & (err == 0), np.inf, err)  # same value, other bits
        else:
            match bound:
                case AbsRel(abs=a, rel=rel):
                    allowed = a + rel * np.abs(r64)
                case Relative(rel=rel):
                    allowed = rel * np.abs(r64)
                case LargerOperandUlps(ulps=u, unit=unit):
                    allowed = np.broadcast_to(u * unit * np.asarray(scale, np.float64), ref.shape)
                case ScaledSum(ulps_per_term=u, unit=unit):
                    allowed = np.broadcast_to(u * unit * np.asarray(scale, np.float64), ref.shape)
                case ProductSum():
                    allowed = np.broadcast_to(np.asarray(scale, np.float64), ref.shape)
                case RoundedTwice(rel=rel, floor=fl):
                    n = np.asarray(scale, np.float64)
                    allowed = rel * np.abs(r64) + fl * (n + 2.0)
                case Derived():
                    allowed = np.where(
                        m, np.broadcast_to(np.asarray(scale, np.float64), ref.shape), 0.0
                    )
                case Normwise():
                    allowed = np.zeros(ref.shape)
                case BitExact():  # handled above
                    raise AssertionError
            special = r_nan | r_inf | y_nan | np.isinf(y64)
            special_ok = (r_nan & y_nan) | (r_inf & (y64 == r64))
            err = np.where(special, np.where(special_ok, 0.0, np.inf), err)
            allowed = np.where(special, 0.0, allowed)
            bad = err > allowed
        err = np.where(m, err, 0.0)
        bad = bad & m
        if isinstance(bound, Normwise):
            return _normwise(bound, y, ref, y64, r64, err, m, compared)
        ratio = np.where(
            err == 0, 0.0, np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1), np.inf)
        )
        ratio = np.where(bad, np.maximum(ratio, np.nextafter(1.0, 2.0)), ratio)
    if compared == 0:
        return Comparison(True, bound, 0, reason="no element inside the domain")
    flat = int(np.argmax(np.where(m, ratio, -1.0)))
    at = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
    reason = ""
    if bad[at] and (r_nan[at] or y_nan[at] or r_inf[at] or np.isinf(y64[at])):
        reason = "NaN or infinity mismatch"
    elif bad[at] and exact:
        reason = "bits differ"
    return Comparison(
        ok=not bool(bad.any()),
        bound=bound,
        compared=compared,
        index=at,
        actual=float(y64[at]),
        expected=float(r64[at]),
        error=float(err[at]),
        allowed=float(allowed[at]),
        reason=reason,
    )


def _normwise(
    bound: Normwise, y: Array, ref: Array, y64: Array, r64: Array, err: Array, m: Array, n: int
) -> Comparison:
    finite = np.isfinite(err)
    if n == 0:
        return Comparison(True, bound, 0, reason="no element inside the domain")
    if not finite[m].all():
        flat = int(np.argmax(np.where(m & ~finite, 1, 0)))
        at = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
        return Comparison(
            False,
            bound,
            n,
            at,
            float(y64[at]),
            float(r64[at]),
            float("inf"),
            0.0,
            "NaN or infinity mismatch",
        )
    diff = float(np.sqrt(np.sum(np.where(m, err, 0.0) ** 2)))
    ref_finite = np.where(m & np.isfinite(r64), r64, 0.0)
    allowed = bound.rel * float(np.sqrt(np.sum(ref_finite**2))) + bound.floor * float(np.sqrt(n))
    flat = int(np.argmax(np.where(m, err, -1.0)))
    at = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
    return Comparison(
        diff <= allowed,
        bound,
        n,
        at,
        float(y64[at]),
        float(r64[at]),
        diff,
        allowed,
        f"normwise: largest elementwise difference {float(err[at]):.3g}",
    )
