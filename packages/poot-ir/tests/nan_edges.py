"""Programs with NaN payloads at the edges, for ``test_nan_bits``: evaluated in this process,
and (``python nan_edges.py``) in a subprocess under another ``NPY_DISABLE_CPU_FEATURES``,
printing every result's bits as JSON so the runs can be compared."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
from poot_ir import Builder, DType, Var, evaluate

F32, F16, BF16 = DType.F32, DType.F16, DType.BF16
FLOATS = (F32, F16, BF16)
_UINT = {4: np.uint32, 2: np.uint16}

#: Per dtype: quiet and signalling NaNs of both signs with payloads, zeros, infinities,
#: subnormals and ordinary values (32 elements, so numpy's vector loops see full registers).
_PATTERNS = {
    F32: [0x7FC0_0000, 0xFFC0_0000, 0x7FA0_1234, 0xFFA0_1234, 0x7FC0_0BAD, 0xFFBF_FFFF]
    + [0x7F80_0001, 0xFF80_0001, 0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000]
    + [0x0000_0001, 0x8000_0001, 0x3F80_0000, 0xBF80_0000],
    F16: [0x7E00, 0xFE00, 0x7D23, 0xFD23, 0x7E5A, 0xFDFF, 0x7C01, 0xFC01]
    + [0x0000, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x3C00, 0xBC00],
    BF16: [0x7FC0, 0xFFC0, 0x7FA1, 0xFFA1, 0x7FC5, 0xFFBF, 0x7F81, 0xFF81]
    + [0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x3F80, 0xBF80],
}


def edge_values(dtype: DType, shift: int = 0) -> np.ndarray:
    """32 values of ``dtype`` (two rounds of the patterns, the second rotated by ``shift``)."""
    p = _PATTERNS[dtype]
    bits = p + p[shift:] + p[:shift]
    ubits = _UINT[dtype.itemsize]
    return np.array(bits, ubits).view(dtype.numpy)


def bits_of(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(_UINT[x.dtype.itemsize])


Unary = Callable[[Builder, Var], Var]
Binary = Callable[[Builder, Var, Var], Var]

#: Programs of one operand ``x`` (32 elements).
UNARY: dict[str, Unary] = {
    "neg": lambda b, x: b.neg(x),
    "abs": lambda b, x: b.abs(x),
    "recip": lambda b, x: b.recip(x),
    "sqrt": lambda b, x: b.sqrt(x),
    "exp": lambda b, x: b.exp(x),
    "log": lambda b, x: b.log(x),
    "tanh": lambda b, x: b.tanh(x),
    "erf": lambda b, x: b.erf(x),
    "reduce_max": lambda b, x: b.reduce_max(b.reshape(x, (4, 8)), 1),
    "reduce_max_cols": lambda b, x: b.reduce_max(b.reshape(x, (4, 8)), 0),
    "reduce_sum": lambda b, x: b.reduce_sum(b.reshape(x, (4, 8)), 1),
    "matmul": lambda b, x: b.matmul(
        b.reshape(x, (4, 8)), b.transpose(b.reshape(x, (4, 8)), (1, 0))
    ),
    "relu": lambda b, x: b.max(x, 0.0),
    "max_lit": lambda b, x: b.max(x, 1.0),
    "min_lit": lambda b, x: b.min(-2.0, x),
    "gather": lambda b, x: b.gather(b.reshape(x, (8, 4)), b.iota((8,), DType.I32, 0), 0),
    "concat": lambda b, x: b.concat([b.slice(x, (16,), (32,)), b.slice(x, (0,), (16,))], 0),
    "to_f32": lambda b, x: b.convert(x, F32),
    "to_f16": lambda b, x: b.convert(x, F16),
    "to_bf16": lambda b, x: b.convert(x, BF16),
}
#: Programs of two operands ``x`` and ``y`` (32 elements each, ``y`` rotated).
BINARY: dict[str, Binary] = {
    "add": lambda b, x, y: b.add(x, y),
    "sub": lambda b, x, y: b.sub(x, y),
    "mul": lambda b, x, y: b.mul(x, y),
    "div": lambda b, x, y: b.div(x, y),
    "max": lambda b, x, y: b.max(x, y),
    "min": lambda b, x, y: b.min(x, y),
    "select": lambda b, x, y: b.select(b.gt(x, y), x, y),
}


def run_unary(dtype: DType, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(input, result) of ``UNARY[name]`` on ``dtype``'s edge values."""
    b = Builder(name)
    b.output("y", UNARY[name](b, b.slot("x", dtype, (32,))))
    x = edge_values(dtype)
    return x, evaluate(b.build(), {"x": x})["y"]


def run_binary(dtype: DType, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = Builder(name)
    x, y = b.slot("x", dtype, (32,)), b.slot("y", dtype, (32,))
    b.output("r", BINARY[name](b, x, y))
    xv, yv = edge_values(dtype), edge_values(dtype, 5)
    return xv, yv, evaluate(b.build(), {"x": xv, "y": yv})["r"]


def all_bits() -> dict[str, list[int]]:
    """Every program's result bits, by ``dtype/name``."""
    out: dict[str, list[int]] = {}
    for dt in FLOATS:
        for name in UNARY:
            out[f"{dt.value}/{name}"] = bits_of(run_unary(dt, name)[1]).reshape(-1).tolist()
        for name in BINARY:
            out[f"{dt.value}/{name}"] = bits_of(run_binary(dt, name)[2]).reshape(-1).tolist()
    return out


if __name__ == "__main__":
    print(json.dumps(all_bits(), sort_keys=True))
