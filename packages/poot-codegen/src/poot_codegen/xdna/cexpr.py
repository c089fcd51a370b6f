"""C expressions for the elementwise steps of XDNA2 kernels, and their literals.

Each step is one ``poot_math.h`` routine or one C operator on ``float`` operands: the core has
no scalar FPU, so add, sub, mul, div and compares are compiler-rt's software routines (llvm-aie
``AIE2PLegalizerInfo.cpp`` makes every scalar f32 operation a library call on aie2p), and the
rest poot's own software math (exp clamped to +-88, log, tanh,
erf, sqrt as a bit-halving estimate plus four Newton steps). A literal is a ``const float``
built from its exact bit pattern: never a decimal (which could round differently, and which
C would read as ``double`` without a suffix).
"""

from __future__ import annotations

from poot_ir import DType, Literal, NoLowering, Prim

__all__ = ["TARGET", "c_type", "literal_decl", "step_expr"]

TARGET = "xdna2"

_C_TYPES = {DType.F32: "float", DType.I32: "int32_t", DType.BOOL: "uint8_t"}

_BINARY_OPS = {Prim.ADD: "+", Prim.SUB: "-", Prim.MUL: "*", Prim.DIV: "/"}

_CALLS = {
    Prim.NEG: "poot_negf",
    Prim.ABS: "poot_absf",
    Prim.RECIP: "poot_recipf",
    Prim.EXP: "poot_expf",
    Prim.LOG: "poot_logf",
    Prim.TANH: "poot_tanhf",
    Prim.ERF: "poot_erff",
    Prim.SQRT: "poot_sqrtf",
    Prim.MAX: "poot_maxf",
    Prim.MIN: "poot_minf",
}


def c_type(dtype: DType) -> str:
    """The C element type of a tensor of ``dtype`` (BOOL is a byte holding 0 or 1)."""
    t = _C_TYPES.get(dtype)
    if t is None:
        raise NoLowering(TARGET, -1, "", f"no C element type for {dtype.value}")
    return t


def literal_decl(name: str, lit: Literal, eqn: int, prim: Prim) -> str:
    """``const float <name> = poot_f32_from_bits(0x...u);``: the literal's exact bits."""
    if lit.dtype is not DType.F32:
        raise NoLowering(TARGET, eqn, prim.value, f"a {lit.dtype.value} literal")
    return f"const float {name} = poot_f32_from_bits(0x{lit.bits:08x}u);"


def step_expr(prim: Prim, args: list[str], eqn: int) -> str:
    """The C expression of one elementwise step on operand expressions ``args``.

    ``ge`` gives a ``uint8_t`` 0 or 1 (a BOOL element); everything else a ``float``."""
    if prim in _BINARY_OPS and len(args) == 2:
        return f"{args[0]} {_BINARY_OPS[prim]} {args[1]}"
    if prim is Prim.GE and len(args) == 2:
        return f"(uint8_t)({args[0]} >= {args[1]})"
    fn = _CALLS.get(prim)
    if fn is not None and len(args) == (2 if prim in (Prim.MAX, Prim.MIN) else 1):
        return f"{fn}({', '.join(args)})"
    raise NoLowering(TARGET, eqn, prim.value, "no elementwise kernel step")
