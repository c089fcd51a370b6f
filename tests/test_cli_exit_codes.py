"""Exit statuses of the command line: a run the target or the device refuses exits 1, bad input
exits 2 (``poot.exit_codes``), and the README's table names each public ``PootError`` class
under the status its class gives."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import poot_codegen.xdna.design  # noqa: F401  (DesignError: loaded so the tree is whole)
import poot_npu.registry
import poot_npu.xdna_contexts  # noqa: F401  (ContextLimit)
import pytest
from cli_errors import check_error_lines, is_public, public_errors

from poot.cli import EXAMPLES, main
from poot.exit_codes import BAD_INPUT, REFUSALS, Exit, exit_code

ROOT = Path(__file__).resolve().parents[1]


def _readme_rows() -> dict[int, set[str]]:
    """The class names (in backticks) of the README's exit-status table, by status."""
    text = (ROOT / "README.md").read_text()
    rows: dict[int, set[str]] = {}
    for line in text.splitlines():
        if m := re.match(r"^\| ([012]) \|(.*)\|(.*)\|$", line):
            rows[int(m[1])] = set(re.findall(r"`([A-Z][A-Za-z]+)`", m[3]))
    return rows


def test_every_public_error_class_is_in_the_readme_under_its_status() -> None:
    rows = _readme_rows()
    public = {
        n: c for n, c in public_errors().items() if is_public(c) and c.__name__ != "PootError"
    }
    for name, cls in public.items():
        status = 1 if issubclass(cls, REFUSALS) else 2
        assert name in rows[status], f"{name} (exit {status}) is not in the README's row {status}"
        assert name not in rows[3 - status], f"{name} is in both rows"
    assert rows[1] | rows[2] <= set(public), (rows[1] | rows[2]) - set(public)
    assert all(issubclass(c, BAD_INPUT) for c in public.values() if not issubclass(c, REFUSALS))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, check_error_lines(out.err)  # type: ignore[return-value]


def test_an_input_the_device_refuses_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # an input is known only at run time; vpu-cpu refuses one FP16 cannot hold (65504 at
    # most) before the step: the target's refusal, not bad input (it exited 2). (A weight
    # given with the inputs is known when planning: refused by the plan, exit 1 as well.)
    program = tmp_path / "x.poot"
    program.write_text(
        "program x\n  slot x %0: f32[4]\n  %1: f32[4] = mul %0 %0\n  output y = %1\nend\n"
    )
    np.savez(tmp_path / "in.npz", x=np.full(4, 1e6, np.float32))
    code, _, err = _run(
        capsys, "--cache-dir", str(tmp_path), "run", str(program), "--device", "vpu-cpu",
        "--inputs", str(tmp_path / "in.npz"), "--steps", "1",
    )  # fmt: skip
    assert (code, err) == (Exit.REFUSED, ["NarrowingRangeInput"])


def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", nope=np.ones(4, np.float32))
    code, _, err = _run(
        capsys, "run", str(EXAMPLES / "row_stats.poot"), "--inputs", str(tmp_path / "in.npz")
    )
    assert (code, err) == (Exit.BAD_INPUT, ["InputError"])


def test_the_classes_give_their_status() -> None:
    from poot_ir import DomainFlagged, NarrowingRangeUpload, ParseError, StepInputError

    assert exit_code(DomainFlagged(0, 3, (1,))) is Exit.REFUSED
    assert exit_code(NarrowingRangeUpload("w", (0,), float("-inf"), 65504.0)) is Exit.REFUSED
    assert exit_code(ParseError("bad", 1, 1)) is Exit.BAD_INPUT
    assert exit_code(StepInputError("bad")) is Exit.BAD_INPUT
