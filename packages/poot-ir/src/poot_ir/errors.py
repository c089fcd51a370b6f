"""The one exception tree of the whole project.

Exceptions are for broken input, broken environments and bugs. A program a target cannot run
is not an exception: the planner returns refusals as values, and ``PlanRefused`` only carries
them to a caller who asked for a program that must run.

::

    PootError
    ├── IRError                       a program or its text is malformed
    │   ├── ParseError                    text: line, column, what was expected
    │   └── TypeCheckError                an equation: index, primitive, the offending types
    ├── UnsupportedOnnx               an ONNX model the importer cannot express: node, op, what
    ├── UnsupportedJax                a traced JAX function poot cannot express: primitive, line, what
    ├── EvaluationError               the oracle was called wrongly or met undefined input
    │   ├── ArgumentError                 missing, extra, misshapen or mistyped argument
    │   ├── WindowOutOfRange              a dynamic_update_slice start whose window does not fit
    │   ├── IndexOutOfRange               a gather index outside its axis
    │   └── IntegerDivisionByZero         an I32 div by zero
    ├── PlanRefused                   a program with refused equations was asked to run
    ├── TargetTableError              a malformed target table (found at import)
    ├── UnknownTarget                 a target name that is not registered
    ├── CodegenError
    │   ├── ToolchainUnavailable          a compiler or linker is not on this machine
    │   ├── CompileFailed                 the compiler rejected the artifact: carries its log
    │   └── NoLowering                    an equation a code generator has no lowering for
    ├── EngineError
    │   ├── StepInputError                a step's inputs do not match the compiled signature
    │   ├── WeightMismatch                weights that do not bind to an entry's weight arguments
    │   ├── SignatureMismatch             the compiled artifact's arguments differ from the program's
    │   ├── NarrowingRangeError           an F32 value FP16 cannot hold (names argument and element)
    │   │   ├── NarrowingRangeUpload          a weight, at upload
    │   │   ├── NarrowingRangeInput           an input, before a replay
    │   │   ├── NarrowingRangeResult          a result, after a replay
    │   │   ├── NarrowingRangeState           a state written or handed over to an entry
    │   │   └── NarrowingRangeIntermediate    an FP16 intermediate inside the graph (names the equation)
    │   ├── DispatchRefused               a command that is not the artifact's ABI: nothing ran
    │   ├── DeadlineExceeded              a run missed its deadline: the device is now poisoned
    │   ├── DevicePoisoned                every call after a deadline miss
    │   ├── DeviceFailed                  the runtime reported a failed run
    │   ├── BlobRefused                   the device will not load a compiled blob: recompile it
    │   ├── UnknownEntry                  an entry or weights handle this engine did not issue
    │   ├── DomainError                   a host-visible value outside an equation's domain: nothing ran
    │   ├── DomainFlagged                 a device counted operands outside a domain: result refused
    │   ├── ContractViolation             a verified step breached its contract: entry poisoned
    │   ├── EntryPoisoned                 every step of an entry after its contract violation
    │   └── StateError                    a state read or written wrongly: names the state
    ├── CacheError                    the blob cache directory is unsafe (owner, mode, symlink)
    ├── DeviceUnavailable             no such device here ("hardware unavailable", not "unsupported")
    ├── UnsupportedDevice             a device or a use of one poot never drives (OpenVINO's AUTO)
    └── InputError                    a file or an argument the command line cannot use: names it

Every error carries the facts as attributes as well as in its message, so tests and callers can
match on them without parsing text.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ArgumentError",
    "BlobRefused",
    "CacheError",
    "CodegenError",
    "CompileFailed",
    "ContractViolation",
    "DeadlineExceeded",
    "DeviceFailed",
    "DevicePoisoned",
    "DeviceUnavailable",
    "DispatchRefused",
    "DomainError",
    "DomainFlagged",
    "EngineError",
    "EntryPoisoned",
    "EvaluationError",
    "IRError",
    "IndexOutOfRange",
    "InputError",
    "IntegerDivisionByZero",
    "NarrowingRangeError",
    "NarrowingRangeInput",
    "NarrowingRangeIntermediate",
    "NarrowingRangeResult",
    "NarrowingRangeState",
    "NarrowingRangeUpload",
    "NoLowering",
    "ParseError",
    "PlanRefused",
    "PootError",
    "SignatureMismatch",
    "StateError",
    "StepInputError",
    "TargetTableError",
    "ToolchainUnavailable",
    "TypeCheckError",
    "UnknownEntry",
    "UnknownTarget",
    "UnsupportedDevice",
    "UnsupportedJax",
    "UnsupportedOnnx",
    "WeightMismatch",
    "WindowOutOfRange",
]


class PootError(Exception):
    """The root of every error poot raises on purpose."""


class IRError(PootError):
    """A program, or its text, is malformed."""


class ParseError(IRError):
    """Program text that does not parse; ``line`` and ``column`` are 1-based."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column
        self.reason = message


