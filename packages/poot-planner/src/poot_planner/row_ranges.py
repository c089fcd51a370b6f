"""Where a device's normalized row lies whatever its operands' errors: the range of a
LayerNorm's or RMSNorm's normalized value and of a max-subtracted softmax, derived from the
steps' contracts.

The running error analysis (``poot_planner.error_bounds``) carries each operand's error through
each step, first order. Through a normalization that promises nothing once the errors reaching
it are as large as the row's spread: the variance's error exceeds the variance and the divide
by its square root has no bound. Yet the device's normalized row is bounded whatever its
operands are, by the arithmetic of the row alone, so ``|device - oracle| <= max(hi - y, y - lo)``
holds at every element ``y`` of the oracle's row: a finite bound the analysis takes when it is
the smaller.

Normalized value ``o = d / sqrt(c * sum(d * d) + eps)`` (``c`` the literal scale, ``1/n`` for
a mean; ``eps > 0`` a literal): each step on non-negative operands is within a relative ``rho``
and an absolute ``a`` of its exact value (its contract plus the oracle's own rounding against
exact arithmetic, below), so with ``K`` the product of the ``(1 - rho)`` of the steps up to the
add and ``A`` their absolute parts (each subnormal result flushed or rounded: ``2^-126``)::

    w = device(c * sum(d_j^2) + eps) >= K (c d_i^2 + eps) - A = K c d_i^2 + W,  W = K eps - A
    |o_i| <= (1 + rho_div) |d_i| / ((1 - rho_sqrt) sqrt(w) - a_sqrt) + a_div
          <= (1 + rho_div) / ((1 - rho_sqrt) sqrt(K c) (1 - a_sqrt / ((1 - rho_sqrt) sqrt(W))))
             + a_div                                                       (= hi = -lo)

about ``sqrt(n)`` for a mean: whatever ``d`` the device holds (its mean may be far off), one
term of a sum of squares bounds the square of its own element.

Without an eps to rest on (FP16 flushes MiniLM's 1e-12 to 0, or ``K eps <= A``), ``w`` has a
floor of its own where the device refuses a step whose quotient is not finite (the in-graph
guard checks it): on a returned step ``w`` is a positive FP16 value, ``w >= 2^-24 = f``. Then
``w >= max(f, K c d_i^2 - A)``, and ``|o_i|`` grows with ``|d_i|`` while ``w`` is at its floor
and falls after, so (``_floor_range``)::

    |o_i| <= (1 + rho_div) t / ((1 - rho_sqrt) sqrt(f) - a_sqrt) + a_div,
    t = sqrt((f + A) / (K c))                                                   (= hi = -lo)

about ``sqrt(n (1 + A / f))``: ``A`` counts each step's absolute part as often, and at the
scale, it reaches ``w`` (each square's once per term, times ``c``; a scale moved into the sum,
once per term).

Softmax ``o = e / sum(e)``, ``e = exp(x - max(x))`` over the same axes: each device ``e_j`` is
at least ``-a_exp`` (its contract's absolute part), and the element at the row's maximum is
``exp(z)`` with ``|z| <= ulps * unit * |max|`` (the device's ``x - x``, its subtraction's
contract), so ``e_max >= (1 - rho_exp) exp(-Z) - a_exp = E``. With ``T = sum(e_j) >= E - (n-1)
a_exp = T0`` and the sum's contract relative to ``sum |e_j| <= T + 2 n a_exp``::

    o_i <= (1 + rho_div) (T0 + (n-1) a_exp) / ((1 - rho_sum) T0 - 2 n rho_sum a_exp) + a_div = hi
    o_i >= -(1 + rho_div) a_exp / ((1 - rho_sum) T0 - 2 n rho_sum a_exp) - a_div             = lo

The steps' figures, against exact arithmetic (a contract bounds the device against the oracle,
which rounds once more; the oracle's own F32 sum of ``n`` terms is within ``gamma_n`` of the
exact sum):

=====================  ========================================
contract               relative ``rho``, absolute ``a``
=====================  ========================================
BitExact               ``u`` (the oracle's one rounding), 0
Relative(r)            ``r + u + r u``, 0
AbsRel(a, r)           ``r + u + r u``, ``a``
LargerOperandUlps(k)   an add of non-negative operands: ``k unit + u``, 0
ScaledSum(k), n terms  ``k n unit + gamma_n``, 0 (relative to the terms' magnitudes)
anything else          no range (the analysis keeps its first-order bound)
=====================  ========================================

``u = 2^-24``. A narrowed plan (FP16) computes by other roundings: there a normalized row's
steps give their FP16 lowering's figures instead (``row_range(..., narrowed=)``: one rounding
``2^-11`` relative and ``2^-25`` absolute, FP32 accumulation and a pooled sum's two roundings
besides, ``error_bounds.rows._fp16_figures``), with the literals as FP16 holds them, and a mean's
scale may precede its sum (``c d_j^2`` summed: a power-of-two scale moved into the sum); no
softmax range there (the running analysis bounds a narrowed softmax by its steps' ranges).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from poot_ir import (
    AbsRel,
    BitExact,
    BroadcastParams,
    Contract,
    DType,
    Eqn,
    LargerOperandUlps,
    Literal,
    Prim,
    Program,
    ReduceParams,
    Relative,
    ScaledSum,
    Var,
)

__all__ = [
    "FiguresOf",
    "HeldOf",
    "RowRange",
    "SquaresVariance",
    "contract_figures",
    "max_shift_axes",
    "row_range",
    "squares_variance",
]

U = 2.0**-24  # the unit roundoff of a correctly rounded F32 operation
FLUSH = 2.0**-126  # a subnormal result, rounded or flushed to zero: its absolute error at most


@dataclass(frozen=True, slots=True)
class RowRange:
    """Every element of the device's value of equation ``eqn`` lies in ``[lo, hi]``, if each
    step of ``steps`` (the equations the derivation rests on) is within its contract."""

    eqn: int
    kind: str  # "normalized" (LayerNorm, RMSNorm) or "softmax"
    lo: float
    hi: float
    steps: tuple[int, ...]


#: the contract of an equation of the program (by index), None when it has none to rest on
ContractOf = Callable[[int], Contract | None]
#: a narrowed (FP16) device's figures of an equation (by index, with its primitive and the
#: terms it sums): ``(rho, a)`` against exact arithmetic, None when it has none to rest on
FiguresOf = Callable[[int, Prim, int], tuple[float, float] | None]
#: the value a device holds for a literal (an FP16 device: its FP16 rounding)
HeldOf = Callable[[Literal], float]


def _gamma(n: int) -> float:
    """``gamma_n = n u / (1 - n u)``: the F32 sum of ``n`` terms against the exact one."""
    nu = n * U
    return nu / (1.0 - nu) if nu < 1.0 else math.inf


def contract_figures(c: Contract | None, prim: Prim, terms: int = 1) -> tuple[float, float] | None:
    """``(rho, a)`` of a step on non-negative operands, by the table in the module docstring."""
    if c is None:
        return None
    match c.bound:
        case BitExact():
            rel, a = (_gamma(terms) if prim is Prim.REDUCE_SUM else U), 0.0
        case Relative(rel=r):
            rel, a = r + U + r * U, 0.0
        case AbsRel(abs=a_, rel=r):
            rel, a = r + U + r * U, a_
        case LargerOperandUlps(ulps=k, unit=unit) if prim is Prim.ADD:
            rel, a = k * unit + U, 0.0
        case ScaledSum(ulps_per_term=k, unit=unit) if prim is Prim.REDUCE_SUM:
            rel, a = k * terms * unit + _gamma(terms), 0.0
        case _:
            return None
    return (rel, a + FLUSH) if rel < 1.0 else None


def _literal(a: object, held: HeldOf | None = None) -> float | None:
    if not isinstance(a, Literal):
        return None
    return a.as_float() if held is None else held(a)


def _back(
    program: Program, producer: Mapping[int, int], v: object, shape: tuple[int, ...]
) -> tuple[Var, tuple[int, ...], list[int]] | None:
    """``v`` as a row-reduced value broadcast back to ``shape``: the reduced value, the axes
    it was reduced over, and the equations between (a ``broadcast_in_dim`` along the reduced
    axes, or a reshape to the kept-dims form and a ``broadcast_in_dim`` of its unit axes)."""
    if not isinstance(v, Var) or (j := producer.get(v.id)) is None:
        return None
    b = program.eqns[j]
    p = b.params
    if b.prim is not Prim.BROADCAST_IN_DIM or not isinstance(p, BroadcastParams):
        return None
    if p.shape != shape or not isinstance(src := b.inputs[0], Var):
        return None
    rank = len(shape)
    if p.dims == tuple(sorted(p.dims)) and src.shape == tuple(shape[k] for k in p.dims):
        axes = tuple(k for k in range(rank) if k not in p.dims)
        return (src, axes, [j]) if axes else None
    if p.dims != tuple(range(rank)) or (k := producer.get(src.id)) is None:
        return None
    r = program.eqns[k]
    axes = tuple(a for a in range(rank) if src.shape[a] == 1 and shape[a] != 1)
    inner = r.inputs[0]
    kept = tuple(shape[a] for a in range(rank) if a not in axes)
    if r.prim is not Prim.RESHAPE or not isinstance(inner, Var) or inner.shape != kept:
        return None
    return (inner, axes, [j, k]) if axes else None


def _made_by(
    program: Program, producer: Mapping[int, int], v: object, prim: Prim
) -> tuple[int, Eqn] | None:
    if not isinstance(v, Var) or (j := producer.get(v.id)) is None:
        return None
    e = program.eqns[j]
    return (j, e) if e.prim is prim else None


def _reduces(e: Eqn, x: Var, axes: tuple[int, ...]) -> bool:
    p = e.params
    a = e.inputs[0]
    return (
        isinstance(p, ReduceParams)
        and tuple(sorted(p.axes)) == axes
        and isinstance(a, Var)
        and a.id == x.id
    )


def max_shift_axes(
    program: Program, i: int, producer: Mapping[int, int]
) -> tuple[tuple[int, ...], int] | None:
    """The axes over which equation ``i`` subtracts its operand's row maximum from it
    (``x - broadcast(reduce_max(x))``: a softmax's shift, the same ``x`` both times) and the
    index of the ``reduce_max``, else None. Each element of the device's result is at most 0
    when its maximum is exact (one of its own row's values) and its subtraction rounds
    correctly (``error_bounds``)."""
    e = program.eqns[i]
    if e.prim is not Prim.SUB or not isinstance(x := e.inputs[0], Var):
        return None
    if (back := _back(program, producer, e.inputs[1], x.shape)) is None:
        return None
    m, axes, _ = back
    top = _made_by(program, producer, m, Prim.REDUCE_MAX)
    return (axes, top[0]) if top is not None and _reduces(top[1], x, axes) else None


@dataclass(frozen=True, slots=True)
class SquaresVariance:
    """Equation ``eqn`` computes ``c sum(x * x) - (c sum(x))^2`` over ``axes`` of ``x`` (a
    LayerNorm's variance as ``E[x^2] - E[x]^2``, magika's form), by the equations ``steps``
    (from the squares and the scaled sums to the subtraction, data movement between)."""

    eqn: int
    x: Var
    axes: tuple[int, ...]
    c: float
    steps: tuple[int, ...]


def _scaled_sum(
    program: Program, producer: Mapping[int, int], v: object
) -> tuple[Var, tuple[int, ...], float, list[int]] | None:
    """``v`` as ``c * reduce_sum(u)`` (``c`` a product of positive literals before or after the
    sum, data movement after it only): ``u``, the axes, ``c`` and the equations."""
    c, axes, steps = 1.0, None, []
    while isinstance(v, Var) and (j := producer.get(v.id)) is not None:
        e = program.eqns[j]
        lits = [_literal(a) for a in e.inputs]
        if e.prim in (Prim.RESHAPE, Prim.BROADCAST_IN_DIM) and axes is None:
            v = e.inputs[0]
        elif e.prim is Prim.MUL and sum(k is not None for k in lits) == 1:
            k = next(k for k in lits if k is not None)
            if k <= 0.0:
                return None
            c, v = c * k, e.inputs[lits.index(None)]
        elif e.prim is Prim.REDUCE_SUM and axes is None and isinstance(e.params, ReduceParams):
            axes, v = tuple(sorted(e.params.axes)), e.inputs[0]
        else:
            break
        steps.append(j)
    if axes is None or not isinstance(v, Var):
        return None
    return v, axes, c, steps


def _square_of(program: Program, producer: Mapping[int, int], v: Var) -> tuple[Var, int] | None:
    """``v`` as ``u * u`` (the same var twice): ``u`` and the equation."""
    j = producer.get(v.id)
    e = program.eqns[j] if j is not None else None
    if e is None or e.prim is not Prim.MUL:
        return None
    a, b = e.inputs
    return (a, j) if isinstance(a, Var) and isinstance(b, Var) and a.id == b.id else None  # type: ignore[return-value]


def squares_variance(
    program: Program, i: int, producer: Mapping[int, int]
) -> SquaresVariance | None:
    """Equation ``i`` as a variance by squares (``SquaresVariance``), else None."""
    e = program.eqns[i]
    if e.prim is not Prim.SUB or not all(isinstance(a, Var) for a in e.inputs):
        return None
    squares = _scaled_sum(program, producer, e.inputs[0])
    mean_sq = _square_of(program, producer, e.inputs[1])  # type: ignore[arg-type]
    if squares is None or mean_sq is None:
        return None
    sq, axes, c, steps = squares
    of_x = _square_of(program, producer, sq)
    mean = _scaled_sum(program, producer, mean_sq[0])
    if of_x is None or mean is None:
        return None
    x, mean_x = of_x[0], mean[0]
    if mean_x.id != x.id or mean[1] != axes or mean[2] != c:
        return None
    chain = sorted({*steps, of_x[1], *mean[3], mean_sq[1], i})
    return SquaresVariance(i, x, axes, c, tuple(chain))


def row_range(
    program: Program,
    i: int,
    producer: Mapping[int, int],
    contract_of: ContractOf,
    magnitude: Callable[[Var], float] | None = None,
    narrowed: tuple[FiguresOf, HeldOf] | None = None,
    floor: float = 0.0,
) -> RowRange | None:
    """The range of equation ``i``'s device value when it is a normalized row or a softmax
    (the module docstring), else None. ``producer``: the index of the equation making each
    var id; ``magnitude``: the largest magnitude the device's value of a var may have (a
    softmax's row maximum; without it no softmax range). ``narrowed``: on an FP16 device, each
    step's figures from its FP16 lowering and the literals as the device holds them, in place
    of the contracts (a normalized row only). ``floor``: the least divisor ``w`` a returned
    step can have, where the device refuses a step whose quotient is not finite (the smallest
    positive value of its type: ``w`` is then positive), else 0 (a normalized row only)."""
    e = program.eqns[i]
    if e.prim is not Prim.DIV or e.out.dtype is not DType.F32:
        return None
    num, den = e.inputs
    if not isinstance(num, Var) or (back := _back(program, producer, den, e.out.shape)) is None:
        return None
    reduced, axes, moves = back
    n = math.prod(e.out.shape[a] for a in axes)

    def figures(k: int, prim: Prim, terms: int = 1) -> tuple[float, float] | None:
        if narrowed is not None:
            return narrowed[0](k, prim, terms)
        return contract_figures(contract_of(k), prim, terms)

    div = figures(i, Prim.DIV)
    if div is None or n < 1:
        return None
    if (s := _made_by(program, producer, reduced, Prim.SQRT)) is not None:
        held = narrowed[1] if narrowed is not None else None
        return _normalized(program, i, producer, figures, held, num, axes, n, div, moves, s, floor)
    if narrowed is not None:
        return None
    if (s := _made_by(program, producer, reduced, Prim.REDUCE_SUM)) is not None:
        if magnitude is None:
            return None
        return _softmax(program, i, producer, contract_of, num, axes, n, div, moves, s, magnitude)
    return None


def _normalized(
    program: Program,
    i: int,
    producer: Mapping[int, int],
    figures: Callable[..., tuple[float, float] | None],
    held: HeldOf | None,
    d: Var,
    axes: tuple[int, ...],
    n: int,
    div: tuple[float, float],
    moves: list[int],
    root: tuple[int, Eqn],
    floor: float,
) -> RowRange | None:
    jq, sq = root
    added = _made_by(program, producer, sq.inputs[0], Prim.ADD)
    if added is None:
        return None
    ja, add = added
    eps_at = [k for k, a in enumerate(add.inputs) if isinstance(a, Literal)]
    eps = _literal(add.inputs[eps_at[0]], held) if len(eps_at) == 1 else None
    if eps is None or not eps >= 0.0 or (eps == 0.0 and floor <= 0.0):
        return None  # no eps (or one held as 0) and no floor: a row of zeros divides 0 by 0
    scaled = add.inputs[1 - eps_at[0]]
    steps = [i, *moves, jq, ja]
    c, figs = 1.0, [figures(jq, Prim.SQRT), figures(ja, Prim.ADD)]
    # how many times, and at what scale, each step's absolute part after the square root's
    # reaches w (``_floor_range``): the add's once
    times = [1.0]
    after = False  # the mean's scale applied after the sum
    summed = _made_by(program, producer, scaled, Prim.REDUCE_SUM)
    if summed is None:  # a mean: the sum divided by, or multiplied by, a positive literal
        for prim in (Prim.DIV, Prim.MUL):
            if (m := _made_by(program, producer, scaled, prim)) is None:
                continue
            jc, ec = m
            k = [_literal(a, held) for a in ec.inputs]
            if prim is Prim.DIV and k[1] is not None and k[1] > 0.0:
                c, summed = 1.0 / k[1], _made_by(program, producer, ec.inputs[0], Prim.REDUCE_SUM)
            elif prim is Prim.MUL and k[0] is None and k[1] is not None and k[1] > 0.0:
                c, summed = k[1], _made_by(program, producer, ec.inputs[0], Prim.REDUCE_SUM)
            elif prim is Prim.MUL and k[1] is None and k[0] is not None and k[0] > 0.0:
                c, summed = k[0], _made_by(program, producer, ec.inputs[1], Prim.REDUCE_SUM)
            else:
                return None
            steps.append(jc)
            figs.append(figures(jc, prim))
            times.append(1.0)
            after = True
            break
    if summed is None or not isinstance(sv := summed[1].inputs[0], Var):
        return None
    js, sum_e = summed
    if not _reduces(sum_e, sv, axes) or sv.shape != d.shape:
        return None
    square = _made_by(program, producer, sv, Prim.MUL)
    if square is not None and c == 1.0:  # the mean's scale moved into the sum: c d_j^2 summed
        k = [_literal(a, held) for a in square[1].inputs]
        inner = square[1].inputs[1 if k[0] is not None else 0]
        scale = k[0] if k[0] is not None else k[1]
        if scale is not None and scale > 0.0 and isinstance(inner, Var):
            steps.append(square[0])
            figs.append(figures(square[0], Prim.MUL))
            times.append(float(n))  # the scale of each of the n terms
            c, square = scale, _made_by(program, producer, inner, Prim.MUL)
    if square is None or any(not isinstance(a, Var) or a.id != d.id for a in square[1].inputs):
        return None  # the sum of squares of the very values divided
    jm = square[0]
    steps += [js, jm]
    figs += [figures(js, Prim.REDUCE_SUM, n), figures(jm, Prim.MUL)]
    times += [c if after else 1.0, n * c]  # the sum's part, then each term's square's
    if any(f is None for f in figs):
        return None
    (rq, aq), *rest = [f for f in figs if f is not None]
    k_ = math.prod(1.0 - r for r, _ in rest)
    if k_ <= 0.0:
        return None
    rd, ad = div
    his = []
    # every absolute part reaches w scaled at most by c per term of the sum (and 1 after it)
    big = max(c, 1.0) * (n + 1)
    w_floor = k_ * eps - big * sum(a for _, a in rest)
    if w_floor > 0.0 and (1.0 - rq) * math.sqrt(w_floor) > aq:
        shrink = 1.0 - aq / ((1.0 - rq) * math.sqrt(w_floor))
        his.append((1.0 + rd) / ((1.0 - rq) * math.sqrt(k_ * c) * shrink) + ad)
    if floor > 0.0:
        grow = math.prod(1.0 + r for r, _ in rest)
        absolute = grow * sum(t * a for t, (_, a) in zip(times, rest, strict=True))
        if (at_floor := _floor_range(k_, c, k_ * eps - absolute, floor, (rq, aq), div)) is not None:
            his.append(at_floor)
    if not his:
        return None
    hi = min(his)
    return RowRange(i, "normalized", -hi, hi, tuple(sorted(steps)))


def _floor_range(
    k: float, c: float, w0: float, floor: float, sqrt: tuple[float, float], div: tuple[float, float]
) -> float | None:
    """The normalized row's bound where the divisor is at least ``floor`` on a returned step
    (``row_range``): ``w >= max(floor, K c t^2 + W0)`` for an element of magnitude ``t``
    (``W0 = K eps - A``, the absolute parts ``A`` each counted as often and at the scale it
    reaches ``w``), so ``|o| <= (1 + rho_div) t / ((1 - rho_sqrt) sqrt(w) - a_sqrt) + a_div``
    grows with ``t`` while ``w`` is at its floor and falls after (``W0 <= 0``: one term of the
    sum of squares, its own, cannot fall below the floor): its largest value is at ``t* =
    sqrt((floor - W0) / (K c))``. With an eps FP16 flushes to 0 (MiniLM's 1e-12) this is the
    only bound: about ``sqrt(n (1 + A / floor))``. A positive ``W0`` is dropped (a smaller
    ``w``, a larger bound), which keeps the function's shape. None where it gives none."""
    (rq, aq), (rd, ad) = sqrt, div
    w0 = min(w0, 0.0)
    root = (1.0 - rq) * math.sqrt(floor) - aq
    if root <= 0.0 or k * c <= 0.0:
        return None
    t = math.sqrt((floor - w0) / (k * c))
    return (1.0 + rd) * t / root + ad


def _softmax(
    program: Program,
    i: int,
    producer: Mapping[int, int],
    contract_of: ContractOf,
    ex: Var,
    axes: tuple[int, ...],
    n: int,
    div: tuple[float, float],
    moves: list[int],
    summed: tuple[int, Eqn],
    magnitude: Callable[[Var], float],
) -> RowRange | None:
    js, sum_e = summed
    if not _reduces(sum_e, ex, axes) or (made := _made_by(program, producer, ex, Prim.EXP)) is None:
        return None
    je, exp_e = made
    if (sub := _made_by(program, producer, exp_e.inputs[0], Prim.SUB)) is None:
        return None
    jz, sub_e = sub
    x, shifted = sub_e.inputs
    if not isinstance(x, Var) or (mb := _back(program, producer, shifted, x.shape)) is None:
        return None
    m, m_axes, m_moves = mb
    top = _made_by(program, producer, m, Prim.REDUCE_MAX)
    if m_axes != axes or top is None or not _reduces(top[1], x, axes):
        return None
    jm = top[0]
    exact_max = contract_of(jm)
    if exact_max is None or not isinstance(exact_max.bound, BitExact):
        return None  # the device's maximum must be one of its own row's values
    # the device's x_max - x_max: exactly 0 from an adder that is BitExact, within its
    # LargerOperandUlps of |max| otherwise
    zc = contract_of(jz)
    if zc is None:
        return None
    match zc.bound:
        case BitExact():
            z = 0.0
        case LargerOperandUlps(ulps=k, unit=unit):
            z = k * unit * magnitude(m)
        case _:
            return None
    fe, fs = (
        contract_figures(contract_of(je), Prim.EXP),
        contract_figures(contract_of(js), Prim.REDUCE_SUM, n),
    )
    if fe is None or fs is None or not math.isfinite(z):
        return None
    (re_, ae), (rs, as_), (rd, ad) = fe, fs, div
    t0 = (1.0 - re_) * math.exp(-z) - ae - (n - 1) * ae
    s_min = (1.0 - rs) * t0 - 2 * n * rs * ae - as_
    if t0 <= 0.0 or s_min <= 0.0:
        return None
    hi = (1.0 + rd) * (t0 + (n - 1) * ae) / s_min + ad
    lo = -(1.0 + rd) * ae / s_min - ad
    steps = sorted({i, *moves, js, je, jz, jm, *m_moves})
    return RowRange(i, "softmax", lo, hi, tuple(steps))
