"""The compiled-blob cache: one file per artifact, keyed by the artifact's full identity.

Key: the sha256 of the device identity (part, compiler, compiler version, compiler options) and
the artifact source bytes, each length-prefixed (``blob_key``). The blob itself is never the
key: OpenVINO's CPU blobs are not byte-deterministic, and a compiler run is what we avoid.

Layout: ``<root>/<key>.blob``, the root ``0700`` and tagged as poot's (which directory is the
root for the one a user names, and why poot never changes a directory it did not create:
``cache_root``), every entry ``0600``. An entry is::

    magic  b"POOTBLB1"           8 bytes
    key    sha256 digest          32 bytes   the key the entry was published under
    meta   u32 length + UTF-8 JSON           who compiled it (part, compiler, version), for ``ls``
    blob   u64 length + bytes
    digest sha256 of all of the above, 32 bytes

The digest is checked on every read, because a blob format may carry no checksum of its own (a
truncated OpenVINO CPU blob can import and run silently). Publication is atomic: a temporary
file in the same directory, written, fsynced, renamed over the entry, then the directory is
fsynced; concurrent writers of one key each publish a whole valid entry and the last rename
wins, so readers never see a partial file and no lock is needed.

What is refused and what is replaced:

- A root reached through a symlink, owned by another user, open to group or others, or not a
  directory is a ``CacheError``: the cache cannot be made safe without trusting someone else's
  directory, and poot never chmods a directory.
- An entry that is a symlink, owned by another user, group or other accessible, not a regular
  file, empty, truncated, damaged (digest mismatch) or foreign (its header carries another key:
  an entry swapped in from elsewhere) is reported by ``get`` as a miss with that status; the
  engine recompiles and ``put`` replaces it (unlinking a symlink, never following it), and
  counts a repair.

``clear`` removes only what poot wrote: an entry whose header names its key or whose digest
holds, and, in a root poot tagged, a leftover temporary file whose name is exactly poot's form
(``cache_root.is_temp_name``: poot's prefix and 16 random hex digits), a regular file of ours
with mode ``0600``; anything else is kept (a user's ``.tmp-notes.txt`` is not poot's).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from poot_ir import CacheError

from poot_engine.cache_root import (
    SUFFIX,
    cache_root,
    default_cache_dir,
    is_temp_name,
    tagged,
    temp_file,
)

__all__ = [
    "BlobCache",
    "CacheEntry",
    "Cleared",
    "EntryStatus",
    "Lookup",
    "blob_key",
    "clear",
    "default_cache_dir",
    "ls",
    "verify",
]

MAGIC = b"POOTBLB1"
_DIGEST = 32
_HEAD = len(MAGIC) + _DIGEST  # magic and key
_MIN_SIZE = _HEAD + 4 + 8 + _DIGEST  # empty meta and blob
_KEY_DOMAIN = b"poot blob key v1\0"


class EntryStatus(Enum):
    """What reading one entry found. Every status but ``OK`` and ``MISSING`` is a repair."""

    OK = "ok"
    MISSING = "missing"
    EMPTY = "empty"
    TRUNCATED = "truncated"  # shorter than its header or its recorded lengths say
    DAMAGED = "damaged"  # bad magic, bad lengths or a digest mismatch
    FOREIGN = "foreign"  # a valid entry published under another key
    SYMLINK = "symlink"
    WRONG_OWNER = "wrong owner"
    WRONG_MODE = "wrong mode"  # readable or writable by group or other
    NOT_A_FILE = "not a file"


@dataclass(frozen=True, slots=True)
class Lookup:
    """The result of ``BlobCache.get``: the blob when ``status`` is ``OK``, else ``None``."""

    status: EntryStatus
    blob: bytes | None = None


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One entry as ``ls`` and ``verify`` report it; ``mtime`` in seconds since the epoch."""

    key: str
    path: Path
    size: int
    mtime: float
    status: EntryStatus
    meta: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Cleared:
    """What ``clear`` did in ``root``: the files it removed and those it kept because poot did
    not write them (or, with ``only_bad``, because they verified)."""

    root: Path
    removed: tuple[Path, ...]
    kept: tuple[Path, ...]


