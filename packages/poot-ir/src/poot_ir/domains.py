"""The domains of numerical contracts: the operands a contract is promised on.

Each domain is written once, here, with everything any layer asks of it: its wording
(``describe``: ``poot plan``, docs/features.md, ``DomainError``), membership (``inside``), its
bounds as data at a dtype (``bounds``: the host's check, the planner's range analysis and the
XDNA2 kernels' C predicate are all made from them) and values at and just past its edges
(``edges``: the conformance suite and the acceptance harness). Every domain is a closed
interval of values, NaN inside or not; ``FiniteNormalResult`` also constrains the result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from poot_ir.dtypes import DType

__all__ = [
    "AnyInput",
    "Bf16Contraction",
    "Domain",
    "DomainBounds",
    "DomainEdges",
    "FiniteInputs",
    "FiniteNormalResult",
    "Interval",
    "NotNaN",
    "PositiveNormal",
]

Array = np.ndarray[Any, np.dtype[Any]]


#: The largest finite and the smallest positive normal value of each float dtype.
_FLOAT_LIMITS = {
    DType.F32: (3.4028234663852886e38, 2.0**-126),
    DType.F16: (65504.0, 2.0**-14),
    DType.BF16: (3.3895313892515355e38, 2.0**-126),
}


def _limits(dtype: DType | np.dtype[Any]) -> tuple[float, float]:
    """``(largest finite, smallest positive normal)`` of ``dtype``; ``(inf, 0)`` for a dtype
    with no such limits (an integer, or float64 which no device stores)."""
    dt = dtype if isinstance(dtype, DType) else DType.from_numpy(dtype)
    if dt is not None and dt in _FLOAT_LIMITS:
        return _FLOAT_LIMITS[dt]
    if not isinstance(dtype, DType) and dtype.kind == "f":
        fi = np.finfo(dtype)
        return float(fi.max), float(fi.smallest_normal)
    return math.inf, 0.0


def _f64(x: Any) -> Array:
    # widening a signalling NaN raises "invalid" in numpy; the value is still a NaN
    with np.errstate(invalid="ignore"):
        return np.asarray(x).astype(np.float64)


@dataclass(frozen=True, slots=True)
class DomainBounds:
    """A domain as data, at one dtype: an operand ``x`` is inside when ``lo <= x <= hi`` (both
    closed; an infinity is inside only when a bound is infinite), or when it is NaN and ``nan``.

    ``largest`` and ``smallest_normal`` are the dtype's limits, so a reader can tell the
    domains' facts apart without naming them: ``finite`` (``[-largest, largest]``),
    ``positive_normal`` (``[smallest_normal, largest]``), ``not_nan`` (no bound but NaN out),
    ``anything`` (NaN in); otherwise an explicit interval."""

    lo: float
    hi: float
    nan: bool
    largest: float
    smallest_normal: float

    @property
    def anything(self) -> bool:
        return self.nan and self.lo == -math.inf and self.hi == math.inf

    @property
    def not_nan(self) -> bool:
        return not self.nan and self.lo == -math.inf and self.hi == math.inf

    @property
    def finite(self) -> bool:
        return not self.nan and self.lo == -self.largest and self.hi == self.largest

    @property
    def positive_normal(self) -> bool:
        return not self.nan and self.lo == self.smallest_normal and self.hi == self.largest

    def contains(self, x: Array) -> Array:
        """The elementwise mask of ``x`` (float64) inside."""
        with np.errstate(invalid="ignore"):
            ok = (x >= self.lo) & (x <= self.hi)
        return ok | np.isnan(x) if self.nan else ok


@dataclass(frozen=True, slots=True)
class DomainEdges:
    """Values of one dtype at a domain's edges, for everything that tests a contract there
    (``poot acceptance``, the conformance suite, the device tests; ``poot_ir.edges`` plants them
    in samples). ``inside`` reaches each edge from inside (its limits, zeros of both signs, the
    largest finite value where the domain allows it, a few ordinary values); ``extremes`` are
    further values inside at the ends of the dtype (the smallest normal, underflowing products,
    magnitudes whose results overflow); ``past`` is just past each edge (empty: nothing is
    outside). Every value is representable in the dtype: no finite value overflows to infinity.
    ``poot acceptance`` runs ``inside`` (every device must meet its contract there); the test
    suites add ``extremes``."""

    inside: tuple[float, ...]
    extremes: tuple[float, ...]
    past: tuple[float, ...]

    @property
    def every(self) -> tuple[float, ...]:
        """``inside`` and ``extremes``: every value inside the domain."""
        return self.inside + self.extremes


class _Domain:
    __slots__ = ()

    #: Whether the domain also constrains the result (guarded on the result itself).
    on_result: ClassVar[bool] = False

    def describe(self) -> str:
        """The domain as a phrase (``[-87, 88]``, ``positive normal``): the one wording."""
        raise NotImplementedError

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        """This domain's operands of ``dtype`` as data (``DomainBounds``)."""
        raise NotImplementedError

    def edges(self, dtype: DType) -> DomainEdges:
        """Values of ``dtype`` at and just past this domain's edges."""
        raise NotImplementedError

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        """``n`` ordinary float64 values from inside this domain (a sample's bulk, where
        ``poot_ir.edges`` plants the edges)."""
        raise NotImplementedError

    def inside(self, operands: Sequence[Any], result: Any) -> Array:
        """A boolean mask, of the result's shape, of the elements inside this domain. Operands
        broadcast against the result (a scalar literal operand is a 0-d array)."""
        shape = np.shape(result)
        mask = np.ones(shape, dtype=bool)
        for op in operands:
            x = np.asarray(op)
            bounds = self.bounds(x.dtype)
            if bounds.anything:  # every value, NaN included: nothing to test (or to widen)
                continue
            mask &= _to_result(bounds.contains(_f64(x)), shape)
        if self.on_result:
            r = np.asarray(result)
            y = _f64(r)
            normal = _limits(r.dtype)[1]
            mask &= np.isfinite(y) & ((y == 0) | (np.abs(y) >= normal))
        return mask


