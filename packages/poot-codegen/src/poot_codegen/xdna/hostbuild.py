"""Build generated XDNA2 kernel C with the host C compiler, for hardware-free tests.

A kernel poot generates for the XDNA2 is plain scalar C over ``csrc/poot_math.h``; the source
Peano builds for the AIE core also builds here, as a shared library that ctypes loads.

The libraries live in the engine's blob cache (``poot_engine.blob_cache``, passed in as a
``LibraryCache``: this package sits left of the engine), one entry per library, so they get
its guarantees and ``poot cache ls|verify|clear`` cover them: the root owner-only and poot's
own, never another user's; the key the sha256 of everything that decides the binary (the
compiler's path and ``--version`` output, the flags, the source and every header in ``csrc``);
the entry's digest checked on every read; publication atomic. The digest proves the bytes,
not whose library they are, so each library names the key it was built for: the source is
compiled with one more definition, ``poot_library_key``, the string ``LIBRARY_MARK`` followed
by the key, and an entry whose bytes do not hold that exact string is not loaded (issue 26:
another program's library under this key, its digest valid, was loaded and crashed the
process in its kernels). A library is never loaded from the entry file: its verified bytes are
copied to a fresh owner-only file in the cache root (a temporary of the cache's, which ``poot
cache clear`` removes if a crash leaves it), loaded, and that file unlinked at once, so
nothing can change the bytes between the check and ``dlopen``. A missing, damaged, foreign or
misnamed entry, or one that does not load, is rebuilt and replaced. The compiler works in a
private scratch directory under the system temp dir.

Errors: ``ToolchainUnavailable`` when the compiler is not on this machine (unavailable, not
unsupported), ``CompileFailed`` carrying the compiler's own log when it rejects the source.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Protocol

from poot_ir.errors import CompileFailed, ToolchainUnavailable

__all__ = [
    "CSRC_DIR",
    "DEFAULT_COMPILERS",
    "HOST_CFLAGS",
    "LibraryCache",
    "build_library",
    "library_key",
    "load_library",
]

CSRC_DIR: Final = Path(__file__).parent / "csrc"
"""The include directory of the kernels' C support headers (``poot_math.h``)."""

