"""XDNA2 tile jobs: what each compute tile runs.

Every admitted equation (or recognized row kernel) is one ``TileOp`` on its own compute tile.
A tile streams its tensors through its DMA channels in *chunks* of whole *units*: an element
(pointwise), a row (row kernels), or one gathered slice (gather). A resident tensor (a norm's
weight vector, a gather's table and indices) is loaded once, whole. How many units go through
per call is decided per region by ``poot_planner.xdna2.chunking`` (tiles that share a FIFO share
one object size); a job made here is unchunked until then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from poot_ir import Eqn, GatherParams, Literal, ReduceParams, Var

from poot_planner.capability import KernelClass

__all__ = [
    "IndexGuard",
    "TileOp",
    "TileOperand",
    "hold_batches",
    "stream_k",
    "tile_for_eqn",
    "tile_for_group",
]


class IndexGuard(Enum):
    """How a gather tile keeps every index inside its axis: the NPU kernel reads the table at
    whatever index it is given, so poot must never hand it one outside the axis.

    An index tensor the host passes in (an argument: a slot, a state or a weight) is checked
    on the host before each run (``IndexOutOfRange`` naming the argument and the element, as
    the oracle raises); one a region computes is clamped into the axis by the kernel."""

    HOST_CHECKED = "checked on the host before each run"
    KERNEL_CLAMPED = "clamped into the axis by the kernel"


@dataclass(frozen=True, slots=True)
class TileOperand:
    """One tensor a tile reads: ``unit`` elements per unit, or the whole tensor when
    ``resident``, or, when ``pieces`` > 1 (a matmul's right operand past a tile's memory:
    ``stream_k``), the whole tensor once per call as ``pieces`` objects of consecutive rows of
    K, each held only while the kernel adds its terms, or, when ``by_batch`` (a batched right
    operand the tile holds one batch of: ``hold_batches``), one object per batch, held across
    the calls of that batch's rows."""

    var: Var
    unit: int
    resident: bool = False
    pieces: int = 1
    by_batch: bool = False

    @property
    def own(self) -> bool:
        """Its FIFO is this tile's alone (its objects follow this tile's calls only)."""
        return self.pieces > 1 or self.by_batch

    @property
    def held_bytes(self) -> int:
        """Tile bytes an ``own`` operand takes whatever the chunking: two pieces' objects, or
        one batch's (0 for any other operand)."""
        nbytes = self.var.dtype.itemsize
        if self.pieces > 1:
            return 2 * -(-self.piece_elems * nbytes // 4) * 4
        if self.by_batch:
            k, n = self.var.shape[-2], self.var.shape[-1]
            return -(-k * n * nbytes // 4) * 4
        return 0

    @property
    def unit_bytes(self) -> int:
        return self.unit * self.var.dtype.itemsize

    @property
    def piece_elems(self) -> int:
        """Elements of one piece (0 unless ``pieces`` > 1)."""
        return self.var.type.size // self.pieces if self.pieces > 1 else 0


@dataclass(frozen=True, slots=True)
class TileOp:
    """One compute tile's job.

    ``eqns`` are the equations it computes (one, or a row kernel's chain), ``inputs`` the
    distinct tensors it reads (each one stream in), ``output`` the one tensor it writes.
    ``units`` is how many units the output has and ``chunk`` how many go through per FIFO
    object; ``out_unit`` elements of the output per unit.
    """

    index: int
    kind: KernelClass
    eqns: tuple[int, ...]
    inputs: tuple[TileOperand, ...]
    output: Var
    out_unit: int
    units: int
    chunk: int
    tile_bytes: int
    bound: float | None = None  # a row kernel's derived relative bound
    index_guard: IndexGuard | None = None  # a gather's: how its indices stay in the axis
    code_bytes: int = 0  # the target's estimate of its core's program memory (``CodeSize``)

    @property
    def n_chunks(self) -> int:
        return self.units // self.chunk if self.chunk else 0

    @property
    def streams_in(self) -> int:
        return len(self.inputs)

    @property
    def pieces(self) -> int:
        """Objects of its K-streamed operand per call (``stream_k``; 1: none)."""
        return max((op.pieces for op in self.inputs), default=1)

    @property
    def by_batch(self) -> bool:
        """It holds its right operand one batch at a time (``hold_batches``)."""
        return any(op.by_batch for op in self.inputs)

    def placed(
        self,
        *,
        index: int | None = None,
        chunk: int | None = None,
        tile_bytes: int | None = None,
        code_bytes: int | None = None,
    ) -> TileOp:
        """This job with its place and layout set (the fields planning fills in last); the
        constructor called directly, as ``dataclasses.replace`` costs a field walk per call
        and planning calls this twice per equation."""
        return TileOp(
            self.index if index is None else index,
            self.kind,
            self.eqns,
            self.inputs,
            self.output,
            self.out_unit,
            self.units,
            self.chunk if chunk is None else chunk,
            self.tile_bytes if tile_bytes is None else tile_bytes,
            self.bound,
            self.index_guard,
            self.code_bytes if code_bytes is None else code_bytes,
        )


def _distinct(vars_: list[Var]) -> list[Var]:
    seen: dict[int, Var] = {}
    for v in vars_:
        seen.setdefault(v.id, v)
    return list(seen.values())


def tile_for_eqn(
    index: int, i: int, e: Eqn, kind: KernelClass, arguments: frozenset[int] = frozenset()
) -> TileOp:
    """The (unchunked) tile job of one admitted equation. ``arguments`` are the ids of the
    program's arguments: a gather whose indices are one is ``HOST_CHECKED``, else
    ``KERNEL_CLAMPED`` (``IndexGuard``)."""
    guard = None
    out = e.out
    tensors = _distinct([a for a in e.inputs if isinstance(a, Var)])
    inputs: tuple[TileOperand, ...]
    match kind:
        case KernelClass.ROW:
            x = tensors[0]
            axes = e.params.axes if isinstance(e.params, ReduceParams) else (x.type.rank - 1,)
            # reduced axes at the end: each output's terms are contiguous, a row of ``cols``
            # streamed; other axes: the operand is resident and the kernel strides over it
            trailing = axes == tuple(range(x.type.rank - len(axes), x.type.rank))
            cols = math.prod(x.shape[a] for a in axes)
            # rows of no columns: the kernel writes the identity and reads nothing, so the
            # empty tensor is not streamed (a DMA moves at least one word)
            inputs = (TileOperand(x, cols if trailing else 0, resident=not trailing),) * bool(
                x.type.size
            )
            units, out_unit = out.type.size, 1
        case KernelClass.GATHER:
            table, idx = tensors[0], tensors[-1]  # the type rules make both tensors
            axis = e.params.axis if isinstance(e.params, GatherParams) else 0
            inner = math.prod(table.shape[axis + 1 :])
            inputs = (TileOperand(table, 0, resident=True), TileOperand(idx, 0, resident=True))
            units, out_unit = out.type.size // inner if inner else 0, inner
            host = idx.id in arguments
            guard = IndexGuard.HOST_CHECKED if host else IndexGuard.KERNEL_CLAMPED
        case KernelClass.MATMUL:
            # a [..., M, K] @ [..., K, N]: a streams by rows (K elements a unit), b is resident
            # (the whole [..., K, N], as upstream's B object reaches every core of its column;
            # mlir-aie programming_examples/basic/matrix_multiplication/whole_array), and each
            # unit is one output row of N (the kernel finds its batch from ``first_unit``)
            a, b = e.inputs
            assert isinstance(a, Var) and isinstance(b, Var)  # the type rule: both tensors
            k = a.shape[-1]
            # K = 0: both operands are empty and the kernel writes the empty sums (+0)
            inputs = (TileOperand(a, k), TileOperand(b, 0, resident=True)) if k else ()
            units, out_unit = out.type.size // max(out.shape[-1], 1), out.shape[-1]
        case KernelClass.BROADCAST:
            inputs = tuple(TileOperand(v, 0, resident=True) for v in tensors)
            units, out_unit = out.type.size, 1
        case _:
            inputs = tuple(TileOperand(v, 1) for v in tensors)
            units, out_unit = out.type.size, 1
    chunk = max(units, 1)
    return TileOp(index, kind, (i,), inputs, out, out_unit, units, chunk, 0, index_guard=guard)


def tile_for_group(
    index: int,
    eqns: tuple[int, ...],
    inputs: tuple[Var, ...],
    output: Var,
    cols: int,
    bound: float | None,
) -> TileOp:
    """The tile job of a row kernel: row-shaped inputs stream by rows, ``[cols]`` vectors are
    resident."""
    ops = tuple(
        TileOperand(v, 0, resident=True) if v.type.rank <= 1 else TileOperand(v, v.shape[-1])
        for v in inputs
    )
    units = output.type.size // cols if cols else 0
    return TileOp(
        index, KernelClass.FUSED_NORM, eqns, ops, output, cols, units, max(units, 1), 0, bound
    )


def stream_k(job: TileOp, pieces: int) -> TileOp | None:
    """``job``, a matmul whose right operand a tile cannot hold, with that operand streamed in
    ``pieces`` pieces of K/pieces rows of ``[K, N]``, the whole of it once per call (the
    accumulator of each output row stays in the call's output object between pieces, in f32:
    each output element's terms are added in order of k exactly as unchunked, so the result is
    bit for bit the same and so is the contract; upstream's whole_array.py streams K through
    its core the same way, C read-modify-written by ``matmul`` once per K chunk). None when it
    cannot be: not a matmul, ``pieces`` not a divisor of K above 1, or a batched right operand
    (each call would need its own batch's pieces)."""
    if job.kind is not KernelClass.MATMUL or len(job.inputs) != 2:
        return None
    a, b = job.inputs
    k, n = b.var.shape[-2], b.var.shape[-1]
    if pieces < 2 or k % pieces or b.var.type.size != k * n:
        return None
    streamed = TileOperand(b.var, 0, pieces=pieces)
    return replace(job, inputs=(a, streamed))


def hold_batches(job: TileOp) -> TileOp | None:
    """``job``, a matmul whose batched right operand ``[..., K, N]`` no tile holds whole, with
    that operand held one batch at a time (``TileOperand.by_batch``): one object per batch, of
    depth 1, acquired before the first call of that batch's rows and released after the last
    (each call's rows then lie in one batch: the chunking sees to it). The kernel reads its
    rows' batch from the object it is given, so each output element's sum is the same as with
    the whole operand resident, bit for bit. None when it is not a batched matmul."""
    if job.kind is not KernelClass.MATMUL or len(job.inputs) != 2:
        return None
    a, b = job.inputs
    k, n = b.var.shape[-2], b.var.shape[-1]
    if b.var.type.size <= k * n:
        return None
    held = TileOperand(b.var, 0, by_batch=True)
    return replace(job, inputs=(a, held))


def literal_operands(e: Eqn) -> tuple[Literal, ...]:
    """Inline scalars a kernel bakes into its code (no stream)."""
    return tuple(a for a in e.inputs if isinstance(a, Literal))
