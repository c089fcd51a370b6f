"""``XdnaDevice``: the AMD XDNA2 NPU (Strix, Strix Halo; aie2p) through XRT's ``pyxrt``.

``pyxrt`` ships with XRT, not on PyPI (the ``.#npu`` Nix shell provides it), so it is imported
inside ``probe`` and the constructor, never when this module is imported. ``probe()`` is None
only when ``pyxrt`` imports and ``pyxrt.device(0)`` opens; otherwise it says why, and the
constructor raises ``DeviceUnavailable`` with that reason.

The artifact (one per program; one xclbin and hardware context per distinct region artifact,
one instruction stream per region: regions reused across identical layers run their artifact's
xclbin on its context with their own instruction buffer, ``poot_codegen.xdna.reuse``):

- ``lower``: the plan's one lowering (``lower_program``): its design (``encode_design``),
  ``link.artifact_source`` (the part, tool versions, options, every region's MLIR and kernel
  source, the kernel headers), then each region's MLIR and kernel C, framed into one bytes
  value, and the design's signature.
- ``compile``: reads the lowering back (``from_parts``: the design validated, the MLIR its
  design's; nothing is planned or designed again), then ``link.link``: Peano builds each
  region's kernels and aiecc links its design into an xclbin and an instruction stream. A missing tool is ``ToolchainUnavailable`` naming every missing tool; a
  tool that fails is ``CompileFailed`` with its log. The blob frames the design, each distinct
  artifact's xclbin (in region order) and each region's instructions.
- ``load``: checks the frame, its digest and the design (else ``BlobRefused``); a blob needing
  more hardware contexts than are free (16 on Strix-class NPUs, shared by every loaded artifact
  of every XdnaDevice in the process), or more than the process may hold before an acceptance
  run has verified three or more (mlir-aie #3654), is ``ContextLimit`` naming the bound
  (``poot_npu.xdna_contexts``; the count is of distinct artifacts). Then for each distinct
  artifact: ``device.register_xclbin``, one ``hw_context(device, uuid)`` and
  ``kernel(ctx, "MLIR_AIE")``; for each region, on its artifact's kernel, its instruction buffer
  ``bo(device, nbytes, bo.cacheable, kernel.group_id(1))``, written and synced to the device.
  The arenas, shared by every region (a value crossing regions goes through its scratch slot),
  are ``bo(device, nbytes, bo.host_only, kernel.group_id(3 + i))``. XRT refusing any of it is
  ``BlobRefused``, except a hardware context XRT will not make: the driver's limit is the
  device's, so contexts other processes hold leave fewer than this process counted, and that
  is ``DeviceFailed`` (the blob is not at fault). The signature is read back from the design's
  layout.

Buffers are host numpy arrays. A dispatch checks its command first (``check_dispatch``: another
device's or an unloaded artifact, a buffer not allocated here or not the artifact's ABI is
``DispatchRefused`` before XRT is touched), writes each argument into its arena slot and syncs
the weight and input arenas to the device, then for each region starts its artifact's
``kernel(3, insts, n_words, *arenas)`` with its own instruction buffer (opcode 3; the instruction count in 32-bit words) and
waits with ``run.wait(ms)`` for what is left of the deadline (whole milliseconds, at least 1:
XRT's 0 waits forever). Between the runs, where the design puts them (``execute.stages``), the
host relayouts: an alias moves nothing (the next region streams the same device bytes); a copy
syncs each source slot's bytes from the device, reads them, writes the relayout into the
destination slot and syncs those bytes to the device, each sync over the slot's byte range only
(``bo.sync(direction, size, offset)``, XRT src/python/pybind11/src/pyxrt.cpp: "Synchronize (DMA
or cache flush/invalidation) the buffer in the requested direction"), so no other slot's bytes
move either way. After the runs the results and flags arenas are synced from the device;
a region's flag word (its cores' count of operands outside their domains, drained by its last
core: ``poot_codegen.xdna.design.FlagPath``) that is not zero refuses the run with
``DomainFlagged`` before any result is read out. ``ERT_CMD_STATE_TIMEOUT`` is ``DeadlineExceeded`` and poisons the
device: every later call but ``close`` raises ``DevicePoisoned`` and the run's buffers, arenas
and contexts stay allocated until ``close`` (which waits ``_CLOSE_GRACE_MS`` for the run and,
since XRT's abort is not bound, keeps one still running alive for the rest of the process).
Any other state but ``ERT_CMD_STATE_COMPLETED`` is ``DeviceFailed`` naming it. Then the results
arena is synced from the device and each result read from its slot.

Known upstream hazards (``xdna-toolchain.md``): a third distinct hardware context in one process
returning garbage while reporting COMPLETED (refused by default until verified, see ``load``),
and a sync returning before the last DMA landed, which nothing here can see; tests that sample
results against the oracle do.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from poot_codegen.xdna import (
    ArenaRole,
    DesignError,
    ProgramDesign,
    RegionDesign,
    from_parts,
    lower_program,
)
from poot_codegen.xdna import link as xlink
from poot_codegen.xdna.design import FLAG_WORD, Relayout, RelayoutKind
from poot_codegen.xdna.execute import (
    check_arena_budget,
    check_indices,
    new_arenas,
    read_results,
    relayout,
    run_relayout,
    stages,
    write_arguments,
)
from poot_codegen.xdna.link import Progress
from poot_codegen.xdna.reuse import artifact_regions
from poot_engine.deadline import wait_slices_ms
from poot_engine.device import (
    Artifact,
    ArtifactSource,
    Buffer,
    CompileProgress,
    DeviceIdentity,
    DeviceTraits,
    check_dispatch,
)
from poot_engine.host_buffers import HostMemory, next_id
from poot_ir import (
    BlobRefused,
    CompileFailed,
    DeviceFailed,
    DeviceUnavailable,
    DomainFlagged,
    UnsupportedDevice,
)

from poot_npu import xdna_contexts as contexts
from poot_npu.xdna_artifact import (
    XDNA_TRAITS,
    decode_design,
    design_signature,
    encode_design,
    frame,
    unframe,
)

if TYPE_CHECKING:
    from poot_planner import Plan

__all__ = ["KERNEL", "NODE", "OPCODE", "TARGET", "XdnaDevice"]

TARGET: Final = "xdna2"
KERNEL: Final = "MLIR_AIE"
"""The xclbin kernel aiecc generates."""
OPCODE: Final = 3
"""The first argument of every kernel call: run the instruction stream."""
INSTS_GROUP: Final = 1
"""The kernel argument index (and memory group) of the instruction buffer."""
ARENA_GROUP: Final = 3
"""The kernel argument index of the first arena; arena ``i`` is argument ``3 + i``."""
NODE: Final = contexts.NODE
_SOURCE: Final = "xdna2 xrt source"
_BLOB: Final = "xdna2 xrt blob"
_CLOSE_GRACE_MS: Final = 1000
_abandoned: list[object] = []  # runs still going at close, kept alive (module docstring)


def _import_pyxrt() -> tuple[Any, str | None]:
    try:
        import pyxrt
    except ImportError as err:
        why = f"python module 'pyxrt' does not import ({err}): XRT's Python bindings, `nix develop .#npu`"
        return None, why
    return pyxrt, None


@dataclass(slots=True)
class _Artifact:
    xclbin: Any
    context: Any
    kernel: Any


@dataclass(slots=True)
class _Region:
    design: RegionDesign
    xclbin: Any
    context: Any
    kernel: Any
    insts: Any
    n_words: int


@dataclass(slots=True)
class _XdnaLoaded:
    artifact: Artifact
    design: ProgramDesign
    regions: list[_Region]
    arenas: list[Any]  # one bo per arena (empty when the design has no region)
    to_device: tuple[int, ...]  # arenas the host writes before each run: weights and inputs
    from_device: tuple[int, ...]  # arenas synced back after each run: results, flags
    host: list[np.ndarray] = field(default_factory=list)  # arenas of a design with no region
    contexts: int = 0  # hardware contexts held: one per distinct artifact


class XdnaDevice(HostMemory):
    """The XDNA2 NPU through ``pyxrt``; see the module docstring. ``env`` is the environment the
    link step finds its tools in (default: this process's). ``runs`` counts completed
    dispatches."""

    def __init__(
        self, env: Mapping[str, str] | None = None, progress: Progress | None = None
    ) -> None:
        super().__init__("XdnaDevice")
        #: Called as ``(stage, done, total)`` while the link step runs (the CLI renders it).
        self.progress = progress
        xrt, why = _import_pyxrt()
        if why is not None:
            raise DeviceUnavailable(self._name, why)
        try:
            device = xrt.device(0)
        except Exception as err:  # pyxrt raises RuntimeError; any failure means "not here"
            raise DeviceUnavailable(self._name, f"pyxrt.device(0) does not open: {err}") from None
        self._xrt: Any = xrt
        self._device: Any = device
        self._env = None if env is None else dict(env)
        self._fields: dict[str, str] | None = None
        self._loaded: dict[int, _XdnaLoaded] = {}
        self._failed: list[tuple[_XdnaLoaded, tuple[np.ndarray, ...], Any]] = []
        self.runs = 0

    @staticmethod
    def probe() -> str | None:
        """None when ``pyxrt`` imports and ``pyxrt.device(0)`` opens, else the reason."""
        xrt, why = _import_pyxrt()
        if why is not None:
            return why
        try:
            xrt.device(0)
        except Exception as err:  # pyxrt raises RuntimeError; any failure means "not here"
            return f"pyxrt.device(0) does not open: {err}"
        return None

    @property
    def traits(self) -> DeviceTraits:
        return XDNA_TRAITS

    @property
    def stand_in(self) -> bool:
        return False

    def report_progress(self, progress: CompileProgress | None) -> None:
        """The link step's stages go to ``progress`` (``poot_codegen.xdna.link.Progress``)."""
        self.progress = progress

    @property
    def target(self) -> str:
        return TARGET

    @property
    def identity(self) -> DeviceIdentity:
        f = self._identity_fields()
        return DeviceIdentity(
            part=f"{f['part']} ({f['arch']})",
            compiler="peano+aiecc",
            compiler_version=f"peano {f['peano']}; aiecc {f['aiecc']}",
            options=(("aiecc_flags", f["aiecc_flags"]), ("peano_flags", f["peano_flags"])),
        )

    def describe(self) -> str:
        i = self.identity
        return f"{self._name}: AMD XDNA2 NPU ({i.part}) through XRT, linked by {i.compiler_version}"

    # -- artifacts -----------------------------------------------------------------------------

    def lower(self, plan: Plan) -> ArtifactSource:
        self._usable()
        if plan.target.name != TARGET:
            raise UnsupportedDevice(self._name, f"it runs {TARGET} plans, not {plan.target.name}")
        lowered = lower_program(plan)  # the one design build of this artifact
        sections = [
            encode_design(lowered.design),
            xlink.artifact_source(lowered, fields=self._identity_fields()),
        ]
        for mlir, kernels in zip(lowered.mlir, lowered.kernels, strict=True):
            sections += [mlir.encode(), kernels.encode()]
        return ArtifactSource(frame(_SOURCE, sections), design_signature(lowered.design))

    def compile(self, source: ArtifactSource) -> bytes:
        self._usable()
        try:
            design, _, *parts = unframe(_SOURCE, source.data)
            lowered = from_parts(
                decode_design(design),
                [m.decode() for m in parts[0::2]],
                [k.decode() for k in parts[1::2]],
            )
        except (ValueError, UnicodeDecodeError, DesignError) as err:
            raise CompileFailed(self._name, str(err), "an artifact source") from None
        linked = xlink.link(lowered, env=self._env, progress=self.progress)
        # one xclbin per distinct artifact, then every region's instruction stream
        sections = [design, *(a.xclbin for a in linked if a.artifact == a.region)]
        sections += [a.insts for a in linked]
        return frame(_BLOB, sections)

    def load(self, blob: bytes) -> Artifact:
        self._usable()
        try:
            raw, *parts = unframe(_BLOB, blob)
            design = decode_design(raw)
        except ValueError as err:
            raise BlobRefused(self._name, str(err)) from None
        check_arena_budget(design.layout)  # before any context is reserved
        owners = artifact_regions(design)
        n, k = len(design.regions), len(owners)
        xclbins, insts = parts[:k], parts[k:]
        if len(insts) != n or any(not p or len(p) % 4 for p in insts):
            raise BlobRefused(
                self._name, f"not {k} xclbins and {n} regions of whole-word instructions"
            )
        # one context per distinct artifact, device-wide, shared with every XdnaDevice in the
        # process (poot_npu.xdna_contexts): regions reused across identical layers share one
        contexts.reserve(NODE, k, design.limits.contexts, self._name)
        try:
            xclbin = {r.index: x for r, x in zip(owners, xclbins, strict=True)}
            kernels: dict[int, _Artifact] = {}
            regions = []
            for i, r in enumerate(design.regions):  # an artifact comes before its other uses
                if r.artifact is None:
                    kernels[r.index] = self._load_artifact(r, xclbin[r.index])
                regions.append(self._load_region(r, kernels[r.runs], insts[i]))
            arenas = self._arenas(design, regions)
        except RuntimeError as err:
            contexts.release(NODE, k)
            raise BlobRefused(self._name, f"XRT refused it: {err}") from None
        except DeviceFailed:
            contexts.release(NODE, k)
            raise
        layout = design.layout
        written = {layout.slot(b.value).arena for b in layout.arguments}
        # synced back after each run: the results and the flag words (the flags arena), and
        # the arena of a result that is an alias of an argument (a reshaped input)
        back = {
            a.index for a in (layout.arena(ArenaRole.RESULTS), layout.arena(ArenaRole.FLAGS)) if a
        }
        back |= {layout.slot(b.value).arena for b in layout.results}
        artifact = Artifact(next_id(), design_signature(design))
        self._loaded[artifact.id] = _XdnaLoaded(
            artifact,
            design,
            regions,
            arenas,
            tuple(sorted(written)),
            tuple(sorted(back)),
            [] if regions else new_arenas(layout),
            k,
        )
        return artifact

    def _load_artifact(self, region: RegionDesign, xclbin: bytes) -> _Artifact:
        """One distinct artifact: its xclbin registered, one hardware context, its kernel."""
        xrt, device = self._xrt, self._device
        with tempfile.TemporaryDirectory(prefix="poot-xclbin-") as scratch:
            path = Path(scratch) / f"region{region.index}.xclbin"
            path.write_bytes(xclbin)
            xb = xrt.xclbin(str(path))  # read whole here: the file may go
        device.register_xclbin(xb)
        try:
            context = xrt.hw_context(device, xb.get_uuid())
        except RuntimeError as err:
            # the driver's context limit is the device's (amd/xdna-driver ``hwctx_limit``, 16
            # on npu4), and other processes' contexts count against it, which this process's
            # registry cannot see: the device has none free, the blob is not at fault (a
            # BlobRefused would have the engine recompile it for nothing)
            raise DeviceFailed(
                f"{self._name}: XRT made no hardware context for region {region.index} "
                f"({contexts.held(NODE)} held in this process; other processes' contexts count "
                f"against the device's limit too): {err}"
            ) from None
        return _Artifact(xb, context, xrt.kernel(context, KERNEL))

    def _load_region(self, region: RegionDesign, art: _Artifact, insts: bytes) -> _Region:
        """One region: its own instruction buffer, on its artifact's kernel (reuse: several
        regions' buffers on one kernel, as mlir-aie's add_one_two_txn test runs them)."""
        xrt = self._xrt
        words = np.frombuffer(insts, dtype="<u4").astype(np.uint32)
        bo = xrt.bo(self._device, words.nbytes, xrt.bo.cacheable, art.kernel.group_id(INSTS_GROUP))
        bo.write(words.view(np.uint8), 0)
        bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
        return _Region(region, art.xclbin, art.context, art.kernel, bo, len(words))

    def _arenas(self, design: ProgramDesign, regions: list[_Region]) -> list[Any]:
        if not regions:
            return []
        xrt, kernel = self._xrt, regions[0].kernel
        return [
            xrt.bo(self._device, a.nbytes, xrt.bo.host_only, kernel.group_id(ARENA_GROUP + a.index))
            for a in design.layout.arenas
        ]

    def unload(self, artifact: Artifact) -> None:
        self._usable()
        gone = self._loaded.pop(artifact.id, None)
        if gone is not None:
            contexts.release(NODE, gone.contexts)

    # -- running -------------------------------------------------------------------------------

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._usable()
        memory = self._buffers.memory
        loaded = check_dispatch(
            artifact, buffers, self._loaded, lambda e: e.artifact, memory, self._name
        )
        start = time.monotonic()
        arrays = tuple(memory[b.id] for b in buffers)
        specs = artifact.signature.args
        n_in = len(artifact.signature.inputs)
        # the gather kernel reads wherever a host-passed index points: refuse before any write
        inputs = {s.name: a for s, a in zip(specs[:n_in], arrays[:n_in], strict=True)}
        check_indices(loaded.design, inputs)
        if (
            not loaded.regions
        ):  # nothing runs on the NPU: every result is an argument or its relayout
            self._run_on_host(loaded, specs, arrays, n_in)
            return
        xrt = self._xrt
        layout = loaded.design.layout
        try:
            for spec, arr in zip(specs[:n_in], arrays[:n_in], strict=True):
                s = layout.argument(spec.name)
                if s.nbytes:
                    data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
                    loaded.arenas[s.arena].write(data, s.offset)
            for i in loaded.to_device:
                loaded.arenas[i].sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
            for stage in stages(loaded.design):
                if isinstance(stage, Relayout):
                    self._relayout(loaded, stage)
                else:
                    r = loaded.regions[stage.index]
                    left = deadline_s - (time.monotonic() - start)
                    self._run(loaded, r, arrays, left, deadline_s)
            for i in loaded.from_device:
                loaded.arenas[i].sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
            self._check_flags(loaded)
            for spec, out in zip(specs[n_in:], arrays[n_in:], strict=True):
                s = layout.result(spec.name)
                if s.nbytes:
                    raw = np.asarray(loaded.arenas[s.arena].read(s.nbytes, s.offset))
                    out[...] = raw.view(np.uint8).view(out.dtype).reshape(out.shape)
        except RuntimeError as err:
            raise DeviceFailed(f"{self._name}: XRT failed artifact {artifact.id}: {err}") from None
        self.runs += 1

    def _relayout(self, loaded: _XdnaLoaded, h: Relayout) -> None:
        """Host relayout ``h`` between region runs, over the arena buffer objects (the module
        docstring): each source slot synced from the device and read, the result written to
        its slot and synced to the device. An alias moves nothing."""
        if h.kind is RelayoutKind.ALIAS:
            return
        sync = self._xrt.xclBOSyncDirection
        layout = loaded.design.layout
        sources = []
        for v in h.sources:
            s = layout.slot(v)
            bo = loaded.arenas[s.arena]
            if s.nbytes:  # an empty tensor has no bytes to sync
                bo.sync(sync.XCL_BO_SYNC_BO_FROM_DEVICE, s.nbytes, s.offset)
                raw = np.asarray(bo.read(s.nbytes, s.offset)).view(np.uint8)
            else:
                raw = np.zeros(0, np.uint8)
            sources.append(raw.view(s.dtype.numpy).reshape(s.shape))
        out = layout.slot(h.target)
        if out.nbytes:
            data = relayout(h, sources).reshape(-1).view(np.uint8)
            bo = loaded.arenas[out.arena]
            bo.write(data, out.offset)
            bo.sync(sync.XCL_BO_SYNC_BO_TO_DEVICE, out.nbytes, out.offset)

    def _check_flags(self, loaded: _XdnaLoaded) -> None:
        """Refuse the run (``DomainFlagged``) when a region's flag word, drained by its last
        core into the flags arena (``design.FlagPath``), is not zero: before any result is
        read out, so no buffer and no state changes."""
        flags = loaded.design.layout.arena(ArenaRole.FLAGS)
        if flags is None:
            return
        n = len(loaded.design.regions)
        raw = np.asarray(loaded.arenas[flags.index].read(FLAG_WORD * n, 0))
        words = raw.view(np.uint8).view("<u4")
        for region in loaded.design.regions:
            t = region.flag.transfer
            if word := int(words[t.offset // FLAG_WORD]):
                raise DomainFlagged(region.index, word, region.eqns)

    def _run(
        self,
        loaded: _XdnaLoaded,
        r: _Region,
        arrays: tuple[np.ndarray, ...],
        left_s: float,
        deadline_s: float,
    ) -> None:
        states = self._xrt.ert_cmd_state
        what = f"{self._name} run of artifact {loaded.artifact.id}, region {r.design.index}"
        if left_s <= 0:  # the deadline passed before this region started: nothing is running
            raise self._life.missed(deadline_s, what)
        run = r.kernel(OPCODE, r.insts, r.n_words, *loaded.arenas)
        for ms in wait_slices_ms(left_s):  # any deadline, inf too, in waits XRT can take
            state = run.wait(ms)
            if state != states.ERT_CMD_STATE_TIMEOUT:
                break
        if state == states.ERT_CMD_STATE_TIMEOUT:
            self._failed.append((loaded, arrays, run))
            raise self._life.missed(deadline_s, what)
        if state != states.ERT_CMD_STATE_COMPLETED:
            raise DeviceFailed(f"{what} ended in {getattr(state, 'name', state)}")

    def _run_on_host(
        self, loaded: _XdnaLoaded, specs: tuple[Any, ...], arrays: tuple[np.ndarray, ...], n_in: int
    ) -> None:
        layout = loaded.design.layout
        inputs = {s.name: a for s, a in zip(specs[:n_in], arrays[:n_in], strict=True)}
        write_arguments(layout, loaded.host, inputs)
        for h in loaded.design.relayouts:  # no region: every relayout is of the arguments
            run_relayout(layout, h, loaded.host)
        results = read_results(layout, loaded.host)
        for spec, out in zip(specs[n_in:], arrays[n_in:], strict=True):
            np.copyto(out, results[spec.name], casting="no")
        self.runs += 1

    def _release(self) -> None:
        timeout = self._xrt.ert_cmd_state.ERT_CMD_STATE_TIMEOUT
        kept = 0  # the contexts of a run still going stay held for the process
        for failed in self._failed:
            try:
                still = failed[2].wait(_CLOSE_GRACE_MS) == timeout
            except RuntimeError:
                still = False
            if still:
                _abandoned.append(failed)
                kept += failed[0].contexts
        self._failed.clear()
        contexts.release(NODE, sum(x.contexts for x in self._loaded.values()) - kept)
        self._loaded.clear()
        self._device = None

    def _identity_fields(self) -> dict[str, str]:
        if self._fields is None:
            self._fields = xlink.identity_fields(self._env)
        return self._fields
