"""A directory tree as data, for tests that must show a directory unchanged (or changed)."""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["Tree", "tree"]

#: Path (relative to the root, the root itself ``"."``) to its mode, contents and mtime (ns).
Tree = dict[str, tuple[int, bytes | None, int]]


def tree(root: Path) -> Tree:
    """``root`` and every path under it with its mode, contents (regular files; None for the
    rest) and mtime in ns, none followed through a symlink. Contents, not sizes: a rewrite of
    the same length within the mtime's resolution is still a change."""
    out: Tree = {}
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(p.relative_to(root))] = (st.st_mode, data, st.st_mtime_ns)
    return out
