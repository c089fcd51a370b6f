"""XDNA2 tile jobs: what each compute tile runs, and how its tensors are chunked to fit.

Every admitted equation (or recognized row kernel) is one ``TileOp`` on its own compute tile.
A tile streams its tensors through its DMA channels in *chunks*, so that its buffers fit the
tile's data memory:

- A streamed tensor is double-buffered (an object FIFO of depth 2): ``2 * chunk`` units.
- A resident tensor (a norm's weight vector, a gather's table and indices) is loaded once,
  depth 1, whole.
- ``tile_bytes = resident bytes + 2 * chunk * (bytes per unit of every streamed input and
  of the output)`` must be at most the target's ``tile_bytes`` (64512: 64 KiB less the 1 KiB
  stack).

The chunk is the largest divisor of the tensor's units that fits, so every chunk is full and
the object FIFOs have one fixed size. A *unit* is an element (pointwise), a row (row kernels),
or one gathered slice (gather). An equation whose one-unit chunk does not fit is refused with
``REGION_LIMIT`` naming ``tile_bytes``, the bytes needed and the bytes available.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poot_ir import Eqn, GatherParams, Literal, Var

from poot_planner.target import KernelClass, RegionLimits

__all__ = ["FIFO_DEPTH", "Operand", "TileOp", "chunk_for", "tile_for_eqn", "tile_for_group"]

FIFO_DEPTH = 2


@dataclass(frozen=True, slots=True)
class Operand:
    """One tensor a tile reads: ``unit`` elements per unit, or the whole tensor when
    ``resident``."""

    var: Var
    unit: int
    resident: bool = False

    @property
    def unit_bytes(self) -> int:
        return self.unit * self.var.dtype.itemsize


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
    inputs: tuple[Operand, ...]
    output: Var
    out_unit: int
    units: int
    chunk: int
    tile_bytes: int
    bound: float | None = None  # a row kernel's derived relative bound

    @property
    def n_chunks(self) -> int:
        return self.units // self.chunk if self.chunk else 0

    @property
    def streams_in(self) -> int:
        return len(self.inputs)


def _bytes(inputs: tuple[Operand, ...], out: Var, out_unit: int, chunk: int) -> int:
    resident = sum(op.var.type.nbytes for op in inputs if op.resident)
    per_unit = (
        sum(op.unit_bytes for op in inputs if not op.resident) + out_unit * out.dtype.itemsize
    )
    return resident + FIFO_DEPTH * chunk * per_unit


def chunk_for(
    inputs: tuple[Operand, ...], out: Var, out_unit: int, units: int, limit: int
) -> tuple[int, int]:
    """The largest chunk (a divisor of ``units``) whose buffers fit ``limit``, and its bytes.

    Returns ``(0, bytes of a one-unit chunk)`` when not even one unit fits.
    """
    if units == 0:
        return 1, _bytes(inputs, out, out_unit, 1)
    divisors: set[int] = set()
    for d in range(1, math.isqrt(units) + 1):
        if units % d == 0:
            divisors.update((d, units // d))
    for d in sorted(divisors, reverse=True):
        b = _bytes(inputs, out, out_unit, d)
        if b <= limit:
            return d, b
    return 0, _bytes(inputs, out, out_unit, 1)


def _distinct(vars_: list[Var]) -> list[Var]:
    seen: dict[int, Var] = {}
    for v in vars_:
        seen.setdefault(v.id, v)
    return list(seen.values())


def tile_for_eqn(index: int, i: int, e: Eqn, kind: KernelClass, limits: RegionLimits) -> TileOp:
    """The tile job of one admitted equation. ``chunk == 0`` means it does not fit."""
    out = e.out
    tensors = _distinct([a for a in e.inputs if isinstance(a, Var)])
    inputs: tuple[Operand, ...]
    match kind:
        case KernelClass.ROW:
            x = tensors[0]
            cols = x.shape[-1] if x.type.rank else 1
            inputs = (Operand(x, cols),)
            units, out_unit = out.type.size, 1
        case KernelClass.GATHER:
            table, idx = e.inputs
            assert (
                isinstance(table, Var)
                and isinstance(idx, Var)
                and isinstance(e.params, GatherParams)
            )
            inner = math.prod(table.shape[e.params.axis + 1 :])
            inputs = (Operand(table, 0, resident=True), Operand(idx, 0, resident=True))
            units, out_unit = out.type.size // inner if inner else 0, inner
        case _:
            inputs = tuple(Operand(v, 1) for v in tensors)
            units, out_unit = out.type.size, 1
    chunk, nbytes = chunk_for(inputs, out, out_unit, units, limits.tile_bytes)
    return TileOp(index, kind, (i,), inputs, out, out_unit, units, chunk, nbytes)


def tile_for_group(
    index: int,
    eqns: tuple[int, ...],
    inputs: tuple[Var, ...],
    output: Var,
    cols: int,
    bound: float | None,
    limits: RegionLimits,
) -> TileOp:
    """The tile job of a row kernel: row-shaped inputs stream by rows, ``[cols]`` vectors are
    resident."""
    ops = tuple(
        Operand(v, 0, resident=True) if v.type.rank <= 1 else Operand(v, v.shape[-1])
        for v in inputs
    )
    units = output.type.size // cols if cols else 0
    chunk, nbytes = chunk_for(ops, output, cols, units, limits.tile_bytes)
    return TileOp(
        index, KernelClass.FUSED_NORM, eqns, ops, output, cols, units, chunk, nbytes, bound
    )


def literal_operands(e: Eqn) -> tuple[Literal, ...]:
    """Inline scalars a kernel bakes into its code (no stream)."""
    return tuple(a for a in e.inputs if isinstance(a, Literal))
