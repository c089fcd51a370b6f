"""The packages import only to their left: ir <- planner <- codegen <- engine <- npu <- poot.

Read from the source with ``ast`` (every import, lazy ones inside functions included), so a
violation fails here before it can become a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = ["poot_ir", "poot_planner", "poot_codegen", "poot_engine", "poot_npu", "poot"]
SOURCES = {
    "poot_ir": ROOT / "packages/poot-ir/src/poot_ir",
    "poot_planner": ROOT / "packages/poot-planner/src/poot_planner",
    "poot_codegen": ROOT / "packages/poot-codegen/src/poot_codegen",
    "poot_engine": ROOT / "packages/poot-engine/src/poot_engine",
    "poot_npu": ROOT / "packages/poot-npu/src/poot_npu",
    "poot": ROOT / "src/poot",
}


def _imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in ORDER)
    return found


@pytest.mark.parametrize("package", ORDER)
def test_imports_run_only_to_the_left(package: str) -> None:
    allowed = set(ORDER[: ORDER.index(package) + 1])
    for path in sorted(SOURCES[package].rglob("*.py")):
        bad = _imported_packages(path) - allowed
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}, right of {package}"


def test_every_package_ships_py_typed() -> None:
    for package, src in SOURCES.items():
        assert (src / "py.typed").is_file(), f"{package} has no py.typed"


def test_poot_ir_alone_needs_numpy_and_ml_dtypes_only() -> None:
    code = (
        "import sys, poot_ir\n"
        "heavy = sorted(m for m in ('onnx', 'openvino', 'rich', 'poot_planner') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import poot_ir also imported {out.stdout.strip()}"


@pytest.mark.parametrize("package", ORDER)
def test_each_package_imports_alone(package: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {package}"], check=True)
