"""Which directory the blob cache lives in, given the directory a user named.

poot never changes a directory it did not create: not its mode, not its files. It recognises
its own cache directory by a ``CACHEDIR.TAG`` (the cross-tool convention backup programs honour)
whose second line names poot, written when poot created the directory. For a named directory
``D`` (``--cache-dir D``, ``Engine(cache_dir=D)``, default ``$XDG_CACHE_HOME/poot``):

- ``D`` carries poot's tag: the cache is ``D``. It must be ours and owner-only, else refused.
- ``D`` does not exist: poot creates it ``0700`` and tags it (only when writing).
- ``D`` is ours, owner-only and empty (a fresh ``mkdtemp``): the cache is ``D``, tagged when
  first written. The tag is published without replacing anything: a file that appeared under
  its name meanwhile is kept and the directory refused. Another poot publishing that tag
  right now (the directory holds only poot's temporary files) is waited for, two seconds at
  most, so processes first using one directory together share it.
- anything else (a directory holding any file at all, whatever its name, readable by others,
  or owned by someone else): the cache is poot's own subdirectory ``D/poot``, created ``0700``
  and tagged; if ``D/poot`` exists it must be poot's, ours and owner-only, else refused. A
  directory is never adopted for the names of its files (issue 26: a user's ``.tmp-notes.txt``
  made one poot's, and ``cache clear`` deleted it), and no file of the user's is written over.

poot's temporary files (``temp_file``) are named ``TEMP_PREFIX`` + 16 random hex digits (+ a
suffix), made ``0600`` with ``O_EXCL``; ``cache clear`` removes a leftover one only in a
directory poot tagged, only when its name is exactly that (``is_temp_name``), and only when
it is a regular file of ours with that mode.

A symlink or a non-directory where the cache would live is refused (``CacheError``), as is an
empty name (it would mean the current directory). Read-only callers (``create=False``) get the
same answer without anything being written; a cache that does not exist yet reads as empty.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
from pathlib import Path

from poot_ir import CacheError

__all__ = [
    "SUBDIR",
    "SUFFIX",
    "TAG_NAME",
    "TEMP_PREFIX",
    "cache_root",
    "default_cache_dir",
    "is_temp_name",
    "tagged",
    "temp_file",
]

SUFFIX = ".blob"
#: poot's own prefix (no other tool's ``.tmp-``), then ``_TEMP_RANDOM`` hex digits.
TEMP_PREFIX = ".poot-tmp-"
_TEMP_RANDOM = 16
SUBDIR = "poot"
TAG_NAME = "CACHEDIR.TAG"
TAG = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# poot compiled-blob cache: created by poot, which removes only entries it wrote.\n"
)
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + f"[0-9a-f]{{{_TEMP_RANDOM}}}" + r"(\.[a-z]+)?")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is exactly the form of a temporary file ``temp_file`` makes."""
    return _TEMP_NAME.fullmatch(name) is not None


def temp_file(directory: Path, suffix: str = "") -> tuple[int, Path]:
    """A new file in ``directory``, ``0600``, created exclusively (never an existing file):
    its descriptor, open for writing, and its path. ``suffix`` is ``""`` or a dot and lowercase
    letters (``.so``)."""
    assert suffix == "" or re.fullmatch(r"\.[a-z]+", suffix), suffix
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    while True:
        path = directory / f"{TEMP_PREFIX}{secrets.token_hex(_TEMP_RANDOM // 2)}{suffix}"
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:  # 2^64 names: a collision is someone else's file; draw again
            continue


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/poot`` when that is set and absolute, else ``~/.cache/poot``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "poot"


