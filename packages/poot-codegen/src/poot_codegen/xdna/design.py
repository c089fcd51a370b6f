"""XDNA2 designs as data: the single source of truth for the MLIR and for the host stand-in.

A ``ProgramDesign`` is everything needed to run a planned program on the NPU, or to execute it
step by step over numpy arenas (``XdnaHostDevice``) with the same kernels, layout, offsets and
chunking:

- ``HostLayout``: at most five host buffers (*arenas*, the last one the flag words) shared by every region, each host
  tensor at a fixed, aligned byte offset (a ``Slot``). Argument and result names bind to slots.
- one ``RegionDesign`` per planned region (one kernel call per step; one artifact and hardware
  context, or an earlier identical region's: ``RegionDesign.artifact``, ``reuse``): its
  ``Core``s placed on compute tiles, its object FIFOs (``Fifo``), and its runtime sequence
  (``Transfer``s from and to the arenas, then waits).
- ``Relayout``s: the host stages between region runs (a reshape, transpose, slice or concat the
  planner admitted as ``KernelClass.HOST_RELAYOUT``). A step runs, for ``k`` from 0, every
  relayout with ``after == k`` (in list order), then region ``k``; the relayouts after the last
  region last. An ``ALIAS`` (reshape) moves nothing: its output's slot is its input's bytes
  (``Slot.root``), read row-major with the output's shape. Any other reads its inputs' slots as
  row-major tensors, computes the relayout and writes its output's slot: one host copy.

Executing a region (what the NPU does, and what a stand-in must reproduce):

1. every ``Transfer`` of direction ``TO_DEVICE`` streams its arena bytes
   ``[offset, offset + nbytes)``, ``repeats`` times over, into its FIFO as ``n_objects``
   consecutive objects of ``Fifo.nbytes`` bytes each (a resident FIFO: one object, the whole
   tensor);
2. every core runs ``n_chunks`` calls of ``symbol``: call ``i`` passes, in ``Core.inputs``
   order, object ``i`` of each streamed input FIFO (the resident ones: their single object),
   then object ``i`` of the output FIFO, then ``units = chunk`` and ``first_unit = i * chunk``
   (a core with a K-streamed input, ``Core.pieces`` > 1: per call, one kernel call per piece
   ``p``, passing that input's object ``i * pieces + p`` and then ``piece = p``; a batch-held
   input, ``Port.hold`` > 1 calls an object: object ``i // hold``);
   a core's output object is delivered to every consumer core of its FIFO and, when the FIFO
   has a ``sink``, drained to the arena;
3. every ``Transfer`` of direction ``FROM_DEVICE`` writes its FIFO's objects, in order, to
   ``[offset, offset + nbytes)`` of its arena; ``waits`` names the FIFOs the sequence waits on.
4. the region's flag path (``FlagPath``): after its last call of the run, each core in the
   chain's ``order`` takes the previous core's word (the first: none), adds its own count of
   operands outside their domains (``poot_guard_word``, one per core on the NPU: each core links
   its own copy of the region object) and hands the sum on; the last core's word is drained to
   the flags arena (``ArenaRole.FLAGS``) at ``FLAG_WORD * region index``, waited on with the
   results. Zero: every guarded operand was inside its domain; otherwise the run is refused.

Cores are listed producers first (program order), so running them one after another in that
order, each over all its chunks, computes what the pipelined array computes. Byte counts are
whole 32-bit words (the DMA moves words): a BOOL object is padded up to a multiple of 4, which
is allowed only when the tensor moves as one object (the pad bytes land in the slot's padding).

``validate`` checks a design against every bound (``RegionLimits``) and its own consistency,
and raises ``DesignError`` naming the bound, what is needed and what is available.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from poot_ir import CodegenError, DType
from poot_planner import IndexGuard, KernelClass, RegionLimits
from poot_planner.xdna2.chunking import words as chunking_words

__all__ = [
    "ARENA_ALIGN",
    "COMPUTE_ROWS",
    "DEVICE",
    "FLAG_WORD",
    "GUARD_WORD",
    "LINK_DATA_BYTES",
    "SHIM_COLUMNS",
    "Arena",
    "ArenaRole",
    "Binding",
    "Core",
    "DesignError",
    "Fifo",
    "FlagPath",
    "HostLayout",
    "Port",
    "ProgramDesign",
    "RegionDesign",
    "Relayout",
    "RelayoutKind",
    "Slot",
    "Transfer",
    "TransferDirection",
    "flag_fifo",
    "reserved_bytes",
    "words",
]

DEVICE = "npu2"
"""The MLIR-AIE device: the whole Strix array, 8 columns (``aie.device(npu2)``)."""
SHIM_COLUMNS = 8
"""Shim tiles (row 0), one per column: 2 MM2S and 2 S2MM channels each."""
COMPUTE_ROWS = (2, 3, 4, 5)
"""Compute tile rows (row 1 is the memtile row, unused here)."""
SHIM_CHANNELS = 2
"""DMA channels each way on one shim tile."""
SHIM_BDS = 16
"""Buffer descriptors of one shim tile."""
ARENA_ALIGN = 64
"""Every slot starts at a multiple of this many bytes of its arena."""
FLAG_WORD = 4
"""Bytes of a region's flag word (a ``uint32_t``): region ``r``'s is at ``FLAG_WORD * r`` of the
flags arena."""
GUARD_WORD = 4
"""Bytes of a core's own guard count, the ``uint32_t poot_guard_word`` global every region object
defines (``guards.GUARD_PRELUDE``): ``.bss``, which aiecc's linker script places after the tile's
highest buffer, so part of ``LINK_DATA_BYTES``."""
LINK_DATA_BYTES = 256
"""Bytes of a core's data memory the link fills after its buffers: the guard word and a reserve
for the ``.data``/``.rodata``/``.bss`` of the objects linked (the planner's
``RegionLimits.link_data_bytes``, which says why; a test holds the two equal)."""


words = chunking_words  # one rounding rule for the planner's chunking and the layout


class DesignError(CodegenError):
    """A design past a bound (``bound`` names it; ``needed`` and ``available`` are the
    figures), or inconsistent with itself (``needed`` and ``available`` are then None).
    Raised before anything is rendered or run."""

    def __init__(
        self,
        bound: str,
        needed: int | None = None,
        available: int | None = None,
        where: str = "",
    ) -> None:
        figures = f": needs {needed}, available {available}" if needed is not None else ""
        super().__init__(f"xdna2 design{f' {where}' if where else ''}: {bound}{figures}")
        self.bound = bound
        self.needed = needed
        self.available = available
        self.where = where


# -- host arenas ------------------------------------------------------------------------------


class ArenaRole(Enum):
    """What an arena holds. Every region's kernel call takes the same arenas, in index order."""

    WEIGHTS = "weights"  # weight arguments: written once, at upload
    INPUTS = "inputs"  # slot and state arguments: written before each step
    RESULTS = "results"  # outputs and state updates: read after each step
    SCRATCH = "scratch"  # values one region writes to the host and a later region reads
    FLAGS = "flags"  # one flag word per region (``FlagPath``): read after each step


