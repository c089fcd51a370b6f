"""``poot import module:function`` where jax is absent (the workspace's Python 3.11): a typed
error naming the missing extra and how to get it. Under jax the path is tested by
``packages/poot-jax/tests/test_jax_cli.py`` (``nox -s jax``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from poot.cli import main
from poot.pyref import is_reference


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="jax is installed here")
def test_a_reference_without_jax_names_the_extra(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "f.poot"
    assert main(["import", "mymodel:forward", "--shape", "x=2x3", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: InputError: mymodel:forward:" in err
    assert "jax" in err and "Python 3.12" in err and "poot-jax[jax]" in err
    assert not out.exists()
    assert main(["run", "mymodel:forward", "--shape", "x=2x3"]) == 2
    assert "poot-jax[jax]" in capsys.readouterr().err


def test_what_counts_as_a_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_reference("pkg.models:forward")
    assert not is_reference("model.onnx") and not is_reference("C:/x.onnx")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a:b").write_text("")  # an existing file of that name is a file
    assert not is_reference("a:b")
