"""Admitting one equation on one target, by its capability table, or refusing it with a reason.

Target-specific rules that are not a table lookup live beside the target's logic: the XDNA2
row kernels (``rowfusion``) and the Intel narrowing rules (``narrowing``). This module is the
lookup every target shares.
"""

from __future__ import annotations

from poot_ir import (
    ConvParams,
    DType,
    Eqn,
    IotaParams,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
)

from poot_planner.fp16.narrowing import (
    ARITHMETIC,
    EXACT_INTEGERS,
    last_count,
    literal_refusals,
    operating_dtype,
)
from poot_planner.refusal import Refusal, RefusalKind
from poot_planner.target import AxisRule, Capability, KernelClass, NarrowingContract, Target

__all__ = ["PlanMemo", "admit", "admit_all"]


def admit_all(program: Program, target: Target) -> tuple[Capability | Refusal, ...]:
    """``admit`` of each equation of ``program``, in order."""
    return tuple(admit(i, e, target) for i, e in enumerate(program.eqns))


class PlanMemo:
    """The answers one plan asks twice, remembered for that plan alone: legalization looks for
    what to rewrite, then the plan admits what it runs, and both ask ``admit_all`` and the
    narrowing's ``literal_refusals`` of the same program (the same object when nothing was
    rewritten). ``plan`` makes one per call and passes it down, so no answer outlives its plan
    and two plans made at once (two threads) share nothing.

    Each answer is the last one asked, keyed by the identity of its (immutable) arguments,
    which the memo holds, so their ids are not reused while it lives."""

    __slots__ = ("_admitted", "_literals")

    def __init__(self) -> None:
        self._admitted: tuple[Program, Target, tuple[Capability | Refusal, ...]] | None = None
        self._literals: tuple[Program, NarrowingContract, tuple[Refusal, ...]] | None = None

    def admit_all(self, program: Program, target: Target) -> tuple[Capability | Refusal, ...]:
        """``admit_all(program, target)``, once per program and target."""
        got = self._admitted
        if got is None or got[0] is not program or got[1] is not target:
            got = (program, target, admit_all(program, target))
            self._admitted = got
        return got[2]

    def literal_refusals(self, program: Program, contract: NarrowingContract) -> list[Refusal]:
        """``poot_planner.fp16.narrowing.literal_refusals(program, contract)``, once per
        program and contract (a fresh list each time: callers extend it)."""
        got = self._literals
        if got is None or got[0] is not program or got[1] is not contract:
            got = (program, contract, tuple(literal_refusals(program, contract)))
            self._literals = got
        return list(got[2])


def admit(i: int, e: Eqn, target: Target) -> Capability | Refusal:
    """The capability that admits equation ``i``, or the refusal that names why none does.

    On a target with a narrowing contract an F32 arithmetic equation is looked up as the F16
    equation it becomes; without one, F32 and BF16 arithmetic on an FP16 device is refused with
    ``MISSING_CONTRACT``.
    """
    prim = e.prim.value
    if not target.admits_prim(e.prim):
        return Refusal(RefusalKind.UNSUPPORTED_PRIMITIVE, i, prim, (("target", target.name),))
    dtype = operating_dtype(e)
    fp16_device = target.narrowing is not None or _computes_only_in(target, DType.F16)
    if (
        fp16_device
        and e.prim is Prim.CONVERT
        and dtype in (DType.I32, DType.BOOL)
        and e.out.dtype.is_float
    ):
        return Refusal(
            RefusalKind.INTEGER_TO_FLOAT,
            i,
            prim,
            (("from", dtype.value), ("to", e.out.dtype.value), ("exact_up_to", EXACT_INTEGERS)),
        )
    if e.prim is Prim.IOTA and dtype is DType.F32 and target.narrowing is not None:
        # narrowed to an FP16 counter (fp16.narrowing), exact only up to 2048
        last = last_count(e.params) if isinstance(e.params, IotaParams) else 0
        if last > EXACT_INTEGERS:
            counts = (("counts_to", last), ("exact_up_to", EXACT_INTEGERS))
            return Refusal(RefusalKind.NARROWING_RANGE, i, prim, counts)
        dtype = target.narrowing.device_dtype
    if fp16_device and e.prim in ARITHMETIC and dtype in (DType.F32, DType.BF16):
        if dtype is DType.F32 and target.narrowing is not None:
            dtype = target.narrowing.device_dtype
        else:
            why = (
                "no narrowing contract recorded"
                if dtype is DType.F32
                else "no contract covers bf16"
            )
            return Refusal(
                RefusalKind.MISSING_CONTRACT, i, prim, (("dtype", dtype.value), ("missing", why))
            )
    cap = target.capability(e.prim, dtype)
    if cap is None:
        admitted = sorted(
            {d.value for c in target.capabilities if c.prim is e.prim for d in c.dtypes}
        )
        return Refusal(
            RefusalKind.UNSUPPORTED_DTYPE,
            i,
            prim,
            (("dtype", dtype.value), ("admitted", " ".join(admitted))),
        )
    if e.prim is Prim.CONVERT:
        dst = e.out.dtype
        if dst is DType.F32 and target.narrowing is not None:
            dst = target.narrowing.device_dtype
        if dst not in cap.dtypes:
            return Refusal(
                RefusalKind.UNSUPPORTED_DTYPE,
                i,
                prim,
                (("from", dtype.value), ("to", e.out.dtype.value)),
            )
    if cap.axes is AxisRule.LAST and isinstance(e.params, ReduceParams):
        rank = e.inputs[0].type.rank
        if e.params.axes != (rank - 1,):
            return Refusal(
                RefusalKind.UNSUPPORTED_AXIS,
                i,
                prim,
                (("axes", str(e.params.axes)), ("admitted", f"last axis ({rank - 1})")),
            )
    if cap.kernel is KernelClass.GRAPH_OP:
        problem = _graph_window_problem(e)
        if problem is not None:
            facts = (("params", problem), ("target", target.name))
            return Refusal(RefusalKind.UNSUPPORTED_AXIS, i, prim, facts)
    return cap


