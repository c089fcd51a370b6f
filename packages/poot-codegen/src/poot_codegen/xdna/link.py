"""The XDNA2 link step: Peano builds each region's kernels, aiecc links each region's design.

For region ``N`` with an artifact of its own, in its own work directory ``region<N>/`` holding
``region<N>.cc`` and ``aie.mlir``::

    $PEANO_INSTALL_DIR/bin/clang++ -O2 -std=c++20 --target=aie2p-none-unknown-elf
        -Wno-parentheses -Wno-attributes -Wno-macro-redefined -Wno-empty-body -DNDEBUG
        -ffunction-sections -fdata-sections -fstack-size-section -ffp-contract=off
        -I<csrc> -I $MLIR_AIE_DIR/include -c region<N>.cc -o region<N>.o
    <aiecc> --no-xchesscc --no-xbridge --aie-generate-xclbin --aie-generate-npu-insts
        --xclbin-name=final.xclbin --npu-insts-name=insts.bin
        --alloc-scheme=basic-sequential aie.mlir

``--alloc-scheme=basic-sequential``: each core's buffers packed up from its stack, the layout the
planner's tile model counts (``toolchain.json`` ``aiecc.alloc_scheme_why``); aiecc's default,
bank-aware, can leave the linker script no room after the highest buffer for the data sections.

A region ``M`` that runs region ``N``'s artifact (``reuse``: identical layers) has no kernels or
xclbin of its own: in ``region<N>/`` it takes one run, ``<aiecc> <options without the xclbin>
--npu-insts-name=insts<M>.bin use<M>.mlir`` (``insts_only_flags``), its instruction stream.

``<aiecc>`` is the compiler driver the pinned mlir-aie wheel provides (``toolchain.json``), run
by aiecc's own Python: the wheel declares ``numpy<2`` and the workspace has numpy 2, so the
``.#npu`` shell builds aiecc an environment of its own from the wheel's requirements and names
its interpreter in ``$POOT_AIECC_PYTHON`` (the manifest's ``aiecc.python``). When that is set,
``<aiecc>`` is ``$POOT_AIECC_PYTHON -c "from aie.compiler.aiecc.main import main; main()"`` (the
module has no ``__main__`` guard, so ``-m`` would do nothing). Elsewhere it is the first of the
manifest's ``drivers`` on PATH (the ``aiecc.py`` console script the wheel declares), else the
same ``-c`` line run by ``python3`` on PATH. Before anything runs, that same interpreter must
import every module the manifest lists for the driver (everything
``aie.compiler.aiecc.main`` imports, and the module itself): one probe, ``<python> -c <probe>
<modules>``, which imports each (not only locates it), so a module that fails at import time
(numpy 2 under a module built for numpy 1, a missing dependency of a dependency) is
``ToolchainUnavailable`` naming it and its error, before any tool runs.

Each region's kernels are one object, but compiled with ``-ffunction-sections
-fdata-sections``: aiecc links every core with ``--gc-sections``, so each core keeps only its
own kernel and what it calls (16 KiB of program memory per core). ``-fstack-size-section``
records each function's frame size in ``.stack_sizes``, which aiecc's linker script keeps
(mlir-aie lib/Targets/AIETargetLdScript.cpp names the section, so ``--orphan-handling=error``
accepts it): the figures to hold against the core's 1 KiB stack. Nothing in the pinned toolchain
reads them: mlir-aie 1.1.4's aiecc is the Python driver (python/compiler/aiecc/), which has no
stack check (only the later C++ driver has one), so a core overflowing its stack is not caught
at link time. ``-ffp-contract=off`` matches the host build (``hostbuild.HOST_CFLAGS``): no fused
multiply-add on either side, so both compute the same bits.

aiecc finds ``region<N>.o`` (the ``link_with`` of the MLIR) in its working directory, and
writes the xclbin and the instruction stream (little-endian uint32 words) there. aiecc runs
``xclbinutil`` and ``bootgen``, so those must be on PATH too. ``MLIR_AIE_DIR`` is taken from the
environment, else it is the directory above the driver's ``bin``.

Where a tool or module is missing the step raises ``ToolchainUnavailable`` naming every one
before running anything: it never skips. A tool that fails raises ``CompileFailed`` with its
log. ``progress(stage, done, total)`` is called before each tool runs and once at the end
(stage ``"done"``); ``total`` is two steps per artifact and one per other region.

An artifact's identity is the sha256 of ``artifact_source``: the part, the tool versions
(``"unavailable"`` where a tool is missing), the options, the design MLIR, the kernel sources
and the kernel headers, each length-prefixed so no two inputs encode alike.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from poot_ir import CodegenError, CompileFailed, ToolchainUnavailable

from poot_codegen.xdna.hostbuild import CSRC_DIR
from poot_codegen.xdna.kernels import region_object
from poot_codegen.xdna.lower import Lowered
from poot_codegen.xdna.toolchain import manifest

__all__ = [
    "AIECC_FLAGS",
    "AIECC_PYTHON",
    "ARCH",
    "INSTS_NAME",
    "PART",
    "PEANO_FLAGS",
    "XCLBIN_NAME",
    "LinkCommand",
    "LinkTools",
    "Progress",
    "RegionArtifact",
    "aiecc_python",
    "artifact_identity",
    "artifact_source",
    "driver",
    "find_toolchain",
    "identity_fields",
    "insts_only_flags",
    "link",
    "link_commands",
    "use_insts",
    "use_mlir",
]

PART: Final = "npu2"
ARCH: Final = "aie2p"
PEANO_FLAGS: Final = (
    "-O2",
    "-std=c++20",
    "--target=aie2p-none-unknown-elf",
    "-Wno-parentheses",
    "-Wno-attributes",
    "-Wno-macro-redefined",
    "-Wno-empty-body",
    "-DNDEBUG",
    "-ffunction-sections",  # with aiecc's --gc-sections: each core links only its own kernel
    "-fdata-sections",
    "-fstack-size-section",  # frame sizes in .stack_sizes; aiecc 1.1.4 checks none (module)
    "-ffp-contract=off",  # as the host build: the same bits on host and core
)
XCLBIN_NAME: Final = "final.xclbin"
INSTS_NAME: Final = "insts.bin"
AIECC_FLAGS: Final = manifest().aiecc_flags
"""The pinned aiecc's options (``toolchain.json``); they name ``XCLBIN_NAME`` and ``INSTS_NAME``."""
if (
    f"--xclbin-name={XCLBIN_NAME}" not in AIECC_FLAGS
    or f"--npu-insts-name={INSTS_NAME}" not in AIECC_FLAGS
):
    raise CodegenError("toolchain.json: the aiecc flags must name final.xclbin and insts.bin")
