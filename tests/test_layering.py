"""The packages import only to their left: ir <- planner <- codegen <- engine <- npu <- poot, with
the ONNX frontend (onnx) beside the planner: it imports ir only, and only poot imports it. The
JAX frontend (poot_jax) imports ir only too, except its ``runner`` (``poot_jax.jit``), which runs
what it imports and so sits right of the devices (planner, engine, npu); it needs jax (Python
3.12+), so the checks that import it run in ``nox -s jax``'s environment and the source checks
run everywhere.

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
ORDER = ["poot_ir", "poot_onnx", "poot_planner", "poot_codegen", "poot_engine", "poot_npu", "poot"]
SOURCES = {
    "poot_ir": ROOT / "packages/poot-ir/src/poot_ir",
    "poot_onnx": ROOT / "packages/poot-onnx/src/poot_onnx",
    "poot_jax": ROOT / "packages/poot-jax/src/poot_jax",
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
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in SOURCES)
    return found


@pytest.mark.parametrize("package", [*ORDER, "poot_jax"])
def test_imports_run_only_to_the_left(package: str) -> None:
    # poot_jax sits beside poot_onnx: poot_ir only; its runner also plans and runs (not poot)
    allowed = (
        {"poot_ir", "poot_jax"} if package == "poot_jax" else set(ORDER[: ORDER.index(package) + 1])
    )
    runner = {"poot_planner", "poot_codegen", "poot_engine", "poot_npu"}
    for path in sorted(SOURCES[package].rglob("*.py")):
        extra = runner if package == "poot_jax" and path.name == "runner.py" else set()
        extra |= {"poot_jax"} if package == "poot" else set()  # poot import module:function
        bad = _imported_packages(path) - allowed - extra
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}, right of {package}"


def test_only_the_command_line_imports_the_onnx_frontend() -> None:
    # a frontend is a way in, not a layer: the planner and everything after it take programs
    for package in ORDER[ORDER.index("poot_planner") : ORDER.index("poot")]:
        for path in sorted(SOURCES[package].rglob("*.py")):
            assert "poot_onnx" not in _imported_packages(path), f"{path.relative_to(ROOT)}"
            assert "poot_jax" not in _imported_packages(path), f"{path.relative_to(ROOT)}"


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


def test_poot_onnx_alone_needs_poot_ir_and_onnx_only() -> None:
    code = (
        "import sys, poot_onnx\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('openvino', 'rich', 'poot_planner', 'poot_codegen', 'poot_engine', 'poot_npu'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import poot_onnx also imported {out.stdout.strip()}"


@pytest.mark.parametrize("package", ORDER)
def test_each_package_imports_alone(package: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {package}"], check=True)


def _module_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of the same package it imports (any import:
    at the top, under ``TYPE_CHECKING`` or inside a function; ``from pkg import name`` counts
    as importing ``pkg.name`` when that is a module, else ``pkg`` itself)."""
    src = SOURCES[package]
    modules = {
        ".".join((package, *p.relative_to(src).with_suffix("").parts)).removesuffix(".__init__")
        for p in src.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for path in sorted(src.rglob("*.py")):
        name = ".".join((package, *path.relative_to(src).with_suffix("").parts))
        name = name.removesuffix(".__init__")
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    found.add(sub if sub in modules else node.module)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


@pytest.mark.parametrize("package", [*ORDER, "poot_jax"])
def test_no_module_cycle_inside_the_package(package: str) -> None:
    # A package's __init__ re-exports its modules, so it is left out: a module importing the
    # package's own __init__ is reported as importing it, never a cycle through it.
    graph = {m: deps - {package} for m, deps in _module_imports(package).items() if m != package}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycle = [*path[path.index(d) :], d] if d in path else [m, d]
                raise AssertionError(f"module cycle in {package}: {' -> '.join(cycle)}")
            if d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_no_public_name_means_two_things() -> None:
    # Each package's __init__ is its public API; a name two packages export is one object.
    import importlib

    seen: dict[str, tuple[str, object]] = {}
    clashes = []
    for package in ORDER:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if name in seen and seen[name][1] is not value:
                clashes.append(f"{name}: {seen[name][0]} and {package}")
            seen.setdefault(name, (package, value))
    assert not clashes, clashes
    # the README's import, and the devices, from poot_npu itself
    from poot_npu import VpuDevice, XdnaDevice, XdnaHostDevice, make_device

    assert make_device("cpu").target == "cpu"
    assert {VpuDevice.__name__, XdnaDevice.__name__, XdnaHostDevice.__name__} == {
        "VpuDevice",
        "XdnaDevice",
        "XdnaHostDevice",
    }


def test_no_two_classes_in_the_library_share_a_name() -> None:
    # Every class of every module of every package (and the CLI), private ones included: a
    # name is one idea, so a reader who finds `Guard` in one module and in another is not
    # misled (the planner had two, the domain guard and the FP16 range check).
    roots = sorted((ROOT / "packages").glob("*/src")) + [ROOT / "src"]
    where: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert len(where) > 200  # every package was read
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, clashes
