"""ONNX lowering rules for ``TopK``, ``OneHot``, ``ReduceProd`` and ``Einsum``, each decomposed into
poot primitives.

- ``TopK`` with ``k`` known at import takes ``k`` rounds of "the greatest element not yet
  taken, first by position": a ``reduce_max``, then the smallest position holding it, marked
  taken. That is ONNX's order (ties by the lower index) and ``O(k n)`` work: fine for the small
  ``k`` models use, where a sorting network would cost ``O(n log^2 n)`` whatever ``k`` is. A
  NaN orders above every number (first when largest, last when smallest), as ONNX Runtime and
  numpy order it.
- ``OneHot`` compares an ``iota`` with the (wrapped) indices and selects on/off values.
- ``ReduceProd`` moves the reduced axes last and multiplies halves together, ``log2`` of the
  count times (a pairwise product: ONNX fixes no order of multiplication).
- ``Einsum`` (explicit or implicit output, ``...``) sums out each operand's private indices, then
  contracts operands pairwise as one batched ``matmul`` (batch, free and contracted indices
  grouped by ``transpose`` and ``reshape``), and transposes into the output order. An index
  repeated within one operand (a diagonal: ``ii->i``, ``bii->bi``, ``ii`` the trace) first takes
  that operand's diagonal: the two axes made adjacent, merged, and sliced with stride ``n + 1``
  (elements ``0, n + 1, ..``: ``x[i, i]``), pure data movement, so exact for every value (NaN,
  infinities and signed zeros off the diagonal never reach it).
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence

import numpy as np
from poot_ir.builder import Builder
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_onnx.context import (
    NUMERIC,
    Const,
    Lowering,
    LoweringRule,
    Node,
    check_dtype,
    check_unrolled,
    norm_axes,
    norm_axis,
    reshape,
)

__all__ = ["RULES"]


def _lowest(dtype: DType) -> float | int:
    if dtype is DType.I32:
        return int(np.iinfo(np.int32).min)
    return float("-inf")


def _topk(lo: Lowering, n: Node) -> None:
    b = lo.b
    x = lo.var(0)
    check_dtype(lo, x, NUMERIC, "the input")
    rank = x.type.rank
    axis = norm_axis(lo, lo.attr_int("axis", -1), rank)
    if lo.opset < 10:
        k = lo.attr_int("k", -1)
    else:
        (k,) = lo.ints(1, "K") or (-1,)
    size = x.shape[axis]
    if not 0 <= k <= size:
        raise lo.fail("value", f"k {k} is outside [0, {size}] (the axis's length)")
    check_unrolled(lo, "k", k)
    largest = lo.attr_int("largest", 1) != 0
    # smallest-first is largest-first of the negation (-1 - x for i32: exact, no overflow)
    keys = x if largest else (b.sub(-1, x) if x.dtype is DType.I32 else b.neg(x))
    others = tuple(d for d in range(rank) if d != axis)
    pos = b.iota(x.shape, DType.I32, axis)
    # NaN (of either sign) orders above every number, +inf included, both ways: first when
    # largest, last when smallest, ties by index. That is ONNX Runtime's order (onnx issue
    # #4716: "onnxruntime seems to consider them as the top values"; checked against
    # onnxruntime 1.32 in test_onnx_ops), numpy's sort order, and what onnx's reference
    # evaluator does (onnx/reference/ops/op_topk.py sorts with numpy). NaNs are picked by
    # position, apart from the numbers, whose max no NaN may poison.
    nan = b.eq(b.eq(x, x), False) if x.dtype.is_float else None
    taken: Var | None = None
    values: list[Var] = []
    indices: list[Var] = []
    kept = tuple(1 if d == axis else s for d, s in enumerate(x.shape))

    def first(hit: Var) -> Var:
        """The first position along the axis where ``hit`` holds (``size``: none)."""
        return b.sub(-1, b.reduce_max(b.sub(-1, b.select(hit, pos, size)), axis))

    for _ in range(k):
        out = nan if taken is None else (taken if nan is None else b.select(taken, True, nan))
        live = keys if out is None else b.select(out, _lowest(x.dtype), keys)
        best = b.reduce_max(live, axis)
        hit = b.eq(live, b.broadcast_in_dim(best, x.shape, others))
        if out is not None:
            hit = b.select(out, False, hit)
        where = first(hit)
        if nan is not None:
            nan_left = nan if taken is None else b.select(taken, False, nan)
            at_nan = first(nan_left)
            if largest:  # a NaN left goes first
                where = b.select(b.gt(size, at_nan), at_nan, where)
            else:  # only once no number is left
                where = b.select(b.gt(size, where), where, at_nan)
        chosen = b.eq(pos, b.broadcast_in_dim(where, x.shape, others))
        taken = chosen if taken is None else b.select(chosen, True, taken)
        # the value at that position (not ``best``: the element itself, with its sign of zero)
        picked = b.reduce_max(b.select(chosen, x, _lowest(x.dtype)), axis)
        values.append(b.reshape(picked, kept))
        indices.append(b.reshape(where, kept))
    if k == 0:
        raise lo.fail("value", "k 0: poot has no empty tensors to return")
    vals = b.concat(values, axis)
    idx = b.concat(indices, axis)
    lo.wide.add(idx.id)  # ONNX's indices are int64; every position fits
    lo.set(0, vals)
    lo.set(1, idx)


def _onehot(lo: Lowering, n: Node) -> None:
    b = lo.b
    depth_arr = lo.const(1, "depth")
    if depth_arr.size != 1:
        raise lo.fail("value", f"depth has {depth_arr.size} elements, not one")
    depth = int(depth_arr.reshape(-1)[0])
    if depth <= 0:
        raise lo.fail("value", f"depth {depth} must be positive")
    idx_v = lo.value(0)
    if isinstance(idx_v, Const):
        arr = idx_v.value
        if arr.dtype.kind == "f":
            arr = np.trunc(arr)
        if np.any(np.abs(arr) > 2**31 - 1):
            raise lo.fail("value", "an index beyond i32")
        idx = lo.weight(f"{idx_v.name}.i32", arr.astype(np.int32))
    else:
        idx = idx_v
        if idx.dtype.is_float:
            idx = b.convert(idx, DType.I32)  # ONNX casts non-integer indices to int
        check_dtype(lo, idx, (DType.I32,), "the indices")
    rank = idx.type.rank + 1
    axis = norm_axis(lo, lo.attr_int("axis", -1), rank)
    shape = (*idx.shape[:axis], depth, *idx.shape[axis:])
    spread = tuple(d for d in range(rank) if d != axis)
    wrapped = b.select(b.gt(0, idx), b.add(idx, depth), idx)
    hit = b.eq(b.iota(shape, DType.I32, axis), b.broadcast_in_dim(wrapped, shape, spread))
    values = lo.var(2)
    if values.shape != (2,):
        raise lo.fail("value", f"values must hold [off, on], got {values.type}")
    off = b.broadcast_in_dim(b.reshape(b.slice(values, (0,), (1,)), ()), shape, ())
    on = b.broadcast_in_dim(b.reshape(b.slice(values, (1,), (2,)), ()), shape, ())
    lo.set(0, b.select(hit, on, off))


def _product(b: Builder, x: Var) -> Var:
    """The product over the last axis of ``x``, by halves (an odd one out carries over)."""
    while x.shape[-1] > 1:
        m = x.shape[-1]
        half = m // 2
        lead = x.shape[:-1]
        zeros = (0,) * len(lead)
        a = b.slice(x, (*zeros, 0), (*lead, half))
        c = b.slice(x, (*zeros, half), (*lead, 2 * half))
        y = b.mul(a, c)
        if m % 2:
            y = b.concat([y, b.slice(x, (*zeros, 2 * half), (*lead, m))], len(lead))
        x = y
    return b.reshape(x, x.shape[:-1])


def _reduce_prod(lo: Lowering, n: Node) -> None:
    b = lo.b
    attr_axes = lo.attr_ints("axes")
    axes_in = lo.ints(1, "axes") if lo.has(1) else attr_axes
    keep = lo.attr_int("keepdims", 1) != 0
    x = lo.var(0)
    check_dtype(lo, x, NUMERIC, "the input")
    rank = x.type.rank
    if not axes_in:
        if lo.attr_int("noop_with_empty_axes", 0):
            lo.set(0, x)
            return
        axes_in = tuple(range(rank))
    axes = norm_axes(lo, axes_in, rank)
    rest = tuple(d for d in range(rank) if d not in axes)
    count = math.prod(x.shape[a] for a in axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if count == 0:
        one = lo.weight(f"{n.outputs[0]}.one", np.ones((), x.dtype.numpy))
        y = b.broadcast_in_dim(one, tuple(x.shape[d] for d in rest), ())
    else:
        moved = b.transpose(x, (*rest, *axes)) if axes != tuple(range(rank))[-len(axes) :] else x
        flat = b.reshape(moved, (*(x.shape[d] for d in rest), count))
        y = _product(b, flat)
    lo.set(0, reshape(b, y, kept) if keep else y)


# -- Einsum -------------------------------------------------------------------------------------


def _parse(lo: Lowering, equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The equation's operand terms and output term, with ``...`` spelled as fresh capitals
    (right-aligned over the broadcast dims) and an implicit output made explicit."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise lo.fail("attribute", f"equation {equation!r} names {len(terms)} operands")
    letters = set(eq) - set(".,->")
    if any(c not in string.ascii_letters for c in letters):
        raise lo.fail("attribute", f"equation {equation!r}: indices must be letters")
    spare = [c for c in string.ascii_uppercase[::-1] if c not in letters]
    width = 0
    for t, r in zip(terms, ranks, strict=True):
        if "..." in t:
            width = max(width, r - len(t.replace("...", "")))
    ell = "".join(spare[:width][::-1])
    out_terms: list[str] = []
    for t, r in zip(terms, ranks, strict=True):
        if "..." in t:
            k = r - len(t.replace("...", ""))
            if k < 0:
                raise lo.fail("attribute", f"term {t!r} has more indices than its rank {r}")
            t = t.replace("...", ell[width - k :] if k else "")
        if len(t) != r or "." in t:
            raise lo.fail("attribute", f"term {t!r} does not match an operand of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: "".join(out_terms).count(c) for c in set("".join(out_terms))}
        out = ell + "".join(sorted(c for c, m in counts.items() if m == 1 and c not in ell))
    if len(set(out)) != len(out) or not set(out) <= set("".join(out_terms)):
        raise lo.fail("attribute", f"equation {equation!r}: bad output indices {out!r}")
    return out_terms, out


def _diagonals(lo: Lowering, x: Var, term: str) -> tuple[Var, str]:
    """``x`` (indices ``term``) with every repeated index taken once, along its diagonal."""
    b = lo.b
    while len(set(term)) != len(term):
        ch = next(c for c in term if term.count(c) > 1)
        p = term.index(ch)
        q = term.index(ch, p + 1)
        n = x.shape[p]
        if x.shape[q] != n:
            raise lo.fail("value", f"term {term!r}: index {ch!r} has sizes {n} and {x.shape[q]}")
        order = [*range(p + 1), q, *(i for i in range(p + 1, len(term)) if i != q)]
        if order != list(range(len(term))):
            x = b.transpose(x, order)
        moved = [term[i] for i in order]
        shape = x.shape
        flat = reshape(b, x, (*shape[:p], n * n, *shape[p + 2 :]))
        start = (0,) * flat.type.rank
        stride = tuple(n + 1 if i == p else 1 for i in range(flat.type.rank))
        x = b.slice(flat, start, flat.shape, stride)  # n elements: x[.., i, i, ..]
        term = "".join(moved[: p + 1] + moved[p + 2 :])
    return x, term


def _sum_out(b: Builder, x: Var, term: str, keep: set[str]) -> tuple[Var, str]:
    gone = [i for i, c in enumerate(term) if c not in keep]
    if not gone:
        return x, term
    return b.reduce_sum(x, gone), "".join(c for c in term if c in keep)


def _pair(lo: Lowering, a: Var, ta: str, c: Var, tc: str, keep: set[str]) -> tuple[Var, str]:
    """``a`` (indices ``ta``) times ``c`` (``tc``), summed over shared indices not in ``keep``:
    one batched matmul."""
    b = lo.b
    size = {**dict(zip(ta, a.shape, strict=True)), **dict(zip(tc, c.shape, strict=True))}
    for ch in set(ta) & set(tc):
        if a.shape[ta.index(ch)] != c.shape[tc.index(ch)]:
            raise lo.fail("value", f"index {ch!r} has sizes {size[ch]} and another")
    batch = [ch for ch in ta if ch in tc and ch in keep]
    summed = [ch for ch in ta if ch in tc and ch not in keep]
    left = [ch for ch in ta if ch not in tc]
    right = [ch for ch in tc if ch not in ta]

    def grouped(v: Var, t: str, groups: Sequence[Sequence[str]]) -> Var:
        order = [t.index(ch) for g in groups for ch in g]
        moved = b.transpose(v, order) if order != list(range(len(t))) else v
        return reshape(b, moved, [math.prod(size[ch] for ch in g) for g in groups])

    a3 = grouped(a, ta, (batch, left, summed))
    c3 = grouped(c, tc, (batch, summed, right))
    y = b.matmul(a3, c3)
    term = "".join(batch + left + right)
    return reshape(b, y, [size[ch] for ch in term]), term


def _einsum(lo: Lowering, n: Node) -> None:
    b = lo.b
    equation = lo.attr("equation")
    if not isinstance(equation, str):
        raise lo.fail("attribute", "equation must be a string")
    xs = [lo.var(i) for i in range(len(n.inputs))]
    if not xs:
        raise lo.fail("model", "Einsum of no operands")
    for x in xs:
        check_dtype(lo, x, NUMERIC, "an operand")
        if x.dtype is not xs[0].dtype:
            raise lo.fail("dtype", f"operands of {x.dtype.value} and {xs[0].dtype.value}")
    terms, out = _parse(lo, equation, [x.type.rank for x in xs])
    vals = list(xs)
    for k in range(len(vals)):
        vals[k], terms[k] = _diagonals(lo, vals[k], terms[k])
    for k in range(len(vals)):
        later = set(out) | {ch for j, t in enumerate(terms) if j != k for ch in t}
        vals[k], terms[k] = _sum_out(b, vals[k], terms[k], later)
    acc, term = vals[0], terms[0]
    for k in range(1, len(vals)):
        keep = set(out) | {ch for t in terms[k + 1 :] for ch in t}
        acc, term = _pair(lo, acc, term, vals[k], terms[k], keep)
    acc, term = _sum_out(b, acc, term, set(out))
    perm = [term.index(ch) for ch in out]
    lo.set(0, b.transpose(acc, perm) if perm != list(range(len(perm))) else acc)


RULES: Mapping[str, LoweringRule] = {
    "TopK": LoweringRule(_topk, frozenset({"axis", "largest", "sorted", "k"})),
    "OneHot": LoweringRule(_onehot, frozenset({"axis"})),
    "ReduceProd": LoweringRule(
        _reduce_prod, frozenset({"axes", "keepdims", "noop_with_empty_axes"})
    ),
    "Einsum": LoweringRule(_einsum, frozenset({"equation"})),
}
