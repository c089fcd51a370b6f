"""Build generated XDNA2 kernel C with the host C compiler, for hardware-free tests.

A kernel poot generates for the XDNA2 is plain scalar C over ``csrc/poot_math.h``; the source
Peano builds for the AIE core also builds here, as a shared library that ctypes loads. Libraries
are cached on disk under the sha256 of everything that decides the binary: the compiler's
identity (its path and ``--version`` output), the flags, the source and every header in
``csrc``. An entry is published by an atomic rename, so a reader never sees a partial library;
two processes building the same source at once both compile and the last rename wins.

Errors: ``ToolchainUnavailable`` when the compiler is not on this machine (unavailable, not
unsupported), ``CompileFailed`` carrying the compiler's own log when it rejects the source.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from poot_ir.errors import CompileFailed, ToolchainUnavailable

__all__ = ["CSRC_DIR", "DEFAULT_COMPILERS", "HOST_CFLAGS", "build_library", "load_library"]

CSRC_DIR: Final = Path(__file__).parent / "csrc"
"""The include directory of the kernels' C support headers (``poot_math.h``)."""

HOST_CFLAGS: Final = ("-O2", "-std=c11", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math")
"""IEEE f32 semantics as on the core: no fused multiply-add, no fast-math, no -march=native."""

DEFAULT_COMPILERS: Final = ("cc", "gcc")
"""Looked up on PATH in this order when the caller names no compiler."""


def build_library(source: str, cache_dir: Path, *, compiler: str | None = None) -> Path:
    """Return the path of the shared library built from ``source``, compiling it on a cache miss.

    ``compiler`` is a name looked up on PATH or a path; by default ``cc``, then ``gcc``. Raises
    ``ToolchainUnavailable`` naming the compiler when it cannot be found or run, and
    ``CompileFailed`` with the compiler's log when it rejects the source.
    """
    cc = _find_compiler(compiler)
    target = cache_dir / f"poot_host_{_cache_key(_identity(cc), source)}.so"
    if not target.is_file():
        _compile(cc, source, target)
    return target


def load_library(source: str, cache_dir: Path, *, compiler: str | None = None) -> ctypes.CDLL:
    """Build ``source`` as ``build_library`` does and load it with ctypes.

    A cached entry that does not load (damaged or truncated by something outside poot) is
    deleted, rebuilt and loaded again.
    """
    path = build_library(source, cache_dir, compiler=compiler)
    try:
        return ctypes.CDLL(str(path))
    except OSError:
        path.unlink(missing_ok=True)
    return ctypes.CDLL(str(build_library(source, cache_dir, compiler=compiler)))


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
    digest = hashlib.sha256()

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


def _compile(cc: Path, source: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
        src = Path(scratch) / "kernel.c"
        out = Path(scratch) / "kernel.so"
        src.write_text(source, encoding="utf-8")
        done = _run(cc, [*HOST_CFLAGS, "-I", str(CSRC_DIR), str(src), "-o", str(out)])
        if done.returncode != 0:
            raise CompileFailed(str(cc), done.stderr + done.stdout, "generated kernel C")
        os.replace(out, target)  # same directory, so the rename is atomic