def blob_key(
    part: str, compiler: str, version: str, options: tuple[tuple[str, str], ...], source: bytes
) -> str:
    """The hex sha256 of an artifact's full identity. Fields are length-prefixed, so no two
    different identities encode alike."""
    h = hashlib.sha256(_KEY_DOMAIN)
    fields = [part.encode(), compiler.encode(), version.encode()]
    fields.append(struct.pack(">Q", len(options)))
    for name, value in options:
        fields += [name.encode(), value.encode()]
    fields.append(source)
    for f in fields:
        h.update(struct.pack(">Q", len(f)))
        h.update(f)
    return h.hexdigest()


def _encode(key: str, blob: bytes, meta: Mapping[str, str]) -> bytes:
    m = json.dumps(dict(sorted(meta.items())), separators=(",", ":")).encode()
    body = b"".join(
        (
            MAGIC,
            bytes.fromhex(key),
            struct.pack(">I", len(m)),
            m,
            struct.pack(">Q", len(blob)),
            blob,
        )
    )
    return body + hashlib.sha256(body).digest()


def _decode(
    key: str, data: bytes, digest: bool = True
) -> tuple[EntryStatus, bytes | None, dict[str, str]]:
    """Check one entry's bytes against ``key``: the status, the blob and the metadata. Without
    ``digest`` only the header, the lengths and the key are checked (what ``ls`` does)."""
    if not data:
        return EntryStatus.EMPTY, None, {}
    if len(data) < _MIN_SIZE:
        return EntryStatus.TRUNCATED, None, {}
    if data[: len(MAGIC)] != MAGIC:
        return EntryStatus.DAMAGED, None, {}
    body = data[:-_DIGEST]
    (mlen,) = struct.unpack_from(">I", data, _HEAD)
    at = _HEAD + 4 + mlen
    if at + 8 > len(body):
        return EntryStatus.TRUNCATED, None, {}
    (blen,) = struct.unpack_from(">Q", data, at)
    if at + 8 + blen > len(body):
        return EntryStatus.TRUNCATED, None, {}
    if at + 8 + blen < len(body):
        return EntryStatus.DAMAGED, None, {}
    if digest and hashlib.sha256(body).digest() != data[-_DIGEST:]:
        return EntryStatus.DAMAGED, None, {}
    try:
        meta = {str(k): str(v) for k, v in json.loads(body[_HEAD + 4 : at]).items()}
    except (ValueError, AttributeError):
        return EntryStatus.DAMAGED, None, {}
    if data[len(MAGIC) : _HEAD] != bytes.fromhex(key):
        return EntryStatus.FOREIGN, None, meta
    return EntryStatus.OK, body[at + 8 :], meta


def _read(path: Path) -> tuple[EntryStatus, bytes]:
    """Open one entry safely (never through a symlink) and return its bytes, or why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return EntryStatus.MISSING, b""
    except OSError as err:
        if err.errno == errno.ELOOP:
            return EntryStatus.SYMLINK, b""
        if err.errno == errno.EISDIR:
            return EntryStatus.NOT_A_FILE, b""
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return EntryStatus.NOT_A_FILE, b""
        if st.st_uid != os.geteuid():
            return EntryStatus.WRONG_OWNER, b""
        if st.st_mode & 0o077:
            return EntryStatus.WRONG_MODE, b""
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return EntryStatus.OK, b"".join(chunks)
    finally:
        os.close(fd)


class BlobCache:
    """The blob cache for the directory ``root`` names (``cache_root``; created ``0700`` if
    absent). Safe across processes."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = cache_root(root, create=True)

    def path(self, key: str) -> Path:
        if len(key) != 2 * _DIGEST or any(c not in "0123456789abcdef" for c in key):
            raise CacheError(str(self.root), f"{key!r} is not a blob key (64 lowercase hex digits)")
        return self.root / (key + SUFFIX)

    def get(self, key: str) -> Lookup:
        """The blob published under ``key``, verified; or a miss with the reason."""
        status, data = _read(self.path(key))
        if status is not EntryStatus.OK:
            return Lookup(status)
        status, blob, _ = _decode(key, data)
        return Lookup(status, blob)

    def put(self, key: str, blob: bytes, meta: Mapping[str, str] | None = None) -> None:
        """Publish ``blob`` under ``key`` atomically, replacing whatever entry was there."""
        final = self.path(key)
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(final)
            if stat.S_ISDIR(st.st_mode):
                raise CacheError(str(final), "an entry is a directory; remove it by hand")
        fd, tmp = temp_file(self.root)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(key, blob, meta or {}))
                f.flush()
                os.fsync(f.fileno())
            # rename replaces a symlink itself, never its target
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.root)

    def temp_file(self, suffix: str = "") -> tuple[int, Path]:
        """A new ``0600`` file in the root, named as poot's temporaries are (``cache_root.
        temp_file``), so ``clear`` can tell a leftover one from a user's file."""
        return temp_file(self.root, suffix)

    def discard(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(key))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the small API behind ``poot cache ls|verify|clear`` ----------------------------------------


