"""ONNX lowering rules for data movement, shapes and constants.

Shapes, axes and slice bounds are read from constants (``STATIC_INPUTS`` in
``poot_onnx.table``); Python's slice clamping is ONNX's. A negative ``Slice`` step becomes a
``gather`` of the indices it visits, a scalar constant ``Gather`` index a ``slice`` and a
``reshape``, and a ``Range`` of poot's dtypes an ``iota`` (int64 ranges are folded).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from poot_ir.core import Literal
from poot_ir.dtypes import DType

from poot_onnx.context import (
    Const,
    Lowering,
    LoweringRule,
    Node,
    bcast,
    norm_axes,
    norm_axis,
    reshape,
)

__all__ = ["RULES"]


# -- data movement --------------------------------------------------------------------------


def _identity(lo: Lowering, n: Node) -> None:
    lo.set(0, lo.value(0))


def _gather(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    if not shape:
        raise lo.fail("model", "cannot gather from a scalar")
    axis = norm_axis(lo, lo.attr_int("axis", 0), len(shape))
    size = shape[axis]
    b = lo.b
    idx = lo.value(1)
    if isinstance(idx, Const) and idx.value.ndim == 0 and idx.value.dtype.kind in "iu":
        # One constant index: a slice and a reshape, no index tensor.
        lo.check_indices(idx.value, size, idx.name)
        i = int(idx.value) % size
        x = lo.var(0)
        start = tuple(i if a == axis else 0 for a in range(len(shape)))
        limit = tuple(i + 1 if a == axis else d for a, d in enumerate(shape))
        part = b.slice(x, start, limit)
        lo.set(0, b.reshape(part, shape[:axis] + shape[axis + 1 :]))
        return
    indices = lo.index_var(1, size)
    lo.set(0, b.gather(lo.var(0), indices, axis))


def _transpose(lo: Lowering, n: Node) -> None:
    rank = len(lo.shape(0))
    perm = lo.attr_ints("perm")
    perm = tuple(reversed(range(rank))) if perm is None else perm
    if sorted(perm) != list(range(rank)):
        raise lo.fail("attribute", f"perm {perm} is not a permutation of {rank} axes")
    x = lo.var(0)
    lo.set(0, x if perm == tuple(range(rank)) else lo.b.transpose(x, perm))


def _resolve_shape(
    lo: Lowering, src: tuple[int, ...], spec: Sequence[int], allowzero: bool
) -> tuple[int, ...]:
    out: list[int] = []
    infer: int | None = None
    for i, d in enumerate(spec):
        if d == -1:
            if infer is not None:
                raise lo.fail("value", f"shape {tuple(spec)} has more than one -1")
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(src):
                raise lo.fail("value", f"shape {tuple(spec)}: 0 at {i} copies no input axis")
            out.append(src[i])
        elif d < 0:
            raise lo.fail("value", f"shape {tuple(spec)} has a negative extent")
        else:
            out.append(d)
    total = math.prod(src)
    if infer is not None:
        rest = math.prod(out)
        if rest == 0 or total % rest:
            raise lo.fail("value", f"cannot infer -1 in {tuple(spec)} for {total} elements")
        out[infer] = total // rest
    if math.prod(out) != total:
        raise lo.fail("value", f"cannot reshape {src} to {tuple(spec)}")
    return tuple(out)


def _reshape_to(lo: Lowering, shape: tuple[int, ...]) -> None:
    """Output 0 is input 0 reshaped to ``shape``."""
    lo.set(0, reshape(lo.b, lo.var(0), shape))


def _reshape_op(lo: Lowering, n: Node) -> None:
    spec = lo.ints(1, "shape") if lo.has(1) else lo.attr_ints("shape")
    if spec is None:
        raise lo.fail("model", "has no shape")
    allowzero = lo.attr_int("allowzero", 0) != 0
    _reshape_to(lo, _resolve_shape(lo, lo.shape(0), spec, allowzero))


def _flatten(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    axis = lo.attr_int("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise lo.fail("attribute", f"axis {axis} is outside rank {len(shape)}")
    axis += len(shape) if axis < 0 else 0
    _reshape_to(lo, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _axes_of(lo: Lowering) -> tuple[int, ...] | None:
    if lo.has(1):
        return lo.ints(1, "axes")
    return lo.attr_ints("axes")


def _unsqueeze(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    axes_in = _axes_of(lo)
    if axes_in is None:
        raise lo.fail("model", "has no axes")
    rank = len(shape) + len(axes_in)
    axes = norm_axes(lo, axes_in, rank)
    dims = iter(shape)
    _reshape_to(lo, tuple(1 if i in axes else next(dims) for i in range(rank)))


def _squeeze(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    axes_in = _axes_of(lo)
    if axes_in is None:
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        axes = norm_axes(lo, axes_in, len(shape))
    if any(shape[a] != 1 for a in axes):
        raise lo.fail("value", f"cannot squeeze axes {axes} of shape {shape}")
    _reshape_to(lo, tuple(d for i, d in enumerate(shape) if i not in axes))


def _expand(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    out = tuple(int(d) for d in np.broadcast_shapes(shape, lo.ints(1, "shape")))
    lo.set(0, bcast(lo.b, lo.var(0), out))


def _slice(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    rank = len(shape)
    if lo.opset < 10:
        starts, ends = lo.attr_ints("starts"), lo.attr_ints("ends")
        axes_in, steps_in = lo.attr_ints("axes"), None
    else:
        starts, ends = lo.ints(1, "starts"), lo.ints(2, "ends")
        axes_in = lo.ints(3, "axes") if lo.has(3) else None
        steps_in = lo.ints(4, "steps") if lo.has(4) else None
    if starts is None or ends is None:
        raise lo.fail("model", "has no starts or ends")
    axes = axes_in if axes_in is not None else tuple(range(len(starts)))
    steps = steps_in if steps_in is not None else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise lo.fail("model", "starts, ends, axes and steps differ in length")
    norm = [norm_axis(lo, a, rank, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        raise lo.fail("attribute", f"axes {axes} repeat an axis")
    window = [slice(None)] * rank
    for a, s, e, st in zip(norm, starts, ends, steps, strict=True):
        if st == 0:
            raise lo.fail("value", f"step 0 on axis {a}")
        window[a] = slice(s, e, st)  # Python's clamping is ONNX's
    b = lo.b
    start, limit, stride = [0] * rank, list(shape), [1] * rank
    backward: list[tuple[int, range]] = []
    for a, w in enumerate(window):
        lo_, hi, st = w.indices(shape[a])
        if st > 0:
            start[a], limit[a], stride[a] = lo_, max(lo_, hi), st
        else:
            backward.append((a, range(lo_, hi, st)))
    y = lo.var(0)
    if (start, limit, stride) != ([0] * rank, list(shape), [1] * rank):
        y = b.slice(y, start, limit, stride)
    for a, r in backward:
        # A negative step is a gather of the indices it visits.
        indices = lo.index_weight(f"{n.outputs[0]}.indices{a}", list(r))
        y = b.gather(y, indices, a)
    lo.set(0, y)


def _concat(lo: Lowering, n: Node) -> None:
    if not n.inputs:
        raise lo.fail("model", "takes at least one input")
    rank = len(lo.shape(0))
    axis = norm_axis(lo, lo.attr_int("axis", 0), rank)
    k = len(n.inputs)
    lo.set(0, lo.b.concat([lo.var(i) for i in range(k)], axis))


def _split(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    if not shape:
        raise lo.fail("model", "cannot split a scalar")
    axis = norm_axis(lo, lo.attr_int("axis", 0), len(shape))
    size, k = shape[axis], len(n.outputs)
    given = lo.ints(1, "split") if lo.has(1) else lo.attr_ints("split")
    if given is not None:
        sizes = given
    elif lo.attr_int("num_outputs", k) != k:
        raise lo.fail("model", f"num_outputs is not the {k} outputs")
    elif lo.opset >= 18:
        step = -(-size // k)  # the last part may be smaller (opset 18)
        sizes = tuple(min(step, max(size - i * step, 0)) for i in range(k))
    else:
        sizes = (size // k,) * k
    if len(sizes) != k or sum(sizes) != size or any(s < 0 for s in sizes):
        raise lo.fail("value", f"parts {sizes} do not split an axis of {size} into {k}")
    bounds = [0, *np.cumsum(sizes).tolist()]
    x = lo.var(0)
    for i in range(k):
        start = tuple(bounds[i] if a == axis else 0 for a in range(len(shape)))
        limit = tuple(bounds[i + 1] if a == axis else d for a, d in enumerate(shape))
        lo.set(i, lo.b.slice(x, start, limit))


def _range(lo: Lowering, n: Node) -> None:
    start, limit, delta = (lo.const(i, what) for i, what in enumerate(("start", "limit", "delta")))
    if any(v.size != 1 for v in (start, limit, delta)):
        raise lo.fail("value", "start, limit and delta must be scalars")
    s, lim, d = (v.reshape(-1)[0] for v in (start, limit, delta))
    if d == 0:
        raise lo.fail("value", "delta is 0")
    count = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
    dtype = DType.from_numpy(s.dtype)
    if dtype is None or dtype is DType.BOOL:
        # Constant ranges of other dtypes (int64) are folded (``table._fold``); ONNX has no
        # bool range.
        raise lo.fail("dtype", f"a Range of {s.dtype}")
    # start + i * delta, i counted by iota: no weight, however long the range.
    b = lo.b
    y = b.iota((count,), dtype, 0)
    if float(d) != 1:
        y = b.mul(y, Literal.of(d, dtype))
    if not (float(s) == 0 and float(d) > 0):
        y = b.add(y, Literal.of(s, dtype))
    lo.set(0, y)


def _constant(lo: Lowering, n: Node) -> None:
    given = [k for k in n.attrs if k.startswith("value") or k == "sparse_value"]
    if len(given) != 1:
        raise lo.fail("model", f"needs exactly one value attribute, got {given}")
    key = given[0]
    raw = lo.attr(key)
    if isinstance(raw, np.ndarray):
        arr = raw
    elif key == "value_float":
        arr = np.asarray(raw, np.float32)
    elif key == "value_floats":
        arr = np.asarray(raw, np.float32).reshape(-1)
    elif key == "value_int":
        arr = np.asarray(raw, np.int64)
    elif key == "value_ints":
        arr = np.asarray(raw, np.int64).reshape(-1)
    else:
        raise lo.fail("dtype", f"a {key} constant")
    lo.set(0, arr)


def _constant_of_shape(lo: Lowering, n: Node) -> None:
    shape = lo.ints(0, "shape")
    if any(d < 0 for d in shape):
        raise lo.fail("value", f"shape {shape} has a negative extent")
    fill = lo.attr_tensor("value")
    fill = np.zeros(1, np.float32) if fill is None else fill
    if fill.size != 1:
        raise lo.fail("attribute", "value must hold one element")
    lo.set(0, np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype))


def _shape(lo: Lowering, n: Node) -> None:
    shape = lo.shape(0)
    start, end = lo.attr_int("start", 0), lo.attr_int("end", len(shape))
    lo.set(0, np.asarray(shape[start:end], dtype=np.int64).reshape(-1))


def _size(lo: Lowering, n: Node) -> None:
    lo.set(0, np.asarray(math.prod(lo.shape(0)), dtype=np.int64))


RULES: Mapping[str, LoweringRule] = {
    "Identity": LoweringRule(_identity),
    "Gather": LoweringRule(_gather, frozenset({"axis"})),
    "Transpose": LoweringRule(_transpose, frozenset({"perm"})),
    "Reshape": LoweringRule(_reshape_op, frozenset({"shape", "allowzero"})),
    "Flatten": LoweringRule(_flatten, frozenset({"axis"})),
    "Unsqueeze": LoweringRule(_unsqueeze, frozenset({"axes"})),
    "Squeeze": LoweringRule(_squeeze, frozenset({"axes"})),
    "Expand": LoweringRule(_expand),
    "Slice": LoweringRule(_slice, frozenset({"starts", "ends", "axes"})),
    "Concat": LoweringRule(_concat, frozenset({"axis"})),
    "Split": LoweringRule(_split, frozenset({"axis", "split", "num_outputs"})),
    "Range": LoweringRule(_range),
    "Constant": LoweringRule(
        _constant,
        frozenset(
            {
                "value",
                "value_float",
                "value_floats",
                "value_int",
                "value_ints",
                "value_string",
                "value_strings",
                "sparse_value",
            }
        ),
    ),
    "ConstantOfShape": LoweringRule(_constant_of_shape, frozenset({"value"})),
    "Shape": LoweringRule(_shape, frozenset({"start", "end"})),
    "Size": LoweringRule(_size),
}
