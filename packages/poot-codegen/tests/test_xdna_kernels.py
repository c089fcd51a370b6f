"""XDNA2 kernels: every kernel class built by the host C compiler and run through ctypes over
numpy arrays, a few chunks per tensor, against the oracle under the xdna2 contracts.

Inputs reach the edges of each domain (and beyond, where the seed promises saturation). Each
test prints its worst error relative to its bound.
"""

from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from poot_codegen.xdna.designer import design_program
from poot_codegen.xdna.execute import run_design
from poot_codegen.xdna.hostbuild import CSRC_DIR, load_library
from poot_codegen.xdna.kernels import kernel_signature, kernel_symbol, program_source
from poot_engine.blob_cache import BlobCache
from poot_ir import (
    Builder,
    Contract,
    DType,
    Literal,
    Prim,
    Program,
    Relative,
    compare,
    evaluate,
    ops,
)
from poot_planner import TARGETS, KernelClass, Plan, TileOp, plan

XDNA2 = TARGETS["xdna2"]
FLT_MIN = float(np.finfo(np.float32).tiny)
FLT_MAX = float(np.finfo(np.float32).max)
N = 1 << 13
Array = np.ndarray[Any, np.dtype[Any]]


def contract(prim: Prim, dtype: DType) -> Contract:
    cap = XDNA2.capability(prim, dtype)
    assert cap is not None, f"xdna2 does not admit {prim.value} on {dtype.value}"
    return cap.contract


def f32(x: object) -> Array:
    return np.asarray(x, dtype=np.float32).ravel()


def fit(x: object, rng: np.random.Generator) -> Array:
    """``x`` cycled and shuffled to exactly N elements."""
    return rng.permutation(np.resize(f32(x), N))


def varied(rng: np.random.Generator, lo: int = -60, hi: int = 60) -> Array:
    """Random f32 of both signs with exponents spread over [lo, hi]."""
    m = rng.uniform(1.0, 2.0, N)
    return f32(np.where(rng.random(N) < 0.5, -1, 1) * m * np.exp2(rng.integers(lo, hi, N)))


def calls(units: int) -> int:
    """How many calls a test makes over ``units``: at least 3 whenever units allow."""
    return next((n for n in range(3, units + 1) if units % n == 0), max(units, 1))


def run_tile(lib: ctypes.CDLL, tile: TileOp, values: dict[int, Array]) -> Array:
    """Run a tile's kernel chunk by chunk, as a core does: streamed inputs and the output
    advance one chunk per call, resident inputs are whole."""
    fn = getattr(lib, kernel_symbol(tile))
    n = calls(tile.units)
    chunk = tile.units // n
    ins = [np.ascontiguousarray(values[op.var.id], op.var.dtype.numpy) for op in tile.inputs]
    out = np.zeros(tile.output.shape, tile.output.dtype.numpy)
    fn.argtypes = [ctypes.c_void_p] * (len(ins) + 1) + [ctypes.c_int32, ctypes.c_int32]
    fn.restype = None
    for i in range(n):
        ptrs = [
            a.ctypes.data + (0 if op.resident else i * chunk * op.unit_bytes)
            for a, op in zip(ins, tile.inputs, strict=True)
        ]
        out_at = out.ctypes.data + i * chunk * tile.out_unit * tile.output.dtype.itemsize
        fn(*ptrs, out_at, chunk, i * chunk)
    return out


class Built:
    """A program planned for xdna2, every kernel built into one host library."""

    def __init__(self, program: Program, cache: Path) -> None:
        self.plan: Plan = plan(program, "xdna2").check()
        self.source = program_source(self.plan)
        self.lib = load_library(self.source, BlobCache(cache))

    def tile_of(self, output: str) -> TileOp:
        var = next(o.var for o in self.plan.program.outputs if o.name == output)
        return next(t for t in self.plan.tiles if t.output.id == var.id)

    def run(self, output: str, inputs: dict[str, Array]) -> tuple[Array, TileOp]:
        values = {a.var.id: inputs[a.name] for a in self.plan.program.args}
        tile = self.tile_of(output)
        return run_tile(self.lib, tile, values), tile


