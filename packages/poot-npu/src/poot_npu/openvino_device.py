"""``OpenVinoDevice``: what every device that runs one compiled OpenVINO graph shares.

Two devices are made of it: ``VpuDevice`` (``poot_npu.vpu``: the Intel NPU4 and its stand-in
with FP16 emulation on the CPU plugin) and ``HostDevice`` (``poot_npu.host``: the host CPU in
F32, the compiled host device). A subclass says how a plan is lowered (``lower``), what it is
(``target``, ``describe``, ``traits``) and, for a graph the plugin's compiler rejects, whether
a fallback configuration may compile it (``_fallback``); everything else is here.

The artifact:

- ``lower`` (the subclass's): the IR, xml and bin framed into one bytes value (``frame_ir``),
  and the signature of the lowered model. With the device identity it is the blob-cache key.
- ``compile``: read the IR, ``compile_model`` on the explicit device, ``export_model``. A graph
  the compiler rejects is ``CompileFailed`` carrying OpenVINO's own message.
- ``load``: ``import_model``; a blob the runtime refuses is ``BlobRefused`` (the engine then
  recompiles). The blob ``compile`` has just returned loads as the compiled model it was
  exported from, without importing it again (MobileNetV3-small on the stand-in: 1.5 s of its
  first step); every other blob, a cached one above all, goes through ``import_model``. The
  compiled model's ports (names, order, direction, extents, element type) are read back as
  the artifact's signature: the runtime converts a retyped input silently and runs
  a missing one on stale memory, so only this comparison catches a compiler that changed one.
  A port no poot type can describe is ``SignatureMismatch`` here.

A graph may carry one extra boolean guard result after the program's (``poot_codegen.intel.
guard``), named by the equations it checks and not part of the artifact's signature. After
every run, before any output is copied, a set flag is ``NarrowingRangeIntermediate`` naming the
source equation; the engine then commits nothing.

Buffers are host numpy arrays. Each artifact has one infer request, made at load; a dispatch
binds every buffer to it once, as an ``ov.Tensor`` that shares the array's memory, on the
request's input and output ports: later writes into an input buffer are what the next run
reads, and a run writes its results into the output buffers themselves (no copy). A dispatch
checks its command first (``check_dispatch``: another device's or an unloaded artifact, a
buffer not allocated here, or not the artifact's ABI is ``DispatchRefused`` before OpenVINO is
touched; a replay's dispatch, the same buffers again, was checked and bound once, until a
buffer is freed), then ``start_async`` and ``wait_for`` at most the deadline (whole
milliseconds, rounded up, in waits of at most ``MAX_WAIT_MS``; ``inf`` waits with no end:
``poot_engine.deadline``). A missed deadline is ``DeadlineExceeded`` and poisons the device:
every later call but ``close`` raises ``DevicePoisoned``, and the failed request and every
buffer it used stay referenced until ``close``. ``close`` cancels such a request and waits for
it at most ``_CLOSE_GRACE_MS``; one still running after that is kept alive for the rest of the
process rather than freeing memory the runtime may still write.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Final

import numpy as np
from poot_codegen.intel import graph as intel_graph
from poot_codegen.intel import guard as intel_guard
from poot_codegen.intel.quiet import ov
from poot_engine.deadline import single_wait_ms, wait_slices_ms
from poot_engine.device import (
    ArgSpec,
    Artifact,
    ArtifactSource,
    BoundStep,
    Buffer,
    DeviceIdentity,
    Direction,
    Signature,
    StepCommands,
    check_dispatch,
)
from poot_engine.host_buffers import HostMemory, HostStep, next_id
from poot_ir import (
    BlobRefused,
    CompileFailed,
    DeviceFailed,
    DispatchRefused,
    DomainFlagged,
    DType,
    NarrowingRangeIntermediate,
    SignatureMismatch,
    TensorType,
)

__all__ = ["OpenVinoDevice", "frame_ir", "port_signature", "split_guard", "unframe_ir"]

_IR_MAGIC: Final = b"POOT-OPENVINO-IR-1\n"
_CLOSE_GRACE_MS: Final = 1000
#: What the CPU plugin's snippet passes raise on a graph they cannot fuse (``_fallback``)
_SNIPPET_FAILURES: Final = ("Can't allocate registers for a snippet", "[TokenizeSnippets]")

_abandoned: list[object] = []  # requests still running at close, kept alive (module docstring)


def frame_ir(xml: bytes, weights: bytes) -> bytes:
    """The IR as one bytes value: a magic line, then xml and bin, each u64-length-prefixed."""
    return _IR_MAGIC + struct.pack(">Q", len(xml)) + xml + struct.pack(">Q", len(weights)) + weights


def unframe_ir(data: bytes) -> tuple[bytes, bytes]:
    """The (xml, bin) that ``frame_ir`` framed; ``ValueError`` for anything else."""
    at = len(_IR_MAGIC)
    if data[:at] != _IR_MAGIC or len(data) < at + 8:
        raise ValueError("not a poot OpenVINO IR source")
    (n,) = struct.unpack_from(">Q", data, at)
    xml_end = at + 8 + n
    if xml_end + 8 > len(data):
        raise ValueError("a truncated poot OpenVINO IR source")
    (m,) = struct.unpack_from(">Q", data, xml_end)
    if xml_end + 8 + m != len(data):
        raise ValueError("a poot OpenVINO IR source of the wrong length")
    return data[at + 8 : xml_end], data[xml_end + 8 :]


@dataclass(slots=True)
class _Loaded:
    """One loaded artifact: its compiled model, its one infer request and what is bound: the
    buffers of the last checked dispatch (compared by identity: a replay passes the same tuple
    every step) and the tensors over their memory, set on the request's ports, inputs and
    outputs, kept referenced here."""

    artifact: Artifact
    compiled: Any
    request: Any
    n_in: int
    #: the guard result's output port and the label of each of its flags, if it has one
    guard: tuple[int, tuple[str, ...]] | None
    buffers: tuple[Buffer, ...] | None = None
    generation: int = -1
    tensors: tuple[Any, ...] = ()
    flags: np.ndarray | None = None  # the guard result's memory, bound with the buffers


class OpenVinoDevice(HostMemory):
    """A device that compiles and runs one OpenVINO graph per artifact on the OpenVINO device
    ``ov_device`` with ``config`` (module docstring). ``runs`` counts completed dispatches."""

    def __init__(self, name: str, ov_device: str, config: dict[str, str], core: Any) -> None:
        super().__init__(name)
        self._device = ov_device
        self._config = dict(config)
        self._core = core
        self._loaded: dict[int, _Loaded] = {}
        self._failed: list[tuple[_Loaded, tuple[np.ndarray, ...]]] = []
        self._gen = 0
        self.runs = 0
        #: the blob ``compile`` returned last and its compiled model, which ``load`` takes once
        self._exported: tuple[bytes, Any] | None = None
        #: the IR ``source`` returned last and the model it was serialized from, which
        #: ``compile`` takes once instead of reading the IR back
        self._lowered: tuple[bytes, Any] | None = None

    def _source(self, model: Any) -> ArtifactSource:
        """The artifact source of a lowered ``model``: its IR framed (the blob-cache key's
        part) and its ports' signature. The model is kept for ``compile``, which would
        otherwise read the same IR back (MobileNetV3-small: 0.1 s of its first step)."""
        data = frame_ir(*intel_graph.serialize(model))
        entries, _ = split_guard(model)
        self._lowered = (data, model)
        return ArtifactSource(data, port_signature(entries, self._name))

    def _prepare(self, model: Any) -> None:
        """Mark ``model`` (just read from the IR) before it is compiled: nothing by default.
        (Runtime info the IR does not carry is set here, so the blob holds its effect.)"""

    def _fallback(self, error: str) -> dict[str, str] | None:
        """The configuration to compile again with after the plugin's compiler raised
        ``error``, or None to refuse the graph. The CPU plugin's snippets (JIT fusion of
        elementwise chains) can fail to allocate registers on a long chain (a legalized erf
        with its f16 roundings: 34 steps); such a graph compiles with snippets off: every op
        its own kernel, the same per-op results. So does one their tokenizer rejects
        (``[TokenizeSnippets] ... Topological order is required``: OpenVINO 2026.4 on a
        BERT-class encoder's graph). The blob loads with the usual options."""
        if self._device == "CPU" and any(m in error for m in _SNIPPET_FAILURES):
            return {**self._config, "SNIPPETS_MODE": "DISABLE"}
        return None

    # -- artifacts -----------------------------------------------------------------------------

    def compile(self, source: ArtifactSource) -> bytes:
        self._usable()
        tool = f"OpenVINO {ov.get_version()} ({self._device})"
        lowered, self._lowered = self._lowered, None
        if lowered is not None and lowered[0] is source.data:
            model = lowered[1]  # the model this IR was serialized from, the same graph
        else:
            xml, weights = unframe_ir(source.data)
            try:
                model = intel_graph.deserialize(xml, weights)
            except RuntimeError as err:
                raise CompileFailed(tool, str(err), "the IR") from None
        self._prepare(model)
        try:
            try:
                compiled = self._core.compile_model(model, self._device, self._config)
            except RuntimeError as err:
                config = self._fallback(str(err))
                if config is None:
                    raise
                compiled = self._core.compile_model(model, self._device, config)
            blob = bytes(compiled.export_model().getvalue())
        except RuntimeError as err:
            raise CompileFailed(tool, str(err), f"graph {model.get_friendly_name()!r}") from None
        self._exported = (blob, compiled)
        return blob

    def load(self, blob: bytes) -> Artifact:
        self._usable()
        exported, self._exported = self._exported, None
        self._lowered = None  # a cached blob's source: its model is not compiled, not kept
        if exported is not None and exported[0] == blob:
            compiled = exported[1]  # the model this blob was exported from, the same bits
        else:
            try:
                compiled = self._core.import_model(blob, self._device, self._config)
            except RuntimeError as err:
                raise BlobRefused(self._name, str(err)) from None
        entries, guard = split_guard(compiled)
        sig = port_signature(entries, self._name)
        try:
            request = compiled.create_infer_request()
        except RuntimeError as err:
            raise BlobRefused(self._name, f"no infer request: {err}") from None
        artifact = Artifact(next_id(), sig)
        self._loaded[artifact.id] = _Loaded(artifact, compiled, request, len(sig.inputs), guard)
        return artifact

    def compiled_model(self, artifact: Artifact) -> Any:
        """The ``ov.CompiledModel`` behind a loaded artifact (for diagnostics and benchmarks)."""
        loaded = self._loaded.get(artifact.id)
        if loaded is None or loaded.artifact != artifact:
            raise DispatchRefused(f"{self._name}: artifact {artifact.id} is not loaded here")
        return loaded.compiled

    def unload(self, artifact: Artifact) -> None:
        self._usable()
        self._buffers.epoch += 1  # a bound step of this artifact is stale
        self._loaded.pop(artifact.id, None)

    @property
    def identity(self) -> DeviceIdentity:
        return self._identity

    _identity: DeviceIdentity

    # -- running -------------------------------------------------------------------------------

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._usable()
        loaded = self._loaded.get(artifact.id)
        if loaded is None or loaded.buffers is not buffers or loaded.generation != self._gen:
            loaded = self._bind(artifact, buffers)
        self._run(loaded, deadline_s, single_wait_ms(deadline_s))

    def _run(self, loaded: _Loaded, deadline_s: float, ms: int | None) -> None:
        """One run of a bound request under ``deadline_s``, then its guard. ``ms`` is
        ``single_wait_ms(deadline_s)``, which a bound step works out once per deadline."""
        req = loaded.request
        try:
            req.start_async()
            if ms is not None:
                done = req.wait_for(ms)
            else:
                done = any(req.wait_for(ms) for ms in wait_slices_ms(deadline_s))
        except RuntimeError as err:
            raise DeviceFailed(
                f"{self._name}: the run of artifact {loaded.artifact.id} failed: {err}"
            ) from None
        if not done:
            memory = self._buffers.memory
            kept = tuple(memory[b.id] for b in loaded.buffers or ())
            self._failed.append((loaded, kept))
            raise self._life.missed(
                deadline_s, f"{self._name} run of artifact {loaded.artifact.id}"
            )
        self.runs += 1
        # The run wrote its outputs; a set flag commits nothing. ``flags`` is bound with the
        # buffers when the graph has a guard; any flag set is argmax (cheaper than ``any`` here).
        flags = loaded.flags
        if flags is not None and flags.item(flags.argmax()):
            _check_guard(loaded, self._name)

    def bind_step(self, commands: StepCommands) -> BoundStep:
        """``poot_engine.steps``: a step of one dispatch is bound whole (``_OpenVinoStep``: the
        command checked and the request's tensors set once); anything else gets ``HostStep``.
        A subclass that changes ``dispatch``, ``write``, ``read`` or ``copy`` returns
        ``ProtocolStep(self, commands)`` instead."""
        self._usable()
        if len(commands.dispatches) != 1:
            return super().bind_step(commands)
        artifact, buffers = commands.dispatches[0]
        return _OpenVinoStep(self, commands, self._bind(artifact, buffers))

    def _bind(self, artifact: Artifact, buffers: tuple[Buffer, ...]) -> _Loaded:
        """Check a dispatch's command (``check_dispatch``), then set a tensor over each buffer's
        own memory on the request's port, inputs and outputs alike: later writes into an input
        buffer are what the next run reads, and a run writes its results straight into the
        output buffers (no copy). Kept until another command, a free or an unload."""
        memory = self._buffers.memory
        loaded = check_dispatch(
            artifact, buffers, self._loaded, lambda e: e.artifact, memory, self._name
        )
        req, n_in = loaded.request, loaded.n_in
        tensors = tuple(_shared(memory[b.id], b.type) for b in buffers)
        try:
            for port, tensor in enumerate(tensors[:n_in]):
                req.set_input_tensor(port, tensor)
            for port, tensor in enumerate(tensors[n_in:]):
                req.set_output_tensor(port, tensor)
            if loaded.guard is not None and loaded.flags is None:
                # the guard's flags in host memory too: a step reads them without a tensor
                flags = np.zeros(len(loaded.guard[1]), np.bool_)
                req.set_output_tensor(loaded.guard[0], ov.Tensor(flags, shared_memory=True))
                loaded.flags = flags
        except RuntimeError as err:
            raise DeviceFailed(f"{self._name}: binding artifact {artifact.id}: {err}") from None
        loaded.buffers, loaded.generation, loaded.tensors = buffers, self._gen, tensors
        return loaded

    def free(self, buffer: Buffer) -> None:
        self._gen += 1  # a binding over a freed buffer is never reused
        super().free(buffer)

    def _release(self) -> None:
        for loaded, arrays in self._failed:
            if not _cancel(loaded.request):
                _abandoned.append((loaded, arrays))
        self._failed.clear()
        self._loaded.clear()


# -- helpers ------------------------------------------------------------------------------------


def split_guard(model: Any) -> tuple[tuple[intel_graph.ArgSignature, ...], Any]:
    """The ports of ``model`` but its guard result, and the guard's (output port, labels)."""
    entries = intel_graph.model_signature(model)
    for port, out in enumerate(model.outputs):
        labels = intel_guard.guard_labels({str(n) for n in out.get_names()})
        if labels is not None:
            drop = len(model.inputs) + port
            return entries[:drop] + entries[drop + 1 :], (port, labels)
    return entries, None


def _check_guard(loaded: _Loaded, device: str) -> None:
    """``NarrowingRangeIntermediate`` for the first flag the graph set (outputs are not yet
    copied, so nothing of the refused run reaches a buffer)."""
    assert loaded.guard is not None and loaded.flags is not None  # bound with the buffers
    outside: list[int] = []
    for label, flag in zip(loaded.guard[1], loaded.flags, strict=True):
        eqn, prim, check = label.split(".")
        if flag and check.startswith("domain"):  # a device-site domain guard (host device)
            outside.append(int(eqn))
        elif flag and check != "keep":  # a keep flag only gives a divisor a use
            raise NarrowingRangeIntermediate(int(eqn), prim, check, device)
    if outside:  # one graph, one "region"; the count is of guards set, not of elements
        raise DomainFlagged(0, len(outside), tuple(sorted(set(outside))))


class _OpenVinoStep(HostStep):
    """A recorded step of one dispatch, bound whole: the inputs written into the bound
    tensors' memory, one run of the request, the results copied out of the output buffers.
    The deadline's wait is worked out once per deadline, not per step."""

    __slots__ = ("_artifact", "_bound", "_buffers_bound", "_deadline", "_ms", "_ov")

    def __init__(self, device: OpenVinoDevice, commands: StepCommands, loaded: _Loaded) -> None:
        super().__init__(device, device._life, device._buffers, commands)
        self._ov, self._bound = device, loaded
        self._artifact, self._buffers_bound = commands.dispatches[0]
        self._deadline = math.nan  # unequal to every deadline: the first run works its wait out
        self._ms: int | None = None

    def loaded(self) -> bool:
        return self._ov._loaded.get(self._bound.artifact.id) is self._bound

    def run(
        self, inputs: Sequence[np.ndarray], deadline_s: float
    ) -> tuple[tuple[np.ndarray, ...], float]:
        dev, loaded = self._ov, self._bound
        if not self._life.usable:
            self._life.check()
        self.check()
        if loaded.buffers is not self._buffers_bound or loaded.generation != dev._gen:
            dev._bind(self._artifact, self._buffers_bound)  # another command ran since
        self.write_inputs(inputs)
        if deadline_s != self._deadline:
            self._deadline, self._ms = deadline_s, single_wait_ms(deadline_s)
        t0 = perf_counter()
        dev._run(loaded, deadline_s, self._ms)
        took = perf_counter() - t0
        return tuple([m.copy() for m in self._reads]), took


def port_signature(entries: tuple[intel_graph.ArgSignature, ...], device: str) -> Signature:
    """The engine's signature of a model's ports; ``SignatureMismatch`` for a port no poot type
    describes (an element type poot lacks, a dynamic shape)."""
    specs = []
    for e in entries:
        if not isinstance(e.dtype, DType) or not isinstance(e.shape, tuple):
            raise SignatureMismatch(
                f"{device}: the compiled graph's {e.direction} {e.name!r} has no poot type",
                "a poot dtype and a static shape",
                f"{e.dtype} {e.shape}",
            )
        specs.append(ArgSpec(e.name, Direction(e.direction), TensorType(e.shape, e.dtype)))
    return Signature(tuple(specs))


def _shared(mem: np.ndarray, type: TensorType) -> Any:
    """An ``ov.Tensor`` over ``mem``'s own memory (OpenVINO's numpy map has no bfloat16)."""
    if type.dtype is DType.BF16:
        return ov.Tensor(mem.view(np.uint16), list(mem.shape), ov.Type.bf16)
    return ov.Tensor(mem, shared_memory=True)


def _cancel(req: Any) -> bool:
    """Cancel a run that missed its deadline; whether it is over (its memory may be freed)."""
    try:
        req.cancel()
        return bool(req.wait_for(_CLOSE_GRACE_MS))
    except RuntimeError:  # a cancelled request's wait raises: it is over
        return True
