"""The pieces a target is declared with: its capability rows (kernel class, axes, contract),
the XDNA2 region limits and code-size table, and the narrowing contract of an FP16 device.

``poot_planner.target.Target`` is built from these (and re-exports them). They live below it
so that the XDNA2 tile and region vocabulary, which a target's layout hook returns, can use
them without importing the ``Target`` that names the hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from poot_ir import DType, Prim, TargetTableError
from poot_ir.numerics import Contract

__all__ = [
    "AxisRule",
    "Capability",
    "CodeSize",
    "KernelClass",
    "NarrowingContract",
    "RegionLimits",
]


class KernelClass(Enum):
    """How an admitted equation runs on its target."""

    ORACLE = "oracle"  # cpu: the numpy oracle itself
    POINTWISE = "pointwise"  # xdna2: the ordinary body, its thread grid turned into loops
    ROW = "row"  # xdna2: last-axis reduction, one lane per row, row loop serialized
    FUSED_NORM = "fused norm"  # xdna2: a recognized RMSNorm chain as one row kernel
    GATHER = "gather"  # xdna2: table and indices resident, output streamed
    #: xdna2: a contraction, its right operand resident, the left streamed by rows, one output
    #: row per unit (``poot_planner.xdna2.tiles``)
    MATMUL = "matmul"
    #: xdna2: a broadcast copy on a tile, its operand resident, the output streamed by
    #: elements: it stays on chip when its consumer is in the same region
    BROADCAST = "broadcast"
    GRAPH_OP = "graph op"  # intel-npu4: one OpenVINO opset op inside the one graph
    #: xdna2: a pure relayout between regions, absorbed by the host arenas: no tile, no
    #: context, no stream of its own (``poot_planner.xdna2.regions.HostRelayout``). A reshape is an
    #: alias (the same arena bytes read with another shape); the others one host copy.
    HOST_RELAYOUT = "host relayout"


class AxisRule(Enum):
    """Which axes a reduction (or gather) may run over."""

    ANY = "any axis"
    LAST = "last axis only"


@dataclass(frozen=True, slots=True)
class Capability:
    """One admitted (primitive, dtypes) pair and what is promised about it.

    ``contract`` is the numerical contract measured for it (bound and domain); data movement
    that is bit exact says so with a ``BitExact`` contract too, so every row has one.
    """

    prim: Prim
    dtypes: frozenset[DType]
    kernel: KernelClass
    contract: Contract
    axes: AxisRule = AxisRule.ANY
    note: str = ""


@dataclass(frozen=True, slots=True)
class RegionLimits:
    """XDNA2 region bounds (measured on Strix Halo, aie2p; agree with the upstream sources)."""

    compute_tiles: int  # one equation per compute tile
    host_streams_in: int  # shim MM2S channels over all shims
    host_streams_out: int  # shim S2MM channels
    streams_per_tile: int  # compute-tile DMA channels, each way
    tile_bytes: int  # 64 KiB data memory less the 1 KiB stack
    contexts: int  # hardware contexts: one per loaded artifact (region)
    host_buffers: int  # buffers one kernel call takes (opcode, insts, n, bo0..bo4)
    #: Tile bytes the region's flag path takes on every core as FIFO buffers: one 32-bit word in
    #: from the previous core of the chain, one out (``poot_codegen.xdna.design.FlagPath``;
    #: depth 1).
    flag_bytes: int = 8
    #: Tile bytes the link puts in the core's data memory after its buffers. aiecc's linker
    #: script (mlir-aie lib/Targets/AIETargetLdScript.cpp, ``AIETranslateToLdScript``) starts
    #: the ``data`` region at the end of the tile's highest buffer (``origin = base + max``,
    #: ``length = getLocalMemorySize() - max``; the link asks for basic-sequential allocation,
    #: so that is the stack plus every buffer, packed: ``poot_codegen.xdna.link``) and places
    #: there ``.data`` and ``.rodata`` of every object linked, then ``.bss``: the 32-bit
    #: ``poot_guard_word`` each kernel object defines (``poot_codegen.xdna.guards.
    #: GUARD_PRELUDE``), and whatever the kernel object, compiler-rt's soft-float routines and
    #: crt0 bring, with their alignment. 4 bytes of guard
    #: word and an UNMEASURED reserve of 252 bytes for the rest (poot's kernels define no other
    #: data; a jump table or a literal pool would land in ``.rodata``): the ``xdna`` hardware
    #: test measures every linked core's data sections against this figure.
    link_data_bytes: int = 256
    #: Host streams out the flag path takes per region: its last core drains the region's word.
    flag_streams_out: int = 1
    #: Passes of one tensor a shim transfer makes per run: the outermost (repeat) size of
    #: ``aiex.npu.dma_memcpy_nd``, at most 64 (6 iteration bits; mlir-aie @19cce64c
    #: lib/Dialect/AIEX/IR/AIEXDialect.cpp ``verifyStridesWraps``, and its test
    #: test/dialect/AIEX/bad_ipu_nd_repeat.mlir: "Length 3 exceeds the [1:64] range"). A matmul's K-streamed right
    #: operand is passed once per call of its tile (``poot_planner.xdna2.tiles.stream_k``).
    transfer_repeats: int = 64
    #: Elements of one tensor: the kernel ABI counts units and elements in ``int32_t``.
    tensor_elements: int = 2**31 - 1

    @property
    def reserved_bytes(self) -> int:
        """Tile bytes every core holds besides its data FIFOs: its flag path's buffers and what
        the link adds after the buffers."""
        return self.flag_bytes + self.link_data_bytes

    @property
    def data_tile_bytes(self) -> int:
        """Tile bytes left for a core's data FIFOs once its flag path and the link's data
        sections have their own."""
        return self.tile_bytes - self.reserved_bytes

    @property
    def data_streams_out(self) -> int:
        """Host streams out left for a region's values once its flag word has its own."""
        return self.host_streams_out - self.flag_streams_out


