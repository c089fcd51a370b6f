"""Which exit status a typed error gives the command line.

A program the target or the device refuses, or whose result breaks its contract, is the
program's fact on that target: exit 1, as a plan that refuses an equation. Bad input (a file, an
option, a program or model that is malformed, an argument of the wrong shape) is the caller's
to fix: exit 2. The README's exit-status table is checked against ``REFUSALS`` and
``BAD_INPUT`` (tests/test_cli_exit_codes.py), and every public ``PootError`` class falls under
exactly one of them.
"""

from __future__ import annotations

from enum import IntEnum

from poot_ir import (
    BlobRefused,
    CacheError,
    CodegenError,
    ContractViolation,
    DeadlineExceeded,
    DeviceFailed,
    DevicePoisoned,
    DeviceUnavailable,
    DispatchRefused,
    DomainError,
    DomainFlagged,
    EngineError,
    EntryPoisoned,
    EvaluationError,
    InputError,
    IRError,
    NarrowingRangeError,
    PlanRefused,
    PootError,
    SignatureMismatch,
    TargetTableError,
    UnknownTarget,
    UnsupportedDevice,
    UnsupportedJax,
    UnsupportedOnnx,
)
from poot_ir.budget import BudgetExceeded, InvalidBudget

__all__ = ["BAD_INPUT", "REFUSALS", "Exit", "exit_code"]


class Exit(IntEnum):
    OK = 0
    REFUSED = 1  # a check failed, or the target or the device refused the program
    BAD_INPUT = 2  # one line naming what is wrong with what the caller gave


#: refused by the target or the device (or a failed check): the program's fact on that target
REFUSALS: tuple[type[PootError], ...] = (
    PlanRefused,  # an equation the target's table refuses
    NarrowingRangeError,  # a weight, input, result, state or intermediate outside FP16's range
    DomainError,  # a value outside a device equation's domain, seen before the run
    DomainFlagged,  # a device counted operands outside a domain while it ran
    ContractViolation,  # a verified result outside its contract
    EntryPoisoned,
    SignatureMismatch,
    CodegenError,  # no lowering, the compiler rejected it, or its toolchain is absent
    DeviceFailed,
    DeadlineExceeded,
    DevicePoisoned,
    DeviceUnavailable,
    BlobRefused,
    DispatchRefused,
    TargetTableError,
)

#: bad input: the caller's to fix (everything else an engine call refuses is a misuse of it)
BAD_INPUT: tuple[type[PootError], ...] = (
    InputError,
    IRError,  # parse and type errors, dimensions too large
    UnsupportedOnnx,
    UnsupportedJax,
    EvaluationError,  # an argument missing or misshapen, an index out of range, a division by 0
    UnknownTarget,
    UnsupportedDevice,
    CacheError,
    BudgetExceeded,
    InvalidBudget,
    EngineError,  # step inputs, weights or states that do not fit the entry
)


def exit_code(err: PootError) -> Exit:
    """``Exit.REFUSED`` for a refusal of the target or the device, else ``Exit.BAD_INPUT``.
    ``REFUSALS`` is tried first: ``EngineError`` in ``BAD_INPUT`` is the base of several
    refusals."""
    if isinstance(err, REFUSALS):
        return Exit.REFUSED
    return Exit.BAD_INPUT
