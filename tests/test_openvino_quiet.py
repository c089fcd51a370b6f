"""poot's use of OpenVINO writes nothing into the user's home (``poot_codegen.intel.quiet``).

Each check runs in a fresh interpreter whose ``HOME`` is an empty directory holding no
telemetry consent file (the session's fake home holds an opt-out, which would hide the
problem), so ``import openvino`` would create ``~/intel/openvino_ga_cid`` and ``~/intel/stats``
there if poot let it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "src" / "poot" / "examples"


def _env(home: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_") and k != "CI"}
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(cache)  # poot's own blob cache: outside HOME, not the point
    return env


_PROBE = """
import os, openvino_telemetry
import poot_npu.vpu  # the library's import path: poot_codegen.intel.graph, poot_codegen.intel.quiet
import openvino
print(repr(os.environ.get("CI")))
print(openvino_telemetry.Telemetry().consent)
"""


def test_importing_the_vpu_device_writes_nothing_and_leaves_the_environment(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=_env(home, tmp_path / "cache"),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    shown_ci, consent = done.stdout.split()
    assert shown_ci == "None"  # CI was unset, and is again
    assert consent == "False"  # the process-wide telemetry declined
    assert list(home.rglob("*")) == []


def test_poot_run_on_vpu_cpu_writes_nothing_under_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    argv = [str(EXAMPLES / "row_stats.poot"), "--target", "intel-npu4", "--device", "vpu-cpu"]
    done = subprocess.run(
        [sys.executable, "-m", "poot", "run", *argv],
        env=_env(home, tmp_path / "cache"),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "1 compiled" in done.stdout  # it did compile and run on the stand-in
    assert list(home.rglob("*")) == []


def test_only_openvino_quiet_imports_openvino() -> None:
    """Any other module importing openvino could be the first to, and bring telemetry back."""
    offenders = []
    for src in sorted(ROOT.glob("packages/*/src/**/*.py")) + sorted(ROOT.glob("src/**/*.py")):
        if src.as_posix().endswith("poot_codegen/intel/quiet.py"):
            continue
        text = src.read_text(encoding="utf-8")
        if "openvino" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "openvino" or n.startswith("openvino.") for n in names):
                offenders.append(f"{src.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