@dataclass(frozen=True, slots=True)
class CodeSize:
    """Program memory per compute tile and an estimate of what one tile's kernel takes there.

    Each core is linked alone (its kernel and what it calls; the toolchain drops the rest), so a
    tile needs ``base`` bytes (start-up code, the core's FIFO loop) plus, once each, the library
    routines its primitives call (``routines``: on aie2p every scalar float add, multiply,
    divide, compare and conversion is one) plus each primitive's own body (``bodies``). An
    equation whose tile needs more than ``program_bytes`` is refused (``program_bytes``).
    ``measured`` is False while the figures are estimates: the ``xdna`` hardware test measures
    every linked core with the toolchain's size tool, and the figures are recorded from it."""

    program_bytes: int
    base: int
    routines: tuple[tuple[str, int], ...]
    bodies: tuple[tuple[Prim, tuple[str, ...], int], ...]  # (primitive, routines it calls, bytes)
    measured: bool = False
    source: str = ""

    def estimate(self, prims: tuple[Prim, ...]) -> int:
        """Bytes of program memory of one tile computing ``prims`` (None of them unknown:
        ``TargetTableError`` names a primitive with no body figure)."""
        table, routines = _code_tables(self)
        used: set[str] = set()
        total = self.base
        for p in dict.fromkeys(prims):
            if p not in table:
                raise TargetTableError("code size", f"no body figure for {p.value}")
            calls, n = table[p]
            used.update(calls)
            total += n
        return total + sum(routines[r] for r in sorted(used))


_Tables = tuple[dict[Prim, tuple[tuple[str, ...], int]], dict[str, int]]
_TABLES: dict[int, tuple[CodeSize, _Tables]] = {}


def _code_tables(cs: CodeSize) -> _Tables:
    """``cs``'s figures as lookups, built once per table (planning asks for every tile; keyed
    by identity, since hashing the whole table each time is what this saves)."""
    got = _TABLES.get(id(cs))
    if got is None or got[0] is not cs:  # the table is kept alive with its lookups
        got = (cs, ({p: (calls, n) for p, calls, n in cs.bodies}, dict(cs.routines)))
        _TABLES[id(cs)] = got
    return got[1]


@dataclass(frozen=True, slots=True)
class NarrowingContract:
    """A target that computes in FP16 and records how far a narrowed graph may stray.

    ``normwise`` bounds ||y - ref|| / ||ref|| of each F32 result of a narrowed graph against the
    F32 oracle, above ``floor`` per element (the device type's absolute resolution near zero:
    FP16's smallest subnormal, 2^-24); ``max_magnitude`` is the largest F32 value the bound
    holds for (FP16's 65504).
    """

    device_dtype: DType
    normwise: float
    max_magnitude: float
    measured_on: str
    floor: float = 0.0