# -- pointwise --------------------------------------------------------------------------------


def _pointwise_inputs(rng: np.random.Generator) -> dict[str, tuple[Array, ...]]:
    near = varied(rng, -20, 20)
    cancel = fit(np.concatenate([near, -near * f32(1 + 2.0**-20), -near]), rng)
    zeros = f32([0.0, -0.0, 1.0, -1.0])
    squares = f32(np.arange(4096, dtype=np.float64) ** 2)
    tiny = f32(FLT_MIN * np.arange(1, 2049))
    return {
        "add": (varied(rng), fit(np.concatenate([varied(rng), zeros]), rng)),
        "sub": (fit(np.concatenate([near, near]), rng), cancel),
        "mul": (varied(rng), fit(np.concatenate([varied(rng), zeros]), rng)),
        "div": (varied(rng), varied(rng)),
        "neg": (fit(np.concatenate([varied(rng), zeros]), rng),),
        "recip": (varied(rng, -120, 120),),
        "ge": (fit(np.concatenate([near, zeros]), rng), fit(np.concatenate([near, -zeros]), rng)),
        "exp": (fit(np.concatenate([np.linspace(-87, 88, N), [-87.0, 88.0, 0.0, -0.0]]), rng),),
        "log": (fit(np.concatenate([np.abs(varied(rng, -126, 127)), [FLT_MIN, FLT_MAX, 1]]), rng),),
        "tanh": (fit(np.concatenate([np.linspace(-12, 12, N), [1e30, -1e30, FLT_MAX]]), rng),),
        "erf": (fit(np.concatenate([np.linspace(-6, 6, N), [1e30, -1e30, -FLT_MAX]]), rng),),
        "sqrt": (fit(np.concatenate([squares[1:], tiny, np.abs(varied(rng, -126, 127))]), rng),),
        "max": (fit(np.concatenate([near, zeros]), rng), fit(np.concatenate([near, -zeros]), rng)),
    }


_POINTWISE: dict[str, Callable[[Builder, Any, Any], Any]] = {
    "add": lambda b, x, y: b.add(x, y),
    "sub": lambda b, x, y: b.sub(x, y),
    "mul": lambda b, x, y: b.mul(x, y),
    "div": lambda b, x, y: b.div(x, y),
    "ge": lambda b, x, y: b.ge(x, y),
    "max": lambda b, x, y: b.max(x, y),
    "neg": lambda b, x, _: b.neg(x),
    "recip": lambda b, x, _: b.recip(x),
    "exp": lambda b, x, _: b.exp(x),
    "log": lambda b, x, _: b.log(x),
    "tanh": lambda b, x, _: b.tanh(x),
    "erf": lambda b, x, _: b.erf(x),
    "sqrt": lambda b, x, _: b.sqrt(x),
}


@pytest.fixture(scope="module")
def pointwise(tmp_path_factory: pytest.TempPathFactory) -> tuple[Built, dict[str, Array]]:
    rng = np.random.default_rng(2026)
    data = _pointwise_inputs(rng)
    b = Builder("pointwise")
    inputs: dict[str, Array] = {}
    for name, fn in _POINTWISE.items():
        args = [b.slot(f"{name}{i}", DType.F32, (N,)) for i in range(len(data[name]))]
        inputs.update((f"{name}{i}", a) for i, a in enumerate(data[name]))
        b.output(name, fn(b, args[0], args[-1]))
    built = Built(b.build(), tmp_path_factory.mktemp("pointwise"))
    return built, inputs


