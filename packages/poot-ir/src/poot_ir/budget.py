"""The memory budget: every allocation whose size comes from user input is checked first.

Two bounds, both typed errors naming the value, its size and the bound:

- ``check_dims`` (static): a tensor no target could hold, whatever the machine: a dimension
  past ``MAX_DIM`` or more than ``MAX_TENSOR_BYTES`` bytes (1 TiB, past the memory of any
  laptop an NPU sits in, and past the 32-bit offsets of the XDNA2 arenas). The Builder, the
  text parser and the ONNX importer refuse such a type where it is written (``DimsTooLarge``).
  Sizes are Python ints, so a product of dims never wraps.
- ``check_alloc`` (dynamic): one allocation (sampled inputs, weights, a folded constant, a
  device buffer, every step a run keeps) against the budget: by default ``DEFAULT_FRACTION`` of
  the memory available now (``MemAvailable``), settable with ``set_budget`` or the environment
  variable ``POOT_MEMORY_BUDGET`` (bytes, with an optional K/M/G/T suffix). Over it is
  ``BudgetExceeded``: refused before numpy is asked, instead of numpy's ``MemoryError`` after
  the machine has started to swap.

``check_array`` is the hook for the ONNX importer's constant folding: call it with the folded
value's shape and itemsize before materialising it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final

from poot_ir.errors import IRError, PootError

__all__ = [
    "DEFAULT_FRACTION",
    "MAX_DIM",
    "MAX_TENSOR_BYTES",
    "BudgetExceeded",
    "DimsTooLarge",
    "InvalidBudget",
    "budget",
    "budget_set",
    "check_alloc",
    "check_array",
    "check_dims",
    "nbytes",
    "parse_budget",
    "set_budget",
]

MAX_TENSOR_BYTES: Final = 1 << 40
MAX_DIM: Final = 1 << 40
DEFAULT_FRACTION: Final = 0.5
_ENV: Final = "POOT_MEMORY_BUDGET"
_FALLBACK: Final = 4 << 30  # where available memory cannot be read
_SUFFIX: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_set: int | None = None


class DimsTooLarge(IRError):
    """A tensor type no target can hold (``check_dims``)."""

    def __init__(self, what: str, shape: Sequence[int], size: int) -> None:
        super().__init__(
            f"{what}: shape [{','.join(map(_int, shape))}] is {_int(size)} bytes; no target "
            f"holds a tensor over {MAX_TENSOR_BYTES} bytes (1 TiB) or a dimension over {MAX_DIM}"
        )
        self.what, self.shape, self.size = what, tuple(shape), size


class BudgetExceeded(PootError):
    """An allocation sized by user input over the memory budget (``check_alloc``)."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} needs {_show(size)} ({size} bytes), over the memory budget of "
            f"{_show(limit)} ({limit} bytes; set {_ENV} or --memory-budget to change it)"
        )
        self.what, self.size, self.limit = what, size, limit


def nbytes(shape: Iterable[int], itemsize: int) -> int:
    """The exact size in bytes of an array of ``shape`` (a Python int: never wraps)."""
    return math.prod(int(d) for d in shape) * itemsize


def check_dims(shape: Sequence[int], what: str, itemsize: int = 1) -> None:
    """Refuse a shape no target can hold (see the module)."""
    size = nbytes(shape, itemsize)
    if any(d > MAX_DIM for d in shape) or size > MAX_TENSOR_BYTES:
        raise DimsTooLarge(what, shape, size)


def set_budget(limit: int | None) -> None:
    """Set the budget in bytes for this process; ``None`` goes back to the default."""
    global _set
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise _bad_budget(repr(limit))
    _set = limit


@contextmanager
def budget_set(limit: int | None) -> Iterator[None]:
    """``set_budget(limit)`` for the ``with`` block, then the setting it replaced: so one call
    (a command line run in-process, a test) does not leave its budget to the next."""
    saved = _set
    set_budget(limit)
    try:
        yield
    finally:
        set_budget(saved)


def budget() -> int:
    """The budget in bytes now (see the module)."""
    if _set is not None:
        return _set
    text = os.environ.get(_ENV, "").strip()
    if text:
        return parse_budget(text)
    return int(_available() * DEFAULT_FRACTION)


def parse_budget(text: str) -> int:
    """``"512M"``, ``"2g"``, ``"1048576"``: a positive number of bytes."""
    unit = text[-1:].lower() if text[-1:].isalpha() else ""
    try:
        value = float(text[: len(text) - len(unit)]) * _SUFFIX[unit]
    except (ValueError, KeyError):
        raise _bad_budget(repr(text)) from None
    if not math.isfinite(value) or value < 1:
        raise _bad_budget(repr(text))
    return int(value)


def check_alloc(what: str, size: int) -> None:
    """Refuse an allocation of ``size`` bytes over the budget."""
    limit = budget()
    if size > limit:
        raise BudgetExceeded(what, size, limit)


def check_array(what: str, shape: Sequence[int], itemsize: int) -> None:
    """``check_dims`` then ``check_alloc`` for one array of ``shape``."""
    check_dims(shape, what, itemsize)
    check_alloc(what, nbytes(shape, itemsize))


def _available() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return _FALLBACK


def _bad_budget(shown: str) -> PootError:
    return InvalidBudget(f"a memory budget must be a positive number of bytes, got {shown}")


class InvalidBudget(PootError):
    """A memory budget that is not a positive size."""


def _int(n: int) -> str:
    """``n``, or its power of two when it is too long to read (or for ``str`` to print)."""
    return str(n) if n < 10**15 else f"~2^{n.bit_length() - 1}"


def _show(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
