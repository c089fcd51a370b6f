"""The ``Device`` protocol: what the engine needs from a device, and the values it passes.

A device is a package boundary, not a base class: anything with these members is a device
(``CpuDevice`` here; ``XdnaDevice``, ``XdnaHostDevice`` and ``VpuDevice`` in poot_npu). The
engine owns everything above the runtime (planning, the blob cache, weights, recording and
replay, every host-side check, poisoning); a device only lowers, compiles, loads, holds buffers
and runs one dispatch under a deadline.

Handles (``Artifact``, ``Buffer``) are small frozen values a device issues and recognizes; the
memory and runtime objects behind them stay inside the device.

Every member is required; nothing is looked up with ``getattr``. What a device can do beyond the
protocol's calls is its ``traits`` (``DeviceTraits``, a frozen value). A device binds a whole
step once (``bind_step``, ``poot_engine.steps``): the engine hands it a recording's commands
(``StepCommands``) when it records, and every replay is then one ``BoundStep.run`` and one
``BoundStep.commit`` instead of a protocol call per command; a device with no faster binding
returns ``ProtocolStep(self, commands)``. ``use_cache`` hands it the engine's blob cache (for
files of its own) and ``report_progress`` a callback for a long compile; a device with no use
for either does nothing. The kit in ``poot_engine`` (``HostMemory``, ``HostBuffers``,
``HostStep``, ``Lifecycle``, ``DeadlineRunner``) gives a device all of these but its own
lowering, compiler and run; ``tests/test_null_device.py`` is the smallest device built from it.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import numpy as np
from poot_ir import DispatchRefused, Program, TensorType

if TYPE_CHECKING:
    from poot_planner import Plan

    from poot_engine.blob_cache import BlobCache

T = TypeVar("T")

__all__ = [
    "ArgSpec",
    "Artifact",
    "ArtifactSource",
    "BoundStep",
    "Buffer",
    "CompileProgress",
    "Device",
    "DeviceIdentity",
    "DeviceTraits",
    "Direction",
    "Signature",
    "StepCommands",
    "check_dispatch",
    "signature_of",
]

#: Called as ``(stage, done, total)`` while a long compile runs (``Device.report_progress``).
CompileProgress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class DeviceTraits:
    """What a device does beyond the protocol's calls, as one value the engine and ``poot
    run`` read (never by probing the device for attributes).

    ``checks_score_bound``: the device checks a plan's ``score_bound`` in its graph
    (``VpuDevice`` with its FP16 guard on; ``XdnaHostDevice`` and ``XdnaDevice``, whose kernels
    count a score past the F32 bound into the flag word). Only then may a partition make the
    attention-mask rewrite whose score bound it cannot prove (``poot_planner.fp16.prelude``),
    and only then does the engine load a plan that carries one; for every other device the
    mask keeps ``-inf``.

    ``bakes_weights``: the device compiles an entry's weights into its artifact as constants
    (``Device.lower_baked``; the Intel NPU compiler bakes weights into its blob): the engine
    then lowers each entry with the values of the weights bound to it, read back from their
    buffers, so the artifact source, and with it the blob-cache key, holds them."""

    checks_score_bound: bool = False
    bakes_weights: bool = False


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """Everything besides the artifact source that determines a compiled blob: the part, the
    compiler and its version, and the compiler options (sorted ``(name, value)`` pairs)."""

    part: str
    compiler: str
    compiler_version: str
    options: tuple[tuple[str, str], ...] = ()


class Direction(Enum):
    IN = "in"
    OUT = "out"


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One argument of a compiled artifact's ABI."""

    name: str
    direction: Direction
    type: TensorType

    def __str__(self) -> str:
        return f"{self.direction.value} {self.name}: {self.type}"


@dataclass(frozen=True, slots=True)
class Signature:
    """An artifact's arguments in ABI order: every input (the program's arguments in order),
    then every output (the program's outputs, then each state update, named by its state)."""

    args: tuple[ArgSpec, ...]

    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.direction is Direction.IN)

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.direction is Direction.OUT)

    def __str__(self) -> str:
        return "(" + ", ".join(str(a) for a in self.args) + ")"


def signature_of(program: Program) -> Signature:
    """The signature an artifact of ``program`` must have."""
    ins = tuple(ArgSpec(a.name, Direction.IN, a.var.type) for a in program.args)
    outs = tuple(ArgSpec(n, Direction.OUT, v.type) for n, v in program.results())
    return Signature(ins + outs)


@dataclass(frozen=True, slots=True)
class ArtifactSource:
    """What a device lowers a plan to: bytes that fully determine the compiled artifact (with
    the device identity, they are the cache key) and the signature the artifact will have."""

    data: bytes
    signature: Signature


@dataclass(frozen=True, slots=True)
class Artifact:
    """A loaded artifact. ``signature`` is what the device read back from the compiled blob
    (not what was asked for), so the engine can compare it with the program's."""

    id: int
    signature: Signature


@dataclass(frozen=True, slots=True)
class Buffer:
    """A device buffer of exactly one tensor type."""

    id: int
    type: TensorType


@dataclass(frozen=True, slots=True)
class StepCommands:
    """One recorded step's commands, in the order they run: the i-th input array of a step into
    ``writes[i]``; each ``(artifact, buffers)`` dispatch; each of ``reads`` back to a fresh host
    array; then, only when the engine commits, each ``(src, dst)`` of ``copies``."""

    writes: tuple[Buffer, ...]
    dispatches: tuple[tuple[Artifact, tuple[Buffer, ...]], ...]
    reads: tuple[Buffer, ...]
    copies: tuple[tuple[Buffer, Buffer], ...]


