"""The MLIR-AIE renderer: golden files of example designs in the pinned mlir-aie's syntax
(``golden/mlir-aie-<version>/``, the version ``toolchain.json`` pins), the version-dependent
syntax, and the text's own consistency.

Regenerate the golden files with ``--regen-golden`` or ``POOT_REGEN_GOLDEN=1``; otherwise any
difference fails, and so does a golden directory of another mlir-aie version.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import xdna_programs
from poot_codegen.xdna.design import DesignError
from poot_codegen.xdna.designer import design_program
from poot_codegen.xdna.mlir import RUNTIME_SEQUENCE_OP, render_program, render_region
from poot_codegen.xdna.toolchain import LinkWith, manifest
from poot_planner import plan

GOLDEN_ROOT = Path(__file__).parent / "golden"
GOLDEN = GOLDEN_ROOT / f"mlir-aie-{manifest().mlir_aie_version}"


def _rendered(name: str) -> tuple[str, ...]:
    return render_program(design_program(plan(xdna_programs.EXAMPLES[name](), "xdna2").check()))


@pytest.mark.parametrize("name", list(xdna_programs.EXAMPLES))
def test_rendering_matches_its_golden_file(name: str, regen_golden: bool) -> None:
    texts = _rendered(name)
    for i, text in enumerate(texts):
        path = GOLDEN / f"xdna_{name}.region{i}.mlir"
        if regen_golden:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            continue
        assert path.is_file(), f"{path} is missing: run pytest with --regen-golden"
        assert text == path.read_text(encoding="utf-8"), (
            f"{path.name} differs from the rendering; if the change is intended, rerun with "
            "--regen-golden (or POOT_REGEN_GOLDEN=1) and review the diff"
        )
    stale = sorted(GOLDEN.glob(f"xdna_{name}.region*.mlir"))
    assert len(stale) == len(texts), f"stale golden files for {name}: {stale}"


def test_golden_files_are_for_the_pinned_version_only() -> None:
    dirs = sorted(p.name for p in GOLDEN_ROOT.iterdir() if p.is_dir())
    assert dirs == [GOLDEN.name], "golden files of another mlir-aie version: regenerate them"
    assert not list(GOLDEN_ROOT.glob("*.mlir")), "golden files outside a version directory"


def test_the_pinned_version_syntax_is_rendered() -> None:
    """v1.1.4: ``link_with`` on each ``aie.core`` (none on ``func.func``: both at once is
    rejected) and the ``aiex`` runtime sequence op."""
    tc = manifest()
    assert (tc.mlir_aie_version, tc.link_with, tc.runtime_sequence) == (
        "1.1.4",
        LinkWith.CORE,
        "aiex.runtime_sequence",
    )
    for name in xdna_programs.EXAMPLES:
        for i, text in enumerate(_rendered(name)):
            lines = text.splitlines()
            funcs = [x for x in lines if "func.func private" in x]
            assert funcs and not any("link_with" in x for x in funcs)
            closes = [x for x in lines if x.startswith("    } {link_with")]
            assert closes == [f'    }} {{link_with = "region{i}.o"}}'] * text.count(" = aie.core(")
            assert "    aiex.runtime_sequence @sequence(%arg0: " in text
            assert "aie.runtime_sequence" not in text


def test_a_func_level_version_puts_link_with_on_each_func_only() -> None:
    """Since PR #2922 and #2708: ``func.func ... attributes {link_with}``, none on the core,
    and ``aie.runtime_sequence`` unnamed."""
    tc = dataclasses.replace(
        manifest(), link_with=LinkWith.FUNC, runtime_sequence="aie.runtime_sequence"
    )
    design = design_program(plan(xdna_programs.chain(), "xdna2").check())
    (text,) = render_program(design, tc)
    funcs = [x for x in text.splitlines() if "func.func private" in x]
    assert funcs and all(x.endswith(' attributes {link_with = "region0.o"}') for x in funcs)
    assert "} {link_with" not in text
    assert "    aie.runtime_sequence(%arg0: " in text and "aiex.runtime_sequence" not in text
    (pinned,) = render_program(design)
    assert text.count("link_with") == len(funcs) and pinned.count("link_with") == len(
        design.regions[0].cores
    )


def test_two_region_program_renders_two_modules() -> None:
    texts = _rendered("two_regions")
    assert len(texts) == 2
    assert 'link_with = "region0.o"' in texts[0] and 'link_with = "region1.o"' in texts[1]


@pytest.mark.parametrize("name", list(xdna_programs.EXAMPLES))
def test_rendered_text_is_self_consistent(name: str) -> None:
    pl = plan(xdna_programs.EXAMPLES[name](), "xdna2").check()
    design = design_program(pl)
    for region, text in zip(design.regions, render_program(design), strict=True):
        assert text.count("{") == text.count("}")
        assert text.count("aie.device(npu2) {") == 1
        declared = set(re.findall(r"aie\.objectfifo @(\w+)\(", text))
        used = set(re.findall(r"@(\w+)\((?:Produce|Consume)", text))
        used |= set(re.findall(r"metadata = @(\w+)", text))
        used |= set(re.findall(r"symbol = @(\w+)", text))
        flag_links = {name for name, _, _ in region.flag.links()}
        assert used == declared == {f.name for f in region.fifos} | flag_links
        # the flag word goes from the chain's last core to a shim, into the flags arena
        t = region.flag.transfer
        flags_arena = len(design.layout.arenas) - 1
        assert t.arena == flags_arena and t.offset == 4 * region.index and t.nbytes == 4
        assert (
            f"aiex.npu.dma_memcpy_nd(%arg{flags_arena}[0, 0, 0, {t.offset}][1, 1, 1, 4]"
            f"[0, 0, 0, 1]) {{id = {t.bd} : i64, issue_token = true, metadata = @{t.fifo}}}"
        ) in text
        assert text.rstrip().splitlines()[-4] == f"      aiex.npu.dma_wait {{symbol = @{t.fifo}}}"
        funcs = set(re.findall(r"func\.func private @(\w+)\(", text))
        calls = set(re.findall(r"func\.call @(\w+)\(", text))
        flag_funcs = {"poot_flag_first"} | ({"poot_flag_next"} if len(region.cores) > 1 else set())
        assert funcs == calls == {c.symbol for c in region.cores} | flag_funcs
        # every core takes its predecessor's word (but the first) and hands on its own
        assert text.count("func.call @poot_flag_first(") == 1
        assert text.count("func.call @poot_flag_next(") == len(region.cores) - 1
        assert text.count(" = aie.core(") == len(region.cores)
        tiles = set(re.findall(r"(%\w+) = aie\.tile\(", text))
        refs = set(re.findall(r"%(?:shim_noc_tile|tile)_\d+_\d+", text))
        assert refs == tiles
        seq = re.search(rf"{re.escape(RUNTIME_SEQUENCE_OP)}(?: @sequence)?\((.*)\) \{{", text)
        assert seq is not None and seq.group(1).count("memref<") == len(design.layout.arenas)
        assert text.count("aiex.npu.dma_memcpy_nd(") == len(region.transfers) + 1
        assert text.count("aiex.npu.dma_wait") == len(region.waits) + 1


def test_an_invalid_design_is_refused_before_rendering() -> None:
    design = design_program(plan(xdna_programs.chain(), "xdna2").check())
    region = design.regions[0]
    crowded = tuple(dataclasses.replace(c, column=0, row=2) for c in region.cores)
    bad = dataclasses.replace(design, regions=(dataclasses.replace(region, cores=crowded),))
    with pytest.raises(DesignError, match="two cores on one compute tile"):
        render_program(bad)
    with pytest.raises(DesignError):
        render_region(bad, 0)
