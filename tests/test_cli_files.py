"""The files the command line reads and writes (issue 26): a path that is not a regular file
is refused before it is opened (a FIFO blocked ``poot plan`` until killed), a program larger
than the limit is refused unread, an ``.npz`` numpy cannot parse is typed, every output path is
checked before the work starts (``poot acceptance -o DIR`` ran every check and then crashed),
and ``poot generate`` checks its memory before allocating. Each refusal is exit status 2 and
one ``error: InputError: ...`` line (``BudgetExceeded`` for the memory)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cli_errors import check_error_lines

from poot.cli import EXAMPLES, main

PROGRAM = "program p\n  slot x %0: f32[2]\n  %1: f32[2] = neg %0\nend\n"


def _refused(capsys: pytest.CaptureFixture[str], *argv: str, error: str = "InputError") -> str:
    """``main(argv)`` exits 2 with one error line naming ``error``; returns the line."""
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, (argv, code, err)
    assert check_error_lines(err) == [error], err
    return err


def _poot(*argv: str, timeout: float = 60, limit_as: int | None = None) -> tuple[int, str]:
    """``poot argv`` in a process of its own (what may hang or exhaust memory is killed, not
    the test run): exit status and stderr."""

    def limits() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    done = subprocess.run(
        [sys.executable, "-m", "poot", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        preexec_fn=limits,
    )
    return done.returncode, done.stderr


# -- reading: regular files only, refused before they are opened -------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "p.poot"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "{fifo}"),
        ("run", "{fifo}"),
        ("import", "{fifo_onnx}"),
        ("run", str(EXAMPLES / "row_stats.poot"), "--inputs", "{fifo}"),
        ("acceptance", "--compare", "{fifo}", "{fifo}"),
    ],
    ids=["plan", "run", "import", "run --inputs", "acceptance --compare"],
)
def test_a_fifo_is_refused_not_waited_on(fifo: Path, argv: tuple[str, ...]) -> None:
    """Each of these blocked until killed (the open of a FIFO waits for a writer)."""
    onnx = fifo.with_suffix(".onnx")
    os.mkfifo(onnx)
    args = [a.format(fifo=fifo, fifo_onnx=onnx) for a in argv]
    try:
        code, err = _poot(*args, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"poot {' '.join(args)} waited on a FIFO")
    assert code == 2 and "error: InputError:" in err and "a FIFO, not a regular file" in err, err
    check_error_lines(err)


def test_a_directory_or_a_device_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert "a directory, not a regular file" in _refused(capsys, "plan", str(tmp_path))
    assert "a device, not a regular file" in _refused(capsys, "plan", "/dev/null")
    assert "cannot read it" in _refused(capsys, "plan", str(tmp_path / "missing.poot"))


def test_a_program_over_the_limit_is_refused_unread(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A 200 MB one-line program (sparse: nothing is written) is refused by its size, before it
    is read (it was read and parsed whole); no timing is asserted, the message is the size's."""
    big = tmp_path / "big.poot"
    with big.open("wb") as f:
        f.truncate(200 << 20)
    err = _refused(capsys, "plan", str(big))
    assert f"is {200 << 20} bytes, over the limit of {16 << 20}" in err


def test_the_program_limit_is_settable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.poot"
    path.write_text(PROGRAM)
    size = len(PROGRAM)
    # at the limit it is read; one byte under, refused
    assert main(["--max-program-bytes", str(size), "plan", str(path), "--target", "cpu"]) == 0
    capsys.readouterr()
    err = _refused(capsys, "--max-program-bytes", str(size - 1), "plan", str(path))
    assert f"over the limit of {size - 1}" in err and "--max-program-bytes" in err
    monkeypatch.setenv("POOT_MAX_PROGRAM_BYTES", str(size - 1))
    assert f"over the limit of {size - 1}" in _refused(capsys, "plan", str(path))
    monkeypatch.setenv("POOT_MAX_PROGRAM_BYTES", "lots")
    assert "POOT_MAX_PROGRAM_BYTES" in _refused(capsys, "plan", str(path))


def _npz_with_header(path: Path, header: bytes) -> None:
    """An ``.npz`` whose one member is a version 1.0 ``.npy`` with ``header`` as its header."""
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", npy)


@pytest.mark.parametrize(
    "header",
    [
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,\n",  # tokenize.TokenError
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)\n",  # SyntaxError
        b"{'descr': '<f4', 'fortran_order': False}\n",  # a key missing
    ],
    ids=["unclosed", "unbalanced", "no shape"],
)
def test_an_npz_whose_header_does_not_parse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, header: bytes
) -> None:
    """The first raised tokenize.TokenError out of numpy's header filter."""
    inputs = tmp_path / "in.npz"
    _npz_with_header(inputs, header)
    program = str(EXAMPLES / "row_stats.poot")
    err = _refused(capsys, "--cache-dir", str(tmp_path), "run", program, "--inputs", str(inputs))
    assert f"inputs {inputs}" in err and "not plain data" in err


