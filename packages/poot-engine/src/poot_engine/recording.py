"""Recordings: the commands one step runs, built on the first step and replayed after.

A recording of an entry is, in order:

1. ``Write``: each slot's host array into its buffer (the same buffers every step);
2. ``Dispatch``: one per region or graph (one for a CpuDevice or an Intel graph), over the
   artifact's buffers in ABI order; weights are bound buffers that no command writes;
3. ``Read``: every result (outputs, then state updates) back to a fresh host array;
4. ``Copy``: each state update into its state buffer, for the next step.

The copies are the commit: they run only after the results are read and checked, so a step that
fails (a result out of range, a missed deadline, a failed run) leaves every state as it was.
A replay runs the commands as the device bound them once (``step_commands``, then
``poot_engine.steps``), not one by one.

What to range-check on a narrowing target is derived from the commands, once, when recording:
an F32 argument a dispatch reads is checked as a host input before each replay when a ``Write``
fills it; when an earlier command of the same recording writes it instead (a state filled by the
previous replay's ``Copy``), it is checked as that command's result, which is a ``Read`` checked
after the replay, and not again. A weight no command fills was checked once, at upload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from poot_ir import DispatchRefused, DType

from poot_engine.device import Artifact, Buffer, Direction, StepCommands

__all__ = ["Command", "Copy", "Dispatch", "Read", "Recording", "Write", "record"]


@dataclass(frozen=True, slots=True)
class Write:
    """Copy the step's host array for slot ``argument`` into ``buffer``."""

    argument: str
    buffer: Buffer


@dataclass(frozen=True, slots=True)
class Dispatch:
    artifact: Artifact
    buffers: tuple[Buffer, ...]


@dataclass(frozen=True, slots=True)
class Read:
    """Copy ``buffer`` back to the host as the step's result ``result``."""

    result: str
    buffer: Buffer


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy the update of ``state`` into the state's buffer (device to device)."""

    state: str
    src: Buffer
    dst: Buffer


Command = Write | Dispatch | Read | Copy


@dataclass(frozen=True, slots=True)
class Recording:
    """``run`` then, once the results are read and checked, ``commit`` (the copies). Both are
    split and checked once, by ``record``, so a replay only walks them."""

    run: tuple[Write | Dispatch | Read, ...]
    commit: tuple[Copy, ...]
    input_checks: tuple[str, ...]  # F32 slots, range-checked on the host before each replay
    result_checks: tuple[str, ...]  # F32 results, range-checked on the host after each replay

    @property
    def commands(self) -> tuple[Command, ...]:
        return (*self.run, *self.commit)

    def step_commands(self) -> StepCommands:
        """The commands as a device binds them (``Device.bind_step``, ``poot_engine.steps``)."""
        return StepCommands(
            tuple(c.buffer for c in self.run if isinstance(c, Write)),
            tuple((c.artifact, c.buffers) for c in self.run if isinstance(c, Dispatch)),
            tuple(c.buffer for c in self.run if isinstance(c, Read)),
            tuple((c.src, c.dst) for c in self.commit),
        )

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """Every buffer the recording touches (kept alive after a missed deadline)."""
        seen: dict[int, Buffer] = {}
        for cmd in self.commands:
            match cmd:
                case Write(buffer=b) | Read(buffer=b):
                    seen[b.id] = b
                case Dispatch(buffers=bs):
                    seen.update((b.id, b) for b in bs)
                case Copy(src=s, dst=d):
                    seen[s.id], seen[d.id] = s, d
        return tuple(seen.values())


def record(
    artifact: Artifact,
    buffers: Mapping[str, Buffer],
    outputs: Mapping[str, Buffer],
    slots: tuple[str, ...],
    updates: tuple[str, ...],
) -> Recording:
    """The recording of one entry with one artifact. ``buffers`` maps every input argument
    (weights, slots, states) and ``outputs`` every result to its buffer. Refuses
    (``DispatchRefused``) a buffer that is not the artifact's ABI, before anything runs."""
    args = []
    for spec in artifact.signature.args:
        table = buffers if spec.direction is Direction.IN else outputs
        buf = table.get(spec.name)
        if buf is None or buf.type != spec.type:
            raise DispatchRefused(f"no buffer of the artifact's {spec} to bind")
        args.append(buf)
    writes: list[Write | Dispatch | Read] = [Write(name, buffers[name]) for name in slots]
    reads = [Read(spec.name, outputs[spec.name]) for spec in artifact.signature.outputs]
    copies = tuple(Copy(s, outputs[s], buffers[s]) for s in updates)
    run = (*writes, Dispatch(artifact, tuple(args)), *reads)
    inputs, results = _derive_checks((*run, *copies))
    return Recording(run, copies, inputs, results)


def _derive_checks(commands: tuple[Command, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    host_written = {c.buffer.id: c.argument for c in commands if isinstance(c, Write)}
    read = {c.buffer.id: c.result for c in commands if isinstance(c, Read)}
    inputs: list[str] = []
    for cmd in commands:
        if not isinstance(cmd, Dispatch):
            continue
        for spec, buf in zip(cmd.artifact.signature.args, cmd.buffers, strict=True):
            if spec.direction is Direction.IN and spec.type.dtype is DType.F32:
                name = host_written.get(buf.id)
                if name is not None and name not in inputs:
                    inputs.append(name)
    for cmd in commands:
        # A copied value must have been read (and so checked) first, or it is never seen.
        if isinstance(cmd, Copy) and cmd.src.id not in read:
            raise DispatchRefused(f"state {cmd.state!r} is copied from a buffer never read")
    results = [
        c.result for c in commands if isinstance(c, Read) and c.buffer.type.dtype is DType.F32
    ]
    return tuple(inputs), tuple(results)
