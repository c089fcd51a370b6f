"""Which FP16 values the Intel NPU saturates instead of overflowing to infinity.

The NPU compiler runs an add or subtract of two same-shape values (NCE Eltwise), a matmul (a
convolution), a convolution and a window sum (a depthwise convolution of ones, as AvgPool
becomes) and a reduce_sum (a convolution over the channel axis, AvgPool otherwise) on the
DPU, and on NPU40XX a DPU task with an FP16 output goes through the PPE with its clamp on
(npu_compiler ``src/vpux_compiler/src/NPU40XX/dialect/VPUIPDPU/transforms/passes/
expand_dpu_config/expand_dpu_config_invariant_ppe.cpp``, ``configurePPE``: ``if
(outDataType.isF16()) { ... clampMode = PPEFpConvClampMode::ON; }``): an overflow is +-65504,
not an infinity. Everything else (a SHAVE kernel: multiply, divide, exp, ...) overflows to
infinity. A value of magnitude 65504 from a DPU task cannot be told from a saturated overflow,
so the in-graph guard (``poot_codegen.intel.guard``) and the host result check
(``poot_engine.checks.saturation_limit``) take it for one; the vpu-cpu stand-in saturates the
same equations (``poot_codegen.intel.f16``).
"""

from __future__ import annotations

from poot_ir import Atom, Eqn, Literal, Prim, Program, ReduceParams, Var
from poot_ir.core import REARRANGEMENT

__all__ = ["pooled_summands", "saturated_results", "saturates"]


def saturates(e: Eqn) -> bool:
    """Whether the NPU compiler runs ``e`` on the DPU, whose FP16 output saturates at +-65504:
    an add or subtract of two values of one shape (a literal operand is a broadcast constant,
    a SHAVE kernel), a matmul, a convolution, a window sum, a reduce_sum."""
    match e.prim:
        case Prim.ADD | Prim.SUB:
            a, b = e.inputs
            both = isinstance(a, Var) and isinstance(b, Var)
            return both and a.type.shape == b.type.shape
        case Prim.MATMUL | Prim.CONV | Prim.REDUCE_WINDOW_SUM | Prim.REDUCE_SUM:
            return True
        case _:
            return False


def saturated_results(program: Program) -> frozenset[str]:
    """The results of ``program`` whose values a saturating equation made (through converts
    and rearrangements, which move its values unchanged): the host holds them below 65504. An
    add or subtract of a mask sentinel's product (``x m + (-65504) (1 - m)``, a select with a
    sentinel branch, +-65504 by design) is not among them."""
    made = {e.out.id: e for e in program.eqns}
    found = set()
    for name, v in program.results():
        e = made.get(v.id)
        while e is not None and (e.prim is Prim.CONVERT or e.prim in REARRANGEMENT):
            x = e.inputs[0]
            e = made.get(x.id) if isinstance(x, Var) else None
        if e is not None and saturates(e) and not any(_sentinel(a, made) for a in e.inputs):
            found.add(name)
    return frozenset(found)


def _sentinel(a: Atom, made: dict[int, Eqn]) -> bool:
    """Whether ``a`` is a product by a literal at or beyond 65504 (the sentinel rule's mask)."""
    e = made.get(a.id) if isinstance(a, Var) else None
    if e is None or e.prim is not Prim.MUL:
        return False
    return any(isinstance(x, Literal) and abs(x.as_float()) >= 65504.0 for x in e.inputs)


def pooled_summands(e: Eqn) -> int | None:
    """For a reduce_sum the compiler lowers as AvgPool then Multiply by N (npu_compiler
    ``convert_reduce_to_pooling.cpp``: an axis other than the channel axis, taken to be axis 1
    of a value of rank 2 or more; a rank-1 value is taken to be all channel), the number of
    summands N; None otherwise. The stand-in (``poot_codegen.intel.f16``) and the derived
    contract (``fp16.contract``) both read it."""
    if e.prim is not Prim.REDUCE_SUM or not isinstance(e.params, ReduceParams):
        return None
    shape = e.inputs[0].type.shape
    if len(shape) < 2 or tuple(e.params.axes) == (1,):  # a rank-1 value is all channel
        return None
    n = 1
    for a in e.params.axes:
        n *= shape[a]
    return n