HOST_CFLAGS: Final = ("-O2", "-std=c11", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math")
"""IEEE f32 semantics as on the core: no fused multiply-add, no fast-math, no -march=native."""

DEFAULT_COMPILERS: Final = ("cc", "gcc")
"""Looked up on PATH in this order when the caller names no compiler."""

_KEY_DOMAIN: Final = b"poot host kernel library v2\0"  # v2: the library names its key

LIBRARY_MARK: Final = b"poot host kernel library for key "
"""What a library's ``poot_library_key`` string starts with; the 64 hex digits of its key follow."""


class _Found(Protocol):
    @property
    def blob(self) -> bytes | None: ...


class LibraryCache(Protocol):
    """What this module needs of ``poot_engine.blob_cache.BlobCache``."""

    @property
    def root(self) -> Path: ...

    def get(self, key: str) -> _Found: ...

    def put(self, key: str, blob: bytes, meta: Mapping[str, str] | None = None) -> None: ...

    def temp_file(self, suffix: str = "") -> tuple[int, Path]: ...


def library_key(source: str, *, compiler: str | None = None) -> str:
    """The cache key of the library built from ``source`` by ``compiler`` (see the module)."""
    cc = _find_compiler(compiler)
    return _cache_key(_identity(cc), source)


def build_library(source: str, cache: LibraryCache, *, compiler: str | None = None) -> str:
    """Make sure the library built from ``source`` is in ``cache``, compiling it on a miss (or
    over a damaged entry); return its key.

    ``compiler`` is a name looked up on PATH or a path; by default ``cc``, then ``gcc``. Raises
    ``ToolchainUnavailable`` naming the compiler when it cannot be found or run, and
    ``CompileFailed`` with the compiler's log when it rejects the source.
    """
    cc = _find_compiler(compiler)
    identity = _identity(cc)
    key = _cache_key(identity, source)
    if not _names(key, cache.get(key).blob):
        _publish(cache, key, cc, identity, _compile(cc, source, key))
    return key


def load_library(source: str, cache: LibraryCache, *, compiler: str | None = None) -> ctypes.CDLL:
    """Build ``source`` as ``build_library`` does and load it with ctypes from a private copy
    of its verified bytes. An entry that verifies but is not the library of this key (it does
    not name the key) is never loaded; it, or one that does not load, is rebuilt and replaced."""
    cc = _find_compiler(compiler)
    identity = _identity(cc)
    key = _cache_key(identity, source)
    data = cache.get(key).blob
    if data is not None and _names(key, data):
        with contextlib.suppress(OSError):
            return _dlopen(data, cache)
    data = _compile(cc, source, key)
    _publish(cache, key, cc, identity, data)
    return _dlopen(data, cache)


def _names(key: str, data: bytes | None) -> bool:
    """Whether the library ``data`` was built for ``key``: it holds the key's mark (a string
    constant, NUL-terminated, so a longer key cannot pass for it)."""
    return data is not None and LIBRARY_MARK + key.encode() + b"\0" in data


def _marked(source: str, key: str) -> str:
    """``source`` with the definition that names ``key`` in the built library."""
    mark = (LIBRARY_MARK + key.encode()).decode()
    return f'{source}\n__attribute__((used)) const char poot_library_key[] = "{mark}";\n'


def _publish(cache: LibraryCache, key: str, cc: Path, identity: str, data: bytes) -> None:
    version = identity.split("\n", 2)[1] if "\n" in identity else ""
    meta = {"part": "host kernel library", "compiler": str(cc), "version": version}
    cache.put(key, data, meta)


def _dlopen(data: bytes, cache: LibraryCache) -> ctypes.CDLL:
    """Load ``data`` through a fresh file only we can write, unlinked once loaded. Each load is
    a new inode, so the dynamic loader never hands back an older library under a reused name."""
    fd, path = cache.temp_file(".so")  # mode 0600, named as the cache's temporaries
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(str(path))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _find_compiler(compiler: str | None) -> Path:
    names = DEFAULT_COMPILERS if compiler is None else (compiler,)
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return Path(found)
    raise ToolchainUnavailable(names[0], f"host C compiler, looked for {' or '.join(names)}")


def _run(cc: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([str(cc), *args], capture_output=True, text=True, check=False)
    except OSError as error:  # vanished or not executable since it was found
        raise ToolchainUnavailable(str(cc), str(error)) from error


def _identity(cc: Path) -> str:
    done = _run(cc, ["--version"])
    if done.returncode != 0:
        raise ToolchainUnavailable(str(cc), f"--version exited with status {done.returncode}")
    return f"{cc}\n{done.stdout}"


def _cache_key(identity: str, source: str) -> str:
    digest = hashlib.sha256(_KEY_DOMAIN)

    def part(data: bytes) -> None:  # length-prefixed, so no two inputs hash alike
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    part(identity.encode())
    part("\0".join(HOST_CFLAGS).encode())
    part(source.encode())
    for header in sorted(CSRC_DIR.glob("*.h")):
        part(header.name.encode())
        part(header.read_bytes())
    return digest.hexdigest()


def _compile(cc: Path, source: str, key: str) -> bytes:
    """The shared library ``cc`` builds from ``source``, naming ``key`` (``_marked``), in a
    private scratch directory."""
    with tempfile.TemporaryDirectory(prefix="poot-cc-") as scratch:
        src = Path(scratch) / "kernel.c"
        out = Path(scratch) / "kernel.so"
        src.write_text(_marked(source, key), encoding="utf-8")
        done = _run(cc, [*HOST_CFLAGS, "-I", str(CSRC_DIR), str(src), "-o", str(out)])
        if done.returncode != 0:
            raise CompileFailed(str(cc), done.stderr + done.stdout, "generated kernel C")
        return out.read_bytes()
