"""``poot cache`` never damages a directory poot did not create, and a read-only command line
writes nothing under a fresh home."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from filetree import tree

from poot.cli import EXAMPLES, main

KEYLIKE = "ab" * 32 + ".blob"


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A user's directory: files poot did not write (two named like poot's) and mode 0751."""
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("years of work")
    (d / KEYLIKE).write_bytes(b"a user's file with an entry's name")
    (d / "old.blob").write_bytes(b"not poot's")
    (d / ".tmp-draft").write_bytes(b"also not poot's")
    (d / "nested").mkdir()
    (d / "nested" / "x.blob").write_bytes(b"x")
    d.chmod(0o751)
    return d


@pytest.mark.parametrize(
    "command", [["ls"], ["verify"], ["clear"], ["clear", "--bad"]], ids=" ".join
)
def test_every_cache_command_leaves_a_foreign_directory_unchanged(
    capsys: pytest.CaptureFixture[str], foreign: Path, command: list[str]
) -> None:
    before = tree(foreign)
    code = main(["--cache-dir", str(foreign), "cache", *command])
    out = capsys.readouterr().out
    assert code == 0, out
    assert tree(foreign) == before
    if command[0] == "clear":
        assert "removed 0 files" in out


def test_a_run_writes_only_into_poots_subdirectory_and_clear_removes_only_that(
    capsys: pytest.CaptureFixture[str], foreign: Path
) -> None:
    before = {k: v for k, v in tree(foreign).items() if k != "."}
    argv = ["--cache-dir", str(foreign), "run", str(EXAMPLES / "embedding.poot"), "--steps", "1"]
    assert main(argv) == 0
    ours = foreign / "poot"
    assert stat.S_IMODE(os.stat(foreign).st_mode) == 0o751
    assert stat.S_IMODE(os.stat(ours).st_mode) == 0o700
    entries = sorted(p.name for p in ours.glob("*.blob"))
    assert len(entries) == 1
    capsys.readouterr()
    assert main(["--cache-dir", str(foreign), "cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 file" in out and entries[0] in out
    after = {k: v for k, v in tree(foreign).items() if k != "." and not k.startswith("poot")}
    assert after == before
    assert list(ours.glob("*.blob")) == []


def test_an_empty_cache_dir_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--cache-dir", "", "cache", "ls"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "must not be empty" in err


def test_read_only_commands_write_nothing_under_a_fresh_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env["HOME"] = str(home)
    for argv in (
        ["cache", "ls"],
        ["cache", "verify"],
        ["cache", "clear"],
        ["plan", str(EXAMPLES / "layernorm.poot"), "--target", "cpu"],
        ["features"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "poot", *argv], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (argv, done.stderr)
        assert list(home.rglob("*")) == [], argv


def test_xdna_host_kernel_libraries_live_in_the_engines_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    run = ["--cache-dir", str(cache), "run", str(EXAMPLES / "rmsnorm_step.poot")]
    run += ["--target", "xdna2", "--device", "xdna-host", "--steps", "1"]
    assert main(run) == 0
    capsys.readouterr()
    libraries = [p for p in cache.glob("*.blob") if b"host kernel library" in p.read_bytes()[:400]]
    assert len(libraries) == 1 and stat.S_IMODE(libraries[0].stat().st_mode) == 0o600
    data = bytearray(libraries[0].read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4] = b"\xde\xad\xbe\xef"  # a 4-byte edit
    libraries[0].write_bytes(bytes(data))
    assert main(["--cache-dir", str(cache), "cache", "verify"]) == 1
    assert "damaged" in capsys.readouterr().out
    assert main(run) == 0  # rebuilt and replaced, results checked against the oracle
    assert main(["--cache-dir", str(cache), "cache", "verify"]) == 0
    capsys.readouterr()
    assert main(["--cache-dir", str(cache), "cache", "clear"]) == 0
    assert libraries[0].name in capsys.readouterr().out
    assert list(cache.glob("*.blob")) == []


USER_TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# my backup tool's tag, not poot's\n"


@pytest.mark.parametrize(
    "files",
    [
        {".tmp-notes.txt": b"my notes"},  # named like the temporaries poot once wrote
        {"CACHEDIR.TAG": USER_TAG, ".tmp-a": b"a", ".tmp-b.so": b"b"},  # the user's own tag
    ],
    ids=["tmp-notes", "own-tag"],
)
def test_a_users_owner_only_directory_is_never_adopted_for_its_file_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: dict[str, bytes]
) -> None:
    """issue 26: a user's ``0700`` directory holding only ``.tmp-notes.txt`` was adopted as the
    cache (tagged), and ``cache clear`` printed ``removed .tmp-notes.txt``; one with the user's
    own ``CACHEDIR.TAG`` had it overwritten with poot's. The cache goes into ``D/poot``; every
    file of the user's keeps its bytes through a run and a clear."""
    d = tmp_path / "mine"
    d.mkdir(mode=0o700)
    for name, data in files.items():
        (d / name).write_bytes(data)
    before = tree(d)
    argv = ["--cache-dir", str(d), "run", str(EXAMPLES / "embedding.poot"), "--steps", "1"]
    assert main(argv) == 0
    assert len(list((d / "poot").glob("*.blob"))) == 1
    capsys.readouterr()
    assert main(["--cache-dir", str(d), "cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 file" in out and not any(name in out for name in files)
    after = {k: v for k, v in tree(d).items() if k != "." and not k.startswith("poot")}
    assert after == {k: v for k, v in before.items() if k != "."}
    assert {n: (d / n).read_bytes() for n in files} == files