def _graph_window_problem(e: Eqn) -> str | None:
    """What a graph-op target's Convolution-1 / ConvolutionBackpropData-1 / MaxPool-1 cannot
    express of a ``conv`` or a window reduction (None: nothing): a negative pad (cropping) of a
    plain convolution, an input dilation that is no transposed convolution, a window
    over the batch or channel axes, a window max's dilation (a window sum is a depthwise
    convolution of ones, which takes dilations)."""
    match e.params:
        case ConvParams(padding_lo=lo, padding_hi=hi, lhs_dilation=ld, strides=s):
            if any(d != 1 for d in ld):
                # a transposed convolution (ConvolutionBackpropData-1): unit window strides,
                # and a low padding within the lead d (K - 1) its pads_begin is measured from
                k = e.inputs[1].type.shape[2:]
                rd = e.params.rhs_dilation
                reach = [d * (kk - 1) for d, kk in zip(rd, k, strict=True)]
                if any(x != 1 for x in s) or any(lo[a] > reach[a] for a in range(len(k))):
                    return "lhs_dilation with strides or a low pad past the kernel's extent"
            elif min((*lo, *hi), default=0) < 0:
                return "a negative pad"
        case ReduceWindowParams(window=w, strides=s, padding_lo=lo, padding_hi=hi, dilation=d):
            rank = len(w)
            lead = (w[:2], s[:2], lo[:2], hi[:2])
            if not 3 <= rank <= 5 or lead != ((1, 1), (1, 1), (0, 0), (0, 0)):
                return "a window over the batch or channel axis, or rank outside 3-5"
            if min((*lo, *hi), default=0) < 0:
                return "a negative pad"
            if e.prim is Prim.REDUCE_WINDOW_MAX and any(x != 1 for x in d):
                return "window dilation (MaxPool-1 has none)"
        case _:
            pass
    return None


# ``_computes_only_in`` per capability table: admit runs once or twice per equation, and the
# answer depends on the table alone (keyed by the table's identity; the entry holds the table,
# so its id is not reused while the entry lives).
_ONLY_IN: dict[tuple[int, DType], tuple[tuple[Capability, ...], bool]] = {}


def _computes_only_in(target: Target, dtype: DType) -> bool:
    """A target whose every arithmetic capability is on ``dtype`` alone (an FP16 device)."""
    caps = target.capabilities
    hit = _ONLY_IN.get((id(caps), dtype))
    if hit is not None and hit[0] is caps:
        return hit[1]
    arith = [c for c in caps if c.prim in ARITHMETIC]
    only = bool(arith) and all(c.dtypes == frozenset({dtype}) for c in arith)
    _ONLY_IN[(id(caps), dtype)] = (caps, only)
    return only