def cache_root(named: Path | str | None, *, create: bool) -> Path:
    """The directory the cache lives in for the directory ``named`` (see the module)."""
    if named is None:
        named = default_cache_dir()
    given: object = named  # callers outside mypy pass anything
    if not isinstance(given, str | os.PathLike):
        raise CacheError(repr(given), "a cache directory is a path (str or os.PathLike)")
    if not str(named):
        raise CacheError("''", "an empty cache directory name (it would mean the current one)")
    base = Path(named)
    st = _lstat(base)
    if st is None:
        return _create(base) if create else base
    _is_directory(base, st)
    if tagged(base):
        _trusted(base, st)
        return base
    if _adoptable(base, st):
        if create:
            _write_tag(base)
        return base
    if _tag_in_flight(base):
        _trusted(base, st)
        return base
    sub = base / SUBDIR
    sub_st = _lstat(sub)
    if sub_st is None:
        return _create(sub) if create else sub
    _is_directory(sub, sub_st)
    if not tagged(sub):
        raise CacheError(str(sub), "exists and is not poot's cache (no poot CACHEDIR.TAG)")
    _trusted(sub, sub_st)
    return sub


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CacheError(str(path), f"cannot inspect it: {err.strerror}") from None


def _is_directory(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise CacheError(str(path), "the cache directory is a symlink; refusing to follow it")
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(str(path), "the cache path is not a directory")


def _trusted(path: Path, st: os.stat_result) -> None:
    """A directory poot tagged is used only while it is ours and owner-only; poot never
    chmods it back (someone loosened it on purpose, or planted the tag)."""
    if st.st_uid != os.geteuid():
        raise CacheError(str(path), f"the cache directory is owned by uid {st.st_uid}, not us")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise CacheError(
            str(path), f"the cache directory has mode {mode:04o}, open to others (chmod 700 it)"
        )


def tagged(path: Path) -> bool:
    """Whether ``path`` holds poot's tag: a regular file of ours, read without following."""
    try:
        fd = os.open(path / TAG_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        return os.read(fd, len(TAG) + 1) == TAG
    finally:
        os.close(fd)


def _adoptable(path: Path, st: os.stat_result) -> bool:
    """Ours, owner-only and empty: nothing in it can be a user's file."""
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return False
    try:
        return not os.listdir(path)
    except OSError:
        return False


#: How long a directory holding nothing but a tag being published is watched for the tag.
_TAG_WAIT_SECONDS = 2.0


def _tag_in_flight(path: Path) -> bool:
    """Whether another poot is tagging ``path`` right now: it was adopted empty, and all it
    holds is poot's temporary files (the tag's, written before it is linked into place) and
    perhaps the tag itself. Wait, bounded, for the tag to appear whole. Four processes first
    using one fresh directory each saw the others' tag temporary file and went to ``D/poot``
    (CI, stop 22). Nothing is adopted for its names: only the tag, once there, decides."""
    deadline = time.monotonic() + _TAG_WAIT_SECONDS
    delay = 0.001
    while True:
        if tagged(path):
            return True
        try:
            names = os.listdir(path)
        except OSError:
            return False
        if not names or not all(n == TAG_NAME or is_temp_name(n) for n in names):
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _create(path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another process made it: checked below
            path.mkdir(mode=0o700)
    except OSError as err:
        raise CacheError(str(path), f"cannot create the cache directory: {err.strerror}") from None
    st = os.lstat(path)
    _is_directory(path, st)
    if not tagged(path):
        if not _adoptable(path, st):
            raise CacheError(str(path), "appeared while poot created it and is not poot's")
        _write_tag(path)
    _trusted(path, st)
    return path


def _write_tag(path: Path) -> None:
    """Publish the tag whole and without replacing anything: a hard link of a written
    temporary file, which fails if the name exists. Another poot's tag there is fine; any other
    file is the user's, kept, and the directory refused."""
    try:
        fd, tmp = temp_file(path)
    except OSError as err:
        if err.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise CacheError(str(path), f"cannot write there: {err.strerror}") from None
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(TAG)
        try:
            os.link(tmp, path / TAG_NAME)
        except OSError as err:  # a file system without hard links: create it exclusively
            if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            with os.fdopen(os.open(path / TAG_NAME, flags, 0o600), "wb") as f:
                f.write(TAG)
    except FileExistsError:
        if not tagged(path):
            raise CacheError(
                str(path / TAG_NAME), "appeared while poot tagged the directory; it is kept"
            ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
