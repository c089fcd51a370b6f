"""The blob cache on its own: format, permissions, every fault it must detect, ls/verify/clear,
and concurrent publication of one key."""

from __future__ import annotations

import multiprocessing
import os
import stat
from collections.abc import Callable
from pathlib import Path

import engine_support
import pytest
from poot_engine.blob_cache import (
    BlobCache,
    EntryStatus,
    blob_key,
    clear,
    default_cache_dir,
    ls,
    verify,
)
from poot_ir import CacheError

KEY_A = blob_key("part", "cc", "1.0", (("opt", "x"),), b"source a")
KEY_B = blob_key("part", "cc", "1.0", (("opt", "x"),), b"source b")


def test_key_covers_every_identity_field() -> None:
    base = ("part", "cc", "1.0", (("o", "1"),), b"src")
    keys = {
        blob_key(*base),
        blob_key("part2", *base[1:]),
        blob_key(base[0], "cc2", *base[2:]),
        blob_key(*base[:2], "1.1", *base[3:]),
        blob_key(*base[:3], (("o", "2"),), base[4]),
        blob_key(*base[:3], (), base[4]),
        blob_key(*base[:4], b"src2"),
        # length-prefixing: moving bytes between fields changes the key
        blob_key("partc", "c", "1.0", (("o", "1"),), b"src"),
    }
    assert len(keys) == 8
    assert blob_key(*base) == blob_key(*base)


