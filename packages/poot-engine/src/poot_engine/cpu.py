"""``CpuDevice``: runs programs on the numpy oracle. The hardware-free default, always present.

Its artifact source is the planned program in the text format (which round-trips exactly), its
"compiler" copies that text into the blob and ``load`` parses it back, so everything above the
runtime (the blob cache, recording and replay, every check, deadlines) runs here as it does on
an NPU. A dispatch runs the oracle on the caller's thread and checks its deadline when it
returns (``poot_engine.deadline``: the oracle cannot hang, so no worker thread is needed).
With ``target="intel-npu4"`` it evaluates the narrowed program the planner produces for that
target: an ideal FP16 device, as the oracle rounds F16 after every primitive.

A dispatch's command is checked once and its program bound to its buffers' memory
(``_bind_run``: ``poot_ir.oracle.bind_evaluation``); a replay of the same command runs the bound
program. A recorded step is bound whole (``bind_step``, ``poot_engine.steps``): a replay writes
the inputs, runs the bound program, checks the deadline and returns the oracle's own fresh
results without a protocol call; the commit copies each state update from those results (the
output buffers, which only the commit would read, are written by ``dispatch`` but not by a
bound step). A subclass changes the run by overriding ``_bind_run`` (both paths call it); one
that changes ``dispatch``, ``write``, ``read`` or ``copy`` overrides ``bind_step`` to return
``ProtocolStep(self, commands)`` (the whole-step binding makes none of those calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from time import perf_counter
from typing import TYPE_CHECKING

import numpy as np
from poot_ir import (
    BlobRefused,
    DeadlineExceeded,
    IRError,
    Program,
    format_program,
    parse_program,
)
from poot_ir.oracle import bind_evaluation

from poot_engine.device import (
    Artifact,
    ArtifactSource,
    BoundStep,
    Buffer,
    DeviceIdentity,
    StepCommands,
    check_dispatch,
    signature_of,
)
from poot_engine.host_buffers import HostMemory, HostStep, next_id

if TYPE_CHECKING:
    from poot_planner import Plan

__all__ = ["CpuDevice"]

#: A program bound to its arguments' memory: each call its results in ``result_names`` order.
BoundRun = Callable[[], tuple[np.ndarray, ...]]


@dataclass(frozen=True, slots=True)
class _Bound:
    """A checked dispatch command: its buffers, the program, the program bound to its input
    buffers' memory (``run``) and each result's output buffer memory, in ``result_names``
    order."""

    buffers: tuple[Buffer, ...]
    program: Program
    run: BoundRun
    outputs: tuple[np.ndarray, ...]


class CpuDevice(HostMemory):
    """The oracle as a device. ``runs`` counts completed dispatches (tests count with it)."""

    def __init__(self, target: str = "cpu") -> None:
        super().__init__(f"CpuDevice({target})")
        self._target = target
        self._artifacts: dict[int, tuple[Artifact, Program, tuple[str, ...]]] = {}
        self._bound: dict[int, _Bound] = {}
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
        names = tuple(a.name for a in artifact.signature.args)
        self._artifacts[artifact.id] = (artifact, program, names)
        return artifact

    def unload(self, artifact: Artifact) -> None:
        self._usable()
        self._bound.clear()
        self._buffers.epoch += 1  # a bound step of this artifact is stale
        self._artifacts.pop(artifact.id, None)

    def dispatch(self, artifact: Artifact, buffers: tuple[Buffer, ...], deadline_s: float) -> None:
        self._usable()
        bound = self._bound.get(artifact.id)
        if bound is None or bound.buffers is not buffers:
            bound = self._bind(artifact, buffers)
        self._timed_run(artifact, bound, deadline_s)

    def _timed_run(self, artifact: Artifact, bound: _Bound, deadline_s: float) -> None:
        """Run a bound command and check its deadline, then write its output buffers."""
        t0 = perf_counter()
        results = bound.run()
        if perf_counter() - t0 > deadline_s:  # poot_engine.deadline: checked after the run
            # the results are dropped, so no output buffer changes, and the device is poisoned
            # as a timeout would poison it
            raise self._missed_deadline(artifact, deadline_s)
        for out, value in zip(bound.outputs, results, strict=True):
            out[...] = value  # the oracle's results are exactly the outputs' types
        self.runs += 1

    def bind_step(self, commands: StepCommands) -> BoundStep:
        """``poot_engine.steps``: a step of one dispatch whose results are every read and every
        copy's source is bound whole (``_CpuStep``); anything else gets ``HostStep``."""
        self._usable()
        if len(commands.dispatches) == 1:
            artifact, buffers = commands.dispatches[0]
            bound = self._bind(artifact, buffers)
            outputs = buffers[len(buffers) - len(bound.outputs) :]
            outs = {b.id: i for i, b in enumerate(outputs)}  # by position in the results
            sources = [b for b in commands.reads] + [s for s, _ in commands.copies]
            if all(b.id in outs for b in sources):
                return _CpuStep(self, commands, artifact, bound, outs)
        return super().bind_step(commands)

    def _missed_deadline(self, artifact: Artifact, deadline_s: float) -> DeadlineExceeded:
        """A run took longer than its deadline: the device is poisoned (``Lifecycle``)."""
        return self._life.missed(deadline_s, f"{self._name} dispatch of artifact {artifact.id}")

    def _bind(self, artifact: Artifact, buffers: tuple[Buffer, ...]) -> _Bound:
        """Check a dispatch's command (``check_dispatch``) and keep what it binds: the replay
        of a recording passes the same buffers every step, so later dispatches skip the check
        until a buffer is freed or an artifact unloaded (which drops every binding)."""
        memory = self._buffers.memory
        _, program, names = check_dispatch(
            artifact, buffers, self._artifacts, lambda e: e[0], memory, self._name
        )
        n_in = len(program.args)
        inputs = {n: memory[b.id] for n, b in zip(names[:n_in], buffers[:n_in], strict=True)}
        outputs = tuple(memory[b.id] for b in buffers[n_in:])
        bound = _Bound(buffers, program, self._bind_run(program, inputs), outputs)
        self._bound[artifact.id] = bound
        return bound

    def _bind_run(self, program: Program, inputs: dict[str, np.ndarray]) -> BoundRun:
        """The device's own run of ``program`` over ``inputs`` (its input buffers' memory, read
        at each call): the oracle, bound once. Tests slow it down or change its results here."""
        return bind_evaluation(program, inputs)

    def free(self, buffer: Buffer) -> None:
        self._bound.clear()
        super().free(buffer)

    def _release(self) -> None:
        self._bound.clear()
        self._artifacts.clear()