def test_an_npz_declaring_an_array_over_the_budget_is_refused_unread(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A 200-byte member whose header declares 4 TB: numpy allocated it (MemoryError, a
    traceback) before finding the data short."""
    inputs = tmp_path / "in.npz"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }\n"
    _npz_with_header(inputs, header)
    program = str(EXAMPLES / "row_stats.poot")
    err = _refused(
        capsys, "--cache-dir", str(tmp_path), "run", program, "--inputs", str(inputs),
        error="BudgetExceeded",
    )  # fmt: skip
    assert f"inputs {inputs} needs 3.6 TiB" in err


# -- writing: every output path checked before the work -----------------------------------------


@pytest.fixture
def no_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``run_acceptance`` replaced by a recorder: a refused ``-o`` must leave it uncalled."""
    import poot.acceptance.cli as acceptance_cli
    from poot.acceptance.checks import Check, Receipt

    ran: list[str] = []

    def run(info: object, progress: object) -> Receipt:
        ran.append(str(info))
        return Receipt({"part": "p", "kind": "stand-in"}, {}, [Check("a check", True)])

    monkeypatch.setattr(acceptance_cli, "run_acceptance", run)
    return ran


@pytest.mark.parametrize("where", ["a directory", "/dev/full", "a missing parent", "a file"])
def test_acceptance_checks_its_output_before_any_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_checks: list[str], where: str
) -> None:
    """``-o DIR`` ran every check and then crashed (IsADirectoryError), losing the receipt."""
    (tmp_path / "a_file").write_text("")
    out = {
        "a directory": str(tmp_path),
        "/dev/full": "/dev/full",
        "a missing parent": str(tmp_path / "missing" / "r.json"),
        "a file": str(tmp_path / "a_file" / "r.json"),
    }[where]
    err = _refused(capsys, "acceptance", "--device", "cpu", "-o", out)
    assert f"receipt {out}: cannot write it" in err
    assert no_checks == []


def test_a_receipt_that_cannot_be_written_after_the_checks_is_kept(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    no_checks: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The output directory vanishes while the checks run: the error is typed and names a
    file holding the receipt."""
    import poot.acceptance.cli as acceptance_cli

    where = tmp_path / "out"
    where.mkdir()
    record = acceptance_cli.run_acceptance

    def vanishing(info: object, progress: object) -> object:
        shutil.rmtree(where)
        return record(info, progress)  # type: ignore[arg-type]

    monkeypatch.setattr(acceptance_cli, "run_acceptance", vanishing)
    err = _refused(capsys, "acceptance", "--device", "cpu", "-o", str(where / "r.json"))
    assert no_checks and "cannot write it" in err and "the receipt is kept in " in err
    kept = Path(err.rsplit("the receipt is kept in ", 1)[1].strip())
    try:
        assert json.loads(kept.read_text())["checks"][0]["name"] == "a check"
    finally:
        kept.unlink()


def test_a_receipt_is_written_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_checks: list[str]
) -> None:
    out = tmp_path / "r.json"
    out.write_text("an older receipt, longer than the new one " * 100)
    assert main(["acceptance", "--device", "cpu", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["passed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary left


def test_import_checks_both_outputs_before_importing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights' path (beside the program) is checked with the program's, before the
    import: a directory named like the weights file is refused and nothing is written."""
    import poot.cli as cli

    imported: list[str] = []
    monkeypatch.setattr(cli, "_import_onnx", lambda path, shapes: imported.append(path))
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    (tmp_path / "m.npz").mkdir()
    err = _refused(capsys, "import", str(model), "-o", str(tmp_path / "m.poot"))
    assert f"weights {tmp_path / 'm.npz'}: cannot write it" in err
    assert imported == [] and not (tmp_path / "m.poot").exists()


# -- memory: checked before the allocation ------------------------------------------------------


def test_generate_with_too_many_steps_is_over_the_budget() -> None:
    """``--steps 100000000`` grew the cache to 10^8 positions and ran out of memory (a
    traceback). In a process limited to 4 GiB of address space, so the machine is safe even
    where the check is missing."""
    code, err = _poot("generate", "tiny-decoder", "--steps", "100000000", limit_as=4 << 30)
    assert code == 2 and "error: BudgetExceeded: generate tiny-decoder, 100000000 steps" in err
    check_error_lines(err)


@pytest.mark.parametrize("host", [[], ["--host", "oracle"]])
def test_generate_within_the_budget_runs(
    host: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "tiny-decoder", "--steps", "2", *host]) == 0
    assert "Tokens" in capsys.readouterr().out


def test_an_npz_holding_more_than_the_budget_is_refused_unpacked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = tmp_path / "in.npz"
    np.savez_compressed(inputs, x=np.zeros((32, 48), np.float32))  # 6 KiB unpacked
    program = str(EXAMPLES / "row_stats.poot")
    err = _refused(
        capsys,
        "--memory-budget",
        "4K",
        "--cache-dir",
        str(tmp_path),
        "run",
        program,
        "--inputs",
        str(inputs),
        error="BudgetExceeded",
    )
    assert f"inputs {inputs}" in err