CLANGXX: Final = manifest().peano_tools[0]
"""Peano's C++ driver, in ``$PEANO_INSTALL_DIR/bin``."""
MLIR_NAME: Final = "aie.mlir"
AIECC_HELPERS: Final = manifest().aiecc_helpers
PYTHON: Final = "python3"
"""The interpreter on PATH that runs the driver when ``$POOT_AIECC_PYTHON`` is not set."""
AIECC_PYTHON: Final = manifest().aiecc_python
"""The variable naming aiecc's own interpreter (``toolchain.json`` ``aiecc.python``)."""
PROBE: Final = (
    "import importlib, sys\n"
    "for m in sys.argv[1:]:\n"
    "    try:\n"
    "        importlib.import_module(m)\n"
    "    except (Exception, SystemExit) as e:\n"
    "        why = ' '.join(f'{type(e).__name__}: {e}'.split())[:300]\n"
    "        print(f'{m}\\t{why}')\n"
)
"""Imports each module named on its command line and prints a line ``module<TAB>error`` for
each that does not import."""

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class LinkTools:
    """Where the tools are, and the environment they run in."""

    clangxx: Path
    aiecc: tuple[str, ...]  # the driver's argv before its options
    mlir_aie_dir: Path
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class LinkCommand:
    """One tool run: ``argv`` in ``cwd`` (relative to the work directory), making ``outputs``."""

    stage: str  # "peano" or "aiecc"
    region: int
    cwd: str
    argv: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RegionArtifact:
    """One linked region: its xclbin, its instruction stream and its identity (sha256 hex).
    ``artifact``: the region whose xclbin it is (its own, or the earlier region whose artifact
    it runs, ``reuse``: then ``xclbin`` is that region's and only ``insts`` is its own)."""

    region: int
    identity: str
    xclbin: bytes
    insts: bytes
    artifact: int

    def words(self) -> np.ndarray[Any, np.dtype[np.uint32]]:
        """The instruction stream as uint32 words (what the kernel call's count counts)."""
        return np.frombuffer(self.insts, dtype="<u4").astype(np.uint32)


