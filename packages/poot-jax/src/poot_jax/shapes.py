"""Data-movement rules: transpose, reshape, broadcast, squeeze, slices, rev, dynamic slices,
concatenate, pad, iota and the one-axis gather forms.

``dynamic_slice`` and ``dynamic_update_slice`` clamp their starts as XLA does (into
``[0, dim - size]``), so poot's ``dynamic_update_slice`` never sees a window that does not fit;
``dynamic_slice`` and ``rev`` become ``gather``s of counted indices along each axis. A gather
clamps its indices as XLA does (``CLIP``, and ``PROMISE_IN_BOUNDS``, which XLA clamps too);
``FILL_OR_DROP`` then puts the fill value (JAX's default: NaN, INT_MIN or True) in the rows
whose index was outside the axis. Interior padding interleaves the pad value through a new
axis (concatenated, flattened, the tail cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poot_ir.core import Literal as PootLiteral
from poot_ir.core import Var
from poot_ir.dtypes import DType

from poot_jax.context import Ctx, Refuse, Value, poot_dtype
from poot_jax.elementwise import Rule

__all__ = ["RULES", "interior"]


def _ints(xs: Sequence[Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


def _transpose(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return [cx.b.transpose(cx.var(ins[0]), _ints(p["permutation"]))]


def _reshape_to_out(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    x, shape = cx.var(ins[0]), _ints(outs[0].shape)
    return [x if x.shape == shape else cx.b.reshape(x, shape)]


def _reshape(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    dims = p.get("dimensions")
    if dims is None:
        return _reshape_to_out(cx, ins, p, outs)
    # the operand's axes raveled in the order ``dimensions``: a transpose, then the reshape
    return _reshape_to_out(cx, [cx.b.transpose(cx.var(ins[0]), _ints(dims))], {}, outs)


def _broadcast(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x, shape = cx.var(ins[0]), _ints(p["shape"])
    dims = _ints(p["broadcast_dimensions"])
    return [x if x.shape == shape else cx.b.broadcast_in_dim(x, shape, dims)]


def _slice(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x = cx.var(ins[0])
    strides = p.get("strides")
    return [
        cx.b.slice(
            x,
            _ints(p["start_indices"]),
            _ints(p["limit_indices"]),
            None if strides is None else _ints(strides),
        )
    ]


def _counted(cx: Ctx, n: int, start: Value | int = 0, down: bool = False) -> Var:
    """The i32 indices ``start, start+1, ..., start+n-1`` (``n-1, ..., 0`` when ``down``)."""
    b = cx.b
    idx = b.iota((n,), DType.I32, 0)
    if down:
        idx = b.sub(n - 1, idx)
    if isinstance(start, int):
        return idx if start == 0 else b.add(idx, start)
    return b.add(idx, start)


def _rev(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x = cx.var(ins[0])
    for axis in _ints(p["dimensions"]):
        if x.shape[axis] > 1:
            x = cx.b.gather(x, _counted(cx, x.shape[axis], down=True), axis)
    return [x]


def _clamped(cx: Ctx, start: Value, hi: int) -> Value:
    """A start clamped into ``[0, hi]`` as XLA clamps dynamic slice starts."""
    if isinstance(start, PootLiteral):
        return cx.lit(max(0, min(int(start.value), hi)), DType.I32)
    if start.dtype is not DType.I32:
        raise Refuse("dtype", f"a {start.dtype.value} start index (poot takes i32)")
    return cx.b.max(cx.b.min(start, hi), 0)


def _dynamic_slice(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    x, starts, sizes = cx.var(ins[0]), ins[1:], _ints(p["slice_sizes"])
    for axis, (s, n) in enumerate(zip(starts, sizes, strict=True)):
        dim = x.shape[axis]
        if n == dim:  # the start clamps to 0: the whole axis
            continue
        start = _clamped(cx, s, dim - n)
        if isinstance(start, PootLiteral):
            lo = int(start.value)
            x = cx.b.slice(
                x,
                tuple(lo if i == axis else 0 for i in range(len(x.shape))),
                tuple(lo + n if i == axis else d for i, d in enumerate(x.shape)),
            )
        else:
            x = cx.b.gather(x, _counted(cx, n, start), axis)
    return [x]


def _dynamic_update_slice(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    x, upd, starts = cx.var(ins[0]), cx.var(ins[1]), ins[2:]
    clamped: list[Var | int] = []
    for s, d, u in zip(starts, x.shape, upd.shape, strict=True):
        c = _clamped(cx, s, d - u)
        clamped.append(int(c.value) if isinstance(c, PootLiteral) else c)
    return [cx.b.dynamic_update_slice(x, upd, clamped)]


def _concatenate(
    cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]
) -> list[Var]:
    return [cx.b.concat([cx.var(x) for x in ins], int(p["dimension"]))]


def _iota(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    dtype = poot_dtype(p["dtype"])
    if dtype is DType.BOOL:
        raise Refuse("dtype", "iota of bool")
    return [cx.b.iota(_ints(p["shape"]), dtype, int(p["dimension"]))]


def interior(cx: Ctx, x: Var, value: Var, axis: int, k: int) -> Var:
    """``k`` copies of ``value`` between neighbours along ``axis``: each element followed by
    its ``k`` pads (a new axis, concatenated, flattened), the trailing ``k`` cut off."""
    b, n = cx.b, x.shape[axis]
    if n == 0:
        return x
    split = (*x.shape[: axis + 1], 1, *x.shape[axis + 1 :])
    pads = b.broadcast_in_dim(value, (*x.shape[: axis + 1], k, *x.shape[axis + 1 :]), ())
    both = b.concat([b.reshape(x, split), pads], axis + 1)
    flat = b.reshape(both, (*x.shape[:axis], n * (k + 1), *x.shape[axis + 1 :]))
    limit = tuple(n + (n - 1) * k if i == axis else d for i, d in enumerate(flat.shape))
    return b.slice(flat, (0,) * len(flat.shape), limit)


def _pad(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x, value = cx.var(ins[0]), cx.var(ins[1])
    for axis, (lo, hi, between) in enumerate(p["padding_config"]):
        lo, hi, between = int(lo), int(hi), int(between)
        if between:  # XLA pads between elements first, then at the edges
            x = interior(cx, x, value, axis, between)
        if lo < 0 or hi < 0:  # negative padding cuts
            start = tuple(max(0, -lo) if i == axis else 0 for i in range(len(x.shape)))
            limit = tuple(d - max(0, -hi) if i == axis else d for i, d in enumerate(x.shape))
            x = cx.b.slice(x, start, limit)
            lo, hi = max(lo, 0), max(hi, 0)
        parts = []
        for n in (lo, hi):
            shape = tuple(n if i == axis else d for i, d in enumerate(x.shape))
            parts.append(cx.b.broadcast_in_dim(value, shape, ()) if n else None)
        pieces = [v for v in (parts[0], x, parts[1]) if v is not None]
        if len(pieces) > 1:
            x = cx.b.concat(pieces, axis)
    return [x]


def _gather(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    """The one-axis forms jnp indexing makes are ``numpy.take(x, idx[..., 0], axis)``; any
    other form goes through ``_gather_flat``."""
    x, idx = cx.var(ins[0]), cx.var(ins[1])
    dn = p["dimension_numbers"]
    collapsed, smap = _ints(dn.collapsed_slice_dims), _ints(dn.start_index_map)
    batching = _ints(getattr(dn, "operand_batching_dims", ()))
    sizes, offsets = _ints(p["slice_sizes"]), _ints(dn.offset_dims)
    if 0 in x.shape:
        raise Refuse("params", "a gather from an empty operand")
    if idx.dtype is not DType.I32:
        raise Refuse("dtype", f"{idx.dtype.value} gather indices (poot takes i32)")
    rank, batch_rank = len(x.shape), len(idx.shape) - 1
    axis = smap[0] if len(smap) == 1 else -1
    kept = [i for i in range(rank) if i != axis]
    take = (
        not batching
        and len(smap) == 1
        and collapsed == smap
        and idx.shape[-1:] == (1,)
        and all(sizes[i] == x.shape[i] for i in kept)
        # numpy.take puts the index axes where the gathered axis was
        and offsets == tuple(range(axis)) + tuple(range(axis + batch_rank, rank - 1 + batch_rank))
    )
    if not take:
        return [_gather_flat(cx, x, idx, p, tuple(outs[0].shape))]
    b, n = cx.b, x.shape[axis]
    flat = b.reshape(idx, idx.shape[:-1])
    # CLIP clamps; so does XLA for PROMISE_IN_BOUNDS (its gather clamps every start index)
    got = b.gather(x, b.max(b.min(flat, n - 1), 0), axis)
    if "FILL_OR_DROP" not in str(p.get("mode")):
        return [got]
    # FILL_OR_DROP: a row whose index is outside [0, n) is the fill value (jax's defaults)
    inside = cx.logical_and(b.ge(flat, 0), b.gt(n, flat))
    mask = b.broadcast_in_dim(inside, got.shape, tuple(range(axis, axis + batch_rank)))
    return [b.select(mask, got, cx.full(_fill(p.get("fill_value"), x.dtype), (), x.dtype))]


def _gather_flat(cx: Ctx, x: Var, idx: Var, p: dict[str, Any], out: tuple[int, ...]) -> Var:
    """Any XLA gather as one ``gather`` from the flattened operand: for every element of the
    result, the flat operand index ``sum_d (start_d + offset_d) * stride_d``, where ``start_d``
    is the clamped start index (axes of ``start_index_map``) or the batch coordinate (operand
    batching axes) and ``offset_d`` the result's coordinate along the axis's offset dim."""
    b, dn = cx.b, p["dimension_numbers"]
    smap, sizes = _ints(dn.start_index_map), _ints(p["slice_sizes"])
    collapsed, offsets = set(_ints(dn.collapsed_slice_dims)), _ints(dn.offset_dims)
    op_batch = _ints(getattr(dn, "operand_batching_dims", ()))
    idx_batch = _ints(getattr(dn, "start_indices_batching_dims", ()))
    rank, batch_rank = len(x.shape), len(idx.shape) - 1
    batch_axes = [a for a in range(len(out)) if a not in offsets]
    offset_of = [d for d in range(rank) if d not in collapsed and d not in op_batch]
    fill = "FILL_OR_DROP" in str(p.get("mode"))
    flat: Var | None = None
    inside: Var | None = None
    stride = 1
    for d in reversed(range(rank)):
        coord: Var | None = None
        if d in smap:
            k = smap.index(d)
            start_k = tuple(k if i == batch_rank else 0 for i in range(batch_rank + 1))
            limit_k = tuple(k + 1 if i == batch_rank else n for i, n in enumerate(idx.shape))
            s = b.reshape(b.slice(idx, start_k, limit_k), idx.shape[:-1])
            hi = x.shape[d] - sizes[d]
            if fill:
                ok = cx.logical_and(b.ge(s, 0), b.ge(hi, s))
                inside = ok if inside is None else cx.logical_and(inside, ok)
            s = b.max(b.min(s, hi), 0)
            coord = b.broadcast_in_dim(s, out, tuple(batch_axes))
        elif d in op_batch:
            coord = b.iota(out, DType.I32, batch_axes[idx_batch[op_batch.index(d)]])
        if d in offset_of:
            off = b.iota(out, DType.I32, offsets[offset_of.index(d)])
            coord = off if coord is None else b.add(coord, off)
        if coord is not None:
            term = coord if stride == 1 else b.mul(coord, stride)
            flat = term if flat is None else b.add(flat, term)
        stride *= x.shape[d]
    if flat is None:
        flat = cx.full(0, out, DType.I32)
    got = b.gather(b.reshape(x, (stride,)), flat, 0)
    if inside is None:
        return got
    mask = b.broadcast_in_dim(inside, out, tuple(batch_axes))
    return b.select(mask, got, cx.full(_fill(p.get("fill_value"), x.dtype), (), x.dtype))


def _fill(value: Any, dtype: DType) -> float | int | bool:
    if value is not None:
        return bool(value) if dtype is DType.BOOL else value
    if dtype.is_float:
        return float("nan")
    return True if dtype is DType.BOOL else -(2**31)


def _stack(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    axis = int(p["axis"])
    xs = [cx.var(x) for x in ins]
    grown = [cx.b.reshape(x, (*x.shape[:axis], 1, *x.shape[axis:])) for x in xs]
    return [grown[0] if len(grown) == 1 else cx.b.concat(grown, axis)]


def _pieces(cx: Ctx, x: Var, axis: int, sizes: Sequence[int]) -> list[Var]:
    out, at = [], 0
    for n in sizes:
        start = tuple(at if i == axis else 0 for i in range(len(x.shape)))
        limit = tuple(at + n if i == axis else d for i, d in enumerate(x.shape))
        out.append(cx.b.slice(x, start, limit))
        at += n
    return out


def _unstack(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x, axis = cx.var(ins[0]), int(p["axis"])
    shape = x.shape[:axis] + x.shape[axis + 1 :]
    return [cx.b.reshape(v, shape) for v in _pieces(cx, x, axis, [1] * x.shape[axis])]


def _split(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    return _pieces(cx, cx.var(ins[0]), int(p["axis"]), _ints(p["sizes"]))


def _tile(cx: Ctx, ins: Sequence[Value], p: dict[str, Any], outs: Sequence[Any]) -> list[Var]:
    x = cx.var(ins[0])
    reps = _ints(p["reps"])
    if len(reps) > len(x.shape):  # numpy's rule: leading axes of 1 first
        x = cx.b.reshape(x, (1,) * (len(reps) - len(x.shape)) + x.shape)
    for axis, r in enumerate((1,) * (len(x.shape) - len(reps)) + reps):
        if r != 1:
            x = (
                cx.b.concat([x] * r, axis)
                if r
                else cx.b.slice(
                    x,
                    (0,) * len(x.shape),
                    tuple(0 if i == axis else d for i, d in enumerate(x.shape)),
                )
            )
    return [x]


RULES: dict[str, Rule] = {
    "transpose": _transpose,
    "reshape": _reshape,
    "squeeze": _reshape_to_out,
    "expand_dims": _reshape_to_out,
    "broadcast_in_dim": _broadcast,
    "slice": _slice,
    "rev": _rev,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "concatenate": _concatenate,
    "iota": _iota,
    "pad": _pad,
    "gather": _gather,
    "stack": _stack,
    "unstack": _unstack,
    "split": _split,
    "tile": _tile,
}