def test_round_trip_and_permissions(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "cache"
    cache = BlobCache(root)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert cache.get(KEY_A).status is EntryStatus.MISSING
    cache.put(KEY_A, b"\x00blob\xff" * 100, {"part": "p"})
    found = cache.get(KEY_A)
    assert found.status is EntryStatus.OK and found.blob == b"\x00blob\xff" * 100
    assert stat.S_IMODE(os.stat(cache.path(KEY_A)).st_mode) == 0o600
    cache.put(KEY_A, b"", {})  # an empty blob is a valid entry
    assert cache.get(KEY_A).blob == b""
    # no temporary left; the tag marks the directory as poot's
    assert sorted(p.name for p in root.iterdir()) == [KEY_A + ".blob", "CACHEDIR.TAG"]


def test_default_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "poot"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert default_cache_dir() == Path.home() / ".cache" / "poot"


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _replace(path: Path, make: Callable[[], None]) -> None:
    path.unlink()
    make()


FAULTS: dict[str, Callable[[Path, Path], object]] = {
    "truncated": lambda p, o: p.write_bytes(p.read_bytes()[:-1]),
    "half": lambda p, o: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "flipped payload": lambda p, o: _flip(p, len(p.read_bytes()) - 40),
    "flipped digest": lambda p, o: _flip(p, len(p.read_bytes()) - 1),
    "flipped key": lambda p, o: _flip(p, 10),
    "empty": lambda p, o: p.write_bytes(b""),
    "swapped": lambda p, o: p.write_bytes(o.read_bytes()),
    "wrong mode": lambda p, o: p.chmod(0o644),
    "wrong owner": lambda p, o: os.chown(p, 12345, 12345),
    "symlink": lambda p, o: _replace(p, lambda: p.symlink_to(o)),
    "directory": lambda p, o: _replace(p, p.mkdir),
}
EXPECTED = {
    "truncated": EntryStatus.TRUNCATED,
    "half": EntryStatus.TRUNCATED,
    "flipped payload": EntryStatus.DAMAGED,
    "flipped digest": EntryStatus.DAMAGED,
    "flipped key": EntryStatus.DAMAGED,
    "empty": EntryStatus.EMPTY,
    "swapped": EntryStatus.FOREIGN,
    "wrong mode": EntryStatus.WRONG_MODE,
    "wrong owner": EntryStatus.WRONG_OWNER,
    "symlink": EntryStatus.SYMLINK,
    "directory": EntryStatus.NOT_A_FILE,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_are_detected_and_replaced(tmp_path: Path, fault: str) -> None:
    if fault == "wrong owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    cache = BlobCache(tmp_path)
    cache.put(KEY_A, b"payload of a" * 10)
    cache.put(KEY_B, b"payload of b" * 10)
    victim, other = cache.path(KEY_A), cache.path(KEY_B)
    FAULTS[fault](victim, other)
    assert cache.get(KEY_A).status is EXPECTED[fault]
    assert {e.key: e.status for e in verify(tmp_path)}[KEY_A] is EXPECTED[fault]
    if fault == "directory":
        with pytest.raises(CacheError):
            cache.put(KEY_A, b"new")
        return
    cache.put(KEY_A, b"fresh")
    assert cache.get(KEY_A).blob == b"fresh"
    assert cache.get(KEY_B).blob == b"payload of b" * 10  # a symlink's target is untouched
    assert not victim.is_symlink()


def test_unsafe_roots_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(CacheError, match="symlink"):
        BlobCache(link)
    afile = tmp_path / "file"
    afile.write_bytes(b"")
    with pytest.raises(CacheError, match="not a directory"):
        BlobCache(afile)
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        BlobCache(foreign)  # poot's own, then handed to another user
        os.chown(foreign, 12345, 12345)
        with pytest.raises(CacheError, match="owned by uid 12345"):
            BlobCache(foreign)
    # a directory of ours that is open to others is not chmodded: poot uses its own
    # subdirectory there; the same directory tagged as poot's is refused, not tightened
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    assert BlobCache(loose).root == loose / "poot"
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(loose / "poot").st_mode) == 0o700
    (loose / "poot").chmod(0o750)
    with pytest.raises(CacheError, match="mode 0750"):
        BlobCache(loose)
    assert stat.S_IMODE(os.stat(loose / "poot").st_mode) == 0o750
    with pytest.raises(CacheError, match="empty"):
        BlobCache("")


def test_ls_verify_clear(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path)
    cache.put(KEY_A, b"a" * 64, {"part": "npu", "compiler": "vpux", "version": "1.38"})
    cache.put(KEY_B, b"b" * 64)
    left = tmp_path / ".poot-tmp-0123456789abcdef"  # a temporary file a killed writer left
    left.write_bytes(b"x")
    left.chmod(0o600)
    _flip(cache.path(KEY_B), len(cache.path(KEY_B).read_bytes()) - 40)
    listed = {e.key: e for e in ls(tmp_path)}
    assert set(listed) == {KEY_A, KEY_B}
    # ls reads headers only; verify hashes every entry
    assert listed[KEY_B].status is EntryStatus.OK
    assert dict(listed[KEY_A].meta) == {"compiler": "vpux", "part": "npu", "version": "1.38"}
    assert listed[KEY_A].size == cache.path(KEY_A).stat().st_size and listed[KEY_A].mtime > 0
    verified = {e.key: e.status for e in verify(tmp_path)}
    assert verified == {KEY_A: EntryStatus.OK, KEY_B: EntryStatus.DAMAGED}
    assert clear(tmp_path, only_bad=True).removed == (cache.path(KEY_B),)
    assert [e.key for e in ls(tmp_path)] == [KEY_A]
    done = clear(tmp_path)  # the entry and the temporary file
    assert set(done.removed) == {cache.path(KEY_A), left}
    assert [p.name for p in tmp_path.iterdir()] == ["CACHEDIR.TAG"]
    assert ls(tmp_path / "absent") == []


def test_concurrent_publication_leaves_one_valid_entry(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        blobs = pool.map(engine_support.publish_one_key, [str(tmp_path)] * 4)
    assert blobs == [b"the same blob" * 1000] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "CACHEDIR.TAG",
        engine_support.RACE_KEY + ".blob",
    ]
    assert [e.status for e in verify(tmp_path)] == [EntryStatus.OK]