@dataclass(frozen=True, slots=True)
class Arena:
    """One host buffer: ``index`` is its position among the kernel call's buffers (and the
    runtime sequence's argument index); ``nbytes`` its size, a multiple of ``ARENA_ALIGN``."""

    index: int
    role: ArenaRole
    nbytes: int


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one host tensor lives: ``value`` is its ``Var`` id in the planned program,
    ``nbytes`` its bytes, ``span`` the bytes reserved from ``offset`` (``words(nbytes)``).
    ``root``: the value whose bytes this slot shares (a reshape's alias: same arena, offset
    and bytes, another shape), else None."""

    value: int
    dtype: DType
    shape: tuple[int, ...]
    arena: int
    offset: int
    nbytes: int
    span: int
    root: int | None = None


@dataclass(frozen=True, slots=True)
class Binding:
    """A program argument or result name, and the ``Var`` id whose slot holds it."""

    name: str
    value: int


@dataclass(frozen=True, slots=True)
class HostLayout:
    """The program-wide host layout: every argument and every result has a slot, and so has
    every value one region hands to a later one. A value only one region's tiles read has none.
    ``arguments`` follow the program's argument order, ``results`` its ``result_names``."""

    alignment: int
    arenas: tuple[Arena, ...]
    slots: tuple[Slot, ...]
    arguments: tuple[Binding, ...]
    results: tuple[Binding, ...]

    def slot(self, value: int) -> Slot:
        for s in self.slots:
            if s.value == value:
                return s
        raise DesignError(f"value %{value} has no host slot")

    def has_slot(self, value: int) -> bool:
        return any(s.value == value for s in self.slots)

    def argument(self, name: str) -> Slot:
        return self.slot(_bound(self.arguments, name, "argument"))

    def result(self, name: str) -> Slot:
        return self.slot(_bound(self.results, name, "result"))

    def arena(self, role: ArenaRole) -> Arena | None:
        return next((a for a in self.arenas if a.role is role), None)


def _bound(bindings: tuple[Binding, ...], name: str, what: str) -> int:
    for b in bindings:
        if b.name == name:
            return b.value
    raise DesignError(f"no {what} named {name!r}")


# -- regions ----------------------------------------------------------------------------------


class TransferDirection(Enum):
    TO_DEVICE = "to device"  # a shim MM2S channel: arena -> FIFO
    FROM_DEVICE = "from device"  # a shim S2MM channel: FIFO -> arena


