"""Regions reused across identical layers, on the codegen side (``poot_codegen.xdna.reuse``): a
use's module is its artifact's device body with its own runtime sequence, the link step builds
one xclbin per artifact and one instruction stream per region, and the host executor runs a
use with its artifact's kernels over its own slots."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from poot_codegen.xdna import Lowered, lower_program
from poot_codegen.xdna.execute import load_region_libraries, run_design
from poot_codegen.xdna.link import (
    AIECC_FLAGS,
    LinkTools,
    insts_only_flags,
    link_commands,
    use_insts,
    use_mlir,
)
from poot_engine.blob_cache import SUFFIX, BlobCache
from poot_ir import evaluate
from poot_planner import plan
from poot_planner.xdna2.probes import neg_chain

SEQUENCE = re.compile(r"^\s*aie\.runtime_sequence.*?^    \}\n", re.S | re.M)


def _device_body(mlir: str) -> str:
    """A module without its comments and its runtime sequence: what the xclbin is made of."""
    body = SEQUENCE.sub("", mlir)
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("//"))


def _lowered() -> Lowered:
    return lower_program(plan(neg_chain(3 * 32 + 1), "xdna2").check())


def test_a_use_is_its_artifacts_device_body_with_its_own_runtime_sequence() -> None:
    low = _lowered()
    assert [r.artifact for r in low.design.regions] == [None, 0, 0, None]
    assert low.artifacts == (0, 3)
    bodies = [_device_body(m) for m in low.mlir]
    assert bodies[0] == bodies[1] == bodies[2] != bodies[3]
    sequences = [SEQUENCE.search(m) for m in low.mlir[:3]]
    assert all(s is not None for s in sequences)
    texts = [s.group(0) for s in sequences if s is not None]
    assert len(set(texts)) == 3  # each its own offsets (and arenas)
    assert "runs region 0's artifact" in low.mlir[1] and 'link_with = "region0.o"' in low.mlir[2]
    assert low.kernels[1] == low.kernels[2] == low.kernels[0]


def test_the_link_builds_one_xclbin_per_artifact_and_an_instruction_stream_per_region() -> None:
    tc = LinkTools(Path("/peano/bin/clang++"), ("/aie/bin/aiecc.py",), Path("/aie"))
    cmds = link_commands(_lowered(), tc)
    assert [(c.stage, c.region, c.cwd) for c in cmds] == [
        ("peano", 0, "region0"),
        ("aiecc", 0, "region0"),
        ("aiecc", 1, "region0"),
        ("aiecc", 2, "region0"),
        ("peano", 3, "region3"),
        ("aiecc", 3, "region3"),
    ]
    use = cmds[2]
    assert use.argv == ("/aie/bin/aiecc.py", *insts_only_flags(1), use_mlir(1))
    assert use.outputs == (use_insts(1),)
    assert "--aie-generate-xclbin" in AIECC_FLAGS
    assert "--aie-generate-xclbin" not in use.argv
    assert not any(a.startswith("--xclbin-name") for a in use.argv)
    assert "--aie-generate-npu-insts" in use.argv and "--npu-insts-name=insts1.bin" in use.argv


def test_the_host_executor_runs_each_use_with_its_artifacts_kernels(tmp_path: Path) -> None:
    program = neg_chain(3 * 32 + 1)
    p = plan(program, "xdna2").check()
    low = lower_program(p)
    libraries = load_region_libraries(p, BlobCache(tmp_path))
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2  # one library per distinct artifact
    x = np.linspace(-3.0, 3.0, 16, dtype=np.float32).reshape(2, 8)
    got = run_design(low.design, libraries, {"x": x})["y"]
    assert got.tobytes() == evaluate(program, {"x": x})["y"].tobytes()
