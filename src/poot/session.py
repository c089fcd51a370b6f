"""``InferenceSession``: an ONNX model on a poot device, used the way ONNX Runtime's session is.

::

    import poot as ort                                  # was: import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx")           # device="cpu" (the oracle) by default
    sess = poot.InferenceSession("model.onnx", device="vpu-cpu", shapes={"batch": 4})
    sess = poot.InferenceSession("vad.onnx", constants={"sr": np.array(16000)})  # fixed inputs
    sess.get_inputs()[0].name, .shape, .type            # "x", (4, 3, 32, 32), "tensor(float)"
    (y,) = sess.run(None, {"x": x})                     # or run(["y"], {...})
    print(sess.plan)                                    # what runs where, and its numerics

Making a session imports the model (``poot_onnx.import_model``, ``shapes=`` fixing its dynamic
dims, ``constants=`` binding inputs that are fixed for the model's life, such as Silero VAD's
sample rate, which picks a branch of an ``If``; a feed of one must repeat its bound value),
plans it once for the device's target with its weights known (as ``poot plan`` and
``poot run`` plan it: a weight the device cannot hold is refused when planning, and a partition
keeps it on the host), uploads its weights once and adds one entry: partitioned where the
target refuses (``partition=True``, the refused spans run on the compiled
host device where host-cpu admits them, else, or with ``host="oracle"``, on the host oracle;
``Engine.add_partitioned``), whole otherwise. The first ``run`` records the step and
every later one replays it (``poot_engine.Engine``). ``verify`` is the engine's
(``"off"``, ``"always"`` or a fraction of steps compared with the oracle under the plan's
derived contract, ``ContractViolation`` on a breach).

``run`` takes ONNX names and ONNX dtypes: each feed must be a numpy array of the input's
element type and the session's shape; an int64 input is carried as poot's I32 after checking
every element fits. A missing, extra, mistyped, misshapen or out-of-range feed raises
``StepInputError`` naming the input (and the element), before anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from poot_engine import Engine, HostSpans
from poot_engine.run import host_only_weights
from poot_engine.verify import VerifyMode
from poot_ir import Program, StepInputError, Storage
from poot_ir.dtypes import DType
from poot_ir.errors import InputError, UnsupportedOnnx
from poot_npu.registry import device_info, host_device, make_device
from poot_onnx import Imported, import_model
from poot_planner import Plan, Span, plan
from poot_planner.partition import summarize

__all__ = ["InferenceSession", "NodeArg", "SessionPlan"]

#: ONNX's spelling of each poot dtype (``NodeArg.type``); an int64 value is carried as I32.
_ONNX_TYPES = {
    DType.F32: "tensor(float)",
    DType.F16: "tensor(float16)",
    DType.BF16: "tensor(bfloat16)",
    DType.I32: "tensor(int32)",
    DType.BOOL: "tensor(bool)",
}
_INT64 = "tensor(int64)"
_I32 = np.iinfo(np.int32)
#: The spans a printed plan lists one by one (the rest are counted).
SHOWN = 12


@dataclass(frozen=True, slots=True)
class NodeArg:
    """An input or output of the session, as ONNX Runtime's ``NodeArg``: its ONNX name, the
    shape the session was made for, and its type as ONNX spells it (``"tensor(float)"``)."""

    name: str
    shape: tuple[int, ...]
    type: str

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype a feed of it must have."""
        if self.type == _INT64:
            return np.dtype(np.int64)
        (d,) = [d for d, t in _ONNX_TYPES.items() if t == self.type]
        return np.dtype(d.numpy)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """What a session runs where: the device and its target, the program's size, and whether
    the target admitted it whole or which spans run on the device and which on the host (the
    compiled host device or the oracle), and why. ``str()`` is the summary a user prints."""

    model: str
    device: str
    plan: Plan
    spans: tuple[Span, ...]
    origins: Mapping[int, str]
    #: ``hosts[k]``: the host-device plan span ``k`` runs by (``PartitionedEntry.hosts``), None
    #: for a device span or one on the oracle
    hosts: tuple[Plan | None, ...] = ()

    @property
    def whole(self) -> bool:
        """The target admitted the whole program (no host span)."""
        return self.plan.admitted

    def __str__(self) -> str:
        p = self.plan
        lines = [
            f"model {self.model!r} on {self.device} (target {p.target.name}): "
            f"{len(p.source.eqns)} equations, "
            + ("admitted whole" if p.admitted else f"partitioned ({len(p.refusals)} refusals)"),
            f"numerics: {p.numerics!r}",
        ]
        if not p.admitted:
            lines.append(f"partition: {summarize(self.spans, p.target).describe()}")
            shown = self.spans[:SHOWN]
            for k, s in enumerate(shown):
                hosted = k < len(self.hosts) and self.hosts[k] is not None
                where = "device" if s.device else "host device" if hosted else "host oracle"
                lines.append(f"  {where}: equations {s.first}..{s.last} ({len(s.eqns)})")
            if len(self.spans) > len(shown):
                lines.append(f"  ... and {len(self.spans) - len(shown)} more spans")
            # one line per kind of refusal, with how many and the ONNX nodes they came from
            kinds: dict[tuple[str, str], list[int]] = {}
            for r in p.refusals:
                if r.eqn < 0:  # the program's, not an equation's (a context limit): as it reads
                    lines.append(f"  refused: {r}")
                    continue
                kinds.setdefault((r.primitive, r.kind.name), []).append(r.eqn)
            for (prim, kind), eqns in kinds.items():
                nodes = [n for n in dict.fromkeys(self.origins.get(k, "") for k in eqns) if n]
                more = f", ... ({len(nodes)} nodes)" if len(nodes) > 3 else ""
                lines.append(
                    f"  refused: {prim} {kind} x{len(eqns)}"
                    + (f" from {', '.join(nodes[:3])}{more}" if nodes else "")
                )
        return "\n".join(lines)