@dataclass(frozen=True, slots=True)
class Fifo:
    """One object FIFO (``aie.objectfifo``): a host input stream (``source`` set, no
    ``producer``: the shim at ``shim`` reads it) or one tile's output (``producer`` set),
    broadcast to ``consumers`` and, when ``sink`` is set, drained by the shim at ``shim``.

    ``elems`` elements per object as the kernels see them, ``nbytes`` bytes per object as the
    DMA moves them (``words(elems * itemsize)``), ``n_objects`` objects per run. ``depth`` is 2
    for a streamed tensor (double buffered, one chunk per object) and 1 for a resident one
    (``resident``: the whole tensor in one object, held for the whole run).

    ``pieces`` and ``repeats``: 1 but for a matmul's K-streamed right operand
    (``poot_planner.xdna2.tiles.stream_k``), a host input whose one consumer takes the whole
    tensor once per call (``repeats``: that core's calls per run, the passes of the tensor) as
    ``pieces`` objects of K/pieces rows each: ``n_objects`` is ``pieces * repeats``.
    ``by_batch``: a batched right operand of a matmul (``poot_planner.xdna2.tiles.hold_batches``),
    a host input of one core, one object per batch, of depth 1, each held across the calls of
    that batch's rows (``Port.hold``)."""

    name: str
    value: int
    dtype: DType
    shape: tuple[int, ...]
    depth: int
    elems: int
    nbytes: int
    n_objects: int
    resident: bool
    producer: int | None
    consumers: tuple[int, ...]
    shim: int | None = None
    source: Slot | None = None
    sink: Slot | None = None
    pieces: int = 1
    repeats: int = 1
    by_batch: bool = False


@dataclass(frozen=True, slots=True)
class Port:
    """One pointer argument of a kernel call: the FIFO it is acquired from (consumed) or
    into (produced), and what the kernel sees per call: ``elems`` elements (the whole tensor
    when ``resident``), ``nbytes`` bytes of the FIFO object. ``pieces`` > 1: the objects of a
    K-streamed operand one call takes in turn, the kernel called once per piece (``Core``).
    ``hold``: the calls one object is held across (1; a batch-held operand, ``Fifo.by_batch``:
    the calls of one batch's rows)."""

    fifo: str
    value: int
    dtype: DType
    resident: bool
    elems: int
    nbytes: int
    pieces: int = 1
    hold: int = 1