def _entries(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.endswith(SUFFIX))


def _describe(path: Path, full: bool) -> CacheEntry | None:
    """One entry, or None when it is gone (another process cleared or replaced it since the
    directory was listed)."""
    key = path.name[: -len(SUFFIX)]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    status, data = _read(path)
    if status is EntryStatus.MISSING:
        return None
    meta: dict[str, str] = {}
    if status is EntryStatus.OK:
        status, _, meta = _decode(key, data, digest=full)
    return CacheEntry(key, path, st.st_size, st.st_mtime, status, tuple(sorted(meta.items())))


def ls(root: Path | str | None = None) -> list[CacheEntry]:
    """Every entry with its key, size, mtime and status from a header check (no digest).
    Nothing is created or changed."""
    found = (_describe(p, full=False) for p in _entries(cache_root(root, create=False)))
    return [e for e in found if e is not None]


def verify(root: Path | str | None = None) -> list[CacheEntry]:
    """Every entry, read whole and its digest checked. Nothing is created or changed."""
    found = (_describe(p, full=True) for p in _entries(cache_root(root, create=False)))
    return [e for e in found if e is not None]


def _written_by_poot(path: Path) -> bool | None:
    """An entry poot published: its digest holds (``OK`` or ``FOREIGN``), or its header names
    the key its file is named for (a damaged or truncated entry of ours). None when it is gone."""
    status, data = _read(path)
    if status is EntryStatus.MISSING:
        return None
    if status is not EntryStatus.OK:
        return False
    key = path.name[: -len(SUFFIX)]
    if _decode(key, data)[0] in (EntryStatus.OK, EntryStatus.FOREIGN):
        return True
    with contextlib.suppress(ValueError):
        return data[:_HEAD] == MAGIC + bytes.fromhex(key)
    return False


def clear(root: Path | str | None = None, only_bad: bool = False) -> Cleared:
    """Remove every entry poot wrote (or, with ``only_bad``, those of them ``verify`` does not
    find OK) and, in a root poot tagged, temporary files a killed writer left behind. Files
    poot did not write are kept and listed; the directory itself is never changed."""
    base = cache_root(root, create=False)
    removed: list[Path] = []
    kept: list[Path] = []
    for entry in verify(base):
        ours = _written_by_poot(entry.path)
        if ours is None:  # removed meanwhile by a concurrent clear: neither removed nor kept
            continue
        if (only_bad and entry.status is EntryStatus.OK) or not ours:
            kept.append(entry.path)
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
            removed.append(entry.path)
    if not only_bad and base.is_dir() and tagged(base):
        uid = os.geteuid()
        for tmp in sorted(p for p in base.iterdir() if is_temp_name(p.name)):
            try:
                st = os.lstat(tmp)
            except FileNotFoundError:  # published or removed meanwhile
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o600:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                    removed.append(tmp)
    return Cleared(base, tuple(removed), tuple(kept))