class _CpuStep(HostStep):
    """A recorded step of one dispatch, bound whole: the program bound to its buffers' memory
    once (``_Bound.run``), so a replay writes the inputs, runs it and checks the deadline. The
    results a step reads are the oracle's own fresh arrays, in ``reads`` order; the commit
    copies each state update from them into its state buffer. The output buffers are not
    written: only the commit would read them, and it reads the results themselves (a dispatch
    outside the step, ``CpuDevice.dispatch``, writes them as ever)."""

    __slots__ = ("_artifact", "_commits", "_cpu", "_evaluate", "_last", "_picks")

    def __init__(
        self,
        device: CpuDevice,
        commands: StepCommands,
        artifact: Artifact,
        bound: _Bound,
        outputs: dict[int, int],
    ) -> None:
        super().__init__(device, device._life, device._buffers, commands)
        self._cpu, self._artifact = device, artifact
        self._evaluate = bound.run
        picks = tuple(outputs[b.id] for b in commands.reads)
        # None: the reads are every result in order, returned as the run returns them
        self._picks = None if picks == tuple(range(len(outputs))) else picks
        self._commits = tuple(
            (outputs[s.id], dst)
            for (s, _), (_, dst) in zip(commands.copies, self._copies, strict=True)
        )
        self._last: tuple[np.ndarray, ...] = ()

    def loaded(self) -> bool:
        record = self._cpu._artifacts.get(self._artifact.id)
        return record is not None and record[0] == self._artifact

    def run(
        self, inputs: Sequence[np.ndarray], deadline_s: float
    ) -> tuple[tuple[np.ndarray, ...], float]:
        cpu = self._cpu
        if not self._life.usable:
            self._life.check()
        self.check()
        self.write_inputs(inputs)
        t0 = perf_counter()
        results = self._evaluate()
        took = perf_counter() - t0
        if took > deadline_s:  # as ``_timed_run``: nothing is kept of a late run
            raise cpu._missed_deadline(self._artifact, deadline_s)
        cpu.runs += 1
        self._last = results
        if self._picks is None:
            return results, took
        return tuple([results[i] for i in self._picks]), took

    def commit(self) -> None:
        last = self._last
        for i, dst in self._commits:  # checked at binding: the same dtype and shape
            dst[...] = last[i]
        self._last = ()
