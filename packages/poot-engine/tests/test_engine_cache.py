"""The blob cache under the engine: a second run compiles nothing, every damaged entry is
recompiled, replaced and counted, and racing processes all get correct results."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import engine_support
import numpy as np
import pytest
from engine_support import CountingDevice, affine_program, run_affine, running_sum_program
from poot_engine import CpuDevice, Engine, EntryStatus
from poot_engine.blob_cache import blob_key, verify
from poot_ir import CacheError

EXPECTED = [[1.0] * 4, [3.0, 4.0, 5.0, 6.0], [6.0, 9.0, 12.0, 15.0]]


def _session(cache: Path) -> tuple[list[list[float]], tuple[int, int, int]]:
    return run_affine(str(cache))


def _entry_path(cache: Path) -> Path:
    (path,) = cache.glob("*.blob")
    return path


def test_a_second_engine_compiles_nothing(tmp_path: Path) -> None:
    assert _session(tmp_path) == (EXPECTED, (1, 0, 0))
    device = CountingDevice()
    with Engine(device, cache_dir=tmp_path) as engine:
        weights = engine.load_weights({"w": np.array([1, 2, 3, 4], np.float32)})
        engine.add_entry(affine_program(), weights)
        engine.add_entry(affine_program(), weights)  # and the same engine reuses it as well
        s = engine.stats()
        assert (s.compiles, s.cache_hits, s.cache_repairs) == (0, 2, 0)
    assert device.calls["compile"] == 0


def test_the_key_is_the_full_identity(tmp_path: Path) -> None:
    with Engine(CpuDevice(), cache_dir=tmp_path) as engine:
        engine.add_entry(running_sum_program(4))
        engine.add_entry(running_sum_program(5))  # another source
    with Engine(CpuDevice("intel-npu4"), cache_dir=tmp_path) as engine:
        engine.add_entry(running_sum_program(4))  # another target option, a narrowed source
        assert engine.stats().compiles == 1
    assert len(list(tmp_path.glob("*.blob"))) == 3
    device = CpuDevice()
    from poot_planner import plan

    source = device.lower(plan(running_sum_program(4), "cpu"))
    i = device.identity
    key = blob_key(i.part, i.compiler, i.compiler_version, i.options, source.data)
    assert (tmp_path / f"{key}.blob").exists()


def _truncate(p: Path, other: Path) -> None:
    p.write_bytes(p.read_bytes()[:-7])


def _flip(p: Path, other: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x20
    p.write_bytes(bytes(data))


def _swap(p: Path, other: Path) -> None:
    a, b = p.read_bytes(), other.read_bytes()
    p.write_bytes(b)
    other.write_bytes(a)


def _owner(p: Path, other: Path) -> None:
    os.chown(p, 4242, 4242)


def _mode(p: Path, other: Path) -> None:
    p.chmod(0o644)


def _symlink(p: Path, other: Path) -> None:
    p.unlink()
    p.symlink_to(other)


def _empty(p: Path, other: Path) -> None:
    p.write_bytes(b"")


def _refused(p: Path, other: Path) -> None:
    # a well-formed entry (right key, right digest) the device will not load
    from poot_engine.blob_cache import BlobCache

    BlobCache(p.parent).put(p.name.removesuffix(".blob"), b"\xff not a program")


FAULTS = {
    "truncated": (_truncate, EntryStatus.TRUNCATED),
    "flipped byte": (_flip, EntryStatus.DAMAGED),
    "swapped": (_swap, EntryStatus.FOREIGN),
    "wrong owner": (_owner, EntryStatus.WRONG_OWNER),
    "wrong mode": (_mode, EntryStatus.WRONG_MODE),
    "symlink": (_symlink, EntryStatus.SYMLINK),
    "empty": (_empty, EntryStatus.EMPTY),
    "refused by the device": (_refused, EntryStatus.OK),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_damaged_entry_is_recompiled_replaced_and_counted(tmp_path: Path, fault: str) -> None:
    if fault == "wrong owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    cache, decoy = tmp_path / "cache", tmp_path / "decoy"
    _session(cache)
    with Engine(CpuDevice(), cache_dir=decoy) as engine:  # another program's entry
        engine.add_entry(running_sum_program(7))
    victim = _entry_path(cache)
    other = cache / _entry_path(decoy).name
    os.replace(_entry_path(decoy), other)
    inject, status = FAULTS[fault]
    inject(victim, other)
    assert {e.key: e.status for e in verify(cache)}[victim.stem] is status
    assert _session(cache) == (EXPECTED, (1, 0, 1))  # correct results, one repair
    assert _session(cache) == (EXPECTED, (0, 1, 0))  # and the entry is whole again
    assert not victim.is_symlink() and victim.stat().st_mode & 0o777 == 0o600
    assert victim.stat().st_uid == os.geteuid()


def test_a_symlinked_cache_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(CacheError, match="symlink"):
        Engine(CpuDevice(), cache_dir=tmp_path / "link")


def test_the_default_cache_dir_is_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with Engine(CpuDevice()) as engine:
        assert engine.cache.root == tmp_path / "poot"
        engine.add_entry(running_sum_program())
    assert len(list((tmp_path / "poot").glob("*.blob"))) == 1


def test_racing_processes_leave_one_valid_entry(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(engine_support.run_affine, [str(tmp_path)] * 4)
    for outs, (compiles, hits, repairs) in results:
        assert outs == EXPECTED
        assert compiles + hits == 1 and repairs == 0
    assert [e.status for e in verify(tmp_path)] == [EntryStatus.OK]
    assert not list(tmp_path.glob(".poot-tmp-*"))
    assert _session(tmp_path)[1] == (0, 1, 0)
