"""Which directory the cache lives in: poot never changes a directory it did not create."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from filetree import tree
from poot_engine import cache_root as cache_root_module
from poot_engine.blob_cache import BlobCache, blob_key, clear, ls, verify
from poot_engine.cache_root import TAG, TEMP_PREFIX, cache_root, is_temp_name
from poot_ir import CacheError

KEY = blob_key("part", "cc", "1", (), b"src")


def foreign_dir(path: Path) -> Path:
    """A directory poot did not create: a mode poot never sets, files poot did not write,
    some of them named like poot's entries and temporaries."""
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    (path / "model.blob").write_bytes(b"not poot's")
    (path / (KEY + ".blob")).write_bytes(b"POOTBLB1 but not an entry")
    (path / ".tmp-mine").write_bytes(b"mine too")
    (path / "sub").mkdir()
    path.chmod(0o751)
    return path


def test_a_fresh_directory_is_created_owner_only_and_tagged(tmp_path: Path) -> None:
    root = cache_root(tmp_path / "a" / "b", create=True)
    assert root == tmp_path / "a" / "b"
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert (root / "CACHEDIR.TAG").read_bytes() == TAG
    assert cache_root(root, create=True) == root  # recognised as poot's the second time


def test_read_only_resolution_writes_nothing(tmp_path: Path) -> None:
    assert cache_root(tmp_path / "absent", create=False) == tmp_path / "absent"
    assert not (tmp_path / "absent").exists()
    d = foreign_dir(tmp_path / "d")
    before = tree(d)
    assert cache_root(d, create=False) == d / "poot"
    assert tree(d) == before


def test_a_foreign_directory_keeps_its_mode_and_files(tmp_path: Path) -> None:
    d = foreign_dir(tmp_path / "d")
    before = tree(d)
    cache = BlobCache(d)
    assert cache.root == d / "poot"
    cache.put(KEY, b"blob")
    after = tree(d)
    assert {k: v for k, v in after.items() if k != "." and not k.startswith("poot")} == {
        k: v for k, v in before.items() if k != "."
    }
    assert stat.S_IMODE(after["."][0]) == 0o751
    assert stat.S_IMODE(os.stat(d / "poot").st_mode) == 0o700
    # clear removes poot's entry from its own subdirectory and nothing of the user's
    done = clear(d)
    assert done.removed == (cache.path(KEY),)
    assert {k: v for k, v in tree(d).items() if k != "." and not k.startswith("poot")} == {
        k: v for k, v in before.items() if k != "."
    }


def test_an_untagged_subdirectory_or_unsafe_tagged_root_is_refused(tmp_path: Path) -> None:
    d = foreign_dir(tmp_path / "d")
    (d / "poot").mkdir(mode=0o700)
    (d / "poot" / "x").write_text("someone else's poot/ directory")
    with pytest.raises(CacheError, match="not poot's cache"):
        BlobCache(d)
    with pytest.raises(CacheError, match="not poot's cache"):
        ls(d)
    tagged = tmp_path / "tagged"
    BlobCache(tagged)
    tagged.chmod(0o755)
    with pytest.raises(CacheError, match="mode 0755"):
        verify(tagged)
    assert stat.S_IMODE(os.stat(tagged).st_mode) == 0o755  # refused, never chmodded