def _env(env: Mapping[str, str] | None) -> dict[str, str]:
    return dict(os.environ if env is None else env)


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _peano(env: Mapping[str, str]) -> tuple[Path | None, str]:
    root = env.get("PEANO_INSTALL_DIR")
    if not root:
        return None, "PEANO_INSTALL_DIR is not set"
    clang = Path(root) / "bin" / CLANGXX
    return (clang, "") if _executable(clang) else (None, f"no executable {clang}")


def _which(tool: str, env: Mapping[str, str]) -> Path | None:
    found = shutil.which(tool, path=env.get("PATH", ""))
    return Path(found) if found else None


def aiecc_python(env: Mapping[str, str]) -> Path | None:
    """The interpreter aiecc runs in (see the module): ``$POOT_AIECC_PYTHON`` when set (None
    if it is not an executable), else ``python3`` on PATH (None if there is none)."""
    named = env.get(AIECC_PYTHON)
    if named:
        return Path(named) if _executable(Path(named)) else None
    return _which(PYTHON, env)


def driver(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The argv prefix of the pinned wheel's aiecc driver in ``env`` (see the module), or None
    when there is no interpreter to run it."""
    tc = manifest()
    if not env.get(AIECC_PYTHON):
        for name in tc.aiecc_drivers:
            found = _which(name, env)
            if found is not None:
                return (str(found),)
    python = aiecc_python(env)
    if python is None:
        return None
    return (str(python), "-c", f"from {tc.aiecc_module} import main; main()")


def _unimportable(env: Mapping[str, str]) -> tuple[Path | None, list[tuple[str, str]]]:
    """(aiecc's interpreter, each manifest module it cannot import with the reason)."""
    python = aiecc_python(env)
    modules = list(manifest().python_modules)
    if python is None:
        return None, [(m, "no interpreter") for m in modules]
    try:
        done = subprocess.run(
            [str(python), "-c", PROBE, *modules],
            capture_output=True,
            text=True,
            env=dict(env),
            check=False,
        )
    except OSError as err:
        return python, [(m, f"{python} does not run: {err}") for m in modules]
    if done.returncode != 0:
        why = " ".join((done.stderr or f"exit status {done.returncode}").split())[:300]
        return python, [(m, f"the import probe failed: {why}") for m in modules]
    failed = dict(line.split("\t", 1) for line in done.stdout.splitlines() if "\t" in line)
    return python, [(m, failed[m]) for m in modules if m in failed]  # in the manifest's order


def find_toolchain(env: Mapping[str, str] | None = None) -> LinkTools:
    """The toolchain in ``env`` (default: this process's environment), or
    ``ToolchainUnavailable`` naming every missing tool and module and why."""
    e = _env(env)
    missing: list[tuple[str, str]] = []
    clang, why = _peano(e)
    if clang is None:
        missing.append(("clang++", f"Peano clang++: {why}"))
    aiecc = driver(e)
    if aiecc is None:
        names = " or ".join([*manifest().aiecc_drivers, PYTHON])
        missing.append(("aiecc", f"aiecc: none of {names} on PATH, nor ${AIECC_PYTHON}"))
    for tool in AIECC_HELPERS:
        if _which(tool, e) is None:
            missing.append((tool, f"{tool}: not on PATH, which aiecc runs"))
    python, failed = _unimportable(e)
    if failed:
        names = ", ".join(m for m, _ in failed)
        what = f"mlir-aie {manifest().mlir_aie_version}'s aiecc"
        if python is None:
            where = (
                f"${AIECC_PYTHON} ({e[AIECC_PYTHON]}) is not an executable to import"
                if e.get(AIECC_PYTHON)
                else f"no {PYTHON} on PATH (nor ${AIECC_PYTHON}) to import"
            )
            missing.append(("python modules", f"{where} {names} ({what} needs them)"))
        else:
            reasons = "; ".join(f"{m}: {why}" for m, why in failed)
            missing.append(
                ("python modules", f"{python} cannot import {names} ({what} needs them): {reasons}")
            )
    if missing or clang is None or aiecc is None:  # a None tool is in missing already
        raise ToolchainUnavailable(
            ", ".join(t for t, _ in missing), "; ".join(d for _, d in missing)
        )
    root = e.get("MLIR_AIE_DIR") or str(Path(aiecc[0]).resolve().parent.parent)
    return LinkTools(clang, aiecc, Path(root), tuple(sorted(e.items())))


def use_mlir(region: int) -> str:
    """The MLIR file of region ``region`` when it runs an earlier region's artifact (written in
    that region's work directory)."""
    return f"use{region}.mlir"


def use_insts(region: int) -> str:
    """The instruction stream aiecc writes for region ``region`` running another's artifact."""
    return f"insts{region}.bin"


def insts_only_flags(region: int) -> tuple[str, ...]:
    """The aiecc options that make only region ``region``'s instruction stream: the pinned
    ones without the xclbin (``--aie-generate-xclbin``, ``--xclbin-name``), the stream named
    ``use_insts(region)``. As Xilinx/mlir-aie test/npu-xrt/add_one_two_txn/run.lit makes its
    second instruction stream (``aiecc.py ... --aie-generate-npu-insts --npu-insts-name=...``
    with no xclbin option) for a kernel of the first's xclbin."""
    out = []
    for f in AIECC_FLAGS:
        if f == "--aie-generate-xclbin" or f.startswith("--xclbin-name="):
            continue
        out.append(
            f"--npu-insts-name={use_insts(region)}" if f.startswith("--npu-insts-name=") else f
        )
    return tuple(out)


def link_commands(lowered: Lowered, toolchain: LinkTools) -> tuple[LinkCommand, ...]:
    """The tool runs that link ``lowered``, in order, as data (nothing runs). A region that
    runs an earlier region's artifact (``reuse``) takes one aiecc run in that region's work
    directory, which makes its instruction stream only (``insts_only_flags``): its xclbin, and
    the kernel object its module links, are the artifact's."""
    out: list[LinkCommand] = []
    for r in lowered.design.regions:
        if r.artifact is not None:
            argv = (*toolchain.aiecc, *insts_only_flags(r.index), use_mlir(r.index))
            out.append(
                LinkCommand("aiecc", r.index, f"region{r.artifact}", argv, (use_insts(r.index),))
            )
            continue
        cwd, obj = f"region{r.index}", region_object(r.index)
        source = f"region{r.index}.cc"
        peano = (
            str(toolchain.clangxx),
            *PEANO_FLAGS,
            f"-I{CSRC_DIR}",
            "-I",
            str(toolchain.mlir_aie_dir / "include"),
            "-c",
            source,
            "-o",
            obj,
        )
        out.append(LinkCommand("peano", r.index, cwd, peano, (obj,)))
        aiecc = (*toolchain.aiecc, *AIECC_FLAGS, MLIR_NAME)
        out.append(LinkCommand("aiecc", r.index, cwd, aiecc, (XCLBIN_NAME, INSTS_NAME)))
    return tuple(out)


def _version(argv: list[str], env: Mapping[str, str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False)
    except OSError:
        return "unavailable"
    text = (done.stdout or done.stderr).strip()
    return text if done.returncode == 0 and text else "unavailable"


def identity_fields(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What identifies the toolchain an artifact is built with: the part, each tool's version
    (``"unavailable"`` where it is missing) and the options."""
    e = _env(env)
    clang, _ = _peano(e)
    aiecc = driver(e)
    return {
        "part": PART,
        "arch": ARCH,
        "mlir_aie": manifest().mlir_aie_version,
        "peano": _version([str(clang), "--version"], e) if clang else "unavailable",
        "aiecc": _version([*aiecc, "--version"], e) if aiecc else "unavailable",
        "peano_flags": " ".join(PEANO_FLAGS),
        "aiecc_flags": " ".join(AIECC_FLAGS),
    }


def _encode(parts: list[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(8, "little") + p for p in parts)


def artifact_source(
    lowered: Lowered,
    region: int | None = None,
    *,
    env: Mapping[str, str] | None = None,
    fields: Mapping[str, str] | None = None,
) -> bytes:
    """Everything that determines the artifact of ``region`` (every region when None), as
    deterministic bytes. ``fields`` defaults to ``identity_fields(env)``."""
    f = identity_fields(env) if fields is None else fields
    parts = [b"poot xdna2 artifact v1"]
    parts += [f"{k}={f[k]}".encode() for k in sorted(f)]
    for header in sorted(CSRC_DIR.glob("*.h")):
        parts += [header.name.encode(), header.read_bytes()]
    for i in range(lowered.regions):
        if region is None or i == region:
            parts += [f"region {i}".encode(), lowered.mlir[i].encode()]
            parts.append(lowered.kernels[i].encode())
    return _encode(parts)


def artifact_identity(lowered: Lowered, region: int | None = None, **kw: Any) -> str:
    """The sha256 (hex) of ``artifact_source(lowered, region, ...)``."""
    return hashlib.sha256(artifact_source(lowered, region, **kw)).hexdigest()


def link(
    lowered: Lowered,
    work_dir: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> tuple[RegionArtifact, ...]:
    """Link every region of ``lowered``: its xclbin and instruction stream (see the module).
    Nothing is planned or designed here: the MLIR and kernel C are ``lowered``'s."""
    toolchain = find_toolchain(env)
    fields = identity_fields(env)
    commands = link_commands(lowered, toolchain)
    report = progress or (lambda stage, done, total: None)
    with tempfile.TemporaryDirectory(prefix="poot-xdna-") as scratch:
        root = Path(scratch) if work_dir is None else work_dir
        for r in lowered.design.regions:
            i = r.index
            d = root / f"region{r.runs}"
            d.mkdir(parents=True, exist_ok=True)
            if r.artifact is not None:  # its artifact's directory, object and xclbin
                (d / use_mlir(i)).write_text(lowered.mlir[i], encoding="utf-8")
                continue
            (d / f"region{i}.cc").write_text(lowered.kernels[i], encoding="utf-8")
            (d / MLIR_NAME).write_text(lowered.mlir[i], encoding="utf-8")
        for done, cmd in enumerate(commands):
            report(f"{cmd.stage} region {cmd.region}", done, len(commands))
            _run(cmd, root, dict(toolchain.env))
        report("done", len(commands), len(commands))
        return tuple(_collect(lowered, i, root, fields) for i in range(lowered.regions))


def _run(cmd: LinkCommand, root: Path, env: dict[str, str]) -> None:
    tool = "aiecc" if cmd.stage == "aiecc" else Path(cmd.argv[0]).name
    what = f"region {cmd.region} " + ("kernels" if cmd.stage == "peano" else "design")
    try:
        done = subprocess.run(
            list(cmd.argv), cwd=root / cmd.cwd, capture_output=True, text=True, env=env, check=False
        )
    except OSError as error:  # vanished or not executable since it was found
        raise ToolchainUnavailable(tool, str(error)) from error
    log = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise CompileFailed(tool, log or f"exit status {done.returncode}", what)
    for name in cmd.outputs:
        if not (root / cmd.cwd / name).is_file():
            raise CompileFailed(tool, f"{name} was not written\n{log}".strip(), what)


def _collect(
    lowered: Lowered, region: int, root: Path, fields: Mapping[str, str]
) -> RegionArtifact:
    runs = lowered.design.regions[region].runs
    d = root / f"region{runs}"
    insts = (d / (INSTS_NAME if runs == region else use_insts(region))).read_bytes()
    if len(insts) % 4 or not insts:
        raise CompileFailed(
            "aiecc",
            f"{INSTS_NAME} has {len(insts)} bytes: not whole 32-bit words",
            f"region {region}",
        )
    identity = hashlib.sha256(artifact_source(lowered, region, fields=fields)).hexdigest()
    return RegionArtifact(region, identity, (d / XCLBIN_NAME).read_bytes(), insts, runs)