class TypeCheckError(IRError):
    """An equation whose inputs or parameters do not type-check.

    ``eqn`` is the equation's index in its program (or the index it would have had while a
    Builder is building it), ``primitive`` its name.
    """

    def __init__(self, message: str, eqn: int | None = None, primitive: str | None = None) -> None:
        where = ""
        if eqn is not None:
            where = f"equation {eqn}" + (f" ({primitive})" if primitive else "") + ": "
        elif primitive is not None:
            where = f"{primitive}: "
        super().__init__(where + message)
        self.eqn = eqn
        self.primitive = primitive
        self.reason = message


class UnsupportedOnnx(PootError):
    """An ONNX model that ``poot_onnx.import_model`` cannot express as a poot program.

    ``node`` names the node (its ONNX name, or ``#index`` and its first output when it has none;
    a graph input, output or initializer by its value name), ``op_type`` is its ONNX op type
    (``"graph input"``, ``"graph output"``, ``"initializer"`` or ``"model"`` at graph level) and
    ``kind`` says what is unsupported: ``"op"`` (an op type or domain), ``"attribute"`` (an
    attribute or its value), ``"dtype"`` (an element type poot lacks), ``"dynamic"`` (a dynamic
    shape, or a runtime value where poot needs a constant), ``"value"`` (a constant poot cannot
    use, such as an index beyond i32) or ``"model"`` (a malformed model). ``detail`` says the rest.
    """

    def __init__(
        self,
        node: str,
        op_type: str,
        kind: Literal["op", "attribute", "dtype", "dynamic", "value", "model"],
        detail: str,
    ) -> None:
        super().__init__(f"cannot import ONNX {op_type} {node!r} ({kind}): {detail}")
        self.node = node
        self.op_type = op_type
        self.kind = kind
        self.detail = detail


class UnsupportedJax(PootError):
    """A traced JAX function that ``poot_jax.import_function`` cannot express as a poot program.

    ``primitive`` is the JAX primitive's name (``"argument"`` or ``"output"`` for a slot or a
    result), ``where`` the user's source line of its equation (``file:line (function)``, or ""
    when JAX recorded none), ``kind`` what is unsupported: ``"primitive"`` (no lowering),
    ``"params"`` (a parameter value poot cannot express), ``"dtype"`` (an element type poot
    lacks) or ``"value"`` (an argument that is not an array). ``detail`` says the rest.
    """

    def __init__(
        self,
        primitive: str,
        where: str,
        kind: Literal["primitive", "params", "dtype", "value"],
        detail: str,
    ) -> None:
        at = f" at {where}" if where else ""
        super().__init__(f"cannot import JAX {primitive}{at} ({kind}): {detail}")
        self.primitive = primitive
        self.where = where
        self.kind = kind
        self.detail = detail


class EvaluationError(PootError):
    """The oracle was called with input it does not define a result for."""


