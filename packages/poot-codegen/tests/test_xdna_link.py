"""The XDNA2 link step: the typed unavailable path (what runs on a machine without the
toolchain), the command lines as data, the artifact identity, and fake tools on a temporary
PATH / PEANO_INSTALL_DIR that record their arguments and write dummy outputs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
import xdna_programs
from poot_codegen.xdna import link as xlink
from poot_codegen.xdna.hostbuild import CSRC_DIR
from poot_codegen.xdna.kernels import region_source
from poot_codegen.xdna.link import (
    AIECC_FLAGS,
    PEANO_FLAGS,
    LinkTools,
    artifact_identity,
    artifact_source,
    find_toolchain,
    identity_fields,
    link,
    link_commands,
)
from poot_codegen.xdna.lower import Lowered, lower_program
from poot_codegen.xdna.mlir import RUNTIME_SEQUENCE_OP
from poot_codegen.xdna.toolchain import manifest
from poot_ir import CompileFailed, ToolchainUnavailable
from poot_planner import plan

WORDS = np.array([0x06030100, 0x00000105, 7, 0xDEADBEEF], dtype="<u4")


def _plan(name: str = "two_regions") -> Lowered:
    """The one lowering of an example (what the link step takes)."""
    return lower_program(plan(xdna_programs.EXAMPLES[name](), "xdna2").check())


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


_RECORD = 'n=$(ls "$FAKE_LOG" | wc -l); { pwd; for a in "$@"; do echo "$a"; done; } > "$FAKE_LOG/$n.$(basename "$0")"\n'


def fake_toolchain(
    root: Path,
    *,
    clang_fails: bool = False,
    aiecc_insts: bool = True,
    driver: str = "aiecc.py",
    missing_modules: str = "",
    aiecc_python: bool = False,
) -> dict[str, str]:
    """An environment whose Peano clang++, aiecc driver (``driver``: "aiecc.py", or "" for
    none, so the link step falls back to ``python3 -c``), python3 (the module probe, which
    reports ``missing_modules`` as not importable), xclbinutil and bootgen are shell scripts
    recording their argv. With ``aiecc_python``, aiecc's own environment's interpreter
    (``aiecc-env/bin/python``, recorded as ``python``) is named in ``$POOT_AIECC_PYTHON``."""
    log = root / "log"
    log.mkdir(parents=True)
    peano, bin_ = root / "peano", root / "bin"
    clang = 'if [ "$1" = "--version" ]; then echo "clang version 99.0 (fake peano)"; exit 0; fi\n'
    clang += _RECORD
    clang += 'if [ -n "$FAKE_CLANG_FAILS" ]; then echo "region.cc:1: error: fake" >&2; exit 1; fi\n'
    clang += 'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then echo obj > "$2"; fi; shift; done\n'
    _script(peano / "bin" / "clang++", clang)
    aiecc = 'if [ "$1" = "--version" ]; then echo "aiecc 1.2.3 (fake)"; exit 0; fi\n' + _RECORD
    aiecc += "ls *.o > /dev/null || exit 3\n"
    aiecc += "printf 'xclbin' > final.xclbin\n"
    if aiecc_insts:
        aiecc += (
            r"printf '\000\001\003\006\005\001\000\000\007\000\000\000\357\276\255\336' > insts.bin"
            + "\n"
        )
    if driver:
        _script(bin_ / driver, aiecc)
    # python3: the module probe (argv: -c PROBE modules...) or the driver's last resort
    probe = 'n=$(ls "$FAKE_LOG" | wc -l); { pwd; echo "$1"; echo PROBE; shift 2; '
    probe += 'for a in "$@"; do echo "$a"; done; } > "$FAKE_LOG/$n.python3"; '
    python = 'case "$2" in *import_module*) ' + probe
    python += "for m in $FAKE_MISSING_MODULES; do "
    python += 'printf "%s\\tModuleNotFoundError: No module named %s\\n" "$m" "$m"; '
    python += "done; exit 0;; esac\n"
    python += 'if [ "$3" = "--version" ]; then echo "aiecc.py 0fake"; exit 0; fi\n'
    python += aiecc.split("\n", 1)[1]  # the driver's body, recording every argument
    _script(bin_ / "python3", python)
    if aiecc_python:
        _script(root / "aiecc-env" / "bin" / "python", python)
    for tool in ("xclbinutil", "bootgen"):
        _script(bin_ / tool, "exit 0\n")
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "PEANO_INSTALL_DIR": str(peano), "FAKE_LOG": str(log)}
    env["FAKE_MISSING_MODULES"] = missing_modules
    if clang_fails:
        env["FAKE_CLANG_FAILS"] = "1"
    if aiecc_python:
        env[xlink.AIECC_PYTHON] = str(root / "aiecc-env" / "bin" / "python")
    return env


def recorded(env: dict[str, str], *, probes: bool = False) -> list[tuple[str, list[str]]]:
    """(working directory, argv) of every recorded tool run, in order; the module probes
    (``python3 -c PROBE modules...``) only when ``probes``."""
    return [(cwd, argv) for tool, cwd, argv in runs_of(env) if probes or not _probe(tool, argv)]


def _probe(tool: str, argv: list[str]) -> bool:
    return tool in ("python3", "python") and argv[:2] == ["-c", "PROBE"]


def runs_of(env: dict[str, str]) -> list[tuple[str, str, list[str]]]:
    """(tool name, working directory, argv after the name) of every recorded run, in order."""
    log = Path(env["FAKE_LOG"])
    runs = sorted(log.iterdir(), key=lambda p: int(p.name.split(".")[0]))
    out = []
    for r in runs:
        lines = r.read_text().splitlines()
        out.append((r.name.split(".", 1)[1], lines[0], lines[1:]))
    return out


# -- unavailable ------------------------------------------------------------------------------


def test_no_toolchain_is_unavailable_naming_every_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(ToolchainUnavailable) as err:
        link(_plan(), env={"PATH": str(tmp_path)})
    assert err.value.tool == "clang++, aiecc, xclbinutil, bootgen, python modules"
    assert "PEANO_INSTALL_DIR is not set" in err.value.detail
    assert "none of aiecc.py or python3 on PATH, nor $POOT_AIECC_PYTHON" in err.value.detail
    assert "no python3 on PATH (nor $POOT_AIECC_PYTHON) to import aie, " in err.value.detail


def test_this_machine_raises_unavailable_rather_than_skipping() -> None:
    if os.environ.get("PEANO_INSTALL_DIR"):
        pytest.skip("a Peano toolchain is configured here")
    with pytest.raises(ToolchainUnavailable):
        link(_plan())


def test_partial_toolchain_names_only_what_is_missing(tmp_path: Path) -> None:
    env = fake_toolchain(tmp_path)
    (tmp_path / "bin" / "bootgen").unlink()
    with pytest.raises(ToolchainUnavailable) as err:
        find_toolchain(env)
    assert err.value.tool == "bootgen"
    env["PEANO_INSTALL_DIR"] = str(tmp_path / "nowhere")
    with pytest.raises(ToolchainUnavailable) as err:
        find_toolchain(env)
    assert err.value.tool == "clang++, bootgen" and "no executable" in err.value.detail


def test_identity_fields_say_unavailable_where_a_tool_is_missing(tmp_path: Path) -> None:
    fields = identity_fields({"PATH": str(tmp_path)})
    assert fields["part"] == "npu2" and fields["arch"] == "aie2p"
    assert fields["peano"] == fields["aiecc"] == "unavailable"
    assert fields["peano_flags"] == " ".join(PEANO_FLAGS)
    assert fields["aiecc_flags"] == " ".join(AIECC_FLAGS)
    fake = identity_fields(fake_toolchain(tmp_path))
    assert (
        fake["peano"] == "clang version 99.0 (fake peano)" and fake["aiecc"] == "aiecc 1.2.3 (fake)"
    )


# -- commands as data -------------------------------------------------------------------------


def test_command_lines_are_exactly_as_documented() -> None:
    tc = LinkTools(Path("/peano/bin/clang++"), ("/aie/bin/aiecc.py",), Path("/aie"))
    cmds = link_commands(_plan(), tc)
    assert [(c.stage, c.region, c.cwd) for c in cmds] == [
        ("peano", 0, "region0"),
        ("aiecc", 0, "region0"),
        ("peano", 1, "region1"),
        ("aiecc", 1, "region1"),
    ]
    assert cmds[0].argv == (
        "/peano/bin/clang++",
        "-O2",
        "-std=c++20",
        "--target=aie2p-none-unknown-elf",
        "-Wno-parentheses",
        "-Wno-attributes",
        "-Wno-macro-redefined",
        "-Wno-empty-body",
        "-DNDEBUG",
        "-ffunction-sections",
        "-fdata-sections",
        "-fstack-size-section",
        "-ffp-contract=off",
        f"-I{CSRC_DIR}",
        "-I",
        "/aie/include",
        "-c",
        "region0.cc",
        "-o",
        "region0.o",
    )
    assert cmds[1].argv == (
        "/aie/bin/aiecc.py",
        "--no-xchesscc",
        "--no-xbridge",
        "--aie-generate-xclbin",
        "--aie-generate-npu-insts",
        "--xclbin-name=final.xclbin",
        "--npu-insts-name=insts.bin",
        "--alloc-scheme=basic-sequential",
        "aie.mlir",
    )
    assert cmds[1].outputs == ("final.xclbin", "insts.bin")


def test_every_aiecc_run_packs_buffers_as_the_tile_model_counts() -> None:
    """The tile model (``RegionLimits.tile_bytes``) sums a core's buffers up from its stack and
    keeps the link's data sections after them: mlir-aie's basic-sequential allocator. aiecc's
    default is bank-aware (round robin over four 16 KiB banks, lib/Dialect/AIE/Transforms/
    AIEAssignBuffers.cpp), whose highest buffer can end near 64 KiB although the sum is far
    below, leaving the linker script's data region (after the highest buffer) no room for the
    guard word. So every aiecc run, an instruction-only one too, names the scheme."""
    tc = LinkTools(Path("/peano/bin/clang++"), ("/aie/bin/aiecc.py",), Path("/aie"))
    runs = [c for c in link_commands(_plan(), tc) if c.stage == "aiecc"]
    assert runs
    for c in runs:
        assert "--alloc-scheme=basic-sequential" in c.argv
    assert "--alloc-scheme=basic-sequential" in xlink.insts_only_flags(1)


# -- identity ---------------------------------------------------------------------------------


def test_artifact_source_is_deterministic_and_covers_what_decides_the_artifact(
    tmp_path: Path,
) -> None:
    env = {"PATH": str(tmp_path)}
    p = _plan()
    a = artifact_source(p, env=env)
    assert a == artifact_source(_plan(), env=env)
    assert b"unavailable" in a and b"npu2" in a and RUNTIME_SEQUENCE_OP.encode() in a
    program = plan(xdna_programs.EXAMPLES["two_regions"](), "xdna2")
    assert region_source(program, 1).encode() in a
    other = artifact_source(_plan("chain"), env=env)
    assert other != a
    fields = identity_fields(env) | {"peano": "clang version 20"}
    assert artifact_source(p, fields=fields) != a
    r0, r1 = (artifact_identity(p, r, env=env) for r in (0, 1))
    assert r0 != r1 and len(r0) == 64


# -- fake toolchain ---------------------------------------------------------------------------


def test_link_runs_the_tools_as_documented_and_collects_their_outputs(tmp_path: Path) -> None:
    env = fake_toolchain(tmp_path / "tools")
    p = _plan()
    seen: list[tuple[str, int, int]] = []
    work = tmp_path / "work"
    arts = link(p, work, env=env, progress=lambda s, d, t: seen.append((s, d, t)))
    tc = find_toolchain(env)
    expected = link_commands(p, tc)
    runs = recorded(env)
    assert [argv for _, argv in runs] == [list(c.argv[1:]) for c in expected]
    assert [Path(cwd) for cwd, _ in runs] == [(work / c.cwd).resolve() for c in expected]
    assert (work / "region0" / "region0.o").is_file()
    assert (work / "region1" / "aie.mlir").read_text().startswith("// poot region 1")
    assert seen == [
        ("peano region 0", 0, 4),
        ("aiecc region 0", 1, 4),
        ("peano region 1", 2, 4),
        ("aiecc region 1", 3, 4),
        ("done", 4, 4),
    ]
    assert [a.region for a in arts] == [0, 1]
    for a in arts:
        assert a.xclbin == b"xclbin"
        assert np.array_equal(a.words(), WORDS)
        assert a.identity == artifact_identity(p, a.region, env=env)


def test_link_in_a_temporary_directory_by_default(tmp_path: Path) -> None:
    arts = link(_plan("gather"), env=fake_toolchain(tmp_path))
    assert len(arts) == 1 and arts[0].insts == WORDS.tobytes()


def test_a_failing_tool_raises_compile_failed_with_its_log(tmp_path: Path) -> None:
    env = fake_toolchain(tmp_path, clang_fails=True)
    with pytest.raises(CompileFailed) as err:
        link(_plan("chain"), env=env)
    assert err.value.tool == "clang++" and "error: fake" in err.value.log
    assert err.value.what == "region 0 kernels"


def test_missing_outputs_raise_compile_failed(tmp_path: Path) -> None:
    env = fake_toolchain(tmp_path, aiecc_insts=False)
    with pytest.raises(CompileFailed) as err:
        link(_plan("chain"), env=env)
    assert err.value.tool == "aiecc" and "insts.bin was not written" in err.value.log


def test_module_exports() -> None:
    assert set(xlink.__all__) >= {"link", "artifact_source", "identity_fields", "find_toolchain"}


# -- the toolchain manifest: the link step's own command lines against it ---------------------


@pytest.mark.parametrize("driver", ["aiecc.py", ""])
def test_the_link_steps_argv_is_what_the_manifest_names(driver: str, tmp_path: Path) -> None:
    """The fake tools record their argv: the module probe asks for exactly the manifest's
    modules, the driver is the first of the manifest's drivers on PATH (else ``python3 -c`` on
    the manifest's module), and every tool run is one of the manifest's."""
    env = fake_toolchain(tmp_path / "tools", driver=driver)
    tc = manifest()
    link(_plan("chain"), tmp_path / "work", env=env)
    runs = runs_of(env)
    probes = [argv[2:] for tool, _, argv in runs if _probe(tool, argv)]
    assert probes == [list(tc.python_modules)]
    tools = [tool for tool, _, argv in runs if not _probe(tool, argv)]
    (peano,) = tc.peano_tools
    if driver:
        assert driver in tc.aiecc_drivers and tools == [peano, driver]
    else:
        assert tools == [peano, "python3"]
        (argv,) = [a for t, _, a in runs if t == "python3" and not _probe(t, a)]
        assert argv[:2] == ["-c", f"from {tc.aiecc_module} import main; main()"]
    aiecc = next(a for t, _, a in runs if t in (driver or "python3",) and not _probe(t, a))
    assert aiecc[-len(tc.aiecc_flags) - 1 :] == [*tc.aiecc_flags, "aie.mlir"]


def test_a_module_the_driver_imports_missing_is_unavailable_naming_it(tmp_path: Path) -> None:
    env = fake_toolchain(tmp_path, missing_modules="aiofiles aie.extras.runtime.passes")
    with pytest.raises(ToolchainUnavailable) as err:
        find_toolchain(env)
    assert err.value.tool == "python modules"
    assert "aiofiles, aie.extras.runtime.passes (mlir-aie" in err.value.detail  # manifest order
    assert "aiofiles: ModuleNotFoundError: No module named aiofiles" in err.value.detail
    assert f"mlir-aie {manifest().mlir_aie_version}" in err.value.detail


def test_host_and_core_builds_agree_on_contraction_and_cores_link_only_their_kernel() -> None:
    """The same kernel C computes the same bits on host and core only if neither side fuses a
    multiply-add; each core keeps only its own kernel only if every function has its own
    section for aiecc's --gc-sections; each function's frame size is in .stack_sizes."""
    from poot_codegen.xdna.hostbuild import HOST_CFLAGS

    contraction = [f for f in PEANO_FLAGS if f.startswith("-ffp-contract=")]
    assert contraction == [f for f in HOST_CFLAGS if f.startswith("-ffp-contract=")]
    assert contraction == ["-ffp-contract=off"]
    for flag in ("-ffunction-sections", "-fdata-sections", "-fstack-size-section"):
        assert flag in PEANO_FLAGS
