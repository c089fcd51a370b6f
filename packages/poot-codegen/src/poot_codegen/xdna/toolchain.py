"""The XDNA2 toolchain manifest (``toolchain.json``): the one record of the mlir-aie version
poot renders MLIR for, the Peano (llvm-aie) build it pairs with, the aiecc driver the pinned
wheel provides, and the Python modules that driver imports.

The Nix ``.#npu`` shell reads the same file (``builtins.fromJSON`` in ``nix/shells.nix`` and the
wheel derivations under ``nix/pkgs``), so the shell's pin and the renderer's syntax cannot drift
apart silently: a test checks both read it, and ``nox -s nix`` lists its placeholders (a null
hash: nothing offline can compute it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any, Final

from poot_ir import CodegenError

__all__ = [
    "MANIFEST_PATH",
    "LinkWith",
    "Toolchain",
    "load_manifest",
    "manifest",
]

MANIFEST_PATH: Final = Path(__file__).with_name("toolchain.json")


class LinkWith(Enum):
    """Where an mlir-aie version reads a kernel object's ``link_with``."""

    CORE = "core"  # on ``aie.core`` (before Xilinx/mlir-aie PR #2922, 2026-03)
    FUNC = "func"  # on each ``func.func`` declaration (since PR #2922)


@dataclass(frozen=True, slots=True)
class Toolchain:
    """The parts of the manifest code depends on."""

    mlir_aie_version: str
    peano_version: str
    peano_tools: tuple[str, ...]  # in $PEANO_INSTALL_DIR/bin: the kernel compiler
    link_with: LinkWith
    runtime_sequence: str  # "aiex.runtime_sequence" or "aie.runtime_sequence"
    aiecc_drivers: tuple[str, ...]  # executables tried in order on PATH
    aiecc_python: str  # the variable naming aiecc's own interpreter (its own environment)
    aiecc_module: str  # the driver's module: the last resort is `python -c` on its main()
    aiecc_flags: tuple[str, ...]  # this version's options: Peano, an xclbin and instructions
    aiecc_helpers: tuple[str, ...]  # tools aiecc itself runs from PATH
    python_modules: tuple[str, ...]  # what the link step's Python imports
    placeholders: tuple[str, ...]  # manifest entries whose hash nothing offline computes


def _placeholders(raw: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        sorted(k for k, v in raw.items() if isinstance(v, dict) and "hash" in v and not v["hash"])
    )


def load_manifest(path: Path = MANIFEST_PATH) -> Toolchain:
    """The manifest at ``path``; ``CodegenError`` naming what is missing or malformed."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        seq = raw["mlir"]["runtime_sequence"]
        if seq not in ("aiex.runtime_sequence", "aie.runtime_sequence"):
            raise ValueError(f"runtime_sequence {seq!r}")
        return Toolchain(
            mlir_aie_version=str(raw["mlir_aie"]["version"]),
            peano_version=str(raw["peano"]["version"]),
            peano_tools=tuple(raw["peano"]["tools"]),
            link_with=LinkWith(raw["mlir"]["link_with"]),
            runtime_sequence=seq,
            aiecc_drivers=tuple(raw["aiecc"]["drivers"]),
            aiecc_python=str(raw["aiecc"]["python"]),
            aiecc_module=str(raw["aiecc"]["module"]),
            aiecc_flags=tuple(raw["aiecc"]["flags"]),
            aiecc_helpers=tuple(raw["aiecc"]["helpers"]),
            python_modules=tuple(raw["python_modules"]),
            placeholders=_placeholders(raw),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CodegenError(f"xdna2 toolchain manifest {path}: {err!r}") from None


@cache
def manifest() -> Toolchain:
    """The shipped manifest (read once)."""
    return load_manifest()