class ArgumentError(EvaluationError):
    """A missing, extra, misshapen or mistyped argument: names it and what was expected."""

    def __init__(self, message: str, argument: str) -> None:
        super().__init__(f"argument {argument!r}: {message}")
        self.argument = argument


class WindowOutOfRange(EvaluationError):
    """A dynamic_update_slice start whose update window does not fit in the operand."""

    def __init__(
        self, eqn: int, starts: tuple[int, ...], operand: tuple[int, ...], update: tuple[int, ...]
    ) -> None:
        super().__init__(
            f"equation {eqn} (dynamic_update_slice): start {starts} places a window of shape "
            f"{update} outside an operand of shape {operand}"
        )
        self.eqn = eqn
        self.starts = starts
        self.operand_shape = operand
        self.update_shape = update


class IndexOutOfRange(EvaluationError):
    """A gather index outside ``[-size, size)`` of its axis; ``argument`` names the program
    argument holding it when a device checked it before a run."""

    def __init__(
        self,
        eqn: int,
        index: int,
        size: int,
        element: tuple[int, ...],
        argument: str | None = None,
    ) -> None:
        of = f" of argument {argument!r}" if argument is not None else ""
        super().__init__(
            f"equation {eqn} (gather): index {index} at element {element}{of} is outside an axis of size {size}"
        )
        self.eqn = eqn
        self.index = index
        self.size = size
        self.element = element
        self.argument = argument


class IntegerDivisionByZero(EvaluationError):
    """An I32 ``div`` by zero, which has no defined result."""

    def __init__(self, eqn: int, element: tuple[int, ...]) -> None:
        super().__init__(f"equation {eqn} (div): I32 division by zero at element {element}")
        self.eqn = eqn
        self.element = element


class PlanRefused(PootError):
    """A program with refused equations was asked to run. ``refusals`` holds every one."""

    def __init__(self, message: str, refusals: tuple[object, ...]) -> None:
        super().__init__(message)
        self.refusals = refusals


class TargetTableError(PootError):
    """A target table that is malformed: found when the target module is imported."""

    def __init__(self, target: str, message: str) -> None:
        super().__init__(f"target {target!r}: {message}")
        self.target = target


class UnknownTarget(PootError):
    """A target name that is not in the planner's registry."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(f"unknown target {name!r}; known: {', '.join(known)}")
        self.name = name
        self.known = known


class CodegenError(PootError):
    """Code generation or the compile step failed."""


class ToolchainUnavailable(CodegenError):
    """A tool the compile step needs is not on this machine. This is "unavailable", never
    "unsupported": the same artifact builds where the tool exists."""

    def __init__(self, tool: str, detail: str = "") -> None:
        super().__init__(f"toolchain unavailable: {tool}" + (f" ({detail})" if detail else ""))
        self.tool = tool
        self.detail = detail


class CompileFailed(CodegenError):
    """A compiler rejected what poot generated; ``log`` is the compiler's own output."""

    def __init__(self, tool: str, log: str, what: str = "") -> None:
        head = f"{tool} rejected {what}" if what else f"{tool} failed"
        super().__init__(f"{head}:\n{log}")
        self.tool = tool
        self.log = log
        self.what = what


class NoLowering(CodegenError):
    """A code generator has no lowering for an equation: names its index and primitive."""

    def __init__(self, target: str, eqn: int, primitive: str, detail: str = "") -> None:
        super().__init__(
            f"{target}: equation {eqn} ({primitive}) has no lowering"
            + (f": {detail}" if detail else "")
        )
        self.target = target
        self.eqn = eqn
        self.primitive = primitive
        self.detail = detail


class EngineError(PootError):
    """The engine refused a call or a device failed under it."""


class StepInputError(EngineError):
    """A step's inputs do not match the entry's compiled signature; nothing ran."""

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(f"argument {argument!r}: {message}" if argument else message)
        self.argument = argument