class BoundStep(Protocol):
    """A recorded step bound once to its device (``poot_engine.steps``)."""

    def run(
        self, inputs: Sequence[np.ndarray], deadline_s: float
    ) -> tuple[tuple[np.ndarray, ...], float]:
        """Write ``inputs`` (already checked: exactly their buffers' types), run every
        dispatch under ``deadline_s`` and read every result: the results in ``reads`` order, as
        fresh arrays, and the seconds spent in dispatches. Raises as ``Device.dispatch``
        does, with no state changed."""
        ...

    def commit(self) -> None:
        """The copies: each state update into its state buffer, for the next step."""
        ...


@runtime_checkable
class Device(Protocol):
    """A device the engine can drive. Every method of a closed device, and every method but
    ``close`` of a device that missed a deadline (``DevicePoisoned``), raises."""

    @property
    def target(self) -> str:
        """The planner target this device runs: ``"cpu"``, ``"xdna2"``, ``"intel-npu4"``."""
        ...

    @property
    def identity(self) -> DeviceIdentity: ...

    @property
    def traits(self) -> DeviceTraits:
        """What the device does beyond the protocol's calls (``DeviceTraits``)."""
        ...

    def use_cache(self, cache: BlobCache) -> None:
        """The engine's blob cache, handed over when an ``Engine`` takes the device: a device
        that keeps files of its own (xdna-host's kernel libraries) keeps them there."""
        ...

    def report_progress(self, progress: CompileProgress | None) -> None:
        """Call ``progress`` while a long compile runs (XDNA2's link step; None: silent)."""
        ...

    def lower(self, plan: Plan) -> ArtifactSource:
        """The artifact source of a checked plan (codegen; no compiler runs)."""
        ...

    def lower_baked(self, plan: Plan, weights: Mapping[str, np.ndarray]) -> ArtifactSource:
        """``lower``, with the values of the plan's weight arguments (by name) compiled in as
        constants; the artifact keeps every argument of its signature (a baked weight's is
        bound and unread). The engine calls it only when ``traits.bakes_weights``; a device
        that does not bake lowers as ``lower`` does."""
        ...

    def compile(self, source: ArtifactSource) -> bytes:
        """Run the compiler: the blob. ``CompileFailed`` carries the compiler's log."""
        ...

    def load(self, blob: bytes) -> Artifact:
        """Load a blob, compiled here or read from the cache. ``BlobRefused`` when the runtime
        will not take it (the engine then recompiles)."""
        ...

    def unload(self, artifact: Artifact) -> None: ...

    def allocate(self, type: TensorType) -> Buffer:
        """A buffer of ``type``, zero-filled."""
        ...

    def free(self, buffer: Buffer) -> None: ...

    def write(self, buffer: Buffer, data: np.ndarray) -> None:
        """Copy host ``data`` (exactly the buffer's dtype and shape) into ``buffer``."""
        ...

    def read(self, buffer: Buffer) -> np.ndarray:
        """A fresh host copy of ``buffer``."""
        ...

    def copy(self, src: Buffer, dst: Buffer) -> None:
        """Copy one buffer into another of the same type, on the device."""
        ...

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        """Run ``artifact`` once over ``buffers`` (its signature's order). A command that is not
        the artifact's ABI is ``DispatchRefused`` before the runtime is touched; a run that
        misses ``deadline_s`` is ``DeadlineExceeded`` and poisons the device."""
        ...

    def bind_step(self, commands: StepCommands) -> BoundStep:
        """``commands`` bound once (``poot_engine.steps``): each replay the same effects as
        the commands' protocol calls. A device, or a wrapper, that changes what ``write``,
        ``read``, ``copy`` or ``dispatch`` do returns ``ProtocolStep(self, commands)``, which
        makes those calls; a faster binding skips them."""
        ...

    def close(self) -> None:
        """Release everything, the buffers of a failed run included. Idempotent."""
        ...


def check_dispatch(
    artifact: Artifact,
    buffers: tuple[Buffer, ...],
    loaded: Mapping[int, T],
    artifact_of: Callable[[T], Artifact],
    live: Container[int],
    device: str,
) -> T:
    """The dispatch refusals that need no hardware, shared by every device; returns the
    device's own record of ``artifact`` from ``loaded`` (by artifact id; ``artifact_of`` reads
    the artifact back from a record). ``live`` holds the ids of its allocated buffers. Refused:
    an artifact this device did not load (another device's, a removed entry's), a buffer it did
    not allocate or freed, and buffers that are not the artifact's ABI (count, dtype, extents)."""
    record = loaded.get(artifact.id)
    if record is None or artifact_of(record) != artifact:
        raise DispatchRefused(f"{device}: artifact {artifact.id} is not loaded on this device")
    specs = artifact.signature.args
    if len(buffers) != len(specs):
        raise DispatchRefused(
            f"{device}: artifact {artifact.id} takes {len(specs)} buffers, got {len(buffers)}"
        )
    for spec, buf in zip(specs, buffers, strict=True):
        if buf.id not in live:
            raise DispatchRefused(f"{device}: buffer {buf.id} is not allocated on this device")
        if buf.type != spec.type:
            raise DispatchRefused(
                f"{device}: buffer {buf.id} of type {buf.type} is not the artifact's "
                f"{spec} (argument {spec.name!r})"
            )
    return record
