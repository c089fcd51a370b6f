"""The npu-intel shell's driver/compiler pair, pinned: both from linux-npu-driver 1.38.0, the
release distributions pair with the OpenVINO uv.lock holds (2026.4.1); the pairing assert
evaluated offline as the locked nixpkgs would trip it (``nix/offline-eval.nix``, where Nix is
installed: ``nox -s nix`` installs Debian's nix-bin under CI), and the check's verdicts."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tool_scripts import load_tool

ROOT = Path(__file__).resolve().parents[1]
INTEL = json.loads((ROOT / "nix" / "intel-npu.json").read_text())
RELEASE = "1.38.0"


def _check_nix() -> ModuleType:
    return load_tool("check_nix")


def test_the_driver_and_the_compiler_are_one_release() -> None:
    assert INTEL["release"] == RELEASE
    assert INTEL["source"]["tag"] == f"v{RELEASE}"
    url = INTEL["compiler"]["url"]
    tag, asset = url.rsplit("/", 2)[-2:]
    assert tag == f"v{RELEASE}"
    assert asset == f"linux-npu-driver-v{RELEASE}.{INTEL['compiler']['build']}-ubuntu2404.tar.gz"


def test_the_release_is_the_one_distributions_pair_with_the_locked_openvino() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (openvino,) = (p["version"] for p in lock["package"] if p["name"] == "openvino")
    assert openvino == "2026.4.1"  # packaged with intel-npu-driver 1.38.0 (nix/intel-npu.json)
    assert "2026.4.1" in INTEL["paired_with"] and RELEASE in INTEL["paired_with"]


def test_the_recorded_nixpkgs_is_the_locked_one() -> None:
    lock = json.loads((ROOT / "flake.lock").read_text())
    assert INTEL["nixpkgs_at_lock"]["rev"] == lock["nodes"]["nixpkgs"]["locked"]["rev"]
    assert INTEL["nixpkgs_at_lock"]["intel-npu-driver"] == "1.28.0"


def _graph(driver: str = RELEASE, compiler: str = RELEASE, paired: bool = True) -> dict[str, Any]:
    return {
        "npu-intel": {
            "driver": {"version": driver, "hash": "placeholder"},
            "compiler": {"version": compiler, "hash": "sha256-x"},
            "paired": paired,
            "lockedDriver": "1.28.0",
            "lockedDriverPairs": False,
        },
        "npu": {"mlir-aie": {"version": "1.1.4", "hash": "sha256-y", "mergesExtras": True}},
    }


def test_the_check_fails_on_a_pair_that_trips_or_drifts() -> None:
    cn = _check_nix()
    lock = json.loads((ROOT / "flake.lock").read_text())
    assert cn.graph_problems(_graph(), lock, INTEL) == []
    (err,) = cn.graph_problems(_graph(driver="1.35.0", paired=False), lock, INTEL)[1:]
    assert "pairing assert" in err
    assert (
        "driver is 1.35.0, not the release 1.38.0"
        in cn.graph_problems(_graph(driver="1.35.0", paired=False), lock, INTEL)[0]
    )
    moved = copy.deepcopy(lock)
    moved["nodes"]["nixpkgs"]["locked"]["rev"] = "0" * 40
    (err,) = cn.graph_problems(_graph(), moved, INTEL)
    assert "nixpkgs_at_lock" in err and "0" * 40 in err
    unmerged = _graph()
    unmerged["npu"]["mlir-aie"]["mergesExtras"] = False
    (err,) = cn.graph_problems(unmerged, lock, INTEL)
    assert "merge-extras.sh" in err


def _eval(expr: str) -> subprocess.CompletedProcess[str]:
    """``nix-instantiate --eval`` with a throwaway cache (nothing written under the home)."""
    with tempfile.TemporaryDirectory(prefix="poot-nix-") as cache:
        return subprocess.run(
            ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expr],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "XDG_CACHE_HOME": cache},
            check=False,
        )


def _nix_usable() -> bool:
    return shutil.which("nix-instantiate") is not None and _eval("1").returncode == 0


@pytest.mark.skipif(not _nix_usable(), reason="no usable Nix here (`nox -s nix` installs it)")
def test_nix_evaluates_the_pair_as_the_locked_nixpkgs_would() -> None:
    done = _eval(f"(import {ROOT / 'nix' / 'offline-eval.nix'}).npu-intel")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["driver"]["version"] == got["compiler"]["version"] == RELEASE
    assert got["paired"] is True
    assert got["lockedDriver"] == "1.28.0" and got["lockedDriverPairs"] is False
    assert got["driver"]["hash"] == "placeholder"  # until tools/pin_hashes.py runs online
    trips = _eval(
        f'import {ROOT / "nix" / "intel-npu-pair.nix"} {{ driver = "1.28.0"; compiler = "{RELEASE}"; }}'
    )
    assert trips.returncode != 0
    assert "intel-npu-driver 1.28.0" in trips.stderr and RELEASE in trips.stderr
