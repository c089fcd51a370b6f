"""The Nix ``.#npu`` shell and the MLIR renderer read one toolchain manifest: a test that fails
when the shell's pin and the renderer's version disagree (read from the files, so it runs
without Nix; ``nox -s nix`` also compares what Nix evaluates), and the placeholder listing."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from poot_codegen.xdna.toolchain import MANIFEST_PATH, load_manifest, manifest
from tool_scripts import load_tool

ROOT = Path(__file__).resolve().parents[1]


def _check_nix() -> ModuleType:
    return load_tool("check_nix")


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    """check_nix over a copy of the files it reads."""
    cn = _check_nix()
    for rel in ("nix", cn.TOOLCHAIN):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst) if src.is_dir() else shutil.copy(src, dst)
    monkeypatch.setattr(cn, "ROOT", tmp_path)
    return cn, tmp_path


def test_the_shell_and_the_wheels_read_the_renderers_manifest() -> None:
    cn = _check_nix()
    assert (ROOT / cn.TOOLCHAIN).resolve() == MANIFEST_PATH.resolve()
    for path in ("nix/shells.nix", *cn.PINNED):
        assert cn.manifest_readers(path) == [MANIFEST_PATH.resolve()], path
    assert cn.toolchain_problems() == []


@pytest.mark.parametrize(
    ("path", "old", "new", "problem"),
    [
        (
            "nix/pkgs/llvm-aie.nix",
            "inherit pin;",
            'inherit pin;\n  version = "21.0.0";',
            "pins version",
        ),
        (
            "nix/pkgs/mlir-aie.nix",
            "inherit pin;",
            'pin = pin // { url = "https://x/y.whl"; };',
            "pins url",
        ),
        (
            "nix/pkgs/prebuilt-wheel.nix",
            "inherit (pin) url;",
            'url = "https://x/y.whl";',
            "pins url",
        ),
        ("nix/pkgs/prebuilt-wheel.nix", "inherit (pin) version;", "", "from its pin"),
        ("nix/pkgs/mlir-aie.nix", ")).mlir_aie;", ")).peano;", "'mlir_aie' pin"),
        ("nix/shells.nix", "xdna/toolchain.json", "xdna/other.json", "does not read"),
    ],
)
def test_a_shell_pin_that_disagrees_with_the_renderer_fails(
    copy: tuple[ModuleType, Path], path: str, old: str, new: str, problem: str
) -> None:
    cn, root = copy
    assert cn.toolchain_problems() == []
    target = root / path
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new))
    problems = cn.toolchain_problems()
    assert any(path in p and problem in p for p in problems), problems


def test_the_renderer_and_the_link_step_take_the_manifests_version(
    copy: tuple[ModuleType, Path],
) -> None:
    _, root = copy
    tc = manifest()
    assert load_manifest(root / _check_nix().TOOLCHAIN) == tc
    assert (tc.mlir_aie_version, tc.peano_version) == ("1.1.4", "20.0.0.2025090701+8c084497")


def test_every_placeholder_is_listed(copy: tuple[ModuleType, Path]) -> None:
    cn, root = copy
    files = sorted(str(p.relative_to(root)) for p in (root / "nix").rglob("*.nix"))
    found = cn.placeholders(files)
    assert any("peano.hash is null" in f for f in found)
    assert not any("mlir_aie.hash" in f for f in found)  # pinned: the hash is known
    assert any("mlir_python_extras.hash is null" in f for f in found)
    assert set(manifest().placeholders) == {"mlir_python_extras", "peano"}
    extra = root / "nix" / "pkgs" / "llvm-aie.nix"
    extra.write_text(extra.read_text() + "# a comment on lib.fakeHash is none\n")
    assert cn.placeholders(files) == found
    extra.write_text(extra.read_text() + "{ x = lib.fakeHash; }\n")
    assert len(cn.placeholders(files)) == len(found) + 1


# What the pinned driver imports, read from upstream (not from the manifest): the imports of
# Xilinx/mlir-aie python/compiler/aiecc/main.py (read at 84c05228, 2025-12-03, and 771dc151,
# 2025-12-19: the same list on both sides of the v1.1.4 tag's window; `import rich.progress as
# progress`), the aie.extras modules python/dialects/aie.py imports before PR #2742 (upstream
# MLIR's extras.types and extras.meta, and the fork's extras.dialects.ext), ml_dtypes
# (python/helpers/util.py:17), and the requirements of erwei-xilinx/mlir-python-extras
# (requirements.txt: PyYAML, bytecode, cloudpickle, numpy; import names).
AIECC_IMPORTS = (
    "aie.extras.runtime.passes",
    "aie.extras.util",
    "aiofiles",
    "rich.progress",
    "aie.compiler.aiecc.cl_arguments",
    "aie.compiler.aiecc.configure",
    "aie.dialects.aie",
    "aie.dialects.aiex",
    "aie.ir",
    "aie.passmanager",
    "aie.compiler.aiecc.main",
)
DIALECT_IMPORTS = ("aie.extras.types", "aie.extras.meta", "aie.extras.dialects.ext.arith")
EXTRAS_IMPORTS = ("ml_dtypes", "yaml", "bytecode", "cloudpickle", "numpy")
# the ones PyPI provides, so aiecc's own lock (nix/aiecc/uv.lock) must: (import name,
# distribution)
FROM_PYPI = (
    ("aiofiles", "aiofiles"),
    ("rich.progress", "rich"),
    ("ml_dtypes", "ml-dtypes"),
    ("yaml", "pyyaml"),
    ("bytecode", "bytecode"),
    ("cloudpickle", "cloudpickle"),
    ("numpy", "numpy"),
)
AIECC_LOCK = ROOT / "nix" / "aiecc" / "uv.lock"


def _aiecc_locked() -> dict[str, str]:
    """The distributions aiecc's own lock holds for its environment, with their versions."""
    lock = tomllib.loads(AIECC_LOCK.read_text())
    (env,) = (p for p in lock["package"] if p["name"] == "poot-aiecc-env")
    wanted = {d["name"] for d in env.get("dependencies", [])}
    return {p["name"]: p["version"] for p in lock["package"] if p["name"] in wanted}


def test_the_manifest_names_every_module_the_driver_and_its_extras_import() -> None:
    modules = manifest().python_modules
    wanted = (*AIECC_IMPORTS, *DIALECT_IMPORTS, *EXTRAS_IMPORTS)
    assert [m for m in wanted if m not in modules] == []
    assert modules[-1] == "aie.compiler.aiecc.main"  # last: whatever else it imports fails there
    assert [m for m, _ in FROM_PYPI if m not in wanted] == []
    locked = _aiecc_locked()
    assert [d for _, d in FROM_PYPI if d not in locked] == []


def test_aiecc_gets_numpy_below_2_in_its_own_lock() -> None:
    """The wheel declares numpy<2 (python/requirements.txt at 19cce64c); the extras <=2.1.2."""
    major = int(_aiecc_locked()["numpy"].split(".")[0])
    assert major < 2
    assert _aiecc_locked()["bytecode"] == "0.17.0"


def test_the_extras_pin_names_a_revision_and_the_archive_of_it() -> None:
    import json

    raw = json.loads(MANIFEST_PATH.read_text())["mlir_python_extras"]
    rev = raw["rev"]
    assert len(rev) == 40 and all(c in "0123456789abcdef" for c in rev)
    assert raw["url"] == f"https://github.com/{raw['repo']}/archive/{rev}.tar.gz"
    cn = _check_nix()
    assert cn.PINNED["nix/pkgs/mlir-python-extras.nix"] == "mlir_python_extras"