class WeightMismatch(EngineError):
    """Weights that do not bind to an entry's weight arguments: a missing or extra weight, or
    one of another dtype or shape. ``argument`` names it; nothing was loaded."""

    def __init__(self, message: str, argument: str) -> None:
        super().__init__(f"weight {argument!r}: {message}")
        self.argument = argument


class SignatureMismatch(EngineError):
    """The compiled artifact's arguments differ from the program's (names, order, direction,
    extents, precision): running it would silently compute something else."""

    def __init__(self, message: str, expected: object, found: object) -> None:
        super().__init__(f"{message}: expected {expected}, compiled artifact has {found}")
        self.expected = expected
        self.found = found


class NarrowingRangeError(EngineError):
    """An F32 value outside what the device's narrowing contract was measured on: beyond the
    largest magnitude (65504 for FP16) or NaN. Names the argument and the element."""

    when = "value"

    def __init__(self, argument: str, element: tuple[int, ...], value: float, limit: float) -> None:
        super().__init__(
            f"{self.when} {argument!r} element {element} = {value!r} is outside the narrowing "
            f"range (largest magnitude {limit!r}, no NaN)"
        )
        self.argument = argument
        self.element = element
        self.value = value
        self.limit = limit


class NarrowingRangeUpload(NarrowingRangeError):
    """A weight beyond the narrowing range, refused as it is uploaded."""

    when = "weight"


class NarrowingRangeInput(NarrowingRangeError):
    """An input beyond the narrowing range, refused before a replay: nothing ran."""

    when = "input"


class NarrowingRangeResult(NarrowingRangeError):
    """A result that left the narrowing range: computed outside what the bound covers."""

    when = "result"


class NarrowingRangeState(NarrowingRangeError):
    """A state value beyond the narrowing range, refused as it is written (or handed over)."""

    when = "state"


class NarrowingRangeIntermediate(NarrowingRangeError):
    """A value inside a narrowed graph left FP16's range (or a saturated sentinel stopped
    dominating), so the results computed from it are refused: names the source equation and
    the check (``overflow``, ``sentinel`` or ``score``: a score the prelude's -2^15 mask is
    added to, ``poot_planner.fp16.prelude``). Raised after the run, before any state changes."""

    when = "intermediate"

    def __init__(self, eqn: int, primitive: str, check: str, device: str = "") -> None:
        what = {
            "overflow": "is infinite or NaN in FP16",
            "sentinel": "is not dominated by its saturated sentinel",
            "score": "is beyond the attention-mask rewrite's score bound (16367.3) or NaN",
        }.get(check, check)
        EngineError.__init__(
            self,
            f"{device + ': ' if device else ''}the value of equation {eqn} ({primitive}) {what} "
            f"inside the narrowed graph ({check} check); its results are refused",
        )
        self.eqn = eqn
        self.primitive = primitive
        self.check = check
        self.argument, self.element, self.value, self.limit = f"e{eqn}", (), float("nan"), 65504.0


class DispatchRefused(EngineError):
    """A command that is not the artifact's ABI (a grid launch, another graph, a buffer of the
    wrong shape); refused before the device runtime is touched."""


class DeadlineExceeded(EngineError):
    """A run missed its deadline. The device is poisoned from now on, and the buffers the run
    used stay allocated until the device is closed."""

    def __init__(self, deadline_s: float, what: str = "run") -> None:
        super().__init__(f"{what} missed its deadline of {deadline_s:g} s; the device is poisoned")
        self.deadline_s = deadline_s


class DevicePoisoned(EngineError):
    """The device missed a deadline earlier; every later call is refused until it is closed."""


class DeviceFailed(EngineError):
    """The device runtime reported a run that did not complete."""


class BlobRefused(EngineError):
    """The device will not load a compiled blob (damaged, or from another compiler or driver).
    Raised by a device's ``load``; the engine recompiles the artifact and replaces the cached
    entry, so a caller sees it only from a freshly compiled blob."""

    def __init__(self, device: str, why: str) -> None:
        super().__init__(f"{device} refused the compiled blob: {why}")
        self.device = device
        self.why = why


