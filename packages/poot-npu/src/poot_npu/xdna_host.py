"""``XdnaHostDevice``: the hardware-free stand-in for the AMD XDNA2 NPU (target ``"xdna2"``).

It runs what the NPU would run, short of the NPU's toolchain and silicon: the region design
(``poot_codegen.xdna.design_program``) and the same generated C kernels, built by the host C
compiler (``hostbuild``) instead of Peano, executed region by region over host arenas by the
one design executor (``poot_codegen.xdna.execute``): the same layout, offsets, FIFO objects,
chunking and call order as the NPU's runtime sequence. It proves the generated kernels, layout,
offsets and chunking; not the NPU toolchain or silicon (``stand_in``, ``describe()``).

The artifact:

- ``lower``: the plan's one lowering (``lower_program``): the design (``encode_design``),
  ``link.artifact_source`` (the MLIR of every region, its kernel source and the kernel headers)
  and the kernels of each distinct artifact as one C translation unit (a region reused across
  identical layers runs its artifact's kernels: ``poot_codegen.xdna.reuse``) framed into one
  bytes value, and the design's signature.
- ``compile``: the host C compiler builds each distinct artifact's kernels into a shared
  library, each kept as an entry of the blob cache (``hostbuild``: the engine's own cache once an ``Engine`` takes the device,
  else ``cache_dir``, else the default) under the sha256 of the compiler, flags, source and
  headers; the blob is the design and the C sources (portable: any process with a C compiler
  can load it, and a process sharing the cache finds the library built).
- ``load``: checks the blob's frame and digest and decodes and re-validates the design (a
  damaged or foreign blob, or one whose kernels do not build or lack a core's symbol, is
  ``BlobRefused``), loads the library (from the cache, else building it), and reads the
  signature back from the design's layout. Each artifact keeps its own arenas.

Buffers are numpy arrays. A dispatch checks its command first (``check_dispatch``: another
device's or an unloaded artifact, a buffer not allocated here or not the artifact's ABI is
``DispatchRefused`` before anything runs), then, in a worker thread waited on for at most the
deadline (``DeadlineRunner``): writes the argument buffers into their arena slots, runs each
region (transfers in, every core's chunks through ctypes, the flag path, transfers out; a value
crossing regions goes through its scratch-arena slot, each region's flag word lands at its place
in the flags arena) with the host relayouts between them (``execute.stages``: an alias moves
nothing, a copy goes slot to slot in the arenas) and reads the results out of their slots; then reads the flag words from the
flags arena, refusing a run with one not zero (``DomainFlagged``: nothing is copied out), and
copies the results into the output buffers. A missed deadline is ``DeadlineExceeded`` and poisons the
device: every later call but ``close`` raises ``DevicePoisoned``, and the failed run's arenas and
buffers stay referenced until ``close``.

``last_run_stats()`` counts the last dispatch: regions run (one kernel call, so one hardware
context's dispatch each) and the bytes its transfers moved between the host arenas and the array,
against the minimum (``traffic``).
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
from poot_codegen.xdna import ProgramDesign, Relayout, TransferDirection, lower_program
from poot_codegen.xdna.execute import (
    Bytes,
    check_arena_budget,
    check_indices,
    flag_word,
    new_arenas,
    read_results,
    run_region,
    run_relayout,
    stages,
    write_arguments,
)
from poot_codegen.xdna.guards import FLAG_FIRST, FLAG_NEXT
from poot_codegen.xdna.hostbuild import (
    DEFAULT_COMPILERS,
    HOST_CFLAGS,
    build_library,
    load_library,
)
from poot_codegen.xdna.link import artifact_source
from poot_codegen.xdna.reuse import artifact_regions
from poot_engine.blob_cache import BlobCache
from poot_engine.deadline import DeadlineRunner
from poot_engine.device import (
    Artifact,
    ArtifactSource,
    Buffer,
    DeviceIdentity,
    DeviceTraits,
    check_dispatch,
)
from poot_engine.host_buffers import HostMemory, next_id
from poot_ir import (
    BlobRefused,
    CompileFailed,
    DeadlineExceeded,
    DeviceFailed,
    DomainFlagged,
    UnsupportedDevice,
)

from poot_npu.xdna_artifact import (
    XDNA_TRAITS,
    decode_design,
    design_signature,
    encode_design,
    frame,
    unframe,
)

if TYPE_CHECKING:
    from poot_codegen.xdna import RegionDesign
    from poot_planner import Plan

__all__ = ["TARGET", "RunStats", "XdnaHostDevice", "traffic"]

TARGET: Final = "xdna2"
_SOURCE: Final = "xdna2 host source"
_BLOB: Final = "xdna2 host blob"
_TOOL: Final = "XdnaHostDevice"


@dataclass(frozen=True, slots=True)
class RunStats:
    """What one dispatch of a design moves. ``regions``: kernel calls (one per region, each on
    a hardware context of its artifact on the NPU, ``contexts`` of them). ``host_bytes``: bytes its transfers move between the
    host arenas and the array, both ways (a value crossing regions counts twice: out to the
    scratch arena, back in; a matmul's K-streamed operand once per pass, ``Transfer.repeats``).
    ``min_host_bytes``: each argument a region reads moved in once and each result a region
    writes moved out once, through host relayouts or not (``traffic``)."""

    regions: int
    host_bytes: int
    min_host_bytes: int
    contexts: int = 0  # hardware contexts the NPU would hold: one per distinct artifact

    @property
    def host_ratio(self) -> float:
        """``host_bytes`` over the minimum: 1.0 when no intermediate reaches host memory."""
        return self.host_bytes / self.min_host_bytes if self.min_host_bytes else 1.0


def traffic(design: ProgramDesign) -> RunStats:
    """The ``RunStats`` of one dispatch of ``design`` (the same every dispatch). An argument
    that reaches a region through host relayouts (a convolution's windows, a weight laid out
    as a matrix) counts once in the minimum, as does a result a region's value becomes
    through them: the host's copies between are what the design moves past the minimum."""
    layout = design.layout
    moved = 0
    read: set[int] = set()
    written: set[int] = set()
    for region in design.regions:
        for t in region.transfers:
            moved += t.nbytes * t.repeats  # a K-streamed operand: read once per pass
            value = region.fifo(t.fifo).value
            (read if t.direction is TransferDirection.TO_DEVICE else written).add(value)
    by_step = sorted(design.relayouts, key=lambda h: h.eqn)
    for h in reversed(by_step):  # back from what regions read to the arguments it came from
        if h.target in read:
            read.update(h.sources)
    for h in by_step:  # on from what regions wrote to the results it became
        if any(v in written for v in h.sources):
            written.add(h.target)
    minimum = sum(layout.slot(b.value).nbytes for b in layout.arguments if b.value in read)
    minimum += sum(layout.slot(b.value).nbytes for b in layout.results if b.value in written)
    return RunStats(len(design.regions), moved, minimum, len(artifact_regions(design)))


@dataclass(slots=True)
class _HostLoaded:
    artifact: Artifact
    design: ProgramDesign
    libraries: dict[int, ctypes.CDLL]  # by the region whose artifact it is
    arenas: list[Bytes]
    stats: RunStats


class XdnaHostDevice(HostMemory):
    """The XDNA2 stand-in; see the module docstring. ``cache_dir`` names the blob cache that
    holds the built kernel libraries (default: the engine's, once an ``Engine`` takes the
    device, else the user cache directory); ``compiler`` is the host C compiler (default
    ``cc``, then ``gcc``). ``runs`` counts completed dispatches."""

    def __init__(self, cache_dir: Path | str | None = None, *, compiler: str | None = None) -> None:
        super().__init__("XdnaHostDevice")
        self._cache_dir = cache_dir
        self._cache: BlobCache | None = None
        self._compiler = compiler
        self._identity: DeviceIdentity | None = None
        self._loaded: dict[int, _HostLoaded] = {}
        self._runner = DeadlineRunner(self._life)  # a miss poisons this device
        self._failed: list[tuple[_HostLoaded, tuple[np.ndarray, ...]]] = []
        self._last: RunStats | None = None
        self.runs = 0

    def use_cache(self, cache: BlobCache) -> None:
        """Keep the kernel libraries in ``cache`` (the engine's), unless told a ``cache_dir``."""
        if self._cache_dir is None:
            self._cache = cache

    @property
    def cache(self) -> BlobCache:
        """The blob cache the kernel libraries live in."""
        if self._cache is None:
            self._cache = BlobCache(self._cache_dir)
        return self._cache

    @property
    def traits(self) -> DeviceTraits:
        return XDNA_TRAITS

    @property
    def stand_in(self) -> bool:
        """Always True: this is not the NPU."""
        return True

    @property
    def target(self) -> str:
        return TARGET

    @property
    def identity(self) -> DeviceIdentity:
        if self._identity is None:
            cc, version = _compiler_identity(self._compiler)
            self._identity = DeviceIdentity(
                part=f"host {platform.machine() or 'cpu'} standing in for an XDNA2 NPU (npu2)",
                compiler=cc,
                compiler_version=f"{version}; poot-codegen {metadata.version('poot-codegen')}",
                options=(("cflags", " ".join(HOST_CFLAGS)),),
            )
        return self._identity

    def describe(self) -> str:
        i = self.identity
        return (
            f"{self._name}: hardware-free stand-in for the AMD XDNA2 NPU: the generated C "
            f"kernels built by {i.compiler} ({i.compiler_version.split(';')[0]}) and each "
            f"region design executed step by step over host arenas; proves the generated "
            f"kernels, layout, offsets and chunking; not the NPU toolchain or silicon"
        )

    # -- artifacts -----------------------------------------------------------------------------

    def lower(self, plan: Plan) -> ArtifactSource:
        self._usable()
        if plan.target.name != TARGET:
            raise UnsupportedDevice(self._name, f"it runs {TARGET} plans, not {plan.target.name}")
        lowered = lower_program(plan)  # the one design build of this artifact
        i = self.identity
        fields = {"part": i.part, "compiler": i.compiler, "version": i.compiler_version}
        # one kernel library per distinct artifact: a region reused across identical layers
        # runs its artifact's kernels (poot_codegen.xdna.reuse)
        kernels = [lowered.kernels[i].encode() for i in lowered.artifacts]
        sections = [
            encode_design(lowered.design),
            artifact_source(lowered, fields=fields),
            *kernels,
        ]
        return ArtifactSource(frame(_SOURCE, sections), design_signature(lowered.design))

    def compile(self, source: ArtifactSource) -> bytes:
        self._usable()
        try:
            design, _, *sources = unframe(_SOURCE, source.data)
            _check_sources(decode_design(design), sources)
            texts = [c.decode() for c in sources]
        except (ValueError, UnicodeDecodeError) as err:
            raise CompileFailed(_TOOL, str(err), "an artifact source") from None
        for text in texts:  # one blob-cache entry per distinct artifact
            build_library(text, self.cache, compiler=self._compiler)
        return frame(_BLOB, [design, *sources])

    def load(self, blob: bytes) -> Artifact:
        self._usable()
        try:
            raw, *sources = unframe(_BLOB, blob)
            design = decode_design(raw)
            _check_sources(design, sources)
            texts = [c.decode() for c in sources]
        except (ValueError, UnicodeDecodeError) as err:
            raise BlobRefused(self._name, str(err)) from None
        check_arena_budget(design.layout)
        owners = artifact_regions(design)
        try:
            built = [load_library(t, self.cache, compiler=self._compiler) for t in texts]
        except CompileFailed as err:
            raise BlobRefused(self._name, f"its kernels do not build: {err}") from None
        libraries = {r.index: lib for r, lib in zip(owners, built, strict=True)}
        for r in design.regions:
            library = libraries[r.runs]
            for symbol in (FLAG_FIRST, FLAG_NEXT, *(c.symbol for c in r.cores)):
                if not hasattr(library, symbol):
                    raise BlobRefused(self._name, f"no kernel {symbol} in its library")
        artifact = Artifact(next_id(), design_signature(design))
        arenas = new_arenas(design.layout)
        self._loaded[artifact.id] = _HostLoaded(
            artifact, design, libraries, arenas, traffic(design)
        )
        return artifact

    def unload(self, artifact: Artifact) -> None:
        self._usable()
        self._loaded.pop(artifact.id, None)

    def loaded(self) -> tuple[Artifact, ...]:
        """The artifacts loaded now, in load order."""
        self._usable()
        return tuple(x.artifact for x in self._loaded.values())

    def design(self, artifact: Artifact) -> ProgramDesign:
        """The design a loaded artifact runs (read from its blob)."""
        return self._get(artifact).design

    def arenas(self, artifact: Artifact) -> tuple[np.ndarray, ...]:
        """Copies of a loaded artifact's arenas as the last dispatch left them."""
        return tuple(a.copy() for a in self._get(artifact).arenas)

    def last_run_stats(self) -> RunStats | None:
        """The ``RunStats`` of the last completed dispatch (None before the first)."""
        return self._last

    # -- running -------------------------------------------------------------------------------

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._usable()
        memory = self._buffers.memory
        loaded = check_dispatch(
            artifact, buffers, self._loaded, lambda e: e.artifact, memory, self._name
        )
        arrays = tuple(memory[b.id] for b in buffers)
        n_in = len(artifact.signature.inputs)
        specs = artifact.signature.args
        inputs = {s.name: a for s, a in zip(specs[:n_in], arrays[:n_in], strict=True)}
        design, libraries, arenas = loaded.design, loaded.libraries, loaded.arenas
        check_indices(design, inputs)  # before the worker runs: a kernel trusts these indices

        def run() -> dict[str, np.ndarray]:
            write_arguments(design.layout, arenas, inputs)
            for stage in stages(design):  # regions, and the host relayouts between them
                if isinstance(stage, Relayout):
                    run_relayout(design.layout, stage, arenas)
                else:
                    self._run_region(stage, libraries[stage.runs], arenas)
            return read_results(design.layout, arenas)

        what = f"{self._name} run of artifact {artifact.id}"
        try:
            results = self._runner.run(run, deadline_s, what)
        except DeadlineExceeded:
            self._failed.append((loaded, arrays))
            raise
        # the flag words are read with the results, from the flags arena where each region's
        # last core drained its word (design.FlagPath): a region that counted an operand outside
        # its domain has no result to give (nothing is copied out, no state changes)
        for region in design.regions:
            if word := flag_word(region, arenas):
                raise DomainFlagged(region.index, word, region.eqns)
        for spec, out in zip(specs[n_in:], arrays[n_in:], strict=True):
            np.copyto(out, results[spec.name], casting="no")
        self._last = loaded.stats
        self.runs += 1

    def _run_region(self, region: RegionDesign, library: ctypes.CDLL, arenas: list[Bytes]) -> None:
        """One region's kernel call (in the worker thread). Tests slow it down here."""
        run_region(region, library, arenas)

    def _release(self) -> None:
        # A run that missed its deadline may still be writing its arenas: its worker holds its
        # own references, so dropping ours here cannot free memory under it.
        self._runner.close()
        self._failed.clear()
        self._loaded.clear()

    def _get(self, artifact: Artifact) -> _HostLoaded:
        self._usable()
        loaded = self._loaded.get(artifact.id)
        if loaded is None or loaded.artifact != artifact:
            raise DeviceFailed(f"{self._name}: artifact {artifact.id} is not loaded here")
        return loaded


def _check_sources(design: ProgramDesign, sources: list[bytes]) -> None:
    """``ValueError`` unless there is one kernel source per distinct artifact of ``design``."""
    k = len(artifact_regions(design))
    if len(sources) != k:
        raise ValueError(f"{len(sources)} kernel sources for {k} distinct artifacts")


def _compiler_identity(compiler: str | None) -> tuple[str, str]:
    """(the host compiler's path, the first line of its ``--version``), or "unavailable"."""
    for name in DEFAULT_COMPILERS if compiler is None else (compiler,):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
        except OSError:
            continue
        lines = done.stdout.strip().splitlines()
        return path, lines[0] if done.returncode == 0 and lines else "unknown version"
    return "unavailable", "unavailable"
