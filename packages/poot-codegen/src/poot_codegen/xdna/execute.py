"""The executor of a ``ProgramDesign`` over host memory: the one piece of code that runs a design
without the NPU.

It follows the execution contract in ``design`` to the letter, with the kernels built by the host
C compiler (``hostbuild``): it proves that the kernels, the layout, the offsets and the chunking
compute what the oracle computes. ``poot_npu.xdna_host.XdnaHostDevice`` runs its dispatches with
it (``write_arguments``, ``run_region`` per region, ``read_results`` over arenas it keeps), the
fake XRT of poot-npu's tests runs each kernel call with ``run_region`` over the buffer objects'
memory, and codegen's own tests call ``run_design``. Cores run one after another in design order,
each over all its chunks, which is what the pipelined array computes (producers come first).

Arenas are flat ``uint8`` arrays, one per ``HostLayout.arenas`` entry, in index order. A region
reads and writes only the byte ranges its transfers name; a value one region hands to a later
one crosses through its slot (in the scratch arena), exactly as on the NPU. A host relayout
(``design.Relayout``) runs between the regions, where the design's step order puts it
(``stages``): an alias moves nothing; a copy reads its inputs' slots and writes its output's
(``relayout``, ``run_relayout``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from poot_ir import IotaParams
from poot_ir.budget import check_alloc
from poot_ir.oracle import check_gather_indices, iota_values
from poot_planner import IndexGuard, Plan
from poot_planner.xdna2.regions import in_step_order

from poot_codegen.xdna.design import (
    FLAG_WORD,
    Core,
    HostLayout,
    ProgramDesign,
    RegionDesign,
    Relayout,
    RelayoutKind,
    Slot,
    TransferDirection,
)
from poot_codegen.xdna.guards import FLAG_FIRST, FLAG_NEXT
from poot_codegen.xdna.hostbuild import LibraryCache, load_library
from poot_codegen.xdna.kernels import region_source

__all__ = [
    "Bytes",
    "check_arena_budget",
    "check_indices",
    "flag_word",
    "load_region_libraries",
    "new_arenas",
    "read_results",
    "relayout",
    "run_design",
    "run_region",
    "run_relayout",
    "stages",
    "write_arguments",
]

Bytes = np.ndarray[Any, np.dtype[np.uint8]]


def load_region_libraries(plan: Plan, cache: LibraryCache) -> tuple[ctypes.CDLL, ...]:
    """Each region's kernels, built by the host C compiler and loaded (cached in ``cache``): a
    region running an earlier region's artifact (``reuse``) calls that region's kernels."""
    return tuple(
        load_library(region_source(plan, plan.regions[r.runs]), cache) for r in plan.regions
    )


def check_arena_budget(layout: HostLayout) -> None:
    """Refuse (``BudgetExceeded``) a design whose host arenas together are over the memory
    budget, before anything is built or reserved: they are sized by the program (a
    convolution's windows are its input times its kernel's taps), and host memory on either
    device (XRT's arenas are host-only buffer objects)."""
    total = sum(a.nbytes for a in layout.arenas)
    check_alloc(f"the {len(layout.arenas)} host arenas of a region design", total)


def new_arenas(layout: HostLayout) -> list[Bytes]:
    """Zero-filled arenas of ``layout``, in index order; ``BudgetExceeded`` past the memory
    budget (``check_arena_budget``, which a device also calls before it builds anything)."""
    check_arena_budget(layout)
    return [np.zeros(a.nbytes, np.uint8) for a in layout.arenas]


def check_indices(design: ProgramDesign, inputs: Mapping[str, np.ndarray]) -> None:
    """Refuse a run whose host-passed gather indices leave their axis: ``IndexOutOfRange``
    naming the equation, the argument and the first element outside ``[-size, size)``, as
    the oracle raises it. The NPU's gather kernel reads wherever an index points, so this runs
    before any byte is written (``IndexGuard.HOST_CHECKED``; the kernel clamps the others)."""
    names = {b.value: b.name for b in design.layout.arguments}
    for region in design.regions:
        for core in region.cores:
            if core.index_guard is not IndexGuard.HOST_CHECKED:
                continue
            name = names[core.inputs[1].value]  # validate() made it an argument
            check_gather_indices(np.asarray(inputs[name]), core.index_axis, core.eqns[0], name)


def write_arguments(
    layout: HostLayout, arenas: Sequence[Bytes], inputs: Mapping[str, np.ndarray]
) -> None:
    """Write every argument (one array per argument name) into its slot."""
    for b in layout.arguments:
        s = layout.slot(b.value)
        data = np.ascontiguousarray(inputs[b.name], dtype=s.dtype.numpy).reshape(-1)
        arenas[s.arena][s.offset : s.offset + s.nbytes] = data.view(np.uint8)


def read_results(layout: HostLayout, arenas: Sequence[Bytes]) -> dict[str, np.ndarray]:
    """Every result, by name, read out of its slot as a fresh array."""
    out = {}
    for b in layout.results:
        s = layout.slot(b.value)
        raw = arenas[s.arena][s.offset : s.offset + s.nbytes].copy()
        out[b.name] = raw.view(s.dtype.numpy).reshape(s.shape)
    return out


def run_design(
    design: ProgramDesign, libraries: Sequence[ctypes.CDLL], inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Write ``inputs`` (one array per argument, by name) into fresh arenas, run every region
    in order (``libraries``: one per region, or one holding every region's kernels) and return
    every result by name (fresh arrays)."""
    libs = list(libraries) * len(design.regions) if len(libraries) == 1 else list(libraries)
    check_indices(design, inputs)
    arenas = new_arenas(design.layout)
    write_arguments(design.layout, arenas, inputs)
    for stage in stages(design):
        if isinstance(stage, Relayout):
            run_relayout(design.layout, stage, arenas)
        else:
            run_region(stage, libs[stage.index], arenas)
    return read_results(design.layout, arenas)


def stages(design: ProgramDesign) -> list[RegionDesign | Relayout]:
    """The regions and host relayouts of ``design`` in the order one step runs them: for each
    region, the relayouts placed before it (``Relayout.after``), then the region; then the
    relayouts after the last region."""
    return in_step_order(design.regions, design.relayouts)


def relayout(h: Relayout, sources: Sequence[np.ndarray]) -> np.ndarray:
    """What copy relayout ``h`` makes of its ``sources`` (as row-major tensors): a fresh
    C-contiguous array. The oracle's semantics (``poot_ir.oracle``), which are numpy's."""
    match h.kind:
        case RelayoutKind.TRANSPOSE:
            out = np.transpose(sources[0], h.perm)
        case RelayoutKind.SLICE:
            index = tuple(
                slice(a, b, s) for a, b, s in zip(h.start, h.limit, h.strides, strict=True)
            )
            out = sources[0][index]
        case RelayoutKind.CONCAT:
            out = np.concatenate(list(sources), axis=h.axis)
        case RelayoutKind.COUNTER:
            out = iota_values(IotaParams(h.shape, h.dtype, h.axis))
        case RelayoutKind.ALIAS:
            out = sources[0]  # moves nothing: the caller reads the root's bytes
    return np.ascontiguousarray(out)


def _view(arenas: Sequence[Bytes], s: Slot) -> np.ndarray:
    return arenas[s.arena][s.offset : s.offset + s.nbytes].view(s.dtype.numpy).reshape(s.shape)


def run_relayout(layout: HostLayout, h: Relayout, arenas: Sequence[Bytes]) -> None:
    """Host relayout ``h`` over ``arenas``: an alias moves nothing (its slot is its root's
    bytes); a copy writes its output's slot from its inputs' slots."""
    if h.kind is RelayoutKind.ALIAS:
        return
    out = layout.slot(h.target)
    data = relayout(h, [_view(arenas, layout.slot(v)) for v in h.sources])
    arenas[out.arena][out.offset : out.offset + out.nbytes] = data.reshape(-1).view(np.uint8)


def run_region(region: RegionDesign, lib: ctypes.CDLL, arenas: Sequence[Bytes]) -> int:
    """One kernel call of ``region``: transfers in, every core's chunks, the flag path,
    transfers out (the flag word too, into the flags arena). Returns the region's flag word as
    it landed there (``flag_word``: the count of guarded operands outside their domains,
    ``poot_codegen.xdna.guards``)."""
    word = ctypes.c_uint32.in_dll(lib, "poot_guard_word")
    word.value = 0
    objects: dict[str, Bytes] = {}
    for t in region.transfers:
        if t.direction is TransferDirection.TO_DEVICE:
            objects[t.fifo] = np.tile(arenas[t.arena][t.offset : t.offset + t.nbytes], t.repeats)
    for f in region.fifos:
        if f.producer is not None:
            objects[f.name] = np.zeros(f.n_objects * f.nbytes, np.uint8)
    # one library holds every core's kernels here, so one word: each core's count is taken as
    # it finishes, which is the word its own copy of the object holds on the NPU
    counts: dict[int, int] = {}
    for core in region.cores:
        _run_core(core, lib, objects)
        counts[core.tile], word.value = int(word.value), 0
    _run_flag_path(region, lib, word, counts, objects)
    for t in (*region.transfers, region.flag.transfer):
        if t.direction is TransferDirection.FROM_DEVICE:
            arenas[t.arena][t.offset : t.offset + t.nbytes] = objects[t.fifo]
    return flag_word(region, arenas)


def flag_word(region: RegionDesign, arenas: Sequence[Bytes]) -> int:
    """Region ``region``'s flag word, read from its place in the flags arena."""
    t = region.flag.transfer
    return int(arenas[t.arena][t.offset : t.offset + t.nbytes].view("<u4")[0])


def _run_flag_path(
    region: RegionDesign,
    lib: ctypes.CDLL,
    word: ctypes.c_uint32,
    counts: Mapping[int, int],
    objects: dict[str, Bytes],
) -> None:
    """Each core of the chain, in order, hands its word on (``FlagPath``): the same C functions
    the cores call after their run on the NPU, over one-word objects."""
    first, nxt = getattr(lib, FLAG_FIRST), getattr(lib, FLAG_NEXT)
    first.argtypes, first.restype = [ctypes.c_void_p], None
    nxt.argtypes, nxt.restype = [ctypes.c_void_p, ctypes.c_void_p], None
    for tile in region.flag.order:
        taken, made = region.flag.feeds(tile)
        objects[made] = np.zeros(FLAG_WORD, np.uint8)
        word.value = counts[tile]
        if taken is None:
            first(objects[made].ctypes.data)
        else:
            nxt(objects[taken].ctypes.data, objects[made].ctypes.data)


def _run_core(core: Core, lib: ctypes.CDLL, objects: Mapping[str, Bytes]) -> None:
    fn = getattr(lib, core.symbol)
    ports = (*core.inputs, core.output)
    pieces = core.pieces  # > 1: a K-streamed input, one kernel call per piece (``Core``)
    ints = [ctypes.c_int32] * (2 if pieces == 1 else 3)
    fn.argtypes = [ctypes.c_void_p] * len(ports) + ints
    fn.restype = None
    for i in range(core.n_chunks):
        for k in range(pieces):
            ptrs = [
                objects[p.fifo].ctypes.data
                + (0 if p.resident else (i // p.hold * p.pieces + k % p.pieces) * p.nbytes)
                for p in ports
            ]
            fn(*ptrs, core.chunk, i * core.chunk, *([k] if pieces > 1 else []))