@pytest.mark.parametrize("name", list(_POINTWISE))
def test_pointwise_kernel_meets_its_contract(
    pointwise: tuple[Built, dict[str, Array]], name: str
) -> None:
    built, inputs = pointwise
    expected = evaluate(built.plan.program, inputs)[name]
    actual, tile = built.run(name, inputs)
    assert tile.kind is KernelClass.POINTWISE
    operands = [inputs[k] for k in sorted(inputs) if re.fullmatch(f"{name}\\d", k)]
    prim = Prim(name)
    cmp = contract(prim, DType.F32).check(actual, expected, operands)
    print(f"\n{name}: {cmp}")
    assert cmp.ok, str(cmp)
    assert cmp.compared > N // 2  # the inputs were chosen inside the domain


def test_exp_saturates_beyond_88_and_tanh_erf_saturate_exactly(
    pointwise: tuple[Built, dict[str, Array]],
) -> None:
    built, _ = pointwise
    big = fit([88.0, 88.5, 100.0, 1e10, FLT_MAX], np.random.default_rng(1))
    exp_tile, tanh_tile, erf_tile = (built.tile_of(k) for k in ("exp", "tanh", "erf"))
    up = run_tile(built.lib, exp_tile, {exp_tile.inputs[0].var.id: big})
    down = run_tile(built.lib, exp_tile, {exp_tile.inputs[0].var.id: -big})
    assert np.isfinite(up).all() and (up == up[0]).all() and up[0] == np.float32(np.exp(88.0))
    assert (down == down[0]).all() and 0.0 <= down[0] < FLT_MIN
    for tile, threshold in ((tanh_tile, 9.1), (erf_tile, 4.0)):
        x = fit([threshold, 2 * threshold, 1e10, 1e30, FLT_MAX], np.random.default_rng(2))
        vid = tile.inputs[0].var.id
        assert (run_tile(built.lib, tile, {vid: x}) == 1.0).all()
        assert (run_tile(built.lib, tile, {vid: -x}) == -1.0).all()


def test_sqrt_of_perfect_squares_and_tiny_normals(
    pointwise: tuple[Built, dict[str, Array]],
) -> None:
    built, _ = pointwise
    tile = built.tile_of("sqrt")
    k = np.arange(1, N + 1, dtype=np.float64)
    y = run_tile(built.lib, tile, {tile.inputs[0].var.id: f32(k * k)})
    exact = np.count_nonzero(y == f32(k))
    rel = np.max(np.abs(y - k) / k)
    tiny = f32(FLT_MIN * np.linspace(1, 4, N))
    t = run_tile(built.lib, tile, {tile.inputs[0].var.id: tiny})
    rel_tiny = np.max(
        np.abs(t - np.sqrt(tiny.astype(np.float64))) / np.sqrt(tiny.astype(np.float64))
    )
    print(
        f"\nsqrt: {exact}/{N} perfect squares exact, worst relative {rel:.3g}; tiny normals {rel_tiny:.3g} (bound 4e-7)"
    )
    assert rel <= 4e-7 and rel_tiny <= 4e-7


def test_literal_operands_keep_their_exact_bits(tmp_path: Path) -> None:
    nan_payload = Literal.from_bits(0x7FC12345, DType.F32)
    b = Builder("literals")
    x = b.slot("x", DType.F32, (N,))
    b.output("zero", b.mul(x, Literal.of(-0.0, DType.F32)))
    b.output("first", b.div(Literal.of(1.5, DType.F32), x))
    b.output("nan", b.max(x, nan_payload))
    b.output("tenth", b.add(x, 0.1))
    built = Built(b.build(), tmp_path)
    assert "0x80000000u" in built.source and "0x7fc12345u" in built.source
    x_val = np.abs(varied(np.random.default_rng(3))) + np.float32(1)
    ref = evaluate(built.plan.program, {"x": x_val})
    for name in ("zero", "first", "tenth"):
        got, _ = built.run(name, {"x": x_val})
        assert np.array_equal(got.view(np.uint32), ref[name].view(np.uint32)), name
    got, _ = built.run("nan", {"x": x_val})  # compare and select: the literal's own bits
    assert (got.view(np.uint32) == 0x7FC12345).all()


# -- rows -------------------------------------------------------------------------------------


