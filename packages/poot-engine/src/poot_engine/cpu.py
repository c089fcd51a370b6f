"""``CpuDevice``: runs programs on the numpy oracle. The hardware-free default, always present.

Its artifact source is the planned program in the text format (which round-trips exactly), its
"compiler" copies that text into the blob and ``load`` parses it back, so everything above the
runtime (the blob cache, recording and replay, every check, deadlines) runs here as it does on
an NPU. With ``target="intel-npu4"`` it evaluates the narrowed program the planner produces for
that target: an ideal FP16 device, as the oracle rounds F16 after every primitive.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING

import numpy as np
from poot_ir import (
    BlobRefused,
    DeviceFailed,
    DevicePoisoned,
    IRError,
    Program,
    evaluate,
    format_program,
    parse_program,
)

from poot_engine.deadline import DeadlineRunner
from poot_engine.device import (
    Artifact,
    ArtifactSource,
    Buffer,
    DeviceIdentity,
    check_dispatch,
    signature_of,
)
from poot_engine.host_buffers import HostBuffers, HostMemory, next_id

if TYPE_CHECKING:
    from poot_planner import Plan

__all__ = ["CpuDevice"]


class CpuDevice(HostMemory):
    """The oracle as a device. ``runs`` counts completed dispatches (tests count with it)."""

    def __init__(self, target: str = "cpu") -> None:
        self._target = target
        self._name = f"CpuDevice({target})"
        self._artifacts: dict[int, tuple[Artifact, Program]] = {}
        self._buffers = HostBuffers(self._name)
        self._runner = DeadlineRunner(f"poot {self._name} dispatch")
        self._closed = False
        self.runs = 0

    @property
    def target(self) -> str:
        return self._target

    @property
    def identity(self) -> DeviceIdentity:
        return DeviceIdentity(
            part="cpu (numpy oracle)",
            compiler="poot-ir text format",
            compiler_version=metadata.version("poot-ir"),
            options=(("target", self._target),),
        )

    def lower(self, plan: Plan) -> ArtifactSource:
        self._usable()
        return ArtifactSource(
            format_program(plan.program).encode("utf-8"), signature_of(plan.program)
        )

    def compile(self, source: ArtifactSource) -> bytes:
        self._usable()
        return source.data

    def load(self, blob: bytes) -> Artifact:
        self._usable()
        try:
            program = parse_program(blob.decode("utf-8"))
        except (UnicodeDecodeError, IRError) as err:
            raise BlobRefused(self._name, f"not a program: {err}") from None
        artifact = Artifact(next_id(), signature_of(program))
        self._artifacts[artifact.id] = (artifact, program)
        return artifact

    def unload(self, artifact: Artifact) -> None:
        self._usable()
        self._artifacts.pop(artifact.id, None)

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._usable()
        entry = check_dispatch(
            artifact, buffers, self._artifacts, lambda e: e[0], self._buffers.memory, self._name
        )
        program = entry[1]
        n_in = len(program.args)
        inputs = {
            spec.name: self._buffers.memory[b.id]
            for spec, b in zip(artifact.signature.args[:n_in], buffers[:n_in], strict=True)
        }
        results = self._runner.run(lambda: self._run(program, inputs), deadline_s, "dispatch")
        for spec, b in zip(artifact.signature.args[n_in:], buffers[n_in:], strict=True):
            np.copyto(self._buffers.memory[b.id], results[spec.name], casting="no")
        self.runs += 1

    def _run(self, program: Program, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The device's own run (in the worker thread): the oracle. Tests slow it down here."""
        return evaluate(program, inputs)

    def close(self) -> None:
        # A run that missed its deadline may still be reading its buffers: they are dropped
        # here, with the device, and the abandoned worker exits when its call returns.
        self._closed = True
        self._runner.close()
        self._artifacts.clear()
        self._buffers.clear()

    def _usable(self) -> None:
        if self._closed:
            raise DeviceFailed(f"{self._name} is closed")
        if self._runner.missed:
            raise DevicePoisoned(f"{self._name}: a dispatch missed its deadline; close the device")
