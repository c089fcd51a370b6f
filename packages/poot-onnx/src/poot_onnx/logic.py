"""ONNX lowering rules for logic, tests and rounding, decomposed into poot's elementwise
primitives: ``And``/``Or``/``Xor``/``Not`` as ``select`` and ``eq`` on bool, ``IsNaN``/``IsInf``
as comparisons, ``Sign``, ``Floor``/``Ceil``/``Round`` through an I32 ``convert`` (exact below
2^(mantissa bits), where every float is already an integer and is passed through), ``Mod``,
``Clip`` and ``Sigmoid``.

The activations ONNX defines as functions (``HardSigmoid``, ``Elu``, ``Gelu``, ...) need no rule:
their function bodies are inlined (``poot_onnx.functions``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from poot_ir.builder import Builder
from poot_ir.core import Atom, Var
from poot_ir.dtypes import DType
from poot_ir.ops import sigmoid

from poot_onnx.context import FLOATS, NUMERIC, Lowering, LoweringRule, Node, check_dtype

__all__ = ["RULES"]

#: The largest finite value of each float dtype.
_LARGEST = {DType.F32: 3.4028234663852886e38, DType.F16: 65504.0, DType.BF16: 3.3895313892515355e38}

#: Below this magnitude a float may have a fraction; at or above it, it is an integer.
_INTEGRAL = {DType.F32: 2.0**23, DType.F16: 2.0**10, DType.BF16: 2.0**7}


def _bools(lo: Lowering, n: Node) -> tuple[Var, Atom]:
    a, c = lo.atoms((0, 1))
    first = a if isinstance(a, Var) else c
    if first.dtype is not DType.BOOL:
        raise lo.fail("dtype", f"takes bool, got {first.dtype.value}")
    if isinstance(a, Var):
        return a, c
    assert isinstance(c, Var)  # atoms() keeps at least one value
    return c, a  # each op here is symmetric


def _logic(kind: str) -> LoweringRule:
    def handler(lo: Lowering, n: Node) -> None:
        b = lo.b
        x, y = _bools(lo, n)
        if kind == "and":
            out = b.select(x, y, False)
        elif kind == "or":
            out = b.select(x, True, y)
        else:  # xor
            out = b.eq(b.eq(x, y), False)
        lo.set(0, out)

    return LoweringRule(handler)


def _not(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    if x.dtype is not DType.BOOL:
        raise lo.fail("dtype", f"takes bool, got {x.dtype.value}")
    lo.set(0, lo.b.eq(x, False))


def _float_in(lo: Lowering) -> Var:
    x = lo.var(0)
    check_dtype(lo, x, FLOATS, "the input")
    return x


def _isnan(lo: Lowering, n: Node) -> None:
    x = _float_in(lo)
    lo.set(0, lo.b.eq(lo.b.eq(x, x), False))


def _isinf(lo: Lowering, n: Node) -> None:
    x = _float_in(lo)
    b = lo.b
    pos, neg = lo.attr_int("detect_positive", 1) != 0, lo.attr_int("detect_negative", 1) != 0
    # Beyond the largest finite value, rather than equal to an infinite literal: the same
    # test, and one the FP16 stand-in (OpenVINO's CPU plugin) answers as the oracle does.
    big = _LARGEST[x.dtype]
    if pos and neg:
        y = b.gt(b.abs(x), big)
    elif pos:
        y = b.gt(x, big)
    elif neg:
        y = b.gt(-big, x)
    else:
        y = b.gt(x, x)  # detecting neither: always false
    lo.set(0, y)


def _sign(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    check_dtype(lo, x, NUMERIC, "the input")
    b = lo.b
    # 0, -0 and NaN are their own sign.
    lo.set(0, b.select(b.gt(x, 0), 1, b.select(b.gt(0, x), -1, x)))


def _trunc(b: Builder, x: Var) -> Var:
    return b.convert(b.convert(x, DType.I32), x.dtype)


def _integral(b: Builder, x: Var, rounded: Var) -> Var:
    """``rounded`` where ``x`` may have a fraction, else ``x`` (large values, infinities, NaN)."""
    return b.select(b.gt(_INTEGRAL[x.dtype], b.abs(x)), rounded, x)


def _floor_of(b: Builder, x: Var) -> Var:
    t = _trunc(b, x)
    return b.select(b.gt(t, x), b.sub(t, 1.0), t)


def _rounding(kind: str) -> Callable[[Lowering, Node], None]:
    def handler(lo: Lowering, n: Node) -> None:
        x = _float_in(lo)
        b = lo.b
        if kind == "floor":
            r = _floor_of(b, x)
        elif kind == "ceil":
            t = _trunc(b, x)
            r = b.select(b.gt(x, t), b.add(t, 1.0), t)
        else:  # round half to even
            f = _floor_of(b, x)
            d = b.sub(x, f)
            half = b.sub(f, b.mul(_floor_of(b, b.mul(f, 0.5)), 2.0))  # f mod 2: 0 or 1
            up = b.select(b.eq(d, 0.5), b.add(f, half), b.add(f, 1.0))
            r = b.select(b.gt(0.5, d), f, up)
        lo.set(0, _integral(b, x, r))

    return handler


def _mod(lo: Lowering, n: Node) -> None:
    a, c = lo.var(0), lo.var(1)
    b = lo.b
    if lo.attr_int("fmod", 0):
        # C fmod: the remainder has the sign of the dividend.
        if a.dtype.is_float:
            q = b.div(a, c)
            lo.set(0, b.sub(a, b.mul(c, _integral(b, q, _trunc(b, q)))))
            return
        check_dtype(lo, a, NUMERIC, "the input")
        lo.set(0, b.sub(a, b.mul(c, b.div(a, c))))  # I32 div truncates
        return
    if a.dtype is not DType.I32:
        raise lo.fail("dtype", f"Mod with fmod=0 takes integers, got {a.dtype.value}")
    r = b.sub(a, b.mul(c, b.div(a, c)))
    # Python's mod: the remainder has the sign of the divisor.
    fix = b.select(b.eq(r, 0), False, b.eq(b.gt(0, r), b.gt(c, 0)))
    lo.set(0, b.select(fix, b.add(r, c), r))


def _clip(lo: Lowering, n: Node) -> None:
    x = lo.var(0)
    check_dtype(lo, x, NUMERIC, "the input")
    b = lo.b
    lo_attr, hi_attr = lo.attr("min"), lo.attr("max")
    y = x
    if lo.opset < 11:
        if isinstance(lo_attr, float | int):
            y = b.max(y, float(lo_attr))
        if isinstance(hi_attr, float | int):
            y = b.min(y, float(hi_attr))
        lo.set(0, y)
        return
    for i, op in ((1, b.max), (2, b.min)):
        if lo.has(i):
            (bound,) = lo.atoms((i,), extra=x.shape)
            y = op(y, bound)
    lo.set(0, y)


def _sigmoid(lo: Lowering, n: Node) -> None:
    lo.set(0, sigmoid(lo.b, _float_in(lo)))


RULES: Mapping[str, LoweringRule] = {
    "And": _logic("and"),
    "Or": _logic("or"),
    "Xor": _logic("xor"),
    "Not": LoweringRule(_not),
    "IsNaN": LoweringRule(_isnan),
    "IsInf": LoweringRule(_isinf, frozenset({"detect_positive", "detect_negative"})),
    "Sign": LoweringRule(_sign),
    "Floor": LoweringRule(_rounding("floor")),
    "Ceil": LoweringRule(_rounding("ceil")),
    "Round": LoweringRule(_rounding("round")),
    "Mod": LoweringRule(_mod, frozenset({"fmod"})),
    "Clip": LoweringRule(_clip, frozenset({"min", "max"})),
    "Sigmoid": LoweringRule(_sigmoid),
}