def test_row_sum_adds_in_order_and_max_is_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    rows, cols = 24, 100
    x = varied(rng, -10, 10)[: rows * cols].reshape(rows, cols)
    x[0, :4] = [1e8, 1.0, -1e8, 1.0]  # a sum that cancels: no relative bound, the scaled one
    x[1] = np.where(np.arange(cols) % 2 == 0, 3.0e7, -3.0e7) + f32(rng.standard_normal(cols))
    x[2] = -0.0
    x[3, :] = -0.0
    x[3, 7] = 0.0
    b = Builder("rows")
    v = b.slot("x", DType.F32, (rows, cols))
    b.output("sum", b.reduce_sum(v, -1))
    b.output("max", b.reduce_max(v, -1))
    built = Built(b.build(), tmp_path)
    ref = evaluate(built.plan.program, {"x": x})
    got_sum, tile = built.run("sum", {"x": x})
    assert tile.kind is KernelClass.ROW
    sequential = np.cumsum(x, axis=-1, dtype=np.float32)[:, -1]
    assert np.array_equal(got_sum.view(np.uint32), sequential.view(np.uint32))
    cmp = contract(Prim.REDUCE_SUM, DType.F32).check(got_sum, ref["sum"], [x])
    print(f"\nreduce_sum: {cmp}")
    assert cmp.ok, str(cmp)
    got_max, _ = built.run("max", {"x": x})
    cmp = contract(Prim.REDUCE_MAX, DType.F32).check(got_max, ref["max"], [x])
    assert cmp.ok, str(cmp)
    assert got_sum[2].view(np.uint32) == 0x80000000  # a row of -0.0 sums to -0.0, as numpy


