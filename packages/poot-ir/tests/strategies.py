"""Hypothesis strategies: random valid programs, and random inputs that match them.

Use::

    from hypothesis import given, strategies as st
    from strategies import inputs_for, programs

    @given(st.data())
    def test_something(data: st.DataObject) -> None:
        program = data.draw(programs())
        inputs = data.draw(inputs_for(program))  # {argument name: np.ndarray}

``programs(...)`` draws a ``Program`` built through ``poot_ir.Builder`` (so it is valid) that
may use every primitive on every dtype its type rule allows, shapes with size-0 and size-1 axes,
literals with extreme bit patterns (negative zero, NaN payloads of either sign, quiet and
signalling, infinities, subnormals, the largest finite value, i32 extremes), and slot, weight
and state arguments (every state has an update). With ``exotic=True`` (the default) it also
relabels var ids (sparse, possibly negative), names some intermediate vars, renames some
argument vars and gives the program a name that needs quoting: the text format must keep all
of that, and nothing else depends on it.

``inputs_for(program)`` draws one array per argument (weights, slots and states alike) of the
argument's exact dtype and shape, such that evaluating the program is defined:

- an i32 argument used directly as ``gather`` indices holds indices in ``[-size, size)`` of the
  gathered axis;
- an i32 scalar argument used directly as a ``dynamic_update_slice`` start keeps the update's
  window inside the operand (``0 <= start <= operand - update`` on its axis);
- an i32 argument used directly as the divisor of an i32 ``div`` holds no zero.

``programs()`` only ever feeds those operands from arguments it creates for that one use, so
the constraints never conflict. i32 arithmetic may still overflow (wrapping is the oracle's
business), and floats may be NaN, infinite or subnormal unless ``finite=True``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from poot_ir import (
    Arg,
    Builder,
    DType,
    Eqn,
    GatherParams,
    Literal,
    Output,
    Prim,
    Program,
    Storage,
    Update,
    Var,
    validate,
)

__all__ = ["draw_inputs", "inputs_for", "literals", "programs"]

FLOATS = (DType.F32, DType.F16, DType.BF16)
NUMERIC = (*FLOATS, DType.I32)
_FLOAT_ONLY = {Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT}
_FORMAT = {DType.F32: (8, 23), DType.F16: (5, 10), DType.BF16: (8, 7)}  # exponent, mantissa

#: Argument and result names the parser must read by position, not as keywords.
_NAMES = ("x", "end", "program", "slot", "state", "output", "update", "nan", "inf", "a.b", "_")


# -- literals -------------------------------------------------------------------------------


def extreme_bits(dtype: DType) -> list[int]:
    """The bit patterns that break careless code: signed zeros, infinities, NaNs (quiet,
    signalling, with payloads, either sign), subnormals, the normal and finite extremes."""
    if dtype is DType.BOOL:
        return [0, 1]
    if dtype is DType.I32:
        return [v % 2**32 for v in (0, 1, -1, 2**31 - 1, -(2**31))]
    e, m = _FORMAT[dtype]
    sign = 1 << (e + m)
    inf = ((1 << e) - 1) << m
    quiet = 1 << (m - 1)
    one = ((1 << (e - 1)) - 1) << m
    patterns = [0, inf, inf | quiet, inf | quiet | 1, inf | 1, inf | (quiet - 1)]
    patterns += [1, (1 << m) - 1, 1 << m, inf - 1, one, one | quiet]
    return patterns + [p | sign for p in patterns]


def literals(dtype: DType, nonzero: bool = False) -> st.SearchStrategy[Literal]:
    """Literals of ``dtype``: the extreme patterns of ``extreme_bits`` or any bit pattern
    (``nonzero`` excludes every pattern whose value is zero, for an i32 divisor)."""
    width = 8 * dtype.itemsize
    top = 1 if dtype is DType.BOOL else 2**width - 1
    bits = st.one_of(st.sampled_from(extreme_bits(dtype)), st.integers(0, top))
    lits = bits.map(lambda b: Literal(b, dtype))
    return lits.filter(lambda lit: lit.value != 0) if nonzero else lits


# -- programs -------------------------------------------------------------------------------


class _Gen:
    """Draws one program: a pool of values, and one maker per primitive that picks operands
    from the pool or makes fresh arguments of a fitting type."""

    def __init__(self, draw: st.DrawFn, max_rank: int, max_dim: int) -> None:
        self.draw = draw
        self.max_rank = max_rank
        self.max_dim = max_dim
        self.b = Builder("p")
        self.pool: list[Var] = []
        self.states: list[Var] = []
        self.n_args = 0

    def dim(self) -> int:
        return self.draw(st.integers(0, self.max_dim))

    def shape(self, min_rank: int = 0) -> tuple[int, ...]:
        rank = self.draw(st.integers(min_rank, max(min_rank, self.max_rank)))
        return tuple(self.dim() for _ in range(rank))

    def arg(self, dtype: DType, shape: Sequence[int], pooled: bool = True) -> Var:
        """A fresh slot or weight; ``pooled=False`` keeps it for the one use that made it."""
        name = f"a{self.n_args}"
        self.n_args += 1
        storage = self.draw(st.sampled_from([Storage.SLOT, Storage.WEIGHT]))
        if storage is Storage.WEIGHT:
            v = self.b.weight(name, dtype, shape)
        else:
            v = self.b.slot(name, dtype, shape)
        if pooled:
            self.pool.append(v)
        return v

    def pick(
        self,
        fits: Callable[[Var], bool],
        dtypes: Sequence[DType],
        shape: Callable[[DType], Sequence[int]] | None = None,
    ) -> Var:
        """A pooled value that ``fits``, or a fresh argument of one of ``dtypes``."""
        found = [v for v in self.pool if fits(v)]
        if found and self.draw(st.integers(0, 3)) > 0:
            return self.draw(st.sampled_from(found))
        dtype = self.draw(st.sampled_from(list(dtypes)))
        return self.arg(dtype, shape(dtype) if shape else self.shape())

    def like(self, dtype: DType, shape: tuple[int, ...]) -> Var:
        return self.pick(lambda v: v.dtype is dtype and v.shape == shape, [dtype], lambda _: shape)

    def broadcastable(self, x: Var) -> Var:
        """A value of ``x``'s dtype whose shape broadcasts against ``x``'s, numpy-style."""
        drop = self.draw(st.integers(0, x.type.rank))
        shape = tuple(1 if self.draw(st.booleans()) else d for d in x.shape[drop:])
        return (
            self.like(x.dtype, shape) if self.draw(st.booleans()) else self.like(x.dtype, x.shape)
        )

    # one maker per primitive -----------------------------------------------------------------

    def unary(self, prim: Prim) -> Var:
        dtypes = FLOATS if prim in _FLOAT_ONLY else NUMERIC
        x = self.pick(lambda v: v.dtype in dtypes, dtypes)
        return getattr(self.b, prim.value)(x)  # type: ignore[no-any-return]

    def binary(self, prim: Prim) -> Var:
        dtypes = tuple(DType) if prim is Prim.EQ else NUMERIC
        x = self.pick(lambda v: v.dtype in dtypes, dtypes)
        int_div = prim is Prim.DIV and x.dtype is DType.I32
        how = self.draw(st.sampled_from(["var", "literal right", "literal left"]))
        y: Var | Literal
        if how == "literal left":
            # a literal dividend needs a tensor divisor: a fresh argument, kept non-zero
            divisor = self.arg(x.dtype, x.shape, pooled=False) if int_div else x
            return getattr(self.b, prim.value)(self.draw(literals(x.dtype)), divisor)  # type: ignore[no-any-return]
        if how == "literal right":
            y = self.draw(literals(x.dtype, nonzero=int_div))
        elif int_div:
            y = self.arg(x.dtype, x.shape, pooled=False)
        else:
            y = self.broadcastable(x)
        a, b = (x, y) if self.draw(st.booleans()) or int_div else (y, x)
        return getattr(self.b, prim.value)(a, b)  # type: ignore[no-any-return]

    def select(self, prim: Prim) -> Var:
        pred = self.pick(lambda v: v.dtype is DType.BOOL, [DType.BOOL])
        dtype = self.draw(st.sampled_from(list(DType)))
        branches: list[Var | Literal] = []
        for _ in range(2):
            if self.draw(st.booleans()):
                branches.append(self.draw(literals(dtype)))
            else:
                branches.append(self.like(dtype, pred.shape))
        return self.b.select(pred, branches[0], branches[1])

    def convert(self, prim: Prim) -> Var:
        x = self.pick(lambda v: True, list(DType))
        return self.b.convert(x, self.draw(st.sampled_from(list(DType))))

    def reduce(self, prim: Prim) -> Var:
        x = self.pick(lambda v: v.dtype in NUMERIC, NUMERIC)
        axes = [a for a in range(x.type.rank) if self.draw(st.booleans())]
        return getattr(self.b, prim.value)(x, axes)  # type: ignore[no-any-return]

    def gather(self, prim: Prim) -> Var:
        table = self.pick(lambda v: v.type.rank >= 1, list(DType), lambda _: self.shape(1))
        axis = self.draw(st.integers(0, table.type.rank - 1))
        idx_shape = self.shape()[:2]
        if table.shape[axis] == 0 and math.prod(idx_shape) > 0:
            idx_shape = (0, *idx_shape[1:])  # no index is in range of an empty axis
        return self.b.gather(table, self.arg(DType.I32, idx_shape, pooled=False), axis)

    def transpose(self, prim: Prim) -> Var:
        x = self.pick(lambda v: True, list(DType))
        return self.b.transpose(x, self.draw(st.permutations(range(x.type.rank))))

    def reshape(self, prim: Prim) -> Var:
        x = self.pick(lambda v: True, list(DType))
        rank = self.draw(st.integers(0 if x.type.size == 1 else 1, self.max_rank + 1))
        shape = [1] * rank
        if x.type.size == 0:
            shape = [self.dim() for _ in range(rank)]
            shape[self.draw(st.integers(0, rank - 1))] = 0
        else:
            for p in _prime_factors(x.type.size):
                shape[self.draw(st.integers(0, rank - 1))] *= p
        return self.b.reshape(x, shape)

    def broadcast_in_dim(self, prim: Prim) -> Var:
        x = self.pick(lambda v: v.type.rank <= self.max_rank, list(DType))
        rank = self.draw(st.integers(x.type.rank, max(x.type.rank, self.max_rank)))
        dims = sorted(self.draw(st.permutations(range(rank)))[: x.type.rank])
        shape = [self.dim() for _ in range(rank)]
        for i, d in enumerate(dims):
            if x.shape[i] != 1 or self.draw(st.booleans()):
                shape[d] = x.shape[i]
        return self.b.broadcast_in_dim(x, shape, dims)

    def slice(self, prim: Prim) -> Var:
        x = self.pick(lambda v: True, list(DType))
        start = [self.draw(st.integers(0, d)) for d in x.shape]
        limit = [self.draw(st.integers(s, d)) for s, d in zip(start, x.shape, strict=True)]
        strides = [self.draw(st.integers(1, 3)) for _ in x.shape]
        return self.b.slice(x, start, limit, strides)

    def concat(self, prim: Prim) -> Var:
        x = self.pick(lambda v: v.type.rank >= 1, list(DType), lambda _: self.shape(1))
        axis = self.draw(st.integers(0, x.type.rank - 1))
        xs = [x]
        for _ in range(self.draw(st.integers(0, 2))):
            shape = (*x.shape[:axis], self.dim(), *x.shape[axis + 1 :])
            xs.append(self.like(x.dtype, shape))
        return self.b.concat(xs, axis)

    def dynamic_update_slice(self, prim: Prim) -> Var:
        x = self.pick(lambda v: True, list(DType))
        update = self.like(x.dtype, tuple(self.draw(st.integers(0, d)) for d in x.shape))
        starts: list[Var | int] = []
        for d, u in zip(x.shape, update.shape, strict=True):
            if self.draw(st.booleans()):
                starts.append(self.draw(st.integers(0, d - u)))
            else:
                starts.append(self.arg(DType.I32, (), pooled=False))
        return self.b.dynamic_update_slice(x, update, starts)

    def iota(self, prim: Prim) -> Var:
        shape = self.shape(1)
        axis = self.draw(st.integers(0, len(shape) - 1))
        return self.b.iota(shape, self.draw(st.sampled_from(NUMERIC)), axis)

    def matmul(self, prim: Prim) -> Var:
        a = self.pick(
            lambda v: v.dtype in NUMERIC and v.type.rank >= 2, NUMERIC, lambda _: self.shape(2)
        )
        b = self.like(a.dtype, (*a.shape[:-2], a.shape[-1], self.dim()))
        return self.b.matmul(a, b)

    def conv(self, prim: Prim) -> Var:
        k = self.draw(st.integers(1, 2))
        g = self.draw(st.integers(1, 2))
        c, o = g * self.draw(st.integers(0, 2)), g * self.draw(st.integers(0, 2))
        ints = lambda lo, hi: tuple(self.draw(st.integers(lo, hi)) for _ in range(k))  # noqa: E731
        dtype = self.draw(st.sampled_from(FLOATS))
        x = self.arg(dtype, (self.draw(st.integers(0, 2)), c, *ints(0, self.max_dim + 1)))
        w = self.arg(dtype, (o, c // g, *ints(1, 3)))
        pads = [(self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2))) for _ in range(k)]
        return self.b.conv(x, w, ints(1, 3), pads, ints(1, 2), ints(1, 2), g)

    def reduce_window(self, prim: Prim) -> Var:
        x = self.pick(lambda v: v.dtype in FLOATS, FLOATS)
        r = x.type.rank
        window = [self.draw(st.integers(1, 3)) for _ in range(r)]
        strides = [self.draw(st.integers(1, 3)) for _ in range(r)]
        pads = [(self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2))) for _ in range(r)]
        dilation = [self.draw(st.integers(1, 2)) for _ in range(r)]
        method = getattr(self.b, prim.value)
        return method(x, window, strides, pads, dilation)  # type: ignore[no-any-return]


_MAKERS: dict[Prim, Callable[[_Gen, Prim], Var]] = {
    **{p: _Gen.unary for p in Prim if p.is_unary},
    **{p: _Gen.binary for p in Prim if p.is_binary},
    Prim.SELECT: _Gen.select,
    Prim.CONVERT: _Gen.convert,
    Prim.REDUCE_SUM: _Gen.reduce,
    Prim.REDUCE_MAX: _Gen.reduce,
    Prim.GATHER: _Gen.gather,
    Prim.TRANSPOSE: _Gen.transpose,
    Prim.RESHAPE: _Gen.reshape,
    Prim.BROADCAST_IN_DIM: _Gen.broadcast_in_dim,
    Prim.SLICE: _Gen.slice,
    Prim.CONCAT: _Gen.concat,
    Prim.DYNAMIC_UPDATE_SLICE: _Gen.dynamic_update_slice,
    Prim.IOTA: _Gen.iota,
    Prim.MATMUL: _Gen.matmul,
    Prim.CONV: _Gen.conv,
    Prim.REDUCE_WINDOW_SUM: _Gen.reduce_window,
    Prim.REDUCE_WINDOW_MAX: _Gen.reduce_window,
}


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return [*out, n] if n > 1 else out


@st.composite
def programs(
    draw: st.DrawFn,
    prims: Iterable[Prim] | None = None,
    min_eqns: int = 1,
    max_eqns: int = 8,
    max_rank: int = 3,
    max_dim: int = 3,
    exotic: bool = True,
) -> Program:
    """A random valid program of ``min_eqns`` to ``max_eqns`` primitive applications drawn
    from ``prims`` (default: every primitive), plus the ``broadcast_in_dim`` equations the
    Builder inserts. Axes have sizes ``0..max_dim``, ranks go to ``max_rank`` (a reshape or
    broadcast may add one). See the module docstring for ``exotic``."""
    chosen = sorted(set(prims) if prims is not None else set(Prim), key=lambda p: p.value)
    g = _Gen(draw, max_rank, max_dim)
    for i in range(draw(st.integers(0, 3))):
        dtype = draw(st.sampled_from(list(DType)))
        storage = draw(st.sampled_from(list(Storage)))
        if storage is Storage.STATE:
            v = g.b.state(f"s{i}", dtype, g.shape())
            g.states.append(v)
        else:
            v = g.arg(dtype, g.shape(), pooled=False)
        g.pool.append(v)
    for _ in range(draw(st.integers(min_eqns, max_eqns))):
        prim = draw(st.sampled_from(chosen))
        g.pool.append(_MAKERS[prim](g, prim))
    for s in g.states:
        g.b.update(s, draw(st.sampled_from([v for v in g.pool if v.type == s.type])))
    n_out = draw(st.integers(0 if g.states else 1, 3))
    for i in range(min(n_out, len(g.pool))):
        g.b.output(f"out{i}", draw(st.sampled_from(g.pool)))
    program = g.b.build()
    return _exotic(draw, program) if exotic else program


def _exotic(draw: st.DrawFn, program: Program) -> Program:
    """``program`` with relabelled var ids, some named vars and odd names (still valid)."""
    olds = [a.var for a in program.args] + [e.out for e in program.eqns]
    ids = draw(
        st.lists(st.integers(-3, 10**6), min_size=len(olds), max_size=len(olds), unique=True)
    )
    any_name = st.one_of(st.sampled_from(_NAMES), st.text(max_size=6))
    new: dict[int, Var] = {}
    renamed = _rename_args(draw, program)
    arg_names = {a.var.id: renamed[a.name] for a in program.args}
    for old, vid in zip(olds, ids, strict=True):
        name = arg_names.get(old.id)
        if draw(st.integers(0, 3)) == 0:
            name = draw(st.one_of(st.none(), any_name))
        new[old.id] = Var(vid, old.type, name)

    def sub(v: Var) -> Var:
        return new[v.id]

    return validate(
        dataclasses.replace(
            program,
            name=draw(st.one_of(st.just("p"), any_name)),
            args=tuple(Arg(renamed[a.name], sub(a.var), a.storage) for a in program.args),
            eqns=tuple(
                Eqn(
                    e.prim,
                    tuple(sub(a) if isinstance(a, Var) else a for a in e.inputs),
                    tuple(sub(o) for o in e.outputs),
                    e.params,
                )
                for e in program.eqns
            ),
            outputs=tuple(Output(o.name, sub(o.var)) for o in program.outputs),
            updates=tuple(Update(renamed[u.state], sub(u.var)) for u in program.updates),
        )
    )


def _rename_args(draw: st.DrawFn, program: Program) -> dict[str, str]:
    """Give some arguments a keyword-like name the parser must read by position."""
    taken = {o.name for o in program.outputs} | {a.name for a in program.args}
    out: dict[str, str] = {}
    for a in program.args:
        name = draw(st.sampled_from(_NAMES))
        out[a.name] = a.name if name in taken else name
        taken.add(out[a.name])
    return out


# -- inputs ---------------------------------------------------------------------------------

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_BF16_MAX = 3.3895313892515355e38  # the largest finite bf16 (0x7f7f), exact in f32


def _constraints(program: Program) -> dict[str, tuple[int, int, bool]]:
    """For each i32 argument used directly as gather indices, a dynamic_update_slice start or
    an i32 divisor: the inclusive range its elements must lie in, and whether zero is out."""
    by_id = {a.var.id: a.name for a in program.args}
    found: dict[str, tuple[int, int, bool]] = {}

    def need(atom: object, lo: int, hi: int, nonzero: bool = False) -> None:
        if isinstance(atom, Var) and atom.id in by_id:
            name = by_id[atom.id]
            old_lo, old_hi, old_nz = found.get(name, (_I32_MIN, _I32_MAX, False))
            found[name] = (max(lo, old_lo), min(hi, old_hi), nonzero or old_nz)

    for e in program.eqns:
        if e.prim is Prim.GATHER:
            assert isinstance(e.params, GatherParams)
            size = e.inputs[0].type.shape[e.params.axis]
            need(e.inputs[1], -size, size - 1)
        elif e.prim is Prim.DYNAMIC_UPDATE_SLICE:
            room = [
                d - u for d, u in zip(e.inputs[0].type.shape, e.inputs[1].type.shape, strict=True)
            ]
            for start, r in zip(e.inputs[2:], room, strict=True):
                need(start, 0, r)
        elif e.prim is Prim.DIV and e.out.dtype is DType.I32:
            need(e.inputs[1], _I32_MIN, _I32_MAX, nonzero=True)
    return found


def _elements(dtype: DType, finite: bool) -> st.SearchStrategy[object]:
    if dtype is DType.BOOL:
        return st.booleans()
    if dtype is DType.I32:
        return st.integers(_I32_MIN, _I32_MAX)
    if dtype is DType.F16:
        return st.floats(width=16, allow_nan=not finite, allow_infinity=not finite)
    bound = _BF16_MAX if dtype is DType.BF16 and finite else None  # stays finite in bf16
    return st.floats(
        width=32,
        allow_nan=not finite,
        allow_infinity=not finite,
        min_value=-bound if bound else None,
        max_value=bound,
    )


def draw_inputs(draw: st.DrawFn, program: Program, finite: bool = False) -> dict[str, np.ndarray]:
    """One array per argument of ``program`` (see the module docstring); for use inside
    ``@st.composite`` strategies. ``finite=True`` leaves out NaN and infinities."""
    limits = _constraints(program)
    out: dict[str, np.ndarray] = {}
    for a in program.args:
        t = a.var.type
        if t.size == 0:
            out[a.name] = np.zeros(t.shape, dtype=t.dtype.numpy)
            continue
        if a.name in limits:
            lo, hi, nonzero = limits[a.name]
            if lo > hi or (nonzero and lo == hi == 0):
                raise ValueError(
                    f"argument {a.name!r} has no value that keeps {program.name!r} defined"
                )
            ints = st.integers(lo, hi)
            elements: st.SearchStrategy[object] = ints.filter(bool) if nonzero else ints
        else:
            elements = _elements(t.dtype, finite)
        storage_dtype = np.dtype(np.float32) if t.dtype is DType.BF16 else t.dtype.numpy
        arr = draw(hnp.arrays(storage_dtype, t.shape, elements=elements))
        if t.dtype is DType.BF16:
            with np.errstate(over="ignore"):
                arr = arr.astype(ml_dtypes.bfloat16)
        out[a.name] = arr
    return out


def inputs_for(program: Program, finite: bool = False) -> st.SearchStrategy[dict[str, np.ndarray]]:
    """A strategy for the inputs of ``program``: ``{argument name: array}`` for every argument,
    of its exact dtype and shape, keeping gather indices, dynamic_update_slice starts and i32
    divisors in range (see the module docstring)."""
    return st.composite(lambda draw: draw_inputs(draw, program, finite))()
