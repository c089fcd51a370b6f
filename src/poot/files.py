"""The files the command line reads and writes, checked before any work starts.

Reading: a path must name a regular file (a FIFO, a device or a directory would block the read
or never end it), checked with ``stat`` before it is opened and again on the opened descriptor
(opened non-blocking, so a FIFO swapped in between cannot hang it), and be no larger than a
limit checked before a byte is read: ``MAX_PROGRAM_BYTES`` for program text (parsing holds far
more than the text; ``--max-program-bytes`` or ``POOT_MAX_PROGRAM_BYTES`` change it), the memory
budget (``poot_ir.budget``) for binary files read whole.

Writing: an output path is checked before the work whose result it receives (its parent is a
directory, the path is a regular file or absent, and writable), and written through a
temporary file beside it, renamed into place, so a failed write leaves no half file.

Every refusal is an ``InputError`` naming the path.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final

from poot_ir import InputError, PootError
from poot_ir.budget import check_alloc, parse_budget

__all__ = [
    "MAX_PROGRAM_BYTES",
    "check_output",
    "max_program_bytes",
    "open_regular",
    "read_bytes",
    "read_text",
    "regular_file",
    "write_file",
    "write_text",
]

#: Program text larger than this (16 MiB, some 300,000 equations) is refused unread.
MAX_PROGRAM_BYTES: Final = 16 << 20
_ENV: Final = "POOT_MAX_PROGRAM_BYTES"


def max_program_bytes(given: int | None = None) -> int:
    """The program-text limit: ``given`` (``--max-program-bytes``), else ``POOT_MAX_PROGRAM_BYTES``
    (bytes, K/M/G/T suffixes), else ``MAX_PROGRAM_BYTES``."""
    if given is not None:
        return given
    text = os.environ.get(_ENV)
    if text is None:
        return MAX_PROGRAM_BYTES
    try:
        return parse_budget(text)
    except PootError as err:
        raise InputError(_ENV, str(err)) from None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def regular_file(path: str | Path, what: str, limit: int | None = None) -> int:
    """The size of ``path``, refused unless it is a regular file (symbolic links followed) no
    larger than ``limit`` bytes (None: the memory budget). Nothing is opened."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise InputError(f"{what} {path}", f"cannot read it: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path}", f"is {_kind(st.st_mode)}, not a regular file")
    _within(path, what, st.st_size, limit)
    return st.st_size


def _within(path: str | Path, what: str, size: int, limit: int | None) -> None:
    if limit is None:
        check_alloc(f"{what} {path}", size)
    elif size > limit:
        how = f" (--max-program-bytes or {_ENV})" if what == "program" else ""
        raise InputError(
            f"{what} {path}", f"is {size} bytes, over the limit of {limit} for a {what}{how}"
        )


def open_regular(path: str | Path, what: str, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading, after ``regular_file``'s checks, which are repeated on the
    descriptor (opened non-blocking: a FIFO put in its place since cannot hang the open)."""
    regular_file(path, what, limit)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(f"{what} {path}", f"cannot read it: {err.strerror or err}") from None
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {path}", f"is {_kind(st.st_mode)}, not a regular file")
        _within(path, what, st.st_size, limit)
    except BaseException:
        f.close()
        raise
    return f


def read_bytes(path: str | Path, what: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``), no more than ``limit``."""
    with open_regular(path, what, limit) as f:
        try:
            # one byte past the size: a file that grew since is refused, not read on and on
            data = f.read(os.fstat(f.fileno()).st_size + 1)
        except OSError as err:
            raise InputError(f"{what} {path}", f"cannot read it: {err.strerror or err}") from None
    _within(path, what, len(data), limit)
    return data


def read_text(path: str | Path, what: str, limit: int | None = None) -> str:
    """``read_bytes`` decoded as UTF-8 (refused naming the first bad byte otherwise)."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{what} {path}", f"is not UTF-8 text (byte {err.start}): not a {what}"
        ) from None


def check_output(path: str | Path, what: str) -> Path:
    """``path`` if a file can be written there: its parent an existing directory we may write
    in, the path itself absent or a regular file. Checked before the work, so a bad ``-o``
    costs nothing."""
    p = Path(path)
    parent = p.parent
    if not parent.is_dir():
        why = "does not exist" if not parent.exists() else "is not a directory"
        raise InputError(f"{what} {p}", f"cannot write it: its directory {parent} {why}")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(
                f"{what} {p}", f"cannot write it: its directory {parent} is not writable"
            ) from None
        return p
    except OSError as err:
        raise InputError(f"{what} {p}", f"cannot write it: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {p}", f"cannot write it: {_kind(st.st_mode)}, not a regular file")
    if not os.access(p, os.W_OK) or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{what} {p}", "cannot write it: not writable")
    return p


def write_file(path: str | Path, what: str, fill: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` whole or not at all: ``fill`` writes a temporary file beside it, which is
    then renamed over it (keeping the mode of a file replaced; a new one gets the umask's)."""
    p = check_output(path, what)
    try:
        mode = stat.S_IMODE(os.stat(p).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            fill(f)
        os.replace(tmp, p)
        tmp = None
    except OSError as err:
        raise InputError(f"{what} {p}", f"cannot write it: {err.strerror or err}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_text(path: str | Path, text: str, what: str) -> None:
    """``write_file`` of ``text`` as UTF-8."""
    data = text.encode("utf-8")

    def fill(f: BinaryIO) -> None:
        f.write(data)

    write_file(path, what, fill)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