class InferenceSession:
    """An ONNX model on a poot device (see the module). ``path_or_model`` is a path, an
    ``onnx.ModelProto`` or the model's bytes; ``providers`` is accepted and ignored, so that an
    ONNX Runtime call runs unchanged (the device is ``device``). Raises ``UnsupportedOnnx``
    for a model poot cannot import, ``DeviceUnavailable`` for a device not here, and what
    ``Engine.load_weights`` and ``Engine.add_partitioned`` raise (``PlanRefused`` with
    ``partition=False``, a weight the device cannot hold among its refusals)."""

    def __init__(
        self,
        path_or_model: Any,
        sess_options: None = None,
        providers: Sequence[Any] | None = None,
        *,
        device: str = "cpu",
        shapes: Mapping[str, Sequence[int] | int] | None = None,
        constants: Mapping[str, Any] | None = None,
        verify: VerifyMode = "off",
        partition: bool = True,
        cache_dir: Path | str | None = None,
        host: HostSpans = "compiled",
    ) -> None:
        if sess_options is not None:
            raise InputError(
                "sess_options", "poot has no SessionOptions: pass device=, shapes=, verify="
            )
        del providers  # the device is chosen by device=
        self._imported = import_model(_model(path_or_model), shapes=shapes, constants=constants)
        # a bound input is a constant of the program now; a feed of it must repeat its value,
        # as the model declares it (its ONNX element type)
        self._bound = self._imported.bound
        program = self._imported.program
        hosting = host_device(device_info(device).target, host) if partition else None
        try:
            self._device = make_device(device)
        except BaseException:
            if hosting is not None:
                hosting.close()
            raise
        try:
            self._engine = Engine(self._device, cache_dir=cache_dir, verify=verify, host=hosting)
        except BaseException:
            self._device.close()
            if hosting is not None:
                hosting.close()
            raise
        try:
            known = self._imported.weights
            planned = plan(program, self._device.target, constants=known)
            # a weight the plan refused for its value is read by the host spans alone (and
            # without a partition, the plan's refusal is what stops the session, not the upload)
            weights = self._engine.load_weights(known, host_only=host_only_weights(planned))
            add = self._engine.add_partitioned if partition else self._engine.add_entry
            self._entry = add(planned, weights)
        except BaseException:
            self._engine.close()  # and the device with it
            raise
        part = self._engine.partitioned(self._entry)
        # a refused plan only gets here partitioned (add_entry raised PlanRefused otherwise)
        spans, hosts = (part.spans, part.hosts) if part is not None else ((), ())
        origins = {k: self._imported.origin(k) for k in range(len(program.eqns))}
        self.plan = SessionPlan(program.name, device, planned, spans, origins, hosts)
        self._inputs = _inputs(program, self._imported)
        self._outputs = _outputs(program, self._imported)
        self._closed = False

    # -- ONNX Runtime's surface ---------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, np.ndarray],
        run_options: None = None,
    ) -> list[np.ndarray]:
        """One step: the outputs named (all of them, in the model's order, for None), each an
        array of its ONNX dtype. Every feed is checked before anything runs (see the module)."""
        if run_options is not None:
            raise InputError("run_options", "poot has no RunOptions")
        if self._closed:
            raise StepInputError("the session is closed")
        names = self._output_names(output_names)
        feeds = self._feeds(input_feed)
        got = self._imported.results(self._engine.step(self._entry, feeds))
        return [got[n] for n in names]

    # -- poot's ------------------------------------------------------------------------------

    @property
    def program(self) -> Program:
        return self._imported.program

    @property
    def engine(self) -> Engine:
        """The engine (its ``stats()``: compiles, cache hits, steps)."""
        return self._engine

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.close()  # and the device with it

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checks --------------------------------------------------------------------------------

    def _output_names(self, given: Sequence[str] | None) -> list[str]:
        known = [o.name for o in self._outputs]
        if given is None:
            return known
        if isinstance(given, str) or not isinstance(given, Sequence):
            raise StepInputError(f"output_names must be a list of names or None, got {given!r}")
        for name in given:
            if name not in known:
                raise StepInputError(f"no output of the model is named so; it has {known}", name)
        return list(given)

    def _feeds(self, given: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not isinstance(given, Mapping):
            raise StepInputError(f"the feeds must map input names to arrays, got {given!r}")
        want = {a.name: a for a in self._inputs}
        for name in set(given) & set(self._bound):  # as an ONNX Runtime script still feeds it
            value, bound = given[name], self._bound[name]
            if not isinstance(value, np.ndarray):
                raise StepInputError(f"a Python {type(value).__name__}, not a numpy array", name)
            if value.dtype != bound.dtype:
                raise StepInputError(f"{value.dtype} given, the input is {bound.dtype}", name)
            if value.shape != bound.shape or not bool(np.all(value == bound)):
                raise StepInputError(
                    f"bound at import to {bound.tolist()!r}: another value needs another "
                    "session (constants=)",
                    name,
                )
        given = {k: v for k, v in given.items() if k not in self._bound}
        if extra := sorted(set(given) - set(want)):
            raise StepInputError(
                f"no input of the model is named so; it has {list(want)}", extra[0]
            )
        if missing := [n for n in want if n not in given]:
            raise StepInputError("missing from the feeds", missing[0])
        out: dict[str, np.ndarray] = {}
        for name, arg in want.items():
            value = given[name]
            if not isinstance(value, np.ndarray):
                raise StepInputError(f"a Python {type(value).__name__}, not a numpy array", name)
            if value.dtype != arg.dtype:
                raise StepInputError(f"{value.dtype} given, the input is {arg.type}", name)
            if tuple(value.shape) != arg.shape:
                raise StepInputError(
                    f"shape {tuple(value.shape)} given, the session was made for {arg.shape} "
                    "(another shape needs another session: shapes=)",
                    name,
                )
            out[self._imported.inputs[name]] = _narrow(name, value) if arg.type == _INT64 else value
        return out


def _narrow(name: str, value: np.ndarray) -> np.ndarray:
    """An int64 feed as I32, every element checked to fit (the first that does not named)."""
    bad = (value < _I32.min) | (value > _I32.max)
    if np.any(bad):
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise StepInputError(
            f"element {at} is {int(value[at])}, beyond the i32 poot carries int64 in", name
        )
    return value.astype(np.int32)


def _model(given: Any) -> Any:
    """A path, a ModelProto, or the model's bytes (as ONNX Runtime takes them)."""
    if isinstance(given, bytes | bytearray):
        import onnx

        try:
            return onnx.load_model_from_string(bytes(given))
        except Exception as err:  # protobuf's DecodeError
            raise UnsupportedOnnx("bytes", "model", "model", f"cannot be read: {err}") from err
    if isinstance(given, str | os.PathLike):
        return os.fspath(given)
    return given


def _inputs(program: Program, imported: Imported) -> tuple[NodeArg, ...]:
    args = {a.name: a for a in program.args if a.storage is Storage.SLOT}
    out = []
    for onnx_name, name in imported.inputs.items():
        a = args[name]
        kind = _INT64 if a.wide else _ONNX_TYPES[a.var.dtype]
        out.append(NodeArg(onnx_name, tuple(a.var.shape), kind))
    return tuple(out)


def _outputs(program: Program, imported: Imported) -> tuple[NodeArg, ...]:
    results = dict(program.results())
    out = []
    for onnx_name, name in imported.outputs.items():
        v = results[name]
        kind = _INT64 if onnx_name in imported.int64_outputs else _ONNX_TYPES[v.type.dtype]
        out.append(NodeArg(onnx_name, tuple(v.type.shape), kind))
    return tuple(out)
