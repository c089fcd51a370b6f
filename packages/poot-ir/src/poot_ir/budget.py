"""The memory budget: every allocation whose size comes from user input is checked first.

Two bounds, both typed errors naming the value, its size and the bound:

- ``check_dims`` (static): a tensor no target could hold, whatever the machine: a dimension
  past ``MAX_DIM`` or more than ``MAX_TENSOR_BYTES`` bytes (1 TiB, past the memory of any
  laptop an NPU sits in, and past the 32-bit offsets of the XDNA2 arenas). The Builder, the
  text parser and the ONNX importer refuse such a type where it is written (``DimsTooLarge``).
  Sizes are Python ints, so a product of dims never wraps.
- ``check_alloc`` (dynamic): one allocation (sampled inputs, weights, a folded constant, a
  device buffer, every step a run keeps) against the budget: by default ``DEFAULT_FRACTION`` of
  the memory this process can still take now (``headroom``): the machine's available memory
  (``MemAvailable``), or less where the process has a limit of its own: its address-space
  limit (``RLIMIT_AS``, less the address space it maps already) or its cgroup's (v2
  ``memory.max``, v1 ``memory.limit_in_bytes``, less the cgroup's usage; every ancestor's
  too). Settable with ``set_budget`` or the environment variable ``POOT_MEMORY_BUDGET``
  (bytes, with an optional K/M/G/T suffix). Over it is ``BudgetExceeded``: refused before
  numpy is asked, instead of numpy's ``MemoryError`` (issue 26: ``--prompt-len 4096`` under a
  6 GB process limit) or a machine that has started to swap.

``check_array`` is the hook for the ONNX importer's constant folding: call it with the folded
value's shape and itemsize before materialising it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
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
    "headroom",
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
_UNLIMITED: Final = 1 << 60  # cgroup v1 writes its "no limit" as a page-rounded 2^63 - 1
#: Where the process's own limits are read (``headroom``'s defaults; a test points them at a
#: fake tree).
PROC_SELF = Path("/proc/self")
CGROUP_FS = Path("/sys/fs/cgroup")

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
    return int(headroom() * DEFAULT_FRACTION)


def headroom(proc_self: Path | None = None, cgroup_fs: Path | None = None) -> int:
    """The bytes this process can still allocate now: the machine's available memory, or its
    own address-space or cgroup limit's room where that is less (see the module). The limits
    are read under ``proc_self`` and ``cgroup_fs`` (default ``PROC_SELF``, ``CGROUP_FS``)."""
    proc_self = PROC_SELF if proc_self is None else proc_self
    cgroup_fs = CGROUP_FS if cgroup_fs is None else cgroup_fs
    room = _available()
    for limit in (_rlimit_room(proc_self), _cgroup_room(proc_self, cgroup_fs)):
        if limit is not None:
            room = min(room, limit)
    return room


def _rlimit_room(proc_self: Path) -> int | None:
    """``RLIMIT_AS`` less the address space mapped now (``VmSize``); None without a limit."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - (_status_bytes(proc_self / "status", "VmSize:") or 0))


def _cgroup_room(proc_self: Path, cgroup_fs: Path) -> int | None:
    """The least room under the memory limit of this process's cgroup or any ancestor (v2
    ``memory.max`` less ``memory.current``, v1 ``memory.limit_in_bytes`` less
    ``memory.usage_in_bytes``); None where no limit is set or none can be read."""
    try:
        lines = (proc_self / "cgroup").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    rooms = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and controllers == "":
            base, limit_file, usage_file = cgroup_fs, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base = cgroup_fs / "memory"
            limit_file, usage_file = "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        for depth in range(len(parts), -1, -1):  # the cgroup, then each ancestor
            where = base.joinpath(*parts[:depth])
            limit = _file_int(where / limit_file)
            if limit is None or limit >= _UNLIMITED:  # "max", absent, or v1's unlimited
                continue
            rooms.append(max(0, limit - (_file_int(where / usage_file) or 0)))
    return min(rooms) if rooms else None


def _file_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _status_bytes(path: Path, field: str) -> int | None:
    """A ``kB`` field of a ``/proc/<pid>/status`` file, in bytes."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        pass
    return None


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
    found = _status_bytes(Path("/proc/meminfo"), "MemAvailable:")
    if found is not None:
        return found
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