def _bounds(lo: float, hi: float, nan: bool, dtype: DType | np.dtype[Any]) -> DomainBounds:
    largest, normal = _limits(dtype)
    return DomainBounds(lo, hi, nan, largest, normal)


def _fit(values: Sequence[float], dtype: DType) -> tuple[float, ...]:
    """The finite ``values`` that ``dtype`` holds (none overflows to infinity)."""
    largest, _ = _limits(dtype)
    return tuple(v for v in values if abs(v) <= largest)


def _signs(rng: np.random.Generator, n: int) -> Array:
    return rng.choice(np.array([-1.0, 1.0]), n)


@dataclass(frozen=True, slots=True)
class FiniteNormalResult(_Domain):
    """Finite operands whose exact result (the oracle's) is finite and normal; a zero result
    counts (an exact cancellation), a subnormal one does not."""

    on_result: ClassVar[bool] = True

    def describe(self) -> str:
        return "finite operands, finite normal result"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        largest, _ = _limits(dtype)
        return _bounds(-largest, largest, False, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        # operands whose results leave the domain (exp(1e10)) sit in ``extremes``: a comparison
        # masks them out with ``inside``, as it must for any input
        inside = (0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 100.0, -100.0)
        return DomainEdges(inside, _fit((1e10, 3e38, -3e38, 1e-38), dtype), (math.inf,))

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        return _signs(rng, n) * np.exp2(rng.uniform(-20, 20, n))


@dataclass(frozen=True, slots=True)
class Interval(_Domain):
    """Every operand within ``[lo, hi]`` (exp: [-87, 88])."""

    lo: float
    hi: float

    def describe(self) -> str:
        return f"[{self.lo:g}, {self.hi:g}]"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        return _bounds(self.lo, self.hi, False, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        lo, hi = self.lo, self.hi
        inside = [v for v in (lo, hi, 0.0, -0.0, lo / 2, hi / 2, 1.0) if lo <= v <= hi]
        small = [v for v in (1e-30, -1e-30) if lo <= v <= hi]
        largest, _ = _limits(dtype)
        # an infinite end (exp's -inf): the dtype's largest magnitude on that side is its limit
        # inside, with a value the function saturates at (-104: exp is 0 there in F32), and
        # nothing is past it
        for sign, end in ((-1.0, lo), (1.0, hi)):
            if math.isinf(end):
                inside += [sign * largest, sign * 104.0]
        f = np.dtype(dtype.numpy).type
        ends = ((hi, math.inf), (lo, -math.inf))
        # a bound past the dtype's range (2^50 in F16) is its infinity: only that is past it;
        # an infinite end has nothing past it
        with np.errstate(over="ignore"):
            past = tuple(float(np.nextafter(f(e), f(d))) for e, d in ends if math.isfinite(e))
        return DomainEdges(_fit(inside, dtype), _fit(small, dtype), past)

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        # an infinite end stands in as a finite one 2 (|other end| + 8) away: uniform samples
        # over an infinite interval are not numbers
        lo, hi = self.lo, self.hi
        if math.isinf(lo):
            lo = hi - 2 * (abs(hi) + 8) if math.isfinite(hi) else -1e6
        if math.isinf(hi):
            hi = lo + 2 * (abs(lo) + 8)
        return rng.uniform(lo, hi, n)


@dataclass(frozen=True, slots=True)
class PositiveNormal(_Domain):
    """Every operand a finite positive normal number of its dtype (F32: >= 1.17549435e-38)."""

    def describe(self) -> str:
        return "positive normal"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        largest, normal = _limits(dtype)
        return _bounds(normal, largest, False, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        big, tiny = _limits(dtype)
        inside = _fit((tiny, 1.0, 2.0, 4.0, tiny * 3, big), dtype)
        return DomainEdges(inside, _fit((2.0**40,), dtype), (-1.0, 0.0, tiny / 2))

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        big, tiny = _limits(dtype)
        return np.exp2(rng.uniform(np.log2(tiny), np.log2(big) - 1, n))


@dataclass(frozen=True, slots=True)
class FiniteInputs(_Domain):
    """Every operand finite."""

    def describe(self) -> str:
        return "finite operands"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        largest, _ = _limits(dtype)
        return _bounds(-largest, largest, False, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        big, tiny = _limits(dtype)
        inside = (0.0, -0.0, 1.0, -1.0, 4.0, -4.0, 20.0, -20.0, big, -big)
        return DomainEdges(_fit(inside, dtype), (tiny, 1e-30), (math.inf, -math.inf))

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        return _signs(rng, n) * np.exp2(rng.uniform(-12, 8, n))


@dataclass(frozen=True, slots=True)
class NotNaN(_Domain):
    """No operand is NaN."""

    def describe(self) -> str:
        return "operands not NaN"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        return _bounds(-math.inf, math.inf, False, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        big, _ = _limits(dtype)
        inside = (0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, big, -big)
        return DomainEdges(inside, (), (math.nan,))

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        return rng.uniform(-100, 100, n)


@dataclass(frozen=True, slots=True)
class AnyInput(_Domain):
    """Everything, NaN and infinities included."""

    def describe(self) -> str:
        return "any input"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        return _bounds(-math.inf, math.inf, True, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        _, tiny = _limits(dtype)
        return DomainEdges((0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan), (tiny / 4,), ())

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        return rng.uniform(-100, 100, n)


@dataclass(frozen=True, slots=True)
class Bf16Contraction(_Domain):
    """The operands of a contraction ``a @ b`` whose device rounds them to bf16 (RNE): every
    operand finite and within bf16's largest finite value (3.3895e38, so its rounding stays
    finite). Element ``(..., i, j)`` of the result is inside when row ``i`` of ``a`` and column
    ``j`` of ``b`` are."""

    def describe(self) -> str:
        return "finite operands within bf16's range"

    def bounds(self, dtype: DType | np.dtype[Any]) -> DomainBounds:
        largest = min(_limits(dtype)[0], _FLOAT_LIMITS[DType.BF16][0])
        return _bounds(-largest, largest, False, dtype)

    def edges(self, dtype: DType) -> DomainEdges:
        big = min(_limits(dtype)[0], _FLOAT_LIMITS[DType.BF16][0])
        f = np.dtype(dtype.numpy).type
        # 1 + 2^-8 and 1 + 3 x 2^-8 are bf16 ties (to 1 and to 1 + 2^-6: even), 2^-126 the
        # smallest normal, 2^-70 a term whose product with another underflows
        ties = (1.0 + 2.0**-8, -(1.0 + 3 * 2.0**-8))
        inside = (0.0, -0.0, 1.0, -1.0, *ties, 4.0, big, -big)
        with np.errstate(over="ignore"):  # a narrower dtype's largest: the next is inf
            up = float(np.nextafter(f(big), f(math.inf)))
        past = tuple(dict.fromkeys((up, math.inf, -math.inf, math.nan)))
        return DomainEdges(_fit(inside, dtype), _fit((2.0**-126, 2.0**-70, 1e-40), dtype), past)

    def ordinary(self, dtype: DType, n: int, rng: np.random.Generator) -> Array:
        return _signs(rng, n) * np.exp2(rng.uniform(-8, 4, n))

    def inside(self, operands: Sequence[Any], result: Any) -> Array:
        if len(operands) != 2 or np.ndim(operands[0]) < 2 or np.ndim(operands[1]) < 2:
            return _Domain.inside(self, operands, result)
        a, b = (np.asarray(x) for x in operands)
        rows = np.all(self.bounds(a.dtype).contains(_f64(a)), axis=-1)
        cols = np.all(self.bounds(b.dtype).contains(_f64(b)), axis=-2)
        return np.broadcast_to(rows[..., :, None] & cols[..., None, :], np.shape(result))


Domain = (
    FiniteNormalResult
    | Interval
    | PositiveNormal
    | FiniteInputs
    | NotNaN
    | AnyInput
    | Bf16Contraction
)


def _to_result(ok: Array, shape: tuple[int, ...]) -> Array:
    """An operand's mask as a mask of the result: elementwise when it broadcasts; a row's
    elements all inside for a last-axis reduction (operand ``shape + (cols,)``); otherwise (a
    gather table, a transpose) one verdict for the whole result."""
    try:
        return np.broadcast_to(ok, shape)
    except ValueError:
        pass
    if ok.shape[: len(shape)] == shape:
        rest = math.prod(ok.shape[len(shape) :])  # not -1: numpy cannot infer it when size 0
        return np.asarray(np.all(ok.reshape(*shape, rest), axis=-1))
    return np.broadcast_to(np.all(ok), shape)
