"""The shared ``filetree.tree`` (the root conftest's home check, the cache-directory tests): it
sees every path, the root included, and every change of mode, contents or mtime."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from filetree import tree


def test_every_path_with_its_mode_contents_and_mtime(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"\x00abc")
    (tmp_path / "link").symlink_to("d/f")
    (tmp_path / "dangling").symlink_to("nowhere")
    got = tree(tmp_path)
    assert sorted(got) == [".", "d", "d/f", "dangling", "link"]
    for name, (mode, _, mtime) in got.items():
        st = os.lstat(tmp_path / name)
        assert (mode, mtime) == (st.st_mode, st.st_mtime_ns)
    assert got["d/f"][1] == b"\x00abc"
    assert stat.S_ISLNK(got["link"][0]) and got["link"][1] is None  # not followed
    assert got["."][1] is None and got["d"][1] is None


def test_a_same_size_rewrite_with_its_mtime_restored_is_a_change(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"same")
    before = tree(tmp_path)
    st = f.stat()
    f.write_bytes(b"SAME")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = tree(tmp_path)
    assert after != before and after["f"][0::2] == before["f"][0::2]


def test_a_mode_change_is_a_change(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    os.chmod(tmp_path / "f", 0o644)
    os.chmod(tmp_path, 0o700)
    before = tree(tmp_path)
    os.chmod(tmp_path / "f", 0o600)
    os.chmod(tmp_path, 0o751)
    after = tree(tmp_path)
    assert [stat.S_IMODE(before[k][0]) for k in (".", "f")] == [0o700, 0o644]
    assert [stat.S_IMODE(after[k][0]) for k in (".", "f")] == [0o751, 0o600]
