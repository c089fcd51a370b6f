"""The XDNA2 flag word reaches the host: each region's cores chain their counts of operands
outside a domain (``poot_codegen.xdna.design.FlagPath``) and the last one drains the sum to the
flags arena, at ``4 * region``. A kernel computing ``exp(100)`` inside the second region of a
program is refused (``DomainFlagged``) on the host stand-in and through the fake XRT (where the
word only reaches the host by the design's drain and the flags arena's sync), with the word at
its place in the flags arena; the same program inside the domain runs and matches the oracle.

The program is 32 negations (the first region: 32 cores, the chain snaking through all 8
columns) then ``exp(x + 99)`` (the second region), so ``x = 1`` reaches ``exp(100)``, whose
exact value (inf in F32, ``math.exp(100)`` ~ 2.7e43) is outside exp's domain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import fake_pyxrt
import numpy as np
import pytest
from poot_codegen.xdna import ArenaRole, design_program
from poot_codegen.xdna.designer import place
from poot_engine import Engine
from poot_ir import Builder, DomainFlagged, DType, Program, evaluate
from poot_npu.xdna import XdnaDevice
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import plan

F32 = DType.F32
NEGS = 32  # fills the first region's 32 compute tiles


def _program() -> Program:
    b = Builder("exp_in_region_1")
    v = b.slot("x", F32, (4, 8))
    for _ in range(NEGS):
        v = b.neg(v)
    b.output("y", b.exp(b.add(v, 99.0)))
    return b.build()


def _word(flags: np.ndarray, region: int) -> int:
    return int(flags[4 * region : 4 * region + 4].view("<u4")[0])


def _check_refused(engine: Engine, flags: Callable[[], np.ndarray]) -> None:
    program = _program()
    pl = plan(program, "xdna2").check()
    design = design_program(pl)
    assert len(design.regions) == 2 and len(design.regions[0].cores) == NEGS
    exp_eqn = len(program.eqns) - 1
    assert exp_eqn in design.regions[1].eqns
    arena = design.layout.arena(ArenaRole.FLAGS)
    assert arena is not None and arena.index == len(design.layout.arenas) - 1
    for r in design.regions:  # each region's drain writes its own word, and nothing else
        t = r.flag.transfer
        assert (t.arena, t.offset, t.nbytes) == (arena.index, 4 * r.index, 4)
    entry = engine.add_entry(program)

    x = np.full((4, 8), -20.0, np.float32)  # 32 negations keep x: exp(79), inside the domain
    got = engine.step(entry, {"x": x})["y"]
    want = evaluate(program, {"x": x})["y"]
    assert np.allclose(got, want, rtol=1e-5) and np.isfinite(got).all()
    assert _word(flags(), 0) == 0 and _word(flags(), 1) == 0

    bad = x.copy()
    bad[1, 2] = 1.0  # exp(1 + 99) = exp(100): outside exp's domain, inf in F32
    assert math.exp(100.0) > float(np.finfo(np.float32).max)
    with pytest.raises(DomainFlagged) as err:
        engine.step(entry, {"x": bad})
    assert err.value.region == 1 and exp_eqn in err.value.eqns and err.value.count >= 1
    words = flags()
    assert _word(words, 0) == 0  # the negations flag nothing
    assert _word(words, 1) == err.value.count  # the second region's word, at 4 * 1
    assert not words[8:].any()  # nothing past the two words


def test_the_snake_chain_steps_between_memory_neighbours() -> None:
    design = design_program(plan(_program(), "xdna2").check())
    first = design.regions[0]
    at = {c.tile: (c.column, c.row) for c in first.cores}
    assert sorted(first.flag.order) == sorted(at)
    for a, b in zip(first.flag.order, first.flag.order[1:], strict=False):
        (ca, ra), (cb, rb) = at[a], at[b]
        assert abs(ca - cb) + abs(ra - rb) == 1
    # the drain leaves from the last core's column, on a shim channel the data leaves free
    last = at[first.flag.order[-1]]
    assert last == place(first.flag.order[-1])
    assert first.flag.transfer.shim == last[0]


def test_exp_100_is_refused_on_xdna_host(tmp_path: Path) -> None:
    device = XdnaHostDevice(tmp_path / "kernels")
    with Engine(device, tmp_path / "blobs") as engine:

        def flags() -> np.ndarray:
            (artifact,) = device.loaded()
            arena = device.design(artifact).layout.arena(ArenaRole.FLAGS)
            assert arena is not None
            return device.arenas(artifact)[arena.index]

        _check_refused(engine, flags)


def test_exp_100_is_refused_through_the_fake_xrt(fake: ModuleType, tmp_path: Path) -> None:
    program = _program()
    fake_pyxrt.install(plan(program, "xdna2").check(), tmp_path / "kernels")
    toolchain = fake_pyxrt.fake_toolchain(tmp_path / "tools")
    layout = design_program(plan(program, "xdna2").check()).layout
    arena = layout.arena(ArenaRole.FLAGS)
    assert arena is not None
    group = fake_pyxrt.GROUP_BASE + 3 + arena.index

    def flags() -> np.ndarray:
        (bo,) = [
            b for b in fake_pyxrt.STATE.bos if b.group == group and b.flags.name == "host_only"
        ]
        return bo.host.copy()  # what the host sees after the device sync

    with Engine(XdnaDevice(toolchain), tmp_path / "blobs") as engine:
        _check_refused(engine, flags)
