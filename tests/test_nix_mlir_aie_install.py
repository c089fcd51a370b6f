"""The mlir-aie derivation's install step (``nix/pkgs/merge-extras.sh``, run by
``nix/pkgs/mlir-aie.nix``'s postInstall), run with bash against a tree laid out like the v1.1
wheel: ``mlir_aie/python/aie`` with ``aie/extras/types.py`` and ``meta.py`` (upstream MLIR's,
no ``__init__.py``: llvm-project ``mlir/python/CMakeLists.txt`` declares only those two), and
a tree laid out like the mlir-python-extras fork (``mlir/extras/{__init__,util}.py``,
``runtime/passes.py``, ``dialects/ext/arith.py``). After it, the modules aiecc and
``aie.dialects.aie`` import from both sides all import, in a fresh interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "nix" / "pkgs" / "merge-extras.sh"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="no bash")

WHEEL = {
    "aie/__init__.py": "",
    "aie/extras/types.py": "WHO = 'upstream types'\n",
    "aie/extras/meta.py": "def region_op():\n    return 'upstream meta'\n",
}
FORK = {
    "mlir/extras/__init__.py": "",
    "mlir/extras/util.py": "def find_ops():\n    return 'fork util'\n",
    "mlir/extras/runtime/__init__.py": "",
    "mlir/extras/runtime/passes.py": "class Pipeline:\n    WHO = 'fork passes'\n",
    "mlir/extras/dialects/__init__.py": "",
    "mlir/extras/dialects/ext/__init__.py": "",
    "mlir/extras/dialects/ext/arith.py": "WHO = 'fork arith'\n",
}
IMPORTS = """
import aie.extras.types as t, aie.extras.meta as m, aie.extras.util as u
import aie.extras.runtime.passes as p, aie.extras.dialects.ext.arith as a
print(t.WHO, m.region_op(), u.find_ops(), p.Pipeline.WHO, a.WHO, sep='|')
"""


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _merge(src: Path, dst: Path) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run(
        [BASH, str(SCRIPT), str(src), str(dst)], capture_output=True, text=True, check=False
    )


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    site, fork = tmp_path / "site" / "mlir_aie" / "python", tmp_path / "fork"
    _tree(site, WHEEL)
    _tree(fork, FORK)
    return site, fork


def test_the_fork_merges_into_the_wheels_extras_and_both_import(tmp_path: Path) -> None:
    site, fork = _layout(tmp_path)
    done = _merge(fork / "mlir" / "extras", site / "aie" / "extras")
    assert done.returncode == 0, done.stderr
    assert not (site / "aie" / "extras" / "extras").exists()  # no `cp -r` nesting
    assert (site / "aie" / "extras" / "runtime" / "passes.py").is_file()
    ran = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"},
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "upstream types|upstream meta|fork util|fork passes|fork arith"


def test_a_file_the_wheel_has_is_never_overwritten(tmp_path: Path) -> None:
    site, fork = _layout(tmp_path)
    (fork / "mlir" / "extras" / "types.py").write_text("WHO = 'fork types'\n")
    done = _merge(fork / "mlir" / "extras", site / "aie" / "extras")
    assert done.returncode == 1
    assert "would overwrite the wheel's own aie/extras files: types.py" in done.stderr
    # refused before anything was copied
    assert (site / "aie" / "extras" / "types.py").read_text() == WHEEL["aie/extras/types.py"]
    assert not (site / "aie" / "extras" / "util.py").exists()


def test_a_merge_missing_what_aiecc_imports_fails(tmp_path: Path) -> None:
    site, fork = _layout(tmp_path)
    (fork / "mlir" / "extras" / "runtime" / "passes.py").unlink()
    done = _merge(fork / "mlir" / "extras", site / "aie" / "extras")
    assert done.returncode == 1 and "runtime/passes.py is missing" in done.stderr


def test_the_derivation_runs_this_script_on_the_wheels_extras() -> None:
    nix = (ROOT / "nix" / "pkgs" / "mlir-aie.nix").read_text()
    assert 'bash ${./merge-extras.sh} ${mlir-python-extras}/mlir/extras "$site/aie/extras"' in nix
    assert "cp -r" not in nix.split("postInstall", 1)[1]