# -- fused norms ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "weight"), [((48, 64), True), ((48, 64), False), ((64,), True), ((2, 3, 32), True)]
)
def test_fused_rmsnorm_within_its_derived_bound(
    tmp_path: Path, shape: tuple[int, ...], weight: bool
) -> None:
    rng = np.random.default_rng(5)
    b = Builder("norm")
    x = b.slot("x", DType.F32, shape)
    w = b.weight("w", DType.F32, shape[-1:]) if weight else None
    b.output("y", ops.rmsnorm(b, x, w))
    built = Built(b.build(), tmp_path)
    size = math.prod(shape)
    scales = np.exp2(rng.integers(-40, 60, size // shape[-1]))
    xv = f32(rng.standard_normal(size).reshape(-1, shape[-1]) * scales[:, None]).reshape(shape)
    if size > shape[-1]:
        xv.reshape(-1, shape[-1])[0] = 0.0  # a zero row: rms = sqrt(eps)
    inputs = {"x": xv} | ({"w": f32(rng.uniform(-2, 2, shape[-1]))} if weight else {})
    ref = evaluate(built.plan.program, inputs)["y"]
    # run the whole program: over a single row, the weight's mul is a pointwise tile of its own
    got = run_design(design_program(built.plan), [built.lib], inputs)["y"]
    norm = next(t for t in built.plan.tiles if t.kind is KernelClass.FUSED_NORM)
    assert norm.bound is not None
    extra = [t for t in built.plan.tiles if t is not norm]  # exact IEEE muls: half an ulp each
    assert all(t.kind is KernelClass.POINTWISE for t in extra)
    bound = norm.bound + len(extra) * 2.0**-24
    cmp = compare(got, ref, Relative(bound))
    print(f"\nrmsnorm {shape} weight={weight}: derived bound {norm.bound:.3g}; {cmp}")
    assert cmp.ok, str(cmp)


# -- gather -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [DType.F32, DType.I32])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_is_bit_exact_along_every_axis(tmp_path: Path, dtype: DType, axis: int) -> None:
    rng = np.random.default_rng(6 + axis)
    shape = (5, 6, 7)
    bits = rng.integers(0, 2**32, math.prod(shape), dtype=np.uint64).astype(np.uint32)
    bits[:4] = [0x80000000, 0x7FC12345, 0xFF800001, 0x7F800000]  # -0.0, NaN payloads, +inf
    table = rng.permutation(bits).reshape(shape).view(dtype.numpy)
    size = shape[axis]
    idx = rng.integers(-size, size, (3, 4)).astype(np.int32)
    idx[0, :2] = [-size, size - 1]
    b = Builder("gather")
    t = b.weight("table", dtype, shape)
    i = b.slot("idx", DType.I32, idx.shape)
    b.output("g", b.gather(t, i, axis))
    built = Built(b.build(), tmp_path)
    got, tile = built.run("g", {"table": table, "idx": idx})
    assert tile.kind is KernelClass.GATHER and calls(tile.units) > 1
    expected = evaluate(built.plan.program, {"table": table, "idx": idx})["g"]
    with np.errstate(invalid="ignore"):  # widening a signaling NaN operand to f64 flags invalid
        cmp = contract(Prim.GATHER, dtype).check(got, expected, [table, idx])
    assert cmp.ok, str(cmp)
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


# -- the C itself -----------------------------------------------------------------------------


def _every_class_source() -> str:
    b = Builder("every")
    x = b.slot("x", DType.F32, (4, 64))
    w = b.weight("w", DType.F32, (64,))
    y = ops.rmsnorm(b, x, w)
    b.output("y", y)
    b.output("s", b.reduce_sum(b.exp(b.mul(x, 0.5)), -1))
    b.output("m", b.reduce_max(x, -1))
    b.output("q", b.ge(b.tanh(x), b.erf(x)))
    b.output("r", b.sqrt(b.log(b.recip(b.max(b.neg(x), 1e-3)))))
    b.output("d", b.div(b.sub(x, 1e-7), b.add(x, 3.0)))
    t = b.weight("t", DType.I32, (9, 5))
    b.output("g", b.gather(t, b.slot("i", DType.I32, (3,)), 0))
    return program_source(plan(b.build(), "xdna2").check())


def test_generated_c_has_no_double_and_no_unsuffixed_float_literal() -> None:
    src = _every_class_source()
    code = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    assert "double" not in code
    literal = re.compile(r"(?<![\w.])(\d+\.\d*|\.\d+|\d+[eE][+-]?\d+)([eE][+-]?\d+)?(?![\w.])")
    assert not literal.findall(code), literal.findall(code)
    assert '#include "poot_math.h"' in src
    assert re.search(r'#ifdef __cplusplus\nextern "C" \{\n#endif', src)


def test_kernel_abi_is_fixed() -> None:
    p = plan(_xw_program(), "xdna2").check()
    norm = next(t for t in p.tiles if t.kind is KernelClass.FUSED_NORM)
    assert kernel_signature(norm) == (
        f"void poot_t{norm.index}(const float* in0, const float* in1, float* out, "
        "int32_t units, int32_t first_unit)"
    )
    gather = next(t for t in p.tiles if t.kind is KernelClass.GATHER)
    assert kernel_signature(gather) == (
        f"void poot_t{gather.index}(const int32_t* in0, const int32_t* in1, int32_t* out, "
        "int32_t units, int32_t first_unit)"
    )


def _xw_program() -> Program:
    b = Builder("abi")
    x = b.slot("x", DType.F32, (4, 64))
    b.output("y", ops.rmsnorm(b, x, b.weight("w", DType.F32, (64,))))
    b.output("g", b.gather(b.weight("t", DType.I32, (9, 5)), b.slot("i", DType.I32, (3,)), 0))
    return b.build()


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler (g++)")
def test_generated_c_is_also_clean_cxx20(tmp_path: Path) -> None:
    """Peano compiles the kernels as C++20: the same source must be clean C++ too."""
    src = tmp_path / "every.cc"
    src.write_text(_every_class_source())
    flags = ["-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-Wdouble-promotion"]
    done = subprocess.run(
        ["g++", *flags, "-fsyntax-only", f"-I{CSRC_DIR}", str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
