"""``poot import|plan|run module:function``: a JAX function where the CLI takes an ``.onnx`` file
(``poot.pyref``), run under the jax session's environment; an unsupported one is refused with
every blocker and its user's line, and nothing is written or run."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")

import numpy as np  # noqa: E402
from poot_ir import parse_program  # noqa: E402
from poot_ir.oracle import evaluate  # noqa: E402

from poot.cli import main  # noqa: E402

_ids = itertools.count()

SOURCE = """
import jax, jax.numpy as jnp
import numpy as np

W = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)

def block(x, ids):
    h = jax.nn.gelu(x @ W)
    return jax.nn.softmax(h, axis=-1) + ids[:, None].astype(jnp.float32)

def sorted_twice(x):
    y = jnp.sort(x)
    return jnp.sin(jnp.sort(y * 2.0))
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"user_model_{next(_ids)}"  # a fresh name: the process keeps imported modules
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_import_writes_the_program_and_its_weights(module: str, tmp_path: Path) -> None:
    out = tmp_path / "block.poot"
    argv = ["import", f"{module}:block", "--shape", "x=2x8", "--shape", "ids=2:int32", "-o"]
    assert main([*argv, str(out)]) == 0
    program = parse_program(out.read_text())
    weights = dict(np.load(out.with_suffix(".npz")))
    assert [a.name for a in program.args] == ["x", "ids", "const0"]
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    ids = np.array([1, 3], np.int32)
    user = __import__(module)
    got = evaluate(program, {"x": x, "ids": ids, **weights})["out"]
    np.testing.assert_allclose(got, np.asarray(jax.jit(user.block)(x, ids)), rtol=1e-5)


def test_run_partitioned_on_a_stand_in(module: str, tmp_path: Path) -> None:
    argv = ["--cache-dir", str(tmp_path), "run", f"{module}:block", "--shape", "x=2x8"]
    argv += ["--shape", "ids=2:int32", "--device", "xdna-host", "--partition", "--steps", "2"]
    assert main(argv) == 0


def test_an_unsupported_function_lists_every_blocker_and_its_line(
    module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = f"{module}:sorted_twice"
    assert main(["import", ref, "--shape", "x=5", "--check"]) == 1
    out = capsys.readouterr().out
    assert "sort (primitive)" in out and "sin (primitive)" in out
    assert f"{module}.py:12 (sorted_twice)" in out  # the first sort
    assert f"{module}.py:13 (sorted_twice)" in out  # the second sort and sin
    assert "2 blocker(s)" in out
    target = tmp_path / "never.poot"
    assert main(["import", ref, "--shape", "x=5", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert "UnsupportedJax" in err and "every blocker" in err and "sin (primitive)" in err
    assert not target.exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["import", "no_such_module_x:f", "--shape", "x=2"], "cannot import module"),
        (["import", "{m}:nothing", "--shape", "x=2"], "has no function 'nothing'"),
        (["import", "{m}:block", "--shape", "x=2x8"], "--shape ids=AxB"),
        (["import", "{m}:block", "--shape", "y=2"], "has no parameter 'y'"),
        (["import", "{m}:block", "--shape", "x=2x8:float64"], "element type 'float64'"),
    ],
)
def test_bad_references_are_input_errors(
    module: str, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.replace("{m}", module) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "InputError" in err and says in err