@dataclass(frozen=True, slots=True)
class Core:
    """One compute tile and its kernel: ``tile`` is the planner's ``TileOp.index`` (the kernel
    is ``symbol``), placed at ``(column, row)``. Each run makes ``n_chunks`` calls of ``chunk``
    units (``chunk * n_chunks == units``); ``buffer_bytes`` is the tile memory its FIFO buffers
    take (``depth * nbytes`` of each FIFO it touches, and its ``FlagPath`` words). A gather core has an ``index_guard``
    (how its indices, ``inputs[1]``, stay inside its table's axis of ``index_axis``
    entries); every other core has None and 0.

    A core with a K-streamed input (``Port.pieces`` > 1: a matmul's right operand) calls its
    kernel once per piece within each call: the kernel takes a trailing ``int32_t piece``, the
    call's left and output objects held across the pieces (the output is the f32 accumulator),
    each piece acquired and released in turn (``pieces``)."""

    tile: int
    column: int
    row: int
    kind: KernelClass
    eqns: tuple[int, ...]
    symbol: str
    inputs: tuple[Port, ...]
    output: Port
    units: int
    chunk: int
    n_chunks: int
    buffer_bytes: int
    index_guard: IndexGuard | None = None
    index_axis: int = 0

    @property
    def pieces(self) -> int:
        """Kernel calls per call of the run (its K-streamed input's pieces; 1: none)."""
        return max((p.pieces for p in self.inputs), default=1)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One shim DMA transfer of the runtime sequence: the whole of ``fifo``'s tensor between
    ``[offset, offset + nbytes)`` of arena ``arena`` and the array, on shim column ``shim``,
    channel ``channel`` of its direction, buffer descriptor ``bd``; ``repeats`` times in a row
    (``Fifo.repeats``: the repeat size of one ``dma_memcpy_nd``)."""

    fifo: str
    direction: TransferDirection
    shim: int
    channel: int
    bd: int
    arena: int
    offset: int
    nbytes: int
    repeats: int = 1


@dataclass(frozen=True, slots=True)
class FlagPath:
    """How a region's flag word reaches the host: a chain through every core, ``order`` (tile
    indices), each link a depth-1 object FIFO of one ``uint32_t`` (``flag_fifo``), then the
    last core's word drained by ``transfer`` (``FROM_DEVICE``, ``FLAG_WORD`` bytes, into the
    flags arena).

    Consecutive cores of the chain share a memory module (same column and adjacent rows, or
    same row and adjacent columns: mlir-aie's AIE2 memory affinity), so every link is shared
    memory with locks and takes no DMA channel; only the drain takes one: an MM2S channel of
    the last core (beside its data output) and an S2MM channel, a buffer descriptor and a
    host stream out of a shim. Every core holds ``FLAG_WORD`` bytes of the word it makes,
    after the first, of the word it takes, and ``GUARD_WORD`` of its own count
    (``Core.buffer_bytes`` counts them)."""

    order: tuple[int, ...]
    transfer: Transfer

    @property
    def drain(self) -> str:
        """The FIFO the last core drains the region's word into."""
        return self.transfer.fifo

    def links(self) -> tuple[tuple[str, int, int | None], ...]:
        """Every link ``(fifo, producer tile, consumer tile or None for the shim)``."""
        nxt: list[int | None] = [*self.order[1:], None]
        return tuple((flag_fifo(t), t, n) for t, n in zip(self.order, nxt, strict=True))

    def feeds(self, tile: int) -> tuple[str | None, str]:
        """The FIFO ``tile`` takes its predecessor's word from (None: it is first), and the
        one it hands its sum to."""
        k = self.order.index(tile)
        return (flag_fifo(self.order[k - 1]) if k else None), flag_fifo(tile)


def reserved_bytes(first: bool) -> int:
    """Data memory a core takes besides its data FIFOs: its flag path's (``FlagPath``: the word
    it makes, the one it takes unless it is the chain's ``first`` core) and the link's data
    sections (``LINK_DATA_BYTES``, its own count among them)."""
    return FLAG_WORD * (1 if first else 2) + LINK_DATA_BYTES


def flag_fifo(tile: int) -> str:
    """The MLIR symbol of the flag FIFO out of tile job ``tile``'s core."""
    return f"g{tile}"


@dataclass(frozen=True, slots=True)
class RegionDesign:
    """One region: one kernel call per step (``object_file`` holds its kernels).
    ``transfers`` are in sequence order (every input, then every output); the sequence then
    waits on ``waits``, then drains and waits on the flag word (``flag``). ``artifact``: None
    when the region is an artifact of its own (one hardware context); else the index of the
    earlier region whose artifact it runs, whose design it is up to names and arena offsets
    (``poot_codegen.xdna.reuse``): its cores call that region's kernels and its runtime
    sequence is its own."""

    index: int
    eqns: tuple[int, ...]
    object_file: str
    cores: tuple[Core, ...]
    fifos: tuple[Fifo, ...]
    transfers: tuple[Transfer, ...]
    waits: tuple[str, ...]
    flag: FlagPath
    artifact: int | None = None

    @property
    def runs(self) -> int:
        """The index of the region whose artifact this one runs (its own, or an earlier one's)."""
        return self.index if self.artifact is None else self.artifact

    def fifo(self, name: str) -> Fifo:
        for f in self.fifos:
            if f.name == name:
                return f
        raise DesignError(f"no FIFO {name!r}", where=f"region {self.index}")

    def core(self, tile: int) -> Core:
        for c in self.cores:
            if c.tile == tile:
                return c
        raise DesignError(f"no core for tile {tile}", where=f"region {self.index}")


# -- host relayouts ---------------------------------------------------------------------------


class RelayoutKind(Enum):
    """What a host stage does to the bytes (``Relayout``)."""

    ALIAS = "alias"  # reshape: no bytes move
    TRANSPOSE = "transpose"
    SLICE = "slice"
    CONCAT = "concat"
    COUNTER = "counter"  # iota: written from nothing (a convolution's zero padding, say)


@dataclass(frozen=True, slots=True)
class Relayout:
    """One host stage between region runs: equation ``eqn`` of the planned program, from the
    slots of ``sources`` (value ids) to the slot of ``target``, before region ``after`` runs
    (after the last region when ``after`` is their count). ``perm`` (transpose), ``start``,
    ``limit``, ``strides`` (slice), ``axis`` (concat; a counter's axis) and ``shape`` and
    ``dtype`` (a counter, which has no sources) are the equation's parameters."""

    eqn: int
    kind: RelayoutKind
    sources: tuple[int, ...]
    target: int
    after: int
    perm: tuple[int, ...] = ()
    start: tuple[int, ...] = ()
    limit: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    axis: int = 0
    shape: tuple[int, ...] = ()
    dtype: DType = DType.F32


@dataclass(frozen=True, slots=True)
class ProgramDesign:
    """A whole planned program: its host layout, its regions in the order they run, and the
    host relayouts between them (``Relayout.after`` says where each runs)."""

    program: str
    device: str
    limits: RegionLimits
    layout: HostLayout
    regions: tuple[RegionDesign, ...]
    relayouts: tuple[Relayout, ...] = ()
