"""``poot cache ls|verify|clear`` while another process clears the same cache: an entry that
vanishes between the directory listing and its reading is neither a traceback nor "kept (not
written by poot)". Each race is made deterministic by removing the file at the point where a
concurrent ``clear`` could."""

from __future__ import annotations

from pathlib import Path

import pytest
from poot_engine import blob_cache
from poot_engine.blob_cache import BlobCache, blob_key, clear, ls, verify

KEYS = [blob_key("part", "cc", "1.0", (), f"source {i}".encode()) for i in range(3)]


def _cache(tmp_path: Path) -> BlobCache:
    cache = BlobCache(tmp_path)
    for k in KEYS:
        cache.put(k, k.encode() * 4)
    return cache


def test_an_entry_gone_after_the_listing_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(tmp_path)
    listed = blob_cache._entries

    def then_cleared(root: Path) -> list[Path]:
        paths = listed(root)
        cache.path(KEYS[0]).unlink()  # the other process's clear, right after our listing
        return paths

    monkeypatch.setattr(blob_cache, "_entries", then_cleared)
    assert [e.key for e in ls(tmp_path)] == sorted(KEYS[1:])
    _cache(tmp_path)
    assert [e.key for e in verify(tmp_path)] == sorted(KEYS[1:])
    _cache(tmp_path)
    done = clear(tmp_path)
    assert sorted(done.removed) == sorted(cache.path(k) for k in KEYS[1:])
    assert done.kept == ()


def test_an_entry_gone_after_verify_is_neither_removed_nor_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(tmp_path)
    verified = blob_cache.verify

    def then_cleared(root: Path) -> list[blob_cache.CacheEntry]:
        entries = verified(root)
        cache.path(KEYS[1]).unlink()
        (tmp_path / ".poot-tmp-00000000000000aa").write_bytes(b"x")
        (tmp_path / ".poot-tmp-00000000000000aa").chmod(0o600)
        return entries

    monkeypatch.setattr(blob_cache, "verify", then_cleared)
    done = clear(tmp_path)
    assert done.kept == ()  # before: the vanished entry was listed as "not written by poot"
    assert sorted(done.removed) == sorted(
        [cache.path(KEYS[0]), cache.path(KEYS[2]), tmp_path / ".poot-tmp-00000000000000aa"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CACHEDIR.TAG"]
