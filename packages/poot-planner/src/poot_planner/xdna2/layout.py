"""The XDNA2 layout (``Target.layout`` of xdna2): row kernels, tile jobs, host relayouts,
regions.

``plan`` asks it twice. Before admission it claims the row kernels (``rowfusion``): their
steps are admitted only inside a kernel, with the kernel's derived bound, and a kernel with a
step the row kernels do not take is refused here. After admission it lays out the admitted
equations and the clean kernels: one tile job each (``tiles``), each admitted relayout
(``KernelClass.HOST_RELAYOUT``) a host stage between regions, then regions under the measured
bounds (``regions``). A job no region can hold is refused with the limit it breaks
(``REGION_LIMIT``); the plan refuses more distinct artifacts than hardware contexts
(``CONTEXT_LIMIT``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from poot_ir import Prim, Program, Var

from poot_planner.capability import CodeSize, KernelClass, RegionLimits
from poot_planner.fp16.narrowing import operating_dtype
from poot_planner.refusal import Refusal, RefusalKind, limit_refusal
from poot_planner.target import LaidOut, Target
from poot_planner.xdna2.chunking import chunk_region, unchunked_bytes, words
from poot_planner.xdna2.regions import HostRelayout, form_reusable_regions
from poot_planner.xdna2.rowfusion import RowGroup, find_row_groups
from poot_planner.xdna2.tiles import (
    TileOp,
    hold_batches,
    stream_k,
    tile_for_eqn,
    tile_for_group,
)

__all__ = ["REGIONS", "RegionLayout", "RowClaim", "lay_out"]


@dataclass(frozen=True, slots=True)
class RowClaim:
    """The row kernels of one program (``Claim``): every equation they cover (``eqns``), the
    refusals of the kernels that cannot run, and the clean ones (a tile job each)."""

    program: Program
    target: Target
    eqns: frozenset[int] = frozenset()
    refusals: tuple[Refusal, ...] = ()
    kernels: tuple[RowGroup, ...] = ()
    #: every row group's equations: one row kernel, so never cut by a partition (a refused
    #: step sends the whole group to the host, where a softmax's exp and its divide stay in
    #: one span: the host's subnormal exp never meets the device's underflow guard)
    wholes: tuple[frozenset[int], ...] = ()

    def lay_out(self, admitted: Mapping[int, KernelClass]) -> LaidOut:
        limits = self.target.region_limits
        if limits is None:  # a copy of xdna2 without region limits lays nothing out
            return LaidOut()
        return lay_out(self.program, self.target, limits, admitted, self.kernels)


@dataclass(frozen=True, slots=True)
class RegionLayout:
    """The XDNA2 layout (``Layout``): row kernels claimed, then tiles and regions."""

    def claim(self, program: Program, target: Target) -> RowClaim:
        if target.region_limits is None:
            return RowClaim(program, target)
        return row_kernels(program, target)


#: The one XDNA2 layout, which ``poot_planner.targets.xdna2`` sets on its target.
REGIONS = RegionLayout()


def row_kernels(program: Program, t: Target) -> RowClaim:
    """XDNA2 row kernels: the equations they cover, the clean ones (a tile job each), and the
    refusals of the others (a step with no bound, a dtype the row kernels do not take, more
    than one output)."""
    # a row kernel computes in the dtypes the target's row kernels admit (xdna2: F32 only)
    row_dtypes = {d for c in t.capabilities if c.kernel is KernelClass.ROW for d in c.dtypes}
    admitted = " ".join(sorted(d.value for d in row_dtypes))
    grouped: set[int] = set()
    kernels: list[RowGroup] = []
    refusals: list[Refusal] = []
    groups = find_row_groups(program)
    for g in groups:
        grouped.update(g.eqns)
        wrong = [i for i in g.eqns if operating_dtype(program.eqns[i]) not in row_dtypes]
        for i in wrong:
            e = program.eqns[i]
            facts = (("dtype", operating_dtype(e).value), ("admitted", admitted))
            refusals.append(Refusal(RefusalKind.UNSUPPORTED_DTYPE, i, e.prim.value, facts))
        for f in g.failures:
            facts_ = (("step", f.reason),)
            refusals.append(Refusal(RefusalKind.MISSING_BOUND, f.eqn, f.primitive, facts_))
        last = g.eqns[-1]
        if len(g.outputs) != 1 and not g.failures:
            prim = program.eqns[last].prim.value
            refusals.append(limit_refusal(last, prim, "row kernel outputs", len(g.outputs), 1))
        if not wrong and not g.failures and len(g.outputs) == 1:
            kernels.append(g)
    wholes = tuple(frozenset(g.eqns) for g in groups)
    return RowClaim(program, t, frozenset(grouped), tuple(refusals), tuple(kernels), wholes)


def lay_out(
    program: Program,
    target: Target,
    limits: RegionLimits,
    admitted: Mapping[int, KernelClass],
    kernels: tuple[RowGroup, ...],
) -> LaidOut:
    """Tile jobs for the admitted equations and the clean row kernels, host relayouts for the
    admitted relayouts, then regions."""
    refusals: list[Refusal] = []
    placed: list[tuple[int, KernelClass, int]] = []
    jobs: list[tuple[int, TileOp]] = []  # (the equation that makes its output, job)
    arguments = frozenset(a.var.id for a in program.args)
    estimates: dict[tuple[Prim, ...], int] = {}
    live = {o.id for i in program.live_equations() for o in program.eqns[i].outputs}
    relayouts: list[HostRelayout] = []
    for i, kernel in admitted.items():
        e = program.eqns[i]
        if kernel is KernelClass.HOST_RELAYOUT:
            if e.out.id not in live:
                continue  # dead: its value is never observed, so nothing moves
            ins = tuple(v for v in e.inputs if isinstance(v, Var))
            if len(ins) != len(e.inputs):  # a literal operand has no arena slot to read
                refusals.append(limit_refusal(i, e.prim.value, "host relayout of a literal", 1, 0))
                continue
            relayouts.append(HostRelayout(i, e.prim, ins, e.out, e.prim is Prim.RESHAPE))
            continue
        jobs.append((i, tile_for_eqn(0, i, e, kernel, arguments)))
    for g in kernels:
        # ordered by the equation that makes its output: a step after it is dead code, and a
        # later key would put the kernel after a tile that reads its output
        made_at = next(i for i in g.eqns if program.eqns[i].out.id == g.outputs[0].id)
        jobs.append((made_at, tile_for_group(0, g.eqns, g.inputs, g.outputs[0], g.cols, g.bound)))
    # a job whose output nothing reads (dead code) gets no tile: its value is never observed,
    # and a tile whose output no tile and no host stream reads is no valid design
    jobs = [j for j in jobs if j[1].output.id in live]
    jobs.sort(key=lambda j: j[0])
    tiles: list[TileOp] = []
    for at, job in jobs:
        prim = program.eqns[at].prim.value
        refused = _tensor_refusal(at, prim, job, limits)
        if refused is not None:
            refusals.append(refused)
            continue
        if job.output.type.size == 0:
            continue  # an empty result: nothing to compute, so no tile (its slot is empty)
        code = _code_bytes(program, job, target.code_size, estimates)
        if target.code_size is not None and code > target.code_size.program_bytes:
            available = target.code_size.program_bytes
            refusals.append(limit_refusal(at, prim, "program_bytes", code, available))
            continue
        # whole and double-buffered fits: one call is a chunking, so no search (the region
        # chunks its tiles again in any case)
        if unchunked_bytes(job) > limits.data_tile_bytes:  # the flag path takes the rest
            alone = chunk_region([job], limits.data_tile_bytes, limits.reserved_bytes)
            if isinstance(alone, int) and job.kind is KernelClass.MATMUL:
                streamed = _k_streamed(job, limits, at, prim)
                if isinstance(streamed, Refusal):  # it fits, in more passes than a shim makes
                    refusals.append(streamed)
                    continue
                alone = streamed or alone
            if isinstance(alone, int):
                refusals.append(limit_refusal(at, prim, "tile_bytes", alone, limits.tile_bytes))
                continue
            job = alone[0][0]
        if job.streams_in > limits.streams_per_tile:
            refusals.append(
                limit_refusal(at, prim, "streams_per_tile", job.streams_in, limits.streams_per_tile)
            )
            continue
        index = len(tiles)
        tiles.append(job.placed(index=index, code_bytes=code))
        placed.extend((i, job.kind, index) for i in job.eqns)
    relayouts.sort(key=lambda r: r.eqn)
    regions, moved = form_reusable_regions(program, tuple(tiles), limits, tuple(relayouts))
    chunked = tuple(t for r in regions for t in r.tiles)  # as each region chunks its tiles
    # the context limit counts distinct artifacts, which the device guards decide too: the
    # plan checks it once they are placed (``poot_planner.plan``); host relayouts take none
    return LaidOut(chunked, regions, moved, tuple(refusals), tuple(placed))


def _k_streamed(
    job: TileOp, limits: RegionLimits, at: int, prim: str
) -> tuple[list[TileOp], int] | Refusal | None:
    """``job`` (a matmul whose right operand no tile holds with the rest) chunked alone with
    that operand streamed in pieces of K (``stream_k``), or, when it is batched, held one batch
    at a time (``hold_batches``); None when no piece size (or one batch) fits the
    tile's bytes, or the ``transfer_repeats`` refusal when the smallest pieces fit only at more
    calls per run than the shim passes the operand (each call is one pass).

    The pieces are the largest whose two objects take at most half the data bytes (the rest is
    for the rows of the left operand and of the output, which the region's chunk group shares),
    so the kernel makes the fewest calls per pass; failing that, the smallest. Piece sizes are
    looked for from the largest the bytes allow down (at most the data bytes over a row's
    bytes), never by enumerating the divisors of K."""
    b = job.inputs[1].var if len(job.inputs) == 2 else None
    if b is None or b.type.rank < 2 or b.type.size == 0:
        return None
    k, n = b.shape[-2], b.shape[-1]
    row = n * b.dtype.itemsize
    budget = limits.data_tile_bytes
    if b.type.size > k * n:  # batched: held one batch at a time, if a batch fits
        held = hold_batches(job)
        got = None if held is None else chunk_region([held], budget, limits.reserved_bytes)
        return None if got is None or isinstance(got, int) else got
    most = min(k - 1, budget // (2 * row)) if row else 0
    fitting = [r for r in range(most, 0, -1) if k % r == 0]
    preferred = [r for r in fitting if 2 * words(r * row) <= budget // 2]
    # a smaller piece only leaves more room for the rows: the largest preferred one, then the
    # smallest of all (if that does not fit, no piece does)
    for rows in dict.fromkeys([*preferred[:1], *fitting[-1:]]):
        streamed = stream_k(job, k // rows)
        if streamed is None:
            return None  # batched, or not a matmul: no piece size helps
        got = chunk_region([streamed], budget, limits.reserved_bytes, limits.transfer_repeats)
        if not isinstance(got, int):
            return got
    if fitting and (streamed := stream_k(job, k // fitting[-1])) is not None:
        unbounded = chunk_region([streamed], budget, limits.reserved_bytes)
        if not isinstance(unbounded, int):
            calls = unbounded[0][0].n_chunks
            return limit_refusal(at, prim, "transfer_repeats", calls, limits.transfer_repeats)
    return None


def _code_bytes(
    program: Program, job: TileOp, sizes: CodeSize | None, seen: dict[tuple[Prim, ...], int]
) -> int:
    """The target's estimate of the program memory of ``job``'s core (0 without a table);
    ``seen`` holds the estimates made so far (a program has few distinct kernels)."""
    if sizes is None:
        return 0
    prims = tuple(program.eqns[i].prim for i in job.eqns)
    if prims not in seen:
        seen[prims] = sizes.estimate(prims)
    return seen[prims]


def _tensor_refusal(at: int, prim: str, job: TileOp, limits: RegionLimits) -> Refusal | None:
    """A job no region can hold whatever its chunking, decided from its tensors' sizes alone
    (so before any chunking search): a tensor past the kernel ABI's element count, or an
    empty tensor the job must stream to make a non-empty output (a DMA moves at least one
    32-bit word; a job whose output is empty needs no tile at all)."""
    tensors = [op.var for op in job.inputs] + [job.output]
    largest = max(v.type.size for v in tensors)
    if largest > limits.tensor_elements:
        return limit_refusal(at, prim, "tensor_elements", largest, limits.tensor_elements)
    if job.output.type.size and any(v.type.size == 0 for v in tensors):
        return limit_refusal(at, prim, "stream_bytes", 0, 4)
    return None
