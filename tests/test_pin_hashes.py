"""tools/pin_hashes.py, offline: the writer fills a null hash from the manifest's URL (a local
``file://`` URL here) with the SRI sha256 that Nix's fetchurl checks, leaves known hashes and
other fields alone, and reports what it could not compute."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from tool_scripts import load_tool

ROOT = Path(__file__).resolve().parents[1]


def _tool() -> ModuleType:
    return load_tool("pin_hashes")


def _copy(root: Path, tool: ModuleType) -> None:
    for rel in tool.MANIFESTS:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)


def test_the_shipped_manifests_list_their_placeholders() -> None:
    tool = _tool()
    names = {p.name for p in tool.placeholders()}
    assert "packages/poot-codegen/src/poot_codegen/xdna/toolchain.json: peano.hash" in names
    assert "nix/intel-npu.json: source.hash" in names
    kinds = {p.name: p.fetch for p in tool.placeholders()}
    assert kinds["nix/intel-npu.json: source.hash"] == "github-submodules"


def test_a_null_hash_is_written_from_a_local_file_url(tmp_path: Path) -> None:
    tool = _tool()
    root = tmp_path / "repo"
    _copy(root, tool)
    payload = b"a wheel, as far as this test is concerned\n" * 1000
    wheel = tmp_path / "llvm_aie.whl"
    wheel.write_bytes(payload)
    path = root / tool.MANIFESTS[0]
    raw = json.loads(path.read_text())
    raw["peano"]["url"] = wheel.as_uri()
    raw["mlir_python_extras"]["url"] = (tmp_path / "gone.tar.gz").as_uri()  # cannot be read
    path.write_text(json.dumps(raw, indent=2) + "\n")
    intel = root / tool.MANIFESTS[1]
    intel_raw = json.loads(intel.read_text())
    intel_raw["source"]["fetch"] = "teleport"  # neither kind: reported, not guessed
    intel.write_text(json.dumps(intel_raw, indent=2) + "\n")
    lines: list[str] = []

    written, failed = tool.pin(root, lines.append)

    # independently: Nix's SRI form is "sha256-" and the base64 of the raw digest
    want = "sha256-" + base64.b64encode(hashlib.sha256(payload).digest()).decode()
    after = json.loads(path.read_text())
    assert after["peano"]["hash"] == want
    assert after["mlir_aie"]["hash"] == raw["mlir_aie"]["hash"]  # a known hash is left alone
    assert after["mlir_python_extras"]["hash"] is None
    assert {k: v for k, v in after["peano"].items() if k != "hash"} == {
        k: v for k, v in raw["peano"].items() if k != "hash"
    }
    assert written == [f"{tool.MANIFESTS[0]}: peano.hash = {want}"]
    assert len(failed) == 2
    assert any("mlir_python_extras.hash" in f and "cannot download" in f for f in failed)
    assert any("source.hash" in f and "unknown fetch 'teleport'" in f for f in failed)
    assert json.loads(intel.read_text()) == intel_raw  # nothing written where nothing computed
    assert [p.name for p in tool.placeholders(root)] == [
        f"{tool.MANIFESTS[0]}: mlir_python_extras.hash",
        f"{tool.MANIFESTS[1]}: source.hash",
    ]


def test_check_lists_and_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    tool = _tool()
    before = [(ROOT / rel).read_bytes() for rel in tool.MANIFESTS]
    assert tool.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "placeholder nix/intel-npu.json: source.hash (github-submodules)" in out
    assert tool.COMMAND in out
    assert [(ROOT / rel).read_bytes() for rel in tool.MANIFESTS] == before


def test_a_placeholder_stops_evaluation_naming_the_command(tmp_path: Path) -> None:
    """nix/placeholder.nix, evaluated by Nix where it is installed (nox -s nix installs it)."""
    if shutil.which("nix-instantiate") is None:
        pytest.skip("no nix-instantiate here (`nox -s nix` runs with Debian's nix-bin)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}

    def evaluate(expr: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nix-instantiate", "--eval", "--expr", expr],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )

    if evaluate("1").returncode != 0:
        pytest.skip("nix-instantiate cannot evaluate here (no store or daemon access)")
    done = evaluate(f'import {ROOT / "nix" / "placeholder.nix"} "peano" null')
    assert done.returncode != 0
    assert "uv run python tools/pin_hashes.py" in done.stderr
    done = evaluate(f'import {ROOT / "nix" / "placeholder.nix"} "x" "sha256-abc"')
    assert done.stdout.strip() == '"sha256-abc"'
