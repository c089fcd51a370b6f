"""Lower once: one ``poot run`` on either XDNA2 device plans its program once and builds its
region design once; compiling the artifact (the host C build, the Peano/aiecc link) reads the
lowering the artifact source carries and never plans or designs again.

Counted where the work happens: ``poot_planner.xdna2.layout.lay_out`` (the XDNA2 part of every
plan) and ``poot_codegen.xdna.designer.build_design`` (every design build).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fake_pyxrt
import pytest
from poot_codegen.xdna import designer
from poot_ir import Program, parse_program
from poot_npu import xdna as xdna_module
from poot_planner import plan
from poot_planner.xdna2 import layout as layout_module

from poot.cli import main

EXAMPLES = Path(main.__code__.co_filename).parent / "examples"
#: The examples xdna2 admits (the others are refused before anything is lowered).
ADMITTED = [
    p.name for p in sorted(EXAMPLES.glob("*.poot"))
    if plan(parse_program(p.read_text()), "xdna2").admitted
]  # fmt: skip


def _counting(counts: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kw: Any) -> Any:
        counts[name] += 1
        return fn(*args, **kw)

    return wrapped


def _count(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    layout = _counting(counts, "plans", layout_module.lay_out)
    monkeypatch.setattr(layout_module, "lay_out", layout)
    build = _counting(counts, "designs", designer.build_design)
    monkeypatch.setattr(designer, "build_design", build)
    return counts


def test_some_examples_are_admitted() -> None:
    assert len(ADMITTED) >= 2, ADMITTED


def _program(name: str) -> Program:
    return parse_program((EXAMPLES / name).read_text())


@pytest.mark.parametrize("example", ADMITTED)
def test_poot_run_on_xdna_host_plans_and_designs_once(
    example: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    counts = _count(monkeypatch)
    argv = ["--cache-dir", str(tmp_path), "run", str(EXAMPLES / example)]
    argv += ["--target", "xdna2", "--device", "xdna-host"]
    assert main([*argv, "--steps", "1"]) == 0
    assert counts == {"plans": 1, "designs": 1}


@pytest.mark.parametrize("example", ADMITTED[:2])
def test_poot_run_on_xdna_through_xrt_plans_and_designs_once(
    example: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_pyxrt.reset()
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt)
    monkeypatch.setattr(xdna_module, "_abandoned", [])
    for k, v in fake_pyxrt.fake_toolchain(tmp_path / "tools").items():
        monkeypatch.setenv(k, v)
    fake_pyxrt.install(plan(_program(example), "xdna2").check(), tmp_path / "kernels")
    counts = _count(monkeypatch)  # from here on: only what `poot run` does
    argv = ["--cache-dir", str(tmp_path / "c"), "run", str(EXAMPLES / example)]
    argv += ["--target", "xdna2", "--device", "xdna"]
    assert main([*argv, "--steps", "1"]) == 0
    assert counts == {"plans": 1, "designs": 1}
    assert any(entry[0] == "call" for entry in fake_pyxrt.STATE.log)  # it ran through XRT