def test_an_empty_directory_of_ours_is_adopted(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir(mode=0o700)
    assert BlobCache(d).root == d
    assert (d / "CACHEDIR.TAG").is_file()


def test_clear_in_a_directory_holding_entry_lookalikes(tmp_path: Path) -> None:
    """In poot's own directory, a file named like an entry but not written by poot (no header
    naming its key, no valid digest) is kept and reported, not deleted."""
    cache = BlobCache(tmp_path / "c")
    cache.put(KEY, b"ours")
    other = blob_key("part", "cc", "1", (), b"other")
    lookalike = cache.root / (other + ".blob")
    lookalike.write_bytes(b"a user's file that happens to have this name")
    lookalike.chmod(0o600)
    damaged = bytearray(cache.path(KEY).read_bytes())
    damaged[-1] ^= 1
    cache.path(KEY).write_bytes(bytes(damaged))  # ours, damaged: header still names the key
    done = clear(cache.root, only_bad=True)
    assert done.removed == (cache.path(KEY),) and done.kept == (lookalike,)
    assert lookalike.read_bytes().startswith(b"a user's file")


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory owned by another uid needs root")
def test_root_is_never_chmodded(tmp_path: Path) -> None:
    mode = os.stat("/").st_mode
    assert ls("/") == [] and verify("/") == []
    assert clear("/").removed == ()
    assert os.stat("/").st_mode == mode and not Path("/poot").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    os.chown(foreign, 12345, 12345)
    assert BlobCache(foreign).root == foreign / "poot"  # ours, inside theirs
    assert stat.S_IMODE(os.stat(foreign).st_mode) == 0o755


def test_clear_removes_only_temporaries_of_poots_exact_form(tmp_path: Path) -> None:
    """issue 26: in poot's own directory ``cache clear`` removed every ``.tmp-*`` file. Only a
    name of exactly poot's form (``TEMP_PREFIX`` and 16 hex digits), a regular file of ours with
    mode 0600, in a directory carrying poot's own tag, is a leftover of poot's."""
    cache = BlobCache(tmp_path / "c")
    assert cache.root == tmp_path / "c"
    fd, ours = cache.temp_file(".so")
    os.close(fd)
    assert is_temp_name(ours.name) and stat.S_IMODE(ours.stat().st_mode) == 0o600
    users = {
        ".tmp-notes.txt": 0o600,
        TEMP_PREFIX + "notes": 0o600,
        TEMP_PREFIX + "0123456789abcdef.txt.bak": 0o600,
        TEMP_PREFIX + "0123456789abcdeg": 0o600,
        TEMP_PREFIX + "0123456789abcdef": 0o644,  # poot makes its temporaries 0600
    }
    for name, mode in users.items():
        (cache.root / name).write_text("the user's")
        (cache.root / name).chmod(mode)
    assert clear(cache.root).removed == (ours,)
    assert sorted(p.name for p in cache.root.iterdir()) == sorted([*users, "CACHEDIR.TAG"])


def test_a_directory_tagged_by_someone_else_is_not_poots(tmp_path: Path) -> None:
    """A ``CACHEDIR.TAG`` that is not poot's (another tool's) neither makes a directory poot's
    nor lets ``clear`` remove anything there; it is never written over."""
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    theirs = b"Signature: 8a477f597d28d172789f06886806bc55\n# another tool\n"
    (d / "CACHEDIR.TAG").write_bytes(theirs)
    (d / (TEMP_PREFIX + "0123456789abcdef")).write_bytes(b"x")
    (d / (TEMP_PREFIX + "0123456789abcdef")).chmod(0o600)
    assert BlobCache(d).root == d / "poot"
    assert clear(d).removed == ()
    assert (d / "CACHEDIR.TAG").read_bytes() == theirs
    assert (d / (TEMP_PREFIX + "0123456789abcdef")).exists()


def test_the_tag_never_replaces_a_file_that_appeared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty directory is adopted and tagged; a user's file appearing under the tag's name
    between the check and the write is kept and the directory refused, not overwritten."""
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    real = cache_root_module.temp_file

    def racing(directory: Path, suffix: str = "") -> tuple[int, Path]:
        (directory / "CACHEDIR.TAG").write_bytes(b"the user's, written just now")
        return real(directory, suffix)

    monkeypatch.setattr(cache_root_module, "temp_file", racing)
    with pytest.raises(CacheError, match="appeared"):
        BlobCache(d)
    assert (d / "CACHEDIR.TAG").read_bytes() == b"the user's, written just now"
    assert sorted(p.name for p in d.iterdir()) == ["CACHEDIR.TAG"]


def test_a_tag_being_published_by_another_poot_is_waited_for(tmp_path: Path) -> None:
    """The race CI met: one process adopted the empty directory and wrote its tag's temporary
    file; the others must wait for the tag, not move to ``D/poot``."""
    import threading

    tmp_path.chmod(0o700)
    temp = tmp_path / f"{TEMP_PREFIX}{'ab' * 8}"
    temp.write_bytes(TAG)
    temp.chmod(0o600)

    def publish() -> None:
        os.link(temp, tmp_path / "CACHEDIR.TAG")
        temp.unlink()

    timer = threading.Timer(0.05, publish)
    timer.start()
    try:
        assert cache_root(tmp_path, create=True) == tmp_path
    finally:
        timer.join()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CACHEDIR.TAG"]


def test_a_tag_that_never_comes_is_waited_for_boundedly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_root_module, "_TAG_WAIT_SECONDS", 0.05)
    tmp_path.chmod(0o700)
    stale = tmp_path / f"{TEMP_PREFIX}{'cd' * 8}"
    stale.write_bytes(b"half a tag")
    assert cache_root(tmp_path, create=True) == tmp_path / "poot"
    assert stale.read_bytes() == b"half a tag"