class UnknownEntry(EngineError):
    """An entry or weights handle this engine did not issue, or one already removed."""


class DomainError(EngineError):
    """A value the host sees before the run (an input, a weight or a state) outside the domain
    of an equation that reads it: nothing ran. Names the argument, the first offending element
    and its value, the equation (index and primitive) and the domain."""

    def __init__(
        self,
        argument: str,
        element: tuple[int, ...],
        value: float,
        eqn: int,
        primitive: str,
        domain: str,
    ) -> None:
        super().__init__(
            f"{argument!r} element {element} = {value!r} is outside the domain of equation "
            f"{eqn} ({primitive}: {domain}); nothing ran"
        )
        self.argument = argument
        self.element = element
        self.value = value
        self.eqn = eqn
        self.primitive = primitive
        self.domain = domain


class DomainFlagged(EngineError):
    """A device counted operands outside a domain while it ran (XDNA2: a region's flag word):
    the results are refused and no state changes. Names the region, the count and the
    equations that region guards (of the program the device ran); in a partitioned run also
    ``span``, which span of which program that was."""

    def __init__(
        self, region: int, count: int, eqns: tuple[int, ...], *, span: str | None = None
    ) -> None:
        within = f" of span {span}" if span else ""
        super().__init__(
            f"region {region} flagged {count} operand(s) outside their domain (guarded "
            f"equations {list(eqns)}{within}); the results are refused and no state changed"
        )
        self.region = region
        self.count = count
        self.eqns = eqns
        self.span = span


class ContractViolation(EngineError):
    """A verified step whose result breached its contract against the oracle: names the
    result, the worst element, its error and the bound there. The entry is poisoned and no
    state changed."""

    def __init__(
        self, result: str, element: tuple[int, ...] | None, error: float, bound: float, why: str
    ) -> None:
        super().__init__(
            f"result {result!r} element {element}: error {error:.3g} exceeds the bound "
            f"{bound:.3g} ({why}); the entry is poisoned and no state changed"
        )
        self.result = result
        self.element = element
        self.error = error
        self.bound = bound


class EntryPoisoned(EngineError):
    """A step of an entry that breached its contract earlier; remove it and add it again."""


class StateError(EngineError):
    """A state read or written wrongly (``Engine.read_state``, ``write_state``, ``handoff``):
    a name that is no state of the entry, a value of another dtype or shape, two entries whose
    states differ, or a call while a step is running. ``state`` names it (None: the call as a
    whole); nothing was read or written."""

    def __init__(self, message: str, state: str | None = None) -> None:
        super().__init__(f"state {state!r}: {message}" if state else message)
        self.state = state


class CacheError(PootError):
    """The blob cache directory is unsafe to use (another owner, a loose mode, a symlink)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"blob cache {path}: {message}")
        self.path = path


class DeviceUnavailable(PootError):
    """The device is not on this machine: hardware unavailable, which is not "unsupported"."""

    def __init__(self, device: str, why: str) -> None:
        super().__init__(f"{device}: hardware unavailable ({why})")
        self.device = device
        self.why = why


class UnsupportedDevice(PootError):
    """A device, or a use of a device, that poot never drives: OpenVINO's ``AUTO`` (it falls
    back to the CPU silently), or a plan for another target handed to a device."""

    def __init__(self, device: str, why: str) -> None:
        super().__init__(f"{device}: unsupported ({why})")
        self.device = device
        self.why = why


class InputError(PootError):
    """A file or an argument the command line cannot use: a path that is missing, not a
    regular file, too large or not what it should hold (a program, an ``.npz``, a receipt), an
    output path that cannot be written, or options that contradict each other. ``what`` names
    the file or the option."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(f"{what}: {message}")
        self.what = what
        self.reason = message
